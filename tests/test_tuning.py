"""crfkit.tuning: the warm-started regularisation path reaches the cold runs' optima, the path order,
grids, scikit-learn search compatibility of crfkit.CRF, and resuming an interrupted search without
retraining its finished candidates."""

from __future__ import annotations

import json

import numpy as np
import pytest

import crfkit
from conftest import markov_corpus
from crfkit.errors import CrfkitError, ParameterError
from crfkit.estimator import CRF
from crfkit.tuning import CRFSearchCV, parse_grid, path_order

# tight stopping rule: each run converges, so path and cold runs reach the same optimum
TIGHT = dict(epsilon=1e-10, delta=1e-10, max_iterations=2000, threads=1)
GRID = {"c1": [1.0, 0.3], "c2": [1.0, 0.3]}


@pytest.fixture(scope="module")
def corpus():
    return markov_corpus(0, 60)


def _search(warm, state=None, **kw):
    return CRFSearchCV(CRF(**TIGHT), GRID, cv=2, warm_start=warm, state=state, **kw)


def test_path_optima_equal_cold_optima(corpus):
    X, Y = corpus
    path = _search(True).fit(X, Y)
    cold = _search(False).fit(X, Y)
    a = np.array(path.cv_results_["objectives"])
    b = np.array(cold.cv_results_["objectives"])
    assert a.shape == (4, 2)
    assert np.max(np.abs(a - b) / np.abs(b)) < 1e-6
    # the path did warm-start (each candidate but the first from another), the cold runs did not
    assert sorted(path.cv_results_["warm_from"].tolist()) == [-1, 0, 1, 3]
    assert (cold.cv_results_["warm_from"] == -1).all()
    assert path.best_params_ == cold.best_params_
    # scores of the same optima agree (the decoded labels are the same)
    np.testing.assert_allclose(
        path.cv_results_["mean_test_score"], cold.cv_results_["mean_test_score"], atol=1e-9
    )
    # refit: a model of the best setting on all of X
    assert path.best_estimator_.c1 == path.best_params_["c1"]
    assert len(path.predict(X[:3])) == 3


def test_path_order_grid_is_a_snake_from_strong_to_weak():
    cands = [{"c1": a, "c2": b} for a in (0.01, 1.0, 0.1) for b in (0.1, 0.01)]
    order, parent = path_order(cands)
    got = [(cands[i]["c1"], cands[i]["c2"]) for i in order]
    assert got == [(1.0, 0.1), (1.0, 0.01), (0.1, 0.01), (0.1, 0.1), (0.01, 0.1), (0.01, 0.01)]
    # each starts from its neighbour: the previous in the row, or the same c2 in the row before
    assert parent[order[0]] == -1
    for pos in range(1, len(order)):
        i, j = order[pos], parent[order[pos]]
        assert j in order[:pos]
        same_row = cands[i]["c1"] == cands[j]["c1"]
        same_col = cands[i]["c2"] == cands[j]["c2"]
        assert same_row or same_col


def test_path_order_random_candidates_strong_first():
    rng = np.random.default_rng(1)
    cands = [{"c1": float(a), "c2": float(b)} for a, b in rng.exponential([0.5, 0.05], (9, 2))]
    order, parent = path_order(cands)
    assert sorted(order) == list(range(9))
    s = [np.log(cands[i]["c1"]) for i in order]
    assert s[0] == max(s) or parent[order[0]] == -1
    assert parent[order[0]] == -1 and all(parent[i] >= 0 for i in order[1:])
    assert all(order.index(parent[i]) < order.index(i) for i in order[1:])


def test_parse_grid():
    assert parse_grid("0,0.1,1") == [0.0, 0.1, 1.0]
    assert parse_grid("0.001:1:4") == pytest.approx([0.001, 0.01, 0.1, 1.0])
    for bad in ("", "a,b", "-1", "0:1:3", "1:2", "1:10:1"):
        with pytest.raises(ParameterError):
            parse_grid(bad, "--c1")


def test_only_c1_c2_searched(corpus):
    X, Y = corpus
    with pytest.raises(ParameterError, match="min_freq"):
        CRFSearchCV(CRF(), {"c1": [0.1], "min_freq": [1]}).fit(X, Y)


