"""Block coordinate descent with label-pair x observation ("bigram") features: the bigram index,
block gradients and diagonals (state, label-pair and transition blocks) against the batch objective,
brute-force edge marginals and finite differences, cache coherence, the elastic-net optimum of
OWL-QN for both supports, monotone blocks, sample weights, bitwise resume and interrupts, the driver
and the CLI."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from conftest import (
    bcd_blocks_with_and_without_kept_messages,
    random_bigram_attributes,
    random_sequences,
)
from crfkit.corpus import Corpus
from crfkit.features.encode import build
from crfkit.objective import Objective, Regularization
from crfkit.optim import bcd as B
from crfkit.optim.bcd import Engine, bcd, bigram_index, block_order, joint_index
from crfkit.train import train, train_corpus


def bigram_problem(seed=0, n_seq=14, L=3, max_len=5, n_attr=6, n_battr=4, real=True, support="all"):
    """Random state and bigram attributes; every sequence of 2+ tokens also carries the bigram
    attribute ``once`` at its second token and ``BOS`` as a state attribute at its first (one
    occurrence per sequence: their diagonals are the exact second derivatives); and observations
    ``s0..s2`` that are both a state and a bigram attribute at the same token (Wapiti's ``*``
    patterns: one joint block each)."""
    rng = np.random.default_rng(seed)
    X, Y = random_sequences(
        rng, n_seq, n_labels=L, min_len=1, max_len=max_len, n_attr=n_attr, real=real
    )
    Bs = random_bigram_attributes(rng, X, n_battr, real)
    for x, b in zip(X, Bs):
        x[0].append("BOS")
        if len(b) >= 2:
            b[1].append(("once", 0.8))
        for t in range(len(x)):
            if rng.random() < 0.5:
                name = f"s{int(rng.integers(3))}"
                x[t].append(name)
                b[t].append(name)
    space, corpus = build(X, Y, B=Bs, support=support)
    return X, Y, Bs, space, corpus


def weighted(corpus: Corpus, weights) -> Corpus:
    c = corpus
    return Corpus(
        c.seq_ptr,
        c.tok_ptr,
        c.attr,
        c.val,
        c.y,
        weight=np.asarray(weights, dtype=np.float64),
        btok_ptr=c.btok_ptr,
        battr=c.battr,
        bval=c.bval,
    )


# ------------------------------------------------------------------ plain references
def plain_index(corpus):
    """state attribute -> {sequence: [(token, summed value), ...]} by plain loops."""
    out = {}
    for s in range(corpus.n_sequences):
        for t in range(corpus.seq_ptr[s], corpus.seq_ptr[s + 1]):
            tot = {}
            for e in range(corpus.tok_ptr[t], corpus.tok_ptr[t + 1]):
                tot[int(corpus.attr[e])] = tot.get(int(corpus.attr[e]), 0.0) + float(corpus.val[e])
            for a, v in tot.items():
                out.setdefault(a, {}).setdefault(s, []).append((t, v))
    return out


def plain_bigram_index(corpus):
    """bigram attribute -> {sequence: [(token, summed value), ...]}, first tokens left out, by plain
    loops."""
    out = {}
    for s in range(corpus.n_sequences):
        for t in range(corpus.seq_ptr[s] + 1, corpus.seq_ptr[s + 1]):
            tot = {}
            for e in range(corpus.btok_ptr[t], corpus.btok_ptr[t + 1]):
                b = int(corpus.battr[e])
                tot[b] = tot.get(b, 0.0) + float(corpus.bval[e])
            for b, v in tot.items():
                out.setdefault(b, {}).setdefault(s, []).append((t, v))
    return out


def brute_marginals(space, corpus, w, s):
    """Node (T x L) and per-position edge ((T-1) x L x L) marginals of sequence s by enumeration,
    with the position-dependent transitions of the bigram features."""
    L, ns, bo = space.n_labels, space.n_state, space.bigram_offset
    t0, t1 = corpus.seq_ptr[s], corpus.seq_ptr[s + 1]
    T = t1 - t0
    em = np.zeros((T, L))
    for t in range(t0, t1):
        for e in range(corpus.tok_ptr[t], corpus.tok_ptr[t + 1]):
            a = corpus.attr[e]
            for k in range(space.attr_ptr[a], space.attr_ptr[a + 1]):
                em[t - t0, space.feat_label[k]] += w[k] * corpus.val[e]
    M = np.zeros((T, L, L))
    for i in range(L):
        for j in range(L):
            if space.trans_index[i, j] >= 0:
                M[:, i, j] = w[ns + space.trans_index[i, j]]
    for t in range(t0 + 1, t1):
        for e in range(corpus.btok_ptr[t], corpus.btok_ptr[t + 1]):
            b = corpus.battr[e]
            for k in range(space.battr_ptr[b], space.battr_ptr[b + 1]):
                p = space.bfeat_pair[k]
                M[t - t0, p // L, p % L] += w[bo + k] * corpus.bval[e]
    paths = list(itertools.product(range(L), repeat=T))
    sc = np.array(
        [
            sum(em[t, p[t]] for t in range(T)) + sum(M[t, p[t - 1], p[t]] for t in range(1, T))
            for p in paths
        ]
    )
    pr = np.exp(sc - sc.max())
    pr /= pr.sum()
    node = np.zeros((T, L))
    edge = np.zeros((max(T - 1, 0), L, L))
    for p, q in zip(paths, pr):
        for t in range(T):
            node[t, p[t]] += q
        for t in range(1, T):
            edge[t - 1, p[t - 1], p[t]] += q
    return node, edge


def engine_at(space, corpus, reg, w, blocks="separate"):
    obj = Objective(corpus, space, reg)
    eng = Engine(obj, np.array(w, dtype=np.float64, copy=True), blocks)
    eng.refresh()
    return obj, eng


def fd_objective(obj, w, k, h=1e-4):
    e = np.zeros_like(w)
    e[k] = h
    fp, f0, fm = (
        obj.value(w + e, count=False),
        obj.value(w, count=False),
        obj.value(w - e, count=False),
    )
    return (fp - fm) / (2 * h), (fp - 2 * f0 + fm) / (h * h)


# ------------------------------------------------------------------ the bigram index
def test_bigram_index_leaves_out_first_tokens_and_merges():
    X, Y, Bs, space, corpus = bigram_problem(1)
    ix = bigram_index(corpus, space.n_battributes)
    ref = plain_bigram_index(corpus)
    first = set(corpus.seq_ptr[:-1].tolist())
    assert any(
        corpus.btok_ptr[t + 1] > corpus.btok_ptr[t] for t in first
    )  # first tokens do carry some
    for b in range(space.n_battributes):
        assert list(ix.sequences(b)) == sorted(ref.get(b, {}))
        for g in range(ix.ap[b], ix.ap[b + 1]):
            s = ix.gseq[g]
            got = list(
                zip(
                    ix.otok[ix.gptr[g] : ix.gptr[g + 1]].tolist(),
                    ix.oval[ix.gptr[g] : ix.gptr[g + 1]].tolist(),
                )
            )
            assert [t for t, _ in got] == [t for t, _ in ref[b][s]]
            np.testing.assert_allclose([v for _, v in got], [v for _, v in ref[b][s]], rtol=1e-15)
            assert not set(t for t, _ in got) & first
    # an empty bigram corpus: an empty index
    plain = Corpus(corpus.seq_ptr, corpus.tok_ptr, corpus.attr, corpus.val, corpus.y)
    ix0 = bigram_index(plain, space.n_battributes)
    assert len(ix0.gseq) == 0 and np.all(ix0.ap == 0)


def test_joint_index_one_block_per_observation():
    X, Y, Bs, space, corpus = bigram_problem(1)
    jx = joint_index(corpus, space)
    ref_u = plain_index(corpus)
    ref_b = plain_bigram_index(corpus)
    na = space.n_attributes
    shared = [b for b, name in enumerate(space.battributes) if name in space.attr_index]
    assert {space.battributes[b] for b in shared} == {"s0", "s1", "s2"}
    assert len(jx.ap) - 1 == na + space.n_battributes - len(shared)
    for b in range(space.n_battributes):
        j = jx.block_of_battr[b]
        assert jx.ub[j] == b
        assert (j < na) == (b in shared)
        if j < na:
            assert space.attributes[j] == space.battributes[b]
    for j in range(len(jx.ap) - 1):
        a, b = int(jx.ua[j]), int(jx.ub[j])
        assert (a == j) if j < na else (a == -1 and b >= 0)
        want = {}
        for kind, ref, x in ((0, ref_u, a), (1, ref_b, b)):
            for s, occ in ref.get(x, {}).items() if x >= 0 else ():
                want.setdefault(s, []).extend((t, kind, v) for t, v in occ)
        assert list(jx.gseq[jx.ap[j] : jx.ap[j + 1]]) == sorted(want)
        for g in range(jx.ap[j], jx.ap[j + 1]):
            o = slice(jx.gptr[g], jx.gptr[g + 1])
            got = list(zip(jx.otok[o].tolist(), jx.okind[o].tolist(), jx.oval[o].tolist()))
            assert got == sorted(want[jx.gseq[g]])


# ------------------------------------------------------------------ block derivatives
@pytest.mark.parametrize(
    "support, blocks",
    [("all", "separate"), ("observed", "separate"), ("all", "joint"), ("observed", "joint")],
)
def test_block_gradients_and_diagonals(support, blocks):
    X, Y, Bs, space, corpus = bigram_problem(2, support=support)
    assert space.n_bigram > 0 and corpus.has_bigram
    reg = Regularization(l1=0.0, l2=0.3)
    w = np.random.default_rng(3).normal(0.0, 0.7, space.n_features)
    obj, eng = engine_at(space, corpus, reg, w, blocks)
    assert eng.bigram
    # the caches' log Z and objective are the batch objective's
    assert eng.objective() == pytest.approx(obj.value(w, count=False), rel=1e-12)
    f, grad = obj.value_and_grad(w)
    n = corpus.n_sequences
    marg = [brute_marginals(space, corpus, w, s) for s in range(n)]
    bo, L = space.bigram_offset, space.n_labels
    ref = plain_bigram_index(corpus)
    once_checked = fd_checked = 0
    for b in range(space.n_battributes):
        g, h = eng.bigram_derivatives(b, reg.l2)
        k0, k1 = space.battr_ptr[b], space.battr_ptr[b + 1]
        np.testing.assert_allclose(g, grad[bo + k0 : bo + k1], rtol=1e-9, atol=1e-12)
        pairs = space.bfeat_pair[k0:k1]
        want_h = np.full(k1 - k0, reg.l2)
        for s, occ in ref.get(b, {}).items():
            edge = marg[s][1]
            for t, v in occ:
                p = edge[t - corpus.seq_ptr[s] - 1][pairs // L, pairs % L]
                want_h += v * v * p * (1 - p) / n
        np.testing.assert_allclose(h, want_h, rtol=1e-10, atol=1e-14)
        once = all(len(occ) == 1 for occ in ref.get(b, {}).values())
        for kk in range(0, k1 - k0, max(1, (k1 - k0) // 4)):
            fd_g, fd_h = fd_objective(obj, w, bo + k0 + kk)
            assert g[kk] == pytest.approx(fd_g, rel=1e-6, abs=1e-9)
            fd_checked += 1
            if once:  # one occurrence per sequence: the diagonal is the exact second derivative
                assert h[kk] == pytest.approx(fd_h, rel=1e-4, abs=1e-7)
                once_checked += 1
    assert once_checked > 0 and fd_checked > 0
    # the state blocks and the transition block on position-dependent transitions
    for a in range(space.n_attributes):
        g, h = eng.attribute_derivatives(a, reg.l2)
        k0, k1 = space.attr_ptr[a], space.attr_ptr[a + 1]
        np.testing.assert_allclose(g, grad[k0:k1], rtol=1e-9, atol=1e-12)
    a = space.attr_index["BOS"]
    g, h = eng.attribute_derivatives(a, reg.l2)
    k0 = space.attr_ptr[a]
    for kk in range(len(g)):
        _, fd_h = fd_objective(obj, w, k0 + kk)
        assert h[kk] == pytest.approx(fd_h, rel=1e-4, abs=1e-7)
    g, h = eng.transition_derivatives(reg.l2)
    ns = space.n_state
    np.testing.assert_allclose(g, grad[ns : ns + len(g)], rtol=1e-9, atol=1e-12)
    p = np.concatenate([m[1][:, eng.ti, eng.tj] for m in marg if len(m[1])])
    np.testing.assert_allclose(h, reg.l2 + (p * (1 - p)).sum(axis=0) / n, rtol=1e-10)


@pytest.mark.parametrize("blocks", ["separate", "joint"])
def test_sample_weights_scale_every_block(blocks):
    X, Y, Bs, space, corpus = bigram_problem(4)
    omega = np.random.default_rng(5).uniform(0.0, 3.0, size=corpus.n_sequences)
    omega[1] = 0.0
    wc = weighted(corpus, omega)
    reg = Regularization(l1=0.0, l2=0.1)
    w = np.random.default_rng(6).normal(0.0, 0.6, space.n_features)
    obj, eng = engine_at(space, wc, reg, w, blocks)
    assert obj.weighted
    assert eng.objective() == pytest.approx(obj.value(w, count=False), rel=1e-12)
    _, grad = obj.value_and_grad(w)
    bo = space.bigram_offset
    for b in range(space.n_battributes):
        g, _ = eng.bigram_derivatives(b, reg.l2)
        k0, k1 = space.battr_ptr[b], space.battr_ptr[b + 1]
        np.testing.assert_allclose(g, grad[bo + k0 : bo + k1], rtol=1e-9, atol=1e-12)
    for a in range(space.n_attributes):
        g, _ = eng.attribute_derivatives(a, reg.l2)
        np.testing.assert_allclose(
            g, grad[space.attr_ptr[a] : space.attr_ptr[a + 1]], rtol=1e-9, atol=1e-12
        )
    g, _ = eng.transition_derivatives(reg.l2)
    np.testing.assert_allclose(
        g, grad[space.n_state : space.n_state + len(g)], rtol=1e-9, atol=1e-12
    )


@pytest.mark.parametrize("blocks", ["separate", "joint"])
def test_caches_stay_coherent_and_every_block_lowers_the_objective(blocks):
    """Block after block (state, label-pair, joint, transition), the objective held by the caches is
    obj.value at the new weights and never increases; every log Z and emission row equals a fresh
    computation."""
    X, Y, Bs, space, corpus = bigram_problem(7)
    reg = Regularization(l1=0.01, l2=0.1)
    obj, eng = engine_at(
        space, corpus, reg, np.random.default_rng(8).normal(0.0, 0.3, space.n_features), blocks
    )
    stats = np.zeros(B.K.N_STATS)
    f_prev = obj.value(eng.w, count=False)
    eng.transition_step(reg, 1.0, 1e-4, 10.0, 20, stats)
    f = obj.value(eng.w, count=False)
    assert f < f_prev and eng.objective() == pytest.approx(f, rel=1e-12)
    f_prev = f
    order = block_order(5, 0, eng.n_blocks)
    ix = eng.index
    kinds = set()
    for kappa in (1.0, 0.05):  # 0.05: steps far too long, cut back by the safeguard
        for b in range(eng.n_blocks):
            before = stats[B.K.ST_ACCEPT]
            eng.attribute_blocks(order, b, b + 1, reg, kappa, 1e-4, 10.0, 20, stats)
            f = obj.value(eng.w, count=False)
            assert f <= f_prev + 1e-13 * abs(f_prev), (kappa, b)
            assert eng.objective() == pytest.approx(f, rel=1e-11)
            if stats[B.K.ST_ACCEPT] > before:
                kinds.add((bool(ix.ua[order[b]] >= 0), bool(ix.ub[order[b]] >= 0)))
            f_prev = f
    # state and label-pair blocks moved (and joint ones)
    assert kinds == (
        {(True, False), (True, True), (False, True)}
        if blocks == "joint"
        else {(True, False), (False, True)}
    )
    assert (
        stats[B.K.ST_TRIALS] > stats[B.K.ST_ACCEPT] + stats[B.K.ST_REJECT]
    )  # backtracking happened
    lz, E = eng.lz.copy(), eng.E.copy()
    eng.refresh()
    np.testing.assert_allclose(lz, eng.lz, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(E, eng.E, rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------ the optimum
@pytest.fixture(scope="module")
def learnable():
    """Labels drawn from a CRF with bigram features (something to learn), 60 sequences; observations
    ``s0``, ``s1`` both state and bigram attributes (joint blocks) beside the separate ones."""
    rng = np.random.default_rng(21)
    X, Y = random_sequences(rng, 60, n_labels=3, max_len=6, n_attr=8, real=False)
    Bs = random_bigram_attributes(rng, X, 4, False)
    for x, b in zip(X, Bs):
        for t in range(len(x)):
            if rng.random() < 0.4:
                name = f"s{int(rng.integers(2))}"
                x[t].append(name)
                b[t].append(name)
    space, corpus = build(X, Y, B=Bs, support="all")
    from crfkit.model import CRFModel

    w = rng.normal(scale=1.5, size=space.n_features)
    Y = CRFModel(space, w).tag(X, B=Bs)
    return X, Y, Bs


def owlqn_optimum(space, corpus, reg):
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
    return ref.objective, ref.model.weights


@pytest.mark.parametrize(
    "support, blocks", [("all", "separate"), ("observed", "separate"), ("all", "joint")]
)
def test_reaches_the_owlqn_elastic_net_optimum(learnable, support, blocks):
    X, Y, Bs = learnable
    space, corpus = build(X, Y, B=Bs, support=support)
    reg = Regularization(l1=0.01, l2=0.02)
    f_star, w_star = owlqn_optimum(space, corpus, reg)
    bo = space.bigram_offset
    assert (
        0 < np.count_nonzero(w_star[bo:]) < space.n_bigram
    )  # L1 keeps some label-pair features only
    obj = Objective(corpus, space, reg)
    fs = []
    res = bcd(
        obj,
        None,
        reg=reg,
        max_iterations=600,
        delta=1e-12,
        seed=1,
        blocks=blocks,
        callback=lambda i: fs.append(i["f"]),
    )
    assert res.status == "converged"
    assert np.all(np.diff(fs) <= 1e-12 * np.abs(fs[1:]))
    assert res.f == pytest.approx(f_star, rel=1e-6)
    assert res.f >= f_star - 1e-9 * abs(f_star)
    np.testing.assert_array_equal(res.x != 0, w_star != 0)
    np.testing.assert_allclose(res.x, w_star, atol=2e-4)


def test_weighted_optimum(learnable):
    X, Y, Bs = learnable
    space, corpus = build(X, Y, B=Bs, support="observed")
    omega = np.random.default_rng(9).integers(0, 4, size=corpus.n_sequences).astype(float)
    wc = weighted(corpus, omega)
    reg = Regularization(l1=0.01, l2=0.02)
    f_star, w_star = owlqn_optimum(space, wc, reg)
    res = bcd(
        Objective(wc, space, reg),
        None,
        reg=reg,
        max_iterations=600,
        delta=1e-12,
        seed=2,
        blocks="joint",
    )
    assert res.status == "converged"
    assert res.f == pytest.approx(f_star, rel=1e-6)
    np.testing.assert_allclose(res.x, w_star, atol=5e-4)
    # an integer weight is that many copies of the sequence: the same objective
    keep = np.repeat(np.arange(corpus.n_sequences), omega.astype(int))
    rep = corpus.subset(keep)
    assert Objective(rep, space, reg).value(res.x, count=False) == pytest.approx(res.f, rel=1e-12)


# ------------------------------------------------------------------ protocol
def test_resume_is_bitwise_and_interrupt_returns_the_last_sweep(learnable):
    X, Y, Bs = learnable
    space, corpus = build(X, Y, B=Bs, support="all")
    reg = Regularization(l1=0.01, l2=0.05)
    kw = dict(reg=reg, delta=0.0, seed=7, kappa=0.5)
    full = []
    res = bcd(
        Objective(corpus, space, reg),
        None,
        max_iterations=5,
        callback=lambda info: full.append((info["x"].copy(), info["f"])),
        **kw,
    )
    assert np.count_nonzero(res.x[space.bigram_offset :]) > 0
    first = bcd(Objective(corpus, space, reg), None, max_iterations=2, **kw)
    st = first.state
    assert st["zrun"].shape == (space.n_attributes + space.n_battributes,)  # separate blocks
    with pytest.raises(ValueError, match="other settings"):
        bcd(Objective(corpus, space, reg), None, max_iterations=5, state=st, blocks="joint", **kw)
    with pytest.raises(ValueError, match="unknown blocks"):
        bcd(Objective(corpus, space, reg), None, max_iterations=1, blocks="pairs", **kw)
    rest = []
    res2 = bcd(
        Objective(corpus, space, reg),
        None,
        max_iterations=5,
        state=st,
        callback=lambda info: rest.append((info["iteration"], info["x"].copy(), info["f"])),
        **kw,
    )
    assert [r[0] for r in rest] == [3, 4, 5]
    for (x, f), (_, x2, f2) in zip(full[2:], rest):
        np.testing.assert_array_equal(x, x2)
        assert f == f2
    np.testing.assert_array_equal(res.x, res2.x)

    def stop(info):
        if info["iteration"] == 3:
            raise KeyboardInterrupt

    r = bcd(Objective(corpus, space, reg), None, max_iterations=5, callback=stop, **kw)
    assert r.status == "interrupted" and r.iterations == 3
    np.testing.assert_array_equal(r.x, full[2][0])


@pytest.mark.parametrize("blocks", ["separate", "joint"])
def test_label_pair_empirical_counts_kept_sparse_are_the_dense_ones(learnable, blocks):
    """The engine keeps the label-pair part of the empirical counts as each bigram attribute's
    non-zero entries: they read back as the objective's dense counts, <w, emp> is the same, and a
    run whose objective handed over the sparse counts (a large candidate space) is bitwise the run
    of the dense ones."""
    X, Y, Bs = learnable
    space, corpus = build(X, Y, B=Bs, support="all")
    reg = Regularization(l1=0.01, l2=0.05)
    obj = Objective(corpus, space, reg)
    dense = obj.empirical_counts.copy()
    eng = Engine(obj, np.zeros(space.n_features), blocks)
    assert len(eng.emp) == space.bigram_offset
    assert 0 < len(eng.evl) < space.n_bigram
    np.testing.assert_array_equal(eng.empirical(np.arange(space.n_features)), dense)
    ks = np.random.default_rng(0).permutation(space.n_features)[:50]
    np.testing.assert_array_equal(eng.empirical(ks), dense[ks])
    w = np.random.default_rng(1).normal(size=space.n_features)
    assert eng.emp_dot(w) == pytest.approx(float(np.dot(w, dense)), rel=1e-12)
    kw = dict(reg=reg, delta=0.0, seed=3, blocks=blocks, max_iterations=3)
    ref = bcd(Objective(corpus, space, reg), None, **kw)
    # a large candidate space: the objective holds the non-zero counts only (Objective._emp_args)
    obj2 = Objective(corpus, space, reg)
    nz = np.flatnonzero(dense)
    obj2._emp_sparse, obj2._emp = (np.empty(0), nz.astype(np.int64), dense[nz]), None
    got = bcd(obj2, None, **kw)
    assert obj2._emp is None  # the dense vector was not made again
    np.testing.assert_array_equal(got.x, ref.x)
    assert got.f == ref.f


def test_space_with_bigram_features_but_a_corpus_without():
    """A corpus with no bigram attribute (e.g. all sequences of one token): the label-pair blocks
    have no occurrence and go to their exact minimiser, zero; the rest trains as without them."""
    X, Y, Bs, space, corpus = bigram_problem(10)
    plain = Corpus(corpus.seq_ptr, corpus.tok_ptr, corpus.attr, corpus.val, corpus.y)
    reg = Regularization(l1=0.01, l2=0.02)
    x0 = np.random.default_rng(0).normal(0.0, 0.2, space.n_features)
    res = bcd(Objective(plain, space, reg), x0, reg=reg, max_iterations=3, delta=0.0)
    assert np.all(res.x[space.bigram_offset :] == 0.0)
    assert res.f < Objective(plain, space, reg).value(x0, count=False)


def test_train_driver_checkpoint_resume(learnable, tmp_path):
    X, Y, Bs = learnable
    kw = dict(B=Bs, algorithm="bcd", support="all", l1=0.01, l2=0.01, seed=3, params={"delta": 0.0})
    full = train(X, Y, max_iterations=4, **kw)
    assert full.model.meta["algorithm"] == "bcd"
    space = full.model.space
    assert space.n_bigram > 0 and np.count_nonzero(full.model.weights[space.bigram_offset :]) > 0
    ck = tmp_path / "b.ckpt"
    part = train(X, Y, max_iterations=2, checkpoint=ck, checkpoint_every=1, **kw)
    assert part.iterations == 2
    rest = train(X, Y, max_iterations=4, resume=ck, **kw)
    np.testing.assert_array_equal(rest.model.weights, full.model.weights)


def test_cli_nettalk_3grm_bcd(tmp_path):
    from crfkit.cli import main
    from crfkit.datasets.nettalk import nettalk_split, write_columns
    from crfkit.model import CRFModel

    train_s, _, test_s = nettalk_split(9)
    write_columns(train_s[:60], tmp_path / "train.txt")
    m = tmp_path / "m.crf"
    rc = main(
        [
            "train",
            str(tmp_path / "train.txt"),
            "--features",
            "nettalk:3-grm",
            "--support",
            "all",
            "-a",
            "bcd",
            "--rho1",
            "0.5",
            "--rho2",
            "1e-5",
            "--max-iterations",
            "2",
            "-m",
            str(m),
        ]
    )
    assert rc in (0, None)
    model = CRFModel.load(m)
    assert model.space.n_bigram > 0
    assert model.meta["algorithm"] == "bcd"
    assert np.count_nonzero(model.weights[model.space.bigram_offset :]) > 0


# ------------------------------------------------------------------ Wapiti's step rule
# (safeguard=scale)
def test_curvature_scale_is_wapitis_factor():
    rng = np.random.default_rng(3)
    for nk in (1, 5, 40):
        G = rng.normal(size=nk) * 3.0
        H = rng.random(nk)
        H[rng.random(nk) < 0.2] = 0.0  # h = 0: left out of the maximum
        emp = rng.random(nk + 7)
        e0 = 7
        ok = H > 0
        want = (
            max(1.0, float(np.max(np.abs(G - emp[e0 : e0 + nk])[ok] / H[ok]))) if ok.any() else 1.0
        )
        assert B.K.curvature_scale(G, H, emp, e0, nk) == want
    assert (
        B.K.curvature_scale(np.array([0.1]), np.array([1.0]), np.zeros(1), 0, 1) == 1.0
    )  # at least 1


@pytest.mark.parametrize("blocks", ["separate", "joint"])
def test_scale_safeguard_takes_wapitis_scaled_newton_step_block_by_block(blocks):
    """safeguard=scale: each block moves to s(kappa a h w - g, l1) / (kappa a h + l2) with
    a = max(1, max |g / h|) per part (state, label pairs), taken without a trial, against the same
    formula on the block's derivatives from the engine; the emission caches stay coherent (log Z is
    left stale for the driver)."""
    X, Y, Bs, space, corpus = bigram_problem(11)
    reg = Regularization(l1=0.01, l2=0.1)
    obj, eng = engine_at(
        space, corpus, reg, np.random.default_rng(12).normal(0.0, 0.3, space.n_features), blocks
    )
    stats = np.zeros(B.K.N_STATS)
    order = block_order(4, 0, eng.n_blocks)
    kappa = 1.5
    ix = eng.index
    moved = 0
    for b in range(eng.n_blocks):
        j = int(order[b])
        ks, g, h = eng.block_derivatives(j, 0.0)  # the loss part: g = (G - emp) / n, h = H / n
        nu = int(space.attr_ptr[ix.ua[j] + 1] - space.attr_ptr[ix.ua[j]]) if ix.ua[j] >= 0 else 0
        want = eng.w[ks].copy()
        for sl in (slice(0, nu), slice(nu, len(ks))):
            gs, hs, x = g[sl], h[sl], eng.w[ks][sl]
            ok = hs > 0
            a = max(1.0, float(np.max(np.abs(gs[ok]) / hs[ok]))) if ok.any() else 1.0
            hk = kappa * a * hs
            z = hk * x - gs
            want[sl] = np.sign(z) * np.maximum(np.abs(z) - reg.l1, 0.0) / (hk + reg.l2)
        eng.attribute_blocks(order, b, b + 1, reg, kappa, 1e-4, 10.0, 20, stats, safeguard="scale")
        if ix.ap[j + 1] > ix.ap[j]:
            np.testing.assert_allclose(eng.w[ks], want, rtol=1e-12, atol=1e-14)
            moved += 1
    assert moved > 0 and stats[B.K.ST_TRIALS] == 0 and stats[B.K.ST_ACCEPT] > 0
    E = eng.E.copy()
    eng.refresh()
    np.testing.assert_allclose(E, eng.E, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("blocks", ["separate", "joint"])
def test_scale_safeguard_driver_reports_the_true_objective_and_resumes_bitwise(learnable, blocks):
    X, Y, Bs = learnable
    space, corpus = build(X, Y, B=Bs, support="all")
    reg = Regularization(l1=0.01, l2=0.02)
    obj = Objective(corpus, space, reg)
    kw = dict(reg=reg, delta=0.0, seed=3, blocks=blocks, safeguard="scale", monitor=False)
    recs = []
    res = bcd(
        obj,
        None,
        max_iterations=6,
        callback=lambda i: recs.append((i["x"].copy(), i["f"], i["trials"])),
        **kw,
    )
    for (
        x,
        f,
        trials,
    ) in recs:  # the caches' objective (log Z recomputed after the sweep) is the true one
        assert f == pytest.approx(obj.value(x, count=False), rel=1e-11)
    assert recs[-1][1] < recs[0][1]
    first = bcd(Objective(corpus, space, reg), None, max_iterations=3, **kw)
    assert first.state["settings"]["safeguard"] == "scale"
    with pytest.raises(ValueError, match="other settings"):
        bcd(
            Objective(corpus, space, reg),
            None,
            max_iterations=6,
            state=first.state,
            **{**kw, "safeguard": "armijo"},
        )
    res2 = bcd(Objective(corpus, space, reg), None, max_iterations=6, state=first.state, **kw)
    np.testing.assert_array_equal(res.x, res2.x)
    with pytest.raises(ValueError, match="unknown safeguard"):
        bcd(Objective(corpus, space, reg), None, reg=reg, max_iterations=1, safeguard="wolfe")


def test_scale_safeguard_reaches_the_owlqn_optimum(learnable):
    X, Y, Bs = learnable
    space, corpus = build(X, Y, B=Bs, support="all")
    reg = Regularization(l1=0.01, l2=0.02)
    f_star, w_star = owlqn_optimum(space, corpus, reg)
    res = bcd(
        Objective(corpus, space, reg),
        None,
        reg=reg,
        max_iterations=600,
        delta=1e-12,
        seed=1,
        blocks="joint",
        safeguard="scale",
    )
    assert res.f == pytest.approx(f_star, rel=1e-6)
    np.testing.assert_array_equal(res.x != 0, w_star != 0)


# ------------------------------------------------------------------ messages kept between blocks
@pytest.mark.parametrize(
    "blocks,safeguard", [("separate", "armijo"), ("joint", "armijo"), ("joint", "scale")]
)
def test_kept_messages_give_the_weights_of_recursions_from_the_start(blocks, safeguard):
    """Each block reuses the forward and backward messages that earlier blocks left valid in its
    sequences and recomputes only the stale part: block by block, the weights are those of an engine
    whose messages are all marked stale before every block, to the bit.  With the Armijo rule (log Z
    kept current), every position where both kept messages are marked valid gives the sequence's log
    Z."""
    X, Y, Bs, space, corpus = bigram_problem(11, n_seq=20, max_len=8)
    reg = Regularization(l1=0.01, l2=0.1)
    w0 = np.random.default_rng(12).normal(0.0, 0.3, space.n_features)
    _, e1 = engine_at(space, corpus, reg, w0, blocks)
    _, e2 = engine_at(space, corpus, reg, w0, blocks)
    order = block_order(5, 0, e1.n_blocks)
    reused, s1, s2 = bcd_blocks_with_and_without_kept_messages(
        e1, e2, order, reg, (1.0, 0.05), safeguard, corpus.seq_ptr
    )
    assert reused > 0 and s1[B.K.ST_ACCEPT] > 10
    np.testing.assert_array_equal(s1, s2)


def test_full_label_pair_rows_are_added_as_vectors():
    """In Wapiti's space (every label pair of every bigram attribute, in order) a position's
    transition row adds each attribute's weights as one vector: the same rows, log Z and block steps
    as the feature-by- feature route, to the bit."""
    X, Y, Bs, space, corpus = bigram_problem(13, n_seq=16, max_len=7, support="all")
    assert space.bigram_full_rows.all()
    reg = Regularization(l1=0.01, l2=0.1)
    w0 = np.random.default_rng(14).normal(0.0, 0.3, space.n_features)
    w0[np.random.default_rng(15).random(space.n_features) < 0.5] = (
        0.0  # zero weights inside full rows
    )
    obj = Objective(corpus, space, reg)
    e1 = Engine(obj, w0.copy(), "joint")
    e2 = Engine(obj, w0.copy(), "joint")
    e2.bfull = np.zeros_like(e2.bfull)
    e2.bpair = space.bfeat_pair  # (the feature-by-feature route reads the pairs: made here)
    e1.refresh()
    e2.refresh()
    assert np.array_equal(e1.lz, e2.lz)
    s1, s2 = np.zeros(B.K.N_STATS), np.zeros(B.K.N_STATS)
    order = block_order(3, 0, e1.n_blocks)
    for sg in ("armijo", "scale"):
        e1.attribute_blocks(order, 0, e1.n_blocks, reg, 1.0, 1e-4, 10.0, 20, s1, safeguard=sg)
        e2.attribute_blocks(order, 0, e2.n_blocks, reg, 1.0, 1e-4, 10.0, 20, s2, safeguard=sg)
        assert np.array_equal(e1.w, e2.w)
    e1.refresh()
    e2.refresh()
    assert np.array_equal(e1.lz, e2.lz)


@pytest.mark.parametrize("n", list(range(1, 14)) + [2601])
def test_range_of_is_max_and_min(n):
    x = np.random.default_rng(n).normal(0.0, 5.0, n)
    assert B.K.range_of(x) == (x.max(), x.min())


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="/proc/self/smaps")
@pytest.mark.parametrize("blocks,safeguard", [("separate", "armijo"), ("joint", "scale")])
def test_bcd_writes_only_the_weights_that_move(blocks, safeguard):
    """BCD's weights are lazy zeros (crfkit.memtrim.lazy_zeros) and its kernels write only the
    entries a step changes: after training in a candidate space of 24 labels (a label-pair block
    spans two or three 4 KB pages) with a strong L1 term, the weights' resident pages are the pages
    that hold a non-zero weight, not every page of a block that moved, nor the whole vector (a copy
    of the start)."""
    from conftest import mapping_rss_kb

    rng = np.random.default_rng(7)
    X, Y = random_sequences(rng, 300, n_labels=24, min_len=2, max_len=8, n_attr=150, max_attrs=3)
    Bs = random_bigram_attributes(rng, X, 150, real=False)
    space, corpus = build(X, Y, B=Bs, support="all")
    reg = Regularization(l1=0.005, l2=1e-4)
    res = bcd(
        Objective(corpus, space, reg),
        np.zeros(space.n_features),
        reg=reg,
        max_iterations=3,
        blocks=blocks,
        safeguard=safeguard,
    )
    w = res.x
    nz = np.flatnonzero(w)
    assert 0 < len(nz) < space.n_features // 20
    start = w.ctypes.data
    pages = {(start + 8 * int(k)) >> 12 for k in nz}
    resident = mapping_rss_kb(w) // 4
    assert resident <= len(pages) + 1, (resident, len(pages), w.nbytes >> 12)
