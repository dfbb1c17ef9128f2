"""What runs on the Dask workers: reading a shard, counting its attributes and labels, encoding it
against the broadcast feature space, and the per-shard loss / gradient / SGD epoch.

Every function here is a plain function of its arguments (a file path, the feature space, the
weights), so that the scheduler can re-run it on another worker from the source file when the
worker holding its result is lost: the encoded shards are task results derived from the files,
never data scattered from the client.

The reading and the encoding are those of the single-process path
(:func:`crfkit.io.columns.read_columns_list`, :func:`crfkit.pipeline.attributes_of`,
:func:`crfkit.io.crfsuite.read_crfsuite_list`, :func:`crfkit.features.encode.encode`), so that a
shard encodes to the rows the single-process run gives its sentences.
"""

from __future__ import annotations

import hashlib
import itertools
import threading
from dataclasses import dataclass

import numpy as np

from ..corpus import Corpus
from ..errors import CrfkitError, DataError
from ..features.encode import encode
from ..features.encode import flatten as _flatten
from ..features.encode import label_ids as _label_ids
from ..features.encode import offsets as _ptr


@dataclass(frozen=True)
class Source:
    """How to read a shard: its path, the format (``columns`` | ``crfsuite``) and, for column
    files, the template text, the padding flag and the DOCSTART rule."""

    path: str
    format: str = "columns"
    templates: str | None = None
    pad: bool = True
    docstart: str = "skip"


_TEMPLATES: dict = {}


def _templates(text: str):
    from ..features.templates import Templates

    t = _TEMPLATES.get(text)
    if t is None:
        t = _TEMPLATES[text] = Templates.parse(text, name="<templates>")
    return t


def read_shard(src: Source):
    """``(X, Y, n_columns)`` of one shard file: attribute sequences, label sequences and (column
    files) the number of observation columns (``None`` for CRFsuite files)."""
    if src.format == "crfsuite":
        from ..io.crfsuite import read_crfsuite_list

        seqs = read_crfsuite_list(src.path, name=src.path)
        for s in seqs:
            if s.weight != 1.0:
                raise DataError(
                    f"sequence weight {s.weight:g} (an @weight declaration): instance weights are "
                    "not supported by crfkit's training yet; remove the @weight lines",
                    src.path,
                    s.line,
                )
        return [s.attributes for s in seqs], [s.labels for s in seqs], None
    if src.format != "columns":
        raise CrfkitError(f"unknown shard format {src.format!r} (columns or crfsuite)")
    from ..features.rows import attributes_of
    from ..io.columns import read_columns_list

    templates = _templates(src.templates)
    sentences = read_columns_list(src.path, docstart=src.docstart, name=src.path)
    X = attributes_of(sentences, templates, pad=src.pad, name=src.path)
    Y = [s.labels for s in sentences]
    return X, Y, len(sentences[0].columns[0])


@dataclass
class ShardCounts:
    """The map step of the vocabulary: what one shard contributes, in the shard's own ids.

    ``attributes``: the shard's attribute strings in first-occurrence order; ``freq``: their
    occurrence counts; ``pair_attr``/``pair_label``/``pair_count``: the (attribute, label) pairs
    seen, with their counts; ``labels``: the shard's labels in first-occurrence order;
    ``trans``: the label bigrams seen inside sequences (``i * len(labels) + j``)."""

    path: str
    attributes: list
    freq: np.ndarray
    pair_attr: np.ndarray
    pair_label: np.ndarray
    pair_count: np.ndarray
    labels: list
    trans: np.ndarray
    n_sequences: int
    n_tokens: int
    n_columns: int | None