def test_dev_set_search(corpus):
    X, Y = corpus
    s = crfkit.tune(X[:40], Y[:40], c1=[1.0, 0.1], c2=0.1, X_dev=X[40:], y_dev=Y[40:], threads=1)
    assert s.n_splits_ == 1 and len(s.cv_results_["params"]) == 2
    best = s.best_estimator_
    acc = best.score(X[40:], Y[40:])
    assert acc == pytest.approx(s.best_score_)


def test_crf_inside_sklearn_search(corpus):
    sk = pytest.importorskip("sklearn")
    from sklearn.base import clone
    from sklearn.model_selection import GridSearchCV

    X, Y = corpus
    crf = CRF(c1=0.5, c2=0.1, max_iterations=40, threads=1)
    p = crf.get_params()
    assert p["c1"] == 0.5 and p["max_iterations"] == 40
    c = clone(crf)
    assert c is not crf and c.get_params() == p
    assert c.set_params(c1=0.2) is c and c.c1 == 0.2 and crf.c1 == 0.5
    with pytest.raises(ValueError):
        c.set_params(no_such_param=1)
    gs = GridSearchCV(crf, {"c1": [0.01, 1.0], "c2": [0.01, 0.1]}, cv=2)
    gs.fit(X, Y)
    assert gs.best_params_["c1"] in (0.01, 1.0)
    assert 0.5 < gs.best_score_ <= 1.0
    assert gs.score(X, Y) == pytest.approx(gs.best_estimator_.score(X, Y))
    assert sk.__version__


def test_interrupted_search_resumes_without_retraining(corpus, tmp_path, monkeypatch):
    X, Y = corpus
    state = tmp_path / "search.jsonl"
    full = _search(True).fit(X, Y)
    real = CRFSearchCV._train_fold
    calls = []

    def interrupt_after_two_candidates(*a):
        if len(calls) == 2 * 2:  # 2 candidates x 2 folds finished: Ctrl-C in the third
            raise KeyboardInterrupt
        calls.append(a[4] is not None)
        return real(*a)

    monkeypatch.setattr(CRFSearchCV, "_train_fold", staticmethod(interrupt_after_two_candidates))
    with pytest.raises(KeyboardInterrupt):
        _search(True, state=state).fit(X, Y)
    lines = state.read_text().splitlines()
    assert len(lines) == 3 and json.loads(lines[0])["crfkit_tune"] == 1
    finished = [json.loads(x)["index"] for x in lines[1:]]
    assert finished == full.path_[:2]
    assert (tmp_path / "search.jsonl.best.crfkit").exists()

    trained = []

    def count(*a):
        trained.append(a)
        return real(*a)

    monkeypatch.setattr(CRFSearchCV, "_train_fold", staticmethod(count))
    again = _search(True, state=state, refit=False).fit(X, Y)
    assert len(trained) == 2 * 2  # only the two unfinished candidates, on both folds
    assert again.cv_results_["resumed"].tolist() == [i in finished for i in range(4)]
    np.testing.assert_array_equal(
        again.cv_results_["mean_test_score"], full.cv_results_["mean_test_score"]
    )
    np.testing.assert_array_equal(again.cv_results_["iterations"], full.cv_results_["iterations"])


def test_state_of_another_search_is_refused(corpus, tmp_path):
    X, Y = corpus
    state = tmp_path / "s.jsonl"
    CRFSearchCV(CRF(max_iterations=5, threads=1), {"c1": [1.0]}, cv=2, state=state).fit(X, Y)
    with pytest.raises(CrfkitError, match="another search"):
        CRFSearchCV(CRF(max_iterations=5, threads=1), {"c1": [0.5]}, cv=2, state=state).fit(X, Y)
    state.write_text("garbage\n")
    with pytest.raises(CrfkitError, match="state file"):
        CRFSearchCV(CRF(max_iterations=5, threads=1), {"c1": [0.5]}, cv=2, state=state).fit(X, Y)


