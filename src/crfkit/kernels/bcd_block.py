"""BCD's attribute blocks (Lavergne, Cappé & Yvon 2010, §3.4, §4.1): the statistic slots, the
inverted index and the emission caches, one block's gradient and curvature from truncated
recursions, the Newton step with its window-only trial ``log Z``, the sweep over blocks, and the
transition block's statistics.  See :mod:`crfkit.kernels.bcd` for the caches and the recursions'
conventions.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .chain_exp import FAST, row_exp
from .chain_window import window_backward, window_backward_from, window_forward, window_logz_at

_NOPY = dict(cache=True, nogil=True, fastmath=FAST)

# slots of the per-call statistics array
ST_ORACLE, ST_TRIALS, ST_ACCEPT, ST_REJECT, ST_SKIP, ST_DF, ST_SHRUNK = 0, 1, 2, 3, 4, 5, 6
N_STATS = 7


# ------------------------------------------------------------------ index and caches
@njit(**_NOPY)
def build_index(seq_ptr, tok_ptr, attr, val, n_attr):
    """Inverted index attribute -> sequences -> occurrences; returns (ap, gseq, gptr, otok,
    oval)."""
    n = len(seq_ptr) - 1
    nocc = np.zeros(n_attr, np.int64)
    ngrp = np.zeros(n_attr, np.int64)
    last_t = np.full(n_attr, -1, np.int64)
    last_s = np.full(n_attr, -1, np.int64)
    for s in range(n):
        for t in range(seq_ptr[s], seq_ptr[s + 1]):
            for e in range(tok_ptr[t], tok_ptr[t + 1]):
                a = attr[e]
                if last_s[a] != s:
                    last_s[a] = s
                    ngrp[a] += 1
                if last_t[a] != t:
                    last_t[a] = t
                    nocc[a] += 1
    ap = np.zeros(n_attr + 1, np.int64)
    op = np.zeros(n_attr + 1, np.int64)
    for a in range(n_attr):
        ap[a + 1] = ap[a] + ngrp[a]
        op[a + 1] = op[a] + nocc[a]
    G = ap[n_attr]
    gseq = np.empty(G, np.int64)
    gptr = np.empty(G + 1, np.int64)
    otok = np.empty(op[n_attr], np.int64)
    oval = np.empty(op[n_attr], np.float64)
    gcur = ap[:n_attr].copy()
    ocur = op[:n_attr].copy()
    last_t[:] = -1
    last_s[:] = -1
    for s in range(n):
        for t in range(seq_ptr[s], seq_ptr[s + 1]):
            for e in range(tok_ptr[t], tok_ptr[t + 1]):
                a = attr[e]
                if last_s[a] != s:
                    last_s[a] = s
                    g = gcur[a]
                    gseq[g] = s
                    gptr[g] = ocur[a]
                    gcur[a] += 1
                if last_t[a] != t:
                    last_t[a] = t
                    o = ocur[a]
                    otok[o] = t
                    oval[o] = val[e]
                    ocur[a] += 1
                else:
                    oval[ocur[a] - 1] += val[e]
    gptr[G] = op[n_attr]
    return ap, gseq, gptr, otok, oval


@njit(**_NOPY)
def exp_row(E, r, ES, EM):
    EM[r] = row_exp(E, r, ES)


@njit(parallel=True, cache=True, fastmath=FAST)
def exp_rows(E, ES, EM):
    """ES, EM from E for every token."""
    for r in prange(E.shape[0]):
        exp_row(E, r, ES, EM)


@njit(**_NOPY)
def transition_scores(w, n_state, trans_index, out):
    """out (L x L) = transition scores (0 for pairs without a feature); returns (tmax, tmin)."""
    L = trans_index.shape[0]
    for i in range(L):
        for j in range(L):
            k = trans_index[i, j]
            out[i, j] = w[n_state + k] if k >= 0 else 0.0
    return out.max(), out.min()


# ------------------------------------------------------------------ one attribute block
@njit(**_NOPY)
def block_grad(
    a,
    ap,
    gseq,
    gptr,
    otok,
    oval,
    seq_ptr,
    attr_ptr,
    feat_label,
    ES,
    EM,
    expM,
    tmax,
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
    """Sums over the sequences containing attribute ``a`` of the expected counts of its features
    (``G[kk] = sum_occ v p_t(label_kk)``) and of the per-position variances
    (``H[kk] = sum_occ v^2 p (1-p)``), by truncated forward-backward; stores per group what a trial
    step needs (``A0``/``LA0`` the forward message before the window, ``B1``/``LB1`` the backward
    one at its end, ``LZ0`` log Z).

    Messages kept between blocks: ``CA``/``CLA`` and ``CB``/``CLB`` (tokens x L, tokens) hold every
    sequence's last normalised forward and backward messages and their log-scales; ``VA[i]``:
    sequence i's forward messages at positions ``<= VA[i]`` are those of the current weights,
    ``VB[i]``: its backward ones at ``>= VB[i]`` (``VA = -1``, ``VB = T``: none).  A block runs the
    forward recursion only over ``VA[i]+1..t2`` and the backward one only over ``VB[i]-1..t1``; the
    messages it reuses are what a recursion from the start would give, to the bit (the same weights,
    the same operations).  The caller lowers ``VA[i]`` to ``t1 - 1`` and raises ``VB[i]`` to ``t2``
    when a step changes the block's weights, and resets every marker when the transitions change."""
    k0, k1 = attr_ptr[a], attr_ptr[a + 1]
    nk = k1 - k0
    L = expM.shape[0]
    for kk in range(nk):
        G[kk] = 0.0
        H[kk] = 0.0
    for gi in range(ap[a + 1] - ap[a]):
        g = ap[a] + gi
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
        if VA[i] < t2:
            window_forward(ES, EM, s0, VA[i] + 1, t2, expM, tmax, alpha, la)
            VA[i] = t2
        if VB[i] > t1:
            window_backward_from(ES, EM, s0, T, VB[i], t1, expM, tmax, beta, lb, tmp)
            VB[i] = t1
        LZ0[gi] = window_logz_at(alpha, la, beta, lb, t2)
        if t1 > 0:
            for j in range(L):
                A0[gi, j] = alpha[t1 - 1, j]
            LA0[gi] = la[t1 - 1]
        for j in range(L):
            B1[gi, j] = beta[t2, j]
        LB1[gi] = lb[t2]
        for o in range(o0, o1):
            t = otok[o] - s0
            v = oval[o] * ws
            z = 0.0
            for j in range(L):
                z += alpha[t, j] * beta[t, j]
            invz = 1.0 / z
            for kk in range(nk):
                y = feat_label[k0 + kk]
                p = alpha[t, y] * beta[t, y] * invz
                G[kk] += v * p
                H[kk] += v * oval[o] * p * (1.0 - p)


