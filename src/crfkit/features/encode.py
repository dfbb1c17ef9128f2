"""From attribute lists to the encoded corpus and the feature space.

Input everywhere is a list of sequences; a sequence is a list of tokens; a token
is a list of attributes, each either a string (value 1.0) or a ``(string,
value)`` pair, as python-crfsuite takes them.  Labels are lists of strings.

Feature supports:

* ``observed`` (CRFsuite's default): a state feature exists for every
  (attribute, label) pair seen in training at least ``min_freq`` times, and a
  transition feature for every label bigram seen in training;
* ``all`` (CRF++ / Wapiti): every kept attribute with every label, every label
  pair.

State features are stored CSR by attribute, so ``observed`` costs memory in
proportion to the pairs that exist, not attributes x labels.

Dense features: next to (or instead of) the attributes, each sequence may
come with a real-valued matrix (tokens x D: word embeddings, pixels), passed
as ``dense=[array, ...]``; the model then has a weight for every (dimension,
label).  With ``X=None`` the sequences have dense vectors only.

Bigram-observation features (Wapiti's ``b`` patterns, CRF++ ``B`` templates
with macros): a second list of attribute sequences ``B=`` (same shape as
``X``: per sequence, per token, strings or ``(string, value)`` pairs) whose
attributes are tested together with the label pair (previous label, label)
of the transition *into* the token.  The first token of a sequence has no
incoming transition: bigram attributes there are ignored (they neither
create features nor change scores).  Support: ``observed`` gives a feature
for every (attribute, label pair) seen in training (the gold pair at a token
carrying the attribute), ``all`` every label pair of every bigram attribute
seen (after the first token); ``min_freq`` applies as for state features.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from ..corpus import MAX_FEATURE_VALUE, Corpus
from ..errors import DataError
from .space import (
    ALL_PAIRS,
    MAX_LABELS,
    TRAIN_BYTES_PER_PAIR,
    WARN_PASS_WORK,
    WARN_TRAIN_BYTES,
    FeatureSpace,
    StringTable,
    pair_dtype,
)

SUPPORTS = ("observed", "all")


def _too_large(what: str, seq: int, tok: int, name: str) -> DataError:
    """The error for a feature value beyond :data:`crfkit.corpus.MAX_FEATURE_VALUE`; ``sequence``,
    ``token`` (0-based) and ``problem`` let a reader that knows the file's lines restate it as
    file:line."""
    problem = (
        f"{what}, beyond crfkit's bound on feature values, |value| <= {MAX_FEATURE_VALUE:g} (larger "
        "values overflow or stall every optimizer); scale the values to about [-1, 1] or take their logarithm"
    )
    e = DataError(f"sequence {seq}, token {tok}: {problem}", name)
    e.sequence, e.token, e.value_problem = seq, tok, problem
    return e


def flatten(X, name: str = "<data>", first: int = 0):
    """Flatten attribute lists: (seq_lens, tok_counts, names, values or None).  ``first``: the index
    of ``X[0]`` in the whole data, for the error messages of a chunk (:func:`_flatten_ids`)."""
    seq_lens = np.fromiter(map(len, X), dtype=np.int64, count=len(X))
    # the tokens, their lengths and their names, each iterated in C (a Python step per token took
    # a third of this function on CoNLL-2000's test set)
    tok_counts = list(map(len, itertools.chain.from_iterable(X)))
    names: list = list(itertools.chain.from_iterable(itertools.chain.from_iterable(X)))
    values = None
    if set(map(type, names)) - {str}:
        flat_names = []
        values = np.empty(len(names), dtype=np.float64)
        for k, a in enumerate(names):
            if type(a) is str:
                flat_names.append(a)
                values[k] = 1.0
            elif isinstance(a, tuple) and len(a) == 2 and isinstance(a[0], str):
                flat_names.append(a[0])
                try:
                    values[k] = float(a[1])
                except (TypeError, ValueError):
                    raise DataError(
                        f"attribute {a[0]!r} has a value that is not a number: {a[1]!r}", name
                    ) from None
            else:
                raise DataError(
                    f"an attribute must be a string or a (string, number) pair, got {a!r}", name
                )
        if not np.all(np.isfinite(values)):
            bad = int(np.flatnonzero(~np.isfinite(values))[0])
            raise DataError(
                f"attribute {flat_names[bad]!r} has a non-finite value {values[bad]}", name
            )
        big = np.abs(values) > MAX_FEATURE_VALUE
        if big.any():
            k = int(np.flatnonzero(big)[0])
            tok = int(np.searchsorted(np.cumsum(tok_counts), k, side="right"))
            seq = int(np.searchsorted(np.cumsum(seq_lens), tok, side="right"))
            start = int(np.sum(seq_lens[:seq]))
            raise _too_large(
                f"attribute {flat_names[k]!r} has the value {values[k]:.10g}",
                first + seq,
                tok - start,
                name,
            )
        names = flat_names
    return seq_lens, np.asarray(tok_counts, dtype=np.int64), names, values


CHUNK = 4096  # sequences per chunk of :func:`_flatten_ids`


def _flatten_ids(X, name: str, lookup):
    """:func:`flatten` and the attribute ids in one pass over ``X``, a chunk of sequences at a time:
    (seq_lens, tok_counts, ids, values or None).

    ``lookup(names, transient)`` gives the ids of a chunk's flat list of names, and may return a
    ``commit`` function to call once the chunk's own objects are freed (see :func:`_interner`);
    ``transient``: the names are strings built for this pass (``X`` is a
    :class:`crfkit.features.lazy.LazySequences`), freed with their chunk.

    Only a chunk's attribute lists exist at a time, so with a lazy ``X`` (feature dicts converted by
    :mod:`crfkit.features.dicts`, column files through templates) the whole corpus as strings never
    exists at once; on the sklearn-crfsuite tutorial's CoNLL-2002 data that copy was 205 MB, the
    largest item of ``CRF.fit``'s peak."""
    from .lazy import LazySequences

    transient = isinstance(X, LazySequences)
    chunks = X.iter_chunks() if transient else _islices(X)
    lens, counts, ids, vals = [], [], [], []
    n = 0
    for block in chunks:
        seq_lens, tok_counts, names, values = flatten(block, name, first=n)
        n += len(block)
        del block
        lens.append(seq_lens)
        counts.append(tok_counts)
        got, commit = lookup(names, transient)
        ids.append(got)
        vals.append(values)
        del names
        if commit is not None:
            commit()

    def cat(parts, dtype):
        return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)

    values = None
    if any(v is not None for v in vals):
        values = cat([np.ones(len(i)) if v is None else v for v, i in zip(vals, ids)], np.float64)
    return cat(lens, np.int64), cat(counts, np.int64), cat(ids, np.int64), values


