"""The attribute-string fast path of CRFModel.tag (crfkit.features.nametable, kernels.tag_names)
against the generic path (encode + decode): the same codes and the same labels, serial and on the
thread pool, for models trained in the process (attribute lists) and loaded from a file (packed
attribute tables); every input it does not take (pairs with values, names with a NUL byte, lone
surrogates, other shapes) goes to the generic path, with its answers or its errors."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crfkit.errors import DataError
from crfkit.features.encode import build
from crfkit.features.nametable import NameTable
from crfkit.model import CRFModel

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

ATTRS = ["w=the", "w=cat", "pos=NN", "pos=DT", "é", "a:b", "", "bias", "x|y", "日本"]
UNKNOWN = ["w=dog", "pos=VB", "zz", "e"]


def _model(seed=0, n_labels=4):
    rng = np.random.default_rng(seed)
    X, Y = [], []
    for _ in range(30):
        T = int(rng.integers(1, 6))
        X.append(
            [
                [ATTRS[int(i)] for i in rng.integers(0, len(ATTRS), size=int(rng.integers(1, 4)))]
                for _ in range(T)
            ]
        )
        Y.append([f"L{int(rng.integers(n_labels))}" for _ in range(T)])
    space, _ = build(X, Y, transitions="all")
    return CRFModel(space, rng.normal(size=space.n_features))


MODEL = _model()


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """MODEL saved and loaded: its attributes a packed StringTable."""
    path = tmp_path_factory.mktemp("nt") / "m.crfkit"
    MODEL.save(path)
    return CRFModel.load(path)


def _generic(m, X):
    corpus = m.encode(X)
    ids, _ = m.viterbi(corpus)
    return m._split(corpus, ids)


attr = st.sampled_from(ATTRS + UNKNOWN)
sentences = st.lists(st.lists(st.lists(attr, max_size=5), max_size=7), max_size=6)


@SETTINGS
@given(sentences)
def test_codes_are_the_generic_ids(X):
    MODEL._names().table()  # built: any batch is looked up
    r = MODEL._names().codes(X)
    assert r is not None
    codes, cnt = r
    names = [a for s in X for t in s for a in t]
    assert codes.tolist() == MODEL.space.attribute_ids(names).tolist()
    assert cnt.tolist() == [len(t) for s in X for t in s]


@SETTINGS
@given(sentences, st.sampled_from([1, 2, 3]))
def test_tag_equals_the_generic_path(X, threads):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CRFKIT_NUMPY_MAX_TOKENS", "0")  # every batch to the kernels
        m = CRFModel(MODEL.space, MODEL.weights)
        got = m.tag(X, threads)
        assert got == _generic(m, X)
        assert "_name_table" in m.__dict__ or not sum(map(len, X))  # (it took the fast path)


def test_large_batches_on_the_thread_pool_and_a_loaded_model(monkeypatch, loaded):
    """More than 64 sequences: chunks on the thread pool (tag_names_all); a loaded model looks its
    names up in the packed table it holds."""
    monkeypatch.setenv("CRFKIT_NUMPY_MAX_TOKENS", "0")
    rng = np.random.default_rng(1)
    pool = ATTRS + UNKNOWN
    X = [
        [
            [pool[int(i)] for i in rng.integers(0, len(pool), size=int(rng.integers(0, 5)))]
            for _ in range(int(rng.integers(0, 8)))
        ]
        for _ in range(300)
    ]
    want = _generic(MODEL, X)
    for m in (CRFModel(MODEL.space, MODEL.weights), loaded):
        for threads in (1, 2, 4):
            assert m.tag(X, threads) == want
    assert loaded._names().codes(X)[0].tolist() == MODEL._names().codes(X)[0].tolist()


@pytest.mark.parametrize(
    "X",
    [
        [[["w=the", ("pos=NN", 0.5)], ["bias"]]],  # a (name, value) pair
        [[["w=the\x00pos=NN"], ["bias"]]],  # a NUL byte inside a name
        [[["w=\ud800"], ["bias"]]],  # a lone surrogate
        [(["w=the"], ["bias"])],  # a tuple sequence (not a list of lists: still iterable)
    ],
)
def test_other_inputs_take_the_generic_path(monkeypatch, X):
    monkeypatch.setenv("CRFKIT_NUMPY_MAX_TOKENS", "0")
    m = CRFModel(MODEL.space, MODEL.weights)
    assert m.tag(X) == _generic(m, X)


def test_bad_input_keeps_the_generic_errors(monkeypatch):
    monkeypatch.setenv("CRFKIT_NUMPY_MAX_TOKENS", "0")
    m = CRFModel(MODEL.space, MODEL.weights)
    assert m._names().batch([[[1, 2]]]) is None
    with pytest.raises(DataError, match="attribute must be a string"):
        m.tag([[[1, 2]]])
    bad = [[["w=the", np.str_("pos=NN")]]]  # a str subclass: refused the same on both paths
    assert m._names().batch(bad) is None
    with pytest.raises(DataError, match="attribute must be a string"):
        m.tag(bad)
    assert m._names().batch(((("a",),),)) is None  # not a list


def test_small_batches_without_kernels_stay_in_numpy(monkeypatch):
    """A process that has not loaded numba's serial kernels decodes a small batch in numpy: the
    fast path (which needs numba) stays out of it."""
    from crfkit import npdecode
    from crfkit._runtime import aot

    monkeypatch.setattr(npdecode, "kernels_ready", lambda: False)
    monkeypatch.setenv(
        "CRFKIT_NO_AOT", "1"
    )  # (the kernels compiled ahead of time: tests/test_aot.py)
    aot.forget()
    try:
        m = CRFModel(MODEL.space, MODEL.weights)
        assert m.tag([[["w=the"], ["bias"]]]) == _generic(m, [[["w=the"], ["bias"]]])
        assert "_name_table" not in m.__dict__
    finally:
        aot.forget()


def test_table_pickles_without_its_arrays():
    t = NameTable(MODEL.space.attributes)
    X = [[["w=the", "zz"], ["pos=NN"]]]
    want = t.codes(X)[0].tolist()
    t2 = pickle.loads(pickle.dumps(t))
    assert t2._table is None
    assert t2.codes(X)[0].tolist() == want


def test_unpackable_names_fall_back():
    t = NameTable(["ok", "bad\ud800"])
    assert t.table() is False
    assert t.batch([[["ok"]]]) is None


def test_few_names_do_not_build_the_table_for_a_large_model():
    """A batch of fewer names than a quarter of the model's attributes goes to the generic path
    while the table is not built (nothing built for the whole model); once built, it is used."""
    t = NameTable(MODEL.space.attributes)  # 10 attributes
    assert t.batch([[["w=the"], ["bias"]]]) is None
    assert t._table is None
    assert t.batch([[["w=the", "zz"], ["bias", "é"]]]) is not None  # 4 names: built
    got = t.codes([[["w=the"], ["bias"]]])
    assert got is not None
    assert got[0].tolist() == MODEL.space.attribute_ids(["w=the", "bias"]).tolist()
