"""The encoded corpus: flat numpy arrays that the kernels read.

A corpus of ``n`` sequences and ``T`` tokens in all is

* ``seq_ptr`` (n+1, int64): tokens of sequence ``i`` are ``seq_ptr[i]:seq_ptr[i+1]``;
* ``tok_ptr`` (T+1, int64): attribute entries of token ``t`` are ``tok_ptr[t]:tok_ptr[t+1]``;
* ``attr`` (nnz, int32): attribute ids (rows of the model's attribute table);
* ``val`` (nnz, float64): attribute values (1.0 for the usual binary attributes);
* ``y`` (T, int32): gold label ids, ``-1`` where the label is unknown (tagging);
* ``dense`` (T x D, float64, optional): a real-valued vector per token
  (embeddings, pixels), for a model with ``n_dense = D`` dense dimensions;
* ``btok_ptr`` (T+1, int64), ``battr`` (int32), ``bval`` (float64), optional:
  a second CSR of *bigram-observation* attributes per token (ids into the
  model's ``battributes``).  Those of token ``t`` act on the transition into
  ``t`` (from label ``y[t-1]`` to ``y[t]``); on the first token of a sequence
  there is no transition, so they are ignored there.  ``None`` (all three):
  no bigram attributes;
* ``weight`` (n, float64, optional): the sample weight ``omega_i >= 0`` of each
  sequence (``None``: every weight 1).  Training minimises
  ``(1/W) sum_i omega_i nll_i + (l2/2)||w||^2 + l1||w||_1`` with
  ``W = sum_i omega_i`` (see :mod:`crfkit.objective`), so an integer weight is the
  same as repeating the sequence that many times; tagging and evaluation ignore it.

Attributes that the model does not know are simply absent, so a corpus is always
valid for the model it was encoded against.

Feature values (``val``, ``bval``, ``dense``) are finite and at most
:data:`MAX_FEATURE_VALUE` = 1e6 in absolute value: the readers (CRFsuite
attribute files, the estimator's feature dicts, (string, value) pairs, dense
matrices and dense columns) refuse anything larger with a ``DataError`` naming
the file and line, or the sequence and token.  Why 1e6: a value enters the
gradient linearly and the curvature (and every squared norm the optimizers
form) squared, so next to the usual indicator features (value 1) a value ``v``
makes the problem ``v**2`` times worse conditioned.  At 1e6 that is 1e12,
within four digits of float64's resolution (2.2e-16): measured on 122 CoNLL
sentences with one real-valued attribute on every token, L-BFGS fails its
line search after 7 iterations at 1e6 and at once from 1e10, and from about
1e154 the squares overflow outright (1e300 "converged" with every weight
zero).  Within the bound no product the trainer forms can overflow
(``v**2`` summed over 1e12 tokens is 1e24).  The bound is not a
recommendation: values far above 1 (measured: from about 1e2) already slow
every optimizer down badly, which training reports as a warning; scale such
values to about [-1, 1] (or take their logarithm).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# the largest absolute feature value crfkit accepts (see the module docstring)
MAX_FEATURE_VALUE = 1e6
# the largest one training takes without a warning about conditioning
WARN_FEATURE_VALUE = 1e2


_NO_VALUES = np.zeros(0)


@dataclass
class Corpus:
    """An encoded corpus: ``seq_ptr`` (sequence -> first token), ``tok_ptr`` (token -> first entry),
    ``attr`` and ``val`` (each entry's attribute id and value), ``y`` (label ids), optional dense
    block, bigram-observation entries and sample weights.

    ``val=None``: every value is 1 (CRFsuite's usual case: attribute strings without values).  The
    corpus then stores no values; :attr:`val` makes the array of ones on first use (and keeps it),
    and :attr:`raw_val` is empty: the full-batch objective (L-BFGS, OWL-QN) reads that and never
    makes the array (an 8-byte value per entry: 26-32 MB on the sklearn-crfsuite tutorial and
    CoNLL-2000).
    """

    seq_ptr: np.ndarray
    tok_ptr: np.ndarray
    attr: np.ndarray
    val: np.ndarray | None
    y: np.ndarray
    dense: np.ndarray | None = None
    btok_ptr: np.ndarray | None = None
    battr: np.ndarray | None = None
    bval: np.ndarray | None = None
    weight: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.seq_ptr = np.ascontiguousarray(self.seq_ptr, dtype=np.int64)
        self.tok_ptr = np.ascontiguousarray(self.tok_ptr, dtype=np.int64)
        self.attr = np.ascontiguousarray(self.attr, dtype=np.int32)
        if self.val is None:
            del self.val  # all ones, made on first use (__getattr__)
        else:
            self.val = np.ascontiguousarray(self.val, dtype=np.float64)
        self.y = np.ascontiguousarray(self.y, dtype=np.int32)
        if self.tok_ptr[-1] != len(self.attr) or (
            "val" in self.__dict__ and len(self.attr) != len(self.val)
        ):
            raise ValueError("corpus arrays are inconsistent (tok_ptr / attr / val)")
        if self.seq_ptr[-1] != len(self.y) or len(self.tok_ptr) != len(self.y) + 1:
            raise ValueError("corpus arrays are inconsistent (seq_ptr / tok_ptr / y)")
        if self.dense is not None:
            self.dense = np.ascontiguousarray(self.dense, dtype=np.float64)
            if self.dense.ndim != 2 or self.dense.shape[0] != len(self.y):
                raise ValueError(
                    f"dense block has shape {self.dense.shape}; expected ({len(self.y)}, D)"
                )
        given = [a is not None for a in (self.btok_ptr, self.battr, self.bval)]
        if any(given) and not all(given):
            raise ValueError("btok_ptr, battr and bval go together")
        if all(given):
            self.btok_ptr = np.ascontiguousarray(self.btok_ptr, dtype=np.int64)
            self.battr = np.ascontiguousarray(self.battr, dtype=np.int32)
            self.bval = np.ascontiguousarray(self.bval, dtype=np.float64)
            if (
                len(self.btok_ptr) != len(self.y) + 1
                or self.btok_ptr[-1] != len(self.battr)
                or len(self.battr) != len(self.bval)
            ):
                raise ValueError("corpus arrays are inconsistent (btok_ptr / battr / bval)")
        if self.weight is not None:
            self.weight = check_weights(self.weight, len(self.seq_ptr) - 1)

    def __getattr__(self, name):
        # only called when normal lookup fails: the values of a corpus of ones, not made yet
        d = self.__dict__
        if name == "val" and "tok_ptr" in d and "y" in d:
            v = d["val"] = np.ones(int(d["tok_ptr"][-1]))
            return v
        if name == "attr" and d.get("_attr_released"):
            raise RuntimeError(
                "this corpus's token attributes were let go after its gradient plan was built "
                "(Corpus.release_attributes, done by crfkit.train for the corpus it builds when "
                "nothing else reads them)"
            )
        raise AttributeError(name)

    def release_attributes(self) -> None:
        """Let go of :attr:`attr`, the token-major attribute ids (4 bytes an entry: 15 MB on
        CoNLL-2000, the largest array of an L-BFGS run).  The full-batch gradient reads the
        occurrence index of its plan (:mod:`crfkit.reduction`) instead, so a training run that owns
        its corpus lets the array go once the plan and the empirical counts are made
        (:meth:`crfkit.objective.Objective.release_tokens_after_plan`); reading :attr:`attr`
        afterwards raises RuntimeError."""
        self.__dict__.pop("attr", None)
        self.__dict__["_attr_released"] = True

    @property
    def attributes_released(self) -> bool:
        """Whether :meth:`release_attributes` let :attr:`attr` go."""
        return bool(self.__dict__.get("_attr_released"))

    @property
    def raw_val(self) -> np.ndarray:
        """The values as stored: :attr:`val`, or an empty array when every value is 1 and the array
        of ones was never made (the kernels that take it read empty as all ones)."""
        return self.__dict__.get("val", _NO_VALUES)

    @property
    def all_ones(self) -> bool:
        """Whether every value is 1 (without making the array of ones)."""
        v = self.__dict__.get("val")
        return v is None or bool(np.all(v == 1.0))

    @property
    def is_weighted(self) -> bool:
        """Whether the corpus carries sample weights other than all ones."""
        return self.weight is not None and not bool(np.all(self.weight == 1.0))

    @property
    def total_weight(self) -> float:
        """W = sum_i omega_i (the number of sequences when there are no weights)."""
        return float(self.weight.sum()) if self.weight is not None else float(self.n_sequences)

    @property
    def has_bigram(self) -> bool:
        """Whether any token carries a bigram-observation attribute."""
        return self.battr is not None and len(self.battr) > 0

    def bigram_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(btok_ptr, battr, bval), empty ones (no entry at any token) when there are none."""
        if self.battr is None:
            return np.zeros(len(self.y) + 1, np.int64), np.zeros(0, np.int32), np.zeros(0)
        return self.btok_ptr, self.battr, self.bval

    @property
    def n_dense(self) -> int:
        return 0 if self.dense is None else int(self.dense.shape[1])

    @property
    def n_sequences(self) -> int:
        return len(self.seq_ptr) - 1

    @property
    def n_tokens(self) -> int:
        return len(self.y)

    @property
    def max_length(self) -> int:
        return int(np.max(np.diff(self.seq_ptr))) if self.n_sequences else 0

    @property
    def has_labels(self) -> bool:
        return bool(len(self.y) == 0 or self.y.min() >= 0)

    def lengths(self) -> np.ndarray:
        return np.diff(self.seq_ptr)

    def subset(self, indices) -> Corpus:
        """A new corpus holding the given sequences, in the given order."""
        idx = np.asarray(indices, dtype=np.int64)
        starts, ends = self.seq_ptr[idx], self.seq_ptr[idx + 1]
        lens = ends - starts
        seq_ptr = np.zeros(len(idx) + 1, np.int64)
        np.cumsum(lens, out=seq_ptr[1:])
        toks = (
            np.concatenate([np.arange(s, e) for s, e in zip(starts, ends)])
            if len(idx)
            else np.zeros(0, np.int64)
        )
        a0, a1 = self.tok_ptr[toks], self.tok_ptr[toks + 1]
        tok_ptr = np.zeros(len(toks) + 1, np.int64)
        np.cumsum(a1 - a0, out=tok_ptr[1:])
        ents = (
            np.concatenate([np.arange(s, e) for s, e in zip(a0, a1)])
            if len(toks)
            else np.zeros(0, np.int64)
        )
        ents = ents.astype(np.int64)
        dense = None if self.dense is None else self.dense[toks]
        bigram = {}
        if self.battr is not None:
            b0, b1 = self.btok_ptr[toks], self.btok_ptr[toks + 1]
            btok_ptr = np.zeros(len(toks) + 1, np.int64)
            np.cumsum(b1 - b0, out=btok_ptr[1:])
            bents = (
                np.concatenate([np.arange(s, e) for s, e in zip(b0, b1)])
                if len(toks)
                else np.zeros(0, np.int64)
            ).astype(np.int64)
            bigram = dict(btok_ptr=btok_ptr, battr=self.battr[bents], bval=self.bval[bents])
        weight = None if self.weight is None else self.weight[idx]
        return Corpus(
            seq_ptr,
            tok_ptr,
            self.attr[ents],
            self.val[ents],
            self.y[toks],
            dense,
            **bigram,
            weight=weight,
        )

    def sequence_labels(self, i: int) -> np.ndarray:
        return self.y[self.seq_ptr[i] : self.seq_ptr[i + 1]]

    def nbytes(self) -> int:
        return (
            sum(a.nbytes for a in (self.seq_ptr, self.tok_ptr, self.attr, self.val, self.y))
            + (0 if self.dense is None else self.dense.nbytes)
            + (
                0
                if self.battr is None
                else self.btok_ptr.nbytes + self.battr.nbytes + self.bval.nbytes
            )
            + (0 if self.weight is None else self.weight.nbytes)
        )


def check_weights(weight, n: int, what: str = "sample weights") -> np.ndarray:
    """``weight`` as a float64 array of ``n`` finite, non-negative numbers, or a ValueError saying
    what is wrong (the readers name the file and line themselves; the estimator turns this into
    scikit-learn's messages)."""
    try:
        w = np.array(weight, dtype=np.float64, copy=True).reshape(-1) if np.ndim(weight) else None
    except (TypeError, ValueError) as e:
        raise ValueError(f"{what} must be numbers: {e}") from None
    if w is None:
        raise ValueError(f"{what} must be a sequence of {n} numbers, got a scalar")
    if np.ndim(weight) != 1:
        raise ValueError(f"{what} must be one-dimensional, got shape {np.shape(weight)}")
    if len(w) != n:
        raise ValueError(f"{len(w)} {what} for {n} sequences")
    bad = np.flatnonzero(~np.isfinite(w) | (w < 0))
    if len(bad):
        i = int(bad[0])
        raise ValueError(
            f"{what} must be finite and non-negative: sequence {i} has {w[i]!r}"
            + (f" ({len(bad)} such)" if len(bad) > 1 else "")
        )
    return w
