"""Numba kernels over a whole corpus: objective and gradient, Viterbi, marginals.

Corpora with bigram-observation attributes (position-dependent transition
scores, see ``chain.bigram_transitions``) go through the ``*_bigram``
kernels at the end of this file; the others are untouched by them.

Work is split over sequences into chunks (see ``chunk_bounds``) that run on
numba's thread pool.  The full-batch gradient (``loss_grad``, ``loss_grad_bigram``) goes block by
block (``crfkit.reduction``): the chunks of a block write its marginals into a small store, then
the threads, each owning a group of attributes, add the expected counts into the one output
vector through an occurrence index.  No thread holds a copy of the gradient, so the memory of a
gradient evaluation follows the corpus, not the candidate space.

Sample weights: the corpus-level kernels take ``sw``, one scale per sequence
(crfkit passes ``omega_i * n / W``, see :mod:`crfkit.objective`), by which the
sequence's loss, expected counts and empirical counts are multiplied; an empty
``sw`` means every scale is 1 (and the arithmetic is exactly the unweighted
one).  A sequence with scale 0 is skipped (its rows of the marginal stores are zero).
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from .chain import (FAST, MAX_SCALED_TRANSITION_RANGE, add_scores, row_sum, bigram_transitions, compact_bigram, emissions,
                    emissions_rows, full_rows,
                    forward_backward, forward_backward_edges, gold_score, log_partition, pd_edge, pd_forward_backward,
                    pd_gold_score, pd_log_partition, pd_node, pd_viterbi, tag_codes_seqs, transition_matrix, viterbi)
from .sparse_fb import nonzero_transitions, pair_capacity, pair_scores_ok, sequence_pairs, sparse_forward_backward


# compact_bigram's threshold: the non-zero bigram weights are listed apart when at most this share of them
# is non-zero (the list costs up to 0.3 x 12 bytes per candidate feature; it saves the per-position reads
# of the zeros)
COMPACT_SHARE = 0.3


def chunk_bounds(seq_ptr: np.ndarray, n_chunks: int) -> np.ndarray:
    """Split sequences into ``n_chunks`` contiguous runs of about equal token counts."""
    n = len(seq_ptr) - 1
    n_chunks = max(1, min(int(n_chunks), max(n, 1)))
    total = seq_ptr[-1] - seq_ptr[0]
    targets = seq_ptr[0] + (np.arange(1, n_chunks) * total) // n_chunks
    cuts = np.searchsorted(seq_ptr, targets, side="left")
    bounds = np.concatenate(([0], cuts, [n])).astype(np.int64)
    return np.maximum.accumulate(np.minimum(bounds, n))


@njit(cache=True, nogil=True, fastmath=FAST)
def _max_len(seq_ptr, s0, s1):
    m = 0
    for s in range(s0, s1):
        d = seq_ptr[s + 1] - seq_ptr[s]
        if d > m:
            m = d
    return m


@njit(cache=True, nogil=True, fastmath=FAST)
def _seq_weight(sw, s):
    """The scale of sequence s: sw[s], or 1 when ``sw`` is empty (no sample weights)."""
    if sw.shape[0] == 0:
        return 1.0
    return sw[s]


@njit(cache=True, nogil=True, fastmath=FAST)
def _zero_rows(pm, t0, t1):
    """pm[t0:t1] = 0 when ``pm`` has rows (the marginals of a sequence of weight 0: no contribution)."""
    if pm.shape[0] > 0:
        for t in range(t0, t1):
            for l in range(pm.shape[1]):
                pm[t, l] = 0.0


@njit(cache=True, nogil=True, fastmath=FAST)
def _store_nodes(m, T, r0, t0, ws, node, pm, keep):
    """A sequence's node marginals m[:T] times its weight into node[r0:] (and pm[t0:] when ``keep``)."""
    L = m.shape[1]
    for t in range(T):
        for l in range(L):
            x = m[t, l] * ws
            node[r0 + t, l] = x
            if keep:
                pm[t0 + t, l] = x


@njit(cache=True, nogil=True, fastmath=FAST)
def _dense_bigram_sequence(btok_ptr, battr, bval, t0, T, r0, battr_ptr, bfeat_pair, w, boff, trans, M, tmx,
                           expM0, tmax, expM, score, es, alpha, beta, scale, ws, edge, node, E, pm, keep,
                           gd, gptr, gcol, gfull, gbin):
    """One sequence of a bigram-observation chunk by the per-position recursion (its emission scores in
    ``score``): weighted edge marginals into edge[r0 + t] and summed into E, weighted node marginals
    stored (:func:`_store_nodes`), and with ``gd`` non-empty (one chunk) its bigram part added into the
    gradient ``gd`` (:func:`_scatter_sequence`); returns log Z.  The standard chunk's body, and the
    sparse chunk's fallback out of its scaled range."""
    rng = bigram_transitions(btok_ptr, battr, bval, t0, T, battr_ptr, bfeat_pair, w, boff, trans, M, tmx,
                             expM0, tmax, expM)
    logz = bigram_sequence_marginals(t0, T, r0, M, tmx, rng, expM, score, es, alpha, beta, scale, ws, edge, node,
                                     E, pm, keep)
    if gd.shape[0] > 0:
        _scatter_sequence(btok_ptr, battr, bval, t0, T, r0, edge, gptr, gcol, gfull, gbin, gd, boff)
    return logz


@njit(cache=True, nogil=True, fastmath=FAST)
def bigram_sequence_marginals(t0, T, r0, M, tmx, rng, expM, score, es, alpha, beta, scale, ws, edge, node, E, pm,
                              keep):
    """The recursion of :func:`_dense_bigram_sequence` once the transition scores M[t], their maxima
    tmx[t], largest range ``rng`` and shifted exponentials expM[t] are built (``bigram_transitions``;
    the per-example oracle builds expM its own way): forward-backward, weighted edge marginals into
    edge[r0 + t] and summed into E, weighted node marginals stored; returns log Z."""
    L = M.shape[1]
    logz = pd_forward_backward(score, T, M, tmx, rng, expM, es, alpha, beta, scale)
    for t in range(1, T):
        xi = edge[r0 + t]
        pd_edge(t, score, M, expM, es, alpha, beta, scale, logz, xi)
        for i in range(L):
            for j in range(L):
                xi[i, j] *= ws
                E[i, j] += xi[i, j]
    pd_node(T, alpha, beta, scale)
    _store_nodes(alpha, T, r0, t0, ws, node, pm, keep)
    return logz


