"""Vectorisable odd transforms for Cao's natural-gradient updates: arctan, erf and the Gudermannian
``gd(x) = 2 atan(e^x) - pi/2``, without libm calls, so that a loop over a buffer of gradient entries
vectorises (numba has no vector libm; one ``math.atan`` / ``math.erf`` call per entry was 10-40 ns,
these are 2-6 ns per entry in a vectorised loop on this machine, ``benchmarks/ngd_profile.py``).

Each is computed on ``|x|`` and given the sign of ``x`` (exactly odd; ``T(0) = 0``):

* ``atan_nonneg``: the argument reduced to ``|a| <= tan(pi/8)`` by
  ``atan(x) = pi/4 + atan((x-1)/(x+1))`` (``tan(pi/8) < x <= tan(3pi/8)``) and
  ``atan(x) = pi/2 + atan(-1/x)`` (beyond; one division, selected), then ``a + a^3 P(a^2)`` with
  ``P`` of degree 10 fitted on Chebyshev nodes; ``pi/2`` and ``pi/4`` added in two parts.  Max error
  1.2 ulp against ``numpy.arctan`` in long double (on [-8, 8] step 8e-6 and +-[1e-300, 1e300]).
* ``erf_nonneg``: ``x E(x^2)`` (degree 12) for ``x <= 1.25``; ``1 - exp(-x^2) R(1/(1 + x))`` with
  ``R`` of degree 16 fitted to ``erfcx`` on [1.25, 6]; 1 beyond 6 (``erfc(6) = 2e-17``, below half
  an ulp of 1).  Max absolute error 9e-16 against ``scipy.special.erf`` (4 ulp of 1).
* ``gd_nonneg``: ``x G(x^2)`` (degree 14) for ``x <= 0.8814``; ``pi/2 - 2 atan(e^-x)`` beyond
  (``e^-x <= tan(pi/8)``, so only the reduced arctan), ``x`` capped at 40 (``gd(40)`` is ``pi/2`` in
  double).  Max error 2.9 ulp against ``2 atan(tanh(x/2))`` in long double.
* ``exp_neg``: ``exp(-y)`` for ``0 <= y <= 44``: ``y = m ln2 - r``, ``|r| <= ln2/2``, degree-13
  Taylor polynomial, times ``2^-m`` built from six exact power-of-two factors selected on the bits
  of ``m`` (no float-to-int conversion, no table gather: either keeps the loop scalar).

The functions are ``inline="always"`` and compiled with numpy's error model: Python's raises on a
division by zero, and that branch keeps LLVM from vectorising (the ``u1g1`` loop ``g / (g^2 + eps)``
was scalar for that reason alone).  The tests check them against numpy/scipy on a grid and at
extremes, oddness, ``T(0) = 0`` and monotonicity (``tests/test_ngd.py``).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .compress import list_above

# no reassociation (it would undo the argument reductions); numpy's error model (see the docstring)
VEC = dict(cache=True, nogil=True, fastmath={"contract"}, error_model="numpy")
_VEC = VEC
_PIO2_HI = 1.5707963267948966
_PIO2_LO = 6.123233995736766e-17
_PIO4_HI = 0.7853981633974483
_PIO4_LO = 3.061616997868383e-17
_TAN3PI8 = 2.414213562373095
_TANPI8 = 0.41421356237309503
_LOG2E = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_GD_SPLIT = 0.8814
_ERF_SPLIT = 1.25
_ERF_ONE = 6.0


# the polynomials (Horner, coefficients fitted by least squares on Chebyshev nodes against
# long-double references; the constant terms set to their exact values -1/3, 2/sqrt(pi), 1; exp's
# are 1/k!)
@njit(inline="always", **_VEC)
def _atan_poly(s):
    r = -0.019156428554844243
    r = r * s + 0.03921562332384002
    r = r * s + -0.05084921716913689
    r = r * s + 0.05858054142546023
    r = r * s + -0.06664501400134457
    r = r * s + 0.07692182554500214
    r = r * s + -0.09090904555008862
    r = r * s + 0.11111111014825244
    r = r * s + -0.14285714284663154
    r = r * s + 0.19999999999995602
    r = r * s + -0.3333333333333333
    return r


@njit(inline="always", **_VEC)
def _erf_small_poly(s):
    r = 4.592182133023516e-11
    r = r * s + -1.0371088400162557e-09
    r = r * s + 1.4333242572038767e-08
    r = r * s + -1.6288287683820434e-07
    r = r * s + 1.6453429115037723e-06
    r = r * s + -1.4924977413532412e-05
    r = r * s + 0.00012055297116846007
    r = r * s + -0.0008548325738218244
    r = r * s + 0.005223977595806758
    r = r * s + -0.026866170641059346
    r = r * s + 0.11283791670926117
    r = r * s + -0.37612638903182977
    r = r * s + 1.1283791670955126
    return r


@njit(inline="always", **_VEC)
def _erfcx_poly(u):
    r = 65.4208715677232
    r = r * u + -213.78050510115793
    r = r * u + 278.8904477720671
    r = r * u + -161.48987083804957
    r = r * u + 8.53440178924621
    r = r * u + 35.54443574171215
    r = r * u + -7.51750457605081
    r = r * u + -8.622347010382759
    r = r * u + 2.388804141754498
    r = r * u + 2.3009775458717683
    r = r * u + -0.47851081690545105
    r = r * u + -0.619349056258512
    r = r * u + -0.2959997967396406
    r = r * u + 0.28358670787300533
    r = r * u + 0.5640860247068284
    r = r * u + 0.5641938181707848
    r = r * u + -7.77437818555589e-08
    return r


@njit(inline="always", **_VEC)
def _gd_small_poly(s):
    r = 3.504755017219053e-08
    r = r * s + -2.4628980703357994e-07
    r = r * s + 9.267252173170221e-07
    r = r * s + -2.7035081591717267e-06
    r = r * s + 7.322929863978635e-06
    r = r * s + -1.9834520074238094e-05
    r = r * s + 5.455172579339874e-05
    r = r * s + -0.00015246580632989414
    r = r * s + 0.0004340407444801315
    r = r * s + -0.0012656579471610591
    r = r * s + 0.0038166887489685976
    r = r * s + -0.012103174605261679
    r = r * s + 0.04166666666672968
    r = r * s + -0.16666666666666669
    r = r * s + 1.0
    return r


@njit(inline="always", **_VEC)
def _exp_poly(x):
    r = 1.6059043836821613e-10
    r = r * x + 2.08767569878681e-09
    r = r * x + 2.505210838544172e-08
    r = r * x + 2.755731922398589e-07
    r = r * x + 2.7557319223985893e-06
    r = r * x + 2.48015873015873e-05
    r = r * x + 0.0001984126984126984
    r = r * x + 0.001388888888888889
    r = r * x + 0.008333333333333333
    r = r * x + 0.041666666666666664
    r = r * x + 0.16666666666666666
    r = r * x + 0.5
    r = r * x + 1.0
    r = r * x + 1.0
    return r


@njit(inline="always", **_VEC)
def _atan_reduced(a):
    """atan(a) - a for |a| <= tan(pi/8)."""
    s = a * a
    return a * s * _atan_poly(s)


@njit(inline="always", **_VEC)
def atan_nonneg(x):
    """atan(x) for x >= 0 (and +inf)."""
    big = x > _TAN3PI8
    mid = x > _TANPI8
    num = -1.0 if big else (x - 1.0 if mid else x)
    den = x if big else (x + 1.0 if mid else 1.0)
    a = num / den
    hi = _PIO2_HI if big else (_PIO4_HI if mid else 0.0)
    lo = _PIO2_LO if big else (_PIO4_LO if mid else 0.0)
    return hi + (a + (_atan_reduced(a) + lo))


@njit(inline="always", **_VEC)
def _pow2_neg(m):
    """2^-m for an integer-valued 0 <= m < 64: exact power-of-two factors selected on the bits of
    m."""
    f = 2.3283064365386963e-10 if m >= 32.0 else 1.0
    m = m - (32.0 if m >= 32.0 else 0.0)
    f = f * (1.52587890625e-05 if m >= 16.0 else 1.0)
    m = m - (16.0 if m >= 16.0 else 0.0)
    f = f * (0.00390625 if m >= 8.0 else 1.0)
    m = m - (8.0 if m >= 8.0 else 0.0)
    f = f * (0.0625 if m >= 4.0 else 1.0)
    m = m - (4.0 if m >= 4.0 else 0.0)
    f = f * (0.25 if m >= 2.0 else 1.0)
    m = m - (2.0 if m >= 2.0 else 0.0)
    return f * (0.5 if m >= 1.0 else 1.0)


@njit(inline="always", **_VEC)
def exp_neg(y):
    """exp(-y) for 0 <= y <= 44 (the polynomial of the reduced argument times 2^-m, exact)."""
    m = np.floor(y * _LOG2E + 0.5)
    r = (m * _LN2_HI - y) + m * _LN2_LO
    return _exp_poly(r) * _pow2_neg(m)


@njit(inline="always", **_VEC)
def erf_nonneg(x):
    """erf(x) for x >= 0 (and +inf)."""
    small = x * _erf_small_poly(x * x)
    xc = min(x, _ERF_ONE)
    y = xc * xc
    m = np.floor(y * _LOG2E + 0.5)
    r = (m * _LN2_HI - y) + m * _LN2_LO
    # exp(-y) R = (poly(r) R) 2^-m, in this order (as erf_into)
    big = 1.0 - (_exp_poly(r) * _erfcx_poly(1.0 / (1.0 + xc))) * _pow2_neg(m)
    return small if x <= _ERF_SPLIT else (big if x < _ERF_ONE else 1.0)


@njit(inline="always", **_VEC)
def gd_nonneg(x):
    """gd(x) = 2 atan(e^x) - pi/2 for x >= 0 (and +inf)."""
    small = x * _gd_small_poly(x * x)
    e = exp_neg(min(x, 40.0))
    big = (_PIO2_HI - 2.0 * (e + _atan_reduced(e))) + _PIO2_LO
    return small if x <= _GD_SPLIT else big


_TWO52 = 4503599627370496.0


@njit(inline="always", **_VEC)
def exp_neg_split(y):
    """exp(-y) = e * 2^-m for 0 <= y <= 44, as ``(e, magic)``: ``magic = (1023 - m) + 2^52`` holds
    ``1023 - m`` in its low mantissa bits, so that shifting its bits left by 52 gives the bits of
    ``2^-m`` (the exponent field; the ``2^52`` bits shift out).  For the buffer loops of
    :func:`erf_into` and :func:`gd_into`: the shift runs over an int64 view in a loop of its own,
    and every loop vectorises (no float-to-int conversion)."""
    m = np.floor(y * _LOG2E + 0.5)
    r = (m * _LN2_HI - y) + m * _LN2_LO
    return _exp_poly(r), (1023.0 - m) + _TWO52


@njit(inline="always", **_VEC)
def _shift_exponents(bits, n):
    for j in range(n):
        bits[j] = bits[j] << 52


@njit(inline="always", **_VEC)
def erf_into(buf, n, p, scr):
    """buf[:n] <- erf(p buf[:n]) (as :func:`erf_nonneg`, to the bit), in three vectorised loops;
    ``scr``: float64 scratch of shape (2, >= n)."""
    ef = scr[0]
    mg = scr[1]
    for j in range(n):
        xc = min(abs(p * buf[j]), _ERF_ONE)
        e, magic = exp_neg_split(xc * xc)
        ef[j] = e * _erfcx_poly(1.0 / (1.0 + xc))
        mg[j] = magic
    _shift_exponents(mg[:n].view(np.int64), n)
    for j in range(n):
        x = p * buf[j]
        ax = abs(x)
        small = ax * _erf_small_poly(ax * ax)
        big = 1.0 - ef[j] * mg[j]
        r = small if ax <= _ERF_SPLIT else (big if ax < _ERF_ONE else 1.0)
        buf[j] = math.copysign(r, x)


@njit(inline="always", **_VEC)
def gd_into(buf, n, p, scr):
    """buf[:n] <- gd(p buf[:n]) (as :func:`gd_nonneg`, to the bit), in three vectorised loops;
    ``scr``: float64 scratch of shape (2, >= n)."""
    ef = scr[0]
    mg = scr[1]
    for j in range(n):
        e, magic = exp_neg_split(min(abs(p * buf[j]), 40.0))
        ef[j] = e
        mg[j] = magic
    _shift_exponents(mg[:n].view(np.int64), n)
    for j in range(n):
        x = p * buf[j]
        ax = abs(x)
        small = ax * _gd_small_poly(ax * ax)
        e = ef[j] * mg[j]
        big = (_PIO2_HI - 2.0 * (e + _atan_reduced(e))) + _PIO2_LO
        r = small if ax <= _GD_SPLIT else big
        buf[j] = math.copysign(r, x)


# ---------------------------------------------------------------- buffers split by argument size
# Most entries of a sequence's gradient are small (CoNLL-2000, after two epochs: 96-98% have |p g|
# below every split point), so the buffer loops of erf and gd below list the entries past the split
# point (:func:`crfkit.kernels.compress.list_above`: AVX-512's compress where there is one),
# evaluate the small-argument polynomial on every entry (one vectorised loop, no argument reduction,
# no exp), and the full formula on the listed ones only, in a vectorised loop over the list.  Every
# entry gets the bits the one-loop forms give (the tests compare them bitwise): the small branch is
# ``x P(x^2)``, which is the one-loop form's ``copysign(|x| P(x^2), x)`` to the bit, since ``P > 0``
# on the small range and rounding is symmetric (without the sign handling: 3% less time in that
# loop).


@njit(inline="always", **_VEC)
def atan_into(buf, n, p):
    """buf[:n] <- atan(p buf[:n]) (:func:`atan_nonneg` with the sign) in one vectorised loop.  Its
    reduction is two selects and one division, cheap enough that listing the large entries and
    evaluating the small branch everywhere (as erf and gd do, below) costs more: 0.58 against 0.79
    ns an entry on a buffer of CoNLL-like gradients; an ngd ``u2g1`` epoch at fixed weights 0.969x
    the split form's, in one process (the same bits; 2026-11-29, an AVX-512 machine)."""
    for j in range(n):
        x = p * buf[j]
        buf[j] = math.copysign(atan_nonneg(abs(x)), x)


