"""Sample weights: f(w) = (1/W) sum_i omega_i nll_i + (l2/2)|w|^2 + l1|w|_1 with W = sum_i omega_i.

The reference throughout is duplication: a sequence of integer weight k is the
same as k copies of it (objective, gradient, trained model).  The duplicated
corpus is encoded against one feature space so both sides share the layout.
"""

from __future__ import annotations

import io
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import Reference, enumerate_chain, path_score, random_sequences, run_cli
from crfkit.corpus import Corpus
from crfkit.errors import DataError, ParameterError
from crfkit.features.encode import build, encode
from crfkit.model import CRFModel
from crfkit.objective import Objective, regularization
from crfkit.train import train
from crfkit.training.config import NO_SAMPLE_WEIGHTS


def _data(seed=0, n=10, real=True, L=3, max_len=5):
    rng = np.random.default_rng(seed)
    X, Y = random_sequences(rng, n, n_labels=L, real=real, n_attr=7, max_len=max_len)
    return rng, X, Y


def _dup(X, Y, k):
    """Every sequence i repeated k[i] times."""
    Xd, Yd = [], []
    for x, y, c in zip(X, Y, k):
        for _ in range(int(c)):
            Xd.append(x)
            Yd.append(y)
    return Xd, Yd


def _pair(seed=0, real=True, zero=True, support="observed"):
    """(space, weighted corpus, duplicated corpus, weights) over one feature space."""
    rng, X, Y = _data(seed, real=real)
    k = rng.integers(1, 4, len(X)).astype(float)
    if zero:
        k[1] = 0.0
    Xd, Yd = _dup(X, Y, k)
    space, dup = build(Xd, Yd, support=support)
    cw = encode(X, space, Y)
    cw.weight = k
    return space, cw, dup, k, X, Y


def _brute_nll(space, X, Y, w):
    model = CRFModel(space, w)
    ref = Reference(model)
    out = []
    for x, y in zip(X, Y):
        sc = ref.scores(x)
        bf = enumerate_chain(sc, ref.trans)
        ids = [model.space.label_index[lab] for lab in y]
        out.append(bf["logz"] - path_score(sc, ref.trans, ids))
    return np.array(out)


# ------------------------------------------------------------------ objective and gradient
@pytest.mark.parametrize("real", [False, True])
@pytest.mark.parametrize("support", ["observed", "all"])
def test_integer_weights_equal_duplication_value_and_gradient(real, support):
    space, cw, dup, k, X, Y = _pair(real=real, support=support)
    rng = np.random.default_rng(3)
    reg = regularization(k.sum(), c2=0.7)
    assert reg.l2 == pytest.approx(2 * 0.7 / k.sum())
    ow, od = Objective(cw, space, reg), Objective(dup, space, reg)
    assert ow.W == dup.n_sequences == k.sum()
    for scale in (0.0, 0.5, 2.0):
        w = rng.normal(0, scale, space.n_features)
        fw, gw = ow.value_and_grad(w)
        fd, gd = od.value_and_grad(w)
        assert fw == pytest.approx(fd, rel=1e-12, abs=1e-12)
        np.testing.assert_allclose(gw, gd, rtol=1e-10, atol=1e-12)
        assert ow.value(w) == pytest.approx(fd, rel=1e-12)
        assert ow.to_crfsuite(fw) == pytest.approx(od.to_crfsuite(fd), rel=1e-12)


def test_weighted_value_against_brute_force_and_finite_differences():
    rng, X, Y = _data(5, n=8)
    space, c = build(X, Y)
    om = rng.uniform(0, 3, len(X))
    om[2] = 0.0
    c.weight = om
    obj = Objective(c, space, regularization(om.sum(), l2=0.1))
    w = rng.normal(0, 1, space.n_features)
    nll = _brute_nll(space, X, Y, w)
    f = obj.value(w)
    assert f == pytest.approx(float(om @ nll) / om.sum() + 0.05 * float(w @ w), rel=1e-10)
    f2, g = obj.value_and_grad(w)
    assert f2 == pytest.approx(f, rel=1e-12)
    h = 1e-6
    for j in rng.choice(space.n_features, size=min(25, space.n_features), replace=False):
        e = np.zeros_like(w)
        e[j] = h
        fd = (obj.value(w + e) - obj.value(w - e)) / (2 * h)
        assert g[j] == pytest.approx(fd, rel=1e-5, abs=1e-7)