def count_shard(src: Source) -> ShardCounts:
    """Read a shard and count its attributes, (attribute, label) pairs, labels and label bigrams,
    with the checks :func:`crfkit.features.encode.build` makes (errors name the file)."""
    X, Y, ncol = read_shard(src)
    name = src.path
    if len(X) == 0:
        raise DataError("no training sequences", name)
    seq_lens, tok_counts, names, _values = _flatten(X, name)
    del X
    if (seq_lens == 0).any():
        i = int(np.flatnonzero(seq_lens == 0)[0])
        raise DataError(
            f"training sequence {i} is empty: a sequence needs at least one token", name
        )
    label_index: dict[str, int] = {}
    y = _label_ids(Y, seq_lens, label_index, grow=True, name=name)
    del Y
    L = len(label_index)
    attr_index = dict(zip(dict.fromkeys(names), itertools.count()))
    raw = np.fromiter(map(attr_index.__getitem__, names), dtype=np.int64, count=len(names))
    del names
    attributes = list(attr_index)
    del attr_index
    freq = np.bincount(raw, minlength=len(attributes))
    keys = raw * L + np.repeat(y, tok_counts)
    del raw
    keys, counts = np.unique(keys, return_counts=True)
    seq_ptr = _ptr(seq_lens)
    starts = np.zeros(len(y), dtype=bool)
    starts[seq_ptr[:-1]] = True
    inner = ~starts[1:]
    trans = np.unique(y[:-1][inner].astype(np.int64) * L + y[1:][inner])
    return ShardCounts(
        path=name,
        attributes=attributes,
        freq=freq,
        pair_attr=keys // L,
        pair_label=(keys % L).astype(np.int32),
        pair_count=counts,
        labels=list(label_index),
        trans=trans,
        n_sequences=len(seq_lens),
        n_tokens=int(seq_lens.sum()),
        n_columns=ncol,
    )


def merge_space(support: str, transitions, min_freq: float, *counts: ShardCounts):
    """The reduce step, run on a worker: the shards' counts (in shard order) merged into ONE feature
    space (:func:`crfkit.distributed.vocab.merge_counts`), after checking that every column file has
    the first one's number of observation columns.  The space stays on the workers (the input of
    every shard's encoding); the client gets its packed view (:func:`packed_space`)."""
    from .vocab import merge_counts

    ncols = [sc.n_columns for sc in counts]
    if any(c is not None for c in ncols) and len(set(ncols)) > 1:
        k = next(i for i, c in enumerate(ncols) if c != ncols[0])
        raise DataError(
            f"{ncols[k]} observation columns, but {counts[0].path} has {ncols[0]}", counts[k].path
        )
    return merge_counts(counts, support=support, transitions=transitions, min_freq=min_freq)


def space_layout(space) -> tuple[dict, int, str]:
    """``(fields, n_attributes, fingerprint)``: the feature space as the client holds it during
    training, every field but the attribute names (labels, the CSR layout of the features,
    transitions: what the optimizer, the dev scores and the model's arrays need), their number, and
    the fingerprint of the space (the checkpoints' key, computed here, where the names are strings
    already).  The names come to the client packed (:func:`packed_names`) when something reads them:
    at the end of training."""
    from dataclasses import fields

    from ..training.checkpoint import fingerprint

    empty = Corpus(
        np.zeros(1, np.int64),
        np.zeros(1, np.int64),
        np.zeros(0, np.int32),
        np.zeros(0),
        np.zeros(0, np.int32),
    )
    rest = {f.name: getattr(space, f.name) for f in fields(space) if f.name != "attributes"}
    return rest, len(space.attributes), fingerprint(space, empty)


def packed_names(space):
    """The space's attribute names as a :class:`crfkit.model.StringTable` (UTF-8 bytes and lengths:
    about a tenth of the memory of millions of Python strings and their list)."""
    from ..features.space import StringTable
    from ..features.space import pack_strings as _pack_strings

    return StringTable(*_pack_strings(space.attributes))


