"""Token-feature dicts (python-crfsuite / sklearn-crfsuite input) -> crfkit attribute lists.

python-crfsuite (``pycrfsuite.ItemSequence``) turns every token into a list of
``(attribute, value)`` pairs; this module produces the same pairs in crfkit's
attribute format (a string for value 1.0, a ``(string, value)`` pair
otherwise).  A token is

* a dict ``{name: value}`` where value is

  - a ``str`` (or ``bytes``): attribute ``"name:value"`` with value 1.0;
  - a number or a bool: attribute ``"name"`` with that value (True 1.0,
    False 0.0; numpy scalars too);
  - a dict, list or set: its own attributes (by these same rules; list and
    set elements are attribute names with value 1.0), each prefixed with
    ``"name:"`` (nested to any depth);

* or a list (tuple, set) of attribute names, each with value 1.0.  crfkit's own
  ``(name, value)`` pairs are accepted in such lists too.

Repeated attributes in one token are kept (their values add up, as in
CRFsuite).  Two differences from python-crfsuite, both documented choices:

* attributes whose value is 0 (``False``, ``0``, ``0.0``) are dropped unless
  ``keep_zeros=True``.  They contribute nothing to any score or gradient, so
  the objective, the trained weights and every prediction are the same; the
  features they would create in CRFsuite stay at weight 0, which CRFsuite does
  not write to its model file either.  Dropping them keeps the corpus small
  and keeps boolean-heavy feature dicts on crfkit's all-strings fast path.
* values python-crfsuite would turn into a C++ exception or silently into
  garbage are refused with a :class:`~crfkit.errors.DataError` naming the
  sequence and the token: ``None``, tuples, complex numbers, non-string keys,
  NaN and infinite values, and a token that is a bare string (python-crfsuite
  would make one attribute per character).

Speed: tokens whose values are flat (str, bool, int, float: the
sklearn-crfsuite tutorial's features) take a tight loop with the cyclic garbage
collector paused; everything else takes a general per-token path.  On the
CoNLL-2002 Spanish training set with the tutorial's ``word2features``
(264,715 tokens, 4.96M dict entries) the conversion takes 1.3-1.6x less CPU
time than ``pycrfsuite.ItemSequence`` on the same dicts (about 1-1.8 s against
1.6-2.7 s on a shared 2-core machine; ``tests/test_dicts.py`` has the command).
"""

from __future__ import annotations

import gc
import math
from itertools import chain

import numpy as np

from ..errors import DataError

__all__ = ["to_attributes", "LazyAttributes", "sequence_attributes", "token_attributes"]


class _Bad(Exception):
    """A value python-crfsuite semantics cannot turn into attributes (message for the user)."""


def _key(k, prefix: str) -> str:
    if isinstance(k, str):
        return prefix + k
    if isinstance(k, bytes):
        try:
            return prefix + k.decode("utf-8")
        except UnicodeDecodeError:
            raise _Bad(f"feature name {k!r} is not valid UTF-8") from None
    raise _Bad(f"feature name {k!r} is a {type(k).__name__}; feature names must be strings")


def _number(v, key: str) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError, OverflowError):
        raise _Bad(
            f"feature {key!r} has a value of type {type(v).__name__} ({v!r}); expected a string, "
            "a number, a bool, or a dict / list / set of those"
        ) from None
    if not math.isfinite(f):
        raise _Bad(f"feature {key!r} has a non-finite value {f}")
    return f


