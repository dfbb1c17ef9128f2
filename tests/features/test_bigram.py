"""Bigram-observation features (label pair x observation, Wapiti's ``b`` patterns,
CRF++ ``B`` templates with macros): position-dependent transition scores.

References are computed from feature *names* (``state_features``,
``transition_features``, ``bigram_features``) and brute-force enumeration of
all label paths, independently of the kernels.
"""

from __future__ import annotations

import itertools
import json
import struct

import numpy as np
import pytest

from conftest import (
    Reference,
    attr_value,
    bigram_data,
    random_model,
)
from crfkit.errors import CrfkitError, DataError, TemplateError
from crfkit.features.encode import build, encode
from crfkit.features.templates import Templates
from crfkit.kernels import chain
from crfkit.model import MAGIC, CRFModel
from crfkit.objective import Objective, Regularization

# ----------------------------------------------------------------------------- helpers


def transitions_of(model: CRFModel, b) -> np.ndarray:
    """M[t] (T x L x L): transition scores into token t from names; M[0] = 0 (never used)."""
    ref = Reference(model)
    labels = ref.labels
    L = ref.L
    bf = model.bigram_features()
    T = len(b)
    M = np.zeros((T, L, L))
    for t in range(1, T):
        M[t] = ref.trans
        for a in b[t]:
            n, v = attr_value(a)
            for i, j in itertools.product(range(L), repeat=2):
                M[t, i, j] += bf.get((n, labels[i], labels[j]), 0.0) * v
    return M


def enumerate_pd(score: np.ndarray, M: np.ndarray) -> dict:
    """All L^T paths with position-dependent transitions: log Z, node and per-position edge
    marginals."""
    T, L = score.shape
    paths = np.array(list(itertools.product(range(L), repeat=T)), dtype=np.int64).reshape(-1, T)
    s = score[np.arange(T)[None, :], paths].sum(axis=1)
    for t in range(1, T):
        s = s + M[t, paths[:, t - 1], paths[:, t]]
    m = s.max()
    logz = m + np.log(np.exp(s - m).sum())
    p = np.exp(s - logz)
    node = np.zeros((T, L))
    for t in range(T):
        np.add.at(node[t], paths[:, t], p)
    xi = np.zeros((T, L, L))
    for t in range(1, T):
        np.add.at(xi[t], (paths[:, t - 1], paths[:, t]), p)
    best = int(np.argmax(s))
    return dict(
        logz=logz,
        node=node,
        xi=xi,
        best=paths[best],
        best_score=float(s[best]),
        scores=s,
        paths=paths,
    )


# ----------------------------------------------------------------------------- layout
def test_layout_and_supports():
    X, Y, B = bigram_data(1)
    for support in ("observed", "all"):
        space, corpus = build(X, Y, B=B, support=support)
        L = space.n_labels
        assert space.bigram_offset == space.n_state + space.n_trans
        assert space.dense_offset == space.bigram_offset + space.n_bigram
        assert space.n_features == space.dense_offset
        assert corpus.has_bigram and len(corpus.btok_ptr) == corpus.n_tokens + 1
        # the (attribute, gold pair) combinations after the first token of each sequence
        seen = {
            (attr_value(a)[0], ys[t - 1], ys[t])
            for bs, ys in zip(B, Y)
            for t in range(1, len(ys))
            for a in bs[t]
        }
        model = CRFModel(space, np.zeros(space.n_features))
        keys = set(model.bigram_features())
        if support == "observed":
            assert keys == seen
        else:
            names = {n for n, _, _ in seen}
            assert keys == {(n, a, b) for n in names for a in space.labels for b in space.labels}
            assert space.n_bigram == len(names) * L * L


