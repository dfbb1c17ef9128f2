"""Numba kernels of stochastic meta-descent (SMD) for CRFs (Vishwanathan, Schraudolph,
Schmidt & Murphy, ICML 2006): exact Hessian-vector products of a sequence's negative log-likelihood,
and the SMD steps.

Hessian-vector products.  The Hessian of ``nll_i(w) = log Z(x_i, w) - w.F(x_i, y_i)``
is the covariance of the feature vector ``F(x_i, Y)`` under ``p(Y | x_i, w)``, so
for a direction ``d``, with ``phi(y) = d.F(x_i, y)`` (the score of path ``y``
under the weights ``d``),

    H_i d = E[F phi] - E[F] E[phi],

whose entries are sums, over the feature occurrences, of

    dmu_t(l)     = E[1{y_t = l} phi] - mu_t(l) E[phi]                  (node)
    dxi_t(i, j)  = E[1{y_{t-1} = i, y_t = j} phi] - xi_t(i, j) E[phi]  (edge)

(the derivatives of the node and edge marginals along ``d``: forward-mode
differentiation of forward-backward).  One forward-backward computes them:
next to the scaled messages ``alpha_t``, ``beta_t`` it carries ``A_t(j)``, the
forward message weighted by the score of the prefix under ``d``, and
``B_t(i)``, the backward message weighted by the score of the suffix, with the
same scale factors:

    A_t(j) = es_t(j) sum_i (A_{t-1}(i) + alpha_{t-1}(i) r(i, j)) M(i, j) / c_t + s_t(j) alpha_t(j)
    B_t(i) = sum_j M(i, j) es_{t+1}(j) (B_{t+1}(j) + (r(i, j) + s_{t+1}(j)) beta_{t+1}(j)) / c_{t+1}

(``s``, ``r``: the emission and transition scores of ``d``; ``M``, ``es``,
``c``: as in :mod:`crfkit.kernels.chain`), so that ``E[1{y_t = l} phi] =
A_t(l) beta_t(l) + alpha_t(l) B_t(l)`` and ``E[phi] = sum_l A_{T-1}(l)``.
Where the scaled recursion cannot be used (transition scores spanning more
than ``MAX_SCALED_TRANSITION_RANGE``, or a scale under/overflowing), the
log domain carries the conditional expectations instead: ``a_t(j) =
E[score of the prefix | y_t = j]`` and ``b_t(i) = E[score of the suffix | y_t
= i]``, averages with softmax weights, and ``dmu_t(l) = mu_t(l) (a_t(l) +
b_t(l) - E[phi])`` (the same for the edges).  Cost: about twice a
forward-backward with edge marginals.

SMD (the paper's equations, per coordinate, ``g`` and ``H`` of the mini-batch's
*regularised* loss ``(1/b) sum nll_i + (l2/2)|w|^2`` at ``w_t``)::

    gain_t  = gain_{t-1} * max(1/2, 1 - mu g_t v_t)
    w_{t+1} = w_t - gain_t g_t
    v_{t+1} = lam v_t - gain_t (g_t + lam H_t v_t)

``v`` starts at 0 and ``gain`` at ``eta``.  ``v`` is minus the derivative of
``w`` with respect to the log gains (the paper's sign; the form ``v <- lam v +
gain (g - lam H v)`` is the same recursion for ``-v``, and then the gain
factor reads ``1 + mu g v``).  Dense: with ``l2 > 0`` every coordinate has a
gradient ``l2 w_j`` and a curvature term ``l2 v_j`` at every step, and the
gain, weight and ``v`` recursions of an untouched coordinate are coupled and
nonlinear (the gain factor depends on ``w_j v_j``), with no closed form for
a run of skipped steps; so a step costs O(features) on top of the two
sparse walks over the example's features (gradient and ``H d``).

The forward-backward with tangent messages (``hv_chain``) lives with the other recursions, in
:mod:`crfkit.kernels.chain_hv`.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .chain import gold_score
from .chain_emit import emissions_rows, transition_matrix
from .chain_exp import FAST
from .chain_hv import hv_chain
from .oracle import apply_gradient
from .sag_state import rng_below

_NOPY = dict(cache=True, nogil=True, fastmath=FAST)

# float scalars fsc[...]: none kept between calls but the last mean gain (reported as the step)
F_GAIN = 0
N_FSC = 1
# int scalars isc[...]: examples processed, steps taken
I_SEEN, I_STEPS = 0, 1
N_ISC = 2


@njit(**_NOPY)
def sequence_hv(
    seq_ptr,
    tok_ptr,
    attr,
    val,
    y,
    attr_ptr,
    feat_label,
    trans_index,
    w,
    d,
    n_state,
    i,
    node,
    dnode,
    edge,
    dedge,
    full,
    force_log,
):
    """Loss ``-log p(y_i | x_i)`` at ``w``; the marginals (as
    :func:`crfkit.kernels.oracle.sequence_oracle`) and their derivatives along ``d`` into
    ``node``/``dnode`` (>= T rows) and ``edge``/``dedge``, from which :func:`apply_gradient` and
    :func:`apply_direction` make the gradient and ``H_i d``."""
    L = trans_index.shape[0]
    t0 = seq_ptr[i]
    t1 = seq_ptr[i + 1]
    T = t1 - t0
    if T == 0:
        for a in range(L):
            for b in range(L):
                edge[a, b] = 0.0
                dedge[a, b] = 0.0
        return 0.0
    trans = transition_matrix(w, 1.0, n_state, trans_index)
    rdir = transition_matrix(d, 1.0, n_state, trans_index)
    score = np.empty((T, L))
    sdir = np.empty((T, L))
    emissions_rows(tok_ptr, attr, val, t0, t1, attr_ptr, feat_label, full, w, 1.0, score)
    emissions_rows(tok_ptr, attr, val, t0, t1, attr_ptr, feat_label, full, d, 1.0, sdir)
    logz = hv_chain(score, sdir, T, trans, rdir, node, dnode, edge, dedge, force_log)
    return logz - gold_score(score, y, t0, T, trans)


@njit(**_NOPY)
def apply_direction(
    seq_ptr,
    tok_ptr,
    attr,
    val,
    attr_ptr,
    feat_label,
    trans_index,
    n_state,
    i,
    dnode,
    dedge,
    coef,
    out,
    full,
):
    """out += coef * H_i d, from the marginal derivatives of :func:`sequence_hv` (touches the state
    features of the attributes of sequence i and the transition features)."""
    L = trans_index.shape[0]
    t0 = seq_ptr[i]
    T = seq_ptr[i + 1] - t0
    for t in range(T):
        dr = dnode[t]
        for e in range(tok_ptr[t0 + t], tok_ptr[t0 + t + 1]):
            a = attr[e]
            c = coef * val[e]
            k0 = attr_ptr[a]
            if full[a]:
                o = out[k0 : k0 + L]
                for l in range(L):
                    o[l] += c * dr[l]
            else:
                for k in range(k0, attr_ptr[a + 1]):
                    out[k] += c * dr[feat_label[k]]
    for a in range(L):
        for b in range(L):
            k = trans_index[a, b]
            if k >= 0:
                out[n_state + k] += coef * dedge[a, b]


@njit(**_NOPY)
def smd_run(
    seq_ptr,
    tok_ptr,
    attr,
    val,
    y,
    attr_ptr,
    feat_label,
    trans_index,
    n_state,
    full,
    batch,
    mu,
    lam,
    l2,
    seen_target,
    w,
    gain,
    v,
    gbuf,
    hbuf,
    fsc,
    isc,
    rng,
    node,
    dnode,
    edge,
    dedge,
):
    """SMD steps (see the module docstring) until ``isc[I_SEEN] == seen_target`` examples were
    processed.

    Each step draws ``batch`` examples uniformly with replacement (fewer for
    the last step before ``seen_target``, so that a pass ends on a step); the
    gradient and ``H v`` of their mean loss plus the L2 term drive the update
    of every coordinate.  ``gbuf``/``hbuf``: zeros of the weights' length
    (left zero).  Returns the sum of the sampled examples' losses.
    """
    n = seq_ptr.shape[0] - 1
    p = w.shape[0]
    total = 0.0
    while isc[I_SEEN] < seen_target:
        b = min(batch, seen_target - isc[I_SEEN])
        coef = 1.0 / b
        for _ in range(b):
            i = rng_below(rng, n)
            total += sequence_hv(
                seq_ptr,
                tok_ptr,
                attr,
                val,
                y,
                attr_ptr,
                feat_label,
                trans_index,
                w,
                v,
                n_state,
                i,
                node,
                dnode,
                edge,
                dedge,
                full,
                False,
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
                coef,
                gbuf,
                full,
            )
            apply_direction(
                seq_ptr,
                tok_ptr,
                attr,
                val,
                attr_ptr,
                feat_label,
                trans_index,
                n_state,
                i,
                dnode,
                dedge,
                coef,
                hbuf,
                full,
            )
        gsum = 0.0
        for k in range(p):
            g = gbuf[k] + l2 * w[k]
            h = hbuf[k] + l2 * v[k]
            f = 1.0 - mu * g * v[k]
            gk = gain[k] * (f if f > 0.5 else 0.5)
            gain[k] = gk
            w[k] -= gk * g
            v[k] = lam * v[k] - gk * (g + lam * h)
            gbuf[k] = 0.0
            hbuf[k] = 0.0
            gsum += gk
        fsc[F_GAIN] = gsum / p if p > 0 else 0.0
        isc[I_SEEN] += b
        isc[I_STEPS] += 1
    return total
