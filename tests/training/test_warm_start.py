"""Warm start: train(init=model or weights) and CRF(warm_start=True)."""

from __future__ import annotations

import numpy as np
import pytest
from test_checkpoint import data

from crfkit.estimator import CRF
from crfkit.features.encode import build
from crfkit.train import train
from crfkit.training.warm import init_weights

KW = dict(threads=1, epsilon=1e-4, delta=1e-12, c2=0.5)


def test_warm_start_from_the_optimum_stops_at_once():
    X, Y = data(1)
    full = train(X, Y, **KW)
    assert full.converged and full.iterations > 5
    again = train(X, Y, init=full.model, **KW)
    assert again.converged and again.iterations <= 1
    np.testing.assert_allclose(again.model.weights, full.model.weights, atol=1e-6)
    w = train(X, Y, init=full.model.weights, **KW)
    assert w.iterations <= 1


def test_init_maps_weights_by_name():
    X, Y = data(2)
    small = train(X[:10], Y[:10], max_iterations=5, **KW).model
    space, _ = build(X, Y)
    w = init_weights(small, space)
    new_state = {}
    fa = space.feature_attr()
    for k in range(space.n_state):
        new_state[(space.attributes[fa[k]], space.labels[space.feat_label[k]])] = w[k]
    old_state = small.state_features()
    for key, v in new_state.items():
        assert v == old_state.get(key, 0.0)
    assert set(old_state) <= set(new_state)  # the bigger data set sees every old feature
    assert any(key not in old_state for key in new_state)
    ns = space.n_state
    old_trans = small.transition_features()
    for i, a in enumerate(space.labels):
        for j, b in enumerate(space.labels):
            k = space.trans_index[i, j]
            if k >= 0:
                assert w[ns + k] == old_trans.get((a, b), 0.0)


def test_warm_start_from_subset_reaches_the_same_optimum():
    X, Y = data(2)
    full = train(X, Y, **{**KW, "epsilon": 1e-9})
    small = train(X[:10], Y[:10], **KW).model
    warm = train(X, Y, init=small, **{**KW, "epsilon": 1e-9})
    np.testing.assert_allclose(warm.model.weights, full.model.weights, atol=1e-5)


def test_init_shape_checked():
    X, Y = data(2)
    with pytest.raises(ValueError, match="features"):
        train(X, Y, init=np.zeros(3), **KW)


def test_estimator_warm_start():
    X, Y = data(3)
    Xs = [[{a: 1.0 for a in tok} for tok in seq] for seq in X]
    cold = CRF(c2=0.5, epsilon=1e-4, delta=1e-12, threads=1).fit(Xs, Y)
    crf = CRF(c2=0.5, epsilon=1e-4, delta=1e-12, threads=1, warm_start=True)
    assert crf.get_params()["warm_start"] is True
    crf.fit(Xs, Y)
    assert crf.n_iter_ == cold.n_iter_  # nothing to warm-start from on the first fit
    crf.fit(Xs, Y)
    assert crf.n_iter_ <= 1
    np.testing.assert_allclose(crf.model_.weights, cold.model_.weights, atol=1e-6)
    n_cold = cold.n_iter_
    cold.fit(Xs, Y)  # warm_start=False: starts from zero again
    assert cold.n_iter_ == n_cold > 1
