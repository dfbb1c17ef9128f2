"""Write docs/performance.md (and its plot) from the peer comparisons in benchmarks/results/.

A peer comparison is a results record (``benchmarks/_results.py``) whose figures read::

    {"peer_family": "Wapiti", "peer": "Wapiti 1.5.0", "task": "NETtalk, OWL-QN ...",
     "rows": [{"measure": "...", "peer": "...", "crfkit": "...", "ratio": "...", "better": "lower"}, ...]}

The page has one section per peer family (python-crfsuite / CRFsuite, Wapiti, CRF++,
sklearn-crfsuite), one table per task, one row per measurement; then the records that carry a ready
table (figures with ``section``, ``task``, ``columns`` and ``rows``: the before / after runs of
``micro/roofline.py`` and ``micro/optimizer_passes.py``, a column per source tree), the latest of
each (section, task).  When several records measure the
same (family, task, measurement), the latest (by date, then by its place in the files) is shown: a
run measured again replaces the older one.  Every row names its run, and every run is listed with
its command, date and commit.  The ratios of the rows marked ``"better": "lower"`` (time and memory,
crfkit / peer) are drawn into ``docs/figures/performance_ratios.png`` when matplotlib is installed
(else the existing image is kept).

    python benchmarks/render_performance.py [--results DIR] [--out docs/performance.md] [--no-plot]
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _results  # the results schema (standard library only)

FAMILIES = ("python-crfsuite / CRFsuite", "Wapiti", "CRF++", "sklearn-crfsuite")
PLOT = os.path.join("figures", "performance_ratios.png")


def comparisons(results_dir: str) -> list[dict]:
    """Every peer-comparison record of ``results_dir``, in (date, file, line) order."""
    recs = []
    for path in sorted(glob.glob(os.path.join(results_dir, "*.jsonl"))):
        for i, r in enumerate(_results.load(path)):
            f = r.get("figures")
            if isinstance(f, dict) and f.get("peer_family") and isinstance(f.get("rows"), list):
                recs.append((r.get("date") or "", os.path.basename(path), i, r))
    recs.sort(key=lambda t: t[:3])
    return [t[3] for t in recs]


def tables(results_dir: str) -> list[dict]:
    """The latest record of each (section, task) among the records of ``results_dir`` whose figures
    carry a ready table: ``section``, ``task``, ``columns`` and ``rows`` (the micro benchmarks'
    before / after runs, e.g. ``micro/roofline.py``), in the order of those latest records."""
    recs = []
    for path in sorted(glob.glob(os.path.join(results_dir, "*.jsonl"))):
        for i, r in enumerate(_results.load(path)):
            f = r.get("figures")
            if (
                isinstance(f, dict)
                and not f.get("peer_family")
                and f.get("section")
                and f.get("task")
                and isinstance(f.get("columns"), list)
                and isinstance(f.get("rows"), list)
            ):
                recs.append((r.get("date") or "", os.path.basename(path), i, r))
    recs.sort(key=lambda t: t[:3])
    latest: dict = {}
    for *_, r in recs:
        key = (r["figures"]["section"], r["figures"]["task"])
        latest.pop(key, None)
        latest[key] = r
    return list(latest.values())


def render_tables(recs: list[dict]) -> list[str]:
    """The page's sections of :func:`tables`' records: per section an introduction, per task its
    table (a column per source tree, named with its commit where recorded) and its run."""
    out: list[str] = []
    sections: dict = {}
    for r in recs:
        sections.setdefault(r["figures"]["section"], []).append(r)
    for section, rs in sections.items():
        out += [
            f"## {section}",
            "",
            "crfkit's own kernels and optimizers, one column per source tree measured in the same "
            "run (the trees take turns, so they see the same load): ratios between the columns mean "
            "more than the absolute times.",
            "",
        ]
        for r in rs:
            f = r["figures"]
            commits = {t.get("label"): t.get("commit") for t in f.get("trees") or []}
            head = [f"{c} ({commits[c][:7]})" if commits.get(c) else str(c) for c in f["columns"]]
            task = f["task"]
            out += [
                f"### {task[:1].upper() + task[1:]}",
                "",
                "| " + " | ".join(cell(c) for c in head) + " |",
                "|" + "---|" * len(head),
            ]
            for row in f["rows"]:
                out.append("| " + " | ".join(cell(c) for c in row) + " |")
            commit = f", commit {r['commit']}" if r.get("commit") else ""
            notes = f"; {r['notes'].rstrip('.')}" if r.get("notes") else ""
            out += [
                "",
                f"Run: {r.get('date') or 'date not recorded'}{commit}: "
                f"`{r.get('command') or 'command not recorded'}`{notes}.",
                "",
            ]
    return out


def latest_rows(recs: list[dict]) -> dict:
    """family -> task -> list of (row, record), the latest record of each measurement, in first-seen
    order."""
    out: dict = {}
    for r in recs:
        f = r["figures"]
        task = out.setdefault(f["peer_family"], {}).setdefault(f["task"], {})
        for row in f["rows"]:
            task.pop(
                row["measure"], None
            )  # a later run of the measurement replaces the earlier one
            task[row["measure"]] = (row, r)
    return {
        fam: {t: list(rows.values()) for t, rows in tasks.items()} for fam, tasks in out.items()
    }


def cell(x) -> str:
    return str(x if x not in (None, "") else "").replace("|", "\\|").replace("\n", " ")


def ratios(text: str) -> list[float]:
    """The ratios written in a row's ratio cell (numbers followed by ``x``, outside parentheses)."""
    text = re.sub(r"\([^)]*\)", "", text or "")
    vals = [float(v) for v in re.findall(r"(\d+(?:\.\d+)?)x", text)]
    if not vals and re.fullmatch(r"\s*\d+(?:\.\d+)?\s*", text):
        vals = [float(text)]
    return vals