def _islices(X):
    it = iter(X)
    while True:
        block = list(itertools.islice(it, CHUNK))
        if not block:
            return
        yield block


def _known(lookup_names):
    """A :func:`_flatten_ids` lookup from a fixed ``names -> ids`` function (nothing to commit)."""
    return lambda names, transient: (lookup_names(names), None)


def _interner():
    """A growing attribute index (``{name: id}`` in first-occurrence order) and its chunk lookup for
    :func:`_flatten_ids`; map/dict iterate in C, no Python frame per string.

    With transient names (a lazy input), the index must not keep the chunk's own string objects:
    they sit among the chunk's other strings, and each survivor would pin its memory pool after the
    chunk is freed (measured: 90 1-MB arenas kept, +120 MB RSS on the sklearn-crfsuite tutorial's
    data, for 76,684 distinct attributes of 7.7 MB).  So the new names of a chunk are packed into
    one string, and copied out of it into the index once the chunk is gone (the ``commit`` step),
    where they land together in the freed space."""
    index: dict = {}
    get = index.get

    def lookup(names, transient):
        ids = np.fromiter(map(get, names, itertools.repeat(-1)), dtype=np.int64, count=len(names))
        miss = np.flatnonzero(ids < 0)
        commit = None
        if len(miss):
            base = len(index)
            fresh = dict.fromkeys(map(names.__getitem__, miss.tolist()))  # first-occurrence order
            ids[miss] = np.fromiter(
                map(
                    {s: base + j for j, s in enumerate(fresh)}.__getitem__,
                    map(names.__getitem__, miss.tolist()),
                ),
                dtype=np.int64,
                count=len(miss),
            )
            new = list(fresh)
            del fresh
            if transient:
                packed = "".join(new) + "."  # never sliced whole: every slice is a new object
                ends = np.cumsum(
                    np.fromiter(map(len, new), dtype=np.int64, count=len(new))
                ).tolist()
                del new

                def commit():
                    starts = [0] + ends[:-1]
                    index.update(
                        zip(
                            map(packed.__getitem__, map(slice, starts, ends)),
                            range(base, base + len(ends)),
                        )
                    )
            else:
                index.update(zip(new, range(base, base + len(new))))
        top = len(index) if commit is None else base + len(ends)
        return (ids.astype(np.int32) if top < 2**31 else ids), commit

    return index, lookup


