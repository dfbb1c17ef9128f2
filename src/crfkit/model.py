"""The trained model: :class:`CRFModel`, a feature space with its weights and metadata, and its
tagging API.

Viterbi labels, marginals, path and sequence probabilities, n-best lists and constrained decoding of
attribute sequences, feature dicts and token rows (the constrained and n-best paths are
:mod:`crfkit.decode`'s, small inputs are decoded in numpy by :mod:`crfkit.npdecode`), and the
introspection of the weights.  The layout of the weight vector and the string tables are
:mod:`crfkit.features.space`'s; the model file is :mod:`crfkit.modelfile`'s (``save`` and ``load``
here call it); token rows go through the templates by :mod:`crfkit.features.rows`.  The names of
those modules that used to live here (``FeatureSpace``, ``StringTable``, ``ALL_PAIRS``, ``MAGIC``,
``check_meta``...) are re-exported.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .corpus import Corpus
    from .decode import NBest
    from .explain import WeightsExplanation
    from .hints import Allowed, DenseBlocks, Forbid, LabelSequences, Rows, Sequences

from .errors import DataError
from .features.space import (
    ALL_PAIRS,
    AllPairs,
    FeatureSpace,
    StringTable,
    pack_strings,
    pair_density,
    pair_dtype,
    unpack_strings,
)
from .modelfile import (
    EXPANSION_ALLOWANCE,
    FORMAT_VERSION,
    MAGIC,
    MAX_COUNT,
    MAX_EXPANSION,
    MAX_HEADER_BYTES,
    MAX_LABELS,
    check_meta,
    load_model,
    save_model,
)

_NO_VALUES = np.zeros(0)  # "every value 1" (empty: nothing to read)


def _batch_ptrs(X, cnt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(seq_ptr, ent_ptr)`` of a batch: where each sequence of ``X`` starts among the tokens, and
    among the entries (``cnt`` entries per token); int64, C-contiguous."""
    ns = len(X)
    seq_ptr = np.zeros(ns + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, X), dtype=np.int64, count=ns), out=seq_ptr[1:])
    ent = np.zeros(len(cnt) + 1, dtype=np.int64)
    np.cumsum(cnt, out=ent[1:])
    return seq_ptr, ent[seq_ptr]


