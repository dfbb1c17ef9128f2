"""Decoding in numpy, for small inputs: Viterbi, node marginals, log Z and path scores without
numba.

A ``crfkit tag`` process on a few hundred tokens, a web request or a ``CRF.predict_single`` call
spends far more time in numba than in decoding: importing numba (about 0.5 s), loading the cached
kernels (2-3 s the first time in a process) and waking its thread pool for each ``prange`` call.
The recursions here are the same as :func:`crfkit.kernels.batch.decode_all`'s, vectorised over the
labels and over the sequences of a batch (one numpy step per position, all the sequences at that
position at once), so a batch of a few hundred tokens decodes in a few milliseconds with no compiled
code at all.

:meth:`crfkit.model.CRFModel.decode` takes this path for corpora of at most :data:`MAX_TOKENS`
tokens (models without bigram-observation features) and the numba kernels beyond, where they are
faster.  The results are the same: the Viterbi path with the same tie-breaking (the first best
label, as the kernels' strict ``>``), the scores and log Z equal up to rounding (the
forward-backward here runs in the log domain, which needs no rescaling fallback; the kernels' scaled
recursion agrees to ~1e-12).  Models with bigram-observation features, constrained decoding and
n-best go through the kernels.

Nothing here imports numba for a process's first small call (``tests/test_npdecode.py`` checks it in
a fresh interpreter).  A process that decodes small inputs again and again (a server, an estimator's
``predict_single`` in a loop) is better served by numba's serial per-sequence kernels (a few
microseconds per call once loaded, against a numpy call per position here): from the second small
call on, :func:`note_small_call` loads them in a background thread (``CRFKIT_SMALL_KERNELS=0`` turns
that off), and :meth:`~crfkit.model.CRFModel.decode` uses :func:`decode_serial` once they are ready.
"""

from __future__ import annotations

import os
import sys
import threading

import numpy as np

#: corpora of at most this many tokens are decoded here rather than by the numba kernels
#: (``CRFKIT_NUMPY_MAX_TOKENS`` overrides it; 0 turns this path off).  At this size a warm numba
#: call and this path take about the same time (``benchmarks/startup_latency.py`` measures both).
MAX_TOKENS = 2000


def _env_tokens(name: str, default: int) -> int:
    """A token count from the environment variable ``name`` (at least 0), else ``default``."""
    v = os.environ.get(name)
    if v is None or not v.strip():
        return default
    try:
        return max(0, int(v))
    except ValueError:
        return default


def max_tokens() -> int:
    return _env_tokens("CRFKIT_NUMPY_MAX_TOKENS", MAX_TOKENS)


#: the first large batch of a process that has not imported numba is decoded here too when it has
#: at most this many tokens (``CRFKIT_NUMPY_COLD_MAX_TOKENS`` overrides it; 0 turns it off).  Such
#: a process pays numba's import, its code generator's start and the kernels' load (about 1.3 s
#: on 2 cores) before the first token; this path decodes about 50,000 tokens a second (CoNLL-2000's
#: chunking attributes, strings encoded and decoded), so up to here it finishes first
#: (``benchmarks/peers/first_predict_vs_crfsuite.py``).  Later batches go to numba as before: a
#: process that tags again loads the kernels once, on its second large call.
COLD_MAX_TOKENS = 60_000

_COLD = {"calls": 0}


def cold_max_tokens() -> int:
    return _env_tokens("CRFKIT_NUMPY_COLD_MAX_TOKENS", COLD_MAX_TOKENS)


def cold_batch(n_tokens: int, limit: int | None = None) -> bool:
    """Whether a batch of ``n_tokens`` tokens (more than :func:`max_tokens`) is decoded here
    because numba is not loaded in this process yet: the process's first such batch, of at most
    ``limit`` tokens (default :func:`cold_max_tokens`).  True once per process (the caller decodes
    it here, or by the kernels compiled ahead of time: :func:`aot_batch`)."""
    limit = cold_max_tokens() if limit is None else limit
    if "numba" in sys.modules or _COLD["calls"] or n_tokens > limit:
        return False
    _COLD["calls"] += 1
    return True