def test_exp_domain_path_is_weighted_too():
    """Binary attributes and small weights take the exp-domain forward-backward: weighted there as
    well."""
    space, cw, dup, k, X, Y = _pair(real=False)
    ow, od = Objective(cw, space), Objective(dup, space)
    w = np.random.default_rng(1).normal(0, 0.1, space.n_features)
    assert ow._binary
    np.testing.assert_allclose(
        ow.value_and_grad(w)[1], od.value_and_grad(w)[1], rtol=1e-10, atol=1e-13
    )


def test_zero_weight_sequence_contributes_nothing():
    rng, X, Y = _data(7)
    space, c = build(X, Y)
    keep = [i for i in range(len(X)) if i != 3]
    c.weight = np.array([0.0 if i == 3 else 1.0 for i in range(len(X))])
    sub = encode([X[i] for i in keep], space, [Y[i] for i in keep])
    w = rng.normal(0, 1, space.n_features)
    a, b = Objective(c, space), Objective(sub, space)
    fa, ga = a.value_and_grad(w)
    fb, gb = b.value_and_grad(w)
    assert fa == pytest.approx(fb, rel=1e-12)
    np.testing.assert_allclose(ga, gb, rtol=1e-10, atol=1e-13)


def test_dense_block_is_weighted():
    rng, X, Y = _data(11, n=8)
    D = [rng.normal(0, 1, (len(x), 3)) for x in X]
    k = np.array([1, 2, 3, 1, 2, 1, 0, 2], float)
    Xd, Yd = _dup(X, Y, k)
    Dd = [d for d, c in zip(D, k) for _ in range(int(c))]
    space, dup = build(Xd, Yd, dense=Dd)
    cw = encode(X, space, Y, dense=D)
    cw.weight = k
    w = rng.normal(0, 0.5, space.n_features)
    fw, gw = Objective(cw, space).value_and_grad(w)
    fd, gd = Objective(dup, space).value_and_grad(w)
    assert fw == pytest.approx(fd, rel=1e-12)
    np.testing.assert_allclose(gw, gd, rtol=1e-10, atol=1e-12)


def test_bigram_observation_features_are_weighted():
    rng, X, Y = _data(13, n=8)
    B = [[[f"b{int(rng.integers(0, 3))}"] for _ in x] for x in X]
    k = np.array([2, 1, 0, 3, 1, 1, 2, 1], float)
    Xd, Yd = _dup(X, Y, k)
    Bd = [b for b, c in zip(B, k) for _ in range(int(c))]
    space, dup = build(Xd, Yd, B=Bd)
    assert space.n_bigram > 0
    cw = encode(X, space, Y, B=B)
    cw.weight = k
    w = rng.normal(0, 0.5, space.n_features)
    ow, od = Objective(cw, space), Objective(dup, space)
    assert ow._bigram
    fw, gw = ow.value_and_grad(w)
    fd, gd = od.value_and_grad(w)
    assert fw == pytest.approx(fd, rel=1e-12)
    np.testing.assert_allclose(gw, gd, rtol=1e-10, atol=1e-12)
    assert ow.value(w) == pytest.approx(fd, rel=1e-12)


