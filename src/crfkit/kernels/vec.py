"""Numba vector kernels for the quasi-Newton optimizers (fused loops, no temporaries)."""
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
    """out = a - b (rounded to out's dtype: float32 history rows); the same values as numpy's subtract."""
    for i in range(a.shape[0]):
        out[i] = a[i] - b[i]


@njit(cache=True)
def curvature(x_new, x, g_new, g):
    """(s.y, y.y) for s = x_new - x, y = g_new - g without storing s or y (the same sums, in the same
    order, as dot(s, y) and dot(y, y) over the stored vectors)."""
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
@njit(cache=True, fastmath={"reassoc", "nsz", "contract"})
def pseudo_gradient(x, g, l1, pg):
    """pg = pseudo-gradient of f + l1|x|_1; returns (pg.pg, max|pg|, nnz(x), x.x).

    Without branches (selects, so that the loop vectorises: the branches on the signs of the gradient's
    entries were mispredicted at random, 15 ns an entry on 13M features): at ``x_i = 0`` the pseudo-
    gradient is ``min(g + l1, 0) + max(g - l1, 0)`` (at most one of the two is non-zero since l1 >= 0).
    The sums may be reassociated (their last bits depend on the vector width)."""
    s2 = 0.0
    mx = 0.0
    nnz = 0
    xx = 0.0
    for i in range(x.shape[0]):
        xi = x[i]
        gi = g[i]
        pp = gi + l1
        pn = gi - l1
        z = min(pp, 0.0) + max(pn, 0.0)
        p = pp if xi > 0.0 else (pn if xi < 0.0 else z)
        nnz += 1 if xi != 0.0 else 0
        xx += xi * xi
        pg[i] = p
        s2 += p * p
        mx = max(mx, abs(p))
    return s2, mx, nnz, xx


@njit(cache=True)
def constrain_direction(d, pg):
    """Zero d_i where sign(d_i) != sign(-pg_i) (also where pg_i = 0); returns (d.pg, d.d)."""
    dg = 0.0
    dd = 0.0
    for i in range(d.shape[0]):
        p = d[i] * pg[i]
        if p >= 0.0:
            d[i] = 0.0
        else:
            dg += p
            dd += d[i] * d[i]
    return dg, dd


@njit(cache=True)
def orthant_step(x, d, a, pg, out):
    """out = x + a d projected onto the orthant of x (sign(-pg_i) where x_i = 0).

    Returns (||out||_1, pg . (out - x)): the L1 term at the trial point and
    the directional derivative along the projected step.
    """
    l1sum = 0.0
    dd = 0.0
    for i in range(x.shape[0]):
        xi = x[i]
        t = xi + a * d[i]
        o = xi if xi != 0.0 else -pg[i]
        if t * o <= 0.0:
            t = 0.0
        out[i] = t
        l1sum += abs(t)
        dd += pg[i] * (t - xi)
    return l1sum, dd
