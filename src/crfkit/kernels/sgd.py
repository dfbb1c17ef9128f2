"""Numba kernels of the classic stochastic gradient baselines of Schmidt et al. (2015, 6), sparse
and lazy.

* SG and Pegasos keep ``w = beta * v``: the L2 part of a step is a change of
  ``beta``, the loss gradient touches only the example's coordinates.
* ASG (averaged SG) keeps the running sum of the iterates ``S = B v + c`` with
  the scalar ``B = sum_k beta_k`` (Xu 2010): a change ``delta`` of ``v_j`` is
  compensated by ``c_j -= delta * B`` so that ``S`` is right for every
  coordinate without touching the others.
* AdaGrad's proximal L2 step ``w_j <- (w_j - a_j g_j) / (1 + a_j l2)`` with
  ``a_j = eta / (delta + sqrt(G_j))`` shrinks an untouched coordinate by the
  constant ``1 / (1 + a_j l2)`` per iteration (its ``G_j`` does not change), so
  the shrinkage of the iterations it missed is applied at once, as a power,
  when the coordinate is next touched.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .chain_exp import FAST
from .oracle import apply_gradient, sequence_oracle
from .sag_state import rng_below

_NOPY = dict(cache=True, nogil=True, fastmath=FAST)

SG, ASG, ADAGRAD, PEGASOS = 0, 1, 2, 3
# float scalars fsc[...]: scale of v, sum of the scales (ASG), last step
F_BETA, F_B, F_STEP = 0, 1, 2
N_FSC = 3
# int scalars isc[...]: iterations done
I_T = 0
N_ISC = 1
FOLD_BELOW = 1e-9


@njit(**_NOPY)
def fold(v, c, fsc, average):
    """v <- beta*v, beta <- 1 (the ASG sum S = B v + c is kept: B <- B / beta)."""
    beta = fsc[F_BETA]
    for k in range(v.shape[0]):
        v[k] *= beta
    if average:
        fsc[F_B] /= beta
    fsc[F_BETA] = 1.0


@njit(**_NOPY)
def adagrad_catch_up(
    seq_ptr, tok_ptr, attr, attr_ptr, n_state, n_trans, i, w, G, last, t, eta, dlt, l2
):
    """Apply to example i's coordinates the proximal shrinkage of the iterations through t they
    missed."""
    if l2 == 0.0:
        return
    for e in range(tok_ptr[seq_ptr[i]], tok_ptr[seq_ptr[i + 1]]):
        a = attr[e]
        for k in range(attr_ptr[a], attr_ptr[a + 1]):
            s = t - last[k]
            if s > 0:
                w[k] *= (1.0 + l2 * eta / (dlt + np.sqrt(G[k]))) ** (-s)
                last[k] = t
    for k in range(n_state, n_state + n_trans):
        s = t - last[k]
        if s > 0:
            w[k] *= (1.0 + l2 * eta / (dlt + np.sqrt(G[k]))) ** (-s)
            last[k] = t


@njit(**_NOPY)
def adagrad_catch_up_all(w, G, last, t, eta, dlt, l2):
    if l2 == 0.0:
        return
    for k in range(w.shape[0]):
        s = t - last[k]
        if s > 0:
            w[k] *= (1.0 + l2 * eta / (dlt + np.sqrt(G[k]))) ** (-s)
            last[k] = t


@njit(**_NOPY)
def sgd_run(
    seq_ptr,
    tok_ptr,
    attr,
    val,
    y,
    attr_ptr,
    feat_label,
    trans_index,
    n_state,
    n_trans,
    method,
    eta,
    l2,
    dlt,
    t_target,
    v,
    c,
    G,
    last,
    fsc,
    isc,
    rng,
    node,
    edge,
    gbuf,
    full,
    sw,
):
    """Iterations (one uniformly drawn example each) until ``isc[I_T] == t_target``.

    SG: ``w <- (1 - eta l2) w - eta g_i``; Pegasos: the same with ``eta_t =
    eta / (l2 t)``; ASG: SG plus the running sum of the iterates; AdaGrad: the
    proximal diagonal step (see the module docstring; ``v`` is ``w`` itself).
    Returns 0, or 1 when an SG/ASG step makes ``1 - eta l2 <= 0``.  ``full``:
    :func:`crfkit.kernels.chain.full_rows`.  ``sw``: sample-weight scales per
    sequence (empty: all 1); the drawn example's loss gradient is multiplied by
    its scale (the draw stays uniform).
    """
    n = seq_ptr.shape[0] - 1
    average = method == ASG
    while isc[I_T] < t_target:
        t = isc[I_T] + 1
        i = rng_below(rng, n)
        wi = 1.0 if sw.shape[0] == 0 else sw[i]
        if method == ADAGRAD:
            adagrad_catch_up(
                seq_ptr,
                tok_ptr,
                attr,
                attr_ptr,
                n_state,
                n_trans,
                i,
                v,
                G,
                last,
                t - 1,
                eta,
                dlt,
                l2,
            )
            sequence_oracle(
                seq_ptr,
                tok_ptr,
                attr,
                val,
                y,
                attr_ptr,
                feat_label,
                trans_index,
                v,
                1.0,
                n_state,
                i,
                node,
                edge,
                full,
            )
            apply_gradient(
                seq_ptr,
                tok_ptr,
                attr,
                val,
                y,
                attr_ptr,
                feat_label,
                trans_index,
                n_state,
                i,
                node,
                edge,
                wi,
                gbuf,
                full,
            )
            for e in range(tok_ptr[seq_ptr[i]], tok_ptr[seq_ptr[i + 1]]):
                a = attr[e]
                for k in range(attr_ptr[a], attr_ptr[a + 1]):
                    g = gbuf[k]
                    if g != 0.0:
                        G[k] += g * g
                        ak = eta / (dlt + np.sqrt(G[k]))
                        v[k] = (v[k] - ak * g) / (1.0 + ak * l2)
                        last[k] = t
                        gbuf[k] = 0.0
            for k in range(n_state, n_state + n_trans):
                g = gbuf[k]
                G[k] += g * g
                ak = eta / (dlt + np.sqrt(G[k]))
                v[k] = (v[k] - ak * g) / (1.0 + ak * l2)
                last[k] = t
                gbuf[k] = 0.0
            fsc[F_STEP] = eta / dlt
            isc[I_T] = t
            continue
        beta = fsc[F_BETA]
        sequence_oracle(
            seq_ptr,
            tok_ptr,
            attr,
            val,
            y,
            attr_ptr,
            feat_label,
            trans_index,
            v,
            beta,
            n_state,
            i,
            node,
            edge,
            full,
        )
        step = eta / (l2 * t) if method == PEGASOS else eta
        shrink = 1.0 - step * l2
        if shrink <= 0.0 and method != PEGASOS:
            return 1
        if shrink == 0.0:
            # Pegasos' first step with eta = 1: w <- 0 - eta_1 g (beta cannot be 0)
            for k in range(v.shape[0]):
                v[k] = 0.0
            beta = 1.0
        else:
            beta *= shrink
        fsc[F_BETA] = beta
        fsc[F_STEP] = step
        if not average:
            apply_gradient(
                seq_ptr,
                tok_ptr,
                attr,
                val,
                y,
                attr_ptr,
                feat_label,
                trans_index,
                n_state,
                i,
                node,
                edge,
                -step * wi / beta,
                v,
                full,
            )
        else:
            # v += coef g and the compensation c -= B coef g (S = B v + c unchanged), as two sparse
            # walks
            B = fsc[F_B]
            coef = -step * wi / beta
            apply_gradient(
                seq_ptr,
                tok_ptr,
                attr,
                val,
                y,
                attr_ptr,
                feat_label,
                trans_index,
                n_state,
                i,
                node,
                edge,
                coef,
                v,
                full,
            )
            apply_gradient(
                seq_ptr,
                tok_ptr,
                attr,
                val,
                y,
                attr_ptr,
                feat_label,
                trans_index,
                n_state,
                i,
                node,
                edge,
                -coef * B,
                c,
                full,
            )
            fsc[F_B] = B + beta
        isc[I_T] = t
        if abs(beta) < FOLD_BELOW:
            fold(v, c, fsc, average)
    return 0


@njit(**_NOPY)
def asg_close(v, c, fsc):
    """End of a pass (ASG): S = B v + c materialised into c (B <- 0), beta folded into v."""
    B = fsc[F_B]
    beta = fsc[F_BETA]
    for k in range(v.shape[0]):
        c[k] += B * v[k]
        v[k] *= beta
    fsc[F_B] = 0.0
    fsc[F_BETA] = 1.0
