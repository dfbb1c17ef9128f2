"""Per-position pairwise marginals of one chain (the dual methods' clique marginals, :mod:`sdca`):
node marginals and one L x L pairwise marginal per edge, from the family's forward-backward
(:func:`crfkit.kernels.chain.forward_backward`,
:func:`crfkit.kernels.chain_pd.pd_forward_backward`).

Not the summed edge marginals of ``chain.edge_marginal_sum``: each edge keeps its own matrix, and
``chain_marginals_pf`` prefetches the store rows SDCA's gap pass reads next, so the pairwise loop
here is its own (``error_model="numpy"``, as the SDCA kernels that call it).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .chain import forward_backward
from .chain_exp import FAST, exp_minus, max_min
from .chain_log import log_backward
from .chain_pd import pd_edge, pd_exp, pd_forward_backward, pd_node
from .prefetch import prefetch_range
from .simd import vmul

# error_model="numpy": a float division is IEEE (no ZeroDivisionError branch), so that the loops
# over marginal entries vectorise (the branch kept LLVM from it; every division here is guarded
# anyway)
_NOPY = dict(cache=True, nogil=True, fastmath=FAST, error_model="numpy")


# ------------------------------------------------------------- marginals
@njit(**_NOPY)
def chain_marginals(score, T, trans, es, alpha, beta, scale, node, pair):
    """Forward-backward on a chain with emission scores ``score[:T]`` and shared transition scores
    ``trans``: node marginals into ``node[:T]``, pairwise marginals into ``pair[:T-1]``; returns log
    Z. (:func:`chain_marginals_pf` with nothing else to prefetch: its prefetches go to its own
    outputs.)"""
    return chain_marginals_pf(
        score,
        T,
        trans,
        es,
        alpha,
        beta,
        scale,
        node,
        pair,
        node.reshape(node.size),
        0,
        pair.reshape(pair.size),
        0,
    )


@njit(**_NOPY)
def chain_marginals_pf(score, T, trans, es, alpha, beta, scale, node, pair, nflat, n0, pflat, p0):
    """:func:`chain_marginals`, prefetching on the way the stored marginals the caller sweeps next
    (SDCA's gap pass): the T node rows ``nflat[n0:n0 + T L]`` and the T - 1 pairwise rows
    ``pflat[p0:p0 + (T - 1) L^2]`` (flat views of the stores).  The pairwise loop asks for the
    stored edge's row it is at, a label row (L entries) at a time, so that the lines are requested
    spread over the loop (:mod:`crfkit.kernels.prefetch`)."""
    L = trans.shape[0]
    LL = L * L
    tmax = max_min(trans)[0]
    expM = exp_minus(trans, tmax)
    logz = forward_backward(score, T, trans, expM, tmax, es, alpha, beta, scale)
    if scale[0] < 0.0:
        # log domain: alpha holds the node marginals, es log-alpha
        lb = np.empty((T, L))
        log_backward(score, T, trans, lb)
        for t in range(T - 1):
            for a in range(L):
                for b in range(L):
                    pair[t, a, b] = np.exp(
                        es[t, a] + trans[a, b] + score[t + 1, b] + lb[t + 1, b] - logz
                    )
        for t in range(T):
            for l in range(L):
                node[t, l] = alpha[t, l]
        return logz
    prefetch_range(nflat, n0, n0 + T * L)
    tmp = np.empty(L)
    for t in range(T - 1):
        vmul(tmp, es[t + 1], beta[t + 1], 1.0 / scale[t + 1], L)
        for a in range(L):
            k = p0 + t * LL + a * L
            prefetch_range(pflat, k, k + L)
            # pair[t, a, b] = expM[a, b] * tmp[b] * alpha[t, a] (explicit vector code, kernels.simd)
            vmul(pair[t, a], expM[a], tmp, alpha[t, a], L)
    for t in range(T):
        vmul(node[t], alpha[t], beta[t], 1.0, L)
    return logz


@njit(**_NOPY)
def pd_chain_marginals(score, T, M, es, alpha, beta, scale, expM, node, pair):
    """Marginals of a chain with position-dependent transition scores ``M[t]`` (between t-1 and t,
    1 <= t < T): node marginals into ``node[:T]``, pairwise into ``pair[:T-1]``; returns log Z."""
    L = score.shape[1]
    tmx = np.zeros(T)
    rng = 0.0
    for t in range(1, T):
        hi, lo = max_min(M[t])
        tmx[t] = hi
        if hi - lo > rng:
            rng = hi - lo
    pd_exp(T, M, tmx, expM)
    logz = pd_forward_backward(score, T, M, tmx, rng, expM, es, alpha, beta, scale)
    for t in range(1, T):
        pd_edge(t, score, M, expM, es, alpha, beta, scale, logz, pair[t - 1])
    pd_node(T, alpha, beta, scale)
    for t in range(T):
        for l in range(L):
            node[t, l] = alpha[t, l]
    return logz