def test_first_token_bigram_attributes_are_ignored():
    X = [[["x"], ["y"]], [["x"]]]
    Y = [["A", "B"], ["B"]]
    B = [[["only_first"], ["inner"]], [["only_first"]]]
    space, corpus = build(X, Y, B=B, support="all")
    assert space.battributes == ["inner"]  # never after the first token: no feature
    w = np.zeros(space.n_features)
    w[space.bigram_offset :] = 5.0
    model = CRFModel(space, w)
    # the second sequence has one token: its score does not depend on the bigram block
    r = model.decode(encode([[["x"]]], space, B=[[["inner"]]]), marginals=True)
    r0 = CRFModel(space, np.zeros(space.n_features)).decode(
        encode([[["x"]]], space, B=[[["inner"]]]), marginals=True
    )
    assert r["logz"][0] == pytest.approx(r0["logz"][0])


# ---------------------------------------------------------------------- kernels vs enumeration
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("support", ["observed", "all"])
@pytest.mark.parametrize("zero_share", [0.0, 0.85])
def test_logz_marginals_viterbi_against_enumeration(seed, support, zero_share):
    model, X, Y, B, _ = random_model(seed, support=support, scale=1.5, zero_share=zero_share)
    corpus = model.encode(X, Y, B=B)
    r = model.decode(corpus, marginals=True, labels=corpus.y)
    ref = Reference(model)
    for i, (x, b) in enumerate(zip(X, B)):
        score = ref.scores(x)
        M = transitions_of(model, b)
        e = enumerate_pd(score, M)
        t0, t1 = corpus.seq_ptr[i], corpus.seq_ptr[i + 1]
        assert r["logz"][i] == pytest.approx(e["logz"], rel=1e-12, abs=1e-10)
        np.testing.assert_allclose(r["marginals"][t0:t1], e["node"], atol=1e-12)
        assert r["path_score"][i] == pytest.approx(e["best_score"], rel=1e-12, abs=1e-12)
        path = r["ids"][t0:t1]
        gold = corpus.y[t0:t1]
        assert e["scores"][(e["paths"] == path).all(axis=1)][0] == pytest.approx(
            e["best_score"], abs=1e-12
        )
        assert r["label_score"][i] == pytest.approx(
            e["scores"][(e["paths"] == gold).all(axis=1)][0], abs=1e-10
        )
    # the transitions matter: without the bigram block the answer differs
    w0 = model.weights.copy()
    w0[model.space.bigram_offset : model.space.dense_offset] = 0.0
    assert not np.allclose(
        CRFModel(model.space, w0).decode(corpus, marginals=True)["logz"], r["logz"]
    )


def test_log_domain_fallback_matches_enumeration():
    """Bigram weights so large that a position's transition range passes the scaled-recursion
    limit."""
    model, X, Y, B, _ = random_model(5, support="all", scale=1.0)
    s = model.space
    w = model.weights.copy()
    w[s.bigram_offset : s.dense_offset] *= 400.0
    model = CRFModel(s, w)
    corpus = model.encode(X, Y, B=B)
    ref = Reference(model)
    ranges = []
    r = model.decode(corpus, marginals=True)
    for i, (x, b) in enumerate(zip(X, B)):
        M = transitions_of(model, b)
        ranges += [np.ptp(M[t]) for t in range(1, len(b))]
        e = enumerate_pd(ref.scores(x), M)
        t0, t1 = corpus.seq_ptr[i], corpus.seq_ptr[i + 1]
        assert r["logz"][i] == pytest.approx(e["logz"], rel=1e-12)
        np.testing.assert_allclose(r["marginals"][t0:t1], e["node"], atol=1e-9)
    assert max(ranges) > chain.MAX_SCALED_TRANSITION_RANGE
    obj = Objective(corpus, s)
    f, g = obj.value_and_grad(w)
    assert np.isfinite(f) and np.all(np.isfinite(g))
    assert f == pytest.approx(obj.value(w), rel=1e-12)


