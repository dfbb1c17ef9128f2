"""Numba kernels over a whole corpus: objective and gradient, Viterbi, marginals.

Corpora with bigram-observation attributes (position-dependent transition
scores, see ``chain_pd.bigram_transitions``) go through the ``*_bigram``
kernels of :mod:`crfkit.kernels.batch_bigram` and :mod:`crfkit.kernels.batch_bigram_fb`
(re-exported here); the others are untouched by them.
What both kinds share (chunking, sample weights, the emissions built from the occurrence index, the
block gradient's scatter) is in :mod:`crfkit.kernels.batch_common`; the exp-domain forward-backward
of ``loss_grad`` is :func:`crfkit.kernels.chain.forward_backward_vec` (explicit vector code on label
rows padded to a multiple of 8, :mod:`crfkit.kernels.simd`).

Work is split over sequences into chunks (see ``chunk_bounds``) that run on
numba's thread pool.  The full-batch gradient (``loss_grad``, ``loss_grad_bigram``) goes block by
block (``crfkit.reduction``): the chunks of a block build their tokens' emission scores in a small
store (run by run from the occurrence index), run forward-backward and leave the marginals there, then
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

from .batch_bigram import COMPACT_SHARE, decode_all_bigram, loss_grad_bigram, loss_only_bigram
from .batch_bigram_fb import (
    bigram_empirical_counts,
    bigram_empirical_counts_range,
    bigram_sequence_marginals,
)
from .batch_common import (
    chunk_bounds,
    dense_rows,
    emit_runs,
    fill_dense,
    finish_gradient,
    max_len,
    ordered_sum,
    scatter_group,
    seq_weight,
    store_rows,
    zero,
    zero_rows,
)
from .chain import (
    forward_backward,
    forward_backward_edges,
    forward_backward_exp,
    forward_backward_vec,
    gold_score,
    log_partition,
)
from .chain_emit import add_scores, emissions, emissions_rows, full_rows, transition_matrix
from .chain_exp import FAST, MAX_SCALED_TRANSITION_RANGE, exp_shift_into, row_sum
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
from .chain_viterbi import pd_viterbi, tag_codes_seqs, viterbi
from .simd import padded as padded_labels
from .simd import vmul
from .sparse_fb import nonzero_transitions, pair_capacity, pair_scores_ok, sequence_pairs

# the names this module held before it was split keep working from here
__all__ = [
    "forward_backward_exp",
    "add_scores",
    "bigram_empirical_counts",
    "bigram_empirical_counts_range",
    "bigram_sequence_marginals",
    "bigram_transitions",
    "chunk_bounds",
    "compact_bigram",
    "COMPACT_SHARE",
    "decode_all",
    "decode_all_bigram",
    "dense_rows",
    "emissions",
    "emissions_rows",
    "empirical_counts",
    "FAST",
    "forward_backward",
    "forward_backward_edges",
    "full_rows",
    "gold_score",
    "log_partition",
    "loss_grad",
    "loss_grad_bigram",
    "loss_only",
    "loss_only_bigram",
    "MAX_SCALED_TRANSITION_RANGE",
    "nonzero_transitions",
    "pair_capacity",
    "pair_scores_ok",
    "pd_edge",
    "pd_forward_backward",
    "pd_gold_score",
    "pd_log_partition",
    "pd_node",
    "pd_viterbi",
    "row_sum",
    "sequence_pairs",
    "sparse_forward_backward",
    "tag_codes_all",
    "tag_codes_seqs",
    "transition_matrix",
    "viterbi",
]


@njit(cache=True, nogil=True, fastmath=FAST)
def empirical_counts(
    seq_ptr, tok_ptr, attr, val, y, attr_ptr, feat_label, trans_index, n_state, out, sw
):
    """Feature counts of the gold labelling: sum_i sw_i phi(x_i, y_i) (constant during training;
    ``sw`` empty: all scales 1; ``val`` empty: every value 1)."""
    has_val = val.shape[0] > 0
    for k in range(out.shape[0]):
        out[k] = 0.0
    for s in range(len(seq_ptr) - 1):
        ws = seq_weight(sw, s)
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


@njit(cache=True, nogil=True, fastmath=FAST)
def _fb_chunk(
    seq_ptr,
    feat_label,
    w,
    expw,
    use_exp,
    rowk,
    Wd,
    expWd,
    trans,
    expM,
    expMT,
    tmax,
    s0,
    s1,
    T0,
    node,
    E,
    acc,
    xs,
    pm,
    sw,
    runs,
    occ,
):
    """Forward-backward over sequences s0..s1-1 (one chunk of a block): returns the sum of their
    log Z, writes their node marginals into the block store ``node`` (row t - T0 for token t) and
    into ``pm`` (row t, when it has rows: the dense block's gradient ``X^T pm`` is taken outside),
    and adds their edge statistics into ``E`` (the robust path's edge marginals) and ``acc`` (the
    exp path's, before the factor expM).

    The emission scores are built first, into the chunk's rows of the store, run by run from the
    occurrence index (``occ`` = (run_ptr, run_feat, tok, val); ``runs`` = (first, end) run of the
    chunk; :func:`emit_runs`): in the exp domain (products of ``expw``/``expWd``) with ``use_exp``,
    else as sums.  Each sequence's recursion then reads its rows and leaves its marginals in them.

    ``xs`` (n_tokens x L, or no rows): extra emission scores added to the attributes' (the dense
    block's ``X @ W``; the exp path must then be off).  The gold-path scores and empirical counts
    are constant-time terms the caller handles with the precomputed empirical count vector.
    ``sw``: the sequences' scales (empty: all 1): log Z, the node marginals and the edge statistics
    of sequence s are multiplied by sw[s] (the edges go through scratch matrices, added scaled); a
    sequence of scale 0 writes zero rows.
    """
    L = trans.shape[0]
    lp = node.shape[1]
    maxT = max_len(seq_ptr, s0, s1)
    if maxT == 0:
        return 0.0
    init = 1.0 if use_exp else 0.0
    for r in range(seq_ptr[s0] - T0, seq_ptr[s1] - T0):
        for l in range(L):
            node[r, l] = init
        for l in range(L, lp):
            node[r, l] = 0.0
    run_ptr, run_feat, otok, oval = occ
    # the chunk's runs of the occurrence index and the features' labels (emit_runs' first seven)
    index = (runs[0], runs[1], run_ptr, run_feat, otok, oval, feat_label)
    if use_exp:
        emit_runs(*index, expw, rowk, expWd, True, node)
    else:
        emit_runs(*index, w, rowk, Wd, False, node)
    # the exp path's work rows are padded like the store; the robust path's are L wide
    alpha = np.zeros((maxT, lp))
    beta = np.zeros((maxT, lp))
    tmp = np.zeros(lp)
    ones = np.ones(lp)
    tm = np.zeros((maxT, lp))
    colbuf = np.empty(maxT)
    scale = np.empty(maxT)
    score = np.empty((maxT, L))
    es = np.empty((maxT, L))
    alpha_r = np.empty((maxT, L))
    beta_r = np.empty((maxT, L))
    expM_r = expM[:L, :L].copy()
    total = 0.0
    keep = pm.shape[0] > 0
    weighted = sw.shape[0] > 0
    acc_s = np.zeros((lp, lp) if weighted else (0, 0))
    E_s = np.zeros((L, L) if weighted else (0, 0))
    sums = np.zeros((0, lp))  # the chunk's emission sums, made on the first overflow (below)
    for s in range(s0, s1):
        t0 = seq_ptr[s]
        t1 = seq_ptr[s + 1]
        T = t1 - t0
        r0 = t0 - T0
        ws = 1.0
        if weighted:
            ws = sw[s]
            if ws == 0.0:
                zero_rows(node, r0, r0 + T)
                zero_rows(pm, t0, t1)
                continue
            acc_s[:, :] = 0.0
            E_s[:, :] = 0.0
        if T == 0:
            continue
        A = acc_s if weighted else acc
        EE = E_s if weighted else E
        logz = np.nan
        if use_exp:
            # NaN comes only from the forward pass, before anything was added
            # to acc, so the robust path below can simply take over.
            logz = forward_backward_vec(
                T,
                L,
                node[r0 : r0 + T],
                expM,
                expMT,
                tmax,
                alpha,
                beta,
                scale,
                tmp,
                A,
                ones,
                tm,
                colbuf,
            )
            if np.isfinite(logz):
                for t in range(T):
                    vmul(node[r0 + t], alpha[t], beta[t], ws, lp)
            else:
                # the rows hold products: the sums again, from the chunk's runs (made once per
                # chunk, on its first such sequence: the same sums, in the same order, as the path
                # without exponentials; the token-major attributes are not read, so a training run
                # may let the corpus's copy go once its plan is built)
                if sums.shape[0] == 0:
                    sums = np.zeros(node.shape)
                    emit_runs(*index, w, rowk, Wd, False, sums)
                for t in range(T):
                    for l in range(L):
                        score[t, l] = sums[r0 + t, l]
        else:
            for t in range(T):
                for l in range(L):
                    score[t, l] = node[r0 + t, l]
        if not np.isfinite(logz):
            add_scores(xs, t0, T, score)
            logz = forward_backward_edges(
                score, T, trans, expM_r, tmax, es, alpha_r, beta_r, scale, EE
            )
            for t in range(T):
                for l in range(L):
                    node[r0 + t, l] = alpha_r[t, l] * beta_r[t, l] * ws
        total += ws * logz  # ws = 1 without weights: the same numbers
        if weighted:
            for i in range(L):
                for j in range(L):
                    acc[i, j] += ws * acc_s[i, j]
                    E[i, j] += ws * E_s[i, j]
        if keep:
            for t in range(T):
                for l in range(L):
                    pm[t0 + t, l] = node[r0 + t, l]
    return total


@njit(parallel=True, cache=True, fastmath=FAST)
def loss_grad(
    seq_ptr,
    attr_ptr,
    feat_label,
    trans_index,
    w,
    n_state,
    plan,
    g_out,
    emp,
    emp_idx,
    emp_val,
    exp_ok,
    gscale,
    l2,
    dense_attr,
    xs,
    pm,
    sw,
):
    """Returns (sum over the corpus of -sw_i log p(y_i|x_i), ||w||^2) and writes
    ``gscale * grad(that sum) + l2 * w`` to g_out (one pass for all of it).
    ``sw``: one scale per sequence (sample weights), empty for all 1.  The tokens' attributes come
    from the plan's occurrence index alone (a training run may let the corpus's token-major copy
    go: :meth:`crfkit.corpus.Corpus.release_attributes`).

    ``plan``: ``crfkit.reduction.GradPlan`` arrays (``Objective._plan_args``): blocks of sequences,
    their chunks (one per thread), and the occurrence index of the attributes, by chunk, with its
    groups (one per thread).  Per block, each chunk builds its tokens' emission scores from its runs
    of the index into a store of the block's tokens, runs forward-backward and leaves the node
    marginals there; then each group adds the expected counts of the attributes it owns into
    ``g_out`` (the attribute-partitioned reduction): no per-thread gradient buffer.
    ``emp`` holds the empirical feature counts (:func:`empirical_counts`, with the same ``sw``), or
    is empty and ``emp_idx``/``emp_val`` hold the non-zero ones (:func:`finish_gradient`).
    ``exp_ok``: the corpus is binary and the weights small enough that
    emissions may be built in the exp domain by products (no overflow).
    ``dense_attr`` (:func:`dense_rows`) picks the attributes whose emission weights are
    read as dense label rows.
    ``xs``/``pm``: extra emission scores in, node marginals out (see
    ``_fb_chunk``); the caller adds the dense block's expected counts
    ``gscale * X^T pm`` to ``g_out`` (its empirical counts and L2 term are
    already in, from ``emp`` and ``w``).
    """
    blocks, chunks, run_ptr, run_feat, otok, oval, groups = plan
    occ = (run_ptr, run_feat, otok, oval)
    trans = transition_matrix(w, 1.0, n_state, trans_index)
    L = trans.shape[0]
    lp = padded_labels(L)
    tmax = trans.max()
    # exp(trans - tmax) padded with zeros to lp x lp (forward_backward_vec)
    expM = np.zeros((lp, lp))
    expM[:L, :L] = np.exp(trans - tmax)
    expMT = expM.T.copy()
    exp_ok = exp_ok and tmax - trans.min() <= MAX_SCALED_TRANSITION_RANGE and xs.shape[0] == 0
    R = dense_attr.shape[0]
    Wd = np.empty((R, L))
    fill_dense(w, attr_ptr, feat_label, dense_attr, 0.0, Wd)
    # the dense row of the attribute whose features start at k (emit_runs), -1 elsewhere
    rowk = np.full(n_state, -1, np.int32)
    for d in range(R):
        rowk[attr_ptr[dense_attr[d]]] = d
    if exp_ok:
        # the vectorisable exp (within an ulp of libm's; 452,755 weights: libm's one call each took
        # a few ms of the evaluation's serial part)
        expw = np.empty(n_state)
        exp_shift_into(w[:n_state], 0.0, expw)
        expWd = np.empty((R, L))
        exp_shift_into(Wd.ravel(), 0.0, expWd.ravel())
    else:
        expw = np.empty(0)
        expWd = np.empty((0, L))
    zero(g_out)
    nc = chunks.shape[1] - 1
    ng = groups.shape[1] - 1
    logzs = np.zeros(nc)
    E = np.zeros((nc, L, L))
    acc = np.zeros((nc, lp, lp))
    # the block store: emission scores in, node marginals out, rows padded to lp
    node = np.zeros((store_rows(seq_ptr, blocks), lp))
    for b in range(blocks.shape[0] - 1):
        T0 = seq_ptr[blocks[b]]
        for c in prange(nc):
            q = b * nc + c
            logzs[c] += _fb_chunk(
                seq_ptr,
                feat_label,
                w,
                expw,
                exp_ok,
                rowk,
                Wd,
                expWd,
                trans,
                expM,
                expMT,
                tmax,
                chunks[b, c],
                chunks[b, c + 1],
                T0,
                node,
                E[c],
                acc[c],
                xs,
                pm,
                sw,
                (groups[q, 0], groups[q, ng]),
                occ,
            )
        for j in prange(ng):
            scatter_group(
                groups, b, nc, j, run_ptr, run_feat, otok, oval, feat_label, node, g_out, 0
            )
    for i in range(L):
        for j in range(L):
            k = trans_index[i, j]
            if k >= 0:
                for c in range(nc):
                    g_out[n_state + k] += E[c, i, j] + acc[c, i, j] * expM[i, j]
    gold, wsq = finish_gradient(w, g_out, emp, emp_idx, emp_val, gscale, l2)
    return ordered_sum(logzs) - gold, wsq


@njit(cache=True, nogil=True, fastmath=FAST)
def _chunk_loss(
    seq_ptr, tok_ptr, attr, val, y, attr_ptr, feat_label, w, trans, expM, tmax, s0, s1, xs, sw
):
    L = trans.shape[0]
    maxT = max_len(seq_ptr, s0, s1)
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
        ws = seq_weight(sw, s)
        if T == 0 or ws == 0.0:
            continue
        emissions(tok_ptr, attr, val, t0, t0 + T, attr_ptr, feat_label, w, 1.0, score)
        add_scores(xs, t0, T, score)
        nll = log_partition(score, T, trans, expM, tmax, es, alpha, scale) - gold_score(
            score, y, t0, T, trans
        )
        loss += nll if sw.shape[0] == 0 else ws * nll
    return loss


@njit(parallel=True, cache=True, fastmath=FAST)
def loss_only(
    seq_ptr, tok_ptr, attr, val, y, attr_ptr, feat_label, trans_index, w, n_state, bounds, xs, sw
):
    """Sum over the corpus of -sw_i log p(y_i|x_i), without the gradient (forward pass only).
    ``xs``: extra emission scores (n_tokens x L, or no rows); ``sw``: scales per sequence (empty:
    all 1)."""
    trans = transition_matrix(w, 1.0, n_state, trans_index)
    tmax = trans.max()
    expM = np.exp(trans - tmax)
    n_chunks = len(bounds) - 1
    losses = np.zeros(n_chunks)
    for c in prange(n_chunks):
        losses[c] = _chunk_loss(
            seq_ptr,
            tok_ptr,
            attr,
            val,
            y,
            attr_ptr,
            feat_label,
            w,
            trans,
            expM,
            tmax,
            bounds[c],
            bounds[c + 1],
            xs,
            sw,
        )
    return ordered_sum(losses)


@njit(parallel=True, cache=True, fastmath=FAST)
def tag_codes_all(
    codes, cnt, val, seq_ptr, ent_ptr, bounds, attr_ptr, feat_label, w, trans, out, path_score
):
    """:func:`crfkit.kernels.chain.tag_codes_seqs` over the chunks of sequences ``bounds`` on the
    thread pool: the Viterbi labels of a batch given as attribute codes (``CRFModel.tag_dicts``)."""
    for c in prange(len(bounds) - 1):
        tag_codes_seqs(
            codes,
            cnt,
            val,
            seq_ptr,
            ent_ptr,
            bounds[c],
            bounds[c + 1],
            attr_ptr,
            feat_label,
            w,
            trans,
            out,
            path_score,
        )


@njit(parallel=True, cache=True, fastmath=FAST)
def decode_all(
    seq_ptr,
    tok_ptr,
    attr,
    val,
    attr_ptr,
    feat_label,
    trans_index,
    w,
    n_state,
    bounds,
    ids,
    path_score,
    marg,
    logz,
    labels,
    label_score,
    xs,
    full,
):
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
        maxT = max(max_len(seq_ptr, s0, s1), 1)
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
                emissions_rows(
                    tok_ptr, attr, val, t0, t0 + T, attr_ptr, feat_label, full, w, 1.0, score
                )
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
