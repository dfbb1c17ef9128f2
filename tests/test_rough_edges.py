"""Rough edges a new user hit (issue 16): each fixed, each tested."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import crfkit
from crfkit import cli
from crfkit.datasets import synthetic
from crfkit.model import CRFModel


from conftest import run_cli as run


@pytest.fixture(scope="module")
def chunker(tmp_path_factory):
    d = tmp_path_factory.mktemp("rough")
    synthetic.write(d / "train.txt", 40, seed=1)
    synthetic.write(d / "test.txt", 8, seed=2)
    m = d / "m.crfkit"
    assert cli.main(["train", str(d / "train.txt"), "-m", str(m), "--max-iterations", "10", "-q"]) == 0
    return {"dir": d, "model": m, "test": d / "test.txt"}


def test_crf_is_in_dir_crfkit():
    names = dir(crfkit)
    assert "CRF" in names and "CRFModel" in names and "__version__" in names


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
    assert cli.main(["train", str(f), "-m", str(m), "-t", str(tpl), "-q", "--max-iterations", "20"]) == 0
    rc, out, err = run(capsys, "tag", "-m", m, f, "--eval")
    assert rc == 0 and "accuracy: 100.00% of 90 tokens" in err and "phrases" not in err
    rc, out, err = run(capsys, "tag", "-m", m, f, "--eval", "--raw")
    assert rc == 0 and "FB1: 100.00" in err


def test_sgd_l1_without_c1_says_it_trains_l2_only(chunker, tmp_path, capsys):
    rc, out, err = run(capsys, "train", chunker["dir"] / "train.txt", "-m", tmp_path / "m.crfkit", "-a", "sgd-l1",
                       "--max-iterations", "1")
    assert rc == 0 and "without --c1" in err and "L2" in err
    rc, out, err = run(capsys, "train", chunker["dir"] / "train.txt", "-m", tmp_path / "m.crfkit", "-a", "sgd-l1",
                       "--max-iterations", "1", "--c1", "0.1")
    assert "without --c1" not in err


def test_tag_rows_with_a_template_model(chunker):
    from crfkit.io.columns import read_columns_list
    from crfkit.pipeline import tag_columns
    model = CRFModel.load(chunker["model"])
    sents = read_columns_list(str(chunker["test"]), has_labels=True)
    rows = [s.columns for s in sents]
    assert model.tag_rows(rows) == tag_columns(model, str(chunker["test"])).labels
    # a token may be given as one whitespace-separated string
    assert model.tag_rows([[" ".join(tok) for tok in rows[0]]]) == model.tag_rows(rows[:1])
    assert all(s[0] != "I-NP" for s in model.tag_rows(rows, constraints="bio"))
    from crfkit.errors import DataError
    with pytest.raises(DataError, match="observation columns"):
        model.tag_rows([[["a", "b", "c"]]])


def test_utf16_input_names_the_bom_and_encoding_reads_it(chunker, tmp_path, capsys):
    text = chunker["test"].read_text()
    u16 = tmp_path / "u16.txt"
    u16.write_bytes(text.encode("utf-16"))
    rc, out, err = run(capsys, "tag", "-m", chunker["model"], u16)
    assert rc == 2 and "UTF-16 little-endian byte-order mark" in err and "--encoding utf-16" in err
    rc, out16, err = run(capsys, "tag", "-m", chunker["model"], u16, "--encoding", "utf-16")
    assert rc == 0, err
    rc, out8, _ = run(capsys, "tag", "-m", chunker["model"], chunker["test"])
    assert out16 == out8
    tr16 = tmp_path / "train16.txt"
    tr16.write_bytes((chunker["dir"] / "train.txt").read_text().encode("utf-16"))
    rc, _, err = run(capsys, "train", tr16, "-m", tmp_path / "m16.crfkit", "--encoding", "utf-16", "-q",
                     "--max-iterations", "2")
    assert rc == 0, err
    rc, _, err = run(capsys, "tag", "-m", chunker["model"], u16, "--encoding", "nope")
    assert rc == 2 and "unknown encoding" in err


def test_interrupt_message_is_not_an_error(chunker, tmp_path, capsys, monkeypatch):
    import crfkit.pipeline as pl
    real = pl.train_columns

    def interrupted(*a, **kw):
        res = real(*a, **{**kw, "max_iterations": 2})
        res.status = "interrupted"
        return res
    monkeypatch.setattr(pl, "train_columns", interrupted)
    rc, out, err = run(capsys, "train", chunker["dir"] / "train.txt", "-m", tmp_path / "m.crfkit", "-q")
    assert rc == 130
    assert "error" not in err and "was saved to" in err and "interrupted" in err
    assert CRFModel.load(tmp_path / "m.crfkit").n_active > 0


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_chunker_installs_the_core_only_and_make_test_the_test_extra(tmp_path):
    """`make chunker` (the main job) installs crfkit's core dependencies only; `make test` adds the test extra."""
    root = Path(__file__).resolve().parents[1]
    venv = tmp_path / "venv"      # not there: make prints every step it would take to build it

    def plan(target: str) -> str:
        return subprocess.run(["make", "-n", target, f"VENV={venv}"], cwd=root, capture_output=True, text=True,
                              check=True).stdout

    chunker = plan("chunker")
    assert "install -e ." in chunker and "[test]" not in chunker and "[bench]" not in chunker
    assert "crfkit demo" in chunker
    test = plan("test")
    assert "install -e ." in test and "install -e '.[test]'" in test and "pytest" in test
    assert test.index("install -e .\n") < test.index("[test]")
