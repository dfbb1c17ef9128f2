"""SG, ASG, AdaGrad and Pegasos (crfkit.optim.sgd, kernels/sgd.py): lazy kernels against dense numpy
references, convergence to the L-BFGS optimum, resume, refusals."""

from __future__ import annotations

import numpy as np
import pytest
from test_sag import corpus

from crfkit.errors import CrfkitError
from crfkit.features.encode import build
from crfkit.kernels import sag as KS
from crfkit.objective import Objective, Regularization
from crfkit.optim import sag as S
from crfkit.optim import sgd as G
from crfkit.optim.stochastic import resolve
from crfkit.train import train

L2 = 0.05
METHODS = ["sg", "asg", "adagrad", "pegasos"]


@pytest.fixture(scope="module")
def problem():
    X, Y = corpus(1, n_seq=25)
    space, corp = build(X, Y)
    return X, Y, space, corp


def objective(problem, l2=L2):
    _, _, space, corp = problem
    return Objective(corp, space, Regularization(l2=l2), threads=1)


def dense_reference(obj, method, epochs, eta, seed=0, delta=1.0):
    """The same iterations on a dense weight vector, every coordinate every step (numpy)."""
    n, p, l2 = obj.n, obj.n_features, obj.reg.l2
    rng = S.seed_state(seed)
    w, G2, avg = np.zeros(p), np.zeros(p), np.zeros(p)
    t = 0
    out = []
    for _ in range(epochs):
        for _ in range(n):
            t += 1
            i = KS.rng_below(rng, n)
            _, node, edge = obj.oracle(i, w)
            g = np.zeros(p)
            obj.apply_gradient(i, node, edge, 1.0, g)
            if method == "adagrad":
                G2 += g * g
                a = eta / (delta + np.sqrt(G2))
                w = (w - a * g) / (1 + a * l2)
            else:
                step = eta / (l2 * t) if method == "pegasos" else eta
                w = (1 - step * l2) * w - step * g
            avg += w
        out.append(avg / t if method == "asg" else w.copy())
    return out


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("eta", [0.03, 0.3])
def test_lazy_sparse_updates_equal_the_dense_algorithm(problem, method, eta):
    obj = objective(problem)
    seen = []
    resolve(method)(
        obj,
        None,
        reg=obj.reg,
        max_iterations=3,
        seed=4,
        eta=eta,
        callback=lambda info: seen.append(info["x"]),
    )
    ref = dense_reference(objective(problem), method, 3, eta, seed=4)
    assert len(seen) == 3
    for x, r in zip(seen, ref):
        np.testing.assert_allclose(x, r, rtol=1e-9, atol=1e-12)
    assert obj.n_oracle == 3 * obj.n and obj.n_full == 0


# one sequence repeated: every example has the same gradient, so the stochastic gradient has no
# noise and constant-step methods converge to the optimum itself (on different examples they stop at
# a distance of order eta, which the next test measures)
@pytest.mark.parametrize(
    "method,eta,epochs",
    [("sg", 0.5, 150), ("asg", 0.5, 600), ("adagrad", 1.0, 200), ("pegasos", 3.0, 300)],
)
def test_noise_free_problem_reaches_the_lbfgs_optimum(method, eta, epochs):
    X, Y = corpus(2, n_seq=1)
    X, Y = X * 8, Y * 8
    l2 = 0.5
    ref = train(X, Y, l2=l2, algorithm="lbfgs", gtol=1e-11, max_iterations=1000, threads=1)
    res = train(
        X, Y, l2=l2, algorithm=method, params={"eta": eta}, max_iterations=epochs, threads=1
    )
    assert abs(res.objective - ref.objective) <= 1e-6 * ref.objective
    np.testing.assert_allclose(res.model.weights, ref.model.weights, atol=1e-3)


def test_on_noisy_data_the_gap_shrinks_with_eta_and_averaging_helps(problem):
    X, Y, *_ = problem
    fstar = train(
        X, Y, l2=L2, algorithm="lbfgs", gtol=1e-10, max_iterations=1000, threads=1
    ).objective

    def gap(method, eta, epochs=150):
        r = train(
            X, Y, l2=L2, algorithm=method, params={"eta": eta}, max_iterations=epochs, threads=1
        )
        return (r.objective - fstar) / fstar

    assert 0 < gap("sg", 0.03) < gap("sg", 0.3)
    assert 0 < gap("asg", 0.03) < gap("sg", 0.03)
    assert (
        gap("asg", 0.03, 300) < 3e-3
        and gap("adagrad", 0.3, 300) < 1e-2
        and gap("pegasos", 1.0, 300) < 1e-2
    )


@pytest.mark.parametrize("method", METHODS)
def test_resume_from_state_is_bitwise_the_uninterrupted_run(problem, method):
    fn = resolve(method)
    obj = objective(problem)
    full = fn(obj, None, reg=obj.reg, max_iterations=5, seed=2, eta=0.1)
    obj1 = objective(problem)
    half = fn(obj1, None, reg=obj1.reg, max_iterations=2, seed=2, eta=0.1)
    obj2 = objective(problem)
    rest = fn(obj2, None, reg=obj2.reg, max_iterations=5, seed=7, eta=0.1, state=half.state)
    assert rest.iterations == 5 and np.array_equal(rest.x, full.x)


def test_train_checkpoint_and_resume(problem, tmp_path):
    X, Y, *_ = problem
    full = train(X, Y, l2=L2, algorithm="asg", max_iterations=4, threads=1, params={"eta": 0.1})
    train(
        X,
        Y,
        l2=L2,
        algorithm="asg",
        max_iterations=2,
        threads=1,
        params={"eta": 0.1},
        checkpoint=tmp_path / "c.ckpt",
    )
    res = train(
        X,
        Y,
        l2=L2,
        algorithm="asg",
        max_iterations=4,
        threads=1,
        params={"eta": 0.1},
        resume=tmp_path / "c.ckpt",
    )
    assert np.array_equal(res.model.weights, full.model.weights)
    assert res.effective_passes == full.effective_passes == 4


def test_interrupt_returns_the_last_pass(problem):
    obj = objective(problem)
    xs = []

    def cb(info):
        xs.append(info["x"])
        if info["iteration"] == 2:
            raise KeyboardInterrupt

    res = G.adagrad(obj, None, reg=obj.reg, max_iterations=10, callback=cb)
    assert res.status == "interrupted" and res.iterations == 2 and np.array_equal(res.x, xs[-1])


def test_refusals(problem):
    obj = objective(problem)
    with pytest.raises(ValueError, match="asg"):
        G.asg(obj, None, reg=Regularization(l1=0.1, l2=L2), max_iterations=1)
    with pytest.raises(TypeError):
        G.sg(obj, None, reg=obj.reg, max_iterations=1, eta0=0.1)
    with pytest.raises(CrfkitError, match="eta"):
        G.sg(obj, None, reg=obj.reg, max_iterations=1, eta=1.0 / L2)
    with pytest.raises(ValueError, match="pegasos needs l2"):
        G.pegasos(obj, None, reg=Regularization(l2=0.0), max_iterations=1)
    obj.space.n_dense = 3
    try:
        with pytest.raises(CrfkitError, match="adagrad does not support dense features"):
            G.adagrad(obj, None, reg=obj.reg, max_iterations=1)
    finally:
        obj.space.n_dense = 0
