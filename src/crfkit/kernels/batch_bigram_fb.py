"""The per-sequence and per-chunk work of the bigram-observation batch kernels
(:mod:`crfkit.kernels.batch_bigram`): a sequence's marginals by the per-position recursion, the
empirical counts of the bigram features, and one chunk's forward-backward with its part of the
gradient (dense, or over the sparse listed pairs).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .batch_common import (
    hybrid_emissions,
    max_len,
    seq_weight,
    zero_rows,
)
from .chain_emit import add_scores
from .chain_exp import FAST, MAX_SCALED_TRANSITION_RANGE, back_step
from .chain_pd import (
    based_transitions,
    based_work,
    bigram_transitions,
    pd_edge,
    pd_forward_backward,
    pd_node,
    pd_scaled_forward,
)
from .chain_sparse import sparse_forward_backward
from .sparse_fb import pair_capacity, pair_scores_ok, sequence_pairs


@njit(cache=True, nogil=True, fastmath=FAST)
def _store_nodes(m, T, r0, t0, ws, node, pm, keep):
    """A sequence's node marginals m[:T] times its weight into node[r0:] (and pm[t0:] when
    ``keep``)."""
    L = m.shape[1]
    for t in range(T):
        for l in range(L):
            x = m[t, l] * ws
            node[r0 + t, l] = x
            if keep:
                pm[t0 + t, l] = x


@njit(cache=True, nogil=True, fastmath=FAST)
def _dense_bigram_sequence(
    btok_ptr,
    battr,
    bval,
    t0,
    T,
    r0,
    battr_ptr,
    bfeat_pair,
    w,
    boff,
    trans,
    M,
    tmx,
    expM0,
    tmax,
    expM,
    score,
    es,
    alpha,
    beta,
    scale,
    ws,
    edge,
    node,
    E,
    pm,
    keep,
    gd,
    gptr,
    gcol,
    gfull,
    gbin,
):
    """One sequence of a bigram-observation chunk by the per-position recursion (its emission scores
    in ``score``): weighted edge marginals into edge[r0 + t] and summed into E, weighted node
    marginals stored (:func:`_store_nodes`), and with ``gd`` non-empty (one chunk) its bigram part
    added into the gradient ``gd`` (:func:`_scatter_sequence`); returns log Z.  The standard chunk's
    body, and the sparse chunk's fallback out of its scaled range."""
    rng = bigram_transitions(
        btok_ptr,
        battr,
        bval,
        t0,
        T,
        battr_ptr,
        bfeat_pair,
        w,
        boff,
        trans,
        M,
        tmx,
        expM0,
        tmax,
        expM,
    )
    logz = bigram_sequence_marginals(
        t0, T, r0, M, tmx, rng, expM, score, es, alpha, beta, scale, ws, edge, node, E, pm, keep
    )
    if gd.shape[0] > 0:
        _scatter_sequence(btok_ptr, battr, bval, t0, T, r0, edge, gptr, gcol, gfull, gbin, gd, boff)
    return logz


