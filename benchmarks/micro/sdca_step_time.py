"""Seconds per step of sdca (oracle + individual gap + line search + sparse update) against sag-nus*
(oracle + Lipschitz line search + lazy update) on the same data, in one run, and the memory of each
stored state.

    PYTHONPATH=src python benchmarks/micro/sdca_step_time.py [--data ocr-large conll2000] [--passes 5] [--repeat 2]
        [--methods sag-nus* sdca-gap sdca-uniform oeg]

Each method runs ``--passes`` epochs from its own starting point (lambda = 1/n); the time of an
epoch is its wall time minus the monitoring (the objective and dual evaluated only for the report),
taken from the optimizers' ``monitor_s``; per step = that time / parameter updates.  The methods run
one after the other (in the opposite order every other repetition) and the whole comparison is
repeated (``--repeat``): on a shared machine take the ratios of the same repetition; the last line
per data set gives their median, mean and range over the repetitions.

Each line also gives the CPU time per step (``time.process_time`` of the run minus that of the
monitoring, which is timed by wrapping ``Objective.value`` and the dual methods' ``dual``): on a
machine shared with other jobs the wall time measures the machine's share as much as the code, the
CPU time much less so.  Then the CPU time per oracle call (per effective pass / n: a sag-nus* step
can take more than one oracle call, an sdca step takes exactly one), and the CPU time per step over
the epochs after the first, which leaves out the set-up (for the dual methods: the initial marginals
of every sequence, one forward-backward each, and the store's allocation) and the first pass: with
few passes the set-up weighs on the per-step figure.  And the CPU time of the set-up alone, for
reference: a run of 0 epochs of the same method made just before (the monitoring excluded; not
subtracted from the per-step figures, since a separate run's set-up need not cost what the measured
run's did: it also frees the previous run's store).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from crfkit.bench import data as D
from crfkit.objective import Objective, Regularization
from crfkit.optim import sdca as _sdca
from crfkit.optim.stochastic import resolve

METHODS = {
    "sag-nus*": ("sag-nus*", {"delta": 0.0}),
    "sdca-gap": ("sdca", {"sampling": "gap", "gap_tol": 0.0}),
    "sdca-uniform": ("sdca", {"sampling": "uniform", "gap_tol": 0.0}),
    "oeg": ("oeg", {"gap_tol": 0.0}),
}


_CPU_MON = [0.0]


def _cpu_timed(f):
    def g(*a, **k):
        c0 = time.process_time()
        try:
            return f(*a, **k)
        finally:
            _CPU_MON[0] += time.process_time() - c0

    return g


_sdca._Dual.dual = _cpu_timed(_sdca._Dual.dual)  # the dual methods' monitoring (the dual)


def timed(name, obj, passes, params):
    recs = []
    t0 = time.perf_counter()
    _CPU_MON[0] = 0.0
    c0 = time.process_time()

    def cb(info):
        recs.append(
            (
                time.perf_counter() - t0,
                info.get("monitor_s", 0.0),
                info.get("steps"),
                info.get("state_bytes"),
                info.get("ls_evals_per_step"),
                info.get("ls_entries"),
                time.process_time() - c0 - _CPU_MON[0],
            )
        )

    obj.n_oracle = 0
    obj.n_full = 0
    resolve(name)(obj, None, reg=obj.reg, max_iterations=passes, callback=cb, seed=0, **params)
    wall, mon, steps, sb, ls, ent, cpu = recs[-1]
    # after the first epoch: no set-up (for the dual methods the initial marginals of every sequence
    # and the store's allocation), no first pass
    late = None
    if len(recs) > 1:
        late = (cpu - recs[0][6]) / max(steps - recs[0][2], 1)
    return (wall - mon), steps, obj.n_oracle, sb, (ls, ent), cpu, late


def setup_cpu(name, obj, params):
    """CPU seconds of a run of 0 epochs (the method's set-up alone: for the dual methods the initial
    marginals, the store, w; for sag-nus* its state), the monitoring excluded."""
    _CPU_MON[0] = 0.0
    c0 = time.process_time()
    resolve(name)(obj, None, reg=obj.reg, max_iterations=0, callback=None, seed=0, **params)
    return time.process_time() - c0 - _CPU_MON[0]


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", nargs="+", default=["ocr-large", "conll2000"])
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument(
        "--methods",
        nargs="+",
        default=list(METHODS),
        choices=list(METHODS),
        help="which methods (the first is the base of the ratios; default: all four)",
    )
    a = ap.parse_args(argv)
    runs = [METHODS[m] for m in a.methods]
    # numpy's BLAS on one thread, as crfkit's train_corpus runs the optimizers (its idle threads
    # spin and would be charged to crfkit's CPU time: benchmarks/micro/blas_spin.py)
    import contextlib

    from crfkit.parallel import blas_threads

    _blas = contextlib.ExitStack()
    _blas.enter_context(blas_threads(1))
    for name in a.data:
        bd = D.load(name, a.data_dir)
        space, corpus, _ = bd.encoded()
        obj = Objective(corpus, space, Regularization(l2=bd.default_l2), threads=1)
        obj.value = _cpu_timed(obj.value)  # the monitoring's CPU time (the primal)
        print(
            f"{name}: n={obj.n}, tokens={corpus.n_tokens}, labels={space.n_labels}, "
            f"features={space.n_features}, l2={bd.default_l2:.3g}"
        )
        # warm-up: compile / load every kernel
        for alg, p in runs:
            timed(alg, obj, 1, p)
        ratios = {}
        for rep in range(a.repeat):
            res = {}
            # the order alternates between repetitions, so that a drift of the machine's speed
            # during a repetition does not favour one method
            for j in range(len(runs)) if rep % 2 == 0 else reversed(range(len(runs))):
                alg, p = runs[j]
                su = setup_cpu(alg, obj, p)
                res[j] = (su, timed(alg, obj, a.passes, p))
            base = None
            for j, (alg, p) in enumerate(runs):
                su, (sec, steps, calls, sb, ls, cpu, late) = res[j]
                us = 1e6 * sec / steps
                cus = 1e6 * cpu / steps
                pus = 1e6 * cpu / calls  # CPU per oracle call: per pass / n
                lus = 1e6 * late if late is not None else float("nan")
                if base is None:
                    base, cbase, pbase, lbase = us, cus, pus, lus
                label = alg + ("" if "sampling" not in p else f" ({p['sampling']})")
                ratios.setdefault(label, []).append((cus / cbase, lus / lbase))
                # (the search reads every entry since stop 35: the trace's ls_entries share is 1)
                extra = f", {ls[0]:.2f} line-search evaluations per step" if alg == "sdca" else ""
                print(
                    f"  rep {rep}: {label:16s} {us:8.1f} us/step  ({us / base:.2f}x {runs[0][0]}); "
                    f"CPU {cus:8.1f} us/step ({cus / cbase:.2f}x)  "
                    f"CPU per oracle call {pus:7.1f} us ({pus / pbase:.2f}x); "
                    f"set-up alone {1e3 * su:.0f} ms CPU; "
                    f"after epoch 1: CPU {lus:7.1f} us/step ({lus / lbase:.2f}x)  "
                    f"{steps / obj.n:.2f} updates/n, {calls / obj.n:.2f} oracle calls/n, "
                    f"state {sb / 2**20:.1f} MiB{extra}"
                )
        for label, rs in list(ratios.items())[1:]:
            r = np.array(rs)
            print(
                f"  {label} / {runs[0][0]}, CPU per step over {len(r)} repetitions: "
                f"median {np.median(r[:, 0]):.3f}x, mean {r[:, 0].mean():.3f}x, "
                f"range {r[:, 0].min():.2f}-{r[:, 0].max():.2f}x; after epoch 1: median "
                f"{np.nanmedian(r[:, 1]):.3f}x, mean {np.nanmean(r[:, 1]):.3f}x"
            )


if __name__ == "__main__":
    main()
