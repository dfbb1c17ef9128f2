"""Sparse forward-backward (Lavergne et al. 2010, 4.1) against brute-force enumeration and the dense recursion."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crfkit.kernels.sparse_fb import dense_forward_backward, pair_scores_ok, sparse_forward_backward


def random_pairs(rng, T, L, density, scale=1.0, negative=False):
    ptr = [0, 0]
    fr, to, sc = [], [], []
    for t in range(1, T):
        mask = rng.random((L, L)) < density
        for i, j in zip(*np.nonzero(mask)):
            fr.append(i)
            to.append(j)
            s = rng.normal() * scale
            sc.append(-abs(s) * 10 if negative else s)
        ptr.append(len(fr))
    return (np.array(ptr, np.int64), np.array(fr, np.int32), np.array(to, np.int32), np.array(sc, np.float64))


def run_sparse(score, pairs):
    T, L = score.shape
    ptr, fr, to, sc = pairs
    node = np.empty((T, L))
    edge = np.empty(len(sc))
    work = [np.empty((T, L)) for _ in range(3)]
    logz = sparse_forward_backward(score, T, ptr, fr, to, sc, node, edge, *work, np.empty(2 * T),
                                   np.empty(len(sc)), np.empty(L), np.empty(L), np.empty(L, np.int64))
    return logz, node, edge


def run_dense(score, pairs):
    T, L = score.shape
    ptr, fr, to, sc = pairs
    node = np.empty((T, L))
    work = [np.empty((T, L)) for _ in range(3)]
    logz = dense_forward_backward(score, T, ptr, fr, to, sc, node, *work, np.empty(2 * T), np.empty((T, L, L)))
    return logz, node


def enumerate_positional(score, pairs):
    T, L = score.shape
    ptr, fr, to, sc = pairs
    S = np.zeros((T, L, L))
    for t in range(1, T):
        for k in range(ptr[t], ptr[t + 1]):
            S[t, fr[k], to[k]] = sc[k]
    paths = np.array(list(itertools.product(range(L), repeat=T)))
    tot = score[np.arange(T)[None, :], paths].sum(1)
    for t in range(1, T):
        tot = tot + S[t, paths[:, t - 1], paths[:, t]]
    m = tot.max()
    logz = m + np.log(np.exp(tot - m).sum())
    p = np.exp(tot - logz)
    node = np.zeros((T, L))
    for t in range(T):
        np.add.at(node[t], paths[:, t], p)
    edge = np.zeros(len(sc))
    for t in range(1, T):
        for k in range(ptr[t], ptr[t + 1]):
            edge[k] = p[(paths[:, t - 1] == fr[k]) & (paths[:, t] == to[k])].sum()
    return logz, node, edge


@settings(max_examples=60, deadline=None)
@given(T=st.integers(1, 5), L=st.integers(1, 4), density=st.sampled_from([0.0, 0.2, 0.5, 1.0]),
       seed=st.integers(0, 10_000), scale=st.sampled_from([0.5, 3.0]))
def test_matches_enumeration(T, L, density, seed, scale):
    rng = np.random.default_rng(seed)
    score = rng.normal(size=(T, L)) * scale
    pairs = random_pairs(rng, T, L, density, scale)
    logz, node, edge = run_sparse(score, pairs)
    rz, rnode, redge = enumerate_positional(score, pairs)
    assert logz == pytest.approx(rz, abs=1e-10)
    np.testing.assert_allclose(node, rnode, atol=1e-10)
    np.testing.assert_allclose(edge, redge, atol=1e-10)


@pytest.mark.parametrize("density", [0.01, 0.1, 0.5, 0.9])
def test_matches_the_dense_recursion_on_long_chains(density):
    rng = np.random.default_rng(int(density * 100))
    T, L = 200, 30
    score = rng.normal(size=(T, L)) * 4
    pairs = random_pairs(rng, T, L, density, 2.0)
    logz, node, _ = run_sparse(score, pairs)
    dz, dnode = run_dense(score, pairs)
    assert logz == pytest.approx(dz, rel=1e-12)
    np.testing.assert_allclose(node, dnode, atol=1e-10)
    np.testing.assert_allclose(node.sum(1), 1.0, atol=1e-12)


def test_strongly_negative_pairs_do_not_cancel():
    """A forbidden pair (score -30) carrying almost all the mass: 1 + (exp(s) - 1) would cancel;
    the exact complement keeps the marginals right."""
    L, T = 3, 4
    score = np.zeros((T, L))
    score[:, 0] = 40.0           # label 0 dominates every position
    ptr = np.array([0, 0, 1, 2, 3], np.int64)
    fr = np.array([0, 0, 0], np.int32)
    to = np.array([0, 0, 0], np.int32)
    sc = np.array([-30.0, -30.0, -30.0])
    pairs = (ptr, fr, to, sc)
    logz, node, edge = run_sparse(score, pairs)
    rz, rnode, redge = enumerate_positional(score, pairs)
    assert logz == pytest.approx(rz, rel=1e-12)
    np.testing.assert_allclose(node, rnode, atol=1e-12)
    np.testing.assert_allclose(edge, redge, atol=1e-12)


def test_range_check():
    assert pair_scores_ok(np.array([-3.0, 5.0]))
    assert not pair_scores_ok(np.array([-150.0, 60.0]))
    assert not pair_scores_ok(np.array([np.nan]))
    assert pair_scores_ok(np.zeros(0))


@pytest.mark.parametrize("zero_share", [0.0, 0.5, 0.95])
def test_model_decode_sparse_equals_dense_on_bigram_models(zero_share):
    from test_bigram import random_model
    model, X, Y, B, corpus = random_model(7, scale=2.0)
    rng = np.random.default_rng(1)
    model.weights[rng.random(len(model.weights)) < zero_share] = 0.0
    dense = model.decode(corpus, marginals=True, labels=corpus.y, sparse=False)
    sparse = model.decode(corpus, marginals=True, labels=corpus.y, sparse=True)
    np.testing.assert_allclose(sparse["marginals"], dense["marginals"], atol=1e-12)
    np.testing.assert_allclose(sparse["logz"], dense["logz"], rtol=1e-12)
    np.testing.assert_array_equal(sparse["ids"], dense["ids"])
    np.testing.assert_array_equal(sparse["label_score"], dense["label_score"])
    assert 0.0 <= model.pair_density(corpus) <= 1.0


def test_pair_density_counts_nonzero_pairs():
    from test_bigram import random_model
    model, X, Y, B, corpus = random_model(8)
    L = model.space.n_labels
    sp = model.space
    w = model.weights
    w[:] = 0.0
    assert model.pair_density(corpus) == 0.0
    w[sp.n_state:sp.n_state + sp.n_trans] = 1.0
    assert model.pair_density(corpus) == pytest.approx(sp.n_trans / (L * L))
