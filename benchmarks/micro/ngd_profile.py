#!/usr/bin/env python
"""Where an epoch of crfkit's l2sgd, ngd (each update), pa and ap goes, on CoNLL-2000 with
CRFsuite's chunking attributes (452,755 features): CPU seconds per epoch of cumulative stages of the
per-sequence step.

Each stage is a numba loop over one epoch's order (8,936 sequences) at fixed weights (those after
one epoch of the method, so that the marginals, the Viterbi mistakes and the ngd gradients are
realistic) and does the work of the previous stage plus one more part; a part's cost is the
difference of two stages.  The full steps are the kernels themselves (``run_steps`` with a step size
of about 0 so that the weights do not move, ``run_online`` on a copy of the weights), and the whole
epoch as the optimizer runs it (between two end-of-epoch callbacks, ``monitor=False``) gives the
per-epoch overhead outside the kernels.  Every figure is the minimum CPU time
(``time.process_time``) over ``--repeat`` runs.

Usage:  python benchmarks/micro/ngd_profile.py [--repeat 3] [--data-dir DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
from numba import njit

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "peers")
)
from conll2000_vs_crfsuite import data_dir, load  # noqa: E402

from crfkit.kernels.chain import (  # noqa: E402
    emissions_rows,
    exp_shift_into,
    gold_score,
    max_min,
    scaled_forward,
    viterbi,
)
from crfkit.kernels.occ import apply_gradient, emissions, oracle, transitions  # noqa: E402


# the stages read the occurrence layout (crfkit.kernels.occ) as the kernels do; work arrays
# preallocated
@njit(nogil=True)
def st_setup(seq_ptr, trans_index, n_state, order, v, trans, expM):
    """Per sequence: the transition matrix and its exp."""
    acc = 0.0
    for s in range(order.shape[0]):
        transitions(v, 1.0, n_state, trans_index, trans)
        tmax = max_min(trans)[0]
        exp_shift_into(trans.ravel(), tmax, expM.ravel())
        acc += expM[0, 0]
    return acc


@njit(nogil=True)
def st_emit(
    seq_ptr, tok_ptr, ok0, onk, val, lab, trans_index, n_state, order, v, trans, expM, score
):
    """+ the emission scores (the walk over the attribute occurrences)."""
    acc = 0.0
    for s in range(order.shape[0]):
        i = order[s]
        t0 = seq_ptr[i]
        T = seq_ptr[i + 1] - t0
        transitions(v, 1.0, n_state, trans_index, trans)
        tmax = max_min(trans)[0]
        exp_shift_into(trans.ravel(), tmax, expM.ravel())
        emissions(tok_ptr, ok0, onk, val, lab, t0, t0 + T, v, 1.0, score)
        acc += expM[0, 0] + score[T - 1, 0]
    return acc


@njit(nogil=True)
def st_forward(
    seq_ptr,
    tok_ptr,
    ok0,
    onk,
    val,
    lab,
    trans_index,
    n_state,
    order,
    v,
    trans,
    expM,
    score,
    es,
    node,
    sc,
):
    """+ the scaled forward recursion (log Z)."""
    acc = 0.0
    for s in range(order.shape[0]):
        i = order[s]
        t0 = seq_ptr[i]
        T = seq_ptr[i + 1] - t0
        transitions(v, 1.0, n_state, trans_index, trans)
        tmax = max_min(trans)[0]
        exp_shift_into(trans.ravel(), tmax, expM.ravel())
        emissions(tok_ptr, ok0, onk, val, lab, t0, t0 + T, v, 1.0, score)
        acc += scaled_forward(score, T, expM, tmax, es, node, sc)
    return acc


@njit(nogil=True)
def st_oracle(
    seq_ptr,
    tok_ptr,
    ok0,
    onk,
    val,
    lab,
    y,
    trans_index,
    n_state,
    order,
    v,
    node,
    edge,
    trans,
    expM,
    score,
    es,
    bm,
    sc,
):
    """+ the backward recursion with the edge marginals, the node marginals, the gold score (the
    oracle)."""
    acc = 0.0
    for s in range(order.shape[0]):
        acc += oracle(
            seq_ptr,
            tok_ptr,
            ok0,
            onk,
            val,
            lab,
            y,
            trans_index,
            n_state,
            v,
            1.0,
            order[s],
            node,
            edge,
            trans,
            expM,
            score,
            es,
            bm,
            sc,
        )
    return acc


@njit(nogil=True)
def st_l2sgd(
    seq_ptr,
    tok_ptr,
    ok0,
    onk,
    val,
    lab,
    y,
    trans_index,
    n_state,
    order,
    v,
    node,
    edge,
    trans,
    expM,
    score,
    es,
    bm,
    sc,
    pm,
):
    """+ the gradient's sparse application (coefficient 0: the same work, the weights unchanged)."""
    acc = 0.0
    for s in range(order.shape[0]):
        i = order[s]
        acc += oracle(
            seq_ptr,
            tok_ptr,
            ok0,
            onk,
            val,
            lab,
            y,
            trans_index,
            n_state,
            v,
            1.0,
            i,
            node,
            edge,
            trans,
            expM,
            score,
            es,
            bm,
            sc,
        )
        apply_gradient(
            seq_ptr, tok_ptr, ok0, onk, val, lab, y, trans_index, n_state, i, node, edge, 0.0, v, pm
        )
    return acc


