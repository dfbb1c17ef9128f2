"""CRFsuite attribute files: reading, escaping, errors, writing, round trip."""

from __future__ import annotations

import gzip
import io
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crfkit.errors import DataError, DataWarning
from crfkit.io.crfsuite import (
    AttributeSequence,
    escape,
    format_attribute,
    looks_like_crfsuite,
    parse_attribute,
    read_crfsuite,
    read_crfsuite_list,
    unescape,
    write_crfsuite,
)


def read_text(text: str, **kw) -> list[AttributeSequence]:
    return read_crfsuite_list(io.StringIO(text), name="f.txt", **kw)


def bad(text: str, match: str, line: int | None, **kw) -> DataError:
    with pytest.raises(DataError, match=match) as ei:
        read_text(text, **kw)
    e = ei.value
    assert e.path == "f.txt"
    assert e.line == line
    if line is not None:
        assert str(e).startswith(f"f.txt:{line}: ")
    return e


# --------------------------------------------------------------------------- reading


def test_reads_labels_attributes_weights_and_sequences():
    text = (
        "B-NP\tw[0]=He\tpos[0]=PRP\t__BOS__\nB-VP\tw[0]=reckons\tlen:7\tscale:-0.5\n\nO\tw[0]=.\n"
    )
    seqs = read_text(text)
    assert len(seqs) == 2
    a, b = seqs
    assert a.labels == ["B-NP", "B-VP"] and a.line == 1 and a.weight == 1.0
    assert a.attributes == [
        ["w[0]=He", "pos[0]=PRP", "__BOS__"],
        ["w[0]=reckons", ("len", 7.0), ("scale", -0.5)],
    ]
    assert b.labels == ["O"] and b.attributes == [["w[0]=."]] and b.line == 4
    assert len(a) == 2


def test_escapes_and_lone_backslashes():
    # \: is a colon, \\ a backslash; the first unescaped colon starts the weight;
    # a backslash before anything else is literal (as CRFsuite reads CoNLL's 1\/2)
    text = "L\\:X\ta\\:b\tc\\\\d\tw[0]=1\\/2\te\\\\:2\tf\\:g:3\th\\\n"
    (s,) = read_text(text)
    assert s.labels == ["L:X"]
    assert s.attributes == [["a:b", "c\\d", "w[0]=1\\/2", ("e\\", 2.0), ("f:g", 3.0), "h\\"]]


def test_strict_mode_refuses_lone_backslashes():
    bad("L\tw[0]=1\\/2\n", "lone backslash inside", 1, strict=True)
    bad("L\ta\n\nL\tb\\\n", "lone backslash at the end", 3, strict=True)
    (s,) = read_text("L\ta\\:b\tc\\\\\n", strict=True)
    assert s.attributes == [["a:b", "c\\"]]


def test_item_with_only_a_label_and_empty_fields():
    (s,) = read_text("A\nB\t\tx\t\nC\t\n")
    assert s.labels == ["A", "B", "C"]
    assert s.attributes == [[], ["x"], []]


def test_blank_lines_crlf_missing_final_newline_and_hash():
    text = "\n\n \t \nA\tx\r\nB\ty:2\r\n\r\n\n  \n#\tz\n# \tw"
    seqs = read_text(text)
    assert [s.labels for s in seqs] == [["A", "B"], ["#", "# "]]
    assert seqs[0].attributes == [["x"], [("y", 2.0)]]
    assert seqs[0].line == 4 and seqs[1].line == 9
    assert seqs[1].attributes == [["z"], ["w"]]


def test_explicit_weights_read_as_pairs_empty_weight_is_one():
    (s,) = read_text("L\ta:1\tb:\tc:+1.5e2\td:.5\te:-0\n")
    assert s.attributes == [[("a", 1.0), ("b", 1.0), ("c", 150.0), ("d", 0.5), ("e", 0.0)]]
    assert all(isinstance(a, tuple) for a in s.attributes[0])


@pytest.mark.parametrize(
    "field, match",
    [
        ("a:xyz", "weight 'xyz' is not a number"),
        ("a:1,5", "not a number"),
        ("a:0x10", "not a number"),
        ("a: 1", "not a number"),
        ("a:inf", "not a number"),
        ("a:nan", "not a number"),
        ("a:1e999", "not finite"),
        ("a:1:2", "more than one unescaped ':'"),
        (":2", "empty name"),
    ],
)
def test_bad_attributes_name_file_and_line(field, match):
    bad(f"L\tok\n\nL\tok\tx\n{'L'}\t{field}\n", match, 4)


def test_bad_lines():
    bad("A\tx\n\tx\n", "starts with a TAB", 2)
    bad("A:1\tx\n", "label 'A:1' holds an unescaped ':'", 1)
    bad("@foo\nA\tx\n", "unrecognized declaration '@foo'", 1)
    bad("@weight\nA\tx\n", "needs a value", 1)
    bad("@weight:abc\nA\tx\n", "not a number", 1)
    bad("@weight:-1\nA\tx\n", "negative", 1)
    bad("@weight:2\tx\nA\tx\n", "line of its own", 1)
    bad("A\tx\n@weight:2\n@weight:3\n", "second @weight", 3)
    bad("A\tx\n\n@weight:2\n\nB\ty\n", "no items after it", 3)
    bad("A\tx\n\n@weight:2\n", "no items after it", 3)
    bad("", "empty input", None)
    bad("\n\n  \n", "empty input", None)


