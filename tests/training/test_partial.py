"""Partial-label training (crfkit.partial): the likelihood against brute-force enumeration, the
gradient against finite differences, equality with the ordinary objective when every label is
given."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from conftest import Reference, random_sequences
from crfkit import cli
from crfkit.errors import CrfkitError
from crfkit.features.encode import build
from crfkit.model import CRFModel
from crfkit.objective import Objective, Regularization
from crfkit.train import train
from crfkit.training.partial import PartialObjective, allowed_matrix, parse_cell, placeholders


def partial_data(seed, n_seq=6, n_labels=3, p_hide=0.5, real=True):
    rng = np.random.default_rng(seed)
    X, Y = random_sequences(rng, n_seq, max_len=4, n_labels=n_labels, real=real)
    labels = sorted({lab for ys in Y for lab in ys})
    P = []
    for ys in Y:
        row = []
        for y in ys:
            u = rng.random()
            if u < p_hide / 2:
                row.append(None)
            elif u < p_hide:
                row.append({y, labels[int(rng.integers(len(labels)))]})
            else:
                row.append(y)
        P.append(row)
    return X, Y, P


def setup(seed, **kw):
    X, Y, P = partial_data(seed, **kw)
    Yp, cells, _ = placeholders(P)
    space, corpus = build(X, Yp, support="all", transitions="all")
    A = allowed_matrix(cells, space.labels)
    w = np.random.default_rng(seed + 1).normal(size=space.n_features)
    return X, P, space, corpus, A, w


def brute_nll(model, X, A, ptr):
    ref = Reference(model)
    L = ref.L
    total = 0.0
    for s, x in enumerate(X):
        score = ref.scores(x)
        T = len(x)
        lz, lzc = [], []
        for p in itertools.product(range(L), repeat=T):
            v = sum(score[t, p[t]] for t in range(T)) + sum(
                ref.trans[p[t - 1], p[t]] for t in range(1, T)
            )
            lz.append(v)
            if all(A[ptr[s] + t, p[t]] for t in range(T)):
                lzc.append(v)
        total += np.logaddexp.reduce(lz) - np.logaddexp.reduce(lzc)
    return total


@pytest.mark.parametrize("seed", range(6))
def test_partial_likelihood_against_enumeration(seed):
    X, P, space, corpus, A, w = setup(seed)
    obj = PartialObjective(corpus, space, Regularization(l2=0.0), A, threads=1)
    want = brute_nll(CRFModel(space, w), X, A, corpus.seq_ptr) / corpus.n_sequences
    f, _ = obj.value_and_grad(w)
    assert abs(f - want) < 1e-9 * max(1, abs(want))
    assert abs(obj.value(w) - want) < 1e-9 * max(1, abs(want))


@pytest.mark.parametrize("seed", range(4))
def test_partial_gradient_against_finite_differences(seed):
    X, P, space, corpus, A, w = setup(seed + 10)
    obj = PartialObjective(corpus, space, Regularization(l2=0.3), A, threads=2)
    f, g = obj.value_and_grad(w)
    rng = np.random.default_rng(seed)
    eps = 1e-6
    for k in rng.choice(space.n_features, size=min(25, space.n_features), replace=False):
        e = np.zeros_like(w)
        e[k] = eps
        fd = (obj.value_and_grad(w + e)[0] - obj.value_and_grad(w - e)[0]) / (2 * eps)
        assert abs(fd - g[k]) < 1e-6 * max(1, abs(fd))


def test_full_labels_give_the_ordinary_objective():
    X, Y, _ = partial_data(3, n_seq=8)
    space, corpus = build(X, Y, support="all", transitions="all")
    w = np.random.default_rng(0).normal(size=space.n_features)
    A = np.zeros((corpus.n_tokens, space.n_labels), bool)
    A[np.arange(corpus.n_tokens), corpus.y] = True
    reg = Regularization(l2=0.1)
    f1, g1 = PartialObjective(corpus, space, reg, A).value_and_grad(w)
    f2, g2 = Objective(corpus, space, reg).value_and_grad(w)
    assert abs(f1 - f2) < 1e-10 * max(1, abs(f2))
    np.testing.assert_allclose(g1, g2, atol=1e-10)


def test_train_with_partial_labels_learns_and_refuses_stochastic():
    from conftest import markov_corpus

    X, Y = markov_corpus(1, 120)
    rng = np.random.default_rng(0)
    P = [
        [y if rng.random() < 0.5 else (None if rng.random() < 0.5 else {y, "A"}) for y in ys]
        for ys in Y
    ]
    res = train(X, P, support="all", c2=0.1, max_iterations=60)
    Xt, Yt = markov_corpus(2, 60)
    pred = res.model.tag(Xt)
    acc = np.mean([p == g for ps, gs in zip(pred, Yt) for p, g in zip(ps, gs)])
    assert acc > 0.8
    with pytest.raises(CrfkitError, match="lbfgs or owlqn"):
        train(X, P, support="all", algorithm="sg", max_iterations=1)
    with pytest.raises(CrfkitError, match="support='all'"):
        train(X, P, max_iterations=1)
    assert parse_cell("B-PER|I-PER") == frozenset({"B-PER", "I-PER"}) and parse_cell("?") is None


def test_cli_partial_labels(tmp_path, capsys):
    rng = np.random.default_rng(4)
    rows = []
    for _ in range(60):
        for _t in range(int(rng.integers(2, 6))):
            y = ["B-NP", "I-NP", "O"][int(rng.integers(3))]
            cell = y if rng.random() < 0.6 else ("?" if rng.random() < 0.5 else f"{y}|O")
            rows.append(f"w{y[0]} P{int(rng.integers(3))} {cell}")
        rows.append("")
    f = tmp_path / "partial.txt"
    f.write_text("\n".join(rows) + "\n")
    m = tmp_path / "m.crfkit"
    rc = cli.main(
        [
            "train",
            str(f),
            "-m",
            str(m),
            "--partial-labels",
            "--support",
            "all",
            "-q",
            "--max-iterations",
            "30",
        ]
    )
    assert rc == 0, capsys.readouterr().err
    assert sorted(CRFModel.load(m).labels) == ["B-NP", "I-NP", "O"]


def test_cli_partial_labels_equal_the_python_path(tmp_path, capsys):
    """`crfkit train --partial-labels` on a column file with ? and A|B cells gives the model that
    train(X, cells) gives on the same file (same feature space, same weights), and
    `crfkit tag --eval` reports the conlleval F1 of that model's tags."""
    from crfkit.features.templates import default_chunking_templates
    from crfkit.metrics import conlleval
    from crfkit.pipeline import load_columns
    from crfkit.training.partial import parse_cells

    rng = np.random.default_rng(7)
    kinds = ["B-NP", "I-NP", "B-VP", "O"]

    def sentence(hide):
        rows, prev = [], "O"
        for _ in range(int(rng.integers(2, 7))):
            y = kinds[int(rng.integers(4))]
            if y == "I-NP" and prev not in ("B-NP", "I-NP"):
                y = "B-NP"
            prev = y
            u = rng.random()
            cell = (
                y
                if not hide or u < 0.5
                else ("?" if u < 0.75 else f"{y}|O" if y != "O" else "B-VP|O")
            )
            rows.append(
                (f"w{y[0]}{int(rng.integers(3))}", f"P{y[-1]}{int(rng.integers(2))}", y, cell)
            )
        return rows

    train_rows = [sentence(True) for _ in range(50)]
    test_rows = [sentence(False) for _ in range(20)]
    f, ft = tmp_path / "partial.txt", tmp_path / "test.txt"
    f.write_text("".join("".join(f"{a} {b} {c}\n" for a, b, _, c in s) + "\n" for s in train_rows))
    ft.write_text("".join("".join(f"{a} {b} {y}\n" for a, b, y, _ in s) + "\n" for s in test_rows))
    assert "?" in f.read_text() and "|O" in f.read_text()
    m = tmp_path / "m.crfkit"
    rc = cli.main(
        [
            "train",
            str(f),
            "-m",
            str(m),
            "--partial-labels",
            "--support",
            "all",
            "-q",
            "--c2",
            "1",
            "--max-iterations",
            "25",
            "--threads",
            "1",
        ]
    )
    assert rc == 0, capsys.readouterr().err
    capsys.readouterr()
    tpl = default_chunking_templates()
    X, Yc, _ = load_columns(str(f), tpl)
    res = train(X, parse_cells(Yc), support="all", c2=1.0, max_iterations=25, threads=1)
    cm = CRFModel.load(m)
    assert cm.labels == res.model.labels and cm.space.n_features == res.model.space.n_features
    assert np.array_equal(cm.weights, res.model.weights)
    Xt, Yt, _ = load_columns(str(ft), tpl)
    want = conlleval(Yt, res.model.tag(Xt)).f1
    rc = cli.main(["tag", "-m", str(m), "--eval", str(ft), "-o", str(tmp_path / "out.txt")])
    assert rc == 0
    line = next(ln for ln in capsys.readouterr().err.splitlines() if "FB1:" in ln)
    assert abs(float(line.rsplit("FB1:", 1)[1]) - want) < 0.005 + 1e-9


