"""Size bounds (issue 45, part 3): the labels of a training set and of a model file (L x L held
against what the file holds), a model's stored templates and metadata, sentence length in the
readers, and n-best list sizes."""

from __future__ import annotations

import hashlib
import io
import json
import struct
import warnings
import zlib

import numpy as np
import pytest

from crfkit import cli
from crfkit.decode import MAX_NBEST, NBEST_MAX_BYTES
from crfkit.errors import CrfkitError, DataError, DataWarning, ModelError
from crfkit.features.encode import build, check_label_count
from crfkit.features.space import MAX_LABELS, FeatureSpace
from crfkit.features.templates import MAX_TEMPLATES
from crfkit.io import columns, crfsuite
from crfkit.model import CRFModel
from crfkit.modelfile import EXPANSION_ALLOWANCE, LABEL_PAIR_BYTES, MAGIC, load_model, save_model
from crfkit.tagging import decoding


def _space(L: int) -> FeatureSpace:
    return FeatureSpace(
        labels=[f"L{i}" for i in range(L)],
        attributes=["U:x"],
        attr_ptr=np.array([0, 1]),
        feat_label=np.array([0], np.int32),
        trans_index=-np.ones((L, L), np.int32),
    )


def _tiny_model(tmp_path, meta: dict, L: int = 2):
    p = tmp_path / "m.crfkit"
    save_model(p, _space(L), np.array([1.0]), meta)
    return p


def _repack(path, name: str, arr: np.ndarray) -> None:
    """Rewrite the model file ``path`` with its array ``name`` replaced by ``arr`` (any dtype the
    loader takes), offsets and checksums made good: a valid file crfkit would not write."""
    data = path.read_bytes()
    (hl,) = struct.unpack("<I", data[len(MAGIC) : len(MAGIC) + 4])
    header = json.loads(data[len(MAGIC) + 4 : len(MAGIC) + 4 + hl])
    body = data[len(MAGIC) + 4 + hl : -32]
    parts, off = [], 0
    for k, spec in sorted(header["arrays"].items(), key=lambda kv: kv[1]["offset"]):
        comp = body[spec["offset"] : spec["offset"] + spec["nbytes"]]
        if k == name:
            comp = zlib.compress(arr.tobytes(), 9)
            spec["dtype"] = arr.dtype.str
        spec["offset"], spec["nbytes"] = off, len(comp)
        off += len(comp)
        parts.append(comp)
    body = b"".join(parts)
    header["payload_sha256"] = hashlib.sha256(body).hexdigest()
    hb = json.dumps(header, sort_keys=True).encode()
    head = MAGIC + struct.pack("<I", len(hb)) + hb
    path.write_bytes(head + body + hashlib.sha256(head + body).digest())


# ------------------------------------------------------------------------------ labels
def test_many_labels_in_a_small_model_file_are_refused_before_allocating(tmp_path):
    """16,383 labels in a 291 KB file (the transition index stored as int8, all -1) reached
    3.37 GB and a MemoryError: the L x L tables now count against the loader's ceiling."""
    L = 3000
    p = _tiny_model(tmp_path, {}, L)
    _repack(p, "trans_index", np.full((L, L), -1, np.int8))
    size = p.stat().st_size
    assert size < 100_000 and LABEL_PAIR_BYTES * L * L > EXPANSION_ALLOWANCE + 32 * size
    with pytest.raises(ModelError, match=r"3000 labels: their L x L tables would take"):
        load_model(p)


def test_labels_within_the_ceiling_load(tmp_path):
    L = int((EXPANSION_ALLOWANCE / LABEL_PAIR_BYTES) ** 0.5) - 1
    s, w, m = load_model(_tiny_model(tmp_path, {}, L))
    assert s.n_labels == L


def test_too_many_training_labels_refused_with_the_memory_needed():
    with pytest.raises(DataError, match=r"46341 distinct labels: at most 46340 .* GiB") as ei:
        check_label_count(MAX_LABELS + 1, 10, "train.txt")
    assert str(ei.value).startswith("train.txt:")
    n = MAX_LABELS + 1
    X = [[["a"]] for _ in range(n)]
    Y = [[f"y{i}"] for i in range(n)]
    with pytest.raises(DataError, match="distinct labels"):
        build(X, Y, name="t.txt")


def test_many_labels_warn_with_an_estimate_before_training():
    with pytest.warns(
        DataWarning, match=r"3000 distinct labels: .* 2.7e\+11 label-pair operations"
    ):
        check_label_count(3000, 30000, "t.txt")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_label_count(22, 211727, "conll")  # CoNLL-2000 chunking: no warning


