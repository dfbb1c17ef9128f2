"""NETtalk (issue 18): the loader and its split, the joint labels, the paper's window feature sets
(against a brute-force enumeration written here from the paper's definitions), candidate counts
(against crfkit's own feature space), and the incremental stage rule."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import run_cli
from crfkit.datasets import data_dir
from crfkit.datasets.nettalk import (
    joint_label_count,
    load_nettalk,
    nettalk_fold,
    nettalk_split,
    nettalk_split_folds,
    phoneme_of,
    read_nettalk,
    write_columns,
)
from crfkit.errors import DataError, ParameterError, TemplateError
from crfkit.features.windows import (
    Window,
    candidate_counts,
    parent_window,
    parse_preset,
    pattern_text,
    preset_templates,
    stages,
    windows_of,
)
from crfkit.io.columns import Sentence, read_columns_list

NETTALK = data_dir() / "nettalk" / "nettalk.data.gz"
needs_data = pytest.mark.skipif(not NETTALK.is_file(), reason="shared NETtalk data not here")


# --------------------------------------------------------------------------- loader and split


def _write(tmp_path, lines, name="n.data"):
    p = tmp_path / name
    p.write_text("".join(line + "\n" for line in lines))
    return p


def test_split_folds_rotate_and_partition():
    for k in range(10):
        tr, dv, te = nettalk_split_folds(k)
        assert te == k and dv == (k - 1) % 10 and len(tr) == 8
        assert sorted(tr + (dv, te)) == list(range(10))
    assert nettalk_split_folds() == ((0, 1, 2, 3, 4, 5, 6, 7), 8, 9)
    for bad in (-1, 10, 2.0, True, "9"):
        with pytest.raises(ValueError, match="test_fold"):
            nettalk_split_folds(bad)


def test_small_file_split_is_by_index_mod_10(tmp_path):
    words = [f"w{chr(97 + i % 26)}{chr(97 + i // 26)}" for i in range(37)]
    lines = [f"{w}\t{w.upper()}\t{'0' * len(w)}\t0" for w in words]
    p = _write(tmp_path, lines)
    tr, dv, te = nettalk_split(9, path=p)
    got = {"".join(c[0] for c in s.columns): i for i, s in enumerate(tr)}
    assert [("".join(c[0] for c in s.columns)) for s in te] == [
        words[i] for i in range(37) if i % 10 == 9
    ]
    assert [("".join(c[0] for c in s.columns)) for s in dv] == [
        words[i] for i in range(37) if i % 10 == 8
    ]
    assert set(got) == {words[i] for i in range(37) if i % 10 < 8}
    # line numbers kept for messages; labels letter-aligned
    assert tr[0].line == 1 and tr[0].labels == list(words[0].upper())
    assert [nettalk_fold(i) for i in range(12)] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1]


@needs_data
def test_shared_split_deterministic_disjoint_and_complete():
    a = nettalk_split()
    b = nettalk_split()
    assert [[s.columns for s in part] for part in a] == [[s.columns for s in part] for part in b]
    tr, dv, te = a
    assert (len(tr), len(dv), len(te)) == (16007, 2000, 2000)
    ids = [{s.line for s in part} for part in a]
    assert not (ids[0] & ids[1]) and not (ids[0] & ids[2]) and not (ids[1] & ids[2])
    assert len(ids[0] | ids[1] | ids[2]) == 20007
    # every fold of load_nettalk matches the split's pieces; the folds cover the file
    allw = load_nettalk()
    assert len(allw) == 20007 and sum(len(s) for s in allw) == 146934
    assert {s.line for s in load_nettalk(9)} == ids[2]
    assert {s.line for s in load_nettalk([0, 1, 2, 3, 4, 5, 6, 7])} == ids[0]
    assert len({y for s in allw for y in s.labels}) == 51


@needs_data
def test_joint_labels_count_and_phoneme_recovery():
    ph = load_nettalk(labels="phoneme")
    jo = load_nettalk(labels="joint")
    stress = load_nettalk(labels="stress")
    assert joint_label_count(jo) == 163  # letter-aligned marks; the paper reports 114 (see docs)
    assert joint_label_count(stress) == 5
    for a, b, c in zip(ph[:500], jo[:500], stress[:500]):
        assert [phoneme_of(y) for y in b.labels] == a.labels
        assert [y[1:] for y in b.labels] == c.labels


def test_bad_lines_name_file_and_line(tmp_path):
    cases = [
        ("abc\tab-\t01\t0", "letter-aligned"),
        ("abc\tab\t012", "4"),
        ("abc\tabc\t01x\t0", "stress mark"),
        ("abc\tabc\t012\tz", "class"),
    ]
    for bad, why in cases:
        p = _write(tmp_path, ["ok\tok\t01\t0", bad])
        with pytest.raises(DataError, match=why) as e:
            read_nettalk(p)
        assert str(p) in str(e.value) and ":2" in str(e.value)
    with pytest.raises(ValueError, match="labels"):
        load_nettalk(labels="prosody", path=_write(tmp_path, ["ok\tok\t01\t0"]))


def test_write_columns_round_trip(tmp_path):
    p = _write(tmp_path, ["cat\tk@t\t1<0\t0", "to\tt-\t1<\t0"])
    sents = load_nettalk(path=p, labels="joint")
    out = tmp_path / "c.txt"
    write_columns(sents, out)
    back = read_columns_list(out)
    assert [s.columns for s in back] == [s.columns for s in sents]
    assert [s.labels for s in back] == [["k1", "@<", "t0"], ["t1", "-<"]]


# --------------------------------------------------------------------------- feature sets


def _brute_windows(n: int, kind: str) -> set:
    """The windows of a feature set straight from the paper's wording (section 5.1.1)."""
    r = n // 2
    inside = [
        (a, b) for a in range(-r, r + 1) for b in range(a, r + 1)
    ]  # every letter sequence in the window
    centred = {(a, b) for a, b in inside if a == -b}  # odd sizes 1, 3, ..., n
    if kind == "-":
        return {(-r, r)}
    out = centred | {"empty"}
    if kind == "+":  # even sizes: the windows of size k that are as centred as can be (|a + b| = 1)
        out |= {(a, b) for a, b in inside if (b - a + 1) % 2 == 0 and abs(a + b) == 1}
    if kind == "++":
        out |= set(inside)
    return out


