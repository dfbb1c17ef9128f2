#!/usr/bin/env python
"""The sklearn-crfsuite tutorial's hyperparameter search, against ``crfkit.CRFSearchCV``.

The tutorial (CoNLL-2002 Spanish NER, its token features) searches c1 and c2 with
``RandomizedSearchCV``: c1 ~ expon(scale=0.5), c2 ~ expon(scale=0.05), 3 folds, scored by flat
F1 weighted over the labels other than 'O', each candidate a ``CRF(algorithm="lbfgs",
max_iterations=100, all_possible_transitions=True)``. Here:

* ``--side sklearn``: exactly that, ``RandomizedSearchCV(sklearn_crfsuite.CRF(...), ...,
  cv=KFold(3), n_jobs=1, random_state=SEED)``, timed from the features (dicts, built once and
  shared by both sides) to the refitted best estimator;
* ``--side crfkit``: ``crfkit.CRFSearchCV`` on the same candidate list (``ParameterSampler``
  with the same distributions and seed: the very draws RandomizedSearchCV makes), the same
  folds and scorer, with its reuse: features encoded once per fold, candidates ordered from
  strong to weak regularization and each warm-started from its nearest finished neighbour;
* ``--combine A.json B.json``: the comparison table (best CV F1 both found, the best settings,
  the dev (testa) F1 of each side's refitted best model, wall times, the ratio).

Each side runs in its own process; run them one after the other on a quiet machine for a fair
ratio (or concurrently, as noted in the record, when time is short: then both share the cores).

Usage:
  python benchmarks/peers/tune_vs_sklearn_search.py --side sklearn --n-iter 50 --out skl.json
  python benchmarks/peers/tune_vs_sklearn_search.py --side crfkit --n-iter 50 --out ck.json
  python benchmarks/peers/tune_vs_sklearn_search.py --combine skl.json ck.json [--results F]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from sklearn_crfsuite_port import load  # noqa: E402  (the tutorial's features, shared)


def flat_f1(estimator, X, y) -> float:
    """The tutorial's scorer: token F1 weighted over the labels other than 'O'."""
    from sklearn.metrics import f1_score

    pred = estimator.predict(X)
    labels = [lab for lab in estimator.classes_ if lab != "O"]
    return float(
        f1_score(
            [t for s in y for t in s],
            [t for s in pred for t in s],
            average="weighted",
            labels=labels,
            zero_division=0,
        )
    )


def candidates(n_iter: int, seed: int) -> list[dict]:
    """The draws RandomizedSearchCV makes for the tutorial's distributions."""
    import scipy.stats
    from sklearn.model_selection import ParameterSampler

    dist = {"c1": scipy.stats.expon(scale=0.5), "c2": scipy.stats.expon(scale=0.05)}
    return [
        {k: float(v) for k, v in p.items()}
        for p in ParameterSampler(dist, n_iter=n_iter, random_state=seed)
    ]


def cpu_s() -> float:
    """CPU seconds of this process, all threads (user + system)."""
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run_side(
    side: str,
    ddir: str,
    n_iter: int,
    seed: int,
    folds: int,
    subset: int,
    threads: int = 1,
    warm_iterations: int | None = None,
) -> dict:
    from sklearn.model_selection import KFold

    X, y = load(ddir, "train")
    if subset:
        X, y = X[:subset], y[:subset]
    Xd, yd = load(ddir, "testa")
    cands = candidates(n_iter, seed)
    cv = KFold(folds)
    t0, c0 = time.perf_counter(), cpu_s()
    if side == "sklearn":
        import scipy.stats
        import sklearn_crfsuite
        from sklearn.model_selection import RandomizedSearchCV

        crf = sklearn_crfsuite.CRF(
            algorithm="lbfgs", max_iterations=100, all_possible_transitions=True
        )
        dist = {"c1": scipy.stats.expon(scale=0.5), "c2": scipy.stats.expon(scale=0.05)}
        rs = RandomizedSearchCV(
            crf,
            dist,
            n_iter=n_iter,
            cv=cv,
            scoring=flat_f1,
            n_jobs=1,
            random_state=seed,
            verbose=1,
        )
        rs.fit(X, y)
        wall, cpu = time.perf_counter() - t0, cpu_s() - c0
        params = [{k: float(v) for k, v in p.items()} for p in rs.cv_results_["params"]]
        assert params == cands, "RandomizedSearchCV drew other candidates than ParameterSampler"
        scores = [float(s) for s in rs.cv_results_["mean_test_score"]]
        best, best_params, best_est = float(rs.best_score_), rs.best_params_, rs.best_estimator_
        extra = {}
    else:
        import crfkit

        crf = crfkit.CRF(
            algorithm="lbfgs", max_iterations=100, all_possible_transitions=True, threads=threads
        )
        rs = crfkit.CRFSearchCV(
            crf,
            cands,
            cv=cv,
            scoring=flat_f1,
            progress=True,
            warm_max_iterations=warm_iterations,
        )
        rs.fit(X, y)
        wall, cpu = time.perf_counter() - t0, cpu_s() - c0
        params = [dict(p) for p in rs.cv_results_["params"]]
        scores = [float(s) for s in rs.cv_results_["mean_test_score"]]
        best, best_params, best_est = float(rs.best_score_), rs.best_params_, rs.best_estimator_
        extra = {
            "iterations": [int(i) for i in rs.cv_results_["iterations"]],
            "total_iterations": int(sum(rs.cv_results_["iterations"])),
            "warm_max_iterations": warm_iterations,
        }
    return {
        "side": side,
        "n_iter": n_iter,
        "folds": folds,
        "seed": seed,
        "wall_s": wall,
        "cpu_s": cpu,
        "train_sentences": len(X),
        "threads": threads if side == "crfkit" else 1,
        "best_cv_f1": best,
        "best_params": {k: float(v) for k, v in best_params.items()},
        "dev_f1": flat_f1(best_est, Xd, yd),
        "params": params,
        "scores": scores,
        **extra,
    }


