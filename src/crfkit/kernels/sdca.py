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

Where it lives: this module holds the sparse primal direction, the SDCA and OEG steps and the runs;
:mod:`crfkit.kernels.sdca_store` the constants and the dual store (gold and warm marginals,
``w_hat``, the projection, entropies and divergences); :mod:`crfkit.kernels.sdca_linesearch` the
line search and the elastic net's thresholding; the clique marginals come from
:mod:`crfkit.kernels.chain_pairs`.  The names this module held before that split are re-exported
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
from .sag import rng_below, rng_uniform, tree_sample, tree_set
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


# ------------------------------------------------------------- sparse primal direction
# The state part of the direction is gathered in a local layout: ``acc[0:total]`` holds the feature
# rows of the sequence's distinct attributes one after the other, in the order of ``alist`` (the
# order of their first occurrences: :func:`crfkit.kernels.occ.buffer_offsets` gives each occurrence
# the offset of its attribute's row, once before the run).  The rows of a step are
# then contiguous (a few kB), not scattered over a vector of all the features (3.6 MB on
# CoNLL-2000), and the norm and the update read them as one array.
@njit(**_NOPY)
def accumulate_direction(tok_ptr, attr, ok0, onk, val, lab, bo, t0, t1, dn, acc, alist):
    """(E_d F) of the state features over the attribute occurrences of tokens t0..t1-1 (dn: T x L)
    into the local layout above: ``acc[o + q] += x * dn[t, label(k0 + q)]`` (o = ``bo[e]`` the
    offset of the attribute's row, :func:`crfkit.kernels.occ.buffer_offsets`; k0 its first feature);
    the distinct attributes are listed in ``alist`` (an occurrence is its attribute's first where
    its offset is the total width listed so far and the attribute has features).  Returns their
    count.  Reads the occurrences through the per-occurrence layout ``(ok0, onk, lab)`` of
    :func:`crfkit.kernels.occ.layout` (the attribute's first feature and feature count, -1 for a
    full row, read in order with the occurrence) instead of ``attr_ptr``, ``full`` and
    ``feat_label`` by attribute: the same additions in the same order."""
    L = dn.shape[1]
    na = 0
    total = 0
    for t in range(t0, t1):
        d = dn[t - t0]
        part = False
        for e in range(tok_ptr[t], tok_ptr[t + 1]):
            nk = onk[e]
            o = bo[e]
            if o == total and nk != 0:  # (an attribute without features is not listed)
                alist[na] = attr[e]
                na += 1
                total += L if nk < 0 else nk
            if nk < 0:
                add_full_row(acc[o : o + L], d, 0, val[e])
            else:
                part = True
        if part:
            for e in range(tok_ptr[t], tok_ptr[t + 1]):
                nk = onk[e]
                if nk >= 0:
                    x = val[e]
                    o = bo[e]
                    k0 = ok0[e]
                    for q in range(nk):
                        acc[o + q] += x * d[lab[k0 + q]]
    return na


@njit(inline="always", **_NOPY)
def _local_total(attr_ptr, alist, na):
    total = 0
    for j in range(na):
        a = alist[j]
        total += attr_ptr[a + 1] - attr_ptr[a]
    return total


@njit(**_NOPY)
def direction_norm2(attr_ptr, acc, alist, na, tdir, trans_index):
    """||u||^2 over the listed attributes' features (``acc`` in the local layout of
    :func:`accumulate_direction`) and the transition features (tdir: L x L)."""
    s = 0.0
    for k in range(_local_total(attr_ptr, alist, na)):
        s += acc[k] * acc[k]
    L = trans_index.shape[0]
    for a in range(L):
        for b in range(L):
            if trans_index[a, b] >= 0:
                s += tdir[a, b] * tdir[a, b]
    return s


@njit(**_NOPY)
def apply_direction(attr_ptr, acc, alist, na, tdir, trans_index, n_state, c, w):
    """w += c * u (listed attributes, ``acc`` in the local layout of :func:`accumulate_direction`,
    and transitions); clears ``acc`` for the next step."""
    o = 0
    for j in range(na):
        a = alist[j]
        k0 = attr_ptr[a]
        nk = attr_ptr[a + 1] - k0
        wr = w[k0 : k0 + nk]
        ar = acc[o : o + nk]
        for q in range(nk):
            wr[q] += c * ar[q]
            ar[q] = 0.0
        o += nk
    L = trans_index.shape[0]
    for a in range(L):
        for b in range(L):
            k = trans_index[a, b]
            if k >= 0:
                w[n_state + k] += c * tdir[a, b]


@njit(**_NOPY)
def scores_dot(T, score, trans, dn, dp):
    """sum_t dn[t] . score[t] + sum_t dp[t] . trans: the inner product of w with E_d F for a
    sequence whose emission scores at w are ``score`` (d: node and pairwise differences)."""
    L = trans.shape[0]
    s = 0.0
    for t in range(T):
        for l in range(L):
            s += dn[t, l] * score[t, l]
    for t in range(T - 1):
        for a in range(L):
            for b in range(L):
                s += dp[t, a, b] * trans[a, b]
    return s


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
def _store_slices(node_store, pair_store, t0, T, e0):
    return node_store[t0 : t0 + T], pair_store[e0 : e0 + max(T - 1, 0)]


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
