"""Resumable training: optimizer state export/import (bitwise resume), checkpoint files,
train(checkpoint=..., resume=...), SIGTERM during training."""
from __future__ import annotations

import numpy as np
import pytest

from crfkit.features.encode import build
from crfkit.objective import Objective, Regularization
from crfkit.optim.lbfgs import lbfgs
from crfkit.optim.owlqn import owlqn

LABELS = ["A", "B", "C"]


def data(seed=0, n_seq=40):
    rng = np.random.default_rng(seed)
    X, Y = [], []
    for _ in range(n_seq):
        T = int(rng.integers(2, 9))
        y = rng.integers(3, size=T)
        x = []
        for lab in y:
            sig = lab if rng.random() < 0.8 else int(rng.integers(3))
            x.append([f"sig={LABELS[sig]}", f"n={int(rng.integers(15))}"])
        X.append(x)
        Y.append([LABELS[k] for k in y])
    return X, Y


@pytest.fixture(scope="module")
def problem():
    X, Y = data()
    space, corpus = build(X, Y)
    return space, corpus


def _run(opt, fg, n, l1, **kw):
    if opt == "lbfgs":
        return lbfgs(fg, np.zeros(n), **kw)
    return owlqn(fg, np.zeros(n), l1, **kw)


def _resume(opt, fg, l1, state, **kw):
    if opt == "lbfgs":
        return lbfgs(fg, None, state=state, **kw)
    return owlqn(fg, None, l1, state=state, **kw)


@pytest.mark.parametrize("opt, l1", [("lbfgs", 0.0), ("owlqn", 0.02)])
@pytest.mark.parametrize("k", [1, 4, 9])
def test_optimizer_resume_is_bitwise(problem, opt, l1, k):
    space, corpus = problem
    obj = Objective(corpus, space, Regularization(l2=0.05))
    kw = dict(m=3, epsilon=1e-9, delta=1e-9, period=3)
    full = _run(opt, obj.value_and_grad, space.n_features, l1, **kw)
    assert full.iterations > k + 3
    states = {}

    def keep(info):
        states[info["iteration"]] = info["state"]()
    _run(opt, obj.value_and_grad, space.n_features, l1, callback=keep, **kw)
    st = states[k]
    assert st["iteration"] == k and len(st["rho"]) == min(k, 3) and len(st["past"]) == min(k + 1, 4)
    res = _resume(opt, obj.value_and_grad, l1, st, **kw)
    assert res.status == full.status
    assert res.iterations == full.iterations
    assert res.n_evals == full.n_evals
    np.testing.assert_array_equal(res.x, full.x)
    assert res.f == full.f


@pytest.mark.parametrize("opt, l1", [("lbfgs", 0.0), ("owlqn", 0.02)])
def test_interrupted_result_state_resumes(problem, opt, l1):
    """A KeyboardInterrupt in the middle of a line search: result.state is the last accepted point."""
    space, corpus = problem
    obj = Objective(corpus, space, Regularization(l2=0.05))
    kw = dict(m=4, epsilon=1e-9, delta=1e-9, period=5)
    full = _run(opt, obj.value_and_grad, space.n_features, l1, **kw)
    calls = [0]

    def fg(w):
        calls[0] += 1
        if calls[0] == 12:
            raise KeyboardInterrupt
        return obj.value_and_grad(w)
    part = _run(opt, fg, space.n_features, l1, **kw)
    assert part.status == "interrupted" and 0 < part.iterations < full.iterations
    assert part.state["iteration"] == part.iterations
    np.testing.assert_array_equal(part.state["x"], part.x)
    res = _resume(opt, obj.value_and_grad, l1, part.state, **kw)
    assert res.iterations == full.iterations and res.status == full.status
    np.testing.assert_array_equal(res.x, full.x)


def test_resumed_state_of_finished_run_stops_at_once(problem):
    space, corpus = problem
    obj = Objective(corpus, space, Regularization(l2=0.05))
    full = lbfgs(obj.value_and_grad, np.zeros(space.n_features), m=3)
    res = lbfgs(obj.value_and_grad, None, state=full.state, m=3)
    assert res.status == full.status and res.iterations == full.iterations
    np.testing.assert_array_equal(res.x, full.x)


def test_state_mismatch_refused(problem):
    space, corpus = problem
    obj = Objective(corpus, space, Regularization(l2=0.05))
    part = lbfgs(obj.value_and_grad, np.zeros(space.n_features), m=3, max_iterations=2)
    with pytest.raises(ValueError, match="m=3"):
        lbfgs(obj.value_and_grad, None, state=part.state, m=5)