def combine(a: dict, b: dict) -> dict:
    print(
        f"search: {a['train_sentences']} training sentences, "
        f"{a['n_iter']} candidates x {a['folds']} folds, c1 ~ expon(0.5), "
        f"c2 ~ expon(0.05), seed {a['seed']}"
    )
    print(f"{'':30s} {'RandomizedSearchCV':>20s} {'crfkit.CRFSearchCV':>20s}")
    for label, key, fmt in (
        ("best CV flat F1 (3 folds)", "best_cv_f1", "{:.4f}"),
        ("dev (testa) flat F1, refit", "dev_f1", "{:.4f}"),
        ("wall time, s", "wall_s", "{:.1f}"),
        ("CPU time (all threads), s", "cpu_s", "{:.1f}"),
    ):
        print(f"{label:30s} {fmt.format(a[key]):>20s} {fmt.format(b[key]):>20s}")
    for side in (a, b):
        p = side["best_params"]
        print(f"  {side['side']:8s} best c1={p['c1']:.4f} c2={p['c2']:.4f}")
    d_cv = 100 * (b["best_cv_f1"] - a["best_cv_f1"])
    d_dev = 100 * (b["dev_f1"] - a["dev_f1"])
    ratio = b["wall_s"] / a["wall_s"]
    print("targets:")
    print(
        f"  same best F1 within 0.2 points: {'PASS' if abs(d_cv) <= 0.2 else 'FAIL'} "
        f"(CV {d_cv:+.2f}, dev {d_dev:+.2f} points)"
    )
    cratio = b["cpu_s"] / a["cpu_s"]
    print(f"  at most 0.1x the wall time: {'PASS' if ratio <= 0.1 else 'FAIL'} ({ratio:.3f}x)")
    print(f"  (CPU time ratio: {cratio:.3f}x)")
    return {
        "sklearn": {k: a[k] for k in ("wall_s", "cpu_s", "best_cv_f1", "best_params", "dev_f1")},
        "crfkit": {
            k: b[k]
            for k in ("wall_s", "cpu_s", "best_cv_f1", "best_params", "dev_f1", "total_iterations")
        },
        "train_sentences": a["train_sentences"],
        "cpu_ratio": cratio,
        "n_iter": a["n_iter"],
        "folds": a["folds"],
        "seed": a["seed"],
        "wall_ratio": ratio,
        "best_cv_f1_diff_points": d_cv,
        "dev_f1_diff_points": d_dev,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--side",
        choices=["sklearn", "crfkit", "both"],
        help="both: sklearn, then crfkit, each in its own process, then the table",
    )
    ap.add_argument(
        "--subset",
        type=int,
        default=0,
        metavar="N",
        help="only the first N training sentences (a reduced protocol; default all)",
    )
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="crfkit's threads (default 1: single-threaded, as CRFsuite and n_jobs=1)",
    )
    ap.add_argument(
        "--warm-iterations",
        type=int,
        default=None,
        metavar="N",
        help="crfkit: cap the warm-started candidates at N iterations (default: max_iterations)",
    )
    ap.add_argument("--keep", metavar="DIR", help="with --side both: keep the sides' JSON here")
    ap.add_argument("--combine", nargs=2, metavar=("SKLEARN.json", "CRFKIT.json"))
    ap.add_argument("--n-iter", type=int, default=50)
    ap.add_argument("--folds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--results", metavar="FILE.jsonl", default=None)
    ap.add_argument("--notes", default=None)
    args = ap.parse_args(argv)
    ddir = args.data_dir or os.environ.get("CRFKIT_DATA") or os.path.join("..", "shared", "data")
    if args.combine:
        with open(args.combine[0]) as f:
            a = json.load(f)
        with open(args.combine[1]) as f:
            b = json.load(f)
        fig = combine(a, b)
        if args.results:
            sys.path.insert(0, os.path.dirname(HERE))
            import _results

            _results.record(fig, args.results, notes=args.notes)
        return 0
    if not args.side:
        ap.error("--side or --combine")
    if args.side == "both":
        import subprocess

        out_dir = args.keep or os.path.join(os.path.dirname(HERE), "results", "tmp")
        os.makedirs(out_dir, exist_ok=True)
        outs = []
        for side in ("sklearn", "crfkit"):
            out = os.path.join(out_dir, f"tune_search_{side}.json")
            cmd = [sys.executable, os.path.abspath(__file__), "--side", side, "--out", out]
            cmd += ["--n-iter", str(args.n_iter), "--folds", str(args.folds)]
            cmd += ["--seed", str(args.seed), "--data-dir", ddir, "--subset", str(args.subset)]
            cmd += ["--threads", str(args.threads)]
            if args.warm_iterations is not None:
                cmd += ["--warm-iterations", str(args.warm_iterations)]
            subprocess.run(cmd, check=True)
            outs.append(out)
        return main(
            ["--combine", *outs]
            + (["--results", args.results] if args.results else [])
            + (["--notes", args.notes] if args.notes else [])
        )
    res = run_side(
        args.side,
        ddir,
        args.n_iter,
        args.seed,
        args.folds,
        args.subset,
        args.threads,
        args.warm_iterations,
    )
    print(
        f"{args.side}: best CV F1 {res['best_cv_f1']:.4f} at {res['best_params']}, "
        f"dev F1 {res['dev_f1']:.4f}, wall {res['wall_s']:.1f}s"
    )
    if args.out:
        with open(args.out + ".tmp", "w") as f:
            json.dump(res, f, indent=1)
        os.replace(args.out + ".tmp", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
