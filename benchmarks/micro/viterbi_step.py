"""CPU microseconds per Viterbi decode (T = 24) of crfkit's kernel (``kernels.chain.viterbi``)
against three other forms of the max over predecessors, for L = 3, 22 (CoNLL-2000's chunk tags), 45
(PTB's tags), in one run.

* ``scan``: the form crfkit had until 2026-11-30 (j outside, i inside: reads ``trans`` by column,
  one running (max, arg max) per j, the arg max kept per (t, j));
* ``transposed``: ``trans`` transposed once per sequence so that the i loop reads contiguous memory;
  the max taken first (branch-free select), the arg max found by a second scan;
* ``i-outer``: i outside and j inside (row i of ``trans`` contiguous), the running maxima and arg
  maxima of all j kept with selects (a loop LLVM may vectorise);
* ``crfkit``: the kernel's form: i outside and j inside keeping the maxima only (one compare-select
  per (i, j)), the arg max found on the way back for the path's labels alone (the first i whose sum
  equals the maximum: the same sum, so the equality is exact).

All four give the same paths and scores (checked).  CPU time (``time.process_time``), best of three
batches of 20,000 decodes, so that other jobs on a shared machine count less.

Usage:  PYTHONPATH=src python benchmarks/micro/viterbi_step.py
"""

import time

import numpy as np
from numba import njit

from crfkit.kernels.chain import FAST, viterbi


@njit(fastmath=FAST, inline="always")
def _backtrace(delta, back, T, out, o0):
    # the scan forms' way back: the best last label, then the stored arg maxima
    L = delta.shape[1]
    best = -np.inf
    arg = 0
    for j in range(L):
        if delta[T - 1, j] > best:
            best = delta[T - 1, j]
            arg = j
    out[o0 + T - 1] = arg
    for t in range(T - 1, 0, -1):
        arg = back[t, arg]
        out[o0 + t - 1] = arg
    return best


@njit(fastmath=FAST, inline="always")
def step_old(delta, back, t, trans, score):
    L = trans.shape[0]
    for j in range(L):
        best = -np.inf
        arg = 0
        for i in range(L):
            v = delta[t - 1, i] + trans[i, j]
            if v > best:
                best = v
                arg = i
        delta[t, j] = best + score[t, j]
        back[t, j] = arg


@njit(fastmath=FAST, inline="always")
def step_T(delta, back, t, tT, score):
    # tT[j, i] = trans[i, j]; two passes: max (4 accumulators), then first index reaching it
    L = tT.shape[0]
    prev = delta[t - 1]
    for j in range(L):
        r = tT[j]
        best = -np.inf
        for i in range(L):
            v = prev[i] + r[i]
            best = v if v > best else best
        arg = 0
        for i in range(L):
            if prev[i] + r[i] == best:
                arg = i
                break
        delta[t, j] = best + score[t, j]
        back[t, j] = arg


@njit(fastmath=FAST, inline="always")
def step_io(delta, back, t, trans, score, best, arg):
    L = trans.shape[0]
    for j in range(L):
        best[j] = -np.inf
        arg[j] = 0
    for i in range(L):
        a = delta[t - 1, i]
        tr = trans[i]
        for j in range(L):
            x = a + tr[j]
            c = x > best[j]
            best[j] = x if c else best[j]
            arg[j] = i if c else arg[j]
    for j in range(L):
        delta[t, j] = best[j] + score[t, j]
        back[t, j] = arg[j]


@njit(fastmath=FAST)
def vit(kind, score, T, trans, out):
    L = trans.shape[0]
    if kind == 3:
        return viterbi(score, T, trans, out, 0)
    delta = np.empty((T, L))
    back = np.empty((T, L), dtype=np.int32)
    for j in range(L):
        delta[0, j] = score[0, j]
    if kind == 0:
        for t in range(1, T):
            step_old(delta, back, t, trans, score)
    elif kind == 1:
        tT = trans.T.copy()
        for t in range(1, T):
            step_T(delta, back, t, tT, score)
    else:
        best = np.empty(L)
        arg = np.empty(L, dtype=np.int32)
        for t in range(1, T):
            step_io(delta, back, t, trans, score, best, arg)
    return _backtrace(delta, back, T, out, 0)


@njit
def loop(kind, score, trans, out, reps):
    s = 0.0
    for r in range(reps):
        s += vit(kind, score, score.shape[0], trans, out)
    return s


def main():
    rng = np.random.default_rng(0)
    for L in (3, 22, 45):
        score = rng.normal(size=(24, L))
        trans = rng.normal(size=(L, L))
        outs = [np.zeros(24, np.int64) for _ in range(4)]
        vals = [vit(k, score, 24, trans, outs[k]) for k in range(4)]
        assert vals[0] == vals[1] == vals[2] == vals[3] and all((outs[0] == o).all() for o in outs)
        for k in range(4):
            loop(k, score, trans, outs[0], 1)
        reps = 20000
        res = {}
        for rep in range(3):
            for k in range(4):
                t = time.process_time()
                loop(k, score, trans, outs[0], reps)
                res.setdefault(k, []).append(time.process_time() - t)
        print(
            f"L={L}: scan {min(res[0]) / reps * 1e6:.2f} us, transposed-2pass {min(res[1]) / reps * 1e6:.2f}, "
            f"i-outer {min(res[2]) / reps * 1e6:.2f}, crfkit (maxima, then back) {min(res[3]) / reps * 1e6:.2f}"
        )


if __name__ == "__main__":
    main()
