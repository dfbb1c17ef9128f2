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

The forward-backward / Viterbi family (every recursion over one chain lives in a ``chain*`` module;
the solvers' kernels call these instead of keeping their own copies):

* ``chain`` (this module): the scaled recursion (``scaled_forward``, ``forward_backward``,
  ``forward_backward_edges``, ``log_partition``, ``edge_marginal_sum``), the gold path's score and
  transition gradient, and two variants kept beside them (``forward_backward_exp``,
  ``forward_backward_ranged``; see the comment above them for what differs);
* ``chain_exp``: the flags, the vectorisable exp and the one-step message updates;
* ``chain_emit``: transition matrix and emission scores;
* ``chain_log``: the log-domain fallback;
* ``chain_pd``: position-dependent transitions (bigram-observation features);
* ``chain_viterbi``: Viterbi (one or per-position transition matrices) and dictionary-coded tagging;
* ``chain_nbest``: n-best Viterbi;
* ``chain_pairs``: per-position pairwise marginals (SDCA/OEG's clique marginals);
* ``chain_window``: BCD's windowed recursions with kept log-scales;
* ``chain_sparse``: the sparse forward-backward over listed pair scores;
* ``chain_hv``: forward-backward with tangent messages (SMD's Hessian-vector products).

The names this module held before the split are re-exported here (``__all__``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .bitcast import bits_f64
from .chain_emit import (
    add_full_row,
    add_part_row,
    add_scattered_rows,
    add_scores,
    emissions,
    emissions_rows,
    full_rows,
    row_emissions,
    transition_matrix,
)
from .chain_exp import (
    EXACT,
    FAST,
    MAX_SCALED_TRANSITION_RANGE,
    back_step,
    exp_minus,
    exp_shift_into,
    max_min,
    propagate,
    row_exp,
    row_sum,
    vec_sum,
)
from .chain_log import forward_backward_log, log_backward
from .chain_pd import (
    bigram_row,
    bigram_transitions,
    compact_bigram,
    pd_edge,
    pd_exp,
    pd_forward_backward,
    pd_gold_score,
    pd_log_partition,
    pd_node,
    pd_scaled_forward,
    row_pairs,
)
from .chain_viterbi import pd_viterbi, tag_codes, tag_codes_seqs, viterbi, viterbi_m
from .simd import axpy, gemv, rank1, vmul, vsum

# the names this module held before it was split keep working from here
__all__ = [
    "add_full_row",
    "add_part_row",
    "add_scattered_rows",
    "add_scores",
    "add_transition_gradient",
    "back_step",
    "bigram_row",
    "bigram_transitions",
    "bits_f64",
    "compact_bigram",
    "edge_marginal_sum",
    "emissions",
    "emissions_rows",
    "EXACT",
    "exp_minus",
    "exp_shift_into",
    "FAST",
    "forward_backward",
    "forward_backward_edges",
    "full_rows",
    "gold_score",
    "log_partition",
    "max_min",
    "MAX_SCALED_TRANSITION_RANGE",
    "pd_edge",
    "pd_exp",
    "pd_forward_backward",
    "pd_gold_score",
    "pd_log_partition",
    "pd_node",
    "pd_scaled_forward",
    "pd_viterbi",
    "propagate",
    "row_emissions",
    "row_exp",
    "row_pairs",
    "row_sum",
    "scaled_forward",
    "tag_codes",
    "tag_codes_seqs",
    "transition_matrix",
    "vec_sum",
    "viterbi",
    "viterbi_m",
]


_NOPY = dict(cache=True, nogil=True, fastmath=FAST)


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
def backward_edges(T, L, lp, es, beta, scale, expMT, alpha, acc, tm, col, row):
    """The scaled backward sweep from ``beta[T-1]`` (set by the caller) down to ``beta[0]``, keeping
    each step's message ``tm[t] = es[t+1] * beta[t+1] / scale[t+1]`` (``tm``: >= T-1 rows of >= L),
    then the edge statistics before the factor expM, ``acc[i, :] += sum_t alpha[t, i] tm[t, :]``,
    as one product per label over the whole sequence (``col``: >= T, ``row``: >= L scratch): the
    accumulators stay in registers, where a rank-1 update per step rewrote all of ``acc`` (L x L)
    at every position.  ``expMT``: the transposed exp(trans - tmax).  ``lp >= L``: the rows' width
    (padded rows: columns L .. lp are 0 and stay 0).  Explicit vector code
    (:mod:`crfkit.kernels.simd`); every sum in an order fixed by T, L and lp."""
    for t in range(T - 2, -1, -1):
        vmul(tm[t], es[t + 1], beta[t + 1], 1.0 / scale[t + 1], lp)
        gemv(beta[t], tm[t], expMT, L, lp)
    n = T - 1
    if n <= 0:
        return
    for i in range(L):
        for t in range(n):
            col[t] = alpha[t, i]
        gemv(row, col, tm, n, lp)
        axpy(acc[i], 1.0, row, lp)


@njit(**_NOPY)
def log_partition(score, T, trans, expM, tmax, es, alpha, scale):
    """log Z alone (forward pass), with the same log-domain rules as forward_backward."""
    if tmax - max_min(trans)[1] <= MAX_SCALED_TRANSITION_RANGE:
        logz = scaled_forward(score, T, expM, tmax, es, alpha, scale)
        if np.isfinite(logz):
            return logz
    return forward_backward_log(score, T, trans, es, alpha, np.empty_like(alpha), scale)


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
        return forward_backward_log(score, T, trans, es, alpha, beta, scale)
    logz = scaled_forward(score, T, expM, tmax, es, alpha, scale)
    if not np.isfinite(logz):
        return forward_backward_log(score, T, trans, es, alpha, beta, scale)
    for j in range(L):
        beta[T - 1, j] = 1.0
    tmp = np.empty(L)
    expMT = expM.T.copy()  # the backward steps as register-accumulated products (simd.gemv)
    for t in range(T - 2, -1, -1):
        vmul(tmp, es[t + 1], beta[t + 1], 1.0 / scale[t + 1], L)
        gemv(beta[t], tmp, expMT, L, L)
    return logz


@njit(**_NOPY)
def forward_backward_edges(score, T, trans, expM, tmax, es, alpha, beta, scale, out):
    """:func:`forward_backward` followed by :func:`edge_marginal_sum` into ``out``, with the edge
    statistics gathered in the backward sweep itself: the message
    ``es[t+1] * beta[t+1] / scale[t+1]`` that gives beta[t] is the one the edge marginals of (t,
    t+1) need, so it is formed once. Returns log Z (the log-domain fallback as in
    forward_backward)."""
    L = trans.shape[0]
    if tmax - max_min(trans)[1] <= MAX_SCALED_TRANSITION_RANGE:
        logz = scaled_forward(score, T, expM, tmax, es, alpha, scale)
        if np.isfinite(logz):
            for j in range(L):
                beta[T - 1, j] = 1.0
            if T < 2:
                return logz
            acc = np.zeros((L, L))
            backward_edges(
                T,
                L,
                L,
                es,
                beta,
                scale,
                expM.T.copy(),
                alpha,
                acc,
                np.empty((T, L)),
                np.empty(T),
                np.empty(L),
            )
            for i in range(L):
                for j in range(L):
                    out[i, j] += acc[i, j] * expM[i, j]
            return logz
    logz = forward_backward_log(score, T, trans, es, alpha, beta, scale)
    edge_marginal_sum(T, expM, es, alpha, beta, scale, score, trans, logz, out)
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
        log_backward(score, T, trans, lb)
        for t in range(1, T):
            for i in range(L):
                for j in range(L):
                    out[i, j] += np.exp(es[t - 1, i] + trans[i, j] + score[t, j] + lb[t, j] - logz)
        return
    acc = np.zeros((L, L))
    tmp = np.empty(L)
    for t in range(1, T):
        vmul(tmp, es[t], beta[t], 1.0 / scale[t], L)
        rank1(acc, alpha[t - 1], tmp, L, L)
    for i in range(L):
        for j in range(L):
            out[i, j] += acc[i, j] * expM[i, j]


@njit(**_NOPY)
def add_transition_gradient(v, n_state, trans_index, edge, y, t0, T, coef):
    """v[n_state + k] += coef * (expected - gold count) of each transition feature k of the sequence
    of ``T`` tokens from ``t0`` (``edge``: its summed edge marginals, L x L; ``y``: the gold
    labels)."""
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


# ------------------------------------------------------------------ variants kept beside the family
# Two forward-backward forms that other kernels need and that do not give forward_backward's bits
# (or cannot be expressed through it): kept here, next to the family, with what differs.


# forward_backward_exp (batch's full-batch gradient, was batch._fb_exp): the emissions come in
# already exponentiated (``es``, one exp per attribute weight instead of per token score), the
# forward step sums ``alpha[t-1, i] * expMT[j, i]`` over i for each j (the transposed matrix, no
# skip of zero rows: another order of the additions than ``propagate``), the scales are tested
# against 1e300 as well, and the edge statistics are gathered in the backward sweep before the
# factor expM.  No log-domain fallback: NaN sends the caller to its robust path.
@njit(cache=True, nogil=True, fastmath=FAST)
def forward_backward_exp(T, es, expM, expMT, tmax, alpha, beta, scale, tmp, acc):
    """Scaled forward-backward from exp-domain emissions ``es``; adds the edge
    statistics (before the factor expM) into ``acc``.  Returns log Z, or NaN
    when a scale under/overflows (the caller then takes the robust path)."""
    L = es.shape[1]
    for j in range(L):
        alpha[0, j] = es[0, j]
    s = row_sum(es, 0)
    if not (s > 1e-300) or not (s < 1e300):
        return np.nan
    scale[0] = s
    logz = np.log(s)
    inv = 1.0 / s
    for j in range(L):
        alpha[0, j] *= inv
    for t in range(1, T):
        for j in range(L):
            a = 0.0
            for i in range(L):
                a += alpha[t - 1, i] * expMT[j, i]
            alpha[t, j] = a * es[t, j]
        s = row_sum(alpha, t)
        if not (s > 1e-300) or not (s < 1e300):
            return np.nan
        scale[t] = s
        logz += np.log(s) + tmax
        inv = 1.0 / s
        for j in range(L):
            alpha[t, j] *= inv
    for j in range(L):
        beta[T - 1, j] = 1.0
    for t in range(T - 2, -1, -1):
        inv = 1.0 / scale[t + 1]
        for j in range(L):
            tmp[j] = es[t + 1, j] * beta[t + 1, j] * inv
        for i in range(L):
            b = 0.0
            for j in range(L):
                b += expM[i, j] * tmp[j]
            beta[t, i] = b
            a = alpha[t, i]
            for j in range(L):
                acc[i, j] += a * tmp[j]
    return logz


# forward_backward_vec (batch's full-batch gradient): forward_backward_exp's recursion on label rows
# padded to a multiple of 8 with zeros, every label loop written as explicit <8 x double> code
# (crfkit.kernels.simd): the matrix-vector steps keep their accumulators in registers, and the
# normalising sums are added in a fixed order (other last bits than forward_backward_exp, the same
# wherever the arrays lie).  On CoNLL-2000's 22 labels a forward step went from 108 ns (scalar code,
# LLVM's vector loop needs 32 iterations) to 32 ns.
@njit(cache=True, nogil=True, fastmath=FAST)
def forward_backward_vec(T, L, es, expM, expMT, tmax, alpha, beta, scale, tmp, acc, ones, tm, col):
    """Scaled forward-backward from exp-domain emissions ``es`` (T x Lp rows, Lp = padded(L) >= L,
    the pad columns 0); ``expM``/``expMT`` (Lp x Lp, zero outside L x L), ``alpha``/``beta``
    (>= T x Lp), ``tmp`` and ``ones`` (Lp; ``ones`` all 1), ``acc`` (Lp x Lp), ``tm`` (>= T x Lp)
    and ``col`` (>= T) scratch: adds the edge statistics before the factor expM into ``acc``
    (:func:`backward_edges`).  Returns log Z, or NaN when a scale under- or
    overflows (before anything was added to ``acc``: the caller then takes the robust path)."""
    lp = es.shape[1]
    s = vsum(es[0], lp)
    if not (s > 1e-300) or not (s < 1e300):
        return np.nan
    scale[0] = s
    logz = np.log(s)
    vmul(alpha[0], es[0], ones, 1.0 / s, lp)
    for t in range(1, T):
        at = alpha[t]
        gemv(at, alpha[t - 1], expM, L, lp)
        vmul(at, at, es[t], 1.0, lp)
        s = vsum(at, lp)
        if not (s > 1e-300) or not (s < 1e300):
            return np.nan
        scale[t] = s
        logz += np.log(s) + tmax
        vmul(at, at, ones, 1.0 / s, lp)
    for j in range(lp):
        beta[T - 1, j] = 1.0
    backward_edges(T, L, lp, es, beta, scale, expMT, alpha, acc, tm, col, tmp)
    return logz


# forward_backward_ranged (constrained decoding, was decode._fb): forward_backward's scaled
# recursion and log-domain fallback, but the transition range comes in as ``rng`` (forbidden pairs
# are -inf in ``trans`` and 0 in ``expM``, so max_min(trans) would give an infinite range and always
# the log domain) and the backward sweep is optional (``backward``).  The scaled path runs the same
# operations as forward_backward (scaled_forward, then back_step from T-2 down), so the same bits
# where both apply.
@njit(**_NOPY)
def forward_backward_ranged(score, T, trans, expM, tmax, rng, es, alpha, beta, scale, backward):
    """Forward(-backward) with one transition matrix whose forbidden pairs are -inf in ``trans`` and
    0 in ``expM`` (``tmax``/``rng``: max and range over the finite pairs).  Returns log Z; the node
    marginals are alpha * beta when ``backward``."""
    L = trans.shape[0]
    if rng <= MAX_SCALED_TRANSITION_RANGE:
        logz = scaled_forward(score, T, expM, tmax, es, alpha, scale)
        if np.isfinite(logz):
            if backward:
                for j in range(L):
                    beta[T - 1, j] = 1.0
                tmp = np.empty(L)
                for t in range(T - 2, -1, -1):
                    back_step(beta, t, expM, es, t + 1, 1.0 / scale[t + 1], tmp)
            return logz
    return forward_backward_log(score, T, trans, es, alpha, beta, scale)
