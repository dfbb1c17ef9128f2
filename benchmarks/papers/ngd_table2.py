#!/usr/bin/env python
"""Table 2 of Cao (natural-gradient CRF training) on CoNLL-2000: test token accuracy and conlleval
chunk F1 of SGD (l2sgd), PA, L-BFGS and the five ngd updates, with the small feature set (CRFsuite's
chunking attributes, observed attribute x label pairs and label pairs) and the large one (the same
attributes x every label, every label pair), the stochastic methods over several shuffled runs (mean
and sd).

Every run (feature set, method, seed) writes its own JSON under ``--out`` (temp file + rename) with
the test scores after every epoch (test side only: the paper's Figures 3/4 come from
``--figure-runs``) and at the end; a run whose file exists is skipped, so the script can be stopped
and started again.  c2 = 1 (CRFsuite's default) for all; l2sgd / ngd: CRFsuite's calibration and
period/delta rule, at most ``--epochs`` epochs, the best epoch's weights; PA: CRFsuite's defaults
(PA-I, C = 1, averaging), ``--epochs`` epochs; L-BFGS: crfkit's lbfgs with CRFsuite's stopping rule
(delta 1e-5 over 10 iterations, epsilon 1e-5).  Runs go seed-major (seed 0 of every method on both
sets first), so an interrupted table has every row (L-BFGS, deterministic, runs once at the end).

Usage:  python benchmarks/papers/ngd_table2.py [--out /tmp/ngd/table2] [--seeds 5] [--epochs 30] [--sets small,large]
        python benchmarks/papers/ngd_table2.py --report [--out ...]
        python benchmarks/papers/ngd_table2.py --figure-runs DIR [--seeds 5] [--epochs 50] [--sets small,large]
                                        [--figures PREFIX] [--export FILE.jsonl] [--draw-only]
                                        [--restore FILE.jsonl]

``--figure-runs DIR``: the runs of the paper's Figures 3/4 through ``crfkit bench`` (the same as
``crfkit bench run --data conll2000 [--support all] --l2 2/n --epochs 50 --train-scores --seed K
--skip-done --no-fstar --threads 1 -a l2sgd:period=0 -a pa -a ngd:update=U,period=0 ...`` for each
seed K): one bench directory per feature set and seed, ``DIR/<set>/seed<K>``, with one trace per
method holding the training and test token accuracy and chunk F1 after every epoch; SGD and the ngd
updates with CRFsuite's period/delta rule off (``period=0``) so that every method runs the 50 epochs
the paper plots; runs already finished are kept.  The small set's seeds go first, then the large
set's.  L-BFGS (deterministic: one run, its iterations as the epochs, as the paper plots it) goes
into ``DIR/<set>/lbfgs`` after the seeds (the same as ``crfkit bench run ... --epochs 50
--train-scores --seed 0 -a lbfgs --out DIR/<set>/lbfgs``).  Draw the figures with ``crfkit bench
scores DIR/<set>/seed* DIR/<set>/lbfgs --baseline l2sgd ...`` (see the README).

``--restore FILE.jsonl`` (with ``--figure-runs DIR``) writes the seed directories back from an
``--export`` file (the per-epoch objective and scores of every run, each a trace with its
bench.json; ``effective_passes`` is set to the epoch, which the export does not keep) where
``DIR/<set>/seed<K>`` has no bench.json yet, so that a method added later (L-BFGS) is drawn next to
the recorded runs without running them again.

``--figures PREFIX`` (with ``--figure-runs DIR``) draws them with crfkit bench
(``crfkit.bench.scores``, the code of ``crfkit bench scores``) to
PREFIX3_small.png / PREFIX4_large.png, from the seeds whose every method finished, and prints, for
each method, in how many of the first 50 epochs its mean test score (token accuracy, then chunk F1)
is at or above SGD's (the paper: "most of the time"); ``--export FILE.jsonl`` writes one line per
figure run with its per-epoch scores.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "peers")
)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from conll2000_vs_crfsuite import data_dir, load  # noqa: E402

import _results  # benchmarks/_results.py: the results schema (standard library only)

METHODS = [
    ("SGD", "l2sgd", {}),
    ("PA", "pa", {}),
    ("L-BFGS", "lbfgs", {}),
    ("U1*.G1", "ngd", {"update": "u1g1"}),
    ("U2*.G1 arctan.1", "ngd", {"update": "u2g1"}),
    ("U2*.G1 arctan.2", "ngd", {"update": "u2g1b"}),
    ("U2*.G2 erf", "ngd", {"update": "u2g2"}),
    ("U2*.G3 gd", "ngd", {"update": "u2g3"}),
]


def scores(space, w, Xt, Yt):
    from crfkit.metrics import conlleval
    from crfkit.model import CRFModel

    rep = conlleval(Yt, CRFModel(space, w).tag(Xt))
    return rep.accuracy, rep.f1


def run_one(path, fs, label, alg, params, seed, data, epochs):
    from crfkit.objective import Objective, regularization
    from crfkit.train import train_corpus

    space, corpus, Xt, Yt = data
    curve = []
    t0 = time.perf_counter()

    def cb(rec):
        if alg != "lbfgs":
            acc, f1 = scores(space, rec_x[0], Xt, Yt) if rec_x else (float("nan"), float("nan"))
            curve.append(
                {
                    "epoch": rec["iteration"],
                    "objective": rec["objective"],
                    "test_accuracy": acc,
                    "test_f1": f1,
                    "wall_s": rec["wall_s"],
                }
            )

    rec_x = []

    def keep_x(info):
        rec_x[:] = [info["x"]]

    reg = regularization(corpus.n_sequences, c2=1.0)
    if alg == "lbfgs":
        res = train_corpus(
            space,
            corpus,
            algorithm="lbfgs",
            reg=reg,
            delta=1e-5,
            period=10,
            epsilon=1e-5,
            max_iterations=1000,
            threads=1,
        )
    else:
        from crfkit.optim.stochastic import resolve

        obj = Objective(corpus, space, reg, threads=1)
        fn = resolve(alg)
        p = dict(params)
        if alg in ("l2sgd", "ngd"):
            p.setdefault("period", 10)

        def callback(info):
            keep_x(info)
            cb(
                {
                    "iteration": info["iteration"],
                    "objective": info["f"],
                    "wall_s": time.perf_counter() - t0,
                }
            )

        res = fn(obj, None, reg=reg, max_iterations=epochs, seed=seed, callback=callback, **p)
    w = res.model.weights if alg == "lbfgs" else res.x
    acc, f1 = scores(space, w, Xt, Yt)
    out = {
        "set": fs,
        "method": label,
        "algorithm": alg,
        "params": params,
        "seed": seed,
        "iterations": res.iterations,
        "status": res.status,
        "message": res.message[:400],
        "test_accuracy": acc,
        "test_f1": f1,
        "objective": float(res.objective if alg == "lbfgs" else res.f),
        "seconds": time.perf_counter() - t0,
        "curve": curve,
        "n_features": space.n_features,
    }
    with open(path + ".tmp", "w") as f:
        json.dump(out, f)
    os.replace(path + ".tmp", path)
    print(
        f"{fs:5s} {label:18s} seed {seed}: acc {acc:.2f} F1 {f1:.2f} after {res.iterations} "
        f"({res.status}), {out['seconds']:.0f}s",
        flush=True,
    )


def load_runs(out_dir) -> list[dict]:
    """Every run's JSON under ``out_dir``, in file-name order."""
    runs = []
    for name in sorted(os.listdir(out_dir)):
        if name.endswith(".json"):
            with open(os.path.join(out_dir, name)) as f:
                runs.append(json.load(f))
    return runs


