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
(norm_k beta_k)`` over the iterations of the current window, ``last[j]`` the
iteration up to which coordinate ``j`` is current, and ``d_j`` is constant
while ``j`` is not touched, so bringing ``j`` up to date is
``v_j -= d_j (cum[t] - cum[last_j])``.  Only the coordinates an example
touches (the state features of its attributes and the transition features)
are brought up to date, so an iteration costs O(features of the example),
not O(parameters).  :func:`full_catch_up` ends a window (once per epoch, or
when ``beta`` gets tiny): every coordinate is brought up to date and ``beta``
folded into ``v``.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .chain import (FAST, edge_marginal_sum, emissions, forward_backward, gold_score, log_partition,
                    transition_matrix)
from .oracle import apply_gradient

_NOPY = dict(cache=True, nogil=True, fastmath=FAST)

# methods
SAG, SAG_NUS, SAG_NUS_STAR, SAGA, SAGA_NUS = 0, 1, 2, 3, 4
# SAGA step rules of Proposition 1
STEP_A, STEP_B = 0, 1
# float scalars: fsc[...]
F_BETA, F_LG, F_STEP, F_LMAX = 0, 1, 2, 3
N_FSC = 4
# int scalars: isc[...]
I_M, I_EVALS, I_T, I_ITER, I_MK = 0, 1, 2, 3, 4
N_ISC = 5
# a window is closed (full catch-up, fold) when beta falls below this
BETA_FLOOR = 1e-100
# Algorithm 1, line 11: the line search runs only when ||g_i||^2 > this
LS_MIN_GNORM2 = 1e-8
LS_MAX_DOUBLINGS = 60

_U53 = 1.0 / 9007199254740992.0


# --------------------------------------------------------------------- random
@njit(**_NOPY)
def rng_uniform(st):
    """A uniform double in [0, 1) from the splitmix64 generator whose state is ``st[0]`` (uint64)."""
    st[0] += np.uint64(0x9E3779B97F4A7C15)
    z = st[0]
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return float(z >> np.uint64(11)) * _U53


@njit(**_NOPY)
def rng_below(st, n):
    """A uniform integer in [0, n)."""
    k = int(rng_uniform(st) * n)
    return k if k < n else n - 1


# ------------------------------------------------------------------- sum tree
def tree_size(n: int) -> int:
    """Number of leaves P (a power of two >= n); the tree arrays have 2P entries, leaf i at P + i."""
    P = 1
    while P < max(n, 1):
        P *= 2
    return P


@njit(**_NOPY)
def tree_clear(tsum, tmax, tmin):
    for k in range(tsum.shape[0]):
        tsum[k] = 0.0
        tmax[k] = -np.inf
        tmin[k] = np.inf


@njit(**_NOPY)
def tree_set(tsum, tmax, tmin, i, value):
    """Leaf i <- value (value > 0 makes it active); recompute its O(log n) ancestors from their children."""
    P = tsum.shape[0] // 2
    k = P + i
    if value > 0.0:
        tsum[k] = value
        tmax[k] = value
        tmin[k] = value
    else:
        tsum[k] = 0.0
        tmax[k] = -np.inf
        tmin[k] = np.inf
    k //= 2
    while k >= 1:
        a = 2 * k
        tsum[k] = tsum[a] + tsum[a + 1]
        tmax[k] = max(tmax[a], tmax[a + 1])
        tmin[k] = min(tmin[a], tmin[a + 1])
        k //= 2


@njit(**_NOPY)
def tree_sample(tsum, u):
    """The leaf whose cumulative-weight interval holds ``u * total`` (u in [0, 1)): P(i) = w_i / total."""
    P = tsum.shape[0] // 2
    target = u * tsum[1]
    k = 1
    while k < P:
        a = 2 * k
        if tsum[a + 1] <= 0.0:
            k = a
        elif tsum[a] <= 0.0 or target >= tsum[a]:
            if tsum[a] > 0.0:
                target -= tsum[a]
            k = a + 1
        else:
            k = a
    return k - P