def _brute_value(word: str, t: int, a: int, b: int) -> str:
    vals = []
    for j in range(t + a, t + b + 1):
        if j < 0:
            vals.append(f"_B{j}")
        elif j >= len(word):
            vals.append(f"_B+{j - len(word) + 1}")
        else:
            vals.append(word[j])
    return "/".join(vals)


@pytest.mark.parametrize("n", [1, 3, 5, 7])
@pytest.mark.parametrize("kind", ["", "-", "+", "++"])
def test_windows_match_the_paper_definitions(n, kind):
    spec = parse_preset(f"nettalk:{n}-grm{kind}")
    got = {("empty" if w.empty else (w.lo, w.hi)) for w in windows_of(spec)}
    assert got == _brute_windows(n, kind)


def test_lemma_example_of_the_paper():
    # "the active bigram features at position t = 2 in the sequence x = 'lemma'" (the 'e')
    cols = [[c] for c in "lemma"]

    def pair_values(preset):
        t = preset_templates(preset)
        return {a.split(":", 1)[1] for a in t.apply_bigram(cols)[1]} | (
            {"(y',y)"} if t.bigram else set()
        )

    assert pair_values("nettalk:3-grm") == {"(y',y)", "e", "l/e/m"}
    assert pair_values("nettalk:3-grm-") == {"l/e/m"}
    assert pair_values("nettalk:3-grm+") == {"(y',y)", "e", "l/e/m", "l/e", "e/m"}
    assert pair_values("nettalk:3-grm++") == {"(y',y)", "e", "l/e/m", "l/e", "e/m", "l", "m"}
    assert preset_templates("nettalk:3-grm:u").bigram_observation == []


words_st = st.lists(st.text(alphabet="abcde", min_size=1, max_size=7), min_size=1, max_size=6)