BATCH_SPECS = ["lbfgs"]
FIGURE_SPECS = ["l2sgd:period=0", "pa"] + [
    f"ngd:update={u},period=0" for u in ("u1g1", "u2g1", "u2g1b", "u2g2", "u2g3")
]


def figure_runs(out, sets, seeds, epochs, data_dir=None):
    """The Figures 3/4 runs through crfkit bench's runner (see the module docstring)."""
    from crfkit.bench.data import load as bench_load
    from crfkit.bench.runner import parse_spec, run_benchmark

    specs = [parse_spec(a) for a in FIGURE_SPECS]
    for fs in sets:
        data = bench_load("conll2000", data_dir, support="all" if fs == "large" else "observed")
        space, corpus, _ = data.encoded()
        l2 = 2.0 / data.n_train  # CRFsuite's c2 = 1, as in Table 2
        print(f"{fs}: {space.n_features} features, l2 = 2/{data.n_train}", flush=True)
        for seed in range(seeds):
            run_benchmark(
                data,
                specs,
                passes=float(epochs),
                epochs=epochs,
                out=os.path.join(out, fs, f"seed{seed}"),
                l2=l2,
                seed=seed,
                threads=1,
                train_scores=True,
                skip_done=True,
                warm_up=seed == 0,
                log=lambda m: print(m, flush=True),
            )
        # L-BFGS is deterministic: one run, in a directory of its own
        run_benchmark(
            data,
            [parse_spec(a) for a in BATCH_SPECS],
            passes=float(epochs),
            epochs=epochs,
            out=os.path.join(out, fs, "lbfgs"),
            l2=l2,
            seed=0,
            threads=1,
            train_scores=True,
            skip_done=True,
            warm_up=False,
            log=lambda m: print(m, flush=True),
        )


