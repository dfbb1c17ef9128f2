"""Stochastic meta-descent (crfkit.optim.smd, kernels/smd.py): the exact Hessian-vector products
against a brute-force covariance and finite differences (scaled and log-domain forward-backward),
the kernel against a dense numpy reference step by step, convergence, resume, warm start, Ctrl-C,
registration, refusals."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from conftest import markov_corpus, random_sequences
from crfkit.errors import CrfkitError, ParameterError
from crfkit.features.encode import build
from crfkit.kernels import sag as KS
from crfkit.kernels import smd as K
from crfkit.objective import Objective, Regularization
from crfkit.optim import sag as S
from crfkit.optim.smd import smd
from crfkit.optim.stochastic import available, resolve
from crfkit.train import train

L2 = 0.05


def make(X, Y, l2=L2):
    space, corp = build(X, Y)
    return Objective(corp, space, Regularization(l2=l2), threads=1)


def tiny_objective(seed=0, n_seq=6, n_labels=3, real=True):
    X, Y = random_sequences(
        np.random.default_rng(seed), n_seq, min_len=1, max_len=5, n_labels=n_labels, real=real
    )
    return make(X, Y)


def path_features(obj, i, path):
    """F(x_i, path) - F(x_i, y_i) as a dense vector, from the gradient routine fed one-hot
    'marginals'."""
    L, p = obj.space.n_labels, obj.n_features
    T = len(path)
    node = np.zeros((T, L))
    node[np.arange(T), path] = 1.0
    edge = np.zeros((L, L))
    for t in range(1, T):
        edge[path[t - 1], path[t]] += 1.0
    g = np.zeros(p)
    obj.apply_gradient(i, node, edge, 1.0, g)
    return g


def brute(obj, i, w, d):
    """nll_i, its gradient and H_i d by enumerating every label path (the covariance of the
    features)."""
    c = obj.corpus
    T = int(c.seq_ptr[i + 1] - c.seq_ptr[i])
    L = obj.space.n_labels
    G = np.array(
        [path_features(obj, i, list(path)) for path in itertools.product(range(L), repeat=T)]
    )
    s = G @ w  # score(path) - score(gold)
    m = s.max()
    lse = m + np.log(np.exp(s - m).sum())
    prob = np.exp(s - lse)
    eg = prob @ G
    gd = G @ d
    hv = (prob * gd) @ G - eg * (prob @ gd)
    return lse, eg, hv


def kernel_hv(obj, i, w, d, force_log=False):
    c, s = obj.corpus, obj.space
    L, p = s.n_labels, obj.n_features
    T = int(c.seq_ptr[i + 1] - c.seq_ptr[i])
    node, dnode = np.empty((max(T, 1), L)), np.empty((max(T, 1), L))
    edge, dedge = np.empty((L, L)), np.empty((L, L))
    loss = K.sequence_hv(
        c.seq_ptr,
        c.tok_ptr,
        c.attr,
        c.val,
        c.y,
        s.attr_ptr,
        s.feat_label,
        s.trans_index,
        w,
        d,
        s.n_state,
        i,
        node,
        dnode,
        edge,
        dedge,
        obj.full_rows,
        force_log,
    )
    g = np.zeros(p)
    obj.apply_gradient(i, node[:T], edge, 1.0, g)
    hv = np.zeros(p)
    K.apply_direction(
        c.seq_ptr,
        c.tok_ptr,
        c.attr,
        c.val,
        s.attr_ptr,
        s.feat_label,
        s.trans_index,
        s.n_state,
        i,
        dnode,
        dedge,
        1.0,
        hv,
        obj.full_rows,
    )
    return loss, g, hv


@pytest.mark.parametrize("force_log", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_hessian_vector_product_is_the_brute_force_covariance(seed, force_log):
    obj = tiny_objective(seed, n_labels=3 if seed < 2 else 4)
    rng = np.random.default_rng(seed + 10)
    for scale in (0.5, 3.0):
        w = rng.normal(scale=scale, size=obj.n_features)
        d = rng.normal(size=obj.n_features)
        for i in range(obj.n):
            loss, g, hv = kernel_hv(obj, i, w, d, force_log)
            rl, rg, rhv = brute(obj, i, w, d)
            assert loss == pytest.approx(rl, rel=1e-10, abs=1e-10)
            np.testing.assert_allclose(g, rg, rtol=1e-9, atol=1e-10)
            np.testing.assert_allclose(hv, rhv, rtol=1e-8, atol=1e-9)


def test_hessian_vector_product_in_the_log_domain_when_transitions_span_far():
    """Transition scores spanning more than the scaled recursion's range take the log-domain form
    by themselves; it still is the covariance."""
    obj = tiny_objective(3)
    s = obj.space
    rng = np.random.default_rng(5)
    w = rng.normal(size=obj.n_features)
    w[s.n_state : s.n_state + s.n_trans] = rng.uniform(-160, 160, size=s.n_trans)
    d = rng.normal(size=obj.n_features)
    for i in range(obj.n):
        loss, g, hv = kernel_hv(obj, i, w, d)
        rl, rg, rhv = brute(obj, i, w, d)
        assert loss == pytest.approx(rl, rel=1e-10, abs=1e-9)
        np.testing.assert_allclose(g, rg, rtol=1e-8, atol=1e-9)
        np.testing.assert_allclose(hv, rhv, rtol=1e-7, atol=1e-8)


def test_hessian_vector_product_against_finite_differences_of_the_gradient():
    X, Y = markov_corpus(4, 12, lengths=(10, 30))
    obj = make(X, Y)
    rng = np.random.default_rng(0)
    w = rng.normal(scale=0.5, size=obj.n_features)
    d = rng.normal(size=obj.n_features)
    eps = 1e-5

    def grad(i, x):
        _, node, edge = obj.oracle(i, x)
        g = np.zeros(obj.n_features)
        obj.apply_gradient(i, node, edge, 1.0, g)
        return g

    for i in range(obj.n):
        _, g, hv = kernel_hv(obj, i, w, d)
        np.testing.assert_allclose(g, grad(i, w), rtol=1e-9, atol=1e-11)
        fd = (grad(i, w + eps * d) - grad(i, w - eps * d)) / (2 * eps)
        np.testing.assert_allclose(hv, fd, rtol=1e-5, atol=1e-7)
        assert np.abs(hv).max() > 1e-3  # not a vacuous comparison
        # and H is positive semi-definite: d.H d >= 0
        assert d @ hv >= -1e-10


def dense_reference(obj, epochs, eta, mu, lam, batch, seed=0, x0=None):
    """SMD on dense vectors, every coordinate every step, g and H v by brute force (numpy)."""
    n, p, l2 = obj.n, obj.n_features, obj.reg.l2
    rng = S.seed_state(seed)
    w = np.zeros(p) if x0 is None else np.array(x0, dtype=float)
    gain, v = np.full(p, eta), np.zeros(p)
    seen = 0
    out = []
    for e in range(epochs):
        while seen < (e + 1) * n:
            b = min(batch, (e + 1) * n - seen)
            g, h = np.zeros(p), np.zeros(p)
            for _ in range(b):
                i = KS.rng_below(rng, n)
                _, gi, hi = brute(obj, i, w, v)
                g += gi / b
                h += hi / b
            g += l2 * w
            h += l2 * v
            gain = gain * np.maximum(0.5, 1 - mu * g * v)
            w = w - gain * g
            v = lam * v - gain * (g + lam * h)
            seen += b
        out.append(w.copy())
    return out


@pytest.mark.parametrize("batch,mu,lam", [(1, 0.1, 0.99), (3, 0.5, 1.0), (4, 2.0, 0.5)])
def test_kernel_equals_the_dense_reference_step_by_step(batch, mu, lam):
    obj = tiny_objective(7, n_seq=7)
    seen = []
    res = smd(
        obj,
        None,
        reg=obj.reg,
        max_iterations=3,
        seed=3,
        eta=0.3,
        mu=mu,
        lam=lam,
        batch=batch,
        callback=lambda info: seen.append(info["x"]),
    )
    ref = dense_reference(obj, 3, 0.3, mu, lam, batch, seed=3)
    assert len(seen) == 3
    for x, r in zip(seen, ref):
        np.testing.assert_allclose(x, r, rtol=1e-9, atol=1e-11)
    # the gains moved away from eta (else the meta-descent would be untested)
    assert not np.allclose(res.state["gain"], 0.3)
    assert obj.n_oracle == 3 * obj.n


@pytest.fixture(scope="module")
def problem():
    X, Y = markov_corpus(13, 60)
    ref = train(
        X,
        Y,
        l2=L2,
        algorithm="lbfgs",
        gtol=1e-10,
        epsilon=0.0,
        delta=0.0,
        max_iterations=1000,
        threads=1,
    )
    return X, Y, ref


def test_without_meta_gain_it_is_sg_and_the_gains_adapt_a_step_too_large(problem):
    """mu = 0 keeps every gain at eta: the iterates are SG's with step eta (the same draws).  With a
    step too large for SG, the meta-descent lowers the gains and ends far closer to the optimum."""
    from crfkit.optim.sgd import sg

    X, Y, ref = problem
    a = smd(make(X, Y), None, reg=Regularization(l2=L2), max_iterations=3, eta=0.1, mu=0.0, seed=5)
    b = sg(make(X, Y), None, reg=Regularization(l2=L2), max_iterations=3, eta=0.1, seed=5)
    np.testing.assert_allclose(a.x, b.x, rtol=1e-9, atol=1e-12)
    f_sg = sg(make(X, Y), None, reg=Regularization(l2=L2), max_iterations=40, eta=0.3).f
    fs = []
    res = smd(
        make(X, Y),
        None,
        reg=Regularization(l2=L2),
        max_iterations=40,
        eta=0.3,
        mu=1.0,
        callback=lambda info: fs.append(info["step"]),
    )
    gap_sg, gap_smd = (
        (f_sg - ref.objective) / ref.objective,
        (res.f - ref.objective) / ref.objective,
    )
    assert 0 <= gap_smd < 0.1 * gap_sg and gap_smd < 0.03  # measured: 0.012 against SG's 0.32
    assert fs[-1] < 0.3  # the mean gain went down


def test_resume_is_bitwise_interrupt_returns_the_last_pass_and_warm_start(problem):
    X, Y, ref = problem
    full = smd(make(X, Y), None, reg=Regularization(l2=L2), max_iterations=5, seed=2, batch=2)
    half = smd(make(X, Y), None, reg=Regularization(l2=L2), max_iterations=2, seed=2, batch=2)
    rest = smd(
        make(X, Y),
        None,
        reg=Regularization(l2=L2),
        max_iterations=5,
        seed=9,
        batch=2,
        state=half.state,
    )
    assert rest.iterations == 5 and np.array_equal(rest.x, full.x)
    with pytest.raises(ParameterError, match="other settings: mu"):
        smd(
            make(X, Y),
            None,
            reg=Regularization(l2=L2),
            max_iterations=5,
            batch=2,
            mu=0.2,
            state=half.state,
        )
    xs = []

    def cb(info):
        xs.append(info["x"])
        if info["iteration"] == 2:
            raise KeyboardInterrupt

    cut = smd(
        make(X, Y), None, reg=Regularization(l2=L2), max_iterations=5, seed=2, batch=2, callback=cb
    )
    assert cut.status == "interrupted" and cut.iterations == 2 and np.array_equal(cut.x, xs[-1])
    again = smd(
        make(X, Y),
        None,
        reg=Regularization(l2=L2),
        max_iterations=5,
        seed=2,
        batch=2,
        state=cut.state,
    )
    assert np.array_equal(again.x, full.x)
    warm = smd(make(X, Y), ref.model.weights, reg=Regularization(l2=L2), max_iterations=1, eta=0.01)
    cold = smd(make(X, Y), None, reg=Regularization(l2=L2), max_iterations=1, eta=0.01)
    assert (
        warm.f < cold.f and (warm.f - ref.objective) / ref.objective < 5e-3
    )  # one noisy pass from w*


def test_train_driver_checkpoint_and_registration(problem, tmp_path):
    X, Y, _ = problem
    assert "smd" in available() and resolve("smd") is smd
    full = train(X, Y, l2=L2, algorithm="smd", max_iterations=4, threads=1, params={"eta": 0.1})
    train(
        X,
        Y,
        l2=L2,
        algorithm="smd",
        max_iterations=2,
        threads=1,
        params={"eta": 0.1},
        checkpoint=tmp_path / "c.ckpt",
    )
    res = train(
        X,
        Y,
        l2=L2,
        algorithm="smd",
        max_iterations=4,
        threads=1,
        params={"eta": 0.1},
        resume=tmp_path / "c.ckpt",
    )
    assert np.array_equal(res.model.weights, full.model.weights)
    assert res.effective_passes == full.effective_passes == 4
    from crfkit.bench.runner import STEP_SEARCH
    from crfkit.estimator import CRF

    assert "smd" in STEP_SEARCH
    crf = CRF(algorithm="smd", max_iterations=3, c2=0.5)
    crf.fit(X[:20], Y[:20])
    assert len(crf.predict(X[:3])) == 3


def test_cli_train(tmp_path, capsys):
    from conftest import run_cli
    from crfkit.datasets import synthetic

    synthetic.write(tmp_path / "train.txt", 30, seed=1)
    rc, out, err = run_cli(
        capsys,
        "train",
        tmp_path / "train.txt",
        "-m",
        tmp_path / "m.crfkit",
        "-a",
        "smd",
        "-p",
        "eta=0.1",
        "-p",
        "batch=2",
        "--max-iterations",
        "2",
        "-q",
    )
    assert rc == 0, err
    assert (tmp_path / "m.crfkit").exists()


def test_refusals(problem):
    X, Y, _ = problem
    obj = make(X, Y)
    for bad in ({"eta": 0.0}, {"mu": -1.0}, {"lam": 1.5}, {"batch": 0}, {"batch": 1.5}):
        with pytest.raises(ParameterError):
            smd(obj, None, reg=obj.reg, max_iterations=1, **bad)
    with pytest.raises(ValueError, match="smd"):
        smd(obj, None, reg=Regularization(l1=0.1, l2=L2), max_iterations=1)
    with pytest.raises(TypeError):
        smd(obj, None, reg=obj.reg, max_iterations=1, eta0=0.1)
    obj.space.n_dense = 3
    try:
        with pytest.raises(CrfkitError, match="smd does not support dense features"):
            smd(obj, None, reg=obj.reg, max_iterations=1)
    finally:
        obj.space.n_dense = 0