def numpy_batch(n_tokens: int) -> bool:
    """Whether a batch of ``n_tokens`` tokens goes to this module rather than to numba's batch
    kernels: a small one (at most :func:`max_tokens`) while numba's serial kernels are not loaded
    (:func:`kernels_ready`), or a process's first large one while numba is not loaded at all
    (:func:`cold_batch`)."""
    if n_tokens <= max_tokens():
        return not kernels_ready()
    return cold_batch(n_tokens)


#: state features summed at once by :func:`emissions` (a few arrays of this many numbers each)
EMISSION_BLOCK = 1 << 18


def emissions(corpus, space, w: np.ndarray) -> np.ndarray:
    """(n_tokens x L) emission scores: per token and label the sum of ``value * weight`` of the
    state features of the token's attributes (in the order of the occurrences, as the kernels add
    them).  Tokens are taken in blocks of about :data:`EMISSION_BLOCK` features (a 10,000-token
    batch of CoNLL-2000 chunking templates has about 1.7M: 40 MB of temporaries at once); each
    token's sums are made within one block, in the same order, so the blocks change no bit."""
    nt, L = corpus.n_tokens, space.n_labels
    tok_ptr, attr, val = corpus.tok_ptr, corpus.attr, corpus.val
    ptr = space.attr_ptr
    n_occ = int(tok_ptr[-1] - tok_ptr[0]) if nt else 0
    out = np.zeros((nt, L))
    if n_occ == 0:
        return out
    e0 = int(tok_ptr[0])
    a = attr[e0 : e0 + n_occ].astype(np.int64)
    start = ptr[a]
    cnt = ptr[a + 1] - start
    del a
    # features before each token: where to cut the tokens into blocks
    cum = np.zeros(n_occ + 1, np.int64)
    np.cumsum(cnt, out=cum[1:])
    tcum = cum[np.asarray(tok_ptr, dtype=np.int64) - e0]
    total = int(cum[-1])
    if total == 0:
        return out
    # the last token starting at or before each multiple of the block (a token of more features
    # than a block is a block of its own)
    cuts = np.searchsorted(tcum, np.arange(EMISSION_BLOCK, total, EMISSION_BLOCK), side="right") - 1
    bounds = sorted({0, nt, *cuts.tolist()})
    tp = np.asarray(tok_ptr, dtype=np.int64) - e0
    v = val[e0 : e0 + n_occ]
    ones = bool((v == 1.0).all())  # template attributes: no product to take (x * 1.0 is x)
    for t0, t1 in zip(bounds[:-1], bounds[1:]):
        o0, o1 = int(tp[t0]), int(tp[t1])
        c = cnt[o0:o1]
        n = int(cum[o1] - cum[o0])
        if n == 0:
            continue
        # feature k of every occurrence: start[e] + (0 .. cnt[e]-1), occurrence after occurrence
        first = cum[o0:o1] - cum[o0]
        k = np.arange(n, dtype=np.int64) + np.repeat(start[o0:o1] - first, c)
        rows = np.repeat(np.repeat(np.arange(0, (t1 - t0) * L, L), np.diff(tp[t0 : t1 + 1])), c)
        x = w[k] if ones else w[k] * np.repeat(v[o0:o1], c)
        rows += space.feat_label[k]
        out[t0:t1] = np.bincount(rows, weights=x, minlength=(t1 - t0) * L).reshape(t1 - t0, L)
    return out


def transition_matrix(space, w: np.ndarray) -> np.ndarray:
    """Dense L x L transition scores (0 where a label pair has no feature)."""
    ti = space.trans_index
    out = np.zeros(ti.shape)
    live = ti >= 0
    out[live] = w[space.n_state + ti[live]]
    return out


