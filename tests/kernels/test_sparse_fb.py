"""Sparse forward-backward (Lavergne et al. 2010, 4.1) against brute-force enumeration and the dense
recursion."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crfkit.features.space import pair_density
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
    return (
        np.array(ptr, np.int64),
        np.array(fr, np.int32),
        np.array(to, np.int32),
        np.array(sc, np.float64),
    )


def run_sparse(score, pairs):
    T, L = score.shape
    ptr, fr, to, sc = pairs
    node = np.empty((T, L))
    edge = np.empty(len(sc))
    work = [np.empty((T, L)) for _ in range(3)]
    logz = sparse_forward_backward(
        score,
        T,
        ptr,
        fr,
        to,
        sc,
        node,
        edge,
        *work,
        np.empty(2 * T),
        np.empty(len(sc)),
        np.empty(L),
        np.empty(L),
        np.empty(L, np.int64),
    )
    return logz, node, edge


def run_dense(score, pairs):
    T, L = score.shape
    ptr, fr, to, sc = pairs
    node = np.empty((T, L))
    work = [np.empty((T, L)) for _ in range(3)]
    logz = dense_forward_backward(
        score, T, ptr, fr, to, sc, node, *work, np.empty(2 * T), np.empty((T, L, L))
    )
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
@given(
    T=st.integers(1, 5),
    L=st.integers(1, 4),
    density=st.sampled_from([0.0, 0.2, 0.5, 1.0]),
    seed=st.integers(0, 10_000),
    scale=st.sampled_from([0.5, 3.0]),
)
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
    score[:, 0] = 40.0  # label 0 dominates every position
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
    from conftest import random_model

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
    from conftest import random_model

    model, X, Y, B, corpus = random_model(8)
    L = model.space.n_labels
    sp = model.space
    w = model.weights
    w[:] = 0.0
    assert model.pair_density(corpus) == 0.0
    w[sp.n_state : sp.n_state + sp.n_trans] = 1.0
    assert model.pair_density(corpus) == pytest.approx(sp.n_trans / (L * L))


def test_pair_density_with_empty_bigram_attributes_at_the_end():
    """A bigram attribute with no features, last in the table (battr_ptr ends on a repeated offset),
    as a loaded model may have: the density is that of the same space without it (np.add.reduceat
    raised IndexError on the offset equal to the number of features)."""
    from dataclasses import replace

    from conftest import random_model

    model, X, Y, B, corpus = random_model(8)
    sp = model.space
    wider = replace(
        sp,
        battributes=list(sp.battributes) + ["empty-1", "empty-2"],
        battr_ptr=np.concatenate((sp.battr_ptr, sp.battr_ptr[-1:], sp.battr_ptr[-1:])),
        bfeat_pair=sp.bfeat_pair,
    )
    assert wider.battr_ptr[-1] == wider.n_bigram
    before = model.pair_density(corpus)
    assert 0.0 < before <= 1.0
    assert pair_density(wider, corpus, model.weights) == before


# ------------------------------------------------------------- the training gradient
# (Objective(sparse_fb=True))
def _listed_pairs(model, corpus) -> tuple[int, int]:
    """(positions, listed pairs) the sparse recursion must see, from the weights by index: at each
    position t >= 1 the pairs with a non-zero transition weight or a non-zero-weight bigram feature
    of one of the token's bigram attributes."""
    sp, w = model.space, model.weights
    L = sp.n_labels
    trans = np.zeros((L, L))
    for i in range(L):
        for j in range(L):
            k = sp.trans_index[i, j]
            if k >= 0:
                trans[i, j] = w[sp.n_state + k]
    pos = listed = 0
    for s in range(corpus.n_sequences):
        for t in range(corpus.seq_ptr[s] + 1, corpus.seq_ptr[s + 1]):
            pairs = {i * L + j for i in range(L) for j in range(L) if trans[i, j] != 0.0}
            for e in range(corpus.btok_ptr[t], corpus.btok_ptr[t + 1]):
                b = corpus.battr[e]
                for k in range(sp.battr_ptr[b], sp.battr_ptr[b + 1]):
                    if w[sp.bigram_offset + k] != 0.0:
                        pairs.add(int(sp.bfeat_pair[k]))
            pos += 1
            listed += len(pairs)
    return pos, listed


