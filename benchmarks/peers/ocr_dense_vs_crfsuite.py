#!/usr/bin/env python
"""OCR letters through crfkit's dense-feature path, against the same problem as
sparse pixel attributes (crfkit and CRFsuite).

The 128 binary pixels of each letter go in three ways:

* ``crfkit dense``: one (letters x 128) matrix per word (``train(None, Y,
  dense=X)``): emissions are ``X @ W`` and the gradient ``X^T (marginals -
  gold)``, BLAS products;
* ``crfkit sparse``: attribute ``p<k>`` for every pixel that is on;
* ``crfsuite``: the same attributes through python-crfsuite.

All three with every (pixel, label) and every label pair as a feature
(crfkit ``support="all"``, CRFsuite ``feature.possible_states`` and
``possible_transitions``), L-BFGS, ``c2`` the same, CRFsuite's stopping rule
(delta 1e-5 over 10 iterations): the same objective, so the objectives at the
end must agree and so must the test errors.  Printed: training time,
iterations, objective (CRFsuite units), letter error on the test folds, and
time relative to CRFsuite.

Split (see ../shared/data/README.md): ``ocr2`` trains on folds 1-9 (6,251
words) and tests on fold 0; ``ocr`` the other way round.

Usage:  python benchmarks/peers/ocr_dense_vs_crfsuite.py [--split ocr2] [--c2 1.0] [--threads N] [--data-dir DIR]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time


def letter_error(pred, gold) -> float:
    n = sum(len(g) for g in gold)
    wrong = sum(p != g for ps, gs in zip(pred, gold) for p, g in zip(ps, gs))
    return 100.0 * wrong / n


def run_crfkit(kind, Xtr, Ytr, Xte, Yte, args):
    from crfkit.datasets import pixel_attributes
    from crfkit.train import train

    kw = dict(
        support="all",
        transitions="all",
        c2=args.c2,
        threads=args.threads,
        max_iterations=args.max_iterations,
    )
    t = time.perf_counter()
    if kind == "dense":
        res = train(None, Ytr, dense=Xtr, **kw)
        secs = time.perf_counter() - t
        pred = res.model.tag(None, dense=Xte)
    else:
        res = train(pixel_attributes(Xtr, bias=False), Ytr, **kw)
        secs = time.perf_counter() - t
        pred = res.model.tag(pixel_attributes(Xte, bias=False))
    return {
        "train_s": secs,
        "iterations": res.iterations,
        "objective": res.objective_crfsuite,
        "error": letter_error(pred, Yte),
        "features": res.model.space.n_features,
    }


def run_crfsuite(Xtr, Ytr, Xte, Yte, args):
    import pycrfsuite

    from crfkit.datasets import pixel_attributes

    tr = pycrfsuite.Trainer(verbose=False)
    for x, y in zip(pixel_attributes(Xtr, bias=False), Ytr):
        tr.append(x, y)
    params = {
        "c1": 0.0,
        "c2": args.c2,
        "feature.possible_states": True,
        "feature.possible_transitions": True,
    }
    if args.max_iterations:
        params["max_iterations"] = args.max_iterations
    tr.set_params(params)
    with tempfile.TemporaryDirectory(prefix="crfkit-ocr-") as d:
        path = os.path.join(d, "m.crfsuite")
        t = time.perf_counter()
        tr.train(path)
        secs = time.perf_counter() - t
        info = tr.logparser.last_iteration
        tagger = pycrfsuite.Tagger()
        tagger.open(path)
        pred = [tagger.tag(x) for x in pixel_attributes(Xte, bias=False)]
        tagger.close()
    return {
        "train_s": secs,
        "iterations": len(tr.logparser.iterations),
        "objective": info["loss"],
        "error": letter_error(pred, Yte),
        "features": None,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--split", choices=("ocr", "ocr2"), default="ocr2")
    ap.add_argument("--c2", type=float, default=1.0)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--max-iterations", type=int, default=None)
    ap.add_argument("--data-dir", default=None)
    args = ap.parse_args(argv)
    from crfkit.datasets import ocr_letters_split

    try:
        Xtr, Ytr, Xte, Yte = ocr_letters_split(args.split, data_dir=args.data_dir)
    except Exception as e:  # noqa: BLE001 - any reason the data is missing
        print(f"OCR letters not found ({e}); set CRFKIT_DATA or --data-dir", file=sys.stderr)
        return 2
    print(
        f"OCR letters, split {args.split}: {len(Xtr)} training words ({sum(map(len, Ytr))} letters), "
        f"{len(Xte)} test words; c2={args.c2:g}; crfkit threads: {args.threads}; cores: {os.cpu_count()}",
        flush=True,
    )
    rows = {}
    try:
        import pycrfsuite  # noqa: F401

        rows["crfsuite (pixel attributes)"] = run_crfsuite(Xtr, Ytr, Xte, Yte, args)
        print("crfsuite done", flush=True)
    except ImportError:
        print("python-crfsuite is not installed: no CRFsuite row", flush=True)
    rows["crfkit dense block"] = run_crfkit("dense", Xtr, Ytr, Xte, Yte, args)
    print("crfkit dense done", flush=True)
    rows["crfkit pixel attributes"] = run_crfkit("sparse", Xtr, Ytr, Xte, Yte, args)
    print("crfkit sparse done", flush=True)
    ref = rows.get("crfsuite (pixel attributes)")
    print()
    print(
        f"{'trainer':32s} {'train s':>9s} {'iters':>6s} {'objective (CRFsuite units)':>27s} "
        f"{'letter error %':>15s} {'time vs crfsuite':>17s}"
    )
    for name, r in rows.items():
        ratio = f"{r['train_s'] / ref['train_s']:.2f}x" if ref else "-"
        print(
            f"{name:32s} {r['train_s']:9.2f} {r['iterations']:6d} {r['objective']:27.6f} "
            f"{r['error']:15.2f} {ratio:>17s}"
        )
    objs = [r["objective"] for r in rows.values()]
    print(f"\nlargest relative objective difference: {(max(objs) - min(objs)) / min(objs):.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
