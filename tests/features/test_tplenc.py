"""TemplateIds: attribute ids of column rows straight from the templates, equal to the string
path."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crfkit import cli
from crfkit.datasets import synthetic
from crfkit.features.templates import Templates
from crfkit.features.tplenc import TemplateIds, TooWide
from crfkit.model import CRFModel
from crfkit.pipeline import inputs_of_rows

MACROS = ["%x[{r},{c}]", "%X[{r},{c}]", '%t[{r},{c},"^a"]', '%m[{r},{c},"[a-c]+"]']


@st.composite
def template_sets(draw):
    n = draw(st.integers(1, 6))
    lines = []
    for k in range(n):
        m = draw(st.integers(0, 3))
        parts = []
        for _ in range(m):
            form = draw(st.sampled_from(MACROS))
            parts.append(form.format(r=draw(st.integers(-3, 3)), c=draw(st.integers(0, 1))))
        lines.append(f"U{k:02d}:" + "/".join(parts) if parts else f"U{k:02d}:const")
    return "\n".join(lines) + "\nB\n"


words = st.sampled_from(["a", "ab", "B", "bc", "Ca", "_B-1", "x/y", "é"])
sentences = st.lists(
    st.lists(st.tuples(words, words).map(list), min_size=0, max_size=6), min_size=0, max_size=5
)


def expected(templates, sents, pad, index):
    """Per sentence and token the known attribute ids in template order, by the string path."""
    lens, counts, ids = [], [], []
    for cols in sents:
        lens.append(len(cols))
        if not cols:
            continue
        for tok in templates.apply(cols, pad=pad):
            got = [index[a] for a in tok if a in index]
            counts.append(len(got))
            ids += got
    return lens, counts, ids


def lookup_of(index):
    return lambda names: np.array([index.get(n, -1) for n in names], dtype=np.int64)


@settings(max_examples=120, deadline=None)
@given(template_sets(), sentences, sentences, st.booleans(), st.randoms(use_true_random=False))
def test_ids_equal_the_string_path(src, batch1, batch2, pad, rnd):
    templates = Templates.parse(src)
    # the "model": a random half of the attributes the two batches produce, plus some it never sees
    seen = sorted(
        {
            a
            for b in (batch1, batch2)
            for cols in b
            if cols
            for tok in templates.apply(cols, pad=pad)
            for a in tok
        }
    )
    known = [a for a in seen if rnd.random() < 0.5] + ["U00:zzz"]
    index = {a: i * 3 + 1 for i, a in enumerate(known)}
    enc = TemplateIds(templates, lookup_of(index), pad=pad)
    for batch in (batch1, batch2, batch1):  # cold, partly warm, warm memos
        lens, counts, ids = enc.ids(batch)
        el, ec, ei = expected(templates, batch, pad, index)
        assert lens.tolist() == el
        assert counts.tolist() == ec
        assert ids.tolist() == ei


def test_memo_limit_resets_and_stays_exact():
    templates = Templates.parse("U0:%x[0,0]\nU1:%x[-1,0]/%x[0,0]\n")
    sents = [[[f"w{i}"], [f"w{i + 1}"], [f"w{i + 2}"]] for i in range(50)]
    index = {
        a: i
        for i, a in enumerate(sorted({a for s in sents for t in templates.apply(s) for a in t}))
    }
    enc = TemplateIds(templates, lookup_of(index), limit=20)
    for _ in range(3):
        lens, counts, ids = enc.ids(sents)
        assert ids.tolist() == expected(templates, sents, True, index)[2]
    assert enc.size() <= 20 + 3 * 150  # emptied before each batch once past the limit


def test_too_many_distinct_values_for_the_packed_key():
    templates = Templates.parse("U0:%x[0,0]/%x[1,0]\n")
    sents = [[[f"w{i}"], [f"v{i}"]] for i in range(40)]
    enc = TemplateIds(templates, lookup_of({}))
    enc.bits = [3]  # 8 codes per macro: 40 distinct values do not pack
    with pytest.raises(TooWide):
        enc.ids(sents)
    # a batch that fits goes through after the reset
    lens, counts, ids = enc.ids(sents[:2])
    assert counts.tolist() == [0, 0, 0, 0]


def test_too_few_columns_is_the_templates_error():
    templates = Templates.parse("U0:%x[0,1]\n", name="tpl")
    enc = TemplateIds(templates, lookup_of({}))
    with pytest.raises(Exception, match="uses column 1"):
        enc.ids([[["a"], ["b"]]])


@pytest.fixture(scope="module")
def chunker(tmp_path_factory):
    d = tmp_path_factory.mktemp("tplenc")
    synthetic.write(d / "train.txt", 40, seed=3)
    synthetic.write(d / "test.txt", 12, seed=4)
    m = d / "model.crfkit"
    assert (
        cli.main(["train", str(d / "train.txt"), "-m", str(m), "--max-iterations", "3", "-q"]) == 0
    )
    return CRFModel.load(m), d / "test.txt"


def test_model_encode_rows_equals_encode_of_the_attribute_strings(chunker):
    from crfkit.io.columns import read_columns_list

    model, test = chunker
    sents = read_columns_list(str(test), has_labels=True)
    rows = [s.columns for s in sents]
    corpus = model.encode_rows(rows)
    X, B, dense = inputs_of_rows(model, rows)
    ref = model.encode(X)
    for a in ("seq_ptr", "tok_ptr", "attr", "y"):
        assert np.array_equal(getattr(corpus, a), getattr(ref, a)), a
    assert len(corpus.raw_val) == 0 and len(ref.raw_val) == 0  # values all ones, not stored
    # rows with an extra last column (the gold label) give the same corpus: the templates never read
    # it
    with_labels = [[c + [y] for c, y in zip(s.columns, s.labels)] for s in sents]
    assert np.array_equal(model.encode_rows(with_labels).attr, corpus.attr)
    assert model.tag(corpus) == model.tag(X)
    assert model.encode(corpus) is corpus
    # a model that has encoded rows still pickles (the encoder travels as its template source)
    import pickle

    m2 = pickle.loads(pickle.dumps(model))
    assert np.array_equal(m2.encode_rows(rows).attr, corpus.attr)


def test_threads_share_one_encoder():
    import threading

    templates = Templates.parse("U0:%x[0,0]\nU1:%x[-1,0]/%x[0,1]\nU2:%x[1,1]\n")
    rng = np.random.default_rng(0)
    batches = [
        [
            [[f"w{rng.integers(300)}", f"p{rng.integers(40)}"] for _ in range(rng.integers(1, 9))]
            for _ in range(30)
        ]
        for _ in range(8)
    ]
    seen = sorted({a for b in batches for s in b for t in templates.apply(s) for a in t})
    index = {a: i for i, a in enumerate(seen[::2])}
    enc = TemplateIds(templates, lookup_of(index))
    out = [None] * len(batches)

    def go(i):
        for _ in range(3):
            out[i] = enc.ids(batches[i])[2].tolist()

    ts = [threading.Thread(target=go, args=(i,)) for i in range(len(batches))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for i, b in enumerate(batches):
        assert out[i] == expected(templates, b, True, index)[2]