def _padded(score: np.ndarray, seq_ptr: np.ndarray):
    """The sequences, longest first, as a (S x Tmax x L) block: (order, lengths in that order,
    block). The sequences still running at position t are then the first ``(lengths > t).sum()``
    rows."""
    lens = np.diff(seq_ptr)
    order = np.argsort(-lens, kind="stable")
    slen = lens[order]
    S, L = len(lens), score.shape[1]
    Tm = int(slen[0]) if S else 0
    block = np.zeros((S, Tm, L))
    pos = np.arange(int(seq_ptr[-1] - seq_ptr[0]), dtype=np.int64) - np.repeat(
        seq_ptr[:-1] - seq_ptr[0], lens
    )
    rank = np.empty(S, np.int64)
    rank[order] = np.arange(S)
    block[np.repeat(rank, lens), pos] = score
    return order, slen, block


def _running(slen: np.ndarray) -> np.ndarray:
    """n[t]: how many of the sequences (sorted longest first) have a position t."""
    Tm = int(slen[0]) if len(slen) else 0
    return np.searchsorted(-slen, -np.arange(Tm), side="left") if Tm else np.zeros(0, np.int64)


def viterbi(score: np.ndarray, seq_ptr: np.ndarray, trans: np.ndarray):
    """Best label ids (n_tokens, int32) and best path scores (n_seq) of every sequence."""
    S = len(seq_ptr) - 1
    ids = np.zeros(score.shape[0], np.int32)
    best = np.zeros(S)
    lens = np.diff(seq_ptr)
    live = np.flatnonzero(lens > 0)
    if not len(live):
        return ids, best
    order, slen, block = _padded(score, seq_ptr)
    n = _running(slen)
    Tm, L = block.shape[1], block.shape[2]
    # back pointers in the smallest integer type that holds a label id (a quarter or an eighth of
    # int64's memory)
    back = np.zeros(
        (len(slen), Tm, L), np.int8 if L <= 127 else np.int16 if L <= 32767 else np.int64
    )
    delta = block[:, 0].copy()
    trans_t = np.ascontiguousarray(trans.T)  # (label, previous label)
    for t in range(1, Tm):
        m = int(n[t])
        # (m, label, previous label): the previous labels contiguous, so that the arg max reduces
        # over the last axis (half the time of a reduction over the middle one, 25k tokens)
        cand = delta[:m, None, :] + trans_t
        arg = cand.argmax(axis=2)  # the first best previous label, as the kernels
        back[:m, t] = arg
        # the value at that arg max: the same number, without a second reduction
        delta[:m] = np.take_along_axis(cand, arg[:, :, None], axis=2)[:, :, 0] + block[:m, t]
    # delta[s] now holds each sequence's last row (rows of finished sequences were left as they
    # were)
    nz = slen > 0
    last = delta.argmax(axis=1)
    path = np.zeros((len(slen), Tm), np.int64)
    rows = np.arange(len(slen))
    cur = last.copy()
    path[rows, np.maximum(slen - 1, 0)] = cur
    for t in range(Tm - 1, 0, -1):
        m = int(n[t])
        # sequences with a position t step back from their label at t
        prev = back[rows[:m], t, cur[:m]]
        cur[:m] = np.where(slen[:m] - 1 >= t, prev, cur[:m])
        sel = slen[:m] - 1 >= t
        path[rows[:m][sel], t - 1] = cur[:m][sel]
    s_best = np.where(nz, delta[rows, last], 0.0)
    best[order] = s_best
    mask = np.arange(Tm)[None, :] < slen[:, None]
    flat = np.empty(int(slen.sum()), np.int64)
    # back to input order: sequence order[r] holds path[r, :slen[r]]
    dst = np.repeat(seq_ptr[:-1][order] - seq_ptr[0], slen) + (
        np.arange(int(slen.sum())) - np.repeat(np.cumsum(slen) - slen, slen)
    )
    flat[dst] = path[mask]
    ids[:] = flat
    return ids, best