def restore(out, path, sets):
    """The seed directories of the figure runs written back from an ``--export`` file (see the
    module docstring); directories that already have a bench.json are left alone."""
    runs = {}
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            if line.strip():
                r = _results.figures(
                    json.loads(line)
                )  # a flat line, or a benchmarks/results/ record
                if r["set"] in sets:
                    runs.setdefault((r["set"], r.get("dir", f"seed{r['seed']}")), []).append(r)
    for (fs, sub), rs in sorted(runs.items()):
        seed = int(rs[0]["seed"])
        d = os.path.join(out, fs, sub)
        if os.path.isfile(os.path.join(d, "bench.json")):
            print(f"{d}: has a bench.json, left alone")
            continue
        os.makedirs(d, exist_ok=True)
        entries = []
        for r in rs:
            trace = os.path.join(d, r["run"] + ".jsonl")
            with open(trace + ".tmp", "w") as f:
                for x in r["curve"]:
                    rec = {
                        "iteration": x["epoch"],
                        "effective_passes": float(x["epoch"]),
                        "objective": x["objective"],
                        "train_accuracy": x["train_accuracy"],
                        "train_f1": x["train_f1"],
                        "dev_accuracy": x["test_accuracy"],
                        "dev_f1": x["test_f1"],
                        "wall_s": x["wall_s"],
                    }
                    f.write(json.dumps(rec) + "\n")
            os.replace(trace + ".tmp", trace)
            last = r["curve"][-1]["objective"] if r["curve"] else None
            entries.append(
                {
                    "trace": r["run"] + ".jsonl",
                    "group": r["run"],
                    "status": r["status"],
                    "iterations": r["iterations"],
                    "seconds": r["seconds"],
                    "final_objective": last,
                }
            )
        man = {
            "version": 1,
            "data": "conll2000",
            "features": fs,
            "seed": seed,
            "l2": rs[0]["l2"],
            "n_features": rs[0]["n_features"],
            "epochs": rs[0]["epochs"],
            "train_scores": True,
            "restored_from": os.path.basename(path),
            "runs": entries,
        }
        with open(os.path.join(d, "bench.json.tmp"), "w") as f:
            json.dump(man, f, indent=1)
        os.replace(os.path.join(d, "bench.json.tmp"), os.path.join(d, "bench.json"))
        print(f"{d}: {len(entries)} runs restored from {path}")


def report(runs):
    rows = {}
    for r in runs:
        rows.setdefault((r["method"], r["set"]), []).append(r)
    print(
        f"{'algorithm':18s} | {'small: F1 (sd)  acc (sd)  runs  epochs':44s} | {'large: F1 (sd)  acc (sd)  runs  epochs':44s}"
    )
    for label, _, _ in METHODS:
        cells = []
        for fs in ("small", "large"):
            rs = rows.get((label, fs), [])
            if not rs:
                cells.append("-")
                continue
            f1 = [r["test_f1"] for r in rs]
            acc = [r["test_accuracy"] for r in rs]
            sd = f" ±{statistics.stdev(f1):.2f}" if len(f1) > 1 else ""
            sda = f" ±{statistics.stdev(acc):.2f}" if len(acc) > 1 else ""
            ep = "/".join(str(r["iterations"]) for r in rs)
            cells.append(
                f"{statistics.mean(f1):.2f}{sd}  {statistics.mean(acc):.2f}{sda}  {len(rs)}  {ep}"
            )
        print(f"{label:18s} | {cells[0]:44s} | {cells[1]:44s}")