@njit(cache=True, nogil=True, fastmath=FAST)
def _based_bigram_sequence(
    btok_ptr,
    battr,
    bval,
    t0,
    T,
    r0,
    battr_ptr,
    bfeat_pair,
    w,
    boff,
    trans,
    M,
    tmx,
    expM0,
    tmax,
    expM,
    score,
    es,
    alpha,
    beta,
    scale,
    tmp,
    v,
    ws,
    edge,
    node,
    E,
    pm,
    keep,
    gd,
    gptr,
    gcol,
    gfull,
    gbin,
    bases,
    work,
):
    """:func:`_dense_bigram_sequence` with the transition exponentials from the base matrices
    (:func:`~crfkit.kernels.chain_pd.based_transitions`; M[t] not built): the scaled recursion, the
    edge marginals weighted and summed into E in one pass.  The same outputs to rounding; a sequence
    out of the bases' reach (too many listed pairs at a position, a range over
    MAX_SCALED_TRANSITION_RANGE or a scale failure) takes :func:`_dense_bigram_sequence`."""
    L = score.shape[1]
    rng = based_transitions(
        btok_ptr, battr, bval, t0, T, battr_ptr, bfeat_pair, w, boff, bases, expM, tmx, work
    )
    logz = np.nan
    if rng <= MAX_SCALED_TRANSITION_RANGE:
        logz = pd_scaled_forward(score, T, M, tmx, expM, es, alpha, scale)
    if not np.isfinite(logz):
        return _dense_bigram_sequence(
            btok_ptr,
            battr,
            bval,
            t0,
            T,
            r0,
            battr_ptr,
            bfeat_pair,
            w,
            boff,
            trans,
            M,
            tmx,
            expM0,
            tmax,
            expM,
            score,
            es,
            alpha,
            beta,
            scale,
            ws,
            edge,
            node,
            E,
            pm,
            keep,
            gd,
            gptr,
            gcol,
            gfull,
            gbin,
        )
    for j in range(L):
        beta[T - 1, j] = 1.0
    for t in range(T - 2, -1, -1):
        back_step(beta, t, expM[t + 1], es, t + 1, 1.0 / scale[t + 1], tmp)
    # edge marginals xi[i, j] = alpha[t-1, i] expM[t, i, j] es[t, j] beta[t, j] / scale[t], times
    # the sequence's weight, written and summed into E in the same pass
    for t in range(1, T):
        xi = edge[r0 + t]
        Et = expM[t]
        inv = ws / scale[t]
        for j in range(L):
            v[j] = es[t, j] * beta[t, j]
        for i in range(L):
            a = alpha[t - 1, i] * inv
            for j in range(L):
                x = a * Et[i, j] * v[j]
                xi[i, j] = x
                E[i, j] += x
    for t in range(T):
        for l in range(L):
            alpha[t, l] *= beta[t, l]
    _store_nodes(alpha, T, r0, t0, ws, node, pm, keep)
    if gd.shape[0] > 0:
        _scatter_sequence(btok_ptr, battr, bval, t0, T, r0, edge, gptr, gcol, gfull, gbin, gd, boff)
    return logz


@njit(cache=True, nogil=True, fastmath=FAST)
def bigram_sequence_marginals(
    t0, T, r0, M, tmx, rng, expM, score, es, alpha, beta, scale, ws, edge, node, E, pm, keep
):
    """The recursion of :func:`_dense_bigram_sequence` once the transition scores M[t], their maxima
    tmx[t], largest range ``rng`` and shifted exponentials expM[t] are built
    (``bigram_transitions``; the per-example oracle builds expM its own way): forward-backward,
    weighted edge marginals into edge[r0 + t] and summed into E, weighted node marginals stored;
    returns log Z."""
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
    ws = seq_weight(sw, s)
    if ws == 0.0:
        zero_rows(node[r0 : r0 + T], 0, T)
        edge[r0 : r0 + T] = 0.0
        zero_rows(pm, t0, t1)
    return t0, t1, T, r0, ws


# ---------------------------------------------------------------------------
# bigram-observation features: position-dependent transitions


@njit(cache=True, nogil=True, fastmath=FAST)
def bigram_empirical_counts(
    seq_ptr, btok_ptr, battr, bval, y, battr_ptr, bfeat_pair, L, boff, out, sw
):
    """Add the gold-labelling counts of the bigram-observation features into out[boff:]:
    at every token t after the first of its sequence, ``bval`` (times the sequence's
    scale ``sw[s]``; empty ``sw``: 1) for each feature of its bigram attributes whose
    label pair is (y[t-1], y[t])."""
    bigram_empirical_counts_range(
        seq_ptr,
        btok_ptr,
        battr,
        bval,
        y,
        battr_ptr,
        bfeat_pair,
        L,
        0,
        battr_ptr.shape[0] - 1,
        out[boff:],
        sw,
    )