def short(text: str, words: int) -> str:
    """A plot label: ``text`` without parentheses, its first comma-separated parts / words."""
    text = re.sub(r"\s*\([^)]*\)", "", text)
    if words <= 2:
        return ",".join(text.split(",")[:words]).strip()
    w = text.split()
    return " ".join(w[:words]) + (" ..." if len(w) > words else "")


def plot(table: dict, path: str) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        return False
    labels, values = [], []
    for fam in FAMILIES:
        for task, rows in table.get(fam, {}).items():
            for row, _ in rows:
                v = ratios(row.get("ratio", ""))
                if row.get("better") == "lower" and v:
                    label = f"{fam.split(' / ')[0]}: {short(task, 2)}: {short(row['measure'], 9)}"
                    labels.append(label if len(label) <= 90 else label[:87] + "...")
                    values.append(v)
    if not labels:
        return False
    fig, ax = plt.subplots(figsize=(10, 0.3 * len(labels) + 1.2))
    for i, v in enumerate(values):
        ax.plot(v, [i] * len(v), "o", color="tab:blue")
    ax.axvline(1.0, color="grey", lw=1)
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ticks = [0.125, 0.25, 0.5, 1, 2, 4]
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_xlim(0.1, 5)
    ax.set_xlabel(
        "crfkit / peer, time and memory (1 = the peer; left of it crfkit is faster or smaller)"
    )
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return True


def render(table: dict, have_plot: bool, extra: list[dict] | None = None) -> str:
    head = (
        "<!-- generated by benchmarks/render_performance.py from benchmarks/results/: edit the results, "
        "not this page -->"
    )
    intro = (
        "crfkit against the CRF trainers its users know: python-crfsuite / CRFsuite, Wapiti, CRF++ and "
        "sklearn-crfsuite. Every figure below comes from a record in `benchmarks/results/` and names the "
        "run that produced it (its command, date and commit where recorded). A measurement run again "
        "replaces the older figure. Ratios are crfkit's over the peer's unless a table says otherwise."
    )
    machine = (
        "The machine of these runs is a shared 2-core VM: other jobs ran beside some of them, so the "
        "ratios within a run mean more than the absolute times. Regenerate this page with "
        "`python benchmarks/render_performance.py`; the scripts are listed in `benchmarks/README.md`."
    )
    out = ["# Performance", "", head, "", intro, "", machine, ""]
    if have_plot:
        out += [
            f"![crfkit's time and memory over each peer's (log scale; 1 = the peer)]({PLOT})",
            "",
        ]
    runs: list[dict] = []

    def run_no(r: dict) -> int:
        for i, x in enumerate(runs):
            if x is r:
                return i + 1
        runs.append(r)
        return len(runs)

    for fam in FAMILIES:
        tasks = table.get(fam)
        if not tasks:
            continue
        out += [f"## {fam}", ""]
        first = len(runs)
        for task, rows in tasks.items():
            peer = rows[0][1]["figures"].get("peer") or fam
            out += [
                f"### {task[:1].upper() + task[1:]}",
                "",
                f"| measurement | {cell(peer)} | crfkit | ratio | run |",
                "|---|---|---|---|---|",
            ]
            for row, r in rows:
                out.append(
                    f"| {cell(row['measure'])} | {cell(row.get('peer'))} | {cell(row.get('crfkit'))} | "
                    f"{cell(row.get('ratio'))} | {run_no(r)} |"
                )
            out.append("")
        out += [f"Runs ({fam}):", ""]
        for i, r in enumerate(runs[first:], first + 1):
            commit = f", commit {r['commit']}" if r.get("commit") else ""
            notes = f"; {r['notes'].rstrip('.')}" if r.get("notes") else ""
            bench = r.get("benchmark")
            bench = f" (`{bench}`)" if bench and bench not in (r.get("command") or "") else ""
            date, command = (
                r.get("date") or "date not recorded",
                r.get("command") or "command not recorded",
            )
            out.append(f"{i}. {date}{commit}: `{command}`{bench}{notes}.")
        out.append("")
    out += render_tables(extra or [])
    return "\n".join(out).rstrip() + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--results",
        default=_results.RESULTS,
        help="the results directory (default benchmarks/results)",
    )
    ap.add_argument("--out", default=os.path.join(_results.ROOT, "docs", "performance.md"))
    ap.add_argument("--no-plot", action="store_true", help="keep the existing plot")
    args = ap.parse_args(argv)
    table = latest_rows(comparisons(args.results))
    png = os.path.join(os.path.dirname(os.path.abspath(args.out)), PLOT)
    have_plot = (not args.no_plot and plot(table, png)) or os.path.exists(png)
    text = render(table, have_plot, tables(args.results))
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, args.out)
    print(
        f"wrote {args.out} ({sum(len(t) for t in table.values())} tables)"
        + (f" and {png}" if have_plot else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