@njit(nogil=True)
def st_viterbi(
    seq_ptr, tok_ptr, ok0, onk, val, lab, y, trans_index, n_state, order, w, path, score, trans
):
    """pa/ap: emissions, transition matrix, Viterbi, the gold path's score and the count of
    mistakes."""
    acc = 0.0
    for s in range(order.shape[0]):
        i = order[s]
        t0 = seq_ptr[i]
        T = seq_ptr[i + 1] - t0
        emissions(tok_ptr, ok0, onk, val, lab, t0, t0 + T, w, 1.0, score)
        transitions(w, 1.0, n_state, trans_index, trans)
        sv = viterbi(score, T, trans, path, 0)
        d = 0
        for t in range(T):
            if path[t] != y[t0 + t]:
                d += 1
        if d > 0:
            acc += sv - gold_score(score, y, t0, T, trans)
    return acc


@njit(nogil=True)
def st_emit_only(seq_ptr, tok_ptr, ok0, onk, val, lab, order, w, score):
    acc = 0.0
    for s in range(order.shape[0]):
        i = order[s]
        t0 = seq_ptr[i]
        T = seq_ptr[i + 1] - t0
        emissions(tok_ptr, ok0, onk, val, lab, t0, t0 + T, w, 1.0, score)
        acc += score[T - 1, 0]
    return acc


@njit(nogil=True)
def st_emit_attr(seq_ptr, tok_ptr, attr, val, attr_ptr, feat_label, full, order, w, L):
    """The emission walk on the corpus' attributes (attr_ptr, feat_label, full read per
    occurrence)."""
    acc = 0.0
    for s in range(order.shape[0]):
        i = order[s]
        t0 = seq_ptr[i]
        T = seq_ptr[i + 1] - t0
        score = np.empty((T, L))
        emissions_rows(tok_ptr, attr, val, t0, t0 + T, attr_ptr, feat_label, full, w, 1.0, score)
        acc += score[T - 1, 0]
    return acc


