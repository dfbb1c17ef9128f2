"""Kernels (forward-backward, Viterbi, marginals, loss/gradient) against brute force.

Random tiny chains (T <= 5, up to 4 labels, random attribute sets, binary and
real-valued attributes, weights of scale ~2) are checked against enumeration
of every label path: log Z, node marginals, summed edge marginals, the Viterbi
path and score, p(y|x), the gradient.  Long chains and huge weights are
checked against a log-domain numpy forward-backward.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import (
    Reference,
    brute_gradient,
    corpus_dense_scores,
    dense_transitions,
    enumerate_chain,
    logdomain_chain,
    model_from_scores,
    path_score,
    random_sequences,
)
from crfkit.features.encode import build, encode
from crfkit.kernels import chain
from crfkit.model import CRFModel
from crfkit.objective import Objective, Regularization

TOL = 1e-10
SETTINGS = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@st.composite
def chains(draw):
    L = draw(st.integers(1, 4))
    T = draw(st.integers(1, 5 if L <= 3 else 4))
    return dict(
        seed=draw(st.integers(0, 2**32 - 1)),
        L=L,
        T=T,
        support=draw(st.sampled_from(["observed", "all"])),
        transitions=draw(st.sampled_from(["observed", "all"])),
        real=draw(st.booleans()),
    )


def _setup(p):
    """A model built on random training data, a test sequence of length T (with an unknown
    attribute)."""
    rng = np.random.default_rng(p["seed"])
    X, Y = random_sequences(rng, int(rng.integers(1, 4)), n_labels=p["L"], real=p["real"], n_attr=5)
    x, y = random_sequences(
        rng, 1, min_len=p["T"], max_len=p["T"], n_labels=p["L"], real=p["real"], n_attr=5
    )
    X, Y = x + X, y + Y
    space, _ = build(X, Y, support=p["support"], transitions=p["transitions"])
    w = rng.normal(0.0, 2.0, space.n_features)
    model = CRFModel(space, w)
    # the test sequence: the first training sequence plus an attribute the model has never seen
    xt = [list(tok) + (["never-seen"] if t % 2 == 0 else []) for t, tok in enumerate(X[0])]
    return rng, model, xt


@SETTINGS
@given(chains())
def test_random_chain_against_enumeration(p):
    rng, model, x = _setup(p)
    ref = Reference(model)
    score = ref.scores(x)
    bf = enumerate_chain(score, ref.trans)
    L = model.space.n_labels
    T = len(x)

    corpus = model.encode([x])
    marg, logz = model.marginals(corpus)
    assert logz[0] == pytest.approx(bf["logz"], rel=1e-12, abs=TOL)
    np.testing.assert_allclose(marg, bf["node"], rtol=0, atol=TOL)

    ids, vscore = model.viterbi(corpus)
    assert vscore[0] == pytest.approx(bf["best_score"], rel=1e-12, abs=TOL)
    assert path_score(score, ref.trans, ids) == pytest.approx(bf["best_score"], rel=1e-12, abs=TOL)
    if bf["gap"] > 1e-8:
        np.testing.assert_array_equal(ids, bf["best_path"])

    # p(y|x) of a random label sequence and of the best one
    y_ids = rng.integers(0, L, T)
    y = [model.labels[k] for k in y_ids]
    prob = model.sequence_probability([x], [y])
    expect = np.exp(path_score(score, ref.trans, y_ids) - bf["logz"])
    assert prob[0] == pytest.approx(expect, rel=1e-10, abs=1e-14)
    tags, pbest, marg2, _ = model.tag_with_probability([x])
    assert pbest[0] == pytest.approx(np.exp(bf["best_score"] - bf["logz"]), rel=1e-10)
    np.testing.assert_allclose(marg2, bf["node"], atol=TOL)
    assert tags[0] == [model.labels[k] for k in ids]

    # loss, summed edge marginals and gradient through the objective / oracle
    lab = model.encode([x], [y])
    obj = Objective(lab, model.space, Regularization())
    loss, node, edge = obj.oracle(0, model.weights)
    assert loss == pytest.approx(
        bf["logz"] - path_score(score, ref.trans, y_ids), rel=1e-12, abs=TOL
    )
    np.testing.assert_allclose(node, bf["node"], atol=TOL)
    np.testing.assert_allclose(edge, bf["edge"], atol=TOL)
    nll, g = obj.nll_sum_grad(model.weights)
    assert nll == pytest.approx(loss, rel=1e-12, abs=TOL)
    np.testing.assert_allclose(
        g, brute_gradient(model.space, x, y_ids, bf["node"], bf["edge"]), atol=1e-9
    )
    assert obj.nll_sum(model.weights) == pytest.approx(nll, rel=1e-12, abs=TOL)


def test_brute_force_reference_sanity():
    """The enumeration helper itself: a 2-token chain worked by hand."""
    score = np.array([[1.0, 0.0], [0.0, 2.0]])
    trans = np.array([[0.5, -1.0], [0.0, 0.0]])
    # paths: 00: 1+0+.5=1.5  01: 1+2-1=2  10: 0+0+0=0  11: 0+2+0=2
    s = np.array([1.5, 2.0, 0.0, 2.0])
    bf = enumerate_chain(score, trans)
    assert bf["logz"] == pytest.approx(np.log(np.exp(s).sum()))
    p = np.exp(s) / np.exp(s).sum()
    np.testing.assert_allclose(bf["node"][0], [p[0] + p[1], p[2] + p[3]])
    np.testing.assert_allclose(bf["edge"], [[p[0], p[1]], [p[2], p[3]]])
    ld = logdomain_chain(score, trans)
    assert ld["logz"] == pytest.approx(bf["logz"])
    np.testing.assert_allclose(ld["edge"], bf["edge"])


@pytest.mark.parametrize("threads", [1, 2])
def test_batch_of_sequences_with_empty_ones(threads, restore_threads):
    """Several sequences (some empty) over several chunks: every sequence as if alone."""
    from crfkit.parallel import set_threads

    set_threads(threads)
    rng = np.random.default_rng(7)
    X, Y = random_sequences(rng, 40, min_len=0, max_len=4, n_labels=3, real=True, n_attr=8)
    X[0], Y[0] = [["a1"]], ["L0"]
    # training refuses empty sequences, but the kernels must take them (tagging input may have
    # them): build the space from the non-empty ones, then encode all of them against it
    space, _ = build(
        [x for x in X if x], [y for x, y in zip(X, Y) if x], support="observed", transitions="all"
    )
    corpus = encode(X, space, Y)
    model = CRFModel(space, rng.normal(0, 2, space.n_features))
    ref = Reference(model)
    marg, logz = model.marginals(corpus, threads=threads)
    ids, vs = model.viterbi(corpus, threads=threads)
    total = 0.0
    for i, x in enumerate(X):
        a, b = corpus.seq_ptr[i], corpus.seq_ptr[i + 1]
        if len(x) == 0:
            assert b == a and logz[i] == 0.0 and vs[i] == 0.0
            continue
        sc = ref.scores(x)
        bf = enumerate_chain(sc, ref.trans)
        assert logz[i] == pytest.approx(bf["logz"], abs=TOL)
        np.testing.assert_allclose(marg[a:b], bf["node"], atol=TOL)
        assert vs[i] == pytest.approx(bf["best_score"], abs=TOL)
        total += bf["logz"] - path_score(sc, ref.trans, corpus.y[a:b])
    obj = Objective(corpus, space, Regularization(), threads=threads)
    assert obj.nll_sum(model.weights) == pytest.approx(total, rel=1e-12)
    assert obj.nll_sum_grad(model.weights)[0] == pytest.approx(total, rel=1e-12)
    assert model.tag([[], [["a1"]]])[0] == []


def test_single_label_model():
    """L = 1: log Z is the score of the only path; its probability is 1."""
    X = [[["a"], ["b", ("c", 0.5)]], [["a"]]]
    Y = [["only", "only"], ["only"]]
    space, corpus = build(X, Y)
    model = CRFModel(space, np.array([1.0, 2.0, 4.0, 0.25]))  # a, b, c, only->only
    _, logz = model.marginals(corpus)
    np.testing.assert_allclose(logz, [1 + 2 + 0.5 * 4 + 0.25, 1.0])
    np.testing.assert_allclose(model.sequence_probability(X, Y), [1.0, 1.0])
    obj = Objective(corpus, space, Regularization())
    f, g = obj.nll_sum_grad(model.weights)
    assert f == pytest.approx(0.0, abs=1e-12)
    np.testing.assert_allclose(g, 0.0, atol=1e-12)


# ------------------------------------------------------------------- stability
def _long_corpus(T, L, seed, real=True):
    rng = np.random.default_rng(seed)
    X, Y = random_sequences(
        rng, 1, min_len=T, max_len=T, n_attr=40, n_labels=L, max_attrs=3, real=real
    )
    X[0][0].append("a0")
    space, corpus = build(X, Y, support="all", transitions="all")
    return rng, space, corpus


@pytest.mark.parametrize(
    "emission_scale,real",
    [(50.0, True), (500.0, True), (50.0, False), (75.0, False), (500.0, False)],
)
def test_long_sequence_large_weights_match_log_domain(emission_scale, real):
    """10,000 tokens, transitions of magnitude 50, emissions of magnitude 50..500.

    Binary attributes with |w| * (attributes per token) <= 300 take the
    full-batch kernel's exp-domain emission path; the others the robust one.
    """
    T, L = 10_000, 5
    rng, space, corpus = _long_corpus(T, L, 11, real=real)
    w = np.concatenate(
        [
            rng.uniform(-emission_scale, emission_scale, space.n_state),
            rng.uniform(-50.0, 50.0, space.n_trans),
        ]
    )
    model = CRFModel(space, w)
    score = corpus_dense_scores(space, corpus, w)
    trans = dense_transitions(space, w)
    ref = logdomain_chain(score, trans)

    marg, logz = model.marginals(corpus)
    assert np.isfinite(logz[0])
    assert logz[0] == pytest.approx(ref["logz"], rel=1e-10)
    np.testing.assert_allclose(marg.sum(axis=1), 1.0, atol=1e-10)
    np.testing.assert_allclose(marg, ref["node"], atol=1e-8)

    obj = Objective(corpus, space, Regularization(l2=0.1))
    f, g = obj.value_and_grad(w)
    gold = score[np.arange(T), corpus.y].sum() + trans[corpus.y[:-1], corpus.y[1:]].sum()
    nll = ref["logz"] - gold
    assert np.isfinite(f) and np.all(np.isfinite(g))
    assert f == pytest.approx(nll + 0.05 * w @ w, rel=1e-9)
    assert obj.value(w) == pytest.approx(f, rel=1e-12)
    # the gradient from the reference marginals
    g_ref = brute_gradient_from_corpus(space, corpus, ref["node"], ref["edge"]) + 0.1 * w
    np.testing.assert_allclose(g, g_ref, rtol=1e-7, atol=1e-6)
    _, node, edge = obj.oracle(0, w)
    np.testing.assert_allclose(edge, ref["edge"], rtol=1e-8, atol=1e-7)


def brute_gradient_from_corpus(space, corpus, node, edge):
    """Expected minus observed feature counts of a one-sequence corpus, vectorised."""
    T = corpus.n_tokens
    L = space.n_labels
    resid = node.copy()
    resid[np.arange(T), corpus.y] -= 1.0
    tok_of = np.repeat(np.arange(T), np.diff(corpus.tok_ptr))
    G = np.zeros((space.n_attributes, L))
    np.add.at(G, corpus.attr, corpus.val[:, None] * resid[tok_of])
    g = np.zeros(space.n_features)
    g[: space.n_state] = G[space.feature_attr(), space.feat_label]
    E = edge.copy()
    np.add.at(E, (corpus.y[:-1], corpus.y[1:]), -1.0)
    m = space.trans_index >= 0
    g[space.n_state + space.trans_index[m]] = E[m]
    return g


def _fallback_chain(T, seed):
    """Transitions -800 except a 3-cycle; every token prefers a random label by 900.

    Whenever the preferred label does not follow the cycle, every state's
    scaled mass is exp(-800) or exp(-900) = 0 in double precision.
    """
    rng = np.random.default_rng(seed)
    L = 3
    trans = np.full((L, L), -800.0)
    trans[0, 1], trans[1, 2], trans[2, 0] = rng.normal(0, 2, 3)
    score = np.full((T, L), -900.0)
    pref = rng.integers(0, L, T)
    score[np.arange(T), pref] = rng.normal(0, 2, T)
    return score, trans


def test_forced_log_domain_fallback_matches_reference():
    score, trans = _fallback_chain(60, 3)
    T, L = score.shape
    # the scaled recursion must really give up here (the fallback flags scale[0] = -1)
    tmax = trans.max()
    es, al, be, sc = np.empty((T, L)), np.empty((T, L)), np.empty((T, L)), np.empty(T)
    lz = chain.forward_backward(score, T, trans, np.exp(trans - tmax), tmax, es, al, be, sc)
    assert sc[0] < 0, "the test chain did not exercise the log-domain fallback"
    ref = logdomain_chain(score, trans)
    assert lz == pytest.approx(ref["logz"], rel=1e-12)

    model, X = model_from_scores(score, trans)
    corpus = model.encode(X)
    marg, logz = model.marginals(corpus)
    assert logz[0] == pytest.approx(ref["logz"], rel=1e-12)
    np.testing.assert_allclose(marg, ref["node"], atol=1e-10)
    np.testing.assert_allclose(marg.sum(axis=1), 1.0, atol=1e-12)

    y = [model.labels[k] for k in np.argmax(ref["node"], axis=1)]
    lab = model.encode(X, [y])
    obj = Objective(lab, model.space, Regularization())
    loss, node, edge = obj.oracle(0, model.weights)
    np.testing.assert_allclose(node, ref["node"], atol=1e-10)
    np.testing.assert_allclose(edge, ref["edge"], atol=1e-10)
    nll, g = obj.nll_sum_grad(model.weights)
    assert np.all(np.isfinite(g))
    # nll = log Z - gold score, both ~ -1e4 here: compare at the precision of those terms
    big = abs(ref["logz"]) * 1e-14
    assert nll == pytest.approx(loss, abs=big)
    assert obj.nll_sum(model.weights) == pytest.approx(loss, abs=big)
    g_ref = brute_gradient_from_corpus(model.space, lab, ref["node"], ref["edge"])
    np.testing.assert_allclose(g, g_ref, atol=1e-9)
    # Viterbi on the same chain: its score is the best path's
    ids, vs = model.viterbi(corpus)
    assert vs[0] == pytest.approx(path_score(score, trans, ids), rel=1e-12)


def _check_against_reference(score, trans):
    model, X = model_from_scores(score, trans)
    ref = logdomain_chain(score, trans)
    corpus = model.encode(X)
    marg, logz = model.marginals(corpus)
    assert logz[0] == pytest.approx(ref["logz"], rel=1e-12)
    np.testing.assert_allclose(marg, ref["node"], atol=1e-10)
    y = [model.labels[k] for k in np.argmax(ref["node"], axis=1)]
    obj = Objective(model.encode(X, [y]), model.space, Regularization())
    gold = path_score(score, trans, np.argmax(ref["node"], axis=1))
    assert obj.nll_sum(model.weights) == pytest.approx(ref["logz"] - gold, rel=1e-12, abs=1e-9)


def test_scaled_recursion_lost_mass_that_later_dominates():
    """Regression (found with this test, fixed in a88f251): mass that underflowed to 0 came back.

    Before the fix the scaled recursion gave log Z = -1378 instead of -746 and NaN marginals.
    """
    # L=2: label 1 at t=0 costs 746 (exp(-746) == 0.0); 0->0 costs 689, 0->1 costs 800.
    # Path 1,1,1 scores -746, path 0,0,0 scores -1378, so log Z ~ -746; every
    # per-position scale of the scaled recursion is >= exp(-689) > 1e-300.
    score = np.array([[0.0, -746.0], [0.0, 0.0], [0.0, 0.0]])
    trans = np.array([[-689.0, -800.0], [-1000.0, 0.0]])
    _check_against_reference(score, trans)


def test_scaled_recursion_subnormal_mass_with_transitions_of_400():
    """Regression (fixed in a88f251): a subnormal exp(score - max), amplified by transitions
    spanning 400.

    Before the fix log Z was off by 7.5e-5.
    """
    D = 400.0
    trans = np.array([[-D, -D, -D], [0.0, 0.0, 0.0], [-D, 0.0, 0.0]])
    score = np.array([[-400.0, -400.0, 0.0], [0.0, -737.0, -2000.0], [0.0, 0.0, 0.0]])
    _check_against_reference(score, trans)


@pytest.mark.parametrize("span", [150.0, 199.9, 200.1, 400.0, 1500.0])
def test_transition_spans_around_the_log_domain_switch(span):
    """Transitions spanning ``span`` with emissions spanning 900, on both sides of the scaled/log
    switch."""
    rng = np.random.default_rng(int(span * 10))
    T, L = 40, 4
    for _ in range(5):
        trans = rng.uniform(-span, 0.0, (L, L))
        trans.flat[rng.choice(L * L, 2, replace=False)] = [-span, 0.0]
        trans += rng.normal(0, 20)
        score = rng.choice([0.0, -300.0, -600.0, -900.0], size=(T, L)) + rng.normal(0, 1, (T, L))
        _check_against_reference(score, trans)
        model, X = model_from_scores(score, trans)
        ref = logdomain_chain(score, trans)
        y = [model.labels[k] for k in np.argmax(ref["node"], axis=1)]
        obj = Objective(model.encode(X, [y]), model.space, Regularization())
        _, node, edge = obj.oracle(0, model.weights)
        np.testing.assert_allclose(edge, ref["edge"], atol=1e-10)
        g = obj.nll_sum_grad(model.weights)[1]
        g_ref = brute_gradient_from_corpus(model.space, obj.corpus, ref["node"], ref["edge"])
        np.testing.assert_allclose(g, g_ref, atol=1e-9)


def test_fallback_random_large_transitions():
    """Many random chains with transitions of magnitude ~800 and emissions ~900: always the
    reference."""
    for seed in range(20):
        score, trans = _fallback_chain(30, 100 + seed)
        model, X = model_from_scores(score, trans)
        ref = logdomain_chain(score, trans)
        marg, logz = model.marginals(model.encode(X))
        assert logz[0] == pytest.approx(ref["logz"], rel=1e-12)
        np.testing.assert_allclose(marg, ref["node"], atol=1e-10)


# ------------------------------------------------------------------ vector helpers of the
# per-example kernels
def test_vector_exp_is_within_one_ulp_of_libm():
    x = np.concatenate([np.linspace(-708.0, 709.0, 200_001), [0.0, -0.0, -1e-300, 1e-300]])
    got = chain.exp_minus(x.reshape(-1, 1), 0.0).ravel()
    ref = np.exp(x)
    assert np.abs(got.view(np.int64) - ref.view(np.int64)).max() <= 1
    m = np.random.default_rng(0).standard_normal((7, 5))
    np.testing.assert_allclose(chain.exp_minus(m, 0.5), np.exp(m - 0.5), rtol=2.3e-16, atol=0)
    edge = chain.exp_minus(np.array([-800.0, -708.5, 710.0, np.nan, -np.inf, np.inf]), 0.0)
    assert edge[0] == 0.0 and edge[1] == 0.0 and edge[2] == np.inf and np.isnan(edge[3])
    assert edge[4] == 0.0 and edge[5] == np.inf


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000), L=st.integers(1, 5), support=st.sampled_from(["observed", "all"])
)
def test_row_emissions_are_the_scattered_ones(seed, L, support):
    """emissions_rows (full label rows as vectors, the rest scattered) gives emissions' scores, to
    the rounding of the changed summation order; full_rows flags exactly the attributes with every
    label in order."""
    rng = np.random.default_rng(seed)
    labels = [f"l{k}" for k in range(L)]
    X, Y = [], []
    for _ in range(int(rng.integers(1, 6))):
        T = int(rng.integers(1, 7))
        X.append(
            [
                [f"a{int(rng.integers(8))}" for _ in range(int(rng.integers(0, 4)))]
                + ([("r", float(rng.normal()))] if rng.random() < 0.5 else [])
                for _ in range(T)
            ]
        )
        Y.append([labels[int(rng.integers(L))] for _ in range(T)])
    space, corpus = build(X, Y, support=support)
    full = chain.full_rows(space.attr_ptr, space.feat_label, space.n_labels)
    for a in range(len(space.attr_ptr) - 1):
        labs = space.feat_label[space.attr_ptr[a] : space.attr_ptr[a + 1]]
        assert bool(full[a]) == (
            len(labs) == space.n_labels and np.array_equal(labs, np.arange(space.n_labels))
        )
    if support == "all":
        assert full.all()
    w = rng.standard_normal(space.n_features)
    c = corpus
    for i in range(c.n_sequences):
        t0, t1 = int(c.seq_ptr[i]), int(c.seq_ptr[i + 1])
        want = np.empty((t1 - t0, space.n_labels))
        got = np.empty_like(want)
        chain.emissions(
            c.tok_ptr, c.attr, c.val, t0, t1, space.attr_ptr, space.feat_label, w, 0.7, want
        )
        chain.emissions_rows(
            c.tok_ptr, c.attr, c.val, t0, t1, space.attr_ptr, space.feat_label, full, w, 0.7, got
        )
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    T=st.integers(1, 9),
    L=st.integers(1, 6),
    span=st.sampled_from([1.0, 30.0, 250.0]),
)
def test_fused_backward_edges_equal_the_two_passes(seed, T, L, span):
    """forward_backward_edges (edge statistics gathered in the backward sweep) against
    forward_backward followed by edge_marginal_sum, in the scaled domain and past the log-domain
    switch (span 250)."""
    rng = np.random.default_rng(seed)
    score = rng.normal(0, 3, (T, L))
    trans = rng.uniform(-span, 0.0, (L, L))
    tmax = trans.max()
    expM = chain.exp_minus(trans, tmax)
    bufs = [np.empty((T, L)) for _ in range(3)] + [np.empty(T)]
    lz = chain.forward_backward(score, T, trans, expM, tmax, *bufs)
    want = np.full((L, L), 0.25)
    chain.edge_marginal_sum(T, expM, bufs[0], bufs[1], bufs[2], bufs[3], score, trans, lz, want)
    node_want = bufs[1] * bufs[2]
    fb = [np.empty((T, L)) for _ in range(3)] + [np.empty(T)]
    got = np.full((L, L), 0.25)  # it adds, as edge_marginal_sum does
    lz2 = chain.forward_backward_edges(score, T, trans, expM, tmax, *fb, got)
    assert lz2 == pytest.approx(lz, rel=1e-13, abs=1e-13)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(fb[1] * fb[2], node_want, rtol=1e-12, atol=1e-15)
    assert got.sum() == pytest.approx(0.25 * L * L + (T - 1), rel=1e-12)


@settings(deadline=None)
@given(st.lists(st.floats(-1e300, 1e300), min_size=1, max_size=80))
def test_max_min_is_numpys(values):
    m = np.array(values).reshape(1, -1)
    assert chain.max_min(m) == (m.max(), m.min())


@settings(deadline=None)
@given(
    st.lists(st.one_of(st.floats(-1e300, 1e300), st.just(float("nan"))), min_size=1, max_size=80)
)
def test_max_min_skips_nan(values):
    m = np.array(values).reshape(1, -1)
    finite = m[~np.isnan(m)]
    want = (finite.max(), finite.min()) if finite.size else (-np.inf, np.inf)
    assert chain.max_min(m) == want
    sq = np.random.default_rng(len(values)).normal(0, 3, (26, 26))  # the transition matrix's shape
    assert chain.max_min(sq) == (sq.max(), sq.min())


def test_vector_exp_of_rows_into_a_buffer():
    x = np.random.default_rng(1).normal(0, 50, 37)
    out = np.empty(37)
    chain.exp_shift_into(x, 3.5, out)
    assert np.abs(out.view(np.int64) - np.exp(x - 3.5).view(np.int64)).max() <= 1
