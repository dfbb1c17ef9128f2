"""The plan of the full-batch gradient: blocks of sequences and an occurrence index by attribute.

The full-batch gradient (:func:`crfkit.kernels.batch.loss_grad`) is computed block by block.  A
block is a run of whole sequences whose marginals fit a small store (``STORE_BUDGET`` bytes: the
node marginals, T x L, and with bigram-observation features the edge marginals, T x L x L).  For
each block:

1. the threads split the block's sequences (``chunks`` per block, about equal token counts), run
   forward-backward and write the marginals of their tokens into the store;
2. the threads split the block's *attributes* (``groups`` per block, about equal work) and each adds
   the expected counts of the attributes it owns into the one output gradient, reading the store
   through an occurrence index: the block's (attribute, token) entries sorted by attribute, then
   token.

No thread owns a copy of the gradient: besides the output vector the memory is the store and the
index (one token id per corpus entry, plus the value when the corpus is not binary), which follow
the corpus, not the candidate space.  Every weight's expected count is summed over the blocks in
order and over a block's tokens in order, whatever the number of threads: the state and
bigram-observation parts of the gradient are the same bits with 1 or 16 threads (the transition
part and the loss value are summed per chunk, so they may differ in the last bits).  That needs the
recursions themselves to give the same bits wherever their per-thread work arrays lie: their short
normalising sums are added in index order (``kernels.chain.row_sum``), since re-associated ones were
compiled into alignment-dependent code (``tests/test_kernel_addresses.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

STORE_BUDGET = 1 << 20  # bytes of node marginals held per block: the reduction reads them in random
#                           order, so they should stay in the core's cache
EDGE_BUDGET = (
    16 << 20
)  # bytes of edge marginals per block (bigram features: each read is a whole L x L row)
TOK16_TOKENS = (
    1 << 16
)  # blocks of at most this many tokens index them in 2 bytes (uint16), others in 4
RUN32_ENTRIES = (
    1 << 31
)  # occurrence indexes of fewer entries point into them with int32, others int64
# what one run costs beside its adds, in adds: the look-ups of a rare attribute's weights, features
# and gradient entries miss the cache (about 20 ns, against about 1 ns an add on CoNLL-2000): with
# the runs counted as free, the thread owning the many rare attributes took 2-3x the other's time
RUN_COST = 20


@dataclass(frozen=True)
class Occurrences:
    """(attribute, token) entries of a corpus, per block sorted by attribute then token."""

    run_ptr: (
        np.ndarray
    )  # (n_runs + 1,) int32 (int64 from 2^31 entries): run r covers tok[run_ptr[r]:run_ptr[r + 1]]
    run_feat: (
        np.ndarray
    )  # (n_runs,) uint32 or int64: the first feature k0 of run r's attribute and its number of
    #    features nk, packed (k0 << s) | nk (:func:`pack_runs`: s = 8 in uint32 while k0 < 2^24
    #    and nk < 2^8, else s = 28 in int64), one run per attribute, block and chunk (attributes
    #    without features have no entries): the kernels need no look-up in the attribute table
    tok: (
        np.ndarray
    )  # (nnz,) uint16 (int32 when a block, i.e. a sequence, has more than 65,536 tokens):
    #                        token, relative to its block's first token
    val: np.ndarray  # (nnz,) float64, or empty when every value is 1
    groups: (
        np.ndarray
    )  # (n_blocks * n_chunks, n_groups + 1) int64: row b * n_chunks + c holds the runs of block b,
    #    chunk c, cut into the groups (the same attribute thresholds in every chunk of a block)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.run_ptr, self.run_feat, self.tok, self.val, self.groups))

    def arrays(self) -> tuple:
        return self.run_ptr, self.run_feat, self.tok, self.val, self.groups


@dataclass(frozen=True)
class GradPlan:
    blocks: np.ndarray  # (n_blocks + 1,) int64: sequences of block b are blocks[b]:blocks[b + 1]
    chunks: np.ndarray  # (n_blocks, n_chunks + 1) int64: sequences of block b, chunk c
    store_tokens: int  # rows of the marginal store (the largest block's token count)
    state: Occurrences
    bigram: Occurrences | None

    @property
    def n_blocks(self) -> int:
        return len(self.blocks) - 1

    @property
    def nbytes(self) -> int:
        """Bytes of the plan itself (the store is allocated per evaluation, ``store_tokens``
        rows)."""
        n = self.blocks.nbytes + self.chunks.nbytes + self.state.nbytes
        return n + (self.bigram.nbytes if self.bigram is not None else 0)


def _blocks(seq_ptr: np.ndarray, max_tokens: int) -> np.ndarray:
    """Cut the sequences into runs of at most ``max_tokens`` tokens (a longer sequence alone)."""
    n = len(seq_ptr) - 1
    out = [0]
    s = 0
    while s < n:
        e = int(np.searchsorted(seq_ptr, seq_ptr[s] + max_tokens, side="right")) - 1
        e = min(max(e, s + 1), n)
        out.append(e)
        s = e
    return np.asarray(out, dtype=np.int64)


def _split(weights_cum: np.ndarray, parts: int) -> np.ndarray:
    """Cut points (parts + 1, into 0..len) splitting items with cumulative weights into about equal
    parts."""
    m = len(weights_cum)
    total = weights_cum[-1] if m else 0
    targets = (np.arange(1, parts) * total) / parts
    cuts = (
        np.searchsorted(weights_cum, targets, side="left") + 1
        if m
        else np.zeros(parts - 1, np.int64)
    )
    cuts = np.minimum(cuts, m)
    return np.maximum.accumulate(np.concatenate(([0], cuts, [m]))).astype(np.int64)


def pack_runs(k0: np.ndarray, nk: np.ndarray) -> np.ndarray:
    """The runs' (first feature, feature count) packed into one number each: ``(k0 << 8) | nk`` in
    uint32 while every k0 < 2^24 and nk < 2^8 (4 bytes a run, what the attribute id took), else
    ``(k0 << 28) | nk`` in int64 (k0 < 2^35, nk < 2^28).  The kernels unpack them by the array's item size
    (:func:`crfkit.kernels.batch_common.run_features`)."""
    k0, nk = np.asarray(k0), np.asarray(nk)
    if not len(k0):
        return np.zeros(0, np.uint32)
    if k0.min() >= 0 and nk.min() >= 0 and k0.max() < 1 << 24 and nk.max() < 1 << 8:
        # in 4-byte arithmetic: a run index of a million runs made three 8-byte temporaries of it
        out = np.left_shift(k0.astype(np.uint32, copy=False), np.uint32(8))
        out |= nk.astype(np.uint32, copy=False)
        return out
    k0 = np.asarray(k0, dtype=np.int64)
    nk = np.asarray(nk, dtype=np.int64)
    if k0.max() >= 1 << 35 or nk.max() >= 1 << 28:
        raise ValueError("more than 2^35 features, or 2^28 features of one attribute")
    return (k0 << 28) | nk


def unpack_runs(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(k0, nk) of :func:`pack_runs`."""
    s = 8 if packed.dtype.itemsize == 4 else 28
    p = packed.astype(np.int64)
    return p >> s, p & ((1 << s) - 1)


