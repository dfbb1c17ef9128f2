"""The training driver: an encoded corpus and a :class:`~crfkit.training.config.TrainConfig` in, a
trained model out (:func:`train_corpus`), in steps: the run's plan
(:func:`~crfkit.training.config.plan_run`), the objective (:func:`make_objective`), the announcement
(:func:`announce`), the start (:func:`open_run`: checkpoint settings, a resumed state;
:func:`~crfkit.training.warm.start_weights`), the optimizer under the monitor
(:func:`run_optimizer`, :class:`~crfkit.training.monitor.IterationMonitor`), the end
(:func:`close_run`: the last divergence check and checkpoint) and the model (:func:`finish`:
dev-best weights, fine-tuning, meta). :func:`train_sequences` is the same from attribute sequences
(encoding them first); the user-facing :func:`crfkit.train.train` adds the Dask path on top.  This
package never imports :mod:`crfkit.distributed`: a corpus resident on a cluster brings its own
objective and stochastic driver.
"""

from __future__ import annotations

import dataclasses
import math
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .. import memtrim
from .._runtime.compile_notice import work_clock
from ..corpus import WARN_FEATURE_VALUE, Corpus
from ..errors import ParameterError
from ..features.encode import build
from ..model import CRFModel, FeatureSpace
from ..objective import Objective, Regularization, regularization
from ..optim import stochastic as _stochastic
from ..parallel import set_threads, single_blas
from .config import (
    BATCH_ALGORITHMS,
    RunPlan,
    TrainConfig,
    lbfgs_history,
    plan_run,
    sparse_fb_wanted,
)
from .monitor import (
    DevWatch,
    DivergenceWatch,
    IterationMonitor,
    SigtermAsInterrupt,
    Trace,
    dev_watch_for,
    feature_scale,
    raise_diverged,
    train_score_labels,
    training_objective,
)
from .warm import fine_tune as run_fine_tune
from .warm import start_weights


@dataclass
class TrainResult:
    """A finished run: the ``model``, why it stopped (``status``, ``message``), ``iterations``,
    effective passes, ``seconds``, the final objective in crfkit's and CRFsuite's units, the
    regularisation ``reg`` and the trace records (``history``)."""

    model: CRFModel
    status: str
    message: str
    iterations: int
    effective_passes: float
    seconds: float
    objective: float  # f(w) in crfkit's normalisation (per sequence)
    objective_crfsuite: float  # n * f(w): CRFsuite's units
    reg: Regularization
    history: list = field(default_factory=list)
    #: the full-batch kernels' thread counts when crfkit chose them
    #: (:meth:`crfkit.parallel.ThreadGovernor.summary`), else ""
    threads: str = ""

    @property
    def converged(self) -> bool:
        return self.status in ("converged", "delta", "gtol", "stop_value", "dev_stop")


@dataclass
class RunStart:
    """Where a run starts (:func:`open_run`): the checkpoint ``settings`` and data ``fingerprint``
    (None without checkpoint or resume), a resumed optimizer ``state`` with its trace records
    (``previous``), wall time (``t_offset``) and divergence reference (``f_start``)."""

    settings: dict
    fingerprint: str | None
    state: dict | None = None
    previous: list = field(default_factory=list)
    t_offset: float = 0.0
    f_start: float | None = None


def make_config(config: TrainConfig | None, kwargs: dict) -> TrainConfig:
    """``config`` with the keyword arguments applied (the keyword form of :func:`train_corpus`)."""
    if config is None:
        return TrainConfig(**kwargs)
    return dataclasses.replace(config, **kwargs) if kwargs else config


