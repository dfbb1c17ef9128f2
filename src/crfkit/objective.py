"""The training objective (one definition, everywhere)::

    f(w) = (1/n) * sum_i -log p(y_i | x_i, w) + (l2/2) * ||w||^2 + l1 * ||w||_1

with ``n`` the number of training sequences.  CRFsuite writes the same problem
as ``sum_i nll_i + c1 ||w||_1 + c2 ||w||^2`` and Wapiti as
``sum_i nll_i + rho1 ||w||_1 + (rho2/2) ||w||^2``; :func:`regularization`
converts, and :meth:`Objective.to_crfsuite` gives a value in CRFsuite's units
(``n * f``).

Sample weights (``Corpus.weight``, ``omega_i >= 0``, not all zero): the objective becomes

    f(w) = (1/W) * sum_i omega_i * -log p(y_i | x_i, w) + (l2/2) * ||w||^2 + l1 * ||w||_1

with ``W = sum_i omega_i``, so that an integer weight equals repeating the
sequence (the unweighted objective is ``omega = 1``, ``W = n``).  The
conversions put ``W`` in place of ``n`` (``l2 = 2 c2 / W``, ...; CRFsuite's
units are ``W * f``).  Internally every sequence carries the scale
``s_i = omega_i * n / W`` (mean 1), so ``f = (1/n) sum_i s_i nll_i + ...``: the
kernels multiply a sequence's loss and gradient by ``s_i`` and everything
normalised by ``n`` (effective passes, the stochastic methods' uniform
sampling) stays as it is.  A sequence of weight 0 contributes nothing.

The full-batch value and gradient run over sequences on all numba threads;
the per-example oracle (:meth:`Objective.oracle`) is what stochastic
optimizers call.

Bigram-observation features (position-dependent transition scores): when
the feature space has them and the corpus carries bigram attributes, the
full-batch value and gradient go through the ``*_bigram`` kernels of
:mod:`crfkit.kernels.batch`; otherwise the usual kernels run unchanged.  Their
per-example oracle is :meth:`Objective.oracle_bigram` (with
:meth:`Objective.apply_gradient_bigram`; SGD-L1 runs it inside its kernel); the
plain :meth:`Objective.oracle` refuses them (:class:`CrfkitError`).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np

from .corpus import Corpus
from .errors import CrfkitError, DataError
from .kernels import batch
from .kernels import oracle as _oracle
from .model import FeatureSpace
from .parallel import ThreadGovernor, n_chunks


@dataclass(frozen=True)
class Regularization:
    l1: float = 0.0
    l2: float = 0.0

    def crfsuite(self, n: float) -> tuple[float, float]:
        """(c1, c2) of CRFsuite's sum form for n training sequences (with sample weights: n = W)."""
        return self.l1 * n, self.l2 * n / 2.0

    def wapiti(self, n: float) -> tuple[float, float]:
        """(rho1, rho2) of Wapiti's sum form for n training sequences (with sample weights:
        n = W)."""
        return self.l1 * n, self.l2 * n

    def penalized(self, f: float, w: np.ndarray, wsq: float | None = None) -> float:
        """``f + (l2/2)||w||^2 + l1||w||_1`` (``wsq``: ||w||^2 when the caller has it already; it is
        then added even with l2 = 0, so that an overflowed ||w||^2 makes the objective NaN, which
        the divergence rule of :mod:`crfkit.train` catches)."""
        if wsq is not None:
            f += 0.5 * self.l2 * wsq
        elif self.l2:
            f += 0.5 * self.l2 * float(np.dot(w, w))
        if self.l1:
            f += self.l1 * l1_norm(w)
        return f


ABS_CHUNK = 1 << 16


def l1_norm(w: np.ndarray) -> float:
    """``sum |w|`` without a temporary of w's size (``np.abs(w)`` is one more vector of the
    candidate space at the peak of an L1 run's pass end): the absolute values of 64K-entry chunks,
    summed chunk by chunk (numpy's pairwise sum within a chunk)."""
    w = np.asarray(w).reshape(-1)
    if w.size <= ABS_CHUNK:
        return float(np.abs(w).sum())
    buf = np.empty(ABS_CHUNK, dtype=w.dtype)
    total = 0.0
    for a in range(0, w.size, ABS_CHUNK):
        part = w[a : a + ABS_CHUNK]
        b = buf[: part.size]
        np.abs(part, out=b)
        total += float(b.sum())
    return total


