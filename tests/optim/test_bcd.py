"""Block coordinate descent (Lavergne et al. 2010, §3.4): the inverted index, block gradients and
diagonals against finite differences and brute-force marginals, cache coherence, the elastic-net
optimum of OWL-QN, monotone sweeps with the safeguard, stopping, resume, bad parameters,
refusals."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from conftest import bcd_blocks_with_and_without_kept_messages, markov_corpus, random_sequences
from crfkit.errors import CrfkitError
from crfkit.features.encode import build
from crfkit.objective import Objective, Regularization
from crfkit.optim import bcd as B
from crfkit.optim.bcd import Engine, bcd, block_order, inverted_index
from crfkit.train import train, train_corpus

LABELS = ["A", "B", "C"]


def learnable(seed, n_seq=50):
    """Markov-chain labels; a signature attribute right 85% of the time, noise words, a real-valued
    one, and BOS once per sequence (its diagonal is exact)."""
    return markov_corpus(seed, n_seq, noise=("w", 15, 1), real_range=(-1.0, 1.0), bos=True)


@pytest.fixture(scope="module")
def small():
    X, Y = learnable(0)
    space, corpus = build(X, Y)
    return X, Y, space, corpus


@pytest.fixture(scope="module")
def rand():
    """Random attributes, repeated within tokens and sequences, half of them real-valued."""
    rng = np.random.default_rng(3)
    X, Y = random_sequences(rng, 30, n_labels=3, n_attr=8, max_len=6, max_attrs=4, real=True)
    for x in X:  # once per sequence (the diagonal is then exact)
        x[0].append("BOS")
        x[-1].append(("EOS", 0.7))
    space, corpus = build(X, Y)
    return X, Y, space, corpus


# ------------------------------------------------------------------ plain references
def plain_index(corpus):
    """attribute -> {sequence: [(token, summed value), ...]} by plain loops."""
    out = {}
    for s in range(corpus.n_sequences):
        for t in range(corpus.seq_ptr[s], corpus.seq_ptr[s + 1]):
            tot = {}
            for e in range(corpus.tok_ptr[t], corpus.tok_ptr[t + 1]):
                tot[int(corpus.attr[e])] = tot.get(int(corpus.attr[e]), 0.0) + float(corpus.val[e])
            for a, v in tot.items():
                out.setdefault(a, {}).setdefault(s, []).append((t, v))
    return out


def brute_marginals(space, corpus, w, s):
    """Node marginals (T x L) and per-position edge marginals ((T-1) x L x L) of sequence s by
    enumeration."""
    L, ns = space.n_labels, space.n_state
    t0, t1 = corpus.seq_ptr[s], corpus.seq_ptr[s + 1]
    T = t1 - t0
    em = np.zeros((T, L))
    for t in range(t0, t1):
        for e in range(corpus.tok_ptr[t], corpus.tok_ptr[t + 1]):
            a = corpus.attr[e]
            for k in range(space.attr_ptr[a], space.attr_ptr[a + 1]):
                em[t - t0, space.feat_label[k]] += w[k] * corpus.val[e]
    tr = np.zeros((L, L))
    for i in range(L):
        for j in range(L):
            if space.trans_index[i, j] >= 0:
                tr[i, j] = w[ns + space.trans_index[i, j]]
    paths = list(itertools.product(range(L), repeat=T))
    sc = np.array(
        [
            sum(em[t, p[t]] for t in range(T)) + sum(tr[p[t - 1], p[t]] for t in range(1, T))
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


def random_weights(space, seed, scale=0.7):
    return np.random.default_rng(seed).normal(0.0, scale, space.n_features)


def engine_at(space, corpus, reg, w):
    obj = Objective(corpus, space, reg)
    eng = Engine(obj, np.array(w, dtype=np.float64, copy=True))
    eng.refresh()
    return obj, eng


def fd_objective(obj, w, k, h=1e-4):
    """Central first and second differences of f along coordinate k."""
    e = np.zeros_like(w)
    e[k] = h
    fp, f0, fm = (
        obj.value(w + e, count=False),
        obj.value(w, count=False),
        obj.value(w - e, count=False),
    )
    return (fp - fm) / (2 * h), (fp - 2 * f0 + fm) / (h * h)


# ------------------------------------------------------------------ the inverted index
def test_inverted_index_equals_plain_loops(rand):
    X, Y, space, corpus = rand
    ix = inverted_index(corpus, space.n_attributes)
    ref = plain_index(corpus)
    merged = 0
    for a in range(space.n_attributes):
        seqs = ix.sequences(a)
        assert list(seqs) == sorted(ref.get(a, {})), a
        for g in range(ix.ap[a], ix.ap[a + 1]):
            s = ix.gseq[g]
            got = [
                (int(t), float(v))
                for t, v in zip(
                    ix.otok[ix.gptr[g] : ix.gptr[g + 1]], ix.oval[ix.gptr[g] : ix.gptr[g + 1]]
                )
            ]
            want = ref[a][s]
            assert [t for t, _ in got] == [t for t, _ in want]
            np.testing.assert_allclose([v for _, v in got], [v for _, v in want], rtol=1e-15)
            assert all(corpus.seq_ptr[s] <= t < corpus.seq_ptr[s + 1] for t, _ in got)
        toks, _ = ix.occurrences(a)
        assert len(toks) == sum(len(v) for v in ref.get(a, {}).values())
    # the fixture has attributes repeated in one token (merged) and in one sequence (one group)
    ent = np.diff(corpus.tok_ptr).sum()
    merged = ent - len(ix.otok)
    assert merged > 0
    assert len(ix.gseq) < len(ix.otok)


# ------------------------------------------------------------------ block derivatives
@pytest.mark.parametrize("fixture", ["rand", "small"])
def test_block_gradient_and_diagonal(fixture, request):
    X, Y, space, corpus = request.getfixturevalue(fixture)
    reg = Regularization(l1=0.0, l2=0.3)
    w = random_weights(space, 1)
    obj, eng = engine_at(space, corpus, reg, w)
    marg = [brute_marginals(space, corpus, w, s) for s in range(corpus.n_sequences)]
    ref = plain_index(corpus)
    n = corpus.n_sequences
    once_checked = 0
    for a in range(space.n_attributes):
        g, h = eng.attribute_derivatives(a, reg.l2)
        k0, k1 = space.attr_ptr[a], space.attr_ptr[a + 1]
        # diagonal: l2 + (1/n) sum over occurrences of v^2 p (1 - p), marginals by enumeration
        want_h = np.full(k1 - k0, reg.l2)
        for s, occ in ref[a].items():
            node = marg[s][0]
            for t, v in occ:
                p = node[t - corpus.seq_ptr[s], space.feat_label[k0:k1]]
                want_h += v * v * p * (1 - p) / n
        np.testing.assert_allclose(h, want_h, rtol=1e-10, atol=1e-14)
        once = all(len(occ) == 1 for occ in ref[a].values())
        for kk, k in enumerate(range(k0, k1)):
            fd_g, fd_h = fd_objective(obj, w, k)
            assert g[kk] == pytest.approx(fd_g, rel=1e-6, abs=1e-9)
            if (
                once
            ):  # no covariance between occurrences: the diagonal is the exact second derivative
                assert h[kk] == pytest.approx(fd_h, rel=1e-4, abs=1e-7)
                once_checked += 1
    assert once_checked > 0
    # the transition block
    g, h = eng.transition_derivatives(reg.l2)
    ns = space.n_state
    ti, tj = eng.ti, eng.tj
    want_h = np.full(len(ti), reg.l2)
    for s in range(n):
        edge = marg[s][1]
        p = edge[:, ti, tj]
        want_h += (p * (1 - p)).sum(axis=0) / n
    np.testing.assert_allclose(h, want_h, rtol=1e-10, atol=1e-14)
    for kk in range(len(ti)):
        k = ns + space.trans_index[ti[kk], tj[kk]]
        assert k == ns + kk
        fd_g, _ = fd_objective(obj, w, k)
        assert g[kk] == pytest.approx(fd_g, rel=1e-6, abs=1e-9)


def test_caches_stay_coherent_after_block_steps(rand):
    """After steps on some blocks, the emission cache, its exponentials and every log Z equal a
    fresh computation at the new weights; the objective held by the caches equals obj.value."""
    X, Y, space, corpus = rand
    reg = Regularization(l1=0.01, l2=0.1)
    obj, eng = engine_at(space, corpus, reg, random_weights(space, 2, 0.3))
    stats = np.zeros(B.K.N_STATS)
    f0 = eng.objective()
    eng.transition_step(reg, 1.0, 1e-4, 10.0, 20, stats)
    order = block_order(5, 0, space.n_attributes)
    eng.attribute_blocks(order, 0, space.n_attributes // 2, reg, 1.0, 1e-4, 10.0, 20, stats)
    assert stats[B.K.ST_ACCEPT] >= 2
    w = eng.w.copy()
    E, ES, EM, lz = eng.E.copy(), eng.ES.copy(), eng.EM.copy(), eng.lz.copy()
    f_cache = eng.objective()
    assert f_cache < f0
    assert f_cache - f0 == pytest.approx(stats[B.K.ST_DF], rel=1e-9, abs=1e-13)
    eng.refresh()
    np.testing.assert_allclose(E, eng.E, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(
        ES * np.exp(EM)[:, None], eng.ES * np.exp(eng.EM)[:, None], rtol=1e-12
    )
    np.testing.assert_allclose(lz, eng.lz, rtol=1e-12, atol=1e-12)
    assert f_cache == pytest.approx(obj.value(w, count=False), rel=1e-12)


# ------------------------------------------------------------------ the optimum
@pytest.fixture(scope="module")
def optimum(small):
    X, Y, space, corpus = small
    reg = Regularization(l1=0.01, l2=0.02)
    ref = train_corpus(
        space,
        corpus,
        algorithm="owlqn",
        reg=reg,
        gtol=1e-10,
        delta=0.0,
        epsilon=0.0,
        max_iterations=5000,
    )
    return reg, ref.objective, ref.model.weights


@pytest.mark.parametrize("order, shrink", [("random", 8), ("cyclic", 0), ("random", 0)])
def test_reaches_the_owlqn_elastic_net_optimum(small, optimum, order, shrink):
    X, Y, space, corpus = small
    reg, f_star, w_star = optimum
    assert 0 < np.count_nonzero(w_star) < len(w_star)  # L1 zeroes some of the features out
    obj = Objective(corpus, space, reg)
    shrunk = []
    res = bcd(
        obj,
        None,
        reg=reg,
        max_iterations=400,
        delta=1e-12,
        seed=1,
        order=order,
        shrink=shrink,
        callback=lambda info: shrunk.append(info["shrunk"]),
    )
    assert res.status == "converged"
    assert (sum(shrunk) > 0) == (shrink > 0)
    assert shrunk[-1] == 0  # the run stops on a sweep that visited every block
    assert res.f == pytest.approx(f_star, rel=1e-6)
    assert res.f >= f_star - 1e-9 * abs(f_star)
    np.testing.assert_array_equal(res.x != 0, w_star != 0)
    np.testing.assert_allclose(res.x, w_star, atol=2e-4)


def test_train_driver_runs_bcd(small, optimum):
    X, Y, space, corpus = small
    reg, f_star, w_star = optimum
    res = train(
        X, Y, algorithm="bcd", l1=reg.l1, l2=reg.l2, max_iterations=400, params={"delta": 1e-12}
    )
    assert res.objective == pytest.approx(f_star, rel=1e-6)
    assert res.model.meta["algorithm"] == "bcd"


def test_objective_never_increases_and_the_safeguard_acts(small):
    X, Y, space, corpus = small
    reg = Regularization(l1=0.01, l2=0.02)
    for kappa in (1.0, 0.05):  # 0.05: far too large steps, which the safeguard must cut back
        obj = Objective(corpus, space, reg)
        seen = []
        res = bcd(
            obj,
            None,
            reg=reg,
            max_iterations=15,
            delta=0.0,
            kappa=kappa,
            callback=lambda info: seen.append((info["f"], info["trials"], info["accepted"])),
        )
        fs = np.array(
            [obj.value(np.zeros(space.n_features), count=False)] + [f for f, _, _ in seen]
        )
        assert np.all(np.diff(fs) <= 1e-12 * np.abs(fs[1:])), kappa
        assert fs[-1] < fs[0]
        if kappa < 1:
            trials = sum(t for _, t, _ in seen)
            accepted = sum(a for _, _, a in seen)
            assert trials > 1.5 * accepted  # backtracking happened, often
        assert res.status == "max_iterations" and res.iterations == 15


def test_delta_rule_stops(small):
    X, Y, space, corpus = small
    reg = Regularization(l1=0.01, l2=0.02)
    for shrink in (0, 8):
        seen = []
        res = bcd(
            Objective(corpus, space, reg),
            None,
            reg=reg,
            max_iterations=200,
            delta=1e-4,
            period=2,
            monitor=False,
            shrink=shrink,
            callback=lambda info: seen.append((info["f"], info["shrunk"])),
        )
        fs = [f for f, _ in seen]
        assert res.status == "converged" and res.iterations < 200
        assert len(seen) == res.iterations
        assert (fs[-3] - fs[-1]) / fs[-1] < 1e-4 and seen[-1][1] == 0
        # the first sweep at which the rule holds with every block visited
        first = next(
            k for k in range(2, len(fs)) if (fs[k - 2] - fs[k]) / fs[k] < 1e-4 and seen[k][1] == 0
        )
        assert first == len(fs) - 1
        # a sweep that met the rule but left blocks out is followed by one that visits them all
        for k in range(2, len(fs) - 1):
            if (fs[k - 2] - fs[k]) / fs[k] < 1e-4:
                assert seen[k + 1][1] == 0
        assert any(sh for _, sh in seen) == (shrink > 0)


def test_keyboard_interrupt_returns_the_last_sweep(small):
    X, Y, space, corpus = small
    reg = Regularization(l1=0.01, l2=0.02)
    seen = []

    def cb(info):
        seen.append(info["x"].copy())
        if info["iteration"] == 2:
            raise KeyboardInterrupt

    res = bcd(
        Objective(corpus, space, reg), None, reg=reg, max_iterations=5, delta=0.0, callback=cb
    )
    assert res.status == "interrupted" and res.iterations == 2
    np.testing.assert_array_equal(res.x, seen[1])
    assert res.f == pytest.approx(Objective(corpus, space, reg).value(res.x), rel=1e-12)
    assert res.state["iteration"] == 2


@pytest.mark.parametrize("lazy", [False, True])
def test_resume_equals_the_uninterrupted_run(small, lazy, monkeypatch):
    """``lazy``: every vector counts as large (crfkit.memtrim.LAZY_MIN = 1), so the weights, the
    kept state and the resumed weights are lazy zeros with the non-zeros copied in: the same
    bits."""
    from crfkit import memtrim

    if lazy:
        monkeypatch.setattr(memtrim, "LAZY_MIN", 1)
    X, Y, space, corpus = small
    reg = Regularization(l1=0.01, l2=0.02)
    kw = dict(reg=reg, delta=0.0, seed=7, kappa=0.5)
    full = []
    res = bcd(
        Objective(corpus, space, reg),
        None,
        max_iterations=6,
        callback=lambda info: full.append((info["x"].copy(), info["f"])),
        **kw,
    )
    first = bcd(Objective(corpus, space, reg), None, max_iterations=3, **kw)
    st = first.state
    assert st["iteration"] == 3
    rest = []
    res2 = bcd(
        Objective(corpus, space, reg),
        None,
        max_iterations=6,
        state=st,
        callback=lambda info: rest.append((info["iteration"], info["x"].copy(), info["f"])),
        **kw,
    )
    assert [r[0] for r in rest] == [4, 5, 6]
    for (x, f), (_, x2, f2) in zip(full[3:], rest):
        np.testing.assert_array_equal(x, x2)
        assert f == f2
    np.testing.assert_array_equal(res.x, res2.x)
    assert res2.iterations == 6
    with pytest.raises(ValueError, match="other settings"):
        bcd(Objective(corpus, space, reg), None, max_iterations=6, state=st, reg=reg, seed=8)


def test_block_order_is_seeded(small):
    a = block_order(3, 0, 50)
    assert sorted(a) == list(range(50))
    np.testing.assert_array_equal(a, block_order(3, 0, 50))
    assert not np.array_equal(a, block_order(3, 1, 50))
    np.testing.assert_array_equal(block_order(3, 0, 50, "cyclic"), np.arange(50))


# ------------------------------------------------------------------ refusals
@pytest.mark.parametrize(
    "params, match",
    [
        ({"order": "sorted"}, "unknown order"),
        ({"delta": -1.0}, "delta must be >= 0"),
        ({"delta": "small"}, "delta must be a number"),
        ({"kappa": 0.0}, "kappa must be > 0"),
        ({"kappa": float("inf")}, "kappa must be finite"),
        ({"sigma": 1.0}, "sigma must be in"),
        ({"max_step": -2.0}, "max_step must be > 0"),
        ({"period": 0}, "period must be an integer >= 1"),
        ({"trans_steps": -1}, "trans_steps must be an integer >= 0"),
        ({"max_back": 2.5}, "max_back must be an integer"),
        ({"max_iterations": -1}, "max_iterations"),
        ({"shrink": -1}, "shrink must be an integer >= 0"),
    ],
)
def test_bad_params_raise(small, params, match):
    X, Y, space, corpus = small
    reg = Regularization(l1=0.01, l2=0.02)
    kw = {"max_iterations": 1}
    kw.update(params)
    with pytest.raises(ValueError, match=match):
        bcd(Objective(corpus, space, reg), None, reg=reg, **kw)


def test_unknown_param_wrong_x0_and_dense_refused(small):
    X, Y, space, corpus = small
    reg = Regularization(l1=0.01, l2=0.02)
    with pytest.raises(TypeError):
        bcd(Objective(corpus, space, reg), None, reg=reg, max_iterations=1, eta=0.1)
    with pytest.raises(ValueError, match="x0 has shape"):
        bcd(Objective(corpus, space, reg), np.zeros(3), reg=reg, max_iterations=1)
    rng = np.random.default_rng(0)
    dense = [rng.normal(size=(len(y), 2)) for y in Y]
    dspace, dcorpus = build(X, Y, dense=dense)
    with pytest.raises(CrfkitError, match="bcd does not support dense features"):
        bcd(Objective(dcorpus, dspace, reg), None, reg=reg, max_iterations=1)
    # label-pair x observation features are trained (tests/test_bcd_bigram.py), no longer refused


def test_last_completed_is_the_state_or_the_starting_point():
    from crfkit.optim.stochastic import last_completed

    x, it = last_completed(None, None, 3)
    np.testing.assert_array_equal(x, np.zeros(3))
    assert it == 0
    x0 = np.array([1.0, -2.0])
    x, it = last_completed(None, x0, 2)
    np.testing.assert_array_equal(x, x0)
    assert it == 0 and x is not x0
    saved = np.array([0.5, 0.25])
    x, it = last_completed(lambda: {"x": saved, "iteration": 4}, x0, 2)
    np.testing.assert_array_equal(x, saved)
    assert it == 4 and x is not saved


# ------------------------------------------------------------------ Wapiti's step rule
# (safeguard=scale)
def test_scale_safeguard_steps_and_optimum(rand, small, optimum):
    """safeguard=scale without label-pair features: each attribute block moves to s(kappa a h w - g,
    l1) / (kappa a h + l2), a = max(1, max |g / h|), with no trial (against the formula on the
    engine's block derivatives); the emission caches stay coherent; the driver's per-sweep objective
    is the true one and it reaches OWL-QN's elastic-net optimum."""
    X, Y, space, corpus = rand
    reg = Regularization(l1=0.01, l2=0.1)
    obj, eng = engine_at(space, corpus, reg, random_weights(space, 4, 0.3))
    stats = np.zeros(B.K.N_STATS)
    order = block_order(6, 0, space.n_attributes)
    kappa = 1.5
    for b in range(space.n_attributes):
        a_ = int(order[b])
        k0, k1 = int(space.attr_ptr[a_]), int(space.attr_ptr[a_ + 1])
        g, h = eng.attribute_derivatives(a_, 0.0)
        x = eng.w[k0:k1].copy()
        ok = h > 0
        a = max(1.0, float(np.max(np.abs(g[ok]) / h[ok]))) if ok.any() else 1.0
        z = kappa * a * h * x - g
        want = np.sign(z) * np.maximum(np.abs(z) - reg.l1, 0.0) / (kappa * a * h + reg.l2)
        eng.attribute_blocks(order, b, b + 1, reg, kappa, 1e-4, 10.0, 20, stats, safeguard="scale")
        if eng.index.ap[a_ + 1] > eng.index.ap[a_]:
            np.testing.assert_allclose(eng.w[k0:k1], want, rtol=1e-12, atol=1e-14)
    assert stats[B.K.ST_TRIALS] == 0 and stats[B.K.ST_ACCEPT] > 0
    E = eng.E.copy()
    eng.refresh()
    np.testing.assert_allclose(E, eng.E, rtol=1e-12, atol=1e-12)

    X, Y, space, corpus = small
    reg, f_star, w_star = optimum
    obj = Objective(corpus, space, reg)
    seen = []
    res = bcd(
        obj,
        None,
        reg=reg,
        max_iterations=400,
        delta=1e-12,
        seed=1,
        safeguard="scale",
        monitor=False,
        callback=lambda info: seen.append((info["x"].copy(), info["f"])),
    )
    for x, f in seen[:5]:
        assert f == pytest.approx(obj.value(x, count=False), rel=1e-11)
    assert res.f == pytest.approx(f_star, rel=1e-6)
    np.testing.assert_array_equal(res.x != 0, w_star != 0)


@pytest.mark.parametrize("safeguard", ["armijo", "scale"])
def test_kept_messages_give_the_weights_of_recursions_from_the_start(rand, safeguard):
    """Each block reuses the forward and backward messages that earlier blocks left valid in its
    sequences and recomputes only the stale part: block by block, the weights are those of an engine
    whose messages are all marked stale before every block, to the bit; with the Armijo rule (log Z
    kept current), every position where both kept messages are marked valid gives the sequence's log
    Z."""
    X, Y, space, corpus = rand
    reg = Regularization(l1=0.01, l2=0.1)
    w0 = random_weights(space, 4, 0.3)
    _, e1 = engine_at(space, corpus, reg, w0)
    _, e2 = engine_at(space, corpus, reg, w0)
    order = block_order(6, 0, space.n_attributes)
    reused, s1, s2 = bcd_blocks_with_and_without_kept_messages(
        e1, e2, order, reg, (1.0,), safeguard, corpus.seq_ptr
    )
    assert reused > 0 and s1[B.K.ST_ACCEPT] > 5
    np.testing.assert_array_equal(s1, s2)
