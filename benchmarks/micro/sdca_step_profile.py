#!/usr/bin/env python
"""Where an sdca step's time goes: each phase of ``kernels.sdca.sdca_step`` timed on its own.

    PYTHONPATH=src python benchmarks/micro/sdca_step_profile.py [--data conll2000] [--warm 2] [--sample 2000]
        [--c1 0]

The run first makes ``--warm`` epochs of sdca (gap sampling; lambda = the bench's 1/n, and with
``--c1`` > 0 the elastic net, l1 = c1/n), so that the marginals are those of a run in progress, not
of the initialisation.  Then, on ``--sample`` sequences drawn uniformly, it calls the step's phases
one by one from Python, as ``sdca_step`` does, and times each call (``perf_counter_ns``), minus the
cost of dispatching an empty numba function with as many arguments (measured once per argument
count, ``timed``):

    scores      emission scores at w (``occ_emissions``) and the transition matrix
    oracle      forward-backward marginals (``chain_marginals_pf``, as the step: prefetching the stored rows
                that the gap pass reads): what sag-nus*'s step also pays, but for the prefetches
    gap         the sweep over the stored marginals, edge by edge, with a vectorised log per entry:
                individual gap, f'(0), the end curvatures c0, c1, the transition direction (``load_gap``)
    direction   the primal direction over the sequence's attributes (``accumulate_direction``)
    search      the exact line search (``line_search`` / ``line_search_enet`` with its packing)
    update      w += gamma u on the touched coordinates, and the store written back

The phases run on the same data as the step but the store is left unchanged (the last two phases
write into copies), so every sampled step starts from the same point.  Shares are of the sum of the
phases.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from numba import njit

from crfkit.bench import data as D
from crfkit.kernels import sdca as K
from crfkit.objective import Objective, Regularization
from crfkit.optim import sdca as S


@njit(cache=False)
def _empty(*args):
    return 0


def dispatch_ns(nargs, reps=20000):
    args = tuple(np.zeros(1) for _ in range(nargs))
    _empty(*args)
    t = time.perf_counter_ns()
    for _ in range(reps):
        _empty(*args)
    return (time.perf_counter_ns() - t) / reps


_DISPATCH = {}


def timed(fn, *args):
    """(fn(*args), its ns less the dispatch of an empty function with as many arguments)."""
    k = len(args)
    if k not in _DISPATCH:
        _DISPATCH[k] = dispatch_ns(k)
    t = time.perf_counter_ns()
    r = fn(*args)
    return r, time.perf_counter_ns() - t - _DISPATCH[k]


def main(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--data", default="conll2000")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--warm", type=int, default=2)
    ap.add_argument("--sample", type=int, default=2000)
    ap.add_argument("--c1", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    bd = D.load(a.data, a.data_dir)
    space, corp, _ = bd.encoded()
    n = corp.n_sequences
    reg = Regularization(l1=a.c1 / n, l2=bd.default_l2)
    obj = Objective(corp, space, reg, threads=1)
    run = S._Dual("sdca", obj, None, reg.l2, 0, None, np.float32, "gold", 10.0, K.GAP, l1=reg.l1)
    run.run_until(K.SDCA, K.GAP, 0.2, 1e-3, a.warm * n)
    run.recompute_w()
    c, s = corp, space
    L = s.n_labels
    LL = L * L
    phases = ["scores", "oracle", "gap", "direction", "search", "update"]
    tot = dict.fromkeys(phases, 0.0)
    rng = np.random.default_rng(a.seed)
    idx = rng.integers(0, n, a.sample)
    pair2 = run.pair_store.reshape((run.pair_store.shape[0], LL))
    pn2 = run.pair_n.reshape((run.pair_n.shape[0], LL))
    f = run.flat
    nflat, pflat = run.node_store.reshape(-1), run.pair_store.reshape(-1)
    wcopy = run.w.copy()
    zcopy = run.z.copy() if run.kappa > 0 else wcopy
    ls_evals = 0
    tokens = 0
    warm = rng.integers(0, n, 50)  # first calls compile / load every function: not timed
    for k, i in enumerate(np.concatenate((warm, idx))):
        if k == len(warm):
            tot = dict.fromkeys(phases, 0.0)
            ls_evals = tokens = 0
        i = int(i)
        t0 = int(c.seq_ptr[i])
        T = int(c.seq_ptr[i + 1]) - t0
        if T == 0:
            continue
        tokens += T
        e0 = int(run.eptr[i])
        _, d1 = timed(K._trans_into, run.w, s.n_state, s.trans_index, run.trans)
        _, d2 = timed(
            K.occ_emissions,
            c.tok_ptr,
            run.ok0,
            run.onk,
            c.val,
            run.lab,
            t0,
            t0 + T,
            run.w,
            1.0,
            run.score,
        )
        tot["scores"] += d1 + d2
        _, d = timed(
            K.chain_marginals_pf,
            run.score,
            T,
            run.trans,
            run.es,
            run.alpha,
            run.beta,
            run.scale,
            run.node_n,
            run.pair_n,
            nflat,
            t0 * L,
            pflat,
            e0 * LL,
        )
        tot["oracle"] += d
        (gap, fp0, c0, c1), d = timed(
            K.load_gap,
            T,
            t0,
            e0,
            run.node_store,
            pair2,
            run.node_n,
            pn2,
            run.m_node,
            run.d_node,
            run.tdir,
            f,
        )
        tot["gap"] += d
        na, d = timed(
            K.accumulate_direction,
            c.tok_ptr,
            c.attr,
            run.ok0,
            run.onk,
            c.val,
            run.lab,
            run.bo,
            t0,
            t0 + T,
            run.d_node,
            run.acc,
            run.alist,
        )
        tot["direction"] += d
        isc = np.zeros(K.N_ISC, dtype=np.int64)
        # the line search's entries where they are (views, taken outside the timing: in the kernel
        # they cost nothing next to the search)
        ent = K.ls_entries(T, t0, e0, run.node_store, run.pair_store, run.node_n, run.pair_n)
        if run.kappa > 0:
            nz, d1 = timed(
                K.enet_pack,
                s.attr_ptr,
                run.acc,
                run.alist,
                na,
                run.tdir,
                s.trans_index,
                s.n_state,
                run.z,
                -1.0 / run.l2n,
                run.kappa,
                run.ez,
            )
            gamma, d2 = timed(
                K.line_search_enet,
                *ent,
                fp0,
                c0,
                c1,
                1e-3,
                f[0],
                f[1],
                isc,
                nz,
                run.ez,
                run.kappa,
                run.l2n,
            )
        else:
            q, d1 = timed(
                K.direction_norm2, s.attr_ptr, run.acc, run.alist, na, run.tdir, s.trans_index
            )
            gamma, d2 = timed(K.line_search, *ent, q / run.l2n, fp0, c0, c1, 1e-3, f[0], f[1], isc)
        tot["search"] += d1 + d2
        ls_evals += int(isc[K.I_LS])
        # the update into copies of w (z) and of the sequence's store rows
        nrows = run.node_store[t0 : t0 + T].copy()
        prows = pair2[e0 : e0 + max(T - 1, 0)].copy()
        if run.kappa > 0:
            _, d1 = timed(
                K.apply_direction_enet,
                s.attr_ptr,
                run.acc,
                run.alist,
                na,
                run.tdir,
                s.trans_index,
                s.n_state,
                -gamma / run.l2n,
                run.kappa,
                zcopy,
                wcopy,
            )
        else:
            _, d1 = timed(
                K.apply_direction,
                s.attr_ptr,
                run.acc,
                run.alist,
                na,
                run.tdir,
                s.trans_index,
                s.n_state,
                -gamma / run.l2n,
                wcopy,
            )
        _, d2 = timed(_mix, nrows, prows, run.m_node, run.node_n, pn2, T, gamma)
        tot["update"] += d1 + d2
    total = sum(tot.values())
    m = len(idx)
    print(
        f"{a.data}: n={n}, labels={L}, features={s.n_features}, l2={reg.l2:.3g}, l1={reg.l1:.3g}; after {a.warm} "
        f"epochs of sdca (gap); {m} sampled steps, {tokens / m:.1f} tokens per step, {ls_evals / m:.2f} "
        f"line-search evaluations per step; dispatch overhead subtracted (per call, by its argument count: "
        f"{min(_DISPATCH.values()):.0f}-{max(_DISPATCH.values()):.0f} ns); "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    print("| phase | us/step | share |")
    print("|---|---|---|")
    for p in phases:
        print(f"| {p} | {tot[p] / m / 1e3:.1f} | {100 * tot[p] / total:.0f}% |")
    print(f"| total | {total / m / 1e3:.1f} | 100% |")


@njit(cache=False)
def _mix(nrows, prows, m_node, node_n, pn2, T, gamma):
    omg = 1.0 - gamma
    L = nrows.shape[1]
    for t in range(T):
        for l in range(L):
            nrows[t, l] = omg * m_node[t, l] + gamma * node_n[t, l]
    for t in range(T - 1):
        row = prows[t]
        pn = pn2[t]
        for k in range(row.shape[0]):
            row[k] = omg * np.float64(row[k]) + gamma * pn[k]
    return 0


if __name__ == "__main__":
    main()
