"""``crfkit.CRF``: a scikit-learn estimator with sklearn-crfsuite's interface.

Porting from sklearn-crfsuite is a change of import::

    # import sklearn_crfsuite; crf = sklearn_crfsuite.CRF(...)
    import crfkit
    crf = crfkit.CRF(algorithm="lbfgs", c1=0.1, c2=0.1, max_iterations=100,
                     all_possible_transitions=True)
    crf.fit(X_train, y_train)            # X: one list of token-feature dicts per sentence
    y_pred = crf.predict(X_test)         # y: one list of label strings per sentence

Input is what sklearn-crfsuite accepts (token-feature dicts with str / number /
bool values, nested dicts, lists and sets of strings, or lists of attribute
names; converted with python-crfsuite's semantics by
:mod:`crfkit.features.dicts`), and crfkit's own attribute lists.

Dense real-valued features (word embeddings, pixels): a sequence may also be
a numpy matrix (tokens x D) -- dense features only -- or a pair
``(token_features, matrix)`` -- both; the model gets a weight per (dimension,
label).  Every sequence of a data set must then carry a matrix with the same D::

    crf.fit([np.asarray(word_vectors) for ...], y)          # dense only
    crf.fit([(feats, vecs) for feats, vecs in ...], y)      # attributes and dense

Parameters that mean the same as in sklearn-crfsuite have its names and its
defaults (``None``: CRFsuite's default).  Training runs
:func:`crfkit.train.train`; the objective is CRFsuite's
(``sum_i nll_i + c1 ||w||_1 + c2 ||w||^2``), so a model trained here and one
trained by CRFsuite on the same data with the same ``c1``/``c2`` agree up to the
optimizers' tolerances.

scikit-learn is not imported by this module: ``get_params`` / ``set_params``
follow scikit-learn's conventions (every constructor argument is stored
unchanged as an attribute of the same name), so ``sklearn.base.clone``,
``GridSearchCV``, ``cross_val_score`` and pickling work when scikit-learn is
installed.  Sequence-level scorers: :mod:`crfkit.sk_metrics` (re-exported
here).
"""

from __future__ import annotations

import inspect
import os
import tempfile
from itertools import chain, repeat
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .hints import Allowed, Forbid, LabelSequences, SampleWeight, Sequences, Token

from .errors import DataError
from .features.dicts import LazyAttributes, to_attributes
from .sk_metrics import (
    conll_f1_score,
    flat_accuracy_score,
    flat_classification_report,
    flat_f1_score,
    flat_fbeta_score,
    flat_precision_score,
    flat_recall_score,
    flatten,
    make_scorer,
    sequence_accuracy_score,
)

__all__ = [
    "CRF",
    "make_scorer",
    "flatten",
    "flat_accuracy_score",
    "flat_precision_score",
    "flat_recall_score",
    "flat_f1_score",
    "flat_fbeta_score",
    "flat_classification_report",
    "sequence_accuracy_score",
    "conll_f1_score",
]

# sklearn-crfsuite algorithm names crfkit does not implement (for a clearer error)
# CRFsuite's long names of its algorithms (python-crfsuite accepts both spellings)
_CRFSUITE_ALIASES = {"averaged-perceptron": "ap", "passive-aggressive": "pa"}


def _is_matrix(a) -> bool:
    return isinstance(a, np.ndarray) and a.ndim == 2


def _split_dense(X, name: str):
    """(token features, dense matrices or None) of an estimator input (see the module docstring)."""
    if isinstance(X, np.ndarray) and X.ndim == 3:
        X = list(X)
    try:
        seqs = list(X)
    except TypeError:
        raise DataError(f"{name} must be a list of sequences, got {type(X).__name__}") from None
    kinds = []
    feats, dense = [], []
    for x in seqs:
        if _is_matrix(x):
            kinds.append(True)
            feats.append([[]] * len(x))
            dense.append(x)
        elif isinstance(x, tuple) and len(x) == 2 and _is_matrix(x[1]):
            kinds.append(True)
            feats.append(x[0])
            dense.append(x[1])
        else:
            kinds.append(False)
            feats.append(x)
    if not any(kinds):
        return seqs, None
    if not all(kinds):
        i, j = kinds.index(True), kinds.index(False)
        raise DataError(
            f"{name}: sequence {i} has a dense feature matrix but sequence {j} has none; "
            "with dense features every sequence needs its (tokens x dims) matrix"
        )
    for i, (f, d) in enumerate(zip(feats, dense)):
        if len(f) != len(d):
            raise DataError(
                f"{name}: sequence {i} has {len(f)} tokens of features but {len(d)} rows "
                "in its dense matrix"
            )
    return feats, dense


