"""One SAG example (:mod:`crfkit.kernels.sag`): the lazy catch-up of the dense term fused with the
emission scores, the full catch-up that closes a window, the oracle and the line search from an
example's scores, the walk that fills its gradient and ``g_new - g_old``, and their consumption
into ``d`` and ``v``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .chain import forward_backward_edges, gold_score, log_partition
from .chain_emit import add_full_row, add_scattered_rows, row_emissions, transition_matrix
from .chain_exp import FAST, exp_minus, max_min
from .sag_state import (
    F_BETA,
    I_T,
    LS_MAX_DOUBLINGS,
    LS_MIN_GNORM2,
)

_NOPY = dict(cache=True, nogil=True, fastmath=FAST)


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
def chain_oracle(y, t0, T, v, beta, n_state, trans_index, node, edge, score, bm, es, scale):
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
def line_search_scores(y, t0, T, score, shift, trans, gtr, gnorm2, f, L, sc2, es, alpha, scale):
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
    loss, trans = chain_oracle(
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
        L, ls = line_search_scores(
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