def cpu(fn, repeat):
    best = float("inf")
    for _ in range(repeat):
        t = time.process_time()
        fn()
        best = min(best, time.process_time() - t)
    return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument(
        "--results",
        metavar="FILE.jsonl",
        default=None,
        help="also append the figures as one record (benchmarks/_results.py: command, date, "
        "commit, machine, figures) to FILE.jsonl, e.g. benchmarks/results/NAME.jsonl",
    )
    ap.add_argument("--updates", default="u1g1,u2g1,u2g1b,u2g2,u2g3")
    args = ap.parse_args(argv)
    from crfkit.features.encode import build
    from crfkit.kernels import ngd as KN
    from crfkit.kernels import online as KO
    from crfkit.kernels.occ import buffer_offsets
    from crfkit.objective import Objective, regularization
    from crfkit.optim import ngd as N
    from crfkit.optim.sgdl1 import pass_order
    from crfkit.optim.stochastic import resolve
    from crfkit.parallel import set_threads

    set_threads(1)
    X, Y = load(data_dir(args.data_dir), "train")
    space, corpus = build(X, Y, support="observed")
    obj = Objective(corpus, space, regularization(corpus.n_sequences, c2=1.0), threads=1)
    c, s = corpus, space
    L = s.n_labels
    n = obj.n
    order = pass_order(0, 1, n)
    node = np.empty((max(c.max_length, 1), L))
    edge = np.empty((L, L))
    full = obj.full_rows
    R = args.repeat
    out = {"repeat": R, "stages": {}}
    print(
        f"CoNLL-2000 train: {n} sequences, {c.n_tokens} tokens, {c.attr.shape[0]} attribute occurrences, "
        f"{s.n_features} features, L = {L}; CPU s per epoch (min of {R})",
        flush=True,
    )

    # weights after one epoch of each method (monitor off)
    res = resolve("l2sgd")(obj, None, reg=obj.reg, max_iterations=1, monitor=False, period=0)
    w_sgd = res.x
    eta0 = float(res.message.split("eta0=")[1].split()[0])
    res = resolve("ap")(obj, None, reg=obj.reg, max_iterations=1, monitor=False)
    st = res.state_fn()
    w_ap, ws_ap, u_ap = st["w"], st["ws"], st["u"]

    from crfkit.kernels import occ as KOC

    ok0, onk, lab = KOC.layout(c.tok_ptr, c.attr, s.attr_ptr, s.feat_label, full, L)
    trans, expM, score, es, bm, sc, pm = KOC.Work(c.max_length, L).arrays()
    a_occ = (c.seq_ptr, c.tok_ptr, ok0, onk, c.val, lab, c.y, s.trans_index, s.n_state)
    wk = (trans, expM, score, es, bm, sc)
    stages = out["stages"]

    def put(name, sec, note=""):
        stages[name] = sec
        print(f"  {name:50s} {sec:7.3f}  {note}", flush=True)

    # warm up (compile)
    small = order[:50]
    st_setup(c.seq_ptr, s.trans_index, s.n_state, small, w_sgd, trans, expM)
    st_emit(
        c.seq_ptr,
        c.tok_ptr,
        ok0,
        onk,
        c.val,
        lab,
        s.trans_index,
        s.n_state,
        small,
        w_sgd,
        trans,
        expM,
        score,
    )
    st_forward(
        c.seq_ptr,
        c.tok_ptr,
        ok0,
        onk,
        c.val,
        lab,
        s.trans_index,
        s.n_state,
        small,
        w_sgd,
        trans,
        expM,
        score,
        es,
        node,
        sc,
    )
    st_oracle(*a_occ, small, w_sgd, node, edge, *wk)
    st_l2sgd(*a_occ, small, w_sgd.copy(), node, edge, *wk, pm)
    path = np.empty(max(c.max_length, 1), dtype=np.int64)
    st_viterbi(*a_occ, small, w_ap, path, score, trans)
    st_emit_only(c.seq_ptr, c.tok_ptr, ok0, onk, c.val, lab, small, w_ap, score)
    st_emit_attr(
        c.seq_ptr, c.tok_ptr, c.attr, c.val, s.attr_ptr, s.feat_label, full, small, w_ap, L
    )

    print("l2sgd / ngd step (weights after one l2sgd epoch):")
    put(
        "setup (transition matrix and its exp)",
        cpu(lambda: st_setup(c.seq_ptr, s.trans_index, s.n_state, order, w_sgd, trans, expM), R),
    )
    put(
        "+ emissions",
        cpu(
            lambda: st_emit(
                c.seq_ptr,
                c.tok_ptr,
                ok0,
                onk,
                c.val,
                lab,
                s.trans_index,
                s.n_state,
                order,
                w_sgd,
                trans,
                expM,
                score,
            ),
            R,
        ),
    )
    put(
        "+ scaled forward",
        cpu(
            lambda: st_forward(
                c.seq_ptr,
                c.tok_ptr,
                ok0,
                onk,
                c.val,
                lab,
                s.trans_index,
                s.n_state,
                order,
                w_sgd,
                trans,
                expM,
                score,
                es,
                node,
                sc,
            ),
            R,
        ),
    )
    put(
        "+ backward, edges, node marginals, gold (oracle)",
        cpu(lambda: st_oracle(*a_occ, order, w_sgd, node, edge, *wk), R),
    )
    wc = w_sgd.copy()
    put(
        "+ gradient application (l2sgd step)",
        cpu(lambda: st_l2sgd(*a_occ, order, wc, node, edge, *wk, pm), R),
    )

    def kernel_epoch(code, p, tab=np.empty(0), r=1.0):
        steps = N._Steps(obj, obj.reg.l2, code, p, tab, r)
        v = w_sgd.copy()

        def go():
            scal = np.array([1.0, 0.0, 0.0])
            # t0 = 1e15: a step size of about 1e-15 / l2, the weights do not move (the same work)
            steps.run(order, 0, n, 1e15, v, scal)

        steps.run(order, 0, 50, 1e15, v, np.array([1.0, 0.0, 0.0]))  # compile outside the clock
        return cpu(go, R)

    put("run_steps l2sgd (the kernel)", kernel_epoch(KN.IDENTITY, 0.0))
    for upd in args.updates.split(","):
        code, pname = N.UPDATES[upd]
        p = N.transform_parameter(upd, N.DEFAULTS[pname])
        put(f"run_steps ngd {upd}", kernel_epoch(code, p))
        libm = {KN.ATAN: KN.ATAN_LIBM, KN.ERF: KN.ERF_LIBM, KN.GD: KN.GD_LIBM}.get(code)
        if libm is not None:
            put(f"run_steps ngd {upd} libm", kernel_epoch(libm, p))
        tab = KN.make_table(code, p, 65537, 1.0)
        put(f"run_steps ngd {upd} table=65537", kernel_epoch(code, p, tab, 1.0))
    # transforms alone on the gradient values of a realistic epoch: how many and what they cost
    width = np.diff(s.attr_ptr).astype(np.int64)
    n_single = int(buffer_offsets(c.seq_ptr, c.tok_ptr, c.attr, width, c.val, False)[1].sum())
    bo, nbuf = buffer_offsets(c.seq_ptr, c.tok_ptr, c.attr, width, c.val, True)
    nk = int(nbuf.sum()) + c.n_tokens * L + int(s.n_trans) * n
    out["transforms_per_epoch"] = nk
    out["direct_occurrences"] = int((bo < 0).sum())
    print(
        f"  transforms per epoch: {nk} (buffered {int(nbuf.sum())}, the gradient's factor {c.n_tokens * L}, "
        f"transitions {int(s.n_trans) * n}; {int((bo < 0).sum())} of {bo.shape[0]} occurrences direct); "
        f"one buffer of every attribute would take {n_single + int(s.n_trans) * n}"
    )
    # the transforms alone: that many values, in buffers of 2,300 (a sequence's), in place (each
    # figure includes refilling the buffer)
    B = 2300
    reps = max(1, int(nk) // B)
    g0 = np.random.default_rng(0).normal(0, 0.3, B)
    buf, scr = np.empty(B), np.empty((4, B))

    def transforms(code, p):
        for _ in range(reps):
            buf[:] = g0
            KN.transform_into(code, buf, B, p, np.empty(0), 1.0, scr)

    KN.transform_into(KN.U1G1, buf, B, 0.1, np.empty(0), 1.0, scr)
    for upd in args.updates.split(","):
        code, pname = N.UPDATES[upd]
        p = N.transform_parameter(upd, N.DEFAULTS[pname])
        put(
            f"transform_into {upd}, {reps * B} N(0, 0.3) values",
            cpu(lambda: transforms(code, p), R),
        )
        libm = {KN.ATAN: KN.ATAN_LIBM, KN.ERF: KN.ERF_LIBM, KN.GD: KN.GD_LIBM}.get(code)
        if libm is not None:
            put(f"transform_into {upd} libm", cpu(lambda: transforms(libm, p), R))

    print("pa / ap (weights after one ap epoch):")
    put(
        "emissions alone (the corpus' attributes, before)",
        cpu(
            lambda: st_emit_attr(
                c.seq_ptr, c.tok_ptr, c.attr, c.val, s.attr_ptr, s.feat_label, full, order, w_ap, L
            ),
            R,
        ),
    )
    put(
        "emissions alone (occurrence layout)",
        cpu(
            lambda: st_emit_only(c.seq_ptr, c.tok_ptr, ok0, onk, c.val, lab, order, w_ap, score), R
        ),
    )
    put(
        "emissions + transitions + Viterbi + gold score",
        cpu(lambda: st_viterbi(*a_occ, order, w_ap, path, score, trans), R),
    )
    d = s.n_features
    for name, method in (("pa", KO.PA), ("ap", KO.AP)):
        w = w_ap.copy()
        ws = ws_ap.copy()
        cov = np.zeros(0)
        dbuf = np.zeros(d)
        stamp = np.full(d, -1, dtype=np.int64)
        touched = np.empty(d, dtype=np.int64)

        def go():
            w[:] = w_ap
            ws[:] = ws_ap
            stamp[:] = -1
            KO.run_online(
                c.seq_ptr,
                c.tok_ptr,
                ok0,
                onk,
                c.val,
                lab,
                c.y,
                s.trans_index,
                s.n_state,
                s.n_trans,
                order,
                0,
                n,
                method,
                1,
                1.0,
                True,
                1.0,
                w,
                ws,
                cov,
                np.array([u_ap, 0.0]),
                dbuf,
                stamp,
                touched,
                path,
                score,
                trans,
                obj.sw,
            )

        put(f"run_online {name} (the kernel, + copies of w, ws)", cpu(go, R))
    t = time.process_time()
    w[:] = w_ap
    ws[:] = ws_ap
    stamp[:] = -1
    put("  of which the copies and the stamp reset", time.process_time() - t)

    print("whole epochs as the optimizers run them (between end-of-epoch callbacks, median of 3):")
    for name, params in (
        ("l2sgd", {"eta0": eta0}),
        ("ngd", {"update": "u1g1", "eta0": eta0}),
        ("pa", {}),
        ("ap", {}),
    ):
        stamps = []
        resolve(name)(
            obj,
            None,
            reg=obj.reg,
            max_iterations=4,
            monitor=False,
            callback=lambda info: stamps.append(time.process_time()),
            **params,
        )
        put(f"{name} epoch", float(np.median(np.diff(stamps))))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    if args.results:  # one record in the benchmarks/results/ schema
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        import _results

        _results.record(out, args.results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
