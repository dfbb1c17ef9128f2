"""Attribute strings straight to a model's attribute codes: the tagging fast path of
:meth:`crfkit.model.CRFModel.tag`.

The generic path (:func:`crfkit.features.encode.encode`) flattens the attribute lists token by
token, checks every attribute's type, looks every string up in a Python dict, and builds a
:class:`~crfkit.corpus.Corpus` without the unknown ones.  On the CoNLL-2000 test set (852k
attribute strings, a model of 336k attributes) the dict lookups alone took 130-220 ms, most of it
cache misses on the scattered string objects of the input and the dict, and the whole
``CRFModel.tag`` call about 0.3 s.

:class:`NameTable` does it in C and numba: the names of the whole batch are joined by NUL bytes into
one string (anything but a ``str``, e.g. a ``(name, value)`` pair, sends the batch to the generic path,
which takes the pairs and refuses the rest) and encoded to UTF-8 once; one numba loop
(:func:`crfkit.kernels.strtable.lookup_joined`) hashes each name and finds it in a hash table built
once over the model's packed attribute names (every hit compared byte for byte).  The codes (-1 for
an unknown attribute, which the tagging kernels skip) go to the fused emissions + Viterbi kernels
(:meth:`crfkit.model.CRFModel._tag_codes`) without a corpus.  A name that contains a NUL byte, or a
string that cannot be encoded (a lone surrogate), also sends the batch to the generic path; since
the attribute lists are walked the same way (a token is iterated for its attributes), the codes are
the generic path's.

The kernels are numba's (:meth:`NameTable.jit`) or the same functions compiled ahead of time
(:func:`crfkit.npdecode.aot_kernels`), passed as ``kern`` (anything with ``build_table``,
``split_starts`` and ``probe_range``): both build the same table, so a table built by one serves
the other.
"""

from __future__ import annotations

from itertools import chain
from operator import countOf

import numpy as np

__all__ = ["AttributeLookup", "NameTable"]

#: ids and bytes a slot can hold (:data:`crfkit.kernels.strtable.MAX_IDS`, ``MAX_BYTES``: repeated
#: here so that a process tagging through the kernels compiled ahead of time does not import numba)
MAX_IDS = 1 << 31
MAX_BYTES = 1 << 31


