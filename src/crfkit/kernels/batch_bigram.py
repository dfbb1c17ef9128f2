"""Full-batch kernels over a corpus with bigram-observation features (position-dependent
transitions, ``chain_pd.bigram_transitions``): empirical counts, objective and gradient (dense or
sparse listed pairs), loss alone, and Viterbi decoding, chunked over numba's threads as in
:mod:`crfkit.kernels.batch`.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .batch_common import (
    fill_dense,
    finish_gradient,
    hybrid_emissions,
    max_len,
    scatter_runs,
    seq_weight,
    store_rows,
    zero,
    zero_rows,
)
from .chain_emit import add_scores, emissions, full_rows, transition_matrix
from .chain_exp import FAST
from .chain_pd import (
    bigram_transitions,
    compact_bigram,
    pd_edge,
    pd_forward_backward,
    pd_gold_score,
    pd_log_partition,
    pd_node,
)
from .chain_sparse import sparse_forward_backward
from .chain_viterbi import pd_viterbi
from .sparse_fb import nonzero_transitions, pair_capacity, pair_scores_ok, sequence_pairs

# compact_bigram's threshold: the non-zero bigram weights are listed apart when at most this share
# of them is non-zero (the list costs up to 0.3 x 12 bytes per candidate feature; it saves the
# per-position reads of the zeros)
COMPACT_SHARE = 0.3


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
def _fb_chunk_bigram(
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
):
    """``_fb_chunk`` for a corpus with bigram attributes: sum of log Z over sequences s0..s1-1, node
    marginals into the block store ``node`` (and ``pm``), edge marginals of (t-1, t) into the block
    store ``edge`` (row t - T0, for every token but a sequence's first) and summed into ``E``.
    ``sw``: the sequences' scales (empty: all 1), by which log Z and the marginals are multiplied.
    ``gd`` non-empty: the gradient, into which each sequence's bigram part is added at once
    (:func:`_scatter_sequence` with ``gptr``, ``gcol``, ``gfull``, ``gbin``) instead of by the
    reduction."""
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
    total = 0.0
    keep = pm.shape[0] > 0
    for s in range(s0, s1):
        t0, t1, T, r0, ws = _bigram_sequence(seq_ptr, T0, sw, s, node, edge, pm)
        if T == 0 or ws == 0.0:
            continue
        hybrid_emissions(tok_ptr, attr, val, t0, t1, attr_ptr, feat_label, w, row, Wd, False, score)
        add_scores(xs, t0, T, score)
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


@njit(cache=True, nogil=True, fastmath=FAST)
def _fb_chunk_bigram_sparse(
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
    """:func:`_fb_chunk_bigram` by the sparse forward-backward recursions (Lavergne et al. 2010,
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


@njit(parallel=True, cache=True, fastmath=FAST)
def loss_grad_bigram(
    seq_ptr,
    tok_ptr,
    attr,
    val,
    btok_ptr,
    battr,
    bval,
    attr_ptr,
    feat_label,
    trans_index,
    battr_ptr,
    bfeat_pair,
    w,
    n_state,
    boff,
    plan,
    g_out,
    emp,
    emp_idx,
    emp_val,
    gscale,
    l2,
    row,
    dense_attr,
    xs,
    pm,
    sw,
    sparse,
    counts,
):
    """:func:`loss_grad` for a corpus with bigram-observation attributes (weights of
    bigram feature k at ``w[boff + k]``): returns (sum of -sw_i log p(y_i|x_i), ||w||^2) and
    writes ``gscale * grad(that sum) + l2 * w`` to g_out.  No exp-domain emissions.
    ``plan`` adds the bigram attributes' occurrence index (the edge marginals of a block are
    stored too: ``L x L`` per token).  ``sparse``: the forward-backward recursions of
    :func:`_fb_chunk_bigram_sparse` (the same value and gradient to rounding), which add
    (positions, listed non-zero pair scores) of chunk ``c`` into ``counts[c]`` (n_chunks x 2);
    otherwise the standard per-position recursion (``counts`` untouched)."""
    (
        blocks,
        chunks,
        run_ptr,
        run_attr,
        otok,
        oval,
        groups,
        brun_ptr,
        brun_attr,
        botok,
        boval,
        bgroups,
    ) = plan
    # the scores are built from the non-zero bigram weights only (compact_bigram); the gradient
    # covers all
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
    fill_dense(w, attr_ptr, feat_label, dense_attr, 0.0, Wd)
    zero(g_out)
    nc = chunks.shape[1] - 1
    ng = groups.shape[1] - 1
    logzs = np.zeros(nc)
    E = np.zeros((nc, L, L))
    rows = store_rows(seq_ptr, blocks)
    node = np.empty((rows, L))
    edge = np.empty((rows, L, L))
    eflat = edge.reshape((rows, L * L))
    # one chunk (one thread): each sequence's bigram part goes into the gradient while its edge rows
    # are in cache (the same sums in the same order as the reduction's, which then skips them);
    # several chunks: the attribute-partitioned reduction over the block store
    direct = nc == 1
    gd = g_out if direct else np.empty(0)
    gfull = full_rows(battr_ptr, bfeat_pair, L * L) if direct else np.zeros(0, np.int8)
    gbin = boval.shape[0] == 0
    for b in range(blocks.shape[0] - 1):
        T0 = seq_ptr[blocks[b]]
        for c in prange(nc):
            if sparse:
                logzs[c] += _fb_chunk_bigram_sparse(
                    seq_ptr,
                    tok_ptr,
                    attr,
                    val,
                    btok_ptr,
                    battr,
                    bval,
                    attr_ptr,
                    feat_label,
                    zptr,
                    zpair,
                    wz,
                    row,
                    Wd,
                    boff,
                    trans,
                    expM0,
                    tmax,
                    tr_pair,
                    tr_s,
                    tr_e,
                    chunks[b, c],
                    chunks[b, c + 1],
                    T0,
                    node,
                    edge,
                    E[c],
                    xs,
                    pm,
                    sw,
                    counts[c],
                    gd,
                    battr_ptr,
                    bfeat_pair,
                    gfull,
                    gbin,
                )
            else:
                logzs[c] += _fb_chunk_bigram(
                    seq_ptr,
                    tok_ptr,
                    attr,
                    val,
                    btok_ptr,
                    battr,
                    bval,
                    attr_ptr,
                    feat_label,
                    zptr,
                    zpair,
                    wz,
                    row,
                    Wd,
                    boff,
                    trans,
                    expM0,
                    tmax,
                    chunks[b, c],
                    chunks[b, c + 1],
                    T0,
                    node,
                    edge,
                    E[c],
                    xs,
                    pm,
                    sw,
                    gd,
                    battr_ptr,
                    bfeat_pair,
                    gfull,
                    gbin,
                )
        for j in prange(ng):
            scatter_runs(
                groups[b, j],
                groups[b, j + 1],
                run_ptr,
                run_attr,
                otok,
                oval,
                attr_ptr,
                feat_label,
                node,
                g_out,
                0,
            )
            if not direct:
                scatter_runs(
                    bgroups[b, j],
                    bgroups[b, j + 1],
                    brun_ptr,
                    brun_attr,
                    botok,
                    boval,
                    battr_ptr,
                    bfeat_pair,
                    eflat,
                    g_out,
                    boff,
                )
    for i in range(L):
        for j in range(L):
            k = trans_index[i, j]
            if k >= 0:
                for c in range(nc):
                    g_out[n_state + k] += E[c, i, j]
    gold, wsq = finish_gradient(w, g_out, emp, emp_idx, emp_val, gscale, l2)
    return logzs.sum() - gold, wsq


@njit(cache=True, nogil=True, fastmath=FAST)
def _chunk_loss_bigram(
    seq_ptr,
    tok_ptr,
    attr,
    val,
    btok_ptr,
    battr,
    bval,
    y,
    attr_ptr,
    feat_label,
    battr_ptr,
    bfeat_pair,
    w,
    boff,
    trans,
    expM0,
    tmax,
    s0,
    s1,
    xs,
    sw,
):
    L = trans.shape[0]
    maxT = max_len(seq_ptr, s0, s1)
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
        ws = seq_weight(sw, s)
        if T == 0 or ws == 0.0:
            continue
        emissions(tok_ptr, attr, val, t0, t0 + T, attr_ptr, feat_label, w, 1.0, score)
        add_scores(xs, t0, T, score)
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
        loss += ws * (
            pd_log_partition(score, T, M, tmx, rng, expM, es, alpha, scale)
            - pd_gold_score(score, y, t0, T, M)
        )
    return loss


@njit(parallel=True, cache=True, fastmath=FAST)
def loss_only_bigram(
    seq_ptr,
    tok_ptr,
    attr,
    val,
    btok_ptr,
    battr,
    bval,
    y,
    attr_ptr,
    feat_label,
    trans_index,
    battr_ptr,
    bfeat_pair,
    w,
    n_state,
    boff,
    bounds,
    xs,
    sw,
):
    """:func:`loss_only` for a corpus with bigram-observation attributes (``sw``: scales per
    sequence)."""
    zptr, zpair, wz = compact_bigram(w, boff, battr_ptr, bfeat_pair, COMPACT_SHARE)
    if zptr.shape[0] == 0:
        zptr, zpair, wz = battr_ptr, bfeat_pair, w
    trans = transition_matrix(w, 1.0, n_state, trans_index)
    tmax = trans.max()
    expM0 = np.exp(trans - tmax)
    n_chunks = len(bounds) - 1
    losses = np.zeros(n_chunks)
    for c in prange(n_chunks):
        losses[c] = _chunk_loss_bigram(
            seq_ptr,
            tok_ptr,
            attr,
            val,
            btok_ptr,
            battr,
            bval,
            y,
            attr_ptr,
            feat_label,
            zptr,
            zpair,
            wz,
            boff,
            trans,
            expM0,
            tmax,
            bounds[c],
            bounds[c + 1],
            xs,
            sw,
        )
    return losses.sum()


@njit(parallel=True, cache=True, fastmath=FAST)
def decode_all_bigram(
    seq_ptr,
    tok_ptr,
    attr,
    val,
    btok_ptr,
    battr,
    bval,
    attr_ptr,
    feat_label,
    trans_index,
    battr_ptr,
    bfeat_pair,
    w,
    n_state,
    boff,
    bounds,
    ids,
    path_score,
    marg,
    logz,
    labels,
    label_score,
    xs,
):
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
        maxT = max(max_len(seq_ptr, s0, s1), 1)
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
            rng = bigram_transitions(
                btok_ptr,
                battr,
                bval,
                t0,
                T,
                zptr,
                zpair,
                wz,
                boff,
                trans,
                M,
                tmx,
                expM0,
                tmax,
                expM,
            )
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
