"""Feature space construction and encoding, checked on hand-made examples (counts by hand)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import markov_corpus, random_sequences, token_attr_totals
from conftest import run_cli as run
from crfkit import cli
from crfkit.errors import DataError
from crfkit.estimator import CRF
from crfkit.features.encode import build, encode
from crfkit.train import train

# Two sentences, counts by hand.
#   S1: [a b] [a c] [d]            labels X Y X
#   S2: [a]   [c c] [b (e, 2.5)]   labels Y Y Z
# (attribute, label) pairs and how often they occur:
#   (a,X)=1 (b,X)=1 (d,X)=1 (a,Y)=2 (c,Y)=3 (b,Z)=1 (e,Z)=1      -> 7 observed state features
# attribute occurrences: a=3 b=2 c=3 d=1 e=1
# label bigrams inside sentences: X->Y, Y->X, Y->Y, Y->Z            -> 4 observed transitions
X2 = [[["a", "b"], ["a", "c"], ["d"]], [["a"], ["c", "c"], ["b", ("e", 2.5)]]]
Y2 = [["X", "Y", "X"], ["Y", "Y", "Z"]]
PAIRS = {("a", "X"), ("b", "X"), ("d", "X"), ("a", "Y"), ("c", "Y"), ("b", "Z"), ("e", "Z")}


def _pairs(space):
    fa = space.feature_attr()
    return {
        (space.attributes[a], space.labels[l])
        for a, l in zip(fa.tolist(), space.feat_label.tolist())
    }


def _trans_pairs(space):
    L = space.labels
    return {
        (L[i], L[j]) for i in range(len(L)) for j in range(len(L)) if space.trans_index[i, j] >= 0
    }


def _decode_corpus(space, corpus):
    """The corpus back as (per token: sorted list of (attribute name, value)), label names."""
    toks = []
    for t in range(corpus.n_tokens):
        es = range(corpus.tok_ptr[t], corpus.tok_ptr[t + 1])
        toks.append(sorted((space.attributes[corpus.attr[e]], float(corpus.val[e])) for e in es))
    labels = [space.labels[k] if k >= 0 else None for k in corpus.y.tolist()]
    return toks, labels


def test_observed_space_has_exactly_the_seen_pairs():
    space, corpus = build(X2, Y2, support="observed")
    assert space.labels == ["X", "Y", "Z"]  # first occurrence
    assert set(space.attributes) == {"a", "b", "c", "d", "e"}
    assert space.n_state == 7
    assert _pairs(space) == PAIRS
    assert space.n_trans == 4
    assert _trans_pairs(space) == {("X", "Y"), ("Y", "X"), ("Y", "Y"), ("Y", "Z")}
    assert space.n_features == 11
    # CSR by attribute: attr_ptr consistent with feature_attr, labels sorted within an attribute
    for a in range(space.n_attributes):
        labs = space.feat_label[space.attr_ptr[a] : space.attr_ptr[a + 1]]
        assert list(labs) == sorted(labs)
    # transition offsets are a permutation of 0..n_trans-1
    ti = space.trans_index[space.trans_index >= 0]
    assert sorted(ti.tolist()) == list(range(4))


def test_corpus_arrays_by_hand():
    space, corpus = build(X2, Y2)
    assert corpus.seq_ptr.tolist() == [0, 3, 6]
    assert corpus.tok_ptr.tolist() == [0, 2, 4, 5, 6, 8, 10]
    toks, labels = _decode_corpus(space, corpus)
    assert toks == [
        [("a", 1.0), ("b", 1.0)],
        [("a", 1.0), ("c", 1.0)],
        [("d", 1.0)],
        [("a", 1.0)],
        [("c", 1.0), ("c", 1.0)],
        [("b", 1.0), ("e", 2.5)],
    ]
    assert labels == ["X", "Y", "X", "Y", "Y", "Z"]
    assert (
        corpus.attr.dtype == np.int32
        and corpus.val.dtype == np.float64
        and corpus.y.dtype == np.int32
    )
    assert (
        corpus.n_sequences == 2
        and corpus.n_tokens == 6
        and corpus.max_length == 3
        and corpus.has_labels
    )


def test_all_support_and_mixed_transitions():
    space, _ = build(X2, Y2, support="all")
    assert space.n_state == 5 * 3 and space.n_trans == 9
    assert _pairs(space) == {(a, l) for a in "abcde" for l in "XYZ"}
    s2, _ = build(X2, Y2, support="observed", transitions="all")
    assert s2.n_state == 7 and s2.n_trans == 9
    s3, _ = build(X2, Y2, support="all", transitions="observed")
    assert s3.n_state == 15 and s3.n_trans == 4
    assert _trans_pairs(s3) == {("X", "Y"), ("Y", "X"), ("Y", "Y"), ("Y", "Z")}


def test_attribute_and_label_order():
    # every attribute's frequency is non-increasing in first-occurrence order here, so
    # first-occurrence order and frequency order agree: p q r s
    X = [[["p", "q"], ["p", "r"]], [["p", "q", "s"]]]
    Y = [["B", "A"], ["C"]]
    space, corpus = build(X, Y, support="all")
    assert space.labels == ["B", "A", "C"]
    assert space.attributes == ["p", "q", "r", "s"]
    # rebuilding gives the same order (no dependence on hashing)
    again, _ = build(X, Y, support="all")
    assert again.attributes == space.attributes and again.labels == space.labels
    # whatever the order, features and corpus use the same ids
    space, corpus = build(X2, Y2, support="observed")
    toks, _ = _decode_corpus(space, corpus)
    assert toks[5] == [("b", 1.0), ("e", 2.5)]
    assert sorted(space.attributes) == ["a", "b", "c", "d", "e"]


def test_attributes_numbered_by_decreasing_frequency():
    """Attribute ids by decreasing frequency, ties by first occurrence (encode.build's rule)."""
    space, corpus = build(X2, Y2, support="observed")
    # a=3 c=3 b=2 d=1 e=1 (a before c: first occurrence)
    assert space.attributes == ["a", "c", "b", "d", "e"]
    assert corpus.attr.tolist() == [0, 2, 0, 1, 3, 0, 1, 1, 2, 4]
    s2, _ = build(X2, Y2, support="all", min_freq=2)
    assert s2.attributes == ["a", "c", "b"]
    s3, _ = build([[["z"], ["y"], ["y"], ["x", "z"]]], [["A", "B", "A", "B"]], support="all")
    assert s3.attributes == ["z", "y", "x"]


def test_min_freq_observed_drops_features_and_attributes():
    space, corpus = build(X2, Y2, support="observed", min_freq=2)
    # kept: (a,Y)=2 and (c,Y)=3 only -> attributes a, c
    assert _pairs(space) == {("a", "Y"), ("c", "Y")}
    assert set(space.attributes) == {"a", "c"} and space.n_state == 2
    assert space.n_trans == 4  # transitions do not depend on min_freq
    toks, _ = _decode_corpus(space, corpus)
    assert toks == [
        [("a", 1.0)],
        [("a", 1.0), ("c", 1.0)],
        [],
        [("a", 1.0)],
        [("c", 1.0), ("c", 1.0)],
        [],
    ]
    assert corpus.tok_ptr.tolist() == [0, 1, 3, 3, 4, 6, 6]
    s3, _ = build(X2, Y2, support="observed", min_freq=3)
    assert _pairs(s3) == {("c", "Y")}
    s0, _ = build(X2, Y2, support="observed", min_freq=1)
    assert _pairs(s0) == PAIRS


def test_min_freq_all_drops_rare_attributes():
    space, corpus = build(X2, Y2, support="all", min_freq=2)
    assert set(space.attributes) == {"a", "b", "c"} and space.n_state == 9
    toks, _ = _decode_corpus(space, corpus)
    assert toks == [
        [("a", 1.0), ("b", 1.0)],
        [("a", 1.0), ("c", 1.0)],
        [],
        [("a", 1.0)],
        [("c", 1.0), ("c", 1.0)],
        [("b", 1.0)],
    ]
    s3, _ = build(X2, Y2, support="all", min_freq=3)
    assert set(s3.attributes) == {"a", "c"} and s3.n_state == 6


def test_encode_drops_unknown_attributes_and_marks_unknown_labels():
    space, _ = build(X2, Y2)
    X = [[["a", "zzz", ("e", -1.5)], ["nope"], []], [[("c", 0.25), "b"]]]
    Y = [["X", "W", "Z"], ["Y"]]
    c = encode(X, space, Y)
    toks, labels = _decode_corpus(space, c)
    assert toks == [[("a", 1.0), ("e", -1.5)], [], [], [("b", 1.0), ("c", 0.25)]]
    assert labels == ["X", None, "Z", "Y"]
    assert c.y.tolist()[1] == -1 and not c.has_labels
    assert c.seq_ptr.tolist() == [0, 3, 4]
    # without labels: all -1
    c2 = encode(X, space)
    assert c2.y.tolist() == [-1, -1, -1, -1]
    np.testing.assert_array_equal(c2.attr, c.attr)
    # encoding the training data again gives the training corpus
    _, corpus = build(X2, Y2)
    again = encode(X2, space, Y2)
    for k in ("seq_ptr", "tok_ptr", "attr", "val", "y"):
        np.testing.assert_array_equal(getattr(again, k), getattr(corpus, k))


def test_random_corpora_encode_consistently():
    """On random data the corpus holds exactly the known attributes of every token, with values."""
    rng = np.random.default_rng(3)
    for trial in range(10):
        X, Y = random_sequences(rng, 8, n_attr=12, real=True, max_len=6)
        support = ["observed", "all"][trial % 2]
        mf = [0, 1, 2, 3][trial % 4]
        space, corpus = build(X, Y, support=support, min_freq=mf)
        known = set(space.attributes)
        toks, labels = _decode_corpus(space, corpus)
        flat = [tok for x in X for tok in token_attr_totals([list(t) for t in x])]
        assert len(toks) == len(flat)
        for got, want in zip(toks, flat):
            g = {}
            for n, v in got:
                g[n] = g.get(n, 0.0) + v
            assert g.keys() == {n for n in want if n in known}
            for n in g:
                assert g[n] == pytest.approx(want[n], rel=1e-12, abs=1e-12)
        assert labels == [lab for y in Y for lab in y]
        # observed support: every feature's pair is seen at least min_freq times
        if support == "observed":
            counts = {}
            for x, y in zip(X, Y):
                for tok, lab in zip(x, y):
                    for a in tok:
                        n = a if isinstance(a, str) else a[0]
                        counts[(n, lab)] = counts.get((n, lab), 0) + 1
            assert _pairs(build(X, Y, support="observed", min_freq=mf)[0]) == {
                k for k, c in counts.items() if c >= mf
            }


@pytest.mark.parametrize(
    "X,Y",
    [
        ([[["a"]]], [["x", "y"]]),  # label count mismatch
        ([[["a"]]], []),  # sequence count mismatch
        ([[[("a", "big")]]], [["x"]]),  # value not a number
        ([[[("a", float("nan"))]]], [["x"]]),  # non-finite value
        ([[[3]]], [["x"]]),  # attribute not a string
        ([], []),  # no sequences
        ([[]], [[]]),  # no tokens
    ],
)
def test_bad_training_data_is_data_error(X, Y):
    with pytest.raises(DataError):
        build(X, Y)


def test_bad_support_names():
    with pytest.raises(ValueError):
        build(X2, Y2, support="some")
    with pytest.raises(ValueError):
        build(X2, Y2, transitions="some")


def test_subset_of_corpus():
    space, corpus = build(X2, Y2)
    sub = corpus.subset([1, 0])
    toks, labels = _decode_corpus(space, sub)
    full, flabels = _decode_corpus(space, corpus)
    assert toks == full[3:] + full[:3] and labels == flabels[3:] + flabels[:3]
    assert sub.seq_ptr.tolist() == [0, 3, 6]


def test_empty_training_sequence_is_a_clear_error():
    with pytest.raises(DataError, match="sequence 1 is empty"):
        build([[["a"]], [], [["b"]]], [["x"], [], ["y"]])


# --------------------------------------------------------------------------- the bound on feature
# values


def _attr_file(path: Path, value: str) -> Path:
    lines = []
    for i in range(12):
        lines += [f"A\tw=a{i % 3}\tx:{value if i == 7 else '0.5'}", f"B\tw=b{i % 2}", ""]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("value", ["1e300", "1e150", "-2e6", "1000000.5"])
def test_cli_refuses_huge_attribute_values_with_file_and_line(tmp_path, capsys, value):
    f = _attr_file(tmp_path / "big.txt", value)
    rc, out, err = run(capsys, "train", f, "-m", tmp_path / "m.crfkit", "-f", "crfsuite", "-q")
    assert rc == cli.EXIT_ERROR, out
    # item 7 of the sequences: the 8th sequence starts on line 3*7 + 1 = 22
    assert f"{f}:22:" in err and "'x'" in err and "|value| <= 1e+06" in err
    assert not (tmp_path / "m.crfkit").exists()


def test_the_bound_itself_is_accepted(tmp_path, capsys):
    f = _attr_file(tmp_path / "edge.txt", "-1e6")
    rc, out, err = run(
        capsys,
        "train",
        f,
        "-m",
        tmp_path / "m.crfkit",
        "-f",
        "crfsuite",
        "-q",
        "--max-iterations",
        "3",
    )
    assert rc == 0, err
    # the CLI shows crfkit's warnings as lines, also with -q
    assert "crfkit: warning: feature values reach 1e+06 (sequence 7, token 0)" in err


def test_estimator_and_api_refuse_huge_values_naming_sequence_and_token():
    X, Y = markov_corpus(2, 10)
    Xd = [[{a if isinstance(a, str) else a[0]: 1.0 for a in tok} for tok in s] for s in X]
    Xd[3][1]["len"] = 1e300
    with pytest.raises(
        DataError, match=r"sequence 3, token 1: attribute 'len' has the value 1e\+300"
    ):
        CRF(max_iterations=2).fit(Xd, Y)
    X[4][0].append(("big", -1e150))
    with pytest.raises(DataError, match=r"sequence 4, token 0: attribute 'big'"):
        train(X, Y, max_iterations=2)
    # tagging refuses them too (scores would be inf)
    Xc, Yc = markov_corpus(2, 10)
    model = train(Xc, Yc, max_iterations=2).model
    with pytest.raises(DataError, match="sequence 0, token 0"):
        model.tag([[[("len", 2e6)]]])


def test_dense_values_are_bounded(tmp_path, capsys):
    X, Y = markov_corpus(2, 6)
    dense = [np.ones((len(s), 2)) for s in X]
    dense[2][1, 1] = 1e300
    with pytest.raises(DataError, match=r"sequence 2, token 1: dense feature 1 is 1e\+300"):
        train(X, Y, dense=dense, max_iterations=2)
    # a dense column of a column file: file:line
    f = tmp_path / "d.txt"
    f.write_text("a N 0.5 B-NP\nb V 3e200 B-VP\n\nc N 0.1 B-NP\n")
    rc, out, err = run(
        capsys, "train", f, "-m", tmp_path / "m.crfkit", "--dense-columns", "3", "-q"
    )
    assert rc == cli.EXIT_ERROR and f"{f}:2:" in err and "3e200" in err


def test_large_values_within_the_bound_warn():
    X, Y = markov_corpus(2, 10)
    X[1][0].append(("big", 500.0))
    with pytest.warns(RuntimeWarning, match="feature values reach 500 \\(sequence 1, token 0\\)"):
        train(X, Y, max_iterations=2)
    logged = []
    train(X, Y, max_iterations=1, verbose=True, log=logged.append)
    assert any(x.startswith("warning: feature values reach 500") for x in logged)
