"""Column-file reader/writer: format edge cases, errors naming file:line,
round-trip and robustness property tests."""

from __future__ import annotations

import gzip
import io
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import run_cli as run
from crfkit.errors import DataError
from crfkit.io.columns import (
    Sentence,
    open_text,
    read_columns,
    read_columns_list,
    write_columns,
)

SIMPLE = "He PRP B-NP\nreckons VBZ B-VP\n\nThe DT B-NP\ncurrent JJ I-NP\naccount NN I-NP\n"


def write(tmp_path, name, data, gz=False):
    p = tmp_path / name
    raw = data.encode("utf-8") if isinstance(data, str) else data
    if gz:
        with gzip.open(p, "wb") as f:
            f.write(raw)
    else:
        p.write_bytes(raw)
    return p


def as_tuples(sents):
    return [(s.columns, s.labels, s.line) for s in sents]


EXPECTED_SIMPLE = [
    ([["He", "PRP"], ["reckons", "VBZ"]], ["B-NP", "B-VP"], 1),
    ([["The", "DT"], ["current", "JJ"], ["account", "NN"]], ["B-NP", "I-NP", "I-NP"], 4),
]


# ---------------------------------------------------------------------------
# reading


@pytest.mark.parametrize("gz", [False, True])
def test_plain_and_gz(tmp_path, gz):
    p = write(tmp_path, "a.txt.gz" if gz else "a.txt", SIMPLE, gz=gz)
    sents = read_columns_list(p)
    assert as_tuples(sents) == EXPECTED_SIMPLE
    assert [len(s) for s in sents] == [2, 3]
    assert isinstance(sents[0], Sentence)
    # str path too
    assert as_tuples(read_columns_list(str(p))) == EXPECTED_SIMPLE


def test_is_a_lazy_generator(tmp_path):
    p = write(tmp_path, "a.txt", SIMPLE)
    it = read_columns(p)
    assert next(it).line == 1
    assert next(it).line == 4
    with pytest.raises(StopIteration):
        next(it)


def test_multiple_blank_lines_and_whitespace_lines(tmp_path):
    data = "\n\n  \nHe PRP B-NP\nreckons VBZ B-VP\n\n\t\n\n\nThe DT B-NP\ncurrent JJ I-NP\naccount NN I-NP\n\n\n"
    p = write(tmp_path, "a.txt", data)
    sents = read_columns_list(p)
    assert [s.columns for s in sents] == [c for c, _, _ in EXPECTED_SIMPLE]
    assert [s.line for s in sents] == [4, 10]


def test_no_trailing_newline(tmp_path):
    p = write(tmp_path, "a.txt", SIMPLE.rstrip("\n"))
    assert as_tuples(read_columns_list(p)) == EXPECTED_SIMPLE


@pytest.mark.parametrize("gz", [False, True])
def test_crlf(tmp_path, gz):
    p = write(tmp_path, "a.txt" + (".gz" if gz else ""), SIMPLE.replace("\n", "\r\n"), gz=gz)
    assert as_tuples(read_columns_list(p)) == EXPECTED_SIMPLE
    # with a tab separator the \r is not left on the label either
    p2 = write(tmp_path, "b.txt", SIMPLE.replace(" ", "\t").replace("\n", "\r\n"))
    assert as_tuples(read_columns_list(p2, sep="\t")) == EXPECTED_SIMPLE


def test_utf8_bom_dropped(tmp_path):
    p = write(tmp_path, "a.txt", "\ufeff" + SIMPLE)
    assert as_tuples(read_columns_list(p)) == EXPECTED_SIMPLE


def test_hash_is_a_token_not_a_comment(tmp_path):
    p = write(tmp_path, "a.txt", "# # O\n#1 CD O\n")
    (s,) = read_columns_list(p)
    assert s.columns == [["#", "#"], ["#1", "CD"]]


DOC = (
    "-DOCSTART- -X- -X- O\n\n"
    "EU NNP B-NP B-ORG\nrejects VBZ B-VP O\n\n"
    "-DOCSTART- -X- -X- O\n"
    "Peter NNP B-NP B-PER\n"
    "-DOCSTART- -X- -X- O\n"
    "Blackburn NNP B-NP B-PER\n"
)