def test_partial_labels_are_weighted():
    from crfkit.training.partial import PartialObjective

    space, cw, dup, k, X, Y = _pair(real=False, support="all")
    rng = np.random.default_rng(2)
    L = space.n_labels

    def allowed_for(c):
        a = np.ones((c.n_tokens, L), bool)
        # the first token of every sequence is given, the rest free
        a[c.seq_ptr[:-1]] = False
        a[c.seq_ptr[:-1], c.y[c.seq_ptr[:-1]]] = True
        return a

    w = rng.normal(0, 0.5, space.n_features)
    fw, gw = PartialObjective(cw, space, regularization(k.sum()), allowed_for(cw)).value_and_grad(w)
    fd, gd = PartialObjective(dup, space, regularization(k.sum()), allowed_for(dup)).value_and_grad(
        w
    )
    assert fw == pytest.approx(fd, rel=1e-12)
    np.testing.assert_allclose(gw, gd, rtol=1e-10, atol=1e-12)


def test_per_example_oracle_scales_loss_and_gradient():
    space, cw, dup, k, X, Y = _pair()
    obj = Objective(cw, space)
    n, W = cw.n_sequences, k.sum()
    w = np.random.default_rng(0).normal(0, 0.5, space.n_features)
    # (1/n) sum_i oracle loss_i = the weighted mean nll
    tot = sum(obj.oracle(i, w)[0] for i in range(n)) / n
    assert tot == pytest.approx(obj.value(w) - 0.5 * obj.reg.l2 * float(w @ w), rel=1e-12)
    # (1/n) sum_i (gradient of example i) = the gradient of the loss part
    g = np.zeros(space.n_features)
    for i in range(n):
        _, node, edge = obj.oracle(i, w)
        obj.apply_gradient(i, node, edge, 1.0 / n, g)
    _, gfull = obj.value_and_grad(w)
    np.testing.assert_allclose(g + obj.reg.l2 * w, gfull, rtol=1e-10, atol=1e-12)
    assert obj.example_weight(0) == pytest.approx(k[0] * n / W)


# ------------------------------------------------------------------ bad weights
def test_corpus_rejects_bad_weights():
    rng, X, Y = _data(0, n=4)
    space, c = build(X, Y)
    for bad, msg in (
        ([1, 2, 3], "3 sample weights for 4"),
        ([1, -1, 1, 1], "non-negative"),
        ([1, np.nan, 1, 1], "finite"),
        ([1, np.inf, 1, 1], "finite"),
        ([[1, 1, 1, 1]], "one-dimensional"),
        (["a", 1, 1, 1], "numbers"),
        (2.0, "scalar"),
    ):
        with pytest.raises(ValueError, match=msg):
            Corpus(c.seq_ptr, c.tok_ptr, c.attr, c.val, c.y, weight=bad)
    c.weight = np.zeros(4)
    with pytest.raises(DataError, match="every sample weight is zero"):
        Objective(c, space)


def test_train_rejects_bad_weights():
    _, X, Y = _data(0, n=4)
    with pytest.raises(ParameterError, match="weights: .*non-negative"):
        train(X, Y, weights=[1, 1, -2, 1])
    with pytest.raises(ParameterError, match="every sample weight is zero"):
        train(X, Y, weights=[0, 0, 0, 0])
    with pytest.raises(ParameterError, match="5 sample weights for 4"):
        train(X, Y, weights=[1] * 5)


@pytest.mark.parametrize("algorithm", NO_SAMPLE_WEIGHTS)
def test_methods_without_weights_refuse_them_by_name(algorithm):
    from crfkit.training import ALGORITHMS

    if algorithm not in ALGORITHMS:
        pytest.skip(f"{algorithm} is not in this build")
    _, X, Y = _data(0, n=6)
    with pytest.raises(
        ParameterError, match=re.escape(f"{algorithm!r} does not support sample weights")
    ):
        train(X, Y, weights=[1, 2, 1, 1, 1, 1], algorithm=algorithm, max_iterations=1)


def test_pa_type_0_refuses_weights():
    _, X, Y = _data(0, n=6)
    with pytest.raises(ParameterError, match="pa with type=0 does not support sample weights"):
        train(
            X, Y, weights=[1, 2, 1, 1, 1, 1], algorithm="pa", params={"type": 0}, max_iterations=1
        )


