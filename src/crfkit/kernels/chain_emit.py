"""Scores of one linear chain: the transition matrix from the weights, and the emission scores of a
sequence's tokens (per feature, or per full attribute row as one vector operation; ``add_scores``
for extra scores computed outside the kernels).  The inputs of every recursion in the ``chain_*``
modules.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .chain_exp import FAST

_NOPY = dict(cache=True, nogil=True, fastmath=FAST)


@njit(**_NOPY)
def transition_matrix(w, scale, n_state, trans_index):
    """Dense L x L transition scores ``scale * w[transition features]`` (0 where a pair has no
    feature)."""
    L = trans_index.shape[0]
    out = np.zeros((L, L))
    for i in range(L):
        for j in range(L):
            k = trans_index[i, j]
            if k >= 0:
                out[i, j] = scale * w[n_state + k]
    return out


@njit(**_NOPY)
def emissions(tok_ptr, attr, val, t0, t1, attr_ptr, feat_label, w, scale, out):
    """out[t - t0, l] = scale * sum of state-feature weights firing at token t for label l (``val``
    empty: every value 1, :attr:`crfkit.corpus.Corpus.raw_val`)."""
    L = out.shape[1]
    has_val = val.shape[0] > 0
    for t in range(t0, t1):
        r = t - t0
        for l in range(L):
            out[r, l] = 0.0
        for e in range(tok_ptr[t], tok_ptr[t + 1]):
            a = attr[e]
            v = (val[e] if has_val else 1.0) * scale
            for k in range(attr_ptr[a], attr_ptr[a + 1]):
                out[r, feat_label[k]] += w[k] * v


# Attribute rows.  An attribute whose features are the labels 0..L-1 in order (full_rows; dense
# pixel attributes, CRF++-style templates, every attribute x label) is a contiguous row of L
# weights.  The walks over occurrences take those in one loop, as vector operations, and the others
# (a scatter through feat_label) in a second loop run only when the token has some: a scatter branch
# inside the first loop keeps LLVM from vectorising it (4.5x slower on OCR's pixel rows).
@njit(**_NOPY)
def full_rows(attr_ptr, feat_label, n_labels):
    """1 for the attributes whose features are the labels 0..L-1 in this order (a contiguous row of
    L weights, so that their loops are vector operations over the labels), 0 for the others.  An
    empty ``feat_label`` with attributes (implicit label pairs, see below): every row of
    ``n_labels`` features."""
    na = attr_ptr.shape[0] - 1
    out = np.zeros(na, dtype=np.int8)
    implicit = feat_label.shape[0] == 0
    for a in range(na):
        k0 = attr_ptr[a]
        if attr_ptr[a + 1] - k0 != n_labels:
            continue
        if implicit:
            out[a] = 1
            continue
        ok = 1
        for l in range(n_labels):
            if feat_label[k0 + l] != l:
                ok = 0
                break
        out[a] = ok
    return out


@njit(inline="always", **_NOPY)
def add_full_row(orow, vec, b, x):
    """orow += vec[b:b + L] * x: one occurrence of an attribute whose features are every label in
    order."""
    L = orow.shape[0]
    vr = vec[b : b + L]
    for l in range(L):
        orow[l] += vr[l] * x


@njit(inline="always", **_NOPY)
def add_part_row(orow, vec, b, k0, k1, feat_label, x):
    """orow[label of feature k] += vec[b + k - k0] * x for the features k0..k1 of one attribute
    occurrence."""
    for q in range(k1 - k0):
        orow[feat_label[k0 + q]] += vec[b + q] * x


@njit(inline="always", **_NOPY)
def add_scattered_rows(
    orow, vec, local, t, e0, tok_ptr, attr, val, attr_ptr, feat_label, full, obase, scale
):
    """The second loop of a row walk: the occurrences of token t whose attribute is not full, read
    from ``vec`` at the global offsets (``attr_ptr``) or, when ``local``, at the example-local ones
    (``obase[e - e0]``), their values times ``scale``."""
    for e in range(tok_ptr[t], tok_ptr[t + 1]):
        a = attr[e]
        if not full[a]:
            b = obase[e - e0] if local else attr_ptr[a]
            add_part_row(orow, vec, b, attr_ptr[a], attr_ptr[a + 1], feat_label, val[e] * scale)


@njit(**_NOPY)
def row_emissions(
    tok_ptr, attr, val, t0, t1, attr_ptr, feat_label, full, vec, scale, out, local, obase
):
    """The emission scores of tokens t0..t1-1 from ``vec`` (times ``scale``), full rows as vectors:
    ``vec`` is the weight vector (``local`` False, ``obase`` unused) or an example-local one whose
    occurrence ``e`` starts at ``obase[e - tok_ptr[t0]]`` (``local`` True; see kernels.sag)."""
    L = out.shape[1]
    e0 = tok_ptr[t0]
    for t in range(t0, t1):
        orow = out[t - t0]
        for l in range(L):
            orow[l] = 0.0
        part = False
        for e in range(tok_ptr[t], tok_ptr[t + 1]):
            a = attr[e]
            if full[a]:
                add_full_row(orow, vec, obase[e - e0] if local else attr_ptr[a], val[e] * scale)
            else:
                part = True
        if part:
            add_scattered_rows(
                orow,
                vec,
                local,
                t,
                e0,
                tok_ptr,
                attr,
                val,
                attr_ptr,
                feat_label,
                full,
                obase,
                scale,
            )


@njit(**_NOPY)
def emissions_rows(tok_ptr, attr, val, t0, t1, attr_ptr, feat_label, full, w, scale, out):
    """:func:`emissions` with the full rows (``full``: :func:`full_rows`) as vector operations."""
    row_emissions(
        tok_ptr, attr, val, t0, t1, attr_ptr, feat_label, full, w, scale, out, False, attr_ptr
    )


@njit(**_NOPY)
def add_scores(xs, r0, T, out):
    """out[t, l] += xs[r0 + t, l] for t < T: extra emission scores computed outside the kernels
    (the dense block's ``X @ W``); a no-op when ``xs`` has no rows."""
    if xs.shape[0] == 0:
        return
    L = out.shape[1]
    for t in range(T):
        for l in range(L):
            out[t, l] += xs[r0 + t, l]
