"""Windowed forward-backward (BCD, Lavergne et al. 2010 §4.1): normalised messages with their
log-scales kept apart (``alpha~_t = alpha_t exp(la_t)``), over a window ``ta..tb`` started from
stored messages, with one transition matrix or with per-position ones (flat ``EX[t]`` rows).

Kept apart from :func:`crfkit.kernels.chain.scaled_forward`: the emissions come in cached as
``ES = exp(E - EM)``/``EM`` (no exp per step), every position keeps its own log-scale ``la[t]``
rather than one running log Z, the recursions start and stop anywhere, and ``log Z`` can be read at
any position (``window_logz_at``): other operations in another order, so other bits.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .chain_exp import FAST, back_step, propagate, row_sum

_NOPY = dict(cache=True, nogil=True, fastmath=FAST)


# ------------------------------------------------------------------ recursions
@njit(**_NOPY)
def window_forward(ES, EM, s0, ta, tb, expM, tmax, alpha, la):
    """Normalised forward messages at positions ta..tb (alpha[ta-1], la[ta-1] must hold when
    ta > 0)."""
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
    """The backward recursion's start: ``ts`` itself when beta[ts], lb[ts] are held (ts < T), else
    (ts = T) beta[T-1] = 1, lb[T-1] = 0 set here and T - 1."""
    if ts < T:
        return ts
    for j in range(beta.shape[1]):
        beta[T - 1, j] = 1.0
    lb[T - 1] = 0.0
    return T - 1


@njit(**_NOPY)
def window_backward(ES, EM, s0, T, tb, expM, tmax, beta, lb, tmp):
    """Normalised backward messages at positions T-1 down to tb."""
    window_backward_from(ES, EM, s0, T, T, tb, expM, tmax, beta, lb, tmp)


@njit(**_NOPY)
def window_backward_from(ES, EM, s0, T, ts, tb, expM, tmax, beta, lb, tmp):
    """Normalised backward messages at positions ts-1 down to tb, from beta[ts], lb[ts] (held;
    ``ts = T``: from the end, beta[T-1] = 1 set here)."""
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
def window_logz_at(alpha, la, beta, lb, t):
    L = alpha.shape[1]
    z = 0.0
    for j in range(L):
        z += alpha[t, j] * beta[t, j]
    return la[t] + lb[t] + np.log(z)


@njit(inline="always", **_NOPY)
def prop_flat(prev, Et, es_row, out, L):
    """out[j] = es_row[j] * sum_i prev[i] Et[i*L + j] (zero rows of prev skipped)."""
    for j in range(L):
        out[j] = 0.0
    for i in range(L):
        a = prev[i]
        if a != 0.0:
            er = Et[
                i * L : (i + 1) * L
            ]  # indexed from 0: no wrap-around test per access, so it vectorises
            for j in range(L):
                out[j] += a * er[j]
    for j in range(L):
        out[j] *= es_row[j]


@njit(**_NOPY)
def window_forward_pd(ES, EM, s0, ta, tb, EX, TM, alpha, la):
    """Normalised forward messages at ta..tb with per-position transitions (alpha[ta-1] held when
    ta > 0)."""
    L = ES.shape[1]
    for t in range(ta, tb + 1):
        r = s0 + t
        if t == 0:
            for j in range(L):
                alpha[0, j] = ES[r, j]
            base = EM[r]
        else:
            prop_flat(alpha[t - 1], EX[t], ES[r], alpha[t], L)
            base = la[t - 1] + EM[r] + TM[t]
        s = row_sum(alpha, t)
        inv = 1.0 / s
        for j in range(L):
            alpha[t, j] *= inv
        la[t] = base + np.log(s)


@njit(**_NOPY)
def window_backward_pd(ES, EM, s0, T, tb, EX, TM, beta, lb, tmp):
    """Normalised backward messages at T-1 down to tb with per-position transitions."""
    window_backward_pd_from(ES, EM, s0, T, T, tb, EX, TM, beta, lb, tmp)


@njit(**_NOPY)
def window_backward_pd_from(ES, EM, s0, T, ts, tb, EX, TM, beta, lb, tmp):
    """Normalised backward messages at ts-1 down to tb with per-position transitions, from beta[ts],
    lb[ts] (held; ``ts = T``: from the end, beta[T-1] = 1 set here)."""
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
