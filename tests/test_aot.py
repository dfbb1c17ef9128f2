"""The tagging kernels compiled ahead of time (crfkit.kernels.aot, loaded by crfkit._runtime.aot):
built once for this session (:func:`conftest.built_aot_dir`), they export numba's own kernels, tag as
the JIT kernels and the numpy decoder do, keep numba out of a process that only tags, and a module
that is missing, stale, broken or switched off leaves the numpy decoder in charge."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import crfkit
from conftest import built_aot_dir, random_sequences
from crfkit import npdecode
from crfkit._runtime import aot
from crfkit.features.encode import build
from crfkit.kernels import aot as aot_build
from crfkit.kernels.chain_viterbi import tag_codes_seqs
from crfkit.model import CRFModel

SRC = str(Path(crfkit.__file__).resolve().parents[1])
SETTINGS = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@pytest.fixture
def with_aot(monkeypatch):
    """The module of this session's build, loaded in this process."""
    monkeypatch.setenv("CRFKIT_AOT_DIR", built_aot_dir()["dir"])
    monkeypatch.delenv("CRFKIT_NO_AOT", raising=False)
    monkeypatch.delenv("CRFKIT_NO_RUNTIME_HOOKS", raising=False)
    aot.forget()
    mod = aot.load()
    assert mod is not None, aot.status()
    yield mod
    aot.forget()


@pytest.fixture
def without_aot(monkeypatch):
    monkeypatch.setenv("CRFKIT_NO_AOT", "1")
    aot.forget()
    yield
    aot.forget()


def _model(seed, n_labels=4, real=False, n=60, max_len=9):
    rng = np.random.default_rng(seed)
    X, Y = random_sequences(rng, n, n_labels=n_labels, n_attr=12, max_len=max_len, real=real)
    space, _ = build(X, Y)
    return CRFModel(space, rng.normal(size=space.n_features)), rng


# ----------------------------------------------------------------------------- the build
def test_the_build_exports_every_kernel_under_the_current_key():
    b = built_aot_dir()
    p = Path(b["path"])
    assert p.parent == Path(b["dir"]) and p.name.startswith(aot.module_name())
    assert [n for n, _, _ in aot_build.EXPORTS] == list(aot.EXPORTED)
    # of the modules of other keys in the folder, the build left the newest KEEP_OTHERS
    assert b["stale_kept"] == b["stale_newest"] and len(b["stale_kept"]) == aot.KEEP_OTHERS
    assert sorted(x.name for x in Path(b["dir"]).iterdir()) == [p.name]


def test_prune_keeps_the_newest_modules_of_other_keys(tmp_path):
    keep = tmp_path / (aot.PREFIX + "k" + ".so")
    keep.write_bytes(b"this one")
    others = []
    for k in range(5):
        f = tmp_path / f"{aot.PREFIX}{k}.so"
        f.write_bytes(b"x")
        os.utime(f, (1e9 + k, 1e9 + k))
        others.append(f)
    (tmp_path / "unrelated.so").write_bytes(b"x")
    removed = aot.prune(keep, others=2)
    assert sorted(removed) == sorted(others[:3])
    left = sorted(x.name for x in tmp_path.iterdir())
    assert left == sorted([keep.name, others[3].name, others[4].name, "unrelated.so"])
    assert aot.prune(keep, others=0) == [others[4], others[3]] and keep.exists()


def test_status_reports_what_load_found(with_aot):
    s = aot.status()
    assert s["built"] and s["loaded"] and s["enabled"] and s["error"] is None
    assert s["path"] == built_aot_dir()["path"]


def test_the_key_follows_numpy_and_the_kernel_sources(monkeypatch):
    k = aot.key()
    monkeypatch.setitem(aot._STATE, "key", None)
    assert aot.key() == k  # recomputed: the same inputs, the same key
    monkeypatch.setitem(aot._STATE, "key", None)
    monkeypatch.setattr(np, "__version__", np.__version__ + ".post999")
    assert aot.key() != k
    monkeypatch.setattr(np, "__version__", np.__version__[: -len(".post999")])
    monkeypatch.setitem(aot._STATE, "key", None)
    monkeypatch.setattr(aot, "stamp_digest", lambda d: b"another kernel source")
    assert aot.key() != k


