"""Numba kernels of the dual methods on clique marginals: Prox-SDCA (Le Priol,
Touati & Lacoste-Julien) and online exponentiated gradient (Collins, Globerson, Koo,
Carreras & Bartlett 2008).

The dual variable of sequence i is the set of its clique marginals: node marginals ``node`` (T x L,
rows ``seq_ptr[i]:seq_ptr[i+1]`` of the node store) and pairwise marginals ``pair`` ((T-1) x L x L,
rows ``eptr[i]:eptr[i+1]`` of the pair store; ``pair[t][a, b] = p(y_t = a, y_{t+1} = b)``).  The
chain's cliques are its T-1 edges and its separators the T-2 interior nodes, so (paper, eq. 9, 10)

    H(mu)          = sum_t H(pair_t) - sum_{t=1}^{T-2} H(node_t)            (T = 1: H(node_0))
    KL(mu || mu')  = sum_t KL(pair_t || pair'_t) - sum_{t=1}^{T-2} KL(node_t || node'_t)

are the entropy and the divergence of the chain distributions with those marginals.

The weights are the conjugate ``w = w_hat(mu) = (1/(l2 n)) sum_i (F(x_i, y_i) - E_{mu_i} F(x_i,
.))``; a step on sequence i changes only the state features of its attributes and the transition
features, so it is applied sparsely and needs no scaling of ``w``.

SDCA's line search maximises ``f(g) = H(mu + g d) - (l2 n / 2) ||w + g v||^2`` on [0, 1]
(d = mu' - mu, mu' the marginals under w, v the primal direction).  Its derivative, written so that
every term is a well-conditioned ``log1p`` of a relative change,

    f'(g) = sum_cliques d . log(mu' / mu_g) - sum_separators (same) - g q,
    log(mu' / mu_g) = log1p((1 - g) d / mu_g),     q = ||E_d F||^2 / (l2 n)

(the ``w . v`` term is folded in through ``log mu' = w . F - log Z``), gives ``f'(0) = KL(mu||mu') +
KL(mu'||mu) > 0`` and ``f'(1) = -q = -l2 n ||v||^2 < 0``: the root is bracketed, and a safeguarded
Newton (``f''(g) = -sum_cliques d^2 / mu_g + sum_separators d^2 / mu_g - q``) with bisection finds
it.

Where it lives: this module holds the SDCA step and the runs; :mod:`crfkit.kernels.sdca_direction`
the sparse primal direction; :mod:`crfkit.kernels.sdca_oeg` the OEG step;
:mod:`crfkit.kernels.sdca_store` the constants and the dual store (gold and warm marginals,
``w_hat``, the projection, entropies and divergences); :mod:`crfkit.kernels.sdca_linesearch` the
line search and the elastic net's thresholding; the clique marginals come from
:mod:`crfkit.kernels.chain_pairs`.  The names this module held before those splits are re-exported
here (``__all__``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .bitcast import bits_f64, f64_bits
from .chain import forward_backward
from .chain_emit import add_full_row, emissions_rows
from .chain_exp import EXACT, FAST, exp_minus, max_min
from .chain_pairs import chain_marginals, chain_marginals_pf, pd_chain_marginals
from .chain_pd import pd_edge, pd_exp, pd_forward_backward, pd_node
from .occ import emissions as occ_emissions
from .prefetch import prefetch_range
from .sag_state import rng_below, rng_uniform, tree_sample, tree_set
from .sdca_direction import accumulate_direction, apply_direction, direction_norm2, scores_dot
from .sdca_linesearch import (
    LS_BLOCK,
    TAYLOR_LOG_ERR,
    TAYLOR_ROUND,
    TAYLOR_ULP,
    apply_direction_enet,
    enet_h,
    enet_pack,
    first_guess,
    fprime,
    fprime_moments,
    line_search,
    line_search_enet,
    load_gap,
    log_fast_into,
    ls_entries,
    soft_threshold,
    taylor_root,
)
from .sdca_oeg import oeg_step
from .sdca_store import (
    F_GAMMA,
    F_GAPSUM,
    GAP,
    GAP_UNSEEN,
    GOLD_CLOSED_MAX,
    I_EVALS,
    I_LS,
    I_NC,
    I_NF,
    I_REJECT,
    I_STEPS,
    LOG_FLOOR,
    LS_MAXIT,
    N_FSC,
    N_ISC,
    OEG,
    OEG_ETA0,
    OEG_ETA_MAX,
    OEG_ETA_MIN,
    OEG_GROW,
    OEG_MAX_HALVINGS,
    OEG_RANGE,
    SDCA,
    UNIFORM,
    chain_entropy,
    chain_kl,
    gold_marginals,
    gold_marginals_closed,
    init_store,
    project_dual,
    store_entropies,
    trans_into,
    w_hat,
    warm_store,
)

# the names this module held before it was split keep working from here
__all__ = [
    "taylor_root",
    "trans_into",
    "accumulate_direction",
    "add_full_row",
    "apply_direction",
    "apply_direction_enet",
    "bits_f64",
    "chain_entropy",
    "chain_kl",
    "chain_marginals",
    "chain_marginals_pf",
    "direction_norm2",
    "dual_run",
    "emissions_rows",
    "enet_h",
    "enet_pack",
    "EXACT",
    "exp_minus",
    "f64_bits",
    "F_GAMMA",
    "F_GAPSUM",
    "FAST",
    "first_guess",
    "forward_backward",
    "fprime",
    "fprime_moments",
    "GAP",
    "GAP_UNSEEN",
    "GOLD_CLOSED_MAX",
    "gold_marginals",
    "gold_marginals_closed",
    "I_EVALS",
    "I_LS",
    "I_NC",
    "I_NF",
    "I_REJECT",
    "I_STEPS",
    "init_store",
    "line_search",
    "line_search_enet",
    "load_gap",
    "log_fast_into",
    "LOG_FLOOR",
    "LS_BLOCK",
    "ls_entries",
    "LS_MAXIT",
    "max_min",
    "N_FSC",
    "N_ISC",
    "occ_emissions",
    "OEG",
    "OEG_ETA0",
    "OEG_ETA_MAX",
    "OEG_ETA_MIN",
    "OEG_GROW",
    "OEG_MAX_HALVINGS",
    "OEG_RANGE",
    "oeg_step",
    "pd_chain_marginals",
    "pd_edge",
    "pd_exp",
    "pd_forward_backward",
    "pd_node",
    "prefetch_range",
    "project_dual",
    "refresh_gaps",
    "rng_below",
    "rng_uniform",
    "scores_dot",
    "SDCA",
    "sdca_step",
    "soft_threshold",
    "store_entropies",
    "TAYLOR_LOG_ERR",
    "TAYLOR_ROUND",
    "TAYLOR_ULP",
    "tree_sample",
    "tree_set",
    "UNIFORM",
    "w_hat",
    "warm_store",
]


# error_model="numpy": a float division is IEEE (no ZeroDivisionError branch), so that the loops
# over marginal entries vectorise (the branch kept LLVM from it; every division here is guarded
# anyway)
_NOPY = dict(cache=True, nogil=True, fastmath=FAST, error_model="numpy")
_PAR = dict(cache=True, nogil=True, fastmath=FAST, parallel=True, error_model="numpy")


# ------------------------------------------------------------- the runs
@njit(**_NOPY)
def _sample(n, sampling, mixing, tsum, rng):
    if sampling == GAP and tsum[1] > 0.0 and rng_uniform(rng) >= mixing:
        return tree_sample(tsum, rng_uniform(rng))
    return rng_below(rng, n)


@njit(**_NOPY)
def _set_gap(tsum, tmax, tmin, gaps, i, g):
    if not (g > 0.0):
        g = 0.0
    gaps[i] = g
    tree_set(tsum, tmax, tmin, i, g)


@njit(**_NOPY)
def sdca_step(
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
    tol,
    w,
    node_store,
    pair_store,
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
    flat,
    acc,
    bo,
    alist,
    tdir,
    isc,
    kappa,
    z,
    ez,
):
    """One Prox-SDCA step on sequence i (Algorithm 1): returns (g_i, gamma).  ``flat``: float64
    scratch of shape (2, >= max(L^2, LS_BLOCK)).

    One sweep over the stored marginals, edge by edge, gives the gap, f'(0) and the transition part
    of the direction (:func:`load_gap`); the line search reads the store's rows and the new
    marginals where they are (:func:`ls_entries`); one sweep writes the mixed marginals back.  The
    emission scores and the direction read the attribute occurrences through ``(ok0, onk, lab)``
    (:func:`crfkit.kernels.occ.layout`; ``attr_ptr`` serves the per-attribute loops over the touched
    rows).

    ``kappa = l1 / l2 > 0`` (elastic net): ``z`` holds w_hat(mu) and ``w = S_kappa(z)`` (the scores
    are taken at w); the line search is :func:`line_search_enet` over the coordinates packed into
    ``ez`` ((3, >= touched) float64 scratch).  ``kappa = 0``: ``z`` is unused (pass ``w``)."""
    L = trans_index.shape[0]
    LL = L * L
    t0 = seq_ptr[i]
    T = seq_ptr[i + 1] - t0
    if T == 0:
        return 0.0, 0.0
    e0 = eptr[i]
    pair2 = pair_store.reshape((pair_store.shape[0], LL))
    pn2 = pair_n.reshape((pair_n.shape[0], LL))
    trans_into(w, n_state, trans_index, trans)
    occ_emissions(tok_ptr, ok0, onk, val, lab, t0, t0 + T, w, 1.0, score)
    # the forward-backward prefetches the stored rows the gap pass sweeps next (cold: 2 of its 8 us
    # on OCR)
    chain_marginals_pf(
        score,
        T,
        trans,
        es,
        alpha,
        beta,
        scale,
        node_n,
        pair_n,
        node_store.reshape(node_store.size),
        t0 * L,
        pair_store.reshape(pair_store.size),
        e0 * LL,
    )
    gap, fp0, c0, c1 = load_gap(
        T, t0, e0, node_store, pair2, node_n, pn2, m_node, d_node, tdir, flat
    )
    bu, bl = flat[0], flat[1]
    pm, pn, sm, sn = ls_entries(T, t0, e0, node_store, pair_store, node_n, pair_n)
    isc[I_NF] += pm.shape[0] + sm.shape[0]
    isc[I_NC] += pm.shape[0] + sm.shape[0]
    # u = E_mu F - E_mu' F = -E_d F: the node part through the attributes, the pairwise through
    # trans
    na = accumulate_direction(tok_ptr, attr, ok0, onk, val, lab, bo, t0, t0 + T, d_node, acc, alist)
    if kappa > 0.0:
        nz = enet_pack(
            attr_ptr, acc, alist, na, tdir, trans_index, n_state, z, -1.0 / l2n, kappa, ez
        )
        gamma = line_search_enet(pm, pn, sm, sn, fp0, c0, c1, tol, bu, bl, isc, nz, ez, kappa, l2n)
        apply_direction_enet(
            attr_ptr, acc, alist, na, tdir, trans_index, n_state, -gamma / l2n, kappa, z, w
        )
    else:
        q = direction_norm2(attr_ptr, acc, alist, na, tdir, trans_index) / l2n
        gamma = line_search(pm, pn, sm, sn, q, fp0, c0, c1, tol, bu, bl, isc)
        # acc and tdir hold E_d F = -u: w += gamma u / (l2 n)
        apply_direction(attr_ptr, acc, alist, na, tdir, trans_index, n_state, -gamma / l2n, w)
    if gamma > 0.0:
        omg = 1.0 - gamma
        for t in range(T):
            nr = node_store[t0 + t]
            for l in range(L):
                nr[l] = omg * m_node[t, l] + gamma * node_n[t, l]
        for t in range(T - 1):
            row = pair2[e0 + t]
            pn = pn2[t]
            for k in range(LL):
                row[k] = omg * np.float64(row[k]) + gamma * pn[k]
    return gap, gamma


@njit(**_NOPY)
def dual_run(
    method,
    sampling,
    mixing,
    target,
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
    tol,
    w,
    node_store,
    pair_store,
    gaps,
    etas,
    tsum,
    tmax,
    tmin,
    rng,
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
    flat,
    isc,
    fsc,
    kappa,
    z,
    ez,
):
    """Steps of ``method`` (SDCA or OEG) until ``isc[I_EVALS]`` reaches ``target`` (``kappa``,
    ``z``, ``ez``: SDCA's elastic net, see :func:`sdca_step`)."""
    n = seq_ptr.shape[0] - 1
    while isc[I_EVALS] < target:
        i = _sample(n, sampling, mixing, tsum, rng)
        if method == SDCA:
            isc[I_EVALS] += 1
            g, gamma = sdca_step(
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
                tol,
                w,
                node_store,
                pair_store,
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
                flat,
                acc,
                bo,
                alist,
                tdir,
                isc,
                kappa,
                z,
                ez,
            )
            fsc[F_GAMMA] = gamma
            if sampling == GAP:
                _set_gap(tsum, tmax, tmin, gaps, i, g)
        else:
            oeg_step(
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
            )
        isc[I_STEPS] += 1


@njit(**_NOPY)
def refresh_gaps(
    seq_ptr,
    eptr,
    tok_ptr,
    attr,
    val,
    attr_ptr,
    feat_label,
    full,
    trans_index,
    n_state,
    w,
    node_store,
    pair_store,
    gaps,
    tsum,
    tmax,
    tmin,
    trans,
    score,
    es,
    alpha,
    beta,
    scale,
    node_n,
    pair_n,
):
    """g_i = KL(mu_i || mu_i(w)) for every sequence (one marginalisation each); returns their
    sum."""
    n = seq_ptr.shape[0] - 1
    L = trans_index.shape[0]
    nflat = node_store.reshape(node_store.size)
    pflat = pair_store.reshape(pair_store.size)
    trans_into(w, n_state, trans_index, trans)
    total = 0.0
    for i in range(n):
        t0 = seq_ptr[i]
        T = seq_ptr[i + 1] - t0
        g = 0.0
        if T > 0:
            e0 = eptr[i]
            emissions_rows(
                tok_ptr, attr, val, t0, t0 + T, attr_ptr, feat_label, full, w, 1.0, score
            )
            chain_marginals_pf(
                score,
                T,
                trans,
                es,
                alpha,
                beta,
                scale,
                node_n,
                pair_n,
                nflat,
                t0 * L,
                pflat,
                e0 * L * L,
            )
            g = chain_kl(
                node_store[t0 : t0 + T], pair_store[e0 : e0 + max(T - 1, 0)], node_n, pair_n, T
            )
        _set_gap(tsum, tmax, tmin, gaps, i, g)
        total += gaps[i]
    return total