@njit(**_NOPY)
def _window_logz(
    gi,
    g,
    seq_ptr,
    gseq,
    gptr,
    otok,
    oval,
    E,
    ES,
    EM,
    expM,
    tmax,
    dl,
    step,
    A0,
    LA0,
    B1,
    LB1,
    cur,
    nxt,
    es,
):
    """log Z of the sequence of group ``g`` after the emissions at its occurrences change by
    ``step * v * dl``: forward over the window t1..t2 only."""
    L = expM.shape[0]
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
        if o < o1 and otok[o] == r:
            sv = step * oval[o]
            m = E[r, 0] + sv * dl[0]
            for j in range(1, L):
                x = E[r, j] + sv * dl[j]
                if x > m:
                    m = x
            for j in range(L):
                es[j] = np.exp(E[r, j] + sv * dl[j] - m)
            o += 1
        else:
            m = EM[r]
            for j in range(L):
                es[j] = ES[r, j]
        if t == 0:
            for j in range(L):
                nxt[j] = es[j]
            base = m
        else:
            for j in range(L):
                nxt[j] = 0.0
            for ii in range(L):
                c = cur[ii]
                if c != 0.0:
                    for j in range(L):
                        nxt[j] += c * expM[ii, j]
            for j in range(L):
                nxt[j] *= es[j]
            base = lcur + m + tmax
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
def _soft(z, r):
    if z > r:
        return z - r
    if z < -r:
        return z + r
    return 0.0