__all__ = [
    "ALL_PAIRS",
    "AllPairs",
    "CRFModel",
    "EXPANSION_ALLOWANCE",
    "FORMAT_VERSION",
    "FeatureSpace",
    "MAGIC",
    "MAX_COUNT",
    "MAX_EXPANSION",
    "MAX_HEADER_BYTES",
    "MAX_LABELS",
    "StringTable",
    "check_meta",
    "pack_strings",
    "pair_density",
    "pair_dtype",
    "unpack_strings",
]


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

    def encode(
        self,
        X: Sequences,
        Y: LabelSequences | None = None,
        name: str = "<data>",
        dense: DenseBlocks | None = None,
        B: Sequences | None = None,
    ) -> Corpus:
        """The :class:`crfkit.corpus.Corpus` of attribute sequences ``X`` (an already encoded
        corpus, e.g. :meth:`encode_rows`', is returned as it is)."""
        from .corpus import Corpus

        if isinstance(X, Corpus) and Y is None and dense is None and B is None:
            return X
        from .features.encode import encode

        return encode(X, self.space, Y, name=name, dense=dense, B=B)

    def encode_rows(self, sentences: Rows) -> Corpus | None:
        """The corpus of token rows (per sentence a list of tokens, each the list of its observation
        columns) through the model's templates, or None when the model's features need more than
        the unigram templates (bigram-observation templates, dense columns): then
        :func:`crfkit.features.rows.row_inputs` and :meth:`encode` do it.  The attribute strings of
        value combinations met before are not built again
        (:class:`crfkit.features.tplenc.TemplateIds`, kept with the model)."""
        tids = self.__dict__.get("_template_ids", False)
        if tids is False:
            from .features.rows import template_ids

            tids = self.__dict__["_template_ids"] = template_ids(
                self.meta, self.space, lookup=self._lookup()
            )
        if tids is None:
            return None
        from .features.rows import encode_template_rows

        return encode_template_rows(tids, sentences)

    def tag_dicts(self, X: Sequences, threads: int | None = None) -> list[list[str]] | None:
        """Viterbi labels of sequences of flat feature dicts (sklearn-crfsuite's input) by the fast
        path of :mod:`crfkit.features.dictenc` (no attribute strings built); ``None`` when ``X`` is
        not of that shape or the model has dense or bigram-observation features (then use
        :func:`to_attributes` and :meth:`tag`, which also say what is wrong with bad input).

        Once numba's serial kernels are loaded in this process
        (:func:`crfkit.npdecode.kernels_ready`), or for more than :func:`crfkit.npdecode.max_tokens`
        tokens, the attribute codes go straight to the fused emissions + Viterbi kernel
        (:meth:`_tag_codes`: no corpus built); a small batch in a process without them goes through
        :meth:`decode` (numpy).  The transition matrix is computed once per weight vector (a model
        whose ``weights`` array is changed in place keeps the old one: assign a new array
        instead)."""
        s = self.space
        if s.n_dense or s.n_bigram or not X:
            return None
        enc = self.__dict__.get("_dict_encoder")
        if enc is None:
            from .features.dictenc import DictEncoder

            enc = self.__dict__["_dict_encoder"] = DictEncoder(s, lookup=self._lookup())
        r = enc.codes(X)
        if r is None:
            return None
        from . import npdecode

        kern = npdecode.aot_batch(len(r[1]))
        if kern is not None:  # the kernel compiled ahead of time: no corpus, no numba
            return self._tag_codes(X, *r, kern=kern)
        if not npdecode.numpy_batch(len(r[1])):
            return self._tag_codes(X, *r, threads)
        corpus = enc.corpus(X, *r)
        big = len(r[1]) > npdecode.max_tokens()  # the process's first, numba not loaded
        ids, _ = self.viterbi(corpus, threads, engine="numpy" if big else "auto")
        return self._split(corpus, ids)

    def _tag_codes(self, X, a, cnt, v, threads=None, names=None, kern=None) -> list[list[str]]:
        """The labels of ``X`` from its attribute codes (:meth:`DictEncoder.codes`) by the fused
        emissions + Viterbi kernel: one serial call for the whole batch
        (:func:`crfkit.kernels.chain.tag_codes_seqs`), or, when ``threads`` asks for several and the
        batch has more than 64 sequences, the batch cut into chunks on the thread pool
        (:func:`crfkit.kernels.batch.tag_codes_all`).

        ``names``: ``(buf, starts)`` of :class:`crfkit.features.nametable.NameTable` (then
        ``a`` is an empty array of one code per entry): the codes are looked up in the same call,
        chunk by chunk, before each chunk is tagged (:mod:`crfkit.kernels.tag_names`).

        ``kern``: the kernels compiled ahead of time (:func:`crfkit.npdecode.aot_kernels`), which
        export the same serial functions: one call for the whole batch, and numba is not imported.
        """
        if kern is not None:
            return self._tag_codes_aot(X, a, cnt, v, names, kern)
        from .kernels.chain import tag_codes, tag_codes_seqs

        sp, w = self.space, self.weights
        trans = self._transitions()
        ns = len(X)
        labels = sp.labels
        if ns == 1 and names is None:  # predict_single: the one-sequence kernel, fewer arguments
            ids = np.empty(len(cnt), dtype=np.int32)
            tag_codes(a, cnt, v, sp.attr_ptr, sp.feat_label, w, trans, ids)
            return [list(map(labels.__getitem__, ids.tolist()))]
        seq_ptr, ent_ptr = _batch_ptrs(X, cnt)
        ids = np.empty(len(cnt), dtype=np.int32)
        ps = np.empty(ns)
        nc = 1
        if ns > 64:
            from .parallel import n_chunks

            nc = n_chunks(threads, ns, per_thread=4)
        model_args = (sp.attr_ptr, sp.feat_label, w, trans)
        if names is not None:
            from .kernels.tag_names import tag_names_all, tag_names_seqs

            buf, st = names
            slots, blob = self._names().table()
            head = (buf, st, slots, blob, cnt, v, seq_ptr, ent_ptr)
            if nc > 1:
                from .kernels.batch import chunk_bounds

                tag_names_all(*head, chunk_bounds(seq_ptr, nc), *model_args, a, ids, ps)
            else:
                tag_names_seqs(*head, 0, ns, *model_args, a, ids, ps)
        elif nc > 1:
            from .kernels.batch import chunk_bounds, tag_codes_all

            tag_codes_all(
                a, cnt, v, seq_ptr, ent_ptr, chunk_bounds(seq_ptr, nc), *model_args, ids, ps
            )
        else:
            tag_codes_seqs(a, cnt, v, seq_ptr, ent_ptr, 0, ns, *model_args, ids, ps)
        return self._label_lists(ids, seq_ptr)

    def _label_lists(self, ids: np.ndarray, seq_ptr: np.ndarray) -> list[list[str]]:
        """The label strings of label ids ``ids``, one list per sequence of ``seq_ptr``."""
        labels = self.space.labels
        lc = self.__dict__.get("_label_array")
        if lc is None or lc[0] is not labels or len(lc[1]) != len(labels):
            lc = self.__dict__["_label_array"] = (labels, np.array(labels, dtype=object))
        out = lc[1][ids].tolist()
        p = seq_ptr.tolist()
        return [out[p[i] : p[i + 1]] for i in range(len(p) - 1)]

    def _transitions(self) -> np.ndarray:
        """The dense L x L transition scores of the weights (the kernels' matrix, made without
        numba), kept until ``weights`` is another array."""
        w = self.weights
        tc = self.__dict__.get("_trans_cache")
        if tc is None or tc[0] is not w:
            from .npdecode import transition_matrix

            tc = self.__dict__["_trans_cache"] = (w, transition_matrix(self.space, w))
        return tc[1]

    def _aot_model_args(self) -> tuple:
        """``(attr_ptr, feat_label, weights, transitions)`` in the exact dtypes of the signatures
        of the kernels compiled ahead of time (:data:`crfkit.kernels.aot.EXPORTS`; no copy when
        they are already)."""
        sp = self.space
        return (
            np.ascontiguousarray(sp.attr_ptr, dtype=np.int64),
            np.ascontiguousarray(sp.feat_label, dtype=np.int32),
            np.ascontiguousarray(self.weights, dtype=np.float64),
            self._transitions(),
        )

    def _tag_codes_aot(self, X, a, cnt, v, names, kern) -> list[list[str]]:
        """:meth:`_tag_codes` by the kernels compiled ahead of time ``kern``: the same serial
        functions (:func:`crfkit.kernels.tag_names.tag_names_seqs`,
        :func:`crfkit.kernels.chain_viterbi.tag_codes_seqs`), one call for the batch."""
        ns = len(X)
        cnt = np.ascontiguousarray(cnt, dtype=np.int64)
        seq_ptr, ent_ptr = _batch_ptrs(X, cnt)
        ids = np.empty(len(cnt), dtype=np.int32)
        ps = np.empty(ns)
        a = np.ascontiguousarray(a, dtype=np.int64)
        v = np.ascontiguousarray(v, dtype=np.float64)
        model_args = self._aot_model_args()
        if names is not None:
            buf, st = names
            slots, blob = self._names().table(kern)
            kern.tag_names_seqs(
                buf, st, slots, blob, cnt, v, seq_ptr, ent_ptr, 0, ns, *model_args, a, ids, ps
            )
        else:
            kern.tag_codes_seqs(a, cnt, v, seq_ptr, ent_ptr, 0, ns, *model_args, ids, ps)
        return self._label_lists(ids, seq_ptr)

    def _tag_batch(self, X, b, threads, kern=None) -> list[list[str]]:
        """The labels of ``X`` from its :meth:`crfkit.features.nametable.NameTable.batch` ``b``
        (``kern``: see :meth:`_tag_codes`)."""
        cnt, buf, st = b
        codes = np.empty(len(st) - 1, dtype=np.int64)
        return self._tag_codes(X, codes, cnt, _NO_VALUES, threads, names=(buf, st), kern=kern)

    def _args(self):
        s = self.space
        return s.attr_ptr, s.feat_label, s.trans_index, self.weights, s.n_state

    def decode(
        self,
        corpus: Corpus,
        *,
        path: bool = True,
        marginals: bool = False,
        labels: np.ndarray | None = None,
        threads: int | None = None,
        sparse: bool | str = "auto",
        engine: str = "auto",
    ) -> dict:
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
        without numba's start-up and thread-pool costs), or, in a process that has decoded small
        inputs before and loaded them, by numba's serial per-sequence kernels; larger ones by the
        parallel numba kernels.  ``engine="numpy"`` takes the numpy path whatever the corpus' size
        (bounded in memory: :func:`crfkit.npdecode.by_groups`) and loads no numba kernel: what a
        one-shot process (``crfkit tag``) wants, where loading the kernels costs more than the
        decoding; models with bigram-observation features still go to the kernels.
        """
        if engine not in ("auto", "numpy"):
            raise ValueError(f"engine={engine!r}: expected 'auto' or 'numpy'")
        sp = self.space
        if corpus.n_dense != sp.n_dense:
            raise DataError(
                f"the model has {sp.n_dense} dense dimensions but the data {corpus.n_dense}"
            )
        if not (sp.n_bigram and corpus.has_bigram):
            from . import npdecode

            if engine == "numpy":
                return npdecode.decode(self, corpus, path=path, marginals=marginals, labels=labels)
            if path and not marginals and labels is None:
                # the path alone of a small corpus, or of any in a process without numba, by the
                # kernel compiled ahead of time when it is built (numba's parallel kernels only
                # pay off once they are loaded, for a large corpus)
                kern = npdecode.aot_batch(corpus.n_tokens)
                if kern is not None:
                    got = npdecode.aot_viterbi(self, corpus, kern)
                    if got is not None:
                        return {"ids": got[0], "path_score": got[1]}
            if corpus.n_tokens <= npdecode.max_tokens():
                if npdecode.kernels_ready():  # a process tagging again and again: numba, serial
                    return npdecode.decode_serial(
                        self, corpus, path=path, marginals=marginals, labels=labels
                    )
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

                use_sparse = marginals and (
                    sparse is True or (sparse == "auto" and self.pair_density(corpus) < 0.2)
                )
                args = (
                    corpus.seq_ptr,
                    corpus.tok_ptr,
                    corpus.attr,
                    corpus.val,
                    corpus.btok_ptr,
                    corpus.battr,
                    corpus.bval,
                    sp.attr_ptr,
                    sp.feat_label,
                    sp.trans_index,
                    sp.battr_ptr,
                    sp.pairs_for_full_rows,
                    self.weights,
                    sp.n_state,
                    sp.bigram_offset,
                    b,
                )
                if use_sparse:
                    from .kernels.sparse_fb import sparse_marginals_bigram

                    sparse_marginals_bigram(
                        *args, marg, logz, xs, np.zeros((len(b) - 1, 2), np.int64)
                    )
                    if path or want_labels:
                        decode_all_bigram(
                            *args, ids, ps, np.zeros((0, L)), np.zeros(0), lab, lsc, xs
                        )
                else:
                    decode_all_bigram(*args, ids, ps, marg, logz, lab, lsc, xs)
            else:
                full = (
                    sp.full_rows
                )  # none full: an empty array, decode_all then takes the plain scatter
                decode_all(
                    corpus.seq_ptr,
                    corpus.tok_ptr,
                    corpus.attr,
                    corpus.val,
                    *self._args(),
                    b,
                    ids,
                    ps,
                    marg,
                    logz,
                    lab,
                    lsc,
                    xs,
                    full if full.any() else full[:0],
                )
        from .npdecode import decode_result

        return decode_result(path, marginals, want_labels, ids, ps, marg, logz, lsc)

    def pair_density(self, corpus: Corpus) -> float:
        """Estimated share of the L x L label pairs with a non-zero score at a position (transitions
        plus the label-pair x observation features of the tokens' attributes): what the sparse
        recursions cost relative to the dense ones (:func:`pair_density`)."""
        return pair_density(self.space, corpus, self.weights)

    def viterbi(
        self, corpus: Corpus, threads: int | None = None, engine: str = "auto"
    ) -> tuple[np.ndarray, np.ndarray]:
        """Best label ids (n_tokens) and best path scores (n_sequences) of an encoded corpus
        (``engine``: see :meth:`decode`)."""
        r = self.decode(corpus, threads=threads, engine=engine)
        return r["ids"], r["path_score"]

    def marginals(
        self,
        corpus: Corpus,
        threads: int | None = None,
        *,
        allowed: Allowed | None = None,
        constraints: str | None = None,
        forbid: Forbid | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Node marginals (n_tokens x L) and log Z per sequence (under constraints when given: see
        :mod:`crfkit.decode`)."""
        if allowed is not None or constraints is not None or forbid:
            from .decode import marginals

            return marginals(
                self,
                corpus,
                allowed=allowed,
                constraints=constraints,
                forbid=forbid,
                threads=threads,
            )
        r = self.decode(corpus, path=False, marginals=True, threads=threads)
        return r["marginals"], r["logz"]

    def _split(self, corpus, ids: np.ndarray) -> list[list[str]]:
        labels = self.space.labels
        names = [labels[i] for i in ids.tolist()]
        p = corpus.seq_ptr.tolist()
        return [names[p[i] : p[i + 1]] for i in range(len(p) - 1)]

    def tag(
        self,
        X: Sequences,
        threads: int | None = None,
        dense: DenseBlocks | None = None,
        B: Sequences | None = None,
        *,
        allowed: Allowed | None = None,
        constraints: str | None = None,
        forbid: Forbid | None = None,
        method: str = "viterbi",
        engine: str = "auto",
    ) -> list[list[str]]:
        """Viterbi labels for a list of attribute sequences (``dense``: their token vectors, one
        (T x n_dense) array per sequence, for a model with dense features; ``B``: their
        bigram-observation attribute sequences, for a model with bigram-observation features).
        ``allowed`` (label sets per token), ``constraints`` (``"bio"``, ``"iobes"`` or a
        :class:`crfkit.decode.Constraints`), ``forbid`` (label pairs) and ``method="posterior"``
        (max-marginal labels): see :func:`crfkit.decode.tag`.  ``engine="numpy"``: plain Viterbi
        without numba (see :meth:`decode`)."""
        if allowed is not None or constraints is not None or forbid or method != "viterbi":
            from .decode import tag

            return tag(
                self,
                X,
                allowed=allowed,
                constraints=constraints,
                forbid=forbid,
                method=method,
                threads=threads,
                dense=dense,
                B=B,
            )
        if dense is None and B is None and engine == "auto":
            route = self._batch_route(X)
            if route == "aot":
                from .npdecode import aot_kernels

                out = self._tag_strings(X, threads, kern=aot_kernels())
                if out is not None:
                    return out
                engine = "numpy"  # (the path alone: by the same kernels, over the corpus)
            elif route == "numba":
                out = self._tag_strings(X, threads)
                if out is not None:
                    return out
            elif route == "numpy":
                engine = "numpy"  # the process's first large batch, numba not loaded yet
        corpus = self.encode(X, dense=dense, B=B)
        ids, _ = self.viterbi(corpus, threads, engine=engine)
        return self._split(corpus, ids)

    def _tag_strings(
        self, X: Sequences, threads: int | None = None, kern=None
    ) -> list[list[str]] | None:
        """Viterbi labels of a list of attribute-string sequences by the fast path: the attribute
        codes of the whole batch from one numba hash lookup (:class:`crfkit.features.nametable.
        NameTable`), then the fused emissions + Viterbi kernels (:meth:`_tag_codes`: no corpus
        built); ``None`` (the caller takes the generic path) when ``X`` is not a list of lists of
        strings or the model has dense or bigram-observation features.  ``kern``: the kernels
        compiled ahead of time (:func:`crfkit.npdecode.aot_kernels`) instead of numba's."""
        s = self.space
        if s.n_dense or s.n_bigram or not X:
            return None
        b = self._names().batch(X, kern)
        return None if b is None else self._tag_batch(X, b, threads, kern=kern)

    def _batch_route(self, X) -> str:
        """Where a batch ``X`` (a list of sequences) is tagged: ``"aot"`` (the kernels compiled
        ahead of time, when they are built: :func:`crfkit.npdecode.aot_batch`), ``"numba"`` (the
        kernels: once they are loaded in this process, or for more than
        :func:`crfkit.npdecode.max_tokens` tokens), ``"small"`` (a small batch in a process without
        them: :meth:`decode` takes numpy, which loads no kernel), or ``"numpy"`` (the process's
        first large batch while numba is not loaded at all: :func:`crfkit.npdecode.cold_batch`)."""
        if type(X) is not list:
            return "small"
        from . import npdecode

        try:
            n = sum(map(len, X))
        except TypeError:
            return "small"
        if npdecode.aot_batch(n) is not None:
            return "aot"
        if not npdecode.numpy_batch(n):
            return "numba"
        return "numpy" if n > npdecode.max_tokens() else "small"

    def _lookup(self):
        """The :class:`crfkit.features.nametable.AttributeLookup` of the model (names -> attribute
        ids through :meth:`_names`' table when the kernels compiled ahead of time are built)."""
        from .features.nametable import AttributeLookup

        lk = self.__dict__.get("_attr_lookup")
        tab = self._names()
        if lk is None or lk.table is not tab or lk.space is not self.space:
            lk = self.__dict__["_attr_lookup"] = AttributeLookup(self.space, tab)
        return lk

    def _names(self):
        """The :class:`crfkit.features.nametable.NameTable` of the model's attributes (its hash
        table built on first use, kept with the model)."""
        s = self.space
        tab = self.__dict__.get("_name_table")
        if tab is None or tab.attributes is not s.attributes:
            from .features.nametable import NameTable

            tab = self.__dict__["_name_table"] = NameTable(s.attributes)
        return tab

    def tag_with_probability(
        self,
        X: Sequences,
        threads: int | None = None,
        dense: DenseBlocks | None = None,
        B: Sequences | None = None,
        *,
        allowed: Allowed | None = None,
        constraints: str | None = None,
        forbid: Forbid | None = None,
        method: str = "viterbi",
    ) -> tuple[list[list[str]], np.ndarray, np.ndarray, Corpus]:
        """Viterbi labels, the probability of each best path, node marginals and the encoded corpus
        (constraints and ``method``: as :meth:`tag`)."""
        if allowed is not None or constraints is not None or forbid or method != "viterbi":
            from .decode import tag

            return tag(
                self,
                X,
                allowed=allowed,
                constraints=constraints,
                forbid=forbid,
                method=method,
                probability=True,
                threads=threads,
                dense=dense,
                B=B,
            )
        corpus = self.encode(X, dense=dense, B=B)
        r = self.decode(corpus, marginals=True, threads=threads)
        return (
            self._split(corpus, r["ids"]),
            np.exp(r["path_score"] - r["logz"]),
            r["marginals"],
            corpus,
        )

    def sequence_probability(
        self,
        X: Sequences,
        Y: LabelSequences | None,
        threads: int | None = None,
        dense: DenseBlocks | None = None,
        B: Sequences | None = None,
        *,
        allowed: Allowed | None = None,
        constraints: str | None = None,
        forbid: Forbid | None = None,
    ) -> np.ndarray:
        """p(y|x) of the given label sequences (under constraints: p(y | x, y allowed), 0 when y
        breaks them; see :mod:`crfkit.decode`)."""
        if allowed is not None or constraints is not None or forbid:
            from .decode import sequence_probability

            return sequence_probability(
                self,
                X,
                Y,
                allowed=allowed,
                constraints=constraints,
                forbid=forbid,
                threads=threads,
                dense=dense,
                B=B,
            )
        corpus = self.encode(X, Y, dense=dense, B=B)
        if (corpus.y < 0).any():
            bad = int(np.flatnonzero(corpus.y < 0)[0])
            lab = [lab for ys in Y for lab in ys][bad]
            raise DataError(
                f"label {lab!r} is not a label of this model ({len(self.labels)} labels)"
            )
        r = self.decode(corpus, path=False, marginals=True, labels=corpus.y, threads=threads)
        return np.exp(r["label_score"] - r["logz"])

    def tag_rows(self, sentences: Rows, threads: int | None = None, **kw) -> list[list[str]]:
        """Labels of token rows with a model trained from a column file: per sentence a list of
        tokens, each the list of its column values (``[["He", "PRP"], ["runs", "VBZ"]]``; a string
        is split on whitespace), run through the model's templates.  ``kw``: as :meth:`tag`
        (``allowed``, ``constraints``, ``method``...)."""
        from .features.rows import row_inputs

        X, B, dense = row_inputs(self.meta, sentences)
        return self.tag(X, threads, dense=dense, B=B, **kw) if X else []

    def nbest(
        self,
        X: Sequences,
        k: int,
        threads: int | None = None,
        dense: DenseBlocks | None = None,
        B: Sequences | None = None,
        *,
        allowed: Allowed | None = None,
        constraints: str | None = None,
        forbid: Forbid | None = None,
    ) -> list[NBest]:
        """The ``k`` most probable label sequences of each sequence, with their probabilities: one
        :class:`crfkit.decode.NBest` per sequence (exact; constraints as :meth:`tag`)."""
        from .decode import nbest

        return nbest(
            self,
            X,
            k,
            allowed=allowed,
            constraints=constraints,
            forbid=forbid,
            threads=threads,
            dense=dense,
            B=B,
        )

    # ---------------------------------------------------------- introspection
    @property
    def n_active(self) -> int:
        return int(np.count_nonzero(self.weights))

    def state_features(self) -> dict[tuple[str, str], float]:
        s = self.space
        fa = s.feature_attr()
        return {
            (s.attributes[a], s.labels[l]): float(w)
            for a, l, w in zip(
                fa.tolist(), s.feat_label.tolist(), self.weights[: s.n_state].tolist()
            )
        }

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
        """Weights of the bigram-observation features by (bigram attribute, previous label,
        label)."""
        s = self.space
        L = s.n_labels
        w = self.weights[s.bigram_offset : s.dense_offset]
        return {
            (s.battributes[b], s.labels[p // L], s.labels[p % L]): float(x)
            for b, p, x in zip(s.bfeature_attr().tolist(), s.bfeat_pair.tolist(), w.tolist())
        }

    def dense_features(self) -> dict[tuple[str, str], float]:
        """Weights of the dense block by (dimension name, label)."""
        s = self.space
        W = s.dense_weights(self.weights)
        return {
            (s.dense_names[j], s.labels[l]): float(W[j, l])
            for j in range(s.n_dense)
            for l in range(s.n_labels)
        }

    def top_features(self, k: int = 20) -> list[tuple[str, str, float]]:
        """The ``k`` state features of largest |weight|, as ``(attribute, label, weight)``
        (:func:`crfkit.explain.top_features`)."""
        from .explain import top_features

        return top_features(self.space, self.weights, k)

    def explain(
        self,
        top: int = 20,
        labels: Sequence[str] | None = None,
        *,
        attribute: str | None = None,
    ) -> WeightsExplanation:
        """The transitions and, per label, the ``top`` state features of largest positive and most
        negative weight (``labels``: only these; ``attribute``: only attributes matching this
        regular expression): a :class:`crfkit.explain.WeightsExplanation`, which renders in Jupyter
        and prints as text."""
        from .explain import explain

        return explain(self.space, self.weights, top=top, labels=labels, attribute=attribute)

    # --------------------------------------------------------------- file I/O
    def save(self, path: str | os.PathLike) -> int:
        """Write the model (non-zero weights only) atomically; returns the file size in bytes
        (:func:`crfkit.modelfile.save_model`)."""
        return save_model(path, self.space, self.weights, self.meta)

    @classmethod
    def load(cls, path: str | os.PathLike) -> CRFModel:
        """Read a model file written by :meth:`save`.

        A model file is untrusted input: whatever its content, this returns a
        valid model or raises :class:`~crfkit.errors.ModelError` naming the
        file, with memory bounded by the file size (the checks:
        :func:`crfkit.modelfile.load_model`).
        """
        return load_model(path, cls)
