"""The parameter layout, the trained model, tagging, and the model file.

Layout of the weight vector ``w`` (length ``n_features``):

* state features, ``w[0:n_state]``, CSR by attribute: features of attribute
  ``a`` are ``attr_ptr[a]:attr_ptr[a+1]``, feature ``k`` is for label
  ``feat_label[k]``;
* transition features, ``w[n_state:n_state + n_trans]``: ``trans_index[i, j]``
  is the offset of the weight of label pair ``i -> j``, or -1 when the pair
  has no feature;
* bigram-observation features (optional), ``w[bigram_offset:dense_offset]``:
  weights of (bigram attribute, label pair), CSR by bigram attribute: the
  features of bigram attribute ``b`` (``battributes[b]``) are
  ``battr_ptr[b]:battr_ptr[b+1]`` (relative to ``bigram_offset``), feature
  ``k`` is for the label pair ``bfeat_pair[k] = i*L + j`` (previous label
  ``i``, label ``j``).  A bigram attribute carried by token ``t`` (t >= 1)
  adds ``value * w`` to the transition score ``i -> j`` into token ``t``, so
  the transition matrix of a sequence becomes position dependent (Wapiti's
  bigram features; Lavergne et al. 2010, section 2);
* dense features (optional), ``w[dense_offset:]``: a ``n_dense x L`` block,
  row-major, the weight of (dimension ``j``, label ``l``) of the real-valued
  token vectors (``Corpus.dense``: embeddings, pixels) at
  ``dense_offset + j*L + l``.

Model file (version 1; version 2 when the model has dense features; version 3
when it has bigram-observation features): ``MAGIC``, a little-endian uint32 header length, a UTF-8
JSON header, the payload (each array zlib-compressed, laid out as the header's
``arrays`` table says), and last the SHA-256 of all the bytes before it, so
that a truncated or corrupted file (header or payload) is detected on load.
Nothing is unpickled.
Only non-zero weights are stored.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import os
import reprlib
import stat
import struct
import tempfile
import zlib
from dataclasses import dataclass, field, fields
from functools import cached_property
from collections.abc import Sequence

import numpy as np

from .errors import DataError, ModelError, TemplateError
from .features.templates import MAX_COLUMN, Templates
from .io.atomic import atomic_file

MAGIC = b"CRFKIT\x00M"
FORMAT_VERSION = 3   # 2 adds the dense block, 3 the bigram-observation block; a model is written with the
#                     lowest version that holds it (no dense, no bigram block: version 1)


def pair_dtype(n_labels: int) -> np.dtype:
    """The integer type of ``FeatureSpace.bfeat_pair``: int16 while every label pair ``i*L + j`` fits (L
    <= 181), else int32.  One entry per bigram-observation feature, so the candidate space's second
    largest array after the weights (Wapiti's space at NETtalk 5-grm: 123.6M features, 247 MB in int16
    against 494 MB in int32).  Signed, so that numba's integer arithmetic on it stays signed."""
    return np.dtype(np.int16) if n_labels * n_labels <= np.iinfo(np.int16).max + 1 else np.dtype(np.int32)