@njit(cache=True, nogil=True, fastmath=FAST)
def _bigram_sequence(seq_ptr, T0, sw, s, node, edge, pm):
    """(t0, t1, T, r0, weight) of sequence ``s`` in a bigram-observation chunk starting at token T0;
    a sequence of weight 0 gets its node, edge and marginal rows zeroed (it contributes nothing).
    Shared by the standard and the sparse forward-backward chunks."""
    t0 = seq_ptr[s]
    t1 = seq_ptr[s + 1]
    T = t1 - t0
    r0 = t0 - T0
    ws = _seq_weight(sw, s)
    if ws == 0.0:
        _zero_rows(node[r0:r0 + T], 0, T)
        edge[r0:r0 + T] = 0.0
        _zero_rows(pm, t0, t1)
    return t0, t1, T, r0, ws


@njit(cache=True, nogil=True, fastmath=FAST)
def empirical_counts(seq_ptr, tok_ptr, attr, val, y, attr_ptr, feat_label, trans_index, n_state, out, sw):
    """Feature counts of the gold labelling: sum_i sw_i phi(x_i, y_i) (constant during training;
    ``sw`` empty: all scales 1; ``val`` empty: every value 1)."""
    has_val = val.shape[0] > 0
    for k in range(out.shape[0]):
        out[k] = 0.0
    for s in range(len(seq_ptr) - 1):
        ws = _seq_weight(sw, s)
        if ws == 0.0:
            continue
        for t in range(seq_ptr[s], seq_ptr[s + 1]):
            yt = y[t]
            for e in range(tok_ptr[t], tok_ptr[t + 1]):
                a = attr[e]
                v = val[e] if has_val else 1.0
                for k in range(attr_ptr[a], attr_ptr[a + 1]):
                    if feat_label[k] == yt:
                        out[k] += ws * v
            if t > seq_ptr[s]:
                k = trans_index[y[t - 1], yt]
                if k >= 0:
                    out[n_state + k] += ws


def dense_rows(attr_ptr: np.ndarray, n_labels: int) -> tuple[np.ndarray, np.ndarray]:
    """Attributes whose features cover a good share of the labels, to be handled as dense label rows.

    Returns ``(row_of_attr, dense_attr)``: the dense row of every attribute (-1
    for sparse ones) and the attribute of every dense row.  A dense row turns
    that attribute's emission and gradient updates into contiguous vector
    operations over the labels instead of scattered ones; the parameter vector
    itself is unchanged.
    """
    nf = np.diff(attr_ptr)
    dense = (nf >= 4) & (4 * nf >= n_labels)
    dense_attr = np.flatnonzero(dense).astype(np.int32)
    row = np.full(len(nf), -1, dtype=np.int32)
    row[dense_attr] = np.arange(len(dense_attr), dtype=np.int32)
    return row, dense_attr


@njit(cache=True, nogil=True, fastmath=FAST)
def _fill_dense(w, attr_ptr, feat_label, dense_attr, fill, W):
    """W[r, l] = w of the feature (dense_attr[r], l), ``fill`` where there is none."""
    for r in range(dense_attr.shape[0]):
        for l in range(W.shape[1]):
            W[r, l] = fill
        a = dense_attr[r]
        for k in range(attr_ptr[a], attr_ptr[a + 1]):
            W[r, feat_label[k]] = w[k]


@njit(cache=True, nogil=True, fastmath=FAST)
def _hybrid_emissions(tok_ptr, attr, val, t0, t1, attr_ptr, feat_label, w, row, Wd, use_exp, out):
    """Emission scores (use_exp=False: sums of weights) or their exponentials
    (use_exp=True, binary attributes: products of exp(w), with w = exp(w) and
    Wd = exp(dense rows) passed in) of tokens t0..t1-1; ``val`` empty: every value 1."""
    L = out.shape[1]
    has_val = val.shape[0] > 0
    init = 1.0 if use_exp else 0.0
    for t in range(t0, t1):
        r = t - t0
        for l in range(L):
            out[r, l] = init
        for e in range(tok_ptr[t], tok_ptr[t + 1]):
            a = attr[e]
            d = row[a]
            if use_exp:
                if d >= 0:
                    for l in range(L):
                        out[r, l] *= Wd[d, l]
                else:
                    for k in range(attr_ptr[a], attr_ptr[a + 1]):
                        out[r, feat_label[k]] *= w[k]
            else:
                v = val[e] if has_val else 1.0
                if d >= 0:
                    for l in range(L):
                        out[r, l] += Wd[d, l] * v
                else:
                    for k in range(attr_ptr[a], attr_ptr[a + 1]):
                        out[r, feat_label[k]] += w[k] * v


@njit(cache=True, nogil=True, fastmath=FAST)
def _fb_exp(T, es, expM, expMT, tmax, alpha, beta, scale, tmp, acc):
    """Scaled forward-backward from exp-domain emissions ``es``; adds the edge
    statistics (before the factor expM) into ``acc``.  Returns log Z, or NaN
    when a scale under/overflows (the caller then takes the robust path)."""
    L = es.shape[1]
    for j in range(L):
        alpha[0, j] = es[0, j]
    s = row_sum(es, 0)
    if not (s > 1e-300) or not (s < 1e300):
        return np.nan
    scale[0] = s
    logz = np.log(s)
    inv = 1.0 / s
    for j in range(L):
        alpha[0, j] *= inv
    for t in range(1, T):
        for j in range(L):
            a = 0.0
            for i in range(L):
                a += alpha[t - 1, i] * expMT[j, i]
            alpha[t, j] = a * es[t, j]
        s = row_sum(alpha, t)
        if not (s > 1e-300) or not (s < 1e300):
            return np.nan
        scale[t] = s
        logz += np.log(s) + tmax
        inv = 1.0 / s
        for j in range(L):
            alpha[t, j] *= inv
    for j in range(L):
        beta[T - 1, j] = 1.0
    for t in range(T - 2, -1, -1):
        inv = 1.0 / scale[t + 1]
        for j in range(L):
            tmp[j] = es[t + 1, j] * beta[t + 1, j] * inv
        for i in range(L):
            b = 0.0
            for j in range(L):
                b += expM[i, j] * tmp[j]
            beta[t, i] = b
            a = alpha[t, i]
            for j in range(L):
                acc[i, j] += a * tmp[j]
    return logz


