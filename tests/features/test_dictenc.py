"""The feature-dict fast path (crfkit.features.dictenc, CRFModel.tag_dicts, kernels.chain.tag_codes)
against the generic path (to_attributes + encode + tag): the same corpus arrays and the same labels,
whatever the memo holds; every input it does not take falls back (None), so that the generic path
says what is wrong."""

from __future__ import annotations

import pickle
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crfkit import npdecode
from crfkit.features import dictenc
from crfkit.features.dictenc import DictEncoder
from crfkit.features.dicts import to_attributes
from crfkit.features.encode import build, encode
from crfkit.kernels.chain import tag_codes, transition_matrix, viterbi
from crfkit.model import CRFModel

SETTINGS = settings(
    max_examples=80,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

NAMES = ["w", "pos", "bias", "w[-1]", "a:b", "x=y", "é"]
WORDS = ["the", "cat", "sat", "on", "mat", "", "a:b", "Ünï", "1"]
NUMBERS = [0, 1, 0.0, 1.0, True, False, 2, -3, 0.5, 1e-3, -2.25]


def _value(draw):
    return draw(st.one_of(st.sampled_from(WORDS), st.sampled_from(NUMBERS)))


@st.composite
def token(draw):
    keys = draw(st.lists(st.sampled_from(NAMES), max_size=5, unique=True))
    return {k: _value(draw) for k in keys}


sentences = st.lists(st.lists(token(), max_size=6), max_size=5)


def _model(seed=0, n_labels=3):
    """A model whose attributes are those of a fixed random dict corpus (so that some test entries
    are unknown to it), with random weights."""
    rng = np.random.default_rng(seed)
    X, Y = [], []
    for _ in range(25):
        T = int(rng.integers(1, 6))
        seq = []
        for _ in range(T):
            d = {}
            for k in rng.choice(NAMES, size=int(rng.integers(1, 4)), replace=False):
                v = (
                    WORDS[int(rng.integers(len(WORDS)))]
                    if rng.random() < 0.7
                    else NUMBERS[int(rng.integers(len(NUMBERS)))]
                )
                d[str(k)] = v
            seq.append(d)
        X.append(seq)
        Y.append([f"L{int(rng.integers(n_labels))}" for _ in range(T)])
    A = to_attributes(X)
    space, _ = build(A, Y, transitions="all")
    return CRFModel(space, rng.normal(size=space.n_features))


MODEL = _model()


def _same_corpus(c1, c2):
    np.testing.assert_array_equal(c1.seq_ptr, c2.seq_ptr)
    np.testing.assert_array_equal(c1.tok_ptr, c2.tok_ptr)
    np.testing.assert_array_equal(c1.attr, c2.attr)
    np.testing.assert_array_equal(c1.val, c2.val)


@SETTINGS
@given(sentences, sentences)
def test_same_corpus_as_the_generic_path(X1, X2):
    enc = DictEncoder(MODEL.space)
    for X in (X1, X2, X1):  # a cold memo, then one holding other entries, then warm
        c = enc.encode(X)
        assert c is not None
        _same_corpus(c, encode(to_attributes(X), MODEL.space))
        # every entry learnt once, none left provisional (a cold call skips the ones it knew)
        held = enc.codes_held()
        assert all(x >= -1 for x in held) and enc.entries() == len(held)


@SETTINGS
@given(sentences)
def test_tag_dicts_equals_tag_on_both_routes(X):
    if not X:
        assert MODEL.tag_dicts(X) is None
        return
    want = MODEL.tag(to_attributes(X))
    m = CRFModel(MODEL.space, MODEL.weights)
    assert m.tag_dicts(X) == want  # decode() route (numpy or kernels)
    ready = npdecode._WARM["state"]
    npdecode._WARM["state"] = "ready"  # the fused-kernel route
    try:
        assert m.tag_dicts(X) == want
        assert m.tag_dicts(X) == want  # memo warm
    finally:
        npdecode._WARM["state"] = ready


def test_equal_keys_are_one_attribute_and_zeros_are_dropped():
    space, _ = build([[["f", ("g", 2.0)]]], [["A"]])
    enc = DictEncoder(space)
    f, g = space.attr_index["f"], space.attr_index["g"]
    for one in (True, 1, 1.0):
        c = enc.encode([[{"f": one}]])
        assert c.attr.tolist() == [f] and c.val.tolist() == [1.0]
    for zero in (False, 0, 0.0):
        c = enc.encode([[{"f": zero, "g": 3}]])
        assert c.attr.tolist() == [g] and c.val.tolist() == [3.0]
    c = enc.encode([[{"g": 0.25}, {"g": -4}, {"f": "x"}, {}]])
    assert c.attr.tolist() == [g, g] and c.val.tolist() == [0.25, -4.0]
    assert c.tok_ptr.tolist() == [0, 1, 2, 2, 2]


@pytest.mark.parametrize(
    "X",
    [
        [[{"w": {"nested": 1}}]],
        [[{"w": ["a", "b"]}]],
        [[{"w": b"bytes"}]],
        [[["w:the", "pos:DT"]]],
        [[{1: "x"}]],
        [[{"w": float("nan")}]],
        [[{"w": 1e300}]],
        [[{"w": (1, 2)}]],
        [["a string token"]],
        [[{"w": None}]],
        [[{"w": np.float64(0.5)}]],
        [({"w": "the"},)],
        ({"w": "the"},),
        "text",
    ],
)
def test_other_shapes_fall_back(X):
    enc = DictEncoder(MODEL.space)
    assert enc.encode(X) is None
    assert enc.codes(X) is None
    # a fallback leaves no provisional entry behind: a later good call is exact
    good = [[{"w": "the", "pos": "cat"}, {"bias": 1.0, "w[-1]": "sat"}]]
    _same_corpus(enc.encode(good), encode(to_attributes(good), MODEL.space))
    assert all(c >= -1 for c in enc.codes_held())


def test_fallback_inputs_still_tag_or_raise_through_the_estimator():
    import crfkit
    from crfkit.errors import DataError

    X = [[{"w": "the"}, {"w": "cat"}], [{"w": "sat"}]]
    crf = crfkit.CRF(max_iterations=5).fit(X, [["A", "B"], ["A"]])
    nested = [[{"w": {"nested": "the"}}, {"w": "cat"}]]
    assert crf.predict(nested) == crf.model_.tag(to_attributes(nested))
    with pytest.raises(DataError, match="sequence 0, token 0"):
        crf.predict([[{"w": float("nan")}]])
    assert crf.predict([[["w:the"]]]) == crf.predict([[{"w": "the"}]])


def test_memo_is_emptied_past_its_bound(monkeypatch):
    monkeypatch.setattr(dictenc, "MAX_MEMO", 3)
    enc = DictEncoder(MODEL.space)
    rng = np.random.default_rng(1)
    for _ in range(20):
        X = [[{str(k): WORDS[int(rng.integers(len(WORDS)))] for k in NAMES[:3]} for _ in range(3)]]
        _same_corpus(enc.encode(X), encode(to_attributes(X), MODEL.space))
        assert enc.entries() <= 3 + 9 * 3


def test_threads_get_the_generic_answers():
    rng = np.random.default_rng(2)
    batches = [
        [
            [{k: WORDS[int(rng.integers(len(WORDS)))] for k in NAMES[:4]} for _ in range(4)]
            for _ in range(3)
        ]
        for _ in range(40)
    ]
    want = [MODEL.tag(to_attributes(X)) for X in batches]
    m = CRFModel(MODEL.space, MODEL.weights)
    got = [None] * len(batches)

    def work(i0):
        for i in range(i0, len(batches), 4):
            got[i] = m.tag_dicts(batches[i])

    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert got == want


def test_model_with_an_encoder_pickles():
    m = CRFModel(MODEL.space, MODEL.weights)
    X = [[{"w": "the", "pos": "cat"}]]
    y = m.tag_dicts(X)
    m2 = pickle.loads(pickle.dumps(m))
    assert m2._dict_encoder.entries() == 0  # the memo is not pickled
    assert m2.tag_dicts(X) == y


def test_fused_kernel_equals_emissions_and_viterbi():
    rng = np.random.default_rng(3)
    sp, w = MODEL.space, MODEL.weights
    trans = transition_matrix(w, 1.0, sp.n_state, sp.trans_index)
    for _ in range(50):
        T = int(rng.integers(1, 7))
        cnt = rng.integers(0, 4, size=T).astype(np.int64)
        codes = rng.integers(-1, sp.n_attributes, size=int(cnt.sum())).astype(np.int64)
        val = rng.normal(size=len(codes)) if rng.random() < 0.5 else np.zeros(0)
        out = np.zeros(T, np.int32)
        ps = tag_codes(codes, cnt, val, sp.attr_ptr, sp.feat_label, w, trans, out)
        score = np.zeros((T, sp.n_labels))
        e = 0
        for t in range(T):
            for _ in range(cnt[t]):
                a = codes[e]
                if a >= 0:
                    for k in range(sp.attr_ptr[a], sp.attr_ptr[a + 1]):
                        score[t, sp.feat_label[k]] += w[k] * (val[e] if len(val) else 1.0)
                e += 1
        ref = np.zeros(T, np.int32)
        assert ps == pytest.approx(viterbi(score, T, trans, ref, 0), abs=1e-12)
        np.testing.assert_array_equal(out, ref)


def _reference_batch(codes, cnt, val, lens, sp, w, trans):
    """Labels and path scores of a batch of code sequences, one tag_codes call per sequence."""
    out, ps = np.zeros(int(lens.sum()), np.int32), np.zeros(len(lens))
    t0 = e0 = 0
    for s, T in enumerate(lens.tolist()):
        n = int(cnt[t0 : t0 + T].sum())
        o = np.zeros(T, np.int32)
        ps[s] = tag_codes(
            codes[e0 : e0 + n],
            cnt[t0 : t0 + T],
            val[e0 : e0 + n] if len(val) else val,
            sp.attr_ptr,
            sp.feat_label,
            w,
            trans,
            o,
        )
        out[t0 : t0 + T] = o
        t0 += T
        e0 += n
    return out, ps


@pytest.mark.parametrize("chunks", [1, 3])
def test_batch_kernels_equal_one_call_per_sequence(chunks):
    """tag_codes_seqs (serial) and tag_codes_all (chunks on the thread pool) against tag_codes per
    sequence, empty sequences and tokens without codes included, and the labels against brute
    force."""
    from crfkit.kernels.batch import chunk_bounds, tag_codes_all
    from crfkit.kernels.chain import tag_codes_seqs

    rng = np.random.default_rng(4)
    sp, w = MODEL.space, MODEL.weights
    trans = transition_matrix(w, 1.0, sp.n_state, sp.trans_index)
    for _ in range(30):
        lens = rng.integers(0, 5, size=int(rng.integers(1, 9))).astype(np.int64)
        cnt = rng.integers(0, 4, size=int(lens.sum())).astype(np.int64)
        codes = rng.integers(-1, sp.n_attributes, size=int(cnt.sum())).astype(np.int64)
        val = rng.normal(size=len(codes)) if rng.random() < 0.5 else np.zeros(0)
        seq_ptr = np.concatenate(([0], np.cumsum(lens))).astype(np.int64)
        ent_ptr = np.concatenate(([0], np.cumsum(cnt)))[seq_ptr].astype(np.int64)
        want, want_ps = _reference_batch(codes, cnt, val, lens, sp, w, trans)
        out, ps = np.full(len(cnt), -7, np.int32), np.full(len(lens), np.nan)
        if chunks == 1:
            tag_codes_seqs(
                codes,
                cnt,
                val,
                seq_ptr,
                ent_ptr,
                0,
                len(lens),
                sp.attr_ptr,
                sp.feat_label,
                w,
                trans,
                out,
                ps,
            )
        else:
            tag_codes_all(
                codes,
                cnt,
                val,
                seq_ptr,
                ent_ptr,
                chunk_bounds(seq_ptr, min(chunks, len(lens))),
                sp.attr_ptr,
                sp.feat_label,
                w,
                trans,
                out,
                ps,
            )
        np.testing.assert_array_equal(out, want)
        np.testing.assert_array_equal(ps, want_ps)
        # brute force: the best of every label sequence (the kernel's path attains the maximum
        # score)
        t0 = e0 = 0
        for s, T in enumerate(lens.tolist()):
            if T:
                n = int(cnt[t0 : t0 + T].sum())
                score = np.zeros((T, sp.n_labels))
                e = e0
                for t in range(T):
                    for _ in range(cnt[t0 + t]):
                        if codes[e] >= 0:
                            for k in range(sp.attr_ptr[codes[e]], sp.attr_ptr[codes[e] + 1]):
                                score[t, sp.feat_label[k]] += w[k] * (val[e] if len(val) else 1.0)
                        e += 1
                paths = (
                    np.array(np.meshgrid(*[np.arange(sp.n_labels)] * T, indexing="ij"))
                    .reshape(T, -1)
                    .T
                )
                tot = score[np.arange(T), paths].sum(1) + trans[paths[:, :-1], paths[:, 1:]].sum(1)
                assert ps[s] == pytest.approx(tot.max(), abs=1e-9)
                got = out[t0 : t0 + T]
                assert score[np.arange(T), got].sum() + trans[
                    got[:-1], got[1:]
                ].sum() == pytest.approx(tot.max(), abs=1e-9)
                e0 += n
            t0 += T


def test_large_batches_take_the_batch_kernel_with_the_generic_answers(monkeypatch):
    """Above max_tokens (here 0) tag_dicts goes straight to the batch kernels, serial or in
    chunks."""
    monkeypatch.setenv("CRFKIT_NUMPY_MAX_TOKENS", "0")
    rng = np.random.default_rng(5)
    X = [
        [
            {k: WORDS[int(rng.integers(len(WORDS)))] for k in NAMES[:4]}
            for _ in range(int(rng.integers(0, 6)))
        ]
        for _ in range(150)
    ]
    X[3] = [{"w": 0.5, "pos": "the"}, {"bias": 2, "w[-1]": True}]
    want = MODEL.tag(to_attributes(X))
    for threads in (1, 2, 3):
        m = CRFModel(MODEL.space, MODEL.weights)
        assert m.tag_dicts(X, threads) == want
        assert m.tag_dicts(X, threads) == want  # memo warm


@SETTINGS
@given(st.lists(st.lists(token(), max_size=4), max_size=14), st.integers(1, 5))
def test_chunked_calls_equal_the_generic_path(X, chunk):
    # a call longer than dictenc.CHUNK sequences is encoded a chunk at a time (a cold memo first, so
    # later chunks reuse what earlier ones learned); the codes are the generic path's
    old = dictenc.CHUNK
    dictenc.CHUNK = chunk
    try:
        enc = DictEncoder(MODEL.space)
        c = enc.encode(X)
        again = enc.encode(X)
    finally:
        dictenc.CHUNK = old
    assert c is not None
    ref = encode(to_attributes(X), MODEL.space)
    _same_corpus(c, ref)
    _same_corpus(again, ref)
    assert all(code >= -1 for code in enc.codes_held())  # nothing provisional left in the memo


def test_chunked_call_falls_back_whole():
    # a token of another shape in a later chunk: the whole call falls back (None), and the memo
    # holds only resolved codes
    old = dictenc.CHUNK
    dictenc.CHUNK = 2
    try:
        enc = DictEncoder(MODEL.space)
        X = [[{"w": "the"}], [{"w": "cat"}], [{"pos": "sat"}], [["a", "list"]]]
        assert enc.codes(X) is None
    finally:
        dictenc.CHUNK = old
    assert all(code >= -1 for code in enc.codes_held())
