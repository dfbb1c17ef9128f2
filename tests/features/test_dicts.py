"""Token-feature dicts -> attribute lists, checked against python-crfsuite's own conversion.

``pycrfsuite.ItemSequence(xseq).items()`` returns, per token, the
``{attribute: value}`` dict python-crfsuite hands to CRFsuite (a later
duplicate overwrites an earlier one in that dict).  crfkit's conversion keeps
the same attributes in the same order, so a last-wins dict of its output must
equal ``items()`` exactly (with ``keep_zeros=True``; by default zero-valued
attributes are dropped, which changes no score).  Without python-crfsuite (it
is not in the ``test`` extra) the comparisons run against
:func:`reference_items`, a hand-written transcription of python-crfsuite's
``to_item`` that is itself checked against pycrfsuite when it is installed.

Speed on the sklearn-crfsuite tutorial's features (CoNLL-2002 Spanish train,
264,715 tokens, 4.96M dict entries; best of 3, process CPU time, a shared 2-core
machine, four runs): ``to_attributes`` 0.96-1.80 s, ``pycrfsuite.ItemSequence`` on
the same dicts 1.57-2.72 s in the same runs (crfkit 1.3-1.6x faster).  Measured by
``test_conversion_speed_on_conll2002`` (marked slow:
``.venv/bin/python -m pytest -m slow tests/test_dicts.py -s``).
"""

from __future__ import annotations

import gzip
import os
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crfkit.errors import DataError
from crfkit.features.dicts import sequence_attributes, to_attributes, token_attributes

try:
    import pycrfsuite
except ImportError:  # not in the test extra: the hand-written reference below stands in
    pycrfsuite = None


def reference_items(xseq) -> list[dict]:
    """What ``pycrfsuite.ItemSequence(xseq).items()`` returns, written from python-crfsuite's
    ``to_item`` (checked against pycrfsuite itself when it is installed)."""

    def item(x):
        out = []
        if isinstance(x, dict):
            for k, v in x.items():
                k = k.decode("utf-8") if isinstance(k, bytes) else k
                if isinstance(v, (dict, list, set)):
                    out += [(k + ":" + a, w) for a, w in item(v)]
                elif isinstance(v, str):
                    out.append((k + ":" + v, 1.0))
                elif isinstance(v, bytes):
                    out.append((k + ":" + v.decode("utf-8"), 1.0))
                else:
                    out.append((k, float(v)))
        else:
            out += [(k.decode("utf-8") if isinstance(k, bytes) else k, 1.0) for k in x]
        return out

    return [dict(item(x)) for x in xseq]


def items(xseq) -> list[dict]:
    return pycrfsuite.ItemSequence(xseq).items() if pycrfsuite else reference_items(xseq)


needs_pycrfsuite = pytest.mark.skipif(pycrfsuite is None, reason="python-crfsuite not installed")


def as_dict(tok) -> dict:
    """Last-wins {name: value} of a converted token, the way items() builds its dicts."""
    d = {}
    for a in tok:
        if isinstance(a, str):
            d[a] = 1.0
        else:
            assert type(a) is tuple and len(a) == 2 and type(a[0]) is str and type(a[1]) is float
            d[a[0]] = a[1]
    return d


def check_like_pycrfsuite(xseq):
    ref = items(xseq)
    full = sequence_attributes(xseq, keep_zeros=True)
    assert [as_dict(t) for t in full] == ref
    dropped = sequence_attributes(xseq)
    assert [as_dict(t) for t in dropped] == [{k: v for k, v in r.items() if v != 0} for r in ref]
    for tok in full + dropped:
        assert all(type(a) is str or type(a[0]) is str for a in tok)
    return full