def test_chain_edge_marginals_per_position():
    rng = np.random.default_rng(7)
    for T in (1, 2, 4):
        L = 3
        score = rng.normal(size=(T, L))
        M = rng.normal(size=(T, L, L)) * 2
        M[0] = 0.0
        tmx = M.reshape(T, -1).max(axis=1)
        rngv = max([np.ptp(M[t]) for t in range(1, T)], default=0.0)
        es, alpha, beta = (np.empty((T, L)) for _ in range(3))
        scale = np.empty(T)
        expM = np.empty((T, L, L))
        chain.pd_exp(T, M, tmx, expM)
        logz = chain.pd_forward_backward(score, T, M, tmx, rngv, expM, es, alpha, beta, scale)
        e = enumerate_pd(score, M)
        assert logz == pytest.approx(e["logz"], rel=1e-13)
        xi = np.empty((L, L))
        for t in range(1, T):
            chain.pd_edge(t, score, M, expM, es, alpha, beta, scale, logz, xi)
            np.testing.assert_allclose(xi, e["xi"][t], atol=1e-13)
        chain.pd_node(T, alpha, beta, scale)
        np.testing.assert_allclose(alpha, e["node"], atol=1e-13)
        out = np.empty(T, np.int32)
        assert chain.pd_viterbi(score, T, M, out, 0) == pytest.approx(e["best_score"])
        np.testing.assert_array_equal(out, e["best"])


# ----------------------------------------------------------------------- objective and gradient
def expected_gradient(model: CRFModel, X, Y, B) -> np.ndarray:
    """Gradient of sum_i -log p(y_i|x_i) from enumerated marginals, feature by feature, by name."""
    s = model.space
    L = s.n_labels
    ref = Reference(model)
    lab = s.label_index
    g = np.zeros(s.n_features)
    fa = s.feature_attr()
    bfa = s.bfeature_attr()
    for x, y, b in zip(X, Y, B):
        yi = [lab[v] for v in y]
        e = enumerate_pd(ref.scores(x), transitions_of(model, b))
        T = len(x)
        for k in range(s.n_state):
            n, l = s.attributes[fa[k]], int(s.feat_label[k])
            for t in range(T):
                v = sum(attr_value(a)[1] for a in x[t] if attr_value(a)[0] == n)
                g[k] += v * (e["node"][t, l] - (yi[t] == l))
        for i, j in itertools.product(range(L), repeat=2):
            k = s.trans_index[i, j]
            if k >= 0:
                g[s.n_state + k] += sum(
                    e["xi"][t, i, j] - (yi[t - 1] == i and yi[t] == j) for t in range(1, T)
                )
        for k in range(s.n_bigram):
            n, p = s.battributes[bfa[k]], int(s.bfeat_pair[k])
            i, j = divmod(p, L)
            for t in range(1, T):
                v = sum(attr_value(a)[1] for a in b[t] if attr_value(a)[0] == n)
                g[s.bigram_offset + k] += v * (e["xi"][t, i, j] - (yi[t - 1] == i and yi[t] == j))
    return g


@pytest.mark.parametrize("support", ["observed", "all"])
@pytest.mark.parametrize("zero_share", [0.0, 0.85])
def test_gradient_against_enumeration_and_finite_differences(support, zero_share):
    model, X, Y, B, corpus = random_model(11, support=support, scale=0.8, zero_share=zero_share)
    obj = Objective(corpus, model.space, Regularization(l2=0.3))
    w = model.weights
    f, g = obj.value_and_grad(w)
    n = corpus.n_sequences
    g_ref = expected_gradient(model, X, Y, B) / n + 0.3 * w
    np.testing.assert_allclose(g, g_ref, atol=1e-10)
    assert np.abs(g[model.space.bigram_offset :]).max() > 1e-3
    eps = 1e-6
    idx = np.random.default_rng(0).choice(len(w), size=min(25, len(w)), replace=False)
    for k in idx:
        e = np.zeros_like(w)
        e[k] = eps
        fd = (obj.value(w + e) - obj.value(w - e)) / (2 * eps)
        assert g[k] == pytest.approx(fd, abs=1e-6)
    # value: the average nll from enumeration
    ref = Reference(model)
    lab = model.space.label_index
    nll = 0.0
    for x, y, b in zip(X, Y, B):
        e = enumerate_pd(ref.scores(x), transitions_of(model, b))
        nll += e["logz"] - e["scores"][(e["paths"] == [lab[v] for v in y]).all(axis=1)][0]
    assert f == pytest.approx(nll / n + 0.15 * float(w @ w), rel=1e-12)


