"""The packed-string hash table (crfkit.kernels.strtable) against a Python dict: the same ids for
every name, -1 for the others, whatever the table's size (small tables: long probe runs), repeated
names (the last id wins) and names with multi-byte characters; a name with a NUL byte is reported
(the caller's other path takes it)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from crfkit.kernels.strtable import MAX_IDS, build_table, lookup_joined, name_hash, split_starts

SETTINGS = settings(max_examples=120, deadline=None, derandomize=True, database=None)

text = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"))


def _pack(names):
    raw = [s.encode("utf-8") for s in names]
    off = np.zeros(len(raw) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in raw], out=off[1:])
    return np.frombuffer(b"".join(raw), dtype=np.uint8).copy(), off


def _lookup(table_names, queries, cap=None):
    blob, off = _pack(table_names)
    if cap is None:
        cap = 1 << max(4, (2 * len(table_names)).bit_length())
    slots = build_table(blob, off, cap)
    buf = np.frombuffer("\x00".join(queries).encode("utf-8"), dtype=np.uint8)
    out = np.full(len(queries), -7, dtype=np.int64)
    k = lookup_joined(buf, len(queries), slots, blob, out) if queries else 0
    return k, out


@SETTINGS
@given(st.lists(text, max_size=40), st.lists(text, max_size=40), st.booleans())
def test_ids_are_those_of_a_dict(table, extra, smallest):
    """Known names get the dict's id (the last of a repeated name), the others -1; with the table
    at its smallest (a power of two above n) most lookups walk long probe runs."""
    index = {s: i for i, s in enumerate(table)}
    queries = [*table, *extra, *reversed(table)]
    cap = 1 << len(table).bit_length() if smallest else None
    k, out = _lookup(table, queries, cap)
    assert k == len(queries)
    assert out.tolist() == [index.get(q, -1) for q in queries]


def test_a_full_table_still_finds_every_name():
    names = [f"a{i}" for i in range(15)]
    k, out = _lookup(names, [*names, "b", "a15", ""], cap=16)
    assert out.tolist() == [*range(15), -1, -1, -1]


def test_a_name_with_a_nul_byte_is_reported():
    k, _ = _lookup(["a", "b"], ["a", "x\x00y", "b"])
    assert k == 4  # more names in the buffer than given: the caller takes the generic path


def test_empty_names_and_multibyte_characters():
    names = ["", "é", "e", "日本", "日", "é:x"]
    k, out = _lookup(names, ["日本", "", "é", "日本語", "e"])
    assert out.tolist() == [3, 0, 1, -1, 2]


def test_split_starts_and_hash_of_equal_bytes():
    buf = np.frombuffer(b"ab\x00\x00cde", dtype=np.uint8)
    st_ = np.zeros(4, dtype=np.int64)
    assert split_starts(buf, 3, st_) == 3
    assert st_.tolist() == [0, 3, 4, 8]
    assert split_starts(buf, 2, np.zeros(3, dtype=np.int64)) == 3
    two = np.frombuffer(b"cdexcde", dtype=np.uint8)
    assert name_hash(two, 0, 3) == name_hash(two, 4, 7)
    assert name_hash(two, 0, 3) != name_hash(two, 0, 2)
    assert MAX_IDS == 1 << 31
