"""Forward-backward with tangent messages: the node and edge marginals of one chain and their
derivatives along a direction ``d`` (exact Hessian-vector products, SMD; see
:mod:`crfkit.kernels.smd` for the equations), in the scaled domain with the log domain as fallback.

Kept apart from :func:`crfkit.kernels.chain.forward_backward_edges`: the recursion carries the
weighted messages ``A_t``/``B_t`` (or, in the log domain, the conditional expectations
``a_t``/``b_t``) beside ``alpha``/``beta`` in the same loops, so its operations (and bits) are its
own.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .chain_exp import FAST, MAX_SCALED_TRANSITION_RANGE, exp_minus, exp_shift_into, max_min
from .chain_log import logsumexp

_NOPY = dict(cache=True, nogil=True, fastmath=FAST)


@njit(**_NOPY)
def _hv_log(score, sdir, T, trans, rdir, node, dnode, edge, dedge):
    """The log-domain form (see the module docstring); returns log Z."""
    L = trans.shape[0]
    la = np.empty((T, L))
    lb = np.empty((T, L))
    a = np.empty((T, L))
    b = np.empty((T, L))
    buf = np.empty(L)
    for j in range(L):
        la[0, j] = score[0, j]
        a[0, j] = sdir[0, j]
    for t in range(1, T):
        for j in range(L):
            for i in range(L):
                buf[i] = la[t - 1, i] + trans[i, j]
            m = logsumexp(buf)
            acc = 0.0
            if m > -np.inf:
                for i in range(L):
                    wgt = np.exp(buf[i] - m)
                    if wgt > 0.0:
                        acc += wgt * (a[t - 1, i] + rdir[i, j])
            la[t, j] = m + score[t, j]
            a[t, j] = acc + sdir[t, j]
    logz = logsumexp(la[T - 1])
    for j in range(L):
        lb[T - 1, j] = 0.0
        b[T - 1, j] = 0.0
    for t in range(T - 2, -1, -1):
        for i in range(L):
            for j in range(L):
                buf[j] = trans[i, j] + score[t + 1, j] + lb[t + 1, j]
            m = logsumexp(buf)
            acc = 0.0
            if m > -np.inf:
                for j in range(L):
                    wgt = np.exp(buf[j] - m)
                    if wgt > 0.0:
                        acc += wgt * (rdir[i, j] + sdir[t + 1, j] + b[t + 1, j])
            lb[t, i] = m
            b[t, i] = acc
    ephi = 0.0
    for j in range(L):
        mu = np.exp(la[T - 1, j] - logz)
        if mu > 0.0:
            ephi += mu * a[T - 1, j]
    for t in range(T):
        for j in range(L):
            mu = np.exp(la[t, j] + lb[t, j] - logz)
            node[t, j] = mu
            dnode[t, j] = mu * (a[t, j] + b[t, j] - ephi) if mu > 0.0 else 0.0
    for i in range(L):
        for j in range(L):
            edge[i, j] = 0.0
            dedge[i, j] = 0.0
    for t in range(1, T):
        for i in range(L):
            for j in range(L):
                xi = np.exp(la[t - 1, i] + trans[i, j] + score[t, j] + lb[t, j] - logz)
                if xi > 0.0:
                    edge[i, j] += xi
                    dedge[i, j] += xi * (a[t - 1, i] + rdir[i, j] + sdir[t, j] + b[t, j] - ephi)
    return logz


@njit(**_NOPY)
def hv_chain(score, sdir, T, trans, rdir, node, dnode, edge, dedge, force_log):
    """Marginals and their derivatives along a direction for one chain; returns log Z.

    ``score`` (>= T x L) and ``trans`` (L x L): the emission and transition
    scores at the weights; ``sdir`` and ``rdir``: those of the direction ``d``.
    Writes the node marginals into ``node[:T]``, their derivatives along ``d``
    into ``dnode[:T]``, the edge marginals summed over positions into ``edge``
    and their derivatives into ``dedge`` (both L x L, overwritten).
    ``force_log`` takes the log-domain form (tests).
    """
    L = trans.shape[0]
    tmax, tmin = max_min(trans)
    if force_log or tmax - tmin > MAX_SCALED_TRANSITION_RANGE:
        return _hv_log(score, sdir, T, trans, rdir, node, dnode, edge, dedge)
    M = exp_minus(trans, tmax)
    es = np.empty((T, L))
    al = np.empty((T, L))
    A = np.empty((T, L))
    c = np.empty(T)
    u = np.empty(L)
    U = np.empty(L)
    logz = 0.0
    for t in range(T):
        sr = score[t]
        m = sr[0]
        for j in range(1, L):
            m = sr[j] if sr[j] > m else m
        exp_shift_into(sr, m, es[t])
        logz += m
        if t == 0:
            for j in range(L):
                u[j] = 1.0
                U[j] = 0.0
        else:
            logz += tmax
            for j in range(L):
                u[j] = 0.0
                U[j] = 0.0
            for i in range(L):
                ai = al[t - 1, i]
                Ai = A[t - 1, i]
                for j in range(L):
                    mij = M[i, j]
                    u[j] += ai * mij
                    U[j] += (Ai + ai * rdir[i, j]) * mij
        s = 0.0
        for j in range(L):
            s += es[t, j] * u[j]
        if not (s > 1e-300) or not np.isfinite(s):
            return _hv_log(score, sdir, T, trans, rdir, node, dnode, edge, dedge)
        c[t] = s
        inv = 1.0 / s
        for j in range(L):
            al[t, j] = es[t, j] * u[j] * inv
            A[t, j] = es[t, j] * U[j] * inv + sdir[t, j] * al[t, j]
        logz += np.log(s)
    ephi = 0.0
    for j in range(L):
        ephi += A[T - 1, j]
    for i in range(L):
        for j in range(L):
            edge[i, j] = 0.0
            dedge[i, j] = 0.0
    # backward: be (beta_t), Bt (B_t) for the current t; the ones of t+1 in be1, B1
    be1 = np.ones(L)
    B1 = np.zeros(L)
    tmp = np.empty(L)
    tmpB = np.empty(L)
    for j in range(L):
        mu = al[T - 1, j]
        node[T - 1, j] = mu
        dnode[T - 1, j] = A[T - 1, j] + 0.0 - mu * ephi
    for t in range(T - 2, -1, -1):
        inv = 1.0 / c[t + 1]
        for j in range(L):
            tmp[j] = es[t + 1, j] * be1[j] * inv
            tmpB[j] = es[t + 1, j] * (B1[j] + sdir[t + 1, j] * be1[j]) * inv
        for i in range(L):
            ai = al[t, i]
            Ai = A[t, i]
            bsum = 0.0
            Bsum = 0.0
            for j in range(L):
                mij = M[i, j]
                rt = rdir[i, j] * tmp[j]
                bsum += mij * tmp[j]
                Bsum += mij * (tmpB[j] + rt)
                xi = ai * mij * tmp[j]
                edge[i, j] += xi
                dedge[i, j] += mij * (Ai * tmp[j] + ai * rt + ai * tmpB[j]) - xi * ephi
            node[t, i] = ai * bsum
            dnode[t, i] = Ai * bsum + ai * Bsum - ai * bsum * ephi
            # the new messages go into u/U first: be1/B1 are still read for other i
            u[i] = bsum
            U[i] = Bsum
        for i in range(L):
            be1[i] = u[i]
            B1[i] = U[i]
    return logz