def make_objective(space: FeatureSpace, corpus: Corpus, cfg: TrainConfig, plan: RunPlan):
    """The run's full-batch objective: partial labels', the cluster's (a sharded corpus) or the
    ordinary one. OWL-QN takes the smooth part (loss + L2) and handles the L1 term itself."""
    algorithm, reg, stochastic, sharded = plan.algorithm, plan.reg, plan.stochastic, plan.sharded
    allowed, fine_tune, threads, sparse_fb = cfg.allowed, cfg.fine_tune, cfg.threads, cfg.sparse_fb
    # OWL-QN takes the smooth part (loss + L2) and handles the L1 term itself
    smooth = Regularization(l1=0.0, l2=reg.l2) if algorithm == "owlqn" else reg
    if allowed is not None:
        if stochastic:
            raise ParameterError(
                f"partial labels train with lbfgs or owlqn, not {algorithm!r} (the per-example "
                "oracle does not support them yet)"
            )
        if fine_tune:
            raise ParameterError("fine_tune does not support partial labels yet")
        from .partial import PartialObjective

        obj = PartialObjective(corpus, space, smooth, allowed, threads=threads)
    elif sharded:
        obj = corpus.objective(space, smooth, threads)
    else:
        obj = Objective(
            corpus,
            space,
            smooth,
            threads=threads,
            sparse_fb=sparse_fb_wanted(sparse_fb, reg) if space.n_bigram else False,
        )
    return obj


def warner(verbose: bool, log: Callable[[str], None]) -> Callable[[str], None]:
    """A run's warnings: a ``warning:`` line of the log when verbose, else
    :class:`RuntimeWarning`."""

    def warn(msg: str) -> None:
        if verbose:
            log(f"warning: {msg}")
        else:
            warnings.warn(msg, RuntimeWarning, stacklevel=3)

    return warn


def announce(
    space: FeatureSpace, corpus: Corpus, cfg: TrainConfig, plan: RunPlan, obj, warn
) -> None:
    """The feature-scale warning and, when verbose, the run's opening lines (data, features,
    objective)."""
    verbose, log, sharded, reg = cfg.verbose, cfg.log, plan.sharded, plan.reg
    requested, algorithm, n = plan.requested, plan.algorithm, obj.n
    c1, c2 = reg.crfsuite(obj.W)
    if sharded:
        vmax, where = corpus.feature_scale()
    else:
        vmax, vtok = feature_scale(corpus)
    if vmax > WARN_FEATURE_VALUE:
        if not sharded:
            seq = int(np.searchsorted(corpus.seq_ptr, vtok, side="right")) - 1
            where = f"sequence {seq}, token {vtok - int(corpus.seq_ptr[seq])}"
        warn(
            f"feature values reach {vmax:g} ({where}): values "
            f"far above 1 make training badly conditioned (every optimizer slows down or stops early); "
            "scale them to about [-1, 1] or take their logarithm"
        )
    if verbose:
        if requested != algorithm:
            log(
                f"{requested} with an L1 term (l1 > 0): training with {algorithm}, as CRFsuite does"
            )
        log(
            f"crfkit {algorithm}: {n} sequences, {corpus.n_tokens} tokens, {space.n_labels} labels, "
            f"{space.n_attributes} attributes, {space.n_features} features "
            f"({space.n_state} state, {space.n_trans} transition"
            + (f", {space.n_bigram} label-pair x observation" if space.n_bigram else "")
            + (f", {space.n_dense * space.n_labels} dense" if space.n_dense else "")
            + ")"
        )
        if obj.weighted:
            log(
                f"sample weights: total W={obj.W:.6g} over {n} sequences "
                f"({int(np.count_nonzero(corpus.weight == 0))} of weight 0)"
            )
            log(
                f"objective: (1/W) sum omega_i nll_i + (l2/2)|w|^2 + l1|w|_1 with l2={reg.l2:.6g}, l1={reg.l1:.6g} "
                f"(CRFsuite c2={c2:.6g}, c1={c1:.6g})"
            )
        else:
            log(
                f"objective: (1/n) sum nll + (l2/2)|w|^2 + l1|w|_1 with l2={reg.l2:.6g}, l1={reg.l1:.6g} "
                f"(CRFsuite c2={c2:.6g}, c1={c1:.6g})"
            )


