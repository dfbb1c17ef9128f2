"""The numpy decoding path for small inputs (crfkit.npdecode) against the numba kernels and brute
force."""

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

from conftest import enumerate_chain, model_from_scores, random_sequences
from crfkit import npdecode
from crfkit.features.encode import build
from crfkit.model import CRFModel

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@pytest.fixture(autouse=True)
def _no_aot(monkeypatch):
    """These tests check the numpy decoder itself: the kernels compiled ahead of time, which take
    over its Viterbi path where they are built (tests/test_aot.py), are kept out, here and in the
    subprocesses."""
    from crfkit._runtime import aot

    monkeypatch.setenv("CRFKIT_NO_AOT", "1")
    aot.forget()
    yield
    aot.forget()


def _numba(model, corpus, **kw):
    """CRFModel.decode through the numba kernels (the numpy path switched off)."""
    old = os.environ.get("CRFKIT_NUMPY_MAX_TOKENS")
    os.environ["CRFKIT_NUMPY_MAX_TOKENS"] = "0"
    try:
        return model.decode(corpus, **kw)
    finally:
        if old is None:
            del os.environ["CRFKIT_NUMPY_MAX_TOKENS"]
        else:
            os.environ["CRFKIT_NUMPY_MAX_TOKENS"] = old


def _random_model(seed, *, n_labels=4, real=False, dense=0, support="observed", scale=1.0):
    rng = np.random.default_rng(seed)
    X, Y = random_sequences(rng, 30, n_labels=n_labels, n_attr=8, max_len=7, real=real)
    D = [rng.normal(size=(len(x), dense)) for x in X] if dense else None
    space, _ = build(X, Y, support=support, dense=D)
    w = rng.normal(scale=scale, size=space.n_features)
    return CRFModel(space, w), rng


@st.composite
def cases(draw):
    return dict(
        seed=draw(st.integers(0, 2**32 - 1)),
        n_labels=draw(st.integers(1, 6)),
        real=draw(st.booleans()),
        dense=draw(st.sampled_from([0, 0, 3])),
        support=draw(st.sampled_from(["observed", "all"])),
        scale=draw(st.sampled_from([0.1, 1.0, 20.0])),
        n_seq=draw(st.integers(0, 12)),
        empty=draw(st.booleans()),
    )


def _case(p):
    """A random model of case ``p`` and new sequences for it (unknown attributes, which are dropped,
    tokens without attributes, empty sequences), encoded: ``(model, corpus, labels)``."""
    model, rng = _random_model(
        p["seed"],
        n_labels=p["n_labels"],
        real=p["real"],
        dense=p["dense"],
        support=p["support"],
        scale=p["scale"],
    )
    X, Y = random_sequences(
        rng,
        p["n_seq"],
        n_labels=p["n_labels"],
        n_attr=11,
        max_len=9,
        real=p["real"],
        min_len=0 if p["empty"] else 1,
    )
    D = [rng.normal(size=(len(x), p["dense"])) for x in X] if p["dense"] else None
    corpus = model.encode(X, Y, dense=D)
    return model, corpus, np.maximum(corpus.y, 0)


