"""The training driver: feature space + corpus, objective, optimizer, stopping,
progress lines, dev evaluation, trace, model.

``train(X, Y, ...)`` takes attribute sequences (see ``crfkit.features.encode``);
``train_corpus`` takes an already encoded corpus.  The CLI and the estimator are
thin shells over these.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from .corpus import Corpus
from .features.encode import build
from .model import CRFModel, FeatureSpace
from .objective import Objective, Regularization, regularization
from .parallel import set_threads

ALGORITHMS = ("lbfgs", "owlqn")


@dataclass
class TrainResult:
    model: CRFModel
    status: str
    message: str
    iterations: int
    effective_passes: float
    seconds: float
    objective: float             # f(w) in crfkit's normalisation (per sequence)
    objective_crfsuite: float    # n * f(w): CRFsuite's units
    reg: Regularization
    history: list = field(default_factory=list)

    @property
    def converged(self) -> bool:
        return self.status in ("converged", "delta", "gtol", "stop_value")


class _Trace:
    """One JSON line per iteration, flushed as it is written so an interrupted run keeps its lines."""

    def __init__(self, path: str | os.PathLike | None):
        self.f = None
        if path:
            d = os.path.dirname(os.path.abspath(path))
            os.makedirs(d, exist_ok=True)
            self.f = open(path, "w", encoding="utf-8")

    def write(self, rec: dict) -> None:
        if self.f:
            self.f.write(json.dumps(rec) + "\n")
            self.f.flush()

    def close(self) -> None:
        if self.f:
            self.f.close()


def _dev_scores(model: CRFModel, dev: Corpus, dev_labels: Sequence[Sequence[str]] | None) -> dict:
    from .metrics import conlleval
    ids, _ = model.viterbi(dev)
    gold = dev.y
    out = {"dev_accuracy": float(np.mean(ids == gold)) * 100.0 if len(gold) else 0.0}
    if dev_labels is not None:
        pred = model._split(dev, ids)
        rep = conlleval(dev_labels, pred)
        out["dev_f1"] = rep.f1
    return out


def train_corpus(space: FeatureSpace, corpus: Corpus, *, algorithm: str = "lbfgs",
                 reg: Regularization | None = None, max_iterations: int | None = None,
                 epsilon: float = 1e-5, delta: float = 1e-5, period: int = 10, gtol: float | None = None,
                 m: int = 6, stop_value: float | None = None, threads: int | None = None,
                 dev: Corpus | None = None, dev_labels=None, dev_every: int = 1,
                 trace: str | os.PathLike | None = None, verbose: bool = False,
                 log: Callable[[str], None] = print, w0: np.ndarray | None = None,
                 meta: dict | None = None, callback: Callable[[dict], bool | None] | None = None) -> TrainResult:
    """Train on an encoded corpus. See :func:`train` for the parameters."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}; available: {', '.join(ALGORITHMS)}")
    reg = reg or regularization(corpus.n_sequences)
    requested = algorithm
    if algorithm == "lbfgs" and reg.l1 > 0:
        algorithm = "owlqn"  # as CRFsuite: L-BFGS with an L1 term runs OWL-QN
    set_threads(threads)
    # OWL-QN takes the smooth part (loss + L2) and handles the L1 term itself
    smooth = Regularization(l1=0.0, l2=reg.l2) if algorithm == "owlqn" else reg
    obj = Objective(corpus, space, smooth, threads=threads)
    n = obj.n
    c1, c2 = reg.crfsuite(n)
    if verbose:
        if requested != algorithm:
            log(f"{requested} with an L1 term (l1 > 0): training with {algorithm}, as CRFsuite does")
        log(f"crfkit {algorithm}: {n} sequences, {corpus.n_tokens} tokens, {space.n_labels} labels, "
            f"{space.n_attributes} attributes, {space.n_features} features "
            f"({space.n_state} state, {space.n_trans} transition)")
        log(f"objective: (1/n) sum nll + (l2/2)|w|^2 + l1|w|_1 with l2={reg.l2:.6g}, l1={reg.l1:.6g} "
            f"(CRFsuite c2={c2:.6g}, c1={c1:.6g})")
    tr = _Trace(trace)
    history: list[dict] = []
    t0 = time.perf_counter()
    x0 = np.zeros(space.n_features) if w0 is None else np.asarray(w0, dtype=np.float64)

    def on_iter(info: dict):
        rec = {
            "algorithm": algorithm, "iteration": info["iteration"],
            "effective_passes": obj.effective_passes, "wall_s": time.perf_counter() - t0,
            "objective": info["f"], "grad_inf_norm": info["gnorm_inf"], "grad_norm": info["gnorm"],
            "nnz": int(info["nnz"]) if "nnz" in info else int(np.count_nonzero(info["x"])), "step": info["step"],
        }
        if dev is not None and dev_every and info["iteration"] % dev_every == 0:
            rec.update(_dev_scores(CRFModel(space, info["x"]), dev, dev_labels))
            rec["wall_s_with_dev"] = time.perf_counter() - t0
        history.append(rec)
        tr.write(rec)
        if verbose:
            line = (f"iter {rec['iteration']:4d}  obj {rec['objective']:.8g}  |g|inf {rec['grad_inf_norm']:.3e}  "
                    f"step {rec['step']:.3g}  active {rec['nnz']}  passes {rec['effective_passes']:.0f}  "
                    f"{rec['wall_s']:.2f}s")
            if "dev_accuracy" in rec:
                line += f"  dev acc {rec['dev_accuracy']:.2f}%"
            if "dev_f1" in rec:
                line += f"  dev F1 {rec['dev_f1']:.2f}"
            log(line)
        if callback is not None:
            return callback(rec)
        return None

    try:
        # epsilon is CRFsuite's test ||g|| / max(1, ||w||) on the gradient (OWL-QN:
        # pseudo-gradient) of the sum-form objective, which is n times ours: same rule, same meaning
        common = dict(m=m, max_iterations=max_iterations, epsilon=epsilon / n, delta=delta, period=period,
                      gtol=gtol, stop_value=stop_value, callback=on_iter)
        if algorithm == "owlqn":
            from .optim.owlqn import owlqn
            res = owlqn(obj.value_and_grad, x0, reg.l1, **common)
        else:
            from .optim.lbfgs import lbfgs
            res = lbfgs(obj.value_and_grad, x0, **common)
    finally:
        tr.close()
    if res.status == "interrupted" and res.iterations == 0:
        raise KeyboardInterrupt  # nothing was learnt: there is no model worth saving
    seconds = time.perf_counter() - t0
    md = {"algorithm": algorithm, "l1": reg.l1, "l2": reg.l2, "n_train": n,
          "iterations": res.iterations, "status": res.status}
    if meta:
        md.update(meta)
    model = CRFModel(space, res.x, md)
    if verbose:
        log(f"{res.status}: {res.message}; {res.iterations} iterations, {obj.effective_passes:.0f} passes, "
            f"{seconds:.2f}s, objective {res.f:.10g} (CRFsuite units {obj.to_crfsuite(res.f):.6f})")
    return TrainResult(model=model, status=res.status, message=res.message, iterations=res.iterations,
                       effective_passes=obj.effective_passes, seconds=seconds, objective=res.f,
                       objective_crfsuite=obj.to_crfsuite(res.f), reg=reg, history=history)


