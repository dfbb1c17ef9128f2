"""Numba kernels of the stochastic average gradient family (Schmidt et al. 2015).

What lives here (``crfkit.optim.sag`` drives it):

* a small counter-based random generator (splitmix64) whose whole state is one
  ``uint64``, so that a run can be checkpointed and resumed bitwise;
* a sum tree (with max and min) over per-example Lipschitz estimates ``L_i``:
  setting a leaf and drawing an example with probability ``L_i / sum_j L_j``
  are both O(log n).  Internal nodes are recomputed from their two children
  (never updated by a difference), so the tree is a pure function of its
  leaves and can be rebuilt exactly from the ``L_i`` on resume;
* :func:`sag_run`: SAG / SAG-NUS / SAG-NUS* / SAGA / SAGA-NUS iterations on a
  CRF corpus with the paper's "Mixed" memory (per example: node marginals
  T_i x L and the transition gradient) and lazy updates.

Lazy updates.  The weights are ``w = beta * v``.  An iteration takes
``w <- (1 - alpha*l2) w - (alpha/norm) d (- sparse terms)`` with ``d`` the sum
of the stored loss gradients; ``(1 - alpha*l2)`` goes into ``beta`` and the
dense ``d`` term is deferred: ``cum[t]`` holds ``sum_{k<=t} alpha_k /
(norm_k beta_k)`` over the iterations of the current window, ``last`` the
iteration up to which a coordinate is current, and ``d_j`` is constant
while ``j`` is not touched, so bringing ``j`` up to date is
``v_j -= d_j (cum[t] - cum[last_j])``.  Only the coordinates an example
touches (the state features of its attributes and the transition features)
are brought up to date, so an iteration costs O(features of the example),
not O(parameters).  The features of one attribute are always touched
together, so ``last`` is kept per attribute (plus one entry for the
transition block).  :func:`full_catch_up` ends a window (once per epoch, or
when ``beta`` gets tiny): every coordinate is brought up to date and ``beta``
folded into ``v``.

Per example the work is a few walks over its attribute occurrences
(:func:`process_example`): the catch-up fused with the emission scores, which
also lays out small example-local buffers for the gradient and for
``g_new - g_old`` (the features of its distinct attributes one after the
other); one walk that fills both (for state features ``g_new - g_old`` is
``x (p_new - p_old)`` per occurrence, the gold part cancelling); and, when the
line search runs, the emission scores of the gradient.  Attributes whose
features are all labels in order (:func:`full_rows`, e.g. dense pixel
attributes) are handled as contiguous label rows, which numba vectorises.

Where it lives: this module holds :func:`sag_run`; :mod:`crfkit.kernels.sag_state` the method codes,
the scalar-state slots, the generator, the sum tree and the buffer bounds;
:mod:`crfkit.kernels.sag_example` the catch-up and the work on one example.  The names this module
held before that split are re-exported here (``__all__``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .chain import forward_backward_edges, gold_score, log_partition
from .chain_emit import add_full_row, add_scattered_rows, row_emissions, transition_matrix
from .chain_exp import FAST, exp_minus, max_min
from .sag_example import (
    catch_up_emissions,
    chain_oracle,
    consume,
    full_catch_up,
    gradient_and_difference,
    line_search_scores,
    local_emissions,
    process_example,
)
from .sag_state import (
    BETA_FLOOR,
    F_BETA,
    F_LG,
    F_LMAX,
    F_STEP,
    I_EVALS,
    I_ITER,
    I_M,
    I_MK,
    I_T,
    LS_MAX_DOUBLINGS,
    LS_MIN_GNORM2,
    LS_SKIP_MAX_STREAK,
    N_FSC,
    N_ISC,
    SAG,
    SAG_NUS,
    SAG_NUS_STAR,
    SAGA,
    SAGA_NUS,
    STEP_A,
    STEP_B,
    max_coordinates,
    max_occurrences,
    rng_below,
    rng_uniform,
    tree_build,
    tree_clear,
    tree_sample,
    tree_set,
    tree_size,
)

# the names this module held before it was split keep working from here
__all__ = [
    "add_full_row",
    "add_scattered_rows",
    "BETA_FLOOR",
    "catch_up_emissions",
    "chain_oracle",
    "consume",
    "exp_minus",
    "F_BETA",
    "F_LG",
    "F_LMAX",
    "F_STEP",
    "FAST",
    "forward_backward_edges",
    "full_catch_up",
    "gold_score",
    "gradient_and_difference",
    "I_EVALS",
    "I_ITER",
    "I_M",
    "I_MK",
    "I_T",
    "line_search_scores",
    "local_emissions",
    "log_partition",
    "LS_MAX_DOUBLINGS",
    "LS_MIN_GNORM2",
    "LS_SKIP_MAX_STREAK",
    "max_coordinates",
    "max_min",
    "max_occurrences",
    "N_FSC",
    "N_ISC",
    "process_example",
    "rng_below",
    "rng_uniform",
    "row_emissions",
    "SAG",
    "SAG_NUS",
    "SAG_NUS_STAR",
    "sag_run",
    "SAGA",
    "SAGA_NUS",
    "STEP_A",
    "STEP_B",
    "transition_matrix",
    "tree_build",
    "tree_clear",
    "tree_sample",
    "tree_set",
    "tree_size",
]


_NOPY = dict(cache=True, nogil=True, fastmath=FAST)


@njit(**_NOPY)
def _mark_known(i, kperm, kpos, isc):
    """Move example i into the known-L_i part kperm[0:mk]."""
    mk = isc[I_MK]
    p = kpos[i]
    if p >= mk:
        other = kperm[mk]
        kperm[mk] = i
        kperm[p] = other
        kpos[i] = mk
        kpos[other] = p
        isc[I_MK] = mk + 1


@njit(**_NOPY)
def _mark_stored(i, perm, pos, isc):
    """Move example i into the stored-gradient part perm[0:m]; m += 1 when it is new."""
    m = isc[I_M]
    p = pos[i]
    if p >= m:
        other = perm[m]
        perm[m] = i
        perm[p] = other
        pos[i] = m
        pos[other] = p
        isc[I_M] = m + 1


# --------------------------------------------------------------- the driver
@njit(**_NOPY)
def sag_run(
    seq_ptr,
    tok_ptr,
    attr,
    val,
    y,
    attr_ptr,
    feat_label,
    full,
    trans_index,
    n_state,
    n_trans,
    method,
    step_rule,
    l2,
    L0,
    eval_target,
    ls_skip,
    lmax_decayed,
    v,
    d,
    alast,
    cum,
    node_store,
    trans_store,
    perm,
    pos,
    kperm,
    kpos,
    Li,
    skip_left,
    skip_streak,
    tsum,
    tmax,
    tmin,
    fsc,
    isc,
    rng,
    mark,
    ulist,
    ulist2,
    obase,
    node,
    edge,
    gloc,
    dloc,
    dloc2,
    pm,
    dp,
    score,
    shift,
    sc2,
    es,
    alpha,
    scale,
):
    """Iterate until ``isc[I_EVALS] >= eval_target`` (evaluations: oracle calls plus line-search
    forward passes).

    Returns 0, or 1 when a step made ``1 - alpha*l2 <= 0`` (the run must stop).
    State: ``fsc`` = [beta, L_g, last step, L_max (SAG-NUS)], ``isc`` = [m
    (examples with a stored gradient), evaluations, t (window iteration),
    iterations, m_k (examples with a known L_i)]; ``perm[0:m]`` the stored
    examples (``pos`` its inverse); ``kperm[0:m_k]`` those with an ``L_i``
    (``kpos``), whose ``L_i`` are the active leaves of the tree.  ``full``:
    :func:`full_rows`; ``alast`` (n_attr + 1), ``mark`` (n_attr + 1, 2): see
    :func:`catch_up_emissions`; ``ulist``, ``ulist2``, ``obase``: room for the
    attribute occurrences of an example (:func:`max_occurrences`); ``gloc``,
    ``dloc``, ``dloc2``: example-local buffers (:func:`max_coordinates`), zero.

    ``ls_skip`` (methods with per-example ``L_i``: SAG-NUS, SAG-NUS*,
    SAGA-NUS): line-search skipping.  ``skip_streak[i]`` counts the line
    searches of example i in a row that accepted their starting estimate
    without doubling; after the k-th such one the next ``2^(k-1)`` line
    searches of i are skipped (``skip_left[i]``), ``L_i`` kept as it is (not
    decreased, not tested); a line search that doubles resets the streak.

    ``lmax_decayed`` (SAG-NUS*, SAGA-NUS): the ``L`` of the step (SAG-NUS*'s
    ``0.5 (1/L + 1/Lbar)``, SAGA-NUS's rule (a)) is ``fsc[F_LMAX] + l2``:
    the largest ``L_i`` the visits returned, multiplied by ``2^(-1/n)`` after
    every step (SAG-NUS's ``L_max``, the 2013 SAG code's ``Lmax``, the
    per-example form of Algorithm 1's ``L_g``); when False it is the current
    ``max_i L_i + l2`` (the tree's maximum).  ``fsc[F_LMAX]`` is raised to
    the example's ``L_i`` after every visit in both cases (a skipped line
    search included: its ``L_i`` stands); it decays only when
    ``lmax_decayed`` (SAG-NUS: always).
    """
    n = seq_ptr.shape[0] - 1
    decay = 2.0 ** (-1.0 / n)
    while isc[I_EVALS] < eval_target:
        t = isc[I_T]
        if t + 2 >= cum.shape[0] or fsc[F_BETA] < BETA_FLOOR:
            full_catch_up(attr_ptr, n_state, n_trans, v, d, alast, cum, fsc, isc)
            t = 0
        m = isc[I_M]
        mk = isc[I_MK]
        beta = fsc[F_BETA]
        lsum = tsum[1]
        lbar = lsum / mk if mk > 0 else L0
        pj = 1.0 / n
        pmin = 1.0 / n
        # ---- sample j
        if method == SAG or method == SAGA:
            j = rng_below(rng, n)
        elif method == SAG_NUS:
            # Schmidt, Le Roux & Bach (2013, 5.5): an unseen example with probability (n-m)/n,
            # otherwise a seen one with probability proportional to L_i + Lbar + 2*l2, i.e.
            # half uniformly and half proportionally to L_i + l2
            if rng_uniform(rng) * n < n - m:
                j = perm[m + rng_below(rng, n - m)]
            else:
                u = rng_uniform(rng)
                if u < 0.5:
                    j = perm[rng_below(rng, m)]
                elif rng_uniform(rng) * (lsum + mk * l2) < lsum:
                    j = tree_sample(tsum, rng_uniform(rng))
                else:
                    j = kperm[rng_below(rng, mk)]
        elif method == SAG_NUS_STAR:
            # 5: with probability 1/2 uniformly, with 1/2 proportionally to L_i among the seen
            # examples
            if mk == 0 or rng_uniform(rng) < 0.5:
                j = rng_below(rng, n)
            else:
                j = tree_sample(tsum, rng_uniform(rng))
        else:
            # SAGA-NUS: p_j = L_j / sum_i L_i, an example without an estimate counting as Lbar
            total = lsum + (n - mk) * lbar
            if rng_uniform(rng) * total < lsum:
                j = tree_sample(tsum, rng_uniform(rng))
                pj = Li[j] / total
            else:
                j = kperm[mk + rng_below(rng, n - mk)]
                pj = lbar / total
            lo = tmin[1] if mk > 0 else lbar
            if mk < n and lbar < lo:
                lo = lbar
            pmin = lo / total
        known = kpos[j] < mk
        stored = pos[j] < m
        per_example = method == SAG_NUS or method == SAG_NUS_STAR or method == SAGA_NUS
        skipping = ls_skip and per_example and known and skip_left[j] > 0
        # ---- starting Lipschitz estimate for the line search
        if method == SAG or method == SAGA:
            Lstart = fsc[F_LG]
        elif skipping:
            Lstart = Li[j]
        elif method == SAG_NUS:
            Lstart = 0.5 * Li[j] if known else L0
        else:
            Lstart = 0.9 * Li[j] if known else 0.5 * lbar
        saga_b = (method == SAGA or method == SAGA_NUS) and step_rule == STEP_B
        store_j = not saga_b
        loss, g2, Lnew, nev, nu = process_example(
            seq_ptr,
            tok_ptr,
            attr,
            val,
            y,
            attr_ptr,
            feat_label,
            full,
            trans_index,
            n_state,
            n_trans,
            j,
            store_j,
            stored,
            not skipping,
            Lstart,
            v,
            beta,
            d,
            alast,
            cum,
            t,
            mark,
            ulist,
            obase,
            node_store,
            trans_store,
            node,
            edge,
            gloc,
            dloc,
            pm,
            dp,
            score,
            shift,
            sc2,
            es,
            alpha,
            scale,
        )
        isc[I_EVALS] += nev
        if ls_skip and per_example:
            if skipping:
                skip_left[j] -= 1
            elif g2 > LS_MIN_GNORM2:
                if nev == 2:  # the oracle and one trial: the starting estimate was accepted
                    if skip_streak[j] < LS_SKIP_MAX_STREAK:
                        skip_streak[j] += 1
                    skip_left[j] = np.int64(1) << (skip_streak[j] - 1)
                else:
                    skip_streak[j] = 0
        if store_j:
            _mark_stored(j, perm, pos, isc)
        # ---- Lipschitz estimates
        if method == SAG or method == SAGA:
            fsc[F_LG] = Lnew
        else:
            Li[j] = Lnew
            tree_set(tsum, tmax, tmin, j, Lnew)
            _mark_known(j, kperm, kpos, isc)
            if Lnew > fsc[F_LMAX]:
                fsc[F_LMAX] = Lnew
        m = isc[I_M]
        mk = isc[I_MK]
        lbar = tsum[1] / mk if mk > 0 else L0
        # ---- step size
        if method == SAG:
            a_t = 1.0 / (fsc[F_LG] + l2)
        elif method == SAG_NUS:
            lm = fsc[F_LMAX] + l2
            a_t = ((n - m) / n) / lm + (m / n) * (0.5 / lm + 0.5 / (lbar + l2))
        elif method == SAG_NUS_STAR:
            Lhi = fsc[F_LMAX] if lmax_decayed else tmax[1]
            a_t = 0.5 * (1.0 / (Lhi + l2) + 1.0 / (lbar + l2))
        elif method == SAGA:
            Lf = fsc[F_LG] + l2
            a_t = 1.0 / (4.0 * Lf + n * l2) if step_rule == STEP_A else 1.0 / (4.0 * Lf)
        else:
            if lmax_decayed:
                Lhi = fsc[F_LMAX]
            else:
                Lhi = tmax[1] if mk > 0 else lbar
            if mk < n and lbar > Lhi:
                Lhi = lbar
            a_t = (
                n * pmin / (4.0 * (Lhi + l2) + n * l2)
                if step_rule == STEP_A
                else 1.0 / (4.0 * (lbar + l2))
            )
        shrink = 1.0 - a_t * l2
        if shrink <= 0.0:
            return 1
        # ---- SAGA (b): the memory is refreshed at an independent uniform r, at the same w
        r = -1
        nu2 = 0
        if saga_b:
            r = rng_below(rng, n)
            _l, _g, _L, nev2, nu2 = process_example(
                seq_ptr,
                tok_ptr,
                attr,
                val,
                y,
                attr_ptr,
                feat_label,
                full,
                trans_index,
                n_state,
                n_trans,
                r,
                True,
                pos[r] < m,
                False,
                1.0,
                v,
                beta,
                d,
                alast,
                cum,
                t,
                mark,
                ulist2,
                obase,
                node_store,
                trans_store,
                node,
                edge,
                gloc,
                dloc2,
                pm,
                dp,
                score,
                shift,
                sc2,
                es,
                alpha,
                scale,
            )
            isc[I_EVALS] += nev2
            _mark_stored(r, perm, pos, isc)
        beta *= shrink
        fsc[F_BETA] = beta
        fsc[F_STEP] = a_t
        # ---- the sparse parts of the step, then the lazy dense one
        if method <= SAG_NUS_STAR:
            # (4): w <- (1 - a l2) w - (a/m) d with d already holding g_new
            consume(attr_ptr, n_state, n_trans, ulist, nu, dloc, 1.0, 0.0, d, v)
            norm = float(isc[I_M])
        else:
            # Proposition 1: w <- (1 - a l2) w - a [c (g_j - s_j) + d_old / n], c = 1/(n p_j);
            # the dense term is deferred with the updated d, so the touched coordinates get the
            # difference
            c = 1.0 / (n * pj)
            if saga_b:
                consume(attr_ptr, n_state, n_trans, ulist, nu, dloc, 0.0, -a_t * c / beta, d, v)
                consume(attr_ptr, n_state, n_trans, ulist2, nu2, dloc2, 1.0, a_t / (n * beta), d, v)
            else:
                consume(
                    attr_ptr,
                    n_state,
                    n_trans,
                    ulist,
                    nu,
                    dloc,
                    1.0,
                    -a_t * (c - 1.0 / n) / beta,
                    d,
                    v,
                )
            norm = float(n)
        cum[t + 1] = cum[t] + a_t / (norm * beta)
        isc[I_T] = t + 1
        isc[I_ITER] += 1
        if method == SAG or method == SAGA:
            fsc[F_LG] *= decay  # Algorithm 1, line 16
        elif method == SAG_NUS or lmax_decayed:
            fsc[F_LMAX] *= decay
    return 0