@SETTINGS
@given(cases())
def test_numpy_path_equals_the_kernels(p):
    model, corpus, labels = _case(p)
    got = npdecode.decode(model, corpus, path=True, marginals=True, labels=labels)
    ref = _numba(model, corpus, path=True, marginals=True, labels=labels)
    np.testing.assert_array_equal(got["ids"], ref["ids"])
    np.testing.assert_allclose(got["path_score"], ref["path_score"], rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(got["logz"], ref["logz"], rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(got["label_score"], ref["label_score"], rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(got["marginals"], ref["marginals"], rtol=1e-9, atol=1e-12)
    assert got["ids"].dtype == ref["ids"].dtype and got["marginals"].shape == ref["marginals"].shape
    # and CRFModel.decode takes the numpy path for this size
    same = model.decode(corpus, path=True, marginals=True)
    np.testing.assert_array_equal(same["ids"], got["ids"])


@SETTINGS
@given(
    st.integers(0, 2**32 - 1),
    st.integers(1, 4),
    st.integers(1, 5),
    st.sampled_from([0.5, 3.0, 40.0]),
)
def test_against_enumeration(seed, L, T, scale):
    rng = np.random.default_rng(seed)
    score = rng.normal(scale=scale, size=(T, L))
    trans = rng.normal(scale=scale, size=(L, L))
    model, X = model_from_scores(score, trans)
    ref = enumerate_chain(score, trans)
    corpus = model.encode(X)
    r = npdecode.decode(model, corpus, path=True, marginals=True, labels=ref["best_path"])
    if ref["gap"] > 1e-9:
        np.testing.assert_array_equal(r["ids"], ref["best_path"])
    assert r["path_score"][0] == pytest.approx(ref["best_score"], rel=1e-12, abs=1e-9)
    assert r["label_score"][0] == pytest.approx(ref["best_score"], rel=1e-12, abs=1e-9)
    assert r["logz"][0] == pytest.approx(ref["logz"], rel=1e-12, abs=1e-9)
    np.testing.assert_allclose(r["marginals"], ref["node"], atol=1e-10)


def test_ties_break_as_the_kernels():
    # every path scores the same: the kernels keep the first best label everywhere
    model, X = model_from_scores(np.zeros((5, 3)), np.zeros((3, 3)))
    corpus = model.encode(X * 3)
    got = npdecode.decode(model, corpus)
    ref = _numba(model, corpus)
    np.testing.assert_array_equal(got["ids"], ref["ids"])
    np.testing.assert_array_equal(got["ids"], np.zeros(15, np.int32))


def test_extreme_scores_keep_marginals_exact():
    rng = np.random.default_rng(3)
    score = rng.normal(scale=1e6, size=(6, 3))
    trans = rng.normal(scale=1e6, size=(3, 3))
    model, X = model_from_scores(score, trans)
    ref = enumerate_chain(score, trans)
    r = npdecode.decode(model, model.encode(X), path=False, marginals=True)
    assert np.isfinite(r["marginals"]).all()
    np.testing.assert_allclose(r["marginals"].sum(axis=1), 1.0, atol=1e-12)
    np.testing.assert_allclose(r["marginals"], ref["node"], atol=1e-9)
    assert r["logz"][0] == pytest.approx(ref["logz"], rel=1e-12)


def test_threshold_switches_paths(monkeypatch):
    monkeypatch.setitem(npdecode._WARM, "state", "cold")
    monkeypatch.setenv("CRFKIT_SMALL_KERNELS", "0")
    model, rng = _random_model(7)
    X, _ = random_sequences(rng, 20, n_labels=4, n_attr=8, max_len=7)
    corpus = model.encode(X)
    calls = []
    real = npdecode.decode
    monkeypatch.setattr(npdecode, "decode", lambda *a, **k: calls.append(1) or real(*a, **k))
    monkeypatch.setenv("CRFKIT_NUMPY_MAX_TOKENS", str(corpus.n_tokens))
    small = model.decode(corpus)
    assert calls == [1]
    monkeypatch.setenv("CRFKIT_NUMPY_MAX_TOKENS", str(corpus.n_tokens - 1))
    big = model.decode(corpus)
    assert calls == [1]  # the kernels this time
    np.testing.assert_array_equal(small["ids"], big["ids"])
    monkeypatch.setenv("CRFKIT_NUMPY_MAX_TOKENS", "not a number")
    assert npdecode.max_tokens() == npdecode.MAX_TOKENS


def test_small_tagging_never_imports_numba(tmp_path):
    """A model load and a small tagging run in a fresh interpreter: numba is never imported.  (The
    second small call would start the background warm-up of the kernels, which imports numba in a
    thread: that raced with the check and failed it once in a full suite run; it is off here,
    CRFKIT_SMALL_KERNELS=0.)"""
    model, rng = _random_model(11)
    path = tmp_path / "m.crfkit"
    model.save(path)
    X, _ = random_sequences(rng, 5, n_labels=4, n_attr=8, max_len=7)
    code = (
        "import sys, json; from crfkit.model import CRFModel; m = CRFModel.load(sys.argv[1]); "
        f"X = {X!r}; m.tag(X); m.tag_with_probability(X); "
        "print(json.dumps(sorted(k for k in sys.modules if k.split('.')[0] in ('numba', 'scipy'))))"
    )
    src = str(Path(__file__).resolve().parents[1] / "src")
    out = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        capture_output=True,
        text=True,
        check=True,
        env=dict(os.environ, PYTHONPATH=src, CRFKIT_SMALL_KERNELS="0"),
    )
    assert out.stdout.strip() == "[]", out.stdout


@SETTINGS
@given(cases())
def test_serial_kernels_equal_the_batch_kernels(p):
    model, corpus, labels = _case(p)
    got = npdecode.decode_serial(model, corpus, path=True, marginals=True, labels=labels)
    ref = _numba(model, corpus, path=True, marginals=True, labels=labels)
    np.testing.assert_array_equal(got["ids"], ref["ids"])
    for k in ("path_score", "logz", "label_score", "marginals"):
        # the kernels decode_all runs per sequence (its full-row emissions may round the last bit
        # apart)
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-13, atol=1e-13)


def test_second_small_call_warms_the_serial_kernels(monkeypatch):
    monkeypatch.setitem(npdecode._WARM, "state", "cold")
    monkeypatch.setitem(npdecode._WARM, "calls", 0)
    monkeypatch.delenv("CRFKIT_SMALL_KERNELS", raising=False)
    model, rng = _random_model(5)
    X, _ = random_sequences(rng, 4, n_labels=4, n_attr=8, max_len=7)
    corpus = model.encode(X)
    first = model.decode(corpus)
    assert npdecode._WARM["state"] == "cold"  # one call: nothing started
    second = model.decode(corpus)
    assert npdecode._WARM["state"] in ("warming", "ready")
    import threading

    for t in threading.enumerate():
        if t.name == "crfkit-kernel-warmup":
            t.join(600)
    assert npdecode.kernels_ready()
    calls = []
    real = npdecode.decode_serial
    monkeypatch.setattr(npdecode, "decode_serial", lambda *a, **k: calls.append(1) or real(*a, **k))
    third = model.decode(corpus)
    assert calls == [1]
    np.testing.assert_array_equal(first["ids"], second["ids"])
    np.testing.assert_array_equal(first["ids"], third["ids"])


def test_warmup_can_be_turned_off(monkeypatch):
    monkeypatch.setitem(npdecode._WARM, "state", "cold")
    monkeypatch.setitem(npdecode._WARM, "calls", 5)
    monkeypatch.setenv("CRFKIT_SMALL_KERNELS", "0")
    model, _ = _random_model(5)
    npdecode.note_small_call(model)
    assert npdecode._WARM["state"] == "cold"


@pytest.mark.parametrize("dense", [0, 3])
def test_warmup_works_for_dense_models(monkeypatch, dense):
    monkeypatch.setitem(npdecode._WARM, "state", "cold")
    monkeypatch.setitem(npdecode._WARM, "calls", 1)
    monkeypatch.delenv("CRFKIT_SMALL_KERNELS", raising=False)
    model, rng = _random_model(9, dense=dense)
    X, _ = random_sequences(rng, 3, n_labels=4, n_attr=8, max_len=5)
    D = [rng.normal(size=(len(x), dense)) for x in X] if dense else None
    before = model.tag(X, dense=D)  # the second small call: the warm-up starts
    import threading

    for t in threading.enumerate():
        if t.name == "crfkit-kernel-warmup":
            t.join(600)
    assert npdecode.kernels_ready()
    assert model.tag(X, dense=D) == before


# ------------------------------------------------------------- the numpy path of any size (crfkit
# tag)


@SETTINGS
@given(st.integers(0, 2**32 - 1), st.integers(1, 40))
def test_groups_change_no_result(seed, slots):
    """by_groups over small groups (any slot budget) gives what one padded block gives, bit for
    bit, in input order; every sequence is in exactly one group, each group within its budget."""
    rng = np.random.default_rng(seed)
    lens = rng.integers(0, 9, size=rng.integers(1, 12))
    seq_ptr = np.concatenate(([0], np.cumsum(lens)))
    L = int(rng.integers(1, 5))
    score = rng.normal(size=(int(seq_ptr[-1]), L))
    trans = rng.normal(size=(L, L))
    gs = npdecode.groups(seq_ptr, slots)
    assert sorted(np.concatenate(gs).tolist()) == list(range(len(lens)))
    for g in gs:
        assert len(g) == 1 or len(g) * lens[g].max() <= slots
    for fn in (npdecode.viterbi, npdecode.forward_backward):
        a, b = fn(score, seq_ptr, trans)
        ga, gb = npdecode.by_groups(fn, score, seq_ptr, trans, slots)
        np.testing.assert_array_equal(ga, a)
        np.testing.assert_array_equal(gb, b)


@SETTINGS
@given(cases(), st.integers(1, 40))
def test_emission_blocks_change_no_bit(p, block):
    """Emissions summed in blocks of tokens (any block size) are bit for bit the whole sums."""
    model, corpus, _ = _case(p)
    whole = npdecode.emissions(corpus, model.space, model.weights)
    old = npdecode.EMISSION_BLOCK
    npdecode.EMISSION_BLOCK = block
    try:
        parts = npdecode.emissions(corpus, model.space, model.weights)
    finally:
        npdecode.EMISSION_BLOCK = old
    np.testing.assert_array_equal(parts, whole)


def test_engine_numpy_decodes_any_size_as_the_kernels(monkeypatch):
    """engine='numpy' takes the numpy path above the small-input threshold too (never the kernels),
    with the kernels' labels; an unknown engine is refused."""
    model, rng = _random_model(5, n_labels=5)
    X, _ = random_sequences(rng, 300, n_labels=5, n_attr=8, max_len=30)
    corpus = model.encode(X)
    monkeypatch.setenv("CRFKIT_NUMPY_MAX_TOKENS", "0")  # "auto" would take the kernels
    calls = []
    real = npdecode.decode
    monkeypatch.setattr(npdecode, "decode", lambda *a, **k: calls.append(1) or real(*a, **k))
    got = model.decode(corpus, engine="numpy")
    assert calls == [1]
    ref = model.decode(corpus)
    assert calls == [1]
    np.testing.assert_array_equal(got["ids"], ref["ids"])
    assert model.tag(X, engine="numpy") == model.tag(X)
    with pytest.raises(ValueError, match="engine"):
        model.decode(corpus, engine="numba")


def test_first_large_batch_of_a_process_without_numba_is_decoded_in_numpy(tmp_path):
    """A fresh interpreter loads a model and tags a batch above max_tokens but within
    cold_max_tokens, as attribute strings and as feature dicts: numba is not imported by those first
    calls, the labels are the kernels' (computed here), and the next large call loads numba."""
    import crfkit

    model, rng = _random_model(12)
    path = tmp_path / "m.crfkit"
    model.save(path)
    X, _ = random_sequences(rng, 400, n_labels=4, n_attr=8, min_len=5, max_len=12)
    n = sum(map(len, X))
    assert npdecode.max_tokens() < n <= npdecode.cold_max_tokens()
    D = [[{a: 1.0 for a in tok} for tok in seq] for seq in X]
    assert "numba" in sys.modules  # this process: the kernels' labels
    want = model.tag(X)
    want_d = crfkit.CRF(model_filename=str(path)).predict(D)
    code = (
        "import sys, json; import crfkit; from crfkit.model import CRFModel\n"
        "m = CRFModel.load(sys.argv[1]); X = json.loads(sys.argv[2]); D = json.loads(sys.argv[3])\n"
        "out = {'strings': m.tag(X), 'numba_after_strings': 'numba' in sys.modules}\n"
        "out['dicts'] = crfkit.CRF(model_filename=sys.argv[1]).predict(D)\n"
        "out['numba_after_dicts'] = 'numba' in sys.modules\n"
        "out['again'] = m.tag(X); out['numba_after_again'] = 'numba' in sys.modules\n"
        "print(json.dumps(out))"
    )
    src = str(Path(__file__).resolve().parents[1] / "src")
    p = subprocess.run(
        [sys.executable, "-c", code, str(path), json.dumps(X), json.dumps(D)],
        capture_output=True,
        text=True,
        check=True,
        env=dict(os.environ, PYTHONPATH=src, CRFKIT_SMALL_KERNELS="0"),
    )
    got = json.loads(p.stdout)
    assert got["strings"] == want and got["again"] == want
    assert got["dicts"] == want_d
    # the first large call only: the dict batch is the process's second, and goes to numba
    assert not got["numba_after_strings"] and got["numba_after_dicts"] and got["numba_after_again"]
