"""crfkit.report: the evaluation on a test file, the self-contained HTML report (parsed by an
HTML5 parser) and the Markdown report with its images, on a chunker trained on the synthetic
corpus."""

from __future__ import annotations

import re

import numpy as np
import pytest

pytest.importorskip("matplotlib")
html5lib = pytest.importorskip("html5lib")

from crfkit.datasets import synthetic  # noqa: E402
from crfkit.errors import CrfkitError  # noqa: E402
from crfkit.features.templates import default_chunking_templates  # noqa: E402
from crfkit.metrics import conlleval, token_accuracy  # noqa: E402
from crfkit.pipeline import tag_columns, train_columns  # noqa: E402
from crfkit.report import build_report, evaluate_file, write_report  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("report")
    train, test = d / "train.txt", d / "test.txt"
    synthetic.write(train, 150, seed=1)
    synthetic.write(test, 40, seed=2)
    trace = d / "trace.jsonl"
    res = train_columns(train, default_chunking_templates(), c2=1.0, max_iterations=12, trace=trace)
    model_path = d / "model.crfkit"
    res.model.save(model_path)
    return {"dir": d, "model": res.model, "model_path": model_path, "trace": trace, "test": test}


def _parse(text: str):
    return html5lib.HTMLParser(strict=True).parse(text)  # raises on any parse error


def _elements(doc, tag):
    return [e for e in doc.iter() if e.tag.split("}")[-1] == tag]


def test_evaluation_agrees_with_tagging_and_conlleval(run):
    model = run["model"]
    ev = evaluate_file(model, run["test"], worst=5)
    tc = tag_columns(model, run["test"], has_labels=True, all_marginals=True)
    gold, pred = tc.gold, tc.labels
    assert ev.n_sentences == len(gold) and ev.n_tokens == sum(map(len, gold))
    assert ev.scores.accuracy == pytest.approx(token_accuracy(gold, pred))
    ref = conlleval(gold, pred)
    assert ev.chunks.f1 == ref.f1 and ev.chunks.per_type.keys() == ref.per_type.keys()
    # confusion matrix: every token once, the diagonal the right ones
    assert ev.confusion.sum() == ev.n_tokens
    diag = sum(
        ev.confusion[i, ev.pred_labels.index(lab)]
        for i, lab in enumerate(ev.gold_labels)
        if lab in ev.pred_labels
    )
    assert diag == ev.scores.correct
    g, p = ev.gold_labels.index("B-NP"), ev.pred_labels.index("I-NP")
    want = sum(a == "B-NP" and b == "I-NP" for gs, ps in zip(gold, pred) for a, b in zip(gs, ps))
    assert ev.confusion[g, p] == want
    # the worst sentences: most errors first, with their marginals
    errs = sorted((sum(a != b for a, b in zip(gs, ps)) for gs, ps in zip(gold, pred)), reverse=True)
    assert [s.errors for s in ev.worst] == errs[: len(ev.worst)]
    assert ev.sentences_with_errors == sum(e > 0 for e in errs)
    names = tc.label_names
    for s in ev.worst:
        m = tc.all_marginals[s.index]
        assert s.gold == gold[s.index] and s.pred == pred[s.index]
        assert np.allclose(s.p_pred, [m[t, names.index(x)] for t, x in enumerate(s.pred)])
        assert np.allclose(s.p_gold, [m[t, names.index(x)] for t, x in enumerate(s.gold)])
        assert s.tokens == [c[0] for c in tc.sentences[s.index].columns]


def test_html_report_is_self_contained_html5(run, tmp_path):
    rep = build_report(
        run["model"],
        model_path=run["model_path"],
        trace=run["trace"],
        test=run["test"],
        top=5,
        worst=3,
    )
    out = tmp_path / "r.html"
    assert write_report(rep, out) == [out]
    text = out.read_text(encoding="utf-8")
    doc = _parse(text)
    ids = {e.get("id") for e in doc.iter() if e.get("id")}
    assert {"model", "training", "transitions", "features", "test"} <= ids
    imgs = _elements(doc, "img")
    assert len(imgs) == 3  # curves, heat map, confusion matrix
    assert all(i.get("src").startswith("data:image/png;base64,") for i in imgs)
    # nothing is fetched: no external source or style sheet
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text)
    assert not _elements(doc, "link")
    # one feature table per label, 5 + 5 rows at most, the filter boxes
    feats = [t for t in _elements(doc, "table") if t.get("class") == "feat"]
    assert sorted(t.get("data-label") for t in feats) == sorted(run["model"].labels)
    assert {"filter-attr", "filter-label"} <= ids
    assert len(re.findall(r'class="sent"', text)) == 3
    assert "Chunks (conlleval)" in text and f"{rep.evaluation.chunks.f1:.2f}" in text
    assert rep.images["training"].startswith(PNG_MAGIC)


