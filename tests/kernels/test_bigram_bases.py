"""The base matrices of the bigram-observation gradient (``chain_pd.bigram_bases``,
``based_transitions``): each position's transition exponentials start from ``trans`` plus the row of
its heaviest attribute, exponentiated once per evaluation.  Checked against the dense per-position
build (``bigram_transitions``), and the gradient through them against the sparse recursion, finite
differences and itself (the same bits run after run)."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import random_model
from crfkit.kernels import chain_pd
from crfkit.kernels.chain_emit import transition_matrix
from crfkit.objective import Objective, Regularization


def _compact(space, w):
    ptr, pair, wz = chain_pd.compact_bigram(
        w, space.bigram_offset, space.battr_ptr, space.pairs_for_full_rows, 0.3
    )
    assert ptr.shape[0] > 0
    return ptr, pair, wz


@pytest.mark.parametrize("seed", [3, 4, 5])
@pytest.mark.parametrize("n_labels", [3, 5])
def test_based_transitions_match_the_dense_build(seed, n_labels):
    model, X, Y, B, corpus = random_model(
        seed, scale=1.5, zero_share=0.85, n_labels=n_labels, n_seq=30, max_len=7, n_battr=6
    )
    s, w = model.space, model.weights
    ptr, pair, wz = _compact(s, w)
    trans = transition_matrix(w, 1.0, s.n_state, s.trans_index)
    L = trans.shape[0]
    bases = chain_pd.bigram_bases(wz, s.bigram_offset, ptr, pair, trans)
    hid, bM, bE, bmax, bmin = bases
    assert bM.shape[0] > 1  # some heavy attributes have a base
    np.testing.assert_array_equal(bM[0], trans.ravel())
    np.testing.assert_allclose(bE * np.exp(bmax)[:, None], np.exp(bM), rtol=1e-13)
    work = chain_pd.based_work(L)
    c = corpus
    used = 0
    for q in range(c.n_sequences):
        t0 = int(c.seq_ptr[q])
        T = int(c.seq_ptr[q + 1]) - t0
        M = np.zeros((T, L, L))
        tmx = np.zeros(T)
        expM = np.zeros((T, L, L))
        e0 = np.exp(trans - trans.max())
        rng = chain_pd.bigram_transitions(
            c.btok_ptr,
            c.battr,
            c.bval,
            t0,
            T,
            ptr,
            pair,
            wz,
            s.bigram_offset,
            trans,
            M,
            tmx,
            e0,
            trans.max(),
            expM,
        )
        tb = np.zeros(T)
        eb = np.zeros((T, L, L))
        rb = chain_pd.based_transitions(
            c.btok_ptr, c.battr, c.bval, t0, T, ptr, pair, wz, s.bigram_offset, bases, eb, tb, work
        )
        assert (work[0] == -1).all()  # the slots are left clear
        if not np.isfinite(rb):
            continue
        used += 1
        assert rb >= rng - 1e-12
        for t in range(1, T):
            assert tb[t] >= M[t].max() - 1e-12
            assert eb[t].max() <= 1.0
            np.testing.assert_allclose(eb[t] * np.exp(tb[t]), np.exp(M[t]), rtol=1e-12)
    assert used > 0


@pytest.mark.parametrize("threads", [1, 2])
def test_gradient_through_the_bases_against_the_sparse_recursion_and_finite_differences(threads):
    model, X, Y, B, corpus = random_model(
        7, scale=1.2, zero_share=0.85, n_labels=4, n_seq=40, max_len=7, n_battr=6
    )
    w = model.weights
    reg = Regularization(l2=0.2)
    dense = Objective(corpus, model.space, reg, threads=threads)
    sparse = Objective(corpus, model.space, reg, threads=threads, sparse_fb=True)
    f, g = dense.value_and_grad(w)
    fs, gs = sparse.value_and_grad(w)
    assert f == pytest.approx(fs, rel=1e-12)
    np.testing.assert_allclose(g, gs, rtol=1e-10, atol=1e-12)
    # the same bits run after run
    f2, g2 = dense.value_and_grad(w)
    assert f2 == f and np.array_equal(g2, g)
    eps = 1e-6
    idx = np.random.default_rng(1).choice(len(w), size=30, replace=False)
    for k in idx:
        e = np.zeros_like(w)
        e[k] = eps
        fd = (dense.value(w + e) - dense.value(w - e)) / (2 * eps)
        assert g[k] == pytest.approx(fd, abs=1e-6)


def test_bases_are_capped_to_the_heaviest_attributes():
    """More heavy attributes than MAX_BASES - 1: the heaviest get a base, ties to the lower
    index."""
    L = 3
    nb = 600
    rng = np.random.default_rng(0)
    ptr = np.arange(nb + 1, dtype=np.int64) * (L * L)
    pair = np.tile(np.arange(L * L, dtype=np.int32), nb)
    w = rng.normal(size=nb * L * L)
    # attribute b keeps b % 7 + 2 non-zero pairs (all heavy: at least 2)
    for b in range(nb):
        w[b * L * L + b % 7 + 2 : (b + 1) * L * L] = 0.0
    trans = rng.normal(size=(L, L))
    hid, bM, bE, bmax, bmin = chain_pd.bigram_bases(w, 0, ptr, pair, trans)
    assert bM.shape[0] == chain_pd.MAX_BASES
    nnz = np.array([b % 7 + 2 for b in range(nb)])
    chosen = hid > 0
    assert chosen.sum() == chain_pd.MAX_BASES - 1
    assert nnz[chosen].min() >= nnz[~chosen].max()
    for b in np.flatnonzero(chosen)[:20]:
        want = trans.ravel().copy()
        want += w[b * L * L : (b + 1) * L * L]
        np.testing.assert_array_equal(bM[hid[b]], want)
        assert bmax[hid[b]] == want.max() and bmin[hid[b]] == want.min()
