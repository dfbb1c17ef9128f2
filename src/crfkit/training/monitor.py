"""Watching a training run: the JSON-lines trace (:class:`Trace`), the divergence rule
(:class:`DivergenceWatch`, :func:`raise_diverged` and its step-size hint), stopping on a development
set (:class:`DevWatch`, :func:`dev_scores`), the per-iteration callback that ties them together
(:class:`IterationMonitor`), the feature-scale warning (:func:`feature_scale`) and SIGTERM taken as
Ctrl-C while training (:class:`SigtermAsInterrupt`).
"""

from __future__ import annotations

import json
import math
import os
import signal
import threading
from collections.abc import Callable, Sequence

import numpy as np

from .._runtime.compile_notice import work_clock
from ..corpus import Corpus
from ..errors import TrainingDiverged
from ..model import CRFModel, FeatureSpace
from ..objective import Objective, Regularization, l1_norm
from ..optim import stochastic as _stochastic
from .config import BATCH_ALGORITHMS, EXTRA_TRACE_KEYS


class Trace:
    """One JSON line per iteration, flushed as it is written so an interrupted run keeps its lines.
    A trace that cannot be opened fails the run before training; one that fails later (a full disk)
    is a warning (``warn``) and the run goes on without it."""

    def __init__(
        self,
        path: str | os.PathLike | None,
        previous: Sequence[dict] = (),
        warn: Callable[[str], None] | None = None,
    ):
        self.f = None
        self.path = os.fspath(path) if path else None
        self.warn = warn
        if path:
            d = os.path.dirname(os.path.abspath(path))
            os.makedirs(d, exist_ok=True)
            self.f = open(path, "w", encoding="utf-8")
            for rec in previous:  # a resumed run's trace holds the whole run
                self.write(rec)

    def write(self, rec: dict) -> None:
        if self.f:
            try:
                self.f.write(json.dumps(rec) + "\n")
                self.f.flush()
            except OSError as e:
                if self.warn is None:
                    raise
                self.warn(
                    f"the trace {self.path} could not be written at iteration {rec.get('iteration')} "
                    f"({e.strerror or e}); training goes on without it"
                )
                self.close()
                self.f = None

    def close(self) -> None:
        if self.f:
            try:
                self.f.close()
            except OSError:
                pass


def dev_scores(
    model: CRFModel, dev: Corpus, dev_labels: Sequence[Sequence[str]] | None, prefix: str = "dev"
) -> dict:
    """``{PREFIX_accuracy}`` (token accuracy in %, Viterbi labels against ``dev.y``) and, when
    ``dev_labels`` (the gold labels as strings) are given, ``{PREFIX_f1}`` (conlleval chunk F1).
    When every gold label is one of the model's (``dev.y >= 0``) the F1 is computed on the label ids
    (:func:`crfkit.metrics.conlleval_ids`, the same figure without a Python loop over tokens)."""
    from ..metrics import conlleval, conlleval_ids

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
    from ..metrics import label_scheme

    if label_scheme(space.labels) is None:
        return None
    return CRFModel(space, np.zeros(space.n_features))._split(corpus, np.asarray(corpus.y))


# A run stops as ``diverged`` once its objective exceeds this many times its reference (below).
DIVERGENCE_FACTOR = 1e3


def all_finite(x: np.ndarray) -> bool:
    """``np.isfinite(x).all()`` without an x-sized temporary for float vectors (at NETtalk scale,
    10^8 bools per epoch)."""
    x = np.asarray(x)
    if x.ndim == 1 and x.dtype.kind == "f":
        from ..kernels import vec

        return bool(vec.all_finite(x))
    return bool(np.isfinite(x).all())