def test_distributions_drawn_as_randomized_search(corpus):
    pytest.importorskip("sklearn")
    import scipy.stats
    from sklearn.model_selection import ParameterSampler

    X, Y = corpus
    dist = {"c1": scipy.stats.expon(scale=0.5), "c2": scipy.stats.expon(scale=0.05)}
    s = CRFSearchCV(
        CRF(max_iterations=5, threads=1), dist, n_iter=3, random_state=0, cv=2, refit=False
    ).fit(X, Y)
    want = [{k: float(v) for k, v in p.items()} for p in ParameterSampler(dist, 3, random_state=0)]
    assert s.cv_results_["params"] == want
    # strongest first, the others warm-started
    assert (s.cv_results_["warm_from"] >= 0).sum() == 2
    with pytest.raises(ParameterError, match="n_iter"):
        CRFSearchCV(CRF(), dist).fit(X, Y)


def test_warm_max_iterations_caps_only_warm_candidates(corpus):
    X, Y = corpus
    s = CRFSearchCV(
        CRF(max_iterations=20, threads=1), GRID, cv=2, refit=False, warm_max_iterations=3
    ).fit(X, Y)
    r = s.cv_results_
    first = s.path_[0]
    assert r["warm_from"][first] == -1 and r["iterations"][first] > 2 * 3
    assert all(r["iterations"][i] <= 2 * 3 for i in s.path_[1:])


def test_folds_in_worker_processes_give_the_same_search(corpus, tmp_path):
    """n_jobs=2: a candidate's folds train at once in two spawned processes; the same candidates,
    iterations, objectives and scores as one process (threads=1 both ways: the same runs), the same
    best model, and the resume file written as before."""
    X, Y = corpus
    one = _search(True).fit(X, Y)
    state = tmp_path / "s.jsonl"
    two = _search(True, state=state, n_jobs=2).fit(X, Y)
    for key in ("iterations", "warm_from", "mean_test_score", "rank_test_score"):
        np.testing.assert_array_equal(two.cv_results_[key], one.cv_results_[key])
    np.testing.assert_allclose(
        np.array(two.cv_results_["objectives"]), np.array(one.cv_results_["objectives"]), rtol=1e-12
    )
    assert two.best_params_ == one.best_params_
    np.testing.assert_allclose(
        two.best_estimator_.model_.weights,
        one.best_estimator_.model_.weights,
        rtol=1e-9,
        atol=1e-12,
    )
    assert state.exists() and (tmp_path / "s.jsonl.best.crfkit").exists()
    # resumed with n_jobs=2: nothing retrained
    again = _search(True, state=state, n_jobs=2).fit(X, Y)
    assert again.cv_results_["resumed"].all()
    with pytest.raises(ParameterError, match="n_jobs"):
        _search(True, n_jobs=0).fit(X, Y)


def _dicts(X):
    """The markov corpus's tokens as sklearn-crfsuite feature dicts (strings and real values)."""
    out = []
    for seq in X:
        s = []
        for tok in seq:
            d = {}
            for a in tok:
                if isinstance(a, tuple):
                    d[a[0]] = float(a[1])
                else:
                    k, _, v = a.partition("=")
                    d[k] = v
            s.append(d)
        out.append(s)
    return out


def test_dict_lookups_shared_per_fold_give_each_models_own_scores(corpus):
    # every candidate's model on a fold shares one feature-dict memo; each score must still be what
    # that model alone gives on the fold's validation part
    X, Y = corpus
    Xd = _dicts(X)
    seen = []

    def scorer(est, Xv, yv):
        seen.append(est.model_.__dict__.get("_dict_encoder"))
        fresh = CRF(threads=1)
        fresh.model_ = crfkit.CRFModel(est.model_.space, est.model_.weights.copy())
        assert fresh.predict(Xv) == est.predict(Xv)
        return est.score(Xv, yv)

    s = CRFSearchCV(CRF(**TIGHT), GRID, cv=2, scoring=scorer).fit(Xd, Y)
    # 4 candidates x 2 folds: one memo per fold, shared by its 4 models
    assert len(seen) == 8 and None not in seen and len({id(e) for e in seen}) == 2
    assert 0.5 < s.best_score_ <= 1.0