def test_empirical_counts_of_the_bigram_block():
    X, Y, B = bigram_data(4)
    space, corpus = build(X, Y, B=B, support="all")
    emp = Objective(corpus, space).empirical_counts
    L = space.n_labels
    bfa = space.bfeature_attr()
    lab = space.label_index
    for k in range(space.n_bigram):
        n = space.battributes[bfa[k]]
        i, j = divmod(int(space.bfeat_pair[k]), L)
        want = sum(
            attr_value(a)[1]
            for b, y in zip(B, Y)
            for t in range(1, len(y))
            for a in b[t]
            if attr_value(a)[0] == n and lab[y[t - 1]] == i and lab[y[t]] == j
        )
        assert emp[space.bigram_offset + k] == pytest.approx(want, abs=1e-12)


def test_oracle_refuses_bigram_blocks():
    model, X, Y, B, corpus = random_model(2)
    obj = Objective(corpus, model.space)
    with pytest.raises(CrfkitError, match="bigram"):
        obj.oracle(0, model.weights)
    from crfkit.train import train

    with pytest.raises(CrfkitError, match="bigram"):
        train(X, Y, B=B, algorithm="sg", max_iterations=1)


def test_corpus_without_bigram_attributes_uses_plain_transitions():
    model, X, Y, B, _ = random_model(3)
    empty = [[[] for _ in x] for x in X]
    c = model.encode(X, Y, B=empty)
    assert not c.has_bigram
    s = model.space
    w0 = model.weights.copy()
    w0[s.bigram_offset :] = 0.0
    r1 = model.decode(c, marginals=True)
    r0 = CRFModel(s, w0).decode(c, marginals=True)
    np.testing.assert_allclose(r1["logz"], r0["logz"], rtol=1e-13)
    with pytest.raises(DataError, match="B="):
        model.encode(X, Y)


# ------------------------------------------------------------------------------ model file
def test_save_load_round_trip_and_version(tmp_path):
    model, X, Y, B, corpus = random_model(6, support="observed")
    s = model.space
    w = model.weights.copy()
    w[s.bigram_offset : s.bigram_offset + s.n_bigram : 3] = 0.0  # pruned on save
    model = CRFModel(s, w)
    p = tmp_path / "m.crfkit"
    model.save(p)
    data = p.read_bytes()
    (hl,) = struct.unpack_from("<I", data, len(MAGIC))
    header = json.loads(data[len(MAGIC) + 4 : len(MAGIC) + 4 + hl])
    assert header["format_version"] == 3 and header["n_bigram"] == int(
        np.count_nonzero(w[s.bigram_offset :])
    )
    m2 = CRFModel.load(p)
    assert m2.space.n_bigram < s.n_bigram
    assert m2.bigram_features() == {k: v for k, v in model.bigram_features().items() if v != 0}
    assert m2.state_features() == {k: v for k, v in model.state_features().items() if v != 0}
    c2 = m2.encode(X, Y, B=B)
    r1, r2 = model.decode(corpus, marginals=True), m2.decode(c2, marginals=True)
    np.testing.assert_allclose(r1["logz"], r2["logz"], rtol=1e-13)
    np.testing.assert_array_equal(r1["ids"], r2["ids"])
    # a model without a bigram block keeps its version
    plain, _ = build(X, Y)
    CRFModel(plain, np.ones(plain.n_features)).save(tmp_path / "p.crfkit")
    d = (tmp_path / "p.crfkit").read_bytes()
    (hl,) = struct.unpack_from("<I", d, len(MAGIC))
    assert json.loads(d[len(MAGIC) + 4 : len(MAGIC) + 4 + hl])["format_version"] == 1


