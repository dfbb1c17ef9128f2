"""Sparse forward-backward (Lavergne et al. 2010): pair scores listed per position (the pairs that
have a non-zero bigram feature), the recursion evaluated as (mass of the unlisted pairs) + (listed
pairs times exp(s)), and the dense reference it is measured against.

Kept apart from :func:`crfkit.kernels.chain_pd.pd_forward_backward`: no L x L matrix per position is
formed, the scales are per position over the listed pairs, and the complements are recomputed
exactly when they cancel: other operations, so other bits.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .chain_exp import EXACT, FAST, row_exp, row_sum, vec_sum

_NOPY = dict(cache=True, nogil=True, fastmath=FAST)
# the recursions' sums over labels are added in index order (chain.row_sum / vec_sum, and
# chain.EXACT's flags for the masked sums): re-associated, LLVM compiled them into code whose result
# depended on where the work arrays lie (a vectorised loop behind a run-time check of the arrays'
# addresses), so that two runs with threads (per-thread arrays at addresses that vary with the
# timing) gave other last bits
_EXACT_BELOW = 1e-6


@njit(**_NOPY)
def _exp_rows(score, T, es, shift):
    for t in range(T):
        shift[t] = row_exp(score, t, es)


@njit(**_NOPY)
def _first_position(es, alpha, scale, shift):
    """alpha[0] = es[0] normalised; returns its log scale (the start of log Z)."""
    L = es.shape[1]
    s0 = row_sum(es, 0)
    for j in range(L):
        alpha[0, j] = es[0, j]
    scale[0] = s0
    for j in range(L):
        alpha[0, j] /= s0
    return np.log(s0) + shift[0]


@njit(**_NOPY)
def sparse_forward_backward(
    score,
    T,
    pair_ptr,
    pair_from,
    pair_to,
    pair_s,
    node,
    edge_nz,
    alpha,
    beta,
    es,
    scale,
    em1,
    acc,
    mark,
    cnt,
    exp_given=False,
):
    """Scaled forward-backward with sparse pair scores; returns log Z.

    Outputs: ``node`` (>= T x L) node marginals; ``edge_nz`` (one per listed
    pair) the pair marginal p(y_{t-1} = from, y_t = to) of every listed pair
    (an unlisted pair's marginal is ``alpha[t-1, i] * es[t, j] * beta[t, j] /
    scale[t]``).  Work arrays: ``alpha``, ``beta``, ``es`` (>= T x L),
    ``scale`` (>= 2T: the scales, then the emission shifts), ``em1`` (one per
    listed pair: receives exp(s)), ``acc`` and ``mark`` (L floats each),
    ``cnt`` (L ints).  ``exp_given``: ``em1`` already holds exp(pair_s) (built
    by :func:`sequence_pairs` from precomputed factors), so no exponential is
    taken here.

    The recursion is evaluated as (mass of the unlisted pairs) + (listed pairs
    times exp(s)): the same operation count as with ``M = exp(s) - 1``, but
    ``1 + M`` is never formed, so nothing cancels.
    """
    L = score.shape[1]
    shift = scale[T : 2 * T]
    _exp_rows(score, T, es, shift)
    if not exp_given:
        for k in range(pair_ptr[1] if T > 1 else 0, pair_ptr[T] if T > 1 else 0):
            em1[k] = np.exp(pair_s[k])
    # forward
    logz = _first_position(es, alpha, scale, shift)
    for t in range(1, T):
        k0 = pair_ptr[t]
        k1 = pair_ptr[t + 1]
        S = row_sum(alpha, t - 1)
        for j in range(L):
            acc[j] = 0.0  # alpha mass of the listed pairs into j
            mark[j] = 0.0  # sum over listed pairs into j of alpha * exp(s)
            cnt[j] = 0
        for k in range(k0, k1):
            a = alpha[t - 1, pair_from[k]]
            acc[pair_to[k]] += a
            mark[pair_to[k]] += a * em1[k]
            cnt[pair_to[k]] += 1
        for j in range(L):
            if cnt[j] == L:
                rest = 0.0  # every pair into j is listed
            else:
                rest = S - acc[j]
                if rest < _EXACT_BELOW * S:
                    rest = _complement_in(alpha, t - 1, pair_from, pair_to, k0, k1, j, L)
            alpha[t, j] = (rest + mark[j]) * es[t, j]
        tot = row_sum(alpha, t)
        scale[t] = tot
        logz += np.log(tot) + shift[t]
        for j in range(L):
            alpha[t, j] /= tot
    # backward (beta scaled so that node = alpha * beta)
    for j in range(L):
        beta[T - 1, j] = 1.0
    for t in range(T - 1, 0, -1):
        k0 = pair_ptr[t]
        k1 = pair_ptr[t + 1]
        inv = 1.0 / scale[t]
        for j in range(L):
            acc[j] = es[t, j] * beta[t, j] * inv  # v_t(j)
        V = vec_sum(acc)
        for i in range(L):
            mark[i] = 0.0
            cnt[i] = 0
            beta[t - 1, i] = 0.0
        for k in range(k0, k1):
            v = acc[pair_to[k]]
            mark[pair_from[k]] += v
            cnt[pair_from[k]] += 1
            beta[t - 1, pair_from[k]] += v * em1[k]
        for i in range(L):
            if cnt[i] == L:
                continue
            rest = V - mark[i]
            if rest < _EXACT_BELOW * V:
                rest = _complement_out(acc, pair_from, pair_to, k0, k1, i, L)
            beta[t - 1, i] += rest
        # marginals of the listed pairs at t
        for k in range(k0, k1):
            edge_nz[k] = alpha[t - 1, pair_from[k]] * em1[k] * acc[pair_to[k]]
    for t in range(T):
        for j in range(L):
            node[t, j] = alpha[t, j] * beta[t, j]
    return logz


@njit(**EXACT)
def _complement_in(alpha, t, pair_from, pair_to, k0, k1, j, L):
    """sum of alpha[t, i] over the i with no listed pair (i, j): exactly, without cancellation."""
    listed = np.zeros(L, dtype=np.bool_)
    for k in range(k0, k1):
        if pair_to[k] == j:
            listed[pair_from[k]] = True
    s = 0.0
    for i in range(L):
        if not listed[i]:
            s += alpha[t, i]
    return s


@njit(**EXACT)
def _complement_out(v, pair_from, pair_to, k0, k1, i, L):
    """sum of v[j] over the j with no listed pair (i, j)."""
    listed = np.zeros(L, dtype=np.bool_)
    for k in range(k0, k1):
        if pair_from[k] == i:
            listed[pair_to[k]] = True
    s = 0.0
    for j in range(L):
        if not listed[j]:
            s += v[j]
    return s


@njit(**_NOPY)
def dense_forward_backward(
    score, T, pair_ptr, pair_from, pair_to, pair_s, node, alpha, beta, es, scale, expM
):
    """The same recursions with a full L x L factor exp(s_t) per position (the reference the
    sparse version is measured against: L^2 exponentials and products per position)."""
    L = score.shape[1]
    shift = scale[T : 2 * T]
    _exp_rows(score, T, es, shift)
    logz = _first_position(es, alpha, scale, shift)
    for t in range(1, T):
        for i in range(L):
            for j in range(L):
                expM[t, i, j] = 0.0
        for k in range(pair_ptr[t], pair_ptr[t + 1]):
            expM[t, pair_from[k], pair_to[k]] = pair_s[k]
        for i in range(L):
            for j in range(L):
                expM[t, i, j] = np.exp(expM[t, i, j])
        tot = 0.0
        for j in range(L):
            a = 0.0
            for i in range(L):
                a += alpha[t - 1, i] * expM[t, i, j]
            a *= es[t, j]
            alpha[t, j] = a
            tot += a
        scale[t] = tot
        logz += np.log(tot) + shift[t]
        for j in range(L):
            alpha[t, j] /= tot
    for j in range(L):
        beta[T - 1, j] = 1.0
    for t in range(T - 1, 0, -1):
        inv = 1.0 / scale[t]
        for i in range(L):
            b = 0.0
            for j in range(L):
                b += expM[t, i, j] * es[t, j] * beta[t, j]
            beta[t - 1, i] = b * inv
    for t in range(T):
        for j in range(L):
            node[t, j] = alpha[t, j] * beta[t, j]
    return logz