# ------------------------------------------------------------------ trained models
def _named(model):
    out = {("s",) + k: v for k, v in model.state_features().items()}
    out.update({("t",) + k: v for k, v in model.transition_features().items()})
    return out


def _close_models(a, b, tol):
    da, db = _named(a), _named(b)
    assert da.keys() == db.keys()
    diff = max(abs(da[key] - db[key]) for key in da)
    assert diff < tol, diff


@pytest.mark.parametrize("reg", [dict(c2=0.5), dict(c1=0.2, c2=0.1)])
def test_lbfgs_and_owlqn_weighted_equal_duplicated(reg):
    rng, X, Y = _data(21, n=14)
    k = rng.integers(0, 4, len(X))
    k[0] = 2
    Xd, Yd = _dup(X, Y, k)
    a = train(X, Y, weights=k, epsilon=1e-10, delta=0, max_iterations=500, **reg)
    b = train(Xd, Yd, epsilon=1e-10, delta=0, max_iterations=500, **reg)
    assert a.reg.l2 == pytest.approx(b.reg.l2, rel=1e-15) and a.reg.l1 == pytest.approx(
        b.reg.l1, rel=1e-15
    )
    assert a.objective == pytest.approx(b.objective, rel=1e-9)
    assert a.objective_crfsuite == pytest.approx(b.objective_crfsuite, rel=1e-9)
    _close_models(a.model, b.model, 1e-4)
    assert a.model.meta["train_weight"] == k.sum()


def _weighted_objective(model, X, Y, k, l2):
    """f_w of ``model``'s weights (mapped by attribute and label names) on (X, Y) with weights k:
    the objective of the duplicated data, so every model is judged on one scale."""
    keep = [i for i in range(len(X)) if k[i] > 0]
    Xd, Yd = _dup(X, Y, k)
    space, _ = build(Xd, Yd)
    c = encode([X[i] for i in keep], space, [Y[i] for i in keep])
    c.weight = np.asarray(k, float)[keep]
    sf, tf = model.state_features(), model.transition_features()
    w = np.zeros(space.n_features)
    for a, name in enumerate(space.attributes):
        for j in range(space.attr_ptr[a], space.attr_ptr[a + 1]):
            w[j] = sf.get((name, space.labels[space.feat_label[j]]), 0.0)
    for i, li in enumerate(space.labels):
        for j, lj in enumerate(space.labels):
            t = space.trans_index[i, j]
            if t >= 0:
                w[space.n_state + t] = tf.get((li, lj), 0.0)
    return Objective(c, space, regularization(k.sum(), l2=l2)).value(w)


# (algorithm, params): the methods that converge to the optimum of the log-loss objective (ngd, ap
# and pa optimise surrogates: they are checked by the uniform-weights test below)
STOCHASTIC = [
    ("sg", {"eta": 0.05}),
    ("asg", {"eta": 0.2}),
    ("adagrad", {"eta": 0.5}),
    ("pegasos", {"eta": 1.0}),
    ("sgd-l1", {"eta0": 0.2}),
    ("l2sgd", {"eta0": 1.0}),
    ("hybrid", {}),
    ("bcd", {}),
]


@pytest.fixture(scope="module")
def weighted_problem():
    rng, X, Y = _data(31, n=16, real=False)
    k = rng.integers(0, 4, len(X))
    k[0] = 3
    l2 = 0.1
    Xd, Yd = _dup(X, Y, k)
    opt = train(Xd, Yd, l2=l2, epsilon=1e-10, delta=0, max_iterations=1000)
    fstar = _weighted_objective(opt.model, X, Y, k, l2)
    assert fstar == pytest.approx(opt.objective, rel=1e-12)
    unw = train(X, Y, l2=l2, epsilon=1e-10, delta=0, max_iterations=1000)
    return X, Y, k, l2, fstar, _weighted_objective(unw.model, X, Y, k, l2) - fstar


