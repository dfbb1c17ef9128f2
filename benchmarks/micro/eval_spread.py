#!/usr/bin/env python
"""How much one gradient evaluation's CPU time moves by itself on this machine, in one process.

The README's Dask section compares the single process's evaluation with a Dask worker's; this is the
noise floor for that comparison: the same objective evaluated at the same ``w`` ``--evals`` times in
one process, alternately with ``w`` as it is and with ``w`` after a round trip through Dask's
serialisation (what a worker receives), one thread.  It prints each evaluation's CPU seconds and the
medians of both.

The corpus is the one ``benchmarks/micro/dask_scaling.py --dir DIR`` writes (CoNLL-2000 repeated
into shards); give the same ``--dir``.

Usage:  python benchmarks/micro/eval_spread.py --dir DIR [--evals 6]
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import sys
import time

import numpy as np


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--dir", required=True, help="the shard directory of benchmarks/micro/dask_scaling.py --dir"
    )
    ap.add_argument("--evals", type=int, default=6)
    a = ap.parse_args(argv)
    paths = sorted(glob.glob(os.path.join(a.dir, "*.gz")))
    if not paths:
        print(
            f"no shards (*.gz) under {a.dir}: run benchmarks/micro/dask_scaling.py --dir {a.dir} first",
            file=sys.stderr,
        )
        return 2
    from distributed.protocol import deserialize, serialize

    from crfkit.parallel import set_threads

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from dask_scaling import (
        single_objective,  # the single process's objective, as that script builds it
    )

    set_threads(1)
    space, corpus, obj = single_objective(paths, threads=1)
    w = np.random.default_rng(0).normal(scale=0.01, size=space.n_features)
    w2 = deserialize(*serialize(w))
    obj.nll_sum_grad(w)  # kernels loaded, plan built
    obj.nll_sum_grad(w2)
    plain, shipped = [], []
    for _ in range(a.evals):
        for ww, acc in ((w, plain), (w2, shipped)):
            c = time.process_time()
            obj.nll_sum_grad(ww)
            acc.append(time.process_time() - c)
    print(
        f"{corpus.n_sequences} sequences, {space.n_features} features; load average "
        + " ".join(f"{x:.2f}" for x in os.getloadavg())
    )
    print(
        "w as it is:             ",
        " ".join(f"{x:.2f}" for x in plain),
        f"median {statistics.median(plain):.3f} CPU s",
    )
    print(
        "w after Dask's serialise:",
        " ".join(f"{x:.2f}" for x in shipped),
        f"median {statistics.median(shipped):.3f} CPU s",
    )
    print(f"spread (max / min) of the plain evaluations: {max(plain) / min(plain):.3f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
