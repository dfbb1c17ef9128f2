"""The synthetic chunking corpus and the data-directory lookup."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from crfkit import datasets
from crfkit.datasets import synthetic
from crfkit.io.columns import read_columns_list
from crfkit.metrics import chunks


def test_generate_is_deterministic_given_the_seed():
    a = synthetic.generate(40, seed=7)
    b = synthetic.generate(40, seed=7)
    assert [(s.columns, s.labels, s.line) for s in a] == [(s.columns, s.labels, s.line) for s in b]
    c = synthetic.generate(40, seed=8)
    assert [s.columns for s in a] != [s.columns for s in c]


def test_prefix_of_a_longer_draw_is_the_shorter_draw():
    a = synthetic.generate(10, seed=3)
    b = synthetic.generate(30, seed=3)
    assert [s.columns for s in a] == [s.columns for s in b[:10]]


def test_write_is_byte_identical_and_reads_back(tmp_path: Path):
    p1, p2 = tmp_path / "a.txt.gz", tmp_path / "b.txt.gz"
    n1 = synthetic.write(p1, 25, seed=1)
    n2 = synthetic.write(p2, 25, seed=1)
    assert n1 == n2 > 0
    assert p1.read_bytes() == p2.read_bytes()  # no timestamp in the gzip header
    gen = synthetic.generate(25, seed=1)
    back = read_columns_list(p1)
    assert [s.columns for s in back] == [s.columns for s in gen]
    assert [s.labels for s in back] == [s.labels for s in gen]
    assert [s.line for s in back] == [s.line for s in gen]
    assert sum(len(s) for s in back) == n1
    # plain text, space-separated word POS chunk
    p3 = tmp_path / "c.txt"
    synthetic.write(p3, 25, seed=1)
    assert p3.read_text(encoding="utf-8") == gzip.decompress(p1.read_bytes()).decode("utf-8")
    first = p3.read_text(encoding="utf-8").splitlines()[0].split(" ")
    assert len(first) == 3


def test_corpus_shape():
    sents = synthetic.generate(300, seed=2)
    labels = {lab for s in sents for lab in s.labels}
    allowed = {f"{p}-{t}" for t in synthetic.CHUNK_TYPES for p in "BI"} | {"O"}
    assert labels <= allowed
    assert {"B-NP", "I-NP", "B-VP", "B-PP", "O"} <= labels
    assert all(len(tok) == 2 for s in sents for tok in s.columns)
    types = {c[0] for s in sents for c in chunks(s.labels)}
    assert {"NP", "VP", "PP", "SBAR", "ADJP", "ADVP"} <= types
    # the POS column is correlated with the chunk labels
    pp = [lab for s in sents for tok, lab in zip(s.columns, s.labels) if tok[1] == "IN"]
    assert sum(lab in ("B-PP", "B-SBAR") for lab in pp) / len(pp) > 0.85
    # train and test come from one language: most test words were seen in training
    train_words = {tok[0].lower() for s in sents for tok in s.columns}
    test = synthetic.generate(100, seed=99)
    toks = [tok[0].lower() for s in test for tok in s.columns]
    seen = sum(w in train_words for w in toks) / len(toks)
    assert 0.6 < seen < 1.0  # a tail of unseen words


def test_negative_size_rejected():
    with pytest.raises(ValueError):
        synthetic.generate(-1)


def test_learnable_but_not_trivially(tmp_path: Path):
    from crfkit.features.templates import default_chunking_templates
    from crfkit.metrics import conlleval
    from crfkit.pipeline import tag_columns, train_columns

    synthetic.write(tmp_path / "train.txt", 150, seed=1)
    synthetic.write(tmp_path / "test.txt", 60, seed=2)
    res = train_columns(tmp_path / "train.txt", default_chunking_templates(), max_iterations=60)
    out = tag_columns(res.model, tmp_path / "test.txt")
    f1 = conlleval(out.gold, out.labels).f1
    assert 70.0 < f1 < 99.5


def test_data_dir_env_var(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("CRFKIT_DATA", str(tmp_path))
    assert datasets.data_dir() == tmp_path
    assert datasets.conll2000_paths() is None
    d = tmp_path / "conll2000"
    d.mkdir()
    (d / "train.txt.gz").write_bytes(b"")
    assert datasets.conll2000_paths() is None  # test file missing
    (d / "test.txt.gz").write_bytes(b"")
    assert datasets.conll2000_paths() == (d / "train.txt.gz", d / "test.txt.gz")


def test_data_dir_default_is_next_to_the_repository(monkeypatch, tmp_path: Path):
    monkeypatch.delenv("CRFKIT_DATA", raising=False)
    monkeypatch.chdir(tmp_path)  # ../shared/data does not exist from here
    repo = Path(datasets.__file__).resolve().parents[3]
    expected = repo / ".." / "shared" / "data"
    got = datasets.data_dir()
    if expected.is_dir():
        assert got.resolve() == expected.resolve()
    else:
        assert got.resolve() == (tmp_path / ".." / "shared" / "data").resolve()
