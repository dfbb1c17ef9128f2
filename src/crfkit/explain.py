"""What a trained model has learnt, as a plain structure: the transition weights and, per label,
the state features of largest positive and negative weight (what ``eli5.show_weights`` shows for
``sklearn_crfsuite.CRF``).

:func:`explain` builds a :class:`WeightsExplanation` from a feature space and its weights;
``CRFModel.explain`` and ``crfkit.CRF.explain_weights`` call it.  The explanation renders as HTML in
Jupyter (``_repr_html_``: a shaded transition table and one table of top features per label, no
scripts, no images), as text (``str``), and as JSON-able dicts (:meth:`WeightsExplanation.to_dict`).
:func:`top_features` (the strongest state features over every label) is what ``crfkit info --top``
lists.  The HTML fragments are reused by :mod:`crfkit.report`.

Only the label-unigram (state) features and the transitions are explained; label-pair x observation
and dense weights are listed by ``crfkit dump``.  Nothing here imports the model: the space is read
through its arrays (``labels``, ``attributes``, ``attr_ptr``, ``feat_label``, ``trans_index``,
``n_state``), so the model module can call it.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .errors import CrfkitError

__all__ = [
    "TRAINING_META_KEYS",
    "LabelWeights",
    "WeightsExplanation",
    "explain",
    "label_order",
    "top_features",
    "transition_table",
    "shade",
]

#: the training settings of a model's metadata that `crfkit info` and `crfkit report` list, in
#: this order
TRAINING_META_KEYS = (
    "algorithm",
    "l2",
    "l1",
    "n_train",
    "train_weight",
    "iterations",
    "status",
    "support",
    "transitions",
    "min_freq",
    "train_file",
)


def top_features(space, weights: np.ndarray, k: int = 20) -> list[tuple[str, str, float]]:
    """The ``k`` state features of largest |weight| over every label, as ``(attribute, label,
    weight)``, largest first (ties: the first stored)."""
    w = weights[: space.n_state]
    idx = np.argsort(-np.abs(w), kind="stable")[:k]
    attr = np.searchsorted(space.attr_ptr, idx, side="right") - 1
    labels = space.labels
    fl = space.feat_label
    return [
        (space.attributes[int(a)], labels[int(fl[i])], float(w[i]))
        for a, i in zip(attr.tolist(), idx.tolist())
    ]


def transition_table(labels: Sequence[str], trans: dict[tuple[str, str], float]) -> list[str]:
    """The transition weights ``trans`` (``{(previous, label): weight}``) as the lines of a text
    table, rows: previous label, columns: label, ``.`` where there is no feature (what ``crfkit
    info`` prints)."""
    w = max([len(lab) for lab in labels] + [7])
    lines = [" " * w + "  " + " ".join(f"{lab:>{w}}" for lab in labels)]
    for a in labels:
        cells = []
        for b in labels:
            v = trans.get((a, b))
            cells.append(f"{'.':>{w}}" if v is None else f"{v:>{w}.3f}")
        lines.append(f"{a:>{w}}  " + " ".join(cells))
    return lines


_CHUNK = re.compile(r"^([A-Z])-(.+)$")
_PREFIX_ORDER = {"B": 0, "I": 1, "E": 2, "L": 2, "S": 3, "U": 3}


def label_order(labels: Sequence[str]) -> list[str]:
    """The labels in a reading order: ``O`` first, then chunk labels grouped by type (``B-NP``,
    ``I-NP``, ``B-PP``...; B, I, E/L, S/U within a type), then any other label; within each group
    the given order is kept for labels that are not chunk tags."""

    def key(item):
        i, lab = item
        if lab == "O":
            return (0, "", 0, i)
        m = _CHUNK.match(lab)
        if m:
            return (1, m.group(2), _PREFIX_ORDER.get(m.group(1), 4), i)
        return (2, "", 0, i)

    return [lab for _, lab in sorted(enumerate(labels), key=key)]


@dataclass
class LabelWeights:
    """The strongest state features of one label: ``positive`` (largest weight first) and
    ``negative`` (most negative first), each a list of ``(attribute, weight)``; ``n_positive`` /
    ``n_negative``: how many features of the label (after the attribute filter) have a weight of
    that sign."""

    label: str
    positive: list[tuple[str, float]] = field(default_factory=list)
    negative: list[tuple[str, float]] = field(default_factory=list)
    n_positive: int = 0
    n_negative: int = 0


@dataclass(repr=False)
class WeightsExplanation:
    """The weights of a model: ``labels`` (those shown, in order), ``transitions`` (``{(previous
    label, label): weight}`` for every transition feature between them) and ``targets`` (per label
    a :class:`LabelWeights`).  ``top`` and ``attribute`` record the request.  Renders in Jupyter
    (``_repr_html_``) and as text (``str``)."""

    labels: list[str]
    transitions: dict[tuple[str, str], float]
    targets: dict[str, LabelWeights]
    top: int = 20
    attribute: str | None = None

    def transition_matrix(self) -> np.ndarray:
        """The transitions as a ``len(labels) x len(labels)`` array, row: previous label, column:
        label, NaN where the model has no feature."""
        n = len(self.labels)
        out = np.full((n, n), np.nan)
        pos = {lab: i for i, lab in enumerate(self.labels)}
        for (a, b), w in self.transitions.items():
            out[pos[a], pos[b]] = w
        return out

    def to_dict(self) -> dict:
        """The explanation as JSON-able lists and dicts."""
        return {
            "labels": list(self.labels),
            "transitions": [
                {"from": a, "to": b, "weight": w} for (a, b), w in self.transitions.items()
            ],
            "targets": {
                lab: {
                    "positive": [{"attribute": a, "weight": w} for a, w in t.positive],
                    "negative": [{"attribute": a, "weight": w} for a, w in t.negative],
                    "n_positive": t.n_positive,
                    "n_negative": t.n_negative,
                }
                for lab, t in self.targets.items()
            },
            "top": self.top,
            "attribute": self.attribute,
        }

    def format(self) -> str:
        """As text: the transition table (``.``: no feature) and the top features per label."""
        labels = self.labels
        lines = ["transitions (row: previous label, column: label):"]
        lines += transition_table(labels, self.transitions)
        for lab in labels:
            t = self.targets.get(lab)
            if t is None:
                continue
            lines.append("")
            lines.append(
                f"{lab}: top {len(t.positive)} of {t.n_positive} positive, "
                f"{len(t.negative)} of {t.n_negative} negative"
            )
            lines += [f"  {w:+10.4f}  {a}" for a, w in t.positive]
            if t.positive and t.negative:
                lines.append("  " + "." * 10)
            lines += [f"  {w:+10.4f}  {a}" for a, w in t.negative]
        return "\n".join(lines) + "\n"

    def __str__(self) -> str:
        return self.format()

    def __repr__(self) -> str:
        filt = f", attribute={self.attribute!r}" if self.attribute else ""
        return (
            f"<WeightsExplanation: {len(self.labels)} labels, {len(self.transitions)} transitions, "
            f"top {self.top} features per label and sign{filt}; print() it for the text>"
        )

    def _repr_html_(self) -> str:
        return (
            '<div class="crfkit-explain">'
            + EXPLAIN_CSS
            + "<h4>Transitions</h4>"
            + transitions_html(self)
            + "<h4>Top features per label</h4>"
            + features_html(self)
            + "</div>"
        )


def explain(
    space,
    weights: np.ndarray,
    *,
    top: int = 20,
    labels: Sequence[str] | None = None,
    attribute: str | None = None,
) -> WeightsExplanation:
    """The :class:`WeightsExplanation` of a model's ``space`` and ``weights``: per label (``labels``,
    default every label, in :func:`label_order`) the ``top`` state features of largest positive and
    of most negative weight (zero weights are left out), optionally only those whose attribute
    matches the regular expression ``attribute`` (``re.search``), and the transitions among those
    labels.  An unknown label or a bad expression is a :class:`~crfkit.errors.CrfkitError`."""
    if top < 0:
        raise CrfkitError(f"top must be >= 0, got {top}")
    all_labels = list(space.labels)
    index = {lab: i for i, lab in enumerate(all_labels)}
    if labels is None:
        shown = label_order(all_labels)
    else:
        if isinstance(labels, str):
            labels = [labels]
        shown = list(dict.fromkeys(labels))
        bad = [lab for lab in shown if lab not in index]
        if bad:
            raise CrfkitError(
                f"label {bad[0]!r} is not a label of this model (labels: {' '.join(all_labels)})"
            )
    ns = space.n_state
    w = np.asarray(weights[:ns], dtype=np.float64)
    fl = np.asarray(space.feat_label)
    keep = w != 0
    if attribute:
        try:
            rx = re.compile(attribute)
        except re.error as e:
            raise CrfkitError(f"bad regular expression {attribute!r}: {e}") from None
        ok = np.fromiter(
            (rx.search(a) is not None for a in space.attributes),
            dtype=bool,
            count=space.n_attributes,
        )
        keep &= np.repeat(ok, np.diff(space.attr_ptr))
    cand = np.flatnonzero(keep)
    # one sort for every label: by label, then by weight
    order = cand[np.lexsort((w[cand], fl[cand]))]
    fl_sorted = fl[order]
    starts = np.searchsorted(fl_sorted, np.arange(len(all_labels) + 1), side="left")
    attr_ptr = space.attr_ptr
    names = space.attributes
    targets = {}
    for lab in shown:
        li = index[lab]
        seg = order[starts[li] : starts[li + 1]]  # ascending weight
        wseg = w[seg]
        n_neg = int(np.searchsorted(wseg, 0.0, side="left"))
        n_pos = len(seg) - n_neg
        neg = seg[: min(top, n_neg)]
        pos = seg[len(seg) - min(top, n_pos) :][::-1]

        def pairs(idx):
            a = np.searchsorted(attr_ptr, idx, side="right") - 1
            return [(names[int(x)], float(w[i])) for x, i in zip(a.tolist(), idx.tolist())]

        targets[lab] = LabelWeights(lab, pairs(pos), pairs(neg), n_pos, n_neg)
    ti = np.asarray(space.trans_index)
    trans = {}
    sel = [index[lab] for lab in shown]
    for a in sel:
        for b in sel:
            k = int(ti[a, b])
            if k >= 0:
                trans[(all_labels[a], all_labels[b])] = float(weights[ns + k])
    return WeightsExplanation(shown, trans, targets, top, attribute or None)


# --------------------------------------------------------------------------- HTML fragments

#: the style of the HTML fragments (scoped to ``.crfkit-explain``/``.crfkit-report``)
EXPLAIN_CSS = """<style>
.crfkit-explain table, .crfkit-report table {border-collapse: collapse; font-size: 12px;
  font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; margin: 4px 0 12px 0}
