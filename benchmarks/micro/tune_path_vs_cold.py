#!/usr/bin/env python
"""A warm-started regularisation path against cold runs, on the same grid (crfkit.CRFSearchCV with
``warm_start=True`` / ``False``).

Data: the first ``--sentences`` sentences of CoNLL-2002 Spanish with the sklearn-crfsuite
tutorial's token features (benchmarks/peers/sklearn_crfsuite_port.py), ``--folds`` folds; a grid
of c1 x c2; L-BFGS/OWL-QN with CRFsuite's stopping rule (epsilon 1e-5 on ||g||/max(1,||w||), delta
``--delta`` over 10 iterations) and no iteration cap, so that every run converges.  Per candidate:
the iterations of the path and of the cold run (summed over the folds), the relative difference of
their final objectives (worst fold) and their scores (token accuracy); then the totals and the
ratios.  Target (issue 49): the path takes at most 0.4x the cold runs' iterations.

Usage: python benchmarks/micro/tune_path_vs_cold.py [--sentences 1000] [--folds 2]
       [--c1 1,0.3,0.1,0.03] [--c2 0.1,0.01,0.001] [--delta 1e-5] [--results FILE.jsonl]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "peers"))

from sklearn_crfsuite_port import load  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--sentences", type=int, default=1000)
    ap.add_argument("--folds", type=int, default=2)
    ap.add_argument("--c1", default="1,0.3,0.1,0.03")
    ap.add_argument("--c2", default="0.1,0.01,0.001")
    ap.add_argument("--delta", type=float, default=1e-5)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--results", metavar="FILE.jsonl", default=None)
    ap.add_argument("--notes", default=None)
    args = ap.parse_args(argv)
    ddir = args.data_dir or os.environ.get("CRFKIT_DATA") or os.path.join("..", "shared", "data")

    import numpy as np

    import crfkit
    from crfkit.tuning import parse_grid

    X, y = load(ddir, "train")
    X, y = X[: args.sentences], y[: args.sentences]
    grid = {"c1": parse_grid(args.c1, "--c1"), "c2": parse_grid(args.c2, "--c2")}
    est = crfkit.CRF(
        algorithm="lbfgs", all_possible_transitions=True, delta=args.delta, threads=args.threads
    )
    runs = {}
    for warm in (True, False):
        t0 = time.perf_counter()
        s = crfkit.CRFSearchCV(est, grid, cv=args.folds, warm_start=warm, refit=False)
        s.fit(X, y)
        runs[warm] = (s, time.perf_counter() - t0)
        print(f"{'path' if warm else 'cold'}: {time.perf_counter() - t0:.1f}s", flush=True)
    (p, tp), (c, tc) = runs[True], runs[False]
    rp, rc = p.cv_results_, c.cv_results_
    print(f"{len(X)} sentences, {args.folds} folds, delta {args.delta:g}")
    print(
        f"{'c1':>8s} {'c2':>8s} {'from':>5s} {'it path':>8s} {'it cold':>8s} "
        f"{'obj rel diff':>12s} {'acc path':>9s} {'acc cold':>9s}"
    )
    rows = []
    for i in p.path_:
        a, b = np.array(rp["objectives"][i]), np.array(rc["objectives"][i])
        rel = float(np.max(np.abs(a - b) / np.abs(b)))
        row = {
            **rp["params"][i],
            "warm_from": int(rp["warm_from"][i]),
            "iterations_path": int(rp["iterations"][i]),
            "iterations_cold": int(rc["iterations"][i]),
            "objective_rel_diff": rel,
            "score_path": float(rp["mean_test_score"][i]),
            "score_cold": float(rc["mean_test_score"][i]),
        }
        rows.append(row)
        print(
            f"{row['c1']:8.4g} {row['c2']:8.4g} {row['warm_from']:5d} {row['iterations_path']:8d} "
            f"{row['iterations_cold']:8d} {rel:12.2e} {row['score_path']:9.4f} "
            f"{row['score_cold']:9.4f}"
        )
    ip, ic = int(rp["iterations"].sum()), int(rc["iterations"].sum())
    worst = max(r["objective_rel_diff"] for r in rows)
    print(f"total iterations: path {ip}, cold {ic}: {ip / ic:.3f}x")
    print(f"wall time: path {tp:.1f}s, cold {tc:.1f}s: {tp / tc:.3f}x")
    print(f"worst objective relative difference: {worst:.2e}")
    print(f"target: at most 0.4x the iterations: {'PASS' if ip <= 0.4 * ic else 'FAIL'}")
    if args.results:
        sys.path.insert(0, os.path.dirname(HERE))
        import _results

        _results.record(
            {
                "sentences": len(X),
                "folds": args.folds,
                "delta": args.delta,
                "grid": grid,
                "iterations_path": ip,
                "iterations_cold": ic,
                "iterations_ratio": ip / ic,
                "wall_path_s": tp,
                "wall_cold_s": tc,
                "wall_ratio": tp / tc,
                "worst_objective_rel_diff": worst,
                "rows": rows,
            },
            args.results,
            notes=args.notes,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
