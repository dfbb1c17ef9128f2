"""Incremental structured feature sets (Lavergne, Cappé & Yvon 2010, section 5.4).

A large window feature set (:mod:`crfkit.features.windows`: ``nettalk:7-grm``...) is grown in stages
instead of being trained whole: stage 0 trains the windows of radius 0 (the letter, the label bias
and the transitions); stage ``s`` adds the windows of radius ``s``, but only the *values* whose
embedded shorter window (:func:`~crfkit.features.windows.parent_window`: ``[-2, 2]`` -> ``[-1, 1]``)
is active in the model of stage ``s - 1`` -- an attribute is active when one of its features
(label-unigram or label-pair x observation) has a non-zero weight.  Each stage starts from the
previous stage's weights (warm start by feature name) and runs ``stage_iterations`` iterations
(epochs/sweeps for the stochastic optimizers and BCD); the last stage runs ``final_iterations``
(default: until the stopping rules).

The gate is a function of the attribute string alone (a window's value determines its parent's
value), so a model trained this way tags with the full template set: a value that was gated out
never entered the feature space and is ignored as an unknown attribute, wherever it occurs.

Every optimizer crfkit has works here (the paper uses BCD, the most memory-frugal); those that do
not train label-pair x observation features (BCD, SGD-L1 ... today) need a ``:u`` feature set.

Trace (``trace=PATH``): the iteration records of every stage, each with ``"stage"`` added and
``wall_s`` counted from the start of stage 0, and after each stage one record ``{"record": "stage",
"stage": s, "windows": [...], "attributes_added", "features_added", "features",
"candidate_features", "active", "iterations", "wall_s", "objective"}``: ``features_added`` is the
growth of the feature space, ``candidate_features`` what the stage's windows would add ungated.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..errors import ParameterError
from ..features.windows import (
    FeatureSetSpec,
    Window,
    parent_window,
    parse_preset,
    preset_templates,
    stages,
)
from ..model import CRFModel

__all__ = ["IncrementalResult", "active_attributes", "train_incremental"]


@dataclass
class IncrementalResult:
    """The last stage's :class:`crfkit.train.TrainResult` (``result``), one summary dict per stage
    (``stages``), every iteration record (``history``, with ``stage``), the total wall time."""

    result: object
    stages: list = field(default_factory=list)
    history: list = field(default_factory=list)
    seconds: float = 0.0

    @property
    def model(self) -> CRFModel:
        return self.result.model


def active_attributes(model: CRFModel) -> set[str]:
    """Attribute strings with at least one non-zero weight: among their label-unigram (state)
    features or their label-pair x observation features (a ``*`` pattern gives both the same
    string)."""
    s = model.space
    w = model.weights
    out: set[str] = set()
    if s.n_state:
        live = np.unique(s.feature_attr()[w[: s.n_state] != 0])
        out.update(s.attributes[a] for a in live.tolist())
    if s.n_bigram:
        bw = w[s.bigram_offset : s.bigram_offset + s.n_bigram]
        live = np.unique(s.bfeature_attr()[bw != 0])
        out.update(s.battributes[b] for b in live.tolist())
    return out


def _window_of_template(text: str) -> Window | None:
    """The window a generated template line tests (None for the bare ``*``/``u`` line)."""
    body = text[1:]
    if not body:
        return None
    name = body.split(":", 1)[0]  # w-1+1
    rest = name[1:]
    k = max(rest.rfind("+"), rest.rfind("-"))
    return Window(int(rest[:k]), int(rest[k:]))


class Gated:
    """Attribute strings of every token under the full template set, and which of them a stage
    keeps."""

    def __init__(self, templates, sentences, windows_by_stage: list[list[Window]]):
        self.stage_of: dict[Window, int] = {
            w: s for s, ws in enumerate(windows_by_stage) for w in ws
        }
        self.u_win = [_window_of_template(t.text) for t in templates.unigram]
        self.b_win = [_window_of_template(t.text) for t in templates.bigram_observation]
        self.U = [templates.apply(s.columns) for s in sentences]
        self.B = (
            [templates.apply_bigram(s.columns) for s in sentences]
            if templates.bigram_observation
            else None
        )
        # parent column of each unigram template (the parent window's unigram template), for the
        # gate
        col = {w: j for j, w in enumerate(self.u_win)}
        self.u_parent = [
            None if w is None or parent_window(w) is None else col[parent_window(w)]
            for w in self.u_win
        ]
        self.b_parent = [
            None if w is None or parent_window(w) is None else col[parent_window(w)]
            for w in self.b_win
        ]
        self.gate: dict[Window, set[str] | None] = {}

    def open_stage(self, s: int, active: set[str] | None) -> None:
        """Windows of stage ``s`` join, gated by ``active`` (the previous stage's active
        attributes)."""
        for w, st in self.stage_of.items():
            if st == s:
                self.gate[w] = active if (s > 0 and parent_window(w) is not None) else None

    def _keep(self, win, parent_col, toks, j, t) -> bool:
        if win is None:
            return True
        if win not in self.gate:
            return False
        g = self.gate[win]
        return g is None or toks[t][parent_col[j]] in g

    def attributes(self, U=None, B=None):
        """The gated attribute sequences (and bigram attribute sequences) of ``U``/``B`` (default:
        the training data's)."""
        U = self.U if U is None else U
        B = self.B if B is None else B
        X = []
        for toks in U:
            X.append(
                [
                    [
                        a
                        for j, a in enumerate(tok)
                        if self._keep(self.u_win[j], self.u_parent, toks, j, t)
                    ]
                    for t, tok in enumerate(toks)
                ]
            )
        XB = None
        if B is not None:
            XB = []
            for toks, btoks in zip(U, B):
                XB.append(
                    [
                        [
                            a
                            for j, a in enumerate(btok)
                            if self._keep(self.b_win[j], self.b_parent, toks, j, t)
                        ]
                        for t, btok in enumerate(btoks)
                    ]
                )
        return X, XB


def train_incremental(
    sentences,
    *,
    features: str | FeatureSetSpec,
    dev=None,
    stage_iterations: int | Sequence[int] = 10,
    final_iterations: int | None = None,
    trace: str | os.PathLike | None = None,
    log: Callable[[str], None] = print,
    verbose: bool = False,
    support: str = "all",
    **train_kwargs,
) -> IncrementalResult:
    """Train on ``sentences`` (:class:`~crfkit.io.columns.Sentence` list, one observation column:
    the letter) with the window feature set ``features`` grown by radius (see the module docstring).

    ``stage_iterations``: iterations of each stage but the last (an int, or one per stage);
    ``final_iterations``: of the last stage (default ``train_kwargs["max_iterations"]``, else until
    the stopping rules).  ``dev``: sentences scored during training (``dev_stop`` works per stage).
    ``support``: as :func:`crfkit.train.train` (default ``"all"``: every label / label pair with
    every kept attribute, Wapiti's space).  Other keywords go to :func:`crfkit.train.train`
    (``algorithm``, ``rho1``/``rho2``..., ``threads``)."""
    from .driver import train_sequences

    spec = parse_preset(features) if isinstance(features, str) else features
    if spec.kind == "-":
        raise ParameterError(
            f"{spec.name} holds one window only: there is nothing to grow incrementally"
        )
    templates = preset_templates(spec)
    by_stage = stages(spec)
    n_stages = len(by_stage)
    if isinstance(stage_iterations, int):
        its = [int(stage_iterations)] * (n_stages - 1)
    else:
        its = [int(x) for x in stage_iterations]
        if len(its) != n_stages - 1:
            raise ParameterError(
                f"stage_iterations: {len(its)} values for the {n_stages - 1} stages before "
                f"the last of {spec.name}"
            )
    if any(x < 1 for x in its):
        raise ParameterError("stage_iterations must be >= 1")
    for k in ("trace", "init", "w0", "resume", "checkpoint", "B", "B_dev", "X_dev", "Y_dev"):
        if k in train_kwargs:
            raise ParameterError(f"train_incremental does not take {k!r}")
    last_max = (
        final_iterations
        if final_iterations is not None
        else train_kwargs.pop("max_iterations", None)
    )
    train_kwargs.pop("max_iterations", None)
    Y = [list(s.labels) for s in sentences]
    gated = Gated(templates, sentences, by_stage)
    dev_g = None
    if dev is not None:
        dev_g = Gated(templates, dev, by_stage)
        dev_g.gate = gated.gate  # the same gate: one dict, filled by the training side
        Y_dev = [list(s.labels) for s in dev]
    tr = None
    if trace:
        d = os.path.dirname(os.path.abspath(trace))
        os.makedirs(d, exist_ok=True)
        tr = open(trace, "w", encoding="utf-8")
    # what every window would add ungated: its distinct values times L (times L^2 with label pairs)
    distinct: dict[Window, set] = {}
    for toks in gated.U:
        for tok in toks:
            for j, a in enumerate(tok):
                w = gated.u_win[j]
                if w is not None:
                    distinct.setdefault(w, set()).add(a)
    t0 = time.perf_counter()
    history: list[dict] = []
    summaries: list[dict] = []
    prev: CRFModel | None = None
    res = None
    active: set[str] | None = None
    try:
        for s in range(n_stages):
            gated.open_stage(s, active)
            X, XB = gated.attributes()
            kw = dict(train_kwargs)
            kw["max_iterations"] = its[s] if s < n_stages - 1 else last_max
            if dev_g is not None:
                Xd, XBd = dev_g.attributes()
                kw.update(X_dev=Xd, Y_dev=Y_dev)
                if XBd is not None:
                    kw["B_dev"] = XBd
            if XB is not None:
                kw["B"] = XB
            if prev is not None:
                kw["init"] = prev
            meta = dict(kw.pop("meta", None) or {})
            meta.update(
                {
                    "templates": templates.source,
                    "template_pad": True,
                    "columns": 1,
                    "feature_set": spec.name,
                    "incremental_stage": s,
                }
            )
            t_stage = time.perf_counter()
            res = train_sequences(X, Y, support=support, verbose=verbose, log=log, meta=meta, **kw)
            sp = res.model.space
            n_prev = prev.space.n_features if prev is not None else 0
            a_prev = (prev.space.n_attributes + prev.space.n_battributes) if prev is not None else 0
            L = sp.n_labels
            cand = sum(
                len(distinct.get(w, ())) * (L + (L * L if spec.pairs else 0)) for w in by_stage[s]
            )
            cand += sum(L + L * L for w in by_stage[s] if w.empty)
            off = t_stage - t0
            for rec in res.history:
                rec = dict(rec, stage=s, wall_s=rec.get("wall_s", 0.0) + off)
                history.append(rec)
                if tr:
                    tr.write(json.dumps(rec) + "\n")
            summary = {
                "record": "stage",
                "stage": s,
                "windows": [w.name if not w.empty else "bias+transitions" for w in by_stage[s]],
                "attributes_added": sp.n_attributes + sp.n_battributes - a_prev,
                "features_added": sp.n_features - n_prev,
                "features": sp.n_features,
                "candidate_features": cand,
                "active": res.model.n_active,
                "iterations": res.iterations,
                "wall_s": time.perf_counter() - t0,
                "objective": res.objective,
                "status": res.status,
            }
            if res.history and "dev_accuracy" in res.history[-1]:
                summary["dev_accuracy"] = res.history[-1]["dev_accuracy"]
            summaries.append(summary)
            if tr:
                tr.write(json.dumps(summary) + "\n")
                tr.flush()
            if verbose:
                log(
                    f"stage {s} ({', '.join(summary['windows'])}): +{summary['features_added']} features "
                    f"(of {cand} candidates), {sp.n_features} in all, {summary['active']} active, "
                    f"{res.iterations} iterations, {summary['wall_s']:.1f}s"
                )
            prev = res.model
            active = active_attributes(prev)
            if res.status == "interrupted":
                break
    finally:
        if tr:
            tr.close()
    res.model.meta["incremental"] = [
        {k: v for k, v in x.items() if k != "record"} for x in summaries
    ]
    return IncrementalResult(
        result=res, stages=summaries, history=history, seconds=time.perf_counter() - t0
    )