def test_docstart_skip(tmp_path):
    p = write(tmp_path, "doc.txt", DOC)
    sents = read_columns_list(p)
    assert [s.columns for s in sents] == [
        [["EU", "NNP", "B-NP"], ["rejects", "VBZ", "B-VP"]],
        [["Peter", "NNP", "B-NP"]],
        [["Blackburn", "NNP", "B-NP"]],
    ]
    assert [s.labels for s in sents] == [["B-ORG", "O"], ["B-PER"], ["B-PER"]]
    assert [s.line for s in sents] == [3, 7, 9]


def test_docstart_keep(tmp_path):
    p = write(tmp_path, "doc.txt", DOC)
    sents = read_columns_list(p, docstart="keep")
    assert [len(s) for s in sents] == [1, 2, 4]
    assert sents[0].columns == [["-DOCSTART-", "-X-", "-X-"]]
    assert sents[2].columns[0][0] == "-DOCSTART-"
    assert sents[2].line == 6


def test_docstart_bad_value():
    with pytest.raises(ValueError):
        read_columns(io.StringIO(SIMPLE), docstart="drop")
    with pytest.raises(ValueError):
        read_columns(io.StringIO(SIMPLE), sep="")


def test_docstart_only_is_empty(tmp_path):
    p = write(tmp_path, "doc.txt", "-DOCSTART- -X- O\n\n-DOCSTART- -X- O\n")
    with pytest.raises(DataError, match="empty input"):
        read_columns_list(p)


def test_docstart_lines_do_not_fix_column_count(tmp_path):
    # CoNLL-2002 style: the -DOCSTART- line has another shape than the tokens
    p = write(tmp_path, "doc.txt", "-DOCSTART- O\nla DA O\nUE NC B-ORG\n")
    (s,) = read_columns_list(p)
    assert s.columns == [["la", "DA"], ["UE", "NC"]]


def test_has_labels_false(tmp_path):
    p = write(tmp_path, "a.txt", SIMPLE)
    sents = read_columns_list(p, has_labels=False)
    assert sents[0].columns == [["He", "PRP", "B-NP"], ["reckons", "VBZ", "B-VP"]]
    assert sents[0].labels is None
    # one column is fine without labels
    p1 = write(tmp_path, "b.txt", "a\nb\n\nc\n")
    assert [s.columns for s in read_columns_list(p1, has_labels=False)] == [[["a"], ["b"]], [["c"]]]


def test_tab_separator_keeps_spaces_in_tokens(tmp_path):
    p = write(tmp_path, "a.tsv", "New York\tNNP\tB-LOC\nis\tVBZ\tO\n")
    (s,) = read_columns_list(p, sep="\t")
    assert s.columns == [["New York", "NNP"], ["is", "VBZ"]]
    assert s.labels == ["B-LOC", "O"]


def test_stream_source_and_name():
    sents = read_columns_list(io.StringIO(SIMPLE))
    assert as_tuples(sents) == EXPECTED_SIMPLE
    # binary streams are decoded as UTF-8
    assert as_tuples(read_columns_list(io.BytesIO(SIMPLE.encode()))) == EXPECTED_SIMPLE
    with pytest.raises(DataError) as e:
        read_columns_list(io.StringIO("a b\nc\n"))
    assert str(e.value).startswith("<stream>:2: ")
    with pytest.raises(DataError) as e:
        read_columns_list(io.StringIO("a b\nc\n"), name="mine.txt")
    assert str(e.value).startswith("mine.txt:2: ")


def test_stdin_dash(monkeypatch):
    monkeypatch.setattr(
        sys, "stdin", io.TextIOWrapper(io.BytesIO(SIMPLE.encode()), encoding="utf-8")
    )
    assert as_tuples(read_columns_list("-")) == EXPECTED_SIMPLE
    monkeypatch.setattr(sys, "stdin", io.StringIO("x\n"))
    with pytest.raises(DataError) as e:
        read_columns_list("-")
    assert str(e.value).startswith("<stdin>:1: missing label")


def test_open_text(tmp_path):
    p = write(tmp_path, "a.txt.gz", SIMPLE.replace("\n", "\r\n"), gz=True)
    with open_text(p) as f:
        assert f.read() == SIMPLE
    with pytest.raises(DataError, match="nope.txt"):
        open_text(tmp_path / "nope.txt")


# ---------------------------------------------------------------------------
# errors: DataError naming the file and the line