def _dense_block(
    dense, seq_lens: np.ndarray | None, name: str, expect: int | None = None
) -> np.ndarray:
    """Stack per-sequence (T_i x D) matrices into one (n_tokens x D) float64 block, checking
    them."""
    if isinstance(dense, np.ndarray) and dense.ndim != 3:
        raise DataError(
            "dense features must be a list with one (tokens x dims) matrix per sequence", name
        )
    mats = []
    D = expect
    for i, d in enumerate(dense):
        try:
            a = np.asarray(d, dtype=np.float64)
        except (TypeError, ValueError):
            raise DataError(
                f"sequence {i}: dense features are not a numeric matrix", name
            ) from None
        if a.ndim == 1 and a.size == 0:
            a = a.reshape(0, D or 0)
        if a.ndim != 2:
            raise DataError(
                f"sequence {i}: dense features must be a (tokens x dims) matrix, "
                f"got an array of shape {a.shape}",
                name,
            )
        if D is None:
            D = a.shape[1]
        if a.shape[1] != D:
            raise DataError(f"sequence {i}: {a.shape[1]} dense dimensions, expected {D}", name)
        if seq_lens is not None and i < len(seq_lens) and a.shape[0] != seq_lens[i]:
            raise DataError(
                f"sequence {i} has {seq_lens[i]} tokens but {a.shape[0]} rows of dense features",
                name,
            )
        if not np.all(np.isfinite(a)):
            t, j = (int(x[0]) for x in np.nonzero(~np.isfinite(a)))
            raise DataError(
                f"sequence {i}, token {t}: dense feature {j} is {a[t, j]} (values must be finite)",
                name,
            )
        if a.size and np.abs(a).max() > MAX_FEATURE_VALUE:
            t, j = (int(x[0]) for x in np.nonzero(np.abs(a) > MAX_FEATURE_VALUE))
            raise _too_large(f"dense feature {j} is {a[t, j]:.10g}", i, t, name)
        mats.append(a)
    if seq_lens is not None and len(mats) != len(seq_lens):
        raise DataError(f"{len(seq_lens)} sequences but {len(mats)} dense matrices", name)
    if not mats:
        return np.zeros((0, D or 0))
    return np.ascontiguousarray(np.concatenate(mats, axis=0))


def _no_attributes(dense) -> list:
    """Attribute sequences for dense-only data: every token without attributes."""
    empty: list = []
    return [[empty] * len(d) for d in dense]


def offsets(counts: np.ndarray) -> np.ndarray:
    """CSR offsets of ``counts`` (int64, one longer: 0, then the running sums)."""
    p = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=p[1:])
    return p


