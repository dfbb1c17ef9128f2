"""Feature dicts straight to a model's attribute ids: the tagging fast path of :class:`crfkit.CRF`.

Tagging a sentence given as sklearn-crfsuite feature dicts used to go dicts -> attribute strings
(:func:`crfkit.features.dicts.to_attributes`: one ``"name:value"`` string built per entry) -> a
flattened list -> a hash lookup of every new string (:func:`crfkit.features.encode.encode`).  Per
sentence that Python work cost several times CRFsuite's whole ``Tagger.tag`` call.

:class:`DictEncoder` goes from the dicts to the encoded arrays through a two-level memo, name ->
``{value: attribute id}``: per entry one lookup of the name and one of the value, iterated in C over
``dict.keys()`` and ``dict.values()`` (``map(dict.get, tables, values)``), so that no
``(name, value)`` tuple is built (building and hashing those tuples was half of the per-entry time;
Python caches a string's hash on the object, and the names are usually the same strings sentence
after sentence).  An entry not seen before is resolved once, through the model's own attribute index
on the string :mod:`crfkit.features.dicts` would have built, so the ids are by construction the
generic path's; the names first met in a call are looked up together at its end.  Equal keys mean
equal attributes: values ``True``, ``1`` and ``1.0`` are one key (attribute ``name``, value 1), as
are the zeros (dropped).  Unknown attributes are remembered too (id -1); the memo is emptied when it
passes :data:`MAX_MEMO` entries.  Numbers other than 0 and 1 are not remembered by value (continuous
values would fill the memo): their name's attribute id is.

Only the common shape takes this path: every token a ``dict`` whose keys are ``str`` and values
``str``, ``bool``, ``int`` or ``float`` (finite, within :data:`crfkit.corpus.MAX_FEATURE_VALUE`).
Anything else (nested values, bytes, numpy scalars, lists of attribute strings, bad values) makes
:meth:`DictEncoder.encode` return ``None`` and the caller takes the generic path, which also writes
the error messages.  Semantics are those of ``to_attributes(..., keep_zeros=False)``: a string value
is attribute ``name:value`` with value 1; a number or bool is attribute ``name`` with that value,
dropped when it is 0 (it adds nothing to any score).
"""

from __future__ import annotations

import gc
import threading
from itertools import chain, repeat

import numpy as np

from ..corpus import MAX_FEATURE_VALUE, Corpus
from .encode import assemble, offsets

__all__ = ["DictEncoder", "MAX_MEMO"]

MAX_MEMO = 2_000_000  # memo entries per encoder (beyond: looked up each time, not remembered)
CHUNK = 256  # sequences encoded at a time by one call


class _Names(dict):
    """The memo's first level, name -> ``{value: code}``: a name it does not hold answers an empty
    table (shared and never written to: :meth:`DictEncoder._sub` makes a name's own table) instead
    of raising."""

    __slots__ = ()

    def __missing__(self, key):
        return _EMPTY


_EMPTY: dict = {}
_NO_VALUES = np.zeros(0)  # "every value 1", shared by the calls (empty: nothing to write)


class _Fallback(Exception):
    """The input is not the flat-dict shape: the caller takes the generic path."""


