"""Compact models: the saved file holds the active features only, its size and its loading memory
follow the active count, not the candidate space, and `crfkit info` reports candidate vs active
features."""

from __future__ import annotations

import os
import tracemalloc

import numpy as np

from conftest import random_sequences, run_cli
from crfkit.model import CRFModel, FeatureSpace


def _large_candidate_model(n_attr=100_000, L=50, active=50_000, seed=0) -> CRFModel:
    """Every (attribute, label) pair is a candidate (n_attr x L of them); ``active`` of them
    non-zero."""
    rng = np.random.default_rng(seed)
    labels = [f"P{k}" for k in range(L)]
    space = FeatureSpace(
        labels=labels,
        attributes=[f"w[0]=x{a}" for a in range(n_attr)],
        attr_ptr=np.arange(n_attr + 1, dtype=np.int64) * L,
        feat_label=np.tile(np.arange(L, dtype=np.int32), n_attr),
        trans_index=np.arange(L * L, dtype=np.int32).reshape(L, L),
    )
    w = np.zeros(space.n_features)
    on = rng.choice(space.n_state, size=active, replace=False)
    w[on] = rng.normal(0, 1, active)
    w[space.n_state :] = rng.normal(0, 0.1, space.n_trans)
    return CRFModel(space, w, {"n_candidates": int(space.n_features), "algorithm": "owlqn"})


def test_file_and_load_memory_follow_the_active_features(tmp_path):
    big = _large_candidate_model()
    cand, active = big.space.n_features, big.n_active
    assert cand == 5_000_000 + 2500 and active == 50_000 + 2500
    path = tmp_path / "m.crfkit"
    size = big.save(path)
    assert size == os.path.getsize(path)
    # about 11 bytes per candidate in memory (weight + label id); the file: a few per active feature
    assert size < 40 * active + (1 << 16)
    tracemalloc.start()
    try:
        small = CRFModel.load(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 400 * active + (4 << 20), peak  # loading never builds the candidate space
    assert small.space.n_features == active  # the loaded layout holds the active ones only
    assert small.meta["n_candidates"] == cand
    # the same tags and probabilities as the model with the whole candidate space
    rng = np.random.default_rng(1)
    X = [
        [
            [f"w[0]=x{int(a)}" for a in rng.integers(0, 100_000, size=2)]
            for _ in range(int(rng.integers(1, 9)))
        ]
        for _ in range(50)
    ]
    assert small.tag(X) == big.tag(X)
    ms, zs = small.marginals(small.encode(X))
    mb, zb = big.marginals(big.encode(X))
    np.testing.assert_allclose(ms, mb, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(zs, zb, rtol=1e-12)


def test_info_reports_candidate_and_active_features(tmp_path, capsys):
    from crfkit.train import train

    rng = np.random.default_rng(4)
    X, Y = random_sequences(rng, 40, n_labels=4, n_attr=30, max_len=6)
    res = train(X, Y, support="all", algorithm="owlqn", l1=0.05, l2=0.0, max_iterations=30)
    m = res.model
    assert m.meta["n_candidates"] == m.space.n_features
    assert 0 < m.n_active < m.space.n_features  # L1 made it sparse
    path = tmp_path / "m.crfkit"
    m.save(path)
    rc, out, _ = run_cli(capsys, "info", "-m", str(path))
    assert rc == 0
    line = [ln for ln in out.splitlines() if ln.startswith("features:")]
    assert line == [
        f"features: {m.n_active} active of {m.space.n_features} candidates in training "
        f"({100.0 * m.n_active / m.space.n_features:.3g}%; the file holds the active ones only)"
    ]
    loaded = CRFModel.load(path)
    assert loaded.space.n_features == m.n_active