def feature_table(
    keep_attr: np.ndarray,
    freq: np.ndarray,
    f_attr: np.ndarray,
    f_label: np.ndarray,
    support: str,
    width: int,
    dtype=np.int64,
    label_dtype=np.int32,
    tile: bool = True,
):
    """The kept attributes and their features: ``(kept, remap, ptr, labels)``.

    New attribute ids go by decreasing frequency (ties: first occurrence): the kernels look up
    ``attr_ptr`` / ``feat_label`` / weights / gradient by attribute id, and with Zipfian attribute
    frequencies this keeps the hot rows together in cache.  ``remap`` (of ``dtype``) maps an old id
    to its new one (-1: dropped).  With ``support="observed"`` the features are the pairs
    ``(f_attr, f_label)`` (sorted by new attribute, then label); otherwise every attribute has all
    ``width`` labels (or label pairs); ``labels`` are of ``label_dtype`` (with ``tile=False`` and
    that support, None: the caller states the layout, :data:`crfkit.features.space.ALL_PAIRS`)."""
    kept = np.flatnonzero(keep_attr)
    kept = kept[np.argsort(-freq[kept], kind="stable")]
    remap = np.full(len(keep_attr), -1, dtype=dtype)
    remap[kept] = np.arange(len(kept), dtype=dtype)
    A = len(kept)
    if support == "observed":
        na = remap[f_attr]
        order = np.lexsort((f_label, na))
        ptr = offsets(np.bincount(na[order], minlength=A))
        labels = f_label[order].astype(label_dtype, copy=False)
    else:
        ptr = np.arange(A + 1, dtype=np.int64) * width
        labels = np.tile(np.arange(width, dtype=label_dtype), A) if tile else None
    return kept, remap, ptr, labels


def label_ids(Y, seq_lens, label_index: dict, grow: bool, name: str) -> np.ndarray:
    flat = [lab for ys in Y for lab in ys]
    if len(Y) != len(seq_lens):
        raise DataError(f"{len(seq_lens)} sequences but {len(Y)} label sequences", name)
    ylens = np.fromiter((len(ys) for ys in Y), dtype=np.int64, count=len(Y))
    if np.any(ylens != seq_lens):
        i = int(np.flatnonzero(ylens != seq_lens)[0])
        raise DataError(f"sequence {i} has {seq_lens[i]} tokens but {ylens[i]} labels", name)
    if grow:
        label_index.update(zip(dict.fromkeys(flat), itertools.count(len(label_index))))
        return np.fromiter(map(label_index.__getitem__, flat), dtype=np.int32, count=len(flat))
    return np.fromiter(
        map(label_index.get, flat, itertools.repeat(-1)), dtype=np.int32, count=len(flat)
    )


def _bigram_arrays(tok_counts, ent, values):
    """(btok_ptr, battr, bval) of the entries with a known bigram attribute (``ent >= 0``)."""
    keep = ent >= 0
    tok_of = np.repeat(np.arange(len(tok_counts)), tok_counts)
    btok_ptr = offsets(np.bincount(tok_of[keep], minlength=len(tok_counts)))
    bval = values[keep] if values is not None else np.ones(int(keep.sum()))
    return btok_ptr, ent[keep].astype(np.int32), bval


def _check_shape(seq_lens, bseq_lens, btok_counts, name):
    if len(bseq_lens) != len(seq_lens):
        raise DataError(
            f"{len(seq_lens)} sequences but {len(bseq_lens)} bigram attribute sequences (B)", name
        )
    if np.any(bseq_lens != seq_lens):
        i = int(np.flatnonzero(bseq_lens != seq_lens)[0])
        raise DataError(
            f"sequence {i} has {seq_lens[i]} tokens but {bseq_lens[i]} tokens of bigram "
            "attributes (B)",
            name,
        )


