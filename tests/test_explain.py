"""crfkit.explain: the weights of a model as a plain structure (CRFModel.explain,
crfkit.CRF.explain_weights), against the model's own feature dicts."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import crfkit
from crfkit.errors import CrfkitError
from crfkit.explain import explain, label_order, shade, top_features

html5lib = pytest.importorskip("html5lib")

TOKENS = ["the", "cat", "sat", "on", "a", "mat", "dog", "ran", "to", "him"]
TAGS = {
    "the": "B-NP",
    "a": "B-NP",
    "cat": "I-NP",
    "mat": "I-NP",
    "dog": "I-NP",
    "sat": "B-VP",
    "ran": "B-VP",
    "on": "B-PP",
    "to": "B-PP",
    "him": "O",
}


def _data(n=60, seed=3):
    rng = np.random.default_rng(seed)
    X, y = [], []
    for _ in range(n):
        words = [TOKENS[i] for i in rng.integers(0, len(TOKENS), rng.integers(2, 8))]
        X.append([{"w": w, "suf": w[-1:], "len": float(len(w))} for w in words])
        y.append([TAGS[w] if rng.random() > 0.1 else "O" for w in words])
    return X, y


@pytest.fixture(scope="module")
def crf():
    X, y = _data()
    return crfkit.CRF(c1=0.05, c2=0.01, max_iterations=40).fit(X, y)


def test_per_label_top_features_are_the_model_weights(crf):
    model = crf.model_
    top = 3
    ex = model.explain(top=top)
    assert sorted(ex.labels) == sorted(model.labels)
    sf = model.state_features()
    for lab in model.labels:
        mine = sorted(((w, a) for (a, l), w in sf.items() if l == lab and w != 0), reverse=True)
        pos = [(a, w) for w, a in mine if w > 0]
        neg = [(a, w) for w, a in reversed(mine) if w < 0]
        t = ex.targets[lab]
        assert t.n_positive == len(pos) and t.n_negative == len(neg)
        assert [w for _, w in t.positive] == [w for _, w in pos[:top]]
        assert [w for _, w in t.negative] == [w for _, w in neg[:top]]
        # the attributes named carry those weights
        for a, w in t.positive + t.negative:
            assert sf[(a, lab)] == w
    assert any(t.negative for t in ex.targets.values())  # c1 leaves both signs here
    assert ex.transitions == model.transition_features()


def test_transition_matrix_has_nan_where_no_feature(crf):
    ex = crf.model_.explain(top=0)
    m = ex.transition_matrix()
    tf = crf.model_.transition_features()
    for i, a in enumerate(ex.labels):
        for j, b in enumerate(ex.labels):
            if (a, b) in tf:
                assert m[i, j] == tf[(a, b)]
            else:
                assert math.isnan(m[i, j])
    assert all(not t.positive and not t.negative for t in ex.targets.values())


def test_labels_and_attribute_filters(crf):
    ex = crf.explain_weights(top=50, labels=["B-NP", "O"], attribute=r"^suf:")
    assert ex.labels == ["B-NP", "O"]
    assert set(ex.targets) == {"B-NP", "O"}
    assert all(
        a.startswith("suf:") for t in ex.targets.values() for a, _ in t.positive + t.negative
    )
    assert ex.targets["B-NP"].positive
    assert set(ex.transitions) <= {("B-NP", "B-NP"), ("B-NP", "O"), ("O", "B-NP"), ("O", "O")}
    with pytest.raises(CrfkitError, match="'B-XX' is not a label"):
        crf.explain_weights(labels=["B-XX"])
    with pytest.raises(CrfkitError, match="bad regular expression"):
        crf.explain_weights(attribute="(")
    with pytest.raises(CrfkitError, match="top must be >= 0"):
        crf.explain_weights(top=-1)
    assert crf.explain_weights(labels="O").labels == ["O"]


def test_estimator_and_model_agree_and_unfitted_says_so(crf):
    assert crf.explain_weights(top=4).to_dict() == crf.model_.explain(top=4).to_dict()
    with pytest.raises(Exception, match="explaining weights"):
        crfkit.CRF().explain_weights()


def test_html_text_and_json_renderings(crf):
    ex = crf.explain_weights(top=5)
    page = ex._repr_html_()
    doc = html5lib.HTMLParser(strict=True).parseFragment(page)
    tables = [e for e in doc.iter() if e.tag.endswith("table")]
    assert len(tables) == 1 + len(ex.labels)  # transitions, then one per label
    for lab in ex.labels:
        assert f'data-label="{lab}"' in page
    assert repr(ex).startswith(f"<WeightsExplanation: {len(ex.labels)} labels")
    text = str(ex)
    assert text.startswith("transitions") and all(lab in text for lab in ex.labels)
    d = json.loads(json.dumps(ex.to_dict()))
    assert d["labels"] == ex.labels
    assert len(d["transitions"]) == len(ex.transitions)
    assert d["targets"]["B-NP"]["positive"][0]["weight"] == ex.targets["B-NP"].positive[0][1]


def test_html_escapes_attribute_names():
    X = [[{"<b>&": 1.0}, {"x": 1.0}]] * 4
    y = [["A", "B"]] * 4
    crf = crfkit.CRF(max_iterations=10).fit(X, y)
    page = crf.explain_weights()._repr_html_()
    assert "&lt;b&gt;&amp;" in page and "<b>&" not in page


def test_top_features_is_the_largest_abs_weights(crf):
    model = crf.model_
    sf = model.state_features()
    want = sorted(sf.items(), key=lambda kv: -abs(kv[1]))[:7]
    got = model.top_features(7)
    assert [abs(w) for _, _, w in got] == [abs(w) for _, w in want]
    for a, lab, w in got:
        assert sf[(a, lab)] == w
    assert top_features(model.space, model.weights, 7) == got


def test_label_order_groups_chunk_types():
    assert label_order(["I-NP", "B-VP", "O", "B-NP", "X", "I-VP"]) == [
        "O",
        "B-NP",
        "I-NP",
        "B-VP",
        "I-VP",
        "X",
    ]
    assert label_order(["c", "a", "b"]) == ["c", "a", "b"]  # not chunk tags: the given order


def test_shade_is_white_at_zero_and_saturates():
    assert shade(0.0, 1.0) == "#ffffff"
    assert shade(5.0, 1.0) == shade(1.0, 1.0) != shade(0.5, 1.0)
    assert shade(-1.0, 1.0) != shade(1.0, 1.0)
    assert shade(1.0, 0.0) == "#ffffff" and shade(float("nan"), 1.0) == "#ffffff"


def test_explain_on_a_space_directly(crf):
    m = crf.model_
    assert explain(m.space, m.weights, top=2).to_dict() == m.explain(2).to_dict()


def test_eli5_registration_gives_the_same_weights(crf):
    """eli5 registers its CRF explainer for sklearn_crfsuite.CRF by type; registering crfkit.CRF
    with the same function (what docs/guide/reports.md says) works on crfkit's attributes."""
    eli5 = pytest.importorskip("eli5")
    from eli5.sklearn_crfsuite.explain_weights import explain_weights_sklearn_crfsuite

    eli5.explain_weights.register(crfkit.CRF)(explain_weights_sklearn_crfsuite)
    e = eli5.explain_weights(crf, top=3)
    ours = crf.explain_weights(top=3)
    for t in e.targets:
        pos = [fw.weight for fw in t.feature_weights.pos]
        assert pos == [w for _, w in ours.targets[t.target].positive]
