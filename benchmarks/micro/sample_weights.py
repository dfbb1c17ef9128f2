#!/usr/bin/env python
"""Sample weights on CoNLL-2000: weight 2 on every other training sentence against duplicating them.

Objective with weights (crfkit.objective):
``f(w) = (1/W) sum_i omega_i nll_i + (l2/2)||w||^2`` with ``W = sum_i omega_i``.
An integer weight must equal repeating the sentence, so this script

1. builds one feature space from the duplicated training set (the built-in
   chunking templates) and encodes both the weighted corpus (8,936 sentences,
   half of weight 2) and the duplicated one (13,404 sentences) against it;
2. evaluates both objectives and gradients at the same weight vectors (zero,
   and the trained model's): the figures must agree to rounding;
3. trains L-BFGS on each (CRFsuite's c2 = 1 converted with W = 13,404 for both,
   the same iteration budget) and tags the CoNLL-2000 test set with both
   models: objectives, chunk F1 and time per iteration side by side.

Usage: python benchmarks/micro/sample_weights.py [--data-dir DIR] [--threads 1] [--iterations 100]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "peers")
)
from conll2000_owlqn_vs_crfsuite import load_average  # noqa: E402  (the same `uptime` line)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--data-dir",
        default=os.environ.get(
            "CRFKIT_DATA",
            os.path.join(
                os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared", "data"
            ),
        ),
    )
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--c2", type=float, default=1.0)
    args = ap.parse_args(argv)
    from crfkit.features.encode import build, encode
    from crfkit.features.templates import default_chunking_templates
    from crfkit.metrics import conlleval
    from crfkit.objective import Objective, regularization
    from crfkit.parallel import set_threads
    from crfkit.pipeline import load_columns
    from crfkit.train import train_corpus

    train_path = os.path.join(args.data_dir, "conll2000", "train.txt.gz")
    test_path = os.path.join(args.data_dir, "conll2000", "test.txt.gz")
    if not os.path.exists(train_path):
        print(f"CoNLL-2000 not found under {args.data_dir} (--data-dir)", file=sys.stderr)
        return 2
    set_threads(args.threads)
    print(f"before: {load_average()}", flush=True)
    tpl = default_chunking_templates()
    X, Y, _ = load_columns(train_path, tpl)
    Xt, Yt, _ = load_columns(test_path, tpl)
    k = np.where(np.arange(len(X)) % 2 == 0, 2.0, 1.0)  # weight 2 on every other sentence
    Xd = [x for x, c in zip(X, k) for _ in range(int(c))]
    Yd = [y for y, c in zip(Y, k) for _ in range(int(c))]
    space, dup = build(Xd, Yd)
    cw = encode(X, space, Y)
    cw.weight = k
    W = float(k.sum())
    reg = regularization(W, c2=args.c2)
    print(
        f"CoNLL-2000 train: {len(X)} sentences, weights 2 on {int((k == 2).sum())} of them (W = {W:g}); "
        f"duplicated: {dup.n_sequences} sentences; {space.n_features} features; c2 = {args.c2:g} -> "
        f"l2 = 2 c2 / W = {reg.l2:.6g}; threads {args.threads}",
        flush=True,
    )
    ow, od = (
        Objective(cw, space, reg, threads=args.threads),
        Objective(dup, space, reg, threads=args.threads),
    )

    def compare(w, what):
        fw, gw = ow.value_and_grad(w)
        fd, gd = od.value_and_grad(w)
        rel_f = abs(fw - fd) / abs(fd)
        rel_g = float(np.abs(gw - gd).max() / max(np.abs(gd).max(), 1e-300))
        print(
            f"  at {what}: f weighted {fw:.15g}, duplicated {fd:.15g} (relative difference {rel_f:.1e}); "
            f"max |g_w - g_d| / max |g_d| = {rel_g:.1e}",
            flush=True,
        )
        return rel_f, rel_g

    print("objective and gradient at the same weights:")
    compare(np.zeros(space.n_features), "w = 0")
    results = {}
    for name, corpus in (("weighted", cw), ("duplicated", dup)):
        t = time.perf_counter()
        res = train_corpus(
            space,
            corpus,
            reg=reg,
            max_iterations=args.iterations,
            epsilon=0.0,
            delta=0.0,
            threads=args.threads,
            verbose=False,
        )
        secs = time.perf_counter() - t
        pred = res.model.tag(Xt)
        rep = conlleval(Yt, pred)
        results[name] = (res, secs, rep, pred)
        print(
            f"{name}: {res.iterations} L-BFGS iterations ({res.status}), {secs:.1f} s "
            f"({secs / max(res.iterations, 1):.3f} s/iteration), objective {res.objective:.12g} "
            f"(CRFsuite units {res.objective_crfsuite:.6f}); test chunk F1 {rep.f1:.4f}",
            flush=True,
        )
    rw, rd = results["weighted"][0], results["duplicated"][0]
    compare(rw.model.weights, "the weighted model's weights")
    same = sum(
        a == b
        for pa, pb in zip(results["weighted"][3], results["duplicated"][3])
        for a, b in zip(pa, pb)
    )
    total = sum(map(len, Yt))
    print(
        f"final objectives: relative difference {abs(rw.objective - rd.objective) / abs(rd.objective):.1e}; "
        f"max |w_weighted - w_duplicated| = {float(np.abs(rw.model.weights - rd.model.weights).max()):.2e}; "
        f"test F1 {results['weighted'][2].f1:.4f} vs {results['duplicated'][2].f1:.4f}; "
        f"{same} of {total} test tokens tagged alike"
    )
    print(
        f"time per iteration, weighted / duplicated: "
        f"{(results['weighted'][1] / max(rw.iterations, 1)) / (results['duplicated'][1] / max(rd.iterations, 1)):.2f}"
    )
    print(f"after: {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
