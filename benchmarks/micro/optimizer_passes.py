#!/usr/bin/env python
"""Seconds per pass of every optimizer that runs on the chain oracle, on CoNLL-2000, for one or more
source trees in turns (before / after a kernel change in one run).

CoNLL-2000 train with CRFsuite's chunking attributes (``peers/conll2000_vs_crfsuite.py``
``load()``, observed support, 452,755 features), ``train_corpus`` from w = 0 with each method's
regularisation in CRFsuite's units (the paper benchmarks' settings):

* ``lbfgs``, ``sag-nus*``, ``sdca``, ``l2sgd``, ``ngd``: L2, c2 = 1;
* ``sgd-l1``: L1, c1 = 1 (``papers/conll2000_tsuruoka_table1.py``'s objective);
* ``bcd``: elastic net, c1 = 1, c2 = 1 (``papers/conll2000_bcd.py``).

A fixed number of iterations each (``--iterations``; default lbfgs 11, bcd 2, the others 4: an
iteration is an L-BFGS iteration, an epoch of the stochastic methods, a BCD sweep), threads as
``--threads`` (default 1).  Every worker first trains each method for one iteration on 20
sentences, so the timed runs load no kernel; the trace's ``wall_s`` is compile-free
(``work_clock``) and the per-pass monitoring the stochastic methods make (``monitor_s``, a full
objective evaluation after each epoch) is taken out.  The first iteration (setup: plans, the
sampling of l2sgd's / ngd's step, sdca's first pass) is left out too: from the first trace record
to the last,

* seconds per iteration = delta(wall_s - monitor_s) / delta(iteration);
* seconds per effective pass = delta(wall_s - monitor_s) / delta(effective_passes) (one pass = n
  per-example oracle calls or one full evaluation; BCD counts its block updates as passes, several
  hundred per sweep, so its figure per sweep is the one to read);
* CPU seconds per iteration: the process's CPU time (``time.process_time`` in the training
  callback, after each trace record) over the same records, times the share of their wall time
  that was not monitoring (the monitoring taken to have had the same share of the core as the
  rest; exact for lbfgs, which does not monitor): at one thread steadier than the wall clock on a
  shared machine, whose other jobs take turns on the core.

``--src PATH`` (repeatable) runs each tree in its own subprocess (``PYTHONPATH=PATH``), trees in
turns over ``--reps`` repetitions (default 3); the table gives the median and range per tree, and
the objective each run ends on (the trees of the same code end on the same bits).  Recorded in
``benchmarks/results/optimizer_passes.jsonl`` (``--no-record`` to skip).  A run with the defaults
and two trees took 11 minutes on the 2-core machine under a load of 3.4-5.9 (6 workers of 78-130 s:
about 10-15 s to encode and load the kernels, 16-30 s of BCD, 40-60 s for the others); less on a
quiet machine.

Usage:  python benchmarks/micro/optimizer_passes.py [--src /work/wt/base/src --src src] [--reps 3]
        [--iterations lbfgs=11,bcd=2] [--algorithms lbfgs,sag-nus*,...] [--threads 1] [--data-dir DIR]
        [--no-record] [--results FILE.jsonl]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
ROOT = os.path.dirname(BENCH)
sys.path.insert(0, HERE)
import roofline  # noqa: E402  (the shared table helpers: schedule, summary, markdown)

#: name -> (regularisation in CRFsuite's units, default iterations)
ALGORITHMS = {
    "lbfgs": ({"c2": 1.0}, 11),
    "sag-nus*": ({"c2": 1.0}, 4),
    "sdca": ({"c2": 1.0}, 4),
    "l2sgd": ({"c2": 1.0}, 4),
    "ngd": ({"c2": 1.0}, 4),
    "sgd-l1": ({"c1": 1.0}, 4),
    "bcd": ({"c1": 1.0, "c2": 1.0}, 2),
}
SECTION = roofline.SECTION


def pass_times(history: list[dict], cpu: list[float] | None = None) -> dict:
    """Seconds per iteration and per effective pass of a trace (``iteration``, ``effective_passes``,
    ``wall_s`` and, where the method monitors, the cumulative ``monitor_s``), from its first record
    to its last (the first iteration, with the run's setup, is not counted); None where fewer than
    two records or no pass was made between them.  ``cpu``: per record the process's CPU seconds
    (stamped in the training callback): then also ``cpu_per_iteration`` and ``cpu_per_pass``, the
    CPU time between the records times the share of their wall time that was not monitoring (the
    monitoring is taken to have had the same share of the core as the rest)."""
    recs = [r for r in history if "wall_s" in r and "effective_passes" in r]
    out = {"per_iteration": None, "per_pass": None, "iterations": 0, "passes": 0.0}
    if cpu is not None:
        out.update(cpu_per_iteration=None, cpu_per_pass=None)
    if len(recs) < 2:
        return out
    a, b = recs[0], recs[-1]

    def mon(r):
        return float(r.get("monitor_s", 0.0))

    dt = float(b["wall_s"]) - float(a["wall_s"]) - (mon(b) - mon(a))
    di = int(b["iteration"]) - int(a["iteration"])
    dp = float(b["effective_passes"]) - float(a["effective_passes"])
    out.update(
        per_iteration=dt / di if di > 0 else None,
        per_pass=dt / dp if dp > 0 else None,
        iterations=di,
        passes=dp,
    )
    if cpu is not None and len(cpu) == len(history):
        at = {id(r): c for r, c in zip(history, cpu)}
        dw = float(b["wall_s"]) - float(a["wall_s"])
        dc = (at[id(b)] - at[id(a)]) * (dt / dw if dw > 0 else 1.0)
        out.update(
            cpu_per_iteration=dc / di if di > 0 else None,
            cpu_per_pass=dc / dp if dp > 0 else None,
        )
    return out


def parse_iterations(text: str | None) -> dict:
    """``"lbfgs=11,bcd=2"`` -> {"lbfgs": 11, "bcd": 2} (names checked against the list)."""
    out = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        name, _, k = part.partition("=")
        name = name.strip()
        if name not in ALGORITHMS:
            raise ValueError(f"unknown algorithm {name!r} in --iterations")
        if not k.strip().isdigit() or int(k) < 2:
            raise ValueError(f"--iterations {name}={k}: a whole number >= 2 (the first is setup)")
        out[name] = int(k)
    return out


# --------------------------------------------------------------------------- worker


def worker(spec: dict) -> dict:
    """One tree's runs (in a subprocess with that tree on PYTHONPATH)."""
    import crfkit
    from crfkit.features.encode import build
    from crfkit.objective import regularization
    from crfkit.train import train_corpus

    sys.path.insert(0, os.path.join(BENCH, "peers"))
    import conll2000_vs_crfsuite as base

    res = {
        "crfkit": os.path.dirname(os.path.abspath(crfkit.__file__)),
        "load_before": os.getloadavg()[0],
        "runs": {},
    }
    t = time.perf_counter()
    X, Y = base.load(spec["data_dir"], "train")
    wx, wy = build(X[:20], Y[:20])
    for name in spec["algorithms"]:
        r, _ = ALGORITHMS[name]
        train_corpus(
            wx,
            wy,
            algorithm=name,
            reg=regularization(20, **r),
            max_iterations=1,
            threads=spec["threads"],
        )
    space, corpus = build(X, Y)
    del X, Y
    res["setup_s"] = time.perf_counter() - t
    n = corpus.n_sequences
    for name in spec["algorithms"]:
        r, _ = ALGORITHMS[name]
        stamps: list[float] = []
        t = time.perf_counter()
        out = train_corpus(
            space,
            corpus,
            algorithm=name,
            reg=regularization(n, **r),
            max_iterations=spec["iterations"][name],
            threads=spec["threads"],
            callback=lambda rec, stamps=stamps: stamps.append(time.process_time()),
        )
        res["runs"][name] = dict(
            pass_times(out.history, stamps),
            total_s=time.perf_counter() - t,
            objective=float(out.objective_crfsuite),
            status=out.status,
            trace=[
                {
                    k: h[k]
                    for k in ("iteration", "effective_passes", "wall_s", "monitor_s")
                    if k in h
                }
                for h in out.history
            ],
        )
    res["load_after"] = os.getloadavg()[0]
    return res


# --------------------------------------------------------------------------- driver


def run_worker(src: str, spec: dict, tmp: str, tag: str) -> dict:
    out = os.path.join(tmp, f"{tag}.json")
    env = dict(
        os.environ,
        PYTHONPATH=os.path.abspath(src),
        NUMBA_NUM_THREADS=str(max(1, spec["threads"])),
        CRFKIT_QUIET_COMPILE="1",
    )
    p = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(spec), "--out", out],
        env=env,
        capture_output=True,
        text=True,
    )
    if p.returncode != 0:
        raise SystemExit(f"worker for {src} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    with open(out) as f:
        return json.load(f)


def table(runs: dict, labels: list[str], algorithms: list[str], iterations: dict) -> list[list]:
    """Rows (algorithm, measure, one cell per tree) of the printed and recorded table."""
    S = roofline.summary
    F = roofline.fmt_summary
    rows = []
    for name in algorithms:
        r, _ = ALGORITHMS[name]
        reg = ", ".join(f"{k}={v:g}" for k, v in r.items())
        cell = {lab: [x["runs"][name] for x in runs[lab]] for lab in labels}
        unit = "sweep" if name == "bcd" else "iteration"
        first = cell[labels[0]][0]
        rows.append(
            [name, "setting"]
            + [
                f"{reg}; {iterations[name]} iterations, the last {first['iterations']} timed "
                f"({first['passes']:.4g} effective passes)"
            ]
            * len(labels)
        )
        rows.append(
            [name, f"s per {unit}"]
            + [F(S([x["per_iteration"] for x in cell[lab]])) for lab in labels]
        )
        rows.append(
            [name, "s per effective pass"]
            + [F(S([x["per_pass"] for x in cell[lab]])) for lab in labels]
        )
        rows.append(
            [name, f"CPU s per {unit}"]
            + [F(S([x.get("cpu_per_iteration") for x in cell[lab]])) for lab in labels]
        )
        rows.append(
            [name, "objective at the end (CRFsuite units)"]
            + [", ".join(sorted({f"{x['objective']:.10g}" for x in cell[lab]})) for lab in labels]
        )
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--src", action="append", default=None, help="a source tree, repeatable")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--algorithms", default=",".join(ALGORITHMS))
    ap.add_argument("--iterations", default="", help="e.g. lbfgs=11,bcd=2 (others: defaults)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--no-record", action="store_true")
    ap.add_argument("--results", default=None, help="record into this .jsonl file")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        res = worker(json.loads(args.worker))
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(res, f)
        os.replace(tmp, args.out)
        return 0
    algorithms = [a for a in args.algorithms.split(",") if a]
    bad = [a for a in algorithms if a not in ALGORITHMS]
    if bad:
        ap.error(f"unknown algorithm(s) {bad}; expected some of {list(ALGORITHMS)}")
    try:
        its = {a: k for a, (_, k) in ALGORITHMS.items()} | parse_iterations(args.iterations)
    except ValueError as e:
        ap.error(str(e))
    trees = args.src or [os.path.join(ROOT, "src")]
    ddir = (
        args.data_dir or os.environ.get("CRFKIT_DATA") or os.path.join(ROOT, "..", "shared", "data")
    )
    spec = dict(
        algorithms=algorithms,
        iterations=its,
        threads=args.threads,
        data_dir=os.path.abspath(ddir),
    )
    labels = roofline.tree_labels(trees)
    runs: dict = {lab: [] for lab in labels}
    loads = []
    t_all = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="crfkit-passes-") as tmp:
        for r, i in roofline.schedule(len(trees), args.reps):
            src, lab = trees[i], labels[i]
            t = time.perf_counter()
            res = run_worker(src, spec, tmp, f"r{r}t{i}")
            loads += [res["load_before"], res["load_after"]]
            runs[lab].append(res)
            print(
                f"repetition {r + 1}, {lab} ({res['crfkit']}): {time.perf_counter() - t:.0f} s "
                f"(setup {res['setup_s']:.0f} s), load {res['load_before']:.2f} -> "
                f"{res['load_after']:.2f}",
                flush=True,
            )
    columns = ["algorithm", "measure"] + labels
    rows = table(runs, labels, algorithms, its)
    load = (
        f"load average {min(loads):.2f}-{max(loads):.2f} during the workers"
        f" ({time.perf_counter() - t_all:.0f} s in all)"
    )
    print(
        f"\nCoNLL-2000 (CRFsuite's attributes), {args.threads} thread(s); median over {args.reps} "
        f"repetitions (range in brackets), trees in turns; {load}\n"
    )
    print(roofline.markdown(columns, rows))
    if not args.no_record:
        sys.path.insert(0, BENCH)
        import _results

        figures = {
            "section": SECTION,
            "task": f"seconds per pass of the optimizers, CoNLL-2000, {args.threads} thread(s)",
            "columns": columns,
            "rows": rows,
            "trees": [
                {
                    "label": lab,
                    "src": os.path.abspath(t),
                    "commit": _results.git_commit(os.path.dirname(os.path.abspath(t))),
                }
                for lab, t in zip(labels, trees)
            ],
            "iterations": its,
            "runs": {lab: [x["runs"] for x in runs[lab]] for lab in labels},
        }
        notes = (
            f"{load}; {args.reps} repetitions, trees in turns; compile-free trace times, "
            "monitoring and the first iteration left out"
        )
        _results.record(figures, args.results, notes=notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
