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
        alpha[r] = rho[j] * dot(S[j], out)
        axpy(-alpha[r], Y[j], out)
    if k:
        j = order[k - 1]
        gamma = dot(S[j], Y[j]) / dot(Y[j], Y[j])
        for i in range(n):
            out[i] *= gamma
    for r in range(k):
        j = order[r]
        b = rho[j] * dot(Y[j], out)
        axpy(alpha[r] - b, S[j], out)
