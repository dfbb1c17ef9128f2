"""What the full-batch drivers of :mod:`crfkit.kernels.batch` and :mod:`crfkit.kernels.batch_bigram`
share: chunking sequences over threads, sample weights, zeroing the marginal store, the dense/hybrid
emission rows, and the block gradient's scatter and finish.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .chain_exp import FAST
from .simd import axpy


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
def max_len(seq_ptr, s0, s1):
    m = 0
    for s in range(s0, s1):
        d = seq_ptr[s + 1] - seq_ptr[s]
        if d > m:
            m = d
    return m


@njit(cache=True, nogil=True, fastmath=FAST)
def seq_weight(sw, s):
    """The scale of sequence s: sw[s], or 1 when ``sw`` is empty (no sample weights)."""
    if sw.shape[0] == 0:
        return 1.0
    return sw[s]


@njit(cache=True, nogil=True, fastmath=FAST)
def zero_rows(pm, t0, t1):
    """pm[t0:t1] = 0 when ``pm`` has rows (the marginals of a sequence of weight 0: no
    contribution)."""
    if pm.shape[0] > 0:
        for t in range(t0, t1):
            for l in range(pm.shape[1]):
                pm[t, l] = 0.0


def dense_rows(attr_ptr: np.ndarray, n_labels: int) -> tuple[np.ndarray, np.ndarray]:
    """Attributes whose features cover a good share of the labels, to be handled as dense label
    rows.

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
def fill_dense(w, attr_ptr, feat_label, dense_attr, fill, W):
    """W[r, l] = w of the feature (dense_attr[r], l), ``fill`` where there is none."""
    for r in range(dense_attr.shape[0]):
        for l in range(W.shape[1]):
            W[r, l] = fill
        a = dense_attr[r]
        for k in range(attr_ptr[a], attr_ptr[a + 1]):
            W[r, feat_label[k]] = w[k]


@njit(cache=True, nogil=True, fastmath=FAST)
def hybrid_emissions(tok_ptr, attr, val, t0, t1, attr_ptr, feat_label, w, row, Wd, use_exp, out):
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


@njit(inline="always", nogil=True)
def run_features(run_feat, r):
    """(first feature, feature count) of run r of an occurrence index: unpacks
    :func:`crfkit.reduction.pack_runs` (``(k0 << 8) | nk`` in 4 bytes, ``(k0 << 28) | nk`` in 8)."""
    v = np.int64(run_feat[r])
    s = 8 if run_feat.itemsize == 4 else 28
    return v >> s, v & ((np.int64(1) << s) - 1)


@njit(cache=True, nogil=True, fastmath=FAST)
def scatter_runs(r0, r1, run_ptr, run_feat, tok, val, col, store, g, off):
    """The attribute-partitioned reduction: for the runs r0..r1-1 of an occurrence index
    (:mod:`crfkit.reduction`), ``g[off + k] += store[t, col[k]] * value`` for every occurrence
    (t, value) of the run's attribute and every feature ``k`` of it (``k0 .. k0 + nk``,
    ``run_feat[r]``).  ``val`` empty: every value is 1.  ``col`` empty (implicit label pairs,
    kernels.chain): every attribute's features are the W columns in order."""
    has_val = val.shape[0] > 0
    W = store.shape[1]
    # attributes with features for at least a quarter of the columns: their counts gathered into a
    # row of all columns, the run's store rows added to it as vectors, then put back (each weight
    # gets the same additions in the same order as by the gather below: the same bits); the store's
    # width must be a multiple of the vector width (the state store is padded, kernels.simd)
    rows_ok = W % 8 == 0 and col.shape[0] > 0
    buf = np.empty(W if rows_ok else 0)
    for r in range(r0, r1):
        k0, nk = run_features(run_feat, r)
        k1 = k0 + nk
        if k1 == k0:
            continue
        if rows_ok and 4 * (k1 - k0) >= W and k1 - k0 >= 4:
            for k in range(k0, k1):
                buf[col[k]] = g[off + k]
            for o in range(run_ptr[r], run_ptr[r + 1]):
                axpy(buf, val[o] if has_val else 1.0, store[tok[o]], W)
            for k in range(k0, k1):
                g[off + k] = buf[col[k]]
            continue
        # an attribute with a feature for every column, in column order (support all): contiguous
        # adds that vectorise (the same sums in the same order as the gather below)
        full = k1 - k0 == W
        if full and col.shape[0] > 0:
            for q in range(W):
                if col[k0 + q] != q:
                    full = False
                    break
        if full:
            gk = g[off + k0 : off + k1]
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


@njit(cache=True, nogil=True, fastmath=FAST)
def scatter_group(groups, b, nc, j, run_ptr, run_feat, tok, val, col, store, g, off):
    """:func:`scatter_runs` over group ``j`` of block ``b`` in each of its ``nc`` chunks, chunk
    after chunk (``groups``: :class:`crfkit.reduction.Occurrences` ``groups``, row ``b * nc + c``):
    every weight's counts are added in token order, however many chunks the block has."""
    for c in range(nc):
        q = b * nc + c
        scatter_runs(
            groups[q, j], groups[q, j + 1], run_ptr, run_feat, tok, val, col, store, g, off
        )


