#!/usr/bin/env python
"""Peak RSS of BCD with label-pair features on NETtalk (issue 18: memory that follows the model),
one process per tree so that each peak (``ru_maxrss``) is its own, and whether the trees' runs are
bitwise the same (weights and objective per sweep).

Wapiti's feature space (``support all``: every label pair with every observation), rho1 = 0.5,
rho2 = 1e-5, BCD's defaults with ``delta = 0`` (exactly ``--sweeps`` sweeps), one thread.
``--words 0`` takes the whole training part of the split (16,007 words); ``--src OTHER/src``
measures another tree too (e.g. a worktree of an older commit).

Usage:  python benchmarks/memory/bcd_memory.py [--features nettalk:3-grm] [--words 0] [--sweeps 1]
                                        [--blocks separate] [--src OTHER_TREE/src ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "..", "src")


def worker(args) -> None:
    import resource
    import time

    import numpy as np

    from crfkit.datasets.nettalk import nettalk_split
    from crfkit.features.windows import preset_templates
    from crfkit.pipeline import attributes_of, bigram_attributes_of
    from crfkit.train import train

    train_part = nettalk_split(9)[0]
    if args.words > 0:
        train_part = train_part[: args.words]
    tp = preset_templates(args.features)
    X, Y = attributes_of(train_part, tp), [s.labels for s in train_part]
    B = bigram_attributes_of(train_part, tp)
    t0 = time.perf_counter()
    res = train(
        X,
        Y,
        B=B,
        support="all",
        algorithm="bcd",
        rho1=0.5,
        rho2=1e-5,
        max_iterations=args.sweeps,
        seed=0,
        params=dict(delta=0.0, blocks=args.blocks),
        threads=1,
    )
    seconds = time.perf_counter() - t0
    np.save(args.out, res.model.weights)
    print(
        json.dumps(
            {
                "features": int(res.model.space.n_features),
                "active": int(res.model.n_active),
                "objectives": [r["objective"] for r in res.history],
                "seconds": seconds,
                "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
            }
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--features", default="nettalk:3-grm")
    ap.add_argument("--words", type=int, default=0, help="training words (0: all 16,007)")
    ap.add_argument("--sweeps", type=int, default=1)
    ap.add_argument("--blocks", default="separate", choices=["separate", "joint"])
    ap.add_argument(
        "--src", nargs="*", default=[], help="other trees' src directories, measured too"
    )
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    import numpy as np

    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for k, src in enumerate([SRC] + list(args.src)):
            out = os.path.join(tmp, f"w{k}.npy")
            env = dict(os.environ, PYTHONPATH=os.path.abspath(src), NUMBA_NUM_THREADS="1")
            # numba's cache first (a tree never run here compiles: that must not count in its peak)
            warm = [
                sys.executable,
                __file__,
                "--worker",
                "--out",
                out,
                "--features",
                args.features,
                "--words",
                "50",
                "--sweeps",
                "1",
                "--blocks",
                args.blocks,
            ]
            subprocess.run(warm, env=env, check=True, capture_output=True)
            cmd = [
                sys.executable,
                __file__,
                "--worker",
                "--out",
                out,
                "--features",
                args.features,
                "--words",
                str(args.words),
                "--sweeps",
                str(args.sweeps),
                "--blocks",
                args.blocks,
            ]
            p = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
            rec = json.loads(p.stdout.strip().splitlines()[-1])
            rec["src"], rec["weights"] = os.path.abspath(src), np.load(out)
            runs.append(rec)
            print(
                f"{rec['src']}: {rec['features']:,} features, {args.sweeps} sweep(s), {rec['active']:,} active, "
                f"{rec['seconds']:.1f} s, peak RSS {rec['peak_rss_mb']:,.0f} MB",
                flush=True,
            )
    for rec in runs[1:]:
        same = (
            np.array_equal(rec["weights"], runs[0]["weights"])
            and rec["objectives"] == runs[0]["objectives"]
        )
        print(
            f"this tree's peak RSS / {rec['src']}'s: {runs[0]['peak_rss_mb'] / rec['peak_rss_mb']:.3f}; "
            f"weights and objectives {'bitwise the same' if same else 'DIFFER'}"
        )


if __name__ == "__main__":
    main()