@njit(cache=True, nogil=True, fastmath=FAST)
def _fb_chunk(seq_ptr, tok_ptr, attr, val, attr_ptr, feat_label, w, expw, use_exp, row, Wd, expWd,
              trans, expM, expMT, tmax, s0, s1, T0, node, E, acc, xs, pm, sw):
    """Forward-backward over sequences s0..s1-1: returns the sum of their log Z, writes their node
    marginals into the block store ``node`` (row t - T0 for token t) and into ``pm`` (row t, when it
    has rows: the dense block's gradient ``X^T pm`` is taken outside), and adds their edge statistics
    into ``E`` (the robust path's edge marginals) and ``acc`` (the exp path's, before the factor expM).

    ``xs`` (n_tokens x L, or no rows): extra emission scores added to the attributes' (the dense
    block's ``X @ W``; the exp path must then be off).  The gold-path scores and empirical counts are
    constant-time terms the caller handles with the precomputed empirical count vector.
    ``sw``: the sequences' scales (empty: all 1): log Z, the node marginals and the edge statistics
    of sequence s are multiplied by sw[s] (the edges go through scratch matrices, added scaled); a
    sequence of scale 0 writes zero rows.
    """
    L = trans.shape[0]
    maxT = _max_len(seq_ptr, s0, s1)
    if maxT == 0:
        return 0.0
    score = np.empty((maxT, L))
    es = np.empty((maxT, L))
    alpha = np.empty((maxT, L))
    beta = np.empty((maxT, L))
    scale = np.empty(maxT)
    tmp = np.empty(L)
    total = 0.0
    keep = pm.shape[0] > 0
    weighted = sw.shape[0] > 0
    acc_s = np.zeros((L, L) if weighted else (0, 0))
    E_s = np.zeros((L, L) if weighted else (0, 0))
    for s in range(s0, s1):
        t0 = seq_ptr[s]
        t1 = seq_ptr[s + 1]
        T = t1 - t0
        r0 = t0 - T0
        ws = 1.0
        if weighted:
            ws = sw[s]
            if ws == 0.0:
                _zero_rows(node[r0:r0 + T], 0, T)
                _zero_rows(pm, t0, t1)
                continue
            acc_s[:, :] = 0.0
            E_s[:, :] = 0.0
        if T == 0:
            continue
        A = acc_s if weighted else acc
        EE = E_s if weighted else E
        logz = np.nan
        if use_exp:
            _hybrid_emissions(tok_ptr, attr, val, t0, t1, attr_ptr, feat_label, expw, row, expWd, True, es)
            # NaN comes only from the forward pass, before anything was added
            # to acc, so the robust path below can simply take over.
            logz = _fb_exp(T, es, expM, expMT, tmax, alpha, beta, scale, tmp, A)
        if not np.isfinite(logz):
            _hybrid_emissions(tok_ptr, attr, val, t0, t1, attr_ptr, feat_label, w, row, Wd, False, score)
            add_scores(xs, t0, T, score)
            logz = forward_backward_edges(score, T, trans, expM, tmax, es, alpha, beta, scale, EE)
        total += ws * logz            # ws = 1 without weights: the same numbers
        if weighted:
            for i in range(L):
                for j in range(L):
                    acc[i, j] += ws * acc_s[i, j]
                    E[i, j] += ws * E_s[i, j]
        for t in range(T):
            for l in range(L):
                node[r0 + t, l] = alpha[t, l] * beta[t, l] * ws
        if keep:
            for t in range(T):
                for l in range(L):
                    pm[t0 + t, l] = node[r0 + t, l]
    return total


@njit(cache=True, nogil=True, fastmath=FAST)
def _scatter_runs(r0, r1, run_ptr, run_attr, tok, val, ptr, col, store, g, off):
    """The attribute-partitioned reduction: for the runs r0..r1-1 of an occurrence index
    (:mod:`crfkit.reduction`), ``g[off + k] += store[t, col[k]] * value`` for every occurrence
    (t, value) of the run's attribute ``a`` and every feature ``k`` of ``a`` (``ptr[a]:ptr[a + 1]``).
    ``val`` empty: every value is 1.  ``col`` empty (implicit label pairs, kernels.chain): every
    attribute's features are the W columns in order."""
    has_val = val.shape[0] > 0
    W = store.shape[1]
    for r in range(r0, r1):
        a = run_attr[r]
        k0 = ptr[a]
        k1 = ptr[a + 1]
        if k1 == k0:
            continue
        # an attribute with a feature for every column, in column order (support all): contiguous adds
        # that vectorise (the same sums in the same order as the gather below)
        full = k1 - k0 == W
        if full and col.shape[0] > 0:
            for q in range(W):
                if col[k0 + q] != q:
                    full = False
                    break
        if full:
            gk = g[off + k0:off + k1]
            for o in range(run_ptr[r], run_ptr[r + 1]):
                st = store[tok[o]]
                if has_val:
                    v = val[o]
                    for q in range(W):
                        gk[q] += st[q] * v
                else:
                    for q in range(W):
                        gk[q] += st[q]
            continue
        for o in range(run_ptr[r], run_ptr[r + 1]):
            t = tok[o]
            if has_val:
                v = val[o]
                for k in range(k0, k1):
                    g[off + k] += store[t, col[k]] * v
            else:
                for k in range(k0, k1):
                    g[off + k] += store[t, col[k]]


@njit(parallel=True, cache=True, fastmath=FAST)
def _zero(g):
    for k in prange(g.shape[0]):
        g[k] = 0.0