class Shard:
    """An encoded shard, resident on a worker: its corpus, the feature space it was encoded against,
    and (built on first use, never sent anywhere) the objective over it.

    The evaluations use the shard's own space, not the space's future: with two or more workers,
    Dask's active memory manager drops the extra replicas of the space between evaluations, and
    every evaluation then fetched the space again (its attribute names included) and rebuilt the
    objective around the new copy: 3.5x the CPU of one worker at 4M features."""

    def __init__(self, path: str, corpus: Corpus, space=None):
        self.path = path
        self.corpus = corpus
        self.space = space
        self._obj = None
        self._lock = threading.Lock()

    @property
    def n_sequences(self) -> int:
        return self.corpus.n_sequences

    def __getstate__(self):  # spilled to disk or moved: the corpus and its space
        return {"path": self.path, "corpus": self.corpus, "space": self.space}

    def __setstate__(self, st):
        self.__init__(st["path"], st["corpus"], st.get("space"))

    def objective(self, threads):
        from ..objective import Objective, Regularization

        obj = self._obj
        if obj is None or obj.threads != threads:
            obj = Objective(self.corpus, self.space, Regularization(), threads=threads)
            self._obj = obj
        return obj


def encode_shard(src: Source, space) -> Shard:
    """Read a shard again and encode it against the broadcast feature space (the reduce step's
    result)."""
    X, Y, _ = read_shard(src)
    corpus = encode(X, space, Y, name=src.path)
    del X, Y
    if corpus.n_tokens and int(corpus.y.min()) < 0:
        raise DataError(
            "a label of this shard is not in the vocabulary (the file changed since it was counted?)",
            src.path,
        )
    return Shard(src.path, corpus, space)


def concat_shards(*shards: Shard) -> Shard:
    """The shards of one worker as one corpus (a block): one kernel call and one gradient per worker
    and evaluation instead of one per shard (the O(features) work of an evaluation, zeroing the
    per-thread buffers and forming the gradient, is then paid once per worker)."""
    cs = [s.corpus for s in shards]
    if len(cs) == 1:
        return Shard(shards[0].path, cs[0], shards[0].space)
    seq, tok = [np.zeros(1, np.int64)], [np.zeros(1, np.int64)]
    t0 = e0 = 0
    for c in cs:
        seq.append(c.seq_ptr[1:] + t0)
        tok.append(c.tok_ptr[1:] + e0)
        t0 += c.n_tokens
        e0 += len(c.attr)
    corpus = Corpus(
        np.concatenate(seq),
        np.concatenate(tok),
        np.concatenate([c.attr for c in cs]),
        np.concatenate([c.val for c in cs]),
        np.concatenate([c.y for c in cs]),
    )
    return Shard(f"{shards[0].path} (+{len(shards) - 1} shards)", corpus, shards[0].space)


def shard_info(shard: Shard, space) -> dict:
    """Sizes, the largest feature value and a digest of the encoded shard (for checkpoints)."""
    from ..training.checkpoint import fingerprint

    c = shard.corpus
    k = int(np.argmax(np.abs(c.val))) if len(c.val) else -1
    return {
        "n_sequences": c.n_sequences,
        "n_tokens": c.n_tokens,
        "nnz": len(c.attr),
        "nbytes": c.nbytes(),
        "max_value": float(abs(c.val[k])) if k >= 0 else 0.0,
        "digest": fingerprint(space, c),
    }


def set_shard_threads(threads):
    from ..parallel import set_threads

    set_threads(threads)


def loss_grad(shard: Shard, w: np.ndarray, threads: int | None):
    """``(sum of nll, gradient of it)`` over the shard at ``w`` (no regulariser, not normalised)."""
    set_shard_threads(threads)
    with shard._lock:
        v, g = shard.objective(threads).nll_sum_grad(w)
    return float(v), g


def loss_only(shard: Shard, w: np.ndarray, threads: int | None) -> float:
    """Sum of nll over the shard at ``w`` (forward passes only)."""
    set_shard_threads(threads)
    with shard._lock:
        return shard.objective(threads).nll_sum(w)


def const(x):
    """``x`` itself: a value (the feature space, the weights) as a task result, which the scheduler
    can recompute on any worker from the task (scattered data that was lost cannot be)."""
    return x


def add(a, b):
    """The reduce step of the tree: a sum of ``(value, gradient)`` pairs, or of arrays."""
    if isinstance(a, tuple):
        return tuple(add(x, y) for x, y in zip(a, b))
    return a + b


# ------------------------------------------------------------------ parameter mixing


