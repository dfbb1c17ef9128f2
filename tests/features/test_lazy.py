"""Lazy, chunked encoding of the training input (issue 18, everyday memory).

``CRF.fit`` and ``crfkit train`` hand :func:`crfkit.features.encode.build` a
:class:`crfkit.features.lazy.LazySequences` that converts feature dicts (or applies templates) a
chunk of sequences at a time; ``build`` encodes each chunk before the next is converted.  The result
must be the same feature space and corpus as the eager path's, whatever the chunk boundaries, with
the same error messages, and the whole input as attribute strings must never exist at once.
"""

from __future__ import annotations

import gc
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import crfkit.features.encode as encode_mod
import crfkit.features.lazy as lazy_mod
from conftest import random_sequences
from crfkit.errors import DataError
from crfkit.features.dicts import LazyAttributes, to_attributes
from crfkit.features.encode import build, encode
from crfkit.features.lazy import LazySequences


def _same_build(a, b):
    (sa, ca), (sb, cb) = a, b
    assert sa.labels == sb.labels
    assert list(sa.attributes) == list(sb.attributes)
    for k in ("attr_ptr", "feat_label", "trans_index"):
        np.testing.assert_array_equal(getattr(sa, k), getattr(sb, k))
    for k in ("seq_ptr", "tok_ptr", "attr", "val", "y"):
        np.testing.assert_array_equal(getattr(ca, k), getattr(cb, k))