@njit(**_NOPY)
def tree_build(tsum, tmax, tmin, Li):
    """The tree of leaves ``Li`` (0: inactive); the same arrays as setting the leaves one by one."""
    tree_clear(tsum, tmax, tmin)
    for i in range(Li.shape[0]):
        tree_set(tsum, tmax, tmin, i, Li[i])


# ----------------------------------------------------------- lazy dense term
@njit(**_NOPY)
def catch_up_example(seq_ptr, tok_ptr, attr, attr_ptr, n_state, n_trans, i, v, d, last, cum, t):
    """Bring the coordinates example i touches up to date through iteration t of the window."""
    c = cum[t]
    for e in range(tok_ptr[seq_ptr[i]], tok_ptr[seq_ptr[i + 1]]):
        a = attr[e]
        for k in range(attr_ptr[a], attr_ptr[a + 1]):
            lk = last[k]
            if lk < t:
                v[k] -= d[k] * (c - cum[lk])
                last[k] = t
    for k in range(n_state, n_state + n_trans):
        lk = last[k]
        if lk < t:
            v[k] -= d[k] * (c - cum[lk])
            last[k] = t


@njit(**_NOPY)
def full_catch_up(v, d, last, cum, fsc, isc):
    """Close the window: every coordinate up to date, beta folded into v (v becomes w), t <- 0."""
    t = isc[I_T]
    c = cum[t]
    beta = fsc[F_BETA]
    for k in range(v.shape[0]):
        lk = last[k]
        if lk < t:
            v[k] -= d[k] * (c - cum[lk])
        v[k] *= beta
        last[k] = 0
    fsc[F_BETA] = 1.0
    isc[I_T] = 0
    cum[0] = 0.0


# ------------------------------------------------------------ one example
@njit(**_NOPY)
def example_oracle(seq_ptr, tok_ptr, attr, val, y, attr_ptr, feat_label, trans_index, n_state, i, v, beta,
                   node, edge, score, bm, es, scale):
    """The per-example oracle (loss, node marginals into ``node[:T]``, summed edge marginals into ``edge``)
    at w = beta*v, the same computation as :func:`crfkit.kernels.oracle.sequence_oracle`, that also
    leaves the emission scores in ``score[:T]`` and returns the transition scores: the line search
    starts from them instead of computing them again.  ``bm``, ``es``, ``scale``: scratch (>= T rows).
    Returns (loss, transition score matrix)."""
    Lab = trans_index.shape[0]
    t0 = seq_ptr[i]
    t1 = seq_ptr[i + 1]
    T = t1 - t0
    for a in range(Lab):
        for b in range(Lab):
            edge[a, b] = 0.0
    trans = transition_matrix(v, beta, n_state, trans_index)
    if T == 0:
        return 0.0, trans
    tmax = trans.max()
    expM = np.exp(trans - tmax)
    emissions(tok_ptr, attr, val, t0, t1, attr_ptr, feat_label, v, beta, score)
    logz = forward_backward(score, T, trans, expM, tmax, es, node, bm, scale)
    edge_marginal_sum(T, expM, es, node, bm, scale, score, trans, logz, edge)
    for r in range(T):
        for lab in range(Lab):
            node[r, lab] *= bm[r, lab]
    return logz - gold_score(score, y, t0, T, trans), trans


