"""The feature space: the layout of the weight vector, and the packed string tables of its names.

:class:`FeatureSpace` maps every weight to what it scores; :class:`StringTable` holds a loaded
model's attribute names packed (UTF-8 bytes and byte lengths), as the model file stores them, and
finds ids by hashing (:func:`pack_strings` / :func:`unpack_strings` are the packing both use);
:data:`ALL_PAIRS` stands for Wapiti's every-label-pair bigram-observation layout, made only when
read; and :func:`pair_density` estimates how sparse a space's label-pair scores are under given
weights. Nothing here imports the model, the model file or the training code: the encoder
(:mod:`crfkit.features.encode`) builds spaces, :mod:`crfkit.modelfile` reads and writes them and
:class:`crfkit.model.CRFModel` tags with them.

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
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, fields
from functools import cached_property

import numpy as np

__all__ = [
    "ALL_PAIRS",
    "AllPairs",
    "MAX_LABELS",
    "TRAIN_BYTES_PER_PAIR",
    "WARN_PASS_WORK",
    "WARN_TRAIN_BYTES",
    "FeatureSpace",
    "StringTable",
    "pack_strings",
    "pair_density",
    "pair_dtype",
    "unpack_strings",
]

#: most labels a model may have: label pairs ``i*L + j`` are int32 in the kernels (46340**2 < 2**31)
MAX_LABELS = 46340
#: training memory per label pair, as estimated before a run starts: the transition weight, its
#: gradient and L-BFGS's 2(m+1) history vectors (m = 6), 8 bytes each, and the L x L tables of
#: the forward-backward kernels
TRAIN_BYTES_PER_PAIR = 8 * (2 + 2 * 7 + 2)
#: ``crfkit train`` warns (before building anything L x L) above this estimated memory...
WARN_TRAIN_BYTES = 2 << 30
#: ... or above this many label-pair operations per pass (tokens x L x L; CoNLL-2000: 1.0e8)
WARN_PASS_WORK = 10**10


def pair_dtype(n_labels: int) -> np.dtype:
    """The integer type of ``FeatureSpace.bfeat_pair``: int16 while every label pair ``i*L + j``
    fits (L <= 181), else int32.  One entry per bigram-observation feature, so the candidate space's
    second largest array after the weights (Wapiti's space at NETtalk 5-grm: 123.6M features, 247 MB
    in int16 against 494 MB in int32).  Signed, so that numba's integer arithmetic on it stays
    signed."""
    return (
        np.dtype(np.int16)
        if n_labels * n_labels <= np.iinfo(np.int16).max + 1
        else np.dtype(np.int32)
    )


class AllPairs:
    """``FeatureSpace(bfeat_pair=ALL_PAIRS)``: every bigram-observation attribute has a feature for
    every label pair, in pair order (Wapiti's space; ``support="all"``), so ``bfeat_pair`` is
    implicit (``k - battr_ptr[b]``) and is made only when Python code reads it.  The per-sequence
    kernels, which take such rows as contiguous vectors (:attr:`FeatureSpace.bigram_full_rows`),
    never read it: SGD-L1 trains without it (2 bytes per candidate: 25 MB at NETtalk 3-grm, 247 MB
    at 5-grm)."""

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
    n_dense: int = 0  # dimensions of the dense real-valued token vectors
    dense_names: list[str] | None = None  # their names (default "dense[j]")
    battributes: list[str] | None = None  # bigram-observation attributes (default none)
    battr_ptr: np.ndarray | None = None  # CSR of their features (len(battributes) + 1)
    bfeat_pair: np.ndarray | None = None  # label pair i*L + j of every bigram-observation feature

    def __post_init__(self) -> None:
        self.attr_ptr = np.ascontiguousarray(self.attr_ptr, dtype=np.int64)
        self.feat_label = np.ascontiguousarray(self.feat_label, dtype=np.int32)
        self.trans_index = np.ascontiguousarray(self.trans_index, dtype=np.int32)
        L = len(self.labels)
        if self.trans_index.shape != (L, L):
            raise ValueError("trans_index must be L x L")
        if len(self.attr_ptr) != len(self.attributes) + 1 or self.attr_ptr[-1] != len(
            self.feat_label
        ):
            raise ValueError("attr_ptr does not match attributes / feat_label")
        self.n_dense = int(self.n_dense)
        if self.n_dense < 0:
            raise ValueError("n_dense must be >= 0")
        if self.dense_names is None:
            self.dense_names = [f"dense[{j}]" for j in range(self.n_dense)]
        else:
            self.dense_names = [str(x) for x in self.dense_names]
        if len(self.dense_names) != self.n_dense:
            raise ValueError(
                f"{len(self.dense_names)} dense names for {self.n_dense} dense dimensions"
            )
        self.battributes = [] if self.battributes is None else [str(x) for x in self.battributes]
        self.battr_ptr = np.ascontiguousarray(
            np.zeros(1) if self.battr_ptr is None else self.battr_ptr, dtype=np.int64
        )
        if isinstance(self.bfeat_pair, AllPairs):
            # implicit: made on first read (__getattr__)
            del self.bfeat_pair
            self._all_pairs = True
            if len(self.battr_ptr) != len(self.battributes) + 1 or np.any(
                self.battr_ptr != np.arange(len(self.battributes) + 1) * (L * L)
            ):
                raise ValueError(
                    "battr_ptr does not match battributes with every label pair (ALL_PAIRS)"
                )
            return
        self._all_pairs = False
        pairs = np.asarray(
            np.zeros(0, dtype=np.int64) if self.bfeat_pair is None else self.bfeat_pair
        )
        if len(pairs) and (int(pairs.min()) < 0 or int(pairs.max()) >= L * L):
            raise ValueError("bfeat_pair holds a label pair outside L x L")
        # checked before the narrowing, which would wrap values that do not fit
        self.bfeat_pair = np.ascontiguousarray(pairs, dtype=pair_dtype(L))
        if (
            len(self.battr_ptr) != len(self.battributes) + 1
            or self.battr_ptr[0] != 0
            or self.battr_ptr[-1] != len(self.bfeat_pair)
            or np.any(np.diff(self.battr_ptr) < 0)
        ):
            raise ValueError("battr_ptr does not match battributes / bfeat_pair")

    def __getattr__(self, name):
        # only for attributes not found: the implicit bfeat_pair (ALL_PAIRS), made once when first
        # read
        if name == "bfeat_pair" and self.__dict__.get("_all_pairs"):
            LL = len(self.labels) ** 2
            pairs = np.tile(
                np.arange(LL, dtype=pair_dtype(len(self.labels))), len(self.battributes)
            )
            self.__dict__["bfeat_pair"] = pairs
            return pairs
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @cached_property
    def pairs_for_full_rows(self) -> np.ndarray:
        """``bfeat_pair`` for the kernels that take full rows (:attr:`bigram_full_rows`) as vectors:
        an empty array when every row is full (they never read it then), so that an implicit
        ``bfeat_pair`` (ALL_PAIRS) is not made for them.  Taken once (the layout does not
        change)."""
        if self.n_bigram and bool(np.all(self.bigram_full_rows)):
            return np.zeros(0, dtype=pair_dtype(len(self.labels)))
        return self.bfeat_pair

    def __repr__(self) -> str:
        # the dataclass's repr, but implicit pairs are named, not made (247 MB at NETtalk 5-grm)
        implicit = self.__dict__.get("_all_pairs") and "bfeat_pair" not in self.__dict__
        parts = (
            "bfeat_pair=ALL_PAIRS"
            if f.name == "bfeat_pair" and implicit
            else f"{f.name}={getattr(self, f.name)!r}"
            for f in fields(self)
        )
        return f"{type(self).__name__}({', '.join(parts)})"

    # pickling: the dataclass fields only, so every block (state, transition, bigram-observation,
    # dense) travels and none of the lookup tables built on first use (attr_index, full_rows...)
    # does; unpickling checks the fields again (__post_init__); every-pair label pairs travel as
    # ALL_PAIRS, not as the array (made or not: 247 MB at NETtalk 5-grm, for a model saved with
    # pickle or a space sent to Dask's workers)
    def __getstate__(self) -> dict:
        implicit = self.__dict__.get("_all_pairs")
        return {
            f.name: ALL_PAIRS if implicit and f.name == "bfeat_pair" else getattr(self, f.name)
            for f in fields(self)
        }

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
        """Per attribute, 1 when its features are every label in order: a contiguous row of weights
        that the per-sequence kernels read as a vector (:func:`crfkit.kernels.chain.full_rows`)."""
        from ..kernels.chain import full_rows

        return full_rows(self.attr_ptr, self.feat_label, self.n_labels)

    @cached_property
    def bigram_full_rows(self) -> np.ndarray:
        """Per bigram attribute, 1 when its features are every label pair in pair order (Wapiti's
        space): a contiguous row of L*L weights that the per-sequence kernels read and update as a
        vector."""
        if self.__dict__.get("_all_pairs") and "bfeat_pair" not in self.__dict__:
            return np.ones(
                len(self.battributes), dtype=np.int8
            )  # (what full_rows gives of ALL_PAIRS)
        from ..kernels.chain import full_rows

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
        return w[self.dense_offset : self.n_features].reshape(self.n_dense, len(self.labels))

    @cached_property
    def attr_index(self) -> dict[str, int]:
        if isinstance(self.attributes, StringTable):
            return self.attributes.as_dict()
        return {a: i for i, a in enumerate(self.attributes)}

    def attribute_ids(self, names: Sequence[str]) -> np.ndarray:
        """The attribute id of each name (int64, -1 for an unknown name); a loaded model answers
        from its packed attribute table (:class:`StringTable`) without building a dict of every
        attribute."""
        if isinstance(self.attributes, StringTable) and "attr_index" not in self.__dict__:
            return self.attributes.ids(names)
        return np.fromiter(
            map(self.attr_index.get, names, itertools.repeat(-1)), dtype=np.int64, count=len(names)
        )

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

    def prune(self, w: np.ndarray) -> tuple[FeatureSpace, np.ndarray]:
        """The space restricted to features with non-zero weight (and attributes that keep one)."""
        ns = self.n_state
        # the kept features' attributes from their positions (no array of every feature's attribute,
        # nor of every label pair: NETtalk 5-grm has 123.6M candidates, an implicit bfeat_pair among
        # them)
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
        bw = w[bo : bo + self.n_bigram]
        bkeep = np.flatnonzero(bw)
        bfa = np.searchsorted(self.battr_ptr, bkeep, side="right") - 1
        bcounts = np.bincount(bfa, minlength=self.n_battributes)
        blive = np.flatnonzero(bcounts)
        battr_ptr = np.zeros(len(blive) + 1, np.int64)
        np.cumsum(bcounts[blive], out=battr_ptr[1:])
        space = FeatureSpace(
            labels=list(self.labels),
            attributes=(
                self.attributes.take(live)
                if hasattr(self.attributes, "packed")
                else [self.attributes[a] for a in live]
            ),
            attr_ptr=attr_ptr,
            feat_label=self.feat_label[keep],
            trans_index=ti,
            n_dense=self.n_dense,
            dense_names=list(self.dense_names),
            battributes=[self.battributes[b] for b in blive],
            battr_ptr=battr_ptr,
            bfeat_pair=(
                self.pairs_for_full_rows[bkeep]
                if len(self.pairs_for_full_rows)
                else (bkeep - self.battr_ptr[bfa]).astype(pair_dtype(L))
            ),
        )
        # the dense block is kept whole: every token has a value in every dimension
        return space, np.concatenate(
            [
                w[:ns][keep],
                np.asarray(tw, dtype=np.float64),
                bw[bkeep],
                w[self.dense_offset : self.n_features],
            ]
        )


# the dataclass keeps bfeat_pair's default (None) as a class attribute too, which an instance whose
# bfeat_pair is implicit (ALL_PAIRS: no instance attribute until read) would find instead of
# reaching __getattr__; __init__ has the default in its signature and does not read the class
# attribute
del FeatureSpace.bfeat_pair


def pack_strings(strings: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    if hasattr(
        strings, "packed"
    ):  # a StringTable (or a sequence that stands for one): already packed
        return strings.packed()
    encoded = [s.encode("utf-8") for s in strings]
    lens = np.fromiter((len(b) for b in encoded), dtype=np.int64, count=len(encoded))
    return np.frombuffer(b"".join(encoded), dtype=np.uint8), lens


def unpack_strings(blob: np.ndarray, lens: np.ndarray) -> list[str]:
    """The strings packed by :func:`pack_strings` (UTF-8 bytes, their byte lengths).  The blob is
    decoded once and sliced (a decode per string took most of a model's load time); with multi-byte
    characters the byte offsets become character offsets by discounting UTF-8 continuation bytes,
    and a string that starts inside a character is an error, as decoding it alone would be.

    When no string holds a NUL, the strings are cut by ``str.split`` instead, in C: a NUL put
    between them (``np.insert``), the whole decoded once (a string starting inside a character
    leaves invalid UTF-8 there, and the slicing below then says so).  CoNLL-2000's 336k attribute
    names: 79 -> 40 ms, part of the first ``predict`` of a loaded model (its name -> id dict)."""
    n = len(lens)
    if n > 1 and 0 not in blob:
        ends = np.cumsum(lens)
        try:
            return np.insert(blob, ends[:-1], 0).tobytes().decode("utf-8").split("\x00")
        except UnicodeDecodeError:
            pass
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
    character of (what :func:`unpack_strings` would find), without slicing them."""
    text = raw.decode("utf-8")
    if len(text) != len(raw):
        starts = np.cumsum(lens) - lens
        if ((blob & 0xC0) == 0x80)[starts[starts < len(raw)]].any():
            raise ValueError("a string starts inside a UTF-8 character")


_U64 = np.uint64
_HASH_KEYS = np.array(
    [
        0x9E3779B97F4A7C15,
        0xBF58476D1CE4E5B9,
        0x94D049BB133111EB,
        0xD6E8FEB86659FD93,
        0xA0761D6478BD642F,
        0xE7037ED1A0B428DB,
        0x8EBC6AF09C88C6E3,
        0x589965CC75374CC3,
    ],
    dtype=_U64,
)


#: strings hashed at once by :func:`_packed_hashes`
_HASH_BLOCK = 1 << 15


def _packed_hashes(blob: np.ndarray, lens: np.ndarray) -> np.ndarray | None:
    """A 64-bit hash of each packed string (UTF-8 bytes ``blob``, byte lengths ``lens``), or None
    when the longest string would make the padded table below too large (a few strings of thousands
    of bytes).

    The strings are laid out as the rows of a zero-padded (n x W) byte matrix (a boolean mask puts
    the blob's bytes in place in one pass), each row read as W/8 64-bit words; the hash is the sum
    of the words times odd keys (one per word position), mixed with the length."""
    n = len(lens)
    if n == 0:
        return np.zeros(0, _U64)
    W = (int(lens.max()) + 7) // 8 * 8 or 8
    if n * W > 4 * blob.size + (16 << 20):
        return None
    if n > _HASH_BLOCK:
        # block by block: the padded matrix of a few hundred thousand names took tens of MB at
        # once; a string's hash does not depend on the padding (zero words add nothing)
        out = np.empty(n, _U64)
        ends = np.cumsum(lens)
        for a in range(0, n, _HASH_BLOCK):
            b = min(a + _HASH_BLOCK, n)
            lo = int(ends[a] - lens[a])
            out[a:b] = _packed_hashes(blob[lo : int(ends[b - 1])], lens[a:b])
        return out
    A = np.zeros((n, W), np.uint8)
    A[np.arange(W)[None, :] < lens[:, None]] = blob
    words = A.view(_U64)  # n x W/8, native byte order: only compared with itself
    nw = words.shape[1]
    keys = np.resize(_HASH_KEYS, nw) + (np.arange(nw, dtype=_U64) // _U64(8)) * _U64(2)
    with np.errstate(over="ignore"):
        h = (words * keys[None, :]).sum(axis=1, dtype=_U64)
        h ^= lens.astype(_U64) * _U64(0xFF51AFD7ED558CCD)
        h ^= h >> _U64(29)
    return h


class StringTable(Sequence):
    """A model's attribute names as the model file holds them (UTF-8 bytes and byte lengths),
    checked when the model loads but turned into Python strings only when something reads them as a
    list.

    A model of a few hundred thousand attributes took most of its load time to make that many
    strings and a dict of them; tagging a few sentences needs the ids of a few thousand names.
    :meth:`ids` finds those through 64-bit hashes of the packed names (every candidate is compared
    byte for byte, so a collision costs a comparison, never a wrong id); a second lookup, or one of
    many names, builds the dict (a process that tags again and again pays for it once).  Anything
    else (indexing, iteration, ``==``, ``len``) behaves as the list of strings, built once on first
    use."""

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
            self._list = unpack_strings(self._blob, self._lens)
        return self._list

    def __len__(self) -> int:
        return len(self._lens)

    def packed(self) -> tuple[np.ndarray, np.ndarray]:
        """``(blob, lens)``: the UTF-8 bytes and byte lengths (what :func:`pack_strings` gives of
        the list)."""
        return self._blob, self._lens

    def take(self, idx) -> StringTable:
        """The table of the strings at ``idx`` (ids, in that order), cut from the packed bytes: no
        Python string is made (a model pruned before saving keeps its attributes packed).
        Increasing ids (what pruning keeps) are one boolean selection of the bytes; any other order
        is joined in chunks."""
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
                a, b = (
                    starts[k : k + (1 << 16)].tolist(),
                    (starts + lens)[k : k + (1 << 16)].tolist(),
                )
                parts.append(b"".join([raw[i:j] for i, j in zip(a, b)]))
            blob = b"".join(parts)
            del parts
        return StringTable._sliced(blob, lens)

    @classmethod
    def of(cls, names: Sequence[str]) -> StringTable | None:
        """The table of a list of strings, packed without a bytes object per string (one join, one
        encode; byte lengths from the character lengths when every character is ASCII), or None when
        a name cannot be encoded as UTF-8 (a lone surrogate), which a model file could not hold
        either."""
        text = "".join(names)
        try:
            raw = text.encode("utf-8")
        except UnicodeEncodeError:
            return None
        if len(raw) == len(text):
            lens = np.fromiter(map(len, names), dtype=np.int64, count=len(names))
        else:
            lens = np.fromiter(
                (len(s.encode("utf-8")) for s in names), dtype=np.int64, count=len(names)
            )
        del text
        return cls._sliced(raw, lens)

    @classmethod
    def _sliced(cls, raw: bytes, lens: np.ndarray) -> StringTable:
        """A table of whole strings cut from a checked one (valid UTF-8 at string boundaries
        already)."""
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

    __hash__ = None  # a mutable-looking sequence, as the list it stands for

    def __add__(self, other):
        return self._strings() + list(other)

    def __radd__(self, other):
        return list(other) + self._strings()

    def __repr__(self) -> str:
        return f"StringTable({len(self)} strings)"

    def index(self, name, start: int = 0, stop: int | None = None) -> int:
        return self._strings().index(name, start, len(self) if stop is None else stop)

    def as_dict(self) -> dict[str, int]:
        """name -> id (the last id of a name that occurs twice, as
        ``{a: i for i, a in enumerate(...)}``)."""
        if self._dict is None:
            self._dict = dict(zip(self._strings(), range(len(self))))
        return self._dict

    def ids(self, names: Sequence[str]) -> np.ndarray:
        """The id of each name (int64; -1 for a name not in the table)."""
        n = len(names)
        if n == 0:
            return np.zeros(0, np.int64)
        if self._dict is None and n <= len(self):
            got = self._sorted_probe(names)
            if got is not None:
                return got
        if self._dict is None and n <= len(
            self
        ):  # (more names than the table holds: the dict, without
            uniq = list(
                dict.fromkeys(names)
            )  # first counting the distinct ones, ~0.1 s for 900k names)
            # the hashes answer the first lookup, a dict every later one (a tagger asked again and
            # again, as an estimator's predict_single in a loop, pays for the dict once and then ~50
            # ns a name)
            self._hash_calls += 1
            if 4 * len(uniq) <= len(self) and self._hash_calls == 1:
                found = self._probe(uniq)
                if found is not None:
                    return np.fromiter(map(found.__getitem__, names), dtype=np.int64, count=n)
        return np.fromiter(
            map(self.as_dict().get, names, itertools.repeat(-1)), dtype=np.int64, count=n
        )

    def _table_hashes(self) -> tuple | bool:
        """(hashes, starts) of the table's strings, built once; False when the strings are too
        long to hash (see :func:`_packed_hashes`)."""
        if self._hash is None:
            h = _packed_hashes(self._blob, self._lens)
            self._hash = (h, np.cumsum(self._lens) - self._lens) if h is not None else False
        return self._hash

    def _sorted_probe(self, names: Sequence[str]) -> np.ndarray | None:
        """The ids of ``names`` (int64, -1: not in the table) without a Python object per name
        beyond one join: the names' hashes are looked up in the table's sorted hashes
        (``np.searchsorted``) and every hit is compared byte for byte with its candidate, all in
        numpy.  A name whose hash is shared by several of the table's strings (a collision, or a
        string the table holds twice, whose last id must win) is settled by comparing it with each
        of them (:meth:`_settle_runs`): one such pair sent every lookup of CoNLL-2000's chunking
        model down the per-name dict path.  None (the caller takes that path) when the strings are
        too long to hash, or when a name is not a string that UTF-8 encodes."""
        th = self._table_hashes()
        if th is False:
            return None
        if len(th) == 2:  # sorted once: (hashes, starts, order, sorted hashes, shared)
            order = np.argsort(th[0], kind="stable")  # equal hashes: their ids in order
            hs = th[0][order]
            eq = hs[1:] == hs[:-1]
            # the first sorted position of every hash that several strings share (sorted)
            first = np.zeros(len(hs), dtype=bool)
            first[:-1] = eq
            first[1:] &= ~eq
            shared = np.flatnonzero(first)
            th = self._hash = (th[0], th[1], order, hs, shared)
        h, starts, order, hs, shared = th
        try:
            text = "".join(names)
            raw = text.encode("utf-8")
        except (TypeError, UnicodeEncodeError):
            return None
        n = len(names)
        if len(raw) == len(text):
            qlens = np.fromiter(map(len, names), dtype=np.int64, count=n)
        else:
            qlens = np.fromiter((len(x.encode("utf-8")) for x in names), dtype=np.int64, count=n)
        del text
        if len(hs) == 0:
            return np.full(n, -1, np.int64)
        qblob = np.frombuffer(raw, dtype=np.uint8)
        qh = _packed_hashes(qblob, qlens)
        if qh is None:
            return None
        # the names' hashes looked up in sorted order: each search starts where the last one
        # ended (numpy's binary search keeps that bound for increasing keys): a third of the time of
        # 150k random searches in 330k hashes
        qo = np.argsort(qh)
        at = np.empty(n, np.int64)
        at[qo] = np.searchsorted(hs, qh[qo])
        np.minimum(at, len(hs) - 1, out=at)
        cand = order[at]
        ok = (hs[at] == qh) & (self._lens[cand] == qlens)
        many = None
        if len(shared):
            # names whose hash several of the table's strings share: settled one by one below
            k = np.minimum(np.searchsorted(shared, at), len(shared) - 1)
            many = np.flatnonzero((shared[k] == at) & (hs[at] == qh))
            ok[many] = False
        sel = np.flatnonzero(ok)
        if len(sel):  # byte for byte: a hash collision costs a comparison, never a wrong id
            ln = qlens[sel]
            first = np.cumsum(ln) - ln
            within = np.arange(int(ln.sum()), dtype=np.int64) - np.repeat(first, ln)
            qs = (np.cumsum(qlens) - qlens)[sel]
            diff = (
                qblob[np.repeat(qs, ln) + within]
                != self._blob[np.repeat(starts[cand[sel]], ln) + within]
            )
            c = np.zeros(len(diff) + 1, np.int64)
            np.cumsum(diff, out=c[1:])
            ok[sel[c[first + ln] - c[first] > 0]] = False
        out = np.where(ok, cand, -1).astype(np.int64)
        if many is not None and len(many):
            self._settle_runs(out, many, at, raw, qlens)
        return out

    def _settle_runs(self, out, many, at, raw: bytes, qlens) -> None:
        """``out[i]`` for the names ``many`` whose hash starts a run of equal hashes at sorted
        position ``at[i]``: the last id of the run whose string is the name's bytes (-1: none)."""
        _h, starts, order, hs, _shared = self._hash
        qstart = (np.cumsum(qlens) - qlens)[many].tolist()
        lens, table = self._lens, self._raw
        for i, q0, a in zip(many.tolist(), qstart, at[many].tolist()):
            name = raw[q0 : q0 + int(qlens[i])]
            found, b = -1, a
            while b < len(hs) and hs[b] == hs[a]:
                j = int(order[b])
                s0 = int(starts[j])
                if int(lens[j]) == len(name) and table[s0 : s0 + len(name)] == name:
                    found = max(found, j)
                b += 1
            out[i] = found

    def _probe(self, uniq: list) -> dict | None:
        """{name: id or -1} for distinct names, through the hashes of the table (None: no
        hashes)."""
        th = self._table_hashes()
        if th is False:
            return None
        h, starts = th[:2]
        enc = [u.encode("utf-8", "surrogatepass") if isinstance(u, str) else None for u in uniq]
        good = [b for b in enc if b is not None]
        qlens = np.fromiter(map(len, good), dtype=np.int64, count=len(good))
        qh = (
            _packed_hashes(np.frombuffer(b"".join(good), dtype=np.uint8), qlens)
            if good
            else np.zeros(0, _U64)
        )
        if qh is None:
            return None
        if len(qh):
            # the table's strings whose hash is some name's hash: one pass over the table's hashes
            # against the few names' sorted hashes
            sq = np.sort(qh)
            k = np.minimum(np.searchsorted(sq, h), len(sq) - 1)
            cand = np.flatnonzero(sq[k] == h)
        else:
            cand = np.zeros(0, np.int64)
        raw, lens = self._raw, self._lens
        by_bytes: dict[bytes, int] = {}
        for j in cand.tolist():  # the last of equal strings wins, as in a dict built in order
            s0 = int(starts[j])
            by_bytes[raw[s0 : s0 + int(lens[j])]] = j
        return {u: (by_bytes.get(b, -1) if b is not None else -1) for u, b in zip(uniq, enc)}


def pair_density(sp: FeatureSpace, corpus, w: np.ndarray) -> float:
    """Estimated share of the L x L label pairs with a non-zero score at a position of ``corpus``
    under the weights ``w`` of ``sp``: the non-zero transitions plus, per position, the non-zero
    label-pair x observation features of the token's attributes (an upper bound: a pair two features
    share is counted twice), over L^2."""
    L = sp.n_labels
    ns = sp.n_state
    tr = np.count_nonzero(w[ns : ns + sp.n_trans])
    positions = corpus.n_tokens - corpus.n_sequences
    if not sp.n_bigram or not corpus.has_bigram or positions <= 0:
        return tr / (L * L)
    wb = w[sp.bigram_offset : sp.bigram_offset + sp.n_bigram]
    # non-zeros per bigram attribute from a running count: np.add.reduceat fails on an empty last
    # row (an offset equal to len(wb), which a loaded model may have)
    cnz = np.concatenate(([0], np.cumsum(wb != 0)))
    nz = cnz[sp.battr_ptr[1:]] - cnz[sp.battr_ptr[:-1]]
    btok_ptr, battr, _ = corpus.bigram_arrays()
    c = np.concatenate(([0], np.cumsum(nz[battr])))
    per_token = c[btok_ptr[1:]] - c[btok_ptr[:-1]]
    touched = float(per_token.sum() - per_token[corpus.seq_ptr[:-1][corpus.lengths() > 0]].sum())
    return min(1.0, (tr + touched / positions) / (L * L))
