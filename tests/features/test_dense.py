"""Dense real-valued token features (embeddings, pixels): a (tokens x D) block with a weight per
(dim, label).

Checked against brute-force enumeration, finite differences, an equivalent
sparse encoding (each dimension as a real-valued attribute with every label),
the per-example oracle, the model file, the estimator, and the OCR letters.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import crfkit
from conftest import enumerate_chain
from crfkit import datasets
from crfkit.errors import DataError, ModelError
from crfkit.features.encode import build, encode
from crfkit.model import CRFModel
from crfkit.objective import Objective, Regularization
from crfkit.train import train


def problem(seed: int, n: int = 12, D: int = 4, L: int = 3, attrs: bool = True, max_len: int = 5):
    rng = np.random.default_rng(seed)
    lens = rng.integers(1, max_len + 1, n)
    dense = [rng.normal(size=(T, D)) for T in lens]
    Y = [[f"l{x}" for x in rng.integers(0, L, T)] for T in lens]
    X = (
        [
            [
                [f"a{rng.integers(0, 4)}", (f"r{rng.integers(0, 2)}", float(rng.normal()))]
                for _ in range(T)
            ]
            for T in lens
        ]
        if attrs
        else None
    )
    return X, Y, dense


def as_sparse(X, dense):
    """The same features with every dense dimension as a real-valued attribute "d<j>"."""
    out = []
    for i, d in enumerate(dense):
        seq = []
        for t, row in enumerate(d):
            tok = list(X[i][t]) if X is not None else []
            tok += [(f"d{j}", float(v)) for j, v in enumerate(row)]
            seq.append(tok)
        out.append(seq)
    return out


def fd_gradient(f, w, eps=1e-6):
    g = np.zeros_like(w)
    for k in range(len(w)):
        e = np.zeros_like(w)
        e[k] = eps
        g[k] = (f(w + e) - f(w - e)) / (2 * eps)
    return g


@pytest.mark.parametrize("attrs", [True, False])
def test_gradient_matches_finite_differences(attrs):
    X, Y, dense = problem(1, attrs=attrs)
    space, corpus = build(X, Y, dense=dense)
    assert (
        space.n_dense == 4
        and space.n_features == space.n_state + space.n_trans + 4 * space.n_labels
    )
    obj = Objective(corpus, space, Regularization(l2=0.3))
    w = np.random.default_rng(2).normal(size=space.n_features) * 0.5
    f, g = obj.value_and_grad(w)
    assert f == pytest.approx(obj.value(w), rel=1e-12)
    np.testing.assert_allclose(g, fd_gradient(obj.value, w), atol=1e-7)


def test_likelihood_and_marginals_match_enumeration():
    X, Y, dense = problem(3, n=6, D=3, L=3, max_len=4)
    space, corpus = build(X, Y, dense=dense)
    w = np.random.default_rng(4).normal(size=space.n_features)
    model = CRFModel(space, w)
    r = model.decode(corpus, marginals=True, labels=corpus.y)
    # reference scores: sparse attributes + X @ W, built independently of the kernels
    W = space.dense_weights(w)
    L = space.n_labels
    tr = np.zeros((L, L))
    m = space.trans_index >= 0
    tr[m] = w[space.n_state + space.trans_index[m]]
    for i in range(corpus.n_sequences):
        t0, t1 = corpus.seq_ptr[i], corpus.seq_ptr[i + 1]
        score = dense[i] @ W
        for t in range(t0, t1):
            for e in range(corpus.tok_ptr[t], corpus.tok_ptr[t + 1]):
                a = corpus.attr[e]
                for k in range(space.attr_ptr[a], space.attr_ptr[a + 1]):
                    score[t - t0, space.feat_label[k]] += w[k] * corpus.val[e]
        ref = enumerate_chain(score, tr)
        assert r["logz"][i] == pytest.approx(ref["logz"], abs=1e-10)
        np.testing.assert_allclose(r["marginals"][t0:t1], ref["node"], atol=1e-10)
        np.testing.assert_array_equal(r["ids"][t0:t1], ref["best_path"])
        gold = [corpus.y[t] for t in range(t0, t1)]
        p = np.exp(r["label_score"][i] - r["logz"][i])
        i_path = int(np.flatnonzero((ref["paths"] == gold).all(axis=1))[0])
        assert p == pytest.approx(np.exp(ref["scores"][i_path] - ref["logz"]), rel=1e-10)


def test_same_objective_and_gradient_as_the_equivalent_sparse_encoding():
    X, Y, dense = problem(5, n=15, D=3)
    space, corpus = build(X, Y, dense=dense, support="all", transitions="all")
    sspace, scorpus = build(as_sparse(X, dense), Y, support="all", transitions="all")
    # map: dense weight (j, l) <-> sparse feature of attribute "d<j>" with label l
    w = np.random.default_rng(6).normal(size=space.n_features) * 0.4
    ws = np.zeros(sspace.n_features)
    fa = sspace.feature_attr()
    for k in range(sspace.n_state):
        name, lab = (
            sspace.attributes[fa[k]],
            space.labels.index(sspace.labels[sspace.feat_label[k]]),
        )
        if name.startswith("d"):
            ws[k] = space.dense_weights(w)[int(name[1:]), lab]
        else:
            ka = space.attr_ptr[space.attr_index[name]] + lab
            ws[k] = w[ka]
    L = space.n_labels
    perm = [space.labels.index(x) for x in sspace.labels]
    for i in range(L):
        for j in range(L):
            ws[sspace.n_state + sspace.trans_index[i, j]] = w[
                space.n_state + space.trans_index[perm[i], perm[j]]
            ]
    reg = Regularization(l2=0.1)
    f, g = Objective(corpus, space, reg).value_and_grad(w)
    fs, gs = Objective(scorpus, sspace, reg).value_and_grad(ws)
    assert f == pytest.approx(fs, rel=1e-12)
    for k in range(sspace.n_state):
        name, lab = (
            sspace.attributes[fa[k]],
            space.labels.index(sspace.labels[sspace.feat_label[k]]),
        )
        if name.startswith("d"):
            assert gs[k] == pytest.approx(space.dense_weights(g)[int(name[1:]), lab], abs=1e-12)


def test_oracle_and_sparse_application_add_up_to_the_full_gradient():
    X, Y, dense = problem(7)
    space, corpus = build(X, Y, dense=dense)
    obj = Objective(corpus, space)
    w = np.random.default_rng(8).normal(size=space.n_features) * 0.3
    beta = 0.7
    v = w / beta
    total = 0.0
    G = np.zeros(space.n_features)
    for i in range(corpus.n_sequences):
        loss, node, edge = obj.oracle(i, v, beta)
        total += loss
        obj.apply_gradient(i, node, edge, 1.0, G)
    nll, g = obj.nll_sum_grad(w)
    assert total == pytest.approx(nll, rel=1e-12)
    np.testing.assert_allclose(G, g, atol=1e-11)


def test_training_on_dense_only_matches_the_sparse_encoding():
    X, Y, dense = problem(9, n=30, D=5, attrs=False)
    a = train(None, Y, dense=dense, support="all", transitions="all", gtol=1e-9, max_iterations=500)
    b = train(
        as_sparse(None, dense), Y, support="all", transitions="all", gtol=1e-9, max_iterations=500
    )
    assert a.objective == pytest.approx(b.objective, rel=1e-9)
    assert a.model.tag(None, dense=dense) == b.model.tag(as_sparse(None, dense))


def test_model_file_round_trip_and_version(tmp_path):
    X, Y, dense = problem(11)
    res = train(X, Y, dense=dense, dense_names=["e0", "e1", "e2", "e3"], max_iterations=30)
    m = res.model
    p = tmp_path / "dense.crfkit"
    m.save(p)
    m2 = CRFModel.load(p)
    assert m2.space.n_dense == 4 and m2.space.dense_names == ["e0", "e1", "e2", "e3"]
    np.testing.assert_array_equal(
        m2.space.dense_weights(m2.weights), m.space.dense_weights(m.weights)
    )
    assert m2.tag(X, dense=dense) == m.tag(X, dense=dense)
    assert set(m2.dense_features()) == {
        (d, lab) for d in ["e0", "e1", "e2", "e3"] for lab in m.labels
    }
    import json
    import struct

    data = p.read_bytes()
    (hl,) = struct.unpack_from("<I", data, 8)
    header = json.loads(data[12 : 12 + hl])
    assert header["format_version"] == 2 and header["n_dense"] == 4
    # a damaged dense count is refused (the checksum first, and the content checks behind it)
    bad = data.replace(b'"n_dense": 4', b'"n_dense": 5')
    (tmp_path / "bad.crfkit").write_bytes(bad)
    with pytest.raises(ModelError):
        CRFModel.load(tmp_path / "bad.crfkit")


def test_bad_dense_input_names_the_problem():
    X, Y, dense = problem(13, n=4, D=3)
    with pytest.raises(DataError, match="sequence 1: 2 dense dimensions, expected 3"):
        build(X, Y, dense=[dense[0], dense[1][:, :2]] + dense[2:])
    short = [d.copy() for d in dense]
    short[2] = short[2][:-1] if len(short[2]) > 1 else np.zeros((2, 3))
    with pytest.raises(DataError, match="sequence 2 has"):
        build(X, Y, dense=short)
    nan = [d.copy() for d in dense]
    nan[3][0, 1] = np.nan
    with pytest.raises(DataError, match=r"sequence 3, token 0: dense feature 1 is nan"):
        build(X, Y, dense=nan)
    inf = [d.copy() for d in dense]
    inf[0][-1, 2] = -np.inf
    with pytest.raises(DataError, match="values must be finite"):
        build(X, Y, dense=inf)
    with pytest.raises(DataError, match="sequences but 3 dense matrices"):
        build(X, Y, dense=dense[:3])
    with pytest.raises(DataError, match="matrix"):
        build(X, Y, dense=[np.zeros(3)] * 4)
    space, _ = build(X, Y, dense=dense)
    with pytest.raises(DataError, match="has 3 dense feature dimensions"):
        encode(X, space)
    plain, _ = build(X, Y)
    with pytest.raises(DataError, match="no dense dimensions"):
        encode(X, plain, dense=dense)
    with pytest.raises(DataError, match="expected 3"):
        encode(X, space, dense=[d[:, :2] for d in dense])


def test_estimator_takes_matrices_and_pairs():
    X, Y, dense = problem(15, n=40, D=4)
    sk = [
        [
            {a if isinstance(a, str) else a[0]: (1.0 if isinstance(a, str) else a[1]) for a in tok}
            for tok in seq
        ]
        for seq in X
    ]
    both = crfkit.CRF(max_iterations=50).fit([(f, d) for f, d in zip(sk, dense)], Y)
    only = crfkit.CRF(max_iterations=50).fit(dense, Y)
    assert only.model_.space.n_dense == 4 and only.model_.space.n_attributes == 0
    pred = both.predict([(f, d) for f, d in zip(sk, dense)])
    assert [len(p) for p in pred] == [len(y) for y in Y]
    marg = only.predict_marginals_single(dense[0])
    assert len(marg) == len(dense[0]) and all(abs(sum(m.values()) - 1) < 1e-9 for m in marg)
    assert only.predict_single(dense[1]) == only.predict([dense[1]])[0]
    assert only.score(dense, Y) > 0.3
    # pickled and restored, the same predictions
    again = pickle.loads(pickle.dumps(only))
    assert again.predict(dense) == only.predict(dense)
    with pytest.raises(
        DataError, match="sequence 0 has a dense feature matrix but sequence 1 has none"
    ):
        crfkit.CRF().fit([dense[0], sk[1]], Y[:2])
    with pytest.raises(DataError, match="dense"):
        only.predict(sk)


def test_warm_start_keeps_dense_weights_by_name():
    X, Y, dense = problem(17, n=20, D=3)
    a = train(X, Y, dense=dense, max_iterations=40)
    b = train(X, Y, dense=dense, init=a.model, max_iterations=1)
    # one more iteration from the first model's weights: a continuation, not a restart
    assert b.objective <= a.objective + 1e-9
    np.testing.assert_allclose(
        b.model.space.dense_weights(b.model.weights),
        a.model.space.dense_weights(a.model.weights),
        atol=0.5,
    )


def test_resume_with_dense_features_is_bitwise(tmp_path):
    X, Y, dense = problem(19, n=25, D=3)
    full = train(X, Y, dense=dense, max_iterations=12, threads=1)
    ck = tmp_path / "ck.npz"
    train(X, Y, dense=dense, max_iterations=6, threads=1, checkpoint=ck)
    rest = train(X, Y, dense=dense, max_iterations=12, threads=1, resume=ck)
    np.testing.assert_array_equal(rest.model.weights, full.model.weights)
    other = [d + 1.0 for d in dense]  # other dense values: another training set
    with pytest.raises(Exception, match="(?i)differ|fingerprint|other"):
        train(X, Y, dense=other, max_iterations=12, threads=1, resume=ck)


def _ocr_or_skip():
    try:
        datasets.find_file("ocr_letters/letter.data.gz")
    except Exception:
        pytest.skip("OCR letters are not in the data directory")


def test_ocr_letters_train_through_the_dense_path():
    """Fold 1 trains on its pixels as a dense block; the same model as pixel attributes
    with every label (support=all), and far better than chance on fold 2."""
    _ocr_or_skip()
    Xtr, Ytr = datasets.load_ocr_letters(1)
    Xte, Yte = datasets.load_ocr_letters(2)
    Xtr, Ytr = Xtr[:200], Ytr[:200]
    dense = train(None, Ytr, dense=Xtr, support="all", c2=1.0, max_iterations=40, threads=2)
    sparse = train(
        datasets.pixel_attributes(Xtr, bias=False),
        Ytr,
        support="all",
        c2=1.0,
        max_iterations=40,
        threads=2,
    )
    assert dense.model.space.n_dense == 128
    assert dense.objective == pytest.approx(sparse.objective, rel=1e-6)
    pred = dense.model.tag(None, dense=Xte)
    acc = np.mean([p == g for ps, gs in zip(pred, Yte) for p, g in zip(ps, gs)])
    assert acc > 0.5


def _dense_column_file(path, seed, n=40, bad=None):
    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(n):
        for _ in range(int(rng.integers(1, 6))):
            lab = int(rng.integers(0, 3))
            vec = rng.normal(size=3) + np.eye(3)[lab] * 2.0
            lines.append(
                f"w{rng.integers(0, 5)}\t" + "\t".join(f"{v:.6f}" for v in vec) + f"\tL{lab}"
            )
        lines.append("")
    if bad is not None:
        lineno, text = bad
        lines[lineno - 1] = text
    path.write_text("\n".join(lines) + "\n")
    return lines


def test_cli_trains_and_tags_with_dense_columns(tmp_path, capsys):
    from crfkit.cli import main

    train_f, test_f = tmp_path / "train.txt", tmp_path / "test.txt"
    _dense_column_file(train_f, 1)
    lines = _dense_column_file(test_f, 2)
    tpl = tmp_path / "template"
    tpl.write_text("U00:%x[0,0]\nB\n")
    model = tmp_path / "m.crfkit"
    assert (
        main(
            [
                "train",
                str(train_f),
                "-m",
                str(model),
                "-t",
                str(tpl),
                "--dense-columns",
                "2-4",
                "-q",
            ]
        )
        == 0
    )
    m = CRFModel.load(model)
    assert m.space.n_dense == 3 and m.meta["dense_columns"] == [2, 3, 4]
    assert m.space.dense_names == ["column 2", "column 3", "column 4"]
    capsys.readouterr()
    out = tmp_path / "out.txt"
    assert main(["tag", str(test_f), "-m", str(model), "-o", str(out)]) == 0
    tagged = [x.split("\t") for x in out.read_text().splitlines() if x]
    gold = [x.split("\t")[-1] for x in lines if x]
    assert len(tagged) == len(gold)
    assert (
        np.mean([t[-1] == g for t, g in zip(tagged, gold)]) > 0.8
    )  # the dense columns carry the label
    # crfkit serve warms up and answers with the same output (dense columns in its synthetic batch
    # too)
    from crfkit.serve import TagService

    svc = TagService(str(model), threads=1)
    svc.warm()
    status, text, err = svc.tag_text(test_f.read_bytes(), [])
    assert status == 0 and text == out.read_text(), err
    assert main(["info", "-m", str(model)]) == 0
    assert (
        "dense features: 3 dimensions (columns 2-4) x 3 labels = 9 weights"
        in capsys.readouterr().out
    )
    # dense columns only: a template file without U lines is fine then
    tpl2 = tmp_path / "template2"
    tpl2.write_text("B\n")
    assert (
        main(
            [
                "train",
                str(train_f),
                "-m",
                str(model),
                "-t",
                str(tpl2),
                "--dense-columns",
                "2-4",
                "-q",
            ]
        )
        == 0
    )
    assert CRFModel.load(model).space.n_attributes == 0


def test_cli_dense_column_errors_name_file_and_line(tmp_path, capsys):
    from crfkit.cli import main

    f = tmp_path / "train.txt"
    _dense_column_file(f, 3, bad=(2, "w1\t0.5\tabc\t1.0\tL0"))
    tpl = tmp_path / "template"
    tpl.write_text("U00:%x[0,0]\nB\n")
    assert (
        main(
            [
                "train",
                str(f),
                "-m",
                str(tmp_path / "m"),
                "-t",
                str(tpl),
                "--dense-columns",
                "2-4",
                "-q",
            ]
        )
        == 2
    )
    assert f"{f}:2: dense column 3 holds 'abc', not a number" in capsys.readouterr().err
    _dense_column_file(f, 3, bad=(3, "w1\t0.5\tnan\t1.0\tL0"))
    assert (
        main(
            [
                "train",
                str(f),
                "-m",
                str(tmp_path / "m"),
                "-t",
                str(tpl),
                "--dense-columns",
                "2-4",
                "-q",
            ]
        )
        == 2
    )
    assert f"{f}:3: dense column 3 holds 'nan': values must be finite" in capsys.readouterr().err
    assert (
        main(
            [
                "train",
                str(f),
                "-m",
                str(tmp_path / "m"),
                "-t",
                str(tpl),
                "--dense-columns",
                "4-2",
                "-q",
            ]
        )
        == 2
    )
    assert "--dense-columns: bad column range" in capsys.readouterr().err
