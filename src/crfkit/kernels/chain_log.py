"""Log-domain forward-backward: the fallback of the scaled recursions (``chain.forward_backward``,
``chain_pd.pd_forward_backward``) when the transition scores span more than
``MAX_SCALED_TRANSITION_RANGE`` or a scale under/overflows, with ``logsumexp`` and the log-domain
backward messages that the edge marginals of that path re-use.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .chain_exp import FAST

_NOPY = dict(cache=True, nogil=True, fastmath=FAST)


@njit(**_NOPY)
def logsumexp(x):
    m = -np.inf
    for v in x:
        if v > m:
            m = v
    if m == -np.inf:
        return m
    s = 0.0
    for v in x:
        s += np.exp(v - m)
    return m + np.log(s)


@njit(**_NOPY)
def log_backward(score, T, trans, lb):
    L = trans.shape[0]
    buf = np.empty(L)
    for j in range(L):
        lb[T - 1, j] = 0.0
    for t in range(T - 2, -1, -1):
        for i in range(L):
            for j in range(L):
                buf[j] = trans[i, j] + score[t + 1, j] + lb[t + 1, j]
            lb[t, i] = logsumexp(buf)


@njit(**_NOPY)
def forward_backward_log(score, T, trans, es, alpha, beta, scale):
    """Log-domain forward-backward, used only when scaling underflows.

    On return the arrays are filled so that alpha[t]*beta[t] are the node
    marginals and ``edge_marginal_sum`` with ``expM = exp(trans)`` computes the
    edge marginals: we store alpha = exp(la - logZ_t) normalised per position,
    es = 1 and fold the emission terms into beta.  Edge marginals for this
    rare path are computed directly by ``_edge_log`` instead.
    """
    L = trans.shape[0]
    la = np.empty((T, L))
    lb = np.empty((T, L))
    buf = np.empty(L)
    for j in range(L):
        la[0, j] = score[0, j]
    for t in range(1, T):
        for j in range(L):
            for i in range(L):
                buf[i] = la[t - 1, i] + trans[i, j]
            la[t, j] = logsumexp(buf) + score[t, j]
    logz = logsumexp(la[T - 1])
    log_backward(score, T, trans, lb)
    # Encode as scaled quantities: alpha[t] normalised, beta[t] such that
    # alpha*beta = marginals; scale[t] = -1 flags the log-domain result.
    for t in range(T):
        for j in range(L):
            alpha[t, j] = np.exp(la[t, j] + lb[t, j] - logz)
            beta[t, j] = 1.0
            es[t, j] = la[t, j]  # keep log-alpha for _edge_log
        scale[t] = -1.0
    return logz


@njit(**_NOPY)
def pd_log(score, T, M, la, lb):
    """Log-domain forward (la) and backward (lb) messages; returns log Z."""
    L = score.shape[1]
    buf = np.empty(L)
    for j in range(L):
        la[0, j] = score[0, j]
    for t in range(1, T):
        for j in range(L):
            for i in range(L):
                buf[i] = la[t - 1, i] + M[t, i, j]
            la[t, j] = logsumexp(buf) + score[t, j]
    for j in range(L):
        lb[T - 1, j] = 0.0
    for t in range(T - 2, -1, -1):
        for i in range(L):
            for j in range(L):
                buf[j] = M[t + 1, i, j] + score[t + 1, j] + lb[t + 1, j]
            lb[t, i] = logsumexp(buf)
    return logsumexp(la[T - 1, :L])