def test_warm_start_maps_bigram_weights_by_name():
    from crfkit.train import init_weights

    model, X, Y, B, _ = random_model(8, support="observed")
    # a new space from other data (other attribute order) shares some features
    X2, Y2, B2 = bigram_data(9)
    space2, _ = build(X + X2, Y + Y2, B=B + B2, support="all")
    w = init_weights(model, space2)
    new = CRFModel(space2, w).bigram_features()
    old = model.bigram_features()
    assert old and all(new[k] == v for k, v in old.items())
    assert all(v == 0.0 for k, v in new.items() if k not in old)


# -------------------------------------------------------------------------------- templates
def test_crfpp_bigram_macro_templates():
    t = Templates.parse("U00:%x[0,0]\nB\nB01:%x[0,1]\nB02:%x[-1,0]/%x[0,0]\n", name="t.txt")
    assert t.has_transitions and len(t.bigram) == 1 and len(t.bigram_observation) == 2
    cols = [["He", "PRP"], ["reckons", "VBZ"]]
    assert t.apply(cols) == [["U00:He"], ["U00:reckons"]]
    assert t.apply_bigram(cols) == [["B01:PRP", "B02:_B-1/He"], ["B01:VBZ", "B02:He/reckons"]]
    assert t.apply_bigram(cols, pad=False) == [["B01:PRP"], ["B01:VBZ", "B02:He/reckons"]]


def test_wapiti_patterns():
    src = (
        "u1:%x[0,0]\n"
        "u2:%X[0,0]\n"
        'u3:%t[0,0,"^\\u"]\n'
        'u4:%m[0,0,"\\d+"]\n'
        'u5:%T[0,0,"^re"]/%M[1,0,"CK"]\n'
        "b6:%x[-1,1]\n"
        "*7:%X[0,0]\n"
        "b\n"
    )
    t = Templates.parse(src, name="w.pat")
    assert len(t.unigram) == 6 and len(t.bigram_observation) == 2 and len(t.bigram) == 1
    cols = [["He", "PRP"], ["Reckons42", "VBZ"], ["back", "RB"]]
    got = t.apply(cols)
    assert got[0] == ["u1:He", "u2:he", "u3:true", "u4:", "u5:false/ck", "*7:he"]
    assert got[1] == [
        "u1:Reckons42",
        "u2:reckons42",
        "u3:true",
        "u4:42",
        "u5:true/ck",
        "*7:reckons42",
    ]
    assert got[2] == ["u1:back", "u2:back", "u3:false", "u4:", "u5:false/_B+1", "*7:back"]
    assert t.apply_bigram(cols) == [
        ["b6:_B-1", "*7:he"],
        ["b6:PRP", "*7:reckons42"],
        ["b6:VBZ", "*7:back"],
    ]
    # the reference expansion agrees with the compiled one, padded or not
    for tpl in t.unigram:
        assert [tpl.expand(cols, i) for i in range(3)] == [row[t.unigram.index(tpl)] for row in got]
    nopad = t.apply(cols, pad=False)
    assert nopad[2] == ["u1:back", "u2:back", "u3:false", "u4:", "*7:back"]


@pytest.mark.parametrize(
    "line, what",
    [
        ('u:%t[0,0,"(("]', "bad regular expression"),
        ("u:%m[0,0]", "malformed macro"),
        ("u:%t[0,0,abc]", "malformed macro"),
        ("b:%X[0,a]", "malformed macro"),
        ("u:%q[0,0]", "unsupported macro"),
        ("v:%x[0,0]", "unknown template type"),
    ],
)
def test_template_errors_name_file_and_line(tmp_path, line, what):
    p = tmp_path / "bad.tpl"
    p.write_text("# comment\nU0:%x[0,0]\n" + line + "\n")
    with pytest.raises(TemplateError) as ei:
        Templates.from_file(p)
    msg = str(ei.value)
    assert f"{p}:3" in msg and what in msg