def _occurrences(
    tok_ptr: np.ndarray,
    attr: np.ndarray,
    val: np.ndarray,
    seq_ptr: np.ndarray,
    blocks: np.ndarray,
    chunks: np.ndarray,
    ptr: np.ndarray,
    groups: int,
    skip_first: bool,
    tok_dtype=np.int32,
) -> Occurrences:
    """The occurrence index of one attribute table (state: ``attr``; bigram: ``battr``, whose
    entries at a sequence's first token are left out: they have no edge).

    Per block, the entries are sorted by chunk, then attribute, then token: a run is one attribute's
    tokens in one chunk, so the thread of a chunk can build its tokens' emission scores run by run
    (one look-up of the attribute's weights per run, not per entry).  The groups cut every chunk's
    runs at the same attribute thresholds, so a thread owning a group owns the same attributes in
    every chunk of the block (and adds their counts chunk after chunk: in token order)."""
    n_blocks = len(blocks) - 1
    nc = chunks.shape[1] - 1
    nfeat = np.diff(ptr)
    binary = len(val) == 0 or bool(np.all(val == 1.0))  # (empty: all ones, Corpus.raw_val)
    # the per-block pieces are kept in 4-byte integers where every value fits (run pointers below
    # RUN32_ENTRIES, features and counts below 2^32): in 8-byte ones, the pieces and their
    # concatenation were a 30 MB spike of CoNLL-2000's training RSS, its peak
    ptr_dt = np.int32 if int(tok_ptr[-1] - tok_ptr[0]) < RUN32_ENTRIES else np.int64
    feat_dt = np.uint32 if int(ptr[-1]) < 1 << 32 else np.int64
    toks, vals, run_ptr, run_k0, run_nk = [], [], [np.zeros(1, ptr_dt)], [], []
    gcuts = np.zeros((n_blocks * nc, groups + 1), np.int64)
    n_attr = int(attr.max()) + 1 if len(attr) else 1
    pos = 0
    n_runs = 0
    for b in range(n_blocks):
        t0, t1 = int(seq_ptr[blocks[b]]), int(seq_ptr[blocks[b + 1]])
        e0, e1 = int(tok_ptr[t0]), int(tok_ptr[t1])
        a = attr[e0:e1].astype(np.int64)
        t = np.repeat(np.arange(t1 - t0, dtype=np.int64), np.diff(tok_ptr[t0 : t1 + 1]))
        v = val[e0:e1] if not binary else None
        if skip_first:
            first = np.zeros(t1 - t0, bool)
            first[seq_ptr[blocks[b] : blocks[b + 1]] - t0] = True
            keep = ~first[t]
            a, t = a[keep], t[keep]
            if v is not None:
                v = v[keep]
        if len(a) and not nfeat[a].all():  # an attribute without features adds nothing
            keep = nfeat[a] > 0
            a, t = a[keep], t[keep]
            if v is not None:
                v = v[keep]
        # the chunk of every entry's token: chunks split the block's sequences in order
        ch = np.searchsorted(seq_ptr[chunks[b, 1:-1]] - t0, t, side="right")
        key = ch * n_attr + a
        order = np.argsort(key, kind="stable")  # stable: tokens stay in order within a run
        key, a, ch = key[order], a[order], ch[order]
        toks.append(t[order].astype(tok_dtype))
        if not binary:
            vals.append(v[order])
        rows = slice(b * nc, (b + 1) * nc)
        if len(a):
            starts = np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1])))
            ends = np.concatenate((starts[1:], [len(a)]))
            ra = a[starts]
            rc = ch[starts]
            # the work of an attribute in the block: its features x occurrences, plus RUN_COST per
            # run (the look-ups of a rare attribute's row miss the cache: that, not the adds, is
            # most of its cost)
            work = (ends - starts) * np.maximum(nfeat[ra], 1) + RUN_COST
            ua, inv = np.unique(ra, return_inverse=True)
            cum = np.cumsum(np.bincount(inv, weights=work, minlength=len(ua)))
            thresholds = np.concatenate((ua, [n_attr]))[_split(cum, groups)]
            thresholds[0], thresholds[-1] = 0, n_attr
            lo = np.searchsorted(rc, np.arange(nc), side="left")
            hi = np.searchsorted(rc, np.arange(nc), side="right")
            for c in range(nc):
                gcuts[b * nc + c] = n_runs + lo[c] + np.searchsorted(ra[lo[c] : hi[c]], thresholds)
            run_k0.append(ptr[ra].astype(feat_dt))
            run_nk.append(nfeat[ra].astype(feat_dt))
            run_ptr.append((pos + ends).astype(ptr_dt))
            n_runs += len(ra)
            pos += len(a)
        else:
            gcuts[rows] = n_runs

    def cat(xs: list, dt) -> np.ndarray:
        """The pieces joined (and let go: one piece list and its array at a time)."""
        out = np.concatenate(xs).astype(dt, copy=False) if xs else np.zeros(0, dt)
        xs.clear()
        return out

    run_ptr_a = cat(run_ptr, np.int32 if pos < RUN32_ENTRIES else np.int64)
    tok_a = cat(toks, tok_dtype)
    val_a = cat(vals, np.float64) if not binary else np.zeros(0)
    k0 = cat(run_k0, feat_dt)
    run_feat = pack_runs(k0, cat(run_nk, feat_dt))
    del k0
    return Occurrences(
        run_ptr=run_ptr_a,
        run_feat=run_feat,
        tok=tok_a,
        val=val_a,
        groups=gcuts,
    )


