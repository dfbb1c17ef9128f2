#!/usr/bin/env python
"""Elastic-net sdca against OWL-QN on CoNLL-2000 (CRFsuite chunking attributes, the bench's
``conll2000``), CRFsuite's units c1 = 1, c2 = 1 (``l1 = c1/n``, ``l2 = 2 c2/n``, as ``crfkit train
--c1 1 --c2 1`` converts), one thread each, in one run.

sdca (gap sampling, float32 store, the defaults) runs ``--passes`` epochs (an epoch is n oracle
calls); every epoch gives its primal P(w) (L1 term included), its dual D(mu) and the non-zero
weights.  OWL-QN (crfkit.optim.owlqn, m = 6) runs ``--owlqn-iterations`` iterations with its
stopping rules turned off; each of its objective evaluations is one pass over the data.  ``f_best``
is the lowest primal either reached; sdca's last dual is a certified lower bound on f*, so
``D <= f* <= f_best`` brackets the optimum.  Printed: f - f_best (relative) and non-zero weights at
equal passes and at equal seconds (the optimizer's own: sdca's monitoring, the primal and dual it
evaluates for the report, is subtracted).

    PYTHONPATH=src python benchmarks/papers/sdca_enet_conll2000.py [--c1 1] [--c2 1] [--passes 30]
        [--owlqn-iterations 300] [--data-dir DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

from crfkit.bench import data as D
from crfkit.objective import Objective, Regularization, regularization
from crfkit.optim import sdca as S
from crfkit.optim.owlqn import owlqn


def load_average() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def run_sdca(corpus, space, reg, passes):
    obj = Objective(corpus, space, reg, threads=1)
    recs = []
    t0 = time.perf_counter()

    def cb(info):
        recs.append(
            {
                "passes": obj.n_oracle / obj.n,
                "s": time.perf_counter() - t0 - info["monitor_s"],
                "f": info["f"],
                "dual": info["dual"],
                "gap": info["duality_gap"],
                "nnz": info["nnz"],
            }
        )
        print(
            f"  sdca  pass {recs[-1]['passes']:5.1f}  {recs[-1]['s']:7.1f}s  P={info['f']:.10f}  "
            f"gap={info['duality_gap']:.3e}  nnz={info['nnz']}",
            flush=True,
        )

    S.sdca(obj, None, reg=reg, max_iterations=passes, gap_tol=0.0, callback=cb)
    return recs


def run_owlqn(corpus, space, reg, iterations):
    smooth = Objective(corpus, space, Regularization(l2=reg.l2), threads=1)
    evals = [0]

    def fg(x):
        evals[0] += 1
        return smooth.value_and_grad(x)

    recs = []
    t0 = time.perf_counter()

    def cb(info):
        recs.append(
            {
                "passes": float(evals[0]),
                "s": time.perf_counter() - t0,
                "f": info["f"],
                "nnz": int(info["nnz"]),
            }
        )
        if len(recs) % 10 == 0:
            print(
                f"  owlqn iter {len(recs):4d} passes {evals[0]:4d}  {recs[-1]['s']:7.1f}s  F={info['f']:.10f}  "
                f"nnz={recs[-1]['nnz']}",
                flush=True,
            )

    owlqn(
        fg,
        np.zeros(space.n_features),
        reg.l1,
        max_iterations=iterations,
        epsilon=0.0,
        delta=0.0,
        callback=cb,
    )
    return recs


def at(recs, key, x):
    """The last record with recs[key] <= x (None if none)."""
    best = None
    for r in recs:
        if r[key] <= x + 1e-9:
            best = r
    return best


def main(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--c1", type=float, default=1.0)
    ap.add_argument("--c2", type=float, default=1.0)
    ap.add_argument("--passes", type=int, default=30)
    ap.add_argument("--owlqn-iterations", type=int, default=300)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument(
        "--results",
        metavar="FILE.jsonl",
        default=None,
        help="also append the figures as one record (benchmarks/_results.py: command, date, "
        "commit, machine, figures) to FILE.jsonl, e.g. benchmarks/results/NAME.jsonl",
    )
    a = ap.parse_args(argv)
    bd = D.load("conll2000", a.data_dir)
    space, corpus, _ = bd.encoded()
    n = corpus.n_sequences if hasattr(corpus, "n_sequences") else len(corpus.seq_ptr) - 1
    reg = regularization(n, c1=a.c1, c2=a.c2)
    print(
        f"conll2000: n={n}, labels={space.n_labels}, features={space.n_features}; c1={a.c1:g}, c2={a.c2:g} "
        f"(l1={reg.l1:.4g}, l2={reg.l2:.4g}); {load_average()}",
        flush=True,
    )
    sd = run_sdca(corpus, space, reg, a.passes)
    print(f"after sdca: {load_average()}", flush=True)
    ow = run_owlqn(corpus, space, reg, a.owlqn_iterations)
    print(f"after owlqn: {load_average()}", flush=True)
    f_best = min(min(r["f"] for r in sd), min(r["f"] for r in ow))
    lower = sd[-1]["dual"]
    print(
        f"\nf_best = {f_best:.10f}; sdca's certified bracket: {lower:.10f} <= f* <= {f_best:.10f} "
        f"(relative width {(f_best - lower) / f_best:.2e})"
    )
    print("\nat equal passes (oracle calls / n; OWL-QN: objective evaluations):")
    print(
        "| passes | sdca f - f_best (rel) | sdca gap (rel) | sdca nnz | owlqn f - f_best (rel) | owlqn nnz |"
    )
    print("|---|---|---|---|---|---|")
    for p in (5, 10, 15, 20, 25, 30, 40, 60, 100, 150, 200, 300):
        s, o = at(sd, "passes", p), at(ow, "passes", p)
        if s is None and o is None or p > max(sd[-1]["passes"], ow[-1]["passes"]):
            continue
        fs = (
            f"{(s['f'] - f_best) / f_best:.2e} | {s['gap'] / f_best:.2e} | {s['nnz']:,}"
            if s and p <= sd[-1]["passes"]
            else "- | - | -"
        )
        fo = f"{(o['f'] - f_best) / f_best:.2e} | {o['nnz']:,}" if o else "- | -"
        print(f"| {p} | {fs} | {fo} |")
    print("\nat equal seconds (the optimizer's own):")
    print("| seconds | sdca f - f_best (rel) | sdca nnz | owlqn f - f_best (rel) | owlqn nnz |")
    print("|---|---|---|---|---|")
    tmax = max(sd[-1]["s"], ow[-1]["s"])
    for t in (15, 30, 60, 120, 180, 240, 300, 450, 600, 900):
        if t > tmax:
            continue
        s, o = at(sd, "s", t), at(ow, "s", t)
        fs = (
            f"{(s['f'] - f_best) / f_best:.2e} | {s['nnz']:,}"
            if s and t <= sd[-1]["s"] * 1.0001
            else "- | -"
        )
        fo = (
            f"{(o['f'] - f_best) / f_best:.2e} | {o['nnz']:,}"
            if o and t <= ow[-1]["s"] * 1.0001
            else "- | -"
        )
        print(f"| {t} | {fs} | {fo} |")
    print(
        f"\nsdca: {sd[-1]['passes']:.0f} passes in {sd[-1]['s']:.1f}s, final P={sd[-1]['f']:.10f}, "
        f"gap={sd[-1]['gap']:.3e}, nnz={sd[-1]['nnz']:,}"
    )
    print(
        f"owlqn: {len(ow)} iterations, {ow[-1]['passes']:.0f} passes in {ow[-1]['s']:.1f}s, "
        f"final F={ow[-1]['f']:.10f}, nnz={ow[-1]['nnz']:,}"
    )
    figures = {
        "c1": a.c1,
        "c2": a.c2,
        "n": n,
        "f_best": f_best,
        "dual_lower": lower,
        "sdca": sd,
        "owlqn": ow,
    }
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(figures, fh)
    if a.results:  # one record in the benchmarks/results/ schema
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        import _results

        _results.record(figures, a.results)


if __name__ == "__main__":
    main()