@njit(**_NOPY)
def line_search(seq_ptr, tok_ptr, attr, val, y, attr_ptr, feat_label, trans_index, n_state, i,
                score, trans, g, gnorm2, f, L, shift, sc2, es, alpha, scale):
    """Algorithm 2: double L while -log p(y_i|x_i, w - g/L) >= f - ||g||^2 / (2L).

    ``score`` (T x L) and ``trans`` (L x L) are the emission and transition
    scores of example i at w (from :func:`example_oracle`); ``g`` is the dense
    scratch vector holding example i's loss gradient on the coordinates it
    touches.  Forward passes only (``log_partition``).  Returns (L, number of
    forward evaluations).
    """
    t0 = seq_ptr[i]
    t1 = seq_ptr[i + 1]
    T = t1 - t0
    Lab = trans_index.shape[0]
    emissions(tok_ptr, attr, val, t0, t1, attr_ptr, feat_label, g, 1.0, shift)
    gtr = transition_matrix(g, 1.0, n_state, trans_index)
    tr2 = np.empty((Lab, Lab))
    nev = 0
    while True:
        inv = 1.0 / L
        for r in range(T):
            for lab in range(Lab):
                sc2[r, lab] = score[r, lab] - inv * shift[r, lab]
        for a in range(Lab):
            for b in range(Lab):
                tr2[a, b] = trans[a, b] - inv * gtr[a, b]
        tmax = tr2.max()
        expM = np.exp(tr2 - tmax)
        fp = log_partition(sc2, T, tr2, expM, tmax, es, alpha, scale) - gold_score(sc2, y, t0, T, tr2)
        nev += 1
        if fp < f - gnorm2 * 0.5 * inv or nev > LS_MAX_DOUBLINGS:
            break
        L *= 2.0
    return L, nev


@njit(**_NOPY)
def line_search_at(seq_ptr, tok_ptr, attr, val, y, attr_ptr, feat_label, trans_index, n_state, i,
                   v, beta, g, gnorm2, f, L, score, shift, sc2, es, alpha, scale):
    """:func:`line_search` at w = beta*v, computing the scores at w first (for callers without them)."""
    emissions(tok_ptr, attr, val, seq_ptr[i], seq_ptr[i + 1], attr_ptr, feat_label, v, beta, score)
    trans = transition_matrix(v, beta, n_state, trans_index)
    return line_search(seq_ptr, tok_ptr, attr, val, y, attr_ptr, feat_label, trans_index, n_state, i,
                       score, trans, g, gnorm2, f, L, shift, sc2, es, alpha, scale)


@njit(**_NOPY)
def process_example(seq_ptr, tok_ptr, attr, val, y, attr_ptr, feat_label, trans_index, n_state, n_trans,
                    i, store, stored, do_ls, L, v, beta, d, last, cum, t, node_store, trans_store,
                    node, edge, gbuf, gvec, dbuf, score, shift, sc2, es, alpha, scale):
    """Evaluate example i at the current weights and put ``g_new - g_old`` into ``dbuf``.

    Brings i's coordinates up to date, calls the oracle, gathers the gradient
    into ``gvec`` (one entry per touched coordinate), runs the line search from
    ``L`` when ``do_ls`` (and ||g||^2 > 1e-8), adds ``g_new - g_old`` into
    ``dbuf`` (``g_old`` rebuilt from the stored node marginals and transition
    gradient, 0 when ``stored`` is False) and, when ``store``, replaces the
    stored marginals and transition gradient of i.  Leaves ``gbuf`` and
    ``gvec`` zero.  Returns (loss, ||g||^2, L, evaluations).
    """
    catch_up_example(seq_ptr, tok_ptr, attr, attr_ptr, n_state, n_trans, i, v, d, last, cum, t)
    loss, trans = example_oracle(seq_ptr, tok_ptr, attr, val, y, attr_ptr, feat_label, trans_index, n_state, i,
                                 v, beta, node, edge, score, sc2, es, scale)
    nev = 1
    apply_gradient(seq_ptr, tok_ptr, attr, val, y, attr_ptr, feat_label, trans_index,
                   n_state, i, node, edge, 1.0, gbuf)
    # gather: gbuf (with repeats of a coordinate summed) -> gvec, one visit per coordinate
    g2 = 0.0
    for e in range(tok_ptr[seq_ptr[i]], tok_ptr[seq_ptr[i + 1]]):
        a = attr[e]
        for k in range(attr_ptr[a], attr_ptr[a + 1]):
            x = gbuf[k]
            if x != 0.0:
                gvec[k] = x
                gbuf[k] = 0.0
                g2 += x * x
    for k in range(n_state, n_state + n_trans):
        x = gbuf[k]
        gvec[k] = x
        gbuf[k] = 0.0
        g2 += x * x
    if do_ls and g2 > LS_MIN_GNORM2:
        L, ls = line_search(seq_ptr, tok_ptr, attr, val, y, attr_ptr, feat_label, trans_index, n_state, i,
                            score, trans, gvec, g2, loss, L, shift, sc2, es, alpha, scale)
        nev += ls
    # dbuf += g_new - g_old, state features: one visit per occurrence; g_new (gvec, then cleared) at the
    # first occurrence of a coordinate, g_old rebuilt from the stored node marginals occurrence by
    # occurrence (the per-coordinate order of the additions is that of add_state_grad after g_new)
    row0 = seq_ptr[i]
    T = seq_ptr[i + 1] - row0
    for r in range(T):
        yt = y[row0 + r]
        for e in range(tok_ptr[row0 + r], tok_ptr[row0 + r + 1]):
            a = attr[e]
            c = -val[e]
            for k in range(attr_ptr[a], attr_ptr[a + 1]):
                x = gvec[k]
                if x != 0.0:
                    dbuf[k] += x
                    gvec[k] = 0.0
                if stored:
                    lab = feat_label[k]
                    p = node_store[row0 + r, lab]
                    if lab == yt:
                        p -= 1.0
                    dbuf[k] += c * p
    for k in range(n_trans):
        x = gvec[n_state + k]
        dbuf[n_state + k] += x - trans_store[i, k] if stored else x
        if store:
            trans_store[i, k] = x
        gvec[n_state + k] = 0.0
    if store:
        Lab = node.shape[1]
        for r in range(T):
            for lab in range(Lab):
                node_store[row0 + r, lab] = node[r, lab]
    return loss, g2, L, nev