# ------------------------------------------------------------------------------- training
def test_owlqn_with_bigram_features_reduces_objective_and_is_sparse():
    from crfkit.train import train

    X, Y, B = bigram_data(21, n_seq=40, max_len=8, n_labels=3, real=False)
    # make the bigram attributes informative: label changes happen where "sw" is
    rng = np.random.default_rng(3)
    for b, y in zip(B, Y):
        for t in range(1, len(y)):
            if y[t] != y[t - 1] and rng.random() < 0.8:
                b[t].append("sw")
    res = train(X, Y, B=B, support="all", l1=0.08, l2=0.001, algorithm="owlqn", max_iterations=80)
    m = res.model
    s = m.space
    assert s.n_bigram > 0
    obj = Objective(build(X, Y, B=B, support="all")[1], s, Regularization(l1=0.08, l2=0.001))
    f0 = obj.value(np.zeros(s.n_features))
    f1 = obj.value(m.weights)
    assert f1 < f0 - 0.05
    bw = m.weights[s.bigram_offset : s.dense_offset]
    assert np.count_nonzero(bw) < 0.5 * len(bw)  # L1 zeroes most bigram features
    assert any(a == "sw" and v != 0 for (a, _, _), v in m.bigram_features().items())
    pred = m.tag(X, B=B)
    assert len(pred) == len(X) and all(len(p) == len(x) for p, x in zip(pred, X))


def test_pipeline_round_trip_with_bigram_template(tmp_path):
    from crfkit.pipeline import tag_columns, train_columns

    rng = np.random.default_rng(0)
    words = ["the", "cat", "sat", "on", "mat", "dog", "ran"]
    lines = []
    for _ in range(30):
        T = int(rng.integers(2, 7))
        lab = "O"
        for _t in range(T):
            w = words[int(rng.integers(len(words)))]
            lab = (
                "B"
                if w in ("the", "on")
                else ("I" if lab in ("B", "I") and rng.random() < 0.7 else "O")
            )
            lines.append(f"{w} {'DT' if w == 'the' else 'NN'} {lab}")
        lines.append("")
    data = tmp_path / "train.txt"
    data.write_text("\n".join(lines) + "\n")
    tpl = tmp_path / "tpl.txt"
    tpl.write_text("U00:%x[0,0]\nU01:%x[0,1]\nB\nB02:%x[0,0]\n")
    res = train_columns(data, Templates.from_file(tpl), max_iterations=30)
    m = res.model
    assert m.space.n_bigram > 0 and any(a.startswith("B02:") for a in m.space.battributes)
    p = tmp_path / "m.crfkit"
    m.save(p)
    m2 = CRFModel.load(p)
    out1 = tag_columns(m, data, marginals=True)
    out2 = tag_columns(m2, data, marginals=True)
    assert out1.labels == out2.labels
    np.testing.assert_allclose(out1.probabilities, out2.probabilities, rtol=1e-10)
    gold = [s.labels for s in out1.sentences]
    acc = np.mean([a == b for ys, ps in zip(gold, out1.labels) for a, b in zip(ys, ps)])
    assert acc > 0.8


def test_feature_lowering_the_transition_maximum_far():
    """A bigram feature cancels a huge transition weight: the position's matrix has a small
    range, but exp(trans - max trans) underflows (the exponentials must be taken directly)."""
    X = [[["x"], ["y"], ["x"]]]
    Y = [["A", "B", "A"]]
    B = [[[], ["s"], ["s"]]]
    space, corpus = build(X, Y, B=B, support="all")
    L = space.n_labels
    w = np.random.default_rng(0).normal(size=space.n_features)
    a = space.label_index["A"]
    w[space.n_state + space.trans_index[a, a]] = 1000.0
    k = space.bigram_offset + int(np.flatnonzero(space.bfeat_pair == a * L + a)[0])
    w[k] = -1000.0
    model = CRFModel(space, w)
    e = enumerate_pd(Reference(model).scores(X[0]), transitions_of(model, B[0]))
    r = model.decode(corpus, marginals=True)
    assert r["logz"][0] == pytest.approx(e["logz"], rel=1e-12)
    np.testing.assert_allclose(r["marginals"], e["node"], atol=1e-12)
    obj = Objective(corpus, space)
    f, g = obj.value_and_grad(w)
    assert np.all(np.isfinite(g)) and f == pytest.approx(obj.value(w), rel=1e-12)


