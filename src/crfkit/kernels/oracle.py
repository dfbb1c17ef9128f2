"""Per-example oracle and sparse gradient application (for stochastic optimizers).

The stochastic methods keep the weights as ``w = beta * v`` so that the L2
shrinkage ``w <- (1 - eta*l2) w`` is a change of the scalar ``beta`` only.  For
one sequence the oracle returns its loss, node marginals (T x L) and summed
edge marginals (L x L) at ``w = beta * v``; the sequence's gradient is never
made dense: :func:`apply_gradient` adds ``coef * grad_i`` to ``v`` touching only
the state features of the attributes that occur in the sequence and the
transition features.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .batch import _dense_bigram_sequence
from .chain import (FAST, add_full_row, add_scores, add_transition_gradient, emissions_rows, exp_minus,
                    forward_backward_edges, gold_score, max_min, pd_gold_score, transition_matrix)

_NOPY = dict(cache=True, nogil=True, fastmath=FAST)


@njit(**_NOPY)
def sequence_oracle(seq_ptr, tok_ptr, attr, val, y, attr_ptr, feat_label, trans_index,
                    v, beta, n_state, i, node, edge, full, xs=None):
    """Loss -log p(y_i|x_i) at w = beta*v; node marginals into node[:T], summed edge marginals into edge.

    ``node`` must have at least T rows; ``edge`` (L x L) is overwritten.
    ``full``: :func:`crfkit.kernels.chain.full_rows` of the feature space (those
    attributes' label rows are read as vectors).
    ``xs`` (T x L, optional): extra emission scores of the sequence's tokens
    (the dense block's ``beta * X_i @ V``).
    """
    L = trans_index.shape[0]
    t0 = seq_ptr[i]
    t1 = seq_ptr[i + 1]
    T = t1 - t0
    for a in range(L):
        for b in range(L):
            edge[a, b] = 0.0
    if T == 0:
        return 0.0
    trans = transition_matrix(v, beta, n_state, trans_index)
    tmax = max_min(trans)[0]
    expM = exp_minus(trans, tmax)
    score = np.empty((T, L))
    es = np.empty((T, L))
    beta_m = np.empty((T, L))
    scale = np.empty(T)
    emissions_rows(tok_ptr, attr, val, t0, t1, attr_ptr, feat_label, full, v, beta, score)
    if xs is not None:
        add_scores(xs, 0, T, score)
    logz = forward_backward_edges(score, T, trans, expM, tmax, es, node, beta_m, scale, edge)
    for t in range(T):
        for l in range(L):
            node[t, l] *= beta_m[t, l]
    return logz - gold_score(score, y, t0, T, trans)


@njit(**_NOPY)
def apply_gradient(seq_ptr, tok_ptr, attr, val, y, attr_ptr, feat_label, trans_index,
                   n_state, i, node, edge, coef, v, full):
    """v += coef * grad_i, where grad_i is the gradient of -log p(y_i|x_i) given by its marginals.

    Touches only the state features of attributes that occur in sequence i and
    the transition features. To take a step ``w -= eta * grad_i`` on
    ``w = beta * v`` pass ``coef = -eta / beta``.  ``full``: as in
    :func:`sequence_oracle` (full rows first, as vectors, then the others).
    """
    L = trans_index.shape[0]
    t0 = seq_ptr[i]
    T = seq_ptr[i + 1] - t0
    pm = np.empty(L)
    for t in range(T):
        yt = y[t0 + t]
        nr = node[t]
        for l in range(L):
            pm[l] = nr[l]
        pm[yt] -= 1.0
        part = False
        for e in range(tok_ptr[t0 + t], tok_ptr[t0 + t + 1]):
            a = attr[e]
            if full[a]:
                add_full_row(v[attr_ptr[a]:attr_ptr[a] + L], pm, 0, coef * val[e])
            else:
                part = True
        if part:
            for e in range(tok_ptr[t0 + t], tok_ptr[t0 + t + 1]):
                a = attr[e]
                if not full[a]:
                    c = coef * val[e]
                    for k in range(attr_ptr[a], attr_ptr[a + 1]):
                        v[k] += c * pm[feat_label[k]]
    add_transition_gradient(v, n_state, trans_index, edge, y, t0, T, coef)


@njit(**_NOPY)
def sequence_oracle_bigram(seq_ptr, tok_ptr, attr, val, y, attr_ptr, feat_label, trans_index, btok_ptr, battr,
                           bval, battr_ptr, bfeat_pair, boff, v, beta, n_state, i, node, edges, edge, full):
    """:func:`sequence_oracle` for a feature space with bigram-observation features (weights of bigram
    feature k at ``v[boff + k]``): loss -log p(y_i|x_i) at w = beta*v, node marginals into node[:T], the
    edge marginals of position t (pair (t-1, t), 1 <= t < T) into edges[t] (``edges``: at least T x L x L;
    edges[0] is not written) and their sum into ``edge`` (L x L, overwritten).

    The recursion is the full-batch kernel's (:func:`crfkit.kernels.batch._dense_bigram_sequence`):
    position-dependent transition scores ``M[t] = trans + sum of the weights of the position's bigram
    attributes``.  The scale beta reaches the bigram weights through a local copy of the sequence's
    bigram attribute occurrences with their values times beta (O(its bigram occurrences))."""
    L = trans_index.shape[0]
    t0 = seq_ptr[i]
    t1 = seq_ptr[i + 1]
    T = t1 - t0
    for a in range(L):
        for b in range(L):
            edge[a, b] = 0.0
    if T == 0:
        return 0.0
    trans = transition_matrix(v, beta, n_state, trans_index)
    tmax = max_min(trans)[0]
    expM0 = exp_minus(trans, tmax)
    # the sequence's bigram occurrences, positions from 0, values times beta
    e0 = btok_ptr[t0]
    ne = btok_ptr[t1] - e0
    lptr = np.empty(T + 1, np.int64)
    for t in range(T + 1):
        lptr[t] = btok_ptr[t0 + t] - e0
    lattr = np.empty(ne, np.int32)
    lval = np.empty(ne)
    for e in range(ne):
        lattr[e] = battr[e0 + e]
        lval[e] = bval[e0 + e] * beta
    score = np.empty((T, L))
    es = np.empty((T, L))
    alpha = np.empty((T, L))
    beta_m = np.empty((T, L))
    scale = np.empty(T)
    M = np.empty((T, L, L))
    expM = np.empty((T, L, L))
    tmx = np.empty(T)
    emissions_rows(tok_ptr, attr, val, t0, t1, attr_ptr, feat_label, full, v, beta, score)
    logz = _dense_bigram_sequence(lptr, lattr, lval, 0, T, 0, battr_ptr, bfeat_pair, v, boff, trans, M, tmx,
                                  expM0, tmax, expM, score, es, alpha, beta_m, scale, 1.0, edges, node, edge,
                                  np.zeros((0, L)), False)
    return logz - pd_gold_score(score, y, t0, T, M)


@njit(**_NOPY)
def apply_gradient_bigram(seq_ptr, tok_ptr, attr, val, y, attr_ptr, feat_label, trans_index, btok_ptr, battr,
                          bval, battr_ptr, bfeat_pair, boff, n_state, i, node, eflat, edge, coef, v, full):
    """v += coef * grad_i for a feature space with bigram-observation features, from the outputs of
    :func:`sequence_oracle_bigram` (``eflat``: its ``edges`` viewed as rows of L*L): the state and
    transition features as :func:`apply_gradient`, and for every position t >= 1 and bigram attribute
    occurrence (b, value) there, ``v[boff + k] += coef * value * (p_t(pair of k) - [pair of k is gold])``
    for the features k of b.  The attributes of a sequence's first token take no part (no transition
    enters it)."""
    apply_gradient(seq_ptr, tok_ptr, attr, val, y, attr_ptr, feat_label, trans_index, n_state, i, node, edge,
                   coef, v, full)
    L = trans_index.shape[0]
    t0 = seq_ptr[i]
    T = seq_ptr[i + 1] - t0
    for t in range(1, T):
        xi = eflat[t]
        gold = y[t0 + t - 1] * L + y[t0 + t]
        for e in range(btok_ptr[t0 + t], btok_ptr[t0 + t + 1]):
            b = battr[e]
            c = coef * bval[e]
            for k in range(battr_ptr[b], battr_ptr[b + 1]):
                p = bfeat_pair[k]
                v[boff + k] += c * xi[p]
                if p == gold:
                    v[boff + k] -= c


@njit(**_NOPY)
def touched_features(seq_ptr, tok_ptr, attr, attr_ptr, i, out):
    """Write the state-feature indices touched by sequence i into ``out``; return how many (with repeats)."""
    n = 0
    for e in range(tok_ptr[seq_ptr[i]], tok_ptr[seq_ptr[i + 1]]):
        a = attr[e]
        for k in range(attr_ptr[a], attr_ptr[a + 1]):
            out[n] = k
            n += 1
    return n


class ScaledWeights:
    """Weights kept as ``w = beta * v`` so that L2 shrinkage is O(1).

    ``shrink(f)`` multiplies every weight by ``f`` by changing ``beta``; when
    beta gets small it is folded back into ``v`` (O(d), rarely) to keep the
    arithmetic well conditioned.
    """

    FOLD_BELOW = 1e-9

    def __init__(self, w0: np.ndarray):
        self.v = np.array(w0, dtype=np.float64, copy=True)
        self.beta = 1.0

    def shrink(self, factor: float) -> None:
        if factor <= 0.0:
            raise ValueError("shrink factor must be positive (step size too large for the L2 term)")
        self.beta *= factor
        if self.beta < self.FOLD_BELOW:
            self.fold()

    def fold(self) -> None:
        self.v *= self.beta
        self.beta = 1.0

    def dense(self) -> np.ndarray:
        return self.beta * self.v

    def squared_norm(self) -> float:
        return float(self.beta * self.beta * np.dot(self.v, self.v))
