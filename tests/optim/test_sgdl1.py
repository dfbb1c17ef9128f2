"""SGD-L1 (Tsuruoka et al. 2009): the elastic-net optimum, dense references for the lazy penalties,
Figure 2, schedules, sparsity, resume, interrupts, bad parameters, the tuning helper."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import random_sequences
from crfkit.errors import CrfkitError
from crfkit.features.encode import build
from crfkit.objective import Objective, Regularization
from crfkit.optim import sgdl1
from crfkit.optim.sgdl1 import learning_rate, pass_order, sgd_l1, tune_sgd_l1
from crfkit.train import ALGORITHMS, train, train_corpus


def problem(seed=0, n_seq=40, L=3, n_attr=12, max_len=6, real=False):
    rng = np.random.default_rng(seed)
    X, Y = random_sequences(rng, n_seq, n_labels=L, real=real, n_attr=n_attr, max_len=max_len)
    return X, Y


@pytest.fixture(scope="module")
def small():
    X, Y = problem()
    space, corpus = build(X, Y)
    return X, Y, space, corpus


def run(space, corpus, reg, epochs, **params):
    """sgd_l1 on a fresh objective; returns the result and the weights after every pass."""
    obj = Objective(corpus, space, reg)
    xs = []

    def cb(info):
        xs.append(info["x"].copy())

    res = sgd_l1(obj, None, reg=reg, max_iterations=epochs, callback=cb, **params)
    return res, xs


# ------------------------------------------------------------ plain numpy references
def features_of(space, corpus, i):
    """State features of the attributes in sequence i (each once) and all transitions, plainly."""
    out = set()
    for t in range(corpus.seq_ptr[i], corpus.seq_ptr[i + 1]):
        for e in range(corpus.tok_ptr[t], corpus.tok_ptr[t + 1]):
            a = corpus.attr[e]
            out.update(range(space.attr_ptr[a], space.attr_ptr[a + 1]))
    out.update(range(space.n_state, space.n_features))
    return np.array(sorted(out), dtype=np.int64)


def sample_gradient(obj, i, w):
    _, node, edge = obj.oracle(i, w, 1.0)
    g = np.zeros(len(w))
    obj.apply_gradient(i, node, edge, 1.0, g)
    return g


def rates(schedule, eta0, alpha, n, k):
    if schedule == "inverse":
        return eta0 / (1.0 + k / n)
    if schedule == "exponential":
        return eta0 * alpha ** (k / n)
    return eta0


def dense_reference(space, corpus, reg, epochs, penalty, schedule, eta0, alpha, seed):
    """Every weight updated at every step: naive (subgradient) or clipping (Carpenter), with L2
    shrinkage; or Figure 2 (cumulative) with u and q shrunk with the weights."""
    obj = Objective(corpus, space, reg)
    n, d = corpus.n_sequences, space.n_features
    w = np.zeros(d)
    q = np.zeros(d)
    u = 0.0
    out = []
    k = 0
    for ep in range(epochs):
        for i in pass_order(seed, ep, n):
            eta = rates(schedule, eta0, alpha, n, k)
            g = sample_gradient(obj, i, w)
            shrink = 1.0 - eta * reg.l2
            p = eta * reg.l1
            if penalty == "naive":
                w = shrink * w - eta * g - p * np.sign(w)
            elif penalty == "clipping":
                half = shrink * w - eta * g
                w = np.where(
                    half > 0,
                    np.maximum(0.0, half - p),
                    np.where(half < 0, np.minimum(0.0, half + p), 0.0),
                )
            else:
                u = shrink * u + p
                q = shrink * q
                w = shrink * w
                for f in features_of(space, corpus, i):  # Figure 2, UpdateWeights(j)
                    w[f] -= eta * g[f]
                    z = w[f]  # ApplyPenalty(i)
                    if w[f] > 0:
                        w[f] = max(0.0, w[f] - (u + q[f]))
                    elif w[f] < 0:
                        w[f] = min(0.0, w[f] + (u - q[f]))
                    q[f] += w[f] - z
            k += 1
        out.append(w.copy())
    return out


# ------------------------------------------------------------ the optimum
@pytest.fixture(scope="module")
def optimum(small):
    X, Y, space, corpus = small
    reg = Regularization(l1=0.02, l2=0.05)
    ref = train_corpus(
        space,
        corpus,
        algorithm="owlqn",
        reg=reg,
        gtol=1e-12,
        delta=0.0,
        epsilon=0.0,
        max_iterations=5000,
    )
    return reg, ref.objective, ref.model.weights


def test_cumulative_reaches_the_elastic_net_optimum(small, optimum):
    # a stochastic method with a decaying step: 1000 passes over 40 sequences (40,000 steps);
    # measured 5.9e-9 relative (inverse) and 6.7e-8 (exponential, alpha=0.98)
    X, Y, space, corpus = small
    reg, fstar, wstar = optimum
    for schedule, alpha in (("inverse", 1.0), ("exponential", 0.98)):
        res, _ = run(
            space, corpus, reg, 1000, penalty="cumulative", schedule=schedule, eta0=0.5, alpha=alpha
        )
        assert res.status == "max_iterations" and res.iterations == 1000
        assert res.f == pytest.approx(Objective(corpus, space, reg).value(res.x))
        assert fstar <= res.f * (1 + 1e-12)
        assert (res.f - fstar) / fstar < 1e-6
        np.testing.assert_array_equal(res.x != 0, wstar != 0)  # the same active features
        assert np.abs(res.x - wstar).max() < 2e-3


@pytest.mark.parametrize("penalty", ["naive", "clipping"])
def test_naive_and_clipping_reach_the_optimum_slowly_and_not_its_sparsity(small, optimum, penalty):
    # their error is of the order of the rate eta_k (the noisy per-sample gradient and, for naive,
    # the subgradient of |w| at weights that should be 0), so with eq. (5) it falls like 1/k:
    # measured 1.4e-5 relative after 1000 passes (eta0=0.5), 9e-7 after 8000 (eta0=0.2), and after
    # 16,000 (eta0=0.3, 640,000 steps, about 4 s) 5.0e-7 naive and 4.8e-7 clipping; the weights that
    # are 0 at the optimum are still not 0 (45 non-zeros against 26)
    X, Y, space, corpus = small
    reg, fstar, wstar = optimum
    res, _ = run(space, corpus, reg, 16000, penalty=penalty, schedule="inverse", eta0=0.3)
    assert res.iterations == 16000
    assert fstar <= res.f * (1 + 1e-12)
    assert (res.f - fstar) / fstar < 1e-6
    assert np.abs(res.x - wstar).max() < 1e-3
    assert np.count_nonzero(res.x) > np.count_nonzero(wstar) + 10


def test_pure_l1_optimum(small):
    # l2 = 0 (the paper's setting): not strongly convex, slower; measured 7.4e-7 relative after 1000
    # passes
    X, Y, space, corpus = small
    reg = Regularization(l1=0.02, l2=0.0)
    ref = train_corpus(
        space,
        corpus,
        algorithm="owlqn",
        reg=reg,
        gtol=1e-12,
        delta=0.0,
        epsilon=0.0,
        max_iterations=5000,
    )
    res, _ = run(space, corpus, reg, 1000, penalty="cumulative", schedule="inverse", eta0=0.5)
    assert 0 <= (res.f - ref.objective) / ref.objective < 2e-6
    np.testing.assert_array_equal(res.x != 0, ref.model.weights != 0)


# ------------------------------------------------------------ lazy == dense references
@pytest.mark.parametrize("schedule", ["exponential", "inverse", "constant"])
@pytest.mark.parametrize("l2", [0.0, 0.3])
def test_lazy_clipping_equals_dense_clipping(small, schedule, l2):
    X, Y, space, corpus = small
    reg = Regularization(l1=0.05, l2=l2)
    kw = dict(schedule=schedule, eta0=0.5, alpha=0.8, seed=3)
    _, xs = run(space, corpus, reg, 4, penalty="clipping", **kw)
    ref = dense_reference(space, corpus, reg, 4, "clipping", **kw)
    for a, b in zip(xs, ref):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-11)
        np.testing.assert_array_equal(a == 0, b == 0)
    assert np.count_nonzero(ref[-1] == 0) >= 5  # the clipping did something


@pytest.mark.parametrize("l2", [0.0, 0.3])
def test_cumulative_follows_figure_2(small, l2):
    X, Y, space, corpus = small
    reg = Regularization(l1=0.05, l2=l2)
    kw = dict(schedule="exponential", eta0=0.5, alpha=0.85, seed=1)
    _, xs = run(space, corpus, reg, 4, penalty="cumulative", **kw)
    ref = dense_reference(space, corpus, reg, 4, "cumulative", **kw)
    for a, b in zip(xs, ref):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-11)
        np.testing.assert_array_equal(a == 0, b == 0)


def test_lazy_naive_equals_dense_naive_with_a_constant_rate(small):
    X, Y, space, corpus = small
    reg = Regularization(l1=0.05, l2=0.0)
    kw = dict(schedule="constant", eta0=0.3, alpha=1.0, seed=2)
    _, xs = run(space, corpus, reg, 4, penalty="naive", **kw)
    ref = dense_reference(space, corpus, reg, 4, "naive", **kw)
    for a, b in zip(xs, ref):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-10)


def test_lazy_naive_is_close_to_dense_naive_with_decay_and_l2(small):
    # decaying rate or L2: a weight that reaches zero between two uses is placed with the mean
    # per-step penalty; the difference stays of the order of one step's penalty eta0 * l1 = 0.015
    X, Y, space, corpus = small
    reg = Regularization(l1=0.05, l2=0.3)
    kw = dict(schedule="exponential", eta0=0.3, alpha=0.8, seed=2)
    _, xs = run(space, corpus, reg, 4, penalty="naive", **kw)
    ref = dense_reference(space, corpus, reg, 4, "naive", **kw)
    assert np.abs(xs[-1] - ref[-1]).max() < 0.015
    assert np.count_nonzero(ref[-1]) == np.count_nonzero(xs[-1])


# ------------------------------------------------------------ sparsity
def test_naive_keeps_many_more_nonzeros_than_cumulative():
    X, Y = problem(seed=5, n_seq=60, n_attr=40)
    space, corpus = build(X, Y)
    reg = Regularization(l1=0.05, l2=0.0)
    nnz = {}
    for penalty in ("naive", "clipping", "cumulative"):
        res, _ = run(space, corpus, reg, 30, penalty=penalty, eta0=0.5)
        nnz[penalty] = np.count_nonzero(res.x)
    assert nnz["naive"] >= 2 * nnz["cumulative"]
    assert nnz["naive"] >= nnz["clipping"] > nnz["cumulative"]


# ------------------------------------------------------------ schedules
def test_schedules_eq5_eq6():
    n = 100
    k = np.array([0, 1, 50, 100, 250, 3000])
    np.testing.assert_allclose(
        learning_rate(k, n, schedule="inverse", eta0=0.5), 0.5 / (1 + k / 100)
    )
    np.testing.assert_allclose(
        learning_rate(k, n, schedule="exponential", eta0=0.5, alpha=0.85), 0.5 * 0.85 ** (k / 100)
    )
    assert learning_rate(200, n, schedule="exponential", eta0=1.0, alpha=0.8) == pytest.approx(0.64)
    assert learning_rate(100, n, schedule="inverse", eta0=1.0) == pytest.approx(0.5)
    np.testing.assert_allclose(learning_rate(k, n, schedule="constant", eta0=0.3), 0.3)
    # the kernel's rate is the same function
    from crfkit.kernels import sgdl1 as K

    for kk in k:
        assert K.rate(K.INVERSE, 0.5, 0.0, int(kk), n) == pytest.approx(
            0.5 / (1 + kk / n), rel=1e-14
        )
        assert K.rate(K.EXPONENTIAL, 0.5, 0.85, int(kk), n) == pytest.approx(
            0.5 * 0.85 ** (kk / n), rel=1e-14
        )


def test_step_reported_is_the_last_rate(small):
    X, Y, space, corpus = small
    n = corpus.n_sequences
    steps = []
    obj = Objective(corpus, space, Regularization(l1=0.01))
    sgd_l1(
        obj,
        None,
        reg=obj.reg,
        max_iterations=3,
        schedule="exponential",
        eta0=0.2,
        alpha=0.9,
        callback=lambda info: steps.append(info["step"]),
    )
    np.testing.assert_allclose(
        steps, [0.2 * 0.9 ** ((e * n - 1) / n) for e in (1, 2, 3)], rtol=1e-12
    )
    assert obj.n_oracle == 3 * n and obj.n_full == 0  # monitoring is not counted


def test_pass_order_is_a_seeded_permutation():
    a = pass_order(7, 0, 50)
    assert sorted(a) == list(range(50))
    np.testing.assert_array_equal(a, pass_order(7, 0, 50))
    assert not np.array_equal(a, pass_order(7, 1, 50))
    assert not np.array_equal(a, pass_order(8, 0, 50))


# ------------------------------------------------------------ protocol: resume, interrupt, train()
@pytest.mark.parametrize("penalty", ["naive", "clipping", "cumulative"])
def test_resume_equals_uninterrupted(small, penalty):
    X, Y, space, corpus = small
    reg = Regularization(l1=0.03, l2=0.1)
    kw = dict(penalty=penalty, schedule="exponential", eta0=0.5, alpha=0.85, seed=4)
    full, xs = run(space, corpus, reg, 6, **kw)
    states = {}
    obj = Objective(corpus, space, reg)

    def keep(info):
        states[info["iteration"]] = info["state"]()

    first = sgd_l1(obj, None, reg=reg, max_iterations=3, callback=keep, **kw)
    assert first.iterations == 3 and first.state["iteration"] == 3
    obj2 = Objective(corpus, space, reg)
    rest = sgd_l1(obj2, None, reg=reg, max_iterations=6, state=states[3], **kw)
    assert rest.iterations == 6
    np.testing.assert_array_equal(rest.x, full.x)
    np.testing.assert_array_equal(first.x, xs[2])
    assert obj2.n_oracle == 3 * corpus.n_sequences
    # a state made with other settings is refused
    with pytest.raises(ValueError, match="other settings"):
        sgd_l1(
            Objective(corpus, space, reg),
            None,
            reg=reg,
            max_iterations=6,
            state=states[3],
            **dict(kw, eta0=0.2),
        )


def test_keyboard_interrupt_returns_the_last_pass(small):
    X, Y, space, corpus = small
    reg = Regularization(l1=0.03)
    seen = []

    def cb(info):
        seen.append(info["x"].copy())
        if info["iteration"] == 2:
            raise KeyboardInterrupt

    res = sgd_l1(Objective(corpus, space, reg), None, reg=reg, max_iterations=5, callback=cb)
    assert res.status == "interrupted" and res.iterations == 2
    np.testing.assert_array_equal(res.x, seen[1])
    assert res.state["iteration"] == 2


def test_callback_stops_and_reports_protocol_keys(small):
    X, Y, space, corpus = small
    reg = Regularization(l1=0.03)
    recs = []
    obj = Objective(corpus, space, reg)
    # info["x"] is the run's own weights, valid until the callback returns: kept as a copy
    res = sgd_l1(
        obj,
        None,
        reg=reg,
        max_iterations=10,
        callback=lambda i: recs.append(dict(i, x=i["x"].copy())) or i["iteration"] == 2,
    )
    assert res.status == "stopped" and res.iterations == 2
    for r in recs:
        for key in ("iteration", "f", "x", "step", "nnz", "state"):
            assert key in r
        assert r["nnz"] == np.count_nonzero(r["x"])
        assert r["f"] == pytest.approx(obj.value(r["x"], count=False), rel=1e-12)


def test_through_train(small):
    X, Y, space, corpus = small
    assert "sgd-l1" in ALGORITHMS
    res = train(
        X,
        Y,
        algorithm="sgd-l1",
        l1=0.02,
        l2=0.0,
        max_iterations=5,
        seed=0,
        params={"penalty": "clipping", "schedule": "inverse", "eta0": 0.5},
    )
    assert res.model.meta["algorithm"] == "sgd-l1" and res.iterations == 5
    assert [h["iteration"] for h in res.history] == [1, 2, 3, 4, 5]
    assert res.history[-1]["nnz"] == np.count_nonzero(res.model.weights)
    assert res.effective_passes == pytest.approx(5.0)
    same = train(
        X,
        Y,
        algorithm="sgd-l1",
        l1=0.02,
        l2=0.0,
        max_iterations=5,
        seed=0,
        params={"penalty": "clipping", "schedule": "inverse", "eta0": 0.5},
    )
    np.testing.assert_array_equal(res.model.weights, same.model.weights)
    other = train(
        X,
        Y,
        algorithm="sgd-l1",
        l1=0.02,
        l2=0.0,
        max_iterations=5,
        seed=1,
        params={"penalty": "clipping", "schedule": "inverse", "eta0": 0.5},
    )
    assert not np.array_equal(res.model.weights, other.model.weights)


# ------------------------------------------------------------ bad parameters
@pytest.mark.parametrize(
    "params, match",
    [
        ({"penalty": "l1"}, "unknown penalty"),
        ({"schedule": "cosine"}, "unknown schedule"),
        ({"eta0": 0.0}, "eta0 must be a positive"),
        ({"eta0": -1.0}, "eta0 must be a positive"),
        ({"eta0": float("nan")}, "eta0 must be a positive"),
        ({"eta0": "fast"}, "must be numbers"),
        ({"alpha": 1.5}, "alpha must be in"),
        ({"alpha": 0.0}, "alpha must be in"),
        ({"eta0": 30.0}, "eta0 \\* l2"),
    ],
)
def test_bad_params_raise(small, params, match):
    X, Y, space, corpus = small
    reg = Regularization(l1=0.01, l2=0.05)
    with pytest.raises(ValueError, match=match):
        sgd_l1(Objective(corpus, space, reg), None, reg=reg, max_iterations=1, **params)


def test_unknown_param_and_dense_features(small):
    X, Y, space, corpus = small
    with pytest.raises(ValueError, match="unexpected keyword"):
        train(X, Y, algorithm="sgd-l1", l1=0.01, max_iterations=1, params={"eta": 0.1})
    obj = Objective(corpus, space, Regularization(l1=0.01))

    class DenseSpace:
        def __init__(self, s):
            self._s = s
            self.n_dense = 2

        def __getattr__(self, name):
            return getattr(self._s, name)

    obj.space = DenseSpace(space)
    with pytest.raises(CrfkitError, match="does not support dense features"):
        sgd_l1(obj, None, reg=obj.reg, max_iterations=1)


def test_divergence_is_a_clear_error(small):
    X, Y, space, corpus = small
    reg = Regularization(l1=0.01)
    with pytest.raises(CrfkitError, match="diverged"):
        sgd_l1(Objective(corpus, space, reg), None, reg=reg, max_iterations=2, eta0=1e300)


# ------------------------------------------------------------ tuning helper
def test_tune_picks_the_best_of_the_grid(small):
    X, Y, space, corpus = small
    reg = Regularization(l1=0.02, l2=0.0)
    obj = Objective(corpus, space, reg)
    out = tune_sgd_l1(obj, sample_size=25, passes=5, seed=0)
    assert out["sample_size"] == 25
    grid = [t for t in out["trials"] if t[1] == 0.85]
    assert [t[0] for t in grid] == list(sgdl1.ETA0_GRID)
    assert out["eta0"] == min(grid, key=lambda t: t[2])[0]
    alphas = [t for t in out["trials"] if t[0] == out["eta0"]]
    assert sorted(t[1] for t in alphas) == sorted(sgdl1.ALPHA_GRID)
    assert out["f"] == min(t[2] for t in alphas)
    assert out["alpha"] == min(alphas, key=lambda t: t[2])[1]
    # each trial is a plain sgd_l1 run on the sample
    idx = np.sort(np.random.default_rng(0).choice(corpus.n_sequences, size=25, replace=False))
    sub = Objective(corpus.subset(idx), space, reg)
    r = sgd_l1(
        sub,
        None,
        reg=reg,
        max_iterations=5,
        eta0=out["eta0"],
        alpha=out["alpha"],
        seed=0,
        monitor=False,
    )
    assert r.f == pytest.approx(out["f"], rel=1e-12)
    # inverse schedule: alpha is not tuned
    inv = tune_sgd_l1(corpus, space, reg=reg, sample_size=1000, passes=3, schedule="inverse")
    assert inv["sample_size"] == corpus.n_sequences and len(inv["trials"]) == len(sgdl1.ETA0_GRID)
    with pytest.raises(ValueError):
        tune_sgd_l1(corpus, space, sample_size=10)


def test_auto_learning_rates_are_the_tuned_ones(small, tmp_path):
    X, Y, space, corpus = small
    reg = Regularization(l1=0.02, l2=0.01)
    out = tune_sgd_l1(Objective(corpus, space, reg), sample_size=25, passes=4, seed=2)
    # eta0 and alpha "auto": the run is the run with the values tune_sgd_l1 picks, bitwise
    auto = sgd_l1(
        Objective(corpus, space, reg),
        None,
        reg=reg,
        max_iterations=4,
        seed=2,
        eta0="auto",
        alpha="auto",
        tune_sample=25,
    )
    fixed = sgd_l1(
        Objective(corpus, space, reg),
        None,
        reg=reg,
        max_iterations=4,
        seed=2,
        eta0=out["eta0"],
        alpha=out["alpha"],
    )
    np.testing.assert_array_equal(auto.x, fixed.x)
    assert f"eta0={out['eta0']:g}, alpha={out['alpha']:g} picked on 25 sequences" in auto.message
    assert auto.state_fn()["settings"]["eta0"] == out["eta0"]
    # eta0 auto only: alpha stays as given; inverse schedule: alpha "auto" is ignored, eta0 tuned
    one = sgd_l1(
        Objective(corpus, space, reg),
        None,
        reg=reg,
        max_iterations=2,
        eta0="auto",
        alpha=0.8,
        tune_sample=25,
        tune_passes=2,
    )
    trials = one.message.split("(")[1]
    assert (
        one.state_fn()["settings"]["alpha"] == 0.8
        and trials.count("alpha=0.8 ") == 4
        and "0.9" not in trials
    )
    inv = sgd_l1(
        Objective(corpus, space, reg),
        None,
        reg=reg,
        max_iterations=2,
        schedule="inverse",
        eta0="auto",
        alpha="auto",
        tune_sample=25,
    )
    assert "alpha" not in inv.message
    # through train / the CLI's -p eta0=auto, with a checkpoint: the resumed run reuses the picked
    # values instead of tuning again, and ends where the uninterrupted run ends
    kw = dict(
        algorithm="sgd-l1", l1=0.02, l2=0.01, seed=1, params={"eta0": "auto", "tune_sample": 20}
    )
    full = train(X, Y, max_iterations=4, **kw)
    ck = tmp_path / "auto.ckpt"
    train(X, Y, max_iterations=2, checkpoint=ck, checkpoint_every=1, **kw)
    rest = train(X, Y, max_iterations=4, resume=ck, **kw)
    np.testing.assert_array_equal(rest.model.weights, full.model.weights)
    for bad, match in (
        ({"tune_sample": 0}, "tune_sample"),
        ({"tune_passes": "x"}, "integers"),
        ({"alpha": "often"}, "numbers"),
    ):
        with pytest.raises(ValueError, match=match):
            sgd_l1(
                Objective(corpus, space, reg), None, reg=reg, max_iterations=1, eta0="auto", **bad
            )


def test_checkpoint_and_resume_through_train(small, tmp_path):
    X, Y, space, corpus = small
    kw = dict(
        algorithm="sgd-l1",
        l1=0.02,
        l2=0.01,
        seed=3,
        params={"penalty": "cumulative", "schedule": "exponential", "eta0": 0.5, "alpha": 0.85},
    )
    full = train(X, Y, max_iterations=6, **kw)
    ck = tmp_path / "sgdl1.ckpt"
    part = train(X, Y, max_iterations=3, checkpoint=ck, checkpoint_every=1, **kw)
    assert part.iterations == 3 and ck.exists()
    rest = train(X, Y, max_iterations=6, resume=ck, **kw)
    assert rest.iterations == 6
    np.testing.assert_array_equal(rest.model.weights, full.model.weights)
    assert [h["iteration"] for h in rest.history] == [1, 2, 3, 4, 5, 6]