@njit(parallel=True, cache=True, fastmath=FAST)
def _finish_gradient(w, g, emp, emp_idx, emp_val, gscale, l2):
    """``g = (g - emp) * gscale + l2 * w`` in place (g holds the expected counts); returns (w . emp, ||w||^2).

    ``emp`` empty: the empirical counts are the sparse ``emp_val`` at ``emp_idx`` (ascending), the rest
    0 (a large candidate space: most features never fire with their gold labels); the same values (the
    subtraction first, then the same products)."""
    gold = 0.0
    wsq = 0.0
    if emp.shape[0] == 0:
        for q in range(emp_idx.shape[0]):
            k = emp_idx[q]
            g[k] -= emp_val[q]
            gold += w[k] * emp_val[q]
        for k in prange(g.shape[0]):
            wk = w[k]
            g[k] = g[k] * gscale + l2 * wk
            wsq += wk * wk
        return gold, wsq
    for k in prange(g.shape[0]):
        wk = w[k]
        g[k] = (g[k] - emp[k]) * gscale + l2 * wk
        gold += wk * emp[k]
        wsq += wk * wk
    return gold, wsq


@njit(cache=True, nogil=True, fastmath=FAST)
def _store_rows(seq_ptr, blocks):
    m = 1
    for b in range(blocks.shape[0] - 1):
        d = seq_ptr[blocks[b + 1]] - seq_ptr[blocks[b]]
        if d > m:
            m = d
    return m


@njit(parallel=True, cache=True, fastmath=FAST)
def loss_grad(seq_ptr, tok_ptr, attr, val, y, attr_ptr, feat_label, trans_index,
              w, n_state, plan, g_out, emp, emp_idx, emp_val, exp_ok, gscale, l2, row, dense_attr, xs, pm, sw):
    """Returns (sum over the corpus of -sw_i log p(y_i|x_i), ||w||^2) and writes
    ``gscale * grad(that sum) + l2 * w`` to g_out (one pass for all of it).
    ``sw``: one scale per sequence (sample weights), empty for all 1.

    ``plan``: ``crfkit.reduction.GradPlan`` arrays (``Objective._plan_args``): blocks of sequences,
    their chunks (one per thread), and the occurrence index of the attributes with its groups (one
    per thread).  Per block, the chunks' forward-backward writes the node marginals into a store of
    the block's tokens, then each group adds the expected counts of the attributes it owns into
    ``g_out`` (the attribute-partitioned reduction): no per-thread gradient buffer.
    ``emp`` holds the empirical feature counts (:func:`empirical_counts`, with the same ``sw``), or is
    empty and ``emp_idx``/``emp_val`` hold the non-zero ones (:func:`_finish_gradient`).
    ``exp_ok``: the corpus is binary and the weights small enough that
    emissions may be built in the exp domain by products (no overflow).
    ``row``/``dense_attr`` (:func:`dense_rows`) pick the attributes whose emission weights are
    read as dense label rows.
    ``xs``/``pm``: extra emission scores in, node marginals out (see
    ``_fb_chunk``); the caller adds the dense block's expected counts
    ``gscale * X^T pm`` to ``g_out`` (its empirical counts and L2 term are
    already in, from ``emp`` and ``w``).
    """
    blocks, chunks, run_ptr, run_attr, otok, oval, groups = plan
    trans = transition_matrix(w, 1.0, n_state, trans_index)
    L = trans.shape[0]
    tmax = trans.max()
    expM = np.exp(trans - tmax)
    expMT = expM.T.copy()
    exp_ok = exp_ok and tmax - trans.min() <= MAX_SCALED_TRANSITION_RANGE and xs.shape[0] == 0
    R = dense_attr.shape[0]
    Wd = np.empty((R, L))
    _fill_dense(w, attr_ptr, feat_label, dense_attr, 0.0, Wd)
    if exp_ok:
        expw = np.exp(w[:n_state])
        expWd = np.exp(Wd)
    else:
        expw = np.empty(0)
        expWd = np.empty((0, L))
    _zero(g_out)
    nc = chunks.shape[1] - 1
    ng = groups.shape[1] - 1
    logzs = np.zeros(nc)
    E = np.zeros((nc, L, L))
    acc = np.zeros((nc, L, L))
    node = np.empty((_store_rows(seq_ptr, blocks), L))
    for b in range(blocks.shape[0] - 1):
        T0 = seq_ptr[blocks[b]]
        for c in prange(nc):
            logzs[c] += _fb_chunk(seq_ptr, tok_ptr, attr, val, attr_ptr, feat_label, w, expw, exp_ok, row, Wd,
                                  expWd, trans, expM, expMT, tmax, chunks[b, c], chunks[b, c + 1], T0, node,
                                  E[c], acc[c], xs, pm, sw)
        for j in prange(ng):
            _scatter_runs(groups[b, j], groups[b, j + 1], run_ptr, run_attr, otok, oval, attr_ptr, feat_label,
                          node, g_out, 0)
    for i in range(L):
        for j in range(L):
            k = trans_index[i, j]
            if k >= 0:
                for c in range(nc):
                    g_out[n_state + k] += E[c, i, j] + acc[c, i, j] * expM[i, j]
    gold, wsq = _finish_gradient(w, g_out, emp, emp_idx, emp_val, gscale, l2)
    return logzs.sum() - gold, wsq


@njit(cache=True, nogil=True, fastmath=FAST)
def _chunk_loss(seq_ptr, tok_ptr, attr, val, y, attr_ptr, feat_label, w, trans, expM, tmax, s0, s1, xs, sw):
    L = trans.shape[0]
    maxT = _max_len(seq_ptr, s0, s1)
    if maxT == 0:
        return 0.0
    score = np.empty((maxT, L))
    es = np.empty((maxT, L))
    alpha = np.empty((maxT, L))
    scale = np.empty(maxT)
    loss = 0.0
    for s in range(s0, s1):
        t0 = seq_ptr[s]
        T = seq_ptr[s + 1] - t0
        ws = _seq_weight(sw, s)
        if T == 0 or ws == 0.0:
            continue
        emissions(tok_ptr, attr, val, t0, t0 + T, attr_ptr, feat_label, w, 1.0, score)
        add_scores(xs, t0, T, score)
        nll = log_partition(score, T, trans, expM, tmax, es, alpha, scale) - gold_score(score, y, t0, T, trans)
        loss += nll if sw.shape[0] == 0 else ws * nll
    return loss


