"""Gather a report: the model's summary and weights, its training curves and its test
evaluation, with the figures drawn once as PNG for both writers (:mod:`.html`, :mod:`.markdown`)."""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import CrfkitError
from ..explain import TRAINING_META_KEYS as META_KEYS
from ..explain import WeightsExplanation

__all__ = ["Report", "build_report", "model_summary"]


@dataclass
class Report:
    """Everything a report shows: ``summary`` (name, value pairs), ``explanation`` (weights),
    ``records`` (training iterations, may be empty), ``evaluation`` (a
    :class:`~crfkit.report.data.TestEvaluation` or None) and ``images`` (name -> PNG bytes:
    ``training``, ``transitions``, ``confusion``)."""

    title: str
    summary: list[tuple[str, str]]
    explanation: WeightsExplanation
    records: list[dict] = field(default_factory=list)
    trace: str | None = None
    fstar: float | None = None
    evaluation: object | None = None
    images: dict[str, bytes] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)


def model_summary(model, path: str | os.PathLike | None = None) -> list[tuple[str, str]]:
    """(name, value) rows describing a model: file, labels, feature counts, training metadata."""
    s = model.space
    meta = model.meta if isinstance(model.meta, dict) else {}
    rows = []
    if path is not None:
        rows.append(("model file", f"{path} ({os.path.getsize(path):,} bytes)"))
    rows.append(("labels", f"{s.n_labels}: {' '.join(s.labels)}"))
    rows.append(("attributes", f"{s.n_attributes:,}"))
    rows.append(("state features", f"{s.n_state:,}"))
    rows.append(("transition features", f"{s.n_trans:,}"))
    if s.n_bigram:
        rows.append(("label-pair x observation features", f"{s.n_bigram:,}"))
    if s.n_dense:
        rows.append(("dense weights", f"{s.n_dense * s.n_labels:,}"))
    rows.append(("non-zero weights", f"{model.n_active:,}"))
    for k in META_KEYS:
        if k in meta:
            v = meta[k]
            rows.append((k, f"{v:.6g}" if isinstance(v, float) else str(v)))
    return rows


def build_report(
    model,
    *,
    model_path: str | os.PathLike | None = None,
    trace=None,
    test: str | os.PathLike | None = None,
    top: int = 20,
    worst: int = 10,
    labels=None,
    attribute: str | None = None,
    fstar: float | None = None,
    threads: int | None = None,
    title: str | None = None,
    dpi: int = 100,
) -> Report:
    """Gather a :class:`Report` of ``model`` (a :class:`~crfkit.model.CRFModel`): ``trace`` (a
    trace file or records) for the curves, ``fstar`` for f - f* (default: ``fstar.json`` beside
    the trace when there is one), ``test`` (a labelled column file) for the scores, ``top``
    features per label, the ``worst`` test sentences.  Needs matplotlib for the figures."""
    from . import plots
    from .data import evaluate_file, history_records

    t0 = time.perf_counter()
    name = title or (f"crfkit report: {Path(model_path).name}" if model_path else "crfkit report")
    rep = Report(
        name,
        model_summary(model, model_path),
        model.explain(top, labels, attribute=attribute),
    )
    if trace is not None:
        rep.records = history_records(trace)
        if isinstance(trace, (str, os.PathLike)):
            rep.trace = str(trace)
            if fstar is None:
                from ..bench.plots import load_fstar

                e = load_fstar(Path(trace).parent)
                if e is not None:
                    fstar = float(e["fstar"])
        if not rep.records:
            rep.notes.append(f"the trace {trace} has no iteration records")
    if fstar is not None and not math.isfinite(fstar):
        raise CrfkitError(f"f* must be a finite number, got {fstar}")
    rep.fstar = fstar
    t1 = time.perf_counter()
    if test is not None:
        rep.evaluation = evaluate_file(model, test, worst=worst, threads=threads)
    t2 = time.perf_counter()
    if rep.records:
        fig = plots.plot_training(rep.records, fstar=fstar)
        rep.images["training"] = plots.png_bytes(fig, dpi)
    rep.images["transitions"] = plots.png_bytes(plots.plot_transitions(rep.explanation), dpi)
    ev = rep.evaluation
    if ev is not None:
        fig = plots.plot_confusion(ev.gold_labels, ev.pred_labels, ev.confusion)
        rep.images["confusion"] = plots.png_bytes(fig, dpi)
    t3 = time.perf_counter()
    rep.seconds = {"weights": t1 - t0, "test": t2 - t1, "figures": t3 - t2}
    return rep
