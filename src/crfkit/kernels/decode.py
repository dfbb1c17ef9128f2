"""Numba kernels for decoding beyond the plain Viterbi path: n-best lists, constrained decoding
(allowed labels per token, forbidden label pairs, allowed first / last labels), posterior decoding.

Constraints are applied to the scores themselves: a label a token may not take has emission score
-inf, a forbidden pair transition score -inf (exp-domain weight 0).  The recursions of
:mod:`crfkit.kernels.chain` then compute the quantities of the distribution restricted to the label
sequences the constraints allow (p(y | x, y allowed) = p(y | x) / p(allowed | x)): its Viterbi path,
log Z, node marginals and n-best list.  A sequence no label path satisfies gets log Z = -inf, path
score -inf and no n-best entry; the callers (:mod:`crfkit.decode`) report it.

n-best (:func:`crfkit.kernels.chain_nbest.kbest`): a K-best Viterbi.  For every token t and label j
it keeps the K best partial paths ending in (t, j), sorted; the candidates of (t, j) are the L
sorted lists of (t-1, i) shifted by the transition score i -> j, merged by K rounds of a scan over
the L list heads (O(K L) per (t, j), so O(T K L^2) a sequence; for the K of n-best lists, up to a
few tens, faster than a heap of the heads, which was 2x slower at K = 1 and 1.2x at K = 5 on 22
labels).  Exact: every path of the K best ending in (t, j) extends one of the K best ending in some
(t-1, i).

Order of equal scores (ties): among paths of equal score the one whose label sequence, read from the
last token to the first, is lexicographically smaller (by label id) comes first.  At K = 1 this is
the path :func:`crfkit.kernels.chain.viterbi` returns (it keeps the first best previous label and
the first best last label).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .batch_common import max_len
from .chain import forward_backward_ranged, gold_score
from .chain_emit import add_scores, emissions, emissions_rows, transition_matrix
from .chain_exp import FAST
from .chain_nbest import NEG, kbest
from .chain_pd import (
    bigram_transitions,
    pd_forward_backward,
    pd_gold_score,
    pd_log_partition,
    pd_node,
)
from .chain_viterbi import viterbi_m

_NOPY = dict(cache=True, nogil=True, fastmath=FAST)


@njit(**_NOPY)
def _path_score(score, T, M, pd, y, t0):
    """The score of path y[t0:t0+T]: the family's gold_score / pd_gold_score (the same additions in
    the same order as the loop this kernel kept before)."""
    if pd:
        return pd_gold_score(score, y, t0, T, M)
    return gold_score(score, y, t0, T, M[0])


@njit(parallel=True, cache=True, fastmath=FAST)
def decode_constrained(
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
    xs,
    full,
    allowed,
    forbid,
    start_ok,
    end_ok,
    posterior,
    ids,
    path_score,
    marg,
    logz,
    labels,
    label_score,
    K,
    nb_ids,
    nb_score,
    nb_count,
):
    """Per sequence, under the constraints, whatever is asked for (zero-length output: not wanted):

    * ``ids`` (n_tokens) and ``path_score`` (n_seq): the best path and its score (with
      ``posterior``: the path maximising the sum of the node marginals among the allowed ones -- per
      token the max-marginal label when nothing forbids a pair -- and its score under the model);
    * ``marg`` (n_tokens x L): node marginals; ``logz`` (n_seq): log Z of the allowed paths;
    * ``label_score`` (n_seq): the score of the given ``labels`` (-inf when they break a
      constraint);
    * ``nb_ids`` (n_tokens x K), ``nb_score`` (n_seq x K), ``nb_count`` (n_seq): the K best paths.

    Constraints: ``allowed`` (n_tokens x L, uint8; no rows: every label), ``forbid`` (L x L, uint8:
    1 for a forbidden pair), ``start_ok`` / ``end_ok`` (L, uint8: labels allowed first / last).
    Model arrays as :func:`crfkit.kernels.batch.decode_all_bigram` (a corpus without bigram
    attributes: ``battr`` empty); ``full``: as in ``decode_all`` (no rows: the plain scatter).
    """
    trans = transition_matrix(w, 1.0, n_state, trans_index)
    L = trans.shape[0]
    pd = battr.shape[0] > 0
    tmax0 = trans.max()
    expM0 = np.exp(trans - tmax0)  # unconstrained, for bigram_transitions
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
        maxT = max(max_len(seq_ptr, s0, s1), 1)
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
                emissions_rows(
                    tok_ptr, attr, val, t0, t0 + T, attr_ptr, feat_label, full, w, 1.0, score
                )
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
                rngp = bigram_transitions(
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
                    tmax0,
                    expM,
                )
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
                        lz = pd_forward_backward(
                            score, T, M, tmx, rngp, expM, es, alpha, beta, scale
                        )
                        pd_node(T, alpha, beta, scale)
                    else:
                        lz = pd_log_partition(score, T, M, tmx, rngp, expM, es, alpha, scale)
                else:
                    lz = forward_backward_ranged(
                        score,
                        T,
                        tc,
                        expMc,
                        tmax,
                        rng,
                        es,
                        alpha,
                        beta,
                        scale,
                        want_marg or posterior,
                    )
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
                    nb_count[s] = kbest(
                        score,
                        T,
                        MM,
                        pd,
                        K,
                        delta,
                        bi,
                        br,
                        cnt,
                        trcol,
                        zero,
                        ov,
                        oi,
                        orr,
                        hv,
                        hi,
                        hr,
                        nb_ids,
                        t0,
                        nb_score,
                        s,
                    )
                else:
                    nb_count[s] = 0
                    for k in range(K):
                        nb_score[s, k] = NEG
                        for t in range(T):
                            nb_ids[t0 + t, k] = -1
