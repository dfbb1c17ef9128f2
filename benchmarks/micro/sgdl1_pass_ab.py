#!/usr/bin/env python
"""CPU seconds per SGD-L1 pass on NETtalk in Wapiti's feature space, for one or more source trees in
turns (an A/B of a kernel change), and whether the trees end on the same weights.

Each tree runs in its own process (``PYTHONPATH=<tree>/src``, one numba thread): the NETtalk split,
the ``nettalk:N-grm`` patterns with every label pair (``support="all"``), rho1 = 0.5, rho2 = 1e-5,
Wapiti's eta0 = 0.8 and alpha = 0.85, no per-pass objective (``monitor=False``; the last pass scores
it), one warm-up pass first (kernels loaded or compiled outside the count).  It prints, per round
and tree, the CPU seconds of each pass (``time.process_time`` between the driver's end-of-pass
callbacks) and the number of non-zero weights, then whether every tree's final weights are the same
bits as the first tree's (the weights of the last round).  Run on a quiet machine; compare trees
within a round.

Usage:  python benchmarks/micro/sgdl1_pass_ab.py TREE [TREE ...] [--set 3-grm] [--passes 3] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

WORKER = r"""
import json, sys, time
import numpy as np
from crfkit.datasets.nettalk import nettalk_split
from crfkit.features.encode import build
from crfkit.features.windows import preset_templates
from crfkit.objective import Objective, regularization
from crfkit.optim.sgdl1 import sgd_l1
from crfkit.pipeline import attributes_of, bigram_attributes_of
fset, passes, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
train, _, _ = nettalk_split()
tpl = preset_templates("nettalk:" + fset)
X, B, Y = attributes_of(train, tpl), bigram_attributes_of(train, tpl), [s.labels for s in train]
space, corpus = build(X, Y, support="all", B=B)
del X, B
reg = regularization(len(Y), rho1=0.5, rho2=1e-5)
obj = Objective(corpus, space, reg, threads=1)
kw = dict(reg=reg, eta0=0.8, alpha=0.85, monitor=False)
sgd_l1(obj, None, max_iterations=1, **kw)
marks = []
t0 = time.process_time()
res = sgd_l1(obj, None, max_iterations=passes, callback=lambda info: marks.append(time.process_time()), **kw)
np.save(out, res.x)
cpu = [b - a for a, b in zip([t0] + marks[:-1], marks)]
print(json.dumps({"pass_cpu": [round(c, 3) for c in cpu], "nnz": int(np.count_nonzero(res.x))}))
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("trees", nargs="+", help="source trees (each with a src/ directory)")
    ap.add_argument("--set", default="3-grm", help="NETtalk feature set (default 3-grm)")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args(argv)
    env0 = dict(os.environ, NUMBA_NUM_THREADS="1")
    env0.setdefault(
        "CRFKIT_DATA",
        os.path.join(
            os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared", "data"
        ),
    )
    with tempfile.TemporaryDirectory() as tmp:
        outs = {}
        for r in range(args.rounds):
            for k, tree in enumerate(args.trees):
                outs[tree] = os.path.join(tmp, f"w{k}.npy")
                env = dict(env0, PYTHONPATH=os.path.join(os.path.abspath(tree), "src"))
                p = subprocess.run(
                    [sys.executable, "-c", WORKER, args.set, str(args.passes), outs[tree]],
                    env=env,
                    capture_output=True,
                    text=True,
                )
                line = (
                    p.stdout.strip().splitlines()[-1]
                    if p.returncode == 0 and p.stdout.strip()
                    else "failed: " + p.stderr.strip()[-800:]
                )
                print(f"round {r + 1}  {tree}: {line}", flush=True)
        import numpy as np

        first = np.load(outs[args.trees[0]])
        for tree in args.trees[1:]:
            w = np.load(outs[tree])
            same = w.tobytes() == first.tobytes()
            diff = float(np.max(np.abs(w - first))) if w.shape == first.shape else float("nan")
            print(
                f"{tree}: {'the same weights, to the bit' if same else f'weights differ (max {diff:.3g})'} "
                f"as {args.trees[0]}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
