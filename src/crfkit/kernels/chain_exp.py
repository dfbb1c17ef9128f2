"""The exp-domain arithmetic every forward-backward recursion of :mod:`crfkit.kernels.chain` shares.

The fast-math flag sets (``FAST``, ``EXACT``), ``MAX_SCALED_TRANSITION_RANGE`` (when the scaled
recursions hand over to the log domain), the vectorisable exponential (``exp_shift_into``,
``exp_minus``), exact row sums, the max/min of a transition matrix, and the one-step message updates
(``row_exp``, ``propagate`` forward, ``back_step`` backward) that the scaled, position-dependent and
windowed recursions (``chain``, ``chain_pd``, ``chain_window``) are built from.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .bitcast import bits_f64
from .simd import gemv, vmul

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


# The L x L exponentials exp(trans - tmax) of every per-example oracle call (and SAG line-search
# trial) are a large part of a stochastic step on a dense label set when each goes through libm one
# by one (numba has no vector exp without Intel SVML).  exp_minus is a vectorisable exp: Cody-Waite
# reduction x = k ln2 + r, |r| <= ln2/2, degree-13 Taylor polynomial, 2^k from the exponent bits;
# within 1 ulp of libm's exp (rounding-level), 0 below -708, inf above 709, NaN for NaN.
_LOG2E = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_EXP_C = tuple(1.0 / math.factorial(k) for k in range(14))
# no reassociation: it would undo exp's argument reduction, and make short sums depend on where
# their arrays lie (row_sum); the flags of every kernel that needs its additions in the order
# written
EXACT = dict(cache=True, nogil=True, fastmath={"contract"})


@njit(**EXACT)
def row_sum(x, t):
    """``sum_j x[t, j]`` added in index order.  Without re-association on purpose: with it, LLVM
    compiles such a short reduction into code whose summation order depends on where the arrays lie
    (their alignment), so that the same inputs gave other last bits from call to call, and the
    full-batch gradient other bits from run to run with threads
    (``tests/test_kernel_addresses.py``)."""
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
    """o[i] = exp(x[i] - shift) for 1-D contiguous ``x`` and ``o`` (distinct arrays; see
    :func:`exp_minus` for the method and accuracy).  2^k is built from its bits
    (:mod:`crfkit.kernels.bitcast`) in the same loop.  (Until 2026-11-29 the bits went through an
    int64 scratch, read back through a float64 view in a second loop: the same values, but about 30
    ns more a call, a call per token in the forward recursions.)"""
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
    """(max, min) of a C-contiguous array; NaN entries are skipped (an all-NaN array gives (-inf,
    inf)).

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
    """One scaled backward step: beta[t, i] = sum_j expM[i, j] * es[r, j] * beta[t+1, j] * inv.
    (Kept as LLVM's loop: a product by the transposed matrix in explicit vector code, per-row
    horizontal sums, was no faster, 58-78 against 65-99 ns a step at 22 labels and slower at 45; the
    recursions that have the transposed matrix use :func:`crfkit.kernels.simd.gemv` instead.)"""
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
    """One scaled forward step: alpha[t, j] = es[r, j] * sum_i alpha[t-1, i] expM[i, j] (explicit
    vector code with the accumulators in registers, :func:`crfkit.kernels.simd.gemv`: 32 ns against
    108 for the scalar loop LLVM made of it at 22 labels)."""
    L = expM.shape[0]
    at = alpha[t]
    gemv(at, alpha[t - 1], expM, L, L)
    vmul(at, at, es[r], 1.0, L)
