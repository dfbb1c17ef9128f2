"""The report's figures (matplotlib, the ``plot`` extra): training curves, the transition heat map
and the confusion matrix.

Each function returns a :class:`matplotlib.figure.Figure` drawn on the Agg canvas directly (no
pyplot, no global backend switch, as :mod:`crfkit.bench.plots` does); it has a ``_repr_png_``, so
Jupyter shows it whether or not pyplot was imported, and :func:`png_bytes` turns it into a PNG.
matplotlib is imported here only, when a figure is drawn.
"""

from __future__ import annotations

import functools
import io
import math
from collections.abc import Sequence

import numpy as np

from ..errors import CrfkitError
from .data import history_records

__all__ = ["plot_training", "plot_transitions", "plot_confusion", "png_bytes", "TRAINING_PANELS"]

#: the rows of :func:`plot_training`: (title, y label, trace keys drawn, log scale)
TRAINING_PANELS = (
    ("objective", "objective f(w)", ("objective",), True),
    ("gradient", "gradient norm", ("grad_inf_norm", "grad_norm"), True),
    ("duality gap", "duality gap", ("duality_gap",), True),
    ("scores", "score (%)", ("dev_accuracy", "dev_f1", "train_accuracy", "train_f1"), False),
)

_COLORS = {
    "objective": "#1f77b4",
    "f - f*": "#1f77b4",
    "grad_inf_norm": "#d62728",
    "grad_norm": "#ff7f0e",
    "duality_gap": "#9467bd",
    "dev_accuracy": "#2ca02c",
    "dev_f1": "#006400",
    "train_accuracy": "#7f7f7f",
    "train_f1": "#555555",
}


@functools.cache
def _figure_class():
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise CrfkitError(
            "plots need matplotlib: pip install 'crfkit[plot]' (or matplotlib)"
        ) from None

    class ReportFigure(Figure):
        """A figure that Jupyter shows as a PNG without pyplot's inline backend."""

        def _repr_png_(self) -> bytes:
            return png_bytes(self)

    return ReportFigure