@njit(**_NOPY)
def consume(seq_ptr, tok_ptr, attr, attr_ptr, n_state, n_trans, i, dbuf, dcoef, vcoef, d, v):
    """d += dcoef * dbuf and v += vcoef * dbuf on example i's coordinates; dbuf back to zero there."""
    for e in range(tok_ptr[seq_ptr[i]], tok_ptr[seq_ptr[i + 1]]):
        a = attr[e]
        for k in range(attr_ptr[a], attr_ptr[a + 1]):
            x = dbuf[k]
            if x != 0.0:
                d[k] += dcoef * x
                v[k] += vcoef * x
                dbuf[k] = 0.0
    for k in range(n_state, n_state + n_trans):
        x = dbuf[k]
        d[k] += dcoef * x
        v[k] += vcoef * x
        dbuf[k] = 0.0


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
def sag_run(seq_ptr, tok_ptr, attr, val, y, attr_ptr, feat_label, trans_index, n_state, n_trans,
            method, step_rule, l2, L0, eval_target,
            v, d, last, cum, node_store, trans_store, perm, pos, kperm, kpos, Li, tsum, tmax, tmin,
            fsc, isc, rng, node, edge, gbuf, gvec, dbuf, dbuf2, score, shift, sc2, es, alpha, scale):
    """Iterate until ``isc[I_EVALS] >= eval_target`` (evaluations: oracle calls plus line-search forward passes).

    Returns 0, or 1 when a step made ``1 - alpha*l2 <= 0`` (the run must stop).
    State: ``fsc`` = [beta, L_g, last step, L_max (SAG-NUS)], ``isc`` = [m
    (examples with a stored gradient), evaluations, t (window iteration),
    iterations, m_k (examples with a known L_i)]; ``perm[0:m]`` the stored
    examples (``pos`` its inverse); ``kperm[0:m_k]`` those with an ``L_i``
    (``kpos``), whose ``L_i`` are the active leaves of the tree.
    """
    n = seq_ptr.shape[0] - 1
    decay = 2.0 ** (-1.0 / n)
    while isc[I_EVALS] < eval_target:
        t = isc[I_T]
        if t + 2 >= cum.shape[0] or fsc[F_BETA] < BETA_FLOOR:
            full_catch_up(v, d, last, cum, fsc, isc)
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
            # 5: with probability 1/2 uniformly, with 1/2 proportionally to L_i among the seen examples
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
        # ---- starting Lipschitz estimate for the line search
        if method == SAG or method == SAGA:
            Lstart = fsc[F_LG]
        elif method == SAG_NUS:
            Lstart = 0.5 * Li[j] if known else L0
        else:
            Lstart = 0.9 * Li[j] if known else 0.5 * lbar
        saga_b = (method == SAGA or method == SAGA_NUS) and step_rule == STEP_B
        store_j = not saga_b
        loss, g2, Lnew, nev = process_example(
            seq_ptr, tok_ptr, attr, val, y, attr_ptr, feat_label, trans_index, n_state, n_trans,
            j, store_j, stored, True, Lstart, v, beta, d, last, cum, t, node_store, trans_store,
            node, edge, gbuf, gvec, dbuf, score, shift, sc2, es, alpha, scale)
        isc[I_EVALS] += nev
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
            a_t = 0.5 * (1.0 / (tmax[1] + l2) + 1.0 / (lbar + l2))
        elif method == SAGA:
            Lf = fsc[F_LG] + l2
            a_t = 1.0 / (4.0 * Lf + n * l2) if step_rule == STEP_A else 1.0 / (4.0 * Lf)
        else:
            Lhi = tmax[1] if mk > 0 else lbar
            if mk < n and lbar > Lhi:
                Lhi = lbar
            a_t = n * pmin / (4.0 * (Lhi + l2) + n * l2) if step_rule == STEP_A else 1.0 / (4.0 * (lbar + l2))
        shrink = 1.0 - a_t * l2
        if shrink <= 0.0:
            return 1
        # ---- SAGA (b): the memory is refreshed at an independent uniform r, at the same w
        r = -1
        if saga_b:
            r = rng_below(rng, n)
            _l, _g, _L, nev2 = process_example(
                seq_ptr, tok_ptr, attr, val, y, attr_ptr, feat_label, trans_index, n_state, n_trans,
                r, True, pos[r] < m, False, 1.0, v, beta, d, last, cum, t, node_store, trans_store,
                node, edge, gbuf, gvec, dbuf2, score, shift, sc2, es, alpha, scale)
            isc[I_EVALS] += nev2
            _mark_stored(r, perm, pos, isc)
        beta *= shrink
        fsc[F_BETA] = beta
        fsc[F_STEP] = a_t
        # ---- the sparse parts of the step, then the lazy dense one
        if method <= SAG_NUS_STAR:
            # (4): w <- (1 - a l2) w - (a/m) d with d already holding g_new
            consume(seq_ptr, tok_ptr, attr, attr_ptr, n_state, n_trans, j, dbuf, 1.0, 0.0, d, v)
            norm = float(isc[I_M])
        else:
            # Proposition 1: w <- (1 - a l2) w - a [c (g_j - s_j) + d_old / n], c = 1/(n p_j);
            # the dense term is deferred with the updated d, so the touched coordinates get the difference
            c = 1.0 / (n * pj)
            if saga_b:
                consume(seq_ptr, tok_ptr, attr, attr_ptr, n_state, n_trans, j, dbuf, 0.0, -a_t * c / beta, d, v)
                consume(seq_ptr, tok_ptr, attr, attr_ptr, n_state, n_trans, r, dbuf2, 1.0, a_t / (n * beta), d, v)
            else:
                consume(seq_ptr, tok_ptr, attr, attr_ptr, n_state, n_trans, j, dbuf, 1.0,
                        -a_t * (c - 1.0 / n) / beta, d, v)
            norm = float(n)
        cum[t + 1] = cum[t] + a_t / (norm * beta)
        isc[I_T] = t + 1
        isc[I_ITER] += 1
        if method == SAG or method == SAGA:
            fsc[F_LG] *= decay      # Algorithm 1, line 16
        elif method == SAG_NUS:
            fsc[F_LMAX] *= decay
    return 0
