"""Watching a training run (``crfkit.training.monitor``): the divergence rule (every optimizer stops
as diverged, with a hint; the reference objective f(0) or f(x0) of a warm start, kept in
checkpoints; NaN objectives) and a trace that cannot be written (a warning, the run goes on)."""

from __future__ import annotations

import math
import os
import warnings

import numpy as np
import pytest

import crfkit.train as train_mod
from conftest import markov_corpus
from crfkit.errors import CrfkitError, TrainingDiverged
from crfkit.features.encode import build
from crfkit.objective import Objective, Regularization
from crfkit.optim import stochastic as stoch
from crfkit.optim.stochastic import StochasticResult
from crfkit.train import train
from crfkit.training import checkpoint as ckpt
from crfkit.training.monitor import DIVERGENCE_FACTOR

# ============================================================== divergence


@pytest.mark.parametrize(
    "algorithm,params,hint",
    [
        ("sg", {"eta": 1e300}, "eta="),
        ("asg", {"eta": 1e300}, "eta="),
        ("adagrad", {"eta": 1e300}, "eta="),
        ("pegasos", {"eta": 1e300}, "eta="),
        ("adagrad", {"eta": 1e4}, "eta="),  # finite but a thousand times worse than the start
        ("sag", {"L0": 1e-300}, "sets its own steps"),
        ("saga", {"L0": 1e-300}, "sets its own steps"),
    ],
)
def test_every_stochastic_optimizer_stops_as_diverged(algorithm, params, hint):
    X, Y = markov_corpus(0, 30)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy overflow on the way up
        with pytest.raises(TrainingDiverged) as ei:
            train(
                X,
                Y,
                algorithm=algorithm,
                params=params,
                max_iterations=5,
                l2=0.01 if algorithm == "pegasos" else 0.0,
            )
    e = ei.value
    assert isinstance(e, CrfkitError) and e.status == "diverged" and e.algorithm == algorithm
    assert e.iteration == 1 and hint in str(e) and hint in e.hint
    assert e.history and e.history[-1]["status"] == "diverged"


def test_sgd_l1_divergence_is_a_clear_error():
    # sgd-l1 checks its weights itself (before the driver sees them); the contract is the same
    X, Y = markov_corpus(0, 30)
    with pytest.raises(TrainingDiverged, match="diverged.*eta0") as ei:
        train(X, Y, algorithm="sgd-l1", params={"eta0": 1e300}, max_iterations=3, l1=0.01, l2=0.0)
    assert (
        ei.value.status == "diverged" and ei.value.algorithm == "sgd-l1" and "eta0" in ei.value.hint
    )