@njit(parallel=True, cache=True, fastmath=FAST)
def loss_only(seq_ptr, tok_ptr, attr, val, y, attr_ptr, feat_label, trans_index, w, n_state, bounds, xs, sw):
    """Sum over the corpus of -sw_i log p(y_i|x_i), without the gradient (forward pass only).
    ``xs``: extra emission scores (n_tokens x L, or no rows); ``sw``: scales per sequence (empty: all 1)."""
    trans = transition_matrix(w, 1.0, n_state, trans_index)
    tmax = trans.max()
    expM = np.exp(trans - tmax)
    n_chunks = len(bounds) - 1
    losses = np.zeros(n_chunks)
    for c in prange(n_chunks):
        losses[c] = _chunk_loss(seq_ptr, tok_ptr, attr, val, y, attr_ptr, feat_label, w,
                                trans, expM, tmax, bounds[c], bounds[c + 1], xs, sw)
    return losses.sum()


@njit(parallel=True, cache=True, fastmath=FAST)
def tag_codes_all(codes, cnt, val, seq_ptr, ent_ptr, bounds, attr_ptr, feat_label, w, trans, out, path_score):
    """:func:`crfkit.kernels.chain.tag_codes_seqs` over the chunks of sequences ``bounds`` on the thread
    pool: the Viterbi labels of a batch given as attribute codes (``CRFModel.tag_dicts``)."""
    for c in prange(len(bounds) - 1):
        tag_codes_seqs(codes, cnt, val, seq_ptr, ent_ptr, bounds[c], bounds[c + 1], attr_ptr, feat_label, w, trans,
                       out, path_score)


@njit(parallel=True, cache=True, fastmath=FAST)
def decode_all(seq_ptr, tok_ptr, attr, val, attr_ptr, feat_label, trans_index, w, n_state, bounds,
               ids, path_score, marg, logz, labels, label_score, xs, full):
    """Per sequence, whatever is asked for (a zero-length output array means "not wanted"):

    * ``ids`` (n_tokens) and ``path_score`` (n_seq): the Viterbi path and its score;
    * ``marg`` (n_tokens x L) and ``logz`` (n_seq): node marginals and log Z;
    * ``label_score`` (n_seq): the score of the given path ``labels`` (n_tokens).

    Emission scores are computed once per sequence for all of them; ``xs``
    (n_tokens x L, or no rows) holds extra emission scores (the dense block's);
    ``full``: :func:`crfkit.kernels.chain.full_rows` (those rows read as
    vectors), or an empty array when no attribute has a full row (the plain
    scatter is then a little faster).
    """
    trans = transition_matrix(w, 1.0, n_state, trans_index)
    tmax = trans.max()
    expM = np.exp(trans - tmax)
    L = trans.shape[0]
    want_path = ids.shape[0] > 0
    want_marg = marg.shape[0] > 0
    want_score = label_score.shape[0] > 0
    n_chunks = len(bounds) - 1
    for c in prange(n_chunks):
        s0 = bounds[c]
        s1 = bounds[c + 1]
        maxT = max(_max_len(seq_ptr, s0, s1), 1)
        score = np.empty((maxT, L))
        es = np.empty((maxT, L))
        alpha = np.empty((maxT, L))
        beta = np.empty((maxT, L))
        scale = np.empty(maxT)
        for s in range(s0, s1):
            t0 = seq_ptr[s]
            T = seq_ptr[s + 1] - t0
            if T == 0:
                if want_path:
                    path_score[s] = 0.0
                if want_marg:
                    logz[s] = 0.0
                if want_score:
                    label_score[s] = 0.0
                continue
            if full.shape[0] > 0:
                emissions_rows(tok_ptr, attr, val, t0, t0 + T, attr_ptr, feat_label, full, w, 1.0, score)
            else:
                emissions(tok_ptr, attr, val, t0, t0 + T, attr_ptr, feat_label, w, 1.0, score)
            add_scores(xs, t0, T, score)
            if want_path:
                path_score[s] = viterbi(score, T, trans, ids, t0)
            if want_score:
                label_score[s] = gold_score(score, labels, t0, T, trans)
            if want_marg:
                logz[s] = forward_backward(score, T, trans, expM, tmax, es, alpha, beta, scale)
                for t in range(T):
                    for l in range(L):
                        marg[t0 + t, l] = alpha[t, l] * beta[t, l]


# ---------------------------------------------------------------------------
# bigram-observation features: position-dependent transitions


@njit(cache=True, nogil=True, fastmath=FAST)
def bigram_empirical_counts(seq_ptr, btok_ptr, battr, bval, y, battr_ptr, bfeat_pair, L, boff, out, sw):
    """Add the gold-labelling counts of the bigram-observation features into out[boff:]:
    at every token t after the first of its sequence, ``bval`` (times the sequence's
    scale ``sw[s]``; empty ``sw``: 1) for each feature of its bigram attributes whose
    label pair is (y[t-1], y[t])."""
    bigram_empirical_counts_range(seq_ptr, btok_ptr, battr, bval, y, battr_ptr, bfeat_pair, L, 0,
                                  battr_ptr.shape[0] - 1, out[boff:], sw)


@njit(cache=True, nogil=True, fastmath=FAST)
def bigram_empirical_counts_range(seq_ptr, btok_ptr, battr, bval, y, battr_ptr, bfeat_pair, L, b0, b1, out, sw):
    """:func:`bigram_empirical_counts` for the bigram attributes b0..b1-1 only, added into ``out[k -
    battr_ptr[b0]]`` (a buffer of their features alone): the same additions in the same order, so a
    candidate space's counts can be made a chunk of attributes at a time."""
    k0 = battr_ptr[b0]
    for s in range(len(seq_ptr) - 1):
        ws = _seq_weight(sw, s)
        for t in range(seq_ptr[s] + 1, seq_ptr[s + 1]):
            p = y[t - 1] * L + y[t]
            for e in range(btok_ptr[t], btok_ptr[t + 1]):
                b = battr[e]
                if b < b0 or b >= b1:
                    continue
                kb = battr_ptr[b]
                if bfeat_pair.shape[0] == 0:         # implicit pairs (kernels.chain): pair p is feature kb + p
                    out[kb + p - k0] += ws * bval[e]
                    continue
                for k in range(kb, battr_ptr[b + 1]):
                    if bfeat_pair[k] == p:
                        out[k - k0] += ws * bval[e]