def abs_max(w: np.ndarray) -> float:
    """``max |w|`` (0 for an empty ``w``; NaN when ``w`` holds one) without ``np.abs(w)``'s
    temporary of w's size: ``max(w.max(), -w.min())``, the same value.  The temporary was one more
    vector of the problem's size at an L-BFGS evaluation's peak (the exp-path bound over the state
    weights)."""
    w = np.asarray(w).reshape(-1)
    if w.size == 0:
        return 0.0
    hi, lo = float(w.max()), float(w.min())
    return hi if hi != hi else max(hi, -lo)


def regularization(
    n: float, *, l1=None, l2=None, c1=None, c2=None, rho1=None, rho2=None
) -> Regularization:
    """Convert one of the three conventions to ours; at most one per term.

    ``n``: the number of training sequences, or with sample weights their total
    weight ``W = sum_i omega_i`` (``Corpus.total_weight``), which takes ``n``'s place.

    ``c2`` (CRFsuite): ``l2 = 2*c2/n``; ``rho2`` (Wapiti): ``l2 = rho2/n``;
    ``c1`` and ``rho1``: ``l1 = c1/n``.  With no L2 strength given: CRFsuite's
    default ``c2 = 1`` (also when an L1 strength is given, as in CRFsuite);
    pass ``l2=0`` for none.
    """
    if not n > 0:
        raise ValueError(
            "need at least one training sequence (with sample weights: a positive total weight)"
        )
    two = [x is not None for x in (l2, c2, rho2)]
    one = [x is not None for x in (l1, c1, rho1)]
    if sum(two) > 1 or sum(one) > 1:
        raise ValueError(
            "give the L2 (and L1) strength in one convention only: l2 | c2 | rho2, l1 | c1 | rho1"
        )
    if l2 is not None:
        L2 = float(l2)
    elif c2 is not None:
        L2 = 2.0 * float(c2) / n
    elif rho2 is not None:
        L2 = float(rho2) / n
    else:
        L2 = (
            2.0 / n
        )  # CRFsuite's default c2 = 1, kept when only an L1 strength is given (as CRFsuite does)
    if l1 is not None:
        L1 = float(l1)
    elif c1 is not None:
        L1 = float(c1) / n
    elif rho1 is not None:
        L1 = float(rho1) / n
    else:
        L1 = 0.0
    if L1 < 0 or L2 < 0 or not np.isfinite(L1) or not np.isfinite(L2):
        raise ValueError("regularization strengths must be finite and non-negative")
    return Regularization(l1=L1, l2=L2)


_NO_INDEX = np.empty(0, np.int64)
_NO_VALUES = np.empty(0)