@pytest.mark.parametrize("algorithm,params", STOCHASTIC)
def test_stochastic_methods_approach_the_duplicated_run(algorithm, params, weighted_problem):
    """Uniform draws with gradients scaled by omega_i n / W: the weighted run reaches the optimum of
    the weighted (= duplicated) objective about as closely as the run on the duplicated data, and
    far more closely than the unweighted optimum lies to it."""
    from crfkit.training import ALGORITHMS

    if algorithm not in ALGORITHMS:
        pytest.skip(f"{algorithm} is not in this build")
    X, Y, k, l2, fstar, gap_unweighted = weighted_problem
    assert gap_unweighted > 0.1  # the weights change the problem
    kw = dict(l2=l2, algorithm=algorithm, params=params, max_iterations=60, seed=1)
    r = train(X, Y, weights=k, **kw)
    gap_w = _weighted_objective(r.model, X, Y, k, l2) - fstar
    assert r.objective - fstar == pytest.approx(
        gap_w, abs=1e-12
    )  # r.objective is the weighted objective
    Xd, Yd = _dup(X, Y, k)
    gap_d = train(Xd, Yd, **kw).objective - fstar
    assert -1e-9 <= gap_w < 0.25 * gap_unweighted, (gap_w, gap_unweighted)
    assert gap_w < 4 * gap_d + 2e-3, (gap_w, gap_d)


@pytest.mark.parametrize(
    "algorithm", ["sg", "asg", "adagrad", "pegasos", "sgd-l1", "l2sgd", "ngd", "ap", "pa"]
)
def test_uniform_weights_take_the_weighted_path_to_the_same_result(algorithm):
    """Weights all 2: every scale omega_i n / W is exactly 1, so the run through the kernels'
    weighted branches must give the unweighted run's model bit for bit."""
    _, X, Y = _data(41, n=12, real=False)
    kw = dict(algorithm=algorithm, max_iterations=3, seed=2, l2=0.1)
    a = train(X, Y, weights=[2.0] * len(X), **kw)
    b = train(X, Y, **kw)
    assert a.objective == b.objective
    np.testing.assert_array_equal(a.model.weights, b.model.weights)