def state_dims(space: FeatureSpace, corpus: Corpus, cfg: TrainConfig, plan: RunPlan):
    """The dimensions a resumed optimizer state is checked against (features, sequences, tokens,
    labels, attributes, transition features, edges, the history sizes, the optimizer's
    parameters)."""
    from ..optim.schema import Dims

    n = int(corpus.n_sequences)
    T = int(corpus.n_tokens)
    if plan.sharded:
        E = max(T - n, 0)
    else:
        lens = np.diff(np.asarray(corpus.seq_ptr, dtype=np.int64))
        E = int(np.maximum(lens - 1, 0).sum())
    return Dims(
        p=int(space.n_features),
        n=n,
        T=T,
        L=int(space.n_labels),
        A=int(space.n_attributes) + int(getattr(space, "n_battributes", 0) or 0),
        n_trans=int(getattr(space, "n_trans", space.n_labels**2)),
        E=E,
        m=int(cfg.m),
        period=int(cfg.period),
        params=dict(plan.params or {}),
    )


def open_run(space: FeatureSpace, corpus: Corpus, cfg: TrainConfig, plan: RunPlan, obj) -> RunStart:
    """The checks of the start (``init``/``w0``/``resume``), the checkpoint settings and
    fingerprint, and a resumed checkpoint's state (its counts go back into ``obj``)."""
    from . import checkpoint as ckpt

    init, w0, resume, checkpoint, verbose, log = (
        cfg.init,
        cfg.w0,
        cfg.resume,
        cfg.checkpoint,
        cfg.verbose,
        cfg.log,
    )
    algorithm, reg, stochastic, sharded, params = (
        plan.algorithm,
        plan.reg,
        plan.stochastic,
        plan.sharded,
        plan.params,
    )
    m, period, seed = cfg.m, cfg.period, cfg.seed
    if w0 is not None and init is not None:
        raise ParameterError("give init or w0, not both")
    if resume is not None and (init is not None or w0 is not None):
        raise ParameterError(
            "resume continues from the checkpoint's weights: give no init/w0 with it"
        )
    settings = {
        "algorithm": algorithm,
        "l1": float(reg.l1),
        "l2": float(reg.l2),
        "m": int(m),
        "period": int(period),
    }
    if stochastic:
        settings.update(seed=int(seed), params={k: params[k] for k in sorted(params)})
    fp = (
        (corpus.fingerprint(space) if sharded else ckpt.fingerprint(space, corpus))
        if (checkpoint or resume)
        else None
    )
    start = RunStart(settings=settings, fingerprint=fp)
    if resume is not None:
        # every field of the checkpoint is checked against the optimizer's state schema and this
        # run's dimensions before anything of it reaches the optimizer (a file from anyone)
        schema, rules = (
            corpus.state_schema(algorithm) if sharded and stochastic else ckpt.schema_for(algorithm)
        )
        expect = ckpt.Expect(fp, settings, schema, state_dims(space, corpus, cfg, plan), rules)
        ck = ckpt.load(resume, expect)
        state = start.state = ck.state
        start.previous = list(ck.history)
        obj.n_full = int(ck.extra.get("n_full", state.get("n_evals", 0)))
        obj.n_oracle = int(ck.extra.get("n_oracle", 0))
        start.t_offset = float(ck.extra.get("wall_s", state.get("seconds", 0.0)))
        # the divergence reference of the run that wrote the checkpoint (older checkpoints: its
        # objectives)
        if "f_start" in ck.extra:
            start.f_start = float(ck.extra["f_start"])
        else:
            seen = [
                r["objective"]
                for r in ck.history
                if isinstance(r.get("objective"), (int, float)) and math.isfinite(r["objective"])
            ]
            start.f_start = max(seen) if seen else None
        if verbose:
            log(f"resuming from {os.fspath(resume)} at iteration {ck.iteration}")
    return start


def run_stochastic(obj, x0, corpus: Corpus, cfg: TrainConfig, plan: RunPlan, state, on_iter):
    """A stochastic (per-example) optimizer's run (the cluster's parameter mixing for a sharded
    corpus)."""
    algorithm, sharded, params, reg = plan.algorithm, plan.sharded, plan.params, plan.reg
    max_iterations, seed, checkpoint = cfg.max_iterations, cfg.seed, cfg.checkpoint
    fn = corpus.stochastic(algorithm) if sharded else _stochastic.resolve(algorithm)
    extra = {"state": state} if state is not None else {}
    import inspect

    if "resumable" in inspect.signature(fn).parameters and "resumable" not in params:
        # without a checkpoint nothing resumes from an interrupted run's state: a driver whose
        # kept state is large (sgd-l1's cumulative penalties) then keeps the weights only
        extra["resumable"] = bool(checkpoint)
    try:
        res = fn(
            obj,
            x0,
            reg=reg,
            max_iterations=max_iterations,
            callback=on_iter,
            seed=int(seed),
            **extra,
            **params,
        )
    except TypeError as e:
        if "unexpected keyword" in str(e):
            raise ParameterError(f"{algorithm}: {e}") from None
        raise
    return res


