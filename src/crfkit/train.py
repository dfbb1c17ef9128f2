"""The training driver: feature space + corpus, objective, optimizer, stopping,
progress lines, dev evaluation, trace, model.

``train(X, Y, ...)`` takes attribute sequences (see ``crfkit.features.encode``);
``train_corpus`` takes an already encoded corpus.  The CLI and the estimator are
thin shells over these.
"""
from __future__ import annotations

import json
import math
import os
import signal
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from .errors import ParameterError, TrainingDiverged
from .corpus import WARN_FEATURE_VALUE, Corpus
from .features.encode import build
from .model import CRFModel, FeatureSpace
from .objective import Objective, Regularization, l1_norm, regularization
from .parallel import set_threads, single_blas
from . import memtrim

from .optim import stochastic as _stochastic

BATCH_ALGORITHMS = ("lbfgs", "owlqn")
# optimizers that do not honour sample weights (yet): they refuse a weighted corpus
NO_SAMPLE_WEIGHTS = ("sag", "sag-nus", "sag-nus*", "saga", "saga-nus", "sdca", "oeg", "arow")
# the stochastic (per-example) optimizers present in this installation; see crfkit.optim.stochastic
ALGORITHMS = BATCH_ALGORITHMS + _stochastic.available()
# keys an optimizer's per-epoch info may add to the trace record
EXTRA_TRACE_KEYS = ("state_bytes", "naive_state_bytes", "lipschitz", "duality_gap", "dual", "ls_evals_per_step",
                    "examples_seen", "steps",
                    "monitor_s")


@dataclass
class TrainResult:
    model: CRFModel
    status: str
    message: str
    iterations: int
    effective_passes: float
    seconds: float
    objective: float             # f(w) in crfkit's normalisation (per sequence)
    objective_crfsuite: float    # n * f(w): CRFsuite's units
    reg: Regularization
    history: list = field(default_factory=list)

    @property
    def converged(self) -> bool:
        return self.status in ("converged", "delta", "gtol", "stop_value", "dev_stop")


class _Trace:
    """One JSON line per iteration, flushed as it is written so an interrupted run keeps its lines.
    A trace that cannot be opened fails the run before training; one that fails later (a full disk)
    is a warning (``warn``) and the run goes on without it."""

    def __init__(self, path: str | os.PathLike | None, previous: Sequence[dict] = (),
                 warn: Callable[[str], None] | None = None):
        self.f = None
        self.path = os.fspath(path) if path else None
        self.warn = warn
        if path:
            d = os.path.dirname(os.path.abspath(path))
            os.makedirs(d, exist_ok=True)
            self.f = open(path, "w", encoding="utf-8")
            for rec in previous:     # a resumed run's trace holds the whole run
                self.write(rec)

    def write(self, rec: dict) -> None:
        if self.f:
            try:
                self.f.write(json.dumps(rec) + "\n")
                self.f.flush()
            except OSError as e:
                if self.warn is None:
                    raise
                self.warn(f"the trace {self.path} could not be written at iteration {rec.get('iteration')} "
                          f"({e.strerror or e}); training goes on without it")
                self.close()
                self.f = None

    def close(self) -> None:
        if self.f:
            try:
                self.f.close()
            except OSError:
                pass


def dev_scores(model: CRFModel, dev: Corpus, dev_labels: Sequence[Sequence[str]] | None,
               prefix: str = "dev") -> dict:
    """``{PREFIX_accuracy}`` (token accuracy in %, Viterbi labels against ``dev.y``) and, when
    ``dev_labels`` (the gold labels as strings) are given, ``{PREFIX_f1}`` (conlleval chunk F1).
    When every gold label is one of the model's (``dev.y >= 0``) the F1 is computed on the label ids
    (:func:`crfkit.metrics.conlleval_ids`, the same figure without a Python loop over tokens)."""
    from .metrics import conlleval, conlleval_ids
    ids, _ = model.viterbi(dev)
    gold = np.asarray(dev.y)
    out = {f"{prefix}_accuracy": float(np.mean(ids == gold)) * 100.0 if len(gold) else 0.0}
    if dev_labels is not None:
        if len(gold) == 0 or gold.min() >= 0:
            rep = conlleval_ids(gold, ids, dev.seq_ptr, model.space.labels)
        else:
            rep = conlleval(dev_labels, model._split(dev, ids))
        out[f"{prefix}_f1"] = rep.f1
    return out


def train_score_labels(space: FeatureSpace, corpus: Corpus) -> list[list[str]] | None:
    """The gold labels of the training corpus as strings, for the chunk F1 of ``train_scores``:
    None when the labels are not chunk tags (:func:`crfkit.metrics.label_scheme`), so that only
    the token accuracy is recorded."""
    from .metrics import label_scheme
    if label_scheme(space.labels) is None:
        return None
    return CRFModel(space, np.zeros(space.n_features))._split(corpus, np.asarray(corpus.y))