def _figure(width: float, height: float):
    cls = _figure_class()  # first: says how to install matplotlib when it is missing
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    # fixed margins (:func:`_margins`) rather than a layout engine: constrained layout measures
    # every tick label and cell text again and took most of a report's drawing time
    fig = cls(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig


def _margins(fig, left: float, right: float, bottom: float, top: float, **kw) -> None:
    """Margins in inches."""
    w, h = fig.get_size_inches()
    fig.subplots_adjust(
        left=left / w, right=1 - right / w, bottom=bottom / h, top=1 - top / h, **kw
    )


def png_bytes(fig, dpi: int = 100) -> bytes:
    """The figure as PNG bytes."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def _series(recs: list[dict], key: str) -> np.ndarray:
    out = np.full(len(recs), np.nan)
    for i, r in enumerate(recs):
        v = r.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            out[i] = float(v)
    return out


def plot_training(history, *, fstar: float | None = None, title: str | None = None):
    """The training curves of a run, against iterations (left column) and seconds (right): the
    objective (``f - f*``, log scale, when ``fstar`` is given), the gradient norms, the duality gap
    (SDCA/OEG) and the dev / training-set scores, each row drawn when the trace has it.

    ``history``: a trace file (``crfkit train --trace``), its records, ``TrainResult.history``, a
    fitted ``crfkit.CRF`` (its ``history_``) or a ``TrainResult``.  Returns a matplotlib figure."""
    recs = history_records(history)
    if not recs:
        raise CrfkitError("no iteration records to plot")
    it = _series(recs, "iteration")
    if np.isnan(it).all():
        it = np.arange(1, len(recs) + 1, dtype=float)
    secs = _series(recs, "wall_s")
    if np.isnan(secs).all():
        secs = _series(recs, "seconds")
    rows = []
    for name, ylabel, keys, log in TRAINING_PANELS:
        lines = []
        for k in keys:
            y = _series(recs, k)
            if np.isfinite(y).any():
                if name == "objective" and fstar is not None:
                    y = y - float(fstar)
                    y[y <= 0] = np.nan
                    lines.append(("f - f*", y))
                else:
                    lines.append((k, y))
        if lines:
            if name == "objective" and fstar is not None:
                ylabel = f"f(w) - f*  (f* = {float(fstar):.10g})"
            uselog = log and all((y[np.isfinite(y)] > 0).all() for _, y in lines)
            rows.append((name, ylabel, lines, uselog))
    fig = _figure(10.0, 2.6 * len(rows) + (0.7 if title else 0.4))
    _margins(fig, 0.85, 0.2, 0.5, 0.65 if title else 0.3, hspace=0.55, wspace=0.25)
    axes = fig.subplots(len(rows), 2, squeeze=False)
    for (name, ylabel, lines, uselog), (ax_i, ax_s) in zip(rows, axes):
        for ax, x, xlabel in ((ax_i, it, "iteration"), (ax_s, secs, "seconds")):
            for key, y in lines:
                ok = np.isfinite(y) & np.isfinite(x)
                style = "o-" if ok.sum() < 30 else "-"
                ax.plot(x[ok], y[ok], style, ms=3, lw=1.3, color=_COLORS.get(key), label=key)
            if uselog:
                ax.set_yscale("log")
            ax.set_xlabel(xlabel)
            ax.set_ylabel(ylabel)
            ax.set_title(f"{name} vs {xlabel}", fontsize=10)
            ax.grid(True, alpha=0.3)
            if len(lines) > 1:
                ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    return fig


def _square(n: int, rows: Sequence[str], cols: Sequence[str]):
    """A figure for an n x n heat map with a colour bar, its margins fitted to the label names."""
    cell = 0.3 if n <= 40 else 0.18
    side = min(14.0, max(3.0, cell * n))
    chars = 0.075  # inches per character of an 8-point tick label
    left = 0.5 + chars * max((len(x) for x in rows), default=1)
    bottom = 0.5 + chars * max((len(x) for x in cols), default=1)
    W, H = left + side + 1.4, bottom + side + 0.4
    fig = _figure(W, H)
    ax = fig.add_axes((left / W, bottom / H, side / W, side / H))
    fig.add_axes(
        (left / W + (side + 0.2) / W, bottom / H + 0.1 * side / H, 0.2 / W, 0.8 * side / H)
    )
    return fig, ax


def _heat(ax, m: np.ndarray, row_labels, col_labels, *, cmap, vmin, vmax, fmt, annotate: bool):
    im = ax.imshow(np.ma.masked_invalid(m), cmap=cmap, vmin=vmin, vmax=vmax, aspect="equal")
    ax.set_xticks(range(len(col_labels)), labels=col_labels, rotation=90, fontsize=8)
    ax.set_yticks(range(len(row_labels)), labels=row_labels, fontsize=8)
    ax.set_facecolor("#eeeeee")
    if annotate:
        lim = max(abs(vmin), abs(vmax)) or 1.0
        for i in range(m.shape[0]):
            for j in range(m.shape[1]):
                v = m[i, j]
                if np.isfinite(v) and v != 0:
                    dark = abs(v) > 0.6 * lim
                    ax.text(
                        j,
                        i,
                        fmt(v).replace("-0.0", "0.0"),
                        ha="center",
                        va="center",
                        fontsize=6,
                        color="white" if dark else "black",
                    )
    return im


def plot_transitions(
    explanation, *, title: str = "transition weights", annotate: bool | None = None
):
    """The transition weights as a heat map (rows: previous label, columns: label; grey: no
    feature), from a :class:`crfkit.explain.WeightsExplanation` or a model.  Values are written in
    the cells up to 30 labels (``annotate``).  Returns a matplotlib figure."""
    if not hasattr(explanation, "transition_matrix"):
        explanation = explanation.explain(top=0)
    labels = list(explanation.labels)
    m = explanation.transition_matrix()
    n = len(labels)
    fig, ax = _square(n, labels, labels)
    fin = m[np.isfinite(m)]
    lim = float(np.abs(fin).max()) if fin.size else 1.0
    im = _heat(
        ax,
        m,
        labels,
        labels,
        cmap="RdYlGn",
        vmin=-lim,
        vmax=lim,
        fmt=lambda v: f"{v:.1f}",
        annotate=n <= 30 if annotate is None else annotate,
    )
    ax.set_xlabel("label")
    ax.set_ylabel("previous label")
    ax.set_title(title)
    fig.colorbar(im, cax=fig.axes[1], label="weight")
    return fig


def plot_confusion(
    gold_labels: Sequence[str],
    pred_labels: Sequence[str],
    counts: np.ndarray,
    *,
    title: str = "confusion matrix (token counts)",
    annotate: bool | None = None,
):
    """A confusion matrix (rows: gold label, columns: predicted label) as a heat map coloured by the
    share of the row (so rare labels show), with the counts written in the cells up to 30 labels.
    Returns a matplotlib figure."""
    counts = np.asarray(counts, dtype=float)
    tot = counts.sum(axis=1, keepdims=True)
    share = np.divide(counts, tot, out=np.zeros_like(counts), where=tot > 0)
    n = max(len(gold_labels), len(pred_labels))
    fig, ax = _square(n, gold_labels, pred_labels)
    im = ax.imshow(share, cmap="Blues", vmin=0.0, vmax=1.0, aspect="equal")
    ax.set_xticks(range(len(pred_labels)), labels=list(pred_labels), rotation=90, fontsize=8)
    ax.set_yticks(range(len(gold_labels)), labels=list(gold_labels), fontsize=8)
    if n <= 30 if annotate is None else annotate:
        for i in range(counts.shape[0]):
            for j in range(counts.shape[1]):
                c = int(counts[i, j])
                if c:
                    ax.text(
                        j,
                        i,
                        str(c),
                        ha="center",
                        va="center",
                        fontsize=5.5,
                        color="white" if share[i, j] > 0.6 else "black",
                    )
    ax.set_xlabel("predicted label")
    ax.set_ylabel("gold label")
    ax.set_title(title)
    fig.colorbar(im, cax=fig.axes[1], label="share of the gold label's tokens")
    return fig
