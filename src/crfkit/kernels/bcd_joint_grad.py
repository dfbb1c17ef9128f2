"""The gradient and curvature of one joint block of BCD (an observation's state and label-pair
features with position-dependent transitions): :func:`block_grad_joint`, used by
:func:`crfkit.kernels.bcd_joint.sweep_blocks_joint`.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .bcd_pd import block_parts, seq_trans
from .chain_exp import FAST
from .chain_window import (
    window_backward_pd_from,
    window_forward_pd,
    window_logz_at,
)

_NOPY = dict(cache=True, nogil=True, fastmath=FAST)


@njit(**_NOPY)
def block_grad_joint(
    j,
    ap,
    gseq,
    gptr,
    otok,
    oval,
    okind,
    ua,
    ub,
    attr_ptr,
    feat_label,
    seq_ptr,
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
    M,
    EX,
    TM,
    CA,
    CLA,
    CB,
    CLB,
    VA,
    VB,
    tmp,
    A0,
    LA0,
    B1,
    LB1,
    LZ0,
    G,
    H,
    sw,
):
    """:func:`block_grad` for joint block ``j`` with position-dependent transitions: its state part
    (the features of attribute ``ua[j]``, if any) in ``G[:nku]``/``H[:nku]`` and its label-pair part
    (those of bigram attribute ``ub[j]``, if any) in ``G[nku:]``/``H[nku:]``:
    ``G[kk] = sum_occ v p_t(kk)``, ``H[kk] = sum_occ v^2 p (1 - p)``, with the node marginal of the
    feature's label at a state occurrence (``okind`` 0) and the edge marginal p(y_{t-1} = i,
    y_t = j) of its label pair at a label-pair one (``okind`` 1, never a first token).  One
    truncated forward-backward per sequence serves both parts; stores per group what a trial step
    needs, as block_grad.

    Messages kept between blocks: ``CA``/``CLA`` and ``CB``/``CLB`` (tokens x L, tokens) hold every
    sequence's last normalised forward and backward messages and their log-scales; ``VA[i]``:
    sequence i's forward messages at positions ``<= VA[i]`` are those of the current weights,
    ``VB[i]``: its backward ones at ``>= VB[i]`` (``VA = -1``, ``VB = T``: none).  A block runs the
    forward recursion only over ``VA[i]+1..t2`` and the backward one only over ``VB[i]-1..t1``, and
    builds the transition rows of those positions only; the messages it reuses are what a recursion
    from the start would give, to the bit (the same weights, the same operations).  The caller
    lowers ``VA[i]`` to ``t1 - 1`` and raises ``VB[i]`` to ``t2`` when a step changes the block's
    weights, and resets every marker when the transitions change."""
    ku, nku, kp, nkp, kabs = block_parts(j, ua, ub, attr_ptr, battr_ptr, boff)
    full = (
        nkp > 0 and bfull[ub[j]] != 0
    )  # its label pairs every pair in order (feature kp + kk is pair kk)
    L = ES.shape[1]
    for kk in range(nku + nkp):
        G[kk] = 0.0
        H[kk] = 0.0
    for gi in range(ap[j + 1] - ap[j]):
        g = ap[j] + gi
        i = gseq[g]
        ws = 1.0 if sw.shape[0] == 0 else sw[i]
        s0 = seq_ptr[i]
        T = seq_ptr[i + 1] - s0
        o0, o1 = gptr[g], gptr[g + 1]
        t1 = otok[o0] - s0
        t2 = otok[o1 - 1] - s0
        alpha = CA[s0 : s0 + T]
        la = CLA[s0 : s0 + T]
        beta = CB[s0 : s0 + T]
        lb = CLB[s0 : s0 + T]
        va = VA[i]
        vb = VB[i]
        # the transition rows the recursions and the block's label-pair occurrences read: t1..t2,
        # and the positions the forward (va+1..t2) and backward (t1+1..vb) recursions still have to
        # cross
        lo = t1
        hi = t2
        if va < t2:
            lo = min(lo, va + 1)
        if vb > t1:
            hi = max(hi, min(vb, T - 1))
        seq_trans(
            s0,
            lo,
            hi,
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
        if va < t2:
            window_forward_pd(ES, EM, s0, va + 1, t2, EX, TM, alpha, la)
            VA[i] = t2
        if vb > t1:
            window_backward_pd_from(ES, EM, s0, T, vb, t1, EX, TM, beta, lb, tmp)
            VB[i] = t1
        logz = window_logz_at(alpha, la, beta, lb, t2)
        PM = M[0]
        LZ0[gi] = logz
        if t1 > 0:
            for jj in range(L):
                A0[gi, jj] = alpha[t1 - 1, jj]
            LA0[gi] = la[t1 - 1]
        for jj in range(L):
            B1[gi, jj] = beta[t2, jj]
        LB1[gi] = lb[t2]
        for o in range(o0, o1):
            t = otok[o] - s0
            v = oval[o] * ws
            if okind[o] == 0:
                z = 0.0
                for jj in range(L):
                    z += alpha[t, jj] * beta[t, jj]
                invz = 1.0 / z
                for kk in range(nku):
                    y = feat_label[ku + kk]
                    p = alpha[t, y] * beta[t, y] * invz
                    G[kk] += v * p
                    H[kk] += v * oval[o] * p * (1.0 - p)
            else:
                r = s0 + t
                f = np.exp(la[t - 1] + TM[t] + EM[r] + lb[t] - logz)
                Et = EX[t]
                Gp = G[nku : nku + nkp]
                Hp = H[nku : nku + nkp]
                v2 = v * oval[o]
                if 4 * nkp >= L * L:
                    # most label pairs: the edge marginals of every pair (dense, vectorised, in
                    # M[0]: no transition row is built at position 0), then gathered at the part's
                    # pairs
                    for yi in range(L):
                        ai = alpha[t - 1, yi]
                        er = Et[yi * L : (yi + 1) * L]
                        pr = PM[yi * L : (yi + 1) * L]
                        for yj in range(L):
                            pr[yj] = ai * er[yj] * ES[r, yj] * beta[t, yj] * f
                    if full:  # (pairs implicit or not: feature kp + kk is pair kk)
                        for kk in range(nkp):
                            p = PM[kk]
                            Gp[kk] += v * p
                            Hp[kk] += v2 * p * (1.0 - p)
                    else:
                        pb = bfeat_pair[kp : kp + nkp]
                        for kk in range(nkp):
                            p = PM[pb[kk]]
                            Gp[kk] += v * p
                            Hp[kk] += v2 * p * (1.0 - p)
                else:
                    # a few label pairs (the observed support): each pair's edge marginal alone
                    for kk in range(nkp):
                        q = kk if full else np.int64(bfeat_pair[kp + kk])
                        yi = q // L
                        yj = q - yi * L
                        p = alpha[t - 1, yi] * Et[q] * ES[r, yj] * beta[t, yj] * f
                        Gp[kk] += v * p
                        Hp[kk] += v2 * p * (1.0 - p)