class DivergenceWatch:
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
    judged diverged, or at its first checkpoint, which keeps it for a resumed run.  Why it is safe:
    the full-batch methods (L-BFGS, OWL-QN, BCD: line searches) never go above their start, so for
    them only non-finite values can fire it; a stochastic method whose objective is a
    thousand times that of guessing labels uniformly holds weights that put
    about ``L**-1000`` on the right label path of an average token: measured on 500
    CoNLL-2000 sentences (f_uniform 68.3), runs that recovered (sgd-l1 eta0=100,
    adagrad eta=100) peaked at 81 and 3.5 times f_uniform, runs that were lost
    (asg eta=30, eta=100) reached 1e21 and 1e186 times it.
    """

    def __init__(
        self,
        obj,
        reg,
        corpus: Corpus,
        space: FeatureSpace,
        x0: np.ndarray | None,
        f_start: float | None = None,
        nan_ok: bool = False,
    ):
        n = max(int(corpus.n_sequences), 1)
        tokens = corpus.n_tokens
        if getattr(corpus, "is_weighted", False):
            # f at w = 0 with sample weights: the weighted mean length (in n sequences' units) times
            # log L
            tokens = float(corpus.weight @ corpus.lengths()) * n / corpus.total_weight
        self.f_uniform = tokens / n * math.log(max(space.n_labels, 1))
        self.obj, self.reg = obj, reg
        self.x0 = x0 if (x0 is not None and np.any(x0)) else None
        self.f_start = f_start
        self.nan_ok = nan_ok

    def start_value(self) -> float | None:
        """f(x0) for a non-zero start (computed once, lazily); None from zero."""
        if self.f_start is None and self.x0 is not None:
            f = training_objective(self.obj, self.reg, self.x0)
            self.f_start = (
                f if math.isfinite(f) else 0.0
            )  # a start that is itself non-finite: no allowance
            self.x0 = None
        return self.f_start

    def reference(self, compute: bool = True) -> float:
        fs = self.start_value() if compute else self.f_start
        return max(self.f_uniform, fs if fs is not None else 0.0, 1.0)

    def limit(self) -> float:
        return DIVERGENCE_FACTOR * self.reference()

    def check(self, f: float, x: np.ndarray | None, nan_ok: bool = False) -> str | None:
        """Why the run has diverged at (f, x), or None (``nan_ok``: f may be NaN as not
        evaluated)."""
        if x is not None and not all_finite(x):
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
            return (
                f"the objective {f:.6g} is more than {DIVERGENCE_FACTOR:g} times its reference "
                f"{self.reference():.6g}"
            )
        return None


# the step-size parameters of the stochastic optimizers, and what to suggest beside a smaller value
STEP_PARAMS = {
    "eta": "or a method that sets its own step (sag, sag-nus*, lbfgs)",
    "eta0": "or eta0=auto (crfkit picks it on a sample)",
}


def step_hint(algorithm: str, params: dict) -> str:
    """A suggestion about the step size of ``algorithm`` (where it has one) after a divergence."""
    if algorithm in BATCH_ALGORITHMS:
        return (
            f"{algorithm} picks its steps by line search, so the cause is in the data or the start: feature "
            "values of extreme size, or starting weights (init / --init-model) that do not fit the data"
        )
    import inspect

    try:
        sig = inspect.signature(_stochastic.resolve(algorithm)).parameters
    except (KeyError, ValueError, TypeError):  # pragma: no cover
        sig = {}
    for name, alt in STEP_PARAMS.items():
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
    return (
        "this method sets its own steps, so the cause is likely in the data (feature values of extreme "
        "size) or its settings (-p)"
    )


def feature_scale(corpus: Corpus) -> tuple[float, int]:
    """(largest |feature value|, its token) of the corpus."""
    best, tok = 0.0, -1
    vals0 = getattr(corpus, "raw_val", None)
    if vals0 is None:
        vals0 = corpus.val
    elif not len(vals0) and len(corpus.attr):  # every value 1 (not stored): the first entry's
        best, tok = 1.0, int(np.searchsorted(corpus.tok_ptr, 0, side="right")) - 1
    for vals, ptr in (
        (vals0, corpus.tok_ptr),
        (getattr(corpus, "bval", None), getattr(corpus, "btok_ptr", None)),
    ):
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


def raise_interrupt(signum, frame):
    raise KeyboardInterrupt


class SigtermAsInterrupt:
    """While training, SIGTERM takes the Ctrl-C path (checkpoint, last model, status
    ``interrupted``). Only in the main thread (signal handlers can be set nowhere else); the
    previous handler is restored."""

    def __enter__(self):
        self.prev = None
        self.installed = False
        if threading.current_thread() is threading.main_thread():
            try:
                self.prev = signal.signal(signal.SIGTERM, raise_interrupt)
                self.installed = True
            except (ValueError, OSError):
                pass
        return self

    def __exit__(self, *exc):
        if self.installed:
            signal.signal(signal.SIGTERM, self.prev if self.prev is not None else signal.SIG_DFL)
        return False


def training_objective(obj: Objective, reg: Regularization, x: np.ndarray) -> float:
    """f(x) with the training regularisation ``reg``, from the run's objective (whose L1 term
    may have been left to OWL-QN), without counting it as an effective pass."""
    f = obj.value(x, count=False)
    if reg.l1 and not obj.reg.l1:
        f += reg.l1 * l1_norm(x)
    return float(f)


class DevWatch:
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
            self.best, self.best_x, self.best_iteration, self.since = (
                float(score),
                np.array(x, copy=True),
                rec["iteration"],
                0,
            )
        else:
            self.since += 1
        rec["dev_best"] = self.best
        if self.since >= self.window:
            self.stopped = True
        return self.stopped


def raise_diverged(
    d: dict,
    watch: DivergenceWatch,
    algorithm: str,
    params: dict,
    history: list,
    obj: Objective,
    t0: float,
    checkpoint,
) -> None:
    """Raise :class:`TrainingDiverged` for the divergence ``d`` (iteration, f, why), with the
    step-size hint."""
    hint = step_hint(algorithm, params)
    kept = (
        f"; the checkpoint {os.fspath(checkpoint)} holds the last state written before (if any)"
        if checkpoint
        else ""
    )
    msg = (
        f"training diverged ({algorithm}, iteration {d['iteration']}): {d['why']} (a run stops once its "
        f"objective is not finite or above {DIVERGENCE_FACTOR:g} times its reference {watch.reference():.6g}, "
        f"the objective at w = 0 or at the starting weights); the weights were discarded{kept}. "
        f"{hint[0].upper()}{hint[1:]}"
    )
    raise TrainingDiverged(
        msg,
        algorithm=algorithm,
        iteration=d["iteration"],
        objective=d["f"],
        limit=watch.limit(),
        hint=hint,
        history=list(history),
        effective_passes=obj.effective_passes,
        seconds=work_clock() - t0,
    )


def dev_watch_for(
    dev_stop: int | None,
    dev_metric: str,
    dev_labels,
    space: FeatureSpace,
    verbose: bool,
    log: Callable[[str], None],
) -> DevWatch | None:
    """The :class:`DevWatch` of ``dev_stop`` (None without one); ``dev_metric="auto"`` resolved
    here."""
    if dev_stop is not None and dev_metric == "auto":
        # chunk F1 only when the labels really are chunk tags (B-/I-/E-/S- plus a type, or O):
        # NETtalk's single-letter phoneme labels I, E, O, S... are not
        from ..metrics import label_scheme

        scheme = label_scheme(space.labels) if dev_labels is not None else None
        dev_metric = "f1" if scheme else "accuracy"
        if verbose:
            what = (
                "chunk F1 (" + scheme.upper() + " labels)"
                if scheme
                else "token accuracy (the labels are not chunk tags)"
            )
            log(f"dev metric for --dev-stop: {what}")
    return DevWatch(int(dev_stop), dev_metric) if dev_stop is not None else None


class IterationMonitor:
    """The optimizer's callback at every iteration (epoch): the divergence check, the trace record
    (optimizer figures, dev and train scores, the sparse forward-backward's pair share), the
    progress line, stopping on the dev set, the periodic checkpoint and the user's ``callback``.  A
    divergence is recorded in ``diverged`` (iteration, f, why) and stops the run."""

    def __init__(
        self,
        *,
        algorithm: str,
        obj,
        space: FeatureSpace,
        corpus: Corpus,
        cfg,
        watch: DivergenceWatch,
        tr: Trace,
        history: list,
        t0: float,
        warn: Callable[[str], None],
        train_labels,
        dev_watch: DevWatch | None,
        fingerprint: str | None,
        settings: dict,
    ):
        self.algorithm, self.obj, self.space, self.corpus, self.cfg = (
            algorithm,
            obj,
            space,
            corpus,
            cfg,
        )
        self.watch, self.tr, self.history, self.t0, self.warn = watch, tr, history, t0, warn
        self.train_labels, self.dev_watch = train_labels, dev_watch
        self.fp, self.settings = fingerprint, settings
        self.chunk_labels: bool | None = None  # whether the labels are chunk tags (first dev score)
        self.pair_seen = np.zeros(2, np.int64)  # pair counts already reported in a trace record
        self.diverged: dict = {}

    def save_checkpoint(self, st: dict) -> bool:
        """Write the checkpoint of state ``st``; one that cannot be written is a warning (False)."""
        from . import checkpoint as ckpt

        checkpoint, fp, settings, history, obj, watch = (
            self.cfg.checkpoint,
            self.fp,
            self.settings,
            self.history,
            self.obj,
            self.watch,
        )
        n, space, t0, warn = obj.n, self.space, self.t0, self.warn
        # a checkpoint that cannot be written (full disk, a directory gone) is a warning: the run
        # goes on
        try:
            ckpt.save(
                checkpoint,
                st,
                fingerprint=fp,
                settings=settings,
                history=history,
                extra={
                    "n_full": int(st.get("n_evals", obj.n_full)),
                    "n_oracle": obj.n_oracle,
                    "wall_s": work_clock() - t0,
                    "n_train": n,
                    "n_features": space.n_features,
                    "f_start": watch.start_value() or 0.0,
                },
            )
        except OSError as e:
            warn(
                f"checkpoint at iteration {int(st.get('iteration', 0))} not written ({e}); training goes on"
            )
            return False
        return True

    def __call__(self, info: dict):
        cfg = self.cfg
        algorithm, obj, space, corpus, watch, tr, history, t0 = (
            self.algorithm,
            self.obj,
            self.space,
            self.corpus,
            self.watch,
            self.tr,
            self.history,
            self.t0,
        )
        pair_seen, diverged, dev_watch, train_labels = (
            self.pair_seen,
            self.diverged,
            self.dev_watch,
            self.train_labels,
        )
        verbose, log, dev, dev_labels, dev_every = (
            cfg.verbose,
            cfg.log,
            cfg.dev,
            cfg.dev_labels,
            cfg.dev_every,
        )
        train_scores, dev_stop, callback = cfg.train_scores, cfg.dev_stop, cfg.callback
        checkpoint, checkpoint_every, save_checkpoint = (
            cfg.checkpoint,
            cfg.checkpoint_every,
            self.save_checkpoint,
        )
        # (LLVM's code pages that a kernel load touches, a dev evaluation's included, go back when
        # the load ends: crfkit.memtrim.release_after_compiles, registered by warm_compiler above)
        why = watch.check(info["f"], info["x"])
        rec = {
            "algorithm": algorithm,
            "iteration": info["iteration"],
            "effective_passes": obj.effective_passes,
            "wall_s": work_clock() - t0,
            "objective": info["f"],
            "grad_inf_norm": info.get("gnorm_inf", float("nan")),
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
            # chunk F1 only when the labels are chunk tags (POS tags: accuracy alone, not "F1 0.00")
            if dev_labels is not None and self.chunk_labels is None:
                from ..metrics import label_scheme

                self.chunk_labels = label_scheme(space.labels) is not None
            # (an explicit dev_metric="f1" scores F1 whatever the labels)
            wants_f1 = dev_watch is not None and dev_watch.metric == "f1"
            chunked = dev_labels if self.chunk_labels or wants_f1 else None
            rec.update(dev_scores(CRFModel(space, info["x"]), dev, chunked))
            scored = True
        if train_scores and (not dev_every or info["iteration"] % dev_every == 0):
            # the training set decoded at these weights: train_accuracy (and train_f1 for chunk
            # tags)
            rec.update(dev_scores(CRFModel(space, info["x"]), corpus, train_labels, prefix="train"))
            scored = True
        if scored:
            # the scoring time, which the plots take out of the optimizer's seconds
            rec["wall_s_with_dev"] = work_clock() - t0
        stop_dev = False
        if dev_stop is not None and "dev_accuracy" in rec:
            stop_dev = dev_watch.update(rec, info["x"])
        history.append(rec)
        tr.write(rec)
        if verbose:
            g = rec["grad_inf_norm"]
            # the dual methods (SDCA) compute no gradient: their certificate is the duality gap
            conv = (
                f"gap {rec['duality_gap']:.3e}"
                if g != g and rec.get("duality_gap") is not None
                else f"|g|inf {g:.3e}"
            )
            line = (
                f"iter {rec['iteration']:4d}  obj {rec['objective']:.8g}  {conv}  "
                f"step {rec['step']:.3g}  active {rec['nnz']}  passes {rec['effective_passes']:.0f}  "
                f"{rec['wall_s']:.2f}s"
            )
            if "dev_accuracy" in rec:
                line += f"  dev acc {rec['dev_accuracy']:.2f}%"
            if "dev_f1" in rec:
                line += f"  dev F1 {rec['dev_f1']:.2f}"
            if "train_accuracy" in rec:
                line += f"  train acc {rec['train_accuracy']:.2f}%"
            if "train_f1" in rec:
                line += f"  train F1 {rec['train_f1']:.2f}"
            log(line)
        if (
            checkpoint
            and checkpoint_every
            and info["iteration"] % checkpoint_every == 0
            and info.get("state")
        ):
            save_checkpoint(info["state"]())
        user_stop = callback(rec) if callback is not None else None
        return True if stop_dev else user_stop