@njit(**_NOPY)
def newton_direction(w, k0, nk, G, H, emp, e0, inv_n, l1, l2, kappa, d):
    """Direction d of eq. (10)-(11) with the L2 term exact: w + d = s(h w - g, l1) / (h + l2), where
    g and h are the loss's block gradient and (kappa-scaled) diagonal curvature; returns the model's
    decrease Delta = g.d + (l2/2)(|w+d|^2 - |w|^2) + l1(|w+d|_1 - |w|_1) (<= 0; 0 when d = 0).  The
    block's weights are ``w[k0:k0+nk]``, its empirical counts ``emp[e0:e0+nk]``."""
    delta = 0.0
    for kk in range(nk):
        k = k0 + kk
        g = (G[kk] - emp[e0 + kk]) * inv_n
        h = kappa * H[kk] * inv_n
        den = h + l2
        if den < 1e-12:
            den = 1e-12
        x = w[k]
        xn = _soft(h * x - g, l1) / den
        d[kk] = xn - x
        delta += g * d[kk] + 0.5 * l2 * (xn * xn - x * x) + l1 * (abs(xn) - abs(x))
    return delta


@njit(**_NOPY)
def curvature_scale(G, H, emp, e0, nk):
    """Wapiti's safeguard in place of a line search: the factor ``max(1, max_k |g_k / h_k|)`` on a
    block's diagonal curvature (g = G - emp, h = H; the ratio does not depend on the 1/n scaling),
    so that no coordinate's Newton step exceeds 1 / kappa in size before the penalties.  Coordinates
    with h = 0 are left out of the maximum (Wapiti's would make it infinite)."""
    a = 1.0
    for kk in range(nk):
        h = H[kk]
        if h > 0.0:
            r = abs(G[kk] - emp[e0 + kk]) / h
            if r > a:
                a = r
    return a


@njit(**_NOPY)
def pen_change(w, k0, nk, d, step, l1, l2):
    out = 0.0
    for kk in range(nk):
        x = w[k0 + kk]
        xn = x + step * d[kk]
        out += 0.5 * l2 * (xn * xn - x * x) + l1 * (abs(xn) - abs(x))
    return out


@njit(inline="always", **_NOPY)
def capped_step(d, nk, max_step):
    """The Armijo trials' first step: 1, or ``max_step / max|d|`` where that is smaller."""
    dmax = 0.0
    for kk in range(nk):
        if abs(d[kk]) > dmax:
            dmax = abs(d[kk])
    return max_step / dmax if dmax > max_step else 1.0


@njit(inline="always", **_NOPY)
def group_changed(gi, g, gseq, gptr, otok, seq_ptr, hscale, lz, NLZ, VA, VB):
    """An accepted step changed group ``g``'s sequence at its occurrences: its log Z is the trial's
    (``NLZ[gi]``; left stale under ``hscale``), and its kept messages from the first changed
    position on (forward) and before the last (backward) no longer hold."""
    i = gseq[g]
    if not hscale:
        lz[i] = NLZ[gi]
    s0 = seq_ptr[i]
    VA[i] = min(VA[i], otok[gptr[g]] - s0 - 1)
    VB[i] = max(VB[i], otok[gptr[g + 1] - 1] - s0)