def test_benchmark_hides_whole_chunks_to_the_token_budget():
    """benchmarks/partial_labels.py's hiding: every chunk (and O token) is hidden whole or kept
    whole, the hidden share reaches the level by less than one unit, the same seed hides the same
    tokens, and the complete sentences are those with no hidden token."""
    import importlib.util
    import sys
    from pathlib import Path

    from crfkit.metrics import chunks

    bench = Path(__file__).resolve().parents[2] / "benchmarks" / "papers" / "partial_labels.py"
    if not bench.exists():
        pytest.skip("benchmarks/partial_labels.py not in this checkout")
    sys.path.insert(0, str(bench.parent))
    try:
        spec = importlib.util.spec_from_file_location("partial_labels_bench", bench)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(bench.parent))
    rng = np.random.default_rng(3)
    Y = []
    for _ in range(200):
        ys = []
        while len(ys) < int(rng.integers(1, 15)):
            k = int(rng.integers(3))
            ys += (
                ["O"]
                if k == 0
                else [f"B-{'NV'[k - 1]}P"] + [f"I-{'NV'[k - 1]}P"] * int(rng.integers(0, 4))
            )
        Y.append(ys)
    n = sum(map(len, Y))
    longest = max(e - s for ys in Y for _, s, e in chunks(ys))
    for level in (0.5, 0.8):
        cells, st, complete = mod.hide(Y, level, seed=1)
        assert cells == mod.hide(Y, level, seed=1)[0] and cells != mod.hide(Y, level, seed=2)[0]
        hidden = sum(c is None for cs in cells for c in cs)
        assert hidden == st["hidden_tokens"] and level * n <= hidden < level * n + longest
        for ys, cs in zip(Y, cells):
            for _, s, e in chunks(ys):
                assert len({c is None for c in cs[s:e]}) == 1  # a chunk is hidden or kept whole
            assert all(c is None or c == y for c, y in zip(cs, ys))
        assert complete == [i for i, cs in enumerate(cells) if None not in cs]


