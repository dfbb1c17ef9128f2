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
"""

from __future__ import annotations

from itertools import chain
from operator import countOf

import numpy as np

__all__ = ["NameTable"]


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

    def _built(self):
        """``(slots, blob)`` of the table, or False when the names cannot be packed."""
        if self._table is None:
            from ..kernels.strtable import MAX_BYTES, MAX_IDS, build_table
            from .space import StringTable

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
                self._table = (build_table(blob, off, cap), blob)
        return self._table

    def table(self):
        """``(slots, blob)``: the hash table (:func:`crfkit.kernels.strtable.build_table`) and the
        names' packed bytes; False when the names cannot be packed (a lone surrogate) or are too
        many for a slot (:data:`crfkit.kernels.strtable.MAX_IDS`, ``MAX_BYTES``)."""
        return self._built()

    def batch(self, X):
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
            if self._table is None and 4 * len(names) < len(self.attributes):
                return None  # a few names, a large model: not worth building the table for
            if countOf(map(type, names), str) != len(names):  # (str.join takes subclasses)
                return None
            raw = "\x00".join(names).encode("utf-8")
        except (TypeError, UnicodeEncodeError):
            return None
        if self._built() is False:
            return None
        from ..kernels.strtable import split_starts

        n = len(names)
        cnt = np.fromiter(map(len, toks), dtype=np.int64, count=len(toks))
        buf = np.frombuffer(raw, dtype=np.uint8)
        st = np.zeros(n + 1, dtype=np.int64)
        if n and split_starts(buf, n, st) != n:
            return None
        return cnt, buf, st

    def _codes(self, b):
        if b is None:
            return None
        from ..kernels.strtable import probe_range

        cnt, buf, st = b
        n = len(st) - 1
        out = np.empty(n, dtype=np.int64)
        slots, blob = self._built()
        probe_range(buf, st, 0, n, slots, blob, out)
        return out, cnt

    def codes(self, X):
        """``(codes, counts)`` of a list of attribute-string sequences (:meth:`batch`): the
        attribute id of every attribute in order (int64; -1: unknown to the model) and the number
        of attributes of each token; ``None`` when ``X`` is not of that shape."""
        return self._codes(self.batch(X))
