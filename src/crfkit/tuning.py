"""Hyperparameter search that reuses work: :class:`CRFSearchCV` and :func:`tune`.

A search over the regularisation strengths ``c1`` / ``c2`` of :class:`crfkit.CRF` done the usual
way (``GridSearchCV`` / ``RandomizedSearchCV``) trains every candidate on every fold from scratch,
re-extracting and re-encoding the features each time.  Here:

* the features are converted once and each fold's training part is encoded once (its feature space
  built, its corpus encoded); every candidate of that fold trains on the same encoded corpus;
* the candidates run as a *regularisation path*: ordered from strong to weak regularisation (a
  grid in snake order: the c1 axis outer, strong to weak, the c2 axis inner, its direction
  alternating, so that consecutive candidates are neighbours; random candidates by decreasing
  strength), each warm-started from the optimum of its nearest finished candidate (in the
  log-scaled, range-normalised (c1, c2) plane) on the same fold.  The objective is convex, so a
  run that converges reaches the same optimum from any start: a path's models equal independent
  (cold) runs' to the optimizer's tolerance, in a fraction of the iterations;
* with ``state=PATH`` the finished candidates are written to ``PATH`` (JSON lines: a header with
  the search's fingerprint, then one record per finished candidate, rewritten atomically after
  each) with their weights beside it (``PATH.d/``) and the best model so far (``PATH.best.crfkit``:
  the best candidate's model of the first split); a search interrupted (Ctrl-C) resumes from
  there: the finished candidates are read back, not retrained.

Only ``c1`` and ``c2`` are searched this way (the other settings of the estimator are fixed; to
search those, ``sklearn.model_selection.GridSearchCV`` takes :class:`crfkit.CRF` as any
estimator).  ``crfkit tune`` (:mod:`crfkit.cli.tune`) is the command line.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import time
from dataclasses import fields

import numpy as np

from .errors import CrfkitError, DataError, ParameterError

__all__ = ["CRFSearchCV", "tune", "folds", "parse_grid", "path_order", "SEARCHED"]

SEARCHED = ("c1", "c2")
STATE_VERSION = 1
MAX_STATE_BYTES = 64 << 20  # a state file is ours, but read bounded all the same
# the estimator settings that do not change the feature space, the optimizer or the stopping rule
_NOT_IN_FINGERPRINT = ("c1", "c2", "verbose", "threads", "trace", "model_filename", "dask_client")


def folds(n: int, k: int, seed: int = 0) -> list[np.ndarray]:
    """Split sequence indices 0..n-1 into k disjoint folds covering them (shuffled with ``seed``;
    sizes differ by at most one; each fold sorted).  ``crfkit cv`` and ``crfkit tune`` use it."""
    if k < 2:
        raise CrfkitError(f"cross-validation needs at least 2 folds, got {k}")
    if n < k:
        raise CrfkitError(f"{n} sequences cannot make {k} folds")
    perm = np.random.default_rng(seed).permutation(n)
    return [np.sort(part) for part in np.array_split(perm, k)]


def parse_grid(text: str, name: str = "grid") -> list[float]:
    """A grid of non-negative numbers from the command line: ``0,0.01,0.1`` (a list) or
    ``LO:HI:N`` (N values spaced evenly in log scale from LO to HI, both > 0, N >= 2)."""
    text = str(text).strip()
    try:
        if ":" in text:
            parts = text.split(":")
            if len(parts) != 3:
                raise ValueError
            lo, hi, n = float(parts[0]), float(parts[1]), int(parts[2])
            if not (lo > 0 and hi > 0 and n >= 2 and math.isfinite(lo) and math.isfinite(hi)):
                raise ValueError
            if n > 10_000:
                raise ParameterError(f"{name}: {n} values is too many (at most 10000)")
            vals = [float(v) for v in np.geomspace(lo, hi, n)]
        else:
            vals = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ParameterError(
            f"{name}: {text!r} is not a grid: give comma-separated numbers (0,0.01,0.1) or "
            "LO:HI:N (N log-spaced values, LO and HI > 0)"
        ) from None
    if not vals:
        raise ParameterError(f"{name}: the grid is empty")
    for v in vals:
        if not (math.isfinite(v) and v >= 0):
            raise ParameterError(f"{name}: {v} is not a non-negative number")
    return sorted(set(vals), key=vals.index)


def _candidates(params, n_iter, random_state) -> list[dict]:
    """The candidate settings: a dict of lists (a grid), a list of dicts (as given), or a dict with
    scipy distributions (``n_iter`` draws, as ``RandomizedSearchCV`` draws them)."""
    if isinstance(params, dict):
        if any(hasattr(v, "rvs") for v in params.values()):
            if n_iter is None:
                raise ParameterError("distributions need n_iter (the number of candidates)")
            from sklearn.model_selection import ParameterSampler

            cands = list(ParameterSampler(params, n_iter=int(n_iter), random_state=random_state))
        else:
            keys = sorted(params)
            lists = []
            for k in keys:
                v = params[k]
                lists.append([v] if np.ndim(v) == 0 else list(v))
            cands = [dict(zip(keys, combo)) for combo in itertools.product(*lists)]
    else:
        cands = [dict(p) for p in params]
    if not cands:
        raise ParameterError("no candidate settings to search")
    out = []
    for i, p in enumerate(cands):
        bad = sorted(set(p) - set(SEARCHED))
        if bad:
            raise ParameterError(
                f"CRFSearchCV searches {' and '.join(SEARCHED)} along a regularisation path; "
                f"candidate {i} sets {', '.join(bad)} (use sklearn's GridSearchCV with crfkit.CRF "
                "to search other settings)"
            )
        q = {}
        for k, v in p.items():
            try:
                v = float(v)
            except (TypeError, ValueError):
                raise ParameterError(f"candidate {i}: {k}={v!r} is not a number") from None
            if not (math.isfinite(v) and v >= 0):
                raise ParameterError(f"candidate {i}: {k}={v} must be a non-negative number")
            q[k] = v
        out.append(q)
    return out


def _coordinates(cands: list[dict]) -> np.ndarray:
    """Each candidate as a point of the log-scaled (c1, c2) plane, each axis scaled to [0, 1] over
    the candidates (0 the weakest); an axis a candidate leaves unset takes the estimator's value,
    which is the same for all and so adds nothing."""
    cols = []
    for k in SEARCHED:
        v = np.array([p.get(k, np.nan) for p in cands], dtype=np.float64)
        if np.isnan(v).all():
            continue
        v = np.where(np.isnan(v), np.nanmin(v), v)
        pos = v[v > 0]
        tiny = (pos.min() * 1e-2) if len(pos) else 1.0
        u = np.log(v + tiny)
        span = u.max() - u.min()
        cols.append((u - u.min()) / span if span > 0 else np.zeros_like(u))
    return np.stack(cols, axis=1) if cols else np.zeros((len(cands), 1))


def path_order(cands: list[dict]) -> tuple[list[int], list[int]]:
    """The order the candidates run in, and for each candidate (by index) the candidate it is
    warm-started from (-1: cold, the first).

    A full grid over c1 x c2 runs in snake order: c1 from strong to weak (outer), c2 inner, from
    strong to weak on the first row, back on the next, and so on; other sets of candidates by
    decreasing strength (the sum of the normalised log coordinates).  Each candidate starts from
    the nearest (Euclidean, normalised log plane) of those before it in the order; ties go to the
    latest."""
    n = len(cands)
    xy = _coordinates(cands)
    c1s = sorted({p.get("c1") for p in cands if "c1" in p}, reverse=True)
    c2s = sorted({p.get("c2") for p in cands if "c2" in p}, reverse=True)
    pairs = {(p.get("c1"), p.get("c2")) for p in cands}
    if len(c1s) > 1 and len(c2s) > 1 and len(pairs) == n == len(c1s) * len(c2s):
        where = {(p.get("c1"), p.get("c2")): i for i, p in enumerate(cands)}
        order = []
        for r, a in enumerate(c1s):
            row = c2s if r % 2 == 0 else c2s[::-1]
            order.extend(where[(a, b)] for b in row)
    else:
        strength = xy.sum(axis=1)
        order = sorted(range(n), key=lambda i: (-strength[i], i))
    parent = [-1] * n
    for pos in range(1, n):
        i = order[pos]
        prev = np.array(order[:pos])
        d = np.linalg.norm(xy[prev] - xy[i], axis=1)
        best = np.flatnonzero(d == d.min())[-1]
        parent[i] = int(prev[best])
    return order, parent


def _show(p: dict) -> str:
    return " ".join(
        f"{k}={'default' if p.get(k) is None else format(p[k], '.6g')}" for k in SEARCHED
    )


def _sha(h, obj) -> None:
    h.update(json.dumps(obj, sort_keys=True, default=repr).encode())
    h.update(b"\0")


class CRFSearchCV:
    """Cross-validated search over ``c1`` / ``c2`` of a :class:`crfkit.CRF` along a
    regularisation path (see the module docstring): scikit-learn's ``GridSearchCV`` /
    ``RandomizedSearchCV`` interface, with the work shared between candidates.

    Parameters
    ----------
    estimator : crfkit.CRF
        Its settings (algorithm, stopping rule, features...) are those of every candidate.
    param_grid : dict or list of dict
        ``{"c1": [...], "c2": [...]}`` (a grid), a list of ``{"c1": .., "c2": ..}`` (candidates as
        given), or a dict of scipy distributions with ``n_iter`` (drawn as ``RandomizedSearchCV``
        draws them, with ``random_state``).
    cv : int, splitter or iterable, default 3
        Folds: an int k (k shuffled folds, :func:`folds` with ``fold_seed``), an object with
        ``split(X, y)`` (``sklearn.model_selection.KFold(3)``...), or (train, test) index pairs.
        Ignored when ``fit`` gets a development set.
    scoring : callable, optional
        ``scoring(estimator, X, y) -> float`` (higher is better), as scikit-learn's scorers;
        default the estimator's ``score`` (token accuracy).
    refit : bool, default True
        Train the best candidate on all of ``X`` (warm-started from its model of the first
        split) as ``best_estimator_``.
    warm_start : bool, default True
        False: every candidate starts from zero (the cold runs the path is measured against).
    warm_max_iterations : int, optional
        An iteration cap for the warm-started candidates in place of the estimator's
        ``max_iterations`` (which the first, cold, candidate keeps): with a cap that stops the
        runs before they converge (sklearn-crfsuite's tutorial: ``max_iterations=100``), a
        warm-started run would otherwise spend the whole cap again.  Default: the same cap.
    state : path, optional
        The resume file (see the module docstring).
    progress : bool, optional
        A progress bar over candidates and folds on standard error (None: on a terminal only).
    n_jobs : int, default 1
        Train a candidate's folds in this many worker processes at once (at most one per fold;
        each fold's encoded data is handed to the workers once, through a temporary file, and the
        threads are shared out between them).  The results are those of ``n_jobs=1`` (the same
        runs, to the last bits of the transition weights' sums, which the thread count may move).

    Attributes after ``fit``: ``cv_results_`` (``params``, ``mean_test_score``,
    ``std_test_score``, ``split<k>_test_score``, ``rank_test_score``, ``mean_fit_time``,
    ``iterations`` (over the folds), ``warm_from`` (the candidate index warm-started from, -1:
    cold), ``resumed``), ``best_index_``, ``best_params_``, ``best_score_``, ``best_estimator_``,
    ``n_splits_``, ``path_`` (the order the candidates ran in), ``refit_time_``.
    """

    def __init__(
        self,
        estimator,
        param_grid,
        *,
        n_iter=None,
        random_state=None,
        cv=3,
        fold_seed: int = 0,
        scoring=None,
        refit: bool = True,
        warm_start: bool = True,
        state=None,
        progress=None,
        log=None,
        warm_max_iterations=None,
        n_jobs: int = 1,
    ):
        self.estimator = estimator
        self.param_grid = param_grid
        self.n_iter = n_iter
        self.random_state = random_state
        self.cv = cv
        self.fold_seed = fold_seed
        self.scoring = scoring
        self.refit = refit
        self.warm_start = warm_start
        self.state = state
        self.progress = progress
        self.log = log
        self.warm_max_iterations = warm_max_iterations
        self.n_jobs = n_jobs

    # ---------------------------------------------------------------- pieces
    def _splits(self, n: int, X, y) -> list[tuple[np.ndarray, np.ndarray]]:
        cv = self.cv
        if isinstance(cv, (int, np.integer)) and not isinstance(cv, bool):
            parts = folds(n, int(cv), self.fold_seed)
            return [
                (np.concatenate([p for j, p in enumerate(parts) if j != i]), parts[i])
                for i in range(len(parts))
            ]
        pairs = cv.split(X, y) if hasattr(cv, "split") else cv
        out = []
        for tr, te in pairs:
            tr, te = np.asarray(tr, dtype=np.int64), np.asarray(te, dtype=np.int64)
            if len(tr) == 0 or len(te) == 0:
                raise ParameterError("cv: a split with an empty training or test part")
            if tr.min() < 0 or te.min() < 0 or tr.max() >= n or te.max() >= n:
                raise ParameterError(f"cv: a split index is outside 0..{n - 1}")
            out.append((tr, te))
        if not out:
            raise ParameterError("cv gave no splits")
        return out

    def _settings(self):
        """(build kwargs, TrainConfig kwargs, base c1/c2, model meta) from the estimator."""
        from .training.config import TrainConfig

        est = self.estimator
        if getattr(est, "dask_client", None) is not None:
            raise ParameterError("CRFSearchCV trains in this process: dask_client is not supported")
        kw = est._train_kwargs()
        build_kw = {k: kw.pop(k) for k in ("support", "transitions", "min_freq")}
        base = {"c1": kw.pop("c1", None), "c2": kw.pop("c2", None)}
        for k in ("l1", "l2", "rho1", "rho2", "weights", "X_dev", "Y_dev"):
            if kw.get(k) is not None:
                raise ParameterError(
                    f"CRFSearchCV sets the regularisation from c1/c2: the estimator's train_params "
                    f"must not give {k}"
                )
            kw.pop(k, None)
        kw["trace"] = None  # one trace per fit would overwrite the last
        meta = dict(kw.pop("meta", None) or {})
        meta.update(build_kw)
        meta["transitions"] = meta["transitions"] or meta["support"]
        names = {f.name for f in fields(TrainConfig)}
        bad = sorted(set(kw) - names)
        if bad:
            raise ParameterError(f"CRFSearchCV cannot pass {', '.join(bad)} to the training")
        return build_kw, kw, base, meta

    def _fingerprint(self, y, splits, cands, build_kw, cfg_kw) -> str:
        h = hashlib.sha256()
        _sha(h, {"version": STATE_VERSION, "candidates": cands, "build": build_kw})
        _sha(h, {k: v for k, v in sorted(cfg_kw.items()) if k not in ("log", "callback")})
        params = self.estimator.get_params()
        _sha(h, {k: v for k, v in params.items() if k not in _NOT_IN_FINGERPRINT})
        for tr, te in splits:
            h.update(tr.tobytes())
            h.update(b"|")
            h.update(te.tobytes())
        for s in y:
            h.update("\x1f".join(s).encode())
            h.update(b"\x1e")
        return h.hexdigest()

    # ------------------------------------------------------------------ state
    def _load_state(self, fp: str, n_cands: int, n_splits: int) -> dict[int, dict]:
        path = os.fspath(self.state)
        if not os.path.exists(path):
            return {}
        size = os.path.getsize(path)
        if size > MAX_STATE_BYTES:
            raise DataError(f"state file is {size} bytes (at most {MAX_STATE_BYTES})", path)
        done: dict[int, dict] = {}
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                try:
                    rec = json.loads(line)
                except ValueError:
                    raise DataError(
                        "not a JSON line: not a crfkit tune state file", path, lineno
                    ) from None
                if lineno == 1:
                    if not isinstance(rec, dict) or rec.get("crfkit_tune") != STATE_VERSION:
                        raise DataError("not a crfkit tune state file (no header)", path, 1)
                    if rec.get("fingerprint") != fp:
                        raise CrfkitError(
                            f"{path}: this state file belongs to another search (other data, "
                            "folds, candidates or settings): remove it or give another state file"
                        )
                    continue
                i = rec.get("index") if isinstance(rec, dict) else None
                if not isinstance(i, int) or not 0 <= i < n_cands:
                    raise DataError("a record without a valid candidate index", path, lineno)
                wpath = self._weights_path(i)
                if not os.path.exists(wpath):
                    continue  # its weights were not written: train it again
                with np.load(wpath) as z:
                    rec["weights"] = [(z[f"i{j}"], z[f"v{j}"]) for j in range(n_splits)]
                done[i] = rec
        return done

    def _weights_path(self, i: int) -> str:
        return os.path.join(os.fspath(self.state) + ".d", f"cand-{i}.npz")

    def _save_state(self, fp: str, done: dict[int, dict], new: int | None) -> None:
        from .io.atomic import atomic_file

        path = os.fspath(self.state)
        if new is not None:
            arrays = {}
            for j, (idx, val) in enumerate(done[new]["weights"]):
                arrays[f"i{j}"], arrays[f"v{j}"] = idx, val
            with atomic_file(self._weights_path(new), what="the search's weights") as f:
                np.savez(f, **arrays)
        lines = [json.dumps({"crfkit_tune": STATE_VERSION, "fingerprint": fp})]
        for i in sorted(done, key=lambda i: done[i]["seq"]):
            lines.append(json.dumps({k: v for k, v in done[i].items() if k != "weights"}))
        with atomic_file(path, what="the search's state file") as f:
            f.write(("\n".join(lines) + "\n").encode())

    # -------------------------------------------------------------------- fit
    def fit(self, X, y, X_dev=None, y_dev=None):
        """Run the search on ``X`` / ``y`` (cross-validation over ``cv``), or, with ``X_dev`` /
        ``y_dev``, train on all of ``X`` and score on that development set (one split; the best
        candidate's model is then ``best_estimator_``, no refit needed)."""
        from .estimator import _label_sequences
        from .features.dicts import to_attributes
        from .features.encode import build
        from .model import CRFModel
        from .objective import regularization
        from .progress import Progress
        from .training.driver import train_corpus

        log = self.log or (lambda s: None)
        X = list(X)
        Y = _label_sequences(y, "y")
        if len(X) != len(Y):
            raise DataError(f"X has {len(X)} sequences but y has {len(Y)} label sequences")
        cands = _candidates(self.param_grid, self.n_iter, self.random_state)
        build_kw, cfg_kw, base, meta = self._settings()
        A = to_attributes(X, name="X")  # the features, converted once
        if X_dev is not None:
            Xd, Yd = list(X_dev), _label_sequences(y_dev, "y_dev")
            if len(Xd) != len(Yd):
                raise DataError(f"X_dev has {len(Xd)} sequences but y_dev has {len(Yd)}")
            splits = [(np.arange(len(X)), None)]
        else:
            Xd = Yd = None
            splits = self._splits(len(X), X, Y)
        fp = self._fingerprint(
            Y if Yd is None else Y + [["<dev>"]] + Yd,
            [(tr, te if te is not None else np.zeros(0, np.int64)) for tr, te in splits],
            cands,
            build_kw,
            dict(cfg_kw, meta=meta, warm_max_iterations=self.warm_max_iterations),
        )
        order, parent = path_order(cands)
        if not self.warm_start:
            parent = [-1] * len(cands)
        done = self._load_state(fp, len(cands), len(splits)) if self.state is not None else {}
        resumed = set(done)
        if resumed:
            log(f"resuming: {len(resumed)} of {len(cands)} candidates already finished")
        scorer = self.scoring
        n_fits = len(cands) * len(splits)
        bar = Progress(total=n_fits, desc="tune", unit="fit", enabled=self.progress)
        bar.update(len(done) * len(splits))
        best_i = max(done, key=lambda i: (done[i]["mean"], -i)) if done else None
        self._fold_data = []
        # per fold, the memo of feature-dict lookups (DictEncoder) that every candidate's model on
        # that fold shares: the models differ only in their weights, so the validation sequences'
        # attribute ids are looked up once per fold, not once per candidate (half of a search's time
        # was predict re-learning the same dicts for each new model)
        encoders: dict[int, object] = {}
        best_model = (None, None)
        pool = None
        if int(self.n_jobs) < 1:
            raise ParameterError(f"n_jobs must be at least 1, got {self.n_jobs}")
        try:
            # each split's training part encoded once (only the first when every candidate has
            # finished: the refit starts from its model)
            need = splits if len(done) < len(cands) else splits[:1]
            for tr, te in need:
                t0 = time.perf_counter()
                space, corpus = build([A[k] for k in tr], [Y[k] for k in tr], **build_kw)
                if te is None:
                    Xv, Yv = Xd, Yd
                else:
                    Xv, Yv = [X[k] for k in te], [Y[k] for k in te]
                self._fold_data.append((space, corpus, Xv, Yv, time.perf_counter() - t0))
            if int(self.n_jobs) > 1 and len(self._fold_data) > 1 and len(done) < len(cands):
                pool = _FoldPool(
                    [(fd[0], fd[1]) for fd in self._fold_data],
                    min(int(self.n_jobs), len(self._fold_data)),
                    cfg_kw.get("threads"),
                )
            for i in order:
                if i in done:
                    continue
                p = {**base, **cands[i]}
                rec = {
                    "index": i,
                    "params": cands[i],
                    "scores": [],
                    "iterations": [],
                    "seconds": [],
                    "objectives": [],
                    "status": [],
                    "warm_from": parent[i],
                    "seq": len(done),
                }
                weights = []
                kw = dict(cfg_kw, meta=dict(meta))
                if parent[i] >= 0 and self.warm_max_iterations is not None:
                    kw["max_iterations"] = int(self.warm_max_iterations)
                starts = [
                    done[parent[i]]["weights"][j] if parent[i] >= 0 else None
                    for j in range(len(self._fold_data))
                ]
                if pool is not None:
                    # every fold of the candidate at once, in the worker processes
                    bar.set_postfix(
                        f"candidate {rec['seq'] + 1}/{len(cands)} {_show(p)} "
                        f"{len(splits)} folds in {pool.n_workers} processes"
                    )
                    pending = pool.submit_all(p["c1"], p["c2"], starts, kw)
                for j, fd in enumerate(self._fold_data):
                    space, corpus, Xv, Yv, _ = fd
                    if pool is not None:
                        res, secs = pool.result(pending[j], space)
                    else:
                        reg = regularization(corpus.total_weight, c1=p["c1"], c2=p["c2"])
                        w0 = _dense(starts[j], space.n_features)
                        bar.set_postfix(
                            f"candidate {rec['seq'] + 1}/{len(cands)} {_show(p)} "
                            f"fold {j + 1}/{len(splits)}"
                        )
                        t0 = time.perf_counter()
                        res = self._train_fold(train_corpus, space, corpus, reg, w0, dict(kw))
                        secs = time.perf_counter() - t0
                    if res.status == "interrupted":
                        raise KeyboardInterrupt
                    est = self._fitted(p, res, corpus.total_weight)
                    _share_encoder(est.model_, encoders, j)
                    s = float(scorer(est, Xv, Yv) if scorer is not None else est.score(Xv, Yv))
                    if j == 0:
                        first_model = res.model
                    w = res.model.weights
                    nz = np.flatnonzero(w)
                    weights.append((nz.astype(np.int64), w[nz].copy()))
                    rec["scores"].append(s)
                    rec["iterations"].append(int(res.iterations))
                    rec["seconds"].append(secs)
                    rec["objectives"].append(float(res.objective_crfsuite))
                    rec["status"].append(res.status)
                    bar.update()
                rec["mean"] = float(np.mean(rec["scores"]))
                rec["weights"] = weights
                done[i] = rec
                improved = best_i is None or (rec["mean"], -i) > (done[best_i]["mean"], -best_i)
                if improved:
                    best_i = i
                    best_model = (i, first_model)
                log(
                    f"candidate {rec['seq'] + 1}/{len(cands)}: {_show(p)} "
                    f"score {rec['mean']:.4f} iterations {sum(rec['iterations'])} "
                    f"{sum(rec['seconds']):.1f}s"
                    + (f" (from candidate {parent[i]})" if parent[i] >= 0 else " (cold)")
                )
                if self.state is not None:
                    self._save_state(fp, done, i)
                    if improved:
                        first_model.save(os.fspath(self.state) + ".best.crfkit")
        finally:
            bar.close()
            if pool is not None:
                pool.close()
        self._results(cands, done, resumed, order, parent, len(splits))
        bp = {**base, **cands[self.best_index_]}
        t0 = time.perf_counter()
        if Xd is not None:
            model = best_model[1]
            if best_model[0] != self.best_index_:  # the best is a resumed candidate
                space = self._fold_data[0][0]
                wb = _dense(done[self.best_index_]["weights"][0], space.n_features)
                model = CRFModel(space, wb, meta=dict(meta))
            self.best_estimator_ = self._estimator(bp)
            self.best_estimator_.model_ = model
        elif self.refit:
            space0 = (
                self._fold_data[0][0]
                if self._fold_data and self._fold_data[0] is not None
                else None
            )
            space, corpus = build(A, Y, **build_kw)
            init = None
            if space0 is not None and self.warm_start:
                w = _dense(done[self.best_index_]["weights"][0], space0.n_features)
                init = CRFModel(space0, w)
            reg = regularization(corpus.total_weight, c1=bp["c1"], c2=bp["c2"])
            res = self._train_fold(
                train_corpus, space, corpus, reg, None, dict(cfg_kw, meta=dict(meta), init=init)
            )
            self.best_estimator_ = self._fitted(bp, res, corpus.total_weight)
            self.refit_iterations_ = int(res.iterations)
        self.refit_time_ = time.perf_counter() - t0
        if getattr(self, "best_estimator_", None) is not None and self.estimator.model_filename:
            self.best_estimator_.model_.save(self.estimator.model_filename)
        self._fold_data = None
        return self

    @staticmethod
    def _train_fold(train_corpus, space, corpus, reg, w0, kw):
        """One candidate on one split (a seam the tests use to count and interrupt trainings)."""
        return train_corpus(space, corpus, reg=reg, w0=w0, **kw)

    def _estimator(self, p: dict):
        est = type(self.estimator)(**self.estimator.get_params())
        est.set_params(c1=p["c1"], c2=p["c2"], model_filename=None)
        return est

    def _fitted(self, p: dict, res, n: float):
        est = self._estimator(p)
        est._store(res, n)
        return est

    def _results(self, cands, done, resumed, order, parent, n_splits) -> None:
        n = len(cands)
        scores = np.array([done[i]["scores"] for i in range(n)], dtype=np.float64)
        mean = scores.mean(axis=1)
        # ranks as scikit-learn's: 1 the best, ties share the smallest rank
        rank = np.array([1 + int(np.sum(mean > m)) for m in mean], dtype=np.int32)
        res = {
            "params": [dict(c) for c in cands],
            "mean_test_score": mean,
            "std_test_score": scores.std(axis=1),
            "rank_test_score": rank,
            "mean_fit_time": np.array([np.mean(done[i]["seconds"]) for i in range(n)]),
            "iterations": np.array([sum(done[i]["iterations"]) for i in range(n)], dtype=np.int64),
            "objectives": [list(done[i]["objectives"]) for i in range(n)],
            "warm_from": np.array([done[i]["warm_from"] for i in range(n)], dtype=np.int64),
            "resumed": np.array([i in resumed for i in range(n)]),
        }
        for j in range(n_splits):
            res[f"split{j}_test_score"] = scores[:, j]
        for k in SEARCHED:
            res[f"param_{k}"] = [c.get(k) for c in cands]
        self.cv_results_ = res
        self.best_index_ = int(min(range(n), key=lambda i: (-mean[i], i)))
        self.best_params_ = dict(cands[self.best_index_])
        self.best_score_ = float(mean[self.best_index_])
        self.n_splits_ = n_splits
        self.path_ = list(order)

    # ------------------------------------------------------ the best estimator
    def predict(self, X):
        """``best_estimator_.predict``."""
        return self.best_estimator_.predict(X)

    def score(self, X, y) -> float:
        """The search's scorer on ``X`` / ``y`` with ``best_estimator_``."""
        est = self.best_estimator_
        return float(self.scoring(est, X, y) if self.scoring is not None else est.score(X, y))


def _share_encoder(model, encoders: dict, j: int) -> None:
    """Give ``model`` fold ``j``'s shared feature-dict memo (:class:`DictEncoder` over the fold's
    feature space), made by the first model of the fold."""
    enc = encoders.get(j)
    if enc is None or enc.space is not model.space:
        from .features.dictenc import DictEncoder

        enc = encoders[j] = DictEncoder(model.space)
    model.__dict__["_dict_encoder"] = enc


def _dense(start, n: int):
    """A candidate's starting weights from their non-zero (index, value) pairs, or None."""
    if start is None:
        return None
    w = np.zeros(n)
    w[start[0]] = start[1]
    return w


# ------------------------------------------------------------------ worker processes (n_jobs > 1)
_WORKER_FOLDS: dict = {}


def _fold_train(path: str, c1, c2, start, kw: dict):
    """In a worker: train one candidate on the fold pickled at ``path`` (loaded once per worker);
    returns the result without its model (the parent has the fold's feature space) and the
    weights."""
    import dataclasses
    import pickle

    from .objective import regularization
    from .training.driver import train_corpus

    if path not in _WORKER_FOLDS:
        with open(path, "rb") as f:
            _WORKER_FOLDS[path] = pickle.load(f)
    space, corpus = _WORKER_FOLDS[path]
    reg = regularization(corpus.total_weight, c1=c1, c2=c2)
    t0 = time.perf_counter()
    res = train_corpus(space, corpus, reg=reg, w0=_dense(start, space.n_features), **kw)
    secs = time.perf_counter() - t0
    return dataclasses.replace(res, model=None), res.model.weights, res.model.meta, secs


class _FoldPool:
    """Worker processes (spawned: no fork of a process whose OpenMP threads are running) that
    train a candidate's folds at once; each fold's encoded data goes to a temporary file once."""

    def __init__(self, folds, n_workers: int, threads):
        import multiprocessing
        import pickle
        import tempfile
        from concurrent.futures import ProcessPoolExecutor

        from .parallel import default_threads

        self.n_workers = n_workers
        self._dir = tempfile.TemporaryDirectory(prefix="crfkit-tune-")
        self.paths = []
        for j, fold in enumerate(folds):
            path = os.path.join(self._dir.name, f"fold{j}.pickle")
            with open(path, "wb") as f:
                pickle.dump(fold, f, protocol=pickle.HIGHEST_PROTOCOL)
            self.paths.append(path)
        self.threads = max(1, int(threads or default_threads()) // n_workers)
        self._ex = ProcessPoolExecutor(
            max_workers=n_workers, mp_context=multiprocessing.get_context("spawn")
        )

    def submit_all(self, c1, c2, starts, kw: dict) -> list:
        kw = dict(kw, threads=self.threads)
        return [
            self._ex.submit(_fold_train, path, c1, c2, start, kw)
            for path, start in zip(self.paths, starts)
        ]

    def result(self, future, space):
        import dataclasses

        from .model import CRFModel

        res, weights, meta, secs = future.result()
        return dataclasses.replace(res, model=CRFModel(space, weights, meta=meta)), secs

    def close(self) -> None:
        self._ex.shutdown(wait=True, cancel_futures=True)
        self._dir.cleanup()


def tune(
    X,
    y,
    *,
    c1=None,
    c2=None,
    cv=3,
    X_dev=None,
    y_dev=None,
    scoring=None,
    state=None,
    progress=None,
    warm_start: bool = True,
    n_jobs: int = 1,
    **crf_params,
) -> CRFSearchCV:
    """Search a grid of ``c1`` x ``c2`` (lists; an omitted one keeps the estimator's value) for a
    :class:`crfkit.CRF` made with ``crf_params``, along a warm-started regularisation path
    (:class:`CRFSearchCV`); ``cv`` folds, or the development set ``X_dev`` / ``y_dev``.  Returns
    the fitted search (``best_params_``, ``best_estimator_``, ``cv_results_``); ``n_jobs``: folds
    trained at once in worker processes."""
    from .estimator import CRF

    grid = {}
    if c1 is not None:
        grid["c1"] = [c1] if np.ndim(c1) == 0 else list(c1)
    if c2 is not None:
        grid["c2"] = [c2] if np.ndim(c2) == 0 else list(c2)
    if not grid:
        raise ParameterError("tune needs a grid of c1 and/or c2 values")
    search = CRFSearchCV(
        CRF(**crf_params),
        grid,
        cv=cv,
        scoring=scoring,
        state=state,
        progress=progress,
        warm_start=warm_start,
        n_jobs=n_jobs,
    )
    return search.fit(X, y, X_dev=X_dev, y_dev=y_dev)
