"""What a training run is given: :class:`TrainConfig` (the settings of
:func:`crfkit.training.train_corpus`, one dataclass instead of ~30 keyword arguments), the optimizer
names the driver knows (:data:`ALGORITHMS`, :data:`BATCH_ALGORITHMS`, :data:`NO_SAMPLE_WEIGHTS`),
and the checks and resolutions that turn a config into a run's settings before anything is allocated
(:func:`plan_run`: the algorithm actually run, the regularisation, the optimizer parameters;
:func:`lbfgs_history`, :func:`sparse_fb_wanted`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..corpus import Corpus
from ..errors import CrfkitError, ParameterError
from ..model import FeatureSpace
from ..objective import Regularization, regularization
from ..optim import stochastic as _stochastic

BATCH_ALGORITHMS = ("lbfgs", "owlqn")
# optimizers that do not honour sample weights (yet): they refuse a weighted corpus
NO_SAMPLE_WEIGHTS = ("sag", "sag-nus", "sag-nus*", "saga", "saga-nus", "sdca", "oeg", "arow")
# the stochastic (per-example) optimizers present in this installation; see crfkit.optim.stochastic
ALGORITHMS = BATCH_ALGORITHMS + _stochastic.available()
# keys an optimizer's per-epoch info may add to the trace record
EXTRA_TRACE_KEYS = (
    "state_bytes",
    "naive_state_bytes",
    "lipschitz",
    "duality_gap",
    "dual",
    "ls_evals_per_step",
    "examples_seen",
    "steps",
    "monitor_s",
)

HISTORY_AUTO_BYTES = (
    1 << 25
)  # history="auto": float32 pairs above this size of the float64 ones (32 MiB)


@dataclass
class TrainConfig:
    """The settings of one training run on an encoded corpus (:func:`crfkit.training.train_corpus`).

    Each field is the keyword argument of the same name (see :func:`crfkit.train.train` for their
    meaning): the algorithm and its stopping rules (``algorithm``, ``reg``, ``max_iterations``,
    ``epsilon``, ``delta``, ``period``, ``gtol``, ``m``, ``stop_value``, ``history``, ``sparse_fb``,
    ``threads``; a stochastic method's own ``params`` and ``seed``), monitoring (``dev``,
    ``dev_labels``, ``dev_every``, ``dev_stop``, ``dev_metric``, ``train_scores``, ``trace``,
    ``verbose``, ``log``, ``callback``), the start (``w0``, ``init``, ``resume``) and the
    checkpoints (``checkpoint``, ``checkpoint_every``), fine-tuning (``fine_tune``,
    ``fine_tune_l2``), partial labels (``allowed``: (n_tokens x L) labels each token may take,
    :mod:`crfkit.training.partial`) and the model's ``meta``."""

    algorithm: str = "lbfgs"
    reg: Regularization | None = None
    max_iterations: int | None = None
    epsilon: float = 1e-5
    delta: float = 1e-5
    period: int = 10
    gtol: float | None = None
    m: int = 6
    stop_value: float | None = None
    threads: int | None = None
    dev: Corpus | None = None
    dev_labels: object = None
    dev_every: int = 1
    trace: str | os.PathLike | None = None
    verbose: bool = False
    log: Callable[[str], None] = print
    w0: np.ndarray | None = None
    meta: dict | None = None
    callback: Callable[[dict], bool | None] | None = None
    init: object = None
    checkpoint: str | os.PathLike | None = None
    checkpoint_every: int | None = 10
    resume: str | os.PathLike | None = None
    params: dict | None = None
    seed: int = 0
    dev_stop: int | None = None
    dev_metric: str = "auto"
    fine_tune: int = 0
    fine_tune_l2: float | None = None
    allowed: np.ndarray | None = None
    train_scores: bool = False
    sparse_fb: str | bool = "off"
    history: str = "auto"


