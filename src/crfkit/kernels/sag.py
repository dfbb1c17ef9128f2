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
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .chain import forward_backward_edges, gold_score, log_partition
from .chain_emit import add_full_row, add_scattered_rows, row_emissions, transition_matrix
from .chain_exp import FAST, exp_minus, max_min

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
# line-search skipping: at most 2^(this - 1) line searches of one example skipped in a row
LS_SKIP_MAX_STREAK = 20

_U53 = 1.0 / 9007199254740992.0


# --------------------------------------------------------------------- random
@njit(**_NOPY)
def rng_uniform(st):
    """A uniform double in [0, 1) from the splitmix64 generator whose state is ``st[0]``
    (uint64)."""
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
    """Number of leaves P (a power of two >= n); the tree arrays have 2P entries, leaf i at
    P + i."""
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
    """Leaf i <- value (value > 0 makes it active); recompute its O(log n) ancestors from their
    children."""
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
    """The leaf whose cumulative-weight interval holds ``u * total`` (u in [0, 1)):
    P(i) = w_i / total."""
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


def max_occurrences(seq_ptr, tok_ptr) -> int:
    """The largest number of attribute occurrences of one sequence (a bound on its distinct
    attributes)."""
    if len(seq_ptr) < 2:
        return 1
    return max(int(np.max(tok_ptr[seq_ptr[1:]] - tok_ptr[seq_ptr[:-1]])), 1)


def max_coordinates(seq_ptr, tok_ptr, attr, attr_ptr, n_trans) -> int:
    """A bound on the coordinates one sequence touches: the features of its attribute occurrences
    (largest over the sequences) plus the transition features; the size of the example-local
    buffers."""
    if len(seq_ptr) < 2:
        return max(int(n_trans), 1)
    cs = np.concatenate(([0], np.cumsum(np.diff(attr_ptr)[attr])))
    per = cs[tok_ptr[seq_ptr[1:]]] - cs[tok_ptr[seq_ptr[:-1]]]
    return max(int(per.max()) + int(n_trans), 1)


# The walks below take an example's full-row attributes and its other ones in two loops, as
# crfkit.kernels.chain.emissions_rows does (see the note on attribute rows there).


# ----------------------------------------------------------- lazy dense term
@njit(inline="always", **_NOPY)
def _catch_up_range(v, d, k0, k1, delta):
    vr = v[k0:k1]
    dr = d[k0:k1]
    for k in range(k1 - k0):
        vr[k] -= dr[k] * delta


@njit(**_NOPY)
def catch_up_emissions(
    tok_ptr,
    attr,
    val,
    t0,
    t1,
    attr_ptr,
    feat_label,
    full,
    n_state,
    n_trans,
    v,
    beta,
    d,
    alast,
    cum,
    t,
    mark,
    ulist,
    obase,
    out,
):
    """Bring the coordinates of tokens t0..t1-1 (and the transition features) up to date through
    iteration t of the window and write their emission scores at w = beta*v into ``out``; one walk.

    ``alast[a]`` is the iteration up to which the features of attribute ``a``
    are current (all of an attribute's features are always brought up to date
    together), ``alast[n_attr]`` that of the transition features.  An attribute
    is caught up at its first occurrence, before its weights are read
    (``v_k -= d_k (cum[t] - cum[last])``), so the scores are those of
    :func:`crfkit.kernels.chain.emissions` at the caught-up weights.

    It also lays out the example-local buffers: the distinct attributes go to
    ``ulist`` in order of first occurrence, their features one after the other
    (attribute ``ulist[u]`` at the sum of the feature counts of ``ulist[:u]``),
    and ``obase[e - tok_ptr[t0]]`` receives the local offset of occurrence
    ``e``'s attribute (``mark[a, 0]``: a per-call stamp, ``mark[a, 1]`` the
    offset, ``mark[n_attr, 0]`` the stamp counter).  Returns (number of
    distinct attributes, number of their features).
    """
    L = out.shape[1]
    na = attr_ptr.shape[0] - 1
    stamp = mark[na, 0] + 1
    mark[na, 0] = stamp
    c = cum[t]
    nu = 0
    total = 0
    e0 = tok_ptr[t0]
    for tt in range(t0, t1):
        orow = out[tt - t0]
        for l in range(L):
            orow[l] = 0.0
        part = False
        for e in range(tok_ptr[tt], tok_ptr[tt + 1]):
            a = attr[e]
            k0 = attr_ptr[a]
            if mark[a, 0] != stamp:
                k1 = attr_ptr[a + 1]
                mark[a, 0] = stamp
                mark[a, 1] = total
                ulist[nu] = a
                nu += 1
                total += k1 - k0
                la = alast[a]
                if la < t:
                    _catch_up_range(v, d, k0, k1, c - cum[la])
                    alast[a] = t
            obase[e - e0] = mark[a, 1]
            if full[a]:
                add_full_row(orow, v, k0, val[e] * beta)
            else:
                part = True
        if part:
            add_scattered_rows(
                orow, v, False, tt, e0, tok_ptr, attr, val, attr_ptr, feat_label, full, obase, beta
            )
    la = alast[na]
    if la < t:
        _catch_up_range(v, d, n_state, n_state + n_trans, c - cum[la])
        alast[na] = t
    return nu, total


