"""Partial-label training (Tsuboi et al. 2008, "Training conditional random fields using incomplete
annotations"): a token may carry one label, a set of possible labels, or none (any label).

The likelihood of a sequence is that of the label sequences consistent with its annotation::

    -log p(Y_i | x_i) = log Z(x_i) - log Z(x_i; Y_i),   Z(x; Y) = sum over y in Y of exp(score(x, y))

(Y_i: the sequences whose every token takes one of its allowed labels).  Its gradient is the
difference of two expectations of the features, under p(y | x) and under p(y | x, y in Y_i): the
second is a constrained forward-backward (disallowed labels get emission score -inf).  Both run
through the ordinary full-batch kernel (:func:`crfkit.kernels.batch.loss_grad`): the constraint
enters as extra emission scores 0 / -inf, and the empirical counts, which with full labels are the
constant gold counts, are replaced by the constrained expectation.  With every token's label given
the objective is the ordinary one.

Full-batch optimizers only (``lbfgs``, ``owlqn``); the per-example oracle (SGD, SAG, SGD-L1...)
raises :class:`~crfkit.errors.CrfkitError`.  Bigram-observation features are not supported here.

Label cells: a label (``"B-PER"``), ``None`` or ``"?"`` (any label), or a collection of labels
(``{"B-PER", "I-PER"}``; in column files ``B-PER|I-PER``, see :func:`parse_cell`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import CrfkitError, DataError
from ..objective import Objective, abs_max

ANY = ("?",)


def parse_cell(cell, sep: str = "|", any_marks=ANY):
    """A label cell -> None (any label), a label (str) or a frozenset of labels."""
    if cell is None:
        return None
    if isinstance(cell, str):
        if cell in any_marks:
            return None
        parts = cell.split(sep) if sep and sep in cell else [cell]
        return parts[0] if len(parts) == 1 else frozenset(parts)
    s = frozenset(cell)
    if not s:
        raise DataError("an empty label set")
    return next(iter(s)) if len(s) == 1 else s


def is_partial(Y) -> bool:
    """Whether label sequences hold a cell that is not a plain label (None or a collection of
    labels; strings are labels: ``?`` and ``A|B`` are read as partial cells only through
    :func:`parse_cells`)."""
    for ys in Y:
        for c in ys:
            if c is None or not isinstance(c, str):
                return True
    return False


def parse_cells(Y, sep: str = "|", any_marks=ANY):
    """Label sequences with string cells read as partial labels (``?``: any, ``A|B``: a set)."""
    return [[parse_cell(c, sep, any_marks) for c in ys] for ys in Y]


def placeholders(Y, sep="|", labels=None) -> tuple[list[list[str]], list[list], list[str]]:
    """(label sequences with one allowed label per token, the parsed cells, the label universe).

    The universe is ``labels`` when given (every label a cell names must be one of them; an
    unlabelled token, ``?`` / None, may take any of them), else the labels the cells name, in order
    of appearance. Each partial token gets one of its allowed labels as a placeholder, chosen so
    that every label of the universe appears at least once (the feature space takes its labels from
    the placeholders); a label of ``labels`` that no cell allows is a :class:`DataError`."""
    cells = [[parse_cell(c, sep) for c in ys] for ys in Y]
    universe = []
    seen = set()
    for seq in cells:
        for c in seq:
            for lab in [c] if isinstance(c, str) else sorted(c) if c is not None else []:
                if lab not in seen:
                    seen.add(lab)
                    universe.append(lab)
    if labels is not None:
        given = [str(lab) for lab in labels]
        if len(set(given)) != len(given) or not given:
            raise DataError(f"partial labels: labels= must name distinct labels, got {given!r}")
        allowed = set(given)
        unknown = [lab for lab in universe if lab not in allowed]
        if unknown:
            raise DataError(
                f"partial labels: the cells name labels outside labels=: {', '.join(unknown[:10])}"
            )
        universe = given
    if not universe:
        raise DataError("partial labels: no token names a label")
    fixed = {c for seq in cells for c in seq if isinstance(c, str)}
    missing = [lab for lab in universe if lab not in fixed]
    out = []
    for seq in cells:
        row = []
        for c in seq:
            if isinstance(c, str):
                row.append(c)
                continue
            opts = universe if c is None else sorted(c)
            pick = next((lab for lab in missing if lab in opts), opts[0])
            if pick in missing:
                missing.remove(pick)
            row.append(pick)
        out.append(row)
    if labels is not None and missing:
        raise DataError(
            f"partial labels: no token can take the label(s) {', '.join(missing[:10])} of labels= "
            "(no ? cell, and no set naming them, is left for them)"
        )
    return out, cells, universe


def allowed_matrix(cells, labels: Sequence[str]) -> np.ndarray:
    """(n_tokens x L) bool: the labels each token may take."""
    index = {lab: i for i, lab in enumerate(labels)}
    n = sum(len(s) for s in cells)
    A = np.zeros((n, len(labels)), bool)
    t = 0
    for seq in cells:
        for c in seq:
            if c is None:
                A[t] = True
            else:
                for lab in [c] if isinstance(c, str) else c:
                    A[t, index[lab]] = True
            t += 1
    return A


class PartialObjective(Objective):
    """:class:`~crfkit.objective.Objective` for partially labelled sequences (module docstring).
    ``allowed``: (n_tokens x L) bool; ``corpus.y`` must hold an allowed label of every token."""

    def __init__(self, corpus, space, reg, allowed: np.ndarray, threads=None):
        super().__init__(corpus, space, reg, threads=threads)
        if space.n_bigram and corpus.has_bigram:
            raise CrfkitError(
                "partial-label training does not support bigram-observation features yet"
            )
        allowed = np.asarray(allowed, bool)
        if allowed.shape != (corpus.n_tokens, space.n_labels):
            raise ValueError(
                f"allowed has shape {allowed.shape}; expected ({corpus.n_tokens}, {space.n_labels})"
            )
        if not allowed.any(axis=1).all():
            raise DataError("partial labels: a token allows no label")
        if not allowed[np.arange(corpus.n_tokens), corpus.y].all():
            raise ValueError("corpus.y must hold an allowed label of every token")
        self.allowed = allowed
        self._mask = np.where(allowed, 0.0, -np.inf)
        self._zero = np.zeros(space.n_features)

    def _loss_grad(self, w, g_out, gscale, l2):
        w = np.ascontiguousarray(w, dtype=np.float64)
        s, c = self.space, self.corpus
        L = s.n_labels
        ns = s.n_state
        exp_ok = self._binary and ns > 0 and abs_max(w[:ns]) * self._max_entries <= self.EXP_BOUND
        xs = self._dense_scores(w)
        pm1 = np.empty((c.n_tokens, L)) if s.n_dense else np.zeros((0, L))
        pm2 = np.empty((c.n_tokens, L)) if s.n_dense else np.zeros((0, L))
        g1 = np.empty(self.n_features)
        g2 = np.empty(self.n_features)
        # log Z and E_p[phi]; then log Z(Y) and E_p[phi | Y] (the -inf scores of the labels a token
        # may not take)
        v1, wsq = self._kernel_loss_grad(w, g1, self._zero, exp_ok, gscale, 0.0, xs, pm1)
        xc = self._mask + xs if xs.shape[0] else self._mask
        v2, _ = self._kernel_loss_grad(w, g2, self._zero, False, gscale, 0.0, xc, pm2)
        g = np.empty(self.n_features) if g_out is None else g_out
        np.subtract(g1, g2, out=g)
        if l2:
            g += l2 * w
        if s.n_dense:
            s.dense_weights(g)[:] += gscale * (c.dense.T @ (pm1 - pm2))
        self.n_full += 1
        return float(v1 - v2), float(wsq), g

    def nll_sum(self, w, count: bool = True) -> float:
        from ..kernels import batch

        w = np.ascontiguousarray(w, dtype=np.float64)
        self.n_full += bool(count)
        xs = self._dense_scores(w)
        xc = self._mask + xs if xs.shape[0] else self._mask
        ns = self.space.n_state
        # loss_only gives sum (log Z - gold score); the placeholder gold path is allowed, so it
        # cancels
        with self._threads("loss"):
            return float(
                batch.loss_only(*self._args(), w, ns, self.bounds, xs, self.sw)
                - batch.loss_only(*self._args(), w, ns, self.bounds, xc, self.sw)
            )

    def oracle(self, *a, **kw):
        raise CrfkitError(
            "partial-label training runs with the full-batch optimizers (lbfgs, owlqn); the "
            "per-example oracle (sgd, sag, sgd-l1, ...) does not support partial labels yet"
        )

    apply_gradient = oracle