class _Unmonitored:
    """An objective whose ``value`` is NaN: the per-shard epochs of parameter mixing skip the
    monitoring pass the single-process optimizers make at the end of an epoch (the client
    evaluates the mixed weights over every shard instead)."""

    def __init__(self, obj):
        self.__dict__["_obj"] = obj
        self.__dict__["n_oracle"] = 0

    def value(self, w, count: bool = True) -> float:
        return float("nan")

    def __getattr__(self, name):
        return getattr(self._obj, name)

    def __setattr__(self, name, value):
        self.__dict__[name] = value


def mix_epoch(
    shard: Shard,
    w: np.ndarray,
    algorithm: str,
    epoch: int,
    seed: int,
    params: dict,
    l1: float,
    l2: float,
    threads: int | None,
):
    """One epoch of ``algorithm`` over the shard from ``w``; returns ``n_s * (weights after the
    epoch)`` and, for ``asg``, ``n_s * (the epoch's
    average)`` (the client divides the sums by ``n``).

    ``sg``/``asg`` restart their step counter each epoch (constant step ``eta``); ``sgd-l1``
    continues its learning-rate schedule from step ``epoch * n_s`` (the state passed in has the
    global epoch), with the cumulative-penalty bookkeeping restarted from the mixed weights."""
    from ..objective import Regularization

    set_shard_threads(threads)
    reg = Regularization(l1=l1, l2=l2)
    ns = shard.n_sequences
    sub_seed = int(
        np.random.SeedSequence(
            [int(seed) & 0xFFFFFFFF, int(epoch), int(shard_seed(shard.path))]
        ).generate_state(1)[0]
    )
    space = shard.space
    with shard._lock:
        base = shard.objective(threads)
        from ..objective import Objective

        obj = Objective(shard.corpus, space, reg, threads=threads)
        obj._emp = base.empirical_counts
        if algorithm in ("sg", "asg"):
            from ..optim import sgd

            fn = sgd.sg if algorithm == "sg" else sgd.asg
            res = fn(
                _Unmonitored(obj),
                np.array(w, dtype=np.float64),
                reg=reg,
                max_iterations=1,
                seed=sub_seed,
                **params,
            )
            st = res.state
            raw = np.asarray(st["w"], dtype=np.float64)
            out = (
                (ns * raw, ns * np.asarray(res.x, dtype=np.float64))
                if algorithm == "asg"
                else (ns * raw,)
            )
            return out
        if algorithm == "sgd-l1":
            from ..optim import sgdl1

            p = dict(params)
            p["monitor"] = False
            penalty = p.get("penalty", "cumulative")
            d = space.n_features
            settings = {
                "penalty": penalty,
                "schedule": p.get("schedule", "exponential"),
                "eta0": float(p.get("eta0", 0.1)),
                "alpha": float(p.get("alpha", 0.85)),
                "seed": sub_seed,
                "l1": float(l1),
                "l2": float(l2),
                "n": int(ns),
                "n_features": int(d),
            }
            k0 = int(epoch) * ns
            state = {
                "iteration": int(epoch),
                "x": np.array(w, dtype=np.float64),
                "aux": np.zeros(d),
                "lastk": np.full(
                    d if penalty == "naive" else 1, k0 if penalty == "naive" else 0, np.int64
                ),
                "u": 0.0,
                "step": float("nan"),
                "settings": settings,
            }
            p["eta0"], p["alpha"] = settings["eta0"], settings["alpha"]
            res = sgdl1.sgd_l1(
                _Unmonitored(obj),
                None,
                reg=reg,
                max_iterations=int(epoch) + 1,
                seed=sub_seed,
                state=state,
                **p,
            )
            return (ns * np.asarray(res.x, dtype=np.float64),)
    raise CrfkitError(f"parameter mixing does not run {algorithm!r}")


def shard_seed(path: str) -> int:
    """A stable 32-bit number of a shard's path (its random orders differ from the other
    shards')."""
    return int.from_bytes(hashlib.sha256(path.encode("utf-8")).digest()[:4], "little")