def init_weights(init, space: FeatureSpace) -> np.ndarray:
    """Starting weights for ``space`` from ``init``: a weight vector of the right length, or a
    :class:`CRFModel` whose weights are mapped by name (state features by (attribute, label),
    transitions by (label, label), bigram-observation features by (bigram attribute, label,
    label), dense weights by (dimension name, label)); features the old model lacks start at 0."""
    if not isinstance(init, CRFModel):
        w = np.array(init, dtype=np.float64, copy=True)
        if w.shape != (space.n_features,):
            raise ParameterError(f"init has shape {w.shape}; the feature space has {space.n_features} features")
        return w
    old = init.space
    w = np.zeros(space.n_features)
    L = space.n_labels
    lab = np.array([space.label_index.get(x, -1) for x in old.labels], dtype=np.int64)
    att = np.array([space.attr_index.get(a, -1) for a in old.attributes], dtype=np.int64)
    # state features: key attr * L + label in both spaces
    new_keys = space.feature_attr() * L + space.feat_label.astype(np.int64)
    oa = att[old.feature_attr()] if old.n_state else np.zeros(0, np.int64)
    ol = lab[old.feat_label] if old.n_state else np.zeros(0, np.int64)
    live = (oa >= 0) & (ol >= 0)
    old_keys = oa[live] * L + ol[live]
    if len(new_keys) and len(old_keys):
        order = np.argsort(new_keys, kind="stable")
        pos = np.searchsorted(new_keys[order], old_keys)
        pos = np.minimum(pos, len(order) - 1)
        hit = new_keys[order][pos] == old_keys
        w[order[pos[hit]]] = init.weights[:old.n_state][live][hit]
    if old.n_dense and space.n_dense:
        # dense block: by (dimension name, label)
        dim = {d: j for j, d in enumerate(space.dense_names)}
        Wn, Wo = space.dense_weights(w), old.dense_weights(init.weights)
        for jo, d in enumerate(old.dense_names):
            jn = dim.get(d)
            if jn is not None:
                for lo in range(old.n_labels):
                    if lab[lo] >= 0:
                        Wn[jn, lab[lo]] = Wo[jo, lo]
    ns = space.n_state
    for i in range(old.n_labels):
        for j in range(old.n_labels):
            k = old.trans_index[i, j]
            if k >= 0 and lab[i] >= 0 and lab[j] >= 0:
                kn = space.trans_index[lab[i], lab[j]]
                if kn >= 0:
                    w[ns + kn] = init.weights[old.n_state + k]
    if old.n_bigram and space.n_bigram:
        # bigram-observation features: by (bigram attribute, label, label)
        Lo = old.n_labels
        bat = np.array([space.battr_index.get(a, -1) for a in old.battributes], dtype=np.int64)
        new_keys = space.bfeature_attr() * (L * L) + space.bfeat_pair.astype(np.int64)
        oa = bat[old.bfeature_attr()]
        op = old.bfeat_pair.astype(np.int64)
        oi, oj = lab[op // Lo], lab[op % Lo]
        live = (oa >= 0) & (oi >= 0) & (oj >= 0)
        old_keys = oa[live] * (L * L) + oi[live] * L + oj[live]
        if len(new_keys) and len(old_keys):
            order = np.argsort(new_keys, kind="stable")
            pos = np.minimum(np.searchsorted(new_keys[order], old_keys), len(order) - 1)
            hit = new_keys[order][pos] == old_keys
            ob = init.weights[old.bigram_offset:old.dense_offset][live][hit]
            w[space.bigram_offset + order[pos[hit]]] = ob
    return w


# A run stops as ``diverged`` once its objective exceeds this many times its reference (below).
DIVERGENCE_FACTOR = 1e3


def _all_finite(x: np.ndarray) -> bool:
    """``np.isfinite(x).all()`` without an x-sized temporary for float vectors (at NETtalk scale, 10^8 bools
    per epoch)."""
    x = np.asarray(x)
    if x.ndim == 1 and x.dtype.kind == "f":
        from .kernels.vec import all_finite
        return bool(all_finite(x))
    return bool(np.isfinite(x).all())


class _DivergenceWatch:
    """The driver's divergence rule, the same for every optimizer (batch and stochastic).

    A run has diverged when, at an iteration (epoch) or at its end,

    * a weight is not finite, or the objective is infinite, or it is NaN (except
      where the optimizer reports NaN on purpose because it did not evaluate the
      objective: ``monitor=False``; the weights and the final objective are still
      checked), or it is negative beyond rounding (a log-loss plus penalties never
      is: the scores have overflowed), or
    * the objective exceeds ``DIVERGENCE_FACTOR * max(f_uniform, f(x0), 1)``.

    ``f_uniform = (tokens / sequences) * log(labels)`` is the objective at ``w = 0``:
    every label path equally likely, so each sequence's loss is ``T_i log L``
    (nothing else: no regularisation at 0).  It depends on the average sequence
    length and the label count, not on the number of sequences.  ``f(x0)`` is the
    objective at a non-zero starting point (``init``, ``w0``), computed once
    (without counting a pass) when first needed: when the run would otherwise be
    judged diverged, or at its first checkpoint, which keeps it for a resumed run.  Why it is safe: the full-batch methods
    (L-BFGS, OWL-QN, BCD: line searches) never go above their start, so for them
    only non-finite values can fire it; a stochastic method whose objective is a
    thousand times that of guessing labels uniformly holds weights that put
    about ``L**-1000`` on the right label path of an average token: measured on 500
    CoNLL-2000 sentences (f_uniform 68.3), runs that recovered (sgd-l1 eta0=100,
    adagrad eta=100) peaked at 81 and 3.5 times f_uniform, runs that were lost
    (asg eta=30, eta=100) reached 1e21 and 1e186 times it.
    """

    def __init__(self, obj, reg, corpus: Corpus, space: FeatureSpace, x0: np.ndarray | None,
                 f_start: float | None = None, nan_ok: bool = False):
        n = max(int(corpus.n_sequences), 1)
        tokens = corpus.n_tokens
        if getattr(corpus, "is_weighted", False):
            # f at w = 0 with sample weights: the weighted mean length (in n sequences' units) times log L
            tokens = float(corpus.weight @ corpus.lengths()) * n / corpus.total_weight
        self.f_uniform = tokens / n * math.log(max(space.n_labels, 1))
        self.obj, self.reg = obj, reg
        self.x0 = x0 if (x0 is not None and np.any(x0)) else None
        self.f_start = f_start
        self.nan_ok = nan_ok

    def start_value(self) -> float | None:
        """f(x0) for a non-zero start (computed once, lazily); None from zero."""
        if self.f_start is None and self.x0 is not None:
            f = _training_objective(self.obj, self.reg, self.x0)
            self.f_start = f if math.isfinite(f) else 0.0   # a start that is itself non-finite: no allowance
            self.x0 = None
        return self.f_start

    def reference(self, compute: bool = True) -> float:
        fs = self.start_value() if compute else self.f_start
        return max(self.f_uniform, fs if fs is not None else 0.0, 1.0)

    def limit(self) -> float:
        return DIVERGENCE_FACTOR * self.reference()

    def check(self, f: float, x: np.ndarray | None, nan_ok: bool = False) -> str | None:
        """Why the run has diverged at (f, x), or None (``nan_ok``: f may be NaN as not evaluated)."""
        if x is not None and not _all_finite(x):
            return "the weights are no longer finite"
        f = float(f)
        if math.isnan(f):
            return None if (self.nan_ok or nan_ok) else "the objective is NaN"
        if math.isinf(f):
            return "the objective is infinite"
        if f < -1e-6 * max(self.f_uniform, 1.0):
            # a log-loss plus penalties is never negative: the scores have overflowed
            return f"the objective {f:.6g} is negative (impossible for a log-loss: the scores overflowed)"
        if f > DIVERGENCE_FACTOR * max(self.f_uniform, 1.0) and f > self.limit():
            return (f"the objective {f:.6g} is more than {DIVERGENCE_FACTOR:g} times its reference "
                    f"{self.reference():.6g}")
        return None


# the step-size parameters of the stochastic optimizers, and what to suggest beside a smaller value
_STEP_PARAMS = {"eta": "or a method that sets its own step (sag, sag-nus*, lbfgs)",
                "eta0": "or eta0=auto (crfkit picks it on a sample)"}


def _step_hint(algorithm: str, params: dict) -> str:
    """A suggestion about the step size of ``algorithm`` (where it has one) after a divergence."""
    if algorithm in BATCH_ALGORITHMS:
        return (f"{algorithm} picks its steps by line search, so the cause is in the data or the start: feature "
                "values of extreme size, or starting weights (init / --init-model) that do not fit the data")
    import inspect
    try:
        sig = inspect.signature(_stochastic.resolve(algorithm)).parameters
    except (KeyError, ValueError, TypeError):  # pragma: no cover
        sig = {}
    for name, alt in _STEP_PARAMS.items():
        if name not in sig:
            continue
        default = sig[name].default
        given = params.get(name, default)
        if isinstance(given, (int, float)) and not isinstance(given, bool) and given > 0:
            sug = given / 10
            if isinstance(default, (int, float)) and not isinstance(default, bool):
                sug = min(sug, float(default))
            return f"the step size {name}={given:g} is too large: try {name}={sug:.2g} or smaller, {alt}"
        return f"the step size {name}={given} is too large: give a smaller {name}"
    return ("this method sets its own steps, so the cause is likely in the data (feature values of extreme "
            "size) or its settings (-p)")


def _feature_scale(corpus: Corpus) -> tuple[float, int]:
    """(largest |feature value|, its token) of the corpus."""
    best, tok = 0.0, -1
    vals0 = getattr(corpus, "raw_val", None)
    if vals0 is None:
        vals0 = corpus.val
    elif not len(vals0) and len(corpus.attr):       # every value 1 (not stored): the first entry's
        best, tok = 1.0, int(np.searchsorted(corpus.tok_ptr, 0, side="right")) - 1
    for vals, ptr in ((vals0, corpus.tok_ptr), (getattr(corpus, "bval", None), getattr(corpus, "btok_ptr", None))):
        if vals is not None and len(vals):
            k = int(np.argmax(np.abs(vals)))
            if abs(vals[k]) > best:
                best, tok = float(abs(vals[k])), int(np.searchsorted(ptr, k, side="right")) - 1
    dense = getattr(corpus, "dense", None)
    if dense is not None and dense.size:
        k = int(np.argmax(np.abs(dense)))
        t = k // dense.shape[1]
        if abs(dense.flat[k]) > best:
            best, tok = float(abs(dense.flat[k])), t
    return best, tok


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


class _SigtermAsInterrupt:
    """While training, SIGTERM takes the Ctrl-C path (checkpoint, last model, status ``interrupted``).
    Only in the main thread (signal handlers can be set nowhere else); the previous handler is restored."""

    def __enter__(self):
        self.prev = None
        self.installed = False
        if threading.current_thread() is threading.main_thread():
            try:
                self.prev = signal.signal(signal.SIGTERM, _raise_interrupt)
                self.installed = True
            except (ValueError, OSError):
                pass
        return self

    def __exit__(self, *exc):
        if self.installed:
            signal.signal(signal.SIGTERM, self.prev if self.prev is not None else signal.SIG_DFL)
        return False


def _sparse_fb_wanted(sparse_fb, reg: Regularization) -> bool | str:
    """train's ``sparse_fb`` as Objective's: True, False or "auto" (with an L1 term; without one the
    label-pair scores are not sparse, so the standard recursions)."""
    if sparse_fb is True or sparse_fb is False:
        return sparse_fb
    if sparse_fb not in ("on", "off", "auto"):
        raise ParameterError(f"sparse_fb must be on, off or auto, got {sparse_fb!r}")
    return True if sparse_fb == "on" else ("auto" if sparse_fb == "auto" and reg.l1 > 0 else False)


HISTORY_AUTO_BYTES = 1 << 25   # history="auto": float32 pairs above this size of the float64 ones (32 MiB)


def lbfgs_history(history: str, m: int, n_features: int) -> str:
    """``float64`` or ``float32``: train's ``history`` parameter resolved for a run (see :func:`train_corpus`)."""
    if history == "auto":
        return "float32" if 2 * (int(m) + 1) * 8 * int(n_features) > HISTORY_AUTO_BYTES else "float64"
    from .optim.lbfgs import history_dtype
    history_dtype(history)          # the ParameterError of an unknown name
    return history


@single_blas
def train_corpus(space: FeatureSpace, corpus: Corpus, *, algorithm: str = "lbfgs",
                 reg: Regularization | None = None, max_iterations: int | None = None,
                 epsilon: float = 1e-5, delta: float = 1e-5, period: int = 10, gtol: float | None = None,
                 m: int = 6, stop_value: float | None = None, threads: int | None = None,
                 dev: Corpus | None = None, dev_labels=None, dev_every: int = 1,
                 trace: str | os.PathLike | None = None, verbose: bool = False,
                 log: Callable[[str], None] = print, w0: np.ndarray | None = None,
                 meta: dict | None = None, callback: Callable[[dict], bool | None] | None = None,
                 init=None, checkpoint: str | os.PathLike | None = None, checkpoint_every: int | None = 10,
                 resume: str | os.PathLike | None = None, params: dict | None = None,
                 seed: int = 0, dev_stop: int | None = None, dev_metric: str = "auto",
                 fine_tune: int = 0, fine_tune_l2: float | None = None,
                 allowed: np.ndarray | None = None, train_scores: bool = False,
                 sparse_fb: str | bool = "off", history: str = "auto") -> TrainResult:
    """Train on an encoded corpus. See :func:`train` for the parameters (``w0`` is ``init`` as a weight vector;
    ``allowed``: (n_tokens x L) labels each token may take, for partial labels, :mod:`crfkit.partial`;
    ``train_scores``: also decode the training set at each evaluation (every ``dev_every`` iterations) and
    record ``train_accuracy`` and, for chunk tags, ``train_f1`` (conlleval) in the trace, next to the dev
    scores; off by default, as it costs a Viterbi pass over the training set each time).
    ``sparse_fb``: ``"on"``/``"off"``/``"auto"`` (or True/False), the forward-backward recursions of the
    full-batch gradient with label-pair x observation features: sparse (Lavergne et al. 2010, 4.1: only the
    non-zero label-pair scores of a position are exponentiated and visited) or standard (every L x L pair);
    ``auto`` (with an L1 term) decides at each gradient evaluation from the estimated share of non-zero
    label-pair scores (:attr:`crfkit.objective.Objective.AUTO_PAIR_DENSITY`).  Same value and gradient to
    rounding; with the sparse ones every trace record carries ``pair_zero_share``, the share of zeros of the
    label-pair score matrices M_t over the positions of the sparse gradient evaluations since the previous
    record (NaN if none), and the model's meta the share over the whole run and ``sparse_evaluations``.
    ``history``: ``"float64"``, ``"float32"`` or ``"auto"``, the precision of the (s, y) pairs lbfgs/owlqn
    store: ``auto`` is float32 when the 2(m+1) pairs in double precision would take more than
    :data:`HISTORY_AUTO_BYTES` (32 MiB: 300k features with m = 6; CoNLL-2000's 0.45M are above), where
    they are the largest part of a run's memory, and float64 below, where the memory does not matter (the
    model meta records the choice as ``lbfgs_history``).  Measured on CoNLL-2000 (L-BFGS, c2 = 1,
    CRFsuite's delta rule): the same objective to 4e-7 relative (158 iterations against 161); run on,
    within 1e-10 of the optimum after 294 iterations against 298, the same final objective; ``crfkit
    train``'s peak RSS 232 -> 209 MB, below python-crfsuite's 212 MB (README, issue 18)."""
    if algorithm not in ALGORITHMS:
        raise ParameterError(f"unknown algorithm {algorithm!r}; available: {', '.join(ALGORITHMS)}")
    reg = reg or regularization(corpus.total_weight)
    requested = algorithm
    if corpus.is_weighted and algorithm in NO_SAMPLE_WEIGHTS:
        raise ParameterError(f"algorithm {algorithm!r} does not support sample weights yet; the optimizers that "
                             "do: " + ", ".join(a for a in ALGORITHMS if a not in NO_SAMPLE_WEIGHTS))
    if algorithm == "lbfgs" and reg.l1 > 0:
        algorithm = "owlqn"  # as CRFsuite: L-BFGS with an L1 term runs OWL-QN
    if dev_stop is not None:
        if dev is None:
            raise ParameterError("dev_stop needs a development set (X_dev / Y_dev)")
        if int(dev_stop) < 1:
            raise ParameterError("dev_stop is a number of dev evaluations (>= 1)")
    if dev_metric not in ("auto", "accuracy", "f1"):
        raise ParameterError(f"dev_metric must be auto, accuracy or f1, got {dev_metric!r}")
    if dev_metric == "f1" and dev_labels is None:
        raise ParameterError("dev_metric='f1' needs the dev labels as strings (dev_labels)")
    if fine_tune < 0:
        raise ParameterError("fine_tune is a number of L-BFGS iterations (>= 0)")
    if train_scores and (allowed is not None or getattr(corpus, "is_sharded", False)):
        raise ParameterError("train_scores needs a complete training corpus in this process (not partial "
                             "labels, not a corpus on a Dask cluster)")
    stochastic = algorithm not in BATCH_ALGORITHMS
    # a corpus resident on a Dask cluster (crfkit.distributed.ShardedCorpus) brings its own objective,
    # stochastic driver (parameter mixing), feature scale and fingerprint
    sharded = getattr(corpus, "is_sharded", False)
    if sharded and (allowed is not None or fine_tune):
        raise ParameterError("partial labels and fine_tune are not supported on a Dask cluster yet")
    if sharded and stochastic:
        corpus.stochastic(algorithm)    # a method parameter mixing does not run: the ParameterError says why
    if stochastic and space.n_bigram and algorithm not in ("sgd-l1", "bcd"):
        from .errors import CrfkitError
        raise CrfkitError(f"algorithm {algorithm!r} does not support bigram-observation features yet "
                          "(label pair x observation): use lbfgs, owlqn, sgd-l1 or bcd")
    params = dict(params or {})
    if params and not stochastic:
        raise ParameterError(f"{algorithm} takes no optimizer parameters (got {', '.join(sorted(params))})")
    set_threads(threads)
    # numba's code generator initialised (and LLVM's pages it touched handed back) before the objective
    # allocates its plan and buffers, not while they are held (crfkit.memtrim)
    memtrim.warm_compiler()
    # OWL-QN takes the smooth part (loss + L2) and handles the L1 term itself
    smooth = Regularization(l1=0.0, l2=reg.l2) if algorithm == "owlqn" else reg
    if allowed is not None:
        if stochastic:
            raise ParameterError(f"partial labels train with lbfgs or owlqn, not {algorithm!r} (the per-example "
                                 "oracle does not support them yet)")
        if fine_tune:
            raise ParameterError("fine_tune does not support partial labels yet")
        from .partial import PartialObjective
        obj = PartialObjective(corpus, space, smooth, allowed, threads=threads)
    elif sharded:
        obj = corpus.objective(space, smooth, threads)
    else:
        obj = Objective(corpus, space, smooth, threads=threads,
                        sparse_fb=_sparse_fb_wanted(sparse_fb, reg) if space.n_bigram else False)
    n = obj.n
    hist_kind = lbfgs_history(history, m, space.n_features)
    pair_seen = np.zeros(2, np.int64)   # pair counts already reported in a trace record
    c1, c2 = reg.crfsuite(obj.W)

    def warn(msg: str) -> None:
        if verbose:
            log(f"warning: {msg}")
        else:
            warnings.warn(msg, RuntimeWarning, stacklevel=3)

    if sharded:
        vmax, where = corpus.feature_scale()
    else:
        vmax, vtok = _feature_scale(corpus)
    if vmax > WARN_FEATURE_VALUE:
        if not sharded:
            seq = int(np.searchsorted(corpus.seq_ptr, vtok, side="right")) - 1
            where = f"sequence {seq}, token {vtok - int(corpus.seq_ptr[seq])}"
        warn(f"feature values reach {vmax:g} ({where}): values "
             f"far above 1 make training badly conditioned (every optimizer slows down or stops early); "
             "scale them to about [-1, 1] or take their logarithm")
    if verbose:
        if requested != algorithm:
            log(f"{requested} with an L1 term (l1 > 0): training with {algorithm}, as CRFsuite does")
        log(f"crfkit {algorithm}: {n} sequences, {corpus.n_tokens} tokens, {space.n_labels} labels, "
            f"{space.n_attributes} attributes, {space.n_features} features "
            f"({space.n_state} state, {space.n_trans} transition"
            + (f", {space.n_bigram} label-pair x observation" if space.n_bigram else "")
            + (f", {space.n_dense * space.n_labels} dense" if space.n_dense else "") + ")")
        if obj.weighted:
            log(f"sample weights: total W={obj.W:.6g} over {n} sequences "
                f"({int(np.count_nonzero(corpus.weight == 0))} of weight 0)")
            log(f"objective: (1/W) sum omega_i nll_i + (l2/2)|w|^2 + l1|w|_1 with l2={reg.l2:.6g}, l1={reg.l1:.6g} "
                f"(CRFsuite c2={c2:.6g}, c1={c1:.6g})")
        else:
            log(f"objective: (1/n) sum nll + (l2/2)|w|^2 + l1|w|_1 with l2={reg.l2:.6g}, l1={reg.l1:.6g} "
                f"(CRFsuite c2={c2:.6g}, c1={c1:.6g})")
    from . import checkpoint as ckpt
    if w0 is not None and init is not None:
        raise ParameterError("give init or w0, not both")
    if resume is not None and (init is not None or w0 is not None):
        raise ParameterError("resume continues from the checkpoint's weights: give no init/w0 with it")
    settings = {"algorithm": algorithm, "l1": float(reg.l1), "l2": float(reg.l2), "m": int(m), "period": int(period)}
    if stochastic:
        settings.update(seed=int(seed), params={k: params[k] for k in sorted(params)})
    fp = (corpus.fingerprint(space) if sharded else ckpt.fingerprint(space, corpus)) if (checkpoint or resume) \
        else None
    state = None
    previous: list[dict] = []
    t_offset = 0.0
    f_start = None
    if resume is not None:
        ck = ckpt.load(resume)
        ckpt.check(ck, fp, settings, resume)
        state = ck.state
        previous = list(ck.history)
        obj.n_full = int(ck.extra.get("n_full", state.get("n_evals", 0)))
        obj.n_oracle = int(ck.extra.get("n_oracle", 0))
        t_offset = float(ck.extra.get("wall_s", state.get("seconds", 0.0)))
        # the divergence reference of the run that wrote the checkpoint (older checkpoints: its objectives)
        if "f_start" in ck.extra:
            f_start = float(ck.extra["f_start"])
        else:
            seen = [r["objective"] for r in ck.history if isinstance(r.get("objective"), (int, float))
                    and math.isfinite(r["objective"])]
            f_start = max(seen) if seen else None
        if verbose:
            log(f"resuming from {os.fspath(resume)} at iteration {ck.iteration}")
    train_labels = train_score_labels(space, corpus) if train_scores else None
    tr = _Trace(trace, previous, warn=warn)
    history: list[dict] = list(previous)
    t0 = time.perf_counter() - t_offset
    if state is not None:
        x0 = None
    elif init is not None:
        x0 = init_weights(init, space)
    else:
        x0 = np.zeros(space.n_features) if w0 is None else np.asarray(w0, dtype=np.float64)
    # zeros made here for the run: L-BFGS / OWL-QN take them as their iterate's buffer (one vector less)
    adopt = state is None and init is None and w0 is None
    watch = _DivergenceWatch(obj, reg, corpus, space, x0, f_start=f_start,
                             nan_ok=stochastic and params.get("monitor", True) is False)
    diverged: dict = {}

    def save_checkpoint(st: dict) -> None:
        # a checkpoint that cannot be written (full disk, a directory gone) is a warning: the run goes on
        try:
            ckpt.save(checkpoint, st, fingerprint=fp, settings=settings, history=history,
                      extra={"n_full": int(st.get("n_evals", obj.n_full)), "n_oracle": obj.n_oracle,
                             "wall_s": time.perf_counter() - t0,
                             "n_train": n, "n_features": space.n_features, "f_start": watch.start_value() or 0.0})
        except OSError as e:
            warn(f"checkpoint at iteration {int(st.get('iteration', 0))} not written ({e}); training goes on")
            return False
        return True

    def on_iter(info: dict):
        # (LLVM's code pages that a kernel load touches, a dev evaluation's included, go back when the load
        # ends: crfkit.memtrim.release_after_compiles, registered by warm_compiler above)
        why = watch.check(info["f"], info["x"])
        rec = {
            "algorithm": algorithm, "iteration": info["iteration"],
            "effective_passes": obj.effective_passes, "wall_s": time.perf_counter() - t0,
            "objective": info["f"], "grad_inf_norm": info.get("gnorm_inf", float("nan")),
            "grad_norm": info.get("gnorm", float("nan")),
            "nnz": int(info["nnz"]) if "nnz" in info else int(np.count_nonzero(info["x"])),
            "step": info.get("step", float("nan")),
        }
        # optimizer-specific figures (stochastic methods): copied into the record when given
        rec.update({k: info[k] for k in EXTRA_TRACE_KEYS if k in info})
        if getattr(obj, "sparse_fb", False):
            rec["pair_zero_share"] = obj.pair_zero_share(obj.pair_counts - pair_seen)
            pair_seen[:] = obj.pair_counts
        if why is not None:
            # diverged: recorded, then the run stops; no dev scores, no checkpoint of these weights
            rec["status"] = "diverged"
            history.append(rec)
            tr.write(rec)
            diverged.update(iteration=int(info["iteration"]), f=float(info["f"]), why=why)
            if verbose:
                log(f"iter {rec['iteration']:4d}  obj {rec['objective']:.8g}  diverged: {why}")
            return True
        scored = False
        if dev is not None and dev_every and info["iteration"] % dev_every == 0:
            rec.update(dev_scores(CRFModel(space, info["x"]), dev, dev_labels))
            scored = True
        if train_scores and (not dev_every or info["iteration"] % dev_every == 0):
            # the training set decoded at these weights: train_accuracy (and train_f1 for chunk tags)
            rec.update(dev_scores(CRFModel(space, info["x"]), corpus, train_labels, prefix="train"))
            scored = True
        if scored:
            # the scoring time, which the plots take out of the optimizer's seconds
            rec["wall_s_with_dev"] = time.perf_counter() - t0
        stop_dev = False
        if dev_stop is not None and "dev_accuracy" in rec:
            stop_dev = dev_watch.update(rec, info["x"])
        history.append(rec)
        tr.write(rec)
        if verbose:
            line = (f"iter {rec['iteration']:4d}  obj {rec['objective']:.8g}  |g|inf {rec['grad_inf_norm']:.3e}  "
                    f"step {rec['step']:.3g}  active {rec['nnz']}  passes {rec['effective_passes']:.0f}  "
                    f"{rec['wall_s']:.2f}s")
            if "dev_accuracy" in rec:
                line += f"  dev acc {rec['dev_accuracy']:.2f}%"
            if "dev_f1" in rec:
                line += f"  dev F1 {rec['dev_f1']:.2f}"
            if "train_accuracy" in rec:
                line += f"  train acc {rec['train_accuracy']:.2f}%"
            if "train_f1" in rec:
                line += f"  train F1 {rec['train_f1']:.2f}"
            log(line)
        if checkpoint and checkpoint_every and info["iteration"] % checkpoint_every == 0 and info.get("state"):
            save_checkpoint(info["state"]())
        user_stop = callback(rec) if callback is not None else None
        return True if stop_dev else user_stop

    if dev_stop is not None and dev_metric == "auto":
        # chunk F1 only when the labels really are chunk tags (B-/I-/E-/S- plus a type, or O): NETtalk's
        # single-letter phoneme labels I, E, O, S... are not
        from .metrics import label_scheme
        scheme = label_scheme(space.labels) if dev_labels is not None else None
        dev_metric = "f1" if scheme else "accuracy"
        if verbose:
            log(f"dev metric for --dev-stop: {'chunk F1 (' + scheme.upper() + ' labels)' if scheme else 'token accuracy (the labels are not chunk tags)'}")
    dev_watch = _DevWatch(int(dev_stop), dev_metric) if dev_stop is not None else None

    with _SigtermAsInterrupt():
        try:
            # epsilon is CRFsuite's test ||g|| / max(1, ||w||) on the gradient (OWL-QN:
            # pseudo-gradient) of the sum-form objective, which is n times ours: same rule, same meaning
            common = dict(m=m, max_iterations=max_iterations, epsilon=epsilon / n, delta=delta, period=period,
                          gtol=gtol, stop_value=stop_value, callback=on_iter, state=state)
            if stochastic:
                fn = corpus.stochastic(algorithm) if sharded else _stochastic.resolve(algorithm)
                extra = {"state": state} if state is not None else {}
                import inspect
                if "resumable" in inspect.signature(fn).parameters and "resumable" not in params:
                    # without a checkpoint nothing resumes from an interrupted run's state: a driver whose
                    # kept state is large (sgd-l1's cumulative penalties) then keeps the weights only
                    extra["resumable"] = bool(checkpoint)
                try:
                    res = fn(obj, x0, reg=reg, max_iterations=max_iterations, callback=on_iter, seed=int(seed),
                             **extra, **params)
                except TypeError as e:
                    if "unexpected keyword" in str(e):
                        raise ParameterError(f"{algorithm}: {e}") from None
                    raise
            else:
                # L-BFGS / OWL-QN: the full-batch drivers
                memtrim.full_batch_vectors(8 * space.n_features)       # (a no-op unless the process opted in)
                # adopted zeros are handed over in a list, so that this frame holds no reference to them
                x_in, x0 = ([x0] if adopt else x0), None
                common.update(fresh_gradients=getattr(obj, "fresh_gradients", False), history=hist_kind,
                              adopt_x0=adopt)
                if algorithm == "owlqn":
                    from .optim.owlqn import owlqn
                    res = owlqn(obj.value_and_grad, x_in, reg.l1, fg_into=getattr(obj, "value_and_grad_into", None),
                                **common)
                else:
                    from .optim.lbfgs import lbfgs
                    res = lbfgs(obj.value_and_grad, x_in, **common)
        finally:
            tr.close()
        if not diverged:
            # an interrupted run may not have evaluated its last weights (f NaN): those are still checked
            why = watch.check(res.f, res.x, nan_ok=res.status == "interrupted")
            if why is not None:
                diverged.update(iteration=int(res.iterations), f=float(res.f), why=why)
        if diverged:
            _raise_diverged(diverged, watch, algorithm, params, history, obj, t0, checkpoint)
        final_state = res.state if checkpoint and res.iterations > 0 else None
        if final_state is not None:
            # always at the end: an interrupted run resumes from here, a finished one can be continued
            # (e.g. with a larger max_iterations)
            history[:] = [r for r in history if r["iteration"] <= res.iterations]
            if save_checkpoint(final_state) and verbose:
                log(f"checkpoint at iteration {res.iterations} written to {os.fspath(checkpoint)}")
    if res.status == "interrupted" and res.iterations == 0:
        raise KeyboardInterrupt  # nothing was learnt: there is no model worth saving
    x_final, f_final, status, message = res.x, res.f, res.status, res.message
    extra_md: dict = {}
    if dev_watch is not None and dev_watch.best_x is not None:
        # keep the best model on the development set (Lavergne et al. 2010, 5.3.1)
        if dev_watch.stopped:
            status = "dev_stop"
            message = (f"dev {dev_watch.metric} did not improve for {dev_watch.window} evaluations; "
                       f"best {dev_watch.best:.4f} at iteration {dev_watch.best_iteration}")
        if dev_watch.best_iteration != res.iterations:
            x_final = dev_watch.best_x
            f_final = _training_objective(obj, reg, x_final)
        extra_md.update(dev_best_iteration=dev_watch.best_iteration, dev_best=dev_watch.best,
                        dev_metric=dev_watch.metric)
    if fine_tune:
        x_final, f_final = _fine_tune(obj, corpus, space, reg, x_final, fine_tune, fine_tune_l2, threads,
                                      history, tr_path=trace, t0=t0, algorithm=algorithm,
                                      dev=dev, dev_labels=dev_labels, verbose=verbose, log=log)
        extra_md.update(fine_tune=int(fine_tune), fine_tune_l2=float(history[-1].get("l2", 0.0))
                        if history else 0.0)
        why = watch.check(f_final, x_final)
        if why is not None:
            _raise_diverged(dict(iteration=int(res.iterations), f=float(f_final), why=why + " after fine-tuning"),
                            watch, algorithm, params, history, obj, t0, None)
    seconds = time.perf_counter() - t0
    md = {"algorithm": algorithm, "l1": reg.l1, "l2": reg.l2, "n_train": n,
          "iterations": res.iterations, "status": status,
          # the saved model holds the active (non-zero) features only; `crfkit info` reports both counts
          "n_candidates": int(space.n_features)}
    if not stochastic:
        md["lbfgs_history"] = hist_kind
    if getattr(obj, "sparse_fb", False):
        md["sparse_fb"] = obj.sparse_fb
        md["pair_zero_share"] = obj.pair_zero_share()
        md["sparse_evaluations"] = int(obj.n_sparse_evaluations)
    if obj.weighted:
        md["train_weight"] = obj.W   # W = sum of the sample weights: the c1/c2 conversions use it in n's place
    md.update(extra_md)
    if resume is not None:
        md["resumed_from"] = int(state["iteration"])
    if meta:
        md.update(meta)
    model = CRFModel(space, x_final, md)
    if verbose:
        log(f"{status}: {message}; {res.iterations} iterations, {obj.effective_passes:.0f} passes, "
            f"{seconds:.2f}s, objective {f_final:.10g} (CRFsuite units {obj.to_crfsuite(f_final):.6f})")
    return TrainResult(model=model, status=status, message=message, iterations=res.iterations,
                       effective_passes=obj.effective_passes, seconds=seconds, objective=f_final,
                       objective_crfsuite=obj.to_crfsuite(f_final), reg=reg, history=history)


def _raise_diverged(d: dict, watch: _DivergenceWatch, algorithm: str, params: dict, history: list,
                    obj: Objective, t0: float, checkpoint) -> None:
    hint = _step_hint(algorithm, params)
    kept = (f"; the checkpoint {os.fspath(checkpoint)} holds the last state written before (if any)"
            if checkpoint else "")
    msg = (f"training diverged ({algorithm}, iteration {d['iteration']}): {d['why']} (a run stops once its "
           f"objective is not finite or above {DIVERGENCE_FACTOR:g} times its reference {watch.reference():.6g}, "
           f"the objective at w = 0 or at the starting weights); the weights were discarded{kept}. "
           f"{hint[0].upper()}{hint[1:]}")
    raise TrainingDiverged(msg, algorithm=algorithm, iteration=d["iteration"], objective=d["f"],
                           limit=watch.limit(), hint=hint, history=list(history),
                           effective_passes=obj.effective_passes, seconds=time.perf_counter() - t0)


def _training_objective(obj: Objective, reg: Regularization, x: np.ndarray) -> float:
    """f(x) with the training regularisation ``reg``, from the run's objective (whose L1 term
    may have been left to OWL-QN), without counting it as an effective pass."""
    f = obj.value(x, count=False)
    if reg.l1 and not obj.reg.l1:
        f += reg.l1 * l1_norm(x)
    return float(f)


class _DevWatch:
    """Stopping on a development set: stop once the dev score has not improved for ``window``
    evaluations in a row, keeping the weights of the best one."""

    def __init__(self, window: int, metric: str):
        self.window = window
        self.metric = metric
        self.best = -np.inf
        self.best_x = None
        self.best_iteration = None
        self.since = 0
        self.stopped = False

    def update(self, rec: dict, x: np.ndarray) -> bool:
        if self.metric == "auto":
            self.metric = "f1" if "dev_f1" in rec else "accuracy"
        score = rec["dev_f1"] if self.metric == "f1" else rec["dev_accuracy"]
        if score > self.best:
            self.best, self.best_x, self.best_iteration, self.since = float(score), np.array(x, copy=True), \
                rec["iteration"], 0
        else:
            self.since += 1
        rec["dev_best"] = self.best
        if self.since >= self.window:
            self.stopped = True
        return self.stopped


def _fine_tune(obj, corpus, space, reg, x, iterations, l2, threads, history, *, tr_path, t0, algorithm,
               dev, dev_labels, verbose, log):
    """A few L-BFGS iterations on the active features only, with a small L2 and no L1
    (Lavergne et al. 2010, 5.3.1): the zero weights stay zero, the others are re-fitted."""
    from .optim.lbfgs import lbfgs
    active = np.flatnonzero(x)
    l2 = reg.l2 if l2 is None else float(l2)
    if l2 == 0.0 and reg.l2 == 0.0:
        l2 = 1e-3 / obj.n  # "a small l2 penalty": without one, separable data has no optimum
    sub = Objective(corpus, space, Regularization(l1=0.0, l2=l2), threads=threads)
    full = np.zeros_like(x)

    def fg(z):
        full[active] = z
        f, g = sub.value_and_grad(full)
        return f, g[active]

    base_it = history[-1]["iteration"] if history else 0
    tr = _Trace(tr_path, history) if tr_path else None

    def on_iter(info):
        rec = {"algorithm": "fine-tune", "iteration": base_it + info["iteration"],
               "effective_passes": obj.effective_passes + sub.effective_passes,
               "wall_s": time.perf_counter() - t0, "objective": info["f"], "grad_inf_norm": info["gnorm_inf"],
               "grad_norm": info["gnorm"], "nnz": int(np.count_nonzero(info["x"])), "step": info["step"],
               "l2": l2, "phase": "fine_tune"}
        if dev is not None:
            w = np.zeros_like(x)
            w[active] = info["x"]
            rec.update(dev_scores(CRFModel(space, w), dev, dev_labels))
        history.append(rec)
        if tr:
            tr.write(rec)
        if verbose:
            log(f"fine-tune {info['iteration']:3d}  obj {info['f']:.8g}  active {rec['nnz']}  (l2={l2:.3g}, "
                f"{len(active)} features)")
        return None

    try:
        res = lbfgs(fg, x[active].copy(), max_iterations=int(iterations), callback=on_iter, epsilon=0.0,
                    delta=0.0, period=10)
    finally:
        if tr:
            tr.close()
    out = np.zeros_like(x)
    out[active] = res.x
    f = _training_objective(obj, reg, out)
    if verbose:
        log(f"fine-tuned {len(active)} active features for {res.iterations} iterations (l2={l2:.3g}): "
            f"objective {f:.10g} (with the training regularisation)")
    return out, f


def _drop_zero_weights(X, Y, dense, B, weights):
    """The training lists without the sequences of weight 0 (checked weights: ParameterError); so a sequence
    of weight 0 is as absent, down to the feature space (its attributes and labels make no feature)."""
    from .corpus import check_weights
    n = len(Y) if Y is not None else len(X)
    try:
        w = check_weights(weights, n)
    except ValueError as e:
        raise ParameterError(f"weights: {e}") from None
    if not w.sum() > 0:
        raise ParameterError("weights: every sample weight is zero: nothing to train on")
    if (w > 0).all():
        return X, Y, dense, B, w
    keep = np.flatnonzero(w > 0).tolist()

    def take(seq):
        if seq is None:
            return None
        if hasattr(seq, "take"):         # a crfkit.features.lazy.LazySequences: stays lazy
            return seq.take(keep)
        return [seq[i] for i in keep]
    return take(X), take(Y), take(dense), take(B), w[keep]


def train(X, Y, *, support: str = "observed", transitions: str | None = None, min_freq: float = 0,
          l1=None, l2=None, c1=None, c2=None, rho1=None, rho2=None,
          X_dev=None, Y_dev=None, dense=None, dense_dev=None, dense_names=None, B=None, B_dev=None,
          client=None, weights=None, **kwargs) -> TrainResult:
    """Train a CRF on attribute sequences ``X`` with label sequences ``Y``.

    Regularisation in one convention (default CRFsuite's ``c2=1``): ``l2``/``l1``
    (crfkit: per-sequence average loss), ``c2``/``c1`` (CRFsuite), ``rho2``/``rho1``
    (Wapiti).  ``algorithm``: ``lbfgs`` (default) or ``owlqn``; as in CRFsuite,
    ``lbfgs`` with an L1 term (``l1``/``c1``/``rho1`` > 0) runs OWL-QN, and the
    model meta and the trace record ``owlqn``.  Stopping: ``max_iterations``, ``epsilon`` (CRFsuite's rule
    ``||g|| / max(1, ||w||) < epsilon`` with ``g`` the gradient of the sum-form
    objective, i.e. ``n`` times crfkit's), ``delta`` over ``period``
    iterations, ``gtol`` (max-norm of crfkit's gradient), ``stop_value``.  ``X_dev``/``Y_dev`` add dev accuracy (and chunk
    F1) to every iteration's record; ``trace`` writes the records as JSON lines.

    Continuing: ``init`` starts from a previous :class:`CRFModel` (weights mapped
    onto the new feature space by (attribute, label) and (label, label) names;
    features the old model lacks start at 0) or from a weight vector of the new
    space (warm start).  ``checkpoint=PATH`` writes the optimizer state there
    every ``checkpoint_every`` iterations (default 10; 0/None: only at the end)
    and always when training ends, also on Ctrl-C or SIGTERM (during training
    in the main thread SIGTERM is handled as Ctrl-C: the last accepted model is
    returned with status ``interrupted``).  ``resume=PATH`` continues from such
    a checkpoint to the same result (bitwise) as the uninterrupted run; a
    checkpoint of other data, another feature space or other algorithm/l1/l2/
    ``m``/``period`` is refused with :class:`crfkit.checkpoint.CheckpointError`.
    ``max_iterations`` counts the whole run, resumed iterations included.

    Stopping on a development set (Lavergne et al. 2010, 5.3.1): ``dev_stop=W``
    stops once the dev score (``dev_metric``: ``f1`` when the dev labels are
    chunks, else ``accuracy``; ``auto`` picks) has not improved for ``W``
    evaluations (every ``dev_every`` iterations) and keeps the best model
    (status ``dev_stop``).  ``fine_tune=K`` then runs ``K`` L-BFGS iterations
    on the features that are non-zero, with L2 ``fine_tune_l2`` (default: the
    training L2) and no L1; the other features stay at zero.

    Dense features: ``dense`` (and ``dense_dev``) give one (tokens x D) real
    matrix per sequence, next to the attributes of ``X`` or instead of them
    (``X=None``); the model gets a weight per (dimension, label), named by
    ``dense_names``.

    Bigram-observation features: ``B`` (and ``B_dev``) give a second list of
    attribute sequences (shaped as ``X``) tested with the label pair of the
    transition into each token (see :mod:`crfkit.features.encode`); the
    full-batch optimizers (``lbfgs``, ``owlqn``) train them, the stochastic
    ones refuse them.

    On a Dask cluster (``client=``, :mod:`crfkit.distributed`): ``X`` is a list of training files
    (column files with ``templates=``, or CRFsuite attribute files; globs and ``.gz`` ok), read and
    encoded on the workers; ``Y`` is ``None``.

    Partial labels (:mod:`crfkit.partial`: a cell may be a set of labels, or ``?`` / None for any):
    ``labels=`` gives the label set (every label a cell names must be in it; ``?`` allows any of
    them), so that a label no visible cell names still becomes one of the model's; without it the
    labels are those the cells name.

    Stochastic optimizers (``crfkit.optim.stochastic``: ``sag``, ``sgd-l1``, ...)
    count ``max_iterations`` in epochs; ``params`` holds their own settings
    (e.g. ``{"eta0": 0.1}``) and ``seed`` their random order.

    Sample weights: ``weights`` gives one number ``omega_i >= 0`` per training
    sequence (not all zero).  The objective becomes ``(1/W) sum_i omega_i nll_i +
    (l2/2)||w||^2 + l1||w||_1`` with ``W = sum_i omega_i``, so an integer weight
    equals repeating the sequence; ``c1``/``c2`` and ``rho1``/``rho2`` convert with
    ``W`` in place of ``n``.  A sequence of weight 0 is left out (as if absent:
    its attributes and labels make no feature); ``min_freq`` counts the other
    sequences unweighted (a feature seen once in a sequence of weight 3 counts once).

    lbfgs, owlqn and bcd honour weights exactly (hybrid's batches keep the scales
    ``omega_i n / W``); sg, asg, adagrad, pegasos, sgd-l1, l2sgd and ngd draw (or
    visit) sequences uniformly and scale each one's gradient by ``omega_i n / W``
    (so weight 2 equals duplication in expectation); ap scales its update by that
    factor and pa (type 1, 2) its ``C``; the SAG family, sdca, oeg and arow refuse
    weights (:class:`ParameterError`).  Dev evaluation and the trace are unweighted.
    """
    if client is not None:
        if weights is not None:
            raise ParameterError("sample weights are not supported with client= (Dask) yet")
        # on a Dask cluster: X is a list of training files (crfkit.distributed.train_files)
        if Y is not None or dense is not None or B is not None:
            raise ParameterError("with client=, X is a list of training files (column or CRFsuite files, "
                                 "globs ok) read by the workers; give Y=None, no dense / B")
        from .distributed import train_files
        return train_files(client, X, support=support, transitions=transitions, min_freq=min_freq, l1=l1,
                           l2=l2, c1=c1, c2=c2, rho1=rho1, rho2=rho2, X_dev=X_dev, Y_dev=Y_dev, **kwargs)
    if weights is not None:
        X, Y, dense, B, weights = _drop_zero_weights(X, Y, dense, B, weights)
    allowed_cells = None
    labels = kwargs.pop("labels", None)
    from .partial import is_partial
    if is_partial(Y):   # partial labels (a set of labels, or ? / None: any): crfkit.partial
        from .partial import placeholders
        Y, allowed_cells, _ = placeholders(Y, labels=labels)
        if support != "all":
            raise ParameterError("partial labels need support='all' (every attribute x label a feature): the "
                                 "labels of a partially labelled token are not observed")
    elif labels is not None:
        raise ParameterError("labels= names the label set of partially labelled data (? and A|B cells); these "
                             "label sequences are complete: their labels are the model's")
    # LLVM's pages that importing numba touched go back before the data is read and encoded; the
    # C heap's free memory (the encoding's temporaries) before the training allocates (crfkit.memtrim)
    memtrim.release_code_pages()
    space, corpus = build(X, Y, support=support, transitions=transitions, min_freq=min_freq,
                          dense=dense, dense_names=dense_names, B=B)
    memtrim.release_memory()
    if allowed_cells is not None:
        from .partial import allowed_matrix
        kwargs["allowed"] = allowed_matrix(allowed_cells, space.labels)
    if weights is not None:
        corpus.weight = weights
    try:
        reg = regularization(corpus.total_weight, l1=l1, l2=l2, c1=c1, c2=c2, rho1=rho1, rho2=rho2)
    except ValueError as e:
        raise ParameterError(str(e)) from None
    dev = None
    if X_dev is not None or dense_dev is not None:
        from .features.encode import encode
        dev = encode(X_dev, space, Y_dev, name="<dev data>", dense=dense_dev,
                     B=B_dev if space.n_bigram else None)
    meta = dict(kwargs.pop("meta", None) or {})
    meta.update({"support": support, "transitions": transitions or support, "min_freq": min_freq})
    try:
        return train_corpus(space, corpus, reg=reg, dev=dev, dev_labels=Y_dev if dev is not None else None,
                            meta=meta, **kwargs)
    finally:
        # the corpus, the gradient plan and the optimizer's buffers are free now: give that memory
        # back, so that what the process does next (predict) does not grow it past training's peak
        del corpus, dev
        memtrim.release_memory()
