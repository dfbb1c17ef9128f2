"""The packed attribute table of a loaded model (crfkit.model.StringTable): the ids it finds are a
dict's."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crfkit.features import space as M
from crfkit.features.space import StringTable
from crfkit.features.space import pack_strings as _pack_strings
from crfkit.model import CRFModel, FeatureSpace

TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20)


def _table(strings):
    blob, lens = _pack_strings(strings)
    return StringTable(blob, lens)


def _ref(strings, names):
    d = {a: i for i, a in enumerate(strings)}
    return np.array([d.get(n, -1) for n in names], dtype=np.int64)


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(st.lists(TEXT, max_size=60), st.lists(TEXT, max_size=30), st.integers(0, 3))
def test_ids_equal_a_dicts(strings, extra, reps):
    t = _table(strings)
    names = (list(strings[: len(strings) // 2]) + extra) * (reps + 1)
    np.testing.assert_array_equal(t.ids(names), _ref(strings, names))
    assert t == strings and strings == t and len(t) == len(strings) and list(t) == strings


def test_probe_path_is_taken_and_agrees():
    strings = [f"w[0]={i}" for i in range(5000)] + ["é", "日本", "", "a\x00b", "a"]
    t = _table(strings)
    names = ["w[0]=17", "é", "日本", "", "a\x00b", "nope", "w[0]=4999", "a", "\udc80", "w[0]=17"]
    got = t.ids(names)
    assert t._dict is None and t._list is None  # answered by the hashes, no dict, no strings
    np.testing.assert_array_equal(got, _ref(strings, names))
    # asked again: the sorted hashes answer again (no dict); the lone surrogate above sent that
    # first call down the per-name probe
    for more in (
        [x for x in names[::-1] if x != "\udc80"],
        ["w[0]=1", "w[0]=1", "x"],
        [],
        ["日本"],
    ):
        np.testing.assert_array_equal(t.ids(more), _ref(strings, more))
    assert t._dict is None and t._list is None
    assert "日本" in t and "zz" not in t


def test_sorted_probe_checks_bytes_and_lengths(monkeypatch):
    # names of one byte length hash alike: only the byte comparison tells them apart; a table
    # without equal hashes is needed for the sorted path (distinct byte lengths)
    monkeypatch.setattr(
        M, "_packed_hashes", lambda blob, lens: np.asarray(lens, dtype=np.uint64).copy()
    )
    strings = ["", "a", "bc", "déf", "ghijk"]
    t = _table(strings)
    names = ["bc", "xy", "a", "b", "", "déf", "dxf", "ghijk", "ghiJk", "bc"]
    got = t._sorted_probe(names)
    assert got is not None
    np.testing.assert_array_equal(got, _ref(strings, names))
    # equal hashes in the table: settled name by name, the last of equal strings winning
    strings = ["ab", "cd", "ab", "xyz", "q"]
    names = ["ab", "cd", "ef", "xyz", "xy", "q", "ab"]
    got = _table(strings)._sorted_probe(names)
    assert got is not None
    np.testing.assert_array_equal(got, _ref(strings, names))


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(st.lists(TEXT, max_size=40), st.lists(TEXT, max_size=30), st.integers(1, 4))
def test_sorted_probe_with_colliding_hashes_equals_a_dict(strings, extra, m):
    """Hashes that collide on purpose (a byte length modulo ``m``): the sorted path still gives a
    dict's ids, duplicates' last id included."""
    real = M._packed_hashes
    M._packed_hashes = lambda blob, lens: (np.asarray(lens) % m).astype(np.uint64)
    try:
        t = _table(strings)
        names = list(strings[::2]) + extra
        got = t._sorted_probe(names)
    finally:
        M._packed_hashes = real
    assert got is not None
    np.testing.assert_array_equal(got, _ref(strings, names))


def test_every_hash_colliding_still_gives_the_right_ids(monkeypatch):
    monkeypatch.setattr(M, "_packed_hashes", lambda blob, lens: np.zeros(len(lens), np.uint64))
    strings = ["a", "b", "ab", "ba", "b"]  # a duplicate: the last id wins, as in a dict
    t = _table(strings)
    names = ["b", "ab", "x", "a"]
    np.testing.assert_array_equal(t.ids(names), _ref(strings, names))
    np.testing.assert_array_equal(t.ids(names[1:]), _ref(strings, names[1:]))  # the dict


def test_no_hashes_for_very_long_strings_falls_back_to_the_dict():
    strings = ["x" * 100_000] + [f"s{i}" for i in range(300)]  # a 301 x 100,000 padded matrix: no
    t = _table(strings)
    assert M._packed_hashes(t._blob, t._lens) is None
    np.testing.assert_array_equal(t.ids(["s3", "x" * 100_000, "q"]), [4, 0, -1])


def test_many_names_use_the_dict():
    strings = [f"k{i}" for i in range(100)]
    t = _table(strings)
    np.testing.assert_array_equal(
        t.ids(strings[::-1] + ["z"]), _ref(strings, strings[::-1] + ["z"])
    )
    assert t._dict is not None


def test_invalid_utf8_is_refused_when_built():
    with pytest.raises(ValueError):
        StringTable(np.frombuffer(b"a\xffb", np.uint8), np.array([1, 2]))
    with pytest.raises(ValueError, match="inside a UTF-8 character"):
        StringTable(np.frombuffer("é".encode(), np.uint8), np.array([1, 1]))


def test_loaded_model_tags_as_the_saved_one(tmp_path):
    rng = np.random.default_rng(0)
    attrs = [f"a{i}" for i in range(300)] + ["ü", "∑x"]
    L = 3
    space = FeatureSpace(
        labels=["A", "B", "C"],
        attributes=attrs,
        attr_ptr=np.arange(len(attrs) + 1, dtype=np.int64) * L,
        feat_label=np.tile(np.arange(L, dtype=np.int32), len(attrs)),
        trans_index=np.arange(L * L, dtype=np.int32).reshape(L, L),
    )
    m = CRFModel(space, rng.normal(size=space.n_features))
    m.save(tmp_path / "m.crfkit")
    m2 = CRFModel.load(tmp_path / "m.crfkit")
    assert isinstance(m2.space.attributes, StringTable)
    X = [[["a1", "ü", "zz"], ["∑x"], []], [["a299", "a7"]]]
    assert m2.tag(X) == m.tag(X)
    assert m2.space.attributes == attrs
    again = pickle.loads(pickle.dumps(m2.space))
    assert again.attributes == attrs and again.attribute_ids(["a5", "q"]).tolist() == [5, -1]


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(st.lists(TEXT, max_size=40), st.data())
def test_take_slices_the_packed_bytes(strings, data):
    t = _table(strings)
    idx = data.draw(
        st.lists(st.integers(0, max(len(strings) - 1, 0)), max_size=50) if strings else st.just([])
    )
    sub = t.take(idx)
    assert isinstance(sub, StringTable) and sub == [strings[i] for i in idx]
    assert t._list is None  # the source table made no Python strings
    blob, lens = t.packed()
    assert (blob.tobytes(), lens.tolist()) == (
        b"".join(s.encode() for s in strings),
        [len(s.encode()) for s in strings],
    )


def test_model_with_a_packed_table_prunes_and_saves_as_with_the_list(tmp_path):
    """A space whose attribute names are a StringTable (what a Dask client holds) prunes, saves and
    loads to the model the list of strings gives, without turning the table into strings."""
    rng = np.random.default_rng(1)
    attrs = [f"w={i}" for i in range(200)] + ["ü", "∑x", ""]
    L = 3
    kw = dict(
        labels=["A", "B", "C"],
        attr_ptr=np.arange(len(attrs) + 1, dtype=np.int64) * L,
        feat_label=np.tile(np.arange(L, dtype=np.int32), len(attrs)),
        trans_index=np.arange(L * L, dtype=np.int32).reshape(L, L),
    )
    w = rng.normal(size=len(attrs) * L + L * L)
    w[: len(attrs) * L][rng.random(len(attrs) * L) < 0.6] = (
        0.0  # many attributes lose every feature
    )
    table = _table(attrs)
    ref = CRFModel(FeatureSpace(attributes=attrs, **kw), w)
    packed = CRFModel(FeatureSpace(attributes=table, **kw), w)
    (s1, w1), (s2, w2) = ref.space.prune(w), packed.space.prune(w)
    assert (
        isinstance(s2.attributes, StringTable)
        and s2.attributes == s1.attributes
        and table._list is None
    )
    np.testing.assert_array_equal(w1, w2)
    ref.save(tmp_path / "a.crfkit")
    packed.save(tmp_path / "b.crfkit")
    assert table._list is None
    a, b = CRFModel.load(tmp_path / "a.crfkit"), CRFModel.load(tmp_path / "b.crfkit")
    assert a.space.attributes == b.space.attributes and a.space.labels == b.space.labels
    np.testing.assert_array_equal(a.weights, b.weights)
    np.testing.assert_array_equal(a.space.feat_label, b.space.feat_label)


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(st.lists(TEXT, max_size=40), st.booleans())
def test_unpack_by_split_and_by_slices_agree(strings, nul):
    """unpack_strings cuts by str.split when no string holds a NUL, by slices otherwise: both give
    the packed strings back."""
    if nul:
        strings = strings + ["a\x00b"]
    blob, lens = _pack_strings(strings)
    assert M.unpack_strings(blob, lens) == strings


def test_unpack_refuses_a_string_starting_inside_a_character_on_the_split_path():
    blob, lens = _pack_strings(["é", "ab"])  # c3 a9 | 61 62
    with pytest.raises(ValueError, match="inside a UTF-8 character"):
        M.unpack_strings(blob, np.array([1, 3]))  # the second string starts at a9
