"""Numba kernels of CRFsuite's SGD (``l2sgd``) and of Cao's natural-gradient updates on top of it (``ngd``).

One step for sequence ``i`` at global step ``t`` (counted from 0 over the
whole run, as CRFsuite's ``t``), exactly in CRFsuite's order
(``train_l2sgd.c``)::

    eta   = 1 / (lam * (t0 + t))          # = eta0 / (1 + lam eta0 t) with t0 = 1 / (lam eta0)
    z    *= 1 - eta * lam                 # the L2 shrinkage, on the scale only (w = z * v)
    g     = grad of -log p(y_i|x_i) at w = z * v      (E_model - E_empirical)
    v    -= (eta / z) * T(g)              # only the features of the sequence and the transitions

``T`` is the identity for ``l2sgd`` (then ``g`` is added to ``v`` as it is
walked, as CRFsuite does) and one of Cao's transforms otherwise; a nonlinear
``T`` does not distribute over the occurrences of an attribute, so ``g`` is
first summed per feature into a buffer (the net difference for the sequence)
and ``T`` applied once per distinct feature.  ``T(0) = 0`` keeps the update
sparse.

The table variant (Cao 2015, 3.6) looks ``T`` up in a table of ``m`` values on
``[-R, R]`` (the nearest entry); outside the table it computes ``T``.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from .chain import FAST
from .oracle import apply_gradient, sequence_oracle

_NOPY = dict(cache=True, nogil=True, fastmath=FAST)

# update codes
IDENTITY, U1G1, ATAN, ERF, GD = 0, 1, 2, 3, 4
# slots of the scalar state ``scal``: the scale z, the steps done t, the sum of the losses of the steps
Z, T_, LOSS = 0, 1, 2
FOLD_BELOW = 1e-9


@njit(inline="always", **_NOPY)
def transform(code, g, p):
    """Cao's transforms: U1G1 ``g / (g^2 + p)``; ATAN ``atan(p g)``; ERF ``erf(p g)``; GD ``gd(p g)`` with
    ``gd(x) = 2 atan(exp(x)) - pi/2``, computed as ``2 atan(tanh(x/2))`` (the same function, no overflow,
    exact 0 at 0); IDENTITY ``g``."""
    if code == U1G1:
        return g / (g * g + p)
    if code == ATAN:
        return math.atan(p * g)
    if code == ERF:
        return math.erf(p * g)
    if code == GD:
        return 2.0 * math.atan(math.tanh(0.5 * p * g))
    return g


@njit(**_NOPY)
def transform_array(code, g, p):
    out = np.empty(g.shape[0])
    for k in range(g.shape[0]):
        out[k] = transform(code, g[k], p)
    return out


@njit(**_NOPY)
def make_table(code, p, m, r):
    """``m`` (odd) values of T on the grid ``-r + 2r j / (m - 1)``, j = 0..m-1 (the middle one is T(0) = 0)."""
    tab = np.empty(m)
    h = 2.0 * r / (m - 1)
    for j in range(m):
        tab[j] = transform(code, -r + h * j, p)
    tab[(m - 1) // 2] = 0.0
    return tab


@njit(inline="always", **_NOPY)
def lookup(code, g, p, tab, r, inv_h):
    """T(g) from the table (nearest entry) when |g| <= r, else computed."""
    if g < -r or g > r:
        return transform(code, g, p)
    return tab[int((g + r) * inv_h + 0.5)]


@njit(**_NOPY)
def lookup_array(code, g, p, tab, r):
    inv_h = (tab.shape[0] - 1) / (2.0 * r)
    out = np.empty(g.shape[0])
    for k in range(g.shape[0]):
        out[k] = lookup(code, g[k], p, tab, r, inv_h)
    return out


@njit(**_NOPY)
def fold(v, scal):
    """v <- z * v, z <- 1."""
    z = scal[Z]
    for k in range(v.shape[0]):
        v[k] *= z
    scal[Z] = 1.0


@njit(**_NOPY)
def run_steps(seq_ptr, tok_ptr, attr, val, y, attr_ptr, feat_label, trans_index, n_state, n_trans,
              order, start, stop, t0, lam, code, p, tab, r, v, scal, gbuf, stamp, node, edge, full):
    """The steps for the sequences ``order[start:stop]`` (see the module docstring).

    ``scal`` = [z, t, sum of losses]: updated in place (``t`` and the loss sum
    carry on from their values).  ``tab``: the table of ``T`` (length >= 2)
    or an empty array for computing ``T``; ``r`` its half-width.  ``gbuf``:
    zeros of n_features entries (left zero); ``stamp``: int64, n_features
    entries, initially -1 (marks the features listed at the current step).
    Returns the last step size, or -1 (without taking the step) when ``1 - eta lam <= 0`` (eta0 too large).
    """
    eta = 0.0
    use_tab = tab.shape[0] >= 2
    inv_h = (tab.shape[0] - 1) / (2.0 * r) if use_tab else 0.0
    z = scal[Z]
    t = scal[T_]
    total = scal[LOSS]
    for s in range(start, stop):
        i = order[s]
        eta = 1.0 / (lam * (t0 + t))
        if 1.0 - eta * lam <= 0.0:
            eta = -1.0
            break
        z *= 1.0 - eta * lam
        gain = eta / z
        loss = sequence_oracle(seq_ptr, tok_ptr, attr, val, y, attr_ptr, feat_label, trans_index,
                               v, z, n_state, i, node, edge, full)
        if code == IDENTITY:
            apply_gradient(seq_ptr, tok_ptr, attr, val, y, attr_ptr, feat_label, trans_index,
                           n_state, i, node, edge, -gain, v, full)
        else:
            apply_gradient(seq_ptr, tok_ptr, attr, val, y, attr_ptr, feat_label, trans_index,
                           n_state, i, node, edge, 1.0, gbuf, full)
            step = np.int64(t)
            for e in range(tok_ptr[seq_ptr[i]], tok_ptr[seq_ptr[i + 1]]):
                a = attr[e]
                for k in range(attr_ptr[a], attr_ptr[a + 1]):
                    if stamp[k] != step:
                        stamp[k] = step
                        g = gbuf[k]
                        if g != 0.0:
                            if use_tab:
                                v[k] -= gain * lookup(code, g, p, tab, r, inv_h)
                            else:
                                v[k] -= gain * transform(code, g, p)
                            gbuf[k] = 0.0
            for k in range(n_state, n_state + n_trans):
                g = gbuf[k]
                if g != 0.0:
                    if use_tab:
                        v[k] -= gain * lookup(code, g, p, tab, r, inv_h)
                    else:
                        v[k] -= gain * transform(code, g, p)
                    gbuf[k] = 0.0
        total += loss
        t += 1.0
        if z < FOLD_BELOW:
            scal[Z] = z
            fold(v, scal)
            z = 1.0
    scal[Z] = z
    scal[T_] = t
    scal[LOSS] = total
    return eta


@njit(**_NOPY)
def sample_loss(seq_ptr, tok_ptr, attr, val, y, attr_ptr, feat_label, trans_index, n_state, order, start, stop,
                v, z, node, edge, full):
    """Sum of -log p(y_i|x_i) at w = z * v over the sequences order[start:stop]."""
    total = 0.0
    for s in range(start, stop):
        total += sequence_oracle(seq_ptr, tok_ptr, attr, val, y, attr_ptr, feat_label, trans_index,
                                 v, z, n_state, order[s], node, edge, full)
    return total
