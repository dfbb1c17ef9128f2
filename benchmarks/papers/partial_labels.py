#!/usr/bin/env python
"""Partial-label training (Tsuboi et al. 2008) on CoNLL-2000 chunking with whole chunks hidden.

For each hiding level (default 50% and 80% of the training tokens) and seed, the
training labels are hidden chunk by chunk: each sentence's gold labels are cut
into units (a chunk as :func:`crfkit.metrics.chunks` finds it, i.e. a B-X I-X ...
run, and each ``O`` token on its own); all the units of the corpus are put in a
seeded random order and hidden in that order until the hidden tokens reach the
level's share of the training tokens (the last unit may overshoot by a few
tokens; the realised fraction is recorded).  A hidden token's cell becomes
``None`` (``?`` in a column file: any label).  Three trainings compare:

* ``full``: every label given (once, not per seed);
* ``partial``: partial-label training on the hidden corpus (every token's
  attributes, the hidden cells as "any label");
* ``drop``: the sentences with no hidden token only (the usual fallback).

Extra rows: ``full-observed`` (below) and, with ``--subset``, ``subset``: full
supervision on whole sentences drawn in a seeded order until they hold as many
labelled tokens as the hidden corpus (the same annotation budget spent on whole
sentences instead of scattered chunks).

All with the same features: CRFsuite's chunking attributes
(benchmarks/peers/conll2000_vs_crfsuite.py ``load``), ``support="all"`` (every
attribute x label; partial labels need it), c2 = 1, L-BFGS with CRFsuite's
stopping rules (epsilon = delta = 1e-5, period 10, m = 6) and
``--max-iterations`` as a cap, one thread.  ``full-observed`` (the default
``support="observed"``) is an extra row.  Test: the CoNLL-2000 test set,
conlleval chunk F1 (crfkit.metrics.conlleval) and token accuracy.

Every run writes ``DIR/<run>.json`` (temp file + rename) and runs that already
have their file are skipped, so the script resumes where it stopped.

Usage:
  python benchmarks/papers/partial_labels.py --out DIR [--levels 0.5,0.8] [--seeds 0,1,2] [--threads 1]
  python benchmarks/papers/partial_labels.py --out DIR --report
  python benchmarks/papers/partial_labels.py --cli-check N --out DIR   # the CLI path against the Python path
  python benchmarks/papers/partial_labels.py --eval-cost --out DIR     # seconds per evaluation, partial / full
Data dir: --data-dir, else $CRFKIT_DATA, else ../shared/data.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "peers")
)
from conll2000_owlqn_vs_crfsuite import load_average  # noqa: E402
from conll2000_vs_crfsuite import data_dir, load  # noqa: E402


# --------------------------------------------------------------------------- hiding
def units(tags) -> list[tuple[int, int]]:
    """The sentence cut into (start, end) units: conlleval's chunks, and each token outside them
    alone."""
    from crfkit.metrics import chunks

    out = [(s, e) for _, s, e in chunks(tags)]
    covered = np.zeros(len(tags), bool)
    for s, e in out:
        covered[s:e] = True
    out += [(t, t + 1) for t in np.flatnonzero(~covered).tolist()]
    return sorted(out)


def hide(Y, level: float, seed: int):
    """(cells: the label sequences with hidden tokens as None, stats).  Whole units are hidden, in a
    seeded random order over the corpus, until the hidden tokens reach ``level`` of all tokens."""
    all_units = [(i, s, e) for i, ys in enumerate(Y) for s, e in units(ys)]
    n_tok = sum(len(ys) for ys in Y)
    assert sum(e - s for _, s, e in all_units) == n_tok  # the units tile every sentence
    order = np.random.default_rng(seed).permutation(len(all_units))
    cells = [list(ys) for ys in Y]
    budget = level * n_tok
    hidden = n_units = n_chunks = 0
    for k in order:
        if hidden >= budget:
            break
        i, s, e = all_units[k]
        for t in range(s, e):
            cells[i][t] = None
        hidden += e - s
        n_units += 1
        n_chunks += Y[i][s] != "O"
    complete = [i for i, c in enumerate(cells) if all(v is not None for v in c)]
    visible = {v for c in cells for v in c if v is not None}
    return (
        cells,
        {
            "tokens": n_tok,
            "hidden_tokens": hidden,
            "hidden_fraction": hidden / n_tok,
            "units": len(all_units),
            "hidden_units": n_units,
            "hidden_chunks": n_chunks,
            "complete_sentences": len(complete),
            "complete_tokens": sum(len(Y[i]) for i in complete),
            "labels_visible": len(visible),
            "labels_gold": len({v for ys in Y for v in ys}),
        },
        complete,
    )


# --------------------------------------------------------------------------- runs
def run_plan(levels, seeds, extra_observed=True, subset=False):
    """(name, kind, level, seed) in the order they run: every level's first seed before more seeds;
    the ``subset`` rows (an extra) last."""
    plan = [("full-all", "full", None, None)]
    for j, seed in enumerate(seeds):
        for level in levels:
            tag = f"h{int(round(level * 100))}-s{seed}"
            plan += [
                (f"partial-{tag}", "partial", level, seed),
                (f"drop-{tag}", "drop", level, seed),
            ]
        if j == 0 and extra_observed:
            plan.append(("full-observed", "full-observed", None, None))
    if subset:
        plan += [
            (f"subset-h{int(round(level * 100))}-s{seed}", "subset", level, seed)
            for seed in seeds
            for level in levels
        ]
    return plan


def sentence_subset(Y, level: float, seed: int) -> list[int]:
    """Whole sentences, in a seeded random order, until they hold (1 - level) of the tokens: the
    same number of labelled tokens as the hidden corpus, annotated sentence by sentence instead."""
    n_tok = sum(len(ys) for ys in Y)
    keep, have = [], 0
    for i in np.random.default_rng(seed).permutation(len(Y)).tolist():
        if have >= (1 - level) * n_tok:
            break
        keep.append(i)
        have += len(Y[i])
    return sorted(keep)


def write_json(path: str, obj) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


def train_and_score(X, Y, Xt, Yt, *, support, args) -> dict:
    from crfkit.metrics import conlleval
    from crfkit.train import train

    if not X:
        return {
            "status": "no training data",
            "f1": 0.0,
            "accuracy": None,
            "iterations": 0,
            "seconds": 0.0,
        }
    t0 = time.perf_counter()
    res = train(
        X,
        Y,
        support=support,
        c2=args.c2,
        max_iterations=args.max_iterations,
        threads=args.threads,
        epsilon=1e-5,
        delta=1e-5,
        period=10,
        m=6,
    )
    wall = time.perf_counter() - t0
    pred = res.model.tag(Xt)
    rep = conlleval(Yt, pred)
    return {
        "status": res.status,
        "iterations": res.iterations,
        "seconds": res.seconds,
        "wall_s": wall,
        "objective_crfsuite": res.objective_crfsuite,
        "features": res.model.space.n_features,
        "labels": len(res.model.labels),
        "f1": rep.f1,
        "precision": rep.precision,
        "recall": rep.recall,
        "accuracy": rep.accuracy,
        "found_chunks": rep.found_chunks,
        "gold_chunks": rep.gold_chunks,
    }


def run_all(args) -> int:
    from crfkit.parallel import set_threads

    os.makedirs(args.out, exist_ok=True)
    set_threads(args.threads)
    levels = [float(v) for v in args.levels.split(",")]
    seeds = [int(v) for v in args.seeds.split(",")]
    plan = [
        p
        for p in run_plan(levels, seeds, not args.no_observed, args.subset)
        if not os.path.exists(os.path.join(args.out, p[0] + ".json"))
    ]
    if not plan:
        print("every run has its file; --report prints the table")
        return 0
    X, Y = load(args.data, "train")
    Xt, Yt = load(args.data, "test")
    print(
        f"CoNLL-2000: {len(X)} training sentences ({sum(map(len, Y))} tokens), {len(Xt)} test sentences; "
        f"{len(plan)} runs to do; threads {args.threads}",
        flush=True,
    )
    for name, kind, level, seed in plan:
        before = load_average()
        rec = {
            "run": name,
            "kind": kind,
            "level": level,
            "seed": seed,
            "c2": args.c2,
            "max_iterations": args.max_iterations,
            "threads": args.threads,
            "load_before": before,
        }
        if kind in ("full", "full-observed"):
            rec.update(train_sentences=len(X), train_tokens=sum(map(len, Y)))
            rec.update(
                train_and_score(
                    X, Y, Xt, Yt, support="all" if kind == "full" else "observed", args=args
                )
            )
        else:
            cells, stats, complete = hide(Y, level, seed)
            if kind != "subset":
                rec["hiding"] = stats
            if kind == "partial":
                rec.update(train_sentences=len(X), train_tokens=stats["tokens"])
                rec.update(train_and_score(X, cells, Xt, Yt, support="all", args=args))
            else:
                if kind == "subset":
                    complete = sentence_subset(Y, level, seed)
                    rec["corpus_tokens"] = stats["tokens"]
                Xd, Yd = [X[i] for i in complete], [Y[i] for i in complete]
                rec.update(train_sentences=len(Xd), train_tokens=sum(map(len, Yd)))
                rec.update(train_and_score(Xd, Yd, Xt, Yt, support="all", args=args))
        rec["load_after"] = load_average()
        write_json(os.path.join(args.out, name + ".json"), rec)
        hid = f" hidden {rec['hiding']['hidden_fraction']:.4f}" if "hiding" in rec else ""
        print(
            f"{name}:{hid} {rec['train_sentences']} sentences, {rec['iterations']} iterations "
            f"({rec['status']}), {rec['seconds']:.0f} s; test F1 {rec['f1']:.2f}, accuracy "
            f"{rec['accuracy'] if rec['accuracy'] is None else round(rec['accuracy'], 2)}  [{rec['load_after']}]",
            flush=True,
        )
    return 0


# --------------------------------------------------------------------------- report
def _ms(vals, fmt="{:.2f}"):
    vals = [v for v in vals if v is not None]
    if not vals:
        return "-"
    if len(set(vals)) == 1:
        return fmt.format(vals[0])
    return fmt.format(statistics.mean(vals)) + " ± " + fmt.format(statistics.stdev(vals))


def report(args) -> int:
    recs = []
    for fn in sorted(os.listdir(args.out)):
        if fn.endswith(".json"):
            with open(os.path.join(args.out, fn)) as f:
                recs.append(json.load(f))
    if not recs:
        print(f"no run files in {args.out}", file=sys.stderr)
        return 1
    print(
        "| training | hidden tokens | seeds | training sentences (tokens) | labels | chunk F1 | token accuracy "
        "| iterations | seconds |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    groups = {}
    for r in recs:
        groups.setdefault((r["kind"], r["level"]), []).append(r)
    order = sorted(
        groups,
        key=lambda k: (
            k[1] or 0,
            {"full": 0, "full-observed": 1, "partial": 2, "drop": 3, "subset": 4}[k[0]],
        ),
    )
    names = {
        "full": "full supervision, support all",
        "full-observed": "full supervision, support observed",
        "partial": "partial labels, support all",
        "drop": "drop incomplete sentences, support all",
        "subset": "extra: whole sentences with as many labelled tokens, support all",
    }
    for key in order:
        rs = groups[key]
        kind, level = key
        hid = (
            (
                _ms([r["hiding"]["hidden_fraction"] * 100 for r in rs], "{:.2f}") + "%"
                if kind != "subset"
                else _ms([100 - 100 * r["train_tokens"] / r["corpus_tokens"] for r in rs], "{:.2f}")
                + "% (sentences)"
            )
            if level
            else "0%"
        )
        sent = (
            _ms([r["train_sentences"] for r in rs], "{:.0f}")
            + " ("
            + _ms([r["train_tokens"] for r in rs], "{:.0f}")
            + ")"
        )
        print(
            f"| {names[kind]} | {hid} | {len(rs)} | {sent} | {_ms([r.get('labels') for r in rs], '{:.1f}')} "
            f"| {_ms([r['f1'] for r in rs])} | {_ms([r['accuracy'] for r in rs])} "
            f"| {_ms([r['iterations'] for r in rs], '{:.0f}')} | {_ms([r['seconds'] for r in rs], '{:.0f}')} |"
        )
    print()
    for r in sorted(recs, key=lambda r: r["run"]):
        print(
            f"{r['run']}: F1 {r['f1']:.2f} acc {r['accuracy']} its {r['iterations']} ({r['status']}) "
            f"{r['seconds']:.0f} s; "
            + (
                f"hidden {r['hiding']['hidden_fraction']:.4f}, complete sentences "
                f"{r['hiding']['complete_sentences']}, labels visible "
                f"{r['hiding']['labels_visible']}/{r['hiding']['labels_gold']}; "
                if "hiding" in r
                else ""
            )
            + f"load {r['load_before']} -> {r['load_after']}"
        )
    return 0


# --------------------------------------------------------------------------- CLI check
def cli_check(args) -> int:
    """The CLI (`crfkit train --partial-labels` on a column file with ? cells, `crfkit tag --eval`)
    against the Python path (the same file read by load_columns, train(X, cells)) on the first N
    sentences."""
    from crfkit.features.templates import default_chunking_templates
    from crfkit.io.columns import read_columns_list
    from crfkit.metrics import conlleval
    from crfkit.model import CRFModel
    from crfkit.partial import parse_cells
    from crfkit.pipeline import load_columns
    from crfkit.train import train

    os.makedirs(args.out, exist_ok=True)
    n = args.cli_check
    sents = read_columns_list(os.path.join(args.data, "conll2000", "train.txt.gz"))[:n]
    test = read_columns_list(os.path.join(args.data, "conll2000", "test.txt.gz"))[:n]
    cells, stats, _ = hide([s.labels for s in sents], 0.5, 0)
    train_f, test_f = os.path.join(args.out, "train_hidden.txt"), os.path.join(args.out, "test.txt")
    with open(train_f, "w") as f:
        for s, c in zip(sents, cells):
            for cols, lab in zip(s.columns, c):
                f.write(" ".join(cols) + " " + ("?" if lab is None else lab) + "\n")
            f.write("\n")
    with open(test_f, "w") as f:
        for s in test:
            for cols, lab in zip(s.columns, s.labels):
                f.write(" ".join(cols) + " " + lab + "\n")
            f.write("\n")
    model_f = os.path.join(args.out, "cli.crfkit")
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(
            filter(
                None,
                [
                    os.path.join(
                        os.path.dirname(
                            os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
                        ),
                        "src",
                    ),
                    os.environ.get("PYTHONPATH"),
                ],
            )
        ),
    )
    cmd = [
        sys.executable,
        "-m",
        "crfkit",
        "train",
        train_f,
        "-m",
        model_f,
        "--partial-labels",
        "--support",
        "all",
        "--c2",
        str(args.c2),
        "--max-iterations",
        str(args.max_iterations),
        "--threads",
        "1",
        "-q",
    ]
    print("$ " + " ".join(cmd[1:]), flush=True)
    subprocess.run(cmd, check=True, env=env)
    cmd = [sys.executable, "-m", "crfkit", "tag", "-m", model_f, "--eval", test_f, "-o", os.devnull]
    print("$ " + " ".join(cmd[1:]), flush=True)
    ev = subprocess.run(cmd, check=True, env=env, capture_output=True, text=True).stderr
    print(ev.strip())
    line = next((ln for ln in ev.splitlines() if "FB1:" in ln), "")
    cli_f1 = float(line.rsplit("FB1:", 1)[1]) if line else float("nan")
    tpl = default_chunking_templates()
    X, Ys, _ = load_columns(train_f, tpl)
    res = train(
        X, parse_cells(Ys), support="all", c2=args.c2, max_iterations=args.max_iterations, threads=1
    )
    cli_model = CRFModel.load(model_f)
    same_space = (
        cli_model.labels == res.model.labels
        and cli_model.space.n_features == res.model.space.n_features
    )
    dw = float(np.abs(cli_model.weights - res.model.weights).max()) if same_space else float("nan")
    Xt, Yt, _ = load_columns(test_f, tpl)
    rep_py, rep_cli = conlleval(Yt, res.model.tag(Xt)), conlleval(Yt, cli_model.tag(Xt))
    print(
        f"{n} sentences, hidden {stats['hidden_fraction']:.4f} of {stats['tokens']} tokens; the same feature "
        f"space: {same_space}; max |w_cli - w_python| = {dw:.3g}; test F1 python {rep_py.f1:.4f}, CLI model "
        f"{rep_cli.f1:.4f}; `crfkit tag --eval` printed FB1 {cli_f1:.2f}"
    )
    ok = (
        same_space
        and dw == 0.0
        and rep_py.f1 == rep_cli.f1
        and abs(cli_f1 - rep_py.f1) < 0.005 + 1e-9
    )
    print("CLI and Python paths agree" if ok else "CLI and Python paths DISAGREE")
    return 0 if ok else 1


def eval_cost(args) -> int:
    """Seconds of one objective + gradient evaluation, full labels against partial labels (50%
    hidden, seed 0), on the same feature space (the full corpus, support all), alternating, min of
    --repeats."""
    from crfkit.features.encode import build
    from crfkit.objective import Objective, regularization
    from crfkit.parallel import set_threads
    from crfkit.partial import PartialObjective, allowed_matrix

    set_threads(args.threads)
    X, Y = load(args.data, "train")
    space, corpus = build(X, Y, support="all")
    cells, stats, _ = hide(Y, 0.5, 0)
    reg = regularization(corpus.n_sequences, c2=args.c2)
    full = Objective(corpus, space, reg, threads=args.threads)
    part = PartialObjective(
        corpus, space, reg, allowed_matrix(cells, space.labels), threads=args.threads
    )
    w = np.random.default_rng(0).normal(scale=0.01, size=space.n_features)
    times = {"full": [], "partial": []}
    print(f"before: {load_average()}", flush=True)
    for _ in range(args.repeats):
        for name, obj in (("full", full), ("partial", part)):
            t = time.perf_counter()
            obj.value_and_grad(w)
            times[name].append(time.perf_counter() - t)
    a, b = min(times["full"]), min(times["partial"])
    print(
        f"{space.n_features} features; one value_and_grad, min of {args.repeats}: full {a:.2f} s, partial "
        f"{b:.2f} s (partial/full {b / a:.2f}); after: {load_average()}"
    )
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--out", required=True, help="folder of the per-run JSON files")
    ap.add_argument(
        "--levels", default="0.5,0.8", help="shares of the training tokens hidden (default 0.5,0.8)"
    )
    ap.add_argument("--seeds", default="0,1,2", help="hiding seeds (default 0,1,2)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--c2", type=float, default=1.0)
    ap.add_argument(
        "--max-iterations", type=int, default=400, help="cap on L-BFGS iterations (default 400)"
    )
    ap.add_argument("--no-observed", action="store_true", help="skip the extra full-observed row")
    ap.add_argument(
        "--subset",
        action="store_true",
        help="extra rows: full supervision on whole sentences (seeded) holding as many labelled tokens "
        "as the hidden corpus",
    )
    ap.add_argument(
        "--report", action="store_true", help="print the table of the run files in --out"
    )
    ap.add_argument(
        "--cli-check",
        type=int,
        default=0,
        metavar="N",
        help="CLI vs Python on the first N training sentences (50%% hidden, seed 0)",
    )
    ap.add_argument(
        "--eval-cost",
        action="store_true",
        help="time one objective + gradient evaluation, full against partial labels",
    )
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    args.data = data_dir(args.data_dir)
    if args.eval_cost:
        return eval_cost(args)
    if args.report:
        return report(args)
    if args.cli_check:
        return cli_check(args)
    return run_all(args)


if __name__ == "__main__":
    sys.exit(main())