CASES = {
    "str": [{"w": "Rockwell", "pos": "NNP"}, {"w": "said"}],
    "int_float": [
        {"bias": 1.0, "n": 3, "x": 2.5, "neg": -0.25, "one_int": 1, "zero": 0, "fzero": 0.0}
    ],
    "bool": [{"isupper": True, "istitle": False, "BOS": True}],
    "nested_dict": [{"f": {"g": "h", "i": 1.5, "j": {"k": "l", "m": True}}}],
    "nested_list": [{"m": ["n", "o"], "p": {"q": ["r", "s"]}}],
    "set": [{"p": {"q"}}, {"p": set()}],
    "empty": [{}, {"a": {}}, {"a": []}],
    "unicode": [{"mot": "é", "éü": "ñ", "x": ["日本", "語"]}, {"ключ": 2.0}],
    "colons": [{"a:b": "c:d", "": "x", "e": ""}],
    "bytes": [{b"k": b"v", "s": [b"t"]}],
    "numpy": [
        {
            "a": np.float32(1.5),
            "b": np.int64(3),
            "c": np.bool_(True),
            "d": np.str_("x"),
            np.str_("e"): np.float64(0.0),
        }
    ],
    "big_int": [{"a": 10**20}],
    "negative_zero": [{"a": -0.0}],
    "list_tokens": [["a", "b"], ["c"], []],
    "tuple_and_set_tokens": [("a", "b"), {"c"}],
    "mixed_tokens": [{"w": "x"}, ["w:y", "cap"]],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_same_attributes_as_pycrfsuite(case):
    check_like_pycrfsuite(CASES[case])


def test_exact_output_of_the_tutorial_shapes():
    tok = {
        "bias": 1.0,
        "word.lower()": "melbourne",
        "word.isupper()": False,
        "word.istitle()": True,
        "postag": "NP",
        "-1:postag": "Fc",
        "BOS": True,
        "n": 2,
    }
    assert token_attributes(tok) == [
        "bias",
        "word.lower():melbourne",
        "word.istitle()",
        "postag:NP",
        "-1:postag:Fc",
        "BOS",
        ("n", 2.0),
    ]
    assert token_attributes(tok, keep_zeros=True)[2] == ("word.isupper()", 0.0)


def test_duplicates_are_kept_as_crfsuite_keeps_them():
    # CRFsuite's Item keeps both entries (their values add up); items() shows only the last
    assert token_attributes(["a", "b", "a"]) == ["a", "b", "a"]
    assert token_attributes({"a": "x", "a:x": 3}) == ["a:x", ("a:x", 3.0)]
    assert token_attributes({"a": ["x", "x"]}) == ["a:x", "a:x"]


def test_crfkit_pairs_in_list_tokens_are_accepted():
    assert token_attributes(["a", ("b", 2), ("c", 1.0), ("d", 0)]) == ["a", ("b", 2.0), "c"]
    assert token_attributes([("d", 0)], keep_zeros=True) == [("d", 0.0)]


def test_crfkit_format_passes_through_unchanged():
    X = [[["a", "b"], ["c"]], [["d"]]]
    assert to_attributes(X) == X


def test_sequences_of_any_iterable():
    xseq = [{"a": "x", "b": 2.0}, {"c": True}]
    expected = [["a:x", ("b", 2.0)], ["c"]]
    assert to_attributes([tuple(xseq)]) == [expected]
    assert to_attributes(iter([iter(xseq)])) == [expected]


@needs_pycrfsuite
def test_item_sequences_are_accepted():
    xseq = [{"a": "x", "b": 2.0}, {"c": True}]
    assert to_attributes([pycrfsuite.ItemSequence(xseq)]) == [[["a:x", ("b", 2.0)], ["c"]]]


@needs_pycrfsuite
@pytest.mark.parametrize("case", sorted(CASES))
def test_reference_is_pycrfsuite(case):
    assert reference_items(CASES[case]) == pycrfsuite.ItemSequence(CASES[case]).items()


# NUL is left out: CRFsuite keeps C strings and cuts names at a NUL; crfkit keeps them whole
_txt = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=3
)


@needs_pycrfsuite
@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.dictionaries(
            _txt,
            st.recursive(
                st.one_of(_txt, st.booleans(), st.integers(-3, 3), st.floats(-3, 3)),
                lambda inner: st.one_of(
                    st.dictionaries(_txt, inner, max_size=3), st.lists(_txt, max_size=3)
                ),
                max_leaves=5,
            ),
            max_size=4,
        ),
        max_size=3,
    )
)
def test_reference_is_pycrfsuite_random(xseq):
    assert reference_items(xseq) == pycrfsuite.ItemSequence(xseq).items()


def test_fast_and_general_paths_agree():
    # one corpus where every token is a flat dict (fast loop) vs the same tokens one by one
    rng = np.random.default_rng(3)
    X = [
        [
            {
                "w": f"w{rng.integers(50)}",
                "b": bool(rng.integers(2)),
                "v": float(rng.integers(-2, 3)) / 2,
                "bias": 1.0,
            }
            for _ in range(int(rng.integers(1, 8)))
        ]
        for _ in range(40)
    ]
    for keep in (False, True):
        fast = to_attributes(X, keep_zeros=keep)
        slow = [[token_attributes(t, keep_zeros=keep) for t in s] for s in X]
        assert fast == slow
        for s in X:
            check_like_pycrfsuite(s)


# ------------------------------------------------------------------ property test
names = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=4
)
leaf = st.one_of(
    names,
    st.booleans(),
    st.integers(-3, 3),
    st.floats(-5, 5, allow_nan=False, allow_infinity=False, width=64),
)
values = st.recursive(
    leaf,
    lambda inner: st.one_of(
        st.dictionaries(names, inner, max_size=3),
        st.lists(names, max_size=3),
        st.sets(names, max_size=3),
    ),
    max_leaves=6,
)
tokens = st.one_of(st.dictionaries(names, values, max_size=5), st.lists(names, max_size=4))