@njit(cache=True, nogil=True, fastmath=FAST)
def emit_runs(r0, r1, run_ptr, run_feat, tok, val, col, w, rowk, Wd, use_exp, out):
    """The emission scores of a chunk's tokens built run by run from the occurrence index
    (:mod:`crfkit.reduction`): for each run r0..r1-1 (one attribute, its tokens ``t`` in order,
    its features ``k0 .. k0 + nk`` from ``run_feat[r]``), ``out[t, col[k]] += w[k] * value`` for
    every feature ``k``, or ``out[t, l] += Wd[d, l] * value`` when the attribute has a dense row
    ``d = rowk[k0]`` (``rowk``: the dense row of the attribute whose features start at k0, else
    -1).  ``use_exp``
    (binary attributes): products ``out[t, col[k]] *= w[k]`` of exponentiated weights instead (``w``
    = exp(w), ``Wd`` = exp(dense rows)).  The caller sets the rows to 0 (1 for products) first.

    Against the token-by-token build (:func:`hybrid_emissions`) this looks up an attribute's weights
    once per run instead of once per entry: the look-ups of rare attributes miss the cache, and a
    block's tokens share most of their frequent attributes.  Each token's terms are added in
    attribute order (the same bits for any number of chunks)."""
    L = Wd.shape[1]
    has_val = val.shape[0] > 0
    for r in range(r0, r1):
        k0, nk = run_features(run_feat, r)
        o0 = run_ptr[r]
        o1 = run_ptr[r + 1]
        # only an attribute with features for a quarter of the labels may have a dense row
        # (dense_rows): the others need no look-up at all
        d = rowk[k0] if nk >= 4 and 4 * nk >= L else -1
        if d >= 0:
            wd = Wd[d]
            for o in range(o0, o1):
                ot = out[tok[o]]
                if use_exp:
                    for l in range(L):
                        ot[l] *= wd[l]
                elif has_val:
                    v = val[o]
                    for l in range(L):
                        ot[l] += wd[l] * v
                else:
                    for l in range(L):
                        ot[l] += wd[l]
            continue
        k1 = k0 + nk
        for o in range(o0, o1):
            t = tok[o]
            if use_exp:
                for k in range(k0, k1):
                    out[t, col[k]] *= w[k]
            elif has_val:
                v = val[o]
                for k in range(k0, k1):
                    out[t, col[k]] += w[k] * v
            else:
                for k in range(k0, k1):
                    out[t, col[k]] += w[k]


@njit(parallel=True, cache=True, fastmath=FAST)
def zero(g):
    for k in prange(g.shape[0]):
        g[k] = 0.0


#: elements per partial sum of :func:`finish_gradient`'s two reductions.  A ``prange`` reduction
#: cuts its range by the number of threads running it, so its rounding followed the thread count;
#: sums over fixed blocks, added in order, are the same bits for any count (the thread governor,
#: crfkit.parallel.ThreadGovernor, changes the count between evaluations of one run)
SUM_BLOCK = 1 << 14


@njit(cache=True, nogil=True)
def ordered_sum(a):
    """``a[0] + a[1] + ...`` in that order (an array's ``.sum()`` inside a ``parallel=True`` kernel
    becomes a reduction over the threads, whose rounding follows their number)."""
    s = 0.0
    for i in range(a.shape[0]):
        s += a[i]
    return s


@njit(parallel=True, cache=True, fastmath=FAST)
def finish_gradient(w, g, emp, emp_idx, emp_val, gscale, l2):
    """``g = (g - emp) * gscale + l2 * w`` in place (g holds the expected counts); returns (w . emp,
    ||w||^2), each summed over blocks of :data:`SUM_BLOCK` elements and the blocks in order (the
    same bits for any number of threads).

    ``emp`` empty: the empirical counts are the sparse ``emp_val`` at ``emp_idx`` (ascending), the
    rest 0 (a large candidate space: most features never fire with their gold labels); the same
    values (the subtraction first, then the same products)."""
    n = g.shape[0]
    nb = (n + SUM_BLOCK - 1) // SUM_BLOCK
    wsq_b = np.zeros(nb)
    if emp.shape[0] == 0:
        gold = 0.0
        for q in range(emp_idx.shape[0]):
            k = emp_idx[q]
            g[k] -= emp_val[q]
            gold += w[k] * emp_val[q]
        for b in prange(nb):
            s = 0.0
            for k in range(b * SUM_BLOCK, min(n, (b + 1) * SUM_BLOCK)):
                wk = w[k]
                g[k] = g[k] * gscale + l2 * wk
                s += wk * wk
            wsq_b[b] = s
        return gold, ordered_sum(wsq_b)
    gold_b = np.zeros(nb)
    for b in prange(nb):
        s = 0.0
        e = 0.0
        for k in range(b * SUM_BLOCK, min(n, (b + 1) * SUM_BLOCK)):
            wk = w[k]
            g[k] = (g[k] - emp[k]) * gscale + l2 * wk
            e += wk * emp[k]
            s += wk * wk
        gold_b[b] = e
        wsq_b[b] = s
    return ordered_sum(gold_b), ordered_sum(wsq_b)


@njit(cache=True, nogil=True, fastmath=FAST)
def store_rows(seq_ptr, blocks):
    m = 1
    for b in range(blocks.shape[0] - 1):
        d = seq_ptr[blocks[b + 1]] - seq_ptr[blocks[b]]
        if d > m:
            m = d
    return m
