"""`crfkit train/tag --format crfsuite|auto` on CRFsuite attribute files."""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import pytest

from conftest import run_cli as run
from crfkit import cli
from crfkit.datasets import synthetic
from crfkit.features.templates import default_chunking_templates
from crfkit.io.crfsuite import read_crfsuite_list, write_crfsuite
from crfkit.metrics import conlleval
from crfkit.model import CRFModel
from crfkit.pipeline import attributes_of


def _attribute_data(n: int, seed: int):
    """Synthetic chunking sentences as CRFsuite items: template attributes (which
    hold ':' and so are escaped in the file), a weighted one and one with a colon."""
    sents = synthetic.generate(n, seed)
    X = attributes_of(sents, default_chunking_templates())
    X = [
        [
            tok + [("len", len(s.columns[i][0]) / 4.0), "w:" + s.columns[i][0].lower()]
            for i, tok in enumerate(xs)
        ]
        for xs, s in zip(X, sents)
    ]
    return X, [s.labels for s in sents]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("crfsuite_cli")
    X, Y = _attribute_data(80, 1)
    write_crfsuite(X, d / "train.txt", Y)
    Xt, Yt = _attribute_data(25, 2)
    write_crfsuite(Xt, d / "test.txt.gz", Yt)
    synthetic.write(d / "columns.txt", 40, seed=3)
    return {
        "dir": d,
        "train": d / "train.txt",
        "test": d / "test.txt.gz",
        "columns": d / "columns.txt",
        "X": X,
        "Y": Y,
        "Xt": Xt,
        "Yt": Yt,
    }


@pytest.fixture(scope="module")
def model(data) -> Path:
    path = data["dir"] / "model.crfkit"
    rc = cli.main(
        [
            "train",
            str(data["train"]),
            "-m",
            str(path),
            "--format",
            "crfsuite",
            "--max-iterations",
            "15",
            "-q",
            "--threads",
            "1",
        ]
    )
    assert rc == 0
    return path


def test_train_from_attribute_file(data, model, tmp_path, capsys):
    m = CRFModel.load(model)
    assert m.meta.get("input_format") == "crfsuite"
    assert not m.meta.get("templates")
    attrs = set(m.space.attributes)
    assert "U00:_B-2" in attrs  # read back unescaped
    assert any(a.startswith("w:") for a in attrs)
    assert "len" in attrs
    # the same model as training on the attribute lists directly
    from crfkit.train import train

    direct = train(data["X"], data["Y"], max_iterations=15, threads=1, verbose=False)
    assert direct.model.space.attributes == m.space.attributes
    assert direct.model.weights == pytest.approx(m.weights, rel=1e-9, abs=1e-12)


def test_tag_output_like_crfsuite_tag(data, model, capsys):
    rc, out, err = run(capsys, "tag", "-m", model, "--format", "crfsuite", data["test"])
    assert rc == 0, err
    blocks = out.split("\n\n")
    assert blocks[-1] == ""
    pred = [b.split("\n") for b in blocks[:-1]]
    assert [len(p) for p in pred] == [len(y) for y in data["Yt"]]
    m = CRFModel.load(model)
    assert pred == m.tag(data["Xt"])
    assert conlleval(data["Yt"], pred).f1 > 50


def test_tag_reference_marginals_probability_and_eval(data, model, capsys):
    rc, out, err = run(
        capsys,
        "tag",
        "-m",
        model,
        "--format",
        "crfsuite",
        data["test"],
        "-r",
        "--marginals",
        "--probability",
        "--eval",
    )
    assert rc == 0, err
    lines = out.split("\n")
    assert lines[0].startswith("@probability\t")
    p = float(lines[0].split("\t")[1])
    assert 0 < p <= 1
    gold, rest = lines[1].split("\t")
    lab, marg = rest.rsplit(":", 1)
    assert gold == data["Yt"][0][0]
    assert 0 < float(marg) <= 1
    assert "accuracy:" in err and "FB1:" in err
    rc, out2, err2 = run(
        capsys,
        "tag",
        "-m",
        model,
        "--format",
        "crfsuite",
        data["test"],
        "--eval",
        "-o",
        data["dir"] / "pred.txt",
    )
    assert rc == 0 and out2 == "" and "FB1" in err2
    assert (data["dir"] / "pred.txt").read_text().count("\n\n") == len(data["Yt"])