def test_labels_argument_keeps_labels_no_visible_cell_names(tmp_path):
    """labels= gives partially labelled data its label set: a label no visible cell names (only ?
    cells could take it) is still one of the model's labels; without labels= it is missing.
    A cell naming a label outside labels=, a label no cell can take, repeated labels and labels= on
    complete label sequences are clear errors; the CLI's --labels does the same as the Python
    path."""
    from crfkit.errors import DataError, ParameterError

    X = [[["a"], ["b"], ["c"]], [["a"], ["c"]], [["b"], ["b"], ["a"]]]
    Y = [["A", None, "B"], ["A", None], ["B", "A", None]]
    r0 = train(X, Y, support="all", max_iterations=5)
    assert sorted(r0.model.space.labels) == ["A", "B"]
    r = train(X, Y, support="all", max_iterations=5, labels=["A", "B", "C"])
    assert sorted(r.model.space.labels) == ["A", "B", "C"]
    out, cells, universe = placeholders(Y, labels=["C", "A", "B"])
    assert universe == ["C", "A", "B"] and "C" in {lab for seq in out for lab in seq}
    with pytest.raises(DataError, match="outside labels=: B"):
        placeholders(Y, labels=["A", "C"])
    with pytest.raises(DataError, match="no token can take the label"):
        placeholders(Y, labels=["A", "B", "C", "D", "E", "F"])  # 3 ? cells, 4 labels to place
    with pytest.raises(DataError, match="distinct"):
        placeholders(Y, labels=["A", "A", "B"])
    with pytest.raises(ParameterError, match="complete"):
        train(
            X,
            [["A", "B", "B"], ["A", "B"], ["B", "A", "A"]],
            support="all",
            max_iterations=2,
            labels=["A", "B"],
        )
    # the CLI: a column file with ? cells, --labels adds the label only ? cells could take
    f = tmp_path / "p.txt"
    f.write_text("x N A\ny V ?\nz N B\n\nx N A\nz V ?\n\ny V B\ny N A\nx V ?\n\n")
    m = tmp_path / "m.crfkit"
    assert (
        cli.main(
            [
                "train",
                str(f),
                "-m",
                str(m),
                "--partial-labels",
                "--labels",
                "A,B,C",
                "--support",
                "all",
                "-q",
                "--max-iterations",
                "5",
            ]
        )
        == 0
    )
    assert sorted(CRFModel.load(m).space.labels) == ["A", "B", "C"]
    assert (
        cli.main(["train", str(f), "-m", str(m), "--labels", "A,B,C", "--support", "all", "-q"])
        != 0
    )
