"""What a report shows, computed without matplotlib: the iteration records of a training run and
the evaluation of a model on a labelled test file (per-label and chunk scores, the confusion
matrix, the worst sentences with their marginals)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import CrfkitError
from ..explain import label_order
from ..metrics import ChunkReport, LabelScores, conlleval, label_scheme, label_scores

__all__ = ["history_records", "TestEvaluation", "SentenceView", "evaluate_file", "evaluate"]


def history_records(history) -> list[dict]:
    """The iteration records of a run: ``history`` is a trace file (path), a list of records
    (``TrainResult.history``, ``crfkit.CRF.history_``, a read trace), a fitted ``crfkit.CRF`` or
    a ``TrainResult``.  Stage records (``{"record": ...}``) are left out; the estimator's
    ``seconds`` is read as ``wall_s``."""
    if isinstance(history, (str, os.PathLike)):
        from ..bench.plots import read_trace

        p = Path(history)
        if not p.is_file():
            raise CrfkitError(f"{p}: no such trace file")
        recs = read_trace(p)
    elif hasattr(history, "history_"):
        recs = history.history_
    elif hasattr(history, "history") and not isinstance(history, (list, tuple)):
        recs = history.history
    else:
        recs = history
    out = []
    for r in recs:
        if not isinstance(r, dict):
            raise CrfkitError(f"a training record is a dict, not {type(r).__name__}")
        if "record" in r:
            continue
        if "wall_s" not in r and "seconds" in r:
            r = {**r, "wall_s": r["seconds"]}
        out.append(r)
    return out


@dataclass
class SentenceView:
    """One test sentence as the report shows it: its tokens (first column), gold and predicted
    labels, per token the marginal of the predicted label and of the gold label (0 for a label the
    model does not know), its number of wrong tokens and its index in the file."""

    index: int
    tokens: list[str]
    gold: list[str]
    pred: list[str]
    p_pred: list[float]
    p_gold: list[float]
    errors: int


@dataclass
class TestEvaluation:
    """A model on a labelled test file: ``scores`` (token level, per label), ``chunks``
    (conlleval, when the labels are chunk tags), ``confusion`` (``gold_labels`` x ``pred_labels``
    token counts), ``worst`` (the sentences with the most wrong tokens, ties: lowest mean gold
    marginal) and the tagging time."""

    path: str
    n_sentences: int
    n_tokens: int
    scores: LabelScores
    chunks: ChunkReport | None
    gold_labels: list[str]
    pred_labels: list[str]
    confusion: np.ndarray
    worst: list[SentenceView] = field(default_factory=list)
    seconds: float = 0.0
    sentences_with_errors: int = 0


def evaluate(
    model, tokens, gold, pred, marginals, *, worst: int = 10, path: str = "<data>"
) -> TestEvaluation:
    """A :class:`TestEvaluation` from per-sentence tokens, gold and predicted labels and the full
    marginals (per sentence a tokens x labels array in the model's label order)."""
    labels = list(model.labels)
    index = {lab: i for i, lab in enumerate(labels)}
    known = label_order(labels)
    extra = sorted({g for gs in gold for g in gs} - set(labels))
    gold_labels = known + extra
    gi = {lab: i for i, lab in enumerate(gold_labels)}
    pi = {lab: i for i, lab in enumerate(known)}
    conf = np.zeros((len(gold_labels), len(known)), dtype=np.int64)
    g_ids = np.fromiter((gi[x] for gs in gold for x in gs), dtype=np.int64)
    p_ids = np.fromiter((pi[x] for ps in pred for x in ps), dtype=np.int64)
    np.add.at(conf, (g_ids, p_ids), 1)
    scores = label_scores(gold, pred, labels=gold_labels)
    chunks = conlleval(gold, pred) if label_scheme(labels) is not None else None
    n_tok = int(len(g_ids))

    cand = []
    for k, (gs, ps) in enumerate(zip(gold, pred)):
        e = sum(a != b for a, b in zip(gs, ps))
        if e:
            cand.append((k, e))
    views = []
    if worst > 0 and cand:
        mean_gold = {}
        for k, _ in cand:
            m = marginals[k]
            col = [index.get(g, -1) for g in gold[k]]
            pg = [float(m[t, c]) if c >= 0 else 0.0 for t, c in enumerate(col)]
            mean_gold[k] = (sum(pg) / len(pg), pg)
        cand.sort(key=lambda ke: (-ke[1], mean_gold[ke[0]][0], ke[0]))
        for k, e in cand[:worst]:
            m = marginals[k]
            pp = [float(m[t, index[p]]) for t, p in enumerate(pred[k])]
            views.append(
                SentenceView(
                    k, list(tokens[k]), list(gold[k]), list(pred[k]), pp, mean_gold[k][1], e
                )
            )
    return TestEvaluation(
        path,
        len(gold),
        n_tok,
        scores,
        chunks,
        gold_labels,
        known,
        conf,
        views,
        0.0,
        len(cand),
    )


def evaluate_file(model, path, *, worst: int = 10, threads: int | None = None) -> TestEvaluation:
    """Tag a labelled column file (gold label last) with a model trained on column files and
    evaluate it (:func:`evaluate`)."""
    from ..pipeline import tag_columns

    t0 = time.perf_counter()
    tc = tag_columns(model, path, has_labels=True, all_marginals=True, threads=threads)
    secs = time.perf_counter() - t0
    gold = tc.gold
    tokens = [[c[0] for c in s.columns] for s in tc.sentences]
    ev = evaluate(model, tokens, gold, tc.labels, tc.all_marginals, worst=worst, path=str(path))
    ev.seconds = secs
    return ev