PAPER_LABELS = {
    "l2sgd__period=0": "SGD (l2sgd)",
    "pa": "PA",
    "ngd__period=0,update=u1g1": "U1*.G1 (u1g1)",
    "ngd__period=0,update=u2g1": "U2*.G1 arctan.1 (u2g1)",
    "ngd__period=0,update=u2g1b": "U2*.G1 arctan.2 (u2g1b)",
    "ngd__period=0,update=u2g2": "U2*.G2 erf (u2g2)",
    "ngd__period=0,update=u2g3": "U2*.G3 gd (u2g3)",
    "lbfgs": "L-BFGS",
}


def seed_dirs(out, fs):
    d = os.path.join(out, fs)
    return (
        sorted(os.path.join(d, x) for x in os.listdir(d) if x.startswith("seed"))
        if os.path.isdir(d)
        else []
    )


def draw_figures(out, prefix, sets, epochs):
    """Figures 3/4 by crfkit bench (``crfkit bench scores``): PREFIX3_small.png and
    PREFIX4_large.png, both metrics' counts printed and written next to them (.json: accuracy,
    _f1.json: chunk F1)."""
    from crfkit.bench.scores import (
        format_score_summary,
        plot_scores,
        score_summary,
        write_summary_json,
    )

    fig_no = {"small": 3, "large": 4}
    for fs in sets:
        dirs = seed_dirs(out, fs)
        if not dirs:
            print(f"{fs}: no figure runs under {out}/{fs}")
            continue
        # the seeds whose every method finished: each mean over the same seeds
        from crfkit.bench.runner import parse_spec, trace_stem
        from crfkit.bench.scores import finished_traces

        want = {trace_stem(x.name, x.params) + ".jsonl" for x in map(parse_spec, FIGURE_SPECS)}
        partial = [d for d in dirs if not want <= (finished_traces(d) or set())]
        dirs = [d for d in dirs if d not in partial]
        if partial:
            print(f"{fs}: left out, not every method finished there: {', '.join(partial)}")
        if not dirs:
            print(f"{fs}: no seed with every figure run finished under {out}/{fs}")
            continue
        n_seeds = len(dirs)
        # L-BFGS (one deterministic run) from its own directory, when it finished there
        lb = os.path.join(out, fs, "lbfgs")
        if os.path.isdir(lb) and "lbfgs.jsonl" in (finished_traces(lb) or set()):
            dirs = dirs + [lb]
        else:
            print(f"{fs}: no finished L-BFGS run in {lb}: drawn without it")
        have = {f[:-6] for d in dirs for f in os.listdir(d) if f.endswith(".jsonl")}
        labels = {k: v for k, v in PAPER_LABELS.items() if k in have}
        stem = f"{prefix}{fig_no.get(fs, '')}_{fs}"
        path, s = plot_scores(
            dirs,
            f"{stem}.png",
            metric="accuracy",
            epochs=epochs,
            baseline="l2sgd",
            labels=labels,
            finished_only=True,
            title=f"Cao's Figure {fig_no.get(fs, '')}: CoNLL-2000, {fs} feature set, token "
            f"accuracy per epoch ({n_seeds} seed{'s' if n_seeds != 1 else ''}; L-BFGS: one run)",
        )
        write_summary_json(s, f"{stem}.json")
        f1 = score_summary(
            dirs, metric="f1", epochs=epochs, baseline="l2sgd", labels=labels, finished_only=True
        )
        write_summary_json(f1, f"{stem}_f1.json")
        print(
            f"{fs}: {n_seeds} seeds (L-BFGS: one run); epochs (of the first {epochs}) in which the mean test score is at or "
            f"above SGD's\n\ntoken accuracy:\n{format_score_summary(s)}\n\nchunk F1:\n{format_score_summary(f1)}"
            f"\nwrote {path}\n",
            flush=True,
        )