def test_subset_keeps_bigram_attributes():
    model, X, Y, B, corpus = random_model(12)
    idx = [3, 0, 5]
    sub = corpus.subset(idx)
    r_sub = model.decode(sub, marginals=True)
    r_all = model.decode(corpus, marginals=True)
    np.testing.assert_allclose(r_sub["logz"], r_all["logz"][idx], rtol=1e-13)
    ref = model.decode(model.encode([X[i] for i in idx], B=[B[i] for i in idx]), marginals=True)
    np.testing.assert_allclose(r_sub["logz"], ref["logz"], rtol=1e-13)


def test_stochastic_refusal_is_in_train_corpus_too():
    from crfkit.train import train_corpus

    model, X, Y, B, corpus = random_model(3)
    with pytest.raises(CrfkitError, match="bigram"):
        train_corpus(model.space, corpus, algorithm="sag", max_iterations=1)


def test_checkpoint_fingerprint_covers_the_bigram_features():
    from crfkit.checkpoint import fingerprint
    from crfkit.features.encode import build

    X, Y, B = bigram_data(5, n_seq=8)
    s1, c1 = build(X, Y, B=B)
    B2 = [
        [[a + "x" if isinstance(a, str) else (a[0] + "x", a[1]) for a in tok] for tok in seq]
        for seq in B
    ]
    s2, c2 = build(X, Y, B=B2)
    assert s1.n_features == s2.n_features
    assert fingerprint(s1, c1) != fingerprint(s2, c2)
    s0, c0 = build(X, Y)
    assert fingerprint(s0, c0) != fingerprint(s1, c1)


def _space_with_pairs(L, pairs):
    from crfkit.model import FeatureSpace

    return FeatureSpace(
        labels=[f"y{j}" for j in range(L)],
        attributes=[],
        attr_ptr=[0],
        feat_label=[],
        trans_index=-np.ones((L, L), dtype=np.int32),
        battributes=["b"],
        battr_ptr=[0, len(pairs)],
        bfeat_pair=np.asarray(pairs, dtype=np.int64),
    )


def test_label_pairs_are_stored_in_the_narrowest_signed_type():
    # int16 while every pair i*L + j fits (L <= 181), int32 beyond; the values kept exactly
    X, Y, B = bigram_data(1)
    for support in ("observed", "all"):
        space, _ = build(X, Y, B=B, support=support)
        assert space.bfeat_pair.dtype == np.int16
    s = _space_with_pairs(181, [0, 181 * 181 - 1])
    assert s.bfeat_pair.dtype == np.int16 and s.bfeat_pair.tolist() == [0, 32760]
    s = _space_with_pairs(182, [0, 182 * 182 - 1])
    assert s.bfeat_pair.dtype == np.int32 and s.bfeat_pair.tolist() == [0, 33123]
    # out-of-range pairs are refused before the narrowing (70000 would wrap to 4464 in int16)
    for L, bad in ((10, 100), (10, -1), (10, 70000), (181, 181 * 181)):
        with pytest.raises(ValueError, match="outside L x L"):
            _space_with_pairs(L, [0, bad])