@njit(inline="always", **_VEC)
def erf_split_into(buf, n, p, scr):
    """buf[:n] <- erf(p buf[:n]) (as :func:`erf_into`, to the bit); ``scr``: float64 scratch of
    shape (4, >= n)."""
    sv = scr[0]
    idx = scr[1].view(np.int64)
    cnt = list_above(buf, n, p, _ERF_SPLIT, idx, sv)
    for j in range(n):
        x = p * buf[j]
        buf[j] = x * _erf_small_poly(x * x)
    if cnt:
        erf_into(sv, cnt, p, scr[2:4])
        for k in range(cnt):
            buf[idx[k]] = sv[k]


@njit(inline="always", **_VEC)
def gd_split_into(buf, n, p, scr):
    """buf[:n] <- gd(p buf[:n]) (as :func:`gd_into`, to the bit); ``scr``: float64 scratch of shape
    (4, >= n)."""
    sv = scr[0]
    idx = scr[1].view(np.int64)
    cnt = list_above(buf, n, p, _GD_SPLIT, idx, sv)
    for j in range(n):
        x = p * buf[j]
        buf[j] = x * _gd_small_poly(x * x)
    if cnt:
        gd_into(sv, cnt, p, scr[2:4])
        for k in range(cnt):
            buf[idx[k]] = sv[k]