class AllPairs:
    """``FeatureSpace(bfeat_pair=ALL_PAIRS)``: every bigram-observation attribute has a feature for every
    label pair, in pair order (Wapiti's space; ``support="all"``), so ``bfeat_pair`` is implicit
    (``k - battr_ptr[b]``) and is made only when Python code reads it.  The per-sequence kernels, which
    take such rows as contiguous vectors (:attr:`FeatureSpace.bigram_full_rows`), never read it: SGD-L1
    trains without it (2 bytes per candidate: 25 MB at NETtalk 3-grm, 247 MB at 5-grm)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ALL_PAIRS"

    def __reduce__(self):
        # pickled as a reference to the module's one instance
        return "ALL_PAIRS"


ALL_PAIRS = AllPairs()


@dataclass
class FeatureSpace:
    labels: list[str]
    attributes: list[str]
    attr_ptr: np.ndarray
    feat_label: np.ndarray
    trans_index: np.ndarray
    n_dense: int = 0                      # dimensions of the dense real-valued token vectors
    dense_names: list[str] | None = None  # their names (default "dense[j]")
    battributes: list[str] | None = None  # bigram-observation attributes (default none)
    battr_ptr: np.ndarray | None = None   # CSR of their features (len(battributes) + 1)
    bfeat_pair: np.ndarray | None = None  # label pair i*L + j of every bigram-observation feature

    def __post_init__(self) -> None:
        self.attr_ptr = np.ascontiguousarray(self.attr_ptr, dtype=np.int64)
        self.feat_label = np.ascontiguousarray(self.feat_label, dtype=np.int32)
        self.trans_index = np.ascontiguousarray(self.trans_index, dtype=np.int32)
        L = len(self.labels)
        if self.trans_index.shape != (L, L):
            raise ValueError("trans_index must be L x L")
        if len(self.attr_ptr) != len(self.attributes) + 1 or self.attr_ptr[-1] != len(self.feat_label):
            raise ValueError("attr_ptr does not match attributes / feat_label")
        self.n_dense = int(self.n_dense)
        if self.n_dense < 0:
            raise ValueError("n_dense must be >= 0")
        if self.dense_names is None:
            self.dense_names = [f"dense[{j}]" for j in range(self.n_dense)]
        else:
            self.dense_names = [str(x) for x in self.dense_names]
        if len(self.dense_names) != self.n_dense:
            raise ValueError(f"{len(self.dense_names)} dense names for {self.n_dense} dense dimensions")
        self.battributes = [] if self.battributes is None else [str(x) for x in self.battributes]
        self.battr_ptr = np.ascontiguousarray(np.zeros(1) if self.battr_ptr is None else self.battr_ptr,
                                              dtype=np.int64)
        if isinstance(self.bfeat_pair, AllPairs):
            # implicit: made on first read (__getattr__)
            del self.bfeat_pair
            self._all_pairs = True
            if (len(self.battr_ptr) != len(self.battributes) + 1
                    or np.any(self.battr_ptr != np.arange(len(self.battributes) + 1) * (L * L))):
                raise ValueError("battr_ptr does not match battributes with every label pair (ALL_PAIRS)")
            return
        self._all_pairs = False
        pairs = np.asarray(np.zeros(0, dtype=np.int64) if self.bfeat_pair is None else self.bfeat_pair)
        if len(pairs) and (int(pairs.min()) < 0 or int(pairs.max()) >= L * L):
            raise ValueError("bfeat_pair holds a label pair outside L x L")
        # checked before the narrowing, which would wrap values that do not fit
        self.bfeat_pair = np.ascontiguousarray(pairs, dtype=pair_dtype(L))
        if (len(self.battr_ptr) != len(self.battributes) + 1 or self.battr_ptr[0] != 0
                or self.battr_ptr[-1] != len(self.bfeat_pair) or np.any(np.diff(self.battr_ptr) < 0)):
            raise ValueError("battr_ptr does not match battributes / bfeat_pair")

    def __getattr__(self, name):
        # only for attributes not found: the implicit bfeat_pair (ALL_PAIRS), made once when first read
        if name == "bfeat_pair" and self.__dict__.get("_all_pairs"):
            LL = len(self.labels) ** 2
            pairs = np.tile(np.arange(LL, dtype=pair_dtype(len(self.labels))), len(self.battributes))
            self.__dict__["bfeat_pair"] = pairs
            return pairs
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @cached_property
    def pairs_for_full_rows(self) -> np.ndarray:
        """``bfeat_pair`` for the kernels that take full rows (:attr:`bigram_full_rows`) as vectors: an
        empty array when every row is full (they never read it then), so that an implicit ``bfeat_pair``
        (ALL_PAIRS) is not made for them.  Taken once (the layout does not change)."""
        if self.n_bigram and bool(np.all(self.bigram_full_rows)):
            return np.zeros(0, dtype=pair_dtype(len(self.labels)))
        return self.bfeat_pair

    def __repr__(self) -> str:
        # the dataclass's repr, but implicit pairs are named, not made (247 MB at NETtalk 5-grm)
        implicit = self.__dict__.get("_all_pairs") and "bfeat_pair" not in self.__dict__
        parts = ("bfeat_pair=ALL_PAIRS" if f.name == "bfeat_pair" and implicit else f"{f.name}={getattr(self, f.name)!r}"
                 for f in fields(self))
        return f"{type(self).__name__}({', '.join(parts)})"

    # pickling: the dataclass fields only, so every block (state, transition, bigram-observation, dense)
    # travels and none of the lookup tables built on first use (attr_index, full_rows...) does; unpickling
    # checks the fields again (__post_init__); every-pair label pairs travel as ALL_PAIRS, not as the array
    # (made or not: 247 MB at NETtalk 5-grm, for a model saved with pickle or a space sent to Dask's workers)
    def __getstate__(self) -> dict:
        implicit = self.__dict__.get("_all_pairs")
        return {f.name: ALL_PAIRS if implicit and f.name == "bfeat_pair" else getattr(self, f.name)
                for f in fields(self)}

    def __setstate__(self, state: dict) -> None:
        names = {f.name for f in fields(self)}
        self.__init__(**{k: v for k, v in state.items() if k in names})

    @property
    def n_labels(self) -> int:
        return len(self.labels)

    @property
    def n_attributes(self) -> int:
        return len(self.attributes)

    @property
    def n_state(self) -> int:
        return len(self.feat_label)

    @cached_property
    def n_trans(self) -> int:
        return int((self.trans_index >= 0).sum())

    @cached_property
    def full_rows(self) -> np.ndarray:
        """Per attribute, 1 when its features are every label in order: a contiguous row of weights that
        the per-sequence kernels read as a vector (:func:`crfkit.kernels.chain.full_rows`)."""
        from .kernels.chain import full_rows
        return full_rows(self.attr_ptr, self.feat_label, self.n_labels)

    @cached_property
    def bigram_full_rows(self) -> np.ndarray:
        """Per bigram attribute, 1 when its features are every label pair in pair order (Wapiti's space): a
        contiguous row of L*L weights that the per-sequence kernels read and update as a vector."""
        if self.__dict__.get("_all_pairs") and "bfeat_pair" not in self.__dict__:
            return np.ones(len(self.battributes), dtype=np.int8)     # (what full_rows gives of ALL_PAIRS)
        from .kernels.chain import full_rows
        return full_rows(self.battr_ptr, self.bfeat_pair, self.n_labels * self.n_labels)

    @property
    def n_battributes(self) -> int:
        return len(self.battributes)

    @property
    def n_bigram(self) -> int:
        """Number of bigram-observation features."""
        return int(self.battr_ptr[-1])

    @property
    def bigram_offset(self) -> int:
        """Index of the first bigram-observation weight (right after the transitions)."""
        return self.n_state + self.n_trans

    @property
    def dense_offset(self) -> int:
        """Index of the first dense weight (the dense block ends the weight vector)."""
        return self.n_state + self.n_trans + self.n_bigram

    @property
    def n_features(self) -> int:
        return self.n_state + self.n_trans + self.n_bigram + self.n_dense * len(self.labels)

    def dense_weights(self, w: np.ndarray) -> np.ndarray:
        """The dense block of ``w`` as an (n_dense x L) view."""
        return w[self.dense_offset:self.n_features].reshape(self.n_dense, len(self.labels))

    @cached_property
    def attr_index(self) -> dict[str, int]:
        if isinstance(self.attributes, StringTable):
            return self.attributes.as_dict()
        return {a: i for i, a in enumerate(self.attributes)}

    def attribute_ids(self, names: Sequence[str]) -> np.ndarray:
        """The attribute id of each name (int64, -1 for an unknown name); a loaded model answers from
        its packed attribute table (:class:`StringTable`) without building a dict of every attribute."""
        if isinstance(self.attributes, StringTable) and "attr_index" not in self.__dict__:
            return self.attributes.ids(names)
        return np.fromiter(map(self.attr_index.get, names, itertools.repeat(-1)), dtype=np.int64,
                           count=len(names))

    @cached_property
    def battr_index(self) -> dict[str, int]:
        return {a: i for i, a in enumerate(self.battributes)}

    @cached_property
    def label_index(self) -> dict[str, int]:
        return {lab: i for i, lab in enumerate(self.labels)}

    def feature_attr(self) -> np.ndarray:
        """Attribute id of every state feature."""
        return np.repeat(np.arange(self.n_attributes, dtype=np.int64), np.diff(self.attr_ptr))

    def bfeature_attr(self) -> np.ndarray:
        """Bigram attribute id of every bigram-observation feature."""
        return np.repeat(np.arange(self.n_battributes, dtype=np.int64), np.diff(self.battr_ptr))

    def prune(self, w: np.ndarray) -> tuple["FeatureSpace", np.ndarray]:
        """The space restricted to features with non-zero weight (and attributes that keep one)."""
        ns = self.n_state
        # the kept features' attributes from their positions (no array of every feature's attribute, nor
        # of every label pair: NETtalk 5-grm has 123.6M candidates, an implicit bfeat_pair among them)
        keep = np.flatnonzero(w[:ns])
        fa = np.searchsorted(self.attr_ptr, keep, side="right") - 1
        counts = np.bincount(fa, minlength=self.n_attributes)
        live = np.flatnonzero(counts)
        attr_ptr = np.zeros(len(live) + 1, np.int64)
        np.cumsum(counts[live], out=attr_ptr[1:])
        L = self.n_labels
        ti = np.full((L, L), -1, np.int32)
        tw = []
        for i in range(L):
            for j in range(L):
                k = self.trans_index[i, j]
                if k >= 0 and w[ns + k] != 0:
                    ti[i, j] = len(tw)
                    tw.append(w[ns + k])
        bo = self.bigram_offset
        bw = w[bo:bo + self.n_bigram]
        bkeep = np.flatnonzero(bw)
        bfa = np.searchsorted(self.battr_ptr, bkeep, side="right") - 1
        bcounts = np.bincount(bfa, minlength=self.n_battributes)
        blive = np.flatnonzero(bcounts)
        battr_ptr = np.zeros(len(blive) + 1, np.int64)
        np.cumsum(bcounts[blive], out=battr_ptr[1:])
        space = FeatureSpace(labels=list(self.labels), attributes=(self.attributes.take(live) if hasattr(self.attributes, "packed")
                                                         else [self.attributes[a] for a in live]),
                             attr_ptr=attr_ptr, feat_label=self.feat_label[keep], trans_index=ti,
                             n_dense=self.n_dense, dense_names=list(self.dense_names),
                             battributes=[self.battributes[b] for b in blive], battr_ptr=battr_ptr,
                             bfeat_pair=(self.pairs_for_full_rows[bkeep] if len(self.pairs_for_full_rows) else
                                         (bkeep - self.battr_ptr[bfa]).astype(pair_dtype(L))))
        # the dense block is kept whole: every token has a value in every dimension
        return space, np.concatenate([w[:ns][keep], np.asarray(tw, dtype=np.float64), bw[bkeep],
                                      w[self.dense_offset:self.n_features]])


# the dataclass keeps bfeat_pair's default (None) as a class attribute too, which an instance whose
# bfeat_pair is implicit (ALL_PAIRS: no instance attribute until read) would find instead of reaching
# __getattr__; __init__ has the default in its signature and does not read the class attribute
del FeatureSpace.bfeat_pair


def _pack_strings(strings: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    if hasattr(strings, "packed"):      # a StringTable (or a sequence that stands for one): already packed
        return strings.packed()
    encoded = [s.encode("utf-8") for s in strings]
    lens = np.fromiter((len(b) for b in encoded), dtype=np.int64, count=len(encoded))
    return np.frombuffer(b"".join(encoded), dtype=np.uint8), lens


def _unpack_strings(blob: np.ndarray, lens: np.ndarray) -> list[str]:
    """The strings packed by :func:`_pack_strings` (UTF-8 bytes, their byte lengths).  The blob is decoded
    once and sliced (a decode per string took most of a model's load time); with multi-byte characters the
    byte offsets become character offsets by discounting UTF-8 continuation bytes, and a string that
    starts inside a character is an error, as decoding it alone would be."""
    raw = blob.tobytes()
    text = raw.decode("utf-8")
    ends = np.cumsum(lens)
    starts = ends - lens
    if len(text) != len(raw):
        cont = (blob & 0xC0) == 0x80
        if cont[starts[starts < len(raw)]].any():
            raise ValueError("a string starts inside a UTF-8 character")
        before = np.zeros(len(raw) + 1, np.int64)
        np.cumsum(cont, out=before[1:])
        starts, ends = starts - before[starts], ends - before[ends]
    return [text[s:e] for s, e in zip(starts.tolist(), ends.tolist())]



def _check_packed(raw: bytes, blob: np.ndarray, lens: np.ndarray) -> None:
    """Raise ValueError unless the packed strings decode: valid UTF-8 that no string starts inside a
    character of (what :func:`_unpack_strings` would find), without slicing them."""
    text = raw.decode("utf-8")
    if len(text) != len(raw):
        starts = np.cumsum(lens) - lens
        if ((blob & 0xC0) == 0x80)[starts[starts < len(raw)]].any():
            raise ValueError("a string starts inside a UTF-8 character")


_U64 = np.uint64
_HASH_KEYS = np.array([0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB, 0xD6E8FEB86659FD93,
                       0xA0761D6478BD642F, 0xE7037ED1A0B428DB, 0x8EBC6AF09C88C6E3, 0x589965CC75374CC3],
                      dtype=_U64)


def _packed_hashes(blob: np.ndarray, lens: np.ndarray) -> np.ndarray | None:
    """A 64-bit hash of each packed string (UTF-8 bytes ``blob``, byte lengths ``lens``), or None when the
    longest string would make the padded table below too large (a few strings of thousands of bytes).

    The strings are laid out as the rows of a zero-padded (n x W) byte matrix (a boolean mask puts the
    blob's bytes in place in one pass), each row read as W/8 64-bit words; the hash is the sum of the
    words times odd keys (one per word position), mixed with the length."""
    n = len(lens)
    if n == 0:
        return np.zeros(0, _U64)
    W = (int(lens.max()) + 7) // 8 * 8 or 8
    if n * W > 4 * blob.size + (16 << 20):
        return None
    A = np.zeros((n, W), np.uint8)
    A[np.arange(W)[None, :] < lens[:, None]] = blob
    words = A.view(_U64)                     # n x W/8, native byte order: only compared with itself
    nw = words.shape[1]
    keys = np.resize(_HASH_KEYS, nw) + (np.arange(nw, dtype=_U64) // _U64(8)) * _U64(2)
    with np.errstate(over="ignore"):
        h = (words * keys[None, :]).sum(axis=1, dtype=_U64)
        h ^= lens.astype(_U64) * _U64(0xFF51AFD7ED558CCD)
        h ^= h >> _U64(29)
    return h


class StringTable(Sequence):
    """A model's attribute names as the model file holds them (UTF-8 bytes and byte lengths), checked
    when the model loads but turned into Python strings only when something reads them as a list.

    A model of a few hundred thousand attributes took most of its load time to make that many strings
    and a dict of them; tagging a few sentences needs the ids of a few thousand names.  :meth:`ids` finds
    those through 64-bit hashes of the packed names (every candidate is compared byte for byte, so a
    collision costs a comparison, never a wrong id); a second lookup, or one of many names, builds the
    dict (a process that tags again and again pays for it once).  Anything else (indexing, iteration, ``==``,
    ``len``) behaves as the list of strings, built once on first use."""

    __slots__ = ("_blob", "_lens", "_raw", "_list", "_dict", "_hash", "_hash_calls")

    def __init__(self, blob: np.ndarray, lens: np.ndarray):
        # one copy of the bytes: the array is a read-only view of them
        self._raw = np.ascontiguousarray(blob, dtype=np.uint8).tobytes()
        self._blob = np.frombuffer(self._raw, dtype=np.uint8)
        self._lens = np.ascontiguousarray(lens, dtype=np.int64)
        _check_packed(self._raw, self._blob, self._lens)
        self._list = self._dict = self._hash = None
        self._hash_calls = 0

    def __reduce__(self):
        return (StringTable, (self._blob, self._lens))

    def _strings(self) -> list[str]:
        if self._list is None:
            self._list = _unpack_strings(self._blob, self._lens)
        return self._list

    def __len__(self) -> int:
        return len(self._lens)

    def packed(self) -> tuple[np.ndarray, np.ndarray]:
        """``(blob, lens)``: the UTF-8 bytes and byte lengths (what :func:`_pack_strings` gives of the list)."""
        return self._blob, self._lens

    def take(self, idx) -> "StringTable":
        """The table of the strings at ``idx`` (ids, in that order), cut from the packed bytes: no Python
        string is made (a model pruned before saving keeps its attributes packed).  Increasing ids (what
        pruning keeps) are one boolean selection of the bytes; any other order is joined in chunks."""
        idx = np.asarray(idx, dtype=np.int64)
        lens = self._lens[idx]
        if len(idx) == 0 or np.all(idx[1:] > idx[:-1]):
            keep = np.zeros(len(self._lens), dtype=bool)
            keep[idx] = True
            blob = self._blob[np.repeat(keep, self._lens)].tobytes()
        else:
            starts = (np.cumsum(self._lens) - self._lens)[idx]
            raw, parts = self._raw, []
            for k in range(0, len(idx), 1 << 16):
                a, b = starts[k:k + (1 << 16)].tolist(), (starts + lens)[k:k + (1 << 16)].tolist()
                parts.append(b"".join([raw[i:j] for i, j in zip(a, b)]))
            blob = b"".join(parts)
            del parts
        return StringTable._sliced(blob, lens)

    @classmethod
    def of(cls, names: Sequence[str]) -> "StringTable | None":
        """The table of a list of strings, packed without a bytes object per string (one join, one encode;
        byte lengths from the character lengths when every character is ASCII), or None when a name
        cannot be encoded as UTF-8 (a lone surrogate), which a model file could not hold either."""
        text = "".join(names)
        try:
            raw = text.encode("utf-8")
        except UnicodeEncodeError:
            return None
        if len(raw) == len(text):
            lens = np.fromiter(map(len, names), dtype=np.int64, count=len(names))
        else:
            lens = np.fromiter((len(s.encode("utf-8")) for s in names), dtype=np.int64, count=len(names))
        del text
        return cls._sliced(raw, lens)

    @classmethod
    def _sliced(cls, raw: bytes, lens: np.ndarray) -> "StringTable":
        """A table of whole strings cut from a checked one (valid UTF-8 at string boundaries already)."""
        t = cls.__new__(cls)
        t._raw = raw
        t._blob = np.frombuffer(raw, dtype=np.uint8)
        t._lens = np.ascontiguousarray(lens, dtype=np.int64)
        t._list = t._dict = t._hash = None
        t._hash_calls = 0
        return t

    def __getitem__(self, i):
        return self._strings()[i]

    def __iter__(self):
        return iter(self._strings())

    def __contains__(self, name) -> bool:
        return isinstance(name, str) and self.ids([name])[0] >= 0

    def __eq__(self, other):
        if isinstance(other, (list, tuple, StringTable)):
            return self._strings() == list(other)
        return NotImplemented

    __hash__ = None   # a mutable-looking sequence, as the list it stands for

    def __add__(self, other):
        return self._strings() + list(other)

    def __radd__(self, other):
        return list(other) + self._strings()

    def __repr__(self) -> str:
        return f"StringTable({len(self)} strings)"

    def index(self, name, start: int = 0, stop: int | None = None) -> int:
        return self._strings().index(name, start, len(self) if stop is None else stop)

    def as_dict(self) -> dict[str, int]:
        """name -> id (the last id of a name that occurs twice, as ``{a: i for i, a in enumerate(...)}``)."""
        if self._dict is None:
            self._dict = dict(zip(self._strings(), range(len(self))))
        return self._dict

    def ids(self, names: Sequence[str]) -> np.ndarray:
        """The id of each name (int64; -1 for a name not in the table)."""
        n = len(names)
        if n == 0:
            return np.zeros(0, np.int64)
        if self._dict is None and n <= len(self):    # (more names than the table holds: the dict, without
            uniq = list(dict.fromkeys(names))        # first counting the distinct ones, ~0.1 s for 900k names)
            # the hashes answer the first lookup, a dict every later one (a tagger asked again and again,
            # as an estimator's predict_single in a loop, pays for the dict once and then ~50 ns a name)
            self._hash_calls += 1
            if 4 * len(uniq) <= len(self) and self._hash_calls == 1:
                found = self._probe(uniq)
                if found is not None:
                    return np.fromiter(map(found.__getitem__, names), dtype=np.int64, count=n)
        return np.fromiter(map(self.as_dict().get, names, itertools.repeat(-1)), dtype=np.int64, count=n)

    def _probe(self, uniq: list) -> dict | None:
        """{name: id or -1} for distinct names, through the hashes of the table (None: no hashes)."""
        if self._hash is None:
            h = _packed_hashes(self._blob, self._lens)
            self._hash = (h, np.cumsum(self._lens) - self._lens) if h is not None else False
        if self._hash is False:
            return None
        h, starts = self._hash[:2]
        enc = [u.encode("utf-8", "surrogatepass") if isinstance(u, str) else None for u in uniq]
        good = [b for b in enc if b is not None]
        qlens = np.fromiter(map(len, good), dtype=np.int64, count=len(good))
        qh = _packed_hashes(np.frombuffer(b"".join(good), dtype=np.uint8), qlens) if good else np.zeros(0, _U64)
        if qh is None:
            return None
        if len(qh):
            # the table's strings whose hash is some name's hash: one pass over the table's hashes against
            # the few names' sorted hashes
            sq = np.sort(qh)
            k = np.minimum(np.searchsorted(sq, h), len(sq) - 1)
            cand = np.flatnonzero(sq[k] == h)
        else:
            cand = np.zeros(0, np.int64)
        raw, lens = self._raw, self._lens
        by_bytes: dict[bytes, int] = {}
        for j in cand.tolist():     # the last of equal strings wins, as in a dict built in order
            s0 = int(starts[j])
            by_bytes[raw[s0:s0 + int(lens[j])]] = j
        return {u: (by_bytes.get(b, -1) if b is not None else -1) for u, b in zip(uniq, enc)}


def _small_int(a: np.ndarray) -> np.ndarray:
    """Store integer arrays in the narrowest unsigned type that holds them."""
    if a.size == 0 or a.min() < 0:
        return a
    m = int(a.max())
    for dt in (np.uint8, np.uint16, np.uint32):
        if m <= np.iinfo(dt).max:
            return a.astype(dt)
    return a


@dataclass
class CRFModel:
    """A trained linear-chain CRF: feature space, weights and metadata."""

    space: FeatureSpace
    weights: np.ndarray
    meta: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.weights = np.ascontiguousarray(self.weights, dtype=np.float64)
        if len(self.weights) != self.space.n_features:
            raise ValueError(f"{len(self.weights)} weights for {self.space.n_features} features")

    # ------------------------------------------------------------------ tagging
    @property
    def labels(self) -> list[str]:
        return self.space.labels

    def encode(self, X, Y=None, name: str = "<data>", dense=None, B=None):
        """The :class:`crfkit.corpus.Corpus` of attribute sequences ``X`` (an already encoded corpus,
        e.g. :meth:`encode_rows`', is returned as it is)."""
        from .corpus import Corpus
        if isinstance(X, Corpus) and Y is None and dense is None and B is None:
            return X
        from .features.encode import encode
        return encode(X, self.space, Y, name=name, dense=dense, B=B)

    def encode_rows(self, sentences):
        """The corpus of token rows (per sentence a list of tokens, each the list of its observation
        columns) through the model's templates, or None when the model's features need more than
        the unigram templates (bigram-observation templates, dense columns): then
        ``pipeline.inputs_of_rows`` and :meth:`encode` do it.  The attribute strings of value
        combinations met before are not built again (:class:`crfkit.features.tplenc.TemplateIds`,
        kept with the model)."""
        tids = self.__dict__.get("_template_ids", False)
        if tids is False:
            tids = None
            meta = self.meta if isinstance(self.meta, dict) else {}
            if meta.get("templates") and not self.space.n_bigram and not self.space.n_dense \
                    and not meta.get("dense_columns"):
                from .features.tplenc import TemplateIds
                from .pipeline import tagger_from_model
                templates, pad = tagger_from_model(self)
                if not templates.bigram_observation:
                    tids = TemplateIds(templates, self.space.attribute_ids, pad=pad)
            self.__dict__["_template_ids"] = tids
        if tids is None:
            return None
        from .features.encode import _assemble, _ptr
        from .features.tplenc import TooWide
        try:
            lens, counts, ids = tids.ids(sentences)
        except TooWide:
            return None
        return _assemble(_ptr(lens), counts, ids, None, np.full(int(lens.sum()), -1, dtype=np.int32))

    def tag_dicts(self, X, threads: int | None = None) -> list[list[str]] | None:
        """Viterbi labels of sequences of flat feature dicts (sklearn-crfsuite's input) by the fast path of
        :mod:`crfkit.features.dictenc` (no attribute strings built); ``None`` when ``X`` is not of that
        shape or the model has dense or bigram-observation features (then use :func:`to_attributes`
        and :meth:`tag`, which also say what is wrong with bad input).

        Once numba's serial kernels are loaded in this process (:func:`crfkit.npdecode.kernels_ready`), or
        for more than :func:`crfkit.npdecode.max_tokens` tokens, the attribute codes go straight to the
        fused emissions + Viterbi kernel (:meth:`_tag_codes`: no corpus built); a small batch in a process
        without them goes through :meth:`decode` (numpy).  The transition matrix is computed once per
        weight vector (a model whose ``weights`` array is changed in place keeps the old one: assign a
        new array instead)."""
        s = self.space
        if s.n_dense or s.n_bigram or not X:
            return None
        enc = self.__dict__.get("_dict_encoder")
        if enc is None:
            from .features.dictenc import DictEncoder
            enc = self.__dict__["_dict_encoder"] = DictEncoder(s)
        r = enc.codes(X)
        if r is None:
            return None
        from . import npdecode
        if npdecode.kernels_ready() or len(r[1]) > npdecode.max_tokens():
            return self._tag_codes(X, *r, threads)
        corpus = enc.corpus(X, *r)
        ids, _ = self.viterbi(corpus, threads)
        return self._split(corpus, ids)

    def _tag_codes(self, X, a, cnt, v, threads=None) -> list[list[str]]:
        """The labels of ``X`` from its attribute codes (:meth:`DictEncoder.codes`) by the fused emissions +
        Viterbi kernel: one serial call for the whole batch (:func:`crfkit.kernels.chain.tag_codes_seqs`),
        or, when ``threads`` asks for several and the batch has more than 64 sequences, the batch cut into
        chunks on the thread pool (:func:`crfkit.kernels.batch.tag_codes_all`)."""
        from .kernels.chain import tag_codes, tag_codes_seqs, transition_matrix
        sp, w = self.space, self.weights
        tc = self.__dict__.get("_trans_cache")
        if tc is None or tc[0] is not w:
            tc = self.__dict__["_trans_cache"] = (w, transition_matrix(w, 1.0, sp.n_state, sp.trans_index))
        trans = tc[1]
        ns = len(X)
        labels = sp.labels
        if ns == 1:                 # predict_single: the one-sequence kernel, fewer arguments to dispatch
            ids = np.empty(len(cnt), dtype=np.int32)
            tag_codes(a, cnt, v, sp.attr_ptr, sp.feat_label, w, trans, ids)
            return [list(map(labels.__getitem__, ids.tolist()))]
        seq_ptr = np.zeros(ns + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, X), dtype=np.int64, count=ns), out=seq_ptr[1:])
        ent_ptr = np.zeros(len(cnt) + 1, dtype=np.int64)
        np.cumsum(cnt, out=ent_ptr[1:])
        ent_ptr = ent_ptr[seq_ptr]
        ids = np.empty(len(cnt), dtype=np.int32)
        ps = np.empty(ns)
        nc = 1
        if ns > 64:
            from .parallel import n_chunks
            nc = n_chunks(threads, ns, per_thread=4)
        if nc > 1:
            from .kernels.batch import chunk_bounds, tag_codes_all
            tag_codes_all(a, cnt, v, seq_ptr, ent_ptr, chunk_bounds(seq_ptr, nc), sp.attr_ptr, sp.feat_label, w,
                          trans, ids, ps)
        else:
            tag_codes_seqs(a, cnt, v, seq_ptr, ent_ptr, 0, ns, sp.attr_ptr, sp.feat_label, w, trans, ids, ps)
        lc = self.__dict__.get("_label_array")
        if lc is None or lc[0] is not labels or len(lc[1]) != len(labels):
            lc = self.__dict__["_label_array"] = (labels, np.array(labels, dtype=object))
        names = lc[1][ids].tolist()
        p = seq_ptr.tolist()
        return [names[p[i]:p[i + 1]] for i in range(ns)]

    def _args(self):
        s = self.space
        return s.attr_ptr, s.feat_label, s.trans_index, self.weights, s.n_state

    def decode(self, corpus, *, path: bool = True, marginals: bool = False, labels: np.ndarray | None = None,
               threads: int | None = None, sparse: bool | str = "auto") -> dict:
        """One pass over an encoded corpus computing what is asked for.

        Returns a dict with ``ids`` (best label ids, n_tokens) and
        ``path_score`` (n_seq) when ``path``; ``marginals`` (n_tokens x L) and
        ``logz`` (n_seq) when ``marginals``; ``label_score`` (n_seq) when
        ``labels`` (label ids, n_tokens) is given.

        ``sparse``: for a model with label-pair x observation features, compute
        the marginals with the sparse forward-backward recursions
        (:mod:`crfkit.kernels.sparse_fb`; same results) -- ``True``,
        ``False``, or ``"auto"``: when the non-zero label-pair scores per
        position are estimated at under a fifth of the L x L pairs (on CoNLL-2000
        chunkers the sparse recursions break even at about a quarter).

        Small corpora (at most :func:`crfkit.npdecode.max_tokens` tokens) of a model without
        bigram-observation features are decoded in numpy (:mod:`crfkit.npdecode`: the same results,
        without numba's start-up and thread-pool costs), or, in a process that has decoded small inputs
        before and loaded them, by numba's serial per-sequence kernels; larger ones by the parallel
        numba kernels.
        """
        sp = self.space
        if corpus.n_dense != sp.n_dense:
            raise DataError(f"the model has {sp.n_dense} dense dimensions but the data {corpus.n_dense}")
        if not (sp.n_bigram and corpus.has_bigram):
            from . import npdecode
            if corpus.n_tokens <= npdecode.max_tokens():
                if npdecode.kernels_ready():     # a process tagging again and again: numba, serial
                    return npdecode.decode_serial(self, corpus, path=path, marginals=marginals, labels=labels)
                npdecode.note_small_call(self)
                return npdecode.decode(self, corpus, path=path, marginals=marginals, labels=labels)
        from .kernels.batch import chunk_bounds, decode_all
        from .parallel import n_chunks
        nt, ns, L = corpus.n_tokens, corpus.n_sequences, self.space.n_labels
        ids = np.zeros(nt if path else 0, dtype=np.int32)
        ps = np.zeros(ns if path else 0)
        marg = np.zeros((nt, L) if marginals else (0, L))
        logz = np.zeros(ns if marginals else 0)
        want_labels = labels is not None
        lab = np.ascontiguousarray(labels if want_labels else np.zeros(0), dtype=np.int32)
        lsc = np.zeros(ns if want_labels else 0)
        xs = corpus.dense @ sp.dense_weights(self.weights) if sp.n_dense else np.zeros((0, L))
        if nt:
            b = chunk_bounds(corpus.seq_ptr, n_chunks(threads, ns, per_thread=4))
            if sp.n_bigram and corpus.has_bigram:
                from .kernels.batch import decode_all_bigram
                use_sparse = marginals and (sparse is True or (sparse == "auto" and
                                                               self.pair_density(corpus) < 0.2))
                args = (corpus.seq_ptr, corpus.tok_ptr, corpus.attr, corpus.val, corpus.btok_ptr,
                        corpus.battr, corpus.bval, sp.attr_ptr, sp.feat_label, sp.trans_index,
                        sp.battr_ptr, sp.pairs_for_full_rows, self.weights, sp.n_state, sp.bigram_offset, b)
                if use_sparse:
                    from .kernels.sparse_fb import sparse_marginals_bigram
                    sparse_marginals_bigram(*args, marg, logz, xs, np.zeros((len(b) - 1, 2), np.int64))
                    if path or want_labels:
                        decode_all_bigram(*args, ids, ps, np.zeros((0, L)), np.zeros(0), lab, lsc, xs)
                else:
                    decode_all_bigram(*args, ids, ps, marg, logz, lab, lsc, xs)
            else:
                full = sp.full_rows     # none full: an empty array, decode_all then takes the plain scatter
                decode_all(corpus.seq_ptr, corpus.tok_ptr, corpus.attr, corpus.val, *self._args(), b,
                           ids, ps, marg, logz, lab, lsc, xs, full if full.any() else full[:0])
        from .npdecode import decode_result
        return decode_result(path, marginals, want_labels, ids, ps, marg, logz, lsc)

    def pair_density(self, corpus) -> float:
        """Estimated share of the L x L label pairs with a non-zero score at a position (transitions plus
        the label-pair x observation features of the tokens' attributes): what the sparse recursions cost
        relative to the dense ones (:func:`pair_density`)."""
        return pair_density(self.space, corpus, self.weights)

    def viterbi(self, corpus, threads: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Best label ids (n_tokens) and best path scores (n_sequences) of an encoded corpus."""
        r = self.decode(corpus, threads=threads)
        return r["ids"], r["path_score"]

    def marginals(self, corpus, threads: int | None = None, *, allowed=None, constraints=None,
                  forbid=None) -> tuple[np.ndarray, np.ndarray]:
        """Node marginals (n_tokens x L) and log Z per sequence (under constraints when given: see
        :mod:`crfkit.decode`)."""
        if allowed is not None or constraints is not None or forbid:
            from .decode import marginals
            return marginals(self, corpus, allowed=allowed, constraints=constraints, forbid=forbid, threads=threads)
        r = self.decode(corpus, path=False, marginals=True, threads=threads)
        return r["marginals"], r["logz"]

    def _split(self, corpus, ids: np.ndarray) -> list[list[str]]:
        labels = self.space.labels
        names = [labels[i] for i in ids.tolist()]
        p = corpus.seq_ptr.tolist()
        return [names[p[i]:p[i + 1]] for i in range(len(p) - 1)]

    def tag(self, X, threads: int | None = None, dense=None, B=None, *, allowed=None, constraints=None,
            forbid=None, method: str = "viterbi") -> list[list[str]]:
        """Viterbi labels for a list of attribute sequences (``dense``: their token vectors, one
        (T x n_dense) array per sequence, for a model with dense features; ``B``: their
        bigram-observation attribute sequences, for a model with bigram-observation features).
        ``allowed`` (label sets per token), ``constraints`` (``"bio"``, ``"iobes"`` or a
        :class:`crfkit.decode.Constraints`), ``forbid`` (label pairs) and ``method="posterior"``
        (max-marginal labels): see :func:`crfkit.decode.tag`."""
        if allowed is not None or constraints is not None or forbid or method != "viterbi":
            from .decode import tag
            return tag(self, X, allowed=allowed, constraints=constraints, forbid=forbid, method=method,
                       threads=threads, dense=dense, B=B)
        corpus = self.encode(X, dense=dense, B=B)
        ids, _ = self.viterbi(corpus, threads)
        return self._split(corpus, ids)

    def tag_with_probability(self, X, threads: int | None = None, dense=None, B=None, *, allowed=None,
                             constraints=None, forbid=None, method: str = "viterbi"):
        """Viterbi labels, the probability of each best path, node marginals and the encoded corpus
        (constraints and ``method``: as :meth:`tag`)."""
        if allowed is not None or constraints is not None or forbid or method != "viterbi":
            from .decode import tag
            return tag(self, X, allowed=allowed, constraints=constraints, forbid=forbid, method=method,
                       probability=True, threads=threads, dense=dense, B=B)
        corpus = self.encode(X, dense=dense, B=B)
        r = self.decode(corpus, marginals=True, threads=threads)
        return self._split(corpus, r["ids"]), np.exp(r["path_score"] - r["logz"]), r["marginals"], corpus

    def sequence_probability(self, X, Y, threads: int | None = None, dense=None, B=None, *, allowed=None,
                             constraints=None, forbid=None) -> np.ndarray:
        """p(y|x) of the given label sequences (under constraints: p(y | x, y allowed), 0 when y breaks
        them; see :mod:`crfkit.decode`)."""
        if allowed is not None or constraints is not None or forbid:
            from .decode import sequence_probability
            return sequence_probability(self, X, Y, allowed=allowed, constraints=constraints, forbid=forbid,
                                        threads=threads, dense=dense, B=B)
        corpus = self.encode(X, Y, dense=dense, B=B)
        if (corpus.y < 0).any():
            bad = int(np.flatnonzero(corpus.y < 0)[0])
            lab = [lab for ys in Y for lab in ys][bad]
            raise DataError(f"label {lab!r} is not a label of this model ({len(self.labels)} labels)")
        r = self.decode(corpus, path=False, marginals=True, labels=corpus.y, threads=threads)
        return np.exp(r["label_score"] - r["logz"])

    def tag_rows(self, sentences, threads: int | None = None, **kw) -> list[list[str]]:
        """Labels of token rows with a model trained from a column file: per sentence a list of tokens,
        each the list of its column values (``[["He", "PRP"], ["runs", "VBZ"]]``; a string is split
        on whitespace), run through the model's templates.  ``kw``: as :meth:`tag` (``allowed``,
        ``constraints``, ``method``...)."""
        from .pipeline import inputs_of_rows
        X, B, dense = inputs_of_rows(self, sentences)
        return self.tag(X, threads, dense=dense, B=B, **kw) if X else []

    def nbest(self, X, k: int, threads: int | None = None, dense=None, B=None, *, allowed=None,
              constraints=None, forbid=None):
        """The ``k`` most probable label sequences of each sequence, with their probabilities: one
        :class:`crfkit.decode.NBest` per sequence (exact; constraints as :meth:`tag`)."""
        from .decode import nbest
        return nbest(self, X, k, allowed=allowed, constraints=constraints, forbid=forbid, threads=threads,
                     dense=dense, B=B)

    # ---------------------------------------------------------- introspection
    @property
    def n_active(self) -> int:
        return int(np.count_nonzero(self.weights))

    def state_features(self) -> dict[tuple[str, str], float]:
        s = self.space
        fa = s.feature_attr()
        return {(s.attributes[a], s.labels[l]): float(w)
                for a, l, w in zip(fa.tolist(), s.feat_label.tolist(), self.weights[:s.n_state].tolist())}

    def transition_features(self) -> dict[tuple[str, str], float]:
        s = self.space
        out = {}
        for i in range(s.n_labels):
            for j in range(s.n_labels):
                k = s.trans_index[i, j]
                if k >= 0:
                    out[(s.labels[i], s.labels[j])] = float(self.weights[s.n_state + k])
        return out

    def bigram_features(self) -> dict[tuple[str, str, str], float]:
        """Weights of the bigram-observation features by (bigram attribute, previous label, label)."""
        s = self.space
        L = s.n_labels
        w = self.weights[s.bigram_offset:s.dense_offset]
        return {(s.battributes[b], s.labels[p // L], s.labels[p % L]): float(x)
                for b, p, x in zip(s.bfeature_attr().tolist(), s.bfeat_pair.tolist(), w.tolist())}

    def dense_features(self) -> dict[tuple[str, str], float]:
        """Weights of the dense block by (dimension name, label)."""
        s = self.space
        W = s.dense_weights(self.weights)
        return {(s.dense_names[j], s.labels[l]): float(W[j, l])
                for j in range(s.n_dense) for l in range(s.n_labels)}

    def top_features(self, k: int = 20) -> list[tuple[str, str, float]]:
        s = self.space
        w = self.weights[:s.n_state]
        idx = np.argsort(-np.abs(w), kind="stable")[:k]
        fa = s.feature_attr()
        return [(s.attributes[fa[i]], s.labels[s.feat_label[i]], float(w[i])) for i in idx]

    # --------------------------------------------------------------- file I/O
    def save(self, path: str | os.PathLike) -> int:
        """Write the model (non-zero weights only) atomically; returns the file size in bytes."""
        space, w = self.space.prune(self.weights)
        blob, lens = _pack_strings(space.attributes)
        lblob, llens = _pack_strings(space.labels)
        arrays = {
            "attr_blob": blob, "attr_lens": _small_int(lens),
            "label_blob": lblob, "label_lens": _small_int(llens),
            "attr_nfeat": _small_int(np.diff(space.attr_ptr)),
            "feat_label": _small_int(space.feat_label),
            "trans_index": space.trans_index.astype(np.int32),
            "weights": w,
        }
        if space.n_dense:
            dblob, dlens = _pack_strings(space.dense_names)
            arrays.update(dense_blob=dblob, dense_lens=_small_int(dlens))
        if space.n_bigram:
            bblob, blens = _pack_strings(space.battributes)
            arrays.update(battr_blob=bblob, battr_lens=_small_int(blens),
                          battr_nfeat=_small_int(np.diff(space.battr_ptr)),
                          bfeat_pair=_small_int(space.bfeat_pair.astype(np.int64)))
        table = {}
        payload = []
        off = 0
        for name, a in arrays.items():
            a = np.ascontiguousarray(a)
            comp = zlib.compress(a.tobytes(), 6)
            table[name] = {"dtype": a.dtype.str, "shape": list(a.shape), "offset": off, "nbytes": len(comp)}
            payload.append(comp)
            off += len(comp)
        body = b"".join(payload)
        header = {
            "format": "crfkit-model", "format_version": 3 if space.n_bigram else 2 if space.n_dense else 1,
            "n_labels": space.n_labels, "n_attributes": space.n_attributes,
            "n_state": space.n_state, "n_trans": space.n_trans, "n_dense": space.n_dense,
            **({"n_bigram": space.n_bigram, "n_battributes": space.n_battributes} if space.n_bigram else {}),
            "arrays": table, "payload_sha256": hashlib.sha256(body).hexdigest(),
            "meta": self.meta,
        }
        hb = json.dumps(header, sort_keys=True).encode("utf-8")
        head = MAGIC + struct.pack("<I", len(hb)) + hb
        digest = hashlib.sha256(head)
        digest.update(body)
        with atomic_file(path, what="the model") as f:
            f.write(head)
            f.write(body)
            f.write(digest.digest())
        return len(head) + len(body) + digest.digest_size

    @classmethod
    def load(cls, path: str | os.PathLike) -> "CRFModel":
        """Read a model file written by :meth:`save`.

        A model file is untrusted input: whatever its content, this returns a
        valid model or raises :class:`~crfkit.errors.ModelError` naming the
        file, with memory bounded by the file size.  The magic bytes and the
        header are read and checked first (the header is at most
        ``MAX_HEADER_BYTES``), the rest is hashed in chunks and checked against
        the trailing SHA-256 before anything in it is used, the header's array
        table is checked against its counts (every array's dtype and shape
        follow from them) and against a ceiling (the arrays' declared size may
        not exceed ``EXPANSION_ALLOWANCE + MAX_EXPANSION x`` the payload's
        size), and each array is decompressed straight into an array of its
        declared size, refusing a zlib member that holds more or less.  The
        metadata fields crfkit reads (templates, padding, columns, dense
        columns, training settings) are checked too (:func:`check_meta`).
        """
        path = os.fspath(path)
        try:
            f = open(path, "rb")
        except OSError as e:
            raise ModelError(f"{path}: cannot read model file: {e.strerror}") from None
        try:
            with f:
                return cls._read(f, path)
        except MemoryError:
            raise ModelError(f"{path}: not enough memory to load this model") from None
        except OSError as e:
            raise ModelError(f"{path}: cannot read model file: {e.strerror or e}") from None

    @classmethod
    def _read(cls, f, path: str) -> "CRFModel":
        def corrupted(why) -> ModelError:
            return ModelError(f"{path}: model payload is corrupted or inconsistent ({why})")

        header, head = _read_header(f, path)
        try:
            counts, specs, declared = _check_table(header)
        except (KeyError, ValueError, TypeError) as e:
            raise corrupted(e) from None
        # the payload ends where its last array ends (a pipe is read no further than that, plus one byte)
        end = max(spec["offset"] + spec["nbytes"] for spec in specs.values())
        g, size = _seekable(f, head, len(head) + end + 33)
        try:
            payload_len = size - len(head) - 32
            if payload_len < end:
                raise ModelError(f"{path}: model file is truncated or corrupted (its array table needs {end} "
                                 f"bytes of payload, the file holds {max(payload_len, 0)})")
            if payload_len > end:
                raise corrupted(f"{payload_len - end} bytes after the last array")
            ceiling = EXPANSION_ALLOWANCE + MAX_EXPANSION * payload_len
            if declared > ceiling:
                raise corrupted(f"the arrays would take {declared} bytes from a {payload_len}-byte payload; "
                                f"the loader's ceiling is {EXPANSION_ALLOWANCE} + {MAX_EXPANSION} x the payload")
            _verify_checksums(g, path, header, head, size)
            try:
                arrays = {}
                for name, spec in sorted(specs.items(), key=lambda kv: kv[1]["offset"]):
                    arrays[name] = _inflate(g, len(head) + spec["offset"], spec["nbytes"],
                                            np.empty(spec["shape"], spec["dtype"]), name)
                space, weights = _space_of(arrays, counts)
                meta = header.get("meta", {})
                if not isinstance(meta, dict):
                    raise ValueError("meta is not a mapping")
            except (KeyError, zlib.error, ValueError, TypeError, UnicodeDecodeError, OverflowError) as e:
                raise corrupted(e) from None
        finally:
            if g is not f:
                g.close()
        check_meta(meta, space, path)
        return cls(space=space, weights=weights, meta=meta)


# ---------------------------------------------------------------------------------------------- loading
# Ceilings of the loader (see CRFModel.load and the README's "Model file" section).
MAX_HEADER_BYTES = 64 << 20        # the JSON header: counts, array table, metadata (templates...)
MAX_EXPANSION = 32                 # declared array bytes per compressed payload byte, beyond...
EXPANSION_ALLOWANCE = 256 << 20    # ... this much (saved models expand about 2x; zlib's limit is ~1000x)
MAX_COUNT = 2 ** 31 - 1            # attributes, features, labels: int32 ids in the kernels
MAX_LABELS = 46340                 # label pairs i*L + j are int32 too

_READ_CHUNK = 1 << 20
_INFLATE_CHUNK = 4 << 20
_KINDS = {"blob": "u", "int": "iu", "float": "f"}


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _read_exact(f, n: int) -> bytes:
    """n bytes from f, fewer only at the end of the file (a pipe may return short reads)."""
    out = []
    while n > 0:
        b = f.read(min(n, _READ_CHUNK))
        if not b:
            break
        out.append(b)
        n -= len(b)
    return b"".join(out)


def _read_header(f, path: str) -> tuple[dict, bytes]:
    """The header (parsed) and its bytes (magic, length, JSON), checked before anything else is read."""
    magic = _read_exact(f, len(MAGIC))
    if magic != MAGIC:
        raise ModelError(f"{path}: not a crfkit model file (bad magic bytes)")
    hb = _read_exact(f, 4)
    if len(hb) < 4:
        raise ModelError(f"{path}: model header is truncated or corrupted")
    (hl,) = struct.unpack("<I", hb)
    if hl > MAX_HEADER_BYTES:
        raise ModelError(f"{path}: model header is truncated or corrupted "
                         f"(a header length of {hl} bytes is over the {MAX_HEADER_BYTES}-byte limit)")
    raw = _read_exact(f, hl)
    try:
        if len(raw) < hl:
            raise ValueError
        header = json.loads(raw.decode("utf-8"))
        if not isinstance(header, dict):
            raise ValueError
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ModelError(f"{path}: model header is truncated or corrupted") from None
    # a newer format may lay the rest out differently: its version is reported before anything else
    ver = header.get("format_version")
    if _is_int(ver) and ver > FORMAT_VERSION:
        raise ModelError(f"{path}: model format version {ver} is newer than this crfkit reads "
                         f"(up to {FORMAT_VERSION}); upgrade crfkit")
    if not _is_int(ver) or ver < 1:
        raise ModelError(f"{path}: model header is truncated or corrupted (format version {ver!r})")
    return header, magic + hb + raw


def _seekable(f, head: bytes, limit: int):
    """(f, its size) when f is a regular file; otherwise (a pipe, a device) a temporary file holding ``head``
    and the rest of f up to ``limit`` bytes in all, so that the payload can be read twice (checksum, then
    arrays) in bounded memory."""
    st = os.fstat(f.fileno())
    if stat.S_ISREG(st.st_mode):
        return f, st.st_size
    tmp = tempfile.TemporaryFile()
    try:
        tmp.write(head)
        left = limit - len(head)
        while left > 0:
            b = f.read(min(left, _READ_CHUNK))
            if not b:
                break
            tmp.write(b)
            left -= len(b)
        return tmp, tmp.tell()
    except BaseException:
        tmp.close()
        raise


def _verify_checksums(f, path: str, header: dict, head: bytes, size: int) -> None:
    """The trailing SHA-256 (of every byte before it) and the header's payload SHA-256, hashed in chunks."""
    bad = ModelError(f"{path}: model file is truncated or corrupted (checksum mismatch)")
    if size < len(head) + 32:
        raise bad
    whole = hashlib.sha256(head)
    body = hashlib.sha256()
    f.seek(len(head))
    left = size - 32 - len(head)
    while left:
        b = f.read(min(left, _READ_CHUNK))
        if not b:
            raise bad
        whole.update(b)
        body.update(b)
        left -= len(b)
    if _read_exact(f, 33) != whole.digest() or body.hexdigest() != header.get("payload_sha256"):
        raise bad


def _count(header: dict, key: str, default=None, limit: int = MAX_COUNT) -> int:
    v = header.get(key, default)
    if not isinstance(v, int) or isinstance(v, bool) or v < 0 or v > limit:
        raise ValueError(f"header field {key!r} is {v!r}, not a count in 0..{limit}")
    return v


def _check_table(header: dict) -> tuple[dict, dict, int]:
    """The header's counts, its array table checked against them ({name: offset, nbytes, shape, dtype}: every
    array's dtype and shape follow from the counts), and the bytes the arrays declare.  Only the header
    is read so far; nothing is allocated."""
    ver = header["format_version"]
    c = {k: _count(header, k) for k in ("n_labels", "n_attributes", "n_state", "n_trans")}
    if c["n_labels"] > MAX_LABELS:
        raise ValueError(f"{c['n_labels']} labels (at most {MAX_LABELS})")
    c["n_dense"] = _count(header, "n_dense", 0)
    c["n_bigram"] = _count(header, "n_bigram", 0)
    c["n_battributes"] = _count(header, "n_battributes", 0)
    if c["n_dense"] and ver < 2:
        raise ValueError(f"bad dense dimension count {c['n_dense']} for format version {ver}")
    if c["n_bigram"] and ver < 3:
        raise ValueError(f"bad bigram-observation feature count {c['n_bigram']} for format version {ver}")
    if c["n_battributes"] and not c["n_bigram"]:
        raise ValueError("bigram-observation attributes without bigram-observation features")
    L = c["n_labels"]
    if c["n_trans"] > L * L:
        raise ValueError(f"{c['n_trans']} transition features for {L} labels")
    n_weights = c["n_state"] + c["n_trans"] + c["n_bigram"] + c["n_dense"] * L
    if n_weights > 2 ** 62:
        raise ValueError(f"{n_weights} weights")
    expect = {"attr_blob": ("blob", None), "attr_lens": ("int", (c["n_attributes"],)),
              "label_blob": ("blob", None), "label_lens": ("int", (L,)),
              "attr_nfeat": ("int", (c["n_attributes"],)), "feat_label": ("int", (c["n_state"],)),
              "trans_index": ("int", (L, L)), "weights": ("float", (n_weights,))}
    if c["n_dense"]:
        expect.update(dense_blob=("blob", None), dense_lens=("int", (c["n_dense"],)))
    if c["n_bigram"]:
        expect.update(battr_blob=("blob", None), battr_lens=("int", (c["n_battributes"],)),
                      battr_nfeat=("int", (c["n_battributes"],)), bfeat_pair=("int", (c["n_bigram"],)))
    table = header.get("arrays")
    if not isinstance(table, dict):
        raise ValueError("no array table")
    missing = sorted(set(expect) - set(table))
    extra = sorted(set(table) - set(expect))
    if missing or extra:
        raise ValueError("array table " + "; ".join(
            ([f"lacks {', '.join(missing)}"] if missing else []) + ([f"has unknown {', '.join(extra)}"] if extra else [])))
    specs = {}
    declared = 0
    for name, (kind, shape) in expect.items():
        spec = table[name]
        if not isinstance(spec, dict):
            raise ValueError(f"array {name}: not a table entry")
        dt = spec.get("dtype")
        if not isinstance(dt, str) or len(dt) != 3 or dt[0] not in "<>|" or dt[1] not in _KINDS[kind] \
                or dt[2] not in ("1" if kind == "blob" else "48" if kind == "float" else "1248"):
            raise ValueError(f"array {name}: dtype {dt!r} is not a {kind} type")
        dtype = np.dtype(dt)
        got = spec.get("shape")
        if (not isinstance(got, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in got)
                or (shape is not None and tuple(got) != shape)
                or (shape is None and (len(got) != 1 or not 0 <= got[0] <= MAX_COUNT))):
            raise ValueError(f"array {name}: shape {got!r}, expected "
                             f"{list(shape) if shape is not None else '[length]'} from the header's counts")
        off, nb = spec.get("offset"), spec.get("nbytes")
        if not _is_int(off) or not _is_int(nb) or off < 0 or nb < 0:
            raise ValueError(f"array {name}: offset {off!r} and size {nb!r} are not byte counts")
        n = 1
        for x in got:
            n *= x
        declared += n * dtype.itemsize
        specs[name] = {"offset": off, "nbytes": nb, "shape": tuple(got), "dtype": dtype}
    return c, specs, declared


def _inflate(f, start: int, nbytes: int, out: np.ndarray, name: str) -> np.ndarray:
    """Decompress the zlib member in bytes start..start+nbytes of f into ``out``, which it must fill exactly:
    never more output than ``out`` holds plus one byte is produced (a decompression bomb is refused
    after that byte), never more than 4 MiB at a time."""
    want = out.nbytes
    view = memoryview(out.reshape(-1).view(np.uint8)) if want else memoryview(bytearray())
    d = zlib.decompressobj()
    pos = 0
    f.seek(start)
    left = nbytes

    def take(piece: bytes) -> None:
        nonlocal pos
        if pos + len(piece) > want:
            raise ValueError(f"array {name} holds more than the {want} bytes its shape declares")
        view[pos:pos + len(piece)] = piece
        pos += len(piece)

    while left:
        chunk = f.read(min(left, _READ_CHUNK))
        if not chunk:
            raise ValueError(f"array {name}: the payload ends early")
        left -= len(chunk)
        if d.eof:
            raise ValueError(f"array {name}: bytes after the end of its compressed stream")
        while chunk:
            take(d.decompress(chunk, min(_INFLATE_CHUNK, want - pos + 1)))
            chunk = d.unconsumed_tail
    while not d.eof:     # output zlib still holds after the last input
        piece = d.decompress(b"", min(_INFLATE_CHUNK, want - pos + 1))
        if not piece:
            break
        take(piece)
    if not d.eof:
        raise ValueError(f"array {name}: its compressed stream is cut short")
    if d.unused_data:
        raise ValueError(f"array {name}: bytes after the end of its compressed stream")
    if pos != want:
        raise ValueError(f"array {name} holds {pos} bytes, its shape declares {want}")
    return out


def _strings(arrays: dict, blob: str, lens: str, what: str) -> list[str]:
    b, n = arrays[blob], arrays[lens]
    if n.size and (n.min() < 0 or n.max() > b.size):
        raise ValueError(f"{what} string lengths out of range")
    if int(n.sum(dtype=np.int64)) != b.size:
        raise ValueError(f"{what} string lengths do not add up to the string table")
    return _unpack_strings(b, n.astype(np.int64))


def _string_table(arrays: dict, blob: str, lens: str, what: str) -> StringTable:
    b, n = arrays[blob], arrays[lens]
    if n.size and (n.min() < 0 or n.max() > b.size):
        raise ValueError(f"{what} string lengths out of range")
    if int(n.sum(dtype=np.int64)) != b.size:
        raise ValueError(f"{what} string lengths do not add up to the string table")
    return StringTable(b, n.astype(np.int64))


def _space_of(arrays: dict, c: dict) -> tuple[FeatureSpace, np.ndarray]:
    """The feature space and weights of decoded arrays, every index and count checked."""
    L = c["n_labels"]
    labels = _strings(arrays, "label_blob", "label_lens", "label")
    attributes = _string_table(arrays, "attr_blob", "attr_lens", "attribute")
    problems = []
    if L == 0:
        problems.append("no labels")
    if len(set(labels)) != L:
        problems.append("duplicate labels")
    nfeat = arrays["attr_nfeat"].astype(np.int64)
    if (nfeat < 0).any() or (nfeat.size and nfeat.max() > c["n_state"]):
        raise ValueError("feature counts out of range")
    attr_ptr = np.zeros(len(nfeat) + 1, np.int64)
    np.cumsum(nfeat, out=attr_ptr[1:])
    # the labels are checked on the stored values (any integer type), then converted once, to the int32 the
    # feature space holds (not int64 first: 7.4M features took ~0.1 s more and 60 MB more); the inflated
    # weights are already float64 in every file crfkit writes (no copy then)
    fl = arrays["feat_label"]
    if len(fl) and (fl.min() < 0 or fl.max() >= L):
        problems.append("a state feature has a label outside the label table")
    feat_label = fl.astype(np.int32)
    trans_index = arrays["trans_index"].astype(np.int64)
    weights = np.asarray(arrays["weights"], dtype=np.float64)
    live = trans_index[trans_index >= 0]
    n_dense, n_bigram = c["n_dense"], c["n_bigram"]
    dense_names = _strings(arrays, "dense_blob", "dense_lens", "dense name") if n_dense else []
    if n_bigram:
        bnfeat = arrays["battr_nfeat"].astype(np.int64)
        if (bnfeat < 0).any() or (bnfeat.size and bnfeat.max() > n_bigram):
            raise ValueError("bigram-observation feature counts out of range")
        battr_ptr = np.zeros(len(bnfeat) + 1, np.int64)
        np.cumsum(bnfeat, out=battr_ptr[1:])
        bfeat_pair = arrays["bfeat_pair"].astype(np.int64)
        battributes = _strings(arrays, "battr_blob", "battr_lens", "bigram attribute")
        if battr_ptr[-1] != n_bigram:
            problems.append("bigram-observation feature counts do not add up")
        elif n_bigram and (bfeat_pair.min() < 0 or bfeat_pair.max() >= L * L):
            problems.append("a bigram-observation feature has a label pair outside the label table")
    else:
        battr_ptr, bfeat_pair, battributes = np.zeros(1, np.int64), np.zeros(0, np.int64), []
    if attr_ptr[-1] != c["n_state"]:
        problems.append("feature counts do not add up")
    if (trans_index < -1).any() or (len(live) and live.max() >= len(live)):
        problems.append("bad transition table")
    elif len(live) and np.bincount(live).max() > 1:     # (np.unique would import numpy.ma: 40 ms at start-up)
        problems.append("transition indices are not a permutation")
    elif len(live) != c["n_trans"]:
        problems.append(f"{len(live)} transition features, the header says {c['n_trans']}")
    if not np.all(np.isfinite(weights)):
        problems.append("non-finite weights")
    if problems:
        raise ValueError("; ".join(problems))
    space = FeatureSpace(labels=labels, attributes=attributes, attr_ptr=attr_ptr, feat_label=feat_label,
                         trans_index=trans_index, n_dense=n_dense, dense_names=dense_names,
                         battributes=battributes, battr_ptr=battr_ptr, bfeat_pair=bfeat_pair)
    return space, weights


# metadata fields crfkit reads, and what they must be (anything else in ``meta`` is the user's and kept as is)
_META_STR = ("templates", "input_format", "algorithm", "status", "train_file", "support", "transitions",
             "dev_metric")
_META_COUNT = ("columns", "n_train", "iterations", "resumed_from", "dev_best_iteration", "fine_tune", "n_candidates")
_META_NONNEG = ("l1", "l2", "min_freq", "fine_tune_l2")


def check_meta(meta: dict, space: FeatureSpace, path: str) -> None:
    """Raise :class:`ModelError` (naming ``path`` and the field) when a metadata field crfkit reads is not
    what crfkit writes: ``templates`` (a template set that parses, within the template limits;
    :mod:`crfkit.features.templates`), ``template_pad`` (a bool), ``columns`` (a count that covers the
    templates' columns), ``dense_columns`` (one 1-based column per dense dimension, within ``columns``),
    the training settings printed by ``crfkit info`` (strings, counts, non-negative numbers)."""
    def bad(key: str, why: str) -> ModelError:
        v = reprlib.repr(meta[key])
        return ModelError(f"{path}: metadata field {key!r} is {v}: {why}")

    for k in _META_STR:
        if k in meta and not isinstance(meta[k], str):
            raise bad(k, "expected a string")
    for k in _META_COUNT:
        top = MAX_COLUMN if k == "columns" else 2 ** 53
        if k in meta and not (_is_int(meta[k]) and 0 <= meta[k] <= top):
            raise bad(k, f"expected a whole number in 0..{top}")
    for k in _META_NONNEG:
        v = meta.get(k)
        if k in meta and not ((_is_int(v) or isinstance(v, float)) and 0 <= v < float("inf")):
            raise bad(k, "expected a finite number >= 0")
    if "dev_best" in meta and not (isinstance(meta["dev_best"], (int, float)) and not isinstance(meta["dev_best"], bool)):
        raise bad("dev_best", "expected a number")
    if "template_pad" in meta and not isinstance(meta["template_pad"], bool):
        raise bad("template_pad", "expected true or false")
    columns = meta.get("columns")
    if meta.get("templates"):
        try:
            t = Templates.parse(meta["templates"], name=f"{path} (stored templates)")
        except TemplateError as e:
            raise ModelError(str(e)) from None
        if columns is not None and t.max_column() >= columns:
            raise bad("columns", f"the stored templates use column {t.max_column()} (0-based)")
    if "dense_columns" in meta:
        dc = meta["dense_columns"]
        if not isinstance(dc, list) or not all(_is_int(x) and 1 <= x <= MAX_COLUMN for x in dc):
            raise bad("dense_columns", "expected a list of 1-based column numbers")
        if len(dc) != space.n_dense:
            raise bad("dense_columns", f"{len(dc)} columns for {space.n_dense} dense dimensions")
        if columns is not None and dc and max(dc) > columns:
            raise bad("dense_columns", f"column {max(dc)} is beyond the {columns} observation columns")


def pair_density(sp: "FeatureSpace", corpus, w: np.ndarray) -> float:
    """Estimated share of the L x L label pairs with a non-zero score at a position of ``corpus`` under the
    weights ``w`` of ``sp``: the non-zero transitions plus, per position, the non-zero label-pair x observation
    features of the token's attributes (an upper bound: a pair two features share is counted twice), over L^2."""
    L = sp.n_labels
    ns = sp.n_state
    tr = np.count_nonzero(w[ns:ns + sp.n_trans])
    positions = corpus.n_tokens - corpus.n_sequences
    if not sp.n_bigram or not corpus.has_bigram or positions <= 0:
        return tr / (L * L)
    wb = w[sp.bigram_offset:sp.bigram_offset + sp.n_bigram]
    nz = np.add.reduceat(wb != 0, sp.battr_ptr[:-1]) if len(wb) else np.zeros(0)
    nz = np.where(np.diff(sp.battr_ptr) > 0, nz, 0)
    btok_ptr, battr, _ = corpus.bigram_arrays()
    c = np.concatenate(([0], np.cumsum(nz[battr])))
    per_token = c[btok_ptr[1:]] - c[btok_ptr[:-1]]
    touched = float(per_token.sum() - per_token[corpus.seq_ptr[:-1][corpus.lengths() > 0]].sum())
    return min(1.0, (tr + touched / positions) / (L * L))
