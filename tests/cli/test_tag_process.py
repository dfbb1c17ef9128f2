"""``crfkit tag`` as a one-shot process: plain Viterbi in numpy (no numba imported), the output
written a batch at a time, byte for byte what :func:`crfkit.io.columns.write_columns` writes."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from crfkit import cli
from crfkit.datasets import synthetic
from crfkit.io.columns import write_columns
from crfkit.model import CRFModel
from crfkit.pipeline import tag_columns
from crfkit.tagging.run import _plain_labels

SRC = str(Path(__file__).resolve().parents[2] / "src")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("tagproc")
    synthetic.write(d / "train.txt", 60, seed=3)
    synthetic.write(d / "test.txt", 40, seed=4)
    model = d / "model.crfkit"
    assert (
        cli.main(["train", str(d / "train.txt"), "-m", str(model), "--max-iterations", "15", "-q"])
        == 0
    )
    return {"dir": d, "test": d / "test.txt", "model": model}


def _reference(model: Path, path: Path, **kw) -> str:
    """What crfkit tag wrote before: tag_columns (the kernels' path) then write_columns."""
    res = tag_columns(CRFModel.load(model), path, **kw)
    buf = io.StringIO()
    write_columns(res.sentences, buf, extra=res.labels, sep="\t")
    return buf.getvalue()


@pytest.mark.parametrize("labels", [True, False])
def test_tag_process_imports_no_numba_and_writes_the_same_bytes(
    data, tmp_path, labels, monkeypatch
):
    src = data["test"]
    if not labels:  # the observation columns only
        src = tmp_path / "nolabels.txt"
        src.write_text(
            "\n".join(" ".join(x.split()[:-1]) for x in data["test"].read_text().splitlines())
            + "\n"
        )
    out = tmp_path / "out.txt"
    code = (
        "import sys, json; from crfkit.cli import main; rc = main(sys.argv[1:]); "
        "print(json.dumps([rc, sorted(k for k in sys.modules if k.split('.')[0] == 'numba')]))"
    )
    # --batch-tokens 50: many batches, each written as one block
    argv = ["tag", "-m", str(data["model"]), str(src), "-o", str(out), "--batch-tokens", "50"]
    r = subprocess.run(
        [sys.executable, "-c", code, *argv],
        capture_output=True,
        text=True,
        check=True,
        env=dict(os.environ, PYTHONPATH=SRC),
    )
    rc, numba = json.loads(r.stdout.strip().splitlines()[-1])
    assert rc == 0 and numba == [], r.stderr
    monkeypatch.setenv("CRFKIT_NUMPY_MAX_TOKENS", "0")  # the reference through the kernels
    assert out.read_text() == _reference(data["model"], src)


def test_labels_that_would_not_read_back_take_the_checked_writer(data):
    m = CRFModel.load(data["model"])
    assert _plain_labels(m)
    m.space.labels = list(m.space.labels[:-1]) + ["a\tb"]
    assert not _plain_labels(m)


def test_adaptive_engine_hands_long_files_to_the_kernels(data, monkeypatch):
    """``crfkit tag`` decodes the first NUMPY_FIRST_TOKENS tokens in numpy, then with the kernels
    (a long file pays for loading them); the labels are the same either way."""
    import crfkit.pipeline as pipeline

    engines = []
    real_tag = CRFModel.tag

    def spy(self, X, *a, engine="auto", **kw):
        engines.append(engine)
        return real_tag(self, X, *a, engine=engine, **kw)

    monkeypatch.setattr(CRFModel, "tag", spy)
    monkeypatch.setattr(pipeline, "NUMPY_FIRST_TOKENS", 200)
    model = CRFModel.load(data["model"])
    tagged = list(
        pipeline.tag_column_batches(model, data["test"], batch_tokens=150, engine="adaptive")
    )
    assert engines[:2] == ["numpy", "numpy"] and set(engines[2:]) == {"auto"}, engines
    labels = [y for t in tagged for y in t.labels]
    assert labels == _reference_labels(model, data["test"])


def _reference_labels(model, path) -> list:
    return list(tag_columns(model, path).labels)