def run_batch(
    obj,
    x_in,
    space: FeatureSpace,
    cfg: TrainConfig,
    plan: RunPlan,
    state,
    on_iter,
    hist_kind: str,
    adopt: bool,
):
    """L-BFGS / OWL-QN: the full-batch drivers.  ``x_in``: the start, or a one-element list holding
    zeros made for the run (``adopt``), which the driver takes as its iterate's buffer."""
    algorithm, reg = plan.algorithm, plan.reg
    # epsilon is CRFsuite's test ||g|| / max(1, ||w||) on the gradient (OWL-QN:
    # pseudo-gradient) of the sum-form objective, which is n times ours: same rule, same meaning
    common = dict(
        m=cfg.m,
        max_iterations=cfg.max_iterations,
        epsilon=cfg.epsilon / obj.n,
        delta=cfg.delta,
        period=cfg.period,
        gtol=cfg.gtol,
        stop_value=cfg.stop_value,
        callback=on_iter,
        state=state,
    )
    memtrim.full_batch_vectors(8 * space.n_features)  # (a no-op unless the process opted in)
    common.update(
        fresh_gradients=getattr(obj, "fresh_gradients", False), history=hist_kind, adopt_x0=adopt
    )
    if algorithm == "owlqn":
        from ..optim.owlqn import owlqn

        res = owlqn(
            obj.value_and_grad,
            x_in,
            reg.l1,
            fg_into=getattr(obj, "value_and_grad_into", None),
            **common,
        )
    else:
        from ..optim.lbfgs import lbfgs

        res = lbfgs(obj.value_and_grad, x_in, **common)
    return res


def close_run(res, mon: IterationMonitor, cfg: TrainConfig, plan: RunPlan, t0: float) -> None:
    """The end of the optimizer's run: the last weights checked for divergence (raised), the final
    checkpoint."""
    diverged, watch, history, obj, checkpoint = (
        mon.diverged,
        mon.watch,
        mon.history,
        mon.obj,
        cfg.checkpoint,
    )
    verbose, log = cfg.verbose, cfg.log
    if not diverged:
        # an interrupted run may not have evaluated its last weights (f NaN): those are still
        # checked
        why = watch.check(res.f, res.x, nan_ok=res.status == "interrupted")
        if why is not None:
            diverged.update(iteration=int(res.iterations), f=float(res.f), why=why)
    if diverged:
        raise_diverged(diverged, watch, plan.algorithm, plan.params, history, obj, t0, checkpoint)
    final_state = res.state if checkpoint and res.iterations > 0 else None
    if final_state is not None:
        # always at the end: an interrupted run resumes from here, a finished one can be continued
        # (e.g. with a larger max_iterations)
        history[:] = [r for r in history if r["iteration"] <= res.iterations]
        if mon.save_checkpoint(final_state) and verbose:
            log(f"checkpoint at iteration {res.iterations} written to {os.fspath(checkpoint)}")


