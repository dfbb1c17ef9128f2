"""``crfkit tag`` with -n, --constraints, --forbid, --allowed-column, --force and --decode
posterior."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import run_cli as run
from crfkit import cli
from crfkit.datasets import synthetic
from crfkit.decode import Constraints
from crfkit.model import CRFModel


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("decode_cli")
    synthetic.write(d / "train.txt", 60, seed=1)
    synthetic.write(d / "test.txt", 15, seed=2)
    m = d / "model.crfkit"
    # few iterations: a weak model, so that unconstrained output breaks BIO now and then
    assert (
        cli.main(
            [
                "train",
                str(d / "train.txt"),
                "-m",
                str(m),
                "--max-iterations",
                "3",
                "-q",
                "--support",
                "all",
                "--transitions",
                "all",
            ]
        )
        == 0
    )
    return {"dir": d, "train": d / "train.txt", "test": d / "test.txt", "model": m}


def blocks(text):
    """The n-best output as [(k, p, rows)]."""
    out = []
    cur = None
    for line in text.splitlines():
        if line.startswith("# "):
            _, k, p = line.split()
            cur = (int(k), float(p), [])
            out.append(cur)
        elif line:
            cur[2].append(line.split("\t"))
    return out


def test_nbest_column_layout_matches_the_api(data, capsys):
    rc, out, err = run(capsys, "tag", "-m", data["model"], data["test"], "-n", "3")
    assert rc == 0, err
    b = blocks(out)
    sents = open(data["test"]).read().strip().split("\n\n")
    assert len(b) == 3 * len(sents)
    assert [k for k, _, _ in b] == [0, 1, 2] * len(sents)
    # a blank line after every candidate, as crf_test -n
    assert out.count("\n\n") == len(b)
    model = CRFModel.load(data["model"])
    from crfkit.io.columns import read_columns_list
    from crfkit.pipeline import attributes_of, tagger_from_model

    t, pad = tagger_from_model(model)
    sent = read_columns_list(str(data["test"]), has_labels=True)
    nb = model.nbest(attributes_of(sent, t, pad=pad), 3)
    for i in range(len(sents)):
        for k in range(3):
            kk, p, rows = b[3 * i + k]
            assert [r[-1] for r in rows] == nb[i].labels[k]
            assert [r[:3] for r in rows] == [
                [*c, g] for c, g in zip(sent[i].columns, sent[i].labels)
            ]
            assert abs(p - nb[i].probabilities[k]) < 1e-6
        # top-1 is what plain tagging gives
    rc, plain, _ = run(capsys, "tag", "-m", data["model"], data["test"])
    top = [rows for k, _, rows in b if k == 0]
    assert ["\t".join(r) for rows in top for r in rows] == [x for x in plain.splitlines() if x]


def test_bio_constraints_make_every_sentence_valid(data, capsys):
    model = CRFModel.load(data["model"])
    c = Constraints.scheme(model.labels, "bio")

    def sents(text):
        out, cur = [], []
        for line in text.splitlines():
            if line.startswith("# "):
                continue
            if line:
                cur.append(line.split("\t")[-1])
            elif cur:
                out.append(cur)
                cur = []
        return out

    rc, plain, _ = run(capsys, "tag", "-m", data["model"], data["test"])
    rc, cons, err = run(
        capsys, "tag", "-m", data["model"], data["test"], "--constraints", "bio", "--eval"
    )
    assert rc == 0, err
    assert "accuracy" in err
    assert all(c.valid(s) for s in sents(cons))
    rc, post, _ = run(
        capsys,
        "tag",
        "-m",
        data["model"],
        data["test"],
        "--constraints",
        "bio",
        "--decode",
        "posterior",
        "--probability",
    )
    assert rc == 0
    assert post.count("# ") == 15 and all(c.valid(s) for s in sents(post))
    rc, nb, _ = run(
        capsys, "tag", "-m", data["model"], data["test"], "--constraints", "bio", "-n", "4"
    )
    assert all(c.valid([r[-1] for r in rows]) for _, _, rows in blocks(nb))


def test_force_keeps_given_labels(data, tmp_path, capsys):
    lines = open(data["test"]).read().splitlines()
    rng = np.random.default_rng(0)
    forced = []
    for line in lines:
        if not line:
            forced.append(line)
            continue
        w, pos, lab = line.split(" ")
        forced.append(f"{w} {pos} {lab if rng.random() < 0.3 else '?'}")
    f = tmp_path / "forced.txt"
    f.write_text("\n".join(forced) + "\n")
    rc, out, err = run(capsys, "tag", "-m", data["model"], f, "--force")
    assert rc == 0, err
    for line in out.splitlines():
        if line:
            w, pos, given, pred = line.split("\t")
            assert given == "?" or pred == given
    bad = tmp_path / "bad.txt"
    bad.write_text("The DT B-XX\n\n")
    rc, out, err = run(capsys, "tag", "-m", data["model"], bad, "--force")
    assert rc == 2 and "'B-XX' is not a label of the model" in err and "bad.txt:1" in err


def test_allowed_column_and_forbid(data, tmp_path, capsys):
    rows = []
    for line in open(data["test"]).read().splitlines():
        if not line:
            rows.append("")
            continue
        w, pos, lab = line.split(" ")
        rows.append(f"{w} B-NP|I-NP|O {pos}")
    f = tmp_path / "allowed.txt"
    f.write_text("\n".join(rows) + "\n")
    rc, out, err = run(
        capsys, "tag", "-m", data["model"], f, "--allowed-column", "2", "--forbid", "O,I-NP"
    )
    assert rc == 0, err
    prev = None
    for line in out.splitlines():
        if not line:
            prev = None
            continue
        parts = line.split("\t")
        assert parts[1] == "B-NP|I-NP|O" and parts[-1] in ("B-NP", "I-NP", "O")
        assert not (prev == "O" and parts[-1] == "I-NP")
        prev = parts[-1]
    rc, out, err = run(capsys, "tag", "-m", data["model"], f, "--forbid", "O,ZZ")
    assert rc == 2 and "not a label of the model" in err
    rc, out, err = run(
        capsys, "tag", "-m", data["model"], data["test"], "-n", "2", "--decode", "posterior"
    )
    assert rc == 2


def test_crfsuite_format_nbest_and_force(tmp_path, capsys):
    train = tmp_path / "train.crfsuite"
    rng = np.random.default_rng(1)
    lines = []
    for _ in range(40):
        for _t in range(int(rng.integers(2, 6))):
            y = ["A", "B", "C"][int(rng.integers(3))]
            lines.append(f"{y}\tw={y if rng.random() < 0.7 else 'x'}\tn={int(rng.integers(3))}")
        lines.append("")
    train.write_text("\n".join(lines) + "\n")
    m = tmp_path / "m.crfkit"
    assert (
        cli.main(
            [
                "train",
                str(train),
                "-m",
                str(m),
                "--format",
                "crfsuite",
                "-q",
                "--max-iterations",
                "20",
            ]
        )
        == 0
    )
    rc, out, err = run(capsys, "tag", "-m", m, "--format", "crfsuite", train, "-n", "2", "-r")
    assert rc == 0, err
    heads = [line for line in out.splitlines() if line.startswith("@nbest")]
    assert (
        len(heads) == 80
        and heads[0].startswith("@nbest\t0\t")
        and heads[1].startswith("@nbest\t1\t")
    )
    forced = tmp_path / "forced.crfsuite"
    forced.write_text("B\tw=A\n?\tw=A\n\n")
    rc, out, err = run(capsys, "tag", "-m", m, "--format", "crfsuite", forced, "--force")
    assert rc == 0, err
    assert out.splitlines()[0] == "B"


def test_nbest_with_marginals(data, capsys):
    rc, out, err = run(capsys, "tag", "-m", data["model"], data["test"], "-n", "2", "--marginals")
    assert rc == 0, err
    b = blocks(out)
    rc, plain, _ = run(capsys, "tag", "-m", data["model"], data["test"], "-n", "2")
    pb = blocks(plain)
    assert len(b) == len(pb)
    for (k, p, rows), (k2, p2, rows2) in zip(b, pb):
        assert k == k2 and p == p2
        for r, r2 in zip(rows, rows2):
            lab, q = r[-1].rsplit("/", 1)
            assert lab == r2[-1] and 0.0 <= float(q) <= 1.0 and r[:-1] == r2[:-1]


def test_tag_empty_input_gives_empty_output_and_exit_0(chunker, tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    out_file = tmp_path / "out.txt"
    rc, out, err = run(capsys, "tag", "-m", chunker["model"], empty, "-o", out_file)
    assert rc == 0 and out == "" and "warning" in err and "empty input" in err
    assert out_file.read_text() == ""
    rc, out, err = run(capsys, "tag", "-m", chunker["model"], empty, "-n", "3")
    assert rc == 0 and out == ""


def test_tag_eval_reports_accuracy_for_non_chunk_labels(tmp_path, capsys):
    rows = []
    for i in range(30):
        for w, t in (("the", "DT"), ("dog", "NN"), ("runs", "VBZ")):
            rows.append(f"{w} {t}")
        rows.append("")
    f = tmp_path / "pos.txt"
    f.write_text("\n".join(rows) + "\n")
    tpl = tmp_path / "tpl"
    tpl.write_text("U00:%x[0,0]\nB\n")
    m = tmp_path / "pos.crfkit"
    assert (
        cli.main(["train", str(f), "-m", str(m), "-t", str(tpl), "-q", "--max-iterations", "20"])
        == 0
    )
    rc, out, err = run(capsys, "tag", "-m", m, f, "--eval")
    assert rc == 0 and "accuracy: 100.00% of 90 tokens" in err and "phrases" not in err
    rc, out, err = run(capsys, "tag", "-m", m, f, "--eval", "--raw")
    assert rc == 0 and "FB1: 100.00" in err