@pytest.mark.parametrize("algorithm", ["lbfgs", "owlqn", "sag", "bcd"])
def test_absurd_starting_weights_are_divergence_for_batch_and_stochastic(algorithm):
    # L-BFGS / OWL-QN: NaN at the start (scores overflow); SAG / BCD: an impossible negative
    # objective
    X, Y = markov_corpus(0, 30)
    space, _ = build(X, Y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.raises(TrainingDiverged, match="diverged") as ei:
            train(
                X,
                Y,
                algorithm=algorithm,
                w0=np.full(space.n_features, 1e300),
                max_iterations=3,
                l2=0.0,
                **({"l1": 0.01} if algorithm == "owlqn" else {}),
            )
    if algorithm in ("lbfgs", "owlqn"):
        assert "line search" in ei.value.hint


def test_objective_at_zero_is_the_uniform_log_partition_whatever_n():
    # the divergence rule's reference: f(0) = (tokens / sequences) * log(labels), nothing about n
    # itself
    X, Y = markov_corpus(3, 40)
    for k in (10, 40):
        space, corpus = build(X[:k], Y[:k], support="all")
        obj = Objective(corpus, space, Regularization(l2=0.5))
        f0 = obj.value(np.zeros(space.n_features), count=False)
        assert f0 == pytest.approx(corpus.n_tokens / k * math.log(space.n_labels), rel=1e-12)
        w = train_mod.DivergenceWatch(obj, obj.reg, corpus, space, None)
        assert w.f_uniform == pytest.approx(f0, rel=1e-12)
        # observed transitions only: missing transitions have weight 0, not -inf, so f(0) is the
        # same
        space2, corpus2 = build(X[:k], Y[:k])
        f0b = Objective(corpus2, space2, Regularization()).value(
            np.zeros(space2.n_features), count=False
        )
        assert f0b == pytest.approx(f0, rel=1e-12)


class _Scripted:
    """A stochastic optimizer that reports the objectives it is given (weights stay finite)."""

    def __init__(self, fs, x_bad_at=None):
        self.fs, self.x_bad_at = list(fs), x_bad_at

    def __call__(self, obj, x0, *, reg, max_iterations, callback, seed, state=None, monitor=True):
        x = np.zeros(obj.space.n_features)
        for k, f in enumerate(self.fs, 1):
            if self.x_bad_at == k:
                x[0] = np.inf
            if callback({"iteration": k, "f": f, "x": x, "step": 0.1}):
                return StochasticResult(x=x, f=f, status="stopped", message="stopped", iterations=k)
        return StochasticResult(
            x=x,
            f=self.fs[-1] if not math.isnan(self.fs[-1]) else 1.0,
            status="max_iterations",
            message="done",
            iterations=len(self.fs),
        )


@pytest.fixture
def scripted(monkeypatch):
    def install(fn):
        import crfkit.training.config as config_mod  # where the driver checks the name

        monkeypatch.setattr(train_mod, "ALGORITHMS", train_mod.ALGORITHMS + ("scripted",))
        monkeypatch.setattr(config_mod, "ALGORITHMS", train_mod.ALGORITHMS)
        real = stoch.resolve
        monkeypatch.setattr(stoch, "resolve", lambda name: fn if name == "scripted" else real(name))

    return install


def test_the_growth_rule_fires_above_the_factor_and_not_below(scripted):
    X, Y = markov_corpus(1, 20)
    space, corpus = build(X, Y)
    ref = corpus.n_tokens / len(X) * math.log(space.n_labels)
    # just below the limit: a bad run, but not diverged (e.g. sgd-l1 eta0=100 recovered from 81x)
    scripted(_Scripted([0.5 * ref, 0.999 * DIVERGENCE_FACTOR * ref, 0.3 * ref]))
    res = train(X, Y, algorithm="scripted", max_iterations=3)
    assert res.status == "max_iterations"
    scripted(_Scripted([0.5 * ref, 1.001 * DIVERGENCE_FACTOR * ref, 0.3 * ref]))
    with pytest.raises(TrainingDiverged, match="iteration 2") as ei:
        train(X, Y, algorithm="scripted", max_iterations=3)
    assert ei.value.limit == pytest.approx(DIVERGENCE_FACTOR * ref)
    assert len(ei.value.history) == 2  # the run stopped there


def test_nan_objective_counts_unless_monitoring_is_off(scripted):
    X, Y = markov_corpus(1, 20)
    scripted(_Scripted([1.0, float("nan"), 1.0]))
    with pytest.raises(TrainingDiverged, match="NaN"):
        train(X, Y, algorithm="scripted", max_iterations=3)
    # monitor=False: NaN means "not evaluated"; the weights are still checked at every epoch
    res = train(X, Y, algorithm="scripted", max_iterations=3, params={"monitor": False})
    assert res.status == "max_iterations"
    scripted(_Scripted([float("nan"), float("nan"), 1.0], x_bad_at=2))
    with pytest.raises(TrainingDiverged, match="weights are no longer finite"):
        train(X, Y, algorithm="scripted", max_iterations=3, params={"monitor": False})


def test_warm_start_far_from_zero_is_not_divergence(scripted):
    # the reference is max(f(0), f(x0)): a start worse than the limit computed from f(0) is allowed
    X, Y = markov_corpus(1, 20)
    space, corpus = build(X, Y)
    w0 = np.zeros(space.n_features)
    w0[space.n_state :] = 3000.0 * np.sign(
        np.arange(space.n_trans) % 2 - 0.5
    )  # transitions that fight y
    f_x0 = Objective(corpus, space, Regularization(l2=2 / len(X))).value(w0, count=False)
    ref = corpus.n_tokens / len(X) * math.log(space.n_labels)
    assert f_x0 > 2 * DIVERGENCE_FACTOR * ref
    scripted(_Scripted([0.9 * f_x0, 0.5 * f_x0]))
    res = train(X, Y, algorithm="scripted", max_iterations=2, w0=w0)
    assert res.status == "max_iterations"


def test_checkpoint_keeps_the_divergence_reference_for_resume(tmp_path, scripted):
    X, Y = markov_corpus(1, 20)
    space, corpus = build(X, Y)
    w0 = np.zeros(space.n_features)
    w0[space.n_state :] = 3000.0 * np.sign(np.arange(space.n_trans) % 2 - 0.5)
    f_x0 = Objective(corpus, space, Regularization(l2=2 / len(X))).value(w0, count=False)
    ck = tmp_path / "warm.ckpt"
    train(X, Y, max_iterations=2, w0=w0, checkpoint=ck)
    assert ckpt.load(ck).extra["f_start"] == pytest.approx(f_x0, rel=1e-12)
    train(X, Y, max_iterations=2, checkpoint=tmp_path / "zero.ckpt")
    assert ckpt.load(tmp_path / "zero.ckpt").extra["f_start"] == 0.0
    # a resumed run judges by the same reference: f(x0) of the warm start, not f(0)
    watch = train_mod.DivergenceWatch(None, None, corpus, space, None, f_start=f_x0)
    assert watch.check(0.9 * DIVERGENCE_FACTOR * f_x0, None) is None
    assert "more than 1000 times" in watch.check(1.1 * DIVERGENCE_FACTOR * f_x0, None)


# ============================================================== the trace


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_trace_on_a_full_disk_is_a_warning_not_the_end_of_the_run():
    X, Y = markov_corpus(2, 10)
    with pytest.warns(
        RuntimeWarning, match="the trace /dev/full could not be written at iteration 1"
    ):
        res = train(X, Y, max_iterations=3, trace="/dev/full")
    assert res.iterations == 3 and len(res.history) == 3