@dataclass
class RunPlan:
    """What :func:`plan_run` resolved from a config: the algorithm run (``requested`` is the one
    asked for: ``lbfgs`` with an L1 term runs ``owlqn``), the regularisation, whether the method is
    stochastic, whether the corpus sits on a Dask cluster (``sharded``), and the optimizer
    parameters (a copy)."""

    algorithm: str
    requested: str
    reg: Regularization
    stochastic: bool
    sharded: bool
    params: dict


def plan_run(space: FeatureSpace, corpus: Corpus, cfg: TrainConfig) -> RunPlan:
    """The checks of a config against the corpus and feature space (:class:`ParameterError` before
    anything is allocated), and the run's settings."""
    algorithm, reg, dev_stop, dev, dev_metric = (
        cfg.algorithm,
        cfg.reg,
        cfg.dev_stop,
        cfg.dev,
        cfg.dev_metric,
    )
    dev_labels, fine_tune, train_scores, allowed = (
        cfg.dev_labels,
        cfg.fine_tune,
        cfg.train_scores,
        cfg.allowed,
    )
    if algorithm not in ALGORITHMS:
        raise ParameterError(f"unknown algorithm {algorithm!r}; available: {', '.join(ALGORITHMS)}")
    reg = reg or regularization(corpus.total_weight)
    requested = algorithm
    if corpus.is_weighted and algorithm in NO_SAMPLE_WEIGHTS:
        raise ParameterError(
            f"algorithm {algorithm!r} does not support sample weights yet; the optimizers that "
            "do: " + ", ".join(a for a in ALGORITHMS if a not in NO_SAMPLE_WEIGHTS)
        )
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
        raise ParameterError(
            "train_scores needs a complete training corpus in this process (not partial "
            "labels, not a corpus on a Dask cluster)"
        )
    stochastic = algorithm not in BATCH_ALGORITHMS
    # a corpus resident on a Dask cluster (crfkit.distributed.ShardedCorpus) brings its own
    # objective, stochastic driver (parameter mixing), feature scale and fingerprint
    sharded = getattr(corpus, "is_sharded", False)
    if sharded and (allowed is not None or fine_tune):
        raise ParameterError("partial labels and fine_tune are not supported on a Dask cluster yet")
    if sharded and stochastic:
        corpus.stochastic(
            algorithm
        )  # a method parameter mixing does not run: the ParameterError says why
    if stochastic and space.n_bigram and algorithm not in ("sgd-l1", "bcd"):
        raise CrfkitError(
            f"algorithm {algorithm!r} does not support bigram-observation features yet "
            "(label pair x observation): use lbfgs, owlqn, sgd-l1 or bcd"
        )
    params = dict(cfg.params or {})
    if params and not stochastic:
        raise ParameterError(
            f"{algorithm} takes no optimizer parameters (got {', '.join(sorted(params))})"
        )
    return RunPlan(
        algorithm=algorithm,
        requested=requested,
        reg=reg,
        stochastic=stochastic,
        sharded=sharded,
        params=params,
    )


def sparse_fb_wanted(sparse_fb, reg: Regularization) -> bool | str:
    """train's ``sparse_fb`` as Objective's: True, False or "auto" (with an L1 term; without one the
    label-pair scores are not sparse, so the standard recursions)."""
    if sparse_fb is True or sparse_fb is False:
        return sparse_fb
    if sparse_fb not in ("on", "off", "auto"):
        raise ParameterError(f"sparse_fb must be on, off or auto, got {sparse_fb!r}")
    return True if sparse_fb == "on" else ("auto" if sparse_fb == "auto" and reg.l1 > 0 else False)


def lbfgs_history(history: str, m: int, n_features: int) -> str:
    """``float64`` or ``float32``: train's ``history`` parameter resolved for a run (see
    :func:`train_corpus`)."""
    if history == "auto":
        return (
            "float32" if 2 * (int(m) + 1) * 8 * int(n_features) > HISTORY_AUTO_BYTES else "float64"
        )
    from ..optim.lbfgs import history_dtype

    history_dtype(history)  # the ParameterError of an unknown name
    return history