@njit(**_NOPY)
def full_catch_up(attr_ptr, n_state, n_trans, v, d, alast, cum, fsc, isc):
    """Close the window: every coordinate up to date, beta folded into v (v becomes w), t <- 0."""
    t = isc[I_T]
    c = cum[t]
    beta = fsc[F_BETA]
    na = attr_ptr.shape[0] - 1
    for a in range(na):
        la = alast[a]
        if la < t:
            _catch_up_range(v, d, attr_ptr[a], attr_ptr[a + 1], c - cum[la])
        alast[a] = 0
    la = alast[na]
    if la < t:
        _catch_up_range(v, d, n_state, n_state + n_trans, c - cum[la])
    alast[na] = 0
    for k in range(v.shape[0]):
        v[k] *= beta
    fsc[F_BETA] = 1.0
    isc[I_T] = 0
    cum[0] = 0.0


# ------------------------------------------------------------ one example
@njit(**_NOPY)
def _chain_oracle(y, t0, T, v, beta, n_state, trans_index, node, edge, score, bm, es, scale):
    """The oracle from the emission scores ``score[:T]`` of the example whose tokens start at t0:
    (loss, transition score matrix); node marginals into ``node[:T]``, summed edge marginals into
    ``edge``."""
    Lab = trans_index.shape[0]
    for a in range(Lab):
        for b in range(Lab):
            edge[a, b] = 0.0
    trans = transition_matrix(v, beta, n_state, trans_index)
    if T == 0:
        return 0.0, trans
    tmax = max_min(trans)[0]
    expM = exp_minus(trans, tmax)
    logz = forward_backward_edges(score, T, trans, expM, tmax, es, node, bm, scale, edge)
    for r in range(T):
        for lab in range(Lab):
            node[r, lab] *= bm[r, lab]
    return logz - gold_score(score, y, t0, T, trans), trans


@njit(**_NOPY)
def _line_search_scores(y, t0, T, score, shift, trans, gtr, gnorm2, f, L, sc2, es, alpha, scale):
    """Algorithm 2 from the scores at w (``score``, ``trans``) and those of the gradient (``shift``,
    ``gtr``): the scores at w - g/L are ``score - shift/L``, ``trans - gtr/L``."""
    Lab = trans.shape[0]
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
        tmax = max_min(tr2)[0]
        expM = exp_minus(tr2, tmax)
        fp = log_partition(sc2, T, tr2, expM, tmax, es, alpha, scale) - gold_score(
            sc2, y, t0, T, tr2
        )
        nev += 1
        if fp < f - gnorm2 * 0.5 * inv or nev > LS_MAX_DOUBLINGS:
            break
        L *= 2.0
    return L, nev