.crfkit-explain td, .crfkit-explain th, .crfkit-report td, .crfkit-report th {
  padding: 2px 6px; border: 1px solid #ddd; text-align: right; white-space: nowrap}
.crfkit-explain th, .crfkit-report th {background: #f4f4f4}
.crfkit-explain .feat td.a, .crfkit-report .feat td.a {text-align: left}
.crfkit-explain .labels, .crfkit-report .labels {display: flex; flex-wrap: wrap; gap: 12px;
  align-items: flex-start}
</style>"""


def shade(v: float, scale: float) -> str:
    """A CSS background colour for the value ``v`` on a diverging scale of half-width ``scale``:
    white at 0, green for positive values, red for negative ones."""
    if not (scale > 0) or not math.isfinite(v):
        return "#ffffff"
    t = min(1.0, abs(v) / scale)
    if v >= 0:
        r, g, b = 255 - int(155 * t), 255 - int(55 * t), 255 - int(155 * t)
    else:
        r, g, b = 255 - int(35 * t), 255 - int(165 * t), 255 - int(165 * t)
    return f"#{r:02x}{g:02x}{b:02x}"


def _e(s) -> str:
    return html.escape(str(s), quote=True)


def transitions_html(ex: WeightsExplanation) -> str:
    """The transition weights as an HTML table shaded by weight (rows: previous label, columns:
    label; an empty cell: no feature)."""
    m = ex.transition_matrix()
    fin = m[np.isfinite(m)]
    scale = float(np.abs(fin).max()) if fin.size else 0.0
    head = "".join(f"<th>{_e(lab)}</th>" for lab in ex.labels)
    rows = [f'<table class="trans"><tr><th>from \\ to</th>{head}</tr>']
    for i, a in enumerate(ex.labels):
        cells = []
        for v in m[i].tolist():
            if math.isnan(v):
                cells.append("<td></td>")
            else:
                cells.append(f'<td style="background:{shade(v, scale)}">{v:.3f}</td>')
        rows.append(f"<tr><th>{_e(a)}</th>{''.join(cells)}</tr>")
    rows.append("</table>")
    return "".join(rows)


def label_features_html(t: LabelWeights, scale: float) -> str:
    """One label's top features as an HTML table (``data-label`` holds the label, for filters)."""
    rows = [
        f'<table class="feat" data-label="{_e(t.label)}"><tr><th colspan="2">{_e(t.label)} '
        f"<small>(+{t.n_positive} / &minus;{t.n_negative})</small></th></tr>"
    ]
    for a, w in t.positive:
        rows.append(
            f'<tr><td style="background:{shade(w, scale)}">{w:+.3f}</td><td class="a">{_e(a)}</td></tr>'
        )
    if t.positive and t.negative:
        rows.append('<tr><td>&hellip;</td><td class="a"></td></tr>')
    for a, w in t.negative:
        rows.append(
            f'<tr><td style="background:{shade(w, scale)}">{w:+.3f}</td><td class="a">{_e(a)}</td></tr>'
        )
    rows.append("</table>")
    return "".join(rows)


def features_html(ex: WeightsExplanation) -> str:
    """Every label's top features, side by side, on one colour scale."""
    ws = [abs(w) for t in ex.targets.values() for _, w in t.positive + t.negative]
    scale = max(ws) if ws else 0.0
    return (
        '<div class="labels">'
        + "".join(
            label_features_html(ex.targets[lab], scale) for lab in ex.labels if lab in ex.targets
        )
        + "</div>"
    )
