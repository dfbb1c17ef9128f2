"""The sparse primal direction of a dual step (:mod:`crfkit.kernels.sdca`): ``E_d F`` of a
sequence's state features gathered in a local layout, its squared norm, ``w += c u`` and the inner
product of ``w`` with it.
"""

from __future__ import annotations

from numba import njit

from .chain_emit import add_full_row
from .chain_exp import FAST

# error_model="numpy": a float division is IEEE (no ZeroDivisionError branch), so that the loops
# over marginal entries vectorise (the branch kept LLVM from it; every division here is guarded
# anyway)
_NOPY = dict(cache=True, nogil=True, fastmath=FAST, error_model="numpy")


# ------------------------------------------------------------- sparse primal direction
# The state part of the direction is gathered in a local layout: ``acc[0:total]`` holds the feature
# rows of the sequence's distinct attributes one after the other, in the order of ``alist`` (the
# order of their first occurrences: :func:`crfkit.kernels.occ.buffer_offsets` gives each occurrence
# the offset of its attribute's row, once before the run).  The rows of a step are
# then contiguous (a few kB), not scattered over a vector of all the features (3.6 MB on
# CoNLL-2000), and the norm and the update read them as one array.
@njit(**_NOPY)
def accumulate_direction(tok_ptr, attr, ok0, onk, val, lab, bo, t0, t1, dn, acc, alist):
    """(E_d F) of the state features over the attribute occurrences of tokens t0..t1-1 (dn: T x L)
    into the local layout above: ``acc[o + q] += x * dn[t, label(k0 + q)]`` (o = ``bo[e]`` the
    offset of the attribute's row, :func:`crfkit.kernels.occ.buffer_offsets`; k0 its first feature);
    the distinct attributes are listed in ``alist`` (an occurrence is its attribute's first where
    its offset is the total width listed so far and the attribute has features).  Returns their
    count.  Reads the occurrences through the per-occurrence layout ``(ok0, onk, lab)`` of
    :func:`crfkit.kernels.occ.layout` (the attribute's first feature and feature count, -1 for a
    full row, read in order with the occurrence) instead of ``attr_ptr``, ``full`` and
    ``feat_label`` by attribute: the same additions in the same order."""
    L = dn.shape[1]
    na = 0
    total = 0
    for t in range(t0, t1):
        d = dn[t - t0]
        part = False
        for e in range(tok_ptr[t], tok_ptr[t + 1]):
            nk = onk[e]
            o = bo[e]
            if o == total and nk != 0:  # (an attribute without features is not listed)
                alist[na] = attr[e]
                na += 1
                total += L if nk < 0 else nk
            if nk < 0:
                add_full_row(acc[o : o + L], d, 0, val[e])
            else:
                part = True
        if part:
            for e in range(tok_ptr[t], tok_ptr[t + 1]):
                nk = onk[e]
                if nk >= 0:
                    x = val[e]
                    o = bo[e]
                    k0 = ok0[e]
                    for q in range(nk):
                        acc[o + q] += x * d[lab[k0 + q]]
    return na


@njit(inline="always", **_NOPY)
def _local_total(attr_ptr, alist, na):
    total = 0
    for j in range(na):
        a = alist[j]
        total += attr_ptr[a + 1] - attr_ptr[a]
    return total


@njit(**_NOPY)
def direction_norm2(attr_ptr, acc, alist, na, tdir, trans_index):
    """||u||^2 over the listed attributes' features (``acc`` in the local layout of
    :func:`accumulate_direction`) and the transition features (tdir: L x L)."""
    s = 0.0
    for k in range(_local_total(attr_ptr, alist, na)):
        s += acc[k] * acc[k]
    L = trans_index.shape[0]
    for a in range(L):
        for b in range(L):
            if trans_index[a, b] >= 0:
                s += tdir[a, b] * tdir[a, b]
    return s


@njit(**_NOPY)
def apply_direction(attr_ptr, acc, alist, na, tdir, trans_index, n_state, c, w):
    """w += c * u (listed attributes, ``acc`` in the local layout of :func:`accumulate_direction`,
    and transitions); clears ``acc`` for the next step."""
    o = 0
    for j in range(na):
        a = alist[j]
        k0 = attr_ptr[a]
        nk = attr_ptr[a + 1] - k0
        wr = w[k0 : k0 + nk]
        ar = acc[o : o + nk]
        for q in range(nk):
            wr[q] += c * ar[q]
            ar[q] = 0.0
        o += nk
    L = trans_index.shape[0]
    for a in range(L):
        for b in range(L):
            k = trans_index[a, b]
            if k >= 0:
                w[n_state + k] += c * tdir[a, b]


@njit(**_NOPY)
def scores_dot(T, score, trans, dn, dp):
    """sum_t dn[t] . score[t] + sum_t dp[t] . trans: the inner product of w with E_d F for a
    sequence whose emission scores at w are ``score`` (d: node and pairwise differences)."""
    L = trans.shape[0]
    s = 0.0
    for t in range(T):
        for l in range(L):
            s += dn[t, l] * score[t, l]
    for t in range(T - 1):
        for a in range(L):
            for b in range(L):
                s += dp[t, a, b] * trans[a, b]
    return s
