"""The front of crfkit.interop (detect, read_model, write_model, load_any) and where crfkit opens a
peer's model: `crfkit import/export`, `crfkit info/tag -m`, `crfkit train --init-model`,
`crfkit.CRF(model_filename=...)`."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from conftest import run_cli as run
from crfkit import interop
from crfkit.errors import CrfkitError, ModelError
from crfkit.io.crfsuite import write_crfsuite
from crfkit.model import CRFModel

pycrfsuite = pytest.importorskip("pycrfsuite")


def _data(seed: int, n: int = 40):
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(12)]
    X, Y = [], []
    for _ in range(n):
        T = int(rng.integers(2, 8))
        ws = [words[int(rng.integers(len(words)))] for _ in range(T)]
        X.append([[f"w={w}", f"suf={w[-1]}", ("len", len(w) / 3.0)] for w in ws])
        Y.append(
            ["B" if int(w[1:]) % 3 == 0 else ("I" if int(w[1:]) % 3 == 1 else "O") for w in ws]
        )
    return X, Y


def _pydicts(x):
    out = []
    for tok in x:
        d = {}
        for a in tok:
            name, v = (a, 1.0) if isinstance(a, str) else a
            d[name] = v
        out.append(d)
    return pycrfsuite.ItemSequence(out)


@pytest.fixture(scope="module")
def peer(tmp_path_factory):
    """A CRFsuite model trained by python-crfsuite, its training data, and a crfkit model file."""
    d = tmp_path_factory.mktemp("front")
    X, Y = _data(1)
    tr = pycrfsuite.Trainer(verbose=False)
    for x, y in zip(X, Y):
        tr.append(_pydicts(x), y)
    tr.set_params({"c2": 0.1, "max_iterations": 40})
    path = d / "peer.crfsuite"
    tr.train(str(path))
    from crfkit.train import train

    own = d / "own.crfkit"
    train(X, Y, max_iterations=15).model.save(own)
    return {"dir": d, "crfsuite": path, "crfkit": own, "X": X, "Y": Y}


# ----------------------------------------------------------------------------- the front
def test_detect(peer, tmp_path):
    assert interop.detect(peer["crfsuite"]) == "crfsuite"
    assert interop.detect(peer["crfkit"]) is None
    junk = tmp_path / "junk"
    junk.write_bytes(b"\x00" * 100)
    assert interop.detect(junk) is None
    with pytest.raises(ModelError, match="nope: cannot read"):
        interop.detect(tmp_path / "nope")


def test_read_model_detects_and_refuses(peer, tmp_path):
    m = interop.read_model(peer["crfsuite"])
    assert sorted(m.labels) == ["B", "I", "O"]
    assert interop.read_crfsuite(peer["crfsuite"]).state_features() == m.state_features()
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"nothing to see here" * 5)
    with pytest.raises(ModelError, match=r"junk\.bin: not a CRFsuite, CRF\+\+ or Wapiti model"):
        interop.read_model(junk)
    with pytest.raises(ModelError, match="not a CRFsuite model file"):
        interop.read_model(junk, "crfsuite")


def test_write_model_and_unknown_format(peer, tmp_path):
    m = CRFModel.load(peer["crfkit"])
    interop.write_model(m, tmp_path / "x.crfsuite", "crfsuite")
    assert interop.detect(tmp_path / "x.crfsuite") == "crfsuite"
    with pytest.raises(CrfkitError, match="unknown model format 'svm'"):
        interop.write_model(m, tmp_path / "y", "svm")


def test_a_missing_format_module_is_a_clear_error(peer, monkeypatch):
    monkeypatch.setitem(sys.modules, "crfkit.interop.wapiti", None)
    with pytest.raises(CrfkitError, match="wapiti model format is not available"):
        interop.read_wapiti(peer["crfsuite"])
    # detection skips it
    assert interop.detect(peer["crfsuite"]) == "crfsuite"


def test_load_any(peer, tmp_path):
    a = interop.load_any(peer["crfkit"])
    assert a.state_features() == CRFModel.load(peer["crfkit"]).state_features()
    b = interop.load_any(peer["crfsuite"])
    assert b.meta["imported_from"] == "crfsuite"
    junk = tmp_path / "junk.model"
    junk.write_text("B\tw=1\n", encoding="utf-8")
    with pytest.raises(
        ModelError,
        match=r"junk\.model: not a crfkit model file \(bad magic bytes\), nor a CRFsuite",
    ):
        interop.load_any(junk)
    bad = tmp_path / "bad.crfkit"
    bad.write_bytes(peer["crfkit"].read_bytes()[:-10])
    with pytest.raises(ModelError, match="bad.crfkit"):
        interop.load_any(bad)


# --------------------------------------------------------------------------------- the CLI
def test_cli_import_then_tag_equals_python_crfsuite(peer, tmp_path, capsys):
    out = tmp_path / "imported.crfkit"
    rc, _, err = run(capsys, "import", "crfsuite", peer["crfsuite"], "-m", out)
    assert rc == 0, err
    assert "imported crfsuite model" in err
    X, _ = _data(2, 15)
    test = tmp_path / "test.txt"
    write_crfsuite(X, test, dummy_label="O")
    tagger = pycrfsuite.Tagger()
    tagger.open(str(peer["crfsuite"]))
    want = [tagger.tag(_pydicts(x)) for x in X]
    for model in (out, peer["crfsuite"]):  # the imported model, and the peer's file directly
        rc, got, err = run(capsys, "tag", "-m", model, "--format", "crfsuite", test)
        assert rc == 0, err
        sents = [s.split("\n") for s in got.strip("\n").split("\n\n")]
        assert sents == want


def test_cli_export_loads_in_python_crfsuite(peer, tmp_path, capsys):
    out = tmp_path / "exported.crfsuite"
    rc, _, err = run(capsys, "export", "crfsuite", "-m", peer["crfkit"], "-o", out)
    assert rc == 0, err
    model = CRFModel.load(peer["crfkit"])
    tagger = pycrfsuite.Tagger()
    tagger.open(str(out))
    X, _ = _data(3, 20)
    assert [tagger.tag(_pydicts(x)) for x in X] == model.tag(X)


def test_cli_export_refusals(peer, tmp_path, capsys):
    rc, _, err = run(
        capsys, "export", "crfsuite", "-m", peer["crfkit"], "-o", tmp_path / "x", "--text"
    )
    assert rc == 2 and "--text is for the crfpp format" in err
    rc, _, err = run(
        capsys, "export", "crfpp", "-m", peer["crfkit"], "-o", tmp_path / "x", "--drop-templates"
    )
    assert rc == 2 and "--drop-templates is for the crfsuite format" in err
    # a model with templates: refused, with the way out named
    m = CRFModel.load(peer["crfkit"])
    m.meta["templates"] = "U00:%x[0,0]\n"
    m.meta["columns"] = 1
    p = tmp_path / "tpl.crfkit"
    m.save(p)
    rc, _, err = run(capsys, "export", "crfsuite", "-m", p, "-o", tmp_path / "t.crfsuite")
    assert rc == 2 and "feature templates" in err and "--drop-templates" in err
    assert not (tmp_path / "t.crfsuite").exists()
    rc, _, err = run(
        capsys, "export", "crfsuite", "-m", p, "-o", tmp_path / "t.crfsuite", "--drop-templates"
    )
    assert rc == 0, err
    assert (tmp_path / "t.crfsuite").exists()


def test_cli_import_of_a_bad_file(tmp_path, capsys):
    bad = tmp_path / "bad.crfsuite"
    bad.write_bytes(b"lCRF" + b"\xff" * 60)
    rc, _, err = run(capsys, "import", "crfsuite", bad, "-m", tmp_path / "o.crfkit")
    assert rc == 2
    assert err.startswith("crfkit: error: ") and "bad.crfsuite" in err and "Traceback" not in err


def test_cli_info_of_a_peer_model(peer, capsys):
    rc, out, err = run(capsys, "info", "-m", peer["crfsuite"])
    assert rc == 0, err
    assert "labels (3)" in out
    assert "a crfsuite model: attributes" in out


def test_serving_opens_a_peer_model(peer):
    from crfkit.serving import TagService

    with open(os.devnull, "w") as log:
        svc = TagService(str(peer["crfsuite"]), log=log)
    assert sorted(svc.model.labels) == ["B", "I", "O"]


def test_cli_init_model_takes_a_crfsuite_model(peer, tmp_path, capsys):
    train = tmp_path / "train.txt"
    write_crfsuite(peer["X"], train, peer["Y"])
    out = tmp_path / "warm.crfkit"
    rc, _, err = run(
        capsys,
        "train",
        train,
        "--format",
        "crfsuite",
        "-m",
        out,
        "--init-model",
        peer["crfsuite"],
        "--max-iterations",
        "1",
        "--quiet",
    )
    assert rc == 0, err
    # one iteration from the peer's weights stays near them; from zero it could not
    warm = CRFModel.load(out).state_features()
    init = interop.read_crfsuite(peer["crfsuite"]).state_features()
    common = [k for k in init if k in warm]
    assert common
    assert np.corrcoef([init[k] for k in common], [warm[k] for k in common])[0, 1] > 0.9


# ------------------------------------------------------------------------------ estimator
def test_estimator_model_filename_reads_a_crfsuite_file(peer):
    from crfkit import CRF

    X, _ = _data(4, 20)
    tagger = pycrfsuite.Tagger()
    tagger.open(str(peer["crfsuite"]))
    crf = CRF(model_filename=str(peer["crfsuite"]))
    assert crf.predict(X) == [tagger.tag(_pydicts(x)) for x in X]
    m = crf.predict_marginals(X[:3])
    for x, mx in zip(X[:3], m):
        tagger.set(_pydicts(x))
        for t, d in enumerate(mx):
            for lab, p in d.items():
                assert abs(p - tagger.marginal(lab, t)) < 1e-6