def test_weight_declaration():
    seqs = read_text("@weight:2.5\nA\tx\nB\ty\n\nC\tz\n@weight:0\n")
    assert [s.weight for s in seqs] == [2.5, 0.0]
    assert seqs[0].line == 2


def test_invalid_utf8_names_the_line(tmp_path):
    p = tmp_path / "bad.txt"
    p.write_bytes(b"A\tx\nB\t\xff\n")
    with pytest.raises(DataError, match=r"bad.txt:2: invalid UTF-8"):
        read_crfsuite_list(p)


def test_missing_file_is_a_data_error(tmp_path):
    with pytest.raises(DataError, match="cannot open"):
        read_crfsuite_list(tmp_path / "nope.txt")


def test_streaming_yields_before_a_later_error(tmp_path):
    p = tmp_path / "f.txt.gz"
    with gzip.open(p, "wt", encoding="utf-8") as f:
        f.write("A\tx\n\nB\ty:oops\n")
    it = read_crfsuite(p)
    first = next(it)
    assert first.labels == ["A"]
    with pytest.raises(DataError, match=r"f.txt.gz:3: .*oops"):
        next(it)


def test_reads_binary_streams_and_stdin(monkeypatch):
    (s,) = read_crfsuite_list(io.BytesIO("\ufeffÄ\tö:2\n".encode("utf-8")))
    assert s.labels == ["Ä"] and s.attributes == [[("ö", 2.0)]]

    class FakeStdin:
        buffer = io.BytesIO(b"A\tx\n")

    monkeypatch.setattr("sys.stdin", FakeStdin())
    (s,) = read_crfsuite_list("-")
    assert s.labels == ["A"]


# --------------------------------------------------------------------------- escaping helpers


def test_escape_unescape_parse_format():
    assert escape("a:b\\c") == "a\\:b\\\\c"
    assert unescape("a\\:b\\\\c") == "a:b\\c"
    assert unescape("a\\b") == "a\\b"
    with pytest.raises(DataError, match="unescaped"):
        unescape("a:b")
    with pytest.raises(DataError, match="lone backslash"):
        unescape("a\\b", strict=True)
    assert parse_attribute("x\\:y:2") == ("x:y", 2.0)
    assert parse_attribute("x\\:y") == "x:y"
    assert format_attribute(("x:y", 2)) == "x\\:y:2.0"
    assert format_attribute("a\\") == "a\\\\"
    assert format_attribute(("a", 1e-5)) == "a:1e-05"


# --------------------------------------------------------------------------- writing


def test_writer_escapes_and_writes_weights(tmp_path):
    seqs = [AttributeSequence([["a:b", ("c\\", 0.25)], []], ["L:1", "M"], weight=2.0)]
    p = tmp_path / "out.txt"
    assert write_crfsuite(seqs, p) == 1
    assert p.read_text() == "@weight:2.0\nL\\:1\ta\\:b\tc\\\\:0.25\nM\n\n"
    back = read_crfsuite_list(p, strict=True)
    assert back[0].attributes == seqs[0].attributes and back[0].labels == seqs[0].labels
    assert back[0].weight == 2.0


def test_writer_plain_sequences_labels_dummy_and_gz(tmp_path):
    X = [[["a", ("b", 2)], ["c"]], [["d"]]]
    p = tmp_path / "out.txt.gz"
    assert write_crfsuite(X, p, [["A", "B"], ["C"]]) == 2
    with gzip.open(p, "rt") as f:
        assert f.read() == "A\ta\tb:2.0\nB\tc\n\nC\td\n\n"
    buf = io.StringIO()
    write_crfsuite(X, buf, dummy_label="_")
    assert buf.getvalue() == "_\ta\tb:2.0\n_\tc\n\n_\td\n\n"
    with pytest.raises(ValueError, match="need labels"):
        write_crfsuite(X, io.StringIO())
    with pytest.raises(ValueError, match="not both"):
        write_crfsuite(X, io.StringIO(), [["A", "B"], ["C"]], dummy_label="_")


