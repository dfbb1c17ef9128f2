"""BCD with label-pair x observation features: the sweep over the joint blocks of one observation's
state and label-pair features (:func:`sweep_blocks_joint`) and the windowed ``log Z`` of its trial
steps.  The position-dependent transitions built per sequence, the joint blocks' layout, and the
transition statistics and ``log Z`` with per-position transitions are in
:mod:`crfkit.kernels.bcd_pd`; a joint block's gradient in :mod:`crfkit.kernels.bcd_joint_grad`.  The
names this module held before that split are re-exported here (``__all__``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .bcd_block import (
    ST_ACCEPT,
    ST_DF,
    ST_ORACLE,
    ST_REJECT,
    ST_SHRUNK,
    ST_SKIP,
    ST_TRIALS,
    capped_step,
    curvature_scale,
    exp_row,
    group_changed,
    newton_direction,
    pen_change,
)
from .bcd_joint_grad import block_grad_joint
from .bcd_pd import all_logz_pd, block_parts, pos_trans, range_of, transition_stats_pd
from .chain_exp import FAST, MAX_SCALED_TRANSITION_RANGE, exp_shift_into
from .chain_window import (
    prop_flat,
    window_backward_pd,
    window_backward_pd_from,
    window_forward_pd,
    window_logz_at,
)

# the names this module held before it was split keep working from here
__all__ = [
    "all_logz_pd",
    "block_grad_joint",
    "capped_step",
    "curvature_scale",
    "exp_row",
    "exp_shift_into",
    "FAST",
    "group_changed",
    "MAX_SCALED_TRANSITION_RANGE",
    "newton_direction",
    "pen_change",
    "prop_flat",
    "range_of",
    "ST_ACCEPT",
    "ST_DF",
    "ST_ORACLE",
    "ST_REJECT",
    "ST_SHRUNK",
    "ST_SKIP",
    "ST_TRIALS",
    "sweep_blocks_joint",
    "transition_stats_pd",
    "window_backward_pd",
    "window_backward_pd_from",
    "window_forward_pd",
    "window_logz_at",
]


_NOPY = dict(cache=True, nogil=True, fastmath=FAST)


@njit(**_NOPY)
def _window_logz_joint(
    gi,
    g,
    seq_ptr,
    gseq,
    gptr,
    otok,
    oval,
    okind,
    E,
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
    dl,
    dp,
    nzp,
    nnzp,
    step,
    A0,
    LA0,
    B1,
    LB1,
    cur,
    nxt,
    es,
    Mt,
    Et,
):
    """log Z of the sequence of group ``g`` after a trial step of its joint block, forward over the
    window t1..t2 only: the emissions at a state occurrence change by ``step * v * dl``, the
    transition scores into a label-pair occurrence by ``step * v * dp`` (``dp`` dense L*L, non-zero
    at ``nzp[:nnzp]``). NaN when a changed transition row would span more than
    MAX_SCALED_TRANSITION_RANGE (the step is then refused)."""
    L = ES.shape[1]
    LL = L * L
    i = gseq[g]
    s0 = seq_ptr[i]
    o = gptr[g]
    o1 = gptr[g + 1]
    t1 = otok[o] - s0
    t2 = otok[o1 - 1] - s0
    lcur = 0.0
    if t1 > 0:
        for j in range(L):
            cur[j] = A0[gi, j]
        lcur = LA0[gi]
    for t in range(t1, t2 + 1):
        r = s0 + t
        hu = False
        hb = False
        su = 0.0
        sb = 0.0
        while o < o1 and otok[o] == r:
            if okind[o] == 0:
                hu = True
                su = step * oval[o]
            else:
                hb = True
                sb = step * oval[o]
            o += 1
        if hu:
            m = E[r, 0] + su * dl[0]
            for j in range(1, L):
                x = E[r, j] + su * dl[j]
                if x > m:
                    m = x
            for j in range(L):
                es[j] = np.exp(E[r, j] + su * dl[j] - m)
        else:
            m = EM[r]
            for j in range(L):
                es[j] = ES[r, j]
        if t == 0:
            for j in range(L):
                nxt[j] = es[j]
            base = m
        else:
            mx, mn = pos_trans(
                r,
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
                Mt,
                Et,
            )
            if hb and nnzp > 0:
                for q in range(nnzp):
                    p = nzp[q]
                    Mt[p] += sb * dp[p]
                mx2 = Mt[0]
                mn = mx2
                for q in range(LL):
                    x = Mt[q]
                    mx2 = max(mx2, x)
                    mn = min(mn, x)
                if mx2 - mn > MAX_SCALED_TRANSITION_RANGE:
                    return np.nan
                if 6 * nnzp > LL or abs(mx2 - mx) > MAX_SCALED_TRANSITION_RANGE:
                    exp_shift_into(Mt, mx2, Et)
                else:
                    c = np.exp(mx - mx2)
                    for q in range(LL):
                        Et[q] *= c
                    for q in range(nnzp):
                        p = nzp[q]
                        Et[p] = np.exp(Mt[p] - mx2)
                mx = mx2
            prop_flat(cur, Et, es, nxt, L)
            base = lcur + m + mx
        s = 0.0
        for j in range(L):
            s += nxt[j]
        inv = 1.0 / s
        for j in range(L):
            cur[j] = nxt[j] * inv
        lcur = base + np.log(s)
    z = 0.0
    for j in range(L):
        z += cur[j] * B1[gi, j]
    return lcur + LB1[gi] + np.log(z)


@njit(**_NOPY)
def sweep_blocks_joint(
    order,
    b0,
    b1,
    ap,
    gseq,
    gptr,
    otok,
    oval,
    okind,
    ua,
    ub,
    seq_ptr,
    attr_ptr,
    feat_label,
    btok_ptr,
    battr,
    bval,
    battr_ptr,
    bfeat_pair,
    bfull,
    boff,
    trans,
    expM0,
    tmax0,
    emp,
    eptr,
    erel,
    evl,
    ebuf,
    w,
    E,
    ES,
    EM,
    lz,
    inv_n,
    l1,
    l2,
    kappa,
    sigma,
    max_step,
    max_back,
    hscale,
    skip_tol,
    max_skip,
    zrun,
    skip,
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
    NLZ,
    G,
    H,
    d,
    dl,
    dp,
    nzp,
    cur,
    nxt,
    es,
    M,
    EX,
    TM,
    stats,
    sw,
):
    """:func:`sweep_blocks` with label-pair x observation features, on the joint blocks
    ``order[b0:b1]``: block ``j`` holds the state features of attribute ``ua[j]`` and the label-pair
    features of bigram attribute ``ub[j]`` (either may be -1), one observation's features as in
    Wapiti.  Its step is the diagonal prox-Newton step of eq. (10)-(11) on both parts at once, with
    one Armijo backtracking on the exact change of the objective (window log Z's), or with
    ``hscale`` Wapiti's rule (each part's curvatures scaled by :func:`curvature_scale`, the whole
    step, no trial, ``lz`` left stale).  The transitions of a position are built from the weights
    where a forward-backward or a trial needs them (no transition row is cached); the forward and
    backward messages are kept between blocks (``CA`` ... ``VB``, see :func:`block_grad_joint`).  An
    accepted step updates ``w``, the emission caches at its state occurrences, ``lz`` and the
    message markers.  Empirical counts: ``emp`` (dense) those of the features before ``boff`` (state
    and transition features), and those of the label-pair features by bigram attribute ``b``: its
    non-zero ones, ``evl[eptr[b]:eptr[b+1]]`` at the label-pair indices ``erel[...]`` (relative to
    ``boff``; most label pairs never fire with an observation's gold labels); ``ebuf`` (>= L^2)
    holds a block's."""
    L = ES.shape[1]
    for bb in range(b0, b1):
        j = order[bb]
        if skip[j] > 0:
            skip[j] -= 1
            stats[ST_SHRUNK] += 1
            continue
        ku, nku, kp, nkp, kabs = block_parts(j, ua, ub, attr_ptr, battr_ptr, boff)
        nk = nku + nkp
        if nk == 0:
            continue
        ng = ap[j + 1] - ap[j]
        if ng == 0:
            if l1 > 0.0 or l2 > 0.0:
                dF = 0.0
                for kk in range(nk):
                    k = ku + kk if kk < nku else kabs + kk - nku
                    x = w[k]
                    dF -= 0.5 * l2 * x * x + l1 * abs(x)
                    if x != 0.0:
                        w[k] = 0.0
                stats[ST_DF] += dF
            continue
        block_grad_joint(
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
        )
        stats[ST_ORACLE] += ng
        # the label-pair part's empirical counts: the block's few non-zero ones scattered into ebuf
        if nkp > 0:
            b = ub[j]
            for kk in range(nkp):
                ebuf[kk] = 0.0
            for e in range(eptr[b], eptr[b + 1]):
                ebuf[erel[e] - kp] = evl[e]
        ku_kappa = kappa
        kp_kappa = kappa
        if hscale:
            ku_kappa = kappa * curvature_scale(G, H, emp, ku, nku)
            kp_kappa = kappa * curvature_scale(G[nku:], H[nku:], ebuf, 0, nkp)
        delta = newton_direction(
            w, ku, nku, G, H, emp, ku, inv_n, l1, l2, ku_kappa, d
        ) + newton_direction(
            w, kabs, nkp, G[nku:], H[nku:], ebuf, 0, inv_n, l1, l2, kp_kappa, d[nku:]
        )
        if max_skip > 0:
            zero = True
            for kk in range(nk):
                k = ku + kk if kk < nku else kabs + kk - nku
                if w[k] != 0.0 or d[kk] != 0.0:
                    zero = False
                    break
            if zero:
                zrun[j] += 1
                sk = 1
                for _ in range(zrun[j] - 1):
                    sk *= 2
                    if sk >= max_skip:
                        break
                skip[j] = min(sk, max_skip)
            else:
                zrun[j] = 0
        if not (-delta > skip_tol * ng):
            stats[ST_SKIP] += 1
            continue
        step = 1.0
        gold = 0.0
        if not hscale:
            # the Armijo trials' data (the scaled rule needs neither): the step's gold part, the
            # step cap
            step = capped_step(d, nk, max_step)
            for kk in range(nk):
                gold += d[kk] * (emp[ku + kk] if kk < nku else ebuf[kk - nku])
        for jj in range(L):
            dl[jj] = 0.0
        for kk in range(nku):
            dl[feat_label[ku + kk]] = d[kk]
        # hscale (Wapiti's rule): the scaled model's whole step, no trial; lz goes stale (the driver
        # recomputes it)
        accepted = hscale
        dF = 0.0
        if not hscale:
            nnzp = 0
            full = nkp > 0 and bfull[ub[j]] != 0
            for kk in range(nkp):
                if d[nku + kk] != 0.0:
                    p = kk if full else np.int64(bfeat_pair[kp + kk])
                    dp[p] = d[nku + kk]
                    nzp[nnzp] = p
                    nnzp += 1
            for _ in range(max_back + 1):
                s = 0.0
                for gi in range(ng):
                    g = ap[j] + gi
                    NLZ[gi] = _window_logz_joint(
                        gi,
                        g,
                        seq_ptr,
                        gseq,
                        gptr,
                        otok,
                        oval,
                        okind,
                        E,
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
                        dl,
                        dp,
                        nzp,
                        nnzp,
                        step,
                        A0,
                        LA0,
                        B1,
                        LB1,
                        cur,
                        nxt,
                        es,
                        M[0],
                        EX[0],
                    )
                    if sw.shape[0] == 0:
                        s += NLZ[gi] - LZ0[gi]
                    else:
                        s += sw[gseq[g]] * (NLZ[gi] - LZ0[gi])
                stats[ST_TRIALS] += 1
                stats[ST_ORACLE] += ng
                dF = (
                    (s - step * gold) * inv_n
                    + pen_change(w, ku, nku, d, step, l1, l2)
                    + pen_change(w, kabs, nkp, d[nku:], step, l1, l2)
                )
                if dF <= sigma * step * delta:
                    accepted = True
                    break
                step *= 0.5
            for q in range(nnzp):
                dp[nzp[q]] = 0.0
        if not accepted:
            stats[ST_REJECT] += 1
            continue
        stats[ST_ACCEPT] += 1
        stats[ST_DF] += dF
        for kk in range(nk):
            if d[kk] != 0.0:  # (only the entries that move are written, as in sweep_blocks)
                k = ku + kk if kk < nku else kabs + kk - nku
                w[k] += step * d[kk]
        for gi in range(ng):
            g = ap[j] + gi
            group_changed(gi, g, gseq, gptr, otok, seq_ptr, hscale, lz, NLZ, VA, VB)
            if nku > 0:
                for o in range(gptr[g], gptr[g + 1]):
                    if okind[o] == 0:
                        r = otok[o]
                        sv = step * oval[o]
                        for jj in range(L):
                            E[r, jj] += sv * dl[jj]
                        exp_row(E, r, ES, EM)