@pytest.mark.parametrize("zero_share", [0.0, 0.6, 0.95, 1.0])
@pytest.mark.parametrize("support", ["all", "observed"])
def test_sparse_gradient_equals_the_standard_one(zero_share, support):
    from conftest import random_model
    from crfkit.objective import Objective, Regularization

    model, X, Y, B, corpus = random_model(
        5, support=support, scale=1.5, n_seq=30, max_len=9, n_labels=5, n_battr=6
    )
    sp = model.space
    w = model.weights
    rng = np.random.default_rng(2)
    # many zero pair scores: zero a share of the bigram weights and of the transitions
    pair_block = np.arange(sp.n_state, sp.bigram_offset + sp.n_bigram)
    w[pair_block[rng.random(len(pair_block)) < zero_share]] = 0.0
    reg = Regularization(l2=0.2)
    std = Objective(corpus, sp, reg, threads=2)
    spa = Objective(corpus, sp, reg, threads=2, sparse_fb=True)
    f0, g0 = std.value_and_grad(w)
    f1, g1 = spa.value_and_grad(w)
    assert f1 == pytest.approx(f0, rel=1e-12, abs=1e-12)
    np.testing.assert_allclose(g1, g0, rtol=0, atol=1e-12)
    assert np.abs(g0[sp.bigram_offset : sp.bigram_offset + sp.n_bigram]).max() > 1e-3
    # the sparsity figures: what the recursion listed, counted independently
    pos, listed = _listed_pairs(model, corpus)
    assert tuple(spa.pair_counts) == (pos, listed)
    assert spa.pair_zero_share() == pytest.approx(1 - listed / (pos * sp.n_labels**2))
    assert std.pair_counts.sum() == 0  # the standard recursion counts nothing
    if zero_share == 1.0:
        assert listed == 0 and spa.pair_zero_share() == 1.0


def test_sparse_gradient_with_sample_weights_and_finite_differences():
    import dataclasses

    from conftest import bigram_data
    from crfkit.features.encode import build
    from crfkit.objective import Objective, Regularization

    X, Y, B = bigram_data(9, n_seq=12, max_len=6, n_labels=4)
    weights = np.random.default_rng(0).integers(0, 3, size=len(X)).astype(float)
    weights[0] = 1.0
    space, corpus = build(X, Y, B=B, support="all")
    corpus = dataclasses.replace(corpus, weight=weights)
    assert corpus.is_weighted
    w = np.random.default_rng(1).normal(scale=0.7, size=space.n_features)
    w[space.n_state :][np.random.default_rng(2).random(space.n_features - space.n_state) < 0.8] = (
        0.0
    )
    reg = Regularization(l2=0.1)
    f0, g0 = Objective(corpus, space, reg).value_and_grad(w)
    spa = Objective(corpus, space, reg, sparse_fb=True)
    f1, g1 = spa.value_and_grad(w)
    assert f1 == pytest.approx(f0, rel=1e-12)
    np.testing.assert_allclose(g1, g0, rtol=0, atol=1e-12)
    eps = 1e-6
    for k in np.random.default_rng(3).choice(len(w), size=20, replace=False):
        e = np.zeros_like(w)
        e[k] = eps
        fd = (spa.value(w + e) - spa.value(w - e)) / (2 * eps)
        assert g1[k] == pytest.approx(fd, abs=1e-6)


def test_sparse_gradient_falls_back_outside_the_scaled_range():
    """Pair scores spanning more than MAX_SCALED_TRANSITION_RANGE: that sequence takes the dense
    path."""
    from conftest import random_model
    from crfkit.objective import Objective, Regularization

    model, X, Y, B, corpus = random_model(13, scale=1.0, n_seq=10, max_len=6, n_labels=3)
    sp = model.space
    w = model.weights
    w[sp.bigram_offset : sp.bigram_offset + sp.n_bigram : 3] *= 150.0
    reg = Regularization(l2=0.0)
    f0, g0 = Objective(corpus, sp, reg).value_and_grad(w)
    f1, g1 = Objective(corpus, sp, reg, sparse_fb=True).value_and_grad(w)
    assert np.isfinite(f0)
    assert f1 == pytest.approx(f0, rel=1e-12)
    np.testing.assert_allclose(g1, g0, rtol=1e-9, atol=1e-9)