@pytest.mark.parametrize(
    "X, Y, match",
    [
        ([[["a\tb"]]], [["L"]], "TAB or a line break"),
        ([[["a"]]], [["L\n"]], "TAB or a line break"),
        ([[[""]]], [["L"]], "empty attribute name"),
        ([[[("", 1.0)]]], [["L"]], "non-empty string"),
        ([[["a"]]], [["  "]], "only spaces"),
        ([[["a"]]], [[""]], "only spaces"),
        ([[["a"]]], [["@x"]], "starts with '@'"),
        ([[[("a", math.inf)]]], [["L"]], "non-finite"),
        ([[[("a", "x")]]], [["L"]], "not a number"),
        ([[["a"], ["b"]]], [["L"]], "2 items but 1 labels"),
        ([[]], [[]], "empty"),
        ([[["a"]], [["b"]]], [["L"]], "labels given for 1 sequences"),
        ([[["a"]]], [["L"], ["M"]], "more than the 1 sequences"),
        ([["ab"]], [["L"]], "must be a list"),
    ],
)
def test_writer_refuses_what_would_not_read_back(X, Y, match):
    with pytest.raises(DataError, match=match):
        write_crfsuite(X, io.StringIO(), Y)


# --------------------------------------------------------------------------- round trip (property)

# names: any unicode but TAB / line breaks, with ':' and '\\' made frequent
_name_chars = st.one_of(
    st.sampled_from([":", "\\", "a", " ", "=", "@", "#"]),
    st.characters(blacklist_characters="\t\n\r", blacklist_categories=("Cs",)),
)
names = st.text(_name_chars, min_size=1, max_size=8)
labels = st.text(
    st.one_of(
        st.sampled_from([":", "\\", "B", "-", " "]),
        st.characters(blacklist_characters="\t\n\r\ufeff", blacklist_categories=("Cs",)),
    ),
    min_size=1,
    max_size=6,
).filter(lambda s: s.strip(" ") and not s.startswith("@"))
weights = st.floats(allow_nan=False, allow_infinity=False)
attributes = st.one_of(names, st.tuples(names, weights))
sequences = st.lists(
    st.builds(
        lambda toks, w: AttributeSequence([t for t, _ in toks], [lab for _, lab in toks], weight=w),
        st.lists(st.tuples(st.lists(attributes, max_size=5), labels), min_size=1, max_size=5),
        st.one_of(st.just(1.0), st.floats(min_value=0, max_value=1e6, allow_nan=False)),
    ),
    min_size=1,
    max_size=4,
)


@settings(max_examples=150, deadline=None)
@given(sequences)
def test_round_trip(seqs):
    buf = io.StringIO()
    write_crfsuite(seqs, buf)
    text = buf.getvalue()
    back = read_crfsuite_list(io.BytesIO(text.encode("utf-8")), strict=True)
    lenient = read_crfsuite_list(io.StringIO(text))  # the fast paths of the default mode
    assert [(b.attributes, b.labels, b.weight, b.line) for b in lenient] == [
        (b.attributes, b.labels, b.weight, b.line) for b in back
    ]
    assert len(back) == len(seqs)
    for a, b in zip(seqs, back):
        assert b.labels == a.labels
        assert b.weight == a.weight
        assert len(b.attributes) == len(a.attributes)
        for ta, tb in zip(a.attributes, b.attributes):
            assert len(ta) == len(tb)
            for x, y in zip(ta, tb):
                if isinstance(x, str):
                    assert y == x
                else:
                    assert isinstance(y, tuple) and y[0] == x[0] and y[1] == x[1]
                    assert math.copysign(1, y[1]) == math.copysign(1, x[1])
    # writing what was read gives the same text back
    again = io.StringIO()
    write_crfsuite(back, again)
    assert again.getvalue() == text


# --------------------------------------------------------------------------- format detection


def test_format_detection_rule():
    conll = ["Confidence NN B-NP\n", "in IN B-PP\n", "\n", "the DT B-NP\n"]
    assert not looks_like_crfsuite(conll)
    tabbed_columns = ["Confidence\tNN\tB-NP\n", "in\tIN\tB-PP\n", "\n", "the\tDT\tB-NP\n"]
    assert not looks_like_crfsuite(tabbed_columns)
    crfsuite = ["B-NP\tw[0]=Confidence\tpos[0]=NN\t__BOS__\n", "B-PP\tw[0]=in\tpos[0]=IN\n", "\n"]
    assert looks_like_crfsuite(crfsuite)
    same_count_marked = ["A\tw=a\tp=x\n", "B\tw=b\tp=y\n"]
    assert looks_like_crfsuite(same_count_marked)
    weighted = ["A\tx:1\ty:2\n", "B\tx:0.5\tz:1\n"]
    assert looks_like_crfsuite(weighted)
    ragged_tabs = ["A\tx\n", "B\tx\ty\n"]
    assert looks_like_crfsuite(ragged_tabs)
    assert not looks_like_crfsuite(["A\tx\n", "B\n"])  # a line without a TAB
    assert not looks_like_crfsuite([])


def test_cr_only_attribute_file_too(tmp_path):
    X = [[["a", ("b", 0.5)], ["c"]], [["d"]]]
    Y = [["L1", "L2"], ["L1"]]
    p = tmp_path / "attrs.txt"
    write_crfsuite(X, p, Y)
    p.write_bytes(p.read_bytes().replace(b"\n", b"\r"))
    with pytest.warns(DataWarning, match="CR only"):
        seqs = read_crfsuite_list(p)
    assert [s.attributes for s in seqs] == X and [s.labels for s in seqs] == Y
