"""What a report shows, computed without matplotlib: the iteration records of a training run and
the evaluation of a model on a labelled test file (per-label and chunk scores, the confusion
matrix, the worst sentences with their marginals)."""

from __future__ import annotations

import heapq
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import CrfkitError
from ..explain import label_order
from ..metrics import ChunkReport, ConllCounter, LabelScores, label_scheme, scores_of_counts

__all__ = [
    "Evaluation",
    "SentenceView",
    "TestEvaluation",
    "evaluate",
    "evaluate_file",
    "history_records",
]


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


class Evaluation:
    """The scores of a model on test sentences, accumulated batch by batch (:meth:`add`), keeping
    counts, the confusion matrix and the ``worst`` sentences only, so that memory does not grow
    with the test set; :meth:`result` gives the :class:`TestEvaluation`."""

    def __init__(self, model, worst: int = 10, path: str = "<data>"):
        labels = list(model.labels)
        self.labels = labels
        self.index = {lab: i for i, lab in enumerate(labels)}
        self.known = label_order(labels)
        self.pi = {lab: i for i, lab in enumerate(self.known)}
        self.gi = dict(self.pi)  # gold labels: the model's, then those it never saw
        self.rows = [np.zeros(len(self.known), dtype=np.int64) for _ in self.known]
        self.counter = ConllCounter()
        self.worst = worst
        self.heap: list = []  # (errors, -mean gold marginal, -index, view): the worst at the top
        self.n_sentences = 0
        self.with_errors = 0
        self.path = path

    def add(self, tokens, gold, pred, marginals) -> None:
        """Add sentences: per sentence its tokens, gold and predicted labels, and the marginals of
        every label (tokens x labels, in the model's label order)."""
        gi, pi, index = self.gi, self.pi, self.index
        feed = self.counter.feed
        g_ids, p_ids = [], []
        for k, (ws, gs, ps) in enumerate(zip(tokens, gold, pred)):
            n = self.n_sentences + k
            errors = 0
            for a, b in zip(gs, ps):
                feed(a, b)
                i = gi.get(a)
                if i is None:
                    i = gi[a] = len(self.rows)
                    self.rows.append(np.zeros(len(self.known), dtype=np.int64))
                g_ids.append(i)
                p_ids.append(pi[b])
                errors += a != b
            self.counter.boundary()
            if not errors:
                continue
            self.with_errors += 1
            if self.worst <= 0:
                continue
            m = marginals[k]
            pg = [float(m[t, index[a]]) if a in index else 0.0 for t, a in enumerate(gs)]
            key = (errors, -sum(pg) / len(pg), -n)
            if len(self.heap) < self.worst or key > self.heap[0][:3]:
                pp = [float(m[t, index[b]]) for t, b in enumerate(ps)]
                view = SentenceView(n, list(ws), list(gs), list(ps), pp, pg, errors)
                item = (*key, view)
                if len(self.heap) < self.worst:
                    heapq.heappush(self.heap, item)
                else:
                    heapq.heapreplace(self.heap, item)
        self.n_sentences += len(gold)
        if g_ids:
            conf = np.zeros((len(self.rows), len(self.known)), dtype=np.int64)
            np.add.at(conf, (np.asarray(g_ids), np.asarray(p_ids)), 1)
            for i, row in enumerate(conf):
                self.rows[i] += row

    def result(self) -> TestEvaluation:
        conf = np.array(self.rows, dtype=np.int64).reshape(len(self.rows), len(self.known))
        gold_labels = sorted(self.gi, key=self.gi.get)
        # the labels the model never saw, sorted after its own
        order = list(range(len(self.known))) + sorted(
            range(len(self.known), len(gold_labels)), key=lambda i: gold_labels[i]
        )
        gold_labels = [gold_labels[i] for i in order]
        conf = conf[order]
        tp = {
            lab: int(conf[i, self.pi[lab]]) for i, lab in enumerate(gold_labels) if lab in self.pi
        }
        n_gold = {lab: int(conf[i].sum()) for i, lab in enumerate(gold_labels)}
        n_pred = {lab: int(c) for lab, c in zip(self.known, conf.sum(axis=0).tolist())}
        total = int(conf.sum())
        scores = scores_of_counts(gold_labels, tp, n_gold, n_pred, total)
        chunks = self.counter.report() if label_scheme(self.labels) is not None else None
        views = [item[3] for item in sorted(self.heap, reverse=True)]
        return TestEvaluation(
            self.path,
            self.n_sentences,
            total,
            scores,
            chunks,
            gold_labels,
            list(self.known),
            conf,
            views,
            0.0,
            self.with_errors,
        )


def evaluate(
    model, tokens, gold, pred, marginals, *, worst: int = 10, path: str = "<data>"
) -> TestEvaluation:
    """A :class:`TestEvaluation` from per-sentence tokens, gold and predicted labels and the full
    marginals (per sentence a tokens x labels array in the model's label order)."""
    ev = Evaluation(model, worst, path)
    ev.add(tokens, gold, pred, marginals)
    return ev.result()


def evaluate_file(
    model, path, *, worst: int = 10, threads: int | None = None, batch_tokens: int | None = None
) -> TestEvaluation:
    """Tag a labelled column file (gold label last) with a model trained on column files and
    evaluate it (:class:`Evaluation`), a batch of about ``batch_tokens`` tokens at a time (default
    :data:`crfkit.pipeline.BATCH_TOKENS`, as ``crfkit tag``)."""
    from ..pipeline import BATCH_TOKENS, tag_column_batches

    t0 = time.perf_counter()
    ev = Evaluation(model, worst, str(path))
    for tc in tag_column_batches(
        model,
        path,
        has_labels=True,
        all_marginals=True,
        threads=threads,
        batch_tokens=batch_tokens or BATCH_TOKENS,
    ):
        tokens = [[c[0] for c in s.columns] for s in tc.sentences]
        ev.add(tokens, tc.gold, tc.labels, tc.all_marginals)
    out = ev.result()
    out.seconds = time.perf_counter() - t0
    return out
