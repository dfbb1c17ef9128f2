"""Run a list of optimizers for K effective passes on a benchmark data set.

Each run writes one trace (``crfkit.train``'s JSON lines: algorithm, iteration,
effective_passes, wall_s, objective, grad_inf_norm, nnz, dev_accuracy (the
test set, scored after every epoch/iteration), dev_f1 for chunk labels, and
the optimizer's extras such as ``state_bytes``) into the output directory,
named after the run: ``sag-nus_star.jsonl``, ``sg__eta=0.01.jsonl``,
``lbfgs.jsonl`` (``*`` is written ``_star``; parameters follow ``__``).

Every run lasts the K passes: the deterministic methods' stopping rules are
off, and so is the SAG family's (``delta = 0``) unless the spec sets ``delta``, and the dual
methods' (``gap_tol = 0``) unless the spec sets ``gap_tol``.

Step sizes: for the classic stochastic methods (:data:`STEP_SEARCH`: sg, asg,
adagrad, pegasos, smd; smd's ``eta`` is its initial gain) given without an ``eta``, every ``eta`` of
the grid (powers of 10) is run and ranked by the final training objective, as in the paper
(§6: the methods "cheat" by choosing the best eta on the training data); the
best is drawn as a solid line, the second-best dashed.  Runs that diverge
(NaN/inf objective or an error) rank last.

The directory also gets ``bench.json`` (the data set, l2, passes, seed, f*
and one summary per run with its role: ``only``, ``best``, ``second`` or
``tried``), rewritten after each run, and ``fstar.json`` (the f* entry).
Plots need only the traces (and f*).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import CrfkitError
from ..io.atomic import atomic_file

__all__ = [
    "STEP_SEARCH",
    "DEFAULT_ETAS",
    "Spec",
    "RunResult",
    "parse_spec",
    "run_one",
    "rank_group",
    "run_benchmark",
    "trace_stem",
    "MANIFEST",
    "FSTAR_FILE",
]

STEP_SEARCH = ("sg", "asg", "adagrad", "pegasos", "smd")
DEFAULT_ETAS = tuple(10.0**k for k in range(-4, 2))  # 1e-4 ... 10
MANIFEST = "bench.json"
FSTAR_FILE = "fstar.json"


@dataclass
class Spec:
    """An optimizer to run: its name and fixed parameters."""

    name: str
    params: dict = field(default_factory=dict)

    @property
    def searches_step(self) -> bool:
        return self.name in STEP_SEARCH and "eta" not in self.params


@dataclass
class RunResult:
    name: str
    params: dict
    trace: str  # file name inside the output directory
    final_objective: float  # inf when the run diverged or failed
    effective_passes: float
    iterations: int
    status: str
    seconds: float
    group: str = ""
    role: str = "only"  # only | best | second | tried
    error: str | None = None


def _value(text: str):
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text.strip()


def parse_spec(text: str) -> Spec:
    """``NAME`` or ``NAME:key=value,key=value`` (e.g. ``sg:eta=0.1``, ``sag-nus*``)."""
    name, _, rest = text.partition(":")
    name = name.strip()
    if not name:
        raise CrfkitError(f"optimizer spec {text!r}: expected NAME or NAME:key=value,...")
    params = {}
    for part in filter(None, (p.strip() for p in rest.split(","))):
        k, sep, v = part.partition("=")
        if not sep or not k.strip():
            raise CrfkitError(f"optimizer spec {text!r}: {part!r} is not key=value")
        params[k.strip()] = _value(v)
    return Spec(name, params)


def _fmt(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def trace_stem(name: str, params: dict) -> str:
    """File name (without ``.jsonl``) of a run: ``*`` as ``_star``, parameters after ``__``."""
    stem = name.replace("*", "_star")
    if params:
        stem += "__" + ",".join(f"{k}={_fmt(params[k])}" for k in sorted(params))
    bad = set(stem) & set('/\\\0:<>"|?')
    if bad:
        raise CrfkitError(
            f"run name {stem!r} holds characters a file name cannot: {''.join(sorted(bad))}"
        )
    return stem


def check_specs(specs: Sequence[Spec]) -> None:
    from ..train import ALGORITHMS, BATCH_ALGORITHMS

    if not specs:
        raise CrfkitError("no optimizers to run (give at least one -a NAME)")
    for s in specs:
        if s.name not in ALGORITHMS:
            raise CrfkitError(
                f"optimizer {s.name!r} is not available here; available: {', '.join(ALGORITHMS)}"
            )
        if s.name in BATCH_ALGORITHMS and s.params:
            raise CrfkitError(f"{s.name} takes no parameters (got {', '.join(sorted(s.params))})")


def run_one(
    data,
    spec: Spec,
    *,
    passes: float,
    trace_path,
    l2: float,
    seed: int = 0,
    threads: int | None = None,
    epochs: int | None = None,
    train_scores: bool = False,
) -> RunResult:
    """One run of ``spec`` on ``data`` (a :class:`~crfkit.bench.data.BenchData`)
    until ``passes`` effective passes, the test set scored every epoch/iteration.

    ``epochs``: run exactly that many epochs (iterations of a batch method) instead, whatever the
    effective passes (a stochastic method's step-size calibration counts as oracle calls, so
    ``passes`` epochs would stop an epoch early).  ``train_scores``: also decode the training set
    every epoch/iteration (``train_accuracy``, ``train_f1`` in the trace)."""
    from ..errors import TrainingDiverged
    from ..objective import Regularization
    from ..optim.sag import (
        METHODS as SAG_FAMILY,  # the methods with Algorithm 1's stopping rule (delta)
    )
    from ..optim.sdca import (
        METHODS as DUAL_METHODS,  # the methods stopping on the duality gap (gap_tol)
    )
    from ..train import BATCH_ALGORITHMS, train_corpus

    space, corpus, test = data.encoded()
    stochastic = spec.name not in BATCH_ALGORITHMS

    def stop(rec):
        if epochs is not None:
            return rec["iteration"] >= epochs
        return rec["effective_passes"] >= passes - 1e-9

    budget = int(epochs) if epochs is not None else max(1, math.ceil(passes))
    kw = dict(
        algorithm=spec.name,
        reg=Regularization(l2=float(l2)),
        threads=threads,
        dev=test,
        dev_labels=data.Y_test if data.chunks else None,
        dev_every=1,
        trace=trace_path,
        callback=stop,
        train_scores=bool(train_scores),
    )
    if stochastic:
        # an epoch is at least one effective pass: `passes` epochs is an upper bound; the SAG
        # family's own stopping rule (||d/n + l2 w||_inf < delta) off unless the spec sets it, as
        # the deterministic rules are, so that every run lasts the K passes asked for
        params = dict(spec.params)
        if spec.name in SAG_FAMILY:
            params.setdefault("delta", 0.0)
        if spec.name in DUAL_METHODS:
            params.setdefault(
                "gap_tol", 0.0
            )  # the dual methods' stopping rule (duality gap) off too
        kw.update(max_iterations=budget, params=params, seed=seed)
    else:
        # one evaluation (at least) per iteration; the deterministic stopping rules off
        kw.update(max_iterations=budget + (epochs is None), epsilon=0.0, delta=0.0)
    t0 = time.perf_counter()
    try:
        res = train_corpus(space, corpus, **kw)
    except TrainingDiverged as e:
        # a step size that blows up (crfkit.train's divergence rule): ranked last, the benchmark
        # goes on
        return RunResult(
            name=spec.name,
            params=dict(spec.params),
            trace=Path(trace_path).name,
            final_objective=math.inf,
            effective_passes=float(e.effective_passes),
            iterations=int(e.iteration),
            status="diverged",
            seconds=time.perf_counter() - t0,
        )
    seconds = time.perf_counter() - t0
    f = res.history[-1]["objective"] if res.history else res.objective
    f = float(f) if f is not None and math.isfinite(f) else math.inf
    return RunResult(
        name=spec.name,
        params=dict(spec.params),
        trace=Path(trace_path).name,
        final_objective=f,
        effective_passes=float(res.effective_passes),
        iterations=int(res.iterations),
        status=res.status,
        seconds=seconds,
    )


def rank_group(results: list[RunResult]) -> list[RunResult]:
    """Set the roles of one group's runs: a lone run is ``only``; otherwise the
    lowest final objective is ``best``, the next ``second``, the rest ``tried``
    (failed/diverged runs, objective inf, never best unless all failed).
    Returns the runs best first."""
    order = sorted(results, key=lambda r: (not math.isfinite(r.final_objective), r.final_objective))
    if len(order) == 1:
        order[0].role = "only"
        return order
    for k, r in enumerate(order):
        r.role = "best" if k == 0 else "second" if k == 1 else "tried"
    return order


def _write_json(path: Path, obj) -> None:
    with atomic_file(path, fsync=False) as f:
        f.write((json.dumps(obj, indent=1, allow_nan=False) + "\n").encode("utf-8"))


def _clean(v):
    """inf/NaN as None (JSON has neither)."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_clean(x) for x in v]
    return v


