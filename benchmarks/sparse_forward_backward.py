#!/usr/bin/env python
"""Sparse vs dense forward-backward recursions (Lavergne et al. 2010, 4.1): speed-up against sparsity.

Position-dependent label-pair scores (what label-pair x observation features
give): per position, a fraction ``density`` of the L x L pairs has a non-zero
score, the rest is 0.  The dense recursion builds and exponentiates the full
L x L factor at every position (L^2 exponentials and products); the sparse one
touches only the listed pairs (r exponentials, O(L + r) work).  Both run on
the same sequences; the script prints the time per sequence of each, the
speed-up, and the largest difference between their node marginals (they must
agree to 1e-10).

Usage:  python benchmarks/sparse_forward_backward.py [--labels 22 45] [--length 25] [--sequences 2000]
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
        seqs.append((score, np.array(ptr, np.int64), np.array(fr, np.int32), np.array(to, np.int32),
                     np.array(sc, np.float64)))
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
    sparse_forward_backward(s0[0], T, s0[1], s0[2], s0[3], s0[4], node_s, edge, a, b, e, scale, em1, acc, mark, cnt)
    dense_forward_backward(s0[0], T, s0[1], s0[2], s0[3], s0[4], node_d, a, b, e, scale, expM)
    diff = 0.0
    t = time.perf_counter()
    for s in seqs:
        sparse_forward_backward(s[0], T, s[1], s[2], s[3], s[4], node_s, edge, a, b, e, scale, em1, acc, mark, cnt)
    ts = time.perf_counter() - t
    t = time.perf_counter()
    for s in seqs:
        dense_forward_backward(s[0], T, s[1], s[2], s[3], s[4], node_d, a, b, e, scale, expM)
    td = time.perf_counter() - t
    for s in seqs[:200]:
        zs = sparse_forward_backward(s[0], T, s[1], s[2], s[3], s[4], node_s, edge, a, b, e, scale, em1, acc, mark, cnt)
        zd = dense_forward_backward(s[0], T, s[1], s[2], s[3], s[4], node_d, a, b, e, scale, expM)
        diff = max(diff, float(np.abs(node_s - node_d).max()), abs(zs - zd) / abs(zd))
    return ts / len(seqs), td / len(seqs), diff


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--labels", type=int, nargs="+", default=[22, 45])
    ap.add_argument("--length", type=int, default=25)
    ap.add_argument("--sequences", type=int, default=2000)
    ap.add_argument("--densities", type=float, nargs="+", default=[0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0])
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    T = args.length
    print(f"{args.sequences} sequences of {T} tokens, one thread; times per sequence")
    print(f"{'labels':>6s} {'non-zero pairs':>15s} {'per position':>13s} {'sparse us':>10s} {'dense us':>10s} "
          f"{'speed-up':>9s} {'max |diff|':>11s}")
    for L in args.labels:
        for d in args.densities:
            seqs = make(rng, args.sequences, T, L, d)
            ts, td, diff = bench(seqs, T, L)
            print(f"{L:6d} {100 * d:14.1f}% {d * L * L:13.1f} {ts * 1e6:10.1f} {td * 1e6:10.1f} "
                  f"{td / ts:8.1f}x {diff:11.1e}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
