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
from numba import njit, prange

from .batch_bigram_fb import bigram_sequence_marginals
from .chain import add_transition_gradient, forward_backward_edges, gold_score
from .chain_emit import add_full_row, add_scores, emissions_rows, transition_matrix
from .chain_exp import FAST, exp_minus, exp_shift_into, max_min
from .chain_pd import pd_gold_score, pd_log_partition

_NOPY = dict(cache=True, nogil=True, fastmath=FAST)


@njit(**_NOPY)
def sequence_oracle(
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
    xs=None,
):
    """Loss -log p(y_i|x_i) at w = beta*v; node marginals into node[:T], summed edge marginals into
    edge.

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
def apply_gradient(
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
):
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
                add_full_row(v[attr_ptr[a] : attr_ptr[a] + L], pm, 0, coef * val[e])
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
def _bigram_scores(
    seq_ptr,
    tok_ptr,
    attr,
    val,
    trans_index,
    attr_ptr,
    feat_label,
    btok_ptr,
    battr,
    bval,
    battr_ptr,
    bfeat_pair,
    boff,
    v,
    beta,
    n_state,
    i,
    full,
    bfull,
):
    """The scores of sequence i at w = beta*v with bigram-observation features: (emission scores
    (T x L), M (T x L x L: M[t] the transition scores into position t, t >= 1),
    expM[t] = exp(M[t] - tmx[t]), tmx, the largest range of the M[t]), as
    :func:`crfkit.kernels.chain.bigram_transitions` defines them.

    M[t] is built over flat rows of L*L (a feature's pair is its index there: no division per
    feature), the scale beta applied as the weights are read, and ``exp(M[t] - max)`` is taken over
    the whole row by the vectorised exp (:func:`~crfkit.kernels.chain.exp_shift_into`, within 1 ulp
    of libm's) rather than one libm call per pair a feature touches: with every label pair of every
    observation (Wapiti's space) those calls were most of a step's time.  ``bfull`` (per bigram
    attribute; empty: none): the attribute has a feature for every label pair, in pair order, so its
    weights are added to the row as one contiguous run (vectorised) instead of through
    ``bfeat_pair`` (the same additions)."""
    L = trans_index.shape[0]
    LL = L * L
    t0 = seq_ptr[i]
    t1 = seq_ptr[i + 1]
    T = t1 - t0
    trans = transition_matrix(v, beta, n_state, trans_index).ravel()
    score = np.empty((T, L))
    M = np.empty((T, L, L))
    expM = np.empty((T, L, L))
    Mf = M.reshape((T, LL))
    Ef = expM.reshape((T, LL))
    tmx = np.zeros(T)
    rng = 0.0
    some_full = bfull.shape[0] > 0
    for t in range(1, T):
        row = Mf[t]
        for p in range(LL):
            row[p] = trans[p]
        for e in range(btok_ptr[t0 + t], btok_ptr[t0 + t + 1]):
            b = battr[e]
            x = bval[e] * beta
            k0 = battr_ptr[b]
            if some_full and bfull[b]:
                vb = v[boff + k0 : boff + k0 + LL]
                for p in range(LL):
                    row[p] += vb[p] * x
            else:
                for k in range(k0, battr_ptr[b + 1]):
                    row[bfeat_pair[k]] += v[boff + k] * x
        mx, mn = max_min(row)
        tmx[t] = mx
        if mx - mn > rng:
            rng = mx - mn
        exp_shift_into(row, mx, Ef[t])
    emissions_rows(tok_ptr, attr, val, t0, t1, attr_ptr, feat_label, full, v, beta, score)
    return score, M, expM, tmx, rng


@njit(**_NOPY)
def sequence_oracle_bigram(
    seq_ptr,
    tok_ptr,
    attr,
    val,
    y,
    attr_ptr,
    feat_label,
    trans_index,
    btok_ptr,
    battr,
    bval,
    battr_ptr,
    bfeat_pair,
    boff,
    v,
    beta,
    n_state,
    i,
    node,
    edges,
    edge,
    full,
    bfull,
):
    """:func:`sequence_oracle` for a feature space with bigram-observation features (weights of
    bigram feature k at ``v[boff + k]``): loss -log p(y_i|x_i) at w = beta*v, node marginals into
    node[:T], the edge marginals of position t (pair (t-1, t), 1 <= t < T) into edges[t] (``edges``:
    at least T x L x L; edges[0] is not written) and their sum into ``edge`` (L x L, overwritten).
    ``bfull``: as :func:`_bigram_scores` (empty: none).

    The recursion is the full-batch kernel's (:func:`crfkit.kernels.batch_bigram_fb._dense_bigram_sequence`):
    the position-dependent transition scores (:func:`_bigram_scores`), then
    :func:`~crfkit.kernels.batch.bigram_sequence_marginals`."""
    L = trans_index.shape[0]
    t0 = seq_ptr[i]
    T = seq_ptr[i + 1] - t0
    for a in range(L):
        for b in range(L):
            edge[a, b] = 0.0
    if T == 0:
        return 0.0
    score, M, expM, tmx, rng = _bigram_scores(
        seq_ptr,
        tok_ptr,
        attr,
        val,
        trans_index,
        attr_ptr,
        feat_label,
        btok_ptr,
        battr,
        bval,
        battr_ptr,
        bfeat_pair,
        boff,
        v,
        beta,
        n_state,
        i,
        full,
        bfull,
    )
    es = np.empty((T, L))
    alpha = np.empty((T, L))
    beta_m = np.empty((T, L))
    scale = np.empty(T)
    logz = bigram_sequence_marginals(
        0,
        T,
        0,
        M,
        tmx,
        rng,
        expM,
        score,
        es,
        alpha,
        beta_m,
        scale,
        1.0,
        edges,
        node,
        edge,
        np.zeros((0, L)),
        False,
    )
    return logz - pd_gold_score(score, y, t0, T, M)


@njit(parallel=True, cache=True, fastmath=FAST)
def loss_sum_bigram(
    seq_ptr,
    tok_ptr,
    attr,
    val,
    y,
    attr_ptr,
    feat_label,
    trans_index,
    btok_ptr,
    battr,
    bval,
    battr_ptr,
    bfeat_pair,
    boff,
    v,
    beta,
    n_state,
    bounds,
    full,
    sw,
    bfull,
):
    """sum_i sw_i * -log p(y_i|x_i) at w = beta*v (``sw`` empty: all 1) by the forward recursion
    over the scores of :func:`_bigram_scores`: the value the full-batch ``loss_only_bigram``
    computes (to rounding), at the per-example oracle's cost (its vectorised exponentials); chunks
    ``bounds`` of sequences on numba's threads.  SGD-L1's per-pass objective."""
    L = trans_index.shape[0]
    nc = bounds.shape[0] - 1
    out = np.zeros(nc)
    for c in prange(nc):
        acc = 0.0
        for i in range(bounds[c], bounds[c + 1]):
            t0 = seq_ptr[i]
            T = seq_ptr[i + 1] - t0
            ws = 1.0 if sw.shape[0] == 0 else sw[i]
            if T == 0 or ws == 0.0:
                continue
            score, M, expM, tmx, rng = _bigram_scores(
                seq_ptr,
                tok_ptr,
                attr,
                val,
                trans_index,
                attr_ptr,
                feat_label,
                btok_ptr,
                battr,
                bval,
                battr_ptr,
                bfeat_pair,
                boff,
                v,
                beta,
                n_state,
                i,
                full,
                bfull,
            )
            es = np.empty((T, L))
            alpha = np.empty((T, L))
            scale = np.empty(T)
            acc += ws * (
                pd_log_partition(score, T, M, tmx, rng, expM, es, alpha, scale)
                - pd_gold_score(score, y, t0, T, M)
            )
        out[c] = acc
    return out.sum()


@njit(**_NOPY)
def apply_gradient_bigram(
    seq_ptr,
    tok_ptr,
    attr,
    val,
    y,
    attr_ptr,
    feat_label,
    trans_index,
    btok_ptr,
    battr,
    bval,
    battr_ptr,
    bfeat_pair,
    boff,
    n_state,
    i,
    node,
    eflat,
    edge,
    coef,
    v,
    full,
):
    """v += coef * grad_i for a feature space with bigram-observation features, from the outputs of
    :func:`sequence_oracle_bigram` (``eflat``: its ``edges`` viewed as rows of L*L): the state and
    transition features as :func:`apply_gradient`, and for every position t >= 1 and bigram
    attribute occurrence (b, value) there, ``v[boff + k] += coef * value * (p_t(pair of k) - [pair
    of k is gold])`` for the features k of b.  The attributes of a sequence's first token take no
    part (no transition enters it)."""
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
    add_bigram_gradient(
        seq_ptr,
        y,
        btok_ptr,
        battr,
        bval,
        battr_ptr,
        bfeat_pair,
        boff,
        i,
        eflat,
        trans_index.shape[0],
        coef,
        v,
        np.zeros(0, np.int8),
        np.zeros(0, np.int64),
        -1,
    )


@njit(**_NOPY)
def add_bigram_gradient(
    seq_ptr,
    y,
    btok_ptr,
    battr,
    bval,
    battr_ptr,
    bfeat_pair,
    boff,
    i,
    eflat,
    L,
    coef,
    v,
    bfull,
    stamp,
    step,
):
    """The bigram-observation part of :func:`apply_gradient_bigram`: for every position t >= 1 of
    sequence i and bigram attribute occurrence (b, value) there,
    ``v[boff + k] += coef * value * (p_t(pair of k) - [pair of k is gold])``.  ``bfull`` (per bigram
    attribute; empty: none): b has a feature for every label pair, in pair order (Wapiti's space),
    so its whole row of edge marginals is added as one contiguous run and the gold pair's 1 taken
    off after it (SGD-L1's step, :mod:`crfkit.kernels.sgdl1`); the other attributes pair by pair.
    The same additions per weight either way.  ``stamp`` (empty: none), ``step``: SGD-L1's step
    marks, per attribute then per bigram attribute; a full attribute marked ``step`` (seen once in
    the sequence) is skipped: the step adds its gradient in the penalty's walk."""
    L2 = L * L
    some_full = bfull.shape[0] > 0
    s0 = stamp.shape[0] - (battr_ptr.shape[0] - 1)
    t0 = seq_ptr[i]
    T = seq_ptr[i + 1] - t0
    for t in range(1, T):
        xi = eflat[t]
        gold = y[t0 + t - 1] * L + y[t0 + t]
        for e in range(btok_ptr[t0 + t], btok_ptr[t0 + t + 1]):
            b = battr[e]
            c = coef * bval[e]
            k0 = battr_ptr[b]
            k1 = battr_ptr[b + 1]
            if some_full and bfull[b] and stamp.shape[0] > 0 and stamp[s0 + b] == step:
                continue
            if some_full and bfull[b]:
                vb = v[boff + k0 : boff + k1]
                for q in range(L2):
                    vb[q] += c * xi[q]
                vb[gold] -= c
            else:
                for k in range(k0, k1):
                    p = bfeat_pair[k]
                    v[boff + k] += c * xi[p]
                    if p == gold:
                        v[boff + k] -= c


@njit(**_NOPY)
def touched_features(seq_ptr, tok_ptr, attr, attr_ptr, i, out):
    """Write the state-feature indices touched by sequence i into ``out``; return how many (with
    repeats)."""
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