class _NotFittedError(ValueError, AttributeError):
    """Used when scikit-learn (and its NotFittedError) is not installed."""


def _not_fitted(what: str):
    try:
        from sklearn.exceptions import NotFittedError
    except ImportError:  # pragma: no cover - scikit-learn is optional
        NotFittedError = _NotFittedError
    return NotFittedError(
        f"This CRF instance is not fitted yet: call fit() before {what} "
        "(or give model_filename= of a saved crfkit or CRFsuite model)"
    )


def _label_sequences(y, name: str) -> list:
    """y as a list of lists of exact ``str`` (clear errors otherwise)."""
    if isinstance(y, (str, bytes, dict)):
        raise DataError(f"expected a list of label sequences, got a {type(y).__name__}", name)
    try:
        seqs = list(y)
    except TypeError:
        raise DataError(
            f"expected a list of label sequences, got a {type(y).__name__}", name
        ) from None
    for i, s in enumerate(seqs):
        if isinstance(s, (str, bytes)):
            raise DataError(
                f"sequence {i} is a string ({s[:40]!r}); the labels of a sequence must be a "
                "list of strings",
                name,
            )
        if type(s) is not list:
            try:
                seqs[i] = list(s)
            except TypeError:
                raise DataError(
                    f"sequence {i} is a {type(s).__name__}, not a list of labels", name
                ) from None
    if set(map(type, chain.from_iterable(seqs))) <= {str}:
        return seqs
    out = []
    for i, s in enumerate(seqs):
        row = []
        for j, lab in enumerate(s):
            if not isinstance(lab, str):
                raise DataError(
                    f"sequence {i}, token {j}: label {lab!r} is a {type(lab).__name__}; "
                    "labels must be strings",
                    name,
                )
            row.append(str(lab))
        out.append(row)
    return out