@pytest.mark.parametrize("algorithm", ["sg", "pegasos", "adagrad"])
def test_sgd_kernel_matches_a_dense_weighted_reference(algorithm):
    """The kernel's steps against the same steps written densely with the per-example oracle (which
    scales the example's gradient by omega_i n / W): same draws, same weights after 40 steps."""
    from crfkit.kernels.sag import rng_below
    from crfkit.optim import sgd as S
    from crfkit.optim.sag import seed_state

    rng, X, Y = _data(51, n=9, real=False)
    k = np.array([1, 3, 0, 2, 1, 1, 2, 1, 4], float)
    space, c = build(X, Y)
    c.weight = k
    l2, eta, steps = 0.1, 0.05 if algorithm != "adagrad" else 0.3, 40
    obj = Objective(c, space, regularization(k.sum(), l2=l2))
    fn = getattr(S, algorithm)
    # one "epoch" of n steps at a time: steps = a multiple of n
    res = fn(obj, None, reg=obj.reg, max_iterations=steps // c.n_sequences + 1, seed=4, eta=eta)
    T = (steps // c.n_sequences + 1) * c.n_sequences
    st_ = seed_state(4)
    w = np.zeros(space.n_features)
    G = np.zeros(space.n_features)
    ref = Objective(c, space, obj.reg)
    for t in range(1, T + 1):
        i = int(rng_below(st_, c.n_sequences))
        _, node, edge = ref.oracle(i, w)
        g = np.zeros(space.n_features)
        ref.apply_gradient(i, node, edge, 1.0, g)  # s_i * grad nll_i
        if algorithm == "adagrad":
            # the proximal step on every coordinate (g = 0: the L2 shrink the kernel applies lazily)
            G += g * g
            a = eta / (1.0 + np.sqrt(G))
            w = (w - a * g) / (1 + a * l2)
        else:
            step = eta / (l2 * t) if algorithm == "pegasos" else eta
            w = (1 - step * l2) * w - step * g
    np.testing.assert_allclose(res.x, w, rtol=1e-8, atol=1e-10)


# ------------------------------------------------------------------ estimator
def test_estimator_sample_weight_equals_duplication():
    from crfkit import CRF

    rng, X, Y = _data(61, n=12)
    Xf = [
        [
            {
                (a if isinstance(a, str) else a[0]): (1.0 if isinstance(a, str) else a[1])
                for a in tok
            }
            for tok in x
        ]
        for x in X
    ]
    k = np.where(np.arange(len(X)) % 2 == 0, 2, 1)
    Xd, Yd = _dup(Xf, Y, k)
    a = CRF(c2=0.3, epsilon=1e-10, delta=0, max_iterations=500).fit(Xf, Y, sample_weight=k)
    b = CRF(c2=0.3, epsilon=1e-10, delta=0, max_iterations=500).fit(Xd, Yd)
    assert a.objective_ == pytest.approx(b.objective_, rel=1e-9)
    assert a.objective_crfsuite_ == pytest.approx(b.objective_crfsuite_, rel=1e-9)
    assert a.history_[-1]["objective_crfsuite"] == pytest.approx(
        b.history_[-1]["objective_crfsuite"], rel=1e-9
    )
    assert a.predict(Xf) == b.predict(Xf)
    # a scalar is every sequence's weight: 3.0 is the data three times (c2 converts with W = 3n)
    c = CRF(c2=0.3, epsilon=1e-10, delta=0, max_iterations=500).fit(Xf, Y, sample_weight=3.0)
    d = CRF(c2=0.3, epsilon=1e-10, delta=0, max_iterations=500).fit(Xf * 3, Y * 3)
    assert c.objective_ == pytest.approx(d.objective_, rel=1e-9)


@pytest.mark.parametrize(
    "bad,msg",
    [
        ([1.0, 2.0], r"sample_weight.shape == \(2,\), expected \(4,\)!"),
        ([[1.0, 1.0, 1.0, 1.0]], "Sample weights must be 1D array or scalar"),
        ([1.0, -1.0, 1.0, 1.0], "Negative values in data passed to `sample_weight`"),
        ([1.0, float("nan"), 1.0, 1.0], "NaN or infinity"),
        (["a", "b", "c", "d"], "must be numbers"),
        ("abc", "must be numbers"),
        ([0, 0, 0, 0], "every weight is zero"),
    ],
)
def test_estimator_sample_weight_errors(bad, msg):
    from crfkit import CRF

    X = [[{"a": 1.0}, {"b": 1.0}], [{"a": 1.0}], [{"c": 1.0}], [{"b": 1.0}]]
    y = [["A", "B"], ["A"], ["B"], ["B"]]
    with pytest.raises(ValueError, match=msg):
        CRF(max_iterations=2).fit(X, y, sample_weight=bad)


# ------------------------------------------------------------------ readers
def _write_attr(seqs, weights):
    out = []
    for (x, y), w in zip(seqs, weights):
        if w is not None:
            out.append(f"@weight:{w}")
        for toks, lab in zip(x, y):
            out.append("\t".join([lab] + toks))
        out.append("")
    return "\n".join(out) + "\n"


def test_cli_train_with_weight_lines_equals_duplication(tmp_path, capsys):
    rng, X, Y = _data(71, n=8, real=False)
    X = [[[a for a in tok] or ["none"] for tok in x] for x in X]
    k = [2, 1, 3, 1, 0, 1, 2, 1]
    (tmp_path / "w.txt").write_text(_write_attr(zip(X, Y), [w if w != 1 else None for w in k]))
    Xd, Yd = _dup(X, Y, k)
    (tmp_path / "d.txt").write_text(_write_attr(zip(Xd, Yd), [None] * len(Xd)))
    outs = []
    for f in ("w", "d"):
        rc, out, err = run_cli(
            capsys,
            "train",
            tmp_path / f"{f}.txt",
            "-f",
            "crfsuite",
            "-m",
            tmp_path / f"{f}.crfkit",
            "--c2",
            "0.5",
            "--epsilon",
            "1e-10",
            "--delta",
            "0",
        )
        assert rc == 0, err
        outs.append(out)
    obj = [float(o.split("CRFsuite units ")[1].split()[0]) for o in outs]
    assert obj[0] == pytest.approx(obj[1], rel=1e-8)
    _close_models(CRFModel.load(tmp_path / "w.crfkit"), CRFModel.load(tmp_path / "d.crfkit"), 1e-4)
    rc, out, err = run_cli(capsys, "info", "-m", tmp_path / "w.crfkit")
    assert "train_weight=11" in out


@pytest.mark.parametrize(
    "decl,msg",
    [
        ("@weight:-1", "negative"),
        ("@weight:nan", "not a number"),
        ("@weight:abc", "not a number"),
        ("@weight:", "needs a value"),
    ],
)
def test_bad_weight_lines_name_file_and_line(tmp_path, decl, msg):
    from crfkit.io.crfsuite import read_crfsuite_list

    p = tmp_path / "bad.txt"
    p.write_text(f"A\tx\n\n{decl}\nB\ty\n")
    with pytest.raises(DataError, match=f"bad.txt:3: .*{msg}"):
        read_crfsuite_list(str(p))


def _columns_text(sents, weights, wcol):
    lines = []
    for (words, labels), w in zip(sents, weights):
        for word, lab in zip(words, labels):
            cols = [word, "P" + word[:1]]
            cols.insert(wcol - 1, repr(float(w)))
            lines.append(" ".join(cols + [lab]))
        lines.append("")
    return "\n".join(lines) + "\n"


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(st.sampled_from(["a", "bb", "c1", "d"]), min_size=1, max_size=4),
            st.floats(0, 1e6, allow_nan=False),
        ),
        min_size=1,
        max_size=6,
    ),
    st.integers(1, 3),
)
def test_weight_column_round_trip(sents, wcol):
    from crfkit.io.columns import read_columns_list
    from crfkit.pipeline import take_weight_column

    data = [(words, ["O"] * len(words)) for words, _ in sents]
    weights = [w for _, w in sents]
    text = _columns_text(data, weights, wcol)
    read = read_columns_list(io.StringIO(text), name="mem")
    got, stripped = take_weight_column(read, wcol - 1, name="mem")
    np.testing.assert_array_equal(got, weights)
    for s, (words, _) in zip(stripped, data):
        assert [c[0] for c in s.columns] == words
        assert [c[1] for c in s.columns] == ["P" + w[:1] for w in words]


