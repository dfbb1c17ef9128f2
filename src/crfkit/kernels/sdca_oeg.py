"""The online exponentiated-gradient step of the dual methods (Collins, Globerson, Koo, Carreras &
Bartlett 2008), :func:`oeg_step`, run by :func:`crfkit.kernels.sdca.dual_run`.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .chain_exp import FAST, max_min
from .chain_pairs import pd_chain_marginals
from .occ import emissions as occ_emissions
from .sdca_direction import accumulate_direction, apply_direction, direction_norm2, scores_dot
from .sdca_store import (
    I_EVALS,
    I_REJECT,
    LOG_FLOOR,
    OEG_ETA_MAX,
    OEG_ETA_MIN,
    OEG_GROW,
    OEG_MAX_HALVINGS,
    OEG_RANGE,
    chain_entropy,
    trans_into,
)

# error_model="numpy": a float division is IEEE (no ZeroDivisionError branch), so that the loops
# over marginal entries vectorise (the branch kept LLVM from it; every division here is guarded
# anyway)
_NOPY = dict(cache=True, nogil=True, fastmath=FAST, error_model="numpy")


@njit(**_NOPY)
def _store_slices(node_store, pair_store, t0, T, e0):
    return node_store[t0 : t0 + T], pair_store[e0 : e0 + max(T - 1, 0)]


@njit(**_NOPY)
def oeg_step(
    i,
    seq_ptr,
    eptr,
    tok_ptr,
    attr,
    val,
    attr_ptr,
    ok0,
    onk,
    lab,
    trans_index,
    n_state,
    l2n,
    w,
    node_store,
    pair_store,
    etas,
    trans,
    score,
    es,
    alpha,
    beta,
    scale,
    node_n,
    pair_n,
    m_node,
    d_node,
    m_pair,
    d_pair,
    M,
    expM,
    theta,
    pot,
    acc,
    bo,
    alist,
    tdir,
    isc,
):
    """One online EG step on sequence i: mu_i <- the chain with potentials (1 - eta) theta_i + eta
    s_w, theta_i the log-potentials of the stored marginals, s_w the scores under w; the step is
    taken when it increases the dual, otherwise eta_i is halved and the step recomputed (each try
    one marginalisation, counted in ``isc[I_EVALS]``), but not below ``OEG_ETA_MIN``: a step refused
    there ends the visit without a step (eta_i stays at the floor).  Without the floor an example
    whose steps cannot increase the dual at any eta was tried 31 times at every visit, its eta_i
    halved to 1e-100 and beyond: with the float32 store the chain of the stored marginals'
    log-potentials is not exactly the stored marginals (they are rounded, so not exactly
    consistent), so even eta -> 0 moves them by that rounding, and the dual change of that move
    decides the test (measured on CoNLL-2002 Dutch: 189 examples below eta 1e-6 after 10 epochs and
    5,516 refused tries in the 10th, 35% of its oracle calls; with the float64 store none and 525).
    Returns the dual increase times n."""
    L = trans_index.shape[0]
    t0 = seq_ptr[i]
    T = seq_ptr[i + 1] - t0
    if T == 0:
        isc[I_EVALS] += 1
        return 0.0
    e0 = eptr[i]
    ns, ps = _store_slices(node_store, pair_store, t0, T, e0)
    trans_into(w, n_state, trans_index, trans)
    occ_emissions(tok_ptr, ok0, onk, val, lab, t0, t0 + T, w, 1.0, score)
    # theta: log-potentials of the stored chain (log pair_t - log node_t on edge t >= 1; T = 1: log
    # node_0)
    for t in range(T):
        for l in range(L):
            m_node[t, l] = np.float64(ns[t, l])
    for t in range(T - 1):
        for a in range(L):
            for b in range(L):
                m_pair[t, a, b] = np.float64(ps[t, a, b])
    h_old = chain_entropy(m_node, m_pair, T)
    for t in range(T - 1):
        for a in range(L):
            sep = np.log(max(m_node[t, a], LOG_FLOOR)) if t >= 1 else 0.0
            for b in range(L):
                theta[t + 1, a, b] = np.log(max(m_pair[t, a, b], LOG_FLOOR)) - sep
    if T == 1:
        for l in range(L):
            pot[0, l] = np.log(max(m_node[0, l], LOG_FLOOR))
    eta = etas[i]
    dual_gain = 0.0
    for _ in range(OEG_MAX_HALVINGS + 1):
        isc[I_EVALS] += 1
        for t in range(1, T):
            for a in range(L):
                for b in range(L):
                    M[t, a, b] = (1.0 - eta) * theta[t, a, b] + eta * trans[a, b]
            hi = max_min(M[t])[0]
            floor = hi - OEG_RANGE
            for a in range(L):
                for b in range(L):
                    if M[t, a, b] < floor:
                        M[t, a, b] = floor
        for t in range(T):
            for l in range(L):
                es[t, l] = eta * score[t, l] + ((1.0 - eta) * pot[0, l] if T == 1 else 0.0)
        # es is overwritten by the forward-backward: the potentials go through d_node
        for t in range(T):
            for l in range(L):
                d_node[t, l] = es[t, l]
        pd_chain_marginals(d_node, T, M, es, alpha, beta, scale, expM, node_n, pair_n)
        h_new = chain_entropy(node_n, pair_n, T)
        # u = E_old F - E_new F; n * dual change = H_new - H_old - w.u - ||u||^2 / (2 l2 n)
        for t in range(T):
            for l in range(L):
                d_node[t, l] = m_node[t, l] - node_n[t, l]
        for t in range(T - 1):
            for a in range(L):
                for b in range(L):
                    d_pair[t, a, b] = m_pair[t, a, b] - pair_n[t, a, b]
        wu = scores_dot(T, score, trans, d_node, d_pair)
        na = accumulate_direction(
            tok_ptr, attr, ok0, onk, val, lab, bo, t0, t0 + T, d_node, acc, alist
        )
        for a in range(L):
            for b in range(L):
                tdir[a, b] = 0.0
        for t in range(T - 1):
            for a in range(L):
                for b in range(L):
                    tdir[a, b] += d_pair[t, a, b]
        u2 = direction_norm2(attr_ptr, acc, alist, na, tdir, trans_index)
        gain = h_new - h_old - wu - 0.5 * u2 / l2n
        if gain > 0.0:
            apply_direction(attr_ptr, acc, alist, na, tdir, trans_index, n_state, 1.0 / l2n, w)
            for t in range(T):
                for l in range(L):
                    ns[t, l] = node_n[t, l]
            for t in range(T - 1):
                for a in range(L):
                    for b in range(L):
                        ps[t, a, b] = pair_n[t, a, b]
            etas[i] = min(eta * OEG_GROW, OEG_ETA_MAX)
            dual_gain = gain
            break
        apply_direction(attr_ptr, acc, alist, na, tdir, trans_index, n_state, 0.0, w)
        isc[I_REJECT] += 1
        if eta <= OEG_ETA_MIN:
            break
        eta = max(0.5 * eta, OEG_ETA_MIN)
        etas[i] = eta
    return dual_gain