_SETTINGS = ("data", "features", "n_train", "l2", "seed", "epochs", "train_scores")


def _finished_runs(out: Path, manifest: dict) -> dict:
    """{trace file name: RunResult} of the runs ``out/bench.json`` lists as finished (not
    interrupted or failed) whose trace file is there; {} without a bench.json.  A bench.json
    written with other settings is a :class:`CrfkitError` (its runs are not comparable)."""
    p = out / MANIFEST
    if not p.is_file():
        return {}
    try:
        with open(p, encoding="utf-8") as f:
            old = json.load(f)
    except ValueError as e:
        raise CrfkitError(
            f"{p}: not a JSON manifest ({e}); remove it or give another --out"
        ) from None
    if not isinstance(old, dict) or not isinstance(old.get("runs"), list):
        raise CrfkitError(f"{p}: not a bench.json manifest (no 'runs' list)")
    keys = _SETTINGS + (() if "epochs" in manifest else ("passes",))
    diff = [
        k
        for k in keys
        if old.get(k) != manifest.get(k)
        and not (
            isinstance(old.get(k), float)
            and isinstance(manifest.get(k), float)
            and math.isclose(old[k], manifest[k], rel_tol=1e-12)
        )
    ]
    if diff:
        raise CrfkitError(
            f"{p}: its runs were made with other settings ("
            + ", ".join(f"{k} {old.get(k)!r} there, {manifest.get(k)!r} now" for k in diff)
            + "); give another --out to keep both"
        )
    fields = set(RunResult.__dataclass_fields__)
    done = {}
    for e in old["runs"]:
        if (
            not isinstance(e, dict)
            or e.get("status") in ("interrupted", "failed")
            or not e.get("trace")
        ):
            continue
        if not (out / e["trace"]).is_file():
            continue
        e = {k: v for k, v in e.items() if k in fields}
        e["final_objective"] = (
            math.inf if e.get("final_objective") is None else e["final_objective"]
        )
        e["effective_passes"] = (
            math.nan if e.get("effective_passes") is None else e["effective_passes"]
        )
        try:
            done[e["trace"]] = RunResult(**e)
        except TypeError:
            continue
    return done