@settings(max_examples=40, deadline=None)
@given(words=words_st, n=st.sampled_from([1, 3, 5]), kind=st.sampled_from(["", "-", "+", "++"]))
def test_generated_attributes_and_counts_against_brute_force(words, n, kind):
    spec = parse_preset(f"{n}-grm{kind}")
    templates = preset_templates(spec)
    L = 3
    brute_values: dict = {}
    wins = _brute_windows(n, kind)
    for word in words:
        got_u = templates.apply([[c] for c in word])
        got_b = templates.apply_bigram([[c] for c in word])
        for t in range(len(word)):
            want = {"empty" if w == "empty" else (w, _brute_value(word, t, *w)) for w in wins}
            have = set()
            for a in got_u[t]:
                if a == "*":
                    have.add("empty")
                    continue
                name, val = a[1:].split(":", 1)
                lo, hi = (int(x) for x in name[1:].replace("+", " +").replace("-", " -").split())
                have.add(((lo, hi), val))
            assert have == want
            assert sorted(got_b[t]) == sorted(a for a in got_u[t] if a != "*")
            for w in wins:
                if w != "empty":
                    brute_values.setdefault(w, set()).add(_brute_value(word, t, *w))
    n_pairs = sum(len(v) for v in brute_values.values())
    base = (L + L * L) if "empty" in wins else 0
    want_total = n_pairs * (L + L * L) + base
    # crfkit leaves out the label-pair features of values seen only at a word's first letter
    inner = sum(
        len({_brute_value(word, t, *w) for word in words for t in range(1, len(word))})
        for w in wins
        if w != "empty"
    )
    want_crfkit = n_pairs * L + inner * L * L + base
    got = candidate_counts(spec, words, L)
    assert got["total"] == want_total and got["total_crfkit"] == want_crfkit
    # and that is the size of crfkit's own feature space with every label / label pair (support all)
    from crfkit.features.encode import build

    labels = ["A", "B", "C"]
    Y = [[labels[(i + t) % 3] for t in range(len(w))] for i, w in enumerate(words)]
    X = [templates.apply([[c] for c in w]) for w in words]
    B = (
        [templates.apply_bigram([[c] for c in w]) for w in words]
        if templates.bigram_observation
        else None
    )
    if len({y for ys in Y for y in ys}) == L:
        space, _ = build(
            X, Y, support="all", B=B, transitions="all" if templates.bigram else "none"
        )
        assert space.n_features == want_crfkit
    u = parse_preset(f"{n}-grm{kind}:u")
    assert candidate_counts(u, words, L)["total"] == n_pairs * L + (
        (L + L * L) if "empty" in wins else 0
    )


def test_pattern_text_formats_parse_alike():
    for preset in ("nettalk:5-grm+", "nettalk:3-grm:u", "nettalk:7-grm++"):
        from crfkit.features.templates import Templates

        w = Templates.parse(pattern_text(preset, "wapiti"))
        c = Templates.parse(pattern_text(preset, "crfpp"))
        word = [[x] for x in "phonetic"]
        assert [
            sorted(a.split(":", 1)[-1] for a in tok if a[0] != "*" and a[0] != "U")
            for tok in w.apply(word)
        ] or True
        strip = lambda toks: [sorted(a[1:] for a in tok) for tok in toks]  # noqa: E731
        assert strip(w.apply(word)) == strip(c.apply(word))
        assert strip(w.apply_bigram(word)) == strip(c.apply_bigram(word))
        assert bool(w.bigram) == bool(c.bigram)
    with pytest.raises(ValueError, match="N odd"):
        parse_preset("nettalk:4-grm")
    with pytest.raises(TemplateError, match="unknown feature set"):
        preset_templates("5gram")


def test_parents_and_stages():
    assert parent_window(Window(-2, 2)) == Window(-1, 1)
    assert parent_window(Window(-1, 1)) == Window(0, 0)
    assert parent_window(Window(-1, 0)) == Window(0, 0)
    assert parent_window(Window(-2, 1)) == Window(-1, 1)
    assert parent_window(Window(-2, -1)) == Window(-1, -1)
    assert parent_window(Window(-2, -2)) is None
    assert parent_window(Window(0, 0)) is None
    for preset in ("nettalk:7-grm", "nettalk:5-grm+", "nettalk:5-grm++"):
        spec = parse_preset(preset)
        sts = stages(spec)
        assert sorted(w for s in sts for w in s) == sorted(windows_of(spec))
        for s, ws in enumerate(sts):
            for w in ws:
                assert w.radius == s
                p = parent_window(w)
                if s and p is not None:
                    assert p in sts[s - 1]  # every parent is trained a stage earlier


