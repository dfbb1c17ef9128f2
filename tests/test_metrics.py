"""Tests of crfkit.metrics: conlleval chunk scores, token accuracy, label tables.

The expected values of the hand-made cases were worked out by hand from
conlleval.pl's rules (see the module docstring of crfkit.metrics); the
reasoning is in the comments.  Notation: "gold NP[0,2)" is a gold chunk of
type NP covering tokens 0 and 1.
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crfkit.errors import DataError
from crfkit.metrics import (
    ChunkReport,
    TypeScore,
    chunks,
    conlleval,
    conlleval_lines,
    label_table,
    split_tag,
    token_accuracy,
)


def counts(rep: ChunkReport) -> tuple[int, int, int, int, int]:
    return (rep.tokens, rep.gold_chunks, rep.found_chunks, rep.correct_chunks, rep.correct_tags)


def as_lines(gold, pred):
    """conlleval input for sentences of gold and guessed tags."""
    out = []
    for g, p in zip(gold, pred):
        for i, (a, b) in enumerate(zip(g, p)):
            out.append(f"w{i} X {a} {b}\n")
        out.append("\n")
    return out


# ---------------------------------------------------------------------------
# split_tag
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tag, expected",
    [
        ("B-NP", ("B", "NP")),
        ("I-NP", ("I", "NP")),
        ("O", ("O", "")),
        ("NP", ("NP", "")),  # no '-': the whole tag is the prefix
        ("I-A-B", ("I", "A-B")),  # split at the first '-' only
        ("-X", ("", "X")),
        ("B-", ("B", "")),
        ("B-0", ("B", "")),  # Perl: "0" is false, conlleval makes it ""
        ("[", ("[", "")),
    ],
)
def test_split_tag(tag, expected):
    assert split_tag(tag) == expected


# ---------------------------------------------------------------------------
# chunk extraction rules
# ---------------------------------------------------------------------------


def test_chunks_iob2():
    assert chunks(["B-NP", "I-NP", "O", "B-VP", "B-NP", "I-NP"]) == [
        ("NP", 0, 2),
        ("VP", 3, 4),
        ("NP", 4, 6),
    ]


def test_i_after_o_starts_a_chunk():
    # O->I is a start rule; a sentence start acts as O, so I- at position 0
    # starts a chunk as well.
    assert chunks(["O", "I-NP", "I-NP", "O"]) == [("NP", 1, 3)]
    assert chunks(["I-NP", "I-NP"]) == [("NP", 0, 2)]


def test_b_after_i_of_same_type_splits():
    # I->B is both an end and a start rule: two NP chunks.
    assert chunks(["I-NP", "I-NP", "B-NP", "I-NP"]) == [("NP", 0, 2), ("NP", 2, 4)]


def test_type_change_splits_without_b():
    # I-NP -> I-VP: type change ends the NP (prev prefix not O) and starts a VP.
    assert chunks(["B-NP", "I-NP", "I-VP"]) == [("NP", 0, 2), ("VP", 2, 3)]


def test_iob1_and_iob2_give_the_same_chunks():
    # Chunks NP[0,2) NP[2,3) VP[3,4) NP[5,6).
    iob2 = ["B-NP", "I-NP", "B-NP", "B-VP", "O", "B-NP"]
    # IOB1: B- only on the first token of a chunk that directly follows a
    # chunk of the same type (token 2); every other chunk token is I-.
    iob1 = ["I-NP", "I-NP", "B-NP", "I-VP", "O", "I-NP"]
    expected = [("NP", 0, 2), ("NP", 2, 3), ("VP", 3, 4), ("NP", 5, 6)]
    assert chunks(iob2) == expected
    assert chunks(iob1) == expected
    assert chunks(iob1, iobes=False) == expected


def test_ioe1_and_ioe2():
    # Chunks NP[0,2) NP[2,3) VP[4,6).
    # IOE2: E- on the last token of every chunk.  E->E starts a chunk.
    ioe2 = ["I-NP", "E-NP", "E-NP", "O", "I-VP", "E-VP"]
    # IOE1: E- only on the last token of a chunk directly followed by a chunk
    # of the same type.  E->I ends and starts.
    ioe1 = ["I-NP", "E-NP", "I-NP", "O", "I-VP", "I-VP"]
    expected = [("NP", 0, 2), ("NP", 2, 3), ("VP", 4, 6)]
    assert chunks(ioe2) == expected
    assert chunks(ioe1) == expected
    assert chunks(ioe2, iobes=False) == expected


def test_iobes():
    tags = [
        "S-NP",
        "B-VP",
        "E-VP",
        "S-NP",
        "S-NP",
        "O",
        "B-PP",
        "I-PP",
        "E-PP",
        "B-NP",
        "E-NP",
        "B-NP",
        "E-NP",
    ]
    # S is a one-token chunk; E->B and S->S split chunks of the same type.
    assert chunks(tags) == [
        ("NP", 0, 1),
        ("VP", 1, 3),
        ("NP", 3, 4),
        ("NP", 4, 5),
        ("PP", 6, 9),
        ("NP", 9, 11),
        ("NP", 11, 13),
    ]
    # conlleval.pl verbatim has no rule for S or E->B: S-NP S-NP (same type,
    # no start rule) is one chunk, and so is B-NP E-NP B-NP E-NP.
    assert chunks(tags, iobes=False) == [
        ("NP", 0, 1),
        ("VP", 1, 3),
        ("NP", 3, 5),
        ("PP", 6, 9),
        ("NP", 9, 13),
    ]


def test_bracket_tags():
    # '[' and ']' always start a chunk and always end it after one token;
    # '.' neither starts a chunk nor ends one on a type change.
    assert chunks(["[-NP", ".", "[-VP"]) == [("NP", 0, 1), ("VP", 2, 3)]
    assert chunks([".", "]-NP", ".", "]-VP"]) == [("NP", 1, 2), ("VP", 3, 4)]


def test_chunks_empty():
    assert chunks([]) == []
    assert chunks(["O", "O"]) == []


# ---------------------------------------------------------------------------
# conlleval scores, hand-made cases
# ---------------------------------------------------------------------------


def test_perfect_prediction():
    gold = [["B-NP", "I-NP", "O", "B-VP"], ["B-PP", "B-NP"]]
    rep = conlleval(gold, gold)
    # 6 tokens, 4 chunks, all found and correct; every tag correct.
    assert counts(rep) == (6, 4, 4, 4, 6)
    assert (rep.accuracy, rep.precision, rep.recall, rep.f1) == (100.0, 100.0, 100.0, 100.0)
    assert rep.per_type["NP"] == TypeScore("NP", 100.0, 100.0, 100.0, found=2, gold=2, correct=2)


def test_wrong_boundary():
    # gold NP[0,3); guess NP[0,2).  Both start at 0 with type NP (inCorrect).
    # At token 2 the gold continues (I->I) but the guess ends (I->O): the ends
    # differ, so the chunk is not correct.  found 1, gold 1, correct 0.
    # Tags: 2 of 3 right -> accuracy 66.67.
    rep = conlleval([["B-NP", "I-NP", "I-NP"]], [["B-NP", "I-NP", "O"]])
    assert counts(rep) == (3, 1, 1, 0, 2)
    assert rep.precision == rep.recall == rep.f1 == 0.0
    assert rep.accuracy == pytest.approx(200 / 3)
    # Guess starting one token late: NP[1,2) vs NP[0,2); no common start.
    rep = conlleval([["B-NP", "I-NP"]], [["O", "B-NP"]])
    assert counts(rep) == (2, 1, 1, 0, 0)


def test_wrong_type():
    # gold NP[0,2); guess VP[0,2): same span, types differ -> not correct.
    rep = conlleval([["B-NP", "I-NP", "O"]], [["B-VP", "I-VP", "O"]])
    assert counts(rep) == (3, 1, 1, 0, 1)
    # NP: guessed 0 -> precision 0; recall 0/1.  VP: precision 0/1; gold 0 -> recall 0.
    assert rep.per_type["NP"] == TypeScore("NP", 0.0, 0.0, 0.0, found=0, gold=1, correct=0)
    assert rep.per_type["VP"] == TypeScore("VP", 0.0, 0.0, 0.0, found=1, gold=0, correct=0)
    # Type change inside the guess: B-NP I-VP is NP[0,1) + VP[1,2); the guess
    # ends at 1, the gold does not, so NP[0,2) is missed; found 2.
    rep = conlleval([["B-NP", "I-NP"]], [["B-NP", "I-VP"]])
    assert counts(rep) == (2, 1, 2, 0, 1)


def test_iob1_and_iob2_score_the_same():
    gold2 = [["B-NP", "I-NP", "B-NP", "B-VP", "O", "B-NP"], ["B-PP", "B-NP", "I-NP"]]
    gold1 = [["I-NP", "I-NP", "B-NP", "I-VP", "O", "I-NP"], ["I-PP", "I-NP", "I-NP"]]
    # Guess: merges the first two NPs (NP[0,3)), gets VP and NP[5,6) right;
    # second sentence: PP right, NP[1,2) instead of NP[1,3).
    pred2 = [["B-NP", "I-NP", "I-NP", "B-VP", "O", "B-NP"], ["B-PP", "B-NP", "O"]]
    pred1 = [["I-NP", "I-NP", "I-NP", "I-VP", "O", "I-NP"], ["I-PP", "I-NP", "O"]]
    r2 = conlleval(gold2, pred2)
    r1 = conlleval(gold1, pred1)
    # gold: NP NP VP NP | PP NP = 6; guess: NP VP NP | PP NP = 5;
    # correct: VP[3,4), NP[5,6), PP[0,1) = 3.
    for r in (r1, r2):
        assert (r.gold_chunks, r.found_chunks, r.correct_chunks) == (6, 5, 3)
        assert r.precision == pytest.approx(60.0)
        assert r.recall == pytest.approx(50.0)
        assert r.per_type == r2.per_type
    # Mixed encodings: the chunks are identical, so P = R = 100, but the tags
    # differ at 0, 3, 5 (sentence 1) and 0, 1 (sentence 2): accuracy 4/9.
    r = conlleval(gold2, gold1)
    assert counts(r) == (9, 6, 6, 6, 4)
    assert r.f1 == 100.0


def test_iobes_scores():
    gold = [["S-NP", "B-VP", "E-VP", "S-NP", "S-NP", "O"]]
    # Same chunks in IOB2: NP[0,1) VP[1,3) NP[3,4) NP[4,5).
    iob2 = [["B-NP", "B-VP", "I-VP", "B-NP", "B-NP", "O"]]
    r = conlleval(gold, iob2)
    assert (r.gold_chunks, r.found_chunks, r.correct_chunks) == (4, 4, 4)
    # Guess merges the last two NPs: B-NP E-NP -> NP[3,5).  Guessed chunks
    # NP[0,1) VP[1,3) NP[3,5): the first two are correct, NP[3,5) matches no
    # gold chunk.  P = 2/3, R = 2/4.
    pred = [["S-NP", "B-VP", "E-VP", "B-NP", "E-NP", "O"]]
    r = conlleval(gold, pred)
    assert (r.gold_chunks, r.found_chunks, r.correct_chunks) == (4, 3, 2)
    assert r.precision == pytest.approx(200 / 3) and r.recall == 50.0
    r = conlleval(gold, pred, iobes=False)
    assert (r.gold_chunks, r.found_chunks, r.correct_chunks) == (3, 3, 3)


def test_chunk_across_sentence_boundary_is_split():
    # A sentence break acts as O, so I-NP at the start of sentence 2 starts a
    # new chunk: NP[0,2) in sentence 1, NP[0,2) in sentence 2 -> 2 chunks.
    gold = [["B-NP", "I-NP"], ["I-NP", "I-NP"]]
    rep = conlleval(gold, gold)
    assert (rep.gold_chunks, rep.correct_chunks) == (2, 2)
    # Same through the line interface, with a blank line and with -X-.
    lines = ["a B-NP B-NP", "b I-NP I-NP", "", "c I-NP I-NP", "d I-NP I-NP"]
    assert conlleval_lines(lines).gold_chunks == 2
    lines_x = ["a B-NP B-NP", "b I-NP I-NP", "-X- -X- O O", "c I-NP I-NP", "d I-NP I-NP"]
    rep = conlleval_lines(lines_x)
    assert (rep.tokens, rep.gold_chunks) == (4, 2)  # the -X- line is no token
    # Without the break it is one chunk of 4 tokens.
    assert conlleval_lines(lines[:2] + lines[3:]).gold_chunks == 1
    # A guessed tag on a boundary line is ignored (conlleval forces O).
    rep = conlleval_lines(["a B-NP B-NP", "-X- -X- O I-NP", "b B-NP B-NP"])
    assert counts(rep) == (2, 2, 2, 2, 2)


def test_no_chunks():
    rep = conlleval([["O", "O", "O"]], [["O", "O", "O"]])
    # No phrases at all: P, R and FB1 default to 0; accuracy 3/3.
    assert counts(rep) == (3, 0, 0, 0, 3)
    assert (rep.precision, rep.recall, rep.f1, rep.accuracy) == (0.0, 0.0, 0.0, 100.0)
    assert rep.per_type == {}
    assert rep.format() == (
        "processed 3 tokens with 0 phrases; found: 0 phrases; correct: 0.\n"
        "accuracy: 100.00%; precision:   0.00%; recall:   0.00%; FB1:   0.00\n"
    )
    # Guessed chunks only: precision 0/2, recall undefined -> 0, F1 0.
    rep = conlleval([["O", "O", "O"]], [["B-NP", "O", "B-NP"]])
    assert (rep.gold_chunks, rep.found_chunks, rep.f1) == (0, 2, 0.0)


def test_empty_input():
    rep = conlleval([], [])
    assert counts(rep) == (0, 0, 0, 0, 0)
    # conlleval prints no accuracy line when there are no tokens.
    assert rep.format() == "processed 0 tokens with 0 phrases; found: 0 phrases; correct: 0.\n"
    assert conlleval_lines([]).format() == rep.format()
    assert conlleval_lines(["", "", "-X-"]).format() == rep.format()


def test_format_exact():
    gold = [["B-NP", "I-NP", "O", "B-VP", "B-NP"], ["B-PP", "B-NP", "I-NP"]]
    pred = [["B-NP", "I-NP", "O", "B-NP", "B-NP"], ["B-PP", "B-NP", "O"]]
    # gold chunks: NP[0,2) VP[3,4) NP[4,5) | PP[0,1) NP[1,3)   -> 5 (NP 3, VP 1, PP 1)
    # guessed:     NP[0,2) NP[3,4) NP[4,5) | PP[0,1) NP[1,2)   -> 5 (NP 4, PP 1)
    # correct:     NP[0,2), NP[4,5), PP[0,1)                   -> 3 (NP 2, PP 1)
    # tags right: 4 of 5 + 2 of 3 = 6 of 8 -> 75.00%
    # overall P = R = 3/5 = 60.00, FB1 60.00
    # NP: P = 2/4 = 50.00, R = 2/3 = 66.67, FB1 = 2*50*66.67/116.67 = 57.14, 4 guessed
    # PP: 100/100/100, 1 guessed; VP: 0/0/0, 0 guessed.
    # Type names right-aligned in 17 columns ("%17s").
    expected = (
        "processed 8 tokens with 5 phrases; found: 5 phrases; correct: 3.\n"
        "accuracy:  75.00%; precision:  60.00%; recall:  60.00%; FB1:  60.00\n"
        "               NP: precision:  50.00%; recall:  66.67%; FB1:  57.14  4\n"
        "               PP: precision: 100.00%; recall: 100.00%; FB1: 100.00  1\n"
        "               VP: precision:   0.00%; recall:   0.00%; FB1:   0.00  0\n"
    )
    rep = conlleval(gold, pred)
    assert rep.format() == expected
    assert str(rep) == expected
    assert conlleval_lines(as_lines(gold, pred)).format() == expected


def test_format_long_type_and_sorting():
    # Type names longer than 17 characters are not cut; types sort by code
    # point, as Perl's sort does (upper case before lower case: "Zeta" first).
    # gold/guess: one correct chunk of each type -> 100 everywhere.
    tags = [["B-a-very-long-type-name", "O", "B-Zeta"]]
    assert conlleval(tags, tags).format() == (
        "processed 3 tokens with 2 phrases; found: 2 phrases; correct: 2.\n"
        "accuracy: 100.00%; precision: 100.00%; recall: 100.00%; FB1: 100.00\n"
        "             Zeta: precision: 100.00%; recall: 100.00%; FB1: 100.00  1\n"
        "a-very-long-type-name: precision: 100.00%; recall: 100.00%; FB1: 100.00  1\n"
    )


def test_format_empty_type_printed_twice_like_conlleval():
    # Tags without a type: gold ""[0,2) (B, I), guess ""[0,1) (B, then O ends
    # it).  At token 1 the gold goes on (B->I) and the guess ends (B->O):
    # not correct.  conlleval.pl prints the line of type "" twice when it is
    # among both the gold and the guessed types (its duplicate check treats
    # the empty string as false); the report reproduces that.
    rep = conlleval([["B", "I", "O"]], [["B", "O", "O"]])
    assert counts(rep) == (3, 1, 1, 0, 2)
    line = "                 : precision:   0.00%; recall:   0.00%; FB1:   0.00  1\n"
    assert rep.format().endswith("FB1:   0.00\n" + line + line)
    assert list(rep.per_type) == [""]


# ---------------------------------------------------------------------------
# conlleval_lines: options and errors
# ---------------------------------------------------------------------------


def test_lines_take_last_two_columns_and_line_ends():
    lines = ["He PRP B-NP B-NP\r\n", "ran VBD B-VP B-NP\n", "\n", "Go VB B-VP B-VP\n"]
    rep = conlleval_lines(lines)
    # gold NP VP | VP; guessed NP NP | VP -> 3 gold, 3 guessed, 2 correct.
    assert counts(rep) == (3, 3, 3, 2, 2)


def test_lines_delimiter():
    rep = conlleval_lines(["a\tx\tB-NP\tB-NP", "b\tx\tI-NP\tI-NP"], delimiter="\t")
    assert counts(rep) == (2, 1, 1, 1, 2)
    # With an explicit " " delimiter, two spaces make an empty column, as
    # with conlleval -d " " (Perl split): the column count then differs.
    with pytest.raises(DataError) as exc:
        conlleval_lines(["a B-NP B-NP", "b  I-NP I-NP"], delimiter=" ")
    assert exc.value.line == 2
    # The default (whitespace runs) accepts it.
    assert conlleval_lines(["a B-NP B-NP", "b  I-NP I-NP"]).gold_chunks == 1


def test_lines_raw_mode():
    # -r: every non-O tag becomes B-tag, so each token is its own chunk.
    # gold: NP NP O -> B-NP B-NP O (2 chunks); guess: NP NP VP (3 chunks).
    rep = conlleval_lines(["a NP NP", "b NP NP", "c O VP"], raw=True)
    assert counts(rep) == (3, 2, 3, 2, 2)
    # -o: an alternative outside tag.
    rep = conlleval_lines(["a NP NP", "b OUT OUT"], raw=True, otag="OUT")
    assert counts(rep) == (2, 1, 1, 1, 2)
    assert list(rep.per_type) == ["NP"]


def test_lines_custom_boundary():
    lines = ["a B-NP B-NP", "== == O O", "b I-NP I-NP"]
    assert conlleval_lines(lines, boundary="==").gold_chunks == 2
    assert conlleval_lines(lines, boundary="==").tokens == 2


def test_lines_docstart():
    lines = ["-DOCSTART- -X- O O", "", "a x B-NP B-NP", "b x I-NP I-NP", ""]
    # conlleval.pl has no special case: -DOCSTART- is a token with O tags.
    rep = conlleval_lines(lines)
    assert counts(rep) == (3, 1, 1, 1, 3)
    rep = conlleval_lines(lines, docstart="boundary")
    assert counts(rep) == (2, 1, 1, 1, 2)
    # Either way it ends a chunk (its tags are O).
    lines = ["a x B-NP B-NP", "-DOCSTART- -X- O O", "b x I-NP I-NP"]
    assert conlleval_lines(lines).gold_chunks == 2
    assert conlleval_lines(lines, docstart="boundary").gold_chunks == 2


def test_lines_errors():
    with pytest.raises(DataError) as exc:
        conlleval_lines(["a B-NP B-NP", "", "B-NP"], name="out.txt")
    assert exc.value.line == 3 and exc.value.path == "out.txt"
    assert str(exc.value).startswith("out.txt:3: ")
    with pytest.raises(DataError) as exc:
        conlleval_lines(["a B-NP B-NP", "b x I-NP I-NP"])
    assert exc.value.line == 2
    assert "line 2" in str(exc.value)


def test_mismatched_lengths():
    with pytest.raises(DataError, match="sentence 1"):
        conlleval([["O"], ["O", "O"]], [["O"], ["O"]])
    with pytest.raises(DataError, match="sentences"):
        conlleval([["O"], ["O"]], [["O"]])
    with pytest.raises(DataError, match="sentence 0"):
        token_accuracy([["O", "O"]], [["O"]])


# ---------------------------------------------------------------------------
# token accuracy and label table
# ---------------------------------------------------------------------------


def test_token_accuracy():
    gold = [["B-NP", "I-NP", "O"], ["B-VP"]]
    pred = [["B-NP", "B-NP", "O"], ["B-VP"]]
    assert token_accuracy(gold, pred) == 0.75
    assert token_accuracy(["a", "b"], ["a", "c"]) == 0.5  # a flat list is one sentence
    assert token_accuracy([], []) == 0.0
    assert token_accuracy(gold, pred) * 100 == conlleval(gold, pred).accuracy


def test_label_table():
    gold = [["A", "A", "B", "C"]]
    pred = [["A", "B", "B", "B"]]
    # A: tp 1, pred 1, gold 2 -> P 1, R 0.5, F 0.6667, support 2
    # B: tp 1, pred 3, gold 1 -> P 0.3333, R 1, F 0.5, support 1
    # C: tp 0, pred 0, gold 1 -> 0, 0, 0, support 1
    # accuracy 2/4; macro P (1+1/3+0)/3 = 0.4444, R 0.5, F (2/3+0.5)/3 = 0.3889
    # weighted P (2+1/3)/4 = 0.5833, R (1+1)/4 = 0.5, F (4/3+0.5)/4 = 0.4583
    text = label_table(gold, pred)
    w = len("weighted avg")
    expected = (
        "\n".join(
            [
                " " * w + "  precision    recall  f1-score   support",
                "",
                f"{'A':>{w}} " + "    1.0000    0.5000    0.6667         2",
                f"{'B':>{w}} " + "    0.3333    1.0000    0.5000         1",
                f"{'C':>{w}} " + "    0.0000    0.0000    0.0000         1",
                "",
                f"{'accuracy':>{w}} " + " " * 20 + "    0.5000         4",
                f"{'macro avg':>{w}} " + "    0.4444    0.5000    0.3889         4",
                f"{'weighted avg':>{w}} " + "    0.5833    0.5000    0.4583         4",
            ]
        )
        + "\n"
    )
    assert text == expected
    assert "0.67" in label_table(gold, pred, digits=2)
    only_a = label_table(gold, pred, labels=["A"])
    assert "\n           B " not in only_a and "1.0000    0.5000" in only_a


# ---------------------------------------------------------------------------
# properties
# ---------------------------------------------------------------------------

TYPES = ["NP", "VP"]
STANDARD_TAGS = ["O"] + [f"{p}-{t}" for p in "BIES" for t in TYPES]
ODD_TAGS = STANDARD_TAGS + [".", ".-NP", "[-NP", "]-VP", "O-NP", "B", "I", "-NP", "S", "E-0"]

sentence = st.lists(st.sampled_from(STANDARD_TAGS), max_size=12)


@st.composite
def gold_and_pred(draw, alphabet=STANDARD_TAGS):
    lengths = draw(st.lists(st.integers(0, 10), max_size=5))
    tag = st.sampled_from(alphabet)
    gold = [draw(st.lists(tag, min_size=n, max_size=n)) for n in lengths]
    pred = [draw(st.lists(tag, min_size=n, max_size=n)) for n in lengths]
    return gold, pred


def chunk_set(sentences, iobes):
    return {(i,) + c for i, s in enumerate(sentences) for c in chunks(s, iobes=iobes)}


@settings(max_examples=300, deadline=None)
@given(gold_and_pred(), st.booleans())
def test_counts_are_consistent(data, iobes):
    gold, pred = data
    rep = conlleval(gold, pred, iobes=iobes)
    assert rep.correct_chunks <= min(rep.found_chunks, rep.gold_chunks)
    assert 0.0 <= rep.precision <= 100.0 and 0.0 <= rep.recall <= 100.0
    assert rep.tokens == sum(map(len, gold))
    # With well-formed prefixes conlleval's bookkeeping is exactly "same
    # start, same end, same type": correct = |gold chunks & guessed chunks|.
    gold_set, pred_set = chunk_set(gold, iobes), chunk_set(pred, iobes)
    assert rep.gold_chunks == len(gold_set)
    assert rep.found_chunks == len(pred_set)
    assert rep.correct_chunks == len(gold_set & pred_set)
    for name, s in rep.per_type.items():
        assert s.gold == sum(1 for c in gold_set if c[1] == name)
        assert s.found == sum(1 for c in pred_set if c[1] == name)
        assert s.correct == sum(1 for c in gold_set & pred_set if c[1] == name)
    assert sum(s.correct for s in rep.per_type.values()) == rep.correct_chunks
    # The line interface gives the same report.
    assert conlleval_lines(as_lines(gold, pred), iobes=iobes) == rep


@settings(max_examples=200, deadline=None)
@given(gold_and_pred(ODD_TAGS), st.booleans())
def test_counts_bounded_for_odd_tags(data, iobes):
    gold, pred = data
    rep = conlleval(gold, pred, iobes=iobes)
    assert rep.correct_chunks <= min(rep.found_chunks, rep.gold_chunks)
    assert rep.found_chunks == sum(len(chunks(s, iobes=iobes)) for s in pred)
    assert rep.gold_chunks == sum(len(chunks(s, iobes=iobes)) for s in gold)
    # No per-type bound here: conlleval credits a correct chunk to the type of
    # the token *before* the one where it ends, which with '.' tags can differ
    # from the chunk's type (gold "B-NP .-NP", guess "B B-NP .-NP": the NP is
    # correct, closed only by the end of input after '.', and counted for
    # type "" of the last '.' tag).  The port keeps that.


@settings(max_examples=200, deadline=None)
@given(st.lists(sentence, max_size=5), st.booleans())
def test_gold_against_itself(gold, iobes):
    rep = conlleval(gold, gold, iobes=iobes)
    assert rep.correct_chunks == rep.found_chunks == rep.gold_chunks
    if rep.gold_chunks:
        assert rep.precision == rep.recall == rep.f1 == 100.0
    else:
        assert rep.precision == rep.recall == rep.f1 == 0.0
    if rep.tokens:
        assert rep.accuracy == 100.0


# Encoders of a chunk segmentation in the schemes conlleval reads.


@st.composite
def segmentation(draw):
    """A sentence length and its chunks [(type, start, end)], in order."""
    spans = []
    pos = 0
    for _ in range(draw(st.integers(0, 6))):
        pos += draw(st.integers(0, 2))  # gap of O tokens
        length = draw(st.integers(1, 3))
        spans.append((draw(st.sampled_from(TYPES)), pos, pos + length))
        pos += length
    return pos + draw(st.integers(0, 2)), spans


def encode(n, spans, scheme):
    tags = ["O"] * n
    for k, (t, s, e) in enumerate(spans):
        after_same = k > 0 and spans[k - 1][2] == s and spans[k - 1][0] == t
        before_same = k + 1 < len(spans) and spans[k + 1][1] == e and spans[k + 1][0] == t
        for i in range(s, e):
            tags[i] = "I-" + t
        if scheme == "iob2" or (scheme == "iob1" and after_same):
            tags[s] = "B-" + t
        if scheme == "ioe2" or (scheme == "ioe1" and before_same):
            tags[e - 1] = "E-" + t
        if scheme == "iobes":
            if e - s == 1:
                tags[s] = "S-" + t
            else:
                tags[s], tags[e - 1] = "B-" + t, "E-" + t
    return tags


@settings(max_examples=300, deadline=None)
@given(segmentation())
def test_all_schemes_read_the_same_chunks(seg):
    n, spans = seg
    for scheme in ("iob1", "iob2", "ioe1", "ioe2", "iobes"):
        assert chunks(encode(n, spans, scheme)) == spans, scheme
    for scheme in ("iob1", "iob2", "ioe1", "ioe2"):
        assert chunks(encode(n, spans, scheme), iobes=False) == spans, scheme
    # Scoring one encoding against another: every chunk correct.
    gold = [encode(n, spans, "iob1")]
    for scheme in ("iob2", "ioe1", "ioe2", "iobes"):
        rep = conlleval(gold, [encode(n, spans, scheme)])
        assert rep.correct_chunks == rep.found_chunks == rep.gold_chunks == len(spans)


# ---------------------------------------------------------------------------
# real data: the CoNLL-2000 test set
# ---------------------------------------------------------------------------


def _data_dir() -> Path | None:
    env = os.environ.get("CRFKIT_DATA")
    candidates = [Path(env)] if env else []
    candidates.append(Path(__file__).resolve().parents[1].parent / "shared" / "data")
    for c in candidates:
        if c.is_dir():
            return c
    return None


def _conll2000_test() -> Path:
    d = _data_dir()
    path = d / "conll2000" / "test.txt.gz" if d else None
    if path is None or not path.is_file():
        pytest.skip("CoNLL-2000 test data not found (set CRFKIT_DATA)")
    return path


def test_conll2000_gold_against_itself():
    path = _conll2000_test()
    with gzip.open(path, "rt", encoding="ascii") as f:
        lines = [line.rstrip("\n") for line in f]
    # conlleval input: word POS gold guessed (guessed = gold).
    doubled = [f"{line} {line.split()[-1]}" if line.strip() else "" for line in lines]
    rep = conlleval_lines(doubled, name=str(path))
    # conlleval's known counts for the CoNLL-2000 test set.
    assert (rep.tokens, rep.gold_chunks, rep.found_chunks, rep.correct_chunks) == (
        47377,
        23852,
        23852,
        23852,
    )
    assert (rep.accuracy, rep.precision, rep.recall, rep.f1) == (100.0, 100.0, 100.0, 100.0)
    assert rep.per_type["NP"].gold == 12422
    assert rep.format().splitlines()[0] == (
        "processed 47377 tokens with 23852 phrases; found: 23852 phrases; correct: 23852."
    )

    # The same corpus as sentences, guessed in IOB1: the same chunks, so the
    # chunk scores stay 100 while the tag accuracy drops.
    sents, cur = [], []
    for line in lines:
        if line.strip():
            cur.append(line.split()[-1])
        elif cur:
            sents.append(cur)
            cur = []
    if cur:
        sents.append(cur)
    assert len(sents) == 2012
    iob1 = [encode(len(s), chunks(s), "iob1") for s in sents]
    rep1 = conlleval(sents, iob1)
    assert (rep1.tokens, rep1.gold_chunks, rep1.found_chunks, rep1.correct_chunks) == (
        47377,
        23852,
        23852,
        23852,
    )
    assert rep1.f1 == 100.0 and rep1.accuracy < 100.0
    assert rep1.correct_tags == sum(a == b for s, t in zip(sents, iob1) for a, b in zip(s, t))
