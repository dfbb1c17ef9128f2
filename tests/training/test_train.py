"""train(): accuracy on a learnable corpus, the JSON trace, effective passes, stopping,
conventions."""

from __future__ import annotations

import json

import numpy as np
import pytest

import crfkit.objective as objective_mod
from conftest import markov_corpus
from crfkit.features.encode import build
from crfkit.model import CRFModel
from crfkit.objective import Objective, Regularization
from crfkit.train import train
from crfkit.training import train_corpus

TRACE_KEYS = {
    "algorithm",
    "iteration",
    "effective_passes",
    "wall_s",
    "objective",
    "grad_inf_norm",
    "nnz",
}
LABELS = ["A", "B", "C"]


def learnable(seed, n_seq=60):
    """Labels from a Markov chain; each token has its label's signature attribute 90% of the
    time."""
    return markov_corpus(
        seed,
        n_seq,
        noise=("noise", 20, 2),
        real_range=(0.0, 1.0),
        labels=LABELS,
        lengths=(3, 11),
        sig_p=0.9,
        real_p=0.5,
    )


def accuracy(model, X, Y):
    pred = model.tag(X)
    flat_p = [p for s in pred for p in s]
    flat_y = [y for s in Y for y in s]
    return float(np.mean([a == b for a, b in zip(flat_p, flat_y)]))


def test_training_accuracy_is_high():
    X, Y = learnable(1)
    res = train(X, Y, c2=0.1, max_iterations=100, threads=1)
    assert res.iterations > 3
    assert accuracy(res.model, X, Y) >= 0.92
    Xd, Yd = learnable(2, 40)
    assert accuracy(res.model, Xd, Yd) >= 0.8
    assert res.model.meta["algorithm"] == "lbfgs" and res.model.meta["n_train"] == 60


def test_trace_file_has_one_valid_record_per_iteration(tmp_path):
    X, Y = learnable(3, 40)
    Xd, Yd = learnable(4, 20)
    trace = tmp_path / "sub" / "trace.jsonl"
    res = train(X, Y, c2=1.0, max_iterations=15, X_dev=Xd, Y_dev=Yd, trace=trace, threads=1)
    lines = trace.read_text().splitlines()
    assert len(lines) == res.iterations >= 1
    recs = [json.loads(line) for line in lines]
    prev_passes, prev_wall, prev_obj = 0, 0.0, np.inf
    for k, r in enumerate(recs, start=1):
        assert TRACE_KEYS <= r.keys()
        assert "dev_accuracy" in r and 0.0 <= r["dev_accuracy"] <= 100.0
        assert r["algorithm"] == "lbfgs" and r["iteration"] == k
        # line-search evaluations count as passes (plus the evaluation at the starting point)
        assert r["effective_passes"] >= r["iteration"] + 1
        assert r["effective_passes"] > prev_passes and r["wall_s"] >= prev_wall
        assert r["objective"] <= prev_obj
        assert isinstance(r["nnz"], int) and r["nnz"] > 0
        assert r["grad_inf_norm"] >= 0
        prev_passes, prev_wall, prev_obj = r["effective_passes"], r["wall_s"], r["objective"]
    assert recs == res.history
    last = recs[-1]
    assert last["effective_passes"] == res.effective_passes
    assert last["objective"] == pytest.approx(res.objective, rel=1e-15)
    assert last["nnz"] == np.count_nonzero(res.model.weights)
    # the recorded objective / gradient norm are those of the final weights
    space, corpus = build(X, Y)
    obj = Objective(corpus, space, res.reg)
    f, g = obj.value_and_grad(res.model.weights)
    assert last["objective"] == pytest.approx(f, rel=1e-12)
    assert last["grad_inf_norm"] == pytest.approx(np.abs(g).max(), rel=1e-9)
    # dev accuracy of the last record is the final model's accuracy on the dev set
    assert last["dev_accuracy"] == pytest.approx(100.0 * accuracy(res.model, Xd, Yd), rel=1e-12)
    assert res.objective_crfsuite == pytest.approx(len(X) * res.objective, rel=1e-15)


