"""crfkit: linear-chain conditional random fields, fast to train, easy to use.

The main entry points (imported lazily, so ``import crfkit`` stays cheap):

* :class:`crfkit.CRF` — the sklearn-crfsuite-style estimator (``fit``, ``predict``, ``score``);
* :class:`crfkit.CRFSearchCV` / :func:`crfkit.tune` — c1/c2 search along a warm-started path;
* ``crfkit.train.train`` — train on attribute sequences (lists of strings per token);
* :class:`crfkit.CRFModel` — tag, marginals, save/load;
* :class:`crfkit.Templates` — CRF++ feature templates;
* :func:`crfkit.read_columns` — CoNLL / CRF++ column files;
* :func:`crfkit.conlleval` — conlleval-identical chunk scores.

The numba/LLVM/glibc hooks crfkit installs (and the environment switches that turn them off) are
documented in :mod:`crfkit._runtime`.
"""

__version__ = "0.1.0"

# idle OpenMP threads (numba's omp layer) spin only briefly before they sleep: set before libgomp
# loads, which is at the first parallel kernel (crfkit._runtime.omp; a user's setting is kept)
from ._runtime.omp import short_omp_wait as _short_omp_wait  # noqa: E402

_short_omp_wait()

_EXPORTS = {
    "TrainResult": ("crfkit.train", "TrainResult"),
    "CRF": ("crfkit.estimator", "CRF"),
    "CRFSearchCV": ("crfkit.tuning", "CRFSearchCV"),
    "tune": ("crfkit.tuning", "tune"),
    "CRFModel": ("crfkit.model", "CRFModel"),
    "Templates": ("crfkit.features.templates", "Templates"),
    "read_columns": ("crfkit.io.columns", "read_columns"),
    "conlleval": ("crfkit.metrics", "conlleval"),
    "CrfkitError": ("crfkit.errors", "CrfkitError"),
    "DataError": ("crfkit.errors", "DataError"),
    "ModelError": ("crfkit.errors", "ModelError"),
    "OutputError": ("crfkit.errors", "OutputError"),
    "TrainingDiverged": ("crfkit.errors", "TrainingDiverged"),
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name):
    if name in _EXPORTS:
        import importlib

        mod, attr = _EXPORTS[name]
        return getattr(importlib.import_module(mod), attr)
    raise AttributeError(f"module 'crfkit' has no attribute {name!r}")


def __dir__():
    # the lazily imported names (CRF, CRFModel, ...) are part of the module's public face
    return sorted(set(globals()) | set(_EXPORTS))