def finish(
    res,
    space: FeatureSpace,
    corpus: Corpus,
    cfg: TrainConfig,
    plan: RunPlan,
    obj,
    watch: DivergenceWatch,
    dev_watch: DevWatch | None,
    history: list,
    t0: float,
    hist_kind: str,
    state,
) -> TrainResult:
    """The trained model: the dev set's best weights (``dev_stop``), fine-tuning, the meta, the
    result."""
    algorithm, reg, params, stochastic, n = (
        plan.algorithm,
        plan.reg,
        plan.params,
        plan.stochastic,
        obj.n,
    )
    fine_tune, fine_tune_l2, threads, trace = (
        cfg.fine_tune,
        cfg.fine_tune_l2,
        cfg.threads,
        cfg.trace,
    )
    dev, dev_labels, verbose, log, resume, meta = (
        cfg.dev,
        cfg.dev_labels,
        cfg.verbose,
        cfg.log,
        cfg.resume,
        cfg.meta,
    )
    x_final, f_final, status, message = res.x, res.f, res.status, res.message
    extra_md: dict = {}
    if dev_watch is not None and dev_watch.best_x is not None:
        # keep the best model on the development set (Lavergne et al. 2010, 5.3.1)
        if dev_watch.stopped:
            status = "dev_stop"
            message = (
                f"dev {dev_watch.metric} did not improve for {dev_watch.window} evaluations; "
                f"best {dev_watch.best:.4f} at iteration {dev_watch.best_iteration}"
            )
        if dev_watch.best_iteration != res.iterations:
            x_final = dev_watch.best_x
            f_final = training_objective(obj, reg, x_final)
        extra_md.update(
            dev_best_iteration=dev_watch.best_iteration,
            dev_best=dev_watch.best,
            dev_metric=dev_watch.metric,
        )
    if fine_tune:
        x_final, f_final = run_fine_tune(
            obj,
            corpus,
            space,
            reg,
            x_final,
            fine_tune,
            fine_tune_l2,
            threads,
            history,
            tr_path=trace,
            t0=t0,
            algorithm=algorithm,
            dev=dev,
            dev_labels=dev_labels,
            verbose=verbose,
            log=log,
        )
        extra_md.update(
            fine_tune=int(fine_tune),
            fine_tune_l2=float(history[-1].get("l2", 0.0)) if history else 0.0,
        )
        why = watch.check(f_final, x_final)
        if why is not None:
            raise_diverged(
                dict(
                    iteration=int(res.iterations), f=float(f_final), why=why + " after fine-tuning"
                ),
                watch,
                algorithm,
                params,
                history,
                obj,
                t0,
                None,
            )
    seconds = work_clock() - t0
    md = {
        "algorithm": algorithm,
        "l1": reg.l1,
        "l2": reg.l2,
        "n_train": n,
        "iterations": res.iterations,
        "status": status,
        # the saved model holds the active (non-zero) features only; `crfkit info` reports both
        # counts
        "n_candidates": int(space.n_features),
    }
    if not stochastic:
        md["lbfgs_history"] = hist_kind
    if getattr(obj, "sparse_fb", False):
        md["sparse_fb"] = obj.sparse_fb
        md["pair_zero_share"] = obj.pair_zero_share()
        md["sparse_evaluations"] = int(obj.n_sparse_evaluations)
    if obj.weighted:
        md["train_weight"] = (
            obj.W
        )  # W = sum of the sample weights: the c1/c2 conversions use it in n's place
    md.update(extra_md)
    if resume is not None:
        md["resumed_from"] = int(state["iteration"])
    if meta:
        md.update(meta)
    model = CRFModel(space, x_final, md)
    if verbose:
        log(
            f"{status}: {message}; {res.iterations} iterations, {obj.effective_passes:.0f} passes, "
            f"{seconds:.2f}s, objective {f_final:.10g} (CRFsuite units {obj.to_crfsuite(f_final):.6f})"
        )
    return TrainResult(
        model=model,
        status=status,
        message=message,
        iterations=res.iterations,
        effective_passes=obj.effective_passes,
        seconds=seconds,
        objective=f_final,
        objective_crfsuite=obj.to_crfsuite(f_final),
        reg=reg,
        history=history,
        threads=gov.summary() if (gov := getattr(obj, "governor", None)) is not None else "",
    )