def grad_plan(
    corpus,
    space,
    n_chunks: int,
    budget: int | None = None,
    bigram: bool = False,
    edge_budget: int | None = None,
) -> GradPlan:
    """The plan of :func:`crfkit.kernels.batch.loss_grad` (or ``loss_grad_bigram`` with ``bigram``)
    for ``corpus`` over ``space``, with ``n_chunks`` chunks and attribute groups per block (one per
    thread) and at most ``budget`` bytes of node marginals per block (``edge_budget`` of edge
    marginals with ``bigram``), but at least the longest sequence's tokens."""
    seq_ptr = corpus.seq_ptr
    L = space.n_labels
    budget = STORE_BUDGET if budget is None else int(budget)
    edge_budget = EDGE_BUDGET if edge_budget is None else int(edge_budget)
    lens = np.diff(seq_ptr)
    longest = int(lens.max()) if len(lens) else 0
    cap = budget // (8 * L)
    if bigram:
        cap = min(cap, edge_budget // (8 * L * L))
    max_tokens = max(longest, cap, 1)
    blocks = _blocks(seq_ptr, max_tokens)
    n_blocks = len(blocks) - 1
    nc = max(1, int(n_chunks))
    chunks = np.zeros((n_blocks, nc + 1), np.int64)
    store = 1
    for b in range(n_blocks):
        s0, s1 = int(blocks[b]), int(blocks[b + 1])
        sp = seq_ptr[s0 : s1 + 1]
        store = max(store, int(sp[-1] - sp[0]))
        cum = sp[1:] - sp[0]
        chunks[b] = s0 + _split(cum, nc)
    # the index's token ids are relative to their block: 2 bytes each while a block has at most
    # 65,536 tokens (the store budget allows 1 MB / 8L rows: 5,957 on CoNLL-2000), which only a
    # longer sequence (alone in its block) exceeds; CoNLL-2000's index went from 26 to 15 MB with
    # the narrower run_ptr
    tok_dtype = np.uint16 if store <= TOK16_TOKENS else np.int32
    state = _occurrences(
        corpus.tok_ptr,
        corpus.attr,
        corpus.raw_val,
        seq_ptr,
        blocks,
        chunks,
        space.attr_ptr,
        nc,
        skip_first=False,
        tok_dtype=tok_dtype,
    )
    big = None
    if bigram:
        big = _occurrences(
            corpus.btok_ptr,
            corpus.battr,
            corpus.bval,
            seq_ptr,
            blocks,
            chunks,
            space.battr_ptr,
            nc,
            skip_first=True,
            tok_dtype=tok_dtype,
        )
    return GradPlan(blocks=blocks, chunks=chunks, store_tokens=store, state=state, bigram=big)