@njit(cache=True, nogil=True, fastmath=FAST)
def _scatter_sequence(btok_ptr, battr, bval, t0, T, r0, edge, ptr, col, full, binary, g, off):
    """One thread's bigram part of the gradient, added per sequence while its edge rows are in cache
    (``loss_grad_bigram`` with one chunk): ``g[off + k] += edge[r0 + t][col[k]] * value`` for every
    bigram attribute occurrence at positions 1..T-1 (a first token has no edge) and every feature k of
    it.  The same products added in the same order as :func:`_scatter_runs` over the block store (for a
    feature: its occurrences in token order), so the same bits; ``binary``: no values (all 1)."""
    W = edge.shape[1] * edge.shape[2]
    ef = edge.reshape((edge.shape[0], W))
    for t in range(1, T):
        st = ef[r0 + t]
        for e in range(btok_ptr[t0 + t], btok_ptr[t0 + t + 1]):
            a = battr[e]
            k0 = ptr[a]
            k1 = ptr[a + 1]
            if full[a]:
                gk = g[off + k0:off + k1]
                if binary:
                    for q in range(W):
                        gk[q] += st[q]
                else:
                    v = bval[e]
                    for q in range(W):
                        gk[q] += st[q] * v
            elif binary:
                for k in range(k0, k1):
                    g[off + k] += st[col[k]]
            else:
                v = bval[e]
                for k in range(k0, k1):
                    g[off + k] += st[col[k]] * v


@njit(cache=True, nogil=True, fastmath=FAST)
def _fb_chunk_bigram(seq_ptr, tok_ptr, attr, val, btok_ptr, battr, bval, attr_ptr, feat_label, battr_ptr,
                     bfeat_pair, w, row, Wd, boff, trans, expM0, tmax, s0, s1, T0, node, edge, E, xs, pm, sw,
                     gd, gptr, gcol, gfull, gbin):
    """``_fb_chunk`` for a corpus with bigram attributes: sum of log Z over sequences s0..s1-1, node
    marginals into the block store ``node`` (and ``pm``), edge marginals of (t-1, t) into the block
    store ``edge`` (row t - T0, for every token but a sequence's first) and summed into ``E``.
    ``sw``: the sequences' scales (empty: all 1), by which log Z and the marginals are multiplied.
    ``gd`` non-empty: the gradient, into which each sequence's bigram part is added at once
    (:func:`_scatter_sequence` with ``gptr``, ``gcol``, ``gfull``, ``gbin``) instead of by the reduction."""
    L = trans.shape[0]
    maxT = _max_len(seq_ptr, s0, s1)
    if maxT == 0:
        return 0.0
    score = np.empty((maxT, L))
    es = np.empty((maxT, L))
    alpha = np.empty((maxT, L))
    beta = np.empty((maxT, L))
    scale = np.empty(maxT)
    M = np.empty((maxT, L, L))
    expM = np.empty((maxT, L, L))
    tmx = np.empty(maxT)
    total = 0.0
    keep = pm.shape[0] > 0
    for s in range(s0, s1):
        t0, t1, T, r0, ws = _bigram_sequence(seq_ptr, T0, sw, s, node, edge, pm)
        if T == 0 or ws == 0.0:
            continue
        _hybrid_emissions(tok_ptr, attr, val, t0, t1, attr_ptr, feat_label, w, row, Wd, False, score)
        add_scores(xs, t0, T, score)
        total += ws * _dense_bigram_sequence(btok_ptr, battr, bval, t0, T, r0, battr_ptr, bfeat_pair, w, boff,
                                             trans, M, tmx, expM0, tmax, expM, score, es, alpha, beta, scale, ws,
                                             edge, node, E, pm, keep, gd, gptr, gcol, gfull, gbin)
    return total


@njit(cache=True, nogil=True, fastmath=FAST)
def _fb_chunk_bigram_sparse(seq_ptr, tok_ptr, attr, val, btok_ptr, battr, bval, attr_ptr, feat_label, battr_ptr,
                            bfeat_pair, w, row, Wd, boff, trans, expM0, tmax, tr_pair, tr_s, tr_e, s0, s1, T0,
                            node, edge, E, xs, pm, sw, counts, gd, gptr, gcol, gfull, gbin):
    """:func:`_fb_chunk_bigram` by the sparse forward-backward recursions (Lavergne et al. 2010, 4.1;
    :mod:`crfkit.kernels.sparse_fb`): per position only the non-zero label-pair scores are listed and
    exponentiated (the transitions' exponentials ``tr_e`` are computed once per call), and the
    recursions cost O(L + listed pairs).  The same outputs (to rounding): log Z, node marginals, the
    full L x L edge marginals of every position (an unlisted pair's is ``alpha[t-1, i] * v_t(j)``, a
    product: no exponential), summed into ``E``.  ``counts`` receives += (positions, listed pairs), the
    sparsity of M.  A sequence whose pair scores leave the range of the scaled recursion
    (:func:`~crfkit.kernels.sparse_fb.pair_scores_ok`) takes the dense per-position path."""
    L = trans.shape[0]
    direct = gd.shape[0] > 0
    if _max_len(seq_ptr, s0, s1) == 0:
        return 0.0
    maxT, cap = pair_capacity(seq_ptr, btok_ptr, battr, battr_ptr, s0, s1, tr_pair.shape[0])
    score = np.empty((maxT, L))
    es = np.empty((maxT, L))
    alpha = np.empty((maxT, L))
    beta = np.empty((maxT, L))
    nb = np.empty((maxT, L))
    scale = np.empty(2 * maxT)
    acc = np.empty(L)
    mark = np.empty(L)
    v = np.empty(L)
    cnt = np.empty(L, np.int64)
    slot = np.full(L * L, -1, np.int64)
    pair_ptr = np.empty(maxT + 1, np.int64)
    pf = np.empty(cap, np.int32)
    pt = np.empty(cap, np.int32)
    ps = np.empty(cap)
    em1 = np.empty(cap)
    enz = np.empty(cap)
    M = np.empty((0, L, L))
    expM = np.empty((0, L, L))
    tmx = np.empty(maxT)
    total = 0.0
    keep = pm.shape[0] > 0
    for s in range(s0, s1):
        t0, t1, T, r0, ws = _bigram_sequence(seq_ptr, T0, sw, s, node, edge, pm)
        if T == 0 or ws == 0.0:
            continue
        _hybrid_emissions(tok_ptr, attr, val, t0, t1, attr_ptr, feat_label, w, row, Wd, False, score)
        add_scores(xs, t0, T, score)
        n = sequence_pairs(btok_ptr, battr, bval, t0, T, battr_ptr, bfeat_pair, w, boff, tr_pair, tr_s, tr_e,
                           L, slot, pair_ptr, pf, pt, ps, em1)
        counts[0] += T - 1
        counts[1] += n
        if pair_scores_ok(ps[:n]):
            logz = sparse_forward_backward(score, T, pair_ptr, pf, pt, ps, nb, enz, alpha, beta, es, scale, em1,
                                           acc, mark, cnt, True)
            total += ws * logz
            for t in range(1, T):
                xi = edge[r0 + t]
                inv = ws / scale[t]
                for j in range(L):
                    v[j] = es[t, j] * beta[t, j] * inv
                for i in range(L):
                    a = alpha[t - 1, i]
                    for j in range(L):
                        xi[i, j] = a * v[j]
                for k in range(pair_ptr[t], pair_ptr[t + 1]):
                    xi[pf[k], pt[k]] = ws * enz[k]
                for i in range(L):
                    for j in range(L):
                        E[i, j] += xi[i, j]
            _store_nodes(nb, T, r0, t0, ws, node, pm, keep)
            if direct:
                _scatter_sequence(btok_ptr, battr, bval, t0, T, r0, edge, gptr, gcol, gfull, gbin, gd, boff)
            continue
        # out of the scaled sparse recursion's range: the dense per-position recursion
        if M.shape[0] < maxT:
            M = np.empty((maxT, L, L))
            expM = np.empty((maxT, L, L))
        total += ws * _dense_bigram_sequence(btok_ptr, battr, bval, t0, T, r0, battr_ptr, bfeat_pair, w, boff,
                                             trans, M, tmx, expM0, tmax, expM, score, es, alpha, beta, scale, ws,
                                             edge, node, E, pm, keep, gd, gptr, gcol, gfull, gbin)
    return total


