"""Attribute ids of column rows through CRF++ templates, without building the attribute strings.

Tagging a column file with a model goes: templates -> one attribute string per template and token
(``U05:He/reckons``) -> a hash lookup in the model's attribute index.  The strings are built to be
hashed once and thrown away; on the CoNLL-2000 test set that is 900,000 new strings, about half the
time of a warm ``crfkit serve`` n-best request.

:class:`TemplateIds` goes from the column values to the ids directly.  Each column a template reads
(or its case-folded / regex-tested form) gets a vocabulary, value -> code, so a batch's values are
hashed once each (one dict lookup per token and column, in C).  Everything after that is numpy over
the whole batch: what a macro reads at every token is the column's codes shifted by its row within
each sentence (the padding tokens ``_B-1``... are vocabulary entries too; unpadded, outside the
sentence is -1 and the template does not fire); a template's key at a token is its macros' codes
packed into one int64; and per template a memo ``key -> attribute id`` answers (sorted keys, looked
up by ``np.searchsorted``).  Only a key met for the first time goes through Python: its attribute
string is built by the template's own f-string from the values and looked up in the model's
attribute table (unknown: id -1, remembered too).

The output is exactly :func:`crfkit.features.encode.encode`'s on the strings :meth:`Templates.apply`
makes: per token the known attributes in template order, value 1 (``tests/test_tplenc.py`` checks
it with hypothesis, padded and unpadded).  The memos live as long as the :class:`TemplateIds`
(``crfkit serve`` keeps one per model: later requests find the keys already there); past
``limit`` entries in all they are emptied and refilled.
"""

from __future__ import annotations

import itertools
import threading

import numpy as np

from .templates import Macro, Templates, fstring

#: entries of all the memos together before they are emptied (about 100 bytes each)
MEMO_LIMIT = 2_000_000


class TooWide(Exception):
    """A batch with more distinct values than a template's packed key holds (see
    :meth:`TemplateIds.ids`)."""