def _build_bigram(B, seq_lens, seq_ptr, y, L, support, min_freq, name):
    """Bigram-observation attributes and features from training data (see the module doc).

    Returns (battributes, battr_ptr, bfeat_pair, (btok_ptr, battr, bval)).
    """
    # a chunk of sequences at a time, as the state attributes (B may be lazy: its strings never all
    # exist)
    index, lookup = _interner()
    bseq_lens, btok_counts, raw, values = _flatten_ids(B, name, lookup)
    _check_shape(seq_lens, bseq_lens, btok_counts, name)
    A0 = len(index)
    all_names = list(index)
    del index
    n_tok = len(y)
    tok_of = np.repeat(np.arange(n_tok, dtype=np.int64), btok_counts)
    first = np.zeros(n_tok, dtype=bool)
    first[seq_ptr[:-1][seq_lens > 0]] = True
    inner = ~first[tok_of]  # entries after the first token of their sequence
    ri = raw[inner]
    if support == "observed":
        ti = tok_of[inner]
        keys = ri * (L * L) + (y[ti - 1].astype(np.int64) * L + y[ti])
        keys, counts = np.unique(keys, return_counts=True)
        keys = keys[counts >= min_freq]
        f_attr, f_pair = keys // (L * L), (keys % (L * L)).astype(pair_dtype(L))
        keep_attr = np.zeros(A0, dtype=bool)
        keep_attr[f_attr] = True
    else:
        cnt = np.bincount(ri, minlength=A0)
        keep_attr = (cnt >= min_freq) & (cnt > 0)
        f_attr = f_pair = None
    freq = np.bincount(ri, minlength=A0)
    # support "all": every label pair of every kept attribute, in order; the pairs stay implicit
    kept, remap, battr_ptr, bfeat_pair = feature_table(
        keep_attr, freq, f_attr, f_pair, support, L * L, label_dtype=pair_dtype(L), tile=False
    )
    if bfeat_pair is None:
        bfeat_pair = ALL_PAIRS
    return (
        [all_names[k] for k in kept],
        battr_ptr,
        bfeat_pair,
        _bigram_arrays(btok_counts, remap[raw], values),
    )


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def check_label_count(L: int, n_tokens: int, name: str) -> None:
    """Before anything L x L is built: a :class:`DataError` above :data:`MAX_LABELS` labels (with
    the memory the run would need), a :class:`~crfkit.errors.DataWarning` with the estimated memory
    and work per pass when they are above :data:`WARN_TRAIN_BYTES` or :data:`WARN_PASS_WORK`."""
    need = TRAIN_BYTES_PER_PAIR * L * L
    if L > MAX_LABELS:
        raise DataError(
            f"{L} distinct labels: at most {MAX_LABELS} are supported (label pairs are 32-bit "
            f"ids), and training would need about {_gib(need)} for the L x L transition tables "
            "alone; is the label column the last one?",
            name,
        )
    work = n_tokens * L * L
    if need > WARN_TRAIN_BYTES or work > WARN_PASS_WORK:
        import warnings

        from ..errors import DataWarning

        warnings.warn(
            f"{name}: {L} distinct labels: training will need about {_gib(need)} for the L x L "
            f"transition tables and {float(work):.2g} label-pair operations per pass over the "
            f"{n_tokens} tokens (CoNLL-2000 chunking: 1e8); this may take very long",
            DataWarning,
            stacklevel=2,
        )


