"""Per-example oracle, sparse gradient application on w = beta * v, ScaledWeights."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import Reference, enumerate_chain, path_score, random_sequences
from crfkit.features.encode import build
from crfkit.kernels.oracle import ScaledWeights, touched_features
from crfkit.model import CRFModel
from crfkit.objective import Objective, Regularization

SETTINGS = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def _problem(seed, n_seq=6, support="observed", transitions=None, L=3, real=True):
    rng = np.random.default_rng(seed)
    X, Y = random_sequences(rng, n_seq, n_labels=L, real=real, n_attr=9, max_len=5)
    space, corpus = build(X, Y, support=support, transitions=transitions)
    return rng, X, Y, space, corpus


@SETTINGS
@given(
    seed=st.integers(0, 2**32 - 1),
    support=st.sampled_from(["observed", "all"]),
    transitions=st.sampled_from(["observed", "all"]),
    L=st.integers(1, 4),
    beta=st.sampled_from([1.0, 0.5, 3.0, 1e-3]),
)
def test_oracle_against_enumeration(seed, support, transitions, L, beta):
    rng, X, Y, space, corpus = _problem(
        seed, n_seq=4, support=support, transitions=transitions, L=L
    )
    v = rng.normal(0, 2.0, space.n_features) / beta
    w = beta * v
    ref = Reference(CRFModel(space, w))
    obj = Objective(corpus, space, Regularization())
    for i, (x, y) in enumerate(zip(X, Y)):
        sc = ref.scores(x)
        bf = enumerate_chain(sc, ref.trans)
        ids = [space.label_index[lab] for lab in y]
        loss, node, edge = obj.oracle(i, v, beta)
        assert loss == pytest.approx(
            bf["logz"] - path_score(sc, ref.trans, ids), rel=1e-11, abs=1e-10
        )
        assert node.shape == (len(x), space.n_labels)
        np.testing.assert_allclose(node, bf["node"], atol=1e-10)
        np.testing.assert_allclose(edge, bf["edge"], atol=1e-10)
        # the same as the single-sequence objective
        one = Objective(corpus.subset([i]), space, Regularization())
        assert loss == pytest.approx(one.nll_sum(w), rel=1e-11, abs=1e-12)


def test_oracle_scaled_equals_unscaled():
    rng, X, Y, space, corpus = _problem(11, n_seq=8)
    obj = Objective(corpus, space, Regularization())
    v = rng.normal(0, 2.0, space.n_features)
    for beta in (0.37, 2.5, 1e-4, 40.0):
        for i in range(len(X)):
            l1, n1, e1 = obj.oracle(i, v, beta)
            n1, e1 = n1.copy(), e1.copy()
            l2, n2, e2 = obj.oracle(i, beta * v, 1.0)
            assert l1 == pytest.approx(l2, rel=1e-12, abs=1e-12)
            np.testing.assert_allclose(n1, n2, rtol=1e-10, atol=1e-12)
            np.testing.assert_allclose(e1, e2, rtol=1e-10, atol=1e-12)


def test_oracle_reuses_buffers_without_stale_values():
    rng, X, Y, space, corpus = _problem(12, n_seq=6)
    obj = Objective(corpus, space, Regularization())
    v = rng.normal(0, 1.0, space.n_features)
    L = space.n_labels
    node = np.full((50, L), 7.0)
    edge = np.full((L, L), 7.0)
    for i in range(len(X)):
        a = obj.oracle(i, v)
        b = obj.oracle(i, v, node=node, edge=edge)
        assert a[0] == b[0]
        np.testing.assert_array_equal(a[1], b[1])
        np.testing.assert_array_equal(a[2], b[2])


def _allowed_indices(space, corpus, i):
    toks = range(corpus.seq_ptr[i], corpus.seq_ptr[i + 1])
    attrs = {
        int(corpus.attr[e]) for t in toks for e in range(corpus.tok_ptr[t], corpus.tok_ptr[t + 1])
    }
    allowed = set()
    for a in attrs:
        allowed.update(range(space.attr_ptr[a], space.attr_ptr[a + 1]))
    allowed.update(range(space.n_state, space.n_features))
    return allowed


@pytest.mark.parametrize(
    "support,transitions", [("observed", "observed"), ("all", "all"), ("all", "observed")]
)
def test_apply_gradient_is_sparse_dense_gradient(support, transitions):
    rng, X, Y, space, corpus = _problem(13, n_seq=10, support=support, transitions=transitions)
    obj = Objective(corpus, space, Regularization())
    for i in range(len(X)):
        for beta in (1.0, 0.25):
            v = rng.normal(0, 1.0, space.n_features)
            w = beta * v
            _, g = Objective(corpus.subset([i]), space, Regularization()).nll_sum_grad(w)
            _, node, edge = obj.oracle(i, v, beta)
            coef = rng.normal()
            v2 = v.copy()
            obj.apply_gradient(i, node, edge, coef, v2)
            np.testing.assert_allclose(v2, v + coef * g, rtol=1e-12, atol=1e-12)
            changed = set(np.flatnonzero(v2 != v).tolist())
            assert changed <= _allowed_indices(space, corpus, i)
            # a gradient step on w = beta * v through coef = -eta / beta
            eta = 0.1
            v3 = v.copy()
            obj.apply_gradient(i, node, edge, -eta / beta, v3)
            np.testing.assert_allclose(beta * v3, w - eta * g, rtol=1e-12, atol=1e-12)


def test_apply_gradient_leaves_other_attributes_bitwise_untouched():
    # sequence 0 uses attributes a, b only; sequence 1 uses c, d only
    X = [[["a"], ["b", ("a", 0.5)]], [["c"], ["d"], ["c"]]]
    Y = [["x", "y"], ["y", "x", "y"]]
    space, corpus = build(X, Y, support="all", transitions="all")
    obj = Objective(corpus, space, Regularization())
    v = np.random.default_rng(0).normal(size=space.n_features)
    _, node, edge = obj.oracle(0, v)
    v2 = v.copy()
    obj.apply_gradient(0, node, edge, 0.7, v2)
    ai = space.attr_index
    for name in ("c", "d"):
        a = ai[name]
        sl = slice(space.attr_ptr[a], space.attr_ptr[a + 1])
        np.testing.assert_array_equal(v2[sl], v[sl])
    for name in ("a", "b"):
        a = ai[name]
        sl = slice(space.attr_ptr[a], space.attr_ptr[a + 1])
        assert np.all(v2[sl] != v[sl])
    # touched_features lists exactly the state features of the sequence's attributes (with repeats)
    out = np.empty(100, np.int64)
    n = touched_features(corpus.seq_ptr, corpus.tok_ptr, corpus.attr, space.attr_ptr, 0, out)
    expected = []
    for name in ("a", "b", "a"):
        a = ai[name]
        expected += list(range(space.attr_ptr[a], space.attr_ptr[a + 1]))
    assert sorted(out[:n].tolist()) == sorted(expected)


def test_apply_gradient_sum_over_examples_is_full_gradient():
    rng, X, Y, space, corpus = _problem(14, n_seq=9)
    obj = Objective(corpus, space, Regularization())
    w = rng.normal(size=space.n_features)
    acc = np.zeros_like(w)
    for i in range(len(X)):
        _, node, edge = obj.oracle(i, w)
        obj.apply_gradient(i, node, edge, 1.0, acc)
    _, g = obj.nll_sum_grad(w)
    np.testing.assert_allclose(acc, g, rtol=1e-11, atol=1e-11)


# ---------------------------------------------------------------------- ScaledWeights
def test_scaled_weights_shrink_and_fold_preserve_dense():
    rng = np.random.default_rng(15)
    w0 = rng.normal(size=50)
    sw = ScaledWeights(w0)
    w0[0] = 99.0  # the constructor copies
    assert sw.v[0] != 99.0
    expect = sw.dense().copy()
    for f in (0.5, 0.9, 1e-3, 0.999, 1e-4, 0.7, 1e-5):
        sw.shrink(f)
        expect *= f
        np.testing.assert_allclose(sw.dense(), expect, rtol=1e-14, atol=0)
        assert sw.squared_norm() == pytest.approx(expect @ expect, rel=1e-13)
    # 1e-3 * 1e-4 * ... went below FOLD_BELOW: folded back into v
    assert sw.beta >= ScaledWeights.FOLD_BELOW
    before = sw.dense().copy()
    sw.fold()
    assert sw.beta == 1.0
    np.testing.assert_allclose(sw.dense(), before, rtol=1e-15, atol=0)


def test_scaled_weights_fold_happens_below_threshold():
    sw = ScaledWeights(np.ones(3))
    sw.shrink(1e-5)
    assert sw.beta == pytest.approx(1e-5)
    sw.shrink(1e-5)  # 1e-10 < 1e-9: folded
    assert sw.beta == 1.0
    np.testing.assert_allclose(sw.v, 1e-10, rtol=1e-14)
    with pytest.raises(ValueError):
        sw.shrink(0.0)
    with pytest.raises(ValueError):
        sw.shrink(-0.5)


def test_scaled_weights_with_oracle_sgd_step_equals_dense_step():
    """One L2-regularised SGD step done lazily (shrink + sparse apply) equals the dense step."""
    rng, X, Y, space, corpus = _problem(16, n_seq=5)
    obj = Objective(corpus, space, Regularization())
    w = rng.normal(size=space.n_features)
    sw = ScaledWeights(w)
    eta, l2 = 0.05, 0.3
    for step, i in enumerate([0, 3, 1, 4, 2, 0]):
        wd = sw.dense()
        _, g = Objective(corpus.subset([i]), space, Regularization()).nll_sum_grad(wd)
        dense_next = (1 - eta * l2) * wd - eta * g
        _, node, edge = obj.oracle(i, sw.v, sw.beta)
        sw.shrink(1 - eta * l2)
        obj.apply_gradient(i, node, edge, -eta / sw.beta, sw.v)
        np.testing.assert_allclose(sw.dense(), dense_next, rtol=1e-12, atol=1e-13)
