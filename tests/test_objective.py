"""The objective f(w) = (1/n) sum nll + (l2/2)|w|^2 + l1|w|_1: values, gradient, threads,
conventions."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import Reference, enumerate_chain, path_score, random_sequences
from crfkit.errors import DataError
from crfkit.features.encode import build, encode
from crfkit.model import CRFModel
from crfkit.objective import Objective, Regularization, regularization
from crfkit.parallel import set_threads


def _problem(seed=0, n_seq=12, real=True, support="observed", transitions=None, L=3, max_len=5):
    rng = np.random.default_rng(seed)
    X, Y = random_sequences(rng, n_seq, n_labels=L, real=real, n_attr=7, max_len=max_len)
    space, corpus = build(X, Y, support=support, transitions=transitions)
    w = rng.normal(0, 1.0, space.n_features)
    return rng, X, Y, space, corpus, w


def _brute_nll(space, X, Y, w):
    """sum_i -log p(y_i|x_i) by enumeration, one number per sequence."""
    model = CRFModel(space, w)
    ref = Reference(model)
    out = []
    for x, y in zip(X, Y):
        sc = ref.scores(x)
        bf = enumerate_chain(sc, ref.trans)
        ids = [model.space.label_index[lab] for lab in y]
        out.append(bf["logz"] - path_score(sc, ref.trans, ids))
    return np.array(out)


# ----------------------------------------------------------- regularization conventions
@pytest.mark.parametrize("n", [1, 7, 1000])
def test_regularization_conversions(n):
    assert regularization(n, c2=3.0).l2 == pytest.approx(2 * 3.0 / n, rel=1e-15)
    assert regularization(n, rho2=3.0).l2 == pytest.approx(3.0 / n, rel=1e-15)
    assert regularization(n, l2=0.25).l2 == 0.25
    assert regularization(n, c1=2.0, c2=0.0).l1 == pytest.approx(2.0 / n, rel=1e-15)
    assert regularization(n, rho1=2.0, c2=0.0).l1 == pytest.approx(2.0 / n, rel=1e-15)
    r = regularization(n, c1=0.5, c2=4.0)
    assert (r.l1, r.l2) == (pytest.approx(0.5 / n), pytest.approx(8.0 / n))
    # round trips through the other conventions
    c1, c2 = r.crfsuite(n)
    assert (c1, c2) == (pytest.approx(0.5), pytest.approx(4.0))
    rho1, rho2 = regularization(n, rho1=1.5, rho2=6.0).wapiti(n)
    assert (rho1, rho2) == (pytest.approx(1.5), pytest.approx(6.0))
    # nothing given: CRFsuite's default c2 = 1
    d = regularization(n)
    assert d.l2 == pytest.approx(2.0 / n) and d.l1 == 0.0


@pytest.mark.parametrize(
    "kw",
    [
        dict(l2=1, c2=1),
        dict(c2=1, rho2=1),
        dict(l2=1, rho2=1),
        dict(l1=1, c1=1),
        dict(c1=1, rho1=1),
        dict(l1=1, rho1=1),
    ],
)
def test_two_conventions_for_one_term_is_an_error(kw):
    with pytest.raises(ValueError):
        regularization(10, **kw)


@pytest.mark.parametrize(
    "kw", [dict(l2=-1.0), dict(c1=-0.1), dict(c2=float("nan")), dict(rho2=float("inf"))]
)
def test_bad_strengths_rejected(kw):
    with pytest.raises(ValueError):
        regularization(10, **kw)
    with pytest.raises(ValueError):
        regularization(0)


def test_crfsuite_units_equal_hand_computed_sum_form():
    _, X, Y, space, corpus, w = _problem(1)
    n = len(X)
    nll = _brute_nll(space, X, Y, w)
    c1, c2 = 0.3, 1.7
    obj = Objective(corpus, space, regularization(n, c1=c1, c2=c2))
    by_hand = nll.sum() + c1 * np.abs(w).sum() + c2 * (w @ w)
    assert obj.to_crfsuite(obj.value(w)) == pytest.approx(by_hand, rel=1e-12)
    assert obj.to_crfsuite(obj.value_and_grad(w)[0]) == pytest.approx(by_hand, rel=1e-12)
    # Wapiti's sum form: sum nll + rho1 |w|_1 + (rho2/2) |w|^2
    rho1, rho2 = 0.2, 3.0
    obj = Objective(corpus, space, regularization(n, rho1=rho1, rho2=rho2))
    assert n * obj.value(w) == pytest.approx(
        nll.sum() + rho1 * np.abs(w).sum() + 0.5 * rho2 * (w @ w), rel=1e-12
    )
    # crfkit's own normalisation
    obj = Objective(corpus, space, Regularization(l1=0.01, l2=0.5))
    assert obj.value(w) == pytest.approx(
        nll.mean() + 0.25 * (w @ w) + 0.01 * np.abs(w).sum(), rel=1e-12
    )
    assert obj.to_crfsuite(2.0) == pytest.approx(2.0 * n)


# ------------------------------------------------------------------ value / gradient
@pytest.mark.parametrize(
    "real", [True, False]
)  # real-valued attributes / binary (exp-domain emission path)
@pytest.mark.parametrize(
    "support,transitions", [("observed", "observed"), ("all", "all"), ("observed", "all")]
)
def test_gradient_matches_central_differences(support, transitions, real):
    _, X, Y, space, corpus, w = _problem(
        2, n_seq=8, support=support, transitions=transitions, real=real
    )
    obj = Objective(corpus, space, Regularization(l2=0.3))
    f, g = obj.value_and_grad(w)
    assert obj.value(w) == pytest.approx(f, rel=1e-13)
    h = 1e-5
    fd = np.empty_like(w)
    for k in range(len(w)):
        e = np.zeros_like(w)
        e[k] = h
        fd[k] = (obj.value(w + e) - obj.value(w - e)) / (2 * h)
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)
    # and the value itself is the brute-force one
    assert f == pytest.approx(_brute_nll(space, X, Y, w).mean() + 0.15 * (w @ w), rel=1e-12)


def test_gradient_direction_with_large_weights():
    """Directional finite difference at weights of scale 5 (peaked distributions)."""
    rng, X, Y, space, corpus, w = _problem(3, n_seq=10)
    w = w * 5
    obj = Objective(corpus, space, Regularization(l2=0.01))
    _, g = obj.value_and_grad(w)
    for _ in range(5):
        d = rng.normal(size=len(w))
        h = 1e-6
        fd = (obj.value(w + h * d) - obj.value(w - h * d)) / (2 * h)
        assert fd == pytest.approx(g @ d, rel=1e-6, abs=1e-7)


def test_value_and_grad_with_l1_adds_l1_to_value_only():
    _, _, _, space, corpus, w = _problem(4)
    a = Objective(corpus, space, Regularization(l2=0.2))
    b = Objective(corpus, space, Regularization(l2=0.2, l1=0.05))
    fa, ga = a.value_and_grad(w)
    fb, gb = b.value_and_grad(w)
    assert fb - fa == pytest.approx(0.05 * np.abs(w).sum(), rel=1e-12)
    np.testing.assert_array_equal(ga, gb)


def test_value_and_grad_do_not_alias_between_calls():
    _, _, _, space, corpus, w = _problem(5)
    obj = Objective(corpus, space, Regularization(l2=0.1))
    f1, g1 = obj.value_and_grad(w)
    keep = g1.copy()
    obj.value_and_grad(w * 0.5)
    np.testing.assert_array_equal(g1, keep)
    assert obj.n_full == 2


@pytest.mark.parametrize("real", [True, False])
def test_threads_do_not_change_results(restore_threads, real):
    rng = np.random.default_rng(6)
    X, Y = random_sequences(rng, 300, n_labels=4, real=real, n_attr=30, max_len=12)
    space, corpus = build(X, Y)
    w = rng.normal(0, 1, space.n_features)
    reg = Regularization(l2=0.05)
    set_threads(1)
    o1 = Objective(corpus, space, reg, threads=1)
    f1, g1 = o1.value_and_grad(w)
    v1 = o1.value(w)
    set_threads(2)
    o2 = Objective(corpus, space, reg, threads=2)
    assert len(o2.bounds) - 1 == 2
    f2, g2 = o2.value_and_grad(w)
    v2 = o2.value(w)
    assert f2 == pytest.approx(f1, rel=1e-12)
    assert v2 == pytest.approx(v1, rel=1e-12)
    np.testing.assert_allclose(g2, g1, rtol=1e-12, atol=1e-12 * np.abs(g1).max())
    # many chunks on the same threads: still the same numbers
    o8 = Objective(corpus, space, reg, threads=8)
    f8, g8 = o8.value_and_grad(w)
    assert f8 == pytest.approx(f1, rel=1e-12)
    np.testing.assert_allclose(g8, g1, rtol=1e-12, atol=1e-12 * np.abs(g1).max())


def test_objective_rejects_unlabelled_corpus():
    X = [[["a"], ["b"]]]
    space, corpus = build(X, [["x", "y"]])
    unlabelled = encode(X, space)
    with pytest.raises(DataError):
        Objective(unlabelled, space)
    unknown = encode(X, space, [["x", "zzz"]])
    with pytest.raises(DataError):
        Objective(unknown, space)


def test_counters_count_full_evaluations_and_oracle_calls():
    _, X, _, space, corpus, w = _problem(7, n_seq=4)
    obj = Objective(corpus, space)
    obj.value(w)
    obj.value_and_grad(w)
    assert obj.n_full == 2 and obj.effective_passes == 2
    for i in range(6):
        obj.oracle(i % 4, w)
    assert obj.n_oracle == 6
    assert obj.effective_passes == pytest.approx(2 + 6 / 4)


@pytest.mark.parametrize("bigram, chunk", [(False, None), (True, None), (True, 50), (True, 7)])
@pytest.mark.parametrize("weighted", [False, True])
def test_sparse_empirical_counts_give_the_same_gradient(monkeypatch, bigram, chunk, weighted):
    """In a large candidate space the full-batch objective keeps the empirical counts sparse (the
    non-zero ones: most features never fire with their gold labels).  Forced on a small space
    (support all: most (attribute, label) pairs have a zero count), the gradient is the dense path's
    to the bit, the value to rounding; the dense vector comes back on request."""
    from conftest import random_bigram_attributes, random_sequences
    from crfkit.features.encode import build

    rng = np.random.default_rng(5)
    X, Y = random_sequences(rng, 8, n_labels=6, real=True, n_attr=80, max_len=5)
    B = random_bigram_attributes(rng, X, 5, True) if bigram else None
    space, corpus = build(X, Y, B=B, support="all")
    scales = rng.uniform(0.2, 2.0, corpus.n_sequences) if weighted else None
    w = rng.normal(scale=0.7, size=space.n_features)
    dense = Objective(corpus, space, Regularization(l2=0.1), threads=1, scales=scales)
    f0, g0 = dense.value_and_grad(w)
    assert dense._emp_sparse is False
    monkeypatch.setattr(Objective, "SPARSE_EMP_MIN", 0)
    if chunk is not None:
        # the label-pair counts made a chunk of bigram attributes at a time (36 features per
        # attribute here: 50 puts one attribute in a chunk, 7 makes each attribute a chunk larger
        # than the limit)
        monkeypatch.setattr(Objective, "EMP_CHUNK", chunk)
    sp = Objective(corpus, space, Regularization(l2=0.1), threads=1, scales=scales)
    f1, g1 = sp.value_and_grad(w)
    assert sp._emp_sparse is not False and sp._emp is None  # the sparse path ran
    nz = sp._emp_sparse[1].shape[0]
    assert 0 < nz <= space.n_features // 4
    assert np.array_equal(g0, g1)
    assert f1 == pytest.approx(f0, rel=1e-13)
    np.testing.assert_array_equal(sp.empirical_counts, dense.empirical_counts)
    nzd = np.flatnonzero(dense.empirical_counts)
    np.testing.assert_array_equal(sp._emp_sparse[1], nzd)  # the non-zero counts, in order, exactly
    np.testing.assert_array_equal(sp._emp_sparse[2], dense.empirical_counts[nzd])
    assert sp.value_and_grad(w)[1].tobytes() == g0.tobytes()


@settings(max_examples=80, deadline=None)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True, width=64), max_size=30))
def test_abs_max_is_numpys_without_the_temporary(xs):
    from crfkit.objective import abs_max

    w = np.array(xs, dtype=np.float64)
    want = float(np.abs(w).max()) if w.size else 0.0
    got = abs_max(w)
    assert (got == want) or (math.isnan(got) and math.isnan(want))


@pytest.mark.parametrize("scale", [1.0, 60.0])
def test_released_token_attributes_give_the_same_value_and_gradient(scale):
    """release_tokens_after_plan: once the first evaluation has made the plan and the empirical
    counts, the corpus's token attributes go; every later value and gradient is the same bits as
    an objective that keeps them (weights of scale 60: sequences whose exp-domain forward pass
    overflows take the kernel's fallback, which rebuilds their sums from the plan), and the value
    alone comes from the gradient's kernel."""
    rng = np.random.default_rng(7)
    X, Y = random_sequences(rng, 40, n_labels=4, real=False, n_attr=9, max_len=30)
    space, keep = build(X, Y)
    _, gone = build(X, Y)
    a = Objective(keep, space, Regularization(l2=0.1))
    b = Objective(gone, space, Regularization(l2=0.1))
    assert b.release_tokens_after_plan()
    for k in range(4):
        w = rng.normal(0, scale, space.n_features)
        fa, ga = a.value_and_grad(w)
        fb, gb = b.value_and_grad(w)
        assert gone.attributes_released and not keep.attributes_released
        assert fa == fb and np.array_equal(ga, gb)
        assert b.value(w) == pytest.approx(a.value(w), rel=1e-12)
    assert b.n_full == a.n_full  # the value from the gradient's kernel counts as one evaluation
    with pytest.raises(RuntimeError, match="let go"):
        gone.attr
    assert len(gone.val) == gone.tok_ptr[-1]  # the values of a corpus of ones are still made


def test_released_attributes_are_kept_with_bigram_observations():
    from conftest import random_bigram_attributes

    rng = np.random.default_rng(3)
    X, Y = random_sequences(rng, 10, n_labels=3, n_attr=5, max_len=6)
    B = random_bigram_attributes(rng, X)
    space, corpus = build(X, Y, B=B)
    obj = Objective(corpus, space, Regularization(l2=0.1))
    assert not obj.release_tokens_after_plan()  # the bigram kernels read the tokens' attributes
    obj.value_and_grad(np.zeros(space.n_features))
    assert not corpus.attributes_released


def test_train_lets_its_own_corpus_attributes_go_with_the_same_model():
    """crfkit.train's L-BFGS run lets the corpus it built release its token attributes: the model is
    the same bits as training on a corpus that keeps them."""
    from crfkit.training.driver import train_corpus

    rng = np.random.default_rng(11)
    X, Y = random_sequences(rng, 30, n_labels=4, n_attr=8, max_len=12)
    s1, c1 = build(X, Y)
    s2, c2 = build(X, Y)
    reg = Regularization(l2=0.05)
    r1 = train_corpus(s1, c1, max_iterations=15, reg=reg, threads=1)
    r2 = train_corpus(s2, c2, _own_corpus=True, max_iterations=15, reg=reg, threads=1)
    assert c2.attributes_released and not c1.attributes_released
    np.testing.assert_array_equal(r1.model.weights, r2.model.weights)
    # the stochastic optimizers read the tokens' attributes: nothing is let go
    s3, c3 = build(X, Y)
    train_corpus(s3, c3, _own_corpus=True, algorithm="l2sgd", max_iterations=2, reg=reg)
    assert not c3.attributes_released


def test_exp_path_overflow_falls_back_to_the_sums_of_the_plan():
    """A sequence whose exp-domain emissions overflow (weights of 710: exp is inf) is redone from
    sums the kernel rebuilds from the plan's runs: with every sequence overflowing, the value and
    gradient are the same bits as the kernel's path without exponentials."""
    rng = np.random.default_rng(5)
    X, Y = random_sequences(rng, 25, n_labels=3, real=False, n_attr=6, max_len=9)
    X = [[list(tok) + ["bias"] for tok in x] for x in X]  # every token overflows
    space, corpus = build(X, Y)
    w = rng.normal(0, 0.5, space.n_features)
    w[: space.n_state] = 710.0
    obj = Objective(corpus, space, Regularization(l2=0.1))
    none = np.zeros((0, space.n_labels))
    out = []
    for exp_ok in (True, False):
        g = np.empty(space.n_features)
        v, wsq = obj._kernel_loss_grad(w, g, None, exp_ok, 1.0, 0.1, none, none)
        out.append((v, wsq, g))
    assert np.isfinite(out[0][0]) and out[0][0] == out[1][0] and out[0][1] == out[1][1]
    np.testing.assert_array_equal(out[0][2], out[1][2])