@njit(**_NOPY)
def gradient_and_difference(
    tok_ptr, attr, val, t0, t1, attr_ptr, feat_label, full, obase, pm, dp, gloc, dloc
):
    """One walk over the occurrences of tokens t0..t1-1, into the example-local buffers laid out by
    :func:`catch_up_emissions`: ``gloc += x * pm[r, label]`` (the state part of the loss gradient
    when ``pm`` = node marginals minus the gold indicator, as
    :func:`crfkit.kernels.oracle.apply_gradient` adds it, coordinate by coordinate in the same
    order) and ``dloc += x * dp[r, label]`` (with ``dp`` = new minus stored node marginals:
    g_new - g_old, the gold part cancelling)."""
    L = pm.shape[1]
    e0 = tok_ptr[t0]
    for tt in range(t0, t1):
        pr = pm[tt - t0]
        dr = dp[tt - t0]
        part = False
        for e in range(tok_ptr[tt], tok_ptr[tt + 1]):
            a = attr[e]
            if full[a]:
                b = obase[e - e0]
                x = val[e]
                gr = gloc[b : b + L]
                br = dloc[b : b + L]
                for l in range(L):
                    gr[l] += x * pr[l]
                    br[l] += x * dr[l]
            else:
                part = True
        if part:
            for e in range(tok_ptr[tt], tok_ptr[tt + 1]):
                a = attr[e]
                if not full[a]:
                    b = obase[e - e0]
                    x = val[e]
                    k0 = attr_ptr[a]
                    for q in range(attr_ptr[a + 1] - k0):
                        l = feat_label[k0 + q]
                        gloc[b + q] += x * pr[l]
                        dloc[b + q] += x * dr[l]


@njit(**_NOPY)
def local_emissions(tok_ptr, attr, val, t0, t1, attr_ptr, feat_label, full, obase, gloc, out):
    """:func:`crfkit.kernels.chain.emissions` of the example-local vector ``gloc`` (scale 1)."""
    row_emissions(
        tok_ptr, attr, val, t0, t1, attr_ptr, feat_label, full, gloc, 1.0, out, True, obase
    )