def _items(x, out: list, keep_zeros: bool, prefix: str = "", top: bool = True) -> None:
    """python-crfsuite's ``to_item`` on one token (or one nested value), appending to ``out``."""
    if isinstance(x, dict):
        for k, v in x.items():
            key = _key(k, prefix)
            if isinstance(v, str):
                out.append(key + ":" + v)
            elif isinstance(v, (dict, list, set, frozenset)):
                _items(v, out, keep_zeros, key + ":", top=False)
            elif isinstance(v, (bytes, bytearray)):
                try:
                    out.append(key + ":" + bytes(v).decode("utf-8"))
                except UnicodeDecodeError:
                    raise _Bad(
                        f"feature {key!r} has a bytes value that is not valid UTF-8"
                    ) from None
            elif isinstance(v, tuple):
                raise _Bad(
                    f"feature {key!r} has a tuple value {v!r}; use a list for several string values"
                )
            else:
                f = _number(v, key)
                if f == 1.0:
                    out.append(key)
                elif f != 0.0 or keep_zeros:
                    out.append((key, f))
        return
    if isinstance(x, (str, bytes)):
        raise _Bad(
            f"a token is a string ({x[:40]!r}); a token must be a dict of features or a list of "
            "attribute strings (is X a list of sequences of tokens?)"
        )
    try:
        it = iter(x)
    except TypeError:
        raise _Bad(
            f"a token is a {type(x).__name__}; a token must be a dict of features or a list of "
            "attribute strings"
        ) from None
    for a in it:
        if type(a) is str:
            out.append(prefix + a)
        elif isinstance(a, (str, bytes)):
            out.append(_key(a, prefix))
        elif top and isinstance(a, tuple) and len(a) == 2 and isinstance(a[0], str):
            # crfkit's own (name, value) pair
            name = "" + a[0]  # an exact str even for str subclasses (numpy.str_)
            f = _number(a[1], name)
            if f == 1.0:
                out.append(name)
            elif f != 0.0 or keep_zeros:
                out.append((name, f))
        else:
            where = f"in feature {prefix[:-1]!r}" if prefix else "in a token list"
            raise _Bad(
                f"{where}: element {a!r} is a {type(a).__name__}; list elements must be strings"
            )


def token_attributes(token, *, keep_zeros: bool = False) -> list:
    """The attributes of one token (a feature dict or a list of attribute names)."""
    out: list = []
    try:
        _items(token, out, keep_zeros)
    except _Bad as e:
        raise DataError(str(e)) from None
    return out


def _sequences(X, name: str) -> list:
    if isinstance(X, (str, bytes, dict)):
        raise DataError(f"expected a list of sequences, got a {type(X).__name__}", name)
    try:
        seqs = list(X)
    except TypeError:
        raise DataError(f"expected a list of sequences, got a {type(X).__name__}", name) from None
    for i, s in enumerate(seqs):
        if type(s) is list:
            continue
        if isinstance(s, (str, bytes, dict)):
            raise DataError(
                f"sequence {i} is a {type(s).__name__}; a sequence must be a list of tokens "
                "(feature dicts or lists of attribute strings)",
                name,
            )
        if type(s).__name__ == "ItemSequence" and hasattr(s, "items"):
            seqs[i] = s.items()  # pycrfsuite.ItemSequence: its prepared {attribute: value} dicts
            continue
        try:
            seqs[i] = list(s)
        except TypeError:
            raise DataError(
                f"sequence {i} is a {type(s).__name__}, not a list of tokens", name
            ) from None
    return seqs


def _locate(seq_ptr: np.ndarray, tok: int) -> tuple[int, int]:
    i = int(np.searchsorted(seq_ptr, tok, side="right")) - 1
    return i, tok - int(seq_ptr[i])


def _split(flat: list, counts: np.ndarray) -> list:
    ptr = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    p = ptr.tolist()
    return list(map(flat.__getitem__, map(slice, p[:-1], p[1:])))


def to_attributes(X, *, keep_zeros: bool = False, name: str = "X") -> list:
    """Convert sequences of tokens (feature dicts or attribute lists) to crfkit attribute sequences.

    Returns a list (sequences) of lists (tokens) of lists of attributes
    (``str`` for value 1.0, ``(str, float)`` otherwise), ready for
    :func:`crfkit.train.train` and :meth:`crfkit.model.CRFModel.tag`.  Errors
    are :class:`~crfkit.errors.DataError` naming ``name``, the sequence and
    the token (0-based).
    """
    # Millions of new lists and strings would trigger the cyclic garbage
    # collector over and over, each time walking every container of the
    # corpus (measured: 5x slower on CoNLL-2002); none of them form cycles.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _to_attributes(X, keep_zeros, name)
    finally:
        if enabled:
            gc.enable()