def test_the_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("CRFKIT_AOT_DIR", str(tmp_path / "a"))
    assert aot.directory() == tmp_path / "a"
    monkeypatch.delenv("CRFKIT_AOT_DIR")
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "n"))
    assert aot.directory() == tmp_path / "n" / "crfkit-aot"
    monkeypatch.delenv("NUMBA_CACHE_DIR")
    d = aot.directory()
    assert d == aot._KERNELS / "__pycache__" or d.parts[-2:] == ("crfkit", "aot")


# ----------------------------------------------------------------------------- missing, broken, off
def test_no_module_means_the_numpy_decoder(monkeypatch, tmp_path):
    monkeypatch.setenv("CRFKIT_AOT_DIR", str(tmp_path))
    aot.forget()
    try:
        assert aot.load() is None and npdecode.aot_kernels() is None
        assert aot.status() == {
            "path": str(aot.path()),
            "built": False,
            "loaded": False,
            "enabled": True,
            "error": None,
        }
        model, rng = _model(1)
        X, _ = random_sequences(rng, 5, n_labels=4, n_attr=12, max_len=9)
        corpus = model.encode(X)
        assert npdecode.aot_viterbi(model, corpus) is None
        np.testing.assert_array_equal(
            npdecode.decode(model, corpus)["ids"], model.decode(corpus, engine="numpy")["ids"]
        )
    finally:
        aot.forget()


def test_a_broken_module_is_reported_once_and_left_alone(monkeypatch, tmp_path):
    monkeypatch.setenv("CRFKIT_AOT_DIR", str(tmp_path))
    aot.forget()
    try:
        aot.path().write_bytes(b"not a shared object")
        with pytest.warns(RuntimeWarning, match="did not load"):
            assert aot.load() is None
        assert aot.load() is None  # once: no second warning (pytest would fail on none above)
        assert aot.status()["error"].startswith(str(aot.path()))
        model, rng = _model(2)
        X, _ = random_sequences(rng, 5, n_labels=4, n_attr=12, max_len=9)
        assert model.tag(X) == model.tag(X, engine="numpy")
    finally:
        aot.forget()


def test_the_switch_keeps_the_module_out(with_aot, monkeypatch):
    monkeypatch.setenv("CRFKIT_NO_AOT", "1")
    aot.forget()
    assert aot.load() is None and not aot.status()["enabled"]
    monkeypatch.delenv("CRFKIT_NO_AOT")
    monkeypatch.setenv("CRFKIT_NO_RUNTIME_HOOKS", "1")
    aot.forget()
    assert aot.load() is None


# ----------------------------------------------------------------------------- the same labels
@SETTINGS
@given(
    seed=st.integers(0, 2**32 - 1),
    n_labels=st.integers(1, 6),
    real=st.booleans(),
    n_seq=st.integers(1, 12),
)
def test_the_compiled_kernel_equals_numbas(with_aot, seed, n_labels, real, n_seq):
    """tag_codes_seqs compiled ahead of time against the JIT dispatcher of the same function, on
    random codes (unknown ones, -1, among them), values and sequence lengths (empty ones too)."""
    rng = np.random.default_rng(seed)
    model, _ = _model(seed % 1000, n_labels=n_labels, real=real, n=20)
    sp = model.space
    lens = rng.integers(0, 6, size=n_seq)
    seq_ptr = np.zeros(n_seq + 1, np.int64)
    np.cumsum(lens, out=seq_ptr[1:])
    cnt = rng.integers(0, 4, size=int(seq_ptr[-1])).astype(np.int64)
    ent = np.zeros(len(cnt) + 1, np.int64)
    np.cumsum(cnt, out=ent[1:])
    ent_ptr = np.ascontiguousarray(ent[seq_ptr])
    codes = rng.integers(-1, sp.n_attributes, size=int(ent[-1])).astype(np.int64)
    val = rng.normal(size=len(codes)) if real else np.zeros(0)
    trans = npdecode.transition_matrix(sp, model.weights)
    args = (codes, cnt, val, seq_ptr, ent_ptr, 0, n_seq, sp.attr_ptr, sp.feat_label)
    outs = []
    for fn in (with_aot.tag_codes_seqs, tag_codes_seqs):
        ids, ps = np.full(len(cnt), -7, np.int32), np.full(n_seq, np.nan)
        fn(*args, model.weights, trans, ids, ps)
        outs.append((ids, ps))
    np.testing.assert_array_equal(outs[0][0], outs[1][0])
    np.testing.assert_allclose(outs[0][1], outs[1][1], rtol=1e-12, atol=1e-12)


