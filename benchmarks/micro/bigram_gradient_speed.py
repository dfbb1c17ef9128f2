#!/usr/bin/env python
"""The label-pair x observation gradient, this tree against a baseline tree, in one run (NETtalk).

Lavergne et al.'s feature sets put a label-pair x observation feature on every centred letter
window: at ``nettalk:3-grm`` in Wapiti's space (``--support all``: every label pair with every
window value, 13.4M features) the full-batch gradient is where OWL-QN spends its time.  For each
tree (this one and ``--baseline-src``, e.g. a ``git worktree`` of an earlier revision) and each
weight vector, one subprocess encodes the NETtalk training folds (0-7) with the feature set, builds
the objective, makes one warm-up evaluation, then times ``--evals`` evaluations (CPU and wall
seconds, the minimum; numba threads as ``--threads``).  The weight vectors are those an L1 run
passes through: all zero (the first evaluation), a share ``p`` of the features non-zero at random
(``--densities``; OWL-QN on 3-grm has 0.4% non-zero after 15 iterations) and dense.  The trees take
turns, so that the load of a shared machine falls on both; the ratio (this / baseline) is printed
per weight vector, with the objective values of both (they must agree to rounding).

Usage:  python benchmarks/micro/bigram_gradient_speed.py --baseline-src DIR [--features nettalk:3-grm]
        [--densities 0,0.004,0.02,1] [--evals 3] [--threads 1] [--rounds 2] [--weights W.npy]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))  # the repository: this file is in benchmarks/micro/

WORKER = r"""
import json, os, sys, time
import numpy as np
feat, densities, evals, out = sys.argv[1], [float(x) for x in sys.argv[2].split(",")], int(sys.argv[3]), sys.argv[4]
wfile = sys.argv[5] if len(sys.argv) > 5 else ""
from crfkit.datasets.nettalk import nettalk_split
from crfkit.pipeline import attributes_of, bigram_attributes_of
from crfkit.features.windows import preset_templates
from crfkit.features.encode import build
from crfkit.objective import Objective, regularization
train, _, _ = nettalk_split()
tpl = preset_templates(feat)
X, B, Y = attributes_of(train, tpl), bigram_attributes_of(train, tpl), [s.labels for s in train]
space, corpus = build(X, Y, support="all", B=B, transitions=None if tpl.bigram else "none")
obj = Objective(corpus, space, regularization(len(Y), rho1=0.5, rho2=1e-5), threads=int(os.environ["NT"]))
rows = []
for p in densities + ([-1.0] if wfile else []):
    rng = np.random.default_rng(0)
    w = rng.normal(0.0, 0.3, space.n_features)
    if p < 0:
        w = np.load(wfile)                      # weights of a real run (--weights)
    elif p < 1:
        w *= rng.random(space.n_features) < p
    obj.value_and_grad(w)                       # warm-up (first use: kernels, plan)
    best_cpu = best_wall = float("inf")
    for _ in range(evals):
        c0, t0 = time.process_time(), time.perf_counter()
        f, g = obj.value_and_grad(w)
        best_cpu = min(best_cpu, time.process_time() - c0)
        best_wall = min(best_wall, time.perf_counter() - t0)
    rows.append(dict(density=p, cpu=best_cpu, wall=best_wall, f=float(f), gnorm=float(np.linalg.norm(g))))
with open(out, "w") as fh:
    json.dump(dict(features=int(space.n_features), rows=rows), fh)
"""


def run_tree(src: str, args, out: str) -> dict:
    env = dict(
        os.environ, PYTHONPATH=src, NUMBA_NUM_THREADS=str(args.threads), NT=str(args.threads)
    )
    subprocess.run(
        [sys.executable, "-c", WORKER, args.features, args.densities, str(args.evals), out]
        + ([os.path.abspath(args.weights)] if args.weights else []),
        env=env,
        check=True,
    )
    with open(out) as f:
        return json.load(f)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--baseline-src", required=True, help="the baseline tree's src directory (holding crfkit/)"
    )
    ap.add_argument("--features", default="nettalk:3-grm")
    ap.add_argument("--densities", default="0,0.004,0.02,1")
    ap.add_argument("--evals", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--rounds", type=int, default=2, help="turns of (baseline, this tree); the minimum is kept"
    )
    ap.add_argument(
        "--weights",
        help="also time at these weights (a .npy vector of the feature space, e.g. an "
        "OWL-QN run's after 10 iterations; the row 'weights' of the table)",
    )
    args = ap.parse_args(argv)
    trees = {"baseline": os.path.abspath(args.baseline_src), "this": os.path.join(ROOT, "src")}
    best: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for name, src in trees.items():
                res = run_tree(src, args, os.path.join(tmp, f"{name}{r}.json"))
                print(
                    f"round {r + 1} {name}: "
                    + ", ".join(f"p={x['density']:g} {x['cpu']:.2f}s" for x in res["rows"])
                    + "  (load average "
                    + ", ".join(f"{v:.2f}" for v in os.getloadavg())
                    + ")",
                    flush=True,
                )
                for x in res["rows"]:
                    k = (name, x["density"])
                    if k not in best or x["cpu"] < best[k]["cpu"]:
                        best[k] = x
                best[(name, "features")] = res["features"]
    print(
        f"\n{args.features}, support all: {best[('this', 'features')]:,} features, {args.threads} thread(s), "
        f"min over {args.rounds} rounds x {args.evals} evaluations (CPU seconds per evaluation)\n"
    )
    print("| non-zero share | baseline s | this tree s | ratio | f baseline | f this |")
    print("|---|---|---|---|---|---|")
    for p in [float(x) for x in args.densities.split(",")] + ([-1.0] if args.weights else []):
        b, t = best[("baseline", p)], best[("this", p)]
        print(
            f"| {'weights' if p < 0 else f'{p:g}'} | {b['cpu']:.2f} | {t['cpu']:.2f} | {t['cpu'] / b['cpu']:.2f} | {b['f']:.10g} | {t['f']:.10g} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
