#!/usr/bin/env python
"""Training with numpy's BLAS on one thread (crfkit's default inside ``train_corpus``) against BLAS
left on all cores, in one process, on CoNLL-2000 (CRFsuite's chunking attributes).

Why: the optimizers hand BLAS vector dot products and norms of the parameter size (L-BFGS's line
search, the objective's ||w||^2, the stochastic methods' per-epoch loss).  OpenBLAS splits such a
dot over its threads, and its idle threads then busy-wait (about 0.1 s) for the next call, so a
spinning thread competes with numba's threads in the evaluation that follows.
``crfkit.parallel.blas_threads`` (threadpoolctl) keeps BLAS on one thread while crfkit trains;
``train_corpus.__wrapped__`` is the same function without that limit.

Each configuration runs ``--rounds`` times, alternating limited / unlimited, L-BFGS for
``--iterations`` iterations (delta = epsilon = 0, so every run does the same iterations and lands on
the same objective, checked) at each ``--threads`` setting, and l2sgd for ``--epochs`` epochs.
Printed per configuration: the minimum over rounds of the optimizer's wall seconds and of the
process CPU seconds.

Usage:  python benchmarks/micro/blas_spin.py [--data-dir DIR] [--threads 1,2] [--iterations 30] [--epochs 5]
                                       [--rounds 3] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "peers")
)
from conll2000_vs_crfsuite import data_dir, load  # noqa: E402  (the same attribute generator)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", default=None)
    ap.add_argument(
        "--results",
        metavar="FILE.jsonl",
        default=None,
        help="also append the figures as one record (benchmarks/_results.py: command, date, "
        "commit, machine, figures) to FILE.jsonl, e.g. benchmarks/results/NAME.jsonl",
    )
    a = ap.parse_args(argv)

    import threadpoolctl

    from crfkit.features.encode import build
    from crfkit.train import train_corpus

    X, Y = load(data_dir(a.data_dir), "train")
    space, corpus = build(X, Y, name="<conll2000 train>")
    blas = [
        (i["internal_api"], i["num_threads"])
        for i in threadpoolctl.threadpool_info()
        if i["user_api"] == "blas"
    ]
    print(
        f"CoNLL-2000 train: {corpus.n_sequences} sequences, {space.n_features} features; BLAS {blas}; "
        f"load {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    limited, unlimited = train_corpus, train_corpus.__wrapped__
    configs = [
        ("lbfgs", int(t), dict(max_iterations=a.iterations, delta=0.0, epsilon=0.0))
        for t in a.threads.split(",")
    ]
    configs.append(
        ("l2sgd", 1, dict(max_iterations=a.epochs, params={"eta0": 0.1, "monitor": False}))
    )
    for alg, t, kw in configs:  # warm the kernels (numba's cache) once per config
        limited(space, corpus, algorithm=alg, threads=t, **{**kw, "max_iterations": 1})
    rows = []
    for alg, t, kw in configs:
        best = {}
        objectives = set()
        for r in range(a.rounds):
            for name, fn in (("blas 1 thread", limited), ("blas unlimited", unlimited)):
                c0 = time.process_time()
                res = fn(space, corpus, algorithm=alg, threads=t, **kw)
                cpu = time.process_time() - c0
                objectives.add(round(res.objective, 10))
                w, c = best.get(name, (float("inf"), float("inf")))
                best[name] = (min(w, res.seconds), min(c, cpu))
        (w1, c1), (w0, c0_) = best["blas 1 thread"], best["blas unlimited"]
        row = dict(
            algorithm=alg,
            threads=t,
            limited_s=w1,
            unlimited_s=w0,
            limited_cpu=c1,
            unlimited_cpu=c0_,
            ratio=w1 / w0,
            same_objective=len(objectives) == 1,
            load=os.getloadavg()[0],
            **{k: v for k, v in kw.items() if k != "params"},
        )
        rows.append(row)
        print(
            f"{alg:6s} threads {t}: optimizer {w1:6.2f} s (BLAS 1 thread) vs {w0:6.2f} s (unlimited) = "
            f"{w1 / w0:.3f}x; CPU {c1:6.2f} vs {c0_:6.2f} s; same objective: {len(objectives) == 1}",
            flush=True,
        )
    if a.json:
        tmp = a.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(rows, f, indent=1)
        os.replace(tmp, a.json)
    if a.results:  # one record in the benchmarks/results/ schema
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        import _results

        _results.record(rows, a.results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