def _paths(model, X, D):
    """Labels of every tagging path: attribute strings (one batch and one sentence), feature dicts,
    an encoded corpus."""
    est = crfkit.CRF()
    est.model_ = model
    corpus = model.encode(X)
    return {
        "strings": model.tag(X),
        "one": [model.tag([x])[0] for x in X[:3]],
        "dicts": model.tag_dicts(D),
        "corpus": model.viterbi(corpus)[0].tolist(),
        "numpy": model.viterbi(corpus, engine="numpy")[0].tolist(),
    }


@pytest.mark.parametrize("real", [False, True])
def test_every_tagging_path_gives_the_kernels_labels(with_aot, real):
    model, rng = _model(5, n_labels=5, real=real)
    X, _ = random_sequences(rng, 40, n_labels=5, n_attr=12, max_len=9, real=real)
    X[3] = []  # an empty sentence
    X[4] = [["never seen"], ["w=x"]]  # attributes the model does not know
    D = [[dict((a, 1.0) if isinstance(a, str) else a for a in tok) for tok in s] for s in X]
    got = _paths(model, X, D)
    aot.forget()
    os.environ["CRFKIT_NO_AOT"] = "1"
    try:
        model2 = CRFModel(model.space, model.weights)  # no table, no encoders kept
        want = _paths(model2, X, D)
    finally:
        del os.environ["CRFKIT_NO_AOT"]
        aot.forget()
    assert got == want
    # the decoder's path scores agree with the numpy recursion's
    corpus = model.encode(X)
    ids, ps = npdecode.aot_viterbi(model, corpus)
    ref = npdecode.by_groups(
        npdecode.viterbi,
        npdecode.emissions(corpus, model.space, model.weights),
        corpus.seq_ptr,
        npdecode.transition_matrix(model.space, model.weights),
    )
    np.testing.assert_array_equal(ids, ref[0])
    np.testing.assert_allclose(ps, ref[1], rtol=1e-12, atol=1e-12)


def test_a_corpus_slice_is_decoded_from_its_own_offsets(with_aot):
    model, rng = _model(6)
    X, _ = random_sequences(rng, 12, n_labels=4, n_attr=12, max_len=9)
    full = model.encode(X)
    part = model.encode(X[5:9])
    ids, _ = npdecode.aot_viterbi(model, part)
    want = model.viterbi(full, engine="numpy")[0]
    np.testing.assert_array_equal(ids, want[full.seq_ptr[5] : full.seq_ptr[9]])


def test_models_the_kernel_does_not_score_are_declined(with_aot):
    rng = np.random.default_rng(7)
    X, Y = random_sequences(rng, 10, n_labels=3, n_attr=6, max_len=5)
    D = [rng.normal(size=(len(x), 2)) for x in X]
    space, corpus = build(X, Y, dense=D)
    model = CRFModel(space, rng.normal(size=space.n_features))
    assert npdecode.aot_viterbi(model, corpus) is None
    assert model.tag_dicts([[{"a": 1.0}]]) is None  # dense: the generic path's business


