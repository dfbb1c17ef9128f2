"""n-best, constrained, forced and posterior decoding (crfkit.decode, crfkit.kernels.decode) against
brute-force enumeration of every label path of tiny chains.

The reference ranks all L^T paths by score, equal scores by the label ids read from the last token
to the first (the documented order), and applies the constraints by filtering the paths.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import model_from_scores
from crfkit import decode as D
from crfkit.errors import CrfkitError, DataError
from crfkit.features.encode import build
from crfkit.model import CRFModel

SETTINGS = settings(
    max_examples=80,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


# --------------------------------------------------------------------------- reference
def all_paths(T, L):
    return np.array(list(itertools.product(range(L), repeat=T)), dtype=np.int64).reshape(-1, T)


def brute(score, trans, *, mask=None, forbid=None, start=None, end=None):
    """Allowed paths, their scores, ranked (score desc, then reversed label ids ascending)."""
    T, L = score.shape
    P = all_paths(T, L)
    s = np.array(
        [
            sum(score[t, p[t]] for t in range(T)) + sum(trans[p[t - 1], p[t]] for t in range(1, T))
            for p in P
        ]
    )
    ok = np.ones(len(P), bool)
    for n, p in enumerate(P):
        if mask is not None and not all(mask[t, p[t]] for t in range(T)):
            ok[n] = False
        if forbid is not None and any(forbid[p[t - 1], p[t]] for t in range(1, T)):
            ok[n] = False
        if start is not None and not start[p[0]]:
            ok[n] = False
        if end is not None and not end[p[-1]]:
            ok[n] = False
    P, s = P[ok], s[ok]
    order = sorted(range(len(P)), key=lambda n: (-s[n], tuple(P[n][::-1])))
    P, s = P[order], s[order]
    if len(s):
        m = s.max()
        logz = m + np.log(np.exp(s - m).sum())
    else:
        logz = -np.inf
    node = np.zeros((T, L))
    for p, v in zip(P, s):
        node[np.arange(T), p] += np.exp(v - logz)
    return dict(paths=P, scores=s, logz=logz, node=node)


@st.composite
def chains(draw):
    L = draw(st.integers(1, 4))
    T = draw(st.integers(1, 5 if L <= 3 else 4))
    return dict(
        seed=draw(st.integers(0, 2**32 - 1)),
        L=L,
        T=T,
        K=draw(st.integers(1, L**T + 3)),
        mask=draw(st.booleans()),
        forbid=draw(st.booleans()),
        ends=draw(st.booleans()),
        scale=draw(st.sampled_from([0.5, 2.0, 30.0])),
    )


def _constraints(p, rng, L, T):
    mask = forbid = start = end = None
    if p["mask"]:
        mask = rng.random((T, L)) < 0.7
        mask[np.arange(T), rng.integers(0, L, T)] = True  # at least one label per token
    if p["forbid"]:
        forbid = rng.random((L, L)) < 0.3
    if p["ends"]:
        start = rng.random(L) < 0.7
        end = rng.random(L) < 0.7
    return mask, forbid, start, end


def _run(model, X, mask, forbid, start, end, **kw):
    c = D.Constraints(model.labels, forbid, start, end)
    corpus = model.encode(X)
    return D.decode(
        model,
        corpus,
        allowed=None if mask is None else mask.astype(np.uint8),
        constraints=c,
        check=False,
        **kw,
    ), corpus


# --------------------------------------------------------------------------- n-best
@SETTINGS
@given(chains())
def test_nbest_against_enumeration(p):
    rng = np.random.default_rng(p["seed"])
    L, T, K = p["L"], p["T"], p["K"]
    score = rng.normal(size=(T, L)) * p["scale"]
    trans = rng.normal(size=(L, L)) * p["scale"]
    model, X = model_from_scores(score, trans)
    ref = brute(score, trans)
    nb = model.nbest(X, K)[0]
    n = min(K, L**T)
    assert len(nb) == n
    assert [list(map(lambda s: int(s[1:]), lab)) for lab in nb.labels] == ref["paths"][:n].tolist()
    np.testing.assert_allclose(nb.scores, ref["scores"][:n], rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(
        nb.probabilities, np.exp(ref["scores"][:n] - ref["logz"]), rtol=1e-9, atol=1e-300
    )
    # top-1 is the Viterbi path, and the probabilities sum to 1 over all paths
    assert nb.labels[0] == model.tag(X)[0]
    if K >= L**T:
        assert abs(sum(nb.probabilities) - 1.0) < 1e-9


def test_nbest_ties_follow_the_documented_order():
    # integer scores: many exact ties; every path of a 3-label chain of length 3 ranked
    rng = np.random.default_rng(5)
    for _ in range(20):
        L, T = 3, 3
        score = rng.integers(-1, 2, size=(T, L)).astype(float)
        trans = rng.integers(-1, 2, size=(L, L)).astype(float)
        model, X = model_from_scores(score, trans)
        ref = brute(score, trans)
        nb = model.nbest(X, L**T)[0]
        assert [[int(s[1:]) for s in lab] for lab in nb.labels] == ref["paths"].tolist()
        assert nb.labels[0] == model.tag(X)[0]


def test_nbest_more_than_there_are_and_empty_sequences():
    rng = np.random.default_rng(1)
    score, trans = rng.normal(size=(2, 2)), rng.normal(size=(2, 2))
    model, X = model_from_scores(score, trans)
    nb = model.nbest(X + [[]], 10)
    assert len(nb[0]) == 4 and len(set(map(tuple, nb[0].labels))) == 4
    assert nb[1].labels == [[]] and nb[1].probabilities == [1.0]
    with pytest.raises(ValueError):
        model.nbest(X, 0)


def test_nbest_batch_matches_one_by_one(make_corpus):
    X, Y = make_corpus(3, 40, max_len=7, n_labels=4)
    space, corpus = build(X, Y, support="all")
    w = np.random.default_rng(0).normal(size=space.n_features)
    model = CRFModel(space, w)
    together = model.nbest(X, 4, threads=2)
    for x, nb in zip(X, together):
        one = model.nbest([x], 4, threads=1)[0]
        assert one.labels == nb.labels
        np.testing.assert_allclose(one.probabilities, nb.probabilities, rtol=1e-12)
    ids, _ = model.viterbi(corpus)
    assert [nb.labels[0] for nb in together] == model._split(corpus, ids)


# --------------------------------------------------------------------------- constraints
@SETTINGS
@given(chains())
def test_constrained_against_enumeration(p):
    rng = np.random.default_rng(p["seed"])
    L, T, K = p["L"], p["T"], p["K"]
    score = rng.normal(size=(T, L)) * p["scale"]
    trans = rng.normal(size=(L, L)) * p["scale"]
    mask, forbid, start, end = _constraints(p, rng, L, T)
    model, X = model_from_scores(score, trans)
    ref = brute(score, trans, mask=mask, forbid=forbid, start=start, end=end)
    r, corpus = _run(model, X, mask, forbid, start, end, marginals=True, nbest=K)
    if not len(ref["scores"]):
        assert (
            r["logz"][0] == -np.inf and r["path_score"][0] == -np.inf and r["nbest_count"][0] == 0
        )
        with pytest.raises(DataError, match="no label sequence satisfies"):
            D.decode(
                model,
                corpus,
                allowed=None if mask is None else mask.astype(np.uint8),
                constraints=D.Constraints(model.labels, forbid, start, end),
            )
        return
    assert abs(r["logz"][0] - ref["logz"]) <= 1e-9 * max(1.0, abs(ref["logz"]))
    np.testing.assert_allclose(r["marginals"], ref["node"], atol=1e-9)
    assert r["ids"].tolist() == ref["paths"][0].tolist()
    assert abs(r["path_score"][0] - ref["scores"][0]) < 1e-9 * max(1, abs(ref["scores"][0]))
    n = min(K, len(ref["scores"]))
    assert r["nbest_count"][0] == n
    assert r["nbest_ids"][:, :n].T.tolist() == ref["paths"][:n].tolist()
    np.testing.assert_allclose(r["nbest_score"][0, :n], ref["scores"][:n], rtol=1e-12, atol=1e-9)
    # the probability of a given sequence under the constraints; 0 for one that breaks them
    for path in all_paths(T, L)[:6]:
        r2, _ = _run(
            model, X, mask, forbid, start, end, path=False, logz=True, labels=path.astype(np.int32)
        )
        hit = [k for k, q in enumerate(ref["paths"].tolist()) if q == path.tolist()]
        want = np.exp(ref["scores"][hit[0]] - ref["logz"]) if hit else 0.0
        got = np.exp(r2["label_score"][0] - r2["logz"][0])
        assert abs(got - want) < 1e-9


def test_posterior_decoding_is_max_marginal_and_constrained_posterior_is_valid():
    rng = np.random.default_rng(7)
    labels = ["O", "B-NP", "I-NP", "B-VP", "I-VP"]
    for _ in range(30):
        T = int(rng.integers(1, 6))
        score = rng.normal(size=(T, 5)) * 2
        trans = rng.normal(size=(5, 5))
        model, X = model_from_scores(score, trans)
        model.space.labels[:] = labels
        model.space.__dict__.pop("label_index", None)
        marg, _ = model.marginals(model.encode(X))
        post = model.tag(X, method="posterior")[0]
        assert post == [labels[i] for i in marg.argmax(axis=1)]
        c = D.Constraints.scheme(labels, "bio")
        cpost = model.tag(X, method="posterior", constraints="bio")[0]
        assert c.valid(cpost)
        # the constrained posterior path maximises the sum of the constrained marginals
        ref = brute(score, np.zeros((5, 5)), forbid=c.forbid, start=c.start, end=c.end)
        cm, _ = model.marginals(model.encode(X), constraints="bio")
        sums = [cm[np.arange(T), q].sum() for q in ref["paths"]]
        ids = [labels.index(x) for x in cpost]
        assert cm[np.arange(T), ids].sum() >= max(sums) - 1e-12


def test_bio_and_iobes_schemes():
    labels = ["O", "B-NP", "I-NP", "B-VP", "I-VP"]
    c = D.Constraints.scheme(labels, "bio")
    assert c.valid(["B-NP", "I-NP", "O", "B-VP", "I-VP", "B-NP"])
    assert not c.valid(["O", "I-NP"])
    assert not c.valid(["B-NP", "I-VP"])
    assert not c.valid(["I-NP"])
    assert c.valid(["B-NP", "B-NP", "I-NP", "I-NP"])
    il = ["O", "B-PER", "I-PER", "E-PER", "S-PER", "S-LOC"]
    c = D.Constraints.scheme(il, "iobes")
    assert c.valid(["B-PER", "I-PER", "E-PER", "S-LOC", "O", "S-PER"])
    assert not c.valid(["B-PER", "O"])
    assert not c.valid(["B-PER"])  # a chunk left open at the end
    assert not c.valid(["E-PER"])
    assert not c.valid(["S-PER", "I-PER"])
    with pytest.raises(CrfkitError, match="not O or B/I-TYPE"):
        D.Constraints.scheme(["O", "B-NP", "E-NP"], "bio")
    assert D.label_scheme(labels) == "bio"
    assert D.label_scheme(il) == "iobes"
    # NETtalk's phoneme classes are single letters, not chunk tags
    assert D.label_scheme(["I", "E", "O", "S", "B"]) is None
    assert D.label_scheme(["NN", "VB", "DT"]) is None
    assert D.invalid_sequences([["O", "I-NP"], ["B-NP", "I-NP"]]) == 1


def test_bio_constrained_output_is_always_valid(make_corpus):
    rng = np.random.default_rng(3)
    labels = ["O", "B-NP", "I-NP", "B-PP", "I-PP"]
    X, _ = make_corpus(11, 60, max_len=9, n_labels=5)
    Y = [[labels[int(rng.integers(5))] for _ in x] for x in X]
    space, corpus = build(X, Y, support="all", transitions="all")
    model = CRFModel(space, rng.normal(size=space.n_features) * 3)
    c = D.Constraints.scheme(model.labels, "bio")
    plain = model.tag(X)
    assert sum(not c.valid(s) for s in plain) > 0  # random weights do break the scheme
    for method in ("viterbi", "posterior"):
        out = model.tag(X, constraints="bio", method=method)
        assert all(c.valid(s) for s in out)
    for nb in model.nbest(X, 5, constraints="bio"):
        assert all(c.valid(s) for s in nb.labels)


def test_forced_labels_are_kept_and_rest_is_the_constrained_best(make_corpus):
    X, Y = make_corpus(4, 30, max_len=8, n_labels=4)
    space, corpus = build(X, Y, support="all")
    rng = np.random.default_rng(2)
    model = CRFModel(space, rng.normal(size=space.n_features))
    allowed = [[y if rng.random() < 0.4 else None for y in ys] for ys in Y]
    out = model.tag(X, allowed=allowed)
    for a, o in zip(allowed, out):
        assert all(x is None or x == lab for x, lab in zip(a, o))
    # the result is the n-best list's best among the paths that keep the forced labels
    for x, a, o in zip(X[:8], allowed, out):
        for cand in model.nbest([x], 400)[0].labels:
            if all(f is None or f == lab for f, lab in zip(a, cand)):
                assert cand == o
                break
    # label sets per token
    sets = [[{"L0", "L1"} for _ in ys] for ys in Y]
    assert all(set(s) <= {"L0", "L1"} for s in model.tag(X, allowed=sets))
    with pytest.raises(DataError, match="not a label of the model"):
        model.tag(X[:1], allowed=[["nope"] * len(X[0])])
    with pytest.raises(DataError, match="allowed labels for"):
        model.tag(X[:1], allowed=[[None] * (len(X[0]) + 1)])


def test_user_forbidden_pairs(make_corpus):
    X, Y = make_corpus(8, 30, max_len=8, n_labels=3)
    space, _ = build(X, Y, support="all", transitions="all")
    model = CRFModel(space, np.random.default_rng(4).normal(size=space.n_features) * 2)
    out = model.tag(X, forbid=[("L0", "L1"), ("L1", "L1")])
    for s in out:
        for a, b in zip(s, s[1:]):
            assert (a, b) not in {("L0", "L1"), ("L1", "L1")}
    with pytest.raises(CrfkitError, match="not a label of the model"):
        model.tag(X, forbid=[("L0", "X")])


def test_constrained_sequence_probability():
    rng = np.random.default_rng(9)
    labels = ["O", "B-NP", "I-NP"]
    score, trans = rng.normal(size=(3, 3)), rng.normal(size=(3, 3))
    model, X = model_from_scores(score, trans)
    model.space.labels[:] = labels
    model.space.__dict__.pop("label_index", None)
    c = D.Constraints.scheme(labels, "bio")
    ref = brute(score, trans, forbid=c.forbid, start=c.start, end=c.end)
    ys = [[labels[i] for i in ref["paths"][0]], ["O", "I-NP", "O"]]
    p = model.sequence_probability(X * 2, ys, constraints="bio")
    assert abs(p[0] - np.exp(ref["scores"][0] - ref["logz"])) < 1e-12
    assert p[1] == 0.0


# --------------------------------------------------------------------------- bigram models
def test_bigram_model_nbest_and_constraints_are_consistent():
    from conftest import bigram_data

    X, Y, B = bigram_data(21, n_seq=12, max_len=5, n_labels=3)
    space, corpus = build(X, Y, B=B, support="all")
    model = CRFModel(space, np.random.default_rng(0).normal(size=space.n_features))
    ids, _ = model.viterbi(corpus)
    nbs = model.nbest(X, 300, B=B)
    plain = model._split(corpus, ids)
    probs = model.sequence_probability(X, [nb.labels[0] for nb in nbs], B=B)
    for nb, v, pr in zip(nbs, plain, probs):
        assert nb.labels[0] == v
        assert abs(nb.probabilities[0] - pr) < 1e-10
        assert abs(sum(nb.probabilities) - 1) < 1e-9  # every path (3^5 = 243 < 300)
        assert all(a >= b for a, b in zip(nb.scores, nb.scores[1:]))
    # constrained: the marginals equal those of the allowed part of the full n-best list
    forbid = [("L0", "L1")]
    cm, _ = model.marginals(corpus, forbid=forbid)
    ptr = corpus.seq_ptr
    for s, nb in enumerate(nbs):
        ok = [
            (lab, p)
            for lab, p in nb
            if not any((a, b) == ("L0", "L1") for a, b in zip(lab, lab[1:]))
        ]
        tot = sum(p for _, p in ok)
        ref = np.zeros((len(nb.labels[0]), 3))
        for lab, p in ok:
            for t, x in enumerate(lab):
                ref[t, model.space.label_index[x]] += p / tot
        np.testing.assert_allclose(cm[ptr[s] : ptr[s + 1]], ref, atol=1e-9)


# --------------------------------------------------------------------------- estimator
def test_estimator_predict_nbest_and_constraints():
    from crfkit import CRF

    rng = np.random.default_rng(0)
    labels = ["O", "B-NP", "I-NP"]
    X, y = [], []
    for _ in range(40):
        T = int(rng.integers(2, 7))
        ys = [labels[int(rng.integers(3))] for _ in range(T)]
        X.append([{"w": lab if rng.random() < 0.6 else "x", "bias": 1.0} for lab in ys])
        y.append(ys)
    crf = CRF(max_iterations=15, all_possible_transitions=True).fit(X, y)
    nb = crf.predict_nbest(X[:5], 3)
    assert [lst[0][0] for lst in nb] == crf.predict(X[:5])
    assert all(len(lst) == 3 and lst[0][1] >= lst[1][1] >= lst[2][1] for lst in nb)
    c = D.Constraints.scheme(labels, "bio")
    assert all(c.valid(s) for s in crf.predict(X, constraints="bio"))
    forced = crf.predict(X[:3], allowed=[["I-NP"] + [None] * (len(x) - 1) for x in X[:3]])
    assert all(s[0] == "I-NP" for s in forced)
