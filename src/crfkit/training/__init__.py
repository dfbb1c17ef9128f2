"""The training driver and its parts, below :mod:`crfkit.distributed` (which calls it) and above the
optimizers.

* :mod:`~crfkit.training.config`: :class:`TrainConfig` (a run's settings), the optimizer names, the
  checks;
* :mod:`~crfkit.training.driver`: :func:`train_corpus` (an encoded corpus and a config in, a
  :class:`TrainResult` out) and :func:`train_sequences` (the same from attribute sequences);
* :mod:`~crfkit.training.monitor`: the trace, the divergence rule, stopping on a dev set, SIGTERM as
  Ctrl-C;
* :mod:`~crfkit.training.warm`: warm starts (:func:`init_weights`) and fine-tuning;
* :mod:`~crfkit.training.incremental`: incremental feature sets; :mod:`~crfkit.training.partial`:
  partial labels; :mod:`~crfkit.training.checkpoint`: the optimizer state on disk.

The names below are imported on first use, so that ``import crfkit.training.checkpoint`` stays
light. The user-facing :func:`crfkit.train.train` (with its Dask path) sits above this package.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "TrainConfig": "config",
    "ALGORITHMS": "config",
    "BATCH_ALGORITHMS": "config",
    "NO_SAMPLE_WEIGHTS": "config",
    "EXTRA_TRACE_KEYS": "config",
    "HISTORY_AUTO_BYTES": "config",
    "lbfgs_history": "config",
    "TrainResult": "driver",
    "train_corpus": "driver",
    "train_sequences": "driver",
    "DIVERGENCE_FACTOR": "monitor",
    "dev_scores": "monitor",
    "train_score_labels": "monitor",
    "init_weights": "warm",
    "train_incremental": "incremental",
    "IncrementalResult": "incremental",
    "CheckpointError": "checkpoint",
}

__all__ = [
    "ALGORITHMS",
    "BATCH_ALGORITHMS",
    "DIVERGENCE_FACTOR",
    "EXTRA_TRACE_KEYS",
    "HISTORY_AUTO_BYTES",
    "NO_SAMPLE_WEIGHTS",
    "CheckpointError",
    "IncrementalResult",
    "TrainConfig",
    "TrainResult",
    "dev_scores",
    "init_weights",
    "lbfgs_history",
    "train_corpus",
    "train_incremental",
    "train_score_labels",
    "train_sequences",
]


def __getattr__(name: str):
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{mod}"), name)


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
