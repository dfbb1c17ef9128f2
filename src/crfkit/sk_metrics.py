"""Sequence-aware scores for scikit-learn model selection (what ``sklearn_crfsuite.metrics``
offers).

``y_true`` and ``y_pred`` are lists (sequences) of lists (tokens) of labels.
The ``flat_*`` functions flatten both and call the scikit-learn metric of the
same name (scikit-learn is imported when they are called, not before);
``flat_accuracy_score`` and ``sequence_accuracy_score`` need nothing.

Use them in ``GridSearchCV`` either through :func:`make_scorer` (no
scikit-learn needed to build it)::

    from crfkit.sk_metrics import flat_f1_score, make_scorer
    scorer = make_scorer(flat_f1_score, average="weighted", labels=["B-LOC", "I-LOC"])
    GridSearchCV(crfkit.CRF(), {"c2": [0.1, 1.0]}, scoring=scorer, cv=3)

or through ``sklearn.metrics.make_scorer(flat_f1_score, average="weighted")``
exactly as with sklearn-crfsuite.  For chunk-level F1 (conlleval), use
``make_scorer(conll_f1_score)``.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from itertools import chain

from .errors import DataError

__all__ = [
    "flatten",
    "flat_accuracy_score",
    "flat_precision_score",
    "flat_recall_score",
    "flat_f1_score",
    "flat_fbeta_score",
    "flat_classification_report",
    "sequence_accuracy_score",
    "conll_f1_score",
    "make_scorer",
]


def _check(y_true, y_pred) -> tuple[list, list]:
    y_true = [list(s) for s in y_true]
    y_pred = [list(s) for s in y_pred]
    if len(y_true) != len(y_pred):
        raise DataError(f"y_true has {len(y_true)} sequences but y_pred has {len(y_pred)}")
    for i, (a, b) in enumerate(zip(y_true, y_pred)):
        if len(a) != len(b):
            raise DataError(f"sequence {i} has {len(a)} true labels but {len(b)} predicted labels")
    return y_true, y_pred


def flatten(y) -> list:
    """The labels of all sequences, one list."""
    return list(chain.from_iterable(y))


def flat_accuracy_score(y_true, y_pred) -> float:
    """Fraction of tokens whose predicted label is the true one (``CRF.score``)."""
    y_true, y_pred = _check(y_true, y_pred)
    a, b = flatten(y_true), flatten(y_pred)
    return sum(map(operator.eq, a, b)) / len(a) if a else 0.0


def sequence_accuracy_score(y_true, y_pred) -> float:
    """Fraction of sequences whose every label is predicted right."""
    y_true, y_pred = _check(y_true, y_pred)
    return sum(a == b for a, b in zip(y_true, y_pred)) / len(y_true) if y_true else 0.0


def _flat(name: str) -> Callable:
    def metric(y_true, y_pred, **kwargs):
        import sklearn.metrics

        y_true, y_pred = _check(y_true, y_pred)
        return getattr(sklearn.metrics, name)(flatten(y_true), flatten(y_pred), **kwargs)

    metric.__name__ = "flat_" + name
    metric.__qualname__ = metric.__name__
    metric.__doc__ = (
        f"``sklearn.metrics.{name}`` over the flattened label sequences "
        "(keyword arguments are passed on)."
    )
    return metric


flat_precision_score = _flat("precision_score")
flat_recall_score = _flat("recall_score")
flat_f1_score = _flat("f1_score")
flat_fbeta_score = _flat("fbeta_score")
flat_classification_report = _flat("classification_report")


def conll_f1_score(y_true, y_pred, **kwargs) -> float:
    """Chunk F1 of conlleval (IOB/IOBES tags), as a fraction in [0, 1]."""
    from .metrics import conlleval

    y_true, y_pred = _check(y_true, y_pred)
    return conlleval(y_true, y_pred, **kwargs).f1 / 100.0


class _SequenceScorer:
    """``scorer(estimator, X, y)``: ``sign * metric(y, estimator.predict(X), **kwargs)``."""

    def __init__(self, metric: Callable, sign: int, kwargs: dict):
        self._metric = metric
        self._sign = sign
        self._kwargs = kwargs

    def __call__(self, estimator, X, y) -> float:
        return self._sign * float(self._metric(y, estimator.predict(X), **self._kwargs))

    def __repr__(self) -> str:
        kw = "".join(f", {k}={v!r}" for k, v in self._kwargs.items())
        neg = ", greater_is_better=False" if self._sign < 0 else ""
        return f"make_scorer({getattr(self._metric, '__name__', self._metric)}{neg}{kw})"


def make_scorer(metric: Callable, *, greater_is_better: bool = True, **kwargs) -> Callable:
    """A scorer for ``GridSearchCV(scoring=...)`` / ``cross_val_score`` from a metric on label
    sequences.

    ``metric(y_true, y_pred, **kwargs)`` receives lists of label sequences
    (any of this module's functions, or your own).  The scorer is a plain
    picklable callable ``scorer(estimator, X, y)``; scikit-learn is not needed
    to build it.
    """
    if not callable(metric):
        raise TypeError(f"metric must be callable, got {metric!r}")
    return _SequenceScorer(metric, 1 if greater_is_better else -1, kwargs)