class NameTable:
    """The hash table of a feature space's attribute names (built on first use) and the codes of
    batches of attribute-string sequences (:meth:`codes`)."""

    def __init__(self, attributes):
        self.attributes = attributes
        self._table = None

    def __getstate__(self):  # pickled with its model: the table is rebuilt
        return {"attributes": self.attributes}

    def __setstate__(self, st):
        self.__init__(st["attributes"])

    @staticmethod
    def jit():
        """numba's kernels (:mod:`crfkit.kernels.strtable`), the default ``kern``."""
        from ..kernels import strtable

        return strtable

    def _built(self, kern=None):
        """``(slots, blob)`` of the table, or False when the names cannot be packed."""
        if self._table is None:
            from .space import StringTable

            build_table = (kern or self.jit()).build_table
            a = self.attributes
            t = None
            if len(a) < MAX_IDS:
                t = a if isinstance(a, StringTable) else StringTable.of(list(a))
            if t is None or len(t.packed()[0]) >= MAX_BYTES:
                self._table = False
            else:
                blob, lens = t.packed()
                off = np.zeros(len(lens) + 1, dtype=np.int64)
                np.cumsum(lens, out=off[1:])
                cap = 1 << max(4, int(2 * len(lens)).bit_length())
                blob = np.ascontiguousarray(blob, dtype=np.uint8)
                self._table = (build_table(blob, off, cap), blob)
        return self._table

    def table(self, kern=None):
        """``(slots, blob)``: the hash table (:func:`crfkit.kernels.strtable.build_table`) and the
        names' packed bytes; False when the names cannot be packed (a lone surrogate) or are too
        many for a slot (:data:`crfkit.kernels.strtable.MAX_IDS`, ``MAX_BYTES``).  ``kern``: the
        kernels that build it (:meth:`jit` by default)."""
        return self._built(kern)

    def batch(self, X, kern=None):
        """What the kernels need to look up the attribute strings of ``X`` (a list of sequences,
        each a list of tokens, each a list of attribute strings): ``(counts, buf, starts)``, the
        number of attributes of each token (int64), the names joined by NUL bytes (uint8) and their
        starts (:func:`crfkit.kernels.strtable.split_starts`); ``None`` when ``X`` is not of that
        shape (the generic path then converts it, or says what is wrong), or when the table is not
        built yet and the batch has fewer than a quarter as many names as the model has attributes
        (the generic path finds those without building anything for the whole model: a loaded
        model's :meth:`crfkit.features.space.StringTable.ids`; the table takes 16 bytes a slot, 2-4
        slots an attribute)."""
        if type(X) is not list or self._table is False:
            return None
        try:
            toks = list(chain.from_iterable(X))
            names = list(chain.from_iterable(toks))
        except TypeError:
            return None
        got = self._joined(names, kern)
        if got is None:
            return None
        cnt = np.fromiter(map(len, toks), dtype=np.int64, count=len(toks))
        return (cnt, *got)

    def _joined(self, names: list, kern=None, few_too: bool = False):
        """``(buf, starts)`` of a list of names (see :meth:`batch`), the table built; None when a
        name is not a ``str``, contains a NUL or cannot be encoded, when the names cannot be packed,
        or (unless ``few_too``) when the table is not built yet and there are fewer than a quarter
        as many names as the model has attributes."""
        if self._table is False:
            return None
        if self._table is None and 4 * len(names) < len(self.attributes) and not few_too:
            return None  # a few names, a large model: not worth building the table for
        try:
            if countOf(map(type, names), str) != len(names):  # (str.join takes subclasses)
                return None
            raw = "\x00".join(names).encode("utf-8")
        except (TypeError, UnicodeEncodeError):
            return None
        kern = kern or self.jit()
        if self._built(kern) is False:
            return None
        n = len(names)
        buf = np.frombuffer(raw, dtype=np.uint8)
        st = np.zeros(n + 1, dtype=np.int64)
        if n and kern.split_starts(buf, n, st) != n:
            return None
        return buf, st

    def ids(self, names: list, kern=None) -> np.ndarray | None:
        """The attribute id of each name of a list (int64; -1: not in the model), or None when
        :meth:`_joined` declines them (the caller then asks the feature space).  The table is built
        for however few names: the space's own first lookup hashes all of its names too
        (:meth:`crfkit.features.space.StringTable.ids`), in numpy, in about the time the compiled
        kernel builds the table (36 ms for CoNLL-2000's 336k)."""
        got = self._joined(names, kern, few_too=True)
        if got is None:
            return None
        kern = kern or self.jit()
        out = np.empty(len(names), dtype=np.int64)
        slots, blob = self._built(kern)
        kern.probe_range(got[0], got[1], 0, len(names), slots, blob, out)
        return out

    def _codes(self, b, kern=None):
        if b is None:
            return None
        kern = kern or self.jit()
        cnt, buf, st = b
        n = len(st) - 1
        out = np.empty(n, dtype=np.int64)
        slots, blob = self._built(kern)
        kern.probe_range(buf, st, 0, n, slots, blob, out)
        return out, cnt

    def codes(self, X, kern=None):
        """``(codes, counts)`` of a list of attribute-string sequences (:meth:`batch`): the
        attribute id of every attribute in order (int64; -1: unknown to the model) and the number
        of attributes of each token; ``None`` when ``X`` is not of that shape."""
        return self._codes(self.batch(X, kern), kern)


class AttributeLookup:
    """``lookup(names)``: the attribute ids of a list of names (int64; -1: unknown), what
    :meth:`crfkit.features.space.FeatureSpace.attribute_ids` gives, through the :class:`NameTable`
    ``table`` when the tagging kernels compiled ahead of time are built
    (:func:`crfkit._runtime.aot.load`: a hash and a probe per name in compiled code, numba not
    imported), else through the space.  What the encoders of a model's tagging paths call for the
    names they meet first (:class:`crfkit.features.dictenc.DictEncoder`,
    :class:`crfkit.features.tplenc.TemplateIds`).  Pickled as its space (the table is rebuilt)."""

    __slots__ = ("space", "table")

    def __init__(self, space, table: NameTable | None = None):
        self.space = space
        self.table = NameTable(space.attributes) if table is None else table

    def __reduce__(self):
        return (AttributeLookup, (self.space,))

    def __call__(self, names) -> np.ndarray:
        from .._runtime.aot import load

        kern = load()
        got = None
        if kern is not None and self.table.attributes is self.space.attributes:
            got = self.table.ids(names if type(names) is list else list(names), kern)
        return self.space.attribute_ids(names) if got is None else got
