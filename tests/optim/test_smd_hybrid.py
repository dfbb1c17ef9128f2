"""The hybrid deterministic-stochastic method (crfkit.optim.hybrid): the L-BFGS optimum, effective
passes, nested growing batches, resume, warm start, Ctrl-C."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import markov_corpus
from crfkit.errors import ParameterError
from crfkit.features.encode import build
from crfkit.objective import Objective, Regularization
from crfkit.optim.hybrid import hybrid
from crfkit.optim.stochastic import available
from crfkit.train import train

L2 = 0.02


@pytest.fixture(scope="module")
def problem():
    X, Y = markov_corpus(13, 120)
    space, corp = build(X, Y)
    ref = train(
        X,
        Y,
        l2=L2,
        algorithm="lbfgs",
        gtol=1e-12,
        epsilon=0.0,
        delta=0.0,
        max_iterations=2000,
        threads=1,
    )
    return X, Y, space, corp, ref


def objective(problem):
    _, _, space, corp, _ = problem
    return Objective(corp, space, Regularization(l2=L2), threads=1)


def test_reaches_the_lbfgs_optimum(problem):
    ref = problem[4]
    obj = objective(problem)
    passes = []
    res = hybrid(
        obj,
        None,
        reg=obj.reg,
        # a budget of effective passes: the run ends at the rounding floor (the line search finds
        # no decrease on the whole set), after 79 iterations and ~310 passes on a CPU without
        # AVX-512 and in fewer elsewhere (the last bits differ), so 300 was too tight a budget
        max_iterations=1000,
        gtol=1e-9,
        callback=lambda info: passes.append(obj.effective_passes),
    )
    assert res.status == "converged", res.message
    assert res.f == pytest.approx(ref.objective, rel=1e-6)
    # early iterations see a small part of the data: the first five together less than one pass
    assert passes[4] < 1.0
    assert all(b >= a for a, b in zip(passes, passes[1:]))
    assert "batch 120 of 120" in res.message


def test_train_driver_and_passes(problem):
    X, Y = problem[0], problem[1]
    res = train(X, Y, l2=L2, algorithm="hybrid", max_iterations=3, threads=1)
    assert res.effective_passes >= 3 and res.effective_passes < 3 + 1.5
    assert "hybrid" in available()


def test_bitwise_resume_ctrl_c_and_warm_start(problem):
    full = hybrid(
        objective(problem), None, reg=Regularization(l2=L2), max_iterations=4, monitor=False
    )
    states, xs = {}, {}

    def cut(info):
        states[info["iteration"]] = info["state"]()
        xs[info["iteration"]] = info["x"]
        if info["iteration"] == 12:
            raise KeyboardInterrupt

    part = hybrid(
        objective(problem),
        None,
        reg=Regularization(l2=L2),
        max_iterations=4,
        callback=cut,
        monitor=False,
    )
    assert part.status == "interrupted" and part.iterations == 12
    np.testing.assert_array_equal(part.x, xs[12])
    again = hybrid(
        objective(problem),
        None,
        reg=Regularization(l2=L2),
        max_iterations=4,
        state=states[12],
        monitor=False,
    )
    np.testing.assert_array_equal(again.x, full.x)
    assert again.iterations == full.iterations
    warm = hybrid(
        objective(problem), full.x, reg=Regularization(l2=L2), max_iterations=0.05, monitor=False
    )
    cold = hybrid(
        objective(problem), None, reg=Regularization(l2=L2), max_iterations=0.05, monitor=False
    )
    assert warm.f < cold.f


def test_refusals(problem):
    obj = objective(problem)
    with pytest.raises(ParameterError):
        hybrid(obj, None, reg=obj.reg, growth=0.5)
    with pytest.raises(ParameterError):
        hybrid(obj, None, reg=obj.reg, batch0=0)