@njit(**_NOPY)
def process_example(
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
    i,
    store,
    stored,
    do_ls,
    L,
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
):
    """Evaluate example i at the current weights and put ``g_new - g_old`` into ``dloc``.

    Brings i's coordinates up to date while computing its emission scores
    (:func:`catch_up_emissions`, which lists its distinct attributes in
    ``ulist`` and lays out the example-local buffers ``gloc`` and ``dloc``:
    the features of ``ulist[0]``, ``ulist[1]``, ..., then the transition
    features), calls the oracle, accumulates the gradient into ``gloc`` and
    ``g_new - g_old`` into ``dloc`` in one walk (``g_old`` from the stored
    node marginals and transition gradient, 0 when ``stored`` is False), runs
    the line search from ``L`` when ``do_ls`` (and ||g||^2 > 1e-8) and, when
    ``store``, replaces the stored marginals and transition gradient of i,
    ``g_new`` in ``dloc`` then being the one rebuilt from the stored values
    (the same in a float64 store; rounded to the store's precision in a
    float32 one, so that ``d`` stays exactly the sum of what the store
    rebuilds).  ``gloc`` and ``dloc`` must be zero on entry; ``gloc`` is left
    zero (``dloc`` is consumed by :func:`consume`).  Returns (loss, ||g||^2, L, evaluations,
    number of distinct attributes in ``ulist``).
    """
    t0 = seq_ptr[i]
    t1 = seq_ptr[i + 1]
    T = t1 - t0
    Lab = trans_index.shape[0]
    nu, ts = catch_up_emissions(
        tok_ptr,
        attr,
        val,
        t0,
        t1,
        attr_ptr,
        feat_label,
        full,
        n_state,
        n_trans,
        v,
        beta,
        d,
        alast,
        cum,
        t,
        mark,
        ulist,
        obase,
        score,
    )
    loss, trans = _chain_oracle(
        y, t0, T, v, beta, n_state, trans_index, node, edge, score, sc2, es, scale
    )
    nev = 1
    # pm: marginals minus the gold indicator (the gradient's weights); dp: new minus stored
    # marginals. When storing, the new marginals are stored first and dp is taken from the stored
    # value, so that d stays the sum of the gradients the store rebuilds even when it holds them in
    # float32.
    for r in range(T):
        yt = y[t0 + r]
        for lab in range(Lab):
            p = node[r, lab]
            q = p - 1.0 if lab == yt else p
            pm[r, lab] = q
            if store:
                old = node_store[t0 + r, lab]
                node_store[t0 + r, lab] = p
                ps = np.float64(node_store[t0 + r, lab])
                if stored:
                    dp[r, lab] = ps - old
                else:
                    dp[r, lab] = ps - 1.0 if lab == yt else ps
            else:
                dp[r, lab] = p - node_store[t0 + r, lab] if stored else q
    gradient_and_difference(
        tok_ptr, attr, val, t0, t1, attr_ptr, feat_label, full, obase, pm, dp, gloc, dloc
    )
    # transition gradient at local offset ts (as apply_gradient: expected counts, minus the gold
    # transitions)
    for a in range(Lab):
        for b in range(Lab):
            k = trans_index[a, b]
            if k >= 0:
                gloc[ts + k] = edge[a, b]
    for r in range(1, T):
        k = trans_index[y[t0 + r - 1], y[t0 + r]]
        if k >= 0:
            gloc[ts + k] -= 1.0
    total = ts + n_trans
    g2 = 0.0
    for k in range(total):
        g2 += gloc[k] * gloc[k]
    if do_ls and g2 > LS_MIN_GNORM2:
        local_emissions(tok_ptr, attr, val, t0, t1, attr_ptr, feat_label, full, obase, gloc, shift)
        gtr = transition_matrix(gloc, 1.0, ts, trans_index)
        L, ls = _line_search_scores(
            y, t0, T, score, shift, trans, gtr, g2, loss, L, sc2, es, alpha, scale
        )
        nev += ls
    for k in range(n_trans):
        x = gloc[ts + k]
        if store:
            old = trans_store[i, k]
            trans_store[i, k] = x
            xs = np.float64(trans_store[i, k])
            dloc[ts + k] += xs - old if stored else xs
        else:
            dloc[ts + k] += x - trans_store[i, k] if stored else x
    gloc[:total] = 0.0
    return loss, g2, L, nev, nu


@njit(**_NOPY)
def consume(attr_ptr, n_state, n_trans, ulist, nu, dloc, dcoef, vcoef, d, v):
    """d += dcoef * dloc and v += vcoef * dloc for the example-local buffer ``dloc`` laid out over
    the attributes ``ulist[:nu]`` and the transition features (see :func:`process_example`); dloc
    back to zero."""
    # (the loops over an attribute's features are written on slices and repeated for the two cases:
    # numba vectorises them only so)
    off = 0
    if vcoef == 0.0:
        for u in range(nu):
            a = ulist[u]
            k0 = attr_ptr[a]
            k1 = attr_ptr[a + 1]
            br = dloc[off : off + k1 - k0]
            dr = d[k0:k1]
            for k in range(k1 - k0):
                dr[k] += dcoef * br[k]
            off += k1 - k0
    else:
        for u in range(nu):
            a = ulist[u]
            k0 = attr_ptr[a]
            k1 = attr_ptr[a + 1]
            br = dloc[off : off + k1 - k0]
            dr = d[k0:k1]
            vr = v[k0:k1]
            for k in range(k1 - k0):
                dr[k] += dcoef * br[k]
            for k in range(k1 - k0):
                vr[k] += vcoef * br[k]
            off += k1 - k0
    for k in range(n_trans):
        x = dloc[off + k]
        d[n_state + k] += dcoef * x
        v[n_state + k] += vcoef * x
    dloc[: off + n_trans] = 0.0


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
