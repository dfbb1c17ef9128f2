"""Numba kernels for decoding beyond the plain Viterbi path: n-best lists, constrained decoding
(allowed labels per token, forbidden label pairs, allowed first / last labels), posterior decoding.

Constraints are applied to the scores themselves: a label a token may not take has emission score
-inf, a forbidden pair transition score -inf (exp-domain weight 0).  The recursions of
:mod:`crfkit.kernels.chain` then compute the quantities of the distribution restricted to the label
sequences the constraints allow (p(y | x, y allowed) = p(y | x) / p(allowed | x)): its Viterbi path,
log Z, node marginals and n-best list.  A sequence no label path satisfies gets log Z = -inf, path
score -inf and no n-best entry; the callers (:mod:`crfkit.decode`) report it.

n-best (``_kbest``): a K-best Viterbi.  For every token t and label j it keeps the K best partial
paths ending in (t, j), sorted; the candidates of (t, j) are the L sorted lists of (t-1, i) shifted by
the transition score i -> j, merged by K rounds of a scan over the L list heads (O(K L) per (t, j), so
O(T K L^2) a sequence; for the K of n-best lists, up to a few tens, faster than a heap of the heads,
which was 2x slower at K = 1 and 1.2x at K = 5 on 22 labels).  Exact: every path of the K best ending
in (t, j) extends one of the K best ending in some (t-1, i).

Order of equal scores (ties): among paths of equal score the one whose label sequence, read from the
last token to the first, is lexicographically smaller (by label id) comes first.  At K = 1 this is
the path :func:`crfkit.kernels.chain.viterbi` returns (it keeps the first best previous label and the
first best last label).
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from .batch import _max_len
from .chain import (FAST, MAX_SCALED_TRANSITION_RANGE, _forward_backward_log, add_scores, back_step,
                    bigram_transitions, emissions, emissions_rows, pd_forward_backward,
                    pd_log_partition, pd_node, scaled_forward, transition_matrix, viterbi_m)

_NOPY = dict(cache=True, nogil=True, fastmath=FAST)
NEG = -np.inf


@njit(inline="always", **_NOPY)
def _merge_top(delta, cnt, t, tr, add, K, ov, oi, orr, hv, hi, hr):
    """The K best of the candidates delta[t, r, i] + tr[i] (+ add), r < cnt[t, i], -inf ones left out,
    in rank order (score, then i, then r), into ov / oi / orr; returns how many.

    Each list i is sorted, so its head is its best candidate, and only the lists whose heads are among
    the K best heads (in the same order) can hold one of the K best: every other candidate ranks below
    those K heads.  So one pass over the L heads keeps the K best in a small sorted buffer (hi), and the
    K rounds of the merge scan those lists only (taken by ascending i, so that equal scores go to the
    smaller i as in the rank order): L + K * min(K, L) steps instead of K * L."""
    L = delta.shape[2]
    m = 0
    for i in range(L):
        v = delta[t, 0, i] + tr[i] if cnt[t, i] > 0 else NEG
        hv[i] = v
        if not (v > NEG):
            continue
        if m == K and not (v > hv[hi[m - 1]]):   # a later i loses a tie
            continue
        p = m if m < K else K - 1
        while p > 0 and v > hv[hi[p - 1]]:
            hi[p] = hi[p - 1]
            p -= 1
        hi[p] = i
        if m < K:
            m += 1
    # the kept lists by ascending i (insertion sort of at most K entries)
    for a in range(1, m):
        x = hi[a]
        b = a
        while b > 0 and hi[b - 1] > x:
            hi[b] = hi[b - 1]
            b -= 1
        hi[b] = x
    for q in range(m):
        hr[hi[q]] = 0
    k = 0
    while k < K:
        best = NEG
        arg = -1
        for q in range(m):
            i = hi[q]
            v = hv[i]
            if v > best:
                best = v
                arg = i
        if arg < 0:
            break
        r = hr[arg]
        ov[k] = best + add
        oi[k] = arg
        orr[k] = r
        k += 1
        r += 1
        hr[arg] = r
        hv[arg] = delta[t, r, arg] + tr[arg] if r < cnt[t, arg] else NEG
    return k


@njit(**_NOPY)
def _kbest(score, T, M, pd, K, delta, bi, br, cnt, trcol, zero, ov, oi, orr, hv, hi, hr,
           out, o0, out_score, s):
    """The K best label paths of the first T rows of ``score`` (transition scores M[t] into token t
    when ``pd``, else M[0]): path k into out[o0:o0+T, k], its score into out_score[s, k]; returns how
    many there are (fewer than K when fewer paths have a finite score).  Work arrays: delta (>=T x K x
    L: delta[t, r, j] the score of the r-th best path ending in (t, j)), bi / br (same, int32: its
    previous label and that one's rank), cnt (>=T x L, int32), trcol (L), zero (L, zeros), ov / oi / orr
    (K), hv / hi / hr (L)."""
    L = score.shape[1]
    for j in range(L):
        v = score[0, j]
        if v > NEG:
            delta[0, 0, j] = v
            bi[0, 0, j] = -1
            br[0, 0, j] = 0
            cnt[0, j] = 1
        else:
            cnt[0, j] = 0
    for t in range(1, T):
        Mt = M[t] if pd else M[0]
        for j in range(L):
            if not (score[t, j] > NEG):
                cnt[t, j] = 0
                continue
            for i in range(L):
                trcol[i] = Mt[i, j]
            n = _merge_top(delta, cnt, t - 1, trcol, score[t, j], K, ov, oi, orr, hv, hi, hr)
            for k in range(n):
                delta[t, k, j] = ov[k]
                bi[t, k, j] = oi[k]
                br[t, k, j] = orr[k]
            cnt[t, j] = n
    n = _merge_top(delta, cnt, T - 1, zero, 0.0, K, ov, oi, orr, hv, hi, hr)
    for k in range(n):
        out_score[s, k] = ov[k]
        j = oi[k]
        r = orr[k]
        for t in range(T - 1, -1, -1):
            out[o0 + t, k] = j
            if t > 0:
                j2 = bi[t, r, j]
                r = br[t, r, j]
                j = j2
    for k in range(n, K):
        out_score[s, k] = NEG
        for t in range(T):
            out[o0 + t, k] = -1
    return n


@njit(**_NOPY)
def _path_score(score, T, M, pd, y, t0):
    s = 0.0
    for t in range(T):
        s += score[t, y[t0 + t]]
        if t > 0:
            s += (M[t] if pd else M[0])[y[t0 + t - 1], y[t0 + t]]
    return s


@njit(**_NOPY)
def _fb(score, T, trans, expM, tmax, rng, es, alpha, beta, scale, backward):
    """Forward(-backward) with one transition matrix whose forbidden pairs are -inf in ``trans`` and 0
    in ``expM`` (``tmax``/``rng``: max and range over the finite pairs).  Returns log Z; the node
    marginals are alpha * beta when ``backward``."""
    L = trans.shape[0]
    if rng <= MAX_SCALED_TRANSITION_RANGE:
        logz = scaled_forward(score, T, expM, tmax, es, alpha, scale)
        if np.isfinite(logz):
            if backward:
                for j in range(L):
                    beta[T - 1, j] = 1.0
                tmp = np.empty(L)
                for t in range(T - 2, -1, -1):
                    back_step(beta, t, expM, es, t + 1, 1.0 / scale[t + 1], tmp)
            return logz
    return _forward_backward_log(score, T, trans, es, alpha, beta, scale)


@njit(parallel=True, cache=True, fastmath=FAST)
def decode_constrained(seq_ptr, tok_ptr, attr, val, btok_ptr, battr, bval, attr_ptr, feat_label, trans_index,
                       battr_ptr, bfeat_pair, w, n_state, boff, bounds, xs, full,
                       allowed, forbid, start_ok, end_ok, posterior,
                       ids, path_score, marg, logz, labels, label_score, K, nb_ids, nb_score, nb_count):
    """Per sequence, under the constraints, whatever is asked for (zero-length output: not wanted):

    * ``ids`` (n_tokens) and ``path_score`` (n_seq): the best path and its score (with ``posterior``:
      the path maximising the sum of the node marginals among the allowed ones -- per token the
      max-marginal label when nothing forbids a pair -- and its score under the model);
    * ``marg`` (n_tokens x L): node marginals; ``logz`` (n_seq): log Z of the allowed paths;
    * ``label_score`` (n_seq): the score of the given ``labels`` (-inf when they break a constraint);
    * ``nb_ids`` (n_tokens x K), ``nb_score`` (n_seq x K), ``nb_count`` (n_seq): the K best paths.

    Constraints: ``allowed`` (n_tokens x L, uint8; no rows: every label), ``forbid`` (L x L, uint8: 1
    for a forbidden pair), ``start_ok`` / ``end_ok`` (L, uint8: labels allowed first / last).  Model
    arrays as :func:`crfkit.kernels.batch.decode_all_bigram` (a corpus without bigram attributes:
    ``battr`` empty); ``full``: as in ``decode_all`` (no rows: the plain scatter).
    """
    trans = transition_matrix(w, 1.0, n_state, trans_index)
    L = trans.shape[0]
    pd = battr.shape[0] > 0
    tmax0 = trans.max()
    expM0 = np.exp(trans - tmax0)            # unconstrained, for bigram_transitions
    tc = trans.copy()
    for i in range(L):
        for j in range(L):
            if forbid[i, j]:
                tc[i, j] = NEG
    tmax = NEG
    tmin = np.inf
    for i in range(L):
        for j in range(L):
            if tc[i, j] > NEG:
                tmax = max(tmax, tc[i, j])
                tmin = min(tmin, tc[i, j])
    if tmax == NEG:
        tmax = 0.0
        tmin = 0.0
    expMc = np.exp(tc - tmax)
    rng = tmax - tmin
    Mc = np.empty((1, L, L))
    Mc[0] = tc
    want_path = ids.shape[0] > 0
    want_marg = marg.shape[0] > 0
    want_logz = logz.shape[0] > 0
    want_score = label_score.shape[0] > 0
    want_nb = nb_count.shape[0] > 0
    masked = allowed.shape[0] > 0
    zero = np.zeros(L)
    # the posterior path: transitions 0 (allowed) or -inf (forbidden)
    Mpost = np.zeros((1, L, L))
    for i in range(L):
        for j in range(L):
            if forbid[i, j]:
                Mpost[0, i, j] = NEG
    n_chunks = len(bounds) - 1
    for c in prange(n_chunks):
        s0 = bounds[c]
        s1 = bounds[c + 1]
        maxT = max(_max_len(seq_ptr, s0, s1), 1)
        score = np.empty((maxT, L))
        es = np.empty((maxT, L))
        alpha = np.empty((maxT, L))
        beta = np.empty((maxT, L))
        scale = np.empty(maxT)
        nM = maxT if pd else 0
        M = np.empty((nM, L, L))
        expM = np.empty((nM, L, L))
        tmx = np.empty(nM)
        pscore = np.empty((maxT if posterior else 0, L))
        Kw = K if want_nb else 0
        Tw = maxT if want_nb else 0
        delta = np.empty((Tw, Kw, L))
        bi = np.empty((Tw, Kw, L), dtype=np.int32)
        br = np.empty((Tw, Kw, L), dtype=np.int32)
        cnt = np.empty((Tw, L), dtype=np.int32)
        trcol = np.empty(L)
        ov = np.empty(Kw)
        oi = np.empty(Kw, dtype=np.int32)
        orr = np.empty(Kw, dtype=np.int32)
        hv = np.empty(L)
        hi = np.empty(L, dtype=np.int32)
        hr = np.empty(L, dtype=np.int32)
        for s in range(s0, s1):
            t0 = seq_ptr[s]
            T = seq_ptr[s + 1] - t0
            if T == 0:
                if want_path:
                    path_score[s] = 0.0
                if want_logz:
                    logz[s] = 0.0
                if want_score:
                    label_score[s] = 0.0
                if want_nb:
                    nb_count[s] = 1
                    nb_score[s, 0] = 0.0
                    for k in range(1, K):
                        nb_score[s, k] = NEG
                continue
            if full.shape[0] > 0:
                emissions_rows(tok_ptr, attr, val, t0, t0 + T, attr_ptr, feat_label, full, w, 1.0, score)
            else:
                emissions(tok_ptr, attr, val, t0, t0 + T, attr_ptr, feat_label, w, 1.0, score)
            add_scores(xs, t0, T, score)
            feasible = True
            for t in range(T):
                any_ok = False
                for l in range(L):
                    ok = True
                    if masked and not allowed[t0 + t, l]:
                        ok = False
                    if t == 0 and not start_ok[l]:
                        ok = False
                    if t == T - 1 and not end_ok[l]:
                        ok = False
                    if ok:
                        any_ok = True
                    else:
                        score[t, l] = NEG
                if not any_ok:
                    feasible = False
            rngp = 0.0
            if pd:
                rngp = bigram_transitions(btok_ptr, battr, bval, t0, T, battr_ptr, bfeat_pair, w, boff, trans,
                                          M, tmx, expM0, tmax0, expM)
                for t in range(1, T):
                    for i in range(L):
                        for j in range(L):
                            if forbid[i, j]:
                                M[t, i, j] = NEG
                                expM[t, i, j] = 0.0
            MM = M if pd else Mc
            if want_score:
                label_score[s] = _path_score(score, T, MM, pd, labels, t0) if feasible else NEG
            lz = NEG
            if feasible and (want_marg or want_logz or posterior):
                if pd:
                    if want_marg or posterior:
                        lz = pd_forward_backward(score, T, M, tmx, rngp, expM, es, alpha, beta, scale)
                        pd_node(T, alpha, beta, scale)
                    else:
                        lz = pd_log_partition(score, T, M, tmx, rngp, expM, es, alpha, scale)
                else:
                    lz = _fb(score, T, tc, expMc, tmax, rng, es, alpha, beta, scale, want_marg or posterior)
                    if want_marg or posterior:
                        for t in range(T):
                            for l in range(L):
                                alpha[t, l] *= beta[t, l]
                if not (lz > NEG):
                    lz = NEG
                    feasible = False
            if want_logz:
                logz[s] = lz
            if want_marg:
                for t in range(T):
                    for l in range(L):
                        marg[t0 + t, l] = alpha[t, l] if feasible else 0.0
            if want_path:
                if not feasible:
                    for t in range(T):
                        ids[t0 + t] = 0
                    path_score[s] = NEG
                elif posterior:
                    for t in range(T):
                        for l in range(L):
                            pscore[t, l] = alpha[t, l] if score[t, l] > NEG else NEG
                    viterbi_m(pscore, T, Mpost, False, ids, t0)
                    path_score[s] = _path_score(score, T, MM, pd, ids, t0)
                else:
                    path_score[s] = viterbi_m(score, T, MM, pd, ids, t0)
            if want_nb:
                if feasible:
                    nb_count[s] = _kbest(score, T, MM, pd, K, delta, bi, br, cnt, trcol, zero, ov, oi, orr,
                                         hv, hi, hr, nb_ids, t0, nb_score, s)
                else:
                    nb_count[s] = 0
                    for k in range(K):
                        nb_score[s, k] = NEG
                        for t in range(T):
                            nb_ids[t0 + t, k] = -1
