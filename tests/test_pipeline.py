"""Column files -> attributes -> model -> tagged columns."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

from crfkit.datasets import synthetic
from crfkit.errors import CrfkitError, DataError
from crfkit.features.templates import Templates, default_chunking_templates
from crfkit.model import CRFModel
from crfkit.pipeline import load_columns, tag_columns, tagger_from_model, train_columns

SMALL = """\
He PRP B-NP
reckons VBZ B-VP
the DT B-NP
deficit NN I-NP
. . O

Rockwell NNP B-NP
said VBD B-VP
. . O
"""


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("pipe")
    synthetic.write(d / "train.txt", 60, seed=1)
    synthetic.write(d / "test.txt", 20, seed=2)
    return {"dir": d, "train": d / "train.txt", "test": d / "test.txt"}


@pytest.fixture(scope="module")
def trained(files):
    return train_columns(files["train"], default_chunking_templates(), max_iterations=25)


def test_load_columns(tmp_path: Path):
    p = tmp_path / "small.txt"
    p.write_text(SMALL)
    t = Templates.parse("U00:%x[0,0]\nU01:%x[-1,1]/%x[0,1]\nB\n")
    X, Y, sents = load_columns(p, t)
    assert Y == [["B-NP", "B-VP", "B-NP", "I-NP", "O"], ["B-NP", "B-VP", "O"]]
    assert X[0][0] == ["U00:He", "U01:_B-1/PRP"]
    assert X[1][2] == ["U00:.", "U01:VBD/."]
    assert [s.line for s in sents] == [1, 7]
    X2, Y2, _ = load_columns(p, t, pad=False)
    assert X2[0][0] == ["U00:He"]
    # without labels: the chunk column is an observation column
    X3, Y3, s3 = load_columns(p, Templates.parse("U:%x[0,2]\n"), has_labels=False)
    assert Y3 is None and X3[0][1] == ["U:B-VP"] and s3[0].labels is None


def test_load_columns_template_beyond_columns_names_data_file(tmp_path: Path):
    p = tmp_path / "small.txt"
    p.write_text("\n" + SMALL)
    t = Templates.parse("U00:%x[0,0]\nU01:%x[0,5]\n")
    with pytest.raises(DataError) as e:
        load_columns(p, t)
    msg = str(e.value)
    assert f"{p}:2:" in msg and "column 5" in msg


def test_load_columns_from_stream():
    X, Y, _ = load_columns(io.StringIO(SMALL), Templates.parse("U:%x[0,0]\n"))
    assert len(X) == 2 and Y[1] == ["B-NP", "B-VP", "O"]


def test_train_columns_meta(trained, files):
    meta = trained.model.meta
    assert meta["templates"] == default_chunking_templates().source
    assert meta["template_pad"] is True
    assert meta["columns"] == 2
    assert trained.iterations > 0
    t, pad = tagger_from_model(trained.model)
    assert pad is True and len(t.unigram) == len(default_chunking_templates().unigram)


def test_tag_columns_detects_labels(trained, files):
    out = tag_columns(trained.model, files["test"])
    assert out.has_labels
    gold = [s.labels for s in synthetic.generate(20, seed=2)]
    assert out.gold == gold
    assert [len(x) for x in out.labels] == [len(g) for g in gold]
    assert out.marginals is None and out.probabilities is None
    # the same file without its label column
    text = files["test"].read_text()
    stripped = "\n".join(" ".join(line.split()[:2]) for line in text.splitlines()) + "\n"
    out2 = tag_columns(trained.model, io.StringIO(stripped))
    assert not out2.has_labels and out2.gold is None
    assert out2.labels == out.labels
    # explicit flags override detection
    with pytest.raises(DataError, match="observation columns"):
        tag_columns(trained.model, files["test"], has_labels=False)


def test_tag_columns_wrong_column_count(trained, tmp_path: Path):
    p = tmp_path / "four.txt"
    p.write_text("a b c d\n")
    with pytest.raises(DataError) as e:
        tag_columns(trained.model, p)
    assert f"{p}:1:" in str(e.value)


def test_tag_columns_marginals_and_probabilities(trained, files):
    out = tag_columns(trained.model, files["test"], marginals=True)
    plain = tag_columns(trained.model, files["test"])
    assert out.labels == plain.labels
    assert len(out.probabilities) == len(out.labels)
    X, _, _ = load_columns(files["test"], default_chunking_templates())
    seq_p = trained.model.sequence_probability(X, out.labels)
    np.testing.assert_allclose(out.probabilities, seq_p, rtol=1e-9)
    for p, margs in zip(out.probabilities, out.marginals):
        assert all(0.0 < m <= 1.0 + 1e-12 for m in margs)
        # p(path) can be no larger than the marginal of any of its labels
        assert p <= min(margs) + 1e-9


def test_saved_model_tags_alone(trained, files, tmp_path: Path):
    path = tmp_path / "m.crfkit"
    trained.model.save(path)
    loaded = CRFModel.load(path)
    assert loaded.meta["templates"] == trained.model.meta["templates"]
    assert (
        tag_columns(loaded, files["test"]).labels
        == tag_columns(trained.model, files["test"]).labels
    )


def test_model_without_templates_cannot_tag_columns(files):
    from crfkit.train import train

    res = train([[["a"], ["b"]]], [["X", "Y"]], max_iterations=2)
    with pytest.raises(CrfkitError, match="no feature templates"):
        tagger_from_model(res.model)
    with pytest.raises(CrfkitError):
        tag_columns(res.model, files["test"])


def test_no_padding_is_remembered(files):
    res = train_columns(
        files["train"],
        Templates.parse("U00:%x[-1,0]\nU01:%x[0,1]\nB\n"),
        pad=False,
        max_iterations=5,
    )
    assert res.model.meta["template_pad"] is False
    assert not any(a.startswith("U00:_B") for a in res.model.space.attributes)
    assert tagger_from_model(res.model)[1] is False
    tag_columns(res.model, files["test"])


def test_templates_without_B_train_no_transitions(files):
    res = train_columns(
        files["train"], Templates.parse("U00:%x[0,0]\nU01:%x[0,1]\n"), max_iterations=5
    )
    assert res.model.space.n_trans == 0
    assert res.model.meta["transitions"] == "none"
    out = tag_columns(res.model, files["test"])
    assert out.has_labels


def test_bigram_observation_templates_train_and_tag(files):
    # (they were refused before bigram-observation features existed; tests/test_bigram.py covers
    # them)
    res = train_columns(
        files["train"], Templates.parse("U00:%x[0,0]\nB01:%x[0,1]\n"), max_iterations=5
    )
    assert res.model.space.n_bigram > 0
    assert all(a.startswith("B01:") for a in res.model.space.battributes)
    out = tag_columns(res.model, files["test"])
    assert out.has_labels and len(out.labels) == len(out.sentences)
    # no plain B line: no plain transition features (CRF++ and Wapiti build none either)
    assert res.model.space.n_trans == 0 and res.model.meta["transitions"] == "none"
    res = train_columns(
        files["train"], Templates.parse("U00:%x[0,0]\nB01:%x[0,1]\nB\n"), max_iterations=5
    )
    assert res.model.space.n_trans > 0 and res.model.space.n_bigram > 0


def test_dev_file(files):
    res = train_columns(
        files["train"], default_chunking_templates(), dev_path=files["test"], max_iterations=3
    )
    assert "dev_f1" in res.history[-1]


def test_dev_file_column_mismatch(files, tmp_path: Path):
    p = tmp_path / "dev.txt"
    p.write_text("a b c d\n")
    with pytest.raises(DataError, match="dev data has 3 observation columns"):
        train_columns(files["train"], default_chunking_templates(), dev_path=p, max_iterations=1)