@njit(cache=True, nogil=True, fastmath=FAST)
def bigram_empirical_counts_range(
    seq_ptr, btok_ptr, battr, bval, y, battr_ptr, bfeat_pair, L, b0, b1, out, sw
):
    """:func:`bigram_empirical_counts` for the bigram attributes b0..b1-1 only, added into ``out[k -
    battr_ptr[b0]]`` (a buffer of their features alone): the same additions in the same order, so a
    candidate space's counts can be made a chunk of attributes at a time."""
    k0 = battr_ptr[b0]
    for s in range(len(seq_ptr) - 1):
        ws = seq_weight(sw, s)
        for t in range(seq_ptr[s] + 1, seq_ptr[s + 1]):
            p = y[t - 1] * L + y[t]
            for e in range(btok_ptr[t], btok_ptr[t + 1]):
                b = battr[e]
                if b < b0 or b >= b1:
                    continue
                kb = battr_ptr[b]
                if (
                    bfeat_pair.shape[0] == 0
                ):  # implicit pairs (kernels.chain): pair p is feature kb + p
                    out[kb + p - k0] += ws * bval[e]
                    continue
                for k in range(kb, battr_ptr[b + 1]):
                    if bfeat_pair[k] == p:
                        out[k - k0] += ws * bval[e]


@njit(cache=True, nogil=True, fastmath=FAST)
def _scatter_sequence(btok_ptr, battr, bval, t0, T, r0, edge, ptr, col, full, binary, g, off):
    """One thread's bigram part of the gradient, added per sequence while its edge rows are in cache
    (``loss_grad_bigram`` with one chunk): ``g[off + k] += edge[r0 + t][col[k]] * value`` for every
    bigram attribute occurrence at positions 1..T-1 (a first token has no edge) and every feature k
    of it.  The same products added in the same order as :func:`scatter_runs` over the block store
    (for a feature: its occurrences in token order), so the same bits; ``binary``: no values (all
    1)."""
    W = edge.shape[1] * edge.shape[2]
    ef = edge.reshape((edge.shape[0], W))
    for t in range(1, T):
        st = ef[r0 + t]
        for e in range(btok_ptr[t0 + t], btok_ptr[t0 + t + 1]):
            a = battr[e]
            k0 = ptr[a]
            k1 = ptr[a + 1]
            if full[a]:
                gk = g[off + k0 : off + k1]
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
def fb_chunk_bigram(
    seq_ptr,
    tok_ptr,
    attr,
    val,
    btok_ptr,
    battr,
    bval,
    attr_ptr,
    feat_label,
    battr_ptr,
    bfeat_pair,
    w,
    row,
    Wd,
    boff,
    trans,
    expM0,
    tmax,
    s0,
    s1,
    T0,
    node,
    edge,
    E,
    xs,
    pm,
    sw,
    gd,
    gptr,
    gcol,
    gfull,
    gbin,
    bases,
):
    """``_fb_chunk`` for a corpus with bigram attributes: sum of log Z over sequences s0..s1-1, node
    marginals into the block store ``node`` (and ``pm``), edge marginals of (t-1, t) into the block
    store ``edge`` (row t - T0, for every token but a sequence's first) and summed into ``E``.
    ``sw``: the sequences' scales (empty: all 1), by which log Z and the marginals are multiplied.
    ``gd`` non-empty: the gradient, into which each sequence's bigram part is added at once
    (:func:`_scatter_sequence` with ``gptr``, ``gcol``, ``gfull``, ``gbin``) instead of by the
    reduction.  ``bases``: :func:`~crfkit.kernels.chain_pd.bigram_bases` of the same weights (each
    sequence by :func:`_based_bigram_sequence`)."""
    L = trans.shape[0]
    maxT = max_len(seq_ptr, s0, s1)
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
    tmp = np.empty(L)
    v = np.empty(L)
    work = based_work(L)
    total = 0.0
    keep = pm.shape[0] > 0
    for s in range(s0, s1):
        t0, t1, T, r0, ws = _bigram_sequence(seq_ptr, T0, sw, s, node, edge, pm)
        if T == 0 or ws == 0.0:
            continue
        hybrid_emissions(tok_ptr, attr, val, t0, t1, attr_ptr, feat_label, w, row, Wd, False, score)
        add_scores(xs, t0, T, score)
        total += ws * _based_bigram_sequence(
            btok_ptr,
            battr,
            bval,
            t0,
            T,
            r0,
            battr_ptr,
            bfeat_pair,
            w,
            boff,
            trans,
            M,
            tmx,
            expM0,
            tmax,
            expM,
            score,
            es,
            alpha,
            beta,
            scale,
            tmp,
            v,
            ws,
            edge,
            node,
            E,
            pm,
            keep,
            gd,
            gptr,
            gcol,
            gfull,
            gbin,
            bases,
            work,
        )
    return total