@njit(parallel=True, cache=True, fastmath=FAST)
def loss_grad_bigram(seq_ptr, tok_ptr, attr, val, btok_ptr, battr, bval, attr_ptr, feat_label, trans_index,
                     battr_ptr, bfeat_pair, w, n_state, boff, plan, g_out, emp, emp_idx, emp_val, gscale, l2,
                     row, dense_attr, xs, pm, sw, sparse, counts):
    """:func:`loss_grad` for a corpus with bigram-observation attributes (weights of
    bigram feature k at ``w[boff + k]``): returns (sum of -sw_i log p(y_i|x_i), ||w||^2) and
    writes ``gscale * grad(that sum) + l2 * w`` to g_out.  No exp-domain emissions.
    ``plan`` adds the bigram attributes' occurrence index (the edge marginals of a block are
    stored too: ``L x L`` per token).  ``sparse``: the forward-backward recursions of
    :func:`_fb_chunk_bigram_sparse` (the same value and gradient to rounding), which add
    (positions, listed non-zero pair scores) of chunk ``c`` into ``counts[c]`` (n_chunks x 2);
    otherwise the standard per-position recursion (``counts`` untouched)."""
    blocks, chunks, run_ptr, run_attr, otok, oval, groups, brun_ptr, brun_attr, botok, boval, bgroups = plan
    # the scores are built from the non-zero bigram weights only (compact_bigram); the gradient covers all
    zptr, zpair, wz = compact_bigram(w, boff, battr_ptr, bfeat_pair, COMPACT_SHARE)
    if zptr.shape[0] == 0:
        zptr, zpair, wz = battr_ptr, bfeat_pair, w
    trans = transition_matrix(w, 1.0, n_state, trans_index)
    L = trans.shape[0]
    tmax = trans.max()
    expM0 = np.exp(trans - tmax)
    tr_pair, tr_s, tr_e = nonzero_transitions(trans)
    R = dense_attr.shape[0]
    Wd = np.empty((R, L))
    _fill_dense(w, attr_ptr, feat_label, dense_attr, 0.0, Wd)
    _zero(g_out)
    nc = chunks.shape[1] - 1
    ng = groups.shape[1] - 1
    logzs = np.zeros(nc)
    E = np.zeros((nc, L, L))
    rows = _store_rows(seq_ptr, blocks)
    node = np.empty((rows, L))
    edge = np.empty((rows, L, L))
    eflat = edge.reshape((rows, L * L))
    # one chunk (one thread): each sequence's bigram part goes into the gradient while its edge rows are in
    # cache (the same sums in the same order as the reduction's, which then skips them); several chunks:
    # the attribute-partitioned reduction over the block store
    direct = nc == 1
    gd = g_out if direct else np.empty(0)
    gfull = full_rows(battr_ptr, bfeat_pair, L * L) if direct else np.zeros(0, np.int8)
    gbin = boval.shape[0] == 0
    for b in range(blocks.shape[0] - 1):
        T0 = seq_ptr[blocks[b]]
        for c in prange(nc):
            if sparse:
                logzs[c] += _fb_chunk_bigram_sparse(seq_ptr, tok_ptr, attr, val, btok_ptr, battr, bval, attr_ptr,
                                                    feat_label, zptr, zpair, wz, row, Wd, boff, trans,
                                                    expM0, tmax, tr_pair, tr_s, tr_e, chunks[b, c],
                                                    chunks[b, c + 1], T0, node, edge, E[c], xs, pm, sw, counts[c],
                                                    gd, battr_ptr, bfeat_pair, gfull, gbin)
            else:
                logzs[c] += _fb_chunk_bigram(seq_ptr, tok_ptr, attr, val, btok_ptr, battr, bval, attr_ptr,
                                             feat_label, zptr, zpair, wz, row, Wd, boff, trans, expM0, tmax,
                                             chunks[b, c], chunks[b, c + 1], T0, node, edge, E[c], xs, pm, sw,
                                             gd, battr_ptr, bfeat_pair, gfull, gbin)
        for j in prange(ng):
            _scatter_runs(groups[b, j], groups[b, j + 1], run_ptr, run_attr, otok, oval, attr_ptr, feat_label,
                          node, g_out, 0)
            if not direct:
                _scatter_runs(bgroups[b, j], bgroups[b, j + 1], brun_ptr, brun_attr, botok, boval, battr_ptr,
                              bfeat_pair, eflat, g_out, boff)
    for i in range(L):
        for j in range(L):
            k = trans_index[i, j]
            if k >= 0:
                for c in range(nc):
                    g_out[n_state + k] += E[c, i, j]
    gold, wsq = _finish_gradient(w, g_out, emp, emp_idx, emp_val, gscale, l2)
    return logzs.sum() - gold, wsq


