#!/usr/bin/env python
"""The first tagging call in a fresh process: crfkit against python-crfsuite's ``Tagger`` on the
CoNLL-2000 test set, one model for both.

What a user sees when a script loads a saved model and tags once: the model is read from its file
and the 2,012 test sentences are tagged from Python lists, in a process that has done nothing else
with either library (numba's kernels come from its on-disk cache, compiled before: ``crfkit
warmup``).  Per run, each of these runs in its own fresh process, in turns (so all see the same load):

* ``crfsuite``: ``Tagger().open(file)`` then ``[tagger.tag(x) for x in X]`` (X: attribute strings);
* ``strings``: ``CRFModel.load(file)`` then ``model.tag(X)`` (the same attribute strings);
* ``crfsuite-dicts``: ``Tagger().open(file)`` then ``[tagger.tag(d) for d in D]`` (D: sklearn-crfsuite's
  feature dicts of the same attributes, which python-crfsuite turns into its items itself: what
  ``sklearn_crfsuite.CRF.predict`` runs);
* ``dicts``: ``crfkit.CRF(model_filename=file).predict(D)`` (the same feature dicts).

Ratios: ``strings`` over ``crfsuite``, ``dicts`` over ``crfsuite-dicts`` (each over CRFsuite on the
same input).

The clock starts after the imports and the data lists are built (both libraries imported in every
process) and stops when the labels are back.  Printed: median and range over ``--runs`` of each, and
crfkit's over CRFsuite's.  The models are those of ``tag_lists_vs_crfsuite.py`` (trained there once
and kept in ``--model-dir``).

Usage:  python benchmarks/peers/first_predict_vs_crfsuite.py [--runs 3] [--model-dir DIR]
        [--data-dir DIR] [--results FILE.jsonl | --no-record]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conll2000_vs_crfsuite import data_dir  # noqa: E402

import _results  # noqa: E402  (standard library only)

CASES = ("crfsuite", "strings", "crfsuite-dicts", "dicts")
PEER = {"strings": "crfsuite", "dicts": "crfsuite-dicts"}  # each case's CRFsuite run, same input


def child(case: str, ddir: str, ck: str, cs: str) -> None:
    import pycrfsuite
    from tag_lists_vs_crfsuite import load

    import crfkit
    from crfkit.model import CRFModel

    D, S, _ = load(ddir, "test")
    t0 = time.perf_counter()
    if case in ("crfsuite", "crfsuite-dicts"):
        tagger = pycrfsuite.Tagger()
        tagger.open(cs)
        out = [tagger.tag(x) for x in (S if case == "crfsuite" else D)]
    elif case == "strings":
        out = CRFModel.load(ck).tag(S)
    else:
        out = crfkit.CRF(model_filename=ck).predict(D)
    dt = time.perf_counter() - t0
    print(json.dumps({"seconds": dt, "tokens": sum(map(len, out))}))


def main(argv=None) -> dict:
    from tag_lists_vs_crfsuite import common_arguments

    ap = common_arguments(__doc__)
    ap.add_argument("--child", choices=CASES, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--ck", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--cs", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.data_dir = data_dir(args.data_dir)
    if args.child:
        child(args.child, args.data_dir, args.ck, args.cs)
        return {}
    from tag_lists_vs_crfsuite import models

    ck, cs, info = models(args)
    times: dict = {c: [] for c in CASES}
    for r in range(args.runs):
        for c in CASES:
            p = subprocess.run(
                [
                    sys.executable,
                    os.path.abspath(__file__),
                    "--child",
                    c,
                    "--ck",
                    ck,
                    "--cs",
                    cs,
                    "--data-dir",
                    args.data_dir,
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            times[c].append(json.loads(p.stdout.strip().splitlines()[-1])["seconds"])
            print(f"run {r + 1} {c}: {times[c][-1]:.3f} s", flush=True)
    load_avg = os.getloadavg()
    rows, out = [], {"runs": times, **info}
    for c in ("strings", "dicts"):
        peer = times[PEER[c]]
        ratio = [a / b for a, b in zip(times[c], peer)]
        med = statistics.median(ratio)
        print(
            f"{c:8s} crfkit {statistics.median(times[c]):.3f} s "
            f"[{min(times[c]):.3f}-{max(times[c]):.3f}]  CRFsuite "
            f"{statistics.median(peer):.3f} s  crfkit/CRFsuite {med:.2f}x "
            f"[{min(ratio):.2f}-{max(ratio):.2f}]"
        )
        out[c] = {"ratio_median": med, "ratios": ratio}
        rows.append(
            {
                "measure": (
                    "first tagging call in a fresh process, model loaded from its file, s (median "
                    f"of {args.runs}): "
                    + (
                        "CRFModel.load + tag(strings) / Tagger.open + tag(strings)"
                        if c == "strings"
                        else "CRF.predict(dicts) / Tagger.open + tag(dicts)"
                    )
                ),
                "peer": f"{statistics.median(peer):.3f}",
                "crfkit": f"{statistics.median(times[c]):.3f}",
                "ratio": f"{med:.2f}x [{min(ratio):.2f}-{max(ratio):.2f}]",
                "better": "lower",
            }
        )
    print(f"load average {load_avg[0]:.2f} {load_avg[1]:.2f} {load_avg[2]:.2f}")
    if not args.no_record:
        import pycrfsuite

        _results.record(
            {
                "peer_family": "python-crfsuite / CRFsuite",
                "peer": f"python-crfsuite {getattr(pycrfsuite, '__version__', '')}".strip(),
                "task": "the first tagging call of a fresh process on the CoNLL-2000 test set",
                "rows": rows,
                "detail": out,
            },
            args.results,
            notes=f"load average {load_avg[0]:.2f} {load_avg[1]:.2f} {load_avg[2]:.2f}",
        )
    return out


if __name__ == "__main__":
    main()
