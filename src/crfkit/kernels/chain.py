"""Numba kernels for one linear chain.

Parameter layout (see ``crfkit.model.FeatureSpace``): the weight vector ``w``
holds the state features first, stored CSR by attribute (features of attribute
``a`` are ``attr_ptr[a]:attr_ptr[a+1]``, each with its label ``feat_label[k]``),
then the transition features; ``trans_index[i, j]`` is the position (relative to
``n_state``) of the weight of label pair ``i -> j`` or -1 when that pair has no
feature (its score is 0).

Forward-backward runs in the exp domain with per-position scaling: every
position's emission scores are shifted by their maximum and the transition
matrix by its maximum before exponentiation, and alpha is renormalised to sum 1
at each position. The shifts and scales are added back into ``log Z``. This
keeps the recursions finite and accurate for any emission magnitude as long as
the transition scores span at most ``MAX_SCALED_TRANSITION_RANGE``; beyond that,
or if a scale still underflows, the chain is computed in the log domain.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from .bitcast import bits_f64

# Re-association and fused multiply-add let LLVM vectorise the label loops;
# no "nnan"/"ninf" flags, so the finiteness checks keep their meaning.
FAST = {"reassoc", "contract", "arcp", "nsz"}
_NOPY = dict(cache=True, nogil=True, fastmath=FAST)

# Two label paths that differ at one position differ by at most two transition
# scores, so mass the scaled recursion loses to underflow (below exp(-708)
# relative to the best label of a position) can come back by at most
# exp(2 * range of the transition scores).  Up to this range that is below
# exp(-300) relative: exact in double precision.  Beyond it, the log domain.
MAX_SCALED_TRANSITION_RANGE = 200.0


@njit(**_NOPY)
def transition_matrix(w, scale, n_state, trans_index):
    """Dense L x L transition scores ``scale * w[transition features]`` (0 where a pair has no feature)."""
    L = trans_index.shape[0]
    out = np.zeros((L, L))
    for i in range(L):
        for j in range(L):
            k = trans_index[i, j]
            if k >= 0:
                out[i, j] = scale * w[n_state + k]
    return out


@njit(**_NOPY)
def emissions(tok_ptr, attr, val, t0, t1, attr_ptr, feat_label, w, scale, out):
    """out[t - t0, l] = scale * sum of state-feature weights firing at token t for label l (``val``
    empty: every value 1, :attr:`crfkit.corpus.Corpus.raw_val`)."""
    L = out.shape[1]
    has_val = val.shape[0] > 0
    for t in range(t0, t1):
        r = t - t0
        for l in range(L):
            out[r, l] = 0.0
        for e in range(tok_ptr[t], tok_ptr[t + 1]):
            a = attr[e]
            v = (val[e] if has_val else 1.0) * scale
            for k in range(attr_ptr[a], attr_ptr[a + 1]):
                out[r, feat_label[k]] += w[k] * v


# Attribute rows.  An attribute whose features are the labels 0..L-1 in order (full_rows; dense
# pixel attributes, CRF++-style templates, every attribute x label) is a contiguous row of L weights.
# The walks over occurrences take those in one loop, as vector operations, and the others (a scatter
# through feat_label) in a second loop run only when the token has some: a scatter branch inside the
# first loop keeps LLVM from vectorising it (4.5x slower on OCR's pixel rows).
@njit(**_NOPY)
def full_rows(attr_ptr, feat_label, n_labels):
    """1 for the attributes whose features are the labels 0..L-1 in this order (a contiguous row of L
    weights, so that their loops are vector operations over the labels), 0 for the others.  An empty
    ``feat_label`` with attributes (implicit label pairs, see below): every row of ``n_labels`` features."""
    na = attr_ptr.shape[0] - 1
    out = np.zeros(na, dtype=np.int8)
    implicit = feat_label.shape[0] == 0
    for a in range(na):
        k0 = attr_ptr[a]
        if attr_ptr[a + 1] - k0 != n_labels:
            continue
        if implicit:
            out[a] = 1
            continue
        ok = 1
        for l in range(n_labels):
            if feat_label[k0 + l] != l:
                ok = 0
                break
        out[a] = ok
    return out


@njit(inline="always", **_NOPY)
def add_full_row(orow, vec, b, x):
    """orow += vec[b:b + L] * x: one occurrence of an attribute whose features are every label in order."""
    L = orow.shape[0]
    vr = vec[b:b + L]
    for l in range(L):
        orow[l] += vr[l] * x


@njit(inline="always", **_NOPY)
def add_part_row(orow, vec, b, k0, k1, feat_label, x):
    """orow[label of feature k] += vec[b + k - k0] * x for the features k0..k1 of one attribute occurrence."""
    for q in range(k1 - k0):
        orow[feat_label[k0 + q]] += vec[b + q] * x


@njit(inline="always", **_NOPY)
def add_scattered_rows(orow, vec, local, t, e0, tok_ptr, attr, val, attr_ptr, feat_label, full, obase, scale):
    """The second loop of a row walk: the occurrences of token t whose attribute is not full, read from
    ``vec`` at the global offsets (``attr_ptr``) or, when ``local``, at the example-local ones
    (``obase[e - e0]``), their values times ``scale``."""
    for e in range(tok_ptr[t], tok_ptr[t + 1]):
        a = attr[e]
        if not full[a]:
            b = obase[e - e0] if local else attr_ptr[a]
            add_part_row(orow, vec, b, attr_ptr[a], attr_ptr[a + 1], feat_label, val[e] * scale)


@njit(**_NOPY)
def row_emissions(tok_ptr, attr, val, t0, t1, attr_ptr, feat_label, full, vec, scale, out, local, obase):
    """The emission scores of tokens t0..t1-1 from ``vec`` (times ``scale``), full rows as vectors:
    ``vec`` is the weight vector (``local`` False, ``obase`` unused) or an example-local one whose
    occurrence ``e`` starts at ``obase[e - tok_ptr[t0]]`` (``local`` True; see kernels.sag)."""
    L = out.shape[1]
    e0 = tok_ptr[t0]
    for t in range(t0, t1):
        orow = out[t - t0]
        for l in range(L):
            orow[l] = 0.0
        part = False
        for e in range(tok_ptr[t], tok_ptr[t + 1]):
            a = attr[e]
            if full[a]:
                add_full_row(orow, vec, obase[e - e0] if local else attr_ptr[a], val[e] * scale)
            else:
                part = True
        if part:
            add_scattered_rows(orow, vec, local, t, e0, tok_ptr, attr, val, attr_ptr, feat_label, full, obase, scale)


@njit(**_NOPY)
def emissions_rows(tok_ptr, attr, val, t0, t1, attr_ptr, feat_label, full, w, scale, out):
    """:func:`emissions` with the full rows (``full``: :func:`full_rows`) as vector operations."""
    row_emissions(tok_ptr, attr, val, t0, t1, attr_ptr, feat_label, full, w, scale, out, False, attr_ptr)


# The L x L exponentials exp(trans - tmax) of every per-example oracle call (and SAG line-search
# trial) are a large part of a stochastic step on a dense label set when each goes through libm one
# by one (numba has no vector exp without Intel SVML).  exp_minus is a vectorisable exp: Cody-Waite
# reduction x = k ln2 + r, |r| <= ln2/2, degree-13 Taylor polynomial, 2^k from the exponent bits;
# within 1 ulp of libm's exp (rounding-level), 0 below -708, inf above 709, NaN for NaN.
_LOG2E = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_EXP_C = tuple(1.0 / math.factorial(k) for k in range(14))
# no reassociation: it would undo exp's argument reduction, and make short sums depend on where their arrays
# lie (row_sum); the flags of every kernel that needs its additions in the order written
EXACT = dict(cache=True, nogil=True, fastmath={"contract"})


@njit(**EXACT)
def row_sum(x, t):
    """``sum_j x[t, j]`` added in index order.  Without re-association on purpose: with it, LLVM compiles
    such a short reduction into code whose summation order depends on where the arrays lie (their
    alignment), so that the same inputs gave other last bits from call to call, and the full-batch
    gradient other bits from run to run with threads (``tests/test_kernel_addresses.py``)."""
    s = 0.0
    for j in range(x.shape[1]):
        s += x[t, j]
    return s


@njit(**EXACT)
def vec_sum(x):
    """``sum_j x[j]`` of a vector, added in index order (see :func:`row_sum`)."""
    s = 0.0
    for j in range(x.shape[0]):
        s += x[j]
    return s


@njit(**EXACT)
def exp_shift_into(x, shift, o):
    """o[i] = exp(x[i] - shift) for 1-D contiguous ``x`` and ``o`` (distinct arrays; see :func:`exp_minus` for
    the method and accuracy).  2^k is built from its bits (:mod:`crfkit.kernels.bitcast`) in the same loop.
    (Until 2026-11-29 the bits went through an int64 scratch, read back through a float64 view in a second
    loop: the same values, but about 30 ns more a call, a call per token in the forward recursions.)"""
    n = x.shape[0]
    c = _EXP_C
    for i in range(n):
        xs = x[i] - shift
        xi = min(max(xs, -708.0), 709.0)
        kf = np.floor(xi * _LOG2E + 0.5)
        r = (xi - kf * _LN2_HI) - kf * _LN2_LO
        p = c[13]
        p = p * r + c[12]
        p = p * r + c[11]
        p = p * r + c[10]
        p = p * r + c[9]
        p = p * r + c[8]
        p = p * r + c[7]
        p = p * r + c[6]
        p = p * r + c[5]
        p = p * r + c[4]
        p = p * r + c[3]
        p = p * r + c[2]
        p = p * r + 1.0
        v = (p * r + 1.0) * bits_f64((np.int64(kf) + 1023) << 52)
        o[i] = 0.0 if xs < -708.0 else (np.inf if xs > 709.0 else v)


@njit(**EXACT)
def exp_minus(m, shift):
    """exp(m - shift) elementwise for a C-contiguous array ``m`` (a new array of its shape)."""
    out = np.empty_like(m)
    x = m.ravel()
    exp_shift_into(x, shift, out.ravel())
    return out


@njit(**_NOPY)
def max_min(m):
    """(max, min) of a C-contiguous array; NaN entries are skipped (an all-NaN array gives (-inf, inf)).

    Eight independent running maxima and minima, so that the compare-selects
    of consecutive elements do not wait for each other and vectorise: 0.29 us
    against 0.90 us for one running pair on a 26 x 26 matrix (numpy's
    ``max``/``min`` check every element for NaN and are slower still).
    """
    x = m.ravel()
    n = x.shape[0]
    h0 = h1 = h2 = h3 = h4 = h5 = h6 = h7 = -np.inf
    l0 = l1 = l2 = l3 = l4 = l5 = l6 = l7 = np.inf
    k = 0
    while k + 8 <= n:
        v0 = x[k]
        v1 = x[k + 1]
        v2 = x[k + 2]
        v3 = x[k + 3]
        v4 = x[k + 4]
        v5 = x[k + 5]
        v6 = x[k + 6]
        v7 = x[k + 7]
        h0 = v0 if v0 > h0 else h0
        h1 = v1 if v1 > h1 else h1
        h2 = v2 if v2 > h2 else h2
        h3 = v3 if v3 > h3 else h3
        h4 = v4 if v4 > h4 else h4
        h5 = v5 if v5 > h5 else h5
        h6 = v6 if v6 > h6 else h6
        h7 = v7 if v7 > h7 else h7
        l0 = v0 if v0 < l0 else l0
        l1 = v1 if v1 < l1 else l1
        l2 = v2 if v2 < l2 else l2
        l3 = v3 if v3 < l3 else l3
        l4 = v4 if v4 < l4 else l4
        l5 = v5 if v5 < l5 else l5
        l6 = v6 if v6 < l6 else l6
        l7 = v7 if v7 < l7 else l7
        k += 8
    while k < n:
        v = x[k]
        h0 = v if v > h0 else h0
        l0 = v if v < l0 else l0
        k += 1
    hi = max(max(max(h0, h1), max(h2, h3)), max(max(h4, h5), max(h6, h7)))
    lo = min(min(min(l0, l1), min(l2, l3)), min(min(l4, l5), min(l6, l7)))
    return hi, lo


@njit(**_NOPY)
def add_scores(xs, r0, T, out):
    """out[t, l] += xs[r0 + t, l] for t < T: extra emission scores computed outside the kernels
    (the dense block's ``X @ W``); a no-op when ``xs`` has no rows."""
    if xs.shape[0] == 0:
        return
    L = out.shape[1]
    for t in range(T):
        for l in range(L):
            out[t, l] += xs[r0 + t, l]


@njit(**_NOPY)
def _logsumexp(x):
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


@njit(inline="always", **_NOPY)
def row_exp(score, t, es):
    """es[t, j] = exp(score[t, j] - m) with m the row's maximum; returns m."""
    L = score.shape[1]
    m = score[t, 0]
    for j in range(1, L):
        if score[t, j] > m:
            m = score[t, j]
    for j in range(L):
        es[t, j] = np.exp(score[t, j] - m)
    return m


@njit(inline="always", **_NOPY)
def back_step(beta, t, expM, es, r, inv, tmp):
    """One scaled backward step: beta[t, i] = sum_j expM[i, j] * es[r, j] * beta[t+1, j] * inv."""
    L = expM.shape[0]
    for j in range(L):
        tmp[j] = es[r, j] * beta[t + 1, j] * inv
    for i in range(L):
        acc = 0.0
        for j in range(L):
            acc += expM[i, j] * tmp[j]
        beta[t, i] = acc


@njit(inline="always", **_NOPY)
def propagate(alpha, t, expM, es, r):
    """One scaled forward step: alpha[t, j] = es[r, j] * sum_i alpha[t-1, i] expM[i, j] (rows of
    alpha[t-1] that are 0 skipped)."""
    L = expM.shape[0]
    for j in range(L):
        alpha[t, j] = 0.0
    for i in range(L):
        a = alpha[t - 1, i]
        if a != 0.0:
            for j in range(L):
                alpha[t, j] += a * expM[i, j]
    for j in range(L):
        alpha[t, j] *= es[r, j]


@njit(**_NOPY)
def scaled_forward(score, T, expM, tmax, es, alpha, scale):
    """Scaled forward recursion; returns log Z, or NaN when a scale under/overflows.

    Fills ``es`` with exp(score - rowmax), ``alpha`` with the per-position
    normalised messages and ``scale`` with the normalisers.
    """
    L = expM.shape[0]
    logz = 0.0
    for t in range(T):
        # es[t] = exp(score[t] - m), m the row's maximum (the vectorisable exp)
        sr = score[t]
        m = sr[0]
        for j in range(1, L):
            m = sr[j] if sr[j] > m else m
        exp_shift_into(sr, m, es[t])
        s = 0.0
        if t == 0:
            for j in range(L):
                alpha[0, j] = es[0, j]
            s = row_sum(es, 0)
            logz += m
        else:
            propagate(alpha, t, expM, es, t)
            s = row_sum(alpha, t)
            logz += m + tmax
        if not (s > 1e-300) or not np.isfinite(s):
            return np.nan
        scale[t] = s
        inv = 1.0 / s
        for j in range(L):
            alpha[t, j] *= inv
        logz += np.log(s)
    return logz


@njit(**_NOPY)
def log_partition(score, T, trans, expM, tmax, es, alpha, scale):
    """log Z alone (forward pass), with the same log-domain rules as forward_backward."""
    if tmax - max_min(trans)[1] <= MAX_SCALED_TRANSITION_RANGE:
        logz = scaled_forward(score, T, expM, tmax, es, alpha, scale)
        if np.isfinite(logz):
            return logz
    return _forward_backward_log(score, T, trans, es, alpha, np.empty_like(alpha), scale)


@njit(**_NOPY)
def forward_backward(score, T, trans, expM, tmax, es, alpha, beta, scale):
    """Scaled forward-backward on the first T rows of ``score``.

    Inputs: ``score`` (>=T x L) emission scores, ``trans`` (L x L) transition
    scores, ``expM = exp(trans - tmax)``.  Work/output arrays (>= T x L): ``es``
    receives exp(score - rowmax), ``alpha`` and ``beta`` the scaled messages
    (node marginal = alpha * beta), ``scale`` (>=T) the per-position scale
    factors.  Returns log Z.  Uses the log domain when the transition scores
    span more than MAX_SCALED_TRANSITION_RANGE or scaling fails; the outputs
    then keep their meaning (alpha*beta = marginals; ``edge_marginal_sum``
    recognises the log-domain result by ``scale[0] < 0``).
    """
    L = trans.shape[0]
    if tmax - max_min(trans)[1] > MAX_SCALED_TRANSITION_RANGE:
        return _forward_backward_log(score, T, trans, es, alpha, beta, scale)
    logz = scaled_forward(score, T, expM, tmax, es, alpha, scale)
    if not np.isfinite(logz):
        return _forward_backward_log(score, T, trans, es, alpha, beta, scale)
    for j in range(L):
        beta[T - 1, j] = 1.0
    tmp = np.empty(L)
    for t in range(T - 2, -1, -1):
        back_step(beta, t, expM, es, t + 1, 1.0 / scale[t + 1], tmp)
    return logz


@njit(**_NOPY)
def forward_backward_edges(score, T, trans, expM, tmax, es, alpha, beta, scale, out):
    """:func:`forward_backward` followed by :func:`edge_marginal_sum` into ``out``, with the edge
    statistics gathered in the backward sweep itself: the message ``es[t+1] * beta[t+1] / scale[t+1]``
    that gives beta[t] is the one the edge marginals of (t, t+1) need, so it is formed once.
    Returns log Z (the log-domain fallback as in forward_backward)."""
    L = trans.shape[0]
    if tmax - max_min(trans)[1] <= MAX_SCALED_TRANSITION_RANGE:
        logz = scaled_forward(score, T, expM, tmax, es, alpha, scale)
        if np.isfinite(logz):
            for j in range(L):
                beta[T - 1, j] = 1.0
            if T < 2:
                return logz
            tmp = np.empty(L)
            acc = np.zeros((L, L))
            for t in range(T - 2, -1, -1):
                inv = 1.0 / scale[t + 1]
                for j in range(L):
                    tmp[j] = es[t + 1, j] * beta[t + 1, j] * inv
                for i in range(L):
                    a = alpha[t, i]
                    b = 0.0
                    for j in range(L):
                        b += expM[i, j] * tmp[j]
                        acc[i, j] += a * tmp[j]
                    beta[t, i] = b
            for i in range(L):
                for j in range(L):
                    out[i, j] += acc[i, j] * expM[i, j]
            return logz
    logz = _forward_backward_log(score, T, trans, es, alpha, beta, scale)
    edge_marginal_sum(T, expM, es, alpha, beta, scale, score, trans, logz, out)
    return logz


@njit(**_NOPY)
def _log_backward(score, T, trans, lb):
    L = trans.shape[0]
    buf = np.empty(L)
    for j in range(L):
        lb[T - 1, j] = 0.0
    for t in range(T - 2, -1, -1):
        for i in range(L):
            for j in range(L):
                buf[j] = trans[i, j] + score[t + 1, j] + lb[t + 1, j]
            lb[t, i] = _logsumexp(buf)


@njit(**_NOPY)
def _forward_backward_log(score, T, trans, es, alpha, beta, scale):
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
            la[t, j] = _logsumexp(buf) + score[t, j]
    logz = _logsumexp(la[T - 1])
    _log_backward(score, T, trans, lb)
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
def edge_marginal_sum(T, expM, es, alpha, beta, scale, score, trans, logz, out):
    """Add sum_t p(y_{t-1}=i, y_t=j) over t=1..T-1 into ``out`` (L x L)."""
    L = expM.shape[0]
    if T < 2:
        return
    if scale[0] < 0.0:
        # log-domain result: es holds log-alpha; recompute log-beta
        lb = np.empty((T, L))
        _log_backward(score, T, trans, lb)
        for t in range(1, T):
            for i in range(L):
                for j in range(L):
                    out[i, j] += np.exp(es[t - 1, i] + trans[i, j] + score[t, j] + lb[t, j] - logz)
        return
    acc = np.zeros((L, L))
    tmp = np.empty(L)
    for t in range(1, T):
        inv = 1.0 / scale[t]
        for j in range(L):
            tmp[j] = es[t, j] * beta[t, j] * inv
        for i in range(L):
            a = alpha[t - 1, i]
            for j in range(L):
                acc[i, j] += a * tmp[j]
    for i in range(L):
        for j in range(L):
            out[i, j] += acc[i, j] * expM[i, j]


@njit(**_NOPY)
def add_transition_gradient(v, n_state, trans_index, edge, y, t0, T, coef):
    """v[n_state + k] += coef * (expected - gold count) of each transition feature k of the sequence of
    ``T`` tokens from ``t0`` (``edge``: its summed edge marginals, L x L; ``y``: the gold labels)."""
    L = trans_index.shape[0]
    for a in range(L):
        for b in range(L):
            k = trans_index[a, b]
            if k >= 0:
                v[n_state + k] += coef * edge[a, b]
    for t in range(1, T):
        k = trans_index[y[t0 + t - 1], y[t0 + t]]
        if k >= 0:
            v[n_state + k] -= coef


@njit(**_NOPY)
def gold_score(score, y, t0, T, trans):
    s = 0.0
    for t in range(T):
        s += score[t, y[t0 + t]]
        if t > 0:
            s += trans[y[t0 + t - 1], y[t0 + t]]
    return s


@njit(inline="always", **_NOPY)
def _viterbi_max(delta, raw, t, trans, score):
    """raw[t, j] = max_i (delta[t-1, i] + trans[i, j]) and delta[t, j] = raw[t, j] + score[t, j]: the maxima
    only, with i outside and j inside (one loop over a contiguous row of ``trans`` per i, which LLVM
    vectorises); the arg max is found afterwards for the path's labels alone (:func:`_viterbi_arg`).  Against
    a running arg max per (t, j) (a scalar loop), a whole decode of 24 tokens took 2.89 against 5.07 us at
    L = 22 and 8.16 against 22.88 at L = 45, 0.40 against 0.26 at L = 3 (``benchmarks/viterbi_step.py``,
    2026-11-30)."""
    L = trans.shape[0]
    prev = delta[t - 1]
    cur = raw[t]
    for j in range(L):
        cur[j] = -np.inf
    for i in range(L):
        a = prev[i]
        tr = trans[i]
        for j in range(L):
            x = a + tr[j]
            cur[j] = x if x > cur[j] else cur[j]
    for j in range(L):
        delta[t, j] = cur[j] + score[t, j]


@njit(inline="always", **_NOPY)
def _viterbi_arg(delta, raw, t, trans, j):
    """The predecessor of label j at t on the best path: the first i whose ``delta[t-1, i] + trans[i, j]``
    equals the maximum ``raw[t, j]`` (the same sum as :func:`_viterbi_max`'s, so the equality is exact), which
    is the i that a running arg max with ``>`` keeps; 0 when the maximum is -inf (no predecessor above
    -inf), as that running arg max leaves it."""
    target = raw[t, j]
    if target == -np.inf:
        return 0
    for i in range(trans.shape[0]):
        if delta[t - 1, i] + trans[i, j] == target:
            return i
    return 0


@njit(inline="always", **_NOPY)
def _viterbi_last(delta, T):
    """The best last label of the Viterbi table (the first maximum of its last row) and its score."""
    best = -np.inf
    arg = 0
    for j in range(delta.shape[1]):
        if delta[T - 1, j] > best:
            best = delta[T - 1, j]
            arg = j
    return best, arg


@njit(**_NOPY)
def viterbi(score, T, trans, out, o0):
    """Best label path of the first T rows of ``score``; written to out[o0:o0+T]. Returns its score.  Ties go
    to the lowest label, at the end and for every predecessor."""
    L = trans.shape[0]
    delta = np.empty((T, L))
    raw = np.empty((T, L))
    for j in range(L):
        delta[0, j] = score[0, j]
    for t in range(1, T):
        _viterbi_max(delta, raw, t, trans, score)
    best, arg = _viterbi_last(delta, T)
    out[o0 + T - 1] = arg
    for t in range(T - 1, 0, -1):
        arg = _viterbi_arg(delta, raw, t, trans, arg)
        out[o0 + t - 1] = arg
    return best


@njit(**_NOPY)
def _code_emissions(codes, e, cnt, t0, T, val, attr_ptr, feat_label, w, score):
    """score[:T] = the emission scores of tokens t0..t0+T-1 given as attribute codes from ``codes[e]`` on,
    ``cnt[t]`` of them for token t (a code below 0: unknown to the model, skipped; ``val``: their values,
    or empty for all 1); returns the position after the last code read."""
    L = score.shape[1]
    ones = val.shape[0] == 0
    for t in range(T):
        for l in range(L):
            score[t, l] = 0.0
        for _ in range(cnt[t0 + t]):
            a = codes[e]
            if a >= 0:
                v = 1.0 if ones else val[e]
                for k in range(attr_ptr[a], attr_ptr[a + 1]):
                    score[t, feat_label[k]] += w[k] * v
            e += 1
    return e


@njit(**_NOPY)
def tag_codes(codes, cnt, val, attr_ptr, feat_label, w, trans, out):
    """Viterbi labels of one sequence given as attribute codes, ``cnt[t]`` of them for token t (a code
    below 0: an attribute the model does not know, skipped; ``val``: their values, or empty for all 1),
    written to ``out[:T]``; returns the best path's score.  Emissions and Viterbi in one call: the
    tagging path of one small sentence (:mod:`crfkit.features.dictenc`), where each kernel call's
    dispatch costs more than its work."""
    T = cnt.shape[0]
    L = trans.shape[0]
    if T == 0 or L == 0:
        return 0.0
    score = np.empty((T, L))
    _code_emissions(codes, 0, cnt, 0, T, val, attr_ptr, feat_label, w, score)
    return viterbi(score, T, trans, out, 0)


@njit(**_NOPY)
def tag_codes_seqs(codes, cnt, val, seq_ptr, ent_ptr, s0, s1, attr_ptr, feat_label, w, trans, out, path_score):
    """:func:`tag_codes` for the sequences s0..s1-1 of a batch, in one call: sequence s has the tokens
    ``seq_ptr[s]:seq_ptr[s + 1]`` (``cnt`` per token, over the whole batch) and the codes (and values,
    when ``val`` is not empty) ``ent_ptr[s]:ent_ptr[s + 1]``.  Labels to ``out`` (n_tokens), best path
    scores to ``path_score`` (n_seq; 0 for an empty sequence or no labels)."""
    L = trans.shape[0]
    maxT = 1
    for s in range(s0, s1):
        d = seq_ptr[s + 1] - seq_ptr[s]
        if d > maxT:
            maxT = d
    score = np.empty((maxT, L))
    for s in range(s0, s1):
        t0 = seq_ptr[s]
        T = seq_ptr[s + 1] - t0
        if T == 0 or L == 0:
            path_score[s] = 0.0
            continue
        _code_emissions(codes, ent_ptr[s], cnt, t0, T, val, attr_ptr, feat_label, w, score)
        path_score[s] = viterbi(score, T, trans, out, t0)


# ---------------------------------------------------------------------------
# Position-dependent transitions (bigram-observation features).
#
# A bigram-observation feature tests an attribute of token t and the label
# pair (y_{t-1}, y_t).  With such features the transition scores into token t
# are M[t] = trans + sum over the bigram attributes b of token t of
# value_b * W_b (W_b: L x L, zero where b has no feature), for 1 <= t < T
# (M[0] is never read: the first token has no incoming transition, so bigram
# attributes carried by it are ignored).  The recursions below are those
# above with M[t] in place of the one matrix; the scaled recursion shifts each
# M[t] by its own maximum tmx[t] and falls back to the log domain when one of
# them spans more than MAX_SCALED_TRANSITION_RANGE (the same rule as above,
# per position) or a scale under/overflows.


# Implicit label pairs.  An empty ``bfeat_pair`` beside bigram-observation features (what
# FeatureSpace.pairs_for_full_rows gives for FeatureSpace(bfeat_pair=ALL_PAIRS): every attribute has its L^2
# features in pair order) means feature ``k0 + q`` of an attribute whose features start at ``k0`` is label
# pair ``q``: a candidate space of 123.6M label-pair features (NETtalk 5-grm) then needs no 247 MB array of
# pairs.  The kernels read a row's pairs from a slice: of ``bfeat_pair``, or of :func:`row_pairs`'s
# identity row (0 .. L^2 - 1), chosen once per row.  A test of the layout inside the loop over a row's
# weights kept LLVM from vectorising it (BCD sweeps 2-4x slower on NETtalk with a helper called per feature).


@njit(**_NOPY)
def row_pairs(bfeat_pair, LL):
    """The identity row ``0 .. LL - 1`` (``bfeat_pair``'s type) when ``bfeat_pair`` is empty (implicit pairs,
    see above), else an empty array: a row's pairs are then ``ident[:n]`` or ``bfeat_pair[k0:k0 + n]``."""
    n = LL if bfeat_pair.shape[0] == 0 else 0
    ident = np.empty(n, bfeat_pair.dtype)
    for q in range(n):
        ident[q] = q
    return ident


@njit(inline="always", **_NOPY)
def bigram_row(w, boff, battr_ptr, bfeat_pair, ident, b):
    """``(weights, pairs)`` of bigram attribute ``b``'s features, as slices: ``w[boff + k0:...]`` and
    ``bfeat_pair[k0:...]`` or, with implicit pairs, ``ident[:n]`` (:func:`row_pairs`)."""
    k0 = battr_ptr[b]
    n = battr_ptr[b + 1] - k0
    return w[boff + k0:boff + k0 + n], (ident[:n] if ident.shape[0] else bfeat_pair[k0:k0 + n])


@njit(**_NOPY)
def bigram_transitions(btok_ptr, battr, bval, t0, T, battr_ptr, bfeat_pair, w, boff, trans, M, tmx,
                       expM0, tmax0, expM):
    """Fill M[t] (1 <= t < T) with the transition scores into token t0+t and tmx[t] with their maximum.

    ``w[boff + k]`` is the weight of bigram-observation feature ``k``, for the
    label pair ``bfeat_pair[k] = i*L + j``.  Returns the largest range
    (max - min) of the M[t] (0 when T < 2).

    When ``expM`` has rows, it also receives ``expM[t] = exp(M[t] - tmx[t])``.
    Where the token's features with a non-zero weight touch at most half of
    the label pairs, it is built from ``expM0 = exp(trans - tmax0)`` times one
    factor ``exp(tmax0 - tmx[t])``, with ``exp`` taken again only for the
    pairs those features touch (an L1-trained model has few); otherwise every
    entry is ``exp`` taken directly (fewer exponentials than one per touched
    pair and feature; vectorised, :func:`exp_shift_into`).  Both factors stay within
    exp(+-MAX_SCALED_TRANSITION_RANGE) whenever the scaled recursion is used
    (the caller checks the returned range).  Features with a zero weight are
    skipped (they add nothing); the matrices are read and written as flat
    rows of L*L entries (no division per entry).
    """
    L = trans.shape[0]
    LL = L * L
    want_exp = expM.shape[0] > 0
    ident = row_pairs(bfeat_pair, LL)           # (implicit pairs, see above)
    Mf = M.reshape((M.shape[0], LL))
    Ef = expM.reshape((expM.shape[0], LL))
    rng = 0.0
    for t in range(1, T):
        Mt = Mf[t]
        for i in range(L):
            for j in range(L):
                Mt[i * L + j] = trans[i, j]
        nnz = 0
        for e in range(btok_ptr[t0 + t], btok_ptr[t0 + t + 1]):
            v = bval[e]
            wb, pb = bigram_row(w, boff, battr_ptr, bfeat_pair, ident, battr[e])
            for q in range(wb.shape[0]):
                x = wb[q]
                if x != 0.0:
                    Mt[pb[q]] += x * v
                    nnz += 1
        mx = Mt[0]
        mn = mx
        for q in range(LL):
            x = Mt[q]
            mx = max(mx, x)
            mn = min(mn, x)
        tmx[t] = mx
        if mx - mn > rng:
            rng = mx - mn
        if not want_exp:
            continue
        Et = Ef[t]
        if 6 * nnz > LL or tmax0 - mx > MAX_SCALED_TRANSITION_RANGE:
            # many touched pairs (a vectorised exponential costs about a sixth of one through libm), or the
            # features lowered the base maximum far (exp(trans - tmax0) may have underflowed where
            # exp(M[t] - mx) does not): every exponential directly
            exp_shift_into(Mt, mx, Et)
        else:
            c = np.exp(tmax0 - mx)
            for i in range(L):
                for j in range(L):
                    Et[i * L + j] = expM0[i, j] * c
            for e in range(btok_ptr[t0 + t], btok_ptr[t0 + t + 1]):
                wb, pb = bigram_row(w, boff, battr_ptr, bfeat_pair, ident, battr[e])
                for q in range(wb.shape[0]):
                    if wb[q] != 0.0:
                        p = pb[q]
                        Et[p] = np.exp(Mt[p] - mx)
    return rng


@njit(**_NOPY)
def compact_bigram(w, boff, battr_ptr, bfeat_pair, max_share):
    """The bigram-observation features with a non-zero weight, when at most ``max_share`` of them are:
    ``(ptr, pair, wz)`` with ``wz = w[:boff]`` followed by those weights, attribute ``b``'s at
    ``wz[boff + ptr[b]:boff + ptr[b + 1]]`` (label pairs in ``pair``), so that ``(ptr, pair, wz, boff)``
    stands for ``(battr_ptr, bfeat_pair, w, boff)`` wherever scores are built (a zero weight adds
    nothing) but the per-position work skips the zeros: an L1-trained candidate space is mostly zero.
    Otherwise the three arrays are empty (the caller keeps the full ones)."""
    nb = battr_ptr.shape[0] - 1
    nf = battr_ptr[nb]
    nnz = 0
    for k in range(nf):
        if w[boff + k] != 0.0:
            nnz += 1
    if nnz > max_share * nf:
        return np.empty(0, np.int64), np.empty(0, bfeat_pair.dtype), np.empty(0)
    ptr = np.empty(nb + 1, np.int64)
    pair = np.empty(nnz, bfeat_pair.dtype)
    wz = np.empty(boff + nnz)
    for k in range(boff):
        wz[k] = w[k]
    q = 0
    ptr[0] = 0
    ident = row_pairs(bfeat_pair, battr_ptr[1] - battr_ptr[0] if nb > 0 else 0)   # (every row: L^2 pairs)
    for b in range(nb):
        wb, pb = bigram_row(w, boff, battr_ptr, bfeat_pair, ident, b)
        for r in range(wb.shape[0]):
            x = wb[r]
            if x != 0.0:
                pair[q] = pb[r]
                wz[boff + q] = x
                q += 1
        ptr[b + 1] = q
    return ptr, pair, wz


@njit(**_NOPY)
def pd_exp(T, M, tmx, expM):
    """expM[t] = exp(M[t] - tmx[t]) for 1 <= t < T, directly (what bigram_transitions builds)."""
    L = M.shape[1]
    for t in range(1, T):
        for i in range(L):
            for j in range(L):
                expM[t, i, j] = np.exp(M[t, i, j] - tmx[t])


@njit(**_NOPY)
def pd_scaled_forward(score, T, M, tmx, expM, es, alpha, scale):
    """Scaled forward recursion with transition matrices M[t]; returns log Z or NaN (scale failure).

    Reads ``expM[t] = exp(M[t] - tmx[t])`` (t >= 1, see
    :func:`bigram_transitions`); fills ``es`` with exp(score - rowmax),
    ``alpha`` with the normalised messages and ``scale``.
    """
    L = score.shape[1]
    logz = 0.0
    for t in range(T):
        m = row_exp(score, t, es)
        s = 0.0
        if t == 0:
            for j in range(L):
                alpha[0, j] = es[0, j]
            s = row_sum(es, 0)
        else:
            propagate(alpha, t, expM[t], es, t)
            s = row_sum(alpha, t)
            logz += tmx[t]
        logz += m
        if not (s > 1e-300) or not np.isfinite(s):
            return np.nan
        scale[t] = s
        inv = 1.0 / s
        for j in range(L):
            alpha[t, j] *= inv
        logz += np.log(s)
    return logz


@njit(**_NOPY)
def _pd_log(score, T, M, la, lb):
    """Log-domain forward (la) and backward (lb) messages; returns log Z."""
    L = score.shape[1]
    buf = np.empty(L)
    for j in range(L):
        la[0, j] = score[0, j]
    for t in range(1, T):
        for j in range(L):
            for i in range(L):
                buf[i] = la[t - 1, i] + M[t, i, j]
            la[t, j] = _logsumexp(buf) + score[t, j]
    for j in range(L):
        lb[T - 1, j] = 0.0
    for t in range(T - 2, -1, -1):
        for i in range(L):
            for j in range(L):
                buf[j] = M[t + 1, i, j] + score[t + 1, j] + lb[t + 1, j]
            lb[t, i] = _logsumexp(buf)
    return _logsumexp(la[T - 1, :L])


@njit(**_NOPY)
def pd_forward_backward(score, T, M, tmx, rng, expM, es, alpha, beta, scale):
    """Forward-backward with position-dependent transitions; returns log Z.

    ``rng``: the largest range of the M[t] and ``expM`` their shifted
    exponentials (both from :func:`bigram_transitions`).  On
    return, in the scaled domain (``scale[0] > 0``) ``alpha``/``beta`` are the
    scaled messages as in :func:`forward_backward`; in the log domain
    (``scale[0] < 0``) ``es`` holds log-alpha, ``beta`` log-beta and ``alpha``
    the node marginals.  Read the results with :func:`pd_edge` (edge
    marginals, first) and :func:`pd_node` (node marginals, into ``alpha``).
    """
    L = score.shape[1]
    if rng <= MAX_SCALED_TRANSITION_RANGE:
        logz = pd_scaled_forward(score, T, M, tmx, expM, es, alpha, scale)
        if np.isfinite(logz):
            for j in range(L):
                beta[T - 1, j] = 1.0
            tmp = np.empty(L)
            for t in range(T - 2, -1, -1):
                back_step(beta, t, expM[t + 1], es, t + 1, 1.0 / scale[t + 1], tmp)
            return logz
    logz = _pd_log(score, T, M, es, beta)
    for t in range(T):
        for j in range(L):
            alpha[t, j] = np.exp(es[t, j] + beta[t, j] - logz)
        scale[t] = -1.0
    return logz


@njit(**_NOPY)
def pd_edge(t, score, M, expM, es, alpha, beta, scale, logz, xi):
    """xi[i, j] = p(y_{t-1} = i, y_t = j | x) after :func:`pd_forward_backward` (1 <= t < T)."""
    L = score.shape[1]
    if scale[0] < 0.0:
        for i in range(L):
            for j in range(L):
                xi[i, j] = np.exp(es[t - 1, i] + M[t, i, j] + score[t, j] + beta[t, j] - logz)
        return
    inv = 1.0 / scale[t]
    for i in range(L):
        a = alpha[t - 1, i] * inv
        for j in range(L):
            xi[i, j] = a * expM[t, i, j] * es[t, j] * beta[t, j]


@njit(**_NOPY)
def pd_node(T, alpha, beta, scale):
    """Turn ``alpha`` into the node marginals after :func:`pd_forward_backward` (call after pd_edge)."""
    if scale[0] < 0.0:
        return
    L = alpha.shape[1]
    for t in range(T):
        for l in range(L):
            alpha[t, l] *= beta[t, l]


@njit(**_NOPY)
def pd_log_partition(score, T, M, tmx, rng, expM, es, alpha, scale):
    """log Z alone (forward pass) with position-dependent transitions, same log-domain rules."""
    if rng <= MAX_SCALED_TRANSITION_RANGE:
        logz = pd_scaled_forward(score, T, M, tmx, expM, es, alpha, scale)
        if np.isfinite(logz):
            return logz
    return _pd_log(score, T, M, es, np.empty_like(alpha))


@njit(**_NOPY)
def pd_gold_score(score, y, t0, T, M):
    """Score of the label path y[t0:t0+T] with position-dependent transitions."""
    s = 0.0
    for t in range(T):
        s += score[t, y[t0 + t]]
        if t > 0:
            s += M[t, y[t0 + t - 1], y[t0 + t]]
    return s


@njit(**_NOPY)
def viterbi_m(score, T, M, pd, out, o0):
    """:func:`viterbi` with the transitions into position t in ``M[t]`` (``pd``) or ``M[0]`` for every t (the
    same ties; -inf when no path is finite)."""
    L = score.shape[1]
    delta = np.empty((T, L))
    raw = np.empty((T, L))
    for j in range(L):
        delta[0, j] = score[0, j]
    for t in range(1, T):
        _viterbi_max(delta, raw, t, M[t] if pd else M[0], score)
    best, arg = _viterbi_last(delta, T)
    out[o0 + T - 1] = arg
    for t in range(T - 1, 0, -1):
        arg = _viterbi_arg(delta, raw, t, M[t] if pd else M[0], arg)
        out[o0 + t - 1] = arg
    return best


@njit(**_NOPY)
def pd_viterbi(score, T, M, out, o0):
    """Best label path with position-dependent transitions; written to out[o0:o0+T]. Returns its score."""
    return viterbi_m(score, T, M, True, out, o0)
