"""BCD's position-dependent transitions (label-pair x observation features): the transition rows of
a position or a sequence built from the current weights, the layout of a joint block, and the
transition statistics and ``log Z`` of every sequence with per-position transitions
(a joint block's gradient is in :mod:`crfkit.kernels.bcd_joint_grad`, their sweep in
:mod:`crfkit.kernels.bcd_joint`).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .chain_exp import FAST, MAX_SCALED_TRANSITION_RANGE, exp_shift_into
from .chain_window import (
    window_backward_pd,
    window_forward_pd,
    window_logz_at,
)

_NOPY = dict(cache=True, nogil=True, fastmath=FAST)


# ================================================================== position-dependent transitions
# With label-pair x observation ("bigram") features the transition scores into token r are
# M_r = trans + sum over the bigram attributes b of r of value_b * W_b (see crfkit.kernels.chain's
# bigram_transitions).  Nothing per position is cached: the kernels below build, for the sequence a
# block touches, the flat L*L rows M[t] (scores), EX[t] = exp(M[t] - TM[t]) and TM[t] = max M[t] of
# the positions they need (1 <= t < T) into per-call scratch of Tmax rows, from the current weights.
# Rows whose bigram features with a non-zero weight touch few label pairs are made from the global
# expM0 = exp(trans - tmax0) times one factor, with exp taken again only at the touched pairs (an
# L1-trained model has few; the same rule as bigram_transitions).  Every row spans at most
# MAX_SCALED_TRANSITION_RANGE while the weights are those of the caches (checked when the caches are
# made and on every trial step that changes transitions), so the scaled recursions hold.


@njit(**_NOPY)
def range_of(x):
    """(max, min) of a non-empty 1-D array of finite values, in four independent chains (one chain
    is bound by its latency; a max or min of finite values does not depend on the order)."""
    n = x.shape[0]
    a0 = a1 = a2 = a3 = x[0]
    b0 = b1 = b2 = b3 = x[0]
    n4 = n - n % 4
    for q in range(0, n4, 4):
        x0 = x[q]
        x1 = x[q + 1]
        x2 = x[q + 2]
        x3 = x[q + 3]
        a0 = max(a0, x0)
        a1 = max(a1, x1)
        a2 = max(a2, x2)
        a3 = max(a3, x3)
        b0 = min(b0, x0)
        b1 = min(b1, x1)
        b2 = min(b2, x2)
        b3 = min(b3, x3)
    mx = max(max(a0, a1), max(a2, a3))
    mn = min(min(b0, b1), min(b2, b3))
    for q in range(n4, n):
        mx = max(mx, x[q])
        mn = min(mn, x[q])
    return mx, mn


@njit(**_NOPY)
def pos_trans(
    r, btok_ptr, battr, bval, battr_ptr, bfeat_pair, bfull, w, boff, trans, expM0, tmax0, Mt, Et
):
    """Mt (L*L) = transition scores into token r, Et = exp(Mt - max); returns (max, min) of Mt.
    ``bfull``: per bigram attribute, 1 when its features are every label pair in pair order
    (:attr:`crfkit.model.FeatureSpace.bigram_full_rows`): its weights are added as one vector
    (adding the zero weights changes nothing), the others feature by feature."""
    L = trans.shape[0]
    LL = L * L
    for i in range(L):
        for j in range(L):
            Mt[i * L + j] = trans[i, j]
    nnz = 0
    for e in range(btok_ptr[r], btok_ptr[r + 1]):
        b = battr[e]
        v = bval[e]
        k0 = battr_ptr[b]
        k1 = battr_ptr[b + 1]
        wb = w[boff + k0 : boff + k1]
        if bfull[b]:
            c = 0
            for k in range(LL):
                x = wb[k]
                Mt[k] += x * v
                c += 1 if x != 0.0 else 0
            nnz += c
        else:
            pb = bfeat_pair[k0:k1]
            for k in range(k1 - k0):
                x = wb[k]
                if x != 0.0:
                    Mt[pb[k]] += x * v
                    nnz += 1
    mx, mn = range_of(Mt)
    if 6 * nnz > LL or tmax0 - mx > MAX_SCALED_TRANSITION_RANGE:
        exp_shift_into(Mt, mx, Et)
    else:
        c = np.exp(tmax0 - mx)
        for i in range(L):
            for j in range(L):
                Et[i * L + j] = expM0[i, j] * c
        for e in range(btok_ptr[r], btok_ptr[r + 1]):
            b = battr[e]
            k0 = battr_ptr[b]
            k1 = battr_ptr[b + 1]
            wb = w[boff + k0 : boff + k1]
            if bfull[b]:  # (pairs implicit or not: feature k0 + q is pair q)
                for q in range(LL):
                    if wb[q] != 0.0:
                        Et[q] = np.exp(Mt[q] - mx)
            else:
                pb = bfeat_pair[k0:k1]
                for q in range(k1 - k0):
                    if wb[q] != 0.0:
                        p = pb[q]
                        Et[p] = np.exp(Mt[p] - mx)
    return mx, mn


@njit(**_NOPY)
def seq_trans(
    s0,
    ta,
    tb,
    btok_ptr,
    battr,
    bval,
    battr_ptr,
    bfeat_pair,
    bfull,
    w,
    boff,
    trans,
    expM0,
    tmax0,
    M,
    EX,
    TM,
):
    """M[t], EX[t], TM[t] for positions max(ta, 1)..tb of the sequence starting at token s0; returns
    the largest range (max - min) of those rows."""
    rng = 0.0
    for t in range(max(ta, 1), tb + 1):
        mx, mn = pos_trans(
            s0 + t,
            btok_ptr,
            battr,
            bval,
            battr_ptr,
            bfeat_pair,
            bfull,
            w,
            boff,
            trans,
            expM0,
            tmax0,
            M[t],
            EX[t],
        )
        TM[t] = mx
        if mx - mn > rng:
            rng = mx - mn
    return rng


@njit(inline="always", **_NOPY)
def block_parts(j, ua, ub, attr_ptr, battr_ptr, boff):
    """(first weight, count) of the state part and of the label-pair part of joint block j (count 0
    when the block has no such part), and the offset of the label-pair part's features in
    battr_ptr / bfeat_pair."""
    a = ua[j]
    b = ub[j]
    ku, nku = 0, 0
    if a >= 0:
        ku = attr_ptr[a]
        nku = attr_ptr[a + 1] - ku
    kp, nkp, kabs = 0, 0, 0
    if b >= 0:
        kp = battr_ptr[b]
        nkp = battr_ptr[b + 1] - kp
        kabs = boff + kp
    return ku, nku, kp, nkp, kabs


@njit(parallel=True, cache=True, fastmath=FAST)
def transition_stats_pd(
    seq_ptr,
    bounds,
    Tmax,
    ES,
    EM,
    btok_ptr,
    battr,
    bval,
    battr_ptr,
    bfeat_pair,
    bfull,
    w,
    boff,
    trans,
    expM0,
    tmax0,
    lz,
    EC,
    SQ,
    sw,
):
    """:func:`transition_stats` with position-dependent transitions (built per sequence)."""
    L = ES.shape[1]
    LL = L * L
    nc = len(bounds) - 1
    for c in prange(nc):
        alpha = np.empty((Tmax, L))
        beta = np.empty((Tmax, L))
        la = np.empty(Tmax)
        lb = np.empty(Tmax)
        tmp = np.empty(L)
        M = np.empty((Tmax, LL))
        EX = np.empty((Tmax, LL))
        TM = np.empty(Tmax)
        for i in range(L):
            for j in range(L):
                EC[c, i, j] = 0.0
                SQ[c, i, j] = 0.0
        for s in range(bounds[c], bounds[c + 1]):
            s0 = seq_ptr[s]
            T = seq_ptr[s + 1] - s0
            seq_trans(
                s0,
                1,
                T - 1,
                btok_ptr,
                battr,
                bval,
                battr_ptr,
                bfeat_pair,
                bfull,
                w,
                boff,
                trans,
                expM0,
                tmax0,
                M,
                EX,
                TM,
            )
            window_forward_pd(ES, EM, s0, 0, T - 1, EX, TM, alpha, la)
            window_backward_pd(ES, EM, s0, T, 0, EX, TM, beta, lb, tmp)
            logz = window_logz_at(alpha, la, beta, lb, T - 1)
            lz[s] = logz
            ws = 1.0 if sw.shape[0] == 0 else sw[s]
            for t in range(1, T):
                r = s0 + t
                f = np.exp(la[t - 1] + TM[t] + EM[r] + lb[t] - logz)
                for j in range(L):
                    tmp[j] = ES[r, j] * beta[t, j] * f
                Et = EX[t]
                for i in range(L):
                    ai = alpha[t - 1, i]
                    for j in range(L):
                        p = ai * Et[i * L + j] * tmp[j]
                        EC[c, i, j] += ws * p
                        SQ[c, i, j] += ws * p * p


@njit(parallel=True, cache=True, fastmath=FAST)
def all_logz_pd(
    seq_ptr,
    bounds,
    Tmax,
    ES,
    EM,
    btok_ptr,
    battr,
    bval,
    battr_ptr,
    bfeat_pair,
    bfull,
    w,
    boff,
    trans,
    expM0,
    tmax0,
    out,
    rngs,
):
    """out[s] = log Z of every sequence with position-dependent transitions; rngs[c] = the largest
    range of a transition row in chunk c (the caller refuses weights where it exceeds the scaled
    limit)."""
    L = ES.shape[1]
    LL = L * L
    nc = len(bounds) - 1
    for c in prange(nc):
        alpha = np.empty((Tmax, L))
        la = np.empty(Tmax)
        M = np.empty((Tmax, LL))
        EX = np.empty((Tmax, LL))
        TM = np.empty(Tmax)
        rng = 0.0
        for s in range(bounds[c], bounds[c + 1]):
            s0 = seq_ptr[s]
            T = seq_ptr[s + 1] - s0
            r = seq_trans(
                s0,
                1,
                T - 1,
                btok_ptr,
                battr,
                bval,
                battr_ptr,
                bfeat_pair,
                bfull,
                w,
                boff,
                trans,
                expM0,
                tmax0,
                M,
                EX,
                TM,
            )
            if r > rng:
                rng = r
            window_forward_pd(ES, EM, s0, 0, T - 1, EX, TM, alpha, la)
            out[s] = la[T - 1]
        rngs[c] = rng
