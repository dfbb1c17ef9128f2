"""Numba kernels of stochastic meta-descent (SMD) for CRFs (Vishwanathan, Schraudolph, Schmidt & Murphy,
ICML 2006): exact Hessian-vector products of a sequence's negative log-likelihood, and the SMD steps.

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
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .chain import (FAST, MAX_SCALED_TRANSITION_RANGE, _logsumexp, emissions_rows, exp_minus, exp_shift_into,
                    gold_score, max_min, transition_matrix)
from .oracle import apply_gradient
from .sag import rng_below

_NOPY = dict(cache=True, nogil=True, fastmath=FAST)

# float scalars fsc[...]: none kept between calls but the last mean gain (reported as the step)
F_GAIN = 0
N_FSC = 1
# int scalars isc[...]: examples processed, steps taken
I_SEEN, I_STEPS = 0, 1
N_ISC = 2


@njit(**_NOPY)
def _hv_log(score, sdir, T, trans, rdir, node, dnode, edge, dedge):
    """The log-domain form (see the module docstring); returns log Z."""
    L = trans.shape[0]
    la = np.empty((T, L))
    lb = np.empty((T, L))
    a = np.empty((T, L))
    b = np.empty((T, L))
    buf = np.empty(L)
    for j in range(L):
        la[0, j] = score[0, j]
        a[0, j] = sdir[0, j]
    for t in range(1, T):
        for j in range(L):
            for i in range(L):
                buf[i] = la[t - 1, i] + trans[i, j]
            m = _logsumexp(buf)
            acc = 0.0
            if m > -np.inf:
                for i in range(L):
                    wgt = np.exp(buf[i] - m)
                    if wgt > 0.0:
                        acc += wgt * (a[t - 1, i] + rdir[i, j])
            la[t, j] = m + score[t, j]
            a[t, j] = acc + sdir[t, j]
    logz = _logsumexp(la[T - 1])
    for j in range(L):
        lb[T - 1, j] = 0.0
        b[T - 1, j] = 0.0
    for t in range(T - 2, -1, -1):
        for i in range(L):
            for j in range(L):
                buf[j] = trans[i, j] + score[t + 1, j] + lb[t + 1, j]
            m = _logsumexp(buf)
            acc = 0.0
            if m > -np.inf:
                for j in range(L):
                    wgt = np.exp(buf[j] - m)
                    if wgt > 0.0:
                        acc += wgt * (rdir[i, j] + sdir[t + 1, j] + b[t + 1, j])
            lb[t, i] = m
            b[t, i] = acc
    ephi = 0.0
    for j in range(L):
        mu = np.exp(la[T - 1, j] - logz)
        if mu > 0.0:
            ephi += mu * a[T - 1, j]
    for t in range(T):
        for j in range(L):
            mu = np.exp(la[t, j] + lb[t, j] - logz)
            node[t, j] = mu
            dnode[t, j] = mu * (a[t, j] + b[t, j] - ephi) if mu > 0.0 else 0.0
    for i in range(L):
        for j in range(L):
            edge[i, j] = 0.0
            dedge[i, j] = 0.0
    for t in range(1, T):
        for i in range(L):
            for j in range(L):
                xi = np.exp(la[t - 1, i] + trans[i, j] + score[t, j] + lb[t, j] - logz)
                if xi > 0.0:
                    edge[i, j] += xi
                    dedge[i, j] += xi * (a[t - 1, i] + rdir[i, j] + sdir[t, j] + b[t, j] - ephi)
    return logz


@njit(**_NOPY)
def hv_chain(score, sdir, T, trans, rdir, node, dnode, edge, dedge, force_log):
    """Marginals and their derivatives along a direction for one chain; returns log Z.

    ``score`` (>= T x L) and ``trans`` (L x L): the emission and transition
    scores at the weights; ``sdir`` and ``rdir``: those of the direction ``d``.
    Writes the node marginals into ``node[:T]``, their derivatives along ``d``
    into ``dnode[:T]``, the edge marginals summed over positions into ``edge``
    and their derivatives into ``dedge`` (both L x L, overwritten).
    ``force_log`` takes the log-domain form (tests).
    """
    L = trans.shape[0]
    tmax, tmin = max_min(trans)
    if force_log or tmax - tmin > MAX_SCALED_TRANSITION_RANGE:
        return _hv_log(score, sdir, T, trans, rdir, node, dnode, edge, dedge)
    M = exp_minus(trans, tmax)
    es = np.empty((T, L))
    al = np.empty((T, L))
    A = np.empty((T, L))
    c = np.empty(T)
    u = np.empty(L)
    U = np.empty(L)
    logz = 0.0
    for t in range(T):
        sr = score[t]
        m = sr[0]
        for j in range(1, L):
            m = sr[j] if sr[j] > m else m
        exp_shift_into(sr, m, es[t])
        logz += m
        if t == 0:
            for j in range(L):
                u[j] = 1.0
                U[j] = 0.0
        else:
            logz += tmax
            for j in range(L):
                u[j] = 0.0
                U[j] = 0.0
            for i in range(L):
                ai = al[t - 1, i]
                Ai = A[t - 1, i]
                for j in range(L):
                    mij = M[i, j]
                    u[j] += ai * mij
                    U[j] += (Ai + ai * rdir[i, j]) * mij
        s = 0.0
        for j in range(L):
            s += es[t, j] * u[j]
        if not (s > 1e-300) or not np.isfinite(s):
            return _hv_log(score, sdir, T, trans, rdir, node, dnode, edge, dedge)
        c[t] = s
        inv = 1.0 / s
        for j in range(L):
            al[t, j] = es[t, j] * u[j] * inv
            A[t, j] = es[t, j] * U[j] * inv + sdir[t, j] * al[t, j]
        logz += np.log(s)
    ephi = 0.0
    for j in range(L):
        ephi += A[T - 1, j]
    for i in range(L):
        for j in range(L):
            edge[i, j] = 0.0
            dedge[i, j] = 0.0
    # backward: be (beta_t), Bt (B_t) for the current t; the ones of t+1 in be1, B1
    be1 = np.ones(L)
    B1 = np.zeros(L)
    tmp = np.empty(L)
    tmpB = np.empty(L)
    for j in range(L):
        mu = al[T - 1, j]
        node[T - 1, j] = mu
        dnode[T - 1, j] = A[T - 1, j] + 0.0 - mu * ephi
    for t in range(T - 2, -1, -1):
        inv = 1.0 / c[t + 1]
        for j in range(L):
            tmp[j] = es[t + 1, j] * be1[j] * inv
            tmpB[j] = es[t + 1, j] * (B1[j] + sdir[t + 1, j] * be1[j]) * inv
        for i in range(L):
            ai = al[t, i]
            Ai = A[t, i]
            bsum = 0.0
            Bsum = 0.0
            for j in range(L):
                mij = M[i, j]
                rt = rdir[i, j] * tmp[j]
                bsum += mij * tmp[j]
                Bsum += mij * (tmpB[j] + rt)
                xi = ai * mij * tmp[j]
                edge[i, j] += xi
                dedge[i, j] += mij * (Ai * tmp[j] + ai * rt + ai * tmpB[j]) - xi * ephi
            node[t, i] = ai * bsum
            dnode[t, i] = Ai * bsum + ai * Bsum - ai * bsum * ephi
            # the new messages go into u/U first: be1/B1 are still read for other i
            u[i] = bsum
            U[i] = Bsum
        for i in range(L):
            be1[i] = u[i]
            B1[i] = U[i]
    return logz


@njit(**_NOPY)
def sequence_hv(seq_ptr, tok_ptr, attr, val, y, attr_ptr, feat_label, trans_index, w, d, n_state, i,
                node, dnode, edge, dedge, full, force_log):
    """Loss ``-log p(y_i | x_i)`` at ``w``; the marginals (as :func:`crfkit.kernels.oracle.sequence_oracle`)
    and their derivatives along ``d`` into ``node``/``dnode`` (>= T rows) and ``edge``/``dedge``, from
    which :func:`apply_gradient` and :func:`apply_direction` make the gradient and ``H_i d``."""
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
def apply_direction(seq_ptr, tok_ptr, attr, val, attr_ptr, feat_label, trans_index, n_state, i, dnode, dedge,
                    coef, out, full):
    """out += coef * H_i d, from the marginal derivatives of :func:`sequence_hv` (touches the state features
    of the attributes of sequence i and the transition features)."""
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
                o = out[k0:k0 + L]
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
def smd_run(seq_ptr, tok_ptr, attr, val, y, attr_ptr, feat_label, trans_index, n_state, full,
            batch, mu, lam, l2, seen_target, w, gain, v, gbuf, hbuf, fsc, isc, rng, node, dnode, edge, dedge):
    """SMD steps (see the module docstring) until ``isc[I_SEEN] == seen_target`` examples were processed.

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
            total += sequence_hv(seq_ptr, tok_ptr, attr, val, y, attr_ptr, feat_label, trans_index, w, v,
                                 n_state, i, node, dnode, edge, dedge, full, False)
            apply_gradient(seq_ptr, tok_ptr, attr, val, y, attr_ptr, feat_label, trans_index,
                           n_state, i, node, edge, coef, gbuf, full)
            apply_direction(seq_ptr, tok_ptr, attr, val, attr_ptr, feat_label, trans_index, n_state, i,
                            dnode, dedge, coef, hbuf, full)
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