@settings(max_examples=200, deadline=None)
@given(st.lists(tokens, max_size=5))
def test_random_feature_dicts_like_pycrfsuite(xseq):
    check_like_pycrfsuite(xseq)


# ------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "tok, words",
    [
        ({"a": None}, ["'a'", "NoneType"]),
        ({"a": ("x", "y")}, ["'a'", "tuple"]),
        ({"a": 1j}, ["'a'", "complex"]),
        ({1: "x"}, ["1", "int", "strings"]),
        ({"a": float("nan")}, ["'a'", "non-finite"]),
        ({"a": float("inf")}, ["'a'", "non-finite"]),
        ({"a": 10**400}, ["'a'", "int"]),
        ({"a": ["x", 2]}, ["'a'", "2", "strings"]),
        ({"a": {"b": object()}}, ["'a:b'", "object"]),
        ("word", ["string"]),
        (3, ["int"]),
        ([("a", "x")], ["'a'", "str"]),
    ],
)
def test_bad_values_name_sequence_and_token(tok, words):
    X = [[{"ok": "x"}], [{"ok": "y"}, {"ok": "z"}, tok]]
    with pytest.raises(DataError) as e:
        to_attributes(X, name="X_train")
    msg = str(e.value)
    assert msg.startswith("X_train: sequence 1, token 2: "), msg
    for w in words:
        assert w in msg, msg


def test_bad_containers():
    for X in ("abc", {"a": 1}, 3, [{"a": "x"}], [3]):
        with pytest.raises(DataError):
            to_attributes(X)


def test_garbage_collector_state_is_restored():
    import gc

    assert gc.isenabled()
    to_attributes([[{"a": "x"}]])
    assert gc.isenabled()
    with pytest.raises(DataError):
        to_attributes([[{"a": None}]])
    assert gc.isenabled()
    gc.disable()
    try:
        to_attributes([[{"a": "x"}]])
        assert not gc.isenabled()
    finally:
        gc.enable()


# -------------------------------------------------------------------------- speed
def _conll2002_dicts(limit=None):
    from crfkit.datasets import data_dir

    path = os.path.join(data_dir() or "", "conll2002", "esp.train.gz")
    if not os.path.exists(path):
        pytest.skip("CoNLL-2002 data not found")
    sents, cur = [], []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            line = line.split()
            if not line:
                if cur:
                    sents.append(cur)
                cur = []
            else:
                cur.append(line)
    if cur:
        sents.append(cur)

    def word2features(sent, i):  # the sklearn-crfsuite tutorial's features
        word, postag = sent[i][0], sent[i][1]
        f = {
            "bias": 1.0,
            "word.lower()": word.lower(),
            "word[-3:]": word[-3:],
            "word[-2:]": word[-2:],
            "word.isupper()": word.isupper(),
            "word.istitle()": word.istitle(),
            "word.isdigit()": word.isdigit(),
            "postag": postag,
            "postag[:2]": postag[:2],
        }
        if i > 0:
            w1, p1 = sent[i - 1][0], sent[i - 1][1]
            f.update(
                {
                    "-1:word.lower()": w1.lower(),
                    "-1:word.istitle()": w1.istitle(),
                    "-1:word.isupper()": w1.isupper(),
                    "-1:postag": p1,
                    "-1:postag[:2]": p1[:2],
                }
            )
        else:
            f["BOS"] = True
        if i < len(sent) - 1:
            w1, p1 = sent[i + 1][0], sent[i + 1][1]
            f.update(
                {
                    "+1:word.lower()": w1.lower(),
                    "+1:word.istitle()": w1.istitle(),
                    "+1:word.isupper()": w1.isupper(),
                    "+1:postag": p1,
                    "+1:postag[:2]": p1[:2],
                }
            )
        else:
            f["EOS"] = True
        return f

    sents = sents[:limit]
    return [[word2features(s, i) for i in range(len(s))] for s in sents]


@pytest.mark.slow
@needs_pycrfsuite
def test_conversion_speed_on_conll2002():
    X = _conll2002_dicts()
    n_tok = sum(map(len, X))
    best = {}
    for _ in range(3):
        t = time.process_time()
        A = to_attributes(X)
        best["crfkit"] = min(best.get("crfkit", 1e9), time.process_time() - t)
        t = time.process_time()
        S = [pycrfsuite.ItemSequence(x) for x in X]
        best["pycrfsuite"] = min(best.get("pycrfsuite", 1e9), time.process_time() - t)
    print(
        f"\n{len(X)} sequences, {n_tok} tokens: to_attributes {best['crfkit']:.2f}s "
        f"({n_tok / best['crfkit'] / 1e3:.0f}k tokens/s), pycrfsuite.ItemSequence {best['pycrfsuite']:.2f}s"
    )
    for s, a in zip(S[:500], A[:500]):
        assert [as_dict(t) for t in a] == [
            {k: v for k, v in r.items() if v != 0} for r in s.items()
        ]