@single_blas
def train_corpus(
    space: FeatureSpace,
    corpus: Corpus,
    config: TrainConfig | None = None,
    *,
    _own_corpus: bool = False,
    **kwargs,
) -> TrainResult:
    """Train on an encoded corpus with the settings of ``config`` (a :class:`TrainConfig`); keyword
    arguments name its fields, alone (``train_corpus(space, corpus, algorithm="sag",
    max_iterations=10)``, as before the config existed) or over ``config``.  See
    :func:`crfkit.train.train` for the parameters (``w0`` is ``init`` as a weight vector;
    ``allowed``: (n_tokens x L) labels each token may take, for partial labels,
    :mod:`crfkit.training.partial`; ``train_scores``: also decode the training set at each
    evaluation (every ``dev_every`` iterations) and record ``train_accuracy`` and, for chunk tags,
    ``train_f1`` (conlleval) in the trace, next to the dev scores; off by default, as it costs a
    Viterbi pass over the training set each time).  ``sparse_fb``: ``"on"``/``"off"``/``"auto"`` (or
    True/False), the forward-backward recursions of the full-batch gradient with
    label-pair x observation features: sparse (Lavergne et al. 2010, 4.1: only the non-zero
    label-pair scores of a position are exponentiated and visited) or standard (every L x L pair);
    ``auto`` (with an L1 term) decides at each gradient evaluation from the estimated share of
    non-zero label-pair scores (:attr:`crfkit.objective.Objective.AUTO_PAIR_DENSITY`).  Same value
    and gradient to rounding; with the sparse ones every trace record carries ``pair_zero_share``,
    the share of zeros of the label-pair score matrices M_t over the positions of the sparse
    gradient evaluations since the previous record (NaN if none), and the model's meta the share
    over the whole run and ``sparse_evaluations``.  ``history``: ``"float64"``, ``"float32"`` or
    ``"auto"``, the precision of the (s, y) pairs lbfgs/owlqn store: ``auto`` is float32 when the
    2(m+1) pairs in double precision would take more than
    :data:`~crfkit.training.config.HISTORY_AUTO_BYTES` (32 MiB: 300k features with m = 6;
    CoNLL-2000's 0.45M are above), where they are the largest part of a run's memory, and float64
    below, where the memory does not matter (the model meta records the choice as
    ``lbfgs_history``).  Measured on CoNLL-2000 (L-BFGS, c2 = 1, CRFsuite's delta rule): the same
    objective to 4e-7 relative (158 iterations against 161); run on, within 1e-10 of the optimum
    after 294 iterations against 298, the same final objective; ``crfkit train``'s peak RSS
    232 -> 209 MB, below python-crfsuite's 212 MB."""
    cfg = make_config(config, kwargs)
    plan = plan_run(space, corpus, cfg)
    set_threads(cfg.threads)
    # numba's code generator initialised (and LLVM's pages it touched handed back) before the
    # objective allocates its plan and buffers, not while they are held (crfkit.memtrim)
    memtrim.warm_compiler()
    obj = make_objective(space, corpus, cfg, plan)
    if (
        _own_corpus
        and plan.algorithm in BATCH_ALGORITHMS
        and not (cfg.fine_tune or cfg.train_scores)
        and type(obj) is Objective
    ):
        # nothing after the gradient's plan reads the corpus's token attributes: they go once it
        # is built (crfkit train on CoNLL-2000: 15 MB, its peak RSS under python-crfsuite's)
        obj.release_tokens_after_plan()
    hist_kind = lbfgs_history(cfg.history, cfg.m, space.n_features)
    warn = warner(cfg.verbose, cfg.log)
    announce(space, corpus, cfg, plan, obj, warn)
    start = open_run(space, corpus, cfg, plan, obj)
    state = start.state
    train_labels = train_score_labels(space, corpus) if cfg.train_scores else None
    tr = Trace(cfg.trace, start.previous, warn=warn)
    history: list[dict] = list(start.previous)
    t0 = work_clock() - start.t_offset
    x0 = start_weights(space, cfg.init, cfg.w0, state is not None)
    # zeros made here for the run: L-BFGS / OWL-QN take them as their iterate's buffer (one vector
    # less)
    adopt = state is None and cfg.init is None and cfg.w0 is None
    watch = DivergenceWatch(
        obj,
        plan.reg,
        corpus,
        space,
        x0,
        f_start=start.f_start,
        nan_ok=plan.stochastic and plan.params.get("monitor", True) is False,
    )
    dev_watch = dev_watch_for(
        cfg.dev_stop, cfg.dev_metric, cfg.dev_labels, space, cfg.verbose, cfg.log
    )
    mon = IterationMonitor(
        algorithm=plan.algorithm,
        obj=obj,
        space=space,
        corpus=corpus,
        cfg=cfg,
        watch=watch,
        tr=tr,
        history=history,
        t0=t0,
        warn=warn,
        train_labels=train_labels,
        dev_watch=dev_watch,
        fingerprint=start.fingerprint,
        settings=start.settings,
    )
    with SigtermAsInterrupt():
        try:
            if plan.stochastic:
                res = run_stochastic(obj, x0, corpus, cfg, plan, state, mon)
            else:
                # adopted zeros are handed over in a list, so that this frame holds no reference to
                # them
                x_in, x0 = ([x0] if adopt else x0), None
                res = run_batch(obj, x_in, space, cfg, plan, state, mon, hist_kind, adopt)
        finally:
            tr.close()
        close_run(res, mon, cfg, plan, t0)
    if res.status == "interrupted" and res.iterations == 0:
        raise KeyboardInterrupt  # nothing was learnt: there is no model worth saving
    return finish(
        res, space, corpus, cfg, plan, obj, watch, dev_watch, history, t0, hist_kind, state
    )


