"""The user-facing training function, :func:`train`: attribute sequences in, a :class:`TrainResult`
out, in this process (the driver, :mod:`crfkit.training`) or on a Dask cluster when ``client=`` is
given (:mod:`crfkit.distributed`, imported only then).

The driver's public names are re-exported here (``TrainResult``, ``train_corpus``, ``ALGORITHMS``,
``dev_scores``, ``init_weights``...), so that ``from crfkit.train import ...`` keeps working; new
code imports them from :mod:`crfkit.training` (the driver reads its tunables, such as
``HISTORY_AUTO_BYTES``, from :mod:`crfkit.training.config`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from .hints import DenseBlocks, LabelSequences, SampleWeight, Sequences

from .errors import ParameterError
from .features.encode import build
from .objective import Regularization, regularization
from .training.config import (
    ALGORITHMS,
    BATCH_ALGORITHMS,
    EXTRA_TRACE_KEYS,
    HISTORY_AUTO_BYTES,
    NO_SAMPLE_WEIGHTS,
    TrainConfig,
    lbfgs_history,
)
from .training.driver import TrainResult, train_corpus, train_sequences
from .training.monitor import DIVERGENCE_FACTOR, DivergenceWatch, dev_scores, train_score_labels
from .training.warm import init_weights

__all__ = [
    "ALGORITHMS",
    "BATCH_ALGORITHMS",
    "DIVERGENCE_FACTOR",
    "DivergenceWatch",
    "EXTRA_TRACE_KEYS",
    "HISTORY_AUTO_BYTES",
    "NO_SAMPLE_WEIGHTS",
    "Regularization",
    "TrainConfig",
    "TrainResult",
    "build",
    "dev_scores",
    "init_weights",
    "lbfgs_history",
    "regularization",
    "train",
    "train_corpus",
    "train_score_labels",
    "train_sequences",
]


def train(
    X: Sequences,
    Y: LabelSequences | None,
    *,
    support: str = "observed",
    transitions: str | None = None,
    min_freq: float = 0,
    l1: float | None = None,
    l2: float | None = None,
    c1: float | None = None,
    c2: float | None = None,
    rho1: float | None = None,
    rho2: float | None = None,
    X_dev: Sequences | None = None,
    Y_dev: LabelSequences | None = None,
    dense: DenseBlocks | None = None,
    dense_dev: DenseBlocks | None = None,
    dense_names: Sequence[str] | None = None,
    B: Sequences | None = None,
    B_dev: Sequences | None = None,
    client: Any = None,
    weights: SampleWeight | None = None,
    **kwargs,
) -> TrainResult:
    """Train a CRF on attribute sequences ``X`` with label sequences ``Y``.

    Regularisation in one convention (default CRFsuite's ``c2=1``): ``l2``/``l1``
    (crfkit: per-sequence average loss), ``c2``/``c1`` (CRFsuite), ``rho2``/``rho1``
    (Wapiti).  ``algorithm``: ``lbfgs`` (default) or ``owlqn``; as in CRFsuite,
    ``lbfgs`` with an L1 term (``l1``/``c1``/``rho1`` > 0) runs OWL-QN, and the
    model meta and the trace record ``owlqn``.  Stopping: ``max_iterations``, ``epsilon``
    (CRFsuite's rule ``||g|| / max(1, ||w||) < epsilon`` with ``g`` the gradient of the sum-form
    objective, i.e. ``n`` times crfkit's), ``delta`` over ``period``
    iterations, ``gtol`` (max-norm of crfkit's gradient), ``stop_value``.  ``X_dev``/``Y_dev`` add
    dev accuracy (and chunk F1) to every iteration's record; ``trace`` writes the records as JSON
    lines.

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
    ``m``/``period`` is refused with :class:`crfkit.training.checkpoint.CheckpointError`.
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

    Partial labels (:mod:`crfkit.training.partial`: a cell may be a set of labels, or ``?`` / None
    for any): ``labels=`` gives the label set (every label a cell names must be in it; ``?`` allows
    any of them), so that a label no visible cell names still becomes one of the model's; without it
    the labels are those the cells name.

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
            raise ParameterError(
                "with client=, X is a list of training files (column or CRFsuite files, "
                "globs ok) read by the workers; give Y=None, no dense / B"
            )
        from .distributed import train_files

        return train_files(
            client,
            X,
            support=support,
            transitions=transitions,
            min_freq=min_freq,
            l1=l1,
            l2=l2,
            c1=c1,
            c2=c2,
            rho1=rho1,
            rho2=rho2,
            X_dev=X_dev,
            Y_dev=Y_dev,
            **kwargs,
        )
    return train_sequences(
        X,
        Y,
        support=support,
        transitions=transitions,
        min_freq=min_freq,
        l1=l1,
        l2=l2,
        c1=c1,
        c2=c2,
        rho1=rho1,
        rho2=rho2,
        X_dev=X_dev,
        Y_dev=Y_dev,
        dense=dense,
        dense_dev=dense_dev,
        dense_names=dense_names,
        B=B,
        B_dev=B_dev,
        weights=weights,
        **kwargs,
    )
