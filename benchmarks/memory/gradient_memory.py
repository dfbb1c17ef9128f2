#!/usr/bin/env python
"""The full-batch gradient before/after the attribute-partitioned reduction, in one run
(CoNLL-2000).

Before (the baseline source tree: a git revision exported with ``git archive``, or a directory
given with --baseline-src): each thread's chunk accumulated into its own row of a
``(threads, n_features)`` buffer, summed at the end.  After (this tree): blocks of sequences, a
store of their marginals, and each thread adding the expected counts of the attributes it owns
into the one output gradient (``crfkit.reduction``).

For each feature space (``--support observed``: CRFsuite's 0.46M features; ``--support all``: every
(attribute, label) pair, 7.4M) and each tree, one subprocess reads and encodes CoNLL-2000 with the
default chunking templates (after loading the kernels on a tiny problem), builds the objective, then
resets its peak RSS (``/proc/self/clear_refs``), makes one warm-up evaluation (the first-use set-up:
buffers, plan) and times ``--evals`` gradient evaluations at the same random weights.  It prints the
median seconds per evaluation, the RSS before the first evaluation, the peak from there on, the
peak's excess over that RSS (what the evaluations allocate: before, the ``threads x n_features``
buffer; after, the plan and the marginal store), and the largest difference between the two trees'
gradients (summation order only: relative to the gradient's max-norm).

Usage:  python benchmarks/memory/gradient_memory.py [--baseline-rev REV | --baseline-src DIR] [--threads 2]
        [--evals 5] [--support observed all] [--data-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))  # the repository: this file is in benchmarks/memory/

WORKER = r"""
import json, os, sys, time
import numpy as np
path, support, threads, evals, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]

def status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024.0

from crfkit.parallel import set_threads
set_threads(threads)
from crfkit.pipeline import load_columns
from crfkit.features.templates import default_chunking_templates
from crfkit.features.encode import build
from crfkit.objective import Objective, Regularization
# load every kernel first (a tiny problem), so that the evaluations below allocate only their own memory
_tx = [[["a", "b"], ["c"]], [["a"]]]
_s, _c = build(_tx, [["X", "Y"], ["Y"]])
Objective(_c, _s, threads=threads)._loss_grad(np.zeros(_s.n_features), None, 1.0, 0.0)
X, Y, sents = load_columns(path, default_chunking_templates())
space, corpus = build(X, Y, support=support)
del X, Y, sents
obj = Objective(corpus, space, Regularization(l2=1e-4), threads=threads)
rng = np.random.default_rng(0)
w = 0.05 * rng.standard_normal(space.n_features)
g = np.empty(space.n_features)
g[:] = 0.0
rss0 = status("VmRSS")
with open("/proc/self/clear_refs", "w") as f:       # reset VmHWM to the current RSS
    f.write("5")
obj._loss_grad(w, g, 1.0, 0.0)                      # warm-up: the first-use set-up (buffers, plan)
times = []
for _ in range(evals):
    t = time.perf_counter()
    v, _, _ = obj._loss_grad(w, g, 1.0, 0.0)
    times.append(time.perf_counter() - t)
hwm = status("VmHWM")
np.save(out, g)
print(json.dumps(dict(n_features=int(space.n_features), value=float(v), median_s=float(np.median(times)),
                      min_s=float(min(times)), rss_mb=rss0, peak_mb=hwm, excess_mb=hwm - rss0)))
"""


def run_worker(src: str, path: str, support: str, threads: int, evals: int, out: str) -> dict:
    env = dict(os.environ, PYTHONPATH=os.path.join(src, "src"))
    p = subprocess.run(
        [sys.executable, "-c", WORKER, path, support, str(threads), str(evals), out],
        env=env,
        capture_output=True,
        text=True,
    )
    if p.returncode:
        sys.exit(f"worker failed ({src}, {support}):\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def export(rev: str) -> str:
    dest = os.path.join(tempfile.gettempdir(), f"crfkit-baseline-{rev}")
    if not os.path.isdir(os.path.join(dest, "src", "crfkit")):
        os.makedirs(dest, exist_ok=True)
        arch = subprocess.run(
            ["git", "-C", ROOT, "archive", rev, "src"], capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", dest], input=arch, check=True)
    return dest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline-rev", default="b6e02c8", help="git revision of the 'before' tree")
    ap.add_argument(
        "--baseline-src",
        help="a directory holding the 'before' tree's src/ (instead of a revision)",
    )
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--evals", type=int, default=5)
    ap.add_argument("--support", nargs="+", default=["observed", "all"])
    ap.add_argument(
        "--data-dir",
        default=os.environ.get("CRFKIT_DATA") or os.path.join(ROOT, "..", "shared", "data"),
    )
    args = ap.parse_args()
    path = os.path.join(args.data_dir, "conll2000", "train.txt.gz")
    base = args.baseline_src or export(args.baseline_rev)
    import numpy as np

    print(f"load average before: {os.getloadavg()}", flush=True)
    print(
        f"CoNLL-2000 train, default chunking templates, {args.threads} threads, median of {args.evals} "
        f"evaluations; before = {base}, after = {ROOT}"
    )
    print(
        f"{'support':>9} {'features':>10} {'tree':>7} {'s/eval':>8} {'RSS MB':>8} {'peak MB':>8} "
        f"{'excess MB':>9} {'time ratio':>10} {'|dg|/|g|':>9}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for support in args.support:
            res = {}
            for name, src in (("before", base), ("after", ROOT)):
                res[name] = run_worker(
                    src, path, support, args.threads, args.evals, os.path.join(tmp, f"{name}.npy")
                )
            gb = np.load(os.path.join(tmp, "before.npy"))
            ga = np.load(os.path.join(tmp, "after.npy"))
            rel = float(np.abs(ga - gb).max() / max(np.abs(gb).max(), 1e-300))
            for name in ("before", "after"):
                r = res[name]
                ratio = r["median_s"] / res["before"]["median_s"]
                print(
                    f"{support:>9} {r['n_features']:>10} {name:>7} {r['median_s']:>8.3f} {r['rss_mb']:>8.1f} "
                    f"{r['peak_mb']:>8.1f} {r['excess_mb']:>9.1f} {ratio:>10.2f} "
                    f"{rel if name == 'after' else 0.0:>9.1e}",
                    flush=True,
                )
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
