#!/usr/bin/env python
"""The sklearn-crfsuite CoNLL-2002 Spanish NER tutorial, with sklearn-crfsuite and
with crfkit, changing only the import.

The tutorial's token features (``word2features``: bias, lower-cased word, 2- and
3-letter suffixes, upper/title/digit flags, POS and its 2-letter prefix, the
same for the previous and next word, BOS/EOS) are built by one function here
and fed identically to both; the estimator is constructed with the same call::

    CRF(algorithm="lbfgs", c1=0.1, c2=0.1, max_iterations=100, all_possible_transitions=True)

Each library runs in its own subprocess (peak RSS is its own). Scores, computed
by the same code for both: token-level F1 weighted over the non-O labels (the
tutorial's ``flat_f1_score(..., average="weighted", labels=...)``) and
entity-level conlleval F1.

Usage:  python benchmarks/peers/sklearn_crfsuite_port.py [--data-dir DIR] [--json OUT]
Needs sklearn-crfsuite (pip install -e '.[bench]').
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time


def token_features(sent, i: int) -> dict:
    """The tutorial's feature set for token i of a sentence of [word, POS] rows."""
    word, pos = sent[i][0], sent[i][1]
    f = {
        "bias": 1.0,
        "word.lower()": word.lower(),
        "word[-3:]": word[-3:],
        "word[-2:]": word[-2:],
        "word.isupper()": word.isupper(),
        "word.istitle()": word.istitle(),
        "word.isdigit()": word.isdigit(),
        "postag": pos,
        "postag[:2]": pos[:2],
    }
    for off, name in ((-1, "-1"), (1, "+1")):
        j = i + off
        if 0 <= j < len(sent):
            w, p = sent[j][0], sent[j][1]
            f[f"{name}:word.lower()"] = w.lower()
            f[f"{name}:word.istitle()"] = w.istitle()
            f[f"{name}:word.isupper()"] = w.isupper()
            f[f"{name}:postag"] = p
            f[f"{name}:postag[:2]"] = p[:2]
        else:
            f["BOS" if off < 0 else "EOS"] = True
    return f


def load(ddir: str, split: str):
    from crfkit.io.columns import read_columns_list

    sents = read_columns_list(os.path.join(ddir, "conll2002", f"esp.{split}.gz"))
    X = [[token_features(s.columns, i) for i in range(len(s))] for s in sents]
    return X, [s.labels for s in sents]


def worker(lib: str, ddir: str) -> dict:
    if lib == "crfkit":
        import crfkit as sklearn_crfsuite  # the port: this import is the only change
    else:
        import sklearn_crfsuite
    X_train, y_train = load(ddir, "train")
    X_test, y_test = load(ddir, "testb")
    crf = sklearn_crfsuite.CRF(
        algorithm="lbfgs", c1=0.1, c2=0.1, max_iterations=100, all_possible_transitions=True
    )
    t0 = time.perf_counter()
    crf.fit(X_train, y_train)
    fit_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    y_pred = crf.predict(X_test)
    predict_s = time.perf_counter() - t0

    from sklearn.metrics import f1_score

    from crfkit.metrics import conlleval

    labels = [lab for lab in crf.classes_ if lab != "O"]
    flat_true = [lab for s in y_test for lab in s]
    flat_pred = [lab for s in y_pred for lab in s]
    return {
        "lib": lib,
        "fit_s": fit_s,
        "predict_s": predict_s,
        "flat_f1": float(f1_score(flat_true, flat_pred, average="weighted", labels=labels)),
        "conll_f1": conlleval(y_test, y_pred).f1 / 100.0,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "test_tokens": len(flat_true),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument(
        "--results",
        metavar="FILE.jsonl",
        default=None,
        help="also append the figures as one record (benchmarks/_results.py: command, date, "
        "commit, machine, figures) to FILE.jsonl, e.g. benchmarks/results/NAME.jsonl",
    )
    ap.add_argument("--worker", choices=["sklearn_crfsuite", "crfkit"], help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    ddir = args.data_dir or os.environ.get("CRFKIT_DATA") or os.path.join("..", "shared", "data")
    if args.worker:
        res = worker(args.worker, ddir)
        with open(args.out + ".tmp", "w") as f:
            json.dump(res, f)
        os.replace(args.out + ".tmp", args.out)
        return 0
    if not os.path.exists(os.path.join(ddir, "conll2002", "esp.train.gz")):
        print(f"CoNLL-2002 not found under {ddir} (set CRFKIT_DATA or --data-dir)", file=sys.stderr)
        return 2
    res = {}
    with tempfile.TemporaryDirectory(prefix="crfkit-port-") as tmp:
        # numba compiles once per installation and caches the machine code on
        # disk: load (or build) that cache before the timed runs
        subprocess.run(
            [
                sys.executable,
                "-c",
                "from crfkit.train import train; "
                "train([[['a'], ['b']]] * 3, [['x', 'y']] * 3, max_iterations=2, c1=0.1)",
            ],
            check=True,
        )
        for lib in ("sklearn_crfsuite", "crfkit"):
            out = os.path.join(tmp, lib + ".json")
            subprocess.run(
                [
                    sys.executable,
                    os.path.abspath(__file__),
                    "--worker",
                    lib,
                    "--data-dir",
                    ddir,
                    "--out",
                    out,
                ],
                check=True,
            )
            with open(out) as f:
                res[lib] = json.load(f)
            print(f"{lib} done: fit {res[lib]['fit_s']:.1f}s", flush=True)
    a, b = res["sklearn_crfsuite"], res["crfkit"]
    print()
    print(f"{'':34s} {'sklearn-crfsuite':>17s} {'crfkit':>12s} {'ratio':>8s}")
    for label, key, fmt in (
        ("fit wall time, s", "fit_s", "{:.2f}"),
        ("predict wall time, s", "predict_s", "{:.2f}"),
        ("peak RSS, MB", "peak_rss_mb", "{:.1f}"),
        ("flat F1 (weighted, non-O labels)", "flat_f1", "{:.4f}"),
        ("entity F1 (conlleval)", "conll_f1", "{:.4f}"),
    ):
        print(
            f"{label:34s} {fmt.format(a[key]):>17s} {fmt.format(b[key]):>12s} {b[key] / a[key]:8.3f}"
        )
    print("targets:")
    print(
        f"  same scores within 0.005: {'PASS' if abs(a['flat_f1'] - b['flat_f1']) <= 0.005 and abs(a['conll_f1'] - b['conll_f1']) <= 0.005 else 'FAIL'}"
        f" (flat {b['flat_f1'] - a['flat_f1']:+.4f}, conlleval {b['conll_f1'] - a['conll_f1']:+.4f})"
    )
    print(
        f"  at most half the wall time (fit): {'PASS' if b['fit_s'] <= 0.5 * a['fit_s'] else 'FAIL'} "
        f"({b['fit_s'] / a['fit_s']:.3f}x)"
    )
    if args.json:
        with open(args.json + ".tmp", "w") as f:
            json.dump(res, f, indent=1)
        os.replace(args.json + ".tmp", args.json)
    if args.results:  # one record in the benchmarks/results/ schema
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        import _results

        _results.record(res, args.results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
