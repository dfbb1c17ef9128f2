"""CRF++ templates: parsing, expansion checked by hand, padding, errors."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crfkit.errors import DataError, TemplateError
from crfkit.features.templates import Macro, Templates, default_chunking_templates, pad_token

# a 3-token sentence with 2 columns (word, POS)
SENT = [["He", "PRP"], ["reckons", "VBZ"], ["the", "DT"]]


def one(text, sent=SENT, pad=True):
    """Attribute strings of a single-template set, per token."""
    t = Templates.parse(text)
    return [a[0] if a else None for a in t.apply(sent, pad=pad)]


def test_row_before_start_pads():
    assert one("U00:%x[-2,0]") == ["U00:_B-2", "U00:_B-1", "U00:He"]


def test_row_after_end_pads():
    assert one("U04:%x[2,1]") == ["U04:DT", "U04:_B+1", "U04:_B+2"]


def test_two_macros():
    assert one("U05:%x[-1,0]/%x[0,0]") == ["U05:_B-1/He", "U05:He/reckons", "U05:reckons/the"]
    assert one("U05:%x[0,0]/%x[1,0]")[0] == "U05:He/reckons"


def test_three_macros_mixing_columns():
    assert one("U10:%x[0,1]/%x[1,1]/%x[2,0]") == [
        "U10:PRP/VBZ/the",
        "U10:VBZ/DT/_B+1",
        "U10:DT/_B+1/_B+2",
    ]


def test_same_macro_twice_and_literal_text_around():
    assert one("Uxx %x[0,0]=%x[0,0]!") == ["Uxx He=He!", "Uxx reckons=reckons!", "Uxx the=the!"]


def test_constant_templates():
    assert one("U99:bias") == ["U99:bias"] * 3
    assert one("U") == ["U"] * 3
    assert one("U99:bias", pad=False) == ["U99:bias"] * 3


def test_no_identifier_is_literal():
    assert one("U:%x[0,0]") == ["U:He", "U:reckons", "U:the"]
    assert one("U%x[1,1]") == ["UVBZ", "UDT", "U_B+1"]


def test_literal_percent_and_braces():
    # '%' not followed by a letter is text; braces and quotes survive code generation
    assert one("U01:{%x[0,0]}%'\"\\") == [
        "U01:{He}%'\"\\",
        "U01:{reckons}%'\"\\",
        "U01:{the}%'\"\\",
    ]


def test_pad_false_fires_only_inside():
    assert one("U00:%x[-2,0]", pad=False) == [None, None, "U00:He"]
    assert one("U05:%x[-1,0]/%x[1,0]", pad=False) == [None, "U05:He/the", None]
    t = Templates.parse("U00:%x[-1,0]\nU01:%x[0,0]\nU02:%x[1,0]\nU03:%x[3,1]\nU04:c\n")
    assert t.apply(SENT, pad=False) == [
        ["U01:He", "U02:reckons", "U04:c"],
        ["U00:He", "U01:reckons", "U02:the", "U04:c"],
        ["U00:reckons", "U01:the", "U04:c"],
    ]


def test_apply_all_templates_in_order():
    t = Templates.parse("U00:%x[-2,0]\nU05:%x[-1,0]/%x[0,0]\nU99:bias\n\nB\n")
    assert t.apply(SENT) == [
        ["U00:_B-2", "U05:_B-1/He", "U99:bias"],
        ["U00:_B-1", "U05:He/reckons", "U99:bias"],
        ["U00:He", "U05:reckons/the", "U99:bias"],
    ]
    assert t.apply([]) == []
    assert t.apply([], pad=False) == []
    assert len(t) == 3


def test_single_token_sentence():
    t = Templates.parse("U00:%x[-1,0]/%x[1,1]\nU01:%x[0,0]\n")
    assert t.apply([["a", "b"]]) == [["U00:_B-1/_B+1", "U01:a"]]
    assert t.apply([["a", "b"]], pad=False) == [["U01:a"]]


def test_comments_blank_lines_and_b_detection():
    text = "# Unigram\n\nU00:%x[0,0]\n   \n  # indented comment\nU01:%x[0,1]\r\n\n# Bigram\nB\n"
    t = Templates.parse(text)
    assert [u.text for u in t.unigram] == ["U00:%x[0,0]", "U01:%x[0,1]"]
    assert [u.line for u in t.unigram] == [3, 6]
    assert t.unigram[0].pieces == ("U00:", Macro(0, 0))
    assert t.has_transitions
    assert [b.line for b in t.bigram] == [9]
    assert t.bigram_observation == []
    assert t.source == text
    assert not Templates.parse("U00:%x[0,0]\n").has_transitions
    assert Templates.parse("U\nB00\n").has_transitions


def test_bigram_observation_parsed_and_kept():
    t = Templates.parse("U00:%x[0,0]\nB01:%x[-1,1]/%x[0,1]\n")
    assert t.has_transitions
    assert t.bigram == []
    (b,) = t.bigram_observation
    assert b.kind == "B" and b.line == 2
    assert b.macros == (Macro(-1, 1), Macro(0, 1))
    assert b.expand(SENT, 0) == "B01:_B-1/PRP"
    # apply gives unigram attributes only
    assert t.apply(SENT) == [["U00:He"], ["U00:reckons"], ["U00:the"]]
    assert t.max_column() == 1


def test_max_column_and_check_columns():
    t = Templates.parse("U00:%x[0,0]\nU01:x\nU02:%x[1,2]\n")
    assert t.max_column() == 2
    t.check_columns(3)
    with pytest.raises(TemplateError) as e:
        t.check_columns(2)
    assert e.value.line == 3
    assert "column 2" in str(e.value) and "2 observation columns" in str(e.value)
    with pytest.raises(DataError) as e:
        t.check_columns(2, path="train.txt", line=1)
    assert str(e.value).startswith("train.txt:1: ")
    assert "line 3" in str(e.value)
    assert Templates.parse("U\nB\n").max_column() == -1
    Templates.parse("U\nB\n").check_columns(0)


def test_apply_with_too_few_columns_is_dataerror():
    t = Templates.parse("U00:%x[0,0]\nU01:%x[0,2]\n")
    with pytest.raises(DataError, match="token 1 .*2 observation columns.*line 2"):
        t.apply(SENT)
    with pytest.raises(DataError):
        t.apply([["a", "b", "c"], ["a"]], pad=False)


@pytest.mark.parametrize(
    "line, what",
    [
        ("U00:%x[0]", "malformed macro"),
        ("U00:%x[a,b]", "malformed macro"),
        ("U00:%x[0,0", "unterminated macro"),
        ("U00:%x", "unterminated macro"),
        ("U00:%x[0,-1]", "column index -1"),
        ("U00:%x[0,1.5]", "malformed macro"),
        ("U00:%q[0,0]", "unsupported macro '%q'"),
        ('U00:%t[0,0,"a"', "unterminated macro"),
        ("X00:%x[0,0]", "unknown template type 'X'"),
        ("+:%x[0,0]", "unknown template type '+'"),
        ("B01:%x[0,", "unterminated macro"),
    ],
)
def test_errors_name_file_and_line(line, what):
    text = "# comment\n\nU10:%x[0,0]\n" + line + "\nB\n"
    with pytest.raises(TemplateError) as e:
        Templates.parse(text, name="tmpl.txt")
    assert e.value.line == 4
    assert str(e.value).startswith("tmpl.txt:4: ")
    assert what in str(e.value)


def test_empty_template_set_is_an_error():
    with pytest.raises(TemplateError, match="no templates"):
        Templates.parse("# nothing\n\n")


def test_from_file(tmp_path):
    p = tmp_path / "template"
    p.write_text("U00:%x[0,0]\nB\n")
    t = Templates.from_file(p)
    assert t.name == str(p)
    assert t.apply(SENT)[1] == ["U00:reckons"]
    bad = tmp_path / "bad"
    bad.write_bytes(b"U00:%x[0,0]\nU01:\xff\n")
    with pytest.raises(TemplateError) as e:
        Templates.from_file(bad)
    assert e.value.line == 2 and str(bad) in str(e.value)
    bad.write_text("U00:%x[0,0]\nU01:%x[1]\n")
    with pytest.raises(TemplateError, match=r"bad:2: malformed"):
        Templates.from_file(bad)
    with pytest.raises(TemplateError, match="cannot read"):
        Templates.from_file(tmp_path / "missing")


def test_pad_token():
    assert [pad_token(j, 3) for j in (-2, -1, 3, 4)] == ["_B-2", "_B-1", "_B+1", "_B+2"]


def test_default_chunking_templates_hand_worked():
    t = default_chunking_templates()
    assert len(t.unigram) == 19 and t.has_transitions and t.max_column() == 1
    sent = [["Confidence", "NN"], ["in", "IN"], ["the", "DT"], ["pound", "NN"], ["is", "VBZ"]]
    # token 1 ("in"): word -2 is before the start
    assert t.apply(sent)[1] == [
        "U00:_B-1",
        "U01:Confidence",
        "U02:in",
        "U03:the",
        "U04:pound",
        "U05:Confidence/in",
        "U06:in/the",
        "U10:_B-1",
        "U11:NN",
        "U12:IN",
        "U13:DT",
        "U14:NN",
        "U15:_B-1/NN",
        "U16:NN/IN",
        "U17:IN/DT",
        "U18:DT/NN",
        "U19:_B-1/NN/IN",
        "U20:NN/IN/DT",
        "U21:IN/DT/NN",
    ]
    # CRFsuite style: the templates reaching row -2 do not fire at token 1
    assert t.apply(sent, pad=False)[1] == [
        "U01:Confidence",
        "U02:in",
        "U03:the",
        "U04:pound",
        "U05:Confidence/in",
        "U06:in/the",
        "U11:NN",
        "U12:IN",
        "U13:DT",
        "U14:NN",
        "U16:NN/IN",
        "U17:IN/DT",
        "U18:DT/NN",
        "U20:NN/IN/DT",
        "U21:IN/DT/NN",
    ]


# ---------------------------------------------------------------------------
# property: the compiled apply agrees with the plain reference expansion

macro_st = st.tuples(st.integers(-4, 4), st.integers(0, 2)).map(lambda rc: f"%x[{rc[0]},{rc[1]}]")
literal_st = st.text(alphabet="ab:/_{}'\"\\% =", max_size=3).filter(lambda s: "%" not in s)
template_st = st.lists(st.one_of(macro_st, literal_st), max_size=4).map(
    lambda ps: "U" + "".join(ps)
)
value_st = st.text(alphabet="xyz{}'\\", min_size=1, max_size=3)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(template_st, min_size=1, max_size=5),
    st.lists(st.lists(value_st, min_size=3, max_size=3), max_size=7),
)
def test_compiled_apply_matches_reference(lines, sent):
    t = Templates.parse("\n".join(lines))
    got = t.apply(sent)
    assert got == [[u.expand(sent, i) for u in t.unigram] for i in range(len(sent))]
    n = len(sent)
    got = t.apply(sent, pad=False)
    want = [
        [u.expand(sent, i) for u in t.unigram if all(0 <= i + m.row < n for m in u.macros)]
        for i in range(n)
    ]
    assert got == want
