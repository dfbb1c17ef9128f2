#!/usr/bin/env python
"""A/B of two codes' sdca steps in one process: CPU time per step, alternating chunks of steps.

    PYTHONPATH=src:DIR python benchmarks/micro/sdca_step_ab.py --other PKG [--data conll2000] [--warm 2]
        [--chunk 400] [--chunks 10]

``PKG`` is another copy of crfkit importable under that name (e.g. the code before a change, copied
to DIR/crfkit_base with its absolute ``crfkit.`` imports renamed ``crfkit_base.``).  Both codes
build their own sdca run (gap sampling, mixing 0.2, float32 store, lambda = 1/n) on the same encoded
corpus, make ``--warm`` epochs untimed, then take turns: ``--chunk`` steps of one, the same of the
other, ``--chunks`` times each, every chunk timed with ``time.process_time``.  On a machine shared
with other jobs the alternation puts both codes under the same load, which separate runs do not.
Prints the CPU us per step of each code, their ratio, and the line-search evaluations per step.
"""

from __future__ import annotations

import argparse
import importlib
import os
import time

import numpy as np

from crfkit.bench import data as D


def make_run(pkg, corp, space, l2):
    S = importlib.import_module(pkg + ".optim.sdca")
    K = importlib.import_module(pkg + ".kernels.sdca")
    O = importlib.import_module(pkg + ".objective")
    obj = O.Objective(corp, space, O.Regularization(l2=l2), threads=1)
    return S._Dual("sdca", obj, None, l2, 0, None, np.float32, "gold", 10.0, K.GAP), K


def main(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--other", required=True)
    ap.add_argument("--data", default="conll2000")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--warm", type=int, default=2)
    ap.add_argument("--chunk", type=int, default=400)
    ap.add_argument("--chunks", type=int, default=10)
    a = ap.parse_args(argv)
    bd = D.load(a.data, a.data_dir)
    space, corp, _ = bd.encoded()
    n = corp.n_sequences
    names = ["crfkit", a.other]
    runs = [make_run(p, corp, space, bd.default_l2) for p in names]
    for run, K in runs:
        run.run_until(K.SDCA, K.GAP, 0.2, 1e-3, a.warm * n)
    cpu = [0.0, 0.0]
    ls = [0, 0]
    steps = [0, 0]
    for _ in range(a.chunks):
        for k, (run, K) in enumerate(runs):
            s0 = int(run.isc[K.I_EVALS])
            l0 = int(run.isc[K.I_LS])
            t = time.process_time()
            run.run_until(K.SDCA, K.GAP, 0.2, 1e-3, s0 + a.chunk)
            cpu[k] += time.process_time() - t
            steps[k] += int(run.isc[K.I_EVALS]) - s0
            ls[k] += int(run.isc[K.I_LS]) - l0
    us = [1e6 * cpu[k] / steps[k] for k in range(2)]
    print(
        f"{a.data}: after {a.warm} epochs, {a.chunks} chunks of {a.chunk} steps each, alternated; load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    for k in range(2):
        print(
            f"  {names[k]:12s} CPU {us[k]:7.1f} us/step  {ls[k] / steps[k]:.2f} line-search evaluations per step"
        )
    print(f"  ratio {names[0]} / {names[1]}: {us[0] / us[1]:.3f}")


if __name__ == "__main__":
    main()
