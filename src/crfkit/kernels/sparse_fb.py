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

The recursions themselves (``sparse_forward_backward`` and its dense reference) are in
:mod:`crfkit.kernels.chain_sparse`, beside the other forward-backward forms; this module builds the
pair lists from the weights and runs them over a corpus (and re-exports them).

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

from .chain_emit import add_scores, emissions, transition_matrix
from .chain_exp import EXACT, FAST, MAX_SCALED_TRANSITION_RANGE, row_exp, row_sum, vec_sum
from .chain_pd import bigram_row, bigram_transitions, pd_forward_backward, pd_node, row_pairs
from .chain_sparse import dense_forward_backward, sparse_forward_backward

# the names this module held before it was split keep working from here
__all__ = [
    "add_scores",
    "bigram_row",
    "bigram_transitions",
    "dense_forward_backward",
    "emissions",
    "EXACT",
    "FAST",
    "MAX_SCALED_TRANSITION_RANGE",
    "nonzero_transitions",
    "pair_capacity",
    "pair_scores_ok",
    "pd_forward_backward",
    "pd_node",
    "row_exp",
    "row_pairs",
    "row_sum",
    "sequence_pairs",
    "sparse_forward_backward",
    "sparse_marginals_bigram",
    "transition_matrix",
    "vec_sum",
]


_NOPY = dict(cache=True, nogil=True, fastmath=FAST)


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
def sequence_pairs(
    btok_ptr,
    battr,
    bval,
    t0,
    T,
    battr_ptr,
    bfeat_pair,
    w,
    boff,
    tr_pair,
    tr_s,
    tr_e,
    L,
    slot,
    pair_ptr,
    pair_from,
    pair_to,
    pair_s,
    pair_e,
):
    """The non-zero label-pair scores of every position of one sequence, as lists.

    Position ``t`` (1 <= t < T) gets the non-zero transition weights
    (``tr_pair`` = i*L + j, ``tr_s``) plus ``bval * w`` of every bigram-observation
    feature of the token's attributes with a non-zero weight, summed per pair.
    ``slot`` (L*L ints, all -1 on entry and on return) finds a pair already listed.
    Fills ``pair_ptr[:T+1]`` and the lists, with ``pair_e = exp(pair_s)`` built
    from the transitions' precomputed ``tr_e = exp(tr_s)`` times one
    exponential per bigram feature; returns the number of entries.
    """
    ident = row_pairs(bfeat_pair, L * L)  # implicit pairs (kernels.chain)
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
    """The non-zero entries of the (position-independent) transition matrix as lists: pair
    ``i*L + j``, score, exp(score) (what :func:`sequence_pairs` lists at every position)."""
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
    """(longest sequence, most pairs :func:`sequence_pairs` can list for one sequence) over
    sequences s0..s1-1."""
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
def sparse_marginals_bigram(
    seq_ptr,
    tok_ptr,
    attr,
    val,
    btok_ptr,
    battr,
    bval,
    attr_ptr,
    feat_label,
    trans_index,
    battr_ptr,
    bfeat_pair,
    w,
    n_state,
    boff,
    bounds,
    marg,
    logz,
    xs,
    counts,
):
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
            n = sequence_pairs(
                btok_ptr,
                battr,
                bval,
                t0,
                T,
                battr_ptr,
                bfeat_pair,
                w,
                boff,
                tr_pair,
                tr_s,
                tr_e,
                L,
                slot,
                pair_ptr,
                pf,
                pt,
                ps,
                em1,
            )
            positions += T - 1
            listed += n
            if pair_scores_ok(ps[:n]):
                logz[s] = sparse_forward_backward(
                    score,
                    T,
                    pair_ptr,
                    pf,
                    pt,
                    ps,
                    node,
                    edge,
                    alpha,
                    beta,
                    es,
                    scale,
                    em1,
                    acc,
                    mark,
                    cnt,
                    True,
                )
                for t in range(T):
                    for l in range(L):
                        marg[t0 + t, l] = node[t, l]
            else:
                if M.shape[0] < maxT:
                    M = np.empty((maxT, L, L))
                Mx = np.empty((maxT, L, L))
                tmx = np.empty(maxT)
                rng = bigram_transitions(
                    btok_ptr,
                    battr,
                    bval,
                    t0,
                    T,
                    battr_ptr,
                    bfeat_pair,
                    w,
                    boff,
                    trans,
                    M,
                    tmx,
                    expM0,
                    tmax,
                    Mx,
                )
                logz[s] = pd_forward_backward(score, T, M, tmx, rng, Mx, es, alpha, beta, scale)
                pd_node(T, alpha, beta, scale)
                for t in range(T):
                    for l in range(L):
                        marg[t0 + t, l] = alpha[t, l]
        counts[c, 0] = positions
        counts[c, 1] = listed