def train(X, Y, *, support: str = "observed", transitions: str | None = None, min_freq: float = 0,
          l1=None, l2=None, c1=None, c2=None, rho1=None, rho2=None,
          X_dev=None, Y_dev=None, **kwargs) -> TrainResult:
    """Train a CRF on attribute sequences ``X`` with label sequences ``Y``.

    Regularisation in one convention (default CRFsuite's ``c2=1``): ``l2``/``l1``
    (crfkit: per-sequence average loss), ``c2``/``c1`` (CRFsuite), ``rho2``/``rho1``
    (Wapiti).  ``algorithm``: ``lbfgs`` (default) or ``owlqn``; as in CRFsuite,
    ``lbfgs`` with an L1 term (``l1``/``c1``/``rho1`` > 0) runs OWL-QN, and the
    model meta and the trace record ``owlqn``.  Stopping: ``max_iterations``, ``epsilon`` (CRFsuite's rule
    ``||g|| / max(1, ||w||) < epsilon`` with ``g`` the gradient of the sum-form
    objective, i.e. ``n`` times crfkit's), ``delta`` over ``period``
    iterations, ``gtol`` (max-norm of crfkit's gradient), ``stop_value``.  ``X_dev``/``Y_dev`` add dev accuracy (and chunk
    F1) to every iteration's record; ``trace`` writes the records as JSON lines.
    """
    space, corpus = build(X, Y, support=support, transitions=transitions, min_freq=min_freq)
    reg = regularization(corpus.n_sequences, l1=l1, l2=l2, c1=c1, c2=c2, rho1=rho1, rho2=rho2)
    dev = None
    if X_dev is not None:
        from .features.encode import encode
        dev = encode(X_dev, space, Y_dev, name="<dev data>")
    meta = dict(kwargs.pop("meta", None) or {})
    meta.update({"support": support, "transitions": transitions or support, "min_freq": min_freq})
    return train_corpus(space, corpus, reg=reg, dev=dev, dev_labels=Y_dev if X_dev is not None else None,
                        meta=meta, **kwargs)