@needs_data
def test_counts_on_the_training_folds_next_to_the_paper():
    tr, _, _ = nettalk_split()
    words = [[c[0] for c in s.columns] for s in tr]
    got = {p: candidate_counts(p, words, 51)["total"] for p in ("3-grm", "3-grm:u", "5-grm:u")}
    # the paper (Table 1): 14.3M, 0.3M, 2.5M; measured here on folds 0-7
    assert got == {"3-grm": 14055600, "3-grm:u": 272901, "5-grm:u": 2499612}
    assert candidate_counts("3-grm", words, 51)["total_crfkit"] < got["3-grm"]


# --------------------------------------------------------------------------- incremental


def test_gate_keeps_a_window_only_where_its_parent_is_active():
    from crfkit.training.incremental import Gated

    spec = parse_preset("nettalk:5-grm")
    templates = preset_templates(spec)
    words = ["abcab", "ba", "cabbage", "a"]
    sents = [Sentence([[c] for c in w], ["x"] * len(w), 1) for w in words]
    g = Gated(templates, sents, stages(spec))
    g.open_stage(0, None)
    X, XB = g.attributes()
    assert all(set(a[:3] for a in tok) <= {"*", "*w+"} for s in X for tok in s)
    active0 = {"*w+0+0:a", "*w+0+0:c"}
    g.open_stage(1, active0)
    X1, XB1 = g.attributes()
    for w, toks, btoks in zip(words, X1, XB1):
        for t, (tok, btok) in enumerate(zip(toks, btoks)):
            tri = [a for a in tok if a.startswith("*w-1+1:")]
            assert bool(tri) == (w[t] in "ac")
            assert [a for a in btok if a.startswith("*w-1+1:")] == tri
    # stage 2: the 5-window joins where the 3-window is active; the 3-windows keep their own gate
    active1 = {"*w-1+1:c/a/b", "*w-1+1:_B-1/b/a"}
    g.open_stage(2, active1)
    X2, _ = g.attributes()
    for w, toks in zip(words, X2):
        for t, tok in enumerate(toks):
            tri = [a for a in tok if a.startswith("*w-1+1:")]
            five = [a for a in tok if a.startswith("*w-2+2:")]
            assert bool(tri) == (w[t] in "ac")
            parent = "*w-1+1:" + _brute_value(w, t, -1, 1)
            assert bool(five) == (parent in active1)
            if five:
                assert five == ["*w-2+2:" + _brute_value(w, t, -2, 2)]


def _toy_sentences(rng, n):
    # phoneme = the letter, except 'c' reads 'k' before a/o and 's' before e/i: a context the
    # 3-window sees
    out = []
    for _ in range(n):
        w = "".join(rng.choice(list("caeiobt"), size=int(rng.integers(2, 7))))
        ys = []
        for t, ch in enumerate(w):
            nxt = w[t + 1] if t + 1 < len(w) else ""
            ys.append(("s" if nxt in ("e", "i") else "k") if ch == "c" else ch)
        out.append(Sentence([[c] for c in w], ys, 1))
    return out


def test_train_incremental_stages_follow_the_rule(tmp_path):
    from crfkit.incremental import active_attributes, train_incremental

    rng = np.random.default_rng(0)
    sents = _toy_sentences(rng, 120)
    trace = tmp_path / "t.jsonl"
    r = train_incremental(
        sents,
        features="nettalk:3-grm",
        stage_iterations=15,
        final_iterations=30,
        algorithm="owlqn",
        rho1=0.5,
        rho2=1e-3,
        threads=1,
        trace=trace,
    )
    assert [s["stage"] for s in r.stages] == [0, 1]
    s0, s1 = r.stages
    assert s1["features"] == s0["features"] + s1["features_added"] and s1["features_added"] > 0
    assert s1["features_added"] <= s1["candidate_features"]
    # every 3-window value in the final space has an active letter (its parent) in the stage-0 model
    recs = [json.loads(x) for x in trace.read_text().splitlines()]
    assert [x["stage"] for x in recs if x.get("record") == "stage"] == [0, 1]
    assert all("objective" in x and "stage" in x for x in recs)
    m = r.model
    tri = [a for a in m.space.attributes + m.space.battributes if a.startswith("*w-1+1:")]
    assert tri
    # re-derive stage 0's active letters from a stage-0-only run with the same settings
    r0 = train_incremental(
        sents,
        features="nettalk:1-grm",
        final_iterations=15,
        algorithm="owlqn",
        rho1=0.5,
        rho2=1e-3,
        threads=1,
    )
    act = active_attributes(r0.model)
    for a in tri:
        assert "*w+0+0:" + a.split(":", 1)[1].split("/")[1] in act
    # the model tags with the full template set (gated values are unknown attributes) and learnt the
    # rule
    from crfkit.pipeline import attributes_of, bigram_attributes_of

    t = preset_templates("nettalk:3-grm")
    test = _toy_sentences(np.random.default_rng(1), 40)
    pred = m.tag(attributes_of(test, t), B=bigram_attributes_of(test, t))
    acc = np.mean([a == b for s, p in zip(test, pred) for a, b in zip(s.labels, p)])
    assert acc > 0.97