def test_auto_format_detects_both_kinds(data, model, tmp_path, capsys):
    # attribute file
    m = tmp_path / "auto.crfkit"
    rc, out, err = run(
        capsys,
        "train",
        data["train"],
        "-m",
        m,
        "--format",
        "auto",
        "--max-iterations",
        "3",
        "--threads",
        "1",
    )
    assert rc == 0, err
    assert "CRFsuite attribute file" in err
    assert CRFModel.load(m).meta.get("input_format") == "crfsuite"
    # column file: unchanged behaviour (templates)
    mc = tmp_path / "cols.crfkit"
    rc, out, err = run(
        capsys,
        "train",
        data["columns"],
        "-m",
        mc,
        "--format",
        "auto",
        "--max-iterations",
        "3",
        "--threads",
        "1",
    )
    assert rc == 0, err
    assert "templates" in err
    assert CRFModel.load(mc).meta.get("templates")
    # tagging: a model without templates implies crfsuite; a templated one detects
    rc, out, err = run(capsys, "tag", "-m", model, "--format", "auto", data["test"])
    assert rc == 0, err
    assert out.split("\n", 1)[0] in CRFModel.load(model).labels
    rc, out, err = run(capsys, "tag", "-m", mc, "--format", "auto", data["columns"])
    assert rc == 0, err
    assert len(out.split("\n", 1)[0].split("\t")) == 4  # word POS gold predicted


def test_auto_format_on_stdin(data, model, monkeypatch, capsys):
    raw = gzip.decompress(data["test"].read_bytes())

    class FakeStdin:
        buffer = io.BytesIO(raw)

    monkeypatch.setattr("sys.stdin", FakeStdin())
    rc, out, err = run(capsys, "tag", "-m", model, "--format", "auto")
    assert rc == 0, err
    assert out.count("\n\n") == len(data["Yt"])


def test_attribute_file_errors_are_clean(data, model, tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_text("A\tx\n\nB\ty:abc\n")
    rc, out, err = run(capsys, "train", bad, "-m", tmp_path / "m", "--format", "crfsuite")
    assert rc == 2 and f"{bad}:3:" in err and "not a number" in err
    assert not (tmp_path / "m").exists()
    rc, out, err = run(capsys, "tag", "-m", model, "--format", "crfsuite", bad)
    assert rc == 2 and f"{bad}:3:" in err

    weighted = tmp_path / "w.txt"
    weighted.write_text("@weight:2\nA\tx\n\nB\ty\n")  # sample weights train (tests/test_weights.py)
    rc, out, err = run(capsys, "train", weighted, "-m", tmp_path / "m", "--format", "crfsuite")
    assert rc == 0, err
    (tmp_path / "m").unlink()
    weighted.write_text("A\tx\n\n@weight:-2\nB\ty\n")
    rc, out, err = run(capsys, "train", weighted, "-m", tmp_path / "m", "--format", "crfsuite")
    assert rc == 2 and "negative" in err and f"{weighted}:3:" in err
    assert not (tmp_path / "m").exists()

    rc, out, err = run(
        capsys,
        "train",
        data["train"],
        "-m",
        tmp_path / "m",
        "--format",
        "crfsuite",
        "-t",
        tmp_path / "tpl",
    )
    assert rc == 2 and "template" in err

    rc, out, err = run(capsys, "tag", "-m", model, data["columns"])
    assert rc == 2 and "no feature templates" in err and "--format crfsuite" in err

    rc, out, err = run(
        capsys, "tag", "-m", model, "--format", "crfsuite", "--no-labels", "--eval", data["test"]
    )
    assert rc == 2 and "--no-labels" in err


def test_dev_file_and_info(data, model, tmp_path, capsys):
    m = tmp_path / "dev.crfkit"
    rc, out, err = run(
        capsys,
        "train",
        data["train"],
        "-m",
        m,
        "--format",
        "crfsuite",
        "--dev",
        data["test"],
        "--max-iterations",
        "3",
        "--threads",
        "1",
    )
    assert rc == 0, err
    assert "dev F1" in out
    rc, out, err = run(capsys, "info", "-m", model)
    assert rc == 0 and "CRFsuite attribute file" in out and "--format crfsuite" in out


def test_attribute_file_round_trips_through_reader(data):
    seqs = read_crfsuite_list(data["train"], strict=True)
    assert [s.attributes for s in seqs] == [
        [[a if isinstance(a, str) else (a[0], float(a[1])) for a in tok] for tok in xs]
        for xs in data["X"]
    ]
    assert [s.labels for s in seqs] == data["Y"]