def drop_zero_weights(X, Y, dense, B, weights):
    """The training lists without the sequences of weight 0 (checked weights: ParameterError); so a
    sequence of weight 0 is as absent, down to the feature space (its attributes and labels make no
    feature)."""
    from ..corpus import check_weights

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
        if hasattr(seq, "take"):  # a crfkit.features.lazy.LazySequences: stays lazy
            return seq.take(keep)
        return [seq[i] for i in keep]

    return take(X), take(Y), take(dense), take(B), w[keep]


def train_sequences(
    X,
    Y,
    *,
    support: str = "observed",
    transitions: str | None = None,
    min_freq: float = 0,
    l1=None,
    l2=None,
    c1=None,
    c2=None,
    rho1=None,
    rho2=None,
    X_dev=None,
    Y_dev=None,
    dense=None,
    dense_dev=None,
    dense_names=None,
    B=None,
    B_dev=None,
    weights=None,
    **kwargs,
) -> TrainResult:
    """Train on attribute sequences in this process: :func:`crfkit.train.train` without ``client=``
    (see it for the parameters).  The feature space is built from ``X``/``Y``, the regularisation
    converted, the dev set encoded; the other keyword arguments are :class:`TrainConfig`'s."""
    if weights is not None:
        X, Y, dense, B, weights = drop_zero_weights(X, Y, dense, B, weights)
    allowed_cells = None
    labels = kwargs.pop("labels", None)
    from .partial import is_partial

    if is_partial(Y):  # partial labels (a set of labels, or ? / None: any): crfkit.training.partial
        from .partial import placeholders

        Y, allowed_cells, _ = placeholders(Y, labels=labels)
        if support != "all":
            raise ParameterError(
                "partial labels need support='all' (every attribute x label a feature): the "
                "labels of a partially labelled token are not observed"
            )
    elif labels is not None:
        raise ParameterError(
            "labels= names the label set of partially labelled data (? and A|B cells); these "
            "label sequences are complete: their labels are the model's"
        )
    # LLVM's pages that importing numba touched go back before the data is read and encoded; the
    # C heap's free memory (the encoding's temporaries) before the training allocates
    # (crfkit.memtrim)
    memtrim.release_code_pages()
    space, corpus = build(
        X,
        Y,
        support=support,
        transitions=transitions,
        min_freq=min_freq,
        dense=dense,
        dense_names=dense_names,
        B=B,
        name=str((kwargs.get("meta") or {}).get("train_file") or "<training data>"),
    )
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
        from ..features.encode import encode

        dev = encode(
            X_dev,
            space,
            Y_dev,
            name="<dev data>",
            dense=dense_dev,
            B=B_dev if space.n_bigram else None,
        )
    meta = dict(kwargs.pop("meta", None) or {})
    meta.update({"support": support, "transitions": transitions or support, "min_freq": min_freq})
    try:
        return train_corpus(
            space,
            corpus,
            _own_corpus=True,
            reg=reg,
            dev=dev,
            dev_labels=Y_dev if dev is not None else None,
            meta=meta,
            **kwargs,
        )
    finally:
        # the corpus, the gradient plan and the optimizer's buffers are free now: give that memory
        # back, so that what the process does next (predict) does not grow it past training's peak
        del corpus, dev
        memtrim.release_memory()