def _warm_up(data, names: set[str], threads) -> None:
    """Compile (or load from numba's cache) each optimizer's kernels on a few
    sequences, so that no run's wall time holds the compilation."""
    from ..features.encode import build
    from ..train import BATCH_ALGORITHMS, train_corpus

    k = min(20, data.n_train)
    space, corpus = build(data.X_train[:k], data.Y_train[:k])
    for name in sorted(names):
        try:
            train_corpus(
                space,
                corpus,
                algorithm=name,
                max_iterations=1,
                threads=threads,
                **(
                    {}
                    if name in BATCH_ALGORITHMS
                    else {"params": {"eta": 1e-3} if name in STEP_SEARCH else {}}
                ),
            )
        except Exception:  # a warm-up problem shows up (with its message) in the real run
            pass


def run_benchmark(
    data,
    specs: Sequence[Spec],
    *,
    passes: float,
    out,
    l2: float | None = None,
    seed: int = 0,
    etas: Sequence[float] = DEFAULT_ETAS,
    threads: int | None = None,
    fstar: dict | None = None,
    runner: Callable[..., RunResult] = run_one,
    warm_up: bool = True,
    log: Callable[[str], None] | None = None,
    epochs: int | None = None,
    train_scores: bool = False,
    skip_done: bool = False,
) -> dict:
    """Run every spec (step-size search for :data:`STEP_SEARCH` methods without
    ``eta``) for ``passes`` effective passes (or exactly ``epochs`` epochs);
    traces and ``bench.json`` go into ``out``.  ``fstar``: an entry of
    :func:`crfkit.bench.fstar.get_fstar`, copied to ``fstar.json``.  ``runner``
    (default :func:`run_one`) takes ``(data, spec, passes=, trace_path=, l2=,
    seed=, threads=)`` (and ``epochs=``, ``train_scores=`` when those are set).
    ``train_scores``: the traces also hold the training-set scores per epoch.
    ``skip_done``: runs that ``out/bench.json`` already lists as finished (with
    the same data, l2, seed, passes/epochs and train_scores; otherwise a
    :class:`CrfkitError`) and whose trace is there are kept, not run again, so
    that a stopped benchmark can be started again.  Returns the manifest."""
    check_specs(specs)
    if not passes or passes <= 0:
        raise CrfkitError(f"passes must be positive, got {passes}")
    if epochs is not None and int(epochs) < 1:
        raise CrfkitError(f"epochs must be at least 1, got {epochs}")
    if not etas:
        raise CrfkitError("the step-size grid is empty")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    l2 = data.default_l2 if l2 is None else float(l2)
    space, corpus, test = data.encoded()
    manifest = {
        "version": 1,
        "data": data.name,
        "features": data.feature_set,
        "description": data.description,
        "n_train": data.n_train,
        "n_test": len(data.X_test),
        "n_features": int(space.n_features),
        "n_labels": int(space.n_labels),
        "l2": l2,
        "passes": passes,
        "seed": seed,
        "etas": [float(e) for e in etas],
        "fstar": _clean(dict(fstar)) if fstar else None,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "runs": [],
    }
    if epochs is not None:
        manifest["epochs"] = int(epochs)
    if train_scores:
        manifest["train_scores"] = True
    done = _finished_runs(out, manifest) if skip_done else {}
    if fstar:
        _write_json(out / FSTAR_FILE, _clean(dict(fstar)))
    if warm_up:
        _warm_up(data, {s.name for s in specs}, threads)
    extra_kw = {}
    if epochs is not None:
        extra_kw["epochs"] = int(epochs)
    if train_scores:
        extra_kw["train_scores"] = True
    groups: list[list[RunResult]] = []

    def save():
        manifest["runs"] = [_clean(asdict(r)) for g in groups for r in g]
        _write_json(out / MANIFEST, manifest)

    for spec in specs:
        runs = (
            [Spec(spec.name, {**spec.params, "eta": float(e)}) for e in etas]
            if spec.searches_step
            else [spec]
        )
        group_name = trace_stem(spec.name, spec.params)
        group: list[RunResult] = []
        groups.append(group)
        for s in runs:
            stem = trace_stem(s.name, s.params)
            path = out / f"{stem}.jsonl"
            if path.name in done:
                r = done[path.name]
                group.append(r)
                rank_group(group)
                save()
                if log:
                    log(
                        f"{data.name}: {stem} already done ({r.status}, {r.iterations} iterations): kept"
                    )
                continue
            if log:
                log(
                    f"{data.name}: {stem} for "
                    + (f"{epochs} epochs" if epochs is not None else f"{passes:g} passes")
                    + " ..."
                )
            try:
                r = runner(
                    data,
                    s,
                    passes=passes,
                    trace_path=path,
                    l2=l2,
                    seed=seed,
                    threads=threads,
                    **extra_kw,
                )
            except (FloatingPointError, OverflowError, ZeroDivisionError, ValueError) as e:
                if isinstance(e, CrfkitError):
                    raise  # bad data: not a property of the step size
                if isinstance(e, ValueError) and "unexpected keyword" in str(e):
                    raise CrfkitError(
                        f"{stem}: {e}"
                    ) from None  # a parameter the optimizer does not take
                # a step size that blows up: ranked last, reported, the benchmark goes on
                r = RunResult(
                    name=s.name,
                    params=dict(s.params),
                    trace=path.name,
                    final_objective=math.inf,
                    effective_passes=float("nan"),
                    iterations=0,
                    status="failed",
                    seconds=0.0,
                    error=f"{type(e).__name__}: {e}",
                )
            r.group = group_name
            group.append(r)
            if log:
                f = r.final_objective
                log(
                    f"  {r.status}: objective {f:.10g}, {r.effective_passes:.2f} passes, {r.seconds:.2f}s"
                    + (f"  ({r.error})" if r.error else "")
                )
            rank_group(group)
            save()
            if r.status == "interrupted":
                # Ctrl-C / SIGTERM ended this run (train_corpus returned its last weights): stop the
                # benchmark here, its traces and bench.json so far kept
                raise KeyboardInterrupt
        if spec.searches_step and log:
            best = rank_group(group)
            log(
                f"  {group_name}: best eta {best[0].params['eta']:g}"
                + (f", second {best[1].params['eta']:g}" if len(best) > 1 else "")
            )
    manifest["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    save()
    return manifest
