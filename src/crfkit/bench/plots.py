"""Figures and summaries drawn from a directory of traces (the paper's Figures 1 and 2).

Only the trace files (``*.jsonl``, one JSON record per epoch/iteration, as
``crfkit.train`` writes them) and f* are read: f* from ``fstar.json`` in the
directory (written by ``crfkit bench run``), or given, or, failing both,
estimated as the lowest objective in the traces (said so on the figure).

Runs are grouped by the name in their file name without the step size
(``sg__eta=0.01.jsonl`` and ``sg__eta=0.1.jsonl`` are group ``sg``); within a
group the lowest final objective is the best run (solid line), the next the
second-best (dashed), the others are not drawn.  That is the rule the runner
uses to pick step sizes, so the figures need nothing but the traces.

Wall time: a trace's ``wall_s`` also counts the test-set scoring of earlier
records (``wall_s_with_dev - wall_s`` each) and, for stochastic methods, the
objective evaluations done only to report ``f`` (``monitor_s``, where the
optimizer gives it); :func:`optimizer_seconds` takes both out, so the time
axis is the optimizer's own time.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import CrfkitError, DataError
from ..io.atomic import atomic_file

__all__ = [
    "TraceRun",
    "read_trace",
    "load_runs",
    "load_fstar",
    "optimizer_seconds",
    "test_errors",
    "plot_figures",
    "summary",
    "format_summary",
    "FIGURES",
]

FIGURES = (
    "suboptimality_passes.png",
    "suboptimality_seconds.png",
    "test_error.png",
    "figure.png",
    "suboptimality_updates.png",
)

# one colour and one marker per method, the same in every figure (L-BFGS and SDCA were black and
# a near-black dark green before: told apart now by hue and marker)
_METHOD_STYLES = {
    "lbfgs": ("#000000", "o"),
    "owlqn": ("#7f7f7f", "s"),
    "sag": ("#1f77b4", "^"),
    "sag-nus": ("#17becf", "v"),
    "sag-nus*": ("#393b79", ">"),
    "saga": ("#9467bd", "D"),
    "saga-nus": ("#e377c2", "d"),
    "sg": ("#8c564b", "P"),
    "asg": ("#2ca02c", "X"),
    "adagrad": ("#ff7f0e", "*"),
    "pegasos": ("#bcbd22", "h"),
    "sgd-l1": ("#b8860b", "H"),
    "sdca": ("#d62728", "p"),
    "oeg": ("#006400", "8"),
    "smd": ("#4b0082", "<"),
    "hybrid": ("#808000", "x"),
}
_ORDER = tuple(_METHOD_STYLES)
_PALETTE = tuple(c for c, _ in _METHOD_STYLES.values())
_MARKERS = ("o", "s", "^", "v", "D", "P", "X", "*", "h", "p")
# runs of one optimizer with different settings (sdca's sampling) get these line styles in turn
_VARIANT_STYLES = ("-", "-.", (0, (5, 1)), (0, (1, 1)))


@dataclass
class TraceRun:
    stem: str  # file name without .jsonl
    name: str  # optimizer name (from the file name: "sag-nus*", "sg")
    params: dict  # from the file name ("eta": "0.01")
    records: list = field(default_factory=list)
    role: str = "only"

    @property
    def group(self) -> str:
        rest = {k: v for k, v in self.params.items() if k != "eta"}
        return self.name + (
            "" if not rest else " (" + ",".join(f"{k}={v}" for k, v in sorted(rest.items())) + ")"
        )

    @property
    def label(self) -> str:
        if not self.params:
            return self.name
        return self.name + " (" + ",".join(f"{k}={v}" for k, v in sorted(self.params.items())) + ")"

    @property
    def final_objective(self) -> float:
        f = self.records[-1].get("objective") if self.records else None
        return float(f) if isinstance(f, (int, float)) and math.isfinite(f) else math.inf

    def column(self, key: str) -> list:
        return [r.get(key) for r in self.records]


def read_trace(path) -> list[dict]:
    """The records of a trace file; a line that is not a JSON object is a :class:`DataError`
    (file:line)."""
    path = Path(path)
    out = []
    try:
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except ValueError as e:
                    raise DataError(f"not a JSON record ({e.msg})", str(path), lineno) from None
                if not isinstance(rec, dict):
                    raise DataError("not a JSON object", str(path), lineno)
                for key in ("effective_passes", "objective"):
                    if key not in rec:
                        raise DataError(f"trace record without {key!r}", str(path), lineno)
                out.append(rec)
    except UnicodeDecodeError:
        raise DataError("invalid UTF-8", str(path)) from None
    return out


def parse_stem(stem: str) -> tuple[str, dict]:
    name, _, rest = stem.partition("__")
    name = name.replace("_star", "*")
    params = {}
    for part in filter(None, rest.split(",")):
        k, _, v = part.partition("=")
        params[k] = v
    return name, params


def load_runs(directory) -> list[TraceRun]:
    """Every ``*.jsonl`` trace of ``directory`` with its role in its group (empty traces
    skipped)."""
    d = Path(directory)
    if not d.is_dir():
        raise CrfkitError(f"{d}: no such directory")
    runs = []
    for p in sorted(d.glob("*.jsonl")):
        recs = read_trace(p)
        if not recs:
            continue
        name, params = parse_stem(p.stem)
        runs.append(TraceRun(p.stem, name, params, recs))
    if not runs:
        raise CrfkitError(f"{d}: no traces (*.jsonl with records) to read")
    groups: dict[str, list[TraceRun]] = {}
    for r in runs:
        groups.setdefault(r.group, []).append(r)
    for g in groups.values():
        order = sorted(g, key=lambda r: (not math.isfinite(r.final_objective), r.final_objective))
        if len(order) == 1:
            order[0].role = "only"
        else:
            for k, r in enumerate(order):
                r.role = "best" if k == 0 else "second" if k == 1 else "tried"
    return runs


def load_fstar(directory) -> dict | None:
    """``fstar.json`` of a run directory, or None."""
    p = Path(directory) / "fstar.json"
    if not p.is_file():
        return None
    try:
        with open(p, encoding="utf-8") as f:
            e = json.load(f)
    except ValueError:
        raise DataError("not a JSON f* entry", str(p)) from None
    if not isinstance(e, dict) or not isinstance(e.get("fstar"), (int, float)):
        raise DataError("no number under 'fstar'", str(p))
    return e


def optimizer_seconds(records: Sequence[dict]) -> list[float]:
    """Per record, ``wall_s`` less the test scoring done at the earlier records
    (``wall_s_with_dev - wall_s`` each) and less the monitoring an optimizer
    reports (``monitor_s``: seconds spent so far, this record's epoch
    included, evaluating the objective only to report it, as a stochastic
    method does)."""
    out = []
    taken = 0.0
    monitored = 0.0
    for r in records:
        w = float(r.get("wall_s", float("nan")))
        mon = r.get("monitor_s")
        if isinstance(mon, (int, float)) and math.isfinite(mon):
            monitored = float(mon)
        out.append(w - taken - monitored)
        if "wall_s_with_dev" in r:
            taken += float(r["wall_s_with_dev"]) - w
    return out


def test_errors(records: Sequence[dict]) -> list[float | None]:
    """Per record, the test (dev) token error in % (None where the record has no score)."""
    return [
        100.0 - float(r["dev_accuracy"]) if r.get("dev_accuracy") is not None else None
        for r in records
    ]


def _color(name: str) -> str:
    if name in _METHOD_STYLES:
        return _METHOD_STYLES[name][0]
    import zlib

    return f"C{zlib.crc32(name.encode()) % 10}"


def marker(name: str) -> str:
    """The marker of method ``name`` in every figure (its own for each known method)."""
    if name in _METHOD_STYLES:
        return _METHOD_STYLES[name][1]
    import zlib

    return _MARKERS[zlib.crc32(name.encode()) % len(_MARKERS)]


def _marks(r: TraceRun, n: int) -> dict:
    """The marker keywords of a run's line of ``n`` points: about 8 markers along it."""
    return {"marker": marker(r.name), "markevery": max(1, n // 8), "markersize": 5}


_STYLES = {"only": "-", "best": "-", "second": "--", "tried": ":"}


def line_style(r: TraceRun) -> tuple[str, str, str]:
    """(legend label, line style, colour) of a run in the figures: the colour is the
    optimizer's; a run with settings other than the step size (``sag-nus* (ls_skip=False)``)
    is drawn dash-dotted so that it is told apart from the optimizer's default run."""
    style = _STYLES[r.role]
    if r.role == "only" and r.group != r.name:
        style = "-."
        if r.name in ("sdca", "oeg"):
            # the dual methods' variants (sampling=gap / uniform) are the comparison itself: solid
            # for the paper's gap sampling, others dash-dotted
            style = "-" if r.params.get("sampling", "gap") == "gap" and len(r.params) <= 1 else "-."
    return r.label, style, _color(r.name)


def _n_train(directory) -> int | None:
    """n from the run directory's bench.json (None without one)."""
    p = Path(directory) / "bench.json"
    try:
        with open(p, encoding="utf-8") as f:
            n = json.load(f).get("n_train")
        return int(n) if n else None
    except (OSError, ValueError):
        return None


def _resolve_fstar(runs, directory, fstar) -> tuple[float, dict | None, bool]:
    """(f*, entry, estimated)."""
    if fstar is not None:
        if isinstance(fstar, dict):
            return float(fstar["fstar"]), fstar, False
        return float(fstar), None, False
    e = load_fstar(directory)
    if e is not None:
        return float(e["fstar"]), e, False
    finite = [
        f
        for r in runs
        for f in r.column("objective")
        if isinstance(f, (int, float)) and math.isfinite(f)
    ]
    if not finite:
        raise CrfkitError(f"{directory}: no finite objective in the traces and no f* given")
    return min(finite), None, True


def _save(fig, path: Path) -> None:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    with atomic_file(path, fsync=False) as f:
        f.write(buf.getvalue())


def plot_figures(
    directory, *, out=None, fstar=None, title: str | None = None, show_all: bool = False
) -> list[Path]:
    """Draw :data:`FIGURES` from the traces of ``directory`` into ``out``
    (default: ``directory``): f - f* against effective passes and against
    seconds (log y), test error against effective passes, and the three side by
    side.  ``fstar``: a number or an f* entry (default: ``fstar.json``, else the
    lowest objective seen).  ``show_all`` also draws the ``tried`` step sizes
    (dotted).  Returns the paths written."""
    try:
        # the Agg canvas directly: no pyplot, no global backend switch
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise CrfkitError(
            "plots need matplotlib: pip install 'crfkit[bench]' (or matplotlib)"
        ) from None
    runs = load_runs(directory)
    fs, entry, estimated = _resolve_fstar(runs, directory, fstar)
    out = Path(out) if out is not None else Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    if title is None:
        title = (entry or {}).get("data") or Path(directory).resolve().name
    note = "f* estimated: lowest objective in the traces" if estimated else f"f* = {fs:.10g}"
    drawn = [r for r in runs if show_all or r.role != "tried"]
    drawn.sort(
        key=lambda r: (
            _ORDER.index(r.name) if r.name in _ORDER else len(_ORDER),
            r.name,
            r.role != "best",
        )
    )

    n_train = _n_train(directory)

    def xs_of(r, xkey):
        if xkey == "seconds":
            return optimizer_seconds(r.records)
        if xkey == "updates":
            # parameter updates / n (the trace's 'steps'); runs without it (L-BFGS) are not drawn
            if n_train is None:
                return [None] * len(r.records)
            return [None if st is None else st / n_train for st in r.column("steps")]
        return r.column("effective_passes")

    def suboptimality(ax, xkey):
        for r in drawn:
            xs = xs_of(r, xkey)
            pts = [
                (x, f - fs)
                for x, f in zip(xs, r.column("objective"))
                if isinstance(f, (int, float)) and math.isfinite(f) and f - fs > 0 and x is not None
            ]
            if not pts:
                continue
            label, style, color = line_style(r)
            ax.plot(
                [p[0] for p in pts],
                [p[1] for p in pts],
                style,
                color=color,
                label=label,
                linewidth=1.4,
                **_marks(r, len(pts)),
            )
            # the dual methods' certificate: the duality gap P(w) - D(mu) >= f(w) - f*, thin and
            # dotted
            gaps = [
                (x, g)
                for x, g in zip(xs, r.column("duality_gap"))
                if isinstance(g, (int, float)) and math.isfinite(g) and g > 0 and x is not None
            ]
            if gaps:
                ax.plot(
                    [p[0] for p in gaps],
                    [p[1] for p in gaps],
                    ":",
                    color=color,
                    label=label + " duality gap",
                    linewidth=1.0,
                )
        ax.set_yscale("log")
        ax.set_xlabel(
            {
                "seconds": "seconds (optimizer; test scoring and monitoring excluded)",
                "updates": "parameter updates / n",
            }.get(xkey, "effective passes (oracle calls / n)")
        )
        ax.set_ylabel("f - f*")
        ax.grid(True, which="major", alpha=0.3)

    def test_error(ax):
        for r in drawn:
            pts = [
                (x, e)
                for x, e in zip(r.column("effective_passes"), test_errors(r.records))
                if e is not None
            ]
            if not pts:
                continue
            label, style, color = line_style(r)
            ax.plot(
                [p[0] for p in pts],
                [p[1] for p in pts],
                style,
                color=color,
                label=label,
                linewidth=1.4,
                **_marks(r, len(pts)),
            )
        if entry and entry.get("test_error") is not None:
            ax.axhline(
                float(entry["test_error"]),
                color="#999999",
                linestyle=":",
                linewidth=1,
                label="at w*",
            )
        ax.set_xlabel("effective passes")
        ax.set_ylabel("test error (% of tokens)")
        ax.grid(True, alpha=0.3)

    written = []
    panels = (
        (
            "suboptimality_passes.png",
            lambda ax: suboptimality(ax, "passes"),
            "objective minus optimum",
        ),
        (
            "suboptimality_seconds.png",
            lambda ax: suboptimality(ax, "seconds"),
            "objective minus optimum",
        ),
        ("test_error.png", test_error, "test error"),
    )
    for fname, draw, what in panels:
        fig = Figure(figsize=(6.4, 4.6))
        FigureCanvasAgg(fig)
        ax = fig.add_subplot(1, 1, 1)
        draw(ax)
        ax.set_title(f"{title}: {what}\n{note}", fontsize=10)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
        _save(fig, out / fname)
        written.append(out / fname)
    fig = Figure(figsize=(18, 5))
    FigureCanvasAgg(fig)
    legend = {}
    for k, (_, draw, what) in enumerate(panels):
        ax = fig.add_subplot(1, 3, k + 1)
        draw(ax)
        ax.set_title(what, fontsize=10)
        for h, lab in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(lab, h)
    if legend:
        # one legend for the three panels, outside them, so that it hides no curve
        fig.legend(
            list(legend.values()),
            list(legend.keys()),
            loc="center left",
            bbox_to_anchor=(0.91, 0.5),
            fontsize=8,
        )
    fig.suptitle(f"{title} ({note})", fontsize=11)
    _save(fig, out / "figure.png")
    written.append(out / "figure.png")
    # the SAG paper's runs and Le Priol et al.'s Figure 1 (right): against parameter updates / n
    fig = Figure(figsize=(6.4, 4.6))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    suboptimality(ax, "updates")
    ax.set_title(f"{title}: objective minus optimum against parameter updates\n{note}", fontsize=10)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    _save(fig, out / "suboptimality_updates.png")
    written.append(out / "suboptimality_updates.png")
    return written


# --------------------------------------------------------------------------- summary


def _at(records, mark: float):
    """The first record at or past ``mark`` effective passes (None when the run stopped before)."""
    for r in records:
        if float(r["effective_passes"]) >= mark - 1e-9:
            return r
    return None


def summary(
    directory,
    *,
    at: Sequence[float] = (10, 20, 30),
    rel_tol: float = 1e-4,
    fstar=None,
    show_all: bool = False,
) -> dict:
    """Per drawn run (best/only/second): f - f* and test error at the pass marks
    ``at``, and the first effective pass count and optimizer time at which
    ``f - f* <= rel_tol * |f*|``."""
    runs = load_runs(directory)
    fs, entry, estimated = _resolve_fstar(runs, directory, fstar)
    n_train = _n_train(directory)
    rows = []
    for r in runs:
        if r.role == "tried" and not show_all:
            continue
        secs = optimizer_seconds(r.records)
        row = {
            "run": r.stem,
            "label": r.label,
            "role": r.role,
            "final_passes": r.records[-1]["effective_passes"],
            "subopt": {},
            "test_error": {},
        }
        for m in at:
            rec = _at(r.records, m)
            f = rec.get("objective") if rec else None
            row["subopt"][m] = (
                (f - fs) if isinstance(f, (int, float)) and math.isfinite(f) else None
            )
            row["test_error"][m] = (
                (100.0 - rec["dev_accuracy"])
                if rec and rec.get("dev_accuracy") is not None
                else None
            )
        target = rel_tol * abs(fs)
        row["reach_passes"] = row["reach_seconds"] = row["reach_updates"] = None
        for rec, s in zip(r.records, secs):
            f = rec.get("objective")
            if isinstance(f, (int, float)) and math.isfinite(f) and f - fs <= target:
                row["reach_passes"], row["reach_seconds"] = rec["effective_passes"], s
                if rec.get("steps") is not None and n_train:
                    row["reach_updates"] = rec["steps"] / n_train
                break
        rows.append(row)
    # the lowest f - f* at each mark among the solid lines (a classic method at its best step size)
    lowest = {}
    for m in at:
        cand = [
            (r["subopt"][m], r["label"])
            for r in rows
            if r["role"] in ("only", "best") and r["subopt"][m] is not None
        ]
        lowest[m] = min(cand) if cand else None
    return {
        "fstar": fs,
        "fstar_estimated": estimated,
        "test_error_at_wstar": (entry or {}).get("test_error"),
        "at": list(at),
        "rel_tol": rel_tol,
        "rows": rows,
        "lowest": lowest,
    }


def format_summary(s: dict) -> str:
    """A markdown table of :func:`summary`."""

    def num(v, f="{:.3e}"):
        return "-" if v is None else f.format(v)

    at = s["at"]
    head = (
        ["run", "role"]
        + [f"f-f* @{m:g}" for m in at]
        + [f"test err @{m:g}" for m in at]
        + [f"passes to {s['rel_tol']:g}*f*", "updates/n to it", "seconds to it"]
    )
    lines = [
        f"f* = {s['fstar']:.10g}"
        + (" (estimated: lowest objective in the traces)" if s["fstar_estimated"] else "")
        + (
            ""
            if s["test_error_at_wstar"] is None
            else f"; test error at w* = {s['test_error_at_wstar']:.2f}%"
        ),
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for r in sorted(
        s["rows"], key=lambda r: (r["subopt"].get(at[-1]) is None, r["subopt"].get(at[-1]) or 0.0)
    ):
        cells = (
            [r["label"], r["role"]]
            + [num(r["subopt"][m]) for m in at]
            + [num(r["test_error"][m], "{:.2f}") for m in at]
            + [
                num(r["reach_passes"], "{:.1f}"),
                num(r.get("reach_updates"), "{:.1f}"),
                num(r["reach_seconds"], "{:.2f}"),
            ]
        )
        lines.append("| " + " | ".join(cells) + " |")
    low = [f"@{m:g} {v[1]} ({v[0]:.3e})" for m, v in s.get("lowest", {}).items() if v is not None]
    if low:
        lines += [
            "",
            "lowest f - f* (each classic method at its best step size): " + "; ".join(low),
        ]
    return "\n".join(lines)
