#!/usr/bin/env python
"""Seconds per epoch on CoNLL-2000 (CRFsuite's chunking attributes): crfkit's l2sgd, the five ngd
updates (computed by the vectorised approximations, the default; through libm; looked up in a
table), pa and ap, against python-crfsuite's l2sgd, pa and ap, in one run.

Both sides train single-threaded on the same attribute lists.  An epoch's
time is taken between two consecutive end-of-epoch events: crfkit's per-epoch
callback (``monitor=False``: no objective evaluation) and python-crfsuite's
``on_iteration`` (called as CRFsuite's log reports the epoch's end), so the
first epoch (after l2sgd's calibration) is left out; the figure per method is
the median over the other epochs.  Two clocks: CPU time of the process
(``time.process_time``; what CRFsuite's own log reports, and the fair one on a
machine shared with other jobs) and wall time.  The crfkit / crfsuite pairs run interleaved
(crfsuite, then crfkit, per algorithm) so that drifts in the machine's load hit both; likewise each
ngd variant runs right after an l2sgd run of its own (the same eta0) and is reported against that
one.

``--rounds R`` repeats each (l2sgd, ngd variant) pair R times in turn, and likewise each (crfsuite,
crfkit) pair of l2sgd, pa, ap, and reports, per pair, the ratio of the two minima over the rounds
(the minimum is the figure least disturbed by other jobs on a shared machine), and each round's own
ratio beside it (their spread is the machine's);
``--variants computed`` leaves out the libm and table variants.

``--interleave`` says how finely a pair is interleaved.  ``runs`` (the default): the l2sgd run, then
the ngd run, each whole, timed by the process's CPU clock.  ``epochs``: the two runs take their
epochs in turn, l2sgd's epoch k, ngd's epoch k, l2sgd's epoch k + 1, ... (each run in a thread of
its own, handing the turn over at its end-of-epoch callback; only one of them computes at a time),
each epoch timed by its own thread's CPU clock (``time.thread_time``), and the order of the two
swapped every other round.  A slow phase of a shared machine lasting seconds then falls on both
runs' epochs alike, where with ``runs`` it can fall on one run of the pair only.  Both runs are the
real optimizers, from the same eta0, on separate but identical objectives; the figures per epoch are
medians over epochs 2..E, as with ``runs``.  Measured on the project's 2-core machine (2026-11-30,
three runs of each mode, ``--epochs 7 --rounds 3``): the rounds' own ratios spread by up to 4.5% in
both modes, while the epochs of one run agree to about 1%; so most of the spread is between runs
(each builds its own work arrays), not between phases of the machine, and the two modes give the
same ratios within that spread.

Usage:  python benchmarks/peers/ngd_speed.py [--epochs 5] [--data-dir DIR] [--features small|large] [--json OUT]
                                       [--algorithms l2sgd,pa,ap] [--rounds 1] [--variants all|computed]
                                       [--interleave runs|epochs]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conll2000_vs_crfsuite import data_dir, load  # noqa: E402  (the same attribute generator)


def _clock():
    return time.process_time(), time.perf_counter()


def _per_epoch(stamps):
    cpu = [b[0] - a[0] for a, b in zip(stamps, stamps[1:])]
    wall = [b[1] - a[1] for a, b in zip(stamps, stamps[1:])]
    return {
        "per_epoch": statistics.median(cpu),
        "per_epoch_wall": statistics.median(wall),
        "cpu": cpu,
        "wall": wall,
    }


def crfsuite_epochs(X, Y, algorithm, epochs, tmp, possible=False):
    import pycrfsuite

    stamps = []

    class Trainer(pycrfsuite.Trainer):
        # verbose=True so that python-crfsuite dispatches its events; nothing printed
        def on_iteration(self, log, info):
            stamps.append(_clock())

        def _quiet(self, log, *a):
            pass

        on_start = on_featgen_progress = on_featgen_end = on_prepared = on_prepare_error = _quiet
        on_optimization_end = on_end = _quiet

    tr = Trainer(algorithm=algorithm, verbose=True)
    for x, y in zip(X, Y):
        tr.append(x, y)
    params = {
        "max_iterations": epochs,
        "feature.possible_states": possible,
        "feature.possible_transitions": possible,
    }
    if algorithm == "l2sgd":
        params["period"] = epochs + 1
    tr.set_params(params)
    t0 = time.perf_counter()
    tr.train(os.path.join(tmp, algorithm + ".crfsuite"))
    total = time.perf_counter() - t0
    out = _per_epoch(stamps)
    out.update(
        total_s=total,
        log_epoch_s=[float(it["time"]) for it in tr.logparser.iterations],
        features=int(tr.logparser.featgen_num_features or 0),
    )
    return out


def _each_round(pairs):
    """' (each round's pair: r1, r2, ...)' when there are several rounds, else ''."""
    return f" (each round's pair: {', '.join(f'{x:.3f}' for x in pairs)})" if len(pairs) > 1 else ""


