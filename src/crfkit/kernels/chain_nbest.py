"""N-best Viterbi (the ``K`` best label paths of one chain, with one transition matrix or
per-position ones; ``-inf`` marks a forbidden pair), for
:func:`crfkit.kernels.decode.decode_constrained`.

Kept apart from :mod:`crfkit.kernels.chain_viterbi`: each position keeps the K best (score, label,
rank) triples merged from L lists, not one maximum; with K = 1 the paths are the Viterbi paths.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .chain_exp import FAST

_NOPY = dict(cache=True, nogil=True, fastmath=FAST)
NEG = -np.inf


@njit(inline="always", **_NOPY)
def _merge_top(delta, cnt, t, tr, add, K, ov, oi, orr, hv, hi, hr):
    """The K best of the candidates delta[t, r, i] + tr[i] (+ add), r < cnt[t, i], -inf ones left
    out, in rank order (score, then i, then r), into ov / oi / orr; returns how many.

    Each list i is sorted, so its head is its best candidate, and only the lists whose heads are
    among the K best heads (in the same order) can hold one of the K best: every other candidate
    ranks below those K heads.  So one pass over the L heads keeps the K best in a small sorted
    buffer (hi), and the K rounds of the merge scan those lists only (taken by ascending i, so that
    equal scores go to the smaller i as in the rank order): L + K * min(K, L) steps instead of
    K * L."""
    L = delta.shape[2]
    m = 0
    for i in range(L):
        v = delta[t, 0, i] + tr[i] if cnt[t, i] > 0 else NEG
        hv[i] = v
        if not (v > NEG):
            continue
        if m == K and not (v > hv[hi[m - 1]]):  # a later i loses a tie
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
def kbest(
    score,
    T,
    M,
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
    out,
    o0,
    out_score,
    s,
):
    """The K best label paths of the first T rows of ``score`` (transition scores M[t] into token t
    when ``pd``, else M[0]): path k into out[o0:o0+T, k], its score into out_score[s, k]; returns
    how many there are (fewer than K when fewer paths have a finite score).  Work arrays: delta
    (>=T x K x L: delta[t, r, j] the score of the r-th best path ending in (t, j)), bi / br (same,
    int32: its previous label and that one's rank), cnt (>=T x L, int32), trcol (L), zero (L,
    zeros), ov / oi / orr (K), hv / hi / hr (L)."""
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