def test_html_report_without_trace_or_test(run, tmp_path):
    rep = build_report(run["model"], top=2, labels=["O", "B-NP"], attribute="^w")
    out = tmp_path / "bare.html"
    write_report(rep, out)
    text = out.read_text(encoding="utf-8")
    doc = _parse(text)
    assert len(_elements(doc, "img")) == 1  # the heat map only
    assert "No trace given" in text and 'id="test"' not in text
    feats = [t for t in _elements(doc, "table") if t.get("class") == "feat"]
    assert [t.get("data-label") for t in feats] == ["O", "B-NP"]
    assert set(rep.images) == {"transitions"}


def test_markdown_report_writes_its_images_beside_it(run, tmp_path):
    rep = build_report(run["model"], trace=run["trace"], test=run["test"], top=3, worst=2)
    out = tmp_path / "sub" / "chunker.md"
    out.parent.mkdir()
    paths = write_report(rep, out)
    assert paths[0] == out and len(paths) == 4
    text = out.read_text(encoding="utf-8")
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert sorted(links) == sorted(
        f"chunker-{k}.png" for k in ("training", "transitions", "confusion")
    )
    for name in links:
        assert (out.parent / name).read_bytes().startswith(PNG_MAGIC)
    assert "| type | precision | recall | F1 | found | gold | correct |" in text
    assert "### The 2 worst sentences" in text
    # a table row has as many cells as its head
    for block in re.findall(r"((?:^\|.*\|\n)+)", text, flags=re.MULTILINE):
        rows = block.strip().splitlines()
        n = len(re.split(r"(?<!\\)\|", rows[0]))
        assert all(len(re.split(r"(?<!\\)\|", r)) == n for r in rows), rows[0]


def test_fstar_beside_the_trace_is_used(run, tmp_path):
    import shutil

    trace = tmp_path / "trace.jsonl"
    shutil.copy(run["trace"], trace)
    (tmp_path / "fstar.json").write_text('{"fstar": 0.5}')
    rep = build_report(run["model"], trace=trace)
    assert rep.fstar == 0.5
    assert build_report(run["model"], trace=trace, fstar=0.25).fstar == 0.25
    with pytest.raises(CrfkitError, match="finite"):
        build_report(run["model"], fstar=float("nan"))


def test_unknown_format_and_bad_test_file(run, tmp_path):
    rep = build_report(run["model"], top=1)
    with pytest.raises(CrfkitError, match="unknown report format"):
        write_report(rep, tmp_path / "x.pdf", "pdf")
    bad = tmp_path / "bad.txt"
    bad.write_text("only one\n")
    with pytest.raises(CrfkitError, match="bad.txt"):
        build_report(run["model"], test=bad)


def test_labels_that_are_not_chunk_tags_and_gold_labels_the_model_never_saw(tmp_path):
    from crfkit.features.templates import Templates

    rng = np.random.default_rng(0)
    words = {"run": "V", "eat": "V", "dog": "N", "cat": "N", "the": "D"}
    lines = []
    for _ in range(40):
        for w in rng.choice(list(words), size=int(rng.integers(2, 6))):
            lines.append(f"{w} {words[w]}")
        lines.append("")
    train = tmp_path / "train.txt"
    train.write_text("\n".join(lines) + "\n")
    test = tmp_path / "test.txt"
    test.write_text("the D\ndog N\nruns Z\n\ncat N\neat V\n\n")
    res = train_columns(train, Templates.parse("U00:%x[0,0]\nB\n"), max_iterations=20)
    rep = build_report(res.model, test=test, worst=5)
    ev = rep.evaluation
    assert ev.chunks is None  # D, N, V are not chunk tags
    assert ev.gold_labels[-1] == "Z" and "Z" not in ev.pred_labels
    assert ev.confusion.shape == (4, 3) and ev.confusion[-1].sum() == 1
    (s,) = ev.worst
    assert s.tokens == ["the", "dog", "runs"] and s.p_gold[-1] == 0.0 and s.errors == 1
    out = tmp_path / "r.html"
    write_report(rep, out)
    text = out.read_text(encoding="utf-8")
    _parse(text)
    assert "Chunks (conlleval)" not in text and "Per label (tokens)" in text
    md = write_report(rep, tmp_path / "r.md")[0].read_text(encoding="utf-8")
    assert "### Chunks" not in md and "| Z |" in md


def test_evaluation_in_batches_is_the_evaluation_in_one(run):
    """evaluate_file streams the test file; the batches add up to the whole."""
    whole = evaluate_file(run["model"], run["test"], worst=4, batch_tokens=10**9)
    parts = evaluate_file(run["model"], run["test"], worst=4, batch_tokens=60)
    assert np.array_equal(whole.confusion, parts.confusion)
    assert whole.gold_labels == parts.gold_labels
    assert whole.scores == parts.scores and whole.chunks == parts.chunks
    assert [s.index for s in whole.worst] == [s.index for s in parts.worst]
    for a, b in zip(whole.worst, parts.worst):  # small batches may decode in numpy: same to 1e-9
        assert (a.tokens, a.gold, a.pred, a.errors) == (b.tokens, b.gold, b.pred, b.errors)
        assert np.allclose(a.p_pred, b.p_pred, atol=1e-9)
        assert np.allclose(a.p_gold, b.p_gold, atol=1e-9)
    assert whole.sentences_with_errors == parts.sentences_with_errors