def build(
    X: Sequence | None,
    Y: Sequence,
    *,
    support: str = "observed",
    transitions: str | None = None,
    min_freq: float = 0,
    name: str = "<training data>",
    dense: Sequence | None = None,
    dense_names: Sequence[str] | None = None,
    B: Sequence | None = None,
) -> tuple[FeatureSpace, Corpus]:
    """Build the feature space from training data and encode that data against it.

    ``dense``: one (tokens x D) real matrix per sequence, weighted per
    (dimension, label) (``dense_names``: names of the D dimensions, for
    introspection); ``X=None``: no attributes, dense vectors only.

    ``min_freq``: features (observed) or attributes (all) seen fewer times are dropped
    (CRFsuite ``feature.minfreq`` / CRF++ ``-f``).
    ``transitions``: ``observed``, ``all`` or ``none`` (no transition features,
    e.g. a CRF++ template set without a ``B`` line); defaults to ``support``.
    ``B``: bigram-observation attribute sequences (same shape as ``X``), features
    on (attribute, previous label, label) with the support ``support``.
    """
    if support not in SUPPORTS:
        raise ValueError(f"feature support must be one of {SUPPORTS}, got {support!r}")
    transitions = transitions or support
    if transitions not in SUPPORTS + ("none",):
        raise ValueError(f"transitions must be one of {SUPPORTS + ('none',)}, got {transitions!r}")
    if X is None:
        if dense is None:
            raise ValueError("give attribute sequences X, dense matrices, or both")
        X = _no_attributes(dense)
    if len(X) == 0:
        raise DataError("no training sequences", name)
    attr_index, lookup = _interner()
    seq_lens, tok_counts, raw, values = _flatten_ids(X, name, lookup)
    D = _dense_block(dense, seq_lens, name) if dense is not None else None
    if seq_lens.sum() == 0:
        raise DataError("training data has no tokens", name)
    if (seq_lens == 0).any():
        i = int(np.flatnonzero(seq_lens == 0)[0])
        raise DataError(
            f"training sequence {i} is empty ({int((seq_lens == 0).sum())} empty in all): "
            "a sequence needs at least one token",
            name,
        )
    label_index: dict[str, int] = {}
    y = label_ids(Y, seq_lens, label_index, grow=True, name=name)
    L = len(label_index)
    check_label_count(L, int(seq_lens.sum()), name)
    # ids in first-occurrence order (_interner).  Temporaries are dropped as soon as they are used:
    # on CoNLL-2000 they are the largest allocations of the whole training run.
    A0 = len(attr_index)
    attributes_all = list(attr_index)
    del attr_index

    if support == "observed":
        key_type = np.int32 if A0 * L < 2**31 else np.int64
        keys = raw.astype(key_type)
        keys *= L
        keys += np.repeat(y, tok_counts)
        keys, counts = np.unique(keys, return_counts=True)
        keys = keys[counts >= min_freq]
        del counts
        f_attr = keys // L
        f_label = (keys % L).astype(np.int32)
        del keys
        keep_attr = np.zeros(A0, dtype=bool)
        keep_attr[f_attr] = True
    else:
        keep_attr = np.bincount(raw, minlength=A0) >= min_freq
        f_attr = f_label = None  # support "all": every label of a kept attribute
    freq = np.bincount(raw, minlength=A0)
    kept, remap, attr_ptr, feat_label = feature_table(
        keep_attr, freq, f_attr, f_label, support, L, np.int32
    )
    attributes = [attributes_all[k] for k in kept]
    del attributes_all
    # the names packed (their UTF-8 bytes and lengths, as a model file holds them): on CoNLL-2000
    # the 338,551 strings were 20 MB held through the whole training, the packed table is 4 MB
    attributes = StringTable.of(attributes) or attributes

    seq_ptr = offsets(seq_lens)
    if transitions == "all":
        trans_index = np.arange(L * L, dtype=np.int32).reshape(L, L)
    elif transitions == "none":  # a CRF++ template set without a B line
        trans_index = np.full((L, L), -1, dtype=np.int32)
    else:
        starts = np.zeros(len(y), dtype=bool)
        starts[seq_ptr[:-1][seq_lens > 0]] = True
        inner = ~starts[1:]
        pairs = np.unique(y[:-1][inner].astype(np.int64) * L + y[1:][inner])
        trans_index = np.full((L, L), -1, dtype=np.int32)
        trans_index.reshape(-1)[pairs] = np.arange(len(pairs), dtype=np.int32)

    labels = [None] * L
    for lab, k in label_index.items():
        labels[k] = lab
    bigram: dict = {}
    bcorp = None
    if B is not None:
        battributes, battr_ptr, bfeat_pair, bcorp = _build_bigram(
            B, seq_lens, seq_ptr, y, L, support, min_freq, name
        )
        bigram = dict(battributes=battributes, battr_ptr=battr_ptr, bfeat_pair=bfeat_pair)
    space = FeatureSpace(
        labels=labels,
        attributes=attributes,
        attr_ptr=attr_ptr,
        feat_label=feat_label,
        trans_index=trans_index,
        n_dense=0 if D is None else D.shape[1],
        dense_names=None if dense_names is None or D is None else list(dense_names),
        **bigram,
    )
    ent = remap[raw]
    del raw
    corpus = assemble(seq_ptr, tok_counts, ent, values, y, D, bcorp)
    return space, corpus