@njit(**_NOPY)
def sweep_blocks(
    order,
    b0,
    b1,
    ap,
    gseq,
    gptr,
    otok,
    oval,
    seq_ptr,
    attr_ptr,
    feat_label,
    emp,
    w,
    E,
    ES,
    EM,
    lz,
    expM,
    tmax,
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
    cur,
    nxt,
    es,
    stats,
    sw,
):
    """One prox-Newton step with backtracking on each attribute block order[b0:b1], in turn.

    A block with no occurrence gets its exact minimiser (0 when l1 or l2 > 0).  Otherwise: block
    gradient and diagonal (truncated forward-backward on its sequences), direction of eq. (10)-(11),
    step ``min(1, max_step / max|d|)`` halved until the objective change (exact, from the window
    log Z's) is at most ``sigma * step * Delta`` (Tseng & Yun's Armijo rule) -- at most ``max_back``
    halvings, after which the block is left unchanged.  Blocks whose predicted decrease -Delta is
    below ``skip_tol`` (times its share of sequences) are left unchanged (already optimal to
    rounding).  Accepted steps update w, E/ES/EM at the occurrences, lz of the touched sequences and
    their message markers (the messages are kept between blocks, see :func:`block_grad`).

    ``hscale`` (``safeguard="scale"``, Wapiti's rule): the block's curvatures are multiplied by
    :func:`curvature_scale` and the whole step is taken with no trial and no ``max_step`` cap;
    ``lz`` is then left stale (the driver recomputes it after the sweep).

    Shrinking (``max_skip > 0``): a block found at zero and staying there (``w = 0`` and ``d = 0``:
    ``|g| <= l1``) for the ``zrun[a]``-th time in a row is left out of the next
    ``min(2^(zrun[a]-1), max_skip)`` visits (``skip[a]`` counts them down).
    """
    L = expM.shape[0]
    for b in range(b0, b1):
        a = order[b]
        if skip[a] > 0:
            skip[a] -= 1
            stats[ST_SHRUNK] += 1
            continue
        k0 = attr_ptr[a]
        nk = attr_ptr[a + 1] - k0
        if nk == 0:
            continue
        ng = ap[a + 1] - ap[a]
        if ng == 0:
            if l1 > 0.0 or l2 > 0.0:
                dF = 0.0
                for kk in range(nk):
                    x = w[k0 + kk]
                    dF -= 0.5 * l2 * x * x + l1 * abs(x)
                    if x != 0.0:  # (an entry is written only when it changes: see the step below)
                        w[k0 + kk] = 0.0
                stats[ST_DF] += dF
            continue
        block_grad(
            a,
            ap,
            gseq,
            gptr,
            otok,
            oval,
            seq_ptr,
            attr_ptr,
            feat_label,
            ES,
            EM,
            expM,
            tmax,
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
        kap = kappa * curvature_scale(G, H, emp, k0, nk) if hscale else kappa
        delta = newton_direction(w, k0, nk, G, H, emp, k0, inv_n, l1, l2, kap, d)
        if max_skip > 0:
            zero = True
            for kk in range(nk):
                if w[k0 + kk] != 0.0 or d[kk] != 0.0:
                    zero = False
                    break
            if zero:
                zrun[a] += 1
                sk = 1
                for _ in range(zrun[a] - 1):
                    sk *= 2
                    if sk >= max_skip:
                        break
                skip[a] = min(sk, max_skip)
            else:
                zrun[a] = 0
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
                gold += d[kk] * emp[k0 + kk]
        for j in range(L):
            dl[j] = 0.0
        for kk in range(nk):
            dl[feat_label[k0 + kk]] = d[kk]
        # hscale (Wapiti's rule): the scaled model's whole step, no trial; lz goes stale (the driver
        # recomputes it)
        accepted = hscale
        dF = 0.0
        if not hscale:
            for _ in range(max_back + 1):
                s = 0.0
                for gi in range(ng):
                    g = ap[a] + gi
                    NLZ[gi] = _window_logz(
                        gi,
                        g,
                        seq_ptr,
                        gseq,
                        gptr,
                        otok,
                        oval,
                        E,
                        ES,
                        EM,
                        expM,
                        tmax,
                        dl,
                        step,
                        A0,
                        LA0,
                        B1,
                        LB1,
                        cur,
                        nxt,
                        es,
                    )
                    if sw.shape[0] == 0:
                        s += NLZ[gi] - LZ0[gi]
                    else:
                        s += sw[gseq[g]] * (NLZ[gi] - LZ0[gi])
                stats[ST_TRIALS] += 1
                stats[ST_ORACLE] += ng
                dF = (s - step * gold) * inv_n + pen_change(w, k0, nk, d, step, l1, l2)
                if dF <= sigma * step * delta:
                    accepted = True
                    break
                step *= 0.5
        if not accepted:
            stats[ST_REJECT] += 1
            continue
        stats[ST_ACCEPT] += 1
        stats[ST_DF] += dF
        for kk in range(nk):
            # only the entries that move are written: a weight that stays at zero leaves its memory
            # page untouched (the weights of a large candidate space are crfkit.memtrim.lazy_zeros,
            # whose pages count only once written; with L1 most of a block's step is zero)
            if d[kk] != 0.0:
                w[k0 + kk] += step * d[kk]
        for gi in range(ng):
            g = ap[a] + gi
            group_changed(gi, g, gseq, gptr, otok, seq_ptr, hscale, lz, NLZ, VA, VB)
            for o in range(gptr[g], gptr[g + 1]):
                r = otok[o]
                sv = step * oval[o]
                for j in range(L):
                    E[r, j] += sv * dl[j]
                exp_row(E, r, ES, EM)


# ------------------------------------------------------------------ the transition block
@njit(parallel=True, cache=True, fastmath=FAST)
def transition_stats(seq_ptr, bounds, Tmax, ES, EM, expM, tmax, lz, EC, SQ, sw):
    """Full forward-backward on every sequence: lz, and per chunk c the expected transition counts
    ``EC[c, i, j] = sum_t sw_s p_t(i, j)`` and ``SQ[c, i, j] = sum_t sw_s p_t(i, j)^2`` (``sw``
    empty: 1)."""
    L = expM.shape[0]
    nc = len(bounds) - 1
    for c in prange(nc):
        alpha = np.empty((Tmax, L))
        beta = np.empty((Tmax, L))
        la = np.empty(Tmax)
        lb = np.empty(Tmax)
        tmp = np.empty(L)
        for i in range(L):
            for j in range(L):
                EC[c, i, j] = 0.0
                SQ[c, i, j] = 0.0
        for s in range(bounds[c], bounds[c + 1]):
            s0 = seq_ptr[s]
            T = seq_ptr[s + 1] - s0
            window_forward(ES, EM, s0, 0, T - 1, expM, tmax, alpha, la)
            window_backward(ES, EM, s0, T, 0, expM, tmax, beta, lb, tmp)
            logz = window_logz_at(alpha, la, beta, lb, T - 1)
            lz[s] = logz
            ws = 1.0 if sw.shape[0] == 0 else sw[s]
            for t in range(1, T):
                r = s0 + t
                f = np.exp(la[t - 1] + tmax + EM[r] + lb[t] - logz)
                for j in range(L):
                    tmp[j] = ES[r, j] * beta[t, j] * f
                for i in range(L):
                    ai = alpha[t - 1, i]
                    for j in range(L):
                        p = ai * expM[i, j] * tmp[j]
                        EC[c, i, j] += ws * p
                        SQ[c, i, j] += ws * p * p


@njit(parallel=True, cache=True, fastmath=FAST)
def all_logz(seq_ptr, bounds, Tmax, ES, EM, expM, tmax, out):
    """out[s] = log Z of every sequence (forward passes)."""
    L = expM.shape[0]
    nc = len(bounds) - 1
    for c in prange(nc):
        alpha = np.empty((Tmax, L))
        la = np.empty(Tmax)
        for s in range(bounds[c], bounds[c + 1]):
            s0 = seq_ptr[s]
            T = seq_ptr[s + 1] - s0
            window_forward(ES, EM, s0, 0, T - 1, expM, tmax, alpha, la)
            out[s] = la[T - 1]  # alpha[T-1] sums to 1 and beta[T-1] = 1