def _dicts(rng, n_seq, real=False):
    """Random sklearn-crfsuite style feature dicts: string, bool, int and (optionally) float
    values."""
    X, Y = [], []
    for _ in range(n_seq):
        T = int(rng.integers(1, 6))
        xs = []
        for _t in range(T):
            d = {
                "w": f"v{int(rng.integers(0, 9))}",
                "suf": f"s{int(rng.integers(0, 4))}",
                "up": bool(rng.integers(0, 2)),
                "bias": 1.0,
            }
            if real and rng.random() < 0.3:
                d["len"] = float(rng.integers(-3, 4)) / 2
            xs.append(d)
        X.append(xs)
        Y.append([f"L{int(rng.integers(0, 3))}" for _ in range(T)])
    return X, Y


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of a few sequences, so that tiny corpora span many of them."""
    monkeypatch.setattr(lazy_mod, "CHUNK", 3)
    monkeypatch.setattr(encode_mod, "CHUNK", 4)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n_seq=st.integers(1, 30),
    chunk=st.integers(1, 7),
    flat_chunk=st.integers(1, 9),
    real=st.booleans(),
    support=st.sampled_from(["observed", "all"]),
    min_freq=st.sampled_from([0, 2]),
)
def test_lazy_build_equals_eager(seed, n_seq, chunk, flat_chunk, real, support, min_freq):
    rng = np.random.default_rng(seed)
    X, Y = _dicts(rng, n_seq, real=real)
    eager = build(to_attributes(X), Y, support=support, min_freq=min_freq)
    old = encode_mod.CHUNK
    encode_mod.CHUNK = flat_chunk
    try:
        lazy = LazyAttributes(X)
        lazy._chunk = chunk
        got = build(lazy, Y, support=support, min_freq=min_freq)
        # a plain list, read in chunks too (ids interned chunk by chunk, no strings copied)
        plain = build(to_attributes(X), Y, support=support, min_freq=min_freq)
    finally:
        encode_mod.CHUNK = old
    _same_build(eager, got)
    _same_build(eager, plain)


def test_values_in_some_chunks_only(small_chunks):
    # the first chunks hold only value-1 attributes, a later one a real value: the values array is
    # rebuilt with ones for the chunks that had none
    rng = np.random.default_rng(3)
    X, Y = random_sequences(rng, 12, n_attr=5)
    X = [list(map(list, s)) for s in X]
    X[-1][0].append(("r", 2.5))
    eager = build(X, Y)
    got = build(LazySequences(X, lambda chunk, first: [list(s) for s in chunk], chunk=2), Y)
    _same_build(eager, got)
    assert 2.5 in got[1].val


def test_encode_of_lazy_equals_eager(small_chunks):
    rng = np.random.default_rng(5)
    X, Y = _dicts(rng, 20, real=True)
    space, _ = build(to_attributes(X), Y)
    Xd, Yd = _dicts(np.random.default_rng(6), 11, real=True)
    a = encode(to_attributes(Xd), space, Yd)
    b = encode(LazyAttributes(Xd), space, Yd)
    for k in ("seq_ptr", "tok_ptr", "attr", "val", "y"):
        np.testing.assert_array_equal(getattr(a, k), getattr(b, k))


def test_lazy_sequence_protocol(small_chunks):
    X, _ = _dicts(np.random.default_rng(1), 8)
    lazy = LazyAttributes(X)
    full = to_attributes(X)
    assert len(lazy) == 8
    assert list(lazy) == full
    assert lazy[0] == full[0] and lazy[-1] == full[-1] and lazy[2:5] == full[2:5]
    with pytest.raises(IndexError):
        lazy[8]
    with pytest.raises(IndexError):
        lazy[-9]
    sub = lazy.take([5, 1])
    assert list(sub) == [full[5], full[1]]
    assert [len(c) for c in lazy.chunks()] == [3, 3, 2]


def test_progress_advances_per_chunk(small_chunks):
    seen = []

    class Bar:
        def __init__(self, desc, total):
            self.total, self.n = total, 0

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            seen.append((self.total, self.n))

        def update(self, n):
            self.n += n

    lazy = LazySequences(
        list(range(7)),
        lambda chunk, first: [x * 2 for x in chunk],
        progress=lambda: Bar("features", 7),
    )
    assert list(lazy) == [x * 2 for x in range(7)]
    assert seen == [(7, 7)]
    assert [len(c) for c in lazy.iter_chunks()] == [3, 3, 1]
    assert seen[-1] == (7, 7)


def test_errors_name_the_sequence_of_the_whole_input(small_chunks):
    X, Y = _dicts(np.random.default_rng(2), 10)
    X[7][1]["bad"] = None
    with pytest.raises(DataError) as e:
        build(LazyAttributes(X, name="X_train"), Y)
    assert "sequence 7, token 1" in str(e.value) and "X_train" in str(e.value)
    X2, Y2 = _dicts(np.random.default_rng(2), 10)
    X2[8][0] = {"big": 1e300}
    with pytest.raises(DataError) as e:
        build(LazyAttributes(X2), Y2)
    assert "sequence 8, token 0" in str(e.value)


def test_bad_shape_is_refused_at_once():
    with pytest.raises(DataError, match="sequence 1 is a str"):
        LazyAttributes([[{"a": "x"}], "oops"])


def test_index_keeps_copies_not_the_chunks_strings(small_chunks):
    # the attribute names the feature space keeps are not the objects of the (transient) chunks
    made = []

    def convert(chunk, first):
        out = [[[f"a:{t}" for t in tok] for tok in seq] for seq in chunk]
        made.extend(s for seq in out for tok in seq for s in tok)
        return out

    X = [[["x", "y"], ["x"]], [["z"]], [["y", "w"]], [["x"]], [["q"]]]
    space, corpus = build(
        LazySequences(X, convert, chunk=2), [["A", "B"], ["A"], ["B"], ["A"], ["B"]]
    )
    assert list(space.attributes) == ["a:x", "a:y", "a:z", "a:w", "a:q"]
    ids_made = {id(s) for s in made}
    assert not any(id(a) in ids_made for a in space.attributes)


def test_whole_input_as_strings_never_exists(monkeypatch):
    # The peak of Python memory while building from a lazy input stays well below the size of the
    # input converted whole (what the eager path held on top of the dicts).
    rng = np.random.default_rng(0)
    X, Y = _dicts(rng, 3000)
    monkeypatch.setattr(lazy_mod, "CHUNK", 100)
    monkeypatch.setattr(encode_mod, "CHUNK", 100)
    gc.collect()
    tracemalloc.start()
    try:
        whole = to_attributes(X)
        full_size = tracemalloc.get_traced_memory()[0]
        del whole
        gc.collect()
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        build(LazyAttributes(X), Y)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert full_size > 1_000_000
    assert peak < 0.5 * full_size, (peak, full_size)


def test_fit_reads_the_input_lazily(monkeypatch):
    # CRF.fit hands build a lazy view, not a converted list
    import crfkit.train as train_mod
    from crfkit import CRF

    seen = {}
    real_build = train_mod.build

    def spy(X, Y, **kw):
        seen["type"] = type(X)
        return real_build(X, Y, **kw)

    import crfkit.training.driver as driver_mod  # where the driver reads build

    monkeypatch.setattr(driver_mod, "build", spy)
    X, Y = _dicts(np.random.default_rng(4), 20)
    crf = CRF(max_iterations=3).fit(X, Y)
    assert seen["type"] is LazySequences
    ref_model = train_mod.train(to_attributes(X), Y, max_iterations=3)
    np.testing.assert_allclose(crf.model_.weights, ref_model.model.weights)


def test_once_releases_the_items_after_one_pass():
    lazy = LazySequences(list(range(5)), lambda chunk, first: list(chunk), chunk=2, once=True)
    assert lazy[3] == 3  # single items before the pass
    assert list(lazy) == [0, 1, 2, 3, 4]
    assert len(lazy) == 5 and lazy._items is None
    with pytest.raises(RuntimeError, match="read once"):
        list(lazy)
    with pytest.raises(RuntimeError, match="read once"):
        lazy[0]


def _column_file(tmp_path, n=30, seed=0):
    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(n):
        for _t in range(int(rng.integers(1, 7))):
            w = f"w{int(rng.integers(0, 12))}"
            lines.append(f"{w} P{int(rng.integers(0, 3))} {'B' if rng.random() < 0.4 else 'I'}-NP")
        lines.append("")
    p = tmp_path / "train.txt"
    p.write_text("\n".join(lines) + "\n")
    return p


def test_templates_applied_lazily_equal_eager(tmp_path, small_chunks):
    from crfkit.features.templates import default_chunking_templates
    from crfkit.pipeline import load_columns

    path = _column_file(tmp_path)
    tpl = default_chunking_templates()
    X, Y, _ = load_columns(str(path), tpl)
    Xl, Yl, _ = load_columns(str(path), tpl, lazy=True, once=True)
    assert isinstance(Xl, LazySequences) and Yl == Y
    _same_build(build(X, Y), build(Xl, Yl))
    assert Xl._items is None  # once: the sentences were dropped after the build's pass


def test_train_columns_model_equals_eager(tmp_path):
    # crfkit train's path (lazy templates, labels copied, sentences dropped) trains the same model
    # as the attribute lists given whole
    from crfkit.features.templates import default_chunking_templates
    from crfkit.io.columns import read_columns_list
    from crfkit.pipeline import attributes_of, train_columns
    from crfkit.train import train

    path = _column_file(tmp_path, n=40, seed=1)
    tpl = default_chunking_templates()
    res = train_columns(str(path), tpl, max_iterations=5)
    sents = read_columns_list(str(path))
    ref = train(
        attributes_of(sents, tpl), [s.labels for s in sents], max_iterations=5, transitions=None
    )
    assert list(res.model.space.attributes) == list(ref.model.space.attributes)
    np.testing.assert_allclose(res.model.weights, ref.model.weights)


@pytest.mark.parametrize("support", ["observed", "all"])
def test_lazy_bigram_attributes_build_as_eager(tmp_path, small_chunks, support):
    # label pair x observation attributes (a Wapiti * pattern) read lazily, a chunk of sentences at
    # a time (crfkit train's path): the same bigram space and arrays as the lists given whole
    from crfkit.features.templates import Templates
    from crfkit.io.columns import read_columns_list
    from crfkit.pipeline import attributes_of, bigram_attributes_of

    sents = read_columns_list(str(_column_file(tmp_path, n=25, seed=4)))
    tpl = Templates.parse("U00:%x[0,0]\n*01:%x[-1,0]/%x[0,1]\nB\n", name="t.pat")
    Y = [s.labels for s in sents]
    X, B = attributes_of(sents, tpl), bigram_attributes_of(sents, tpl)
    Bl = bigram_attributes_of(sents, tpl, lazy=True, once=True)
    assert isinstance(Bl, LazySequences)
    (sa, ca), (sb, cb) = build(X, Y, B=B, support=support), build(X, Y, B=Bl, support=support)
    _same_build((sa, ca), (sb, cb))
    assert list(sa.battributes) == list(sb.battributes) and len(sa.battributes) > 3
    for k in ("battr_ptr", "bfeat_pair"):
        np.testing.assert_array_equal(getattr(sa, k), getattr(sb, k))
    for a, b in zip(ca.bigram_arrays(), cb.bigram_arrays()):
        np.testing.assert_array_equal(a, b)
    assert Bl._items is None
    with pytest.raises(DataError, match="bigram attributes"):  # a shape mismatch is still refused
        build(X, Y, B=bigram_attributes_of(sents[:-1] + [sents[0]], tpl, lazy=True))


# --------------------------------------------------------------------------- a corpus of ones
# stores no values
def test_corpus_of_ones_stores_no_values():
    import pickle

    from crfkit.corpus import Corpus

    c = Corpus(seq_ptr=[0, 2], tok_ptr=[0, 2, 3], attr=[0, 1, 0], val=None, y=[0, 1])
    assert len(c.raw_val) == 0 and c.all_ones and "val" not in c.__dict__
    c2 = pickle.loads(pickle.dumps(c))
    assert len(c2.raw_val) == 0
    np.testing.assert_array_equal(c.val, [1.0, 1.0, 1.0])  # made on first use, then kept
    assert c.raw_val is c.val and c.all_ones
    np.testing.assert_array_equal(c2.val, c.val)
    with pytest.raises(AttributeError):
        c.nonexistent


def test_build_leaves_binary_corpora_without_values():
    X, Y = _dicts(np.random.default_rng(9), 15)
    _, corpus = build(to_attributes(X), Y)
    assert len(corpus.raw_val) == 0
    Xr, Yr = _dicts(np.random.default_rng(9), 15, real=True)
    _, corpus_r = build(to_attributes(Xr), Yr)
    assert len(corpus_r.raw_val) == corpus_r.tok_ptr[-1]


@pytest.mark.parametrize("bigram", [False, True])
def test_full_batch_objective_same_with_and_without_stored_ones(bigram):
    # the full-batch kernels read an empty val as all ones: the objective, gradient and empirical
    # counts equal those of the same corpus with its array of ones made, and training never makes
    # the array
    from crfkit.corpus import Corpus
    from crfkit.objective import Objective, regularization

    rng = np.random.default_rng(11)
    X, Y = random_sequences(rng, 25, n_attr=7, max_attrs=3)
    B = [[[f"b{a}" for a in tok] for tok in seq] for seq in X] if bigram else None
    space, lean = build(X, Y, B=B)
    assert len(lean.raw_val) == 0
    full = Corpus(
        lean.seq_ptr,
        lean.tok_ptr,
        lean.attr,
        np.ones(len(lean.attr)),
        lean.y,
        btok_ptr=lean.btok_ptr,
        battr=lean.battr,
        bval=lean.bval,
    )
    reg = regularization(lean.n_sequences, c2=1.0)
    w = rng.normal(scale=0.5, size=space.n_features)
    big = w * 400.0  # past the exp-domain bound: the log-domain emissions read val
    for x in (w, big):
        a = Objective(lean, space, reg).value_and_grad(x)
        b = Objective(full, space, reg).value_and_grad(x)
        np.testing.assert_allclose(a[0], b[0], rtol=1e-12)
        np.testing.assert_allclose(a[1], b[1], rtol=1e-10, atol=1e-12)
    from crfkit.train import train_corpus

    train_corpus(space, lean, reg=reg, max_iterations=3)
    assert "val" not in lean.__dict__


def test_checkpoint_fingerprint_unchanged_by_stored_ones():
    from crfkit.checkpoint import fingerprint
    from crfkit.corpus import Corpus

    X, Y = random_sequences(np.random.default_rng(12), 30, n_attr=5)
    space, lean = build(X, Y)
    full = Corpus(lean.seq_ptr, lean.tok_ptr, lean.attr, np.ones(len(lean.attr)), lean.y)
    assert fingerprint(space, lean) == fingerprint(space, full)
    assert "val" not in lean.__dict__


def test_release_memory_is_safe_to_call():
    import sys

    from crfkit import memtrim

    r = memtrim.release_memory()
    assert isinstance(r, bool)
    if not sys.platform.startswith("linux"):
        assert r is False


def test_train_releases_memory_after_training(monkeypatch):
    import crfkit.train as train_mod
    from crfkit import memtrim

    calls = []
    monkeypatch.setattr(memtrim, "release_memory", lambda: calls.append(1) or True)
    X, Y = random_sequences(np.random.default_rng(13), 10)
    train_mod.train(X, Y, max_iterations=2)
    assert calls == [
        1,
        1,
    ]  # once the corpus is encoded (the encoding's temporaries), once after training


def test_consume_lets_each_chunk_go_as_it_is_converted():
    """consume(): the items list is the lazy sequence's alone; the one pass lets each chunk's items
    go once converted (crfkit train's sentences), so a chunk never sees an earlier one's items."""
    items = [[i] for i in range(7)]
    seen = []

    def convert(chunk, first):
        seen.append(sum(x is None for x in items))  # items already let go when this chunk runs
        return [x[0] for x in chunk]

    lazy = LazySequences(items, convert, chunk=3, once=True).consume()
    assert list(lazy) == list(range(7))
    assert seen == [0, 3, 6]
    assert items == [None] * 7 and lazy._items is None
    with pytest.raises(ValueError, match="once=True"):
        LazySequences([1], convert).consume()


def test_train_columns_consumes_the_sentences_unless_bigram_observations_read_them(
    tmp_path, monkeypatch
):
    from crfkit.features.templates import Templates, default_chunking_templates
    from crfkit.pipeline import train_columns

    calls = []
    real = LazySequences.consume

    def spy(self):
        calls.append(self)
        return real(self)

    monkeypatch.setattr(LazySequences, "consume", spy)
    path = _column_file(tmp_path, n=20, seed=2)
    train_columns(str(path), default_chunking_templates(), max_iterations=2)
    assert len(calls) == 1
    calls.clear()
    train_columns(str(path), Templates.parse("U00:%x[0,0]\nB00:%x[0,1]\n"), max_iterations=2)
    assert calls == []  # B reads the sentences after X: they stay whole until both are done