def raises_at(path, line, **kw):
    with pytest.raises(DataError) as e:
        read_columns_list(path, **kw)
    msg = str(e.value)
    assert str(path) in msg
    assert e.value.path == str(path)
    assert e.value.line == line, msg
    if line is not None:
        assert f"{path}:{line}: " in msg
    return msg


@pytest.mark.parametrize("gz", [False, True])
def test_ragged_columns(tmp_path, gz):
    p = write(tmp_path, "r.txt" + (".gz" if gz else ""), "\na b C\nd e F\n\ng h i J\n", gz=gz)
    msg = raises_at(p, 5)
    assert "4 columns" in msg and "expected 3" in msg and "line 2" in msg


def test_ragged_columns_fewer(tmp_path):
    p = write(tmp_path, "r.txt", "a b C\nd F\n")
    msg = raises_at(p, 2)
    assert "2 columns" in msg and "expected 3" in msg


def test_missing_label(tmp_path):
    p = write(tmp_path, "m.txt", "\n\nword\nother\n")
    msg = raises_at(p, 3)
    assert "missing label: 1 column, expected at least 2" in msg


def test_empty_file(tmp_path):
    p = write(tmp_path, "e.txt", "")
    msg = raises_at(p, None)
    assert "empty input: no sentences found" in msg


def test_only_blank_lines(tmp_path):
    p = write(tmp_path, "e.txt.gz", "\n  \n\t\n\r\n", gz=True)
    msg = raises_at(p, None)
    assert "empty input" in msg


def test_empty_raised_at_end_of_iteration(tmp_path):
    p = write(tmp_path, "e.txt", "\n")
    it = read_columns(p)  # no error until iterated
    with pytest.raises(DataError, match="empty input"):
        next(it)


@pytest.mark.parametrize("gz", [False, True])
def test_bad_utf8(tmp_path, gz):
    data = SIMPLE.encode() + b"caf\xe9 NN O\n"
    p = write(tmp_path, "u.txt" + (".gz" if gz else ""), data, gz=gz)
    msg = raises_at(p, 7)
    assert "UTF-8" in msg


def test_bad_utf8_in_text_stream():
    f = io.TextIOWrapper(io.BytesIO(b"a B\n\xff\xfe C\n"), encoding="utf-8")
    with pytest.raises(DataError, match="UTF-8"):
        read_columns_list(f, name="s.txt")


def test_missing_file(tmp_path):
    p = tmp_path / "nope.txt"
    with pytest.raises(DataError, match="nope.txt: cannot open"):
        read_columns_list(p)