@pytest.mark.parametrize(
    "cell,msg",
    [
        ("-1", "must be >= 0"),
        ("nan", "must be finite"),
        ("inf", "must be finite"),
        ("x2", "not a number"),
    ],
)
def test_weight_column_errors_name_file_and_line(cell, msg):
    from crfkit.io.columns import read_columns_list
    from crfkit.pipeline import take_weight_column

    text = "a P 1 O\nb P 1 O\n\nc P 1 O\nd P " + cell + " O\n"
    read = read_columns_list(io.StringIO(text), name="f.txt")
    with pytest.raises(DataError, match=f"f.txt:5: weight column 3 holds .*{msg}"):
        take_weight_column(read, 2, name="f.txt")


def test_weight_column_must_repeat_within_a_sentence_and_exist():
    from crfkit.io.columns import read_columns_list
    from crfkit.pipeline import take_weight_column

    read = read_columns_list(io.StringIO("a P 2 O\nb P 3 O\n"), name="f.txt")
    with pytest.raises(DataError, match=r"f.txt:2: .*holds '3' but 2 on the first token .*line 1"):
        take_weight_column(read, 2, name="f.txt")
    read = read_columns_list(io.StringIO("a P 2 O\nb P 2 O\n"), name="f.txt")
    with pytest.raises(DataError, match="f.txt:1: weight column 5 is missing"):
        take_weight_column(read, 4, name="f.txt")