class Objective:
    """f(w) and its gradient over an encoded, labelled corpus."""

    #: ``value_and_grad`` returns a new gradient array at every call (drivers may keep it without a
    #: copy)
    fresh_gradients = True

    def __init__(
        self,
        corpus: Corpus,
        space: FeatureSpace,
        reg: Regularization = Regularization(),
        threads: int | None = None,
        scales: np.ndarray | None = None,
        sparse_fb: bool | str = False,
    ):
        """``scales``: per-sequence scales ``s_i`` taken as they are instead of those of
        ``corpus.weight`` (for a sub-sample of a weighted objective, which keeps its parent's
        ``omega_i n / W``: zeros allowed).  ``sparse_fb``: with label-pair x observation features,
        compute the gradient with the sparse forward-backward recursions (Lavergne et al. 2010, 4.1;
        the same value and gradient to rounding, faster when most label-pair scores are zero, as
        after L1 training); ``"auto"``: at each evaluation, the sparse recursions when the estimated
        share of non-zero pair scores per position (:func:`crfkit.model.pair_density`) is under
        :attr:`AUTO_PAIR_DENSITY`.  :attr:`pair_counts` accumulates (positions, non-zero pair scores
        listed) over the sparse gradient evaluations."""
        if corpus.n_sequences == 0:
            raise DataError("no training sequences")
        if (corpus.y < 0).any() or (corpus.y >= space.n_labels).any():
            raise DataError("training corpus has tokens without a known label")
        if corpus.n_dense != space.n_dense:
            raise DataError(
                f"the corpus has {corpus.n_dense} dense dimensions but the feature space "
                f"{space.n_dense}"
            )
        self.corpus = corpus
        self.space = space
        self.reg = reg
        self._pm = None
        self.n = corpus.n_sequences
        # sample weights: W and the per-sequence scales s_i = omega_i n / W (empty: all 1)
        self.W = corpus.total_weight
        if scales is not None:
            self.sw = np.ascontiguousarray(scales, dtype=np.float64)
            if self.sw.shape != (self.n,) or not (
                np.isfinite(self.sw).all() and (self.sw >= 0).all()
            ):
                raise ValueError(f"scales: {self.n} finite non-negative numbers expected")
            self.W = float(self.n)
        elif corpus.is_weighted:
            if not self.W > 0:
                raise DataError("every sample weight is zero: nothing to train on")
            self.sw = np.ascontiguousarray(corpus.weight * (self.n / self.W), dtype=np.float64)
        else:
            self.W = float(self.n)
            self.sw = np.zeros(0)
        self.threads = threads
        self.bounds = batch.chunk_bounds(corpus.seq_ptr, n_chunks(threads, self.n))
        # no count asked for: the full-batch kernels run on the fastest count now (the plan is cut
        # for the most threads, and the sums do not depend on how many run it)
        self.governor = ThreadGovernor.for_threads(threads)
        self._plan = None  # the gradient's blocks and occurrence index (crfkit.reduction)
        self._emp = None
        self._emp_sparse = (
            None  # (empty, index, values), False (dense) or None (not decided): _emp_args
        )
        # exp-domain emissions by products are safe while every emission score
        # stays within exp(+-EXP_BOUND): |score| <= max|w| * (entries per token)
        self._binary = corpus.all_ones and space.n_dense == 0
        counts = np.diff(corpus.tok_ptr)
        self._max_entries = int(counts.max()) if len(counts) else 0
        # position-dependent transitions: a bigram block and bigram attributes in the data
        self._bigram = space.n_bigram > 0 and corpus.has_bigram
        if not (sparse_fb in (True, False) or sparse_fb == "auto"):
            raise ValueError(f"sparse_fb must be True, False or 'auto', got {sparse_fb!r}")
        self.sparse_fb = sparse_fb if sparse_fb == "auto" else bool(sparse_fb)
        self.n_sparse_evaluations = 0
        #: (positions, listed non-zero label-pair scores) summed over the sparse gradient
        #: evaluations: the share of zeros in M (Lavergne et al.'s Table 2) is
        #: 1 - listed / (positions * L^2)
        self.pair_counts = np.zeros(2, np.int64)
        self.n_full = 0  # full evaluations (value, or value + gradient)
        self.n_oracle = 0  # single-example oracle calls
        self._release_tokens = False  # release_tokens_after_plan

    def release_tokens_after_plan(self) -> bool:
        """Let the corpus's token-major attributes (:meth:`crfkit.corpus.Corpus.release_attributes`)
        go once the first gradient evaluation has made the plan and the empirical counts: from then
        on the gradient reads the plan's occurrence index alone, and the value (:meth:`nll_sum`)
        comes from the gradient's kernel.  Only for a corpus nothing else reads (``crfkit.train``'s
        own, trained by L-BFGS or OWL-QN); not with bigram-observation features, whose kernels read
        the tokens' attributes.  Returns whether the release is planned."""
        self._release_tokens = not self._bigram
        return self._release_tokens

    def pair_zero_share(self, counts: np.ndarray | None = None) -> float:
        """The share of zero entries of the label-pair score matrices M_t (positions t >= 1 of the
        sequences), averaged over positions and over the sparse gradient evaluations counted in
        ``counts`` (default :attr:`pair_counts`); NaN when none was counted."""
        pos, listed = self.pair_counts if counts is None else counts
        L = self.space.n_labels
        return float("nan") if pos == 0 else 1.0 - float(listed) / (float(pos) * L * L)

    @property
    def n_features(self) -> int:
        return self.space.n_features

    @property
    def weighted(self) -> bool:
        """Whether the corpus carries sample weights (other than all ones)."""
        return self.sw.shape[0] > 0

    def example_weight(self, i: int) -> float:
        """The scale s_i = omega_i n / W of sequence i (1 without sample weights)."""
        return float(self.sw[i]) if self.sw.shape[0] else 1.0

    @property
    def effective_passes(self) -> float:
        return self.n_full + self.n_oracle / self.n

    def _args(self):
        c, s = self.corpus, self.space
        return c.seq_ptr, c.tok_ptr, c.attr, c.val, c.y, s.attr_ptr, s.feat_label, s.trans_index

    def _batch_args(self):
        """:meth:`_args` for the full-batch kernels (:mod:`crfkit.kernels.batch`), which read an
        empty ``val`` as all ones: a corpus of ones never makes its array of values
        (:attr:`Corpus.raw_val`)."""
        c, s = self.corpus, self.space
        return c.seq_ptr, c.tok_ptr, c.attr, c.raw_val, c.y, s.attr_ptr, s.feat_label, s.trans_index

    def _bigram_corpus_args(self):
        """The corpus arrays the bigram full-batch kernels read first (``batch_bigram``): tokens,
        their attributes and values, and the bigram-observation attributes and values."""
        c = self.corpus
        return c.seq_ptr, c.tok_ptr, c.attr, c.raw_val, c.btok_ptr, c.battr, c.bval

    def _bigram_space_args(self):
        """The space arrays the bigram full-batch kernels read after the corpus's."""
        s = self.space
        return s.attr_ptr, s.feat_label, s.trans_index, s.battr_ptr, s.pairs_for_full_rows

    @property
    def full_rows(self) -> np.ndarray:
        """The space's :attr:`~crfkit.model.FeatureSpace.full_rows` (read by the per-example
        kernels)."""
        return self.space.full_rows

    EXP_BOUND = 300.0

    #: ``sparse_fb="auto"`` takes the sparse recursions below this estimated share of non-zero
    #: label-pair scores per position (NETtalk, 51 labels: the sparse training gradient costs about
    #: what the standard one does at 25-30% zeros, twice as much with none, 0.4x at 99.8%: README,
    #: NETtalk Table 2)
    AUTO_PAIR_DENSITY = 0.5
    #: the empirical counts are kept sparse from this many features on (when at most a quarter are
    #: non-zero)
    SPARSE_EMP_MIN = 1 << 20

    def _sparse_now(self, w: np.ndarray) -> bool:
        if self.sparse_fb == "auto":
            from .model import pair_density

            return pair_density(self.space, self.corpus, w) < self.AUTO_PAIR_DENSITY
        return self.sparse_fb

    @property
    def empirical_counts(self) -> np.ndarray:
        """sum_i s_i phi(x_i, y_i): the feature counts of the gold labelling (s_i: sample-weight
        scales)."""
        if self._emp is None:
            self._emp = np.empty(self.n_features)
            c, s = self.corpus, self.space
            batch.empirical_counts(
                c.seq_ptr,
                c.tok_ptr,
                c.attr,
                c.raw_val,
                c.y,
                s.attr_ptr,
                s.feat_label,
                s.trans_index,
                s.n_state,
                self._emp,
                self.sw,
            )
            if self._bigram:
                batch.bigram_empirical_counts(
                    c.seq_ptr,
                    c.btok_ptr,
                    c.battr,
                    c.bval,
                    c.y,
                    s.battr_ptr,
                    s.pairs_for_full_rows,
                    s.n_labels,
                    s.bigram_offset,
                    self._emp,
                    self.sw,
                )
            if s.n_dense:
                # sum over tokens of x_t for the gold label y_t: (onehot(y)^T X)^T, one BLAS-backed
                # product
                from scipy import sparse

                nt, L = c.n_tokens, s.n_labels
                tw = np.repeat(self.sw, np.diff(c.seq_ptr)) if self.weighted else np.ones(nt)
                onehot = sparse.csr_matrix((tw, (np.arange(nt), c.y)), shape=(nt, L))
                s.dense_weights(self._emp)[:] = np.asarray((onehot.T @ c.dense).T)
        return self._emp

    def _dense_scores(self, w: np.ndarray) -> np.ndarray:
        """Emission scores of the dense block, X @ W (n_tokens x L); no rows without one."""
        s = self.space
        if not s.n_dense:
            return np.zeros((0, s.n_labels))
        return self.corpus.dense @ s.dense_weights(w)

    def nll_sum_grad(
        self, w: np.ndarray, g_out: np.ndarray | None = None
    ) -> tuple[float, np.ndarray]:
        """sum_i -s_i log p(y_i|x_i, w) and its gradient (unnormalised, no regulariser; s_i: the
        sample-weight scales omega_i n / W, all 1 without weights)."""
        v, _, g = self._loss_grad(w, g_out, 1.0, 0.0)
        return v, g

    def _plan_args(self) -> tuple:
        """The arrays of the gradient's plan (:func:`crfkit.reduction.grad_plan`), built on first
        use."""
        if self._plan is None:
            from . import reduction

            self._plan = reduction.grad_plan(
                self.corpus,
                self.space,
                len(self.bounds) - 1,
                budget=reduction.STORE_BUDGET,
                edge_budget=reduction.EDGE_BUDGET,
                bigram=self._bigram,
            )
            self._row, self._dense_attr = batch.dense_rows(self.space.attr_ptr, self.space.n_labels)
            p = self._plan
            args = (p.blocks, p.chunks) + p.state.arrays()
            if p.bigram is not None:
                args += p.bigram.arrays()
            self._plan_tuple = args
        return self._plan_tuple

    def _emp_args(self):
        """(dense, index, values) of the empirical counts for the full-batch kernels: in a candidate
        space of at least :attr:`SPARSE_EMP_MIN` features where at most a quarter of them have a
        non-zero count (every label pair with every observation: most never fire with their gold
        labels), the non-zero ones only (the dense vector is freed; :attr:`empirical_counts` makes
        it again on request), else the dense vector."""
        if self._emp_sparse is None:
            if (
                self._bigram
                and not self.space.n_dense
                and self._emp is None
                and self.n_features >= self.SPARSE_EMP_MIN
            ):
                # the label-pair part a chunk of attributes at a time: no candidate-space vector,
                # not even for a moment (989 MB at NETtalk 5-grm)
                self._emp_sparse = self._sparse_empirical_counts()
            else:
                emp = self.empirical_counts
                nz = np.flatnonzero(emp)
                if emp.shape[0] >= self.SPARSE_EMP_MIN and nz.shape[0] <= emp.shape[0] // 4:
                    self._emp_sparse = (np.empty(0), nz.astype(np.int64), emp[nz])
                    self._emp = None
                else:
                    self._emp_sparse = False
        if self._emp_sparse is False:
            return self.empirical_counts, _NO_INDEX, _NO_VALUES
        return self._emp_sparse

    # features per chunk of :meth:`_sparse_empirical_counts` (its buffer: 32 MB)
    EMP_CHUNK = 1 << 22

    def _sparse_empirical_counts(self):
        """(empty, index, values) of the non-zero empirical counts, the label-pair part made a chunk
        of bigram attributes at a time (:func:`crfkit.kernels.batch.bigram_empirical_counts_range`:
        the same additions in the same order as the dense vector's, so the same values); False where
        more than a quarter of the features have a non-zero count (the dense vector is then the
        smaller)."""
        c, s = self.corpus, self.space
        boff = s.bigram_offset
        head = np.empty(boff)
        batch.empirical_counts(
            c.seq_ptr,
            c.tok_ptr,
            c.attr,
            c.raw_val,
            c.y,
            s.attr_ptr,
            s.feat_label,
            s.trans_index,
            s.n_state,
            head,
            self.sw,
        )
        nz = np.flatnonzero(head)
        idx, val = [nz], [head[nz]]
        ptr = s.battr_ptr
        nb = len(ptr) - 1
        buf = np.empty(min(self.EMP_CHUNK, s.n_bigram))
        b0 = 0
        while b0 < nb:
            b1 = max(int(np.searchsorted(ptr, ptr[b0] + self.EMP_CHUNK, side="right")) - 1, b0 + 1)
            b1 = min(b1, nb)
            k0, k1 = int(ptr[b0]), int(ptr[b1])
            out = buf[: k1 - k0] if k1 - k0 <= buf.shape[0] else np.empty(k1 - k0)
            out[:] = 0.0
            batch.bigram_empirical_counts_range(
                c.seq_ptr,
                c.btok_ptr,
                c.battr,
                c.bval,
                c.y,
                ptr,
                s.pairs_for_full_rows,
                s.n_labels,
                b0,
                b1,
                out,
                self.sw,
            )
            nz = np.flatnonzero(out)
            idx.append(boff + k0 + nz)
            val.append(out[nz])
            b0 = b1
        idx = np.concatenate(idx).astype(np.int64)
        if idx.shape[0] > self.n_features // 4:
            return False
        return np.empty(0), idx, np.concatenate(val)

    def _kernel_loss_grad(self, w, g, emp, exp_ok, gscale, l2, xs, pm):
        """One call of the full-batch kernel: (sum of -s_i log p(y_i|x_i), ||w||^2), ``g`` written.
        ``emp``: the empirical counts to subtract, or None for the objective's own
        (:meth:`_emp_args`)."""
        emp, emp_idx, emp_val = self._emp_args() if emp is None else (emp, _NO_INDEX, _NO_VALUES)
        plan = self._plan_args()
        if (
            self._release_tokens
            and self._emp_sparse is False
            and not self.corpus.attributes_released
        ):
            self.corpus.release_attributes()
        s = self.space
        if self._bigram:
            counts = np.zeros((plan[1].shape[1] - 1, 2), np.int64)
            sparse = bool(self.sparse_fb) and self._sparse_now(w)
            with self._threads("grad_sparse" if sparse else "grad"):
                out = batch.loss_grad_bigram(
                    *self._bigram_corpus_args(),
                    *self._bigram_space_args(),
                    w,
                    s.n_state,
                    s.bigram_offset,
                    plan,
                    g,
                    emp,
                    emp_idx,
                    emp_val,
                    gscale,
                    l2,
                    self._row,
                    self._dense_attr,
                    xs,
                    pm,
                    self.sw,
                    sparse,
                    counts,
                )
            self.pair_counts += counts.sum(axis=0)
            self.n_sparse_evaluations += sparse
            return out
        with self._threads("grad"):
            # the tokens' attributes come from the plan (the corpus may have let its copy go)
            return batch.loss_grad(
                self.corpus.seq_ptr,
                s.attr_ptr,
                s.feat_label,
                s.trans_index,
                w,
                s.n_state,
                plan,
                g,
                emp,
                emp_idx,
                emp_val,
                exp_ok,
                gscale,
                l2,
                self._dense_attr,
                xs,
                pm,
                self.sw,
            )

    def _threads(self, kind: str):
        """The block runs a full-batch kernel: on the governor's count (:attr:`governor`), or on the
        count set when none governs."""
        return self.governor.run(kind) if self.governor is not None else contextlib.nullcontext()

    def _loss_grad(self, w, g_out, gscale, l2, count: bool = True):
        g = np.empty(self.n_features) if g_out is None else g_out
        w = np.ascontiguousarray(w, dtype=np.float64)
        ns = self.space.n_state
        exp_ok = self._binary and ns > 0 and abs_max(w[:ns]) * self._max_entries <= self.EXP_BOUND
        xs = self._dense_scores(w)
        if self.space.n_dense and self._pm is None:
            self._pm = np.empty((self.corpus.n_tokens, self.space.n_labels))
        pm = self._pm if self.space.n_dense else np.zeros((0, self.space.n_labels))
        v, wsq = self._kernel_loss_grad(w, g, None, exp_ok, gscale, l2, xs, pm)
        if self.space.n_dense:
            # expected counts of the dense block: sum_t x_t p(y_t = l | x), as one product X^T pm
            self.space.dense_weights(g)[:] += gscale * (self.corpus.dense.T @ pm)
        self.n_full += bool(count)
        return float(v), float(wsq), g

    def nll_sum(self, w: np.ndarray, count: bool = True) -> float:
        """sum_i -s_i log p(y_i|x_i, w) (forward passes only); ``count=False``: monitoring, not an
        effective pass."""
        w = np.ascontiguousarray(w, dtype=np.float64)
        self.n_full += bool(count)
        if self.corpus.attributes_released:
            # the forward-only kernel reads the tokens' attributes: the gradient's kernel, which
            # reads the plan, gives the value (its gradient dropped)
            return self._loss_grad(w, None, 1.0, 0.0, count=False)[0]
        with self._threads("loss"):
            return self._nll_sum(w)

    def _nll_sum(self, w: np.ndarray) -> float:
        if self._bigram:
            c, s = self.corpus, self.space
            return float(
                batch.loss_only_bigram(
                    *self._bigram_corpus_args(),
                    c.y,
                    *self._bigram_space_args(),
                    w,
                    s.n_state,
                    s.bigram_offset,
                    self.bounds,
                    self._dense_scores(w),
                    self.sw,
                )
            )
        return float(
            batch.loss_only(
                *self._batch_args(),
                w,
                self.space.n_state,
                self.bounds,
                self._dense_scores(w),
                self.sw,
            )
        )

    def value_and_grad(self, w: np.ndarray) -> tuple[float, np.ndarray]:
        """f(w) and the gradient of its smooth part (the L1 term is left to OWL-QN and friends)."""
        v, wsq, g = self._loss_grad(w, None, 1.0 / self.n, self.reg.l2)
        return self.reg.penalized(v / self.n, w, wsq), g

    def value_and_grad_into(self, w: np.ndarray, out: np.ndarray) -> float:
        """:meth:`value_and_grad` with the gradient written into ``out`` (float64, n_features): for
        drivers that reuse their buffers (OWL-QN) instead of allocating a vector of the problem's
        size per call."""
        v, wsq, _ = self._loss_grad(w, out, 1.0 / self.n, self.reg.l2)
        return self.reg.penalized(v / self.n, w, wsq)

    def value(self, w: np.ndarray, count: bool = True) -> float:
        """f(w); ``count=False`` for monitoring (traces, stopping checks) that is not part of the
        optimizer's work."""
        return self.reg.penalized(self.nll_sum(w, count) / self.n, w)

    def to_crfsuite(self, f: float) -> float:
        """The objective in CRFsuite's units: sum_i omega_i nll_i + c1|w|_1 + c2|w|^2 = W * f (W = n
        unweighted)."""
        return f * self.W

    # ------------------------------------------------------ per-example oracle
    def _no_bigram(self, what: str) -> None:
        if self.space.n_bigram:
            raise CrfkitError(
                f"{what} does not support bigram-observation features yet "
                f"({self.space.n_bigram} in this model): train with lbfgs, owlqn or sgd-l1"
            )

    def oracle(
        self,
        i: int,
        v: np.ndarray,
        beta: float = 1.0,
        node: np.ndarray | None = None,
        edge: np.ndarray | None = None,
    ):
        """Loss of sequence i at w = beta*v, its node marginals (T x L) and summed edge marginals
        (L x L).

        With sample weights the loss is the scaled ``s_i * nll_i`` (the marginals are the model's,
        unscaled; :meth:`apply_gradient` applies the scale)."""
        self._no_bigram("the per-example oracle")
        L = self.space.n_labels
        T = int(self.corpus.seq_ptr[i + 1] - self.corpus.seq_ptr[i])
        if node is None or node.shape[0] < T:
            node = np.empty((T, L))
        if edge is None:
            edge = np.empty((L, L))
        if self.space.n_dense:
            t0 = int(self.corpus.seq_ptr[i])
            xs = float(beta) * (self.corpus.dense[t0 : t0 + T] @ self.space.dense_weights(v))
            loss = _oracle.sequence_oracle(
                *self._args(),
                v,
                float(beta),
                self.space.n_state,
                int(i),
                node,
                edge,
                self.full_rows,
                xs,
            )
        else:
            loss = _oracle.sequence_oracle(
                *self._args(),
                v,
                float(beta),
                self.space.n_state,
                int(i),
                node,
                edge,
                self.full_rows,
            )
        self.n_oracle += 1
        return float(loss) * self.example_weight(i), node[:T], edge

    def apply_gradient(
        self, i: int, node: np.ndarray, edge: np.ndarray, coef: float, v: np.ndarray
    ) -> None:
        """v += coef * s_i * grad of -log p(y_i|x_i), sparsely (see kernels.oracle.apply_gradient);
        s_i is the sample-weight scale of sequence i (1 without weights).

        The dense block (when there is one) is touched by every sequence:
        ``V += coef * X_i^T (node - onehot(y_i))``.
        """
        self._no_bigram("the per-example gradient")
        coef = float(coef) * self.example_weight(i)
        c, s = self.corpus, self.space
        _oracle.apply_gradient(
            c.seq_ptr,
            c.tok_ptr,
            c.attr,
            c.val,
            c.y,
            s.attr_ptr,
            s.feat_label,
            s.trans_index,
            s.n_state,
            int(i),
            node,
            edge,
            float(coef),
            v,
            self.full_rows,
        )
        if s.n_dense:
            t0, t1 = int(c.seq_ptr[i]), int(c.seq_ptr[i + 1])
            r = np.array(node[: t1 - t0], dtype=np.float64, copy=True)
            r[np.arange(t1 - t0), c.y[t0:t1]] -= 1.0
            s.dense_weights(v)[:] += coef * (c.dense[t0:t1].T @ r)

    def _bigram_args(self, full_rows: bool = True):
        """The arrays of the oracle's bigram kernels; ``full_rows``: the kernel is given
        ``space.bigram_full_rows`` and reads no pair of a full row (then an implicit ``bfeat_pair``
        is not made, :attr:`crfkit.model.FeatureSpace.pairs_for_full_rows`)."""
        c, s = self.corpus, self.space
        return (
            (c.seq_ptr, c.tok_ptr, c.attr, c.val, c.y, s.attr_ptr, s.feat_label, s.trans_index)
            + c.bigram_arrays()
            + (s.battr_ptr, s.pairs_for_full_rows if full_rows else s.bfeat_pair, s.bigram_offset)
        )

    def oracle_bigram(self, i: int, v: np.ndarray, beta: float = 1.0):
        """The per-example oracle of a feature space with bigram-observation features: (loss of
        sequence i at w = beta*v (times s_i with sample weights), node marginals (T x L),
        per-position edge marginals (T x L x L: row t for the pair (t-1, t), row 0 zero), their sum
        (L x L)); see :func:`crfkit.kernels.oracle.sequence_oracle_bigram`.  Dense features are not
        supported here."""
        if self.space.n_dense:
            raise CrfkitError("the bigram per-example oracle does not support dense features yet")
        L = self.space.n_labels
        T = int(self.corpus.seq_ptr[i + 1] - self.corpus.seq_ptr[i])
        node = np.empty((T, L))
        edges = np.zeros((max(T, 1), L, L))
        edge = np.empty((L, L))
        loss = _oracle.sequence_oracle_bigram(
            *self._bigram_args(),
            np.ascontiguousarray(v, dtype=np.float64),
            float(beta),
            self.space.n_state,
            int(i),
            node,
            edges,
            edge,
            self.full_rows,
            self.space.bigram_full_rows,
        )
        self.n_oracle += 1
        return float(loss) * self.example_weight(i), node, edges[:T], edge

    def value_bigram(self, w: np.ndarray) -> float:
        """f(w) (:meth:`value`, not counted as an effective pass) for a feature space with
        bigram-observation features through the per-example oracle's scores
        (:func:`crfkit.kernels.oracle.loss_sum_bigram`: the same value to rounding, several times
        cheaper with every label pair of every observation); SGD-L1 monitors its passes with it."""
        w = np.ascontiguousarray(w, dtype=np.float64)
        nll = _oracle.loss_sum_bigram(
            *self._bigram_args(),
            w,
            1.0,
            self.space.n_state,
            self.bounds,
            self.full_rows,
            self.sw,
            self.space.bigram_full_rows,
        )
        return self.reg.penalized(float(nll) / self.n, w)

    def apply_gradient_bigram(
        self,
        i: int,
        node: np.ndarray,
        edges: np.ndarray,
        edge: np.ndarray,
        coef: float,
        v: np.ndarray,
    ) -> None:
        """v += coef * s_i * grad of -log p(y_i|x_i) from the outputs of :meth:`oracle_bigram`: the
        state, transition and bigram-observation features of sequence i only."""
        L = self.space.n_labels
        eflat = np.ascontiguousarray(edges, dtype=np.float64).reshape(len(edges), L * L)
        _oracle.apply_gradient_bigram(
            *self._bigram_args(full_rows=False),
            self.space.n_state,
            int(i),
            np.ascontiguousarray(node, dtype=np.float64),
            eflat,
            np.ascontiguousarray(edge, dtype=np.float64),
            float(coef) * self.example_weight(i),
            v,
            self.full_rows,
        )