def crfkit_epochs(obj, algorithm, epochs, **params):
    from crfkit.optim.stochastic import resolve

    stamps = []
    t0 = time.perf_counter()
    res = resolve(algorithm)(
        obj,
        None,
        reg=obj.reg,
        max_iterations=epochs,
        monitor=False,
        callback=lambda info: stamps.append(_clock()),
        **params,
    )
    out = _per_epoch(stamps)
    out.update(
        total_s=time.perf_counter() - t0,
        first_epoch_and_setup_s=stamps[0][1] - t0,
        message=res.message[:200],
    )
    return out


def crfkit_lockstep(runs, epochs):
    """Run the optimizers ``runs`` (a list of ``(objective, algorithm, params)``) for ``epochs``
    epochs each, one epoch at a time in turn (``--interleave epochs``): each in a thread of its own,
    which hands the turn to the next one at its end-of-epoch callback and waits for it to come back.
    The epochs are timed by their threads' CPU clocks.  Returns one :func:`_per_epoch` dict per run
    (wall times there are not the run's own: the other runs' epochs fall between its stamps)."""
    import threading

    from crfkit.optim.stochastic import resolve

    n = len(runs)
    cond = threading.Condition()
    turn = [0]
    done = [False] * n
    stamps = [[] for _ in runs]
    results = [None] * n
    errors = []

    def hand_over(k):
        for d in range(1, n + 1):
            j = (k + d) % n
            if not done[j]:
                turn[0] = j
                break
        cond.notify_all()

    def worker(k):
        obj, algorithm, params = runs[k]

        def callback(info):
            stamps[k].append((time.thread_time(), time.perf_counter()))
            with cond:
                hand_over(k)
                cond.wait_for(lambda: turn[0] == k)

        with cond:
            cond.wait_for(lambda: turn[0] == k)
        try:
            results[k] = resolve(algorithm)(
                obj,
                None,
                reg=obj.reg,
                max_iterations=epochs,
                monitor=False,
                callback=callback,
                **params,
            )
        except BaseException as exc:  # re-raised in the caller's thread
            errors.append(exc)
        finally:
            with cond:
                done[k] = True
                hand_over(k)

    threads = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]
    out = []
    for k in range(n):
        r = _per_epoch(stamps[k])
        r.update(message=results[k].message[:200], epochs_timed=len(stamps[k]) - 1)
        out.append(r)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--features", choices=("small", "large"), default="small")
    ap.add_argument("--json", default=None)
    ap.add_argument(
        "--results",
        metavar="FILE.jsonl",
        default=None,
        help="also append the figures as one record (benchmarks/_results.py: command, date, "
        "commit, machine, figures) to FILE.jsonl, e.g. benchmarks/results/NAME.jsonl",
    )
    ap.add_argument(
        "--algorithms",
        default="l2sgd,pa,ap",
        help="which of l2sgd (with the ngd rows), pa, ap to run (comma list; default all)",
    )
    ap.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run each (l2sgd, ngd variant) and each (crfsuite, crfkit) pair this many times in turn; "
        "report the minima's ratio",
    )
    ap.add_argument("--variants", choices=("all", "computed"), default="all")
    ap.add_argument(
        "--interleave",
        choices=("runs", "epochs"),
        default="runs",
        help="a pair's l2sgd and ngd runs one after the other (runs), or their epochs in turn (epochs)",
    )
    args = ap.parse_args(argv)
    algs = [a for a in ("l2sgd", "pa", "ap") if a in args.algorithms.split(",")]
    from crfkit.features.encode import build
    from crfkit.objective import Objective, regularization
    from crfkit.parallel import set_threads

    set_threads(1)
    # numpy's BLAS on one thread, as crfkit's train_corpus runs the optimizers (its idle threads
    # spin and would be charged to crfkit's CPU time: benchmarks/micro/blas_spin.py)
    import contextlib

    from crfkit.parallel import blas_threads

    _blas = contextlib.ExitStack()
    _blas.enter_context(blas_threads(1))
    X, Y = load(data_dir(args.data_dir), "train")
    support = "all" if args.features == "large" else "observed"
    space, corpus = build(X, Y, support=support)
    reg = regularization(corpus.n_sequences, c2=1.0)
    obj = Objective(corpus, space, reg, threads=1)
    # --interleave epochs: the ngd run's own objective (the two runs are live at once; same corpus
    # arrays)
    obj2 = Objective(corpus, space, reg, threads=1) if args.interleave == "epochs" else obj
    print(
        f"CoNLL-2000 train: {corpus.n_sequences} sequences, {corpus.n_tokens} tokens, {space.n_features} features "
        f"({args.features}); {args.epochs} epochs per method; single thread; the machine is shared; ngd pairs "
        f"interleaved by {args.interleave}"
    )
    # warm the numba caches outside the clock
    from crfkit.features.encode import build as _b

    s2, c2 = _b(X[:30], Y[:30])
    o2 = Objective(c2, s2, regularization(30, c2=1.0), threads=1)
    for alg, p in (
        ("l2sgd", {}),
        ("ngd", {"update": "u2g1"}),
        ("ngd", {"update": "u2g1", "table": 2001}),
        ("ngd", {"update": "u2g1", "libm": True}),
        ("pa", {}),
        ("ap", {}),
    ):
        crfkit_epochs(o2, alg, 2, **p)
    out = {
        "features": space.n_features,
        "epochs": args.epochs,
        "interleave": args.interleave,
        "rows": {},
    }
    tmp = tempfile.mkdtemp(prefix="ngd_speed_")
    rows = out["rows"]
    possible = args.features == "large"
    for alg in algs:
        # crfsuite then crfkit, --rounds times in turn; each side's least disturbed round (the
        # minimum)
        sides = {"crfsuite": [], "crfkit": []}
        for _ in range(max(1, args.rounds)):
            sides["crfsuite"].append(crfsuite_epochs(X, Y, alg, args.epochs, tmp, possible))
            sides["crfkit"].append(crfkit_epochs(obj, alg, args.epochs))
        for side, got in sides.items():
            rows[f"{side} {alg}"] = min(got, key=lambda r: r["per_epoch"])
            rows[f"{side} {alg}"]["rounds"] = [r["per_epoch"] for r in got]
        a, b = rows["crfkit " + alg], rows["crfsuite " + alg]
        pairs = [
            k["per_epoch"] / c["per_epoch"] for k, c in zip(sides["crfkit"], sides["crfsuite"])
        ]
        a["round_ratios"] = pairs
        print(
            f"{alg:>6s}: crfkit {a['per_epoch']:.3f} s/epoch CPU ({a['per_epoch_wall']:.3f} wall), "
            f"crfsuite {b['per_epoch']:.3f} ({b['per_epoch_wall']:.3f} wall), ratio CPU "
            f"{a['per_epoch'] / b['per_epoch']:.3f}, wall {a['per_epoch_wall'] / b['per_epoch_wall']:.3f}"
            f"{_each_round(pairs)}",
            flush=True,
        )
        if alg == "l2sgd":
            eta0 = float(rows["crfkit l2sgd"]["message"].split("eta0=")[1].split()[0])
            for upd in ("u1g1", "u2g1", "u2g1b", "u2g2", "u2g3"):
                # computed (the default: vectorised approximations), through libm, looked up in a
                # table
                variants = (("", {}), (" libm", {"libm": True}), (" table", {"table": 65537}))
                for variant, extra in variants[:1] if args.variants == "computed" else variants:
                    if upd == "u1g1" and variant == " libm":
                        continue
                    key = f"crfkit ngd {upd}{variant}"
                    # each variant right after an l2sgd run of its own (the same eta0, no
                    # calibration), so that the ratio compares epochs taken under the same load; the
                    # time per epoch, not the calibration, is compared here; with --rounds, the
                    # minima over the rounds
                    refs, runs = [], []
                    for rnd in range(max(1, args.rounds)):
                        if args.interleave == "epochs":
                            pair = [
                                (obj, "l2sgd", {"eta0": eta0}),
                                (obj2, "ngd", dict(update=upd, eta0=eta0, **extra)),
                            ]
                            first = rnd % 2  # the order swapped every other round
                            got = crfkit_lockstep(pair[first:] + pair[:first], args.epochs)
                            got = got[first:] + got[:first] if first else got
                            refs.append(got[0]["per_epoch"])
                            runs.append(got[1])
                            continue
                        refs.append(
                            crfkit_epochs(obj, "l2sgd", args.epochs, eta0=eta0)["per_epoch"]
                        )
                        runs.append(
                            crfkit_epochs(obj, "ngd", args.epochs, update=upd, eta0=eta0, **extra)
                        )
                    rows[key] = min(runs, key=lambda r: r["per_epoch"])
                    rows[key]["l2sgd_adjacent"] = min(refs)
                    rows[key]["rounds"] = {"ngd": [r["per_epoch"] for r in runs], "l2sgd": refs}
                    # each round's own pair too: how far the machine's load moved the ratio between
                    # rounds
                    pairs = [r["per_epoch"] / q for r, q in zip(runs, refs)]
                    rows[key]["round_ratios"] = pairs
                    where = "in turn" if args.interleave == "epochs" else "just before"
                    print(
                        f"  ngd {upd}{variant:6s}: {rows[key]['per_epoch']:.3f} s/epoch CPU, l2sgd {where} "
                        f"{min(refs):.3f}: {rows[key]['per_epoch'] / min(refs):.3f} x{_each_round(pairs)}",
                        flush=True,
                    )
    # the l2sgd reference again at the end (load drift)
    if "l2sgd" in algs:
        rows["crfkit l2sgd (again)"] = crfkit_epochs(obj, "l2sgd", args.epochs)
    print()
    print(f"{'method':32s} {'CPU s/epoch':>11s} {'wall':>7s} {'ratio (CPU)':>28s}")
    for key, r in rows.items():
        if key.startswith("crfkit ngd"):
            ratio = f"{r['per_epoch'] / r['l2sgd_adjacent']:.3f} x adjacent l2sgd"
        elif key.startswith("crfkit ") and "again" not in key:
            peer = rows.get("crfsuite " + key.split()[1])
            ratio = f"{r['per_epoch'] / peer['per_epoch']:.3f} x crfsuite" if peer else ""
        else:
            ratio = ""
        print(f"{key:32s} {r['per_epoch']:11.3f} {r['per_epoch_wall']:7.3f} {ratio:>28s}")
    if args.json:
        with open(args.json + ".tmp", "w") as f:
            json.dump(out, f, indent=1)
        os.replace(args.json + ".tmp", args.json)
    if args.results:  # one record in the benchmarks/results/ schema
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        import _results

        _results.record(out, args.results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