def test_no_dev_no_dev_keys(tmp_path):
    X, Y = learnable(5, 20)
    res = train(X, Y, max_iterations=4, trace=tmp_path / "t.jsonl", threads=1)
    recs = [json.loads(s) for s in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert len(recs) == res.iterations == 4
    assert all("dev_accuracy" not in r for r in recs)


def test_effective_passes_count_every_evaluation(monkeypatch):
    calls = {"n": 0}
    orig = objective_mod.Objective.value_and_grad

    def counting(self, w):
        calls["n"] += 1
        return orig(self, w)

    monkeypatch.setattr(objective_mod.Objective, "value_and_grad", counting)
    X, Y = learnable(6, 30)
    seen = []
    res = train(
        X,
        Y,
        c2=0.5,
        max_iterations=12,
        threads=1,
        callback=lambda rec: seen.append((rec["iteration"], rec["effective_passes"], calls["n"])),
    )
    assert res.effective_passes == calls["n"] >= res.iterations + 1
    for it, passes, n_calls in seen:
        assert passes == n_calls


def test_max_iterations_and_stop_status():
    X, Y = learnable(7, 20)
    res = train(X, Y, max_iterations=3, threads=1)
    assert res.iterations == 3 and res.status == "max_iterations" and not res.converged
    res = train(X, Y, c2=1.0, max_iterations=1000, epsilon=1e-4, delta=0.0, threads=1)
    assert res.status == "converged" and res.converged
    space, corpus = build(X, Y)
    g = Objective(corpus, space, res.reg).value_and_grad(res.model.weights)[1]
    assert np.linalg.norm(g) / max(1.0, np.linalg.norm(res.model.weights)) <= 1e-4


def test_regularization_convention_reaches_train():
    X, Y = learnable(8, 16)
    n = len(X)
    assert train(X, Y, c2=3.0, max_iterations=1, threads=1).reg.l2 == pytest.approx(6.0 / n)
    assert train(X, Y, rho2=3.0, max_iterations=1, threads=1).reg.l2 == pytest.approx(3.0 / n)
    assert train(X, Y, max_iterations=1, threads=1).reg.l2 == pytest.approx(2.0 / n)
    with pytest.raises(ValueError):
        train(X, Y, c2=1.0, l2=1.0)


def test_same_optimum_in_every_convention():
    """c2 and the equivalent l2 give the same model (the objective is the same up to the factor
    n)."""
    X, Y = learnable(9, 20)
    n = len(X)
    a = train(X, Y, c2=0.7, max_iterations=400, epsilon=1e-9, delta=0.0, threads=1)
    b = train(X, Y, l2=1.4 / n, max_iterations=400, epsilon=1e-9, delta=0.0, threads=1)
    c = train(X, Y, rho2=1.4, max_iterations=400, epsilon=1e-9, delta=0.0, threads=1)
    assert a.objective == pytest.approx(b.objective, rel=1e-12)
    assert c.objective == pytest.approx(b.objective, rel=1e-12)
    np.testing.assert_allclose(a.model.weights, b.model.weights, rtol=1e-12, atol=1e-12)


def test_train_corpus_warm_start_and_bad_algorithm():
    X, Y = learnable(10, 20)
    space, corpus = build(X, Y)
    first = train_corpus(space, corpus, max_iterations=30, threads=1)
    again = train_corpus(space, corpus, max_iterations=30, threads=1, w0=first.model.weights)
    assert again.objective <= first.objective
    with pytest.raises(ValueError):
        train_corpus(space, corpus, algorithm="nope")
    assert isinstance(first.model, CRFModel) and first.model.space is space


def test_l1_training_reaches_the_l1_optimum_or_is_refused():
    X, Y = learnable(3, 40)
    try:
        # stop on optimality, not on CRFsuite's delta rule, which stops before 1e-4 is meaningful
        res = train(X, Y, c1=1.0, c2=0.1, max_iterations=500, threads=1, delta=0.0, epsilon=1e-8)
    except ValueError:
        return  # refusing L1 with an optimizer that cannot do it is fine
    space, corpus = build(X, Y)
    obj = Objective(corpus, space, res.reg)
    w = res.model.weights
    _, g = obj.value_and_grad(w)  # gradient of the smooth part
    l1 = res.reg.l1
    nz = w != 0
    # optimality of f = smooth + l1 |w|_1: g + l1 sign(w) = 0 on the support, |g| <= l1 off it
    viol = np.concatenate(
        [np.abs(g[nz] + l1 * np.sign(w[nz])), np.maximum(np.abs(g[~nz]) - l1, 0.0)]
    )
    assert viol.max() < 1e-4


def test_batch_algorithms_refuse_optimizer_params():
    X, Y = learnable(5, n_seq=10)
    with pytest.raises(ValueError, match="takes no optimizer parameters"):
        train(X, Y, algorithm="lbfgs", params={"eta0": 0.1}, max_iterations=2)


def test_stochastic_registry_offers_only_present_modules():
    import importlib.util

    from crfkit.optim import stochastic
    from crfkit.training import ALGORITHMS

    for name, (mod, fn) in stochastic.REGISTRY.items():
        present = importlib.util.find_spec(mod) is not None
        assert (name in stochastic.available()) == present
        assert (name in ALGORITHMS) == present
        if present:
            assert callable(stochastic.resolve(name))


def test_cli_param_values_are_typed():
    import argparse

    from crfkit.cli.common import param as _param

    assert _param("eta0=0.1") == ("eta0", 0.1)
    assert _param("epochs = 3") == ("epochs", 3)
    assert _param("averaging=true") == ("averaging", True)
    assert _param("penalty=cumulative") == ("penalty", "cumulative")
    with pytest.raises(argparse.ArgumentTypeError):
        _param("eta0")


@pytest.mark.parametrize("algorithm", ["lbfgs", "owlqn", "l2sgd"])
def test_training_runs_with_blas_on_one_thread_and_restores_it(algorithm):
    # the optimizers' vector dots go to BLAS; its idle threads busy-wait after a call and take cores
    # from numba's threads (benchmarks/blas_spin.py), so train_corpus keeps BLAS on one thread
    threadpoolctl = pytest.importorskip("threadpoolctl")

    def blas_threads():  # library -> threads (training may load another BLAS, e.g. scipy's)
        return {
            i["filepath"]: i["num_threads"]
            for i in threadpoolctl.threadpool_info()
            if i["user_api"] == "blas"
        }

    if not blas_threads():
        pytest.skip("numpy loaded no BLAS library that threadpoolctl knows")
    X, Y = learnable(5, 30)
    seen = []
    with threadpoolctl.threadpool_limits(limits=2, user_api="blas"):
        outer = blas_threads()
        res = train(
            X,
            Y,
            c2=0.1,
            c1=0.1 if algorithm == "owlqn" else None,
            algorithm=algorithm,
            max_iterations=3,
            threads=1,
            callback=lambda rec: seen.append(blas_threads()) and None,
        )
        after = blas_threads()
        assert all(after[k] == v for k, v in outer.items())  # restored on the way out
    assert res.iterations == 3 and seen
    for s in seen:
        assert set(outer) <= set(s) and all(v == 1 for v in s.values())


@pytest.mark.parametrize("algorithm", ["lbfgs", "owlqn"])
def test_a_warm_start_leaves_the_callers_weights_alone(algorithm):
    # train_corpus lets L-BFGS / OWL-QN write over the zeros it makes for a run, never over weights
    # given
    X, Y = learnable(5, 30)
    space, corpus = build(X, Y)
    c1 = 0.1 if algorithm == "owlqn" else 0.0
    first = train_corpus(
        space,
        corpus,
        algorithm=algorithm,
        reg=Regularization(l1=c1 / len(X), l2=0.01),
        max_iterations=4,
        threads=1,
    )
    w0 = first.model.weights.copy()
    given = first.model.weights
    again = train_corpus(
        space,
        corpus,
        algorithm=algorithm,
        reg=Regularization(l1=c1 / len(X), l2=0.01),
        max_iterations=8,
        threads=1,
        w0=given,
    )
    assert np.array_equal(given, w0) and not np.array_equal(again.model.weights, w0)