def test_the_lookup_of_the_encoders_matches_the_space(with_aot):
    model, rng = _model(8)
    names = list(model.space.attributes)[::3] + ["unknown", "w=", ""]
    got = model._lookup()(names)
    np.testing.assert_array_equal(got, model.space.attribute_ids(names))
    assert model._names().table() is not None  # built once, for the model
    import pickle

    again = pickle.loads(pickle.dumps(model._lookup()))
    np.testing.assert_array_equal(again(names), got)


# ----------------------------------------------------------------------------- a tagging process
def test_a_process_that_only_tags_never_imports_numba(tmp_path):
    """A fresh interpreter with the module built: a model loaded, a large batch of attribute
    strings tagged (the process's first), small batches of strings, of feature dicts and an encoded
    corpus: numba is never imported, and every label is the one this process (with numba) computes.
    The next large batch goes to numba's parallel kernels (a process that tags again and again), with
    the same labels."""
    model, rng = _model(9, n=80)
    path = tmp_path / "m.crfkit"
    model.save(path)
    X, _ = random_sequences(rng, 400, n_labels=4, n_attr=12, min_len=5, max_len=12)
    assert sum(map(len, X)) > npdecode.max_tokens()
    D = [[{a: 1.0 for a in tok} for tok in seq] for seq in X]
    want = {
        "strings": model.tag(X),
        "small": model.tag(X[:3]),
        "dicts": crfkit.CRF(model_filename=str(path)).predict(D[:5]),
        "corpus": model.viterbi(model.encode(X[:50]))[0].tolist(),
    }
    code = (
        "import sys, json; import crfkit; from crfkit.model import CRFModel\n"
        "m = CRFModel.load(sys.argv[1]); X = json.loads(sys.argv[2]); D = json.loads(sys.argv[3])\n"
        "from crfkit._runtime import aot\n"
        "out = {'strings': m.tag(X), 'small': m.tag(X[:3]),\n"
        "       'dicts': crfkit.CRF(model_filename=sys.argv[1]).predict(D[:5]),\n"
        "       'corpus': m.viterbi(m.encode(X[:50]))[0].tolist()}\n"
        "out['loaded'] = aot.load() is not None\n"
        "out['numba'] = sorted(k for k in sys.modules if k.split('.')[0] == 'numba')\n"
        "out['again'] = m.tag(X); out['numba_after_again'] = 'numba' in sys.modules\n"
        "print(json.dumps(out))"
    )
    p = subprocess.run(
        [sys.executable, "-c", code, str(path), json.dumps(X), json.dumps(D)],
        capture_output=True,
        text=True,
        check=True,
        env=dict(os.environ, PYTHONPATH=SRC, CRFKIT_AOT_DIR=built_aot_dir()["dir"]),
    )
    got = json.loads(p.stdout)
    assert got.pop("loaded") and got.pop("numba") == []
    assert got.pop("again") == want["strings"] and got.pop("numba_after_again")
    assert got == want


def test_only_the_first_large_batch_of_a_process_without_numba_is_theirs(with_aot, monkeypatch):
    monkeypatch.setitem(npdecode._COLD, "calls", 0)
    big = npdecode.max_tokens() + 1
    assert npdecode.aot_batch(10) is with_aot  # small: always
    monkeypatch.setitem(sys.modules, "numba", sys.modules["numba"])
    assert npdecode.aot_batch(big) is None  # numba is here: its parallel kernels
    monkeypatch.delitem(sys.modules, "numba")
    monkeypatch.setenv("CRFKIT_AOT_COLD_MAX_TOKENS", str(big - 1))
    assert npdecode.aot_batch(big) is None  # too large for the serial kernel
    monkeypatch.delenv("CRFKIT_AOT_COLD_MAX_TOKENS")
    assert npdecode.aot_batch(big) is with_aot  # the first
    assert npdecode.aot_batch(big) is None  # not the second
    assert not npdecode.cold_batch(big)  # nor the numpy decoder's: the cold batch was theirs
    assert npdecode.aot_batch(10) is with_aot