def test_cli_train_warns_about_many_labels(tmp_path, capsys):
    p = tmp_path / "l.txt"
    p.write_text(
        "".join(f"w{i % 50} NN L{i % 1500}\n" + ("\n" if i % 30 == 29 else "") for i in range(4500))
    )
    t = tmp_path / "t.tpl"
    t.write_text("U0:%x[0,0]\n")
    rc = cli.main(
        ["train", str(p), "-t", str(t), "-m", str(tmp_path / "m"), "--max-iterations", "1", "-q"]
    )
    err = capsys.readouterr().err
    assert rc == 0 and "crfkit: warning:" in err and "1500 distinct labels" in err


# ------------------------------------------------------------------------------ metadata
@pytest.mark.parametrize("bad", ["x", [1], -1.0, float("inf"), True])
def test_train_weight_of_a_wrong_type_is_refused(tmp_path, bad, capsys):
    p = _tiny_model(tmp_path, {"train_weight": bad, "l2": 1.0, "n_train": 3})
    with pytest.raises(ModelError, match="metadata field 'train_weight'"):
        load_model(p)
    assert cli.main(["info", "-m", str(p)]) == 2
    err = capsys.readouterr().err
    assert "crfkit: error:" in err and "train_weight" in err and "Traceback" not in err


def test_train_weight_number_is_accepted(tmp_path):
    load_model(_tiny_model(tmp_path, {"train_weight": 2.5}))


@pytest.mark.parametrize(
    "templates, what",
    [
        ('U:%t[0,0,"a{99999999999}"]\n', "over the limit of 1000"),
        ('U:%t[0,0,"' + "(" * 5000 + "a" + ")" * 5000 + '"]\n', "the limit is 1024"),
        ('U:%t[0,0,"(?=a)"]\n', "no lookaround"),
        ("".join(f"U{i}:%x[0,0]\n" for i in range(MAX_TEMPLATES + 1)), "MAX_TEMPLATES"),
        ("U:" + "%x[0,0]" * 50000 + "\n", "macros"),
    ],
)
def test_stored_templates_over_the_limits_are_refused(tmp_path, templates, what, capsys):
    p = _tiny_model(tmp_path, {"templates": templates})
    with pytest.raises(ModelError, match="stored templates") as ei:
        load_model(p)
    assert what in str(ei.value)
    assert cli.main(["info", "-m", str(p)]) == 2
    assert "Traceback" not in capsys.readouterr().err


# ------------------------------------------------------------------------------ sentences
def test_column_sentence_length_is_bounded(monkeypatch):
    monkeypatch.setattr(columns, "MAX_SENTENCE_TOKENS", 3)
    ok = "a B\n" * 3 + "\n" + "a B\n" * 3
    assert len(columns.read_columns_list(io.StringIO(ok), name="x")) == 2
    bad = "a B\n\n" + "a B\n" * 4
    with pytest.raises(DataError, match=r"^x:3: the sentence starting here has more than 3 tokens"):
        columns.read_columns_list(io.StringIO(bad), name="x")


def test_crfsuite_sequence_length_is_bounded(monkeypatch):
    monkeypatch.setattr(crfsuite, "MAX_SENTENCE_TOKENS", 2)
    ok = "A\tx\nB\ty\n\n"
    assert len(crfsuite.read_crfsuite_list(io.StringIO(ok), name="x")) == 1
    with pytest.raises(DataError, match=r"^x:2: the sequence starting here has more than 2"):
        crfsuite.read_crfsuite_list(io.StringIO("\n" + ok.strip() + "\nC\tz\n"), name="x")


def test_sentence_limit_is_documented_constant():
    assert columns.MAX_SENTENCE_TOKENS == crfsuite.MAX_SENTENCE_TOKENS == 1_000_000


# ------------------------------------------------------------------------------ n-best
def _model2() -> CRFModel:
    X = [[["a"], ["b"]], [["b"], ["a"], ["a"]]]
    Y = [["P", "Q"], ["Q", "P", "P"]]
    from crfkit import train

    return train.train(X, Y, max_iterations=5).model


def test_nbest_size_is_bounded(monkeypatch):
    m = _model2()
    X = [[["a"], ["b"]]]
    assert len(m.nbest(X, MAX_NBEST)[0]) == 4  # all 2**2 sequences
    with pytest.raises(CrfkitError, match=f"at most {MAX_NBEST}"):
        m.nbest(X, MAX_NBEST + 1)
    from crfkit import decode

    monkeypatch.setattr(decode, "NBEST_MAX_BYTES", 1000)
    with pytest.raises(CrfkitError, match="n-best lists of 50 sequences over a 2-token sentence"):
        m.nbest(X, 50)
    assert NBEST_MAX_BYTES == 2 << 30


def test_cli_nbest_limit_equals_the_decoders():
    assert decoding.MAX_NBEST == MAX_NBEST