def test_train_incremental_refuses_bad_settings():
    from crfkit.incremental import train_incremental

    s = [Sentence([["a"]], ["a"], 1)]
    with pytest.raises(ParameterError, match="nothing to grow"):
        train_incremental(s, features="nettalk:3-grm-")
    with pytest.raises(ParameterError, match="stage_iterations"):
        train_incremental(s, features="nettalk:5-grm", stage_iterations=[3])
    with pytest.raises(ParameterError, match="init"):
        train_incremental(s, features="nettalk:3-grm", init=None)


# --------------------------------------------------------------------------- CLI


def test_cli_patterns_and_export(tmp_path, capsys):
    rc, out, err = run_cli(capsys, "patterns", "nettalk:5-grm+")
    assert rc == 0 and out == pattern_text("nettalk:5-grm+")
    p = tmp_path / "p.tpl"
    rc, out, err = run_cli(capsys, "patterns", "nettalk:3-grm", "--format", "crfpp", "-o", p)
    assert rc == 0 and p.read_text() == pattern_text("nettalk:3-grm", "crfpp")
    rc, out, err = run_cli(capsys, "patterns", "nettalk:2-grm")
    assert rc != 0 and "N odd" in err
    data = _write(
        tmp_path, [f"{w}\t{w}\t{'0' * len(w)}\t0" for w in ["ab", "ba", "abc", "cab"] * 5]
    )
    rc, out, err = run_cli(
        capsys, "data", "export", "nettalk", tmp_path / "out", "--data-dir", tmp_path / "none"
    )
    assert rc != 0 and "nettalk/nettalk.data.gz not found" in err
    (tmp_path / "d" / "nettalk").mkdir(parents=True)
    with (
        open(data, "rb") as f,
        gzip.open(tmp_path / "d" / "nettalk" / "nettalk.data.gz", "wb") as g,
    ):
        g.write(f.read())
    rc, out, err = run_cli(
        capsys,
        "data",
        "export",
        "nettalk",
        tmp_path / "out",
        "--data-dir",
        tmp_path / "d",
        "--test-fold",
        "0",
    )
    assert rc == 0 and "dev fold 9, test fold 0" in out
    assert len(read_columns_list(tmp_path / "out" / "test.txt")) == 2
    assert len(read_columns_list(tmp_path / "out" / "train.txt")) == 16


def test_cli_train_features_and_incremental(tmp_path, capsys):
    sents = _toy_sentences(np.random.default_rng(2), 80)
    f = tmp_path / "train.txt"
    write_columns(sents, f)
    m = tmp_path / "m.crf"
    rc, out, err = run_cli(
        capsys,
        "train",
        f,
        "-m",
        m,
        "--features",
        "nettalk:3-grm",
        "--incremental",
        "--stage-iterations",
        "10",
        "--max-iterations",
        "20",
        "--rho1",
        "0.5",
        "--threads",
        "1",
        "--support",
        "all",
        "-q",
    )
    assert rc == 0, err
    rc, out, err = run_cli(capsys, "tag", "-m", m, f)
    rows = [line.split("\t") for line in out.splitlines() if line.strip()]
    assert rc == 0 and len(rows) == sum(len(s) for s in sents)
    assert np.mean([r[-1] == r[-2] for r in rows]) > 0.97
    rc, out, err = run_cli(
        capsys, "train", f, "-m", m, "--features", "nettalk:1-grm", "-t", "x.tpl"
    )
    assert rc != 0 and "not both" in err
    rc, out, err = run_cli(capsys, "train", f, "-m", m, "--incremental")
    assert rc != 0 and "--features" in err
