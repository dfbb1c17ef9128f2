"""Full-batch kernels over a corpus with bigram-observation features (position-dependent
transitions, ``chain_pd.bigram_transitions``): empirical counts, objective and gradient (dense or
sparse listed pairs), loss alone, and Viterbi decoding, chunked over numba's threads as in
:mod:`crfkit.kernels.batch`.

Where it lives: this module holds the corpus-level drivers (objective and gradient, loss, decoding);
:mod:`crfkit.kernels.batch_bigram_fb` the per-sequence and per-chunk work they run and the
empirical counts.  The names this module held before that split are re-exported here (``__all__``).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .batch_bigram_fb import (
    bigram_empirical_counts,
    bigram_empirical_counts_range,
    bigram_sequence_marginals,
    fb_chunk_bigram,
    fb_chunk_bigram_sparse,
)
from .batch_common import (
    fill_dense,
    finish_gradient,
    hybrid_emissions,
    max_len,
    ordered_sum,
    scatter_group,
    scatter_runs,
    seq_weight,
    store_rows,
    zero,
    zero_rows,
)
from .chain_emit import add_scores, emissions, full_rows, transition_matrix
from .chain_exp import FAST
from .chain_pd import (
    bigram_bases,
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

# the names this module held before it was split keep working from here
__all__ = [
    "add_scores",
    "bigram_empirical_counts",
    "bigram_empirical_counts_range",
    "bigram_sequence_marginals",
    "bigram_transitions",
    "compact_bigram",
    "COMPACT_SHARE",
    "decode_all_bigram",
    "emissions",
    "FAST",
    "fill_dense",
    "finish_gradient",
    "full_rows",
    "hybrid_emissions",
    "loss_grad_bigram",
    "loss_only_bigram",
    "max_len",
    "nonzero_transitions",
    "pair_capacity",
    "pair_scores_ok",
    "pd_edge",
    "pd_forward_backward",
    "pd_gold_score",
    "pd_log_partition",
    "pd_node",
    "pd_viterbi",
    "scatter_runs",
    "seq_weight",
    "sequence_pairs",
    "sparse_forward_backward",
    "store_rows",
    "transition_matrix",
    "zero",
    "zero_rows",
]


# compact_bigram's threshold: the non-zero bigram weights are listed apart when at most this share
# of them is non-zero (the list costs up to 0.3 x 12 bytes per candidate feature; it saves the
# per-position reads of the zeros)
COMPACT_SHARE = 0.3


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
    :func:`fb_chunk_bigram_sparse` (the same value and gradient to rounding), which add
    (positions, listed non-zero pair scores) of chunk ``c`` into ``counts[c]`` (n_chunks x 2);
    otherwise the standard per-position recursion (``counts`` untouched)."""
    (
        blocks,
        chunks,
        run_ptr,
        run_feat,
        otok,
        oval,
        groups,
        brun_ptr,
        brun_feat,
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
    # the standard recursion starts each position from a base matrix (chain_pd.bigram_bases: trans
    # plus the row of a heavy attribute, exponentiated once per call)
    bases = bigram_bases(wz, boff, zptr, zpair, trans)
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
                logzs[c] += fb_chunk_bigram_sparse(
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
                logzs[c] += fb_chunk_bigram(
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
                    bases,
                )
        for j in prange(ng):
            scatter_group(
                groups,
                b,
                nc,
                j,
                run_ptr,
                run_feat,
                otok,
                oval,
                feat_label,
                node,
                g_out,
                0,
            )
            if not direct:
                scatter_group(
                    bgroups,
                    b,
                    nc,
                    j,
                    brun_ptr,
                    brun_feat,
                    botok,
                    boval,
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
    return ordered_sum(logzs) - gold, wsq


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
    return ordered_sum(losses)


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