def _conll_like(rng, n):
    sents = []
    for _ in range(n):
        T = int(rng.integers(2, 6))
        words = [str(rng.choice(["the", "cat", "sat", "on", "mat", "a", "dog"])) for _ in range(T)]
        labels = [
            ("B-NP" if w in ("the", "a") else "I-NP" if w in ("cat", "mat", "dog") else "O")
            for w in words
        ]
        sents.append((words, labels))
    return sents


def test_cli_weight_column_equals_duplication_and_tags_files_without_it(tmp_path, capsys):
    rng = np.random.default_rng(81)
    sents = _conll_like(rng, 10)
    k = [1, 2, 0, 3, 1, 1, 2, 1, 1, 2]
    (tmp_path / "w.txt").write_text(_columns_text(sents, k, 3))
    dup = [s for s, c in zip(sents, k) for _ in range(c)]
    (tmp_path / "d.txt").write_text(_columns_text(dup, [1] * len(dup), 3).replace(" 1.0 ", " "))
    tpl = tmp_path / "tpl"
    tpl.write_text("U00:%x[0,0]\nU01:%x[0,1]\nU02:%x[-1,0]\nB\n")
    outs = []
    for f, extra in (("w", ["--weight-column", "3"]), ("d", [])):
        rc, out, err = run_cli(
            capsys,
            "train",
            tmp_path / f"{f}.txt",
            "-t",
            tpl,
            "-m",
            tmp_path / f"{f}.crfkit",
            "--c2",
            "0.5",
            "--epsilon",
            "1e-10",
            "--delta",
            "0",
            *extra,
        )
        assert rc == 0, err
        outs.append(out)
    obj = [float(o.split("CRFsuite units ")[1].split()[0]) for o in outs]
    assert obj[0] == pytest.approx(obj[1], rel=1e-8)
    mw, md = CRFModel.load(tmp_path / "w.crfkit"), CRFModel.load(tmp_path / "d.crfkit")
    _close_models(mw, md, 1e-4)
    assert mw.meta["columns"] == md.meta["columns"] == 2 and mw.meta["weight_column"] == 3
    # the model tags the file without the weight column, like the unweighted model
    rc, out, err = run_cli(capsys, "tag", "-m", tmp_path / "w.crfkit", tmp_path / "d.txt")
    assert rc == 0, err
    rc2, out2, _ = run_cli(capsys, "tag", "-m", tmp_path / "d.crfkit", tmp_path / "d.txt")
    assert out == out2
    # a bad weight names the file and line; --weight-column on an attribute file is refused
    (tmp_path / "bad.txt").write_text("the DT 1 B-NP\ncat NN 1 I-NP\n\nsat VB -2 O\n")
    rc, out, err = run_cli(
        capsys,
        "train",
        tmp_path / "bad.txt",
        "-t",
        tpl,
        "-m",
        tmp_path / "b.crfkit",
        "--weight-column",
        "3",
    )
    assert rc != 0 and "bad.txt:4: weight column 3 holds '-2'" in err
    assert not (tmp_path / "b.crfkit").exists()


def test_cli_cv_with_weight_column(tmp_path, capsys):
    rng = np.random.default_rng(91)
    sents = _conll_like(rng, 12)
    k = [1, 2] * 6
    (tmp_path / "w.txt").write_text(_columns_text(sents, k, 3))
    tpl = tmp_path / "tpl"
    tpl.write_text("U00:%x[0,0]\nU01:%x[0,1]\nB\n")
    rc, out, err = run_cli(
        capsys,
        "cv",
        tmp_path / "w.txt",
        "-k",
        "3",
        "-t",
        tpl,
        "--weight-column",
        "3",
        "--max-iterations",
        "20",
    )
    assert rc == 0, err
    assert "mean over 3 folds" in out
