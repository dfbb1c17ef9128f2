"""Seconds per effective pass of sag-nus* next to one full-batch gradient evaluation.

For OCR (``support="all"``) and CoNLL-2000, in the same run:

* ``pass``: a few effective passes of sag-nus* from w = 0 through the public
  optimizer, the per-pass monitoring (an objective evaluation) subtracted,
  divided by the passes; min over ``--repeats`` runs;
* ``kernel``: the same passes timed around the kernel calls alone (no
  monitoring between them).  The two differ by what the monitoring leaves
  behind: numba's OpenMP workers spin-wait for a while after the parallel
  objective evaluation and, on a machine with few free cores, take CPU time
  from the single-threaded SAG kernel that runs next;
* ``full gradient``: one ``Objective.value_and_grad`` (min over repeats of a
  mean over several calls), and the ratios pass / full gradient.

With ``--baselines sg,asg,adagrad,pegasos`` it also prints the seconds per
pass of those stochastic baselines (step 0.1, one thread, monitoring
subtracted), which share the per-example oracle of :mod:`crfkit.kernels.oracle`.

The machine may be shared: compare figures from the same run only.

    .venv/bin/python benchmarks/micro/sag_kernel_speed.py [--passes 5] [--repeats 3] [--sets ocr,conll2000]
        [--baselines sg,asg,adagrad,pegasos]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from crfkit.bench import data as D
from crfkit.objective import Objective, Regularization
from crfkit.optim import sag as S


def per_pass(corpus, space, reg, passes, repeats):
    S.sag_nus_star(
        Objective(corpus, space, reg), None, reg=reg, max_iterations=1, delta=0.0
    )  # compile
    best = np.inf
    for _ in range(repeats):
        obj = Objective(corpus, space, reg)
        mon = [0.0]
        t = time.perf_counter()
        S.sag_nus_star(
            obj,
            None,
            reg=reg,
            max_iterations=passes,
            delta=0.0,
            callback=lambda info: mon.__setitem__(0, info["monitor_s"]),
        )
        best = min(best, (time.perf_counter() - t - mon[0]) / passes)
    return best


def per_pass_kernel(corpus, space, reg, passes, repeats):
    """The passes timed around the kernel calls only (``_Run.run_until`` and the window close)."""
    from crfkit.kernels import sag as K

    best = np.inf
    for _ in range(repeats):
        obj = Objective(corpus, space, reg)
        run = S._Run("sag-nus*", obj, None, reg.l2, 0, 1.0, None)
        n = corpus.n_sequences
        t = time.perf_counter()
        for it in range(passes):
            run.run_until(K.SAG_NUS_STAR, K.STEP_A, 1.0, (it + 1) * n)
            run.close_window()
        best = min(best, (time.perf_counter() - t) / passes)
    return best


def per_pass_baseline(method, corpus, space, reg, passes, repeats):
    """Seconds per pass of a classic stochastic baseline (eta 0.1, or 1 for pegasos), one thread."""
    from crfkit.optim import sgd as G

    fn = getattr(G, method)
    eta = 1.0 if method == "pegasos" else 0.1
    fn(
        Objective(corpus, space, reg, threads=1), None, reg=reg, max_iterations=1, eta=eta
    )  # compile
    best = np.inf
    for _ in range(repeats):
        obj = Objective(corpus, space, reg, threads=1)
        mon = [0.0]
        t = time.perf_counter()
        fn(
            obj,
            None,
            reg=reg,
            max_iterations=passes,
            eta=eta,
            callback=lambda info: mon.__setitem__(0, info["monitor_s"]),
        )
        best = min(best, (time.perf_counter() - t - mon[0]) / passes)
    return best


def full_grad(corpus, space, reg, repeats, calls=5):
    obj = Objective(corpus, space, reg)
    w = np.zeros(space.n_features)
    obj.value_and_grad(w)
    best = np.inf
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(calls):
            obj.value_and_grad(w)
        best = min(best, (time.perf_counter() - t) / calls)
    return best


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sets", default="ocr,conll2000")
    ap.add_argument("--baselines", default="", help="comma-separated: sg, asg, adagrad, pegasos")
    a = ap.parse_args(argv)
    for name in a.sets.split(","):
        b = D.load(name, support="all") if name.startswith("ocr") else D.load(name)
        space, corpus, _test = b.encoded()
        reg = Regularization(l2=1.0 / corpus.n_sequences)
        sp = per_pass(corpus, space, reg, a.passes, a.repeats)
        sk = per_pass_kernel(corpus, space, reg, a.passes, a.repeats)
        fg = full_grad(corpus, space, reg, a.repeats)
        print(
            f"{name:10s} n={corpus.n_sequences} features={space.n_features}: sag-nus* pass {sp * 1e3:8.2f} ms, "
            f"kernel {sk * 1e3:8.2f} ms; full gradient {fg * 1e3:8.2f} ms; "
            f"ratios {sp / fg:6.2f} {sk / fg:6.2f}",
            flush=True,
        )
        for m in filter(None, a.baselines.split(",")):
            bp = per_pass_baseline(m, corpus, space, reg, a.passes, a.repeats)
            print(
                f"{name:10s} {m:8s} pass {bp * 1e3:8.2f} ms ({bp / sp:5.2f}x sag-nus*)", flush=True
            )


if __name__ == "__main__":
    main()