def test_corrupt_and_truncated_gz(tmp_path):
    p = write(tmp_path, "bad.gz", b"this is not gzip data\n")
    with pytest.raises(DataError, match="bad.gz:1: cannot read"):
        read_columns_list(p)
    good = gzip.compress((SIMPLE * 50).encode())
    p2 = write(tmp_path, "trunc.gz", good[: len(good) // 2])
    with pytest.raises(DataError, match="trunc.gz"):
        read_columns_list(p2)


# ---------------------------------------------------------------------------
# writing


def test_write_crf_test_style(tmp_path):
    sents = read_columns_list(io.StringIO(SIMPLE))
    out = io.StringIO()
    n = write_columns(sents, out, extra=[["B-NP", "B-VP"], ["B-NP", "I-NP", "B-NP"]])
    assert n == 2
    assert out.getvalue() == (
        "He\tPRP\tB-NP\tB-NP\nreckons\tVBZ\tB-VP\tB-VP\n\n"
        "The\tDT\tB-NP\tB-NP\ncurrent\tJJ\tI-NP\tI-NP\naccount\tNN\tI-NP\tB-NP\n\n"
    )
    out = io.StringIO()
    write_columns(sents[:1], out, sep=" ", labels=False, extra=[[("B-NP", "0.9"), ("B-VP", "0.8")]])
    assert out.getvalue() == "He PRP B-NP 0.9\nreckons VBZ B-VP 0.8\n\n"


def test_write_rows_and_gz_path(tmp_path):
    p = tmp_path / "o.txt.gz"
    write_columns([[["a", "X"], ["b", "Y"]], [["c", "Z"]]], p, sep=" ")
    assert [(s.columns, s.labels) for s in read_columns_list(p)] == [
        ([["a"], ["b"]], ["X", "Y"]),
        ([["c"]], ["Z"]),
    ]


def test_write_rejects_fields_that_would_not_read_back():
    with pytest.raises(DataError):
        write_columns([[["a b", "X"]]], io.StringIO(), sep=" ")
    with pytest.raises(DataError):
        write_columns([[["a\tb", "X"]]], io.StringIO(), sep="\t")
    with pytest.raises(DataError):
        write_columns([[["a\nb", "X"]]], io.StringIO())
    with pytest.raises(DataError):
        write_columns([[["", "X"]]], io.StringIO(), sep=" ")
    with pytest.raises(DataError):
        write_columns([[["a", "X"]]], io.StringIO(), extra=[["P", "Q"]])
    with pytest.raises(DataError):
        write_columns([[["a", "X"]]], io.StringIO(), extra=[["P"], ["Q"]])
    with pytest.raises(DataError):
        write_columns([[["a", "X"]], [["b", "Y"]]], io.StringIO(), extra=[["P"]])


# ---------------------------------------------------------------------------
# properties

token = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\ufeff"),
    min_size=1,
    max_size=8,
).filter(lambda s: not any(c.isspace() for c in s) and s != "-DOCSTART-")


@st.composite
def corpora(draw):
    n_cols = draw(st.integers(1, 4))
    sents = draw(
        st.lists(
            st.lists(st.lists(token, min_size=n_cols, max_size=n_cols), min_size=1, max_size=6),
            min_size=1,
            max_size=5,
        )
    )
    return sents


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(corpora(), st.sampled_from([" ", "\t"]), st.booleans())
def test_roundtrip(tmp_path, sents, sep, gz):
    p = tmp_path / ("rt.txt.gz" if gz else "rt.txt")
    write_columns(sents, p, sep=sep)
    back = read_columns_list(p, sep=None if sep == " " else sep, has_labels=False)
    assert [s.columns for s in back] == sents
    if len(sents[0][0]) >= 2:
        back = read_columns_list(p, sep=None if sep == " " else sep)
        assert [[c + [lab] for c, lab in zip(s.columns, s.labels)] for s in back] == sents
        # and Sentence objects write back the same bytes
        out = io.StringIO()
        write_columns(back, out, sep=sep)
        with open_text(p) as f:
            assert out.getvalue() == f.read()


@settings(max_examples=150, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=200),
        st.text(alphabet="ab \t\n\r-#\x85\u2028DOCSTART\xe9", max_size=200).map(
            lambda s: s.encode()
        ),
    ),
    st.booleans(),
    st.sampled_from(["skip", "keep"]),
    st.sampled_from([None, "\t"]),
)
def test_arbitrary_input_only_raises_dataerror(data, has_labels, docstart, sep):
    try:
        for s in read_columns(io.BytesIO(data), has_labels=has_labels, docstart=docstart, sep=sep):
            assert len(s) >= 1
            if has_labels:
                assert len(s.labels) == len(s.columns)
    except DataError:
        pass


def test_utf16_input_names_the_bom_and_encoding_reads_it(chunker, tmp_path, capsys):
    text = chunker["test"].read_text()
    u16 = tmp_path / "u16.txt"
    u16.write_bytes(text.encode("utf-16"))
    rc, out, err = run(capsys, "tag", "-m", chunker["model"], u16)
    assert rc == 2 and "UTF-16 little-endian byte-order mark" in err and "--encoding utf-16" in err
    rc, out16, err = run(capsys, "tag", "-m", chunker["model"], u16, "--encoding", "utf-16")
    assert rc == 0, err
    rc, out8, _ = run(capsys, "tag", "-m", chunker["model"], chunker["test"])
    assert out16 == out8
    tr16 = tmp_path / "train16.txt"
    tr16.write_bytes((chunker["dir"] / "train.txt").read_text().encode("utf-16"))
    rc, _, err = run(
        capsys,
        "train",
        tr16,
        "-m",
        tmp_path / "m16.crfkit",
        "--encoding",
        "utf-16",
        "-q",
        "--max-iterations",
        "2",
    )
    assert rc == 0, err
    rc, _, err = run(capsys, "tag", "-m", chunker["model"], u16, "--encoding", "nope")
    assert rc == 2 and "unknown encoding" in err
