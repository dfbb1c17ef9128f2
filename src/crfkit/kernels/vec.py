"""Numba vector kernels for the optimizers (fused loops, no temporaries)."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def dot(a, b):
    s = 0.0
    for i in range(a.shape[0]):
        s += a[i] * b[i]
    return s


@njit(cache=True, fastmath={"reassoc", "nsz", "contract"})
def _fdot(a, b):
    """a . b with the sum reassociated (vectorised; its last bits depend on the vector width): the
    two-loop recursion's products, 4m passes over the problem's size per direction."""
    s = 0.0
    for i in range(a.shape[0]):
        s += a[i] * b[i]
    return s


@njit(cache=True)
def diff_into(a, b, out):
    """out = a - b (rounded to out's dtype: float32 history rows); the same values as numpy's
    subtract."""
    for i in range(a.shape[0]):
        out[i] = a[i] - b[i]


@njit(cache=True)
def curvature(x_new, x, g_new, g):
    """(s.y, y.y) for s = x_new - x, y = g_new - g without storing s or y (the same sums, in the
    same order, as dot(s, y) and dot(y, y) over the stored vectors)."""
    sy = 0.0
    yy = 0.0
    for i in range(x.shape[0]):
        s = x_new[i] - x[i]
        y = g_new[i] - g[i]
        sy += s * y
        yy += y * y
    return sy, yy


@njit(cache=True)
def axpy(alpha, x, y):
    """y += alpha * x"""
    for i in range(x.shape[0]):
        y[i] += alpha * x[i]


@njit(cache=True)
def two_loop(g, S, Y, rho, order, out):
    """out = -H g for the L-BFGS pairs S[order[k]], Y[order[k]] (oldest first)."""
    k = order.shape[0]
    n = g.shape[0]
    for i in range(n):
        out[i] = -g[i]
    alpha = np.empty(k)
    for r in range(k - 1, -1, -1):
        j = order[r]
        alpha[r] = rho[j] * _fdot(S[j], out)
        axpy(-alpha[r], Y[j], out)
    if k:
        j = order[k - 1]
        gamma = _fdot(S[j], Y[j]) / _fdot(Y[j], Y[j])
        for i in range(n):
            out[i] *= gamma
    for r in range(k):
        j = order[r]
        b = rho[j] * _fdot(Y[j], out)
        axpy(alpha[r] - b, S[j], out)


# ------------------------------------------------------------ OWL-QN (fused)
@njit(inline="always")
def _pg_entry(xi, gi, l1):
    """The pseudo-gradient's entry (see :func:`pseudo_gradient`); selects, no branches."""
    pp = gi + l1
    pn = gi - l1
    z = min(pp, 0.0) + max(pn, 0.0)
    return pp if xi > 0.0 else (pn if xi < 0.0 else z)


@njit(cache=True, fastmath={"reassoc", "nsz", "contract"})
def pseudo_gradient(x, g, l1, pg):
    """pg = pseudo-gradient of f + l1|x|_1; returns (pg.pg, max|pg|, nnz(x), x.x).

    Without branches (selects, so that the loop vectorises: the branches on the signs of the
    gradient's entries were mispredicted at random, 15 ns an entry on 13M features): at ``x_i = 0``
    the pseudo- gradient is ``min(g + l1, 0) + max(g - l1, 0)`` (at most one of the two is non-zero
    since l1 >= 0).  The sums may be reassociated (their last bits depend on the vector width).
    :func:`constrain_direction` and :func:`orthant_step` compute the same entries from
    ``(x, g, l1)`` again rather than read a stored ``pg`` (OWL-QN keeps no vector of them: one
    vector of the problem's size less; the entries can differ from these only in the sign of a zero,
    which changes neither kernel's result)."""
    s2 = 0.0
    mx = 0.0
    nnz = 0
    xx = 0.0
    for i in range(x.shape[0]):
        xi = x[i]
        p = _pg_entry(xi, g[i], l1)
        nnz += 1 if xi != 0.0 else 0
        xx += xi * xi
        pg[i] = p
        s2 += p * p
        mx = max(mx, abs(p))
    return s2, mx, nnz, xx


@njit(cache=True)
def constrain_direction(d, x, g, l1):
    """Zero d_i where sign(d_i) != sign(-pg_i) (also where pg_i = 0), pg the pseudo-gradient at
    ``x`` of the smooth gradient ``g`` (computed here); returns (d.pg, d.d)."""
    dg = 0.0
    dd = 0.0
    for i in range(d.shape[0]):
        p = d[i] * _pg_entry(x[i], g[i], l1)
        if p >= 0.0:
            d[i] = 0.0
        else:
            dg += p
            dd += d[i] * d[i]
    return dg, dd


@njit(cache=True)
def orthant_step(x, d, a, g, l1, out):
    """out = x + a d projected onto the orthant of x (sign(-pg_i) where x_i = 0; pg the
    pseudo-gradient at ``x`` of the smooth gradient ``g``, computed here).

    Returns (||out||_1, pg . (out - x)): the L1 term at the trial point and
    the directional derivative along the projected step.
    """
    l1sum = 0.0
    dd = 0.0
    for i in range(x.shape[0]):
        xi = x[i]
        pgi = _pg_entry(xi, g[i], l1)
        t = xi + a * d[i]
        o = xi if xi != 0.0 else -pgi
        if t * o <= 0.0:
            t = 0.0
        out[i] = t
        l1sum += abs(t)
        dd += pgi * (t - xi)
    return l1sum, dd


# ------------------------------------------------------------ sparse steps (OWL-QN's history)
@njit(cache=True)
def sparse_diff(a, b):
    """The non-zero entries of a - b: (indices int64, values float64), in index order."""
    n = a.shape[0]
    cnt = 0
    for i in range(n):
        if a[i] != b[i]:
            cnt += 1
    idx = np.empty(cnt, np.int64)
    val = np.empty(cnt)
    k = 0
    for i in range(n):
        if a[i] != b[i]:
            idx[k] = i
            val[k] = a[i] - b[i]
            k += 1
    return idx, val


@njit(cache=True)
def sparse_dot(idx, val, y):
    """sum_k val[k] * y[idx[k]] (double precision)."""
    s = 0.0
    for k in range(idx.shape[0]):
        s += np.float64(val[k]) * np.float64(y[idx[k]])
    return s


@njit(cache=True)
def two_loop_sparse_steps(g, ptr, sidx, sval, Y, rho, order, out):
    """:func:`two_loop` with the steps s given sparse: pair r (oldest first) has s's non-zero
    entries ``sidx[ptr[r]:ptr[r + 1]]``, ``sval[...]`` and y = ``Y[order[r]]``."""
    k = order.shape[0]
    n = g.shape[0]
    for i in range(n):
        out[i] = -g[i]
    alpha = np.empty(k)
    for r in range(k - 1, -1, -1):
        j = order[r]
        a = 0.0
        for p in range(ptr[r], ptr[r + 1]):
            a += np.float64(sval[p]) * out[sidx[p]]
        alpha[r] = rho[j] * a
        axpy(-alpha[r], Y[j], out)
    if k:
        j = order[k - 1]
        sy = 0.0
        for p in range(ptr[k - 1], ptr[k]):
            sy += np.float64(sval[p]) * np.float64(Y[j, sidx[p]])
        gamma = sy / _fdot(Y[j], Y[j])
        for i in range(n):
            out[i] *= gamma
    for r in range(k):
        j = order[r]
        b = rho[j] * _fdot(Y[j], out)
        c = alpha[r] - b
        for p in range(ptr[r], ptr[r + 1]):
            out[sidx[p]] += c * np.float64(sval[p])


@njit(cache=True)
def all_finite(x):
    """Whether every entry of the 1-D float array x is finite (``np.isfinite(x).all()`` without its
    x-sized temporary; stops at the first that is not)."""
    for i in range(x.shape[0]):
        if not np.isfinite(x[i]):
            return False
    return True


@njit(cache=True)
def nonzero_into(bits, out):
    """The positions of the first ``out.shape[0]`` non-zero entries of ``bits`` (an unsigned-integer
    view of a vector: non-zero as bits), written to ``out`` in increasing order; returns how many
    were written.  One walk, against numpy's ``flatnonzero`` (a counting walk, then a slower
    gathering one)."""
    m = out.shape[0]
    k = 0
    for i in range(bits.shape[0]):
        if bits[i] != 0:
            if k == m:
                break
            out[k] = i
            k += 1
    return k