@njit(cache=True, nogil=True, fastmath=FAST)
def fb_chunk_bigram_sparse(
    seq_ptr,
    tok_ptr,
    attr,
    val,
    btok_ptr,
    battr,
    bval,
    attr_ptr,
    feat_label,
    battr_ptr,
    bfeat_pair,
    w,
    row,
    Wd,
    boff,
    trans,
    expM0,
    tmax,
    tr_pair,
    tr_s,
    tr_e,
    s0,
    s1,
    T0,
    node,
    edge,
    E,
    xs,
    pm,
    sw,
    counts,
    gd,
    gptr,
    gcol,
    gfull,
    gbin,
):
    """:func:`fb_chunk_bigram` by the sparse forward-backward recursions (Lavergne et al. 2010,
    4.1; :mod:`crfkit.kernels.sparse_fb`): per position only the non-zero label-pair scores are
    listed and exponentiated (the transitions' exponentials ``tr_e`` are computed once per call),
    and the recursions cost O(L + listed pairs).  The same outputs (to rounding): log Z, node
    marginals, the full L x L edge marginals of every position (an unlisted pair's is
    ``alpha[t-1, i] * v_t(j)``, a product: no exponential), summed into ``E``.  ``counts``
    receives += (positions, listed pairs), the sparsity of M.  A sequence whose pair scores leave
    the range of the scaled recursion (:func:`~crfkit.kernels.sparse_fb.pair_scores_ok`) takes the
    dense per-position path."""
    L = trans.shape[0]
    direct = gd.shape[0] > 0
    if max_len(seq_ptr, s0, s1) == 0:
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
        hybrid_emissions(tok_ptr, attr, val, t0, t1, attr_ptr, feat_label, w, row, Wd, False, score)
        add_scores(xs, t0, T, score)
        n = sequence_pairs(
            btok_ptr,
            battr,
            bval,
            t0,
            T,
            battr_ptr,
            bfeat_pair,
            w,
            boff,
            tr_pair,
            tr_s,
            tr_e,
            L,
            slot,
            pair_ptr,
            pf,
            pt,
            ps,
            em1,
        )
        counts[0] += T - 1
        counts[1] += n
        if pair_scores_ok(ps[:n]):
            logz = sparse_forward_backward(
                score,
                T,
                pair_ptr,
                pf,
                pt,
                ps,
                nb,
                enz,
                alpha,
                beta,
                es,
                scale,
                em1,
                acc,
                mark,
                cnt,
                True,
            )
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
                _scatter_sequence(
                    btok_ptr, battr, bval, t0, T, r0, edge, gptr, gcol, gfull, gbin, gd, boff
                )
            continue
        # out of the scaled sparse recursion's range: the dense per-position recursion
        if M.shape[0] < maxT:
            M = np.empty((maxT, L, L))
            expM = np.empty((maxT, L, L))
        total += ws * _dense_bigram_sequence(
            btok_ptr,
            battr,
            bval,
            t0,
            T,
            r0,
            battr_ptr,
            bfeat_pair,
            w,
            boff,
            trans,
            M,
            tmx,
            expM0,
            tmax,
            expM,
            score,
            es,
            alpha,
            beta,
            scale,
            ws,
            edge,
            node,
            E,
            pm,
            keep,
            gd,
            gptr,
            gcol,
            gfull,
            gbin,
        )
    return total