def test_int16_and_int32_label_pairs_give_the_same_objective_and_fingerprint():
    # the kernels are generic in the pairs' type: the same value and gradient to the bit; the
    # checkpoint fingerprint digests the pairs as int32, as before the narrowing, so older
    # checkpoints still resume
    from crfkit.checkpoint import fingerprint

    X, Y, B = bigram_data(6, n_seq=8)
    for support in ("observed", "all"):
        space, corpus = build(X, Y, B=B, support=support)
        w = np.random.default_rng(2).normal(0.0, 0.5, space.n_features)
        f16, g16 = Objective(corpus, space, Regularization(l2=0.1)).value_and_grad(w)
        fp16 = fingerprint(space, corpus)
        space.bfeat_pair = space.bfeat_pair.astype(np.int32)  # as spaces were stored before
        f32, g32 = Objective(corpus, space, Regularization(l2=0.1)).value_and_grad(w)
        assert f16 == f32 and np.array_equal(g16, g32)
        assert fingerprint(space, corpus) == fp16


# ----------------------------------------------------------------------------- score building
def test_bigram_transitions_against_numpy_both_exponential_paths():
    """M[t] and expM[t] = exp(M[t] - tmx[t]) from bigram_transitions against numpy, for tokens whose
    non-zero features touch few pairs (expM0 times a factor, exp of the touched pairs) and many
    (every exponential, vectorised), real values and zero weights included; and the same from
    compact_bigram's arrays."""
    rng = np.random.default_rng(3)
    L, n_battr = 7, 6
    LL = L * L
    battr_ptr = np.zeros(n_battr + 1, np.int64)
    pairs = []
    for b in range(n_battr):
        k = [1, 2, 4, 12, 30, LL][b]
        pairs.append(np.sort(rng.choice(LL, size=k, replace=False)).astype(np.int32))
        battr_ptr[b + 1] = battr_ptr[b] + k
    bfeat_pair = np.concatenate(pairs)
    boff = 5
    w = rng.normal(scale=2.0, size=boff + len(bfeat_pair))
    w[boff:][rng.random(len(bfeat_pair)) < 0.3] = 0.0
    T = 9
    toks = [[], [0], [1, 2], [3], [4], [5], [0, 5], [2, 3, 4], []]
    btok_ptr = np.zeros(T + 1, np.int64)
    btok_ptr[1:] = np.cumsum([len(x) for x in toks])
    battr = np.array([b for x in toks for b in x], np.int32)
    bval = rng.choice([1.0, 0.5, -2.0], size=len(battr))
    trans = rng.normal(size=(L, L))
    tmax0 = trans.max()
    expM0 = np.exp(trans - tmax0)
    ref = np.zeros((T, L, L))
    for t in range(1, T):
        ref[t] = trans
        for e in range(btok_ptr[t], btok_ptr[t + 1]):
            b = battr[e]
            for k in range(battr_ptr[b], battr_ptr[b + 1]):
                ref[t].flat[bfeat_pair[k]] += w[boff + k] * bval[e]
    zp, zpair, wz = chain.compact_bigram(w, boff, battr_ptr, bfeat_pair, 1.0)
    assert len(zpair) == np.count_nonzero(w[boff:]) and np.array_equal(wz[:boff], w[:boff])
    assert (
        chain.compact_bigram(w, boff, battr_ptr, bfeat_pair, 0.5)[0].shape[0] == 0
    )  # 70% non-zero
    for args in ((battr_ptr, bfeat_pair, w), (zp, zpair, wz)):
        M, expM, tmx = np.empty((T, L, L)), np.empty((T, L, L)), np.empty(T)
        rng_ = chain.bigram_transitions(
            btok_ptr, battr, bval, 0, T, *args, boff, trans, M, tmx, expM0, tmax0, expM
        )
        np.testing.assert_allclose(M[1:], ref[1:], rtol=0, atol=1e-13)
        mx = ref[1:].max(axis=(1, 2))
        np.testing.assert_allclose(tmx[1:], mx, rtol=0, atol=1e-13)
        np.testing.assert_allclose(
            expM[1:], np.exp(ref[1:] - mx[:, None, None]), rtol=4e-15, atol=0
        )
        assert rng_ == pytest.approx(max(np.ptp(ref[t]) for t in range(1, T)), abs=1e-13)
