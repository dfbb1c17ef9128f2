"""The per-occurrence layout of the stochastic steps (``l2sgd``, ``ngd``, ``pa``, ``ap``, ``arow``)
and the oracle and gradient walks that read it.

The corpus stores per attribute occurrence its attribute ``a``; a step then
reads ``attr_ptr[a]``, ``attr_ptr[a + 1]``, ``full[a]`` and ``feat_label[k]``:
on CoNLL-2000 with CRFsuite's chunking attributes (335,674 attributes,
452,755 features, 18 occurrences per token, 8 features per occurrence) those
are random reads in arrays of 2.7 MB (int64), 0.3 MB and 1.8 MB (int32) besides
the weights, and the emission walk was 0.16-0.20 CPU s of an l2sgd epoch's
0.50 (``benchmarks/ngd_profile.py``).  :func:`layout` resolves the attribute
once, before training, into the occurrence's first feature ``ok0`` (int32
while the features fit) and its number of features ``onk`` (int16; negative
for a full row, an attribute whose features are the labels 0..L-1 in order,
read as a vector), both read sequentially with the occurrence, and narrows
the labels to ``lab`` (uint8 up to 256 labels): a walk then reads at random
only the weights and the labels (0.45 MB).  The emission walk takes 0.08 s
instead of 0.16 (same benchmark).  The sums run in the same order as
:func:`crfkit.kernels.oracle.sequence_oracle` and
:func:`~crfkit.kernels.oracle.apply_gradient` (full rows first, then the
others, each in occurrence order), so the results are the same to the bit.
Memory: 6 bytes per attribute occurrence (4 + 2), while the run lasts.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .chain import add_transition_gradient, forward_backward_edges, gold_score
from .chain_emit import add_full_row
from .chain_exp import FAST, exp_shift_into, max_min

_NOPY = dict(cache=True, nogil=True, fastmath=FAST)


def layout(tok_ptr, attr, attr_ptr, feat_label, full, n_labels):
    """``(ok0, onk, lab)`` of the module docstring for the corpus occurrences ``attr`` (numpy;
    O(occurrences))."""
    attr = np.asarray(attr)
    nf = np.diff(attr_ptr)
    k_type = np.int32 if attr_ptr[-1] < 2**31 - 1 else np.int64
    ok0 = attr_ptr[:-1].astype(k_type)[attr]
    n_type = np.int16 if n_labels < 2**15 else np.int32
    nk = nf.astype(n_type)
    nk[np.asarray(full, dtype=bool)] = -1
    onk = nk[attr]
    return ok0, onk, labels(feat_label, n_labels)


def labels(feat_label, n_labels):
    """The feature labels in the narrowest integer type that holds them."""
    t = np.uint8 if n_labels <= 256 else (np.int16 if n_labels < 2**15 else np.int32)
    return np.ascontiguousarray(feat_label, dtype=t)


def attribute_layout(attr_ptr, full, attrs, n_labels):
    """``(k0, nk)`` as :func:`layout` for a list of attributes (``attrs``: attribute ids)."""
    attrs = np.asarray(attrs)
    k_type = np.int32 if attr_ptr[-1] < 2**31 - 1 else np.int64
    n_type = np.int16 if n_labels < 2**15 else np.int32
    nk = np.diff(attr_ptr).astype(n_type)
    nk[np.asarray(full, dtype=bool)] = -1
    return attr_ptr[:-1].astype(k_type)[attrs], nk[attrs]


class Work:
    """Work arrays of :func:`oracle` for chains of at most ``max_len`` tokens and ``L`` labels."""

    def __init__(self, max_len, L):
        T = max(int(max_len), 1)
        self.trans = np.empty((L, L))
        self.expM = np.empty((L, L))
        self.score = np.empty((T, L))
        self.es = np.empty((T, L))
        self.bm = np.empty((T, L))
        self.scale = np.empty(T)
        self.pm = np.empty(L)

    def arrays(self):
        return self.trans, self.expM, self.score, self.es, self.bm, self.scale, self.pm


@njit(**_NOPY)
def emissions(tok_ptr, ok0, onk, val, lab, t0, t1, w, scale, out):
    """out[t - t0, l] = scale * the weights firing at token t for label l (full rows as vectors,
    then the others; the order of :func:`crfkit.kernels.chain.row_emissions`)."""
    L = out.shape[1]
    for t in range(t0, t1):
        orow = out[t - t0]
        for l in range(L):
            orow[l] = 0.0
        part = False
        for e in range(tok_ptr[t], tok_ptr[t + 1]):
            if onk[e] < 0:
                add_full_row(orow, w, ok0[e], val[e] * scale)
            else:
                part = True
        if part:
            for e in range(tok_ptr[t], tok_ptr[t + 1]):
                nk = onk[e]
                if nk >= 0:
                    k0 = ok0[e]
                    x = val[e] * scale
                    for q in range(nk):
                        orow[lab[k0 + q]] += w[k0 + q] * x


@njit(**_NOPY)
def transitions(v, beta, n_state, trans_index, trans):
    """trans = beta * the transition weights (0 where a pair has none), in place."""
    L = trans_index.shape[0]
    for a in range(L):
        for b in range(L):
            k = trans_index[a, b]
            trans[a, b] = beta * v[n_state + k] if k >= 0 else 0.0


@njit(**_NOPY)
def oracle(
    seq_ptr,
    tok_ptr,
    ok0,
    onk,
    val,
    lab,
    y,
    trans_index,
    n_state,
    v,
    beta,
    i,
    node,
    edge,
    trans,
    expM,
    score,
    es,
    bm,
    scale,
):
    """:func:`crfkit.kernels.oracle.sequence_oracle` on the layout, with preallocated work arrays
    (:class:`Work`): the loss -log p(y_i|x_i) at w = beta v, node marginals into node[:T], summed
    edge marginals into edge (overwritten)."""
    L = trans_index.shape[0]
    t0 = seq_ptr[i]
    T = seq_ptr[i + 1] - t0
    for a in range(L):
        for b in range(L):
            edge[a, b] = 0.0
    if T == 0:
        return 0.0
    transitions(v, beta, n_state, trans_index, trans)
    tmax = max_min(trans)[0]
    exp_shift_into(trans.ravel(), tmax, expM.ravel())
    emissions(tok_ptr, ok0, onk, val, lab, t0, t0 + T, v, beta, score)
    logz = forward_backward_edges(score, T, trans, expM, tmax, es, node, bm, scale, edge)
    for t in range(T):
        for l in range(L):
            node[t, l] *= bm[t, l]
    return logz - gold_score(score, y, t0, T, trans)


@njit(**_NOPY)
def apply_gradient(
    seq_ptr, tok_ptr, ok0, onk, val, lab, y, trans_index, n_state, i, node, edge, coef, v, pm
):
    """v += coef * grad_i (:func:`crfkit.kernels.oracle.apply_gradient` on the layout; ``pm``: L
    scratch)."""
    L = trans_index.shape[0]
    t0 = seq_ptr[i]
    T = seq_ptr[i + 1] - t0
    for t in range(T):
        nr = node[t]
        for l in range(L):
            pm[l] = nr[l]
        pm[y[t0 + t]] -= 1.0
        part = False
        e0 = tok_ptr[t0 + t]
        e1 = tok_ptr[t0 + t + 1]
        for e in range(e0, e1):
            if onk[e] < 0:
                k0 = ok0[e]
                add_full_row(v[k0 : k0 + L], pm, 0, coef * val[e])
            else:
                part = True
        if part:
            for e in range(e0, e1):
                nk = onk[e]
                if nk >= 0:
                    c = coef * val[e]
                    k0 = ok0[e]
                    for q in range(nk):
                        v[k0 + q] += c * pm[lab[k0 + q]]
    add_transition_gradient(v, n_state, trans_index, edge, y, t0, T, coef)


@njit(**_NOPY)
def buffer_offsets(seq_ptr, tok_ptr, attr, width, val, direct):
    """Per attribute occurrence ``e`` (counted from the first sequence's first occurrence), the
    offset ``bo[e]`` of its attribute's block in its sequence's local buffer, the blocks in order of
    first occurrence, ``width[a]`` entries for attribute ``a``; per sequence, the buffer's length
    ``nbuf[i]``.  Returns ``(bo, nbuf)`` (int32, int64).  The buffer of ``ngd``'s net gradient
    (:func:`crfkit.kernels.ngd.run_steps`) and of the dual methods' primal direction
    (:func:`crfkit.kernels.sdca_direction.accumulate_direction`): 4 bytes per occurrence while a run lasts, in
    place of a lookup by attribute (a random read in an array of the attributes) at every
    occurrence.  The first occurrence of an attribute in its sequence is the one whose offset equals
    the sum of the widths of the attributes met before it.

    ``direct`` (``ngd``'s direct route): an attribute that occurs once in its sequence with value 1
    (``val``, read only then) takes no block; its occurrence gets -1, and the blocks are those of
    the other attributes."""
    n = seq_ptr.shape[0] - 1
    na = width.shape[0]
    slot = np.zeros(na, dtype=np.int64)
    seen = np.full(na, -1, dtype=np.int64)
    many = np.zeros(
        na if direct else 0, dtype=np.int64
    )  # occurrences in the sequence (2 for a value != 1)
    e0 = tok_ptr[seq_ptr[0]]
    bo = np.empty(tok_ptr[seq_ptr[n]] - e0, dtype=np.int32)
    nbuf = np.zeros(n, dtype=np.int64)
    for i in range(n):
        e1 = tok_ptr[seq_ptr[i]]
        e2 = tok_ptr[seq_ptr[i + 1]]
        if direct:
            for e in range(e1, e2):
                many[attr[e]] += 1 if val[e] == 1.0 else 2
        b = 0
        for e in range(e1, e2):
            a = attr[e]
            if direct and many[a] == 1:
                bo[e - e0] = -1
                continue
            if seen[a] != i:
                seen[a] = i
                slot[a] = b
                b += width[a]
            bo[e - e0] = slot[a]
        if direct:
            for e in range(e1, e2):
                many[attr[e]] = 0
        nbuf[i] = b
    return bo, nbuf
