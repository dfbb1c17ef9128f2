"""Sequences converted on demand, a chunk at a time: how training reads its input without a second
copy.

:func:`crfkit.features.encode.build` and :func:`~crfkit.features.encode.encode` read their attribute
sequences in one pass, a chunk of sequences at a time (:func:`crfkit.features.encode._flatten_ids`),
and keep only the ids of what they read.  Handing them a :class:`LazySequences` instead of a list
means that the attribute strings of one chunk exist at a time: the input as attribute strings
(feature dicts converted by :mod:`crfkit.features.dicts`, column files through templates) never
exists whole.  That copy was the largest item of the peak memory of ``CRF.fit`` and ``crfkit train``
(README, issue 18).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["LazySequences", "CHUNK"]

CHUNK = (
    512  # sequences converted at a time: a chunk's attribute strings are the encoding's transient
)
#                    (CoNLL-2000's chunking templates: 2,048 sentences' made `crfkit train`'s RSS peak 272 MB
#                    while reading, 512 make it 205 MB, and the build took 0.5 s less)


class LazySequences(Sequence):
    """A read-only sequence of ``convert(items[a:b], a)`` results, converted :data:`CHUNK` items at
    a time as it is iterated (``lazy[i]`` converts one).  ``convert(chunk, first)`` returns one
    result per item; ``first`` is the chunk's position in ``items`` (for error messages).  Iterating
    twice converts twice, unless ``once``: then a complete pass releases ``items`` (a second one
    raises :class:`RuntimeError`).  ``progress``: a factory of a context manager with ``update(n)``
    (a :class:`crfkit.progress.Progress`), opened for each full iteration and advanced per chunk."""

    def __init__(
        self, items: list, convert, chunk: int | None = None, progress=None, once: bool = False
    ):
        self._items = items
        self._n = len(items)
        self._convert = convert
        self._chunk = int(CHUNK if chunk is None else chunk)
        self._progress = progress
        self._once = bool(once)
        self._consume = False

    def consume(self) -> LazySequences:
        """Declare ``items`` this object's alone (with ``once``: the caller keeps no reference to
        the list, and nothing else reads it): the one pass then lets each chunk's items go as soon
        as they are converted, instead of all of them at its end.  ``crfkit train`` on CoNLL-2000:
        the file's sentences (66 MB) no longer stand beside the whole attribute index while it is
        built, the peak of the run.  Returns ``self``."""
        if not self._once:
            raise ValueError("consume() needs once=True (the items go after one pass)")
        self._consume = True
        return self

    def __len__(self) -> int:
        return self._n

    def _source(self) -> list:
        if self._items is None:
            raise RuntimeError(
                "this lazy input was read once (once=True) and has released its items"
            )
        return self._items

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(self._n))]
        n = self._n
        k = i + n if -n <= i < 0 else i
        if not 0 <= k < n:
            raise IndexError(f"sequence index {i} out of range ({n} sequences)")
        return self._convert(self._source()[k : k + 1], k)[0]

    def __iter__(self):
        if self._progress is None:
            yield from self._chunks(None)
            return
        with self._progress() as bar:
            yield from self._chunks(bar)

    def _chunks(self, bar):
        for out in self.chunks():
            if bar is not None:
                bar.update(len(out))
            yield from out
            del out  # this chunk's objects go before the next one is converted

    def chunks(self):
        """The converted items a chunk (a list) at a time; the generator keeps no reference to a
        chunk it has handed out, so the caller decides when it is freed."""
        items = self._source()
        step = self._chunk
        for start in range(0, len(items), step):
            out = self._convert(items[start : start + step], start)
            if self._consume:
                items[start : start + step] = [None] * min(step, len(items) - start)
            box = [out]
            del out
            yield box.pop()  # no reference left in this frame while the caller holds the chunk
        if (
            self._once
        ):  # read whole: what the items hold can go (crfkit train: the file's sentences)
            del items
            self._items = None

    def iter_chunks(self):
        """:meth:`chunks`, with the progress bar (if any) advanced per chunk."""
        if self._progress is None:
            yield from self.chunks()
            return
        with self._progress() as bar:
            for out in self.chunks():
                bar.update(len(out))
                box = [out]
                del out
                yield box.pop()  # no reference left in this frame while the caller holds the chunk

    def take(self, indices) -> LazySequences:
        """The items at ``indices`` (in that order), still converted lazily (positions in messages
        are then positions in the subset)."""
        items = self._source()
        return LazySequences(
            [items[i] for i in indices], self._convert, self._chunk, self._progress, self._once
        )