class TemplateIds:
    """Attribute ids of sentences (lists of token rows) through ``templates``' unigram templates,
    padded as :meth:`Templates.apply` with ``pad``; ``lookup(names)`` gives the ids of a list of
    attribute strings (int64, -1 for an unknown one), e.g.
    :meth:`crfkit.features.space.FeatureSpace.attribute_ids`."""

    def __init__(self, templates: Templates, lookup, pad: bool = True, limit: int = MEMO_LIMIT):
        self.templates = templates
        self.lookup = lookup
        self.pad = bool(pad)
        self.limit = int(limit)
        uni = list(templates.unigram)
        self.n_templates = len(uni)
        srcs = sorted(
            {m.source() for t in uni for m in t.macros}, key=lambda k: (k[0], k[1], k[2] or "")
        )
        self.sources = srcs
        self.transforms = [Macro(0, k[0], k[1], k[2]).transform() for k in srcs]
        slot = {k: i for i, k in enumerate(srcs)}
        self.maxcol = max((k[0] for k in srcs), default=-1)
        self.reads = []  # per template: (source slot, row) per macro, in the template's order
        # per template: its attribute string from the tuple of its macros' values
        self.builders = []
        self.spread = []
        for t in uni:
            ms = list(t.macros)
            self.reads.append(tuple((slot[m.source()], m.row) for m in ms))
            pos = {m: i for i, m in enumerate(ms)}
            src = f"lambda k: {fstring(t.pieces, lambda m: f'k[{pos[m]}]')}"  # noqa: B023
            self.builders.append(eval(src))  # noqa: S307 (source generated here from parsed templates)
            # the same with one argument per macro: mapped over the value lists of many keys at
            # once (no tuple per key)
            args = ", ".join(f"k{i}" for i in range(len(ms))) or "*_"
            src = f"lambda {args}: {fstring(t.pieces, lambda m: f'k{pos[m]}')}"  # noqa: B023
            self.spread.append(eval(src))  # noqa: S307 (as above)
        self.bits = [62 // max(len(r), 1) for r in self.reads]
        self._lock = threading.Lock()
        self._reset()

    # pickled with its model: the template source, not the compiled templates, builders, memos or
    # lock
    def __getstate__(self):
        t = self.templates
        return {
            "source": t.source,
            "name": t.name,
            "lookup": self.lookup,
            "pad": self.pad,
            "limit": self.limit,
        }

    def __setstate__(self, st):
        self.__init__(
            Templates.parse(st["source"], name=st["name"]),
            st["lookup"],
            pad=st["pad"],
            limit=st["limit"],
        )

    def _reset(self) -> None:
        self.vocab = [dict() for _ in self.sources]  # value -> code
        self.values = [[] for _ in self.sources]  # code -> value
        # per template, packed keys (sorted) and their attribute ids (-1: unknown or not firing)
        self.memos = [
            (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)) for _ in self.reads
        ]

    def size(self) -> int:
        return sum(len(k) for k, _ in self.memos) + sum(map(len, self.values))

    def _codes(self, s: int, vals: list) -> np.ndarray:
        """Codes of ``vals`` in source ``s``'s vocabulary, new values added."""
        voc = self.vocab[s]
        codes = np.fromiter(
            map(voc.get, vals, itertools.repeat(-1)), dtype=np.int64, count=len(vals)
        )
        miss = np.flatnonzero(codes < 0)
        if len(miss):
            new = dict.fromkeys(map(vals.__getitem__, miss.tolist()))
            base = len(self.values[s])
            voc.update(zip(new, range(base, base + len(new))))
            self.values[s].extend(new)
            codes[miss] = np.fromiter(
                map(voc.__getitem__, map(vals.__getitem__, miss.tolist())),
                dtype=np.int64,
                count=len(miss),
            )
        return codes

    def _pad_codes(self, s: int, sign: str, k: int) -> np.ndarray:
        """Codes of the padding tokens ``_B-1`` .. ``_B-k`` (or ``_B+``) in source ``s``; index 0
        unused."""
        return np.concatenate([[-1], self._codes(s, [f"_B{sign}{i}" for i in range(1, k + 1)])])

    def ids(self, sentences) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(tokens per sentence, attributes per token, attribute ids) of ``sentences``, each a list
        of token rows (lists of column values); what :func:`crfkit.features.encode.encode` makes of
        ``[templates.apply(s, pad) for s in sentences]`` (unknown attributes dropped).  Raises
        :class:`TooWide` for a batch with more distinct values than a template's key can pack (2**20
        for three macros, 2**15 for four): build the strings then.  Thread-safe (the vocabularies
        and memos are shared: one call at a time)."""
        with self._lock:
            return self._ids(sentences)

    def _ids(self, sentences, _retry: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        nT = self.n_templates
        lens = np.fromiter(map(len, sentences), dtype=np.int64, count=len(sentences))
        n_tok = int(lens.sum())
        if n_tok == 0 or nT == 0:
            return lens, np.zeros(n_tok, dtype=np.int64), np.zeros(0, dtype=np.int64)
        if self.size() > self.limit:
            self._reset()
        # every source's values, token after token
        vals = [[] for _ in self.sources]
        exts = [v.extend for v in vals]
        plan = [
            (col, f, exts[i])
            for i, ((col, _k, _r), f) in enumerate(zip(self.sources, self.transforms))
        ]
        maxcol = self.maxcol
        for cols in sentences:
            if not cols:
                continue
            t = list(zip(*cols))
            if len(t) <= maxcol:
                from .templates import column_error

                raise column_error(cols, self.templates.unigram, self.templates.name)
            for col, f, ext in plan:
                ext(t[col] if f is None else map(f, t[col]))
        codes = [self._codes(s, v) for s, v in enumerate(vals)]
        del vals
        # where each token sits in its sentence
        starts = np.cumsum(lens) - lens
        sent_of = np.repeat(np.arange(len(lens)), lens)
        pos = np.arange(n_tok) - starts[sent_of]
        nn = lens[sent_of]
        idx = np.arange(n_tok)
        windows = {}

        def window(s: int, r: int) -> np.ndarray:
            w = windows.get((s, r))
            if w is not None:
                return w
            c = codes[s]
            if r == 0:
                w = c
            else:
                w = c[np.clip(idx + r, 0, n_tok - 1)]
                j = pos + r
                if r < 0:
                    out = np.flatnonzero(j < 0)
                    w[out] = self._pad_codes(s, "-", -r)[-j[out]] if self.pad else -1
                else:
                    out = np.flatnonzero(j >= nn)
                    w[out] = self._pad_codes(s, "+", r)[(j - nn + 1)[out]] if self.pad else -1
            windows[(s, r)] = w
            return w

        ids = np.empty((n_tok, nT), dtype=np.int64)
        # per template with new keys: (j, the rows to fill, the new keys, how many inside)
        pending = []
        names = []  # the new keys' attribute strings, all templates': one lookup call
        for j, reads in enumerate(self.reads):
            if not reads:  # a constant template
                pending.append((j, None, None, 1))
                names.append(self.builders[j](()))
                continue
            ws = [window(s, r) for s, r in reads]
            bits = self.bits[j]
            if max(len(self.values[s]) for s, _ in reads) >= (1 << bits):
                # codes too wide to pack: start the vocabularies afresh, once; a batch that alone
                # has too many distinct values for this template goes the string way (the caller's)
                self._reset()
                if not _retry:
                    raise TooWide(
                        f"template {self.templates.unigram[j].text!r}: more than {1 << bits} "
                        "distinct values in one batch"
                    )
                return self._ids(sentences, _retry=False)
            key = ws[0].copy()
            outside = key < 0
            for w in ws[1:]:
                key <<= bits
                key |= np.maximum(w, 0)
                outside |= w < 0
            key[outside] = -1
            mk, mv = self.memos[j]
            at = np.searchsorted(mk, key)
            np.minimum(at, len(mk) - 1, out=at)
            hit = mk[at] == key if len(mk) else np.zeros(n_tok, dtype=bool)
            ids[:, j] = np.where(hit, mv[at] if len(mk) else -1, -1)
            if not hit.all():
                # keys met for the first time (outside the sentence: no string), looked up below
                fresh = np.sort(key[~hit])  # distinct, sorted (np.unique imports numpy.ma: 40 ms)
                fresh = fresh[np.concatenate(([True], fresh[1:] != fresh[:-1]))]
                inside = fresh[fresh >= 0]
                names += self._strings(inside, j, reads, bits)
                pending.append((j, (~hit, key), fresh, len(inside)))
        if pending:
            got = self.lookup(names) if names else np.zeros(0, dtype=np.int64)
            o = 0
            for j, where, fresh, n_in in pending:
                part = np.asarray(got[o : o + n_in], dtype=np.int64)
                o += n_in
                if where is None:  # a constant template
                    ids[:, j] = part[0]
                    continue
                miss, key = where
                vals = np.full(len(fresh), -1, dtype=np.int64)
                vals[len(fresh) - n_in :] = part  # fresh is sorted: the -1 (outside) key first
                mk, mv = self.memos[j]
                mk = np.concatenate([mk, fresh])
                mv = np.concatenate([mv, vals])
                order = np.argsort(mk, kind="stable")
                mk, mv = mk[order], mv[order]
                self.memos[j] = (mk, mv)
                ids[miss, j] = mv[np.searchsorted(mk, key[miss])]
        keep = ids >= 0
        counts = keep.sum(axis=1).astype(np.int64)
        return lens, counts, ids[keep]

    def _strings(self, keys: np.ndarray, j: int, reads, bits: int) -> list[str]:
        """The attribute strings of template ``j`` for the packed ``keys`` (all inside the
        sentence): each macro's codes unpacked in numpy, its values looked up as a list, the
        strings built by mapping the template's f-string over those lists."""
        mask = (1 << bits) - 1
        cols = []
        k = keys.copy()
        for s, _r in reversed(reads):
            cols.append(list(map(self.values[s].__getitem__, (k & mask).tolist())))
            k >>= bits
        cols.reverse()
        return list(map(self.spread[j], *cols))

    def _unpack(self, key: int, reads, bits: int) -> tuple:
        """The values packed into ``key`` (see :meth:`ids`), in the template's macro order."""
        mask = (1 << bits) - 1
        out = []
        for s, _r in reversed(reads):
            out.append(self.values[s][key & mask])
            key >>= bits
        return tuple(reversed(out))
