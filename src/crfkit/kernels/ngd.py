"""Numba kernels of CRFsuite's SGD (``l2sgd``) and of Cao's natural-gradient updates on top of it
(``ngd``).

One step for sequence ``i`` at global step ``t`` (counted from 0 over the
whole run, as CRFsuite's ``t``), exactly in CRFsuite's order
(``train_l2sgd.c``)::

    eta   = 1 / (lam * (t0 + t))          # = eta0 / (1 + lam eta0 t) with t0 = 1 / (lam eta0)
    z    *= 1 - eta * lam                 # the L2 shrinkage, on the scale only (w = z * v)
    g     = grad of -log p(y_i|x_i) at w = z * v      (E_model - E_empirical)
    v    -= (eta / z) * T(g)              # only the features of the sequence and the transitions

``T`` is the identity for ``l2sgd`` (then ``g`` is added to ``v`` as it is
walked, as CRFsuite does) and one of Cao's transforms otherwise; a nonlinear
``T`` does not distribute over the occurrences of an attribute, so ``T`` is
applied once per distinct feature, to its net gradient over the sequence.
Two routes, chosen per occurrence once before training
(:func:`crfkit.kernels.occ.buffer_offsets` with ``direct``: one int32 per occurrence):

* **direct**: an attribute that occurs once in the sequence, with value 1
  (on CoNLL-2000 with CRFsuite's attributes, 2.65M of the 3.81M occurrences
  of an epoch).  Its net gradient for label ``l`` is its token's entry of the
  gradient's factor ``node[t, l] - [l == y_t]``, so ``T`` of the whole factor
  (``T x L`` entries, times the sequence's sample-weight scale) is taken in
  one vectorised loop, and the walk updates ``v`` from it as ``l2sgd``'s walk
  does from the factor itself: no buffer, no second walk.
* **buffered**: the other attributes (repeated in the sequence, or valued
  other than 1).  Each has a block of a per-sequence buffer, in order of
  first occurrence, at the offset of each of its occurrences; the walk adds
  their occurrences into it token by token (in token order, the order of the
  sum), the transition features' net gradient is appended, ``T`` runs over the
  buffer in one vectorised loop, then ``v`` is updated in one flat loop over
  (index, value).

Each feature of ``v`` is updated once per step on either route, so the
route does not change a bit of the result (checked against the single
buffer of every attribute that this replaced, 2026-11-29: the same weights
after two CoNLL-2000 epochs for every update, computed and from a table).
Per CoNLL-2000 epoch, ``T`` runs on 11.1M entries (4.66M of the factor, 5.18M
buffered, 1.30M transition) where the single buffer took 22.1M.  ``T(0) =
0`` keeps the update sparse.  Arctan, erf and gd by
:mod:`crfkit.kernels.vecmath` (numpy's error model, see there).  The corpus
is read through the per-occurrence layout of :mod:`crfkit.kernels.occ`.

The table variant (Cao 2015, 3.6) looks ``T`` up in a table of ``m`` values on
``[-R, R]`` (the nearest entry); outside the table it computes ``T``.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .chain_emit import add_full_row
from .chain_exp import FAST
from .occ import apply_gradient, oracle
from .vecmath import (
    VEC,
    atan_into,
    atan_nonneg,
    erf_nonneg,
    erf_split_into,
    gd_nonneg,
    gd_split_into,
)

_NOPY = dict(cache=True, nogil=True, fastmath=FAST)

# update codes (the *_LIBM ones: the same functions through libm, one call per entry)
IDENTITY, U1G1, ATAN, ERF, GD, ATAN_LIBM, ERF_LIBM, GD_LIBM = 0, 1, 2, 3, 4, 5, 6, 7
# slots of the scalar state ``scal``: the scale z, the steps done t, the sum of the losses of the
# steps
Z, T_, LOSS = 0, 1, 2
FOLD_BELOW = 1e-9


@njit(**VEC)
def transform(code, g, p):
    """Cao's transforms: U1G1 ``g / (g^2 + p)``; ATAN ``atan(p g)``; ERF ``erf(p g)``; GD
    ``gd(p g)`` with ``gd(x) = 2 atan(exp(x)) - pi/2``; IDENTITY ``g``.  ATAN, ERF and GD by the
    vectorisable approximations of :mod:`crfkit.kernels.vecmath` (within 1.2, 4 and 2.9 ulp);
    ATAN_LIBM, ERF_LIBM, GD_LIBM the same functions through libm (``gd`` as ``2 atan(tanh(x/2))``:
    no overflow, exact 0 at 0).  Not inlined: a caller's reassociating fast-math flags would apply
    to the inlined reductions and change the last bit (and the values would differ from
    :func:`transform_into`'s)."""
    if code == U1G1:
        return g / (g * g + p)
    if code == ATAN:
        x = p * g
        return math.copysign(atan_nonneg(abs(x)), x)
    if code == ERF:
        x = p * g
        return math.copysign(erf_nonneg(abs(x)), x)
    if code == GD:
        x = p * g
        return math.copysign(gd_nonneg(abs(x)), x)
    if code == ATAN_LIBM:
        return math.atan(p * g)
    if code == ERF_LIBM:
        return math.erf(p * g)
    if code == GD_LIBM:
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
    """``m`` (odd) values of T on the grid ``-r + 2r j / (m - 1)``, j = 0..m-1 (the middle one is
    T(0) = 0)."""
    tab = np.empty(m)
    h = 2.0 * r / (m - 1)
    for j in range(m):
        tab[j] = transform(code, -r + h * j, p)
    tab[(m - 1) // 2] = 0.0
    return tab


@njit(inline="always", **VEC)
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


@njit(**VEC)
def transform_into(code, buf, n, p, tab, r, scr):
    """buf[:n] <- T(buf[:n]) in place: loops over the contiguous buffer that LLVM vectorises
    (compiled with numpy's error model, see :mod:`crfkit.kernels.vecmath`; arctan in one loop,
    ``vecmath.atan_into``; erf and gd evaluate the small-argument polynomial on every entry and the
    full formula only on the entries past its split point, ``vecmath.erf_split_into`` etc., with
    ``scr``, float64 scratch of shape (4, >= n)); from the table ``tab`` (nearest entry, computed
    outside ``[-r, r]``) when it has >= 2 entries.  The values are :func:`transform`'s, to the
    bit."""
    if tab.shape[0] >= 2:
        inv_h = (tab.shape[0] - 1) / (2.0 * r)
        for j in range(n):
            buf[j] = lookup(code, buf[j], p, tab, r, inv_h)
    elif code == U1G1:
        for j in range(n):
            x = buf[j]
            buf[j] = x / (x * x + p)
    elif code == ATAN:
        atan_into(buf, n, p)
    elif code == ERF:
        erf_split_into(buf, n, p, scr)
    elif code == GD:
        gd_split_into(buf, n, p, scr)
    else:
        for j in range(n):
            buf[j] = transform(code, buf[j], p)


@njit(**_NOPY)
def run_steps(
    seq_ptr,
    tok_ptr,
    ok0,
    onk,
    val,
    lab,
    y,
    trans_index,
    n_state,
    n_trans,
    order,
    start,
    stop,
    t0,
    lam,
    code,
    p,
    tab,
    r,
    v,
    scal,
    bo,
    nbuf,
    gbuf,
    kbuf,
    gscr,
    tn,
    node,
    edge,
    trans,
    expM,
    score,
    es,
    bm,
    scale,
    pm,
    sw,
):
    """The steps for the sequences ``order[start:stop]`` (see the module docstring).

    ``ok0, onk, lab``: :func:`crfkit.kernels.occ.layout` of the corpus; ``trans`` ... ``pm``:
    :class:`crfkit.kernels.occ.Work` arrays.
    ``sw``: sample-weight scales per sequence (empty: all 1): the sequence's loss
    and its gradient are multiplied by its scale (before the transform ``T``).

    ``scal`` = [z, t, sum of losses]: updated in place (``t`` and the loss sum
    carry on from their values).  ``tab``: the table of ``T`` (length >= 2)
    or an empty array for computing ``T``; ``r`` its half-width.  ``bo``,
    ``nbuf``: :func:`crfkit.kernels.occ.buffer_offsets` (``direct``) of the corpus (read for ``T``
    not the identity), ``gbuf``: scratch of the largest ``nbuf`` plus ``n_trans``,
    ``kbuf`` (int64) the same size for their feature indices, ``tn``: scratch of
    (longest sequence) x L entries, ``gscr`` float64 scratch of shape (4, the larger of
    the two sizes) (all read for ``T`` not the identity).
    Returns the last step size, or -1 (without taking the step) when ``1 - eta lam <= 0`` (eta0 too
    large).
    """
    eta = 0.0
    L = trans_index.shape[0]
    gtr = np.empty((L, L))
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
        wi = 1.0 if sw.shape[0] == 0 else sw[i]
        loss = wi * oracle(
            seq_ptr,
            tok_ptr,
            ok0,
            onk,
            val,
            lab,
            y,
            trans_index,
            n_state,
            v,
            z,
            i,
            node,
            edge,
            trans,
            expM,
            score,
            es,
            bm,
            scale,
        )
        if code == IDENTITY:
            apply_gradient(
                seq_ptr,
                tok_ptr,
                ok0,
                onk,
                val,
                lab,
                y,
                trans_index,
                n_state,
                i,
                node,
                edge,
                -gain * wi,
                v,
                pm,
            )
        else:
            # (module docstring) direct occurrences (bo < 0) take their step in the walk, from T of
            # their token's row; the others add into their attribute's block of the buffer (at the
            # offset bo), token by token; then T over the buffer in one loop and its step: one
            # read-modify-write of v per distinct feature
            ts = seq_ptr[i]
            T = seq_ptr[i + 1] - ts
            b = nbuf[i]
            for j in range(b):
                gbuf[j] = 0.0
            # node[t] - one-hot(y_t): the gradient's factor at t; T of all of it (times the
            # sequence's weight) in one vectorised loop: the net gradient of an attribute that
            # occurs once in the sequence, with value 1, is its token's row (the direct occurrences,
            # bo < 0)
            for tt in range(T):
                node[tt, y[ts + tt]] -= 1.0
                for j in range(L):
                    tn[tt * L + j] = node[tt, j] * wi
            transform_into(code, tn, T * L, p, tab, r, gscr)
            for tt in range(T):
                nr = node[tt]
                row = tt * L
                for e in range(tok_ptr[ts + tt], tok_ptr[ts + tt + 1]):
                    nk = onk[e]
                    k0 = ok0[e]
                    o = bo[e]
                    if o < 0:
                        # the attribute's only occurrence: its step now, from T of the token's row
                        if nk < 0:
                            add_full_row(v[k0 : k0 + L], tn, row, -gain)
                        else:
                            for j in range(nk):
                                v[k0 + j] -= gain * tn[row + lab[k0 + j]]
                        continue
                    c = val[e]
                    if nk < 0:
                        for j in range(L):
                            gbuf[o + j] += c * nr[j]
                            kbuf[o + j] = k0 + j
                    else:
                        for j in range(nk):
                            gbuf[o + j] += c * nr[lab[k0 + j]]
                            kbuf[o + j] = k0 + j
            # the transition features' net gradient appended to the buffer (transformed with the
            # rest)
            for a in range(L):
                for c2 in range(L):
                    gtr[a, c2] = edge[a, c2]
            for tt in range(1, T):
                gtr[y[ts + tt - 1], y[ts + tt]] -= 1.0
            for a in range(L):
                for c2 in range(L):
                    k = trans_index[a, c2]
                    if k >= 0:
                        gbuf[b] = gtr[a, c2]
                        kbuf[b] = n_state + k
                        b += 1
            if wi != 1.0:
                for j in range(b):
                    gbuf[j] *= wi
            # T(0) = 0 makes the zero entries exact no-ops
            transform_into(code, gbuf, b, p, tab, r, gscr)
            # the step, as one flat loop over the buffer and its feature indices
            for j in range(b):
                v[kbuf[j]] -= gain * gbuf[j]
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
def sample_loss(
    seq_ptr,
    tok_ptr,
    ok0,
    onk,
    val,
    lab,
    y,
    trans_index,
    n_state,
    order,
    start,
    stop,
    v,
    z,
    node,
    edge,
    trans,
    expM,
    score,
    es,
    bm,
    scale,
    sw,
):
    """Sum of -sw_i log p(y_i|x_i) at w = z * v over the sequences order[start:stop] (``sw`` empty:
    all 1)."""
    total = 0.0
    for s in range(start, stop):
        i = order[s]
        wi = 1.0 if sw.shape[0] == 0 else sw[i]
        total += wi * oracle(
            seq_ptr,
            tok_ptr,
            ok0,
            onk,
            val,
            lab,
            y,
            trans_index,
            n_state,
            v,
            z,
            i,
            node,
            edge,
            trans,
            expM,
            score,
            es,
            bm,
            scale,
        )
    return total