def _logsumexp(x: np.ndarray, axis: int) -> np.ndarray:
    m = x.max(axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    return np.log(np.exp(x - m).sum(axis=axis)) + np.squeeze(m, axis=axis)


def forward_backward(score: np.ndarray, seq_ptr: np.ndarray, trans: np.ndarray):
    """Node marginals (n_tokens x L) and log Z (n_seq), in the log domain."""
    S = len(seq_ptr) - 1
    nt, L = score.shape
    marg = np.zeros((nt, L))
    logz = np.zeros(S)
    lens = np.diff(seq_ptr)
    if not (lens > 0).any():
        return marg, logz
    order, slen, block = _padded(score, seq_ptr)
    n = _running(slen)
    Tm = block.shape[1]
    la = np.zeros_like(block)
    lb = np.zeros_like(block)
    la[:, 0] = block[:, 0]
    for t in range(1, Tm):
        m = int(n[t])
        la[:m, t] = _logsumexp(la[:m, t - 1, :, None] + trans[None], axis=1) + block[:m, t]
    rows = np.arange(len(slen))
    lastpos = np.maximum(slen - 1, 0)
    lz = _logsumexp(la[rows, lastpos], axis=1)
    for t in range(Tm - 2, -1, -1):
        m = int(n[t + 1])  # sequences with a position t + 1: beta[t] from beta[t + 1]
        lb[:m, t] = _logsumexp(trans[None] + (block[:m, t + 1] + lb[:m, t + 1])[:, None, :], axis=2)
    mask = np.arange(Tm)[None, :] < slen[:, None]
    # node marginals normalised per position (each sums to 1): exact, and no cancellation against a
    # large log Z
    x = la + lb
    post = np.exp(x - x.max(axis=2, keepdims=True))
    post /= post.sum(axis=2, keepdims=True)
    dst = np.repeat(seq_ptr[:-1][order] - seq_ptr[0], slen) + (
        np.arange(int(slen.sum())) - np.repeat(np.cumsum(slen) - slen, slen)
    )
    marg[dst] = post[mask]
    logz[order] = np.where(slen > 0, lz, 0.0)
    return marg, logz


def path_scores(
    score: np.ndarray, seq_ptr: np.ndarray, trans: np.ndarray, labels: np.ndarray
) -> np.ndarray:
    """The score of the given label path of every sequence (emissions plus transitions)."""
    S = len(seq_ptr) - 1
    nt = score.shape[0]
    if nt == 0:
        return np.zeros(S)
    y = labels.astype(np.int64)
    per = score[np.arange(nt), y]
    first = np.zeros(nt, bool)
    lens = np.diff(seq_ptr)
    first[seq_ptr[:-1][lens > 0] - seq_ptr[0]] = True
    tr = np.zeros(nt)
    inner = np.flatnonzero(~first)
    tr[inner] = trans[y[inner - 1], y[inner]]
    tok_seq = np.repeat(np.arange(S), lens)
    return np.bincount(tok_seq, weights=per + tr, minlength=S)


#: the padded blocks of :func:`viterbi` and :func:`forward_backward` hold (sequences x longest
#: length x labels) numbers: :func:`by_groups` cuts a batch so that each block has at most this many
#: (sequence, position) slots (a 10,000-token batch with one 5,000-token sentence would otherwise
#: pad every sentence to 5,000)
GROUP_SLOTS = 1 << 14


def groups(seq_ptr: np.ndarray, slots: int = GROUP_SLOTS) -> list[np.ndarray]:
    """The sequences of ``seq_ptr`` cut into groups (arrays of sequence indices, longest first)
    such that each group's count times its longest length is at most ``slots`` (a group of one
    sequence whatever its length)."""
    lens = np.diff(seq_ptr)
    S = len(lens)
    if S == 0:
        return []
    order = np.argsort(-lens, kind="stable")
    slen = lens[order].tolist()
    out = []
    i = 0
    while i < S:
        j = i + max(1, slots // max(slen[i], 1))
        out.append(order[i : min(j, S)])
        i = j
    return out


def by_groups(fn, score: np.ndarray, seq_ptr: np.ndarray, trans: np.ndarray, slots=GROUP_SLOTS):
    """``fn(score, seq_ptr, trans)`` (:func:`viterbi` or :func:`forward_backward`: per-token
    results, per-sequence results) over the groups of :func:`groups`, put back in input order:
    the same results, in bounded memory."""
    lens = np.diff(seq_ptr)
    if len(lens) * max(int(lens.max(initial=0)), 1) <= slots or len(lens) <= 1:
        return fn(score, seq_ptr, trans)
    per_tok = per_seq = None
    for g in groups(seq_ptr, slots):
        g = np.sort(g)
        glen = lens[g]
        rows = np.repeat(seq_ptr[:-1][g] - np.cumsum(glen) + glen, glen) + np.arange(glen.sum())
        sub_ptr = np.zeros(len(g) + 1, np.int64)
        np.cumsum(glen, out=sub_ptr[1:])
        a, b = fn(score[rows], sub_ptr, trans)
        if per_tok is None:
            per_tok = np.zeros((score.shape[0],) + a.shape[1:], a.dtype)
            per_seq = np.zeros(len(lens), b.dtype)
        per_tok[rows] = a
        per_seq[g] = b
    return per_tok, per_seq


def aot_kernels():
    """The tagging kernels compiled ahead of time (:mod:`crfkit._runtime.aot`), or None when they
    are not built (``crfkit warmup`` builds them) or switched off (``CRFKIT_NO_AOT=1``)."""
    from ._runtime import aot

    return aot.load()


#: the first large batch of a process that has not imported numba goes to the kernels compiled ahead
#: of time when it has at most this many tokens (``CRFKIT_AOT_COLD_MAX_TOKENS`` overrides it).  They
#: are numba's serial kernels: on 2 cores the parallel ones are faster once loaded, but importing
#: numba and loading them (about 1 s) costs more than the serial kernel takes below this size.
AOT_COLD_MAX_TOKENS = 500_000


def aot_batch(n_tokens: int):
    """The kernels compiled ahead of time (:func:`aot_kernels`) when a batch of ``n_tokens`` tokens
    is to be tagged by them, else None: when they are built, for a batch of at most
    :func:`max_tokens` tokens (numba's serial kernels without a JIT dispatcher's call overhead), and
    for the first large batch of a process that has not imported numba (up to
    :data:`AOT_COLD_MAX_TOKENS`: a script that loads a model and tags once).  Later large batches go
    to numba's parallel kernels, as a process that tags again and again wants (once per process)."""
    kern = aot_kernels()
    if kern is None or n_tokens <= max_tokens():
        return kern
    limit = _env_tokens("CRFKIT_AOT_COLD_MAX_TOKENS", AOT_COLD_MAX_TOKENS)
    return kern if cold_batch(n_tokens, limit) else None


def aot_viterbi(model, corpus, kern=None):
    """``(ids, path_score)`` of a corpus by the ahead-of-time compiled fused emissions + Viterbi
    kernel (:func:`crfkit.kernels.chain_viterbi.tag_codes_seqs`, the function the JIT path runs),
    or None when it is not there (:func:`aot_kernels`) or the model has dense or
    bigram-observation features (which that kernel does not score)."""
    kern = aot_kernels() if kern is None else kern
    sp = model.space
    if kern is None or sp.n_dense or sp.n_bigram:
        return None
    i64 = np.int64
    sptr = np.asarray(corpus.seq_ptr, dtype=i64)
    ns = len(sptr) - 1
    nt = int(sptr[-1] - sptr[0]) if ns >= 0 else 0
    ids = np.zeros(nt, np.int32)
    ps = np.zeros(max(ns, 0))
    if ns <= 0 or nt == 0:
        return ids, ps
    tok_ptr = np.asarray(corpus.tok_ptr, dtype=i64)
    tp = tok_ptr[int(sptr[0]) : int(sptr[-1]) + 1]
    e0, e1 = int(tp[0]), int(tp[-1])
    codes = np.ascontiguousarray(corpus.attr[e0:e1], dtype=i64)
    raw = corpus.raw_val
    val = np.ascontiguousarray(raw[e0:e1] if len(raw) else raw, dtype=np.float64)
    cnt = np.diff(tp)
    seq0 = sptr - sptr[0]
    ent_ptr = np.ascontiguousarray(tp[seq0] - e0)
    kern.tag_codes_seqs(
        codes,
        cnt,
        val,
        seq0,
        ent_ptr,
        0,
        ns,
        *model._aot_model_args(),
        ids,
        ps,
    )
    return ids, ps


def decode(model, corpus, *, path: bool = True, marginals: bool = False, labels=None) -> dict:
    """What :meth:`crfkit.model.CRFModel.decode` returns, computed here (no bigram-observation
    features), in groups of sequences of bounded padded size (:func:`by_groups`), so any corpus
    size may come here.  The Viterbi path alone (no marginals, no label scores) is taken by the
    ahead-of-time compiled kernel when it is built (:func:`aot_viterbi`: the same labels, without
    a numpy call per position)."""
    sp = model.space
    w = model.weights
    L = sp.n_labels
    if path and not marginals and labels is None:
        got = aot_viterbi(model, corpus)
        if got is not None:
            return {"ids": got[0], "path_score": got[1]}
    score = emissions(corpus, sp, w)
    if sp.n_dense:
        score += corpus.dense @ sp.dense_weights(w)
    trans = transition_matrix(sp, w)
    seq_ptr = corpus.seq_ptr - corpus.seq_ptr[0] if len(corpus.seq_ptr) else corpus.seq_ptr
    out = {}
    if path:
        ids, ps = by_groups(viterbi, score, seq_ptr, trans)
        out.update(ids=ids, path_score=ps)
    if marginals:
        marg, logz = (
            by_groups(forward_backward, score, seq_ptr, trans)
            if L
            else (np.zeros((corpus.n_tokens, 0)), np.zeros(corpus.n_sequences))
        )
        out.update(marginals=marg, logz=logz)
    if labels is not None:
        out["label_score"] = path_scores(score, seq_ptr, trans, np.asarray(labels))
    return out


# ------------------------------------------------------------------ numba's serial kernels, warmed
# up
_WARM = {"state": "cold", "calls": 0}
_WARM_LOCK = threading.Lock()


def kernels_ready() -> bool:
    """True once the serial kernels of :func:`decode_serial` are loaded in this process."""
    return _WARM["state"] == "ready"


def note_small_call(model) -> None:
    """Count a small decode; from the second one on, load the serial kernels in a daemon thread
    (once per process), on a one-token input of ``model``'s array types."""
    _WARM["calls"] += 1
    if _WARM["state"] != "cold" or _WARM["calls"] < 2:
        return
    if os.environ.get("CRFKIT_SMALL_KERNELS", "").strip() == "0":
        return
    with _WARM_LOCK:
        if _WARM["state"] != "cold":
            return
        _WARM["state"] = "warming"

    def warm():
        try:
            from .corpus import Corpus

            nd = model.space.n_dense  # one token, no attribute (and zero dense values): any model
            tiny = Corpus(
                seq_ptr=[0, 1],
                tok_ptr=[0, 0],
                attr=[],
                val=[],
                y=[0],
                dense=np.zeros((1, nd)) if nd else None,
            )
            decode_serial(model, tiny, path=True, marginals=True, labels=np.zeros(1, np.int32))
            # the fused kernels of CRFModel.tag_dicts: a batch (tag_codes_seqs), one sentence
            # (tag_codes)
            from .kernels.chain import tag_codes, tag_codes_seqs

            sp = model.space
            one = np.array([0, 1], np.int64)
            codes, cnt, trans = (
                np.full(1, -1, np.int64),
                np.ones(1, np.int64),
                np.zeros((sp.n_labels, sp.n_labels)),
            )
            tag_codes_seqs(
                codes,
                cnt,
                np.zeros(0),
                one,
                one,
                0,
                1,
                sp.attr_ptr,
                sp.feat_label,
                model.weights,
                trans,
                np.zeros(1, np.int32),
                np.zeros(1),
            )
            tag_codes(
                codes,
                cnt,
                np.zeros(0),
                sp.attr_ptr,
                sp.feat_label,
                model.weights,
                trans,
                np.zeros(1, np.int32),
            )
            _WARM["state"] = "ready"
        except Exception:  # pragma: no cover - numba missing or broken: numpy it stays
            _WARM["state"] = "failed"

    threading.Thread(target=warm, name="crfkit-kernel-warmup", daemon=True).start()


def decode_serial(
    model, corpus, *, path: bool = True, marginals: bool = False, labels=None
) -> dict:
    """:func:`decode` through numba's per-sequence kernels (:mod:`crfkit.kernels.chain`, the
    functions :func:`crfkit.kernels.batch.decode_all` runs for each sequence), one call each, no
    thread pool."""
    from .kernels.chain import emissions, forward_backward, gold_score
    from .kernels.chain import transition_matrix as tm
    from .kernels.chain import viterbi as vit

    sp = model.space
    w = model.weights
    L = sp.n_labels
    nt, ns = corpus.n_tokens, corpus.n_sequences
    trans = tm(w, 1.0, sp.n_state, sp.trans_index)
    tmax = trans.max() if L else 0.0
    expM = np.exp(trans - tmax)
    xs = corpus.dense @ sp.dense_weights(w) if sp.n_dense else None
    ids = np.zeros(nt, np.int32)
    ps = np.zeros(ns)
    marg = np.zeros((nt, L) if marginals else (0, L))
    logz = np.zeros(ns)
    want = labels is not None
    lab = np.ascontiguousarray(labels if want else np.zeros(0), dtype=np.int32)
    lsc = np.zeros(ns)
    sptr = corpus.seq_ptr.tolist()
    tok_ptr, attr, val = corpus.tok_ptr, corpus.attr, corpus.val
    for s in range(ns):
        t0, t1 = sptr[s], sptr[s + 1]
        T = t1 - t0
        if T == 0:
            continue
        score = np.empty((T, L))
        emissions(tok_ptr, attr, val, t0, t1, sp.attr_ptr, sp.feat_label, w, 1.0, score)
        if xs is not None:
            score += xs[t0:t1]
        if path:
            ps[s] = vit(score, T, trans, ids, t0)
        if want:
            lsc[s] = gold_score(score, lab, t0, T, trans)
        if marginals:
            es, alpha, beta = np.empty((T, L)), np.empty((T, L)), np.empty((T, L))
            logz[s] = forward_backward(score, T, trans, expM, tmax, es, alpha, beta, np.empty(T))
            np.multiply(alpha, beta, out=marg[t0:t1])
    return decode_result(path, marginals, want, ids, ps, marg, logz, lsc)


def decode_result(path, marginals, label_scores, ids, path_score, marg, logz, label_score) -> dict:
    """The dict ``CRFModel.decode`` returns: ``ids``/``path_score`` (with ``path``),
    ``marginals``/``logz`` (with ``marginals``), ``label_score`` (with ``label_scores``)."""
    out = {}
    if path:
        out.update(ids=ids, path_score=path_score)
    if marginals:
        out.update(marginals=marg, logz=logz)
    if label_scores:
        out["label_score"] = label_score
    return out
