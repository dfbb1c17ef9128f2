"""Score curves per epoch (train and test), averaged over seeds: Cao's Figures 3 and 4.

Reads only traces: each directory given is one seed's run directory (``crfkit bench
run --out DIR --seed K``, with ``--train-scores`` for the training side), and runs
are matched across directories by their trace name (``ngd__period=0,update=u1g1``).
For each run and epoch (the trace's ``iteration``; an iteration for a batch method)
the score is ``train_<metric>`` / ``dev_<metric>`` (``dev`` is the test set in
``crfkit bench``), ``metric`` being ``accuracy`` (token accuracy, %) or ``f1``
(conlleval chunk F1).  A method's curve is the mean over its runs at each epoch, its
band the lowest to the highest run; an epoch some runs did not reach is averaged over
those that did (the summary says how many runs each method has and how many epochs).

The comparison with a baseline: for each method, the number of epochs (among the
first N that both the method and the baseline have) in which the method's mean test
score is at or above the baseline's (ties within 1e-9 count as "at").  Traces without
the training fields (written without ``--train-scores``) are read as well: the train
panel then says so and the test side is drawn and compared as usual.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import CrfkitError
from ..io.atomic import atomic_file

__all__ = [
    "METRICS",
    "ScoreGroup",
    "load_score_groups",
    "compare_to_baseline",
    "score_summary",
    "format_score_summary",
    "plot_scores",
    "find_baseline",
]

METRICS = {"accuracy": "token accuracy (%)", "f1": "chunk F1 (conlleval)"}
TIE = 1e-9


@dataclass
class ScoreGroup:
    """One method (trace name) over the seed directories."""

    stem: str
    name: str
    params: dict
    label: str = ""
    # per run (directory): {epoch: score}
    train: list = field(default_factory=list)
    test: list = field(default_factory=list)
    dirs: list = field(default_factory=list)

    def mean(self, side: str, epochs: int) -> list:
        """Per epoch 1..epochs: (mean, low, high, runs) over the runs that have that epoch, or
        None."""
        out = []
        for e in range(1, epochs + 1):
            vals = [run[e] for run in getattr(self, side) if e in run]
            out.append((sum(vals) / len(vals), min(vals), max(vals), len(vals)) if vals else None)
        return out


def _score(v):
    return (
        float(v)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        else None
    )


def finished_traces(directory) -> set[str] | None:
    """Trace file names ``directory/bench.json`` lists as finished (not interrupted or failed), or
    None without a readable bench.json."""
    p = Path(directory) / "bench.json"
    try:
        with open(p, encoding="utf-8") as f:
            runs = json.load(f).get("runs")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(runs, list):
        return None
    return {
        r["trace"]
        for r in runs
        if isinstance(r, dict)
        and r.get("trace")
        and r.get("status") not in ("interrupted", "failed")
    }


def load_score_groups(
    dirs: Sequence, *, metric: str = "accuracy", epochs: int = 50, finished_only: bool = False
) -> list[ScoreGroup]:
    """The runs of the seed directories ``dirs``, grouped by trace name, with their train and test
    ``metric`` per epoch (epochs 1..``epochs``).  ``finished_only``: only the traces each
    directory's bench.json lists as finished (a run still going, or stopped by Ctrl-C, left out; a
    directory without bench.json is a :class:`CrfkitError` then).  A :class:`CrfkitError` when no
    directory is given, one holds no traces, or no trace holds a test score for ``metric``."""
    from .plots import load_runs, parse_stem

    if metric not in METRICS:
        raise CrfkitError(f"metric must be one of {', '.join(METRICS)}, got {metric!r}")
    if not dirs:
        raise CrfkitError(
            "no run directories given (one per seed, as crfkit bench run --out writes them)"
        )
    if int(epochs) < 1:
        raise CrfkitError(f"epochs must be at least 1, got {epochs}")
    groups: dict[str, ScoreGroup] = {}
    for d in dirs:
        keep = None
        if finished_only:
            keep = finished_traces(d)
            if keep is None:
                raise CrfkitError(
                    f"{d}: no readable bench.json, so no list of finished runs (finished_only)"
                )
        for r in load_runs(d):
            if keep is not None and r.stem + ".jsonl" not in keep:
                continue
            name, params = parse_stem(r.stem)
            g = groups.setdefault(r.stem, ScoreGroup(r.stem, name, params))
            tr, te = {}, {}
            for rec in r.records:
                if rec.get("phase"):  # a fine-tuning phase after the run: not an epoch of it
                    continue
                it = rec.get("iteration")
                if not isinstance(it, int) or not 1 <= it <= epochs:
                    continue
                a, b = _score(rec.get(f"train_{metric}")), _score(rec.get(f"dev_{metric}"))
                if a is not None:
                    tr[it] = a
                if b is not None:
                    te[it] = b
            g.train.append(tr)
            g.test.append(te)
            g.dirs.append(str(d))
    if not any(run for g in groups.values() for run in g.test):
        raise CrfkitError(
            f"no trace in {', '.join(map(str, dirs))} holds a test score dev_{metric} "
            f"(crfkit bench run scores the test set every epoch"
            + ("; chunk F1 only for chunk labels)" if metric == "f1" else ")")
        )
    out = list(groups.values())
    _default_labels(out)
    return out


def _default_labels(groups: list[ScoreGroup]) -> None:
    """The optimizer's name and the parameters that tell its runs apart: a parameter every group
    that has it sets to the same value (``period=0``) is left out when more than one group has
    it."""
    seen: dict[str, set] = {}
    count: dict[str, int] = {}
    for g in groups:
        for k, v in g.params.items():
            seen.setdefault(k, set()).add(v)
            count[k] = count.get(k, 0) + 1
    for g in groups:
        keep = {k: v for k, v in g.params.items() if not (len(seen[k]) == 1 and count[k] > 1)}
        g.label = g.name + (
            "" if not keep else " (" + ",".join(f"{k}={v}" for k, v in sorted(keep.items())) + ")"
        )


def find_baseline(groups: list[ScoreGroup], baseline: str) -> ScoreGroup:
    """The group named by ``baseline``: its trace name, its label, a spec (``ngd:update=u2g1``,
    matched by trace name), or an optimizer name that only one group has."""
    from .runner import parse_spec, trace_stem

    b = baseline.strip()
    for key in (lambda g: g.stem, lambda g: g.label):
        hit = [g for g in groups if key(g) == b]
        if len(hit) == 1:
            return hit[0]
    try:
        s = parse_spec(b)
        stem = trace_stem(s.name, s.params)
    except CrfkitError:
        stem = None
    hit = [g for g in groups if g.stem == stem]
    if len(hit) == 1:
        return hit[0]
    hit = [g for g in groups if g.name == b]
    if len(hit) == 1:
        return hit[0]
    avail = ", ".join(g.stem for g in groups)
    if len(hit) > 1:
        raise CrfkitError(
            f"baseline {baseline!r} names {len(hit)} runs ({', '.join(g.stem for g in hit)}); "
            "give the trace name"
        )
    raise CrfkitError(f"baseline {baseline!r} is none of the runs: {avail}")


def compare_to_baseline(groups: list[ScoreGroup], base: ScoreGroup, epochs: int) -> dict:
    """{stem: (epochs at or above the baseline's mean test score, epochs compared)}; the epochs
    compared are those of 1..``epochs`` where both have a mean."""
    b = base.mean("test", epochs)
    out = {}
    for g in groups:
        m = g.mean("test", epochs)
        both = [(x[0], y[0]) for x, y in zip(m, b) if x is not None and y is not None]
        out[g.stem] = (sum(1 for x, y in both if x >= y - TIE), len(both))
    return out


def score_summary(
    dirs: Sequence,
    *,
    metric: str = "accuracy",
    epochs: int = 50,
    baseline: str | None = None,
    labels: dict | None = None,
    groups: list[ScoreGroup] | None = None,
    finished_only: bool = False,
) -> dict:
    """Per method: runs, epochs reached, mean train/test score at the last epoch, and (with a
    ``baseline``) the epochs in which its mean test score is at or above the baseline's."""
    groups = (
        groups
        if groups is not None
        else load_score_groups(dirs, metric=metric, epochs=epochs, finished_only=finished_only)
    )
    _apply_labels(groups, labels)
    base = find_baseline(groups, baseline) if baseline else None
    cmp = compare_to_baseline(groups, base, epochs) if base else {}
    rows = []
    for g in _ordered(groups, base):
        te = g.mean("test", epochs)
        tr = g.mean("train", epochs)
        reached = [len(run) for run in g.test]
        last = max((e for e, x in enumerate(te, 1) if x is not None), default=None)
        row = {
            "run": g.stem,
            "label": g.label,
            "runs": len(g.test),
            "epochs_min": min(reached),
            "epochs_max": max(reached),
            "last_epoch": last,
            "test_last": te[last - 1][0] if last else None,
            "train_last": tr[last - 1][0] if last and tr[last - 1] is not None else None,
        }
        if base is not None:
            row["at_or_above"], row["compared"] = cmp[g.stem]
        rows.append(row)
    return {
        "metric": metric,
        "epochs": int(epochs),
        "baseline": base.stem if base else None,
        "baseline_label": base.label if base else None,
        "dirs": [str(d) for d in dirs],
        "rows": rows,
    }


def format_score_summary(s: dict) -> str:
    m = s["metric"]
    head = ["method", "runs", "epochs", f"train {m} @last", f"test {m} @last"]
    if s["baseline"]:
        head.append(f"epochs test >= {s['baseline_label']}")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in s["rows"]:
        ep = (
            f"{r['epochs_min']}"
            if r["epochs_min"] == r["epochs_max"]
            else f"{r['epochs_min']}-{r['epochs_max']}"
        )
        cells = [
            r["label"],
            str(r["runs"]),
            ep,
            "-" if r["train_last"] is None else f"{r['train_last']:.2f}",
            "-" if r["test_last"] is None else f"{r['test_last']:.2f}",
        ]
        if s["baseline"]:
            cells.append(
                "(baseline)"
                if r["run"] == s["baseline"]
                else f"{r['at_or_above']} of {r['compared']}"
            )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _apply_labels(groups, labels: dict | None) -> None:
    if not labels:
        return
    known = {g.stem for g in groups}
    for stem, _text in labels.items():
        if stem not in known:
            raise CrfkitError(
                f"--label {stem}:...: no run is named {stem!r}; the runs: {', '.join(sorted(known))}"
            )
    for g in groups:
        if g.stem in labels:
            g.label = labels[g.stem]


def _ordered(groups, base):
    return sorted(groups, key=lambda g: (g is not base, g.stem))


def plot_scores(
    dirs: Sequence,
    out,
    *,
    metric: str = "accuracy",
    epochs: int = 50,
    baseline: str | None = None,
    title: str | None = None,
    labels: dict | None = None,
    finished_only: bool = False,
) -> tuple[Path, dict]:
    """Draw the train (left) and test (right) ``metric`` per epoch, mean over the seed directories
    ``dirs`` with a band from the lowest to the highest run, into the PNG ``out``; returns (path,
    :func:`score_summary`)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise CrfkitError(
            "plots need matplotlib: pip install 'crfkit[bench]' (or matplotlib)"
        ) from None
    groups = load_score_groups(dirs, metric=metric, epochs=epochs, finished_only=finished_only)
    s = score_summary(
        dirs, metric=metric, epochs=epochs, baseline=baseline, labels=labels, groups=groups
    )
    base = find_baseline(groups, baseline) if baseline else None
    fig = Figure(figsize=(13, 5))
    FigureCanvasAgg(fig)
    axes = [fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)]
    palette = (
        "#1f77b4",
        "#ff7f0e",
        "#2ca02c",
        "#d62728",
        "#9467bd",
        "#8c564b",
        "#e377c2",
        "#7f7f7f",
        "#bcbd22",
        "#17becf",
    )
    order = _ordered(groups, base)
    colours = {}
    k = 0
    for g in order:
        if g is base:
            colours[g.stem] = "#000000"
        else:
            colours[g.stem] = palette[k % len(palette)]
            k += 1
    n_runs = {g.stem: len(g.test) for g in groups}
    for ax, side in zip(axes, ("train", "test")):
        drawn = 0
        for g in order:
            pts = [(e, x) for e, x in enumerate(g.mean(side, epochs), 1) if x is not None]
            if not pts:
                continue
            drawn += 1
            es = [p[0] for p in pts]
            c = colours[g.stem]
            lw = 2.0 if g is base else 1.3
            ax.plot(
                es,
                [p[1][0] for p in pts],
                "-",
                color=c,
                linewidth=lw,
                label=f"{g.label} ({n_runs[g.stem]} run{'s' if n_runs[g.stem] != 1 else ''})",
            )
            if any(p[1][3] > 1 for p in pts):
                ax.fill_between(
                    es,
                    [p[1][1] for p in pts],
                    [p[1][2] for p in pts],
                    color=c,
                    alpha=0.12,
                    linewidth=0,
                )
        if not drawn:
            ax.text(
                0.5,
                0.5,
                f"no train_{metric} in these traces\n(crfkit bench run --train-scores)",
                ha="center",
                va="center",
                transform=ax.transAxes,
                fontsize=10,
                color="#666666",
            )
        ax.set_xlabel("epoch (iteration for a batch method)")
        ax.set_ylabel(f"{side} {METRICS[metric]}")
        ax.set_xlim(1, epochs)
        ax.grid(True, alpha=0.3)
        ax.set_title(
            f"{'training' if side == 'train' else 'test'} set: mean over seeds "
            f"(band: lowest to highest run)",
            fontsize=10,
        )
    # the test panel's y range from the means after the first epochs, so that the close curves part
    _zoom(axes[1], groups, epochs)
    _zoom(axes[0], groups, epochs, side="train")
    h, lab = axes[1].get_legend_handles_labels()
    if h:
        axes[1].legend(h, lab, fontsize=8, loc="lower right")
    if title:
        fig.suptitle(title, fontsize=11)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    out = Path(out)
    if out.parent and not out.parent.is_dir():
        raise CrfkitError(f"{out.parent}: no such directory")
    with atomic_file(out, fsync=False) as f:
        f.write(buf.getvalue())
    return out, s


def _zoom(ax, groups, epochs, side="test") -> None:
    """Limit y to the spread of the mean curves from epoch 3 on (the first epochs lie far below)."""
    vals = [
        x[0]
        for g in groups
        for e, x in enumerate(g.mean(side, epochs), 1)
        if x is not None and e >= 3
    ]
    if len(vals) < 2:
        return
    lo, hi = min(vals), max(vals)
    pad = max(0.1 * (hi - lo), 0.02)
    ax.set_ylim(lo - pad, hi + pad)


def write_summary_json(s: dict, path) -> Path:
    path = Path(path)
    with atomic_file(path, fsync=False) as f:
        f.write((json.dumps(s, indent=1) + "\n").encode("utf-8"))
    return path
