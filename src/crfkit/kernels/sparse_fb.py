"""Sparse forward-backward recursions (Lavergne, Cappé & Yvon 2010, §4.1).

When the label-pair scores of a position are mostly zero -- an L1-trained
model with label-pair x observation features, or a transition matrix that L1
has thinned out -- write the pair factor as ``exp(s) = 1 + M`` with
``M = exp(s) - 1`` non-zero only where ``s`` is.  Then

    alpha_t(j) ~ e_t(j) * [ sum_i alpha_{t-1}(i)  +  sum_{i: s(i,j) != 0} alpha_{t-1}(i) M(i, j) ]
    beta_{t-1}(i) ~ sum_j v_t(j)  +  sum_{j: s(i,j) != 0} M(i, j) v_t(j),      v_t = e_t * beta_t

so a position costs O(L + r) operations and r exponentials, r the number of
non-zero pair scores, instead of O(L^2) (and L^2 exponentials when the scores
depend on the position).

Input: emission scores ``score`` (T x L) and, per position ``t >= 1``, the
non-zero pair scores of the transition into ``t`` as a list: entries
``pair_ptr[t]:pair_ptr[t+1]`` of ``pair_from``, ``pair_to``, ``pair_s`` (a
pair may appear once per position).  The recursions are scaled as in
:mod:`crfkit.kernels.chain` (alpha renormalised at every position).

Numerics: ``1 + M`` can cancel when a strongly negative score sits on a pair
that carries most of the mass; the "all pairs" part is therefore computed as
the sum over the pairs *not* listed (``S - sum over listed``), and when that
difference is below ``1e-6 * S`` it is recomputed exactly from the unlisted
entries, so every quantity is a sum of non-negative terms up to a relative
error of about 1e-10.  Pair scores must keep ``exp`` finite and the scaled
recursion in range (as the dense kernels' ``MAX_SCALED_TRANSITION_RANGE``);
:func:`pair_scores_ok` checks it.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from .chain import (EXACT, FAST, MAX_SCALED_TRANSITION_RANGE, add_scores, bigram_row, bigram_transitions, emissions,
                    row_pairs, pd_forward_backward, pd_node, row_exp, row_sum, transition_matrix, vec_sum)

_NOPY = dict(cache=True, nogil=True, fastmath=FAST)
# the recursions' sums over labels are added in index order (chain.row_sum / vec_sum, and chain.EXACT's flags
# for the masked sums): re-associated, LLVM compiled them into code whose result depended on where the work
# arrays lie (a vectorised loop behind a run-time check of the arrays' addresses), so that two runs with
# threads (per-thread arrays at addresses that vary with the timing) gave other last bits
_EXACT_BELOW = 1e-6


@njit(**_NOPY)
def pair_scores_ok(pair_s) -> bool:
    """True when the pair scores are in the range the scaled sparse recursion handles exactly."""
    lo = 0.0
    hi = 0.0
    for k in range(pair_s.shape[0]):
        s = pair_s[k]
        if not np.isfinite(s):
            return False
        if s < lo:
            lo = s
        if s > hi:
            hi = s
    return hi - lo <= MAX_SCALED_TRANSITION_RANGE


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
def sparse_forward_backward(score, T, pair_ptr, pair_from, pair_to, pair_s, node, edge_nz,
                            alpha, beta, es, scale, em1, acc, mark, cnt, exp_given=False):
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
    shift = scale[T:2 * T]
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
            acc[j] = 0.0     # alpha mass of the listed pairs into j
            mark[j] = 0.0    # sum over listed pairs into j of alpha * exp(s)
            cnt[j] = 0
        for k in range(k0, k1):
            a = alpha[t - 1, pair_from[k]]
            acc[pair_to[k]] += a
            mark[pair_to[k]] += a * em1[k]
            cnt[pair_to[k]] += 1
        for j in range(L):
            if cnt[j] == L:
                rest = 0.0   # every pair into j is listed
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
            acc[j] = es[t, j] * beta[t, j] * inv   # v_t(j)
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
def dense_forward_backward(score, T, pair_ptr, pair_from, pair_to, pair_s, node, alpha, beta, es, scale, expM):
    """The same recursions with a full L x L factor exp(s_t) per position (the reference the
    sparse version is measured against: L^2 exponentials and products per position)."""
    L = score.shape[1]
    shift = scale[T:2 * T]
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


@njit(**_NOPY)
def sequence_pairs(btok_ptr, battr, bval, t0, T, battr_ptr, bfeat_pair, w, boff, tr_pair, tr_s, tr_e, L, slot,
                   pair_ptr, pair_from, pair_to, pair_s, pair_e):
    """The non-zero label-pair scores of every position of one sequence, as lists.

    Position ``t`` (1 <= t < T) gets the non-zero transition weights
    (``tr_pair`` = i*L + j, ``tr_s``) plus ``bval * w`` of every bigram-observation
    feature of the token's attributes with a non-zero weight, summed per pair.
    ``slot`` (L*L ints, all -1 on entry and on return) finds a pair already listed.
    Fills ``pair_ptr[:T+1]`` and the lists, with ``pair_e = exp(pair_s)`` built
    from the transitions' precomputed ``tr_e = exp(tr_s)`` times one
    exponential per bigram feature; returns the number of entries.
    """
    ident = row_pairs(bfeat_pair, L * L)        # implicit pairs (kernels.chain)
    n = 0
    pair_ptr[0] = 0
    pair_ptr[1] = 0
    for t in range(1, T):
        start = n
        for k in range(tr_pair.shape[0]):
            p = tr_pair[k]
            slot[p] = n
            pair_from[n] = p // L
            pair_to[n] = p % L
            pair_s[n] = tr_s[k]
            pair_e[n] = tr_e[k]
            n += 1
        for e in range(btok_ptr[t0 + t], btok_ptr[t0 + t + 1]):
            v = bval[e]
            wb, pb = bigram_row(w, boff, battr_ptr, bfeat_pair, ident, battr[e])
            for r in range(wb.shape[0]):
                wk = wb[r]
                if wk == 0.0:
                    continue
                p = np.int64(pb[r])
                q = slot[p]
                x = wk * v
                if q < 0:
                    slot[p] = n
                    pair_from[n] = p // L
                    pair_to[n] = p % L
                    pair_s[n] = x
                    pair_e[n] = np.exp(x)
                    n += 1
                else:
                    pair_s[q] += x
                    pair_e[q] *= np.exp(x)
        for q in range(start, n):
            slot[pair_from[q] * L + pair_to[q]] = -1
        pair_ptr[t + 1] = n
    return n


@njit(**_NOPY)
def nonzero_transitions(trans):
    """The non-zero entries of the (position-independent) transition matrix as lists: pair ``i*L + j``,
    score, exp(score) (what :func:`sequence_pairs` lists at every position)."""
    L = trans.shape[0]
    ntr = 0
    for i in range(L):
        for j in range(L):
            if trans[i, j] != 0.0:
                ntr += 1
    tr_pair = np.empty(ntr, np.int64)
    tr_s = np.empty(ntr)
    tr_e = np.empty(ntr)
    q = 0
    for i in range(L):
        for j in range(L):
            if trans[i, j] != 0.0:
                tr_pair[q] = i * L + j
                tr_s[q] = trans[i, j]
                tr_e[q] = np.exp(trans[i, j])
                q += 1
    return tr_pair, tr_s, tr_e


@njit(**_NOPY)
def pair_capacity(seq_ptr, btok_ptr, battr, battr_ptr, s0, s1, ntr):
    """(longest sequence, most pairs :func:`sequence_pairs` can list for one sequence) over sequences s0..s1-1."""
    maxT = 1
    cap = 0
    for s in range(s0, s1):
        T = seq_ptr[s + 1] - seq_ptr[s]
        if T > maxT:
            maxT = T
        m = 0
        for t in range(seq_ptr[s] + 1, seq_ptr[s + 1]):
            for e in range(btok_ptr[t], btok_ptr[t + 1]):
                b = battr[e]
                m += battr_ptr[b + 1] - battr_ptr[b]
        m += (T - 1) * ntr if T > 1 else 0
        if m > cap:
            cap = m
    return maxT, cap


@njit(parallel=True, cache=True, fastmath=FAST)
def sparse_marginals_bigram(seq_ptr, tok_ptr, attr, val, btok_ptr, battr, bval, attr_ptr, feat_label,
                            trans_index, battr_ptr, bfeat_pair, w, n_state, boff, bounds, marg, logz, xs, counts):
    """Node marginals (n_tokens x L) and log Z per sequence of a model with label-pair x observation
    features, by the sparse recursions; the same outputs as ``batch.decode_all_bigram`` with
    ``marginals``.  ``counts[c]`` receives (positions, listed pairs) of chunk ``c``, for the
    sparsity figures.  A sequence whose pair scores leave the range of the scaled recursion
    (:func:`pair_scores_ok`) is done by the dense per-position recursion instead."""
    trans = transition_matrix(w, 1.0, n_state, trans_index)
    L = trans.shape[0]
    tmax = trans.max()
    expM0 = np.exp(trans - tmax)
    tr_pair, tr_s, tr_e = nonzero_transitions(trans)
    ntr = tr_pair.shape[0]
    n_chunks = len(bounds) - 1
    for c in prange(n_chunks):
        s0 = bounds[c]
        s1 = bounds[c + 1]
        maxT, cap = pair_capacity(seq_ptr, btok_ptr, battr, battr_ptr, s0, s1, ntr)
        score = np.empty((maxT, L))
        alpha = np.empty((maxT, L))
        beta = np.empty((maxT, L))
        es = np.empty((maxT, L))
        scale = np.empty(2 * maxT)
        node = np.empty((maxT, L))
        acc = np.empty(L)
        mark = np.empty(L)
        cnt = np.empty(L, np.int64)
        slot = np.full(L * L, -1, np.int64)
        pair_ptr = np.empty(maxT + 1, np.int64)
        pf = np.empty(cap, np.int32)
        pt = np.empty(cap, np.int32)
        ps = np.empty(cap)
        em1 = np.empty(cap)
        edge = np.empty(cap)
        M = np.empty((0, L, L))
        positions = 0
        listed = 0
        for s in range(s0, s1):
            t0 = seq_ptr[s]
            T = seq_ptr[s + 1] - t0
            if T == 0:
                logz[s] = 0.0
                continue
            emissions(tok_ptr, attr, val, t0, t0 + T, attr_ptr, feat_label, w, 1.0, score)
            add_scores(xs, t0, T, score)
            n = sequence_pairs(btok_ptr, battr, bval, t0, T, battr_ptr, bfeat_pair, w, boff, tr_pair, tr_s, tr_e,
                               L, slot, pair_ptr, pf, pt, ps, em1)
            positions += T - 1
            listed += n
            if pair_scores_ok(ps[:n]):
                logz[s] = sparse_forward_backward(score, T, pair_ptr, pf, pt, ps, node, edge, alpha, beta, es,
                                                  scale, em1, acc, mark, cnt, True)
                for t in range(T):
                    for l in range(L):
                        marg[t0 + t, l] = node[t, l]
            else:
                if M.shape[0] < maxT:
                    M = np.empty((maxT, L, L))
                Mx = np.empty((maxT, L, L))
                tmx = np.empty(maxT)
                rng = bigram_transitions(btok_ptr, battr, bval, t0, T, battr_ptr, bfeat_pair, w, boff, trans, M,
                                         tmx, expM0, tmax, Mx)
                logz[s] = pd_forward_backward(score, T, M, tmx, rng, Mx, es, alpha, beta, scale)
                pd_node(T, alpha, beta, scale)
                for t in range(T):
                    for l in range(L):
                        marg[t0 + t, l] = alpha[t, l]
        counts[c, 0] = positions
        counts[c, 1] = listed