def LazyAttributes(X, *, keep_zeros: bool = False, name: str = "X"):
    """:func:`to_attributes` on demand: a :class:`crfkit.features.lazy.LazySequences` of the
    attribute sequences of ``X``, converted a chunk of sequences at a time as it is iterated
    (``X[i]`` converts one).

    ``X``'s shape is checked at once (errors as :func:`to_attributes`'s); its values as they are
    converted, with the same messages (the sequence numbers are ``X``'s).
    :func:`crfkit.train.train` reads it in one pass, encoding each chunk before the next is
    converted, so the whole training set as attribute strings never exists at once: that copy was
    the largest item of ``CRF.fit``'s peak memory (205 MB on the sklearn-crfsuite tutorial's data,
    2.6 times the feature space and encoded corpus)."""
    from .lazy import LazySequences

    seqs = _sequences(X, name)

    def convert(chunk, first):
        return to_attributes_chunk(chunk, keep_zeros, name, first)

    return LazySequences(seqs, convert)


def to_attributes_chunk(seqs: list, keep_zeros: bool, name: str, first: int) -> list:
    """:func:`to_attributes` on ``seqs`` (already checked by :func:`_sequences`), sequence numbers
    in messages counted from ``first``."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _to_attributes(seqs, keep_zeros, name, first)
    finally:
        if enabled:
            gc.enable()


def _to_attributes(X, keep_zeros: bool, name: str, first: int = 0) -> list:
    seqs = _sequences(X, name)
    seq_ptr = np.zeros(len(seqs) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, seqs), dtype=np.int64, count=len(seqs)), out=seq_ptr[1:])
    toks = list(chain.from_iterable(seqs))

    def slow(t: int) -> list:
        out: list = []
        try:
            _items(toks[t], out, keep_zeros)
        except _Bad as e:
            i, j = _locate(seq_ptr, t)
            raise DataError(f"sequence {first + i}, token {j}: {e}", name) from None
        return out

    if type(toks[0] if toks else None) is list and set(map(type, toks)) == {list}:
        # crfkit's own format (or python-crfsuite's lists of names): nothing to
        # convert when every attribute is already a string
        if set(map(type, chain.from_iterable(toks))) <= {str}:
            return seqs
    # One plain loop: measured faster on CPython 3.11 than column-wise tricks
    # (grouping tokens by key layout, numpy object arrays), once the garbage
    # collector is out of the way.  Anything unusual (nested values, bytes,
    # numpy scalars, bad values) goes to the general per-token path, which
    # also produces the error messages.
    tok_lists = []
    add = tok_lists.append
    for t, d in enumerate(toks):
        if type(d) is not dict:
            add(slow(t))
            continue
        out = []
        app = out.append
        try:
            for k, v in d.items():
                tv = type(v)
                if tv is str:
                    app(k + ":" + v)  # TypeError unless k is a str
                elif tv is bool:
                    if type(k) is not str:
                        raise TypeError
                    if v:
                        app(k)
                    elif keep_zeros:
                        app((k, 0.0))
                elif tv is float or tv is int:
                    if type(k) is not str or v - v != 0:  # v - v: nan for NaN and infinities
                        raise TypeError
                    if v == 1:
                        app(k)
                    elif v or keep_zeros:
                        app((k, float(v)))
                else:
                    raise TypeError
        except (TypeError, OverflowError):
            out = slow(t)
        add(out)
    return _split(tok_lists, np.diff(seq_ptr))


def sequence_attributes(xseq, *, keep_zeros: bool = False, name: str = "xseq") -> list:
    """:func:`to_attributes` for one sequence."""
    return to_attributes([xseq], keep_zeros=keep_zeros, name=name)[0]