def export(out, path, sets):
    """One JSON line per figure run (set, method, seed, status, per-epoch scores) into ``path``."""
    from crfkit.bench.plots import load_runs

    lines = []
    for fs in sets:
        for d in seed_dirs(out, fs) + [os.path.join(out, fs, "lbfgs")]:
            if not os.path.isfile(os.path.join(d, "bench.json")):
                continue
            with open(os.path.join(d, "bench.json")) as f:
                man = json.load(f)
            info = {
                r["trace"]: r
                for r in man["runs"]
                if r.get("status") not in ("interrupted", "failed")
            }
            for r in load_runs(d):
                if r.stem + ".jsonl" not in info:
                    continue  # still running, or stopped: not a finished run
                m = info[r.stem + ".jsonl"]
                curve = [
                    {
                        "epoch": x["iteration"],
                        "objective": x.get("objective"),
                        "train_accuracy": x.get("train_accuracy"),
                        "train_f1": x.get("train_f1"),
                        "test_accuracy": x.get("dev_accuracy"),
                        "test_f1": x.get("dev_f1"),
                        "wall_s": x.get("wall_s"),
                    }
                    for x in r.records
                ]
                lines.append(
                    {
                        "set": fs,
                        "dir": os.path.basename(d),
                        "method": PAPER_LABELS.get(r.stem, r.stem),
                        "run": r.stem,
                        "seed": man["seed"],
                        "l2": man["l2"],
                        "n_features": man["n_features"],
                        "epochs": man.get("epochs"),
                        "status": m.get("status"),
                        "iterations": m.get("iterations"),
                        "seconds": m.get("seconds"),
                        "curve": curve,
                    }
                )
    with open(path + ".tmp", "w") as f:
        for x in lines:  # one benchmarks/results/ record per run
            f.write(json.dumps(_results.make(x), separators=(",", ":")) + "\n")
    os.replace(path + ".tmp", path)
    print(f"wrote {len(lines)} runs to {path}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="/tmp/ngd/table2")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--sets", default="small,large")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--report", action="store_true")
    ap.add_argument(
        "--figure-runs",
        metavar="DIR",
        help="run the Figures 3/4 runs through crfkit bench into DIR/<set>/seed<K> (finished runs kept)",
    )
    ap.add_argument(
        "--figures",
        metavar="PREFIX",
        help="with --figure-runs DIR: draw Figures 3/4 from DIR with crfkit bench to PREFIX3_small.png, "
        "PREFIX4_large.png (and the counts to .json / _f1.json next to them)",
    )
    ap.add_argument(
        "--draw-only",
        action="store_true",
        help="with --figure-runs DIR: run nothing, only draw/export",
    )
    ap.add_argument(
        "--export",
        metavar="FILE.jsonl",
        help="with --figure-runs DIR: one JSON line per figure run",
    )
    ap.add_argument(
        "--restore",
        metavar="FILE.jsonl",
        help="with --figure-runs DIR: write the seed directories back from an --export file first",
    )
    args = ap.parse_args(argv)
    if args.figure_runs:
        sets = args.sets.split(",")
        if args.restore:
            restore(args.figure_runs, args.restore, sets)
        if not args.draw_only:
            from crfkit.parallel import set_threads

            set_threads(1)
            figure_runs(args.figure_runs, sets, args.seeds, args.epochs, args.data_dir)
        if args.figures:
            draw_figures(args.figure_runs, args.figures, sets, args.epochs)
        if args.export:
            export(args.figure_runs, args.export, sets)
        return 0
    if args.figures or args.export or args.draw_only or args.restore:
        ap.error(
            "--figures, --export, --restore and --draw-only go with --figure-runs DIR (the figures are drawn from "
            "crfkit bench traces with training scores, not from the Table 2 runs)"
        )
    os.makedirs(args.out, exist_ok=True)
    if args.report:
        runs = load_runs(args.out)
        report(runs)
        return 0
    from crfkit.features.encode import build
    from crfkit.parallel import set_threads

    set_threads(1)
    ddir = data_dir(args.data_dir)
    X, Y = load(ddir, "train")
    Xt, Yt = load(ddir, "test")
    data = {}
    for fs in args.sets.split(","):
        space, corpus = build(X, Y, support="all" if fs == "large" else "observed")
        print(
            f"{fs}: {space.n_features} features ({space.n_state} state, {space.n_trans} transition), "
            f"{space.n_attributes} attributes x {space.n_labels} labels",
            flush=True,
        )
        data[fs] = (space, corpus, Xt, Yt)
    jobs = [
        (seed, fs, m)
        for seed in range(args.seeds)
        for fs in data
        for m in METHODS
        if m[1] != "lbfgs"
    ]
    jobs += [
        (0, fs, m) for fs in data for m in METHODS if m[1] == "lbfgs"
    ]  # deterministic: once, last
    for seed, fs, (label, alg, params) in jobs:
        path = os.path.join(args.out, f"{fs}_{alg}_{params.get('update', '')}_{seed}.json")
        if not os.path.exists(path):
            run_one(path, fs, label, alg, params, seed, data[fs], args.epochs)
    report(load_runs(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