class DictEncoder:
    """Encodes flat feature dicts against a :class:`crfkit.features.space.FeatureSpace` (see the
    module docstring). Calls from several threads take turns (a lock around each call)."""

    def __init__(self, space, lookup=None):
        self.space = space
        # names -> ids of the names met for the first time (default: the space's own index)
        self.lookup = space.attribute_ids if lookup is None else lookup
        # name -> {value: attribute id (value 1), or -1 (unknown to the model, or value 0)}; and, in
        # _num, name -> attribute id for the names of numeric values other than 0 and 1
        self._memo = _Names()
        self._num: dict = {}
        self._size = 0
        self._lock = threading.Lock()

    def __getstate__(self):  # pickled with its model: the memo, the lock and the lookup are rebuilt
        return {"space": self.space}

    def __setstate__(self, st):
        self.__init__(st["space"])

    def entries(self) -> int:
        """The number of entries the memo holds (codes of (name, value) pairs and of numeric
        names)."""
        return self._size

    def codes_held(self):
        """Every code the memo holds (for tests: none provisional, i.e. all >= -1, between
        calls)."""
        return [c for sub in self._memo.values() for c in sub.values()] + list(self._num.values())

    def _sub(self, name: str) -> dict:
        """The memo's own table of ``name`` (made when first needed)."""
        sub = self._memo.get(name)
        if sub is None:
            sub = self._memo[name] = {}
        return sub

    def _pend(self, name: str, table: dict, key) -> None:
        """A provisional code (<= -3) for an attribute name first met in this call, kept in
        ``table`` under ``key`` until the end of the call resolves it."""
        self._pending.append(name)
        self._where.append((table, key))
        table[key] = -2 - len(self._pending)
        self._size += 1

    def _learn(self, k, v) -> None:
        """Put an entry ``(k, v)`` not in the memo into it (a provisional code for a name first met
        in this call), checking it (:class:`_Fallback` when it is not of the flat shape).  A number
        other than 0 and 1 is not remembered by value (continuous values would fill the memo): its
        name is."""
        if type(k) is not str:
            raise _Fallback
        tv = type(v)
        if tv is str:
            self._pend(k + ":" + v, self._sub(k), v)
            return
        if tv is not bool and tv is not int and tv is not float:
            raise _Fallback
        if not (-MAX_FEATURE_VALUE <= v <= MAX_FEATURE_VALUE):  # also NaN
            raise _Fallback
        sub = self._sub(k)
        if v == 0:
            sub[v] = -1  # adds nothing to any score: dropped
            self._size += 1
        elif v == 1:
            self._pend(k, sub, v)
        elif k not in self._num:  # the name alone: the attribute of any value
            self._pend(k, self._num, k)

    def encode(self, X) -> Corpus | None:
        """The corpus of ``X`` (a list of sequences, each a list of flat feature dicts), or ``None``
        when some token is not of that shape (the generic path then converts it, or says what is
        wrong)."""
        r = self.codes(X)
        return None if r is None else self.corpus(X, *r)

    @staticmethod
    def corpus(X, a, cnt, v) -> Corpus:
        """The corpus of ``X`` from its :meth:`codes`: what the generic path does with looked-up ids
        (the unknown, -1, dropped; the pointers built)."""
        seq_ptr = offsets(np.fromiter(map(len, X), dtype=np.int64, count=len(X)))
        return assemble(
            seq_ptr, cnt, a, v if len(v) else None, np.full(int(seq_ptr[-1]), -1, dtype=np.int32)
        )

    def codes(self, X):
        """``(codes, counts, values)`` of ``X`` (see :meth:`encode`): the attribute id of every
        entry of every token in order (int64; -1: unknown to the model, or a value 0), the number of
        entries of each token, and the entries' values (empty when all are 1); ``None`` when some
        token is not a flat feature dict."""
        if type(X) is not list:
            return None
        with self._lock:
            return self._codes_locked(X)

    def _codes_locked(self, X):
        enabled = gc.isenabled()
        gc.disable()  # no cycles among the lists built here; the collector would walk the input
        if self._size > MAX_MEMO:
            self._memo.clear()
            self._num.clear()
            self._size = 0
        self._pending: list = []
        self._where: list = []
        try:
            if len(X) <= CHUNK:
                return self._codes(X)
            return self._chunked(X)
        except _Fallback:
            self._forget()
            return None
        finally:
            if enabled:
                gc.enable()

    def _forget(self) -> None:
        """Drop the provisional codes of an unfinished call from the memo."""
        for table, key in self._where:
            if table.pop(key, None) is not None:
                self._size -= 1
        self._pending, self._where = [], []

    def _chunked(self, X):
        """:meth:`_codes` a chunk of :data:`CHUNK` sequences at a time: the per-entry lists of a
        call (and, while the memo is cold, a tuple per entry not met before) exist for one chunk at
        a time, and the later chunks find what the earlier ones learned (measured on the
        sklearn-crfsuite tutorial's test set, 1M entries, a fresh model: 145 MB of Python objects at
        the peak of one call, the peak of the whole fit-and-predict run)."""
        parts = [self._codes(X[i : i + CHUNK]) for i in range(0, len(X), CHUNK)]
        a = np.concatenate([p[0] for p in parts])
        cnt = np.concatenate([p[1] for p in parts])
        v = _NO_VALUES
        if any(len(p[2]) for p in parts):
            v = np.concatenate([p[2] if len(p[2]) else np.ones(len(p[0])) for p in parts])
        return a, cnt, v

    def _codes(self, X):
        for seq in X:
            if type(seq) is not list:
                raise _Fallback
        dicts = list(chain.from_iterable(X))
        try:
            # one lookup per entry, iterated in C, and no tuple built: the name's table (dict.keys
            # refuses a token that is not a dict), then the value in it (an unhashable value raises
            # TypeError)
            flat = list(
                map(
                    dict.get,
                    map(self._memo.__getitem__, chain.from_iterable(map(dict.keys, dicts))),
                    chain.from_iterable(map(dict.values, dicts)),
                    repeat(-2),
                )
            )
        except TypeError:
            raise _Fallback from None
        a = np.fromiter(
            flat, dtype=np.int64, count=len(flat)
        )  # (half np.array's time on a list of ints)
        lens = list(map(len, dicts))
        cnt = np.fromiter(lens, dtype=np.int64, count=len(lens))
        v = _NO_VALUES
        if (
            (-2 in flat) if len(flat) < 2048 else bool((a == -2).any())
        ):  # (a numpy call costs ~1 us)
            miss = np.flatnonzero(a == -2)
            # entries not met before: learn each distinct one, then look those up again
            ks = list(chain.from_iterable(map(dict.keys, dicts)))
            vs = list(chain.from_iterable(map(dict.values, dicts)))
            mi = miss.tolist()
            memo, num = self._memo, self._num
            pend, where, learn = self._pending, self._where, self._learn
            n_str = 0
            # a cold memo (most entries new): the distinct entries of all of them, paired in C
            # (a tuple per missed entry built in Python took 0.2 s per 400k entries), the ones
            # known before skipped below
            cold = 2 * len(mi) > len(ks)
            pairs = dict.fromkeys(zip(ks, vs) if cold else [(ks[i], vs[i]) for i in mi])
            for k, x in pairs:
                if type(x) is str and type(k) is str:
                    # _learn's string case inlined (a cold memo meets 119k such entries on
                    # CoNLL-2000's test set: the two calls per entry were most of their time)
                    sub = memo.get(k)
                    if sub is None:
                        sub = memo[k] = {}
                    elif cold and x in sub:
                        continue
                    pend.append(k + ":" + x)
                    where.append((sub, x))
                    sub[x] = -2 - len(pend)
                    n_str += 1
                elif not (cold and type(k) is str and x in memo[k]):
                    learn(k, x)
            self._size += n_str
            if cold:
                # every entry looked up again in one pass iterated in C, as above (a Python step
                # per missed entry was half of a first predict's time on CoNLL-2000's 852k); still
                # missing: the numbers other than 0 and 1, taken one by one below
                again = np.fromiter(
                    map(dict.get, map(memo.__getitem__, ks), vs, repeat(-2)),
                    dtype=np.int64,
                    count=len(ks),
                )
                a[miss] = again[miss]
                mi = np.flatnonzero(again[miss] == -2)
                mi = miss[mi].tolist()
            for i in mi:
                k, x = ks[i], vs[i]
                c = memo[k].get(x, -2)
                if c == -2:  # numbers other than 0 and 1: the name's id, the value
                    if not len(v):
                        v = np.ones(len(a))
                    c = num[k]
                    v[i] = x
                a[i] = c
        if self._pending:
            # resolve the names met for the first time, all at once, and write them into the memo
            ids = self.lookup(self._pending)
            prov = a <= -3
            a[prov] = ids[-3 - a[prov]]
            for (table, key), i in zip(self._where, ids.tolist()):
                table[key] = i
            self._pending, self._where = [], []
        return a, cnt, v
