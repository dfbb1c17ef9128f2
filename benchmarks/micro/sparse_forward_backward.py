#!/usr/bin/env python
"""Sparse vs dense forward-backward recursions (Lavergne et al. 2010, 4.1): speed-up against
sparsity.

Position-dependent label-pair scores (what label-pair x observation features
give): per position, a fraction ``density`` of the L x L pairs has a non-zero
score, the rest is 0.  The dense recursion builds and exponentiates the full
L x L factor at every position (L^2 exponentials and products); the sparse one
touches only the listed pairs (r exponentials, O(L + r) work).  Both run on
the same sequences; the script prints the time per sequence of each, the
speed-up, and the largest difference between their node marginals (they must
agree to 1e-10).

With ``--conll2000``: real models instead -- CoNLL-2000 chunkers with
label-pair x observation features (the built-in chunking templates plus ``B``
lines on the POS tags), trained with OWL-QN at several L1 strengths ``--c1``
on the first ``--train-sentences`` sentences; for each model the marginals of
the test set are computed with ``CRFModel.decode(sparse=False)`` (the dense
per-position recursion) and ``sparse=True``, timed (best of 3), and compared.

Usage:  python benchmarks/micro/sparse_forward_backward.py [--labels 22 45] [--length 25] [--sequences 2000]
        python benchmarks/micro/sparse_forward_backward.py --conll2000 [--c1 0.1 1 5] [--train-sentences 3000]
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from crfkit.kernels.sparse_fb import dense_forward_backward, sparse_forward_backward


def make(rng, n, T, L, density):
    seqs = []
    for _ in range(n):
        score = rng.normal(size=(T, L)) * 2.0
        ptr = [0, 0]
        fr, to, sc = [], [], []
        for _t in range(1, T):
            k = rng.binomial(L * L, density)
            flat = rng.choice(L * L, size=k, replace=False)
            fr.extend((flat // L).tolist())
            to.extend((flat % L).tolist())
            sc.extend((rng.normal(size=k) * 1.5).tolist())
            ptr.append(len(fr))
        seqs.append(
            (
                score,
                np.array(ptr, np.int64),
                np.array(fr, np.int32),
                np.array(to, np.int32),
                np.array(sc, np.float64),
            )
        )
    return seqs


def bench(seqs, T, L):
    node_s = np.empty((T, L))
    node_d = np.empty((T, L))
    a, b, e = (np.empty((T, L)) for _ in range(3))
    scale = np.empty(2 * T)
    acc, mark, cnt = np.empty(L), np.empty(L), np.empty(L, np.int64)
    expM = np.empty((T, L, L))
    maxk = max(len(s[4]) for s in seqs)
    edge, em1 = np.empty(maxk), np.empty(maxk)
    # compile / warm up
    s0 = seqs[0]
    sparse_forward_backward(
        s0[0], T, s0[1], s0[2], s0[3], s0[4], node_s, edge, a, b, e, scale, em1, acc, mark, cnt
    )
    dense_forward_backward(s0[0], T, s0[1], s0[2], s0[3], s0[4], node_d, a, b, e, scale, expM)
    diff = 0.0
    t = time.perf_counter()
    for s in seqs:
        sparse_forward_backward(
            s[0], T, s[1], s[2], s[3], s[4], node_s, edge, a, b, e, scale, em1, acc, mark, cnt
        )
    ts = time.perf_counter() - t
    t = time.perf_counter()
    for s in seqs:
        dense_forward_backward(s[0], T, s[1], s[2], s[3], s[4], node_d, a, b, e, scale, expM)
    td = time.perf_counter() - t
    for s in seqs[:200]:
        zs = sparse_forward_backward(
            s[0], T, s[1], s[2], s[3], s[4], node_s, edge, a, b, e, scale, em1, acc, mark, cnt
        )
        zd = dense_forward_backward(s[0], T, s[1], s[2], s[3], s[4], node_d, a, b, e, scale, expM)
        diff = max(diff, float(np.abs(node_s - node_d).max()), abs(zs - zd) / abs(zd))
    return ts / len(seqs), td / len(seqs), diff


BIGRAM_TEMPLATES = """\
B
B10:%x[0,1]
B11:%x[-1,1]/%x[0,1]
"""


def conll_models(args) -> int:
    from crfkit.datasets import find_file
    from crfkit.features.templates import Templates, default_chunking_templates
    from crfkit.pipeline import load_columns, train_columns

    tpl = Templates.parse(
        "\n".join(
            line for line in default_chunking_templates().source.splitlines() if line.strip() != "B"
        )
        + "\n"
        + BIGRAM_TEMPLATES,
        name="<benchmark templates>",
    )
    train_path = find_file("conll2000/train.txt.gz", args.data_dir)
    test_path = find_file("conll2000/test.txt.gz", args.data_dir)
    import gzip
    import io

    with gzip.open(train_path, "rt") as f:
        text = f.read()
    sents = text.split("\n\n")[: args.train_sentences]
    sub = io.StringIO("\n\n".join(sents) + "\n")
    X, Y, sentences = load_columns(test_path, tpl)
    print(
        f"CoNLL-2000: {len(sents)} training sentences, test set {len(sentences)} sentences; "
        f"templates: chunking U lines + B, B10:%x[0,1], B11:%x[-1,1]/%x[0,1]; OWL-QN, c2=1; one thread for timing"
    )
    print(
        f"{'c1':>6s} {'features':>9s} {'active':>8s} {'pair features':>14s} {'active':>7s} "
        f"{'pairs/position':>15s} {'density':>8s} {'dense s':>8s} {'sparse s':>9s} {'speed-up':>9s} {'max |diff|':>11s}"
    )
    for c1 in args.c1:
        sub.seek(0)
        res = train_columns(
            sub, tpl, c1=c1, max_iterations=args.max_iterations, threads=args.threads
        )
        m = res.model
        sp = m.space
        from crfkit.features.encode import encode

        B = [tpl.apply_bigram(s.columns, pad=True) for s in sentences]
        corpus = encode(X, sp, B=B)
        times = {}
        out = {}
        for mode in (False, True):
            best = float("inf")
            for _ in range(3):
                t = time.perf_counter()
                out[mode] = m.decode(corpus, path=False, marginals=True, threads=1, sparse=mode)
                best = min(best, time.perf_counter() - t)
            times[mode] = best
        diff = float(np.abs(out[True]["marginals"] - out[False]["marginals"]).max())
        dens = m.pair_density(corpus)
        L = sp.n_labels
        wb = m.weights[sp.bigram_offset : sp.bigram_offset + sp.n_bigram]
        print(
            f"{c1:6g} {sp.n_features:9d} {m.n_active:8d} {sp.n_bigram:14d} {int(np.count_nonzero(wb)):7d} "
            f"{dens * L * L:15.1f} {100 * dens:7.1f}% {times[False]:8.3f} {times[True]:9.3f} "
            f"{times[False] / times[True]:8.2f}x {diff:11.1e}",
            flush=True,
        )
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--labels", type=int, nargs="+", default=[22, 45])
    ap.add_argument("--length", type=int, default=25)
    ap.add_argument("--sequences", type=int, default=2000)
    ap.add_argument(
        "--densities", type=float, nargs="+", default=[0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0]
    )
    ap.add_argument(
        "--conll2000", action="store_true", help="real L1-trained CoNLL-2000 models instead"
    )
    ap.add_argument("--c1", type=float, nargs="+", default=[0.1, 1.0, 5.0])
    ap.add_argument("--train-sentences", type=int, default=3000)
    ap.add_argument("--max-iterations", type=int, default=150)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--data-dir", default=None)
    args = ap.parse_args(argv)
    if args.conll2000:
        return conll_models(args)
    rng = np.random.default_rng(0)
    T = args.length
    print(f"{args.sequences} sequences of {T} tokens, one thread; times per sequence")
    print(
        f"{'labels':>6s} {'non-zero pairs':>15s} {'per position':>13s} {'sparse us':>10s} {'dense us':>10s} "
        f"{'speed-up':>9s} {'max |diff|':>11s}"
    )
    for L in args.labels:
        for d in args.densities:
            seqs = make(rng, args.sequences, T, L, d)
            ts, td, diff = bench(seqs, T, L)
            print(
                f"{L:6d} {100 * d:14.1f}% {d * L * L:13.1f} {ts * 1e6:10.1f} {td * 1e6:10.1f} "
                f"{td / ts:8.1f}x {diff:11.1e}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
