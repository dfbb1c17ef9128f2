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

from .chain import (FAST, add_full_row, add_scores, add_transition_gradient, emissions_rows, exp_minus,
                    forward_backward_edges, gold_score, max_min, transition_matrix)

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