def assemble(seq_ptr, tok_counts, ent_attr, values, y, dense=None, bigram=None) -> Corpus:
    """The :class:`~crfkit.corpus.Corpus` of flat entries: attribute ids ``ent_attr`` (-1: dropped)
    with their ``values`` (None: all ones), ``tok_counts`` entries per token, ``seq_ptr`` tokens per
    sequence, labels ``y``, and the optional dense block and bigram-observation arrays
    ``(btok_ptr, battr, bval)``."""
    keep = ent_attr >= 0
    if keep.all():
        tok_ptr = offsets(tok_counts)
        attr = ent_attr
        val = values  # None: all ones, not stored (Corpus.raw_val)
    else:
        tok_of = np.repeat(np.arange(len(tok_counts)), tok_counts)
        tok_ptr = offsets(np.bincount(tok_of[keep], minlength=len(tok_counts)))
        attr = ent_attr[keep]
        val = values[keep] if values is not None else None
    btok_ptr, battr, bval = bigram if bigram is not None else (None, None, None)
    return Corpus(
        seq_ptr=seq_ptr,
        tok_ptr=tok_ptr,
        attr=attr,
        val=val,
        y=y,
        dense=dense,
        btok_ptr=btok_ptr,
        battr=battr,
        bval=bval,
    )


def encode(
    X: Sequence | None,
    space: FeatureSpace,
    Y: Sequence | None = None,
    *,
    name: str = "<data>",
    dense: Sequence | None = None,
    B: Sequence | None = None,
) -> Corpus:
    """Encode sequences against an existing feature space.

    Attributes the model does not know are dropped; labels it does not know get
    id -1 (they can still be scored as strings by the metrics).  ``dense``: one
    (tokens x n_dense) matrix per sequence, required exactly when the space
    has dense dimensions.  ``B``: the bigram-observation attribute sequences,
    required when the space has bigram-observation features (unknown ones are
    dropped, as for ``X``).
    """
    if space.n_bigram and B is None:
        raise DataError(
            f"the model has {space.n_bigram} bigram-observation features: give the bigram "
            "attribute sequences too (B=...)",
            name,
        )
    if space.n_dense and dense is None:
        raise DataError(
            f"the model has {space.n_dense} dense feature dimensions: give one "
            f"(tokens x {space.n_dense}) matrix per sequence (dense=...)",
            name,
        )
    if dense is not None and not space.n_dense:
        raise DataError("dense features were given, but the model has no dense dimensions", name)
    if X is None:
        if dense is None:
            raise ValueError("give attribute sequences X, dense matrices, or both")
        X = _no_attributes(dense)
    seq_lens, tok_counts, ent, values = _flatten_ids(X, name, _known(space.attribute_ids))
    D = _dense_block(dense, seq_lens, name, expect=space.n_dense) if dense is not None else None
    if Y is not None:
        y = label_ids(Y, seq_lens, dict(space.label_index), grow=False, name=name)
    else:
        y = np.full(int(seq_lens.sum()), -1, dtype=np.int32)
    bcorp = None
    if B is not None:
        bseq_lens, btok_counts, bnames, bvalues = flatten(B, name)
        _check_shape(seq_lens, bseq_lens, btok_counts, name)
        bent = np.fromiter(
            map(space.battr_index.get, bnames, itertools.repeat(-1)),
            dtype=np.int64,
            count=len(bnames),
        )
        bcorp = _bigram_arrays(btok_counts, bent, bvalues)
    return assemble(offsets(seq_lens), tok_counts, ent, values, y, D, bcorp)
