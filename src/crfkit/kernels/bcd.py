"""Numba kernels of block coordinate descent (Lavergne, Cappé & Yvon 2010, §3.4 and §4.1).

Caches (kept coherent by the kernels that change weights):

* ``E`` (tokens x L): the state-feature emission scores of every token;
* ``ES``, ``EM``: ``ES[t] = exp(E[t] - EM[t])`` with ``EM[t] = max(E[t])``, so
  forward-backward never calls ``exp`` on a row it did not change;
* ``lz`` (n): ``log Z`` of every sequence;
* ``CA``/``CLA``, ``CB``/``CLB`` (tokens x L, tokens) with the markers ``VA``/``VB`` (n): every
  sequence's last forward and backward messages and how far each still holds (:func:`block_grad`).

Recursions (exp domain, every message normalised to sum 1, its log-scale kept
apart): ``alpha~_t = alpha_t * exp(la_t)``, ``beta~_t = beta_t * exp(lb_t)``
and ``Z = exp(la_t + lb_t) * <alpha_t, beta_t>`` at any ``t``.  Transitions
enter as ``expM = exp(trans - tmax)``; while the transition scores span at
most ``MAX_SCALED_TRANSITION_RANGE`` no normaliser can underflow (the caller
checks the span).

Truncated recursions (§4.1): a block of attribute ``a`` needs, in a sequence
where ``a`` occurs at positions ``t1 <= ... <= t2``, the node marginals at
those positions only: the forward recursion runs over ``0..t2`` and the
backward one over ``T-1..t1`` (``T + (t2 - t1) + 1`` steps instead of ``2T``;
one occurrence: about half the work).  Exact, no approximation.  A trial step
changes the emissions at ``t1..t2`` only, so its ``log Z`` needs only the
forward messages over the window ``t1..t2``, started from the stored
``alpha_{t1-1}`` and closed with the stored ``beta_{t2}``.  The messages are
kept between blocks, so a block's recursions start where the last change to
the sequence left them valid (``VA``/``VB``), not at its ends.

Sample weights: ``block_grad``, ``sweep_blocks`` and ``transition_stats`` take ``sw``,
the sequences' scales ``omega_i n / W`` (empty: all 1), by which each sequence's
expected counts, curvature and change of log Z are multiplied.

Label-pair x observation features (``*_pd``, ``*_joint`` kernels): position-dependent transitions
built per sequence where needed (see the section below), joint blocks of one observation's state and
label-pair features (:func:`crfkit.optim.bcd.joint_index`).

Inverted index (``build_index``): for attribute ``a``, its groups
``ap[a]:ap[a+1]``, one per sequence that contains it (``gseq[g]``), each with
its occurrences ``gptr[g]:gptr[g+1]`` (token ``otok``, value ``oval``; entries
of one attribute in one token are merged, their values added), in token order.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from .chain import FAST, MAX_SCALED_TRANSITION_RANGE, back_step, exp_shift_into, propagate, row_exp, row_sum

_NOPY = dict(cache=True, nogil=True, fastmath=FAST)

# slots of the per-call statistics array
ST_ORACLE, ST_TRIALS, ST_ACCEPT, ST_REJECT, ST_SKIP, ST_DF, ST_SHRUNK = 0, 1, 2, 3, 4, 5, 6
N_STATS = 7


# ------------------------------------------------------------------ index and caches
@njit(**_NOPY)
def build_index(seq_ptr, tok_ptr, attr, val, n_attr):
    """Inverted index attribute -> sequences -> occurrences; returns (ap, gseq, gptr, otok, oval)."""
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
def _exp_row(E, r, ES, EM):
    EM[r] = row_exp(E, r, ES)


@njit(parallel=True, cache=True, fastmath=FAST)
def exp_rows(E, ES, EM):
    """ES, EM from E for every token."""
    for r in prange(E.shape[0]):
        _exp_row(E, r, ES, EM)


@njit(**_NOPY)
def transition_scores(w, n_state, trans_index, out):
    """out (L x L) = transition scores (0 for pairs without a feature); returns (tmax, tmin)."""
    L = trans_index.shape[0]
    for i in range(L):
        for j in range(L):
            k = trans_index[i, j]
            out[i, j] = w[n_state + k] if k >= 0 else 0.0
    return out.max(), out.min()


# ------------------------------------------------------------------ recursions
@njit(**_NOPY)
def _forward(ES, EM, s0, ta, tb, expM, tmax, alpha, la):
    """Normalised forward messages at positions ta..tb (alpha[ta-1], la[ta-1] must hold when ta > 0)."""
    L = expM.shape[0]
    for t in range(ta, tb + 1):
        r = s0 + t
        if t == 0:
            for j in range(L):
                alpha[0, j] = ES[r, j]
            base = EM[r]
        else:
            propagate(alpha, t, expM, ES, r)
            base = la[t - 1] + EM[r] + tmax
        s = row_sum(alpha, t)
        inv = 1.0 / s
        for j in range(L):
            alpha[t, j] *= inv
        la[t] = base + np.log(s)


@njit(inline="always", **_NOPY)
def _backward_start(T, ts, beta, lb):
    """The backward recursion's start: ``ts`` itself when beta[ts], lb[ts] are held (ts < T), else (ts = T)
    beta[T-1] = 1, lb[T-1] = 0 set here and T - 1."""
    if ts < T:
        return ts
    for j in range(beta.shape[1]):
        beta[T - 1, j] = 1.0
    lb[T - 1] = 0.0
    return T - 1


@njit(**_NOPY)
def _backward(ES, EM, s0, T, tb, expM, tmax, beta, lb, tmp):
    """Normalised backward messages at positions T-1 down to tb."""
    _backward_from(ES, EM, s0, T, T, tb, expM, tmax, beta, lb, tmp)


@njit(**_NOPY)
def _backward_from(ES, EM, s0, T, ts, tb, expM, tmax, beta, lb, tmp):
    """Normalised backward messages at positions ts-1 down to tb, from beta[ts], lb[ts] (held; ``ts = T``:
    from the end, beta[T-1] = 1 set here)."""
    L = expM.shape[0]
    ts = _backward_start(T, ts, beta, lb)
    for t in range(ts - 1, tb - 1, -1):
        r = s0 + t + 1
        back_step(beta, t, expM, ES, r, 1.0, tmp)
        s = 0.0
        for i in range(L):
            s += beta[t, i]
        inv = 1.0 / s
        for i in range(L):
            beta[t, i] *= inv
        lb[t] = lb[t + 1] + EM[r] + tmax + np.log(s)


@njit(**_NOPY)
def _logz_at(alpha, la, beta, lb, t):
    L = alpha.shape[1]
    z = 0.0
    for j in range(L):
        z += alpha[t, j] * beta[t, j]
    return la[t] + lb[t] + np.log(z)


# ------------------------------------------------------------------ one attribute block
@njit(**_NOPY)
def block_grad(a, ap, gseq, gptr, otok, oval, seq_ptr, attr_ptr, feat_label, ES, EM, expM, tmax,
               CA, CLA, CB, CLB, VA, VB, tmp, A0, LA0, B1, LB1, LZ0, G, H, sw):
    """Sums over the sequences containing attribute ``a`` of the expected counts of its features
    (``G[kk] = sum_occ v p_t(label_kk)``) and of the per-position variances (``H[kk] = sum_occ v^2 p (1-p)``),
    by truncated forward-backward; stores per group what a trial step needs (``A0``/``LA0`` the
    forward message before the window, ``B1``/``LB1`` the backward one at its end, ``LZ0`` log Z).

    Messages kept between blocks: ``CA``/``CLA`` and ``CB``/``CLB`` (tokens x L, tokens) hold every
    sequence's last normalised forward and backward messages and their log-scales; ``VA[i]``: sequence
    i's forward messages at positions ``<= VA[i]`` are those of the current weights, ``VB[i]``: its
    backward ones at ``>= VB[i]`` (``VA = -1``, ``VB = T``: none).  A block runs the forward recursion
    only over ``VA[i]+1..t2`` and the backward one only over ``VB[i]-1..t1``; the messages it reuses are
    what a recursion from the start would give, to the bit (the same weights, the same operations).  The
    caller lowers ``VA[i]`` to ``t1 - 1`` and raises ``VB[i]`` to ``t2`` when a step changes the block's
    weights, and resets every marker when the transitions change."""
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
        alpha = CA[s0:s0 + T]
        la = CLA[s0:s0 + T]
        beta = CB[s0:s0 + T]
        lb = CLB[s0:s0 + T]
        if VA[i] < t2:
            _forward(ES, EM, s0, VA[i] + 1, t2, expM, tmax, alpha, la)
            VA[i] = t2
        if VB[i] > t1:
            _backward_from(ES, EM, s0, T, VB[i], t1, expM, tmax, beta, lb, tmp)
            VB[i] = t1
        LZ0[gi] = _logz_at(alpha, la, beta, lb, t2)
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
def _window_logz(gi, g, seq_ptr, gseq, gptr, otok, oval, E, ES, EM, expM, tmax, dl, step, A0, LA0, B1, LB1,
                 cur, nxt, es):
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
    """Direction d of eq. (10)-(11) with the L2 term exact: w + d = s(h w - g, l1) / (h + l2), where g and
    h are the loss's block gradient and (kappa-scaled) diagonal curvature; returns the model's decrease
    Delta = g.d + (l2/2)(|w+d|^2 - |w|^2) + l1(|w+d|_1 - |w|_1) (<= 0; 0 when d = 0).  The block's weights
    are ``w[k0:k0+nk]``, its empirical counts ``emp[e0:e0+nk]``."""
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
    """Wapiti's safeguard in place of a line search: the factor ``max(1, max_k |g_k / h_k|)`` on a block's
    diagonal curvature (g = G - emp, h = H; the ratio does not depend on the 1/n scaling), so that no
    coordinate's Newton step exceeds 1 / kappa in size before the penalties.  Coordinates with h = 0 are
    left out of the maximum (Wapiti's would make it infinite)."""
    a = 1.0
    for kk in range(nk):
        h = H[kk]
        if h > 0.0:
            r = abs(G[kk] - emp[e0 + kk]) / h
            if r > a:
                a = r
    return a


@njit(**_NOPY)
def _pen_change(w, k0, nk, d, step, l1, l2):
    out = 0.0
    for kk in range(nk):
        x = w[k0 + kk]
        xn = x + step * d[kk]
        out += 0.5 * l2 * (xn * xn - x * x) + l1 * (abs(xn) - abs(x))
    return out


@njit(inline="always", **_NOPY)
def _capped_step(d, nk, max_step):
    """The Armijo trials' first step: 1, or ``max_step / max|d|`` where that is smaller."""
    dmax = 0.0
    for kk in range(nk):
        if abs(d[kk]) > dmax:
            dmax = abs(d[kk])
    return max_step / dmax if dmax > max_step else 1.0


@njit(inline="always", **_NOPY)
def _group_changed(gi, g, gseq, gptr, otok, seq_ptr, hscale, lz, NLZ, VA, VB):
    """An accepted step changed group ``g``'s sequence at its occurrences: its log Z is the trial's
    (``NLZ[gi]``; left stale under ``hscale``), and its kept messages from the first changed position on
    (forward) and before the last (backward) no longer hold."""
    i = gseq[g]
    if not hscale:
        lz[i] = NLZ[gi]
    s0 = seq_ptr[i]
    VA[i] = min(VA[i], otok[gptr[g]] - s0 - 1)
    VB[i] = max(VB[i], otok[gptr[g + 1] - 1] - s0)


@njit(**_NOPY)
def sweep_blocks(order, b0, b1, ap, gseq, gptr, otok, oval, seq_ptr, attr_ptr, feat_label, emp, w,
                 E, ES, EM, lz, expM, tmax, inv_n, l1, l2, kappa, sigma, max_step, max_back, hscale, skip_tol,
                 max_skip, zrun, skip, CA, CLA, CB, CLB, VA, VB, tmp, A0, LA0, B1, LB1, LZ0, NLZ, G, H, d, dl, cur,
                 nxt, es, stats, sw):
    """One prox-Newton step with backtracking on each attribute block order[b0:b1], in turn.

    A block with no occurrence gets its exact minimiser (0 when l1 or l2 > 0).  Otherwise: block
    gradient and diagonal (truncated forward-backward on its sequences), direction of eq. (10)-(11),
    step ``min(1, max_step / max|d|)`` halved until the objective change (exact, from the window
    log Z's) is at most ``sigma * step * Delta`` (Tseng & Yun's Armijo rule) -- at most ``max_back``
    halvings, after which the block is left unchanged.  Blocks whose predicted decrease -Delta is
    below ``skip_tol`` (times its share of sequences) are left unchanged (already optimal to rounding).
    Accepted steps update w, E/ES/EM at the occurrences, lz of the touched sequences and their message
    markers (the messages are kept between blocks, see :func:`block_grad`).

    ``hscale`` (``safeguard="scale"``, Wapiti's rule): the block's curvatures are multiplied by
    :func:`curvature_scale` and the whole step is taken with no trial and no ``max_step`` cap; ``lz`` is then
    left stale (the driver recomputes it after the sweep).

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
                    if x != 0.0:        # (an entry is written only when it changes: see the step below)
                        w[k0 + kk] = 0.0
                stats[ST_DF] += dF
            continue
        block_grad(a, ap, gseq, gptr, otok, oval, seq_ptr, attr_ptr, feat_label, ES, EM, expM, tmax,
                   CA, CLA, CB, CLB, VA, VB, tmp, A0, LA0, B1, LB1, LZ0, G, H, sw)
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
            # the Armijo trials' data (the scaled rule needs neither): the step's gold part, the step cap
            step = _capped_step(d, nk, max_step)
            for kk in range(nk):
                gold += d[kk] * emp[k0 + kk]
        for j in range(L):
            dl[j] = 0.0
        for kk in range(nk):
            dl[feat_label[k0 + kk]] = d[kk]
        # hscale (Wapiti's rule): the scaled model's whole step, no trial; lz goes stale (the driver recomputes it)
        accepted = hscale
        dF = 0.0
        if not hscale:
            for _ in range(max_back + 1):
                s = 0.0
                for gi in range(ng):
                    g = ap[a] + gi
                    NLZ[gi] = _window_logz(gi, g, seq_ptr, gseq, gptr, otok, oval, E, ES, EM, expM, tmax, dl,
                                           step, A0, LA0, B1, LB1, cur, nxt, es)
                    if sw.shape[0] == 0:
                        s += NLZ[gi] - LZ0[gi]
                    else:
                        s += sw[gseq[g]] * (NLZ[gi] - LZ0[gi])
                stats[ST_TRIALS] += 1
                stats[ST_ORACLE] += ng
                dF = (s - step * gold) * inv_n + _pen_change(w, k0, nk, d, step, l1, l2)
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
            # only the entries that move are written: a weight that stays at zero leaves its memory page
            # untouched (the weights of a large candidate space are crfkit.memtrim.lazy_zeros, whose pages
            # count only once written; with L1 most of a block's step is zero)
            if d[kk] != 0.0:
                w[k0 + kk] += step * d[kk]
        for gi in range(ng):
            g = ap[a] + gi
            _group_changed(gi, g, gseq, gptr, otok, seq_ptr, hscale, lz, NLZ, VA, VB)
            for o in range(gptr[g], gptr[g + 1]):
                r = otok[o]
                sv = step * oval[o]
                for j in range(L):
                    E[r, j] += sv * dl[j]
                _exp_row(E, r, ES, EM)


# ------------------------------------------------------------------ the transition block
@njit(parallel=True, cache=True, fastmath=FAST)
def transition_stats(seq_ptr, bounds, Tmax, ES, EM, expM, tmax, lz, EC, SQ, sw):
    """Full forward-backward on every sequence: lz, and per chunk c the expected transition counts
    ``EC[c, i, j] = sum_t sw_s p_t(i, j)`` and ``SQ[c, i, j] = sum_t sw_s p_t(i, j)^2`` (``sw`` empty: 1)."""
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
            _forward(ES, EM, s0, 0, T - 1, expM, tmax, alpha, la)
            _backward(ES, EM, s0, T, 0, expM, tmax, beta, lb, tmp)
            logz = _logz_at(alpha, la, beta, lb, T - 1)
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
            _forward(ES, EM, s0, 0, T - 1, expM, tmax, alpha, la)
            out[s] = la[T - 1]          # alpha[T-1] sums to 1 and beta[T-1] = 1


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
def _range_of(x):
    """(max, min) of a non-empty 1-D array of finite values, in four independent chains (one chain is
    bound by its latency; a max or min of finite values does not depend on the order)."""
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
def _pos_trans(r, btok_ptr, battr, bval, battr_ptr, bfeat_pair, bfull, w, boff, trans, expM0, tmax0, Mt, Et):
    """Mt (L*L) = transition scores into token r, Et = exp(Mt - max); returns (max, min) of Mt.  ``bfull``:
    per bigram attribute, 1 when its features are every label pair in pair order
    (:attr:`crfkit.model.FeatureSpace.bigram_full_rows`): its weights are added as one vector (adding the
    zero weights changes nothing), the others feature by feature."""
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
        wb = w[boff + k0:boff + k1]
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
    mx, mn = _range_of(Mt)
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
            wb = w[boff + k0:boff + k1]
            if bfull[b]:             # (pairs implicit or not: feature k0 + q is pair q)
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
def _seq_trans(s0, ta, tb, btok_ptr, battr, bval, battr_ptr, bfeat_pair, bfull, w, boff, trans, expM0, tmax0,
               M, EX, TM):
    """M[t], EX[t], TM[t] for positions max(ta, 1)..tb of the sequence starting at token s0; returns the
    largest range (max - min) of those rows."""
    rng = 0.0
    for t in range(max(ta, 1), tb + 1):
        mx, mn = _pos_trans(s0 + t, btok_ptr, battr, bval, battr_ptr, bfeat_pair, bfull, w, boff, trans, expM0, tmax0,
                            M[t], EX[t])
        TM[t] = mx
        if mx - mn > rng:
            rng = mx - mn
    return rng


@njit(inline="always", **_NOPY)
def _prop_flat(prev, Et, es_row, out, L):
    """out[j] = es_row[j] * sum_i prev[i] Et[i*L + j] (zero rows of prev skipped)."""
    for j in range(L):
        out[j] = 0.0
    for i in range(L):
        a = prev[i]
        if a != 0.0:
            er = Et[i * L:(i + 1) * L]     # indexed from 0: no wrap-around test per access, so it vectorises
            for j in range(L):
                out[j] += a * er[j]
    for j in range(L):
        out[j] *= es_row[j]


@njit(**_NOPY)
def _forward_pd(ES, EM, s0, ta, tb, EX, TM, alpha, la):
    """Normalised forward messages at ta..tb with per-position transitions (alpha[ta-1] held when ta > 0)."""
    L = ES.shape[1]
    for t in range(ta, tb + 1):
        r = s0 + t
        if t == 0:
            for j in range(L):
                alpha[0, j] = ES[r, j]
            base = EM[r]
        else:
            _prop_flat(alpha[t - 1], EX[t], ES[r], alpha[t], L)
            base = la[t - 1] + EM[r] + TM[t]
        s = row_sum(alpha, t)
        inv = 1.0 / s
        for j in range(L):
            alpha[t, j] *= inv
        la[t] = base + np.log(s)


@njit(**_NOPY)
def _backward_pd(ES, EM, s0, T, tb, EX, TM, beta, lb, tmp):
    """Normalised backward messages at T-1 down to tb with per-position transitions."""
    _backward_pd_from(ES, EM, s0, T, T, tb, EX, TM, beta, lb, tmp)


@njit(**_NOPY)
def _backward_pd_from(ES, EM, s0, T, ts, tb, EX, TM, beta, lb, tmp):
    """Normalised backward messages at ts-1 down to tb with per-position transitions, from beta[ts], lb[ts]
    (held; ``ts = T``: from the end, beta[T-1] = 1 set here)."""
    L = ES.shape[1]
    ts = _backward_start(T, ts, beta, lb)
    for t in range(ts - 1, tb - 1, -1):
        r = s0 + t + 1
        for j in range(L):
            tmp[j] = ES[r, j] * beta[t + 1, j]
        Et = EX[t + 1]
        s = 0.0
        for i in range(L):
            acc = 0.0
            base = i * L
            for j in range(L):
                acc += Et[base + j] * tmp[j]
            beta[t, i] = acc
            s += acc
        inv = 1.0 / s
        for i in range(L):
            beta[t, i] *= inv
        lb[t] = lb[t + 1] + EM[r] + TM[t + 1] + np.log(s)


@njit(inline="always", **_NOPY)
def _block_parts(j, ua, ub, attr_ptr, battr_ptr, boff):
    """(first weight, count) of the state part and of the label-pair part of joint block j (count 0 when the
    block has no such part), and the offset of the label-pair part's features in battr_ptr / bfeat_pair."""
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
def block_grad_joint(j, ap, gseq, gptr, otok, oval, okind, ua, ub, attr_ptr, feat_label, seq_ptr, ES, EM,
                     btok_ptr, battr, bval, battr_ptr, bfeat_pair, bfull, w, boff, trans, expM0, tmax0, M, EX, TM,
                     CA, CLA, CB, CLB, VA, VB, tmp, A0, LA0, B1, LB1, LZ0, G, H, sw):
    """:func:`block_grad` for joint block ``j`` with position-dependent transitions: its state part (the
    features of attribute ``ua[j]``, if any) in ``G[:nku]``/``H[:nku]`` and its label-pair part (those of
    bigram attribute ``ub[j]``, if any) in ``G[nku:]``/``H[nku:]``: ``G[kk] = sum_occ v p_t(kk)``,
    ``H[kk] = sum_occ v^2 p (1 - p)``, with the node marginal of the feature's label at a state occurrence
    (``okind`` 0) and the edge marginal p(y_{t-1} = i, y_t = j) of its label pair at a label-pair one
    (``okind`` 1, never a first token).  One truncated forward-backward per sequence serves both parts;
    stores per group what a trial step needs, as block_grad.

    Messages kept between blocks: ``CA``/``CLA`` and ``CB``/``CLB`` (tokens x L, tokens) hold every
    sequence's last normalised forward and backward messages and their log-scales; ``VA[i]``: sequence
    i's forward messages at positions ``<= VA[i]`` are those of the current weights, ``VB[i]``: its
    backward ones at ``>= VB[i]`` (``VA = -1``, ``VB = T``: none).  A block runs the forward recursion
    only over ``VA[i]+1..t2`` and the backward one only over ``VB[i]-1..t1``, and builds the transition
    rows of those positions only; the messages it reuses are what a recursion from the start would give,
    to the bit (the same weights, the same operations).  The caller lowers ``VA[i]`` to ``t1 - 1`` and
    raises ``VB[i]`` to ``t2`` when a step changes the block's weights, and resets every marker when the
    transitions change."""
    ku, nku, kp, nkp, kabs = _block_parts(j, ua, ub, attr_ptr, battr_ptr, boff)
    full = nkp > 0 and bfull[ub[j]] != 0      # its label pairs every pair in order (feature kp + kk is pair kk)
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
        alpha = CA[s0:s0 + T]
        la = CLA[s0:s0 + T]
        beta = CB[s0:s0 + T]
        lb = CLB[s0:s0 + T]
        va = VA[i]
        vb = VB[i]
        # the transition rows the recursions and the block's label-pair occurrences read: t1..t2, and the
        # positions the forward (va+1..t2) and backward (t1+1..vb) recursions still have to cross
        lo = t1
        hi = t2
        if va < t2:
            lo = min(lo, va + 1)
        if vb > t1:
            hi = max(hi, min(vb, T - 1))
        _seq_trans(s0, lo, hi, btok_ptr, battr, bval, battr_ptr, bfeat_pair, bfull, w, boff, trans, expM0, tmax0,
                   M, EX, TM)
        if va < t2:
            _forward_pd(ES, EM, s0, va + 1, t2, EX, TM, alpha, la)
            VA[i] = t2
        if vb > t1:
            _backward_pd_from(ES, EM, s0, T, vb, t1, EX, TM, beta, lb, tmp)
            VB[i] = t1
        logz = _logz_at(alpha, la, beta, lb, t2)
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
                Gp = G[nku:nku + nkp]
                Hp = H[nku:nku + nkp]
                v2 = v * oval[o]
                if 4 * nkp >= L * L:
                    # most label pairs: the edge marginals of every pair (dense, vectorised, in M[0]: no
                    # transition row is built at position 0), then gathered at the part's pairs
                    for yi in range(L):
                        ai = alpha[t - 1, yi]
                        er = Et[yi * L:(yi + 1) * L]
                        pr = PM[yi * L:(yi + 1) * L]
                        for yj in range(L):
                            pr[yj] = ai * er[yj] * ES[r, yj] * beta[t, yj] * f
                    if full:             # (pairs implicit or not: feature kp + kk is pair kk)
                        for kk in range(nkp):
                            p = PM[kk]
                            Gp[kk] += v * p
                            Hp[kk] += v2 * p * (1.0 - p)
                    else:
                        pb = bfeat_pair[kp:kp + nkp]
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
def _window_logz_joint(gi, g, seq_ptr, gseq, gptr, otok, oval, okind, E, ES, EM, btok_ptr, battr, bval, battr_ptr,
                       bfeat_pair, bfull, w, boff, trans, expM0, tmax0, dl, dp, nzp, nnzp, step, A0, LA0, B1, LB1,
                       cur, nxt, es, Mt, Et):
    """log Z of the sequence of group ``g`` after a trial step of its joint block, forward over the window
    t1..t2 only: the emissions at a state occurrence change by ``step * v * dl``, the transition scores
    into a label-pair occurrence by ``step * v * dp`` (``dp`` dense L*L, non-zero at ``nzp[:nnzp]``).
    NaN when a changed transition row would span more than MAX_SCALED_TRANSITION_RANGE (the step is then
    refused)."""
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
            mx, mn = _pos_trans(r, btok_ptr, battr, bval, battr_ptr, bfeat_pair, bfull, w, boff, trans, expM0, tmax0,
                                Mt, Et)
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
            _prop_flat(cur, Et, es, nxt, L)
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
def sweep_blocks_joint(order, b0, b1, ap, gseq, gptr, otok, oval, okind, ua, ub, seq_ptr, attr_ptr, feat_label,
                       btok_ptr, battr, bval, battr_ptr, bfeat_pair, bfull, boff, trans, expM0, tmax0, emp, eptr, erel,
                       evl, ebuf, w, E, ES, EM,
                       lz, inv_n, l1, l2, kappa, sigma, max_step, max_back, hscale, skip_tol, max_skip, zrun, skip,
                       CA, CLA, CB, CLB, VA, VB, tmp, A0, LA0, B1, LB1, LZ0, NLZ, G, H, d, dl, dp, nzp, cur, nxt,
                       es, M, EX, TM, stats, sw):
    """:func:`sweep_blocks` with label-pair x observation features, on the joint blocks ``order[b0:b1]``:
    block ``j`` holds the state features of attribute ``ua[j]`` and the label-pair features of bigram
    attribute ``ub[j]`` (either may be -1), one observation's features as in Wapiti.  Its step is the
    diagonal prox-Newton step of eq. (10)-(11) on both parts at once, with one Armijo backtracking on the
    exact change of the objective (window log Z's), or with ``hscale`` Wapiti's rule (each part's curvatures
    scaled by :func:`curvature_scale`, the whole step, no trial, ``lz`` left stale).  The transitions of a
    position are built from the weights where a forward-backward or a trial needs them (no transition row is
    cached); the forward and backward messages are kept between blocks (``CA`` ... ``VB``, see
    :func:`block_grad_joint`).  An accepted step updates ``w``, the emission caches at its state occurrences,
    ``lz`` and the message markers.  Empirical counts: ``emp``
    (dense) those of the features before ``boff`` (state and transition features), and those of the
    label-pair features by bigram attribute ``b``: its non-zero ones, ``evl[eptr[b]:eptr[b+1]]`` at the
    label-pair indices ``erel[...]`` (relative to ``boff``; most label pairs never fire with an
    observation's gold labels); ``ebuf`` (>= L^2) holds a block's."""
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
        block_grad_joint(j, ap, gseq, gptr, otok, oval, okind, ua, ub, attr_ptr, feat_label, seq_ptr, ES, EM,
                         btok_ptr, battr, bval, battr_ptr, bfeat_pair, bfull, w, boff, trans, expM0, tmax0, M, EX, TM,
                         CA, CLA, CB, CLB, VA, VB, tmp, A0, LA0, B1, LB1, LZ0, G, H, sw)
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
        delta = newton_direction(w, ku, nku, G, H, emp, ku, inv_n, l1, l2, ku_kappa, d) + \
            newton_direction(w, kabs, nkp, G[nku:], H[nku:], ebuf, 0, inv_n, l1, l2, kp_kappa, d[nku:])
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
            # the Armijo trials' data (the scaled rule needs neither): the step's gold part, the step cap
            step = _capped_step(d, nk, max_step)
            for kk in range(nk):
                gold += d[kk] * (emp[ku + kk] if kk < nku else ebuf[kk - nku])
        for jj in range(L):
            dl[jj] = 0.0
        for kk in range(nku):
            dl[feat_label[ku + kk]] = d[kk]
        # hscale (Wapiti's rule): the scaled model's whole step, no trial; lz goes stale (the driver recomputes it)
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
                    NLZ[gi] = _window_logz_joint(gi, g, seq_ptr, gseq, gptr, otok, oval, okind, E, ES, EM,
                                                 btok_ptr, battr, bval, battr_ptr, bfeat_pair, bfull, w, boff, trans,
                                                 expM0, tmax0, dl, dp, nzp, nnzp, step, A0, LA0, B1, LB1, cur, nxt, es,
                                                 M[0], EX[0])
                    if sw.shape[0] == 0:
                        s += NLZ[gi] - LZ0[gi]
                    else:
                        s += sw[gseq[g]] * (NLZ[gi] - LZ0[gi])
                stats[ST_TRIALS] += 1
                stats[ST_ORACLE] += ng
                dF = (s - step * gold) * inv_n + _pen_change(w, ku, nku, d, step, l1, l2) + \
                    _pen_change(w, kabs, nkp, d[nku:], step, l1, l2)
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
            if d[kk] != 0.0:    # (only the entries that move are written, as in sweep_blocks)
                k = ku + kk if kk < nku else kabs + kk - nku
                w[k] += step * d[kk]
        for gi in range(ng):
            g = ap[j] + gi
            _group_changed(gi, g, gseq, gptr, otok, seq_ptr, hscale, lz, NLZ, VA, VB)
            if nku > 0:
                for o in range(gptr[g], gptr[g + 1]):
                    if okind[o] == 0:
                        r = otok[o]
                        sv = step * oval[o]
                        for jj in range(L):
                            E[r, jj] += sv * dl[jj]
                        _exp_row(E, r, ES, EM)


@njit(parallel=True, cache=True, fastmath=FAST)
def transition_stats_pd(seq_ptr, bounds, Tmax, ES, EM, btok_ptr, battr, bval, battr_ptr, bfeat_pair, bfull, w, boff,
                        trans, expM0, tmax0, lz, EC, SQ, sw):
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
            _seq_trans(s0, 1, T - 1, btok_ptr, battr, bval, battr_ptr, bfeat_pair, bfull, w, boff, trans, expM0, tmax0,
                       M, EX, TM)
            _forward_pd(ES, EM, s0, 0, T - 1, EX, TM, alpha, la)
            _backward_pd(ES, EM, s0, T, 0, EX, TM, beta, lb, tmp)
            logz = _logz_at(alpha, la, beta, lb, T - 1)
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
def all_logz_pd(seq_ptr, bounds, Tmax, ES, EM, btok_ptr, battr, bval, battr_ptr, bfeat_pair, bfull, w, boff, trans,
                expM0, tmax0, out, rngs):
    """out[s] = log Z of every sequence with position-dependent transitions; rngs[c] = the largest range
    of a transition row in chunk c (the caller refuses weights where it exceeds the scaled limit)."""
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
            r = _seq_trans(s0, 1, T - 1, btok_ptr, battr, bval, battr_ptr, bfeat_pair, bfull, w, boff, trans, expM0,
                           tmax0, M, EX, TM)
            if r > rng:
                rng = r
            _forward_pd(ES, EM, s0, 0, T - 1, EX, TM, alpha, la)
            out[s] = la[T - 1]
        rngs[c] = rng
