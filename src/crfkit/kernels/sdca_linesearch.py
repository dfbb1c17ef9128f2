"""SDCA's exact line search on the dual (see :mod:`crfkit.kernels.sdca`): the vectorisable log, the
gap block and its entries, f' and its moments, the certified Taylor root with its safeguards, and
the elastic net's thresholded weights and line search (l1 > 0).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .bitcast import bits_f64, f64_bits
from .chain_exp import EXACT, FAST
from .sdca_store import I_LS, LOG_FLOOR, LS_MAXIT

# error_model="numpy": a float division is IEEE (no ZeroDivisionError branch), so that the loops
# over marginal entries vectorise (the branch kept LLVM from it; every division here is guarded
# anyway)
_NOPY = dict(cache=True, nogil=True, fastmath=FAST, error_model="numpy")


# ------------------------------------------------------------- a vectorisable log
# The line search and the individual gaps take a log per clique-marginal entry (thousands per step):
# libm's log one by one dominated an SDCA step (30 ns each).  log_fast_into is a log that LLVM
# vectorises: x = m 2^e with m in [sqrt(1/2), sqrt(2)) from the exponent bits, log m = 2 atanh(s),
# s = (m-1)/(m+1), |s| <= 0.172, by its series to s^9, e ln 2 added in two parts.  (A series to
# s^21, within a few ulp of libm, served the gap pass until 2026-11-29.)
_EXACT = dict(EXACT, error_model="numpy")  # no reassociation (chain.EXACT), numpy's division
_SQRT2 = 1.4142135623730951
_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_ATANH_C = tuple(1.0 / (2 * k + 1) for k in range(11))
_MANT = 0x000FFFFFFFFFFFFF
_ONE_BITS = 0x3FF0000000000000
_TWO52_BITS = 0x4330000000000000  # the bits of 2^52: (2^52 + k) for 0 <= k < 2^52 is exact
_TWO52_BIAS = 4503599627370496.0 + 1023.0


@njit(inline="always", **_EXACT)
def _atanh_argument(mi, eb):
    """For x = 2^e' m' (``mi`` = m' in [1, 2), ``eb`` = 2^52 + e'): x = 2^e m with m in [sqrt(2)/2,
    sqrt(2)], and ``(e, s, s^2)`` with s = (m - 1) / (m + 1), so that log x = e log 2 + 2
    atanh(s)."""
    e = eb - _TWO52_BIAS
    big = mi > _SQRT2
    mi = mi * 0.5 if big else mi
    e = e + 1.0 if big else e
    s = (mi - 1.0) / (mi + 1.0)
    return e, s, s * s


@njit(**_EXACT)
def log_fast_into(x, out, n):
    """out[i] = log(x[i]) for i < n, x[i] a positive normal finite double (callers clamp), by the
    atanh series to s^9: relative error below 3e-9 (the omitted terms are at most s^10 / 11 of the
    result, |s| <= 0.172, and vanish as x nears a power of 2, so the log of a ratio near 1 keeps
    full precision); about a third less time than the series to s^21 (a few ulp).  Mantissa and
    exponent come from the bits (:mod:`crfkit.kernels.bitcast`), the exponent reaching double as the
    bits of ``2^52 + e``, not by an int-to-double conversion, which AVX2 cannot vectorise.  (Until
    2026-11-29 the bits went through int64 views of the arrays and an int64 scratch, in a loop of
    their own: the same values, but 30-90 ns a call more, which on the gap pass's blocks of L and
    L^2 entries cost more than the logs.)  The line search's f' takes it: f' is wanted to the
    tolerance of gamma (1e-3 by default), far above 3e-9 of its terms; so does the gap pass
    (:func:`load_gap`), whose gap only weighs the example's sampling and whose f'(0) only starts the
    line search (2-4% of an OCR step, 2026-11-29)."""
    c = _ATANH_C
    for i in range(n):
        b = f64_bits(x[i])
        e, s, z = _atanh_argument(
            bits_f64((b & _MANT) | _ONE_BITS), bits_f64(((b >> 52) & 0x7FF) | _TWO52_BITS)
        )
        # Estrin's scheme (two independent halves): 17% less time than Horner's chain here
        z2 = z * z
        p = (1.0 + c[1] * z) + ((c[2] + c[3] * z) + c[4] * z2) * z2
        out[i] = e * _LN2_HI + (2.0 * s * p + e * _LN2_LO)


# ------------------------------------------------------------- SDCA line search
# The entries of the cliques (edges; T = 1: the node) and of the separators (interior nodes, sign
# -1) of one sequence: mu (the store) and mu' (the new marginals).  Ratios are formed from mu'
# itself, never as 1 + d / mu: where mu ~ 1 and mu' ~ 1e-17, mu + d is 0 in floating point and the
# log of the ratio would be the floor's instead of -39.  The direction d = mu' - mu is recomputed
# from the two where needed (the same double subtraction every time).
#
# Both passes over the entries work in blocks whose scratch stays in L1 (an edge's L^2 entries for
# the gap pass, LS_BLOCK entries for f'): the ratios and their logs are formed and used block by
# block.  Nothing is written out at full length: the line search reads mu from the store's rows
# (float32 or float64) and mu' from the new marginals where they are (:func:`ls_entries`).
#
# (Until 2026-11-29 the gap pass also copied mu and mu' out and, where at most 60% of the entries
# had an f'(0) term above 1e-6 f'(0) / (their count), compacted those into the copies for the line
# search.  On OCR folds 1-9, CoNLL-2000 and CoNLL-2002 Dutch a step was 0-5% faster without copies
# and compaction: a step makes 1.1-1.2 evaluations of f', too few to repay a compaction's sequential
# stores.)
LS_BLOCK = 512


@njit(inline="always", **_NOPY)
def _gap_block(src, xs, nb, bu, bl, td, clique):
    """The gap pass over one block of ``nb`` entries: stored marginals ``src`` (float32 or float64)
    and new ones ``xs``.  Forms the ratios ``bu = max(mu', floor) / mu`` (1 where mu = 0) and their
    logs ``bl`` (:func:`log_fast_into`, as the line search: relative error below 3e-9, and none
    where the ratio nears 1, so the gap of a converged example keeps its digits) in the L1 scratch;
    returns the block's sums of ``mu log(mu' / mu)`` (the gap's term), ``d log(mu' / mu)``
    (f'(0)'s), the curvatures ``d^2 / mu`` and ``d^2 / mu'`` (from the ratios: ``d (bu - 1)`` and
    ``d (1 - 1 / bu)``; entries with mu = 0 add 0: they make f'(0) infinite anyway) and the count of
    entries with mu <= 0 < d.  ``clique``: also adds d into ``td`` (the transition direction), in
    the loop that forms the ratios.  ``src`` is read twice (converted again) rather than copied to
    float64 scratch: 6% less time for the pass on OCR."""
    for j in range(nb):
        m = np.float64(src[j])
        x = xs[j]
        bu[j] = max(x, LOG_FLOOR) / m if m > 0.0 else 1.0
        if clique:
            td[j] += x - m
    log_fast_into(bu, bl, nb)
    g = 0.0
    fp = 0.0
    c0 = 0.0
    c1 = 0.0
    nbad = 0
    for j in range(nb):
        m = np.float64(src[j])
        x = xs[j]
        d = x - m
        lr = bl[j]
        g += m * lr
        fp += d * lr
        r = bu[j]
        c0 += d * (r - 1.0)
        c1 += d * (1.0 - 1.0 / r)
        nbad += 1 if (m <= 0.0 and d > 0.0) else 0
    return g, fp, c0, c1, nbad


@njit(**_NOPY)
def load_gap(T, t0, e0, node_store, pair2, node_n, pn2, m_node, d_node, tdir, scratch):
    """One sweep over sequence i's stored marginals (node rows from ``t0`` of ``node_store``,
    pairwise rows of the flattened store ``pair2`` ((edges, L*L)) from ``e0``) and its new ones
    (``node_n``, ``pn2``: (maxT, L*L)): the individual gap g = KL(mu || mu') (eq. 10),
    f'(0) = KL(mu || mu') + KL(mu' || mu) (inf where an entry has mu <= 0 < mu'), and the curvatures
    of the entropy part of f' at both ends, ``c0 = -(f''(0) + q) = sum_cliques
    d^2 / mu - sum_separators (same)`` and ``c1 = -(f''(1) + q)`` (the same with mu'; the line
    search's first guess); also m_node = the stored node marginals (float64), d_node = new - stored,
    and tdir (L x L) = the summed pairwise differences sum_t (pair'_t - pair_t).  ``scratch``:
    (2, >= L^2) float64.  Returns (g, f'(0), c0, c1).

    The stored pairwise entries are read edge by edge (the ratios and their logs of an edge stay in
    L1); the separators (the interior nodes, rows 1 .. T-2 of ``m_node`` and ``node_n``, contiguous)
    in blocks of the scratch's length, not row by row (L entries: a call's fixed cost outweighed its
    work)."""
    L = node_store.shape[1]
    LL = L * L
    td = tdir.reshape(LL)
    for k in range(LL):
        td[k] = 0.0
    for t in range(T):
        nr = node_store[t0 + t]
        nn = node_n[t]
        for l in range(L):
            m = np.float64(nr[l])
            m_node[t, l] = m
            d_node[t, l] = nn[l] - m
    bu, bl = scratch[0], scratch[1]
    gp = fpp = c0p = c1p = 0.0
    gs = fps = c0s = c1s = 0.0
    nbad = 0
    if T == 1:
        gp, fpp, c0p, c1p, nbad = _gap_block(m_node[0], node_n[0], L, bu, bl, td, False)
    else:
        for t in range(T - 1):
            g_, f_, a_, b_, nb_ = _gap_block(pair2[e0 + t], pn2[t], LL, bu, bl, td, True)
            gp += g_
            fpp += f_
            c0p += a_
            c1p += b_
            nbad += nb_
        mf = m_node.reshape(m_node.size)
        nf = node_n.reshape(node_n.size)
        hi = (T - 1) * L
        blk = bu.shape[0]
        for b in range(L, hi, blk):
            nb = min(blk, hi - b)
            g_, f_, a_, b_, nb_ = _gap_block(mf[b : b + nb], nf[b : b + nb], nb, bu, bl, td, False)
            gs += g_
            fps += f_
            c0s += a_
            c1s += b_
            nbad += nb_
    fp0 = fpp - fps
    if nbad > 0:
        fp0 = np.inf
    return gs - gp, fp0, c0p - c0s, c1p - c1s


@njit(**_NOPY)
def ls_entries(T, t0, e0, node_store, pair_store, node_n, pair_n):
    """The line search's entries of sequence i where they are, as four flat views: the cliques' mu
    (the store's rows, float32 or float64) and mu' (the new marginals), then the separators' (the
    interior nodes' rows of the store and of ``node_n``).  The cliques are the T - 1 edges, or the
    node where T = 1 (then no separators)."""
    L = node_store.shape[1]
    LL = L * L
    ns = node_store.reshape(node_store.shape[0] * L)
    nn = node_n.reshape(node_n.shape[0] * L)
    if T == 1:
        return ns[t0 * L : (t0 + 1) * L], nn[:L], ns[:0], nn[:0]
    npair = (T - 1) * LL
    pm = pair_store.reshape(pair_store.shape[0] * LL)[e0 * LL : e0 * LL + npair]
    pn = pair_n.reshape(pair_n.shape[0] * LL)[:npair]
    return pm, pn, ns[(t0 + 1) * L : (t0 + T - 1) * L], nn[L : (T - 1) * L]


@njit(**_NOPY)
def _fprime_range_m(g, cm, cn, bu, bl):
    """Over the entries (mu in ``cm``: float32 or float64, mu' in ``cn``), in blocks of LS_BLOCK
    (the ratios and their logs in the L1 scratch ``bu``, ``bl``), f'(g)'s terms and, in the same
    sweep, what the certified Taylor model of f' around g needs (:func:`taylor_root`), with
    rho = d / mu_g per entry: the sums of ``d log(mu' / mu_g)``, ``d rho`` (= d^2 / mu_g),
    ``d rho^2`` and ``d rho^3`` (three multiply-adds an entry more than f' alone; every ``d rho^k``
    with k odd is >= 0, rho having the sign of d)."""
    omg = 1.0 - g
    s = 0.0
    s2 = 0.0
    m2 = 0.0
    m3 = 0.0
    b = 0
    hi = cm.shape[0]
    while b < hi:
        nb = min(LS_BLOCK, hi - b)
        m_ = cm[b : b + nb]
        x_ = cn[b : b + nb]
        for j in range(nb):
            m = np.float64(m_[j])
            x = x_[j]
            d = x - m
            r = 1.0 / max(omg * m + g * x, LOG_FLOOR)
            bu[j] = max(x, LOG_FLOOR) * r
            rho = d * r
            dp = d * rho
            s2 += dp
            m2 += dp * rho
            m3 += dp * (rho * rho)
        log_fast_into(bu, bl, nb)
        for j in range(nb):
            s += (x_[j] - np.float64(m_[j])) * bl[j]
        b += nb
    return s, s2, m2, m3


@njit(**_NOPY)
def fprime_moments(g, pm, pn, sm, sn, bu, bl, out):
    """The entropy part of f' at g, A(g) = sum_cliques d log(mu' / mu_g) - sum_separators (same),
    and the Taylor data of A around g (:func:`taylor_root`), written into ``out`` (float64, 7):
    A(g), a1 = -A'(g) = sum d rho (cliques minus separators), a2 = A''(g) = sum d rho^2,
    a3 = -A^(3)(g) / 2 = sum d rho^3, b4 >= sum |d| rho^4 (all entries), rmax >= max |rho|,
    sabs = the scale of the evaluation's error (:data:`TAYLOR_LOG_ERR`).  rho = d / mu_g.

    No sweep for the bounds: marginals lie in [0, 1], so mu_g = (1 - g) mu + g mu' >= g d where
    d > 0 and >= (1 - g) |d| where d < 0, i.e. |rho| <= rmax = max(1 / g, 1 / (1 - g)); then |d|
    rho^4 = d rho^3 |rho| <= rmax d rho^3 (d rho^3 >= 0), so b4 = rmax sum d rho^3 over all entries;
    the terms d log(mu' / mu_g) are >= 0 (the log has the sign of d), so sum |.| = |sum over
    cliques| + |sum over separators|, and |d| <= 1 gives sum |d| <= nc."""
    sp, s2p, m2p, m3p = _fprime_range_m(g, pm, pn, bu, bl)
    ss, s2s, m2s, m3s = _fprime_range_m(g, sm, sn, bu, bl)
    nc = pm.shape[0] + sm.shape[0]
    rb = max(1.0 / g, 1.0 / (1.0 - g)) * (1.0 + 1e-12) if (g > 0.0 and g < 1.0) else np.inf
    out[0] = sp - ss
    out[1] = s2p - s2s
    out[2] = m2p - m2s
    out[3] = m3p - m3s
    out[4] = rb * (m3p + m3s)
    out[5] = rb
    out[6] = abs(sp) + abs(ss) + s2p + s2s + TAYLOR_ULP * nc


# the certified Taylor model's allowance for the evaluation's own error, per unit of ``sabs`` (the
# sum of the terms' sizes |d log(mu' / mu_g)| + d^2 / mu_g, plus TAYLOR_ULP sum |d|): the fast log's
# relative error (3e-9) with a margin, and the rounding of the sums; TAYLOR_ULP |d| stands for the
# absolute error of a log of a ratio formed with a few roundings (about 5e-16 per entry, times |d|),
# which dominates the relative one where mu' ~ mu
TAYLOR_LOG_ERR = 5e-9
TAYLOR_ROUND = 1e-11
TAYLOR_ULP = 1e-7


@njit(**_NOPY)
def _taylor_err(dl, b4, rmax, sabs):
    """A bound on |A(x0 + dl) - (its Taylor polynomial of degree 3 around x0)| plus the evaluation's
    own error: per entry -d log1p(dl rho) with the series' remainder after the cube below |dl
    rho|^4 / (4 (1 - |dl rho|)); inf where |dl| rmax >= 1 (the series may not converge)."""
    z = abs(dl) * rmax
    if not (z < 1.0):
        return np.inf
    d2 = dl * dl
    return d2 * d2 * b4 / (4.0 * (1.0 - z)) + (TAYLOR_LOG_ERR + TAYLOR_ROUND) * sabs * (
        1.0 + abs(dl) * rmax
    )


@njit(**_NOPY)
def _other(x, q, nz, ez, kappa, l2n):
    """The regulariser's part of f' (subtracted from A): (x q, q) for l2 alone, (h(x), h'(x)) with
    l1."""
    if kappa > 0.0:
        return enet_h(x, nz, ez, kappa, l2n)
    return x * q, q


@njit(**_NOPY)
def taylor_root(x0, mo, lo, hi, tol, q, nz, ez, kappa, l2n):
    """A certified bracket of the root of f' = A - (regulariser part) from one evaluation at x0.

    With rho = d / mu_x0 per entry, mu_{x0 + t} = mu_x0 (1 + t rho), so A(x0 + t) = A(x0) - sum d
    log1p(t rho) (cliques minus separators) = A(x0) - a1 t + a2 t^2 / 2 - a3 t^3 / 3 + R(t),
    |R(t)| <= t^4 b4 / (4 (1 - |t| rmax)) (``mo`` from :func:`fprime_moments`; :func:`_taylor_err`
    adds the evaluation's error).  The root xr of the model is found by safeguarded Newton in [lo,
    hi] (no log: a few flops a step); then the points a = xr - e, b = xr + e, e = 2 |error bound at
    xr| / |slope| (at least 1e-12), are tested: f'(a) > 0 and f'(b) < 0 are certain where the
    model's value exceeds its error bound (a <= lo and b >= hi need no test: f'(lo) > 0 > f'(hi) are
    known).  Returns the left end of the certified bracket [max(a, lo), min(b, hi)] contains the
    root; where it is at most ``tol`` wide and e at most a quarter of xr, returns xr (within tol of
    the root, as the Newton point the search's other stop returns, and at most twice the root, so
    that a tiny root is not rounded to a step of 0), else -1."""
    a0, a1, a2, a3, b4, rmax, sabs = mo[0], mo[1], mo[2], mo[3], mo[4], mo[5], mo[6]
    if not (
        np.isfinite(a0)
        and np.isfinite(a1)
        and np.isfinite(a2)
        and np.isfinite(a3)
        and np.isfinite(b4)
    ):
        return -1.0
    tl = lo - x0
    th = hi - x0
    t = 0.0
    for _ in range(40):
        o, op = _other(x0 + t, q, nz, ez, kappa, l2n)
        fm = a0 - a1 * t + 0.5 * a2 * t * t - a3 * t * t * t / 3.0 - o
        dm = -a1 + a2 * t - a3 * t * t - op
        if fm > 0.0:
            tl = max(tl, t)
        elif fm < 0.0:
            th = min(th, t)
        else:
            break
        nt = t - fm / dm if dm < 0.0 else -np.inf
        if not (nt > tl and nt < th):
            nt = 0.5 * (tl + th)
        if abs(nt - t) <= 1e-3 * tol or th - tl <= 1e-3 * tol:
            t = nt
            break
        t = nt
    o, op = _other(x0 + t, q, nz, ez, kappa, l2n)
    slope = abs(-a1 + a2 * t - a3 * t * t - op)
    e = max(2.0 * _taylor_err(t, b4, rmax, sabs) / slope, 1e-12) if slope > 0.0 else np.inf
    if not (2.0 * e <= tol):
        return -1.0
    a = x0 + t - e
    b = x0 + t + e
    if a > lo:
        ta = a - x0
        o, _ = _other(a, q, nz, ez, kappa, l2n)
        if not (
            a0
            - a1 * ta
            + 0.5 * a2 * ta * ta
            - a3 * ta * ta * ta / 3.0
            - o
            - _taylor_err(ta, b4, rmax, sabs)
            > 0.0
        ):
            return -1.0
    else:
        a = lo
    if b < hi:
        tb = b - x0
        o, _ = _other(b, q, nz, ez, kappa, l2n)
        if not (
            a0
            - a1 * tb
            + 0.5 * a2 * tb * tb
            - a3 * tb * tb * tb / 3.0
            - o
            + _taylor_err(tb, b4, rmax, sabs)
            < 0.0
        ):
            return -1.0
    else:
        b = hi
    if b - a <= tol and e <= 0.25 * (x0 + t):
        return x0 + t
    return -1.0


@njit(**_NOPY)
def fprime(g, pm, pn, sm, sn, q, bu, bl):
    """(f'(g), f''(g)) of the line search over its entries (module docstring): the cliques' mu, mu'
    in ``pm``, ``pn``, the separators' in ``sm``, ``sn`` (:func:`ls_entries`); ``bu``, ``bl``:
    float64 scratch of at least LS_BLOCK entries.  The values the search itself evaluates
    (:func:`fprime_moments`); for the tests and benchmarks."""
    mo = np.empty(7)
    fprime_moments(g, pm, pn, sm, sn, bu, bl, mo)
    return mo[0] - g * q, -mo[1] - q


_NO_EZ = np.zeros((3, 0))  # the L2 line search's (empty) elastic-net coordinates


@njit(**_NOPY)
def line_search(pm, pn, sm, sn, q, fp0, c0, c1, tol, bu, bl, isc):
    """argmax over [0, 1] of the 1-D dual f: the root of f', bracketed by
    f'(0) = fp0 > 0 > f'(1) = -q.

    Safeguarded Newton (as rtsafe): a Newton step on f' from the last point, replaced by bisection
    of the bracket when it would leave the bracket or when the previous step did not shrink |f'|
    fast enough (|2 f'| > |previous step * f''|).  The first point is :func:`first_guess` (from f'
    and the entropy part's curvatures ``c0``, ``c1`` at both ends, known without logs).  Stops when
    the bracket is below ``tol`` (returning its left end, where f' > 0: the dual then does not
    decrease), or when both the Newton step and the secant step to the bracket's other end are below
    ``tol`` (the Newton step alone is not enough: where f'' is large at a point far left of the root
    its step is tiny; the root lies between the two steps' ends where f' is convex or concave
    between them).  After every evaluation the search first tries :func:`taylor_root`: the same
    sweep that evaluates f' at x also sums the moments of the entries' d / mu_x, which give f'
    near x as a cubic with a rigorous bound on its error; where the cubic's root is certified inside
    a bracket at most ``tol`` wide (f' > 0 at its left end, < 0 at its right, each by more than the
    bound), the search returns the cubic's root without another evaluation.  Counts its f'
    evaluations into ``isc[I_LS]``."""
    return _safeguarded_root(pm, pn, sm, sn, q, fp0, c0, c1, tol, bu, bl, isc, 0, _NO_EZ, 0.0, 1.0)


@njit(**_NOPY)
def first_guess(a0, q, c0, c1):
    """The line search's first point: the root in (0, 1) of ``A(g) = g q`` for the model of the
    entropy part of f', ``A(g) = a0 (1 - g)(1 + c g) / (1 + b g)``, fitted to its values (a0 = f'(0)
    at 0, 0 at 1) and slopes (-c0 at 0, -c1 at 1): ``1 + b = (c0 / a0 - 1) / (1 - c1 / a0)``,
    ``c = b + 1 - c0 / a0``.  The root is that of a quadratic.  Falls back to the chord's root
    ``a0 / (a0 + q)`` where the fit has a pole or zero in [0, 1] or no root there.  (With c = 0 the
    model is the rational one fitted at 0 alone; on CoNLL-2000 after 2 epochs it starts left of the
    root every time and took more evaluations than the chord; a cubic Hermite model of f' was tried
    earlier and dropped, the note of :func:`line_search`.)"""
    x = a0 / (a0 + q)
    den = 1.0 - c1 / a0
    if abs(den) > 1e-12 and np.isfinite(c0) and np.isfinite(c1):
        beta = (c0 / a0 - 1.0) / den - 1.0
        gam = beta + 1.0 - c0 / a0
        if beta > -1.0 and gam > -1.0:
            qa = q * beta + a0 * gam
            qb = q - a0 * (gam - 1.0)
            disc = qb * qb + 4.0 * qa * a0
            if disc >= 0.0:
                den2 = qb + np.sqrt(disc)
                if den2 > 0.0:
                    y = 2.0 * a0 / den2
                    if y > 0.0 and y < 1.0:
                        x = y
    return x


@njit(**_NOPY)
def _safeguarded_root(pm, pn, sm, sn, q, fp0, c0, c1, tol, bu, bl, isc, nz, ez, kappa, l2n):
    """The root finder of :func:`line_search` (``kappa`` = 0: f' from :func:`fprime` with ``q``) and
    of :func:`line_search_enet` (``kappa`` > 0: f' = the entropy part minus :func:`enet_h`, and
    f'(1) = -h(1) in place of -q; the first guess takes h(1) for q)."""
    if not (fp0 > 0.0):
        return 0.0
    enet = kappa > 0.0
    if enet:
        q = enet_h(1.0, nz, ez, kappa, l2n)[0]
    if not (q > 0.0):
        return 1.0  # f' >= 0 on [0, 1]
    lo = 0.0
    hi = 1.0
    flo = fp0
    fhi = -q
    x = first_guess(fp0, q, c0, c1) if np.isfinite(fp0) else 0.5
    if not (x > lo and x < hi):
        x = 0.5
    dxold = 1.0
    mo = np.empty(7)
    for _ in range(LS_MAXIT):
        fprime_moments(x, pm, pn, sm, sn, bu, bl, mo)
        ox, opx = _other(x, q, nz, ez, kappa, l2n)
        fx = mo[0] - ox
        fpp = -mo[1] - opx
        isc[I_LS] += 1
        if fx > 0.0:
            lo = x
            flo = fx
        elif fx < 0.0:
            hi = x
            fhi = fx
        else:
            return x
        if hi - lo <= tol:
            return lo
        xc = taylor_root(x, mo, lo, hi, tol, q, nz, ez, kappa, l2n)
        if xc >= 0.0:
            return xc
        nx = x - fx / fpp if (fpp < 0.0 and np.isfinite(fpp)) else -1.0
        if not (nx > lo and nx < hi) or abs(2.0 * fx) > abs(dxold * fpp):
            nx = 0.5 * (lo + hi)
        dx = nx - x
        sec = fx * (hi - lo) / (flo - fhi)  # the secant step across the bracket (flo > 0 > fhi)
        if abs(dx) < tol and abs(sec) < tol:
            return nx
        dxold = dx
        x = nx
    return lo


# ------------------------------------------------------------- elastic net (l1 > 0)
# With g(w) = (l2/2)||w||^2 + l1||w||_1 the dual's regulariser term is g*(v) = (1/(2 l2))
# ||S_l1(v)||^2 (S the soft-thresholding) and w = grad g*(v) = S_l1(v) / l2.  The kernels keep
# z = v / l2 (the weights the L2 code keeps, w_hat(mu)) and w = S_kappa(z), kappa = l1 / l2, both
# explicit: a step moves z by gamma * delta on the touched coordinates (the sequence's attributes
# and the transitions) and re-thresholds those only.  The line search's derivative loses its
# ``- g q`` term for
#     - h(g),   h(g) = l2 n sum_j delta_j (S_kappa(z_j + g delta_j) - S_kappa(z_j))
# (n times <w(g) - w(0), u>, u = l2 n delta), piecewise linear and non-decreasing in g, with slope
# h'(g) = l2 n sum_j delta_j^2 [|z_j + g delta_j| > kappa]; kappa = 0 gives back h = g q.
@njit(inline="always", **_NOPY)
def _soft(x, k):
    return max(x - k, 0.0) + min(x + k, 0.0)


@njit(**_NOPY)
def soft_threshold(z, kappa, w):
    """w = S_kappa(z) coordinate-wise (sign(z) max(|z| - kappa, 0))."""
    for k in range(z.shape[0]):
        w[k] = _soft(z[k], kappa)


@njit(**_NOPY)
def enet_pack(attr_ptr, acc, alist, na, tdir, trans_index, n_state, z, c, kappa, ez):
    """The touched coordinates of a step, compacted: ez[0] = z_j, ez[1] = delta_j = c * (E_d F)_j
    (c = -1 / (l2 n)), ez[2] = S_kappa(z_j), over the listed attributes' features, then the
    transition features (the order of :func:`apply_direction`).  Returns their count."""
    zc, dc, sc = ez[0], ez[1], ez[2]
    m = 0
    for j in range(na):
        a = alist[j]
        for k in range(attr_ptr[a], attr_ptr[a + 1]):
            x = z[k]
            zc[m] = x
            dc[m] = c * acc[m]  # acc holds the listed attributes' rows one after the other
            sc[m] = _soft(x, kappa)
            m += 1
    L = trans_index.shape[0]
    for a in range(L):
        for b in range(L):
            k = trans_index[a, b]
            if k >= 0:
                x = z[n_state + k]
                zc[m] = x
                dc[m] = c * tdir[a, b]
                sc[m] = _soft(x, kappa)
                m += 1
    return m


@njit(**_NOPY)
def enet_h(g, nz, ez, kappa, l2n):
    """(h(g), h'(g)) of the elastic-net line search (see above) over the packed coordinates."""
    zc, dc, sc = ez[0], ez[1], ez[2]
    h = 0.0
    hp = 0.0
    for m in range(nz):
        d = dc[m]
        x = zc[m] + g * d
        h += d * (_soft(x, kappa) - sc[m])
        hp += d * d if abs(x) > kappa else 0.0
    return l2n * h, l2n * hp


@njit(**_NOPY)
def line_search_enet(pm, pn, sm, sn, fp0, c0, c1, tol, bu, bl, isc, nz, ez, kappa, l2n):
    """:func:`line_search` for l1 > 0: the same safeguarded Newton / bisection on
    f'(g) = (entropy part, :func:`fprime` with q = 0) - h(g), bracketed by f'(0) = fp0 > 0 and
    f'(1) = -h(1) <= 0 (h(1) = 0: f' >= 0 on [0, 1], the step is 1).  f'' = -(entropy curvature) -
    h'(g); h' jumps where a coordinate crosses +-kappa, where the bisection safeguard takes over."""
    return _safeguarded_root(pm, pn, sm, sn, 0.0, fp0, c0, c1, tol, bu, bl, isc, nz, ez, kappa, l2n)


@njit(**_NOPY)
def apply_direction_enet(attr_ptr, acc, alist, na, tdir, trans_index, n_state, c, kappa, z, w):
    """z += c * (E_d F) and w = S_kappa(z) on the touched coordinates; clears ``acc``."""
    o = 0
    for j in range(na):
        a = alist[j]
        k0 = attr_ptr[a]
        nk = attr_ptr[a + 1] - k0
        for q in range(nk):
            x = z[k0 + q] + c * acc[o + q]
            z[k0 + q] = x
            w[k0 + q] = _soft(x, kappa)
            acc[o + q] = 0.0
        o += nk
    L = trans_index.shape[0]
    for a in range(L):
        for b in range(L):
            k = trans_index[a, b]
            if k >= 0:
                x = z[n_state + k] + c * tdir[a, b]
                z[n_state + k] = x
                w[n_state + k] = _soft(x, kappa)
