#!/usr/bin/env python
"""How many evaluations of f' the sdca line search takes, and how close its gamma lands to the root,
on the steps a gap-sampled run takes.

    PYTHONPATH=src python benchmarks/micro/sdca_line_search_evals.py [--data conll2000] [--warm 2] [--sample 500]
        [--tol 1e-3]

The run first makes ``--warm`` epochs of sdca (gap sampling, mixing 0.2; lambda = the bench's 1/n).
Then ``--sample`` sequences are drawn as the sampler draws them (with probability 0.2 uniformly,
else in proportion to the stored gaps), and on each the step's prefix is computed (scores,
marginals, gap pass, direction: ``kernels.sdca.load_gap`` and friends) and the line search called
twice on the same entries: at ``--tol`` (counting its evaluations of f') and at 1e-13 (the root).
The store is not updated, so every sample starts from the same point.  Printed: evaluations per
search (mean and histogram), the distance of the first guess (``first_guess``) and of the returned
gamma to the root.  The script only calls functions that the line search had before and after the
certified Taylor stop, so that it runs on both codes.
"""

from __future__ import annotations

import argparse
import os

import numpy as np

from crfkit.bench import data as D
from crfkit.kernels import sdca as K
from crfkit.objective import Objective, Regularization
from crfkit.optim import sdca as S


def main(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--data", default="conll2000")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--warm", type=int, default=2)
    ap.add_argument("--sample", type=int, default=500)
    ap.add_argument("--tol", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    bd = D.load(a.data, a.data_dir)
    space, corp, _ = bd.encoded()
    n = corp.n_sequences
    reg = Regularization(l2=bd.default_l2)
    obj = Objective(corp, space, reg, threads=1)
    run = S._Dual("sdca", obj, None, reg.l2, 0, None, np.float32, "gold", 10.0, K.GAP)
    if a.warm:
        run.run_until(K.SDCA, K.GAP, 0.2, 1e-3, a.warm * n)
    run.recompute_w()
    c, s = corp, space
    LL = s.n_labels**2
    pair2 = run.pair_store.reshape((run.pair_store.shape[0], LL))
    pn2 = run.pair_n.reshape((run.pair_n.shape[0], LL))
    f = run.flat
    wscr = run.w.copy()
    rng = np.random.default_rng(a.seed)
    gp = np.maximum(run.gaps, 0.0)
    gp = gp / gp.sum() if gp.sum() > 0 else np.full(n, 1.0 / n)
    idx = np.where(
        rng.random(a.sample) < 0.2, rng.integers(0, n, a.sample), rng.choice(n, a.sample, p=gp)
    )
    evals, d_guess, d_gamma = [], [], []
    for i in idx:
        i = int(i)
        t0 = int(c.seq_ptr[i])
        T = int(c.seq_ptr[i + 1]) - t0
        if T == 0:
            continue
        e0 = int(run.eptr[i])
        K._trans_into(run.w, s.n_state, s.trans_index, run.trans)
        K.occ_emissions(
            c.tok_ptr, run.ok0, run.onk, c.val, run.lab, t0, t0 + T, run.w, 1.0, run.score
        )
        K.chain_marginals(
            run.score, T, run.trans, run.es, run.alpha, run.beta, run.scale, run.node_n, run.pair_n
        )
        gap, fp0, c0, c1 = K.load_gap(
            T, t0, e0, run.node_store, pair2, run.node_n, pn2, run.m_node, run.d_node, run.tdir, f
        )
        na = K.accumulate_direction(
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
        q = K.direction_norm2(s.attr_ptr, run.acc, run.alist, na, run.tdir, s.trans_index) / run.l2n
        # clears acc for the next sample (a step of 0 on a scratch copy of w)
        K.apply_direction(
            s.attr_ptr, run.acc, run.alist, na, run.tdir, s.trans_index, s.n_state, 0.0, wscr
        )
        if not (np.isfinite(fp0) and fp0 > 0.0 and q > 0.0):
            continue
        isc = np.zeros(K.N_ISC, dtype=np.int64)
        ent = K.ls_entries(T, t0, e0, run.node_store, run.pair_store, run.node_n, run.pair_n)
        g = K.line_search(*ent, q, fp0, c0, c1, a.tol, f[0], f[1], isc)
        evals.append(int(isc[K.I_LS]))
        root = K.line_search(*ent, q, fp0, c0, c1, 1e-13, f[0], f[1], isc)
        d_guess.append(abs(K.first_guess(fp0, q, c0, c1) - root))
        d_gamma.append(g - root)
    ev = np.array(evals)
    dg = np.array(d_gamma)
    print(
        f"{a.data}: after {a.warm} epochs of sdca (gap), {len(ev)} sampled line searches at tol {a.tol:g}; "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    print(
        f"  evaluations of f' per search: {ev.mean():.3f}; histogram (1, 2, 3, ...): "
        f"{np.bincount(ev, minlength=4)[1:].tolist()}"
    )
    print(f"  first guess to the root: median {np.median(d_guess):.2e}")
    print(
        f"  gamma - root: median |.| {np.median(np.abs(dg)):.2e}, min {dg.min():.2e}, max {dg.max():.2e}"
    )


if __name__ == "__main__":
    main()
