"""crfkit.CRF, the scikit-learn estimator: equivalence with crfkit.train and with python-crfsuite,
the scikit-learn protocol (params, clone, GridSearchCV), pickling, history, errors."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import warnings

import numpy as np
import pytest

import crfkit
import crfkit.train
import crfkit.train as train_mod
from conftest import markov_corpus
from crfkit.errors import DataError, OutputError, TrainingDiverged
from crfkit.estimator import (
    CRF,
    flat_accuracy_score,
    flat_f1_score,
    make_scorer,
    sequence_accuracy_score,
)
from crfkit.features.dicts import to_attributes
from crfkit.model import StringTable

LABELS = ["B-X", "I-X", "O"]


def dict_corpus(seed: int, n: int = 40):
    """Token-feature dicts in the sklearn-crfsuite style (str, float, bool, nested dict, list) and
    labels.

    Labels follow a Markov chain; a token's word comes from its label's
    vocabulary 70% of the time, so the features are informative but noisy.
    Values are non-negative (CRFsuite drops features whose summed value is
    negative; crfkit does not).
    """
    rng = np.random.default_rng(seed)
    P = np.array([[0.1, 0.6, 0.3], [0.2, 0.4, 0.4], [0.3, 0.05, 0.65]])
    words = {lab: [f"{lab.lower()}{k}" for k in range(6)] for lab in LABELS}
    X, Y = [], []
    for _ in range(n):
        T = int(rng.integers(2, 9))
        s = int(rng.integers(3))
        ys = []
        for _t in range(T):
            ys.append(LABELS[s])
            s = int(rng.choice(3, p=P[s]))
        ws = [
            str(
                rng.choice(
                    words[lab] if rng.random() > 0.3 else words[LABELS[int(rng.integers(3))]]
                )
            )
            for lab in ys
        ]
        xs = []
        for t, w in enumerate(ws):
            f = {
                "bias": 1.0,
                "w": w,
                "suf": w[-1],
                "cap": bool(rng.random() < 0.5),
                "len": len(w) / 3,
                "ctx": {"prev": ws[t - 1] if t else "<s>"},
                "tags": [f"t{rng.integers(3)}"],
            }
            if t == 0:
                f["BOS"] = True
            xs.append(f)
        X.append(xs)
        Y.append(ys)
    return X, Y


@pytest.fixture(scope="module")
def data():
    X, Y = dict_corpus(0)
    Xt, Yt = dict_corpus(1, 20)
    return X, Y, Xt, Yt


@pytest.fixture(scope="module")
def fitted(data):
    X, Y, _, _ = data
    return CRF(c2=0.5, max_iterations=200).fit(X, Y)


# ------------------------------------------------------------------ equivalences
def test_same_model_as_crfkit_train_on_converted_attributes(data, fitted):
    X, Y, Xt, _ = data
    res = crfkit.train.train(to_attributes(X), Y, **fitted._train_kwargs())
    assert fitted.objective_ == pytest.approx(res.objective, rel=1e-12)
    assert fitted.n_iter_ == res.iterations and fitted.training_status_ == res.status
    np.testing.assert_allclose(fitted.model_.weights, res.model.weights, rtol=1e-10, atol=1e-12)
    assert fitted.predict(Xt) == res.model.tag(to_attributes(Xt))
    assert fitted.objective_crfsuite_ == pytest.approx(len(X) * fitted.objective_, rel=1e-12)


def _pycrfsuite_reference(X, Y, Xt, params, tmp_path):
    pycrfsuite = pytest.importorskip("pycrfsuite")
    tr = pycrfsuite.Trainer(verbose=False)
    for x, y in zip(X, Y):
        tr.append(x, y)
    tr.set_params({"max_iterations": 5000, "epsilon": 1e-8, "delta": 1e-10, **params})
    path = str(tmp_path / "crfsuite.model")
    tr.train(path)
    tagger = pycrfsuite.Tagger()
    tagger.open(path)
    pred, marg = [], []
    for x in Xt:
        pred.append(tagger.tag(x))
        tagger.set(x)
        marg.append([{lab: tagger.marginal(lab, t) for lab in LABELS} for t in range(len(x))])
    info = tagger.info()
    tagger.close()
    return tr.logparser.last_iteration["loss"], pred, marg, info


@pytest.mark.parametrize("c2, aps, apt", [(1.0, False, False), (0.1, True, True)])
def test_same_predictions_and_marginals_as_python_crfsuite(data, tmp_path, c2, aps, apt):
    # same objective (CRFsuite's sum form, same feature sets), both optimised tightly
    X, Y, Xt, _ = data
    loss, pred, marg, info = _pycrfsuite_reference(
        X,
        Y,
        Xt,
        {"c2": c2, "feature.possible_states": aps, "feature.possible_transitions": apt},
        tmp_path,
    )
    crf = CRF(
        c2=c2, epsilon=1e-8, delta=1e-10, all_possible_states=aps, all_possible_transitions=apt
    )
    crf.fit(X, Y)
    assert crf.objective_crfsuite_ == pytest.approx(loss, rel=1e-6)
    assert crf.predict(Xt) == pred
    ours = crf.predict_marginals(Xt)
    diff = max(
        abs(ours[i][t][lab] - marg[i][t][lab])
        for i in range(len(Xt))
        for t in range(len(Xt[i]))
        for lab in LABELS
    )
    assert diff < 1e-4
    assert set(crf.state_features_) == set(info.state_features)
    assert set(crf.transition_features_) == set(info.transitions)
    assert set(crf.attributes_) == set(info.attributes)
    for k, w in info.state_features.items():
        assert crf.state_features_[k] == pytest.approx(w, rel=1e-3, abs=1e-3)


@pytest.mark.skipif(
    "owlqn" not in crfkit.train.ALGORITHMS, reason="OWL-QN (needed for c1 > 0) not available yet"
)
def test_l1_like_python_crfsuite(data, tmp_path):
    X, Y, Xt, _ = data
    loss, pred, marg, info = _pycrfsuite_reference(X, Y, Xt, {"c1": 0.5, "c2": 0.05}, tmp_path)
    crf = CRF(algorithm="lbfgs", c1=0.5, c2=0.05, epsilon=1e-8, delta=1e-10).fit(X, Y)
    assert crf.objective_crfsuite_ == pytest.approx(loss, rel=1e-5)
    assert crf.predict(Xt) == pred
    assert set(crf.state_features_) == set(info.state_features)  # the same sparsity pattern
    dense = CRF(c2=0.05, max_iterations=300).fit(X, Y)
    assert len(crf.state_features_) < len(dense.state_features_)


# -------------------------------------------------------------- prediction API
def test_predict_variants_agree(data, fitted):
    _, _, Xt, Yt = data
    pred = fitted.predict(Xt)
    assert [fitted.predict_single(x) for x in Xt] == pred
    marg = fitted.predict_marginals(Xt)
    assert [fitted.predict_marginals_single(x) for x in Xt] == marg
    assert [len(m) for m in marg] == [len(x) for x in Xt]
    for seq in marg:
        for tok in seq:
            assert set(tok) == set(LABELS)
            assert sum(tok.values()) == pytest.approx(1.0, abs=1e-9)
    assert fitted.score(Xt, Yt) == pytest.approx(flat_accuracy_score(Yt, pred))
    assert 0.5 < fitted.score(Xt, Yt) <= 1.0
    assert fitted.predict([]) == [] and fitted.predict_marginals([]) == []
    # unknown features are ignored, empty tokens are fine
    assert len(fitted.predict_single([{"never": "seen"}, {}])) == 2


def test_introspection(data, fitted):
    m = fitted.model_
    assert fitted.classes_ == m.labels and sorted(fitted.classes_) == sorted(LABELS)
    assert all(w != 0 for w in fitted.state_features_.values())
    assert len(fitted.state_features_) + len(fitted.transition_features_) == m.n_active
    assert {a for a, _ in fitted.state_features_} == set(fitted.attributes_)
    assert (
        "w:b-x0" in fitted.attributes_
        and "cap" in fitted.attributes_
        and "ctx:prev:<s>" in fitted.attributes_
    )
    assert all(a in LABELS and b in LABELS for a, b in fitted.transition_features_)
    assert isinstance(fitted.size_, int) and fitted.size_ > 100


def test_history(data, fitted):
    h = fitted.history_
    assert len(h) == fitted.n_iter_ > 0
    for k, rec in enumerate(h, start=1):
        assert rec["iteration"] == k
        for key in (
            "iteration",
            "effective_passes",
            "seconds",
            "objective",
            "objective_crfsuite",
            "active_features",
        ):
            assert key in rec
        assert "dev_accuracy" not in rec
    assert all(
        a["seconds"] <= b["seconds"] and a["effective_passes"] < b["effective_passes"]
        for a, b in zip(h, h[1:])
    )
    assert h[-1]["objective"] == pytest.approx(fitted.objective_)
    assert h[-1]["objective_crfsuite"] == pytest.approx(fitted.objective_crfsuite_)
    assert isinstance(fitted.training_status_, str) and isinstance(fitted.converged_, bool)
    assert fitted.converged_ == (
        fitted.training_status_ in ("converged", "delta", "gtol", "stop_value")
    )


def test_dev_scores_in_history(data):
    X, Y, Xt, Yt = data
    crf = CRF(c2=0.5, max_iterations=15).fit(X, Y, X_dev=Xt, y_dev=Yt)
    assert crf.training_status_ == "max_iterations" and not crf.converged_
    assert len(crf.history_) == 15
    for rec in crf.history_:
        assert 0 <= rec["dev_accuracy"] <= 100 and 0 <= rec["dev_f1"] <= 100
    assert crf.history_[-1]["dev_accuracy"] == pytest.approx(100 * crf.score(Xt, Yt))


# -------------------------------------------------------- scikit-learn protocol
def test_get_params_set_params():
    crf = CRF(c1=0.1, c2=0.2, max_iterations=50, all_possible_transitions=True)
    p = crf.get_params()
    assert (
        p["c1"] == 0.1 and p["c2"] == 0.2 and p["max_iterations"] == 50 and p["algorithm"] is None
    )
    for name in (
        "algorithm",
        "c1",
        "c2",
        "max_iterations",
        "all_possible_states",
        "all_possible_transitions",
        "min_freq",
        "epsilon",
        "delta",
        "period",
        "num_memories",
        "verbose",
        "model_filename",
        "keep_tempfiles",
        "threads",
        "trace",
    ):
        assert name in p
    assert crf.set_params(c2=3.0, min_freq=2) is crf
    assert crf.c2 == 3.0 and crf.get_params()["min_freq"] == 2
    with pytest.raises(ValueError, match="Invalid parameter 'C2'"):
        crf.set_params(C2=1.0)
    assert CRF(**crf.get_params()).get_params() == crf.get_params()
    assert repr(CRF(c2=0.5)) == "CRF(c2=0.5)"


def test_sklearn_clone(data, fitted):
    base = pytest.importorskip("sklearn.base")
    c = base.clone(fitted)
    assert c.get_params() == fitted.get_params()
    assert not hasattr(c, "model_") and not hasattr(c, "classes_")
    sk = pytest.importorskip("sklearn.exceptions")
    with pytest.raises(sk.NotFittedError):
        c.predict(data[2])


def test_sklearn_is_not_imported():
    code = (
        "import sys, crfkit; crfkit.CRF(c2=1).get_params(); import crfkit.estimator; "
        "assert 'sklearn' not in sys.modules, 'sklearn imported'; assert 'numba' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_grid_search_over_c2_with_flat_f1(data):
    ms = pytest.importorskip("sklearn.model_selection")
    skm = pytest.importorskip("sklearn.metrics")
    X, Y, Xt, Yt = data
    for scorer in (
        make_scorer(flat_f1_score, average="weighted", labels=["B-X", "I-X"]),
        skm.make_scorer(flat_f1_score, average="weighted", labels=["B-X", "I-X"]),
    ):
        gs = ms.GridSearchCV(CRF(max_iterations=50), {"c2": [0.01, 1.0]}, cv=2, scoring=scorer)
        gs.fit(X, Y)
        assert gs.best_params_["c2"] in (0.01, 1.0)
        scores = gs.cv_results_["mean_test_score"]
        assert len(scores) == 2 and np.all(np.isfinite(scores)) and np.all(scores > 0.3)
        assert gs.best_estimator_.c2 == gs.best_params_["c2"]
        assert len(gs.predict(Xt)) == len(Xt)
    # default scoring is CRF.score (flat accuracy)
    cv = ms.cross_val_score(CRF(max_iterations=30), X, Y, cv=2)
    assert len(cv) == 2 and np.all(cv > 0.3)


def test_sequence_metrics():
    y = [["A", "B"], ["A"]]
    p = [["A", "A"], ["A"]]
    assert flat_accuracy_score(y, p) == pytest.approx(2 / 3)
    assert sequence_accuracy_score(y, p) == pytest.approx(1 / 2)
    pytest.importorskip("sklearn")
    from sklearn.metrics import f1_score

    assert flat_f1_score(y, p, average="macro") == pytest.approx(
        f1_score(["A", "B", "A"], ["A", "A", "A"], average="macro")
    )
    with pytest.raises(DataError, match="sequence 1"):
        flat_accuracy_score(y, [["A", "A"], ["A", "B"]])


# ------------------------------------------------------------ pickle and files
def test_pickle_round_trip(data, fitted):
    _, _, Xt, _ = data
    fitted.classes_  # noqa: B018 - builds the model's lookup tables, which are not pickled
    fitted.predict(Xt)
    blob = pickle.dumps(fitted)
    back = pickle.loads(blob)

    # the lookup tables: the space's dict, or (attributes packed since training,
    # crfkit.model.StringTable) the table's hashes / dict; none travels
    def lookups(space):
        t = space.attributes
        return "attr_index" in space.__dict__ or (
            isinstance(t, StringTable) and (t._dict is not None or t._hash is not None)
        )

    assert lookups(fitted.model_.space) and not lookups(back.model_.space)
    assert back.get_params() == fitted.get_params()
    assert back.predict(Xt) == fitted.predict(Xt)
    assert back.predict_marginals(Xt) == fitted.predict_marginals(Xt)
    assert back.history_ == fitted.history_ and back.training_status_ == fitted.training_status_
    assert back.state_features_ == fitted.state_features_
    unfitted = pickle.loads(pickle.dumps(CRF(c2=2.0)))
    assert unfitted.c2 == 2.0 and not hasattr(unfitted, "model_")


def test_model_filename_saves_and_loads(data, tmp_path):
    X, Y, Xt, _ = data
    path = str(tmp_path / "model.crfkit")
    crf = CRF(max_iterations=20, model_filename=path, keep_tempfiles=True).fit(X, Y)
    assert os.path.exists(path)
    again = CRF(model_filename=path)  # not fitted: predicts with the saved model
    assert again.predict(Xt) == crf.predict(Xt)
    assert again.classes_ == crf.classes_
    assert crf.size_ == os.path.getsize(path)


# ------------------------------------------------------------------------ errors
def test_errors(data, tmp_path):
    X, Y, _, _ = data
    with pytest.raises(DataError, match="X has 40 sequences but y has 39"):
        CRF().fit(X, Y[:-1])
    bad = [list(s) for s in Y]
    bad[3] = bad[3][:-1]
    with pytest.raises(DataError, match="sequence 3"):
        CRF().fit(X, bad)
    Xb = [list(s) for s in X]
    Xb[2] = [dict(t) for t in Xb[2]]
    Xb[2][1]["w"] = None
    with pytest.raises(
        DataError, match=r"X: sequence 2, token 1: feature 'w' has a value of type NoneType"
    ):
        CRF().fit(Xb, Y)
    with pytest.raises(DataError, match=r"X_dev: sequence 2, token 1"):
        CRF().fit(X, Y, X_dev=Xb, y_dev=Y)
    with pytest.raises(DataError, match=r"y: sequence 0, token 0: label 1 is a int"):
        CRF().fit(X, [[1] * len(s) for s in X])
    with pytest.raises(DataError, match="string"):
        CRF().fit(X, ["B-X" * len(s) for s in X])
    with pytest.raises(ValueError, match="both X_dev and y_dev"):
        CRF().fit(X, Y, X_dev=X)
    with pytest.raises(ValueError, match="'perceptron' is not available; crfkit has: lbfgs"):
        CRF(algorithm="perceptron").fit(X, Y)
    assert CRF(algorithm="averaged-perceptron")._algorithm() == "ap"  # CRFsuite's long names
    assert CRF(algorithm="passive-aggressive")._algorithm() == "pa"
    with pytest.raises(ValueError):
        CRF(c2=-1.0).fit(X, Y)
    for method in ("predict", "predict_marginals"):
        with pytest.raises(AttributeError):
            getattr(CRF(), method)(X)
        with pytest.raises(ValueError, match="not fitted"):
            getattr(CRF(model_filename=str(tmp_path / "missing")), method)(X)
    assert not hasattr(CRF(), "classes_")


def test_lazy_export():
    assert crfkit.CRF is CRF
    assert "CRF" in crfkit.__all__


def test_stochastic_algorithm_with_its_params_and_seed():
    X, y = dict_corpus(3, 40)[:2]
    a = CRF(algorithm="asg", algorithm_params={"eta": 0.05}, random_state=1, max_iterations=3).fit(
        X, y
    )
    b = CRF(algorithm="asg", algorithm_params={"eta": 0.05}, random_state=1, max_iterations=3).fit(
        X, y
    )
    c = CRF(algorithm="asg", algorithm_params={"eta": 0.05}, random_state=2, max_iterations=3).fit(
        X, y
    )
    assert a.n_iter_ == 3 and a.model_.meta["algorithm"] == "asg"
    np.testing.assert_array_equal(a.model_.weights, b.model_.weights)  # same seed, same run
    assert not np.array_equal(a.model_.weights, c.model_.weights)
    assert CRF(algorithm_params={"eta": 1}).get_params()["algorithm_params"] == {"eta": 1}
    with pytest.raises(ValueError, match="eta"):
        CRF(algorithm="lbfgs", algorithm_params={"eta": 0.1}).fit(X, y)


def test_estimator_fit_raises_and_keeps_its_previous_model(tmp_path):
    X, Y = markov_corpus(2, 30)
    path = tmp_path / "est.crfkit"
    crf = CRF(
        algorithm="sg", algorithm_params={"eta": 0.1}, max_iterations=3, model_filename=str(path)
    )
    crf.fit(X, Y)
    before, model_before, pred = path.read_bytes(), crf.model_, crf.predict(X[:5])
    crf.set_params(algorithm_params={"eta": 1e300}, c2=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.raises(TrainingDiverged, match="eta=1e\\+300 is too large"):
            crf.fit(X, Y)
    assert crf.model_ is model_before and crf.predict(X[:5]) == pred
    assert path.read_bytes() == before


def test_estimator_refuses_an_unwritable_model_filename_before_training(tmp_path, monkeypatch):
    X, Y = markov_corpus(2, 10)
    called = []
    monkeypatch.setattr(train_mod, "train", lambda *a, **k: called.append(1))
    with pytest.raises(OutputError, match="it is a directory"):
        CRF(model_filename=str(tmp_path)).fit(X, Y)
    assert not called


def test_crf_is_in_dir_crfkit():
    names = dir(crfkit)
    assert "CRF" in names and "CRFModel" in names and "__version__" in names