@njit(cache=True, nogil=True, fastmath=FAST)
def _chunk_loss_bigram(seq_ptr, tok_ptr, attr, val, btok_ptr, battr, bval, y, attr_ptr, feat_label,
                       battr_ptr, bfeat_pair, w, boff, trans, expM0, tmax, s0, s1, xs, sw):
    L = trans.shape[0]
    maxT = _max_len(seq_ptr, s0, s1)
    if maxT == 0:
        return 0.0
    score = np.empty((maxT, L))
    es = np.empty((maxT, L))
    alpha = np.empty((maxT, L))
    scale = np.empty(maxT)
    M = np.empty((maxT, L, L))
    expM = np.empty((maxT, L, L))
    tmx = np.empty(maxT)
    loss = 0.0
    for s in range(s0, s1):
        t0 = seq_ptr[s]
        T = seq_ptr[s + 1] - t0
        ws = _seq_weight(sw, s)
        if T == 0 or ws == 0.0:
            continue
        emissions(tok_ptr, attr, val, t0, t0 + T, attr_ptr, feat_label, w, 1.0, score)
        add_scores(xs, t0, T, score)
        rng = bigram_transitions(btok_ptr, battr, bval, t0, T, battr_ptr, bfeat_pair, w, boff, trans, M, tmx,
                                 expM0, tmax, expM)
        loss += ws * (pd_log_partition(score, T, M, tmx, rng, expM, es, alpha, scale)
                      - pd_gold_score(score, y, t0, T, M))
    return loss


@njit(parallel=True, cache=True, fastmath=FAST)
def loss_only_bigram(seq_ptr, tok_ptr, attr, val, btok_ptr, battr, bval, y, attr_ptr, feat_label, trans_index,
                     battr_ptr, bfeat_pair, w, n_state, boff, bounds, xs, sw):
    """:func:`loss_only` for a corpus with bigram-observation attributes (``sw``: scales per sequence)."""
    zptr, zpair, wz = compact_bigram(w, boff, battr_ptr, bfeat_pair, COMPACT_SHARE)
    if zptr.shape[0] == 0:
        zptr, zpair, wz = battr_ptr, bfeat_pair, w
    trans = transition_matrix(w, 1.0, n_state, trans_index)
    tmax = trans.max()
    expM0 = np.exp(trans - tmax)
    n_chunks = len(bounds) - 1
    losses = np.zeros(n_chunks)
    for c in prange(n_chunks):
        losses[c] = _chunk_loss_bigram(seq_ptr, tok_ptr, attr, val, btok_ptr, battr, bval, y, attr_ptr,
                                       feat_label, zptr, zpair, wz, boff, trans, expM0, tmax,
                                       bounds[c], bounds[c + 1], xs, sw)
    return losses.sum()


@njit(parallel=True, cache=True, fastmath=FAST)
def decode_all_bigram(seq_ptr, tok_ptr, attr, val, btok_ptr, battr, bval, attr_ptr, feat_label, trans_index,
                      battr_ptr, bfeat_pair, w, n_state, boff, bounds,
                      ids, path_score, marg, logz, labels, label_score, xs):
    """:func:`decode_all` for a corpus with bigram-observation attributes (same outputs)."""
    zptr, zpair, wz = compact_bigram(w, boff, battr_ptr, bfeat_pair, COMPACT_SHARE)
    if zptr.shape[0] == 0:
        zptr, zpair, wz = battr_ptr, bfeat_pair, w
    trans = transition_matrix(w, 1.0, n_state, trans_index)
    L = trans.shape[0]
    tmax = trans.max()
    expM0 = np.exp(trans - tmax)
    want_path = ids.shape[0] > 0
    want_marg = marg.shape[0] > 0
    want_score = label_score.shape[0] > 0
    n_chunks = len(bounds) - 1
    for c in prange(n_chunks):
        s0 = bounds[c]
        s1 = bounds[c + 1]
        maxT = max(_max_len(seq_ptr, s0, s1), 1)
        score = np.empty((maxT, L))
        es = np.empty((maxT, L))
        alpha = np.empty((maxT, L))
        beta = np.empty((maxT, L))
        scale = np.empty(maxT)
        M = np.empty((maxT, L, L))
        expM = np.empty((maxT if want_marg else 0, L, L))
        tmx = np.empty(maxT)
        for s in range(s0, s1):
            t0 = seq_ptr[s]
            T = seq_ptr[s + 1] - t0
            if T == 0:
                if want_path:
                    path_score[s] = 0.0
                if want_marg:
                    logz[s] = 0.0
                if want_score:
                    label_score[s] = 0.0
                continue
            emissions(tok_ptr, attr, val, t0, t0 + T, attr_ptr, feat_label, w, 1.0, score)
            add_scores(xs, t0, T, score)
            rng = bigram_transitions(btok_ptr, battr, bval, t0, T, zptr, zpair, wz, boff, trans, M, tmx,
                                     expM0, tmax, expM)
            if want_path:
                path_score[s] = pd_viterbi(score, T, M, ids, t0)
            if want_score:
                label_score[s] = pd_gold_score(score, labels, t0, T, M)
            if want_marg:
                logz[s] = pd_forward_backward(score, T, M, tmx, rng, expM, es, alpha, beta, scale)
                pd_node(T, alpha, beta, scale)
                for t in range(T):
                    for l in range(L):
                        marg[t0 + t, l] = alpha[t, l]