def test_owlqn_training_with_sparse_and_standard_forward_backward_agrees(tmp_path):
    import json

    from conftest import bigram_data
    from crfkit.train import train

    X, Y, B = bigram_data(21, n_seq=40, max_len=8, n_labels=4, real=False)
    runs = {}
    for mode in ("off", "on", "auto"):
        tr = tmp_path / f"{mode}.jsonl"
        runs[mode] = (
            train(
                X,
                Y,
                B=B,
                support="all",
                l1=0.05,
                l2=0.001,
                algorithm="owlqn",
                max_iterations=25,
                sparse_fb=mode,
                trace=str(tr),
            ),
            [json.loads(line) for line in open(tr)],
        )
    (a, ta), (b, tb), (c, tc) = runs["off"], runs["on"], runs["auto"]
    assert a.iterations == b.iterations
    assert b.objective == pytest.approx(a.objective, rel=1e-9)
    np.testing.assert_allclose(b.model.weights, a.model.weights, atol=1e-7)
    assert "pair_zero_share" not in ta[-1] and "pair_zero_share" not in a.model.meta
    shares = [r["pair_zero_share"] for r in tb]
    assert len(shares) == b.iterations and all(0.0 < s < 1.0 for s in shares)
    assert 0.0 < b.model.meta["pair_zero_share"] < 1.0
    assert c.model.meta.get("sparse_fb") == "auto"  # auto with an L1 term: per evaluation
    assert c.iterations == a.iterations and c.objective == pytest.approx(a.objective, rel=1e-9)
    # auto: every record says the share (NaN when no evaluation since the previous one was sparse);
    # at w = 0 every label-pair score is zero, so it starts sparse, and switches once the scores
    # fill in
    assert len(tc) == c.iterations and all("pair_zero_share" in r for r in tc)
    assert tc[0]["pair_zero_share"] == 1.0
    assert 1 <= c.model.meta["sparse_evaluations"] < c.iterations
    assert b.model.meta["sparse_evaluations"] >= b.iterations
    with pytest.raises(Exception, match="sparse_fb"):
        train(
            X,
            Y,
            B=B,
            support="all",
            l1=0.05,
            algorithm="owlqn",
            max_iterations=2,
            sparse_fb="maybe",
        )


def test_cli_train_sparse_fb(tmp_path):
    from crfkit import cli
    from crfkit.model import CRFModel

    rng = np.random.default_rng(4)
    lines = []
    for _ in range(40):
        for _t in range(int(rng.integers(2, 7))):
            c = "abcde"[int(rng.integers(5))]
            lines.append(f"{c}\t{c.upper() if rng.random() < 0.8 else 'X'}")
        lines.append("")
    data = tmp_path / "train.txt"
    data.write_text("\n".join(lines) + "\n")
    metas = {}
    for mode in ("on", "off"):
        m = tmp_path / f"{mode}.crf"
        assert (
            cli.main(
                [
                    "train",
                    str(data),
                    "--features",
                    "nettalk:1-grm",
                    "--support",
                    "all",
                    "-a",
                    "owlqn",
                    "--rho1",
                    "0.5",
                    "--rho2",
                    "1e-5",
                    "--max-iterations",
                    "15",
                    "--sparse-fb",
                    mode,
                    "-m",
                    str(m),
                    "-q",
                ]
            )
            == 0
        )
        metas[mode] = CRFModel.load(m)
    assert (
        0.0 < metas["on"].meta["pair_zero_share"] <= 1.0
        and "pair_zero_share" not in metas["off"].meta
    )
    np.testing.assert_allclose(metas["on"].weights, metas["off"].weights, atol=1e-7)
    with pytest.raises(SystemExit):
        cli.main(
            ["train", str(data), "--features", "nettalk:1-grm", "--sparse-fb", "maybe", "-m", "x"]
        )


def test_auto_picks_the_recursion_by_estimated_density():
    from conftest import random_model
    from crfkit.objective import Objective, Regularization

    model, X, Y, B, corpus = random_model(
        6, support="all", scale=1.0, n_seq=20, max_len=7, n_labels=4
    )
    sp = model.space
    dense_w = model.weights.copy()
    sparse_w = dense_w.copy()
    sparse_w[sp.n_state :] = 0.0
    sparse_w[sp.bigram_offset] = 0.7  # one non-zero pair score
    obj = Objective(corpus, sp, Regularization(l2=0.1), sparse_fb="auto")
    assert model.pair_density(corpus) >= obj.AUTO_PAIR_DENSITY
    ref = Objective(corpus, sp, Regularization(l2=0.1))
    for w, n_sparse in ((dense_w, 0), (sparse_w, 1)):
        f, g = obj.value_and_grad(w)
        f0, g0 = ref.value_and_grad(w)
        assert obj.n_sparse_evaluations == n_sparse
        assert f == pytest.approx(f0, rel=1e-12)
        np.testing.assert_allclose(g, g0, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="sparse_fb"):
        Objective(corpus, sp, sparse_fb="sometimes")
