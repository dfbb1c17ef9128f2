"""BCD with label-pair x observation features: position-dependent transitions built per sequence
where needed, joint blocks of one observation's state and label-pair features, their sweep, and the
transition statistics and ``log Z`` with per-position transitions.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

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
from .chain_exp import FAST, MAX_SCALED_TRANSITION_RANGE, exp_shift_into
from .chain_window import (
    prop_flat,
    window_backward_pd,
    window_backward_pd_from,
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
def _pos_trans(
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
def _seq_trans(
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
        mx, mn = _pos_trans(
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
def _block_parts(j, ua, ub, attr_ptr, battr_ptr, boff):
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
    ku, nku, kp, nkp, kabs = _block_parts(j, ua, ub, attr_ptr, battr_ptr, boff)
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
        _seq_trans(
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
            mx, mn = _pos_trans(
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
        ku, nku, kp, nkp, kabs = _block_parts(j, ua, ub, attr_ptr, battr_ptr, boff)
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
            _seq_trans(
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
            r = _seq_trans(
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