def _check_sample_weight(sample_weight, n: int) -> np.ndarray:
    """``sample_weight`` as scikit-learn's ``_check_sample_weight`` takes it (a scalar for every
    sequence, or one number per sequence), with its messages; the weights must also be finite,
    non-negative and not all 0."""
    if isinstance(sample_weight, (str, bytes)):
        raise ValueError(f"sample_weight must be numbers, got {sample_weight!r}")
    if np.ndim(sample_weight) == 0:
        try:
            v = float(sample_weight)
        except (TypeError, ValueError):
            raise ValueError(f"sample_weight must be numbers, got {sample_weight!r}") from None
        w = np.full(n, v)
    else:
        try:
            w = np.asarray(sample_weight, dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError("sample_weight must be numbers (an array-like of floats)") from None
        if w.ndim != 1:
            raise ValueError("Sample weights must be 1D array or scalar")
        if w.shape != (n,):
            raise ValueError(f"sample_weight.shape == {w.shape}, expected {(n,)}!")
    if not np.isfinite(w).all():
        raise ValueError("Input sample_weight contains NaN or infinity.")
    if (w < 0).any():
        raise ValueError("Negative values in data passed to `sample_weight`")
    if n and not w.sum() > 0:
        raise ValueError("sample_weight: every weight is zero: nothing to train on")
    return w


class CRF:
    """A linear-chain CRF trained by crfkit, with sklearn-crfsuite's ``CRF`` interface.

    Parameters (``None`` means CRFsuite's default)
    ----------------------------------------------
    algorithm : str, default ``"lbfgs"``
        A name in :data:`crfkit.train.ALGORITHMS`.  With ``c1 > 0``,
        ``"lbfgs"`` trains with OWL-QN, as CRFsuite does.  For the stochastic
        methods (``sgd-l1``, ``sag-nus*``, ``asg``, ``bcd``, ...)
        ``max_iterations`` counts epochs.
    algorithm_params : dict, optional
        The chosen algorithm's own settings, e.g. ``{"eta": 0.1}`` for
        ``sg``/``asg``/``adagrad``/``pegasos``, ``{"penalty": "cumulative",
        "eta0": 0.2}`` for ``sgd-l1`` (crfkit's ``-p NAME=VALUE``).
    random_state : int, optional
        Seed of the stochastic methods' random order (default 0).
    dask_client : distributed.Client, optional
        Train on this Dask cluster (:mod:`crfkit.distributed`, ``pip install 'crfkit[dask]'``):
        ``fit(files)`` with ``X`` a list of training files (column files with the templates of
        ``train_params={"templates": ...}``, default the chunking templates, or CRFsuite attribute
        files; globs and ``.gz`` ok), read and encoded by the workers, and ``y=None``.
    min_freq : float, default 0
        Features seen fewer times in training are dropped (CRFsuite
        ``feature.minfreq``; crfkit counts occurrences).
    all_possible_states : bool, default False
        True: a state feature for every (attribute, label) pair, not only the
        pairs seen in training (crfkit support ``"all"``).
    all_possible_transitions : bool, default False
        True: a transition feature for every label pair (``"all"``).
    c1, c2 : float, defaults 0 and 1
        L1 and L2 strengths of CRFsuite's sum-form objective.
    max_iterations : int, default unlimited
    num_memories : int, default 6
        L-BFGS history size.
    epsilon : float, default 1e-5
        Stop when ``||g|| / max(1, ||w||) < epsilon`` (CRFsuite's rule and units).
    period, delta : int, float, defaults 10 and 1e-5
        Stop when the objective improved by less than ``delta`` (relative)
        over the last ``period`` iterations.
    verbose : bool, default False
        Print one progress line per iteration.
    model_filename : str, optional
        After ``fit``, the model is saved there (crfkit's model format).  An
        estimator that was not fitted but has ``model_filename`` pointing to an
        existing model predicts with that model (as sklearn-crfsuite does): a
        crfkit model, or a CRFsuite model file (what sklearn-crfsuite,
        python-crfsuite and ``crfsuite learn`` write; a CRF++ or Wapiti model
        too), recognised by its first bytes and converted in memory.
    keep_tempfiles : ignored
        Accepted for compatibility; crfkit trains in memory and writes no
        temporary files.
    threads : int, optional
        Threads for training and tagging (default: all cores).
    trace : str, optional
        Write one JSON line per iteration to this file (crfkit's trace).
    train_params : dict, optional
        Extra keyword arguments for :func:`crfkit.train.train` (options of
        other algorithms, ``gtol``, ``stop_value``, ``dev_every``, ...).
    warm_start : bool, default False
        True: ``fit`` on an already fitted estimator starts from the previous
        ``model_``'s weights (mapped by (attribute, label) and (label, label)
        names; new features start at 0) instead of from zero (scikit-learn's
        convention).

    Attributes after ``fit``
    ------------------------
    model_ : crfkit.model.CRFModel
    history_ : list of dict
        One record per iteration: ``iteration``, ``effective_passes``,
        ``seconds`` (since training started), ``objective`` (crfkit's per-sequence
        normalisation), ``objective_crfsuite`` (CRFsuite's sum form, what its
        log calls the loss), ``active_features`` (non-zero weights), the
        optimizer's own fields (``grad_norm``, ``grad_inf_norm``, ``step``,
        ``algorithm``) and, when a dev set is given, ``dev_accuracy`` and
        ``dev_f1`` (conlleval chunk F1), both in percent as in crfkit's trace.
    training_status_ : str
        How training ended (``converged``, ``delta``, ``max_iterations``,
        ``interrupted``, ``linesearch_failed``, ...); ``training_message_`` says more.
    converged_ : bool
        True when a convergence test (not an iteration cap or an interruption) ended training.
    n_iter_, training_seconds_, effective_passes_, objective_, objective_crfsuite_
    classes_, state_features_, transition_features_, attributes_, size_
        As in sklearn-crfsuite (features with non-zero weight; ``size_`` is the
        size in bytes of the saved model).
    """

    def __init__(
        self,
        algorithm=None,
        min_freq=None,
        all_possible_states=None,
        all_possible_transitions=None,
        c1=None,
        c2=None,
        max_iterations=None,
        num_memories=None,
        epsilon=None,
        period=None,
        delta=None,
        verbose=False,
        model_filename=None,
        keep_tempfiles=False,
        threads=None,
        trace=None,
        train_params=None,
        warm_start=False,
        algorithm_params=None,
        random_state=None,
        dask_client=None,
    ):
        self.algorithm = algorithm
        self.dask_client = dask_client
        self.algorithm_params = algorithm_params
        self.random_state = random_state
        self.min_freq = min_freq
        self.all_possible_states = all_possible_states
        self.all_possible_transitions = all_possible_transitions
        self.c1 = c1
        self.c2 = c2
        self.max_iterations = max_iterations
        self.num_memories = num_memories
        self.epsilon = epsilon
        self.period = period
        self.delta = delta
        self.verbose = verbose
        self.model_filename = model_filename
        self.keep_tempfiles = keep_tempfiles
        self.threads = threads
        self.trace = trace
        self.train_params = train_params
        self.warm_start = warm_start

    # ------------------------------------------------------- scikit-learn protocol
    @classmethod
    def _get_param_names(cls) -> list[str]:
        sig = inspect.signature(cls.__init__)
        names = []
        for name, p in sig.parameters.items():
            if name == "self" or p.kind == p.VAR_KEYWORD:
                continue
            if p.kind == p.VAR_POSITIONAL:
                raise RuntimeError("scikit-learn estimators take no *args in their constructor")
            names.append(name)
        return sorted(names)

    def get_params(self, deep: bool = True) -> dict:
        """The constructor arguments, ``{name: value}`` (as scikit-learn's ``BaseEstimator``)."""
        return {name: getattr(self, name) for name in self._get_param_names()}

    def set_params(self, **params) -> CRF:
        """Set constructor arguments by name; unknown names raise ``ValueError``."""
        valid = self._get_param_names()
        for key, value in params.items():
            if key not in valid:
                raise ValueError(
                    f"Invalid parameter {key!r} for estimator {type(self).__name__}. "
                    f"Valid parameters are: {valid!r}."
                )
            setattr(self, key, value)
        return self

    def __sklearn_is_fitted__(self) -> bool:
        return "model_" in self.__dict__

    def __sklearn_tags__(self):
        from sklearn.utils import InputTags, Tags, TargetTags

        return Tags(
            estimator_type=None,
            target_tags=TargetTags(required=True),
            input_tags=InputTags(two_d_array=False, dict=True),
            no_validation=True,
        )

    def __repr__(self) -> str:
        sig = inspect.signature(type(self).__init__)
        parts = []
        for name in sig.parameters:
            if name == "self":
                continue
            value = getattr(self, name, None)
            default = sig.parameters[name].default
            try:
                same = value is default or bool(value == default)
            except Exception:
                same = False
            if not same:
                parts.append(f"{name}={value!r}")
        return f"{type(self).__name__}({', '.join(parts)})"

    def __getstate__(self) -> dict:
        # the model pickles as its own parts: FeatureSpace.__getstate__ keeps every block (state,
        # transition, label-pair x observation, dense) and drops the lookup tables built on first
        # use; a Dask client (a live connection) does not pickle: it comes back as None
        state = self.__dict__.copy()
        if state.get("dask_client") is not None:
            state["dask_client"] = None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    # ------------------------------------------------------------------ training
    def _algorithm(self) -> str:
        from .train import ALGORITHMS

        alg = "lbfgs" if self.algorithm is None else self.algorithm
        alg = _CRFSUITE_ALIASES.get(str(alg).lower(), alg)
        if alg not in ALGORITHMS:
            raise ValueError(
                f"algorithm {self.algorithm!r} is not available; crfkit has: {', '.join(ALGORITHMS)}"
            )
        return alg

    def _train_kwargs(self) -> dict:
        """The keyword arguments of :func:`crfkit.train.train` this estimator trains with."""
        kw = {
            "algorithm": self._algorithm(),
            "support": "all" if self.all_possible_states else "observed",
            "transitions": "all" if self.all_possible_transitions else "observed",
            "min_freq": 0 if self.min_freq is None else self.min_freq,
            "c1": self.c1,
            "c2": self.c2,
            "max_iterations": self.max_iterations,
            "threads": self.threads,
            "verbose": bool(self.verbose),
            "trace": self.trace,
        }
        for name, key in (
            ("epsilon", "epsilon"),
            ("delta", "delta"),
            ("period", "period"),
            ("num_memories", "m"),
        ):
            v = getattr(self, name)
            if v is not None:
                kw[key] = v
        if self.algorithm_params:
            kw["params"] = dict(self.algorithm_params)
        if self.random_state is not None and kw["algorithm"] not in ("lbfgs", "owlqn"):
            kw["seed"] = int(self.random_state)
        if self.train_params:
            kw.update(self.train_params)
        return kw

    def fit(
        self,
        X: Sequences,
        y: LabelSequences,
        X_dev: Sequences | None = None,
        y_dev: LabelSequences | None = None,
        sample_weight: SampleWeight | None = None,
    ) -> CRF:
        """Train on ``X`` (one list of token features per sequence) and ``y`` (label lists).

        ``X_dev`` / ``y_dev``: a development set scored after every iteration
        (``history_``'s ``dev_accuracy`` and ``dev_f1``).

        ``sample_weight``: one weight ``omega_i >= 0`` per sequence (an array-like of
        length ``len(X)``, or a scalar for all), as scikit-learn takes it.  The
        objective becomes ``(1/W) sum_i omega_i nll_i + (l2/2)||w||^2 + l1||w||_1``
        with ``W = sum_i omega_i`` (``c1``/``c2`` convert with ``W`` in place of
        the number of sequences), so an integer weight equals repeating the
        sequence; see :func:`crfkit.train.train` for the optimizers that honour
        weights (the others raise :class:`~crfkit.errors.ParameterError`).
        Dev scores are unweighted.

        A run whose objective becomes non-finite or grows far beyond its start
        (a step size too large) raises :class:`crfkit.errors.TrainingDiverged`
        with a hint about the step size; the estimator keeps its previous model
        (if any) and ``model_filename`` is not written.  A ``model_filename``
        that cannot be written (a directory, a read-only place) is refused with
        :class:`crfkit.errors.OutputError` before training starts.
        """
        from .train import train

        kw = self._train_kwargs()  # bad parameters fail before any data is converted
        if self.dask_client is not None:
            if sample_weight is not None:
                raise ValueError("sample_weight is not supported with dask_client yet")
            return self._fit_dask(X, y, X_dev, y_dev, kw)
        F, dense = _split_dense(X, "X")
        A = LazyAttributes(F, name="X")  # converted chunk by chunk as the feature space is built
        Y = _label_sequences(y, "y")
        if len(A) != len(Y):
            raise DataError(f"X has {len(A)} sequences but y has {len(Y)} label sequences")
        if sample_weight is not None:
            kw["weights"] = _check_sample_weight(sample_weight, len(A))
        if (X_dev is None) != (y_dev is None):
            raise ValueError("give both X_dev and y_dev, or neither")
        if X_dev is not None:
            F_dev, dense_dev = _split_dense(X_dev, "X_dev")
            if (dense_dev is None) != (dense is None):
                raise DataError("X and X_dev must both have dense feature matrices, or neither")
            A_dev = LazyAttributes(F_dev, name="X_dev")
            Y_dev = _label_sequences(y_dev, "y_dev")
            if len(A_dev) != len(Y_dev):
                raise DataError(
                    f"X_dev has {len(A_dev)} sequences but y_dev has {len(Y_dev)} label sequences"
                )
            kw.update(X_dev=A_dev, Y_dev=Y_dev, dense_dev=dense_dev)
        if self.warm_start and "model_" in self.__dict__:
            kw["init"] = self.model_
        if self.model_filename:
            # a model file that cannot be written is refused before training, not after it
            from .io.atomic import check_writable

            check_writable(self.model_filename, "the model")
        # a run that diverges raises TrainingDiverged: the estimator (and model_filename) keep what
        # they had
        res = train(A, Y, dense=dense, **kw)
        n = float(kw["weights"].sum()) if "weights" in kw else len(A)  # CRFsuite units: W * f
        return self._store(res, n)

    def _fit_dask(self, X, y, X_dev, y_dev, kw) -> CRF:
        """``fit`` on the Dask cluster of ``dask_client`` (:mod:`crfkit.distributed`): ``X`` is a
        list of training files (column files, read with the templates
        ``train_params={"templates": ...}``, default the chunking templates; or CRFsuite attribute
        files; globs and ``.gz`` ok) read and encoded by the workers; ``y`` is None (the labels are
        in the files).  A development set: ``X_dev`` a file path (``y_dev`` None)."""
        from .train import train

        if y is not None:
            raise ValueError(
                "with dask_client, X is a list of training files holding the labels: give y=None"
            )
        if isinstance(X, (str, os.PathLike)):
            X = [X]
        if X_dev is not None:
            if y_dev is not None or not isinstance(X_dev, (str, os.PathLike)):
                raise ValueError(
                    "with dask_client, X_dev is a file path (labels inside) and y_dev is None"
                )
            kw["dev_path"] = X_dev
        if self.warm_start and "model_" in self.__dict__:
            raise ValueError("warm_start is not supported with dask_client yet")
        if self.model_filename:
            from .io.atomic import check_writable

            check_writable(self.model_filename, "the model")
        res = train(list(X), None, client=self.dask_client, **kw)
        return self._store(res, int(res.model.meta.get("n_train", 1)))

    def _store(self, res, n: float) -> CRF:
        """Keep a training result (``model_``, ``history_``, ...); write ``model_filename``."""
        self.model_ = res.model
        self.history_ = [self._record(r, n) for r in res.history]
        self.training_status_ = res.status
        self.training_message_ = res.message
        self.converged_ = bool(res.converged)
        self.n_iter_ = res.iterations
        self.training_seconds_ = res.seconds
        self.effective_passes_ = res.effective_passes
        self.objective_ = res.objective
        self.objective_crfsuite_ = res.objective_crfsuite
        if self.model_filename:
            self.model_.save(self.model_filename)
        return self

    @staticmethod
    def _record(r: dict, n: float) -> dict:
        rec = {
            "iteration": r["iteration"],
            "effective_passes": r["effective_passes"],
            "seconds": r["wall_s"],
            "objective": r["objective"],
            "objective_crfsuite": r["objective"] * n,
            "active_features": r["nnz"],
        }
        for k, v in r.items():
            if k in ("wall_s", "nnz"):
                continue
            if k == "wall_s_with_dev":
                k = "seconds_with_dev"
            rec.setdefault(k, v)
        return rec

    # ------------------------------------------------------------------- tagging
    def _model(self, what: str = "predicting"):
        m = self.__dict__.get("model_")
        if m is None:
            if self.model_filename and os.path.exists(self.model_filename):
                # a crfkit model, or a CRFsuite model (sklearn-crfsuite's, python-crfsuite's,
                # crfsuite learn's) or a CRF++ / Wapiti one, detected by its first bytes
                from .interop import load_any

                m = self.model_ = load_any(self.model_filename)
            else:
                raise _not_fitted(what)
        return m

    def predict(
        self,
        X: Sequences,
        *,
        allowed: Allowed | None = None,
        constraints: str | None = None,
        forbid: Forbid | None = None,
        method: str = "viterbi",
    ) -> list[list[str]]:
        """The most likely label sequence of every sequence in ``X``.

        Optionally under constraints (see :mod:`crfkit.decode`): ``allowed``, per sequence per token
        ``None``, a label (forced) or a set of labels; ``constraints``, ``"bio"`` / ``"iobes"`` /
        ``"bilou"`` (the transitions the scheme rules out); ``forbid``, (previous, label) pairs;
        ``method="posterior"``: per token the label of highest marginal."""
        model = self._model()
        if allowed is None and constraints is None and not forbid and method == "viterbi":
            out = model.tag_dicts(X, self.threads)  # flat feature dicts: no attribute strings built
            if out is not None:
                return out
        F, dense = _split_dense(X, "X")
        A = to_attributes(F, name="X")
        return (
            model.tag(
                A,
                threads=self.threads,
                dense=dense,
                allowed=allowed,
                constraints=constraints,
                forbid=forbid,
                method=method,
            )
            if A
            else []
        )

    def predict_nbest(
        self,
        X: Sequences,
        k: int,
        *,
        allowed: Allowed | None = None,
        constraints: str | None = None,
        forbid: Forbid | None = None,
    ) -> list[list[tuple[list[str], float]]]:
        """The ``k`` most probable label sequences of every sequence in ``X`` with their
        probabilities: per sequence a list of ``(labels, probability)`` pairs, best first (exact;
        constraints as in :meth:`predict`)."""
        model = self._model()
        F, dense = _split_dense(X, "X")
        A = to_attributes(F, name="X")
        if not A:
            return []
        lists = model.nbest(
            A,
            k,
            threads=self.threads,
            dense=dense,
            allowed=allowed,
            constraints=constraints,
            forbid=forbid,
        )
        return [list(nb) for nb in lists]

    def predict_single(self, xseq: Sequence[Token]) -> list[str]:
        """The most likely label sequence of one sequence."""
        return self.predict([xseq])[0]

    def predict_marginals(self, X: Sequences) -> list[list[dict[str, float]]]:
        """Per sequence, per token, ``{label: probability}`` (the node marginals)."""
        model = self._model()
        F, dense = _split_dense(X, "X")
        A = to_attributes(F, name="X")
        if not A:
            return []
        corpus = model.encode(A, dense=dense)
        marg, _ = model.marginals(corpus, self.threads)
        toks = list(map(dict, map(zip, repeat(model.labels), marg.tolist())))
        p = corpus.seq_ptr.tolist()
        return [toks[p[i] : p[i + 1]] for i in range(len(p) - 1)]

    def predict_marginals_single(self, xseq: Sequence[Token]) -> list[dict[str, float]]:
        """``predict_marginals`` for one sequence."""
        return self.predict_marginals([xseq])[0]

    def score(self, X: Sequences, y: LabelSequences) -> float:
        """Token accuracy (fraction of tokens labelled right), as sklearn-crfsuite's ``score``."""
        return flat_accuracy_score(_label_sequences(y, "y"), self.predict(X))

    # ------------------------------------------------------------- introspection
    @property
    def classes_(self) -> list[str]:
        """The labels, in the model's order."""
        return list(self._model("reading classes_").labels)

    @property
    def state_features_(self) -> dict[tuple[str, str], float]:
        """``{(attribute, label): weight}`` for every state feature with a non-zero weight."""
        return {
            k: w
            for k, w in self._model("reading state_features_").state_features().items()
            if w != 0
        }

    @property
    def transition_features_(self) -> dict[tuple[str, str], float]:
        """``{(label_from, label_to): weight}`` for every transition with a non-zero weight."""
        return {
            k: w
            for k, w in self._model("reading transition_features_").transition_features().items()
            if w != 0
        }

    @property
    def attributes_(self) -> list[str]:
        """The attributes that have a feature with non-zero weight (those a saved model keeps)."""
        m = self._model("reading attributes_")
        return m.space.prune(m.weights)[0].attributes

    def explain_weights(self, top: int = 20, labels: Sequence[str] | None = None, **kw):
        """What ``eli5.show_weights`` shows for ``sklearn_crfsuite.CRF``: the transition weights
        and, per label, the ``top`` state features of largest positive and most negative weight, as
        a :class:`crfkit.explain.WeightsExplanation` (renders in Jupyter; ``str()`` is text);
        ``labels``: only these; ``attribute=REGEX``: only matching attributes
        (:meth:`crfkit.model.CRFModel.explain`)."""
        return self._model("explaining weights").explain(top, labels, **kw)

    @property
    def size_(self) -> int:
        """Size in bytes of the model file (non-zero weights only, compressed)."""
        m = self._model("reading size_")
        with tempfile.TemporaryDirectory(prefix="crfkit-size-") as d:
            return m.save(os.path.join(d, "model.crfkit"))
