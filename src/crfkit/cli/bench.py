"""``crfkit bench``: the optimizer benchmark harness (:mod:`crfkit.bench`) on the command line.

::

    crfkit bench list
    crfkit bench fstar --data conll2000
    crfkit bench run --data ocr -a 'sag-nus*' -a sg -a lbfgs --passes 30 --out runs/bench/ocr
    crfkit bench plot runs/bench/ocr
    crfkit bench report runs/bench/ocr --at 10,20,30
    crfkit bench scores runs/cao/small/seed* --metric accuracy --epochs 50 --baseline l2sgd --out fig.png
    crfkit bench memory --data ocr --data conll2000 runs/bench/ocr
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from ..errors import CrfkitError
from .common import nonneg_float, pos_float, pos_int, print_stderr

__all__ = ["add_parser", "parse_etas"]


def parse_etas(text: str) -> list[float]:
    """``LO:HI`` (powers of ten 10^LO..10^HI, integers) or a comma list of numbers."""
    text = text.strip()
    try:
        if ":" in text:
            lo, hi = (int(x) for x in text.split(":", 1))
            if hi < lo:
                raise ValueError
            vals = [10.0**k for k in range(lo, hi + 1)]
        else:
            vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected LO:HI (exponents of 10, LO <= HI) or a comma list of step "
            f"sizes, got {text!r}"
        ) from None
    if not vals or any(not (v > 0 and math.isfinite(v)) for v in vals):
        raise argparse.ArgumentTypeError(f"step sizes must be positive numbers, got {text!r}")
    return vals


def _marks(text: str) -> list[float]:
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a comma list of pass counts, got {text!r}"
        ) from None
    if not vals or any(v <= 0 for v in vals):
        raise argparse.ArgumentTypeError(f"pass counts must be positive, got {text!r}")
    return vals


def _data_args(p: argparse.ArgumentParser, *, required: bool = True, many: bool = False) -> None:
    from ..bench.data import dataset_names

    names = ", ".join(dataset_names())
    if many:
        p.add_argument(
            "--data",
            action="append",
            default=[],
            metavar="NAME",
            help=f"a benchmark data set (repeatable): {names}",
        )
    else:
        p.add_argument(
            "--data", required=required, metavar="NAME", help=f"benchmark data set: {names}"
        )
    p.add_argument(
        "--data-dir", metavar="DIR", help="data directory (default: $CRFKIT_DATA or ../shared/data)"
    )
    p.add_argument(
        "--limit",
        type=pos_int,
        metavar="N",
        help="use only the first N training sequences (smoke runs; l2 = 1/N then)",
    )
    p.add_argument(
        "--support",
        choices=("observed", "all"),
        default="observed",
        help="feature support: observed (attribute-label pairs seen in training, CRFsuite's default "
        "and the core benchmark's; default) or all (every attribute with every label, the "
        "layout of the paper's experiments)",
    )


def _fstar_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--gtol",
        type=pos_float,
        default=1e-7,
        help="f*: L-BFGS runs until ||grad||_inf <= GTOL (default 1e-7) ...",
    )
    p.add_argument(
        "--fstar-iterations",
        type=pos_int,
        default=1000,
        metavar="N",
        help="... or N iterations (default 1000)",
    )
    p.add_argument("--recompute", action="store_true", help="compute f* again even if it is cached")


def _load(args):
    from ..bench.data import load

    return load(args.data, args.data_dir, limit=args.limit, support=args.support)


def _fstar_line(e: dict) -> str:
    te = e.get("test_error")
    return (
        f"f* = {e['fstar']:.12g}  (||grad||_inf {e.get('grad_inf_norm', float('nan')):.2e}, "
        f"{e.get('iterations')} iterations, {e.get('status')}"
        + ("" if te is None else f"; test error at w* {te:.2f}%")
        + ")"
    )


# --------------------------------------------------------------------------- commands


def cmd_list(args) -> int:
    from .. import datasets as ds
    from ..bench.data import DATASETS

    doc = {
        "conll2000": "CoNLL-2000 chunking, train / test; CRFsuite chunking attributes",
        "ocr": "OCR letters, train fold 0 / test folds 1-9 (Taskar); pixels + bias",
        "ocr-large": "OCR letters, train folds 1-9 / test fold 0; pixels + bias",
        "conll2002-nl": "CoNLL-2002 Dutch NER, ned.train / ned.testb; CRFsuite-style NER attributes",
        "ptb": "PTB WSJ sample POS, first 3,000 / other 914 sentences; Ratnaparkhi-style attributes",
        "synthetic": "crfkit's synthetic chunking corpus, 200 / 50 sentences (tests, smoke runs)",
    }
    print(f"data directory: {ds.data_dir()}")
    for name in DATASETS:
        print(f"  {name:14s} {doc.get(name, '')}")
    return 0


def cmd_fstar(args) -> int:
    from ..bench.fstar import get_fstar

    data = _load(args)
    log = None if args.quiet else print_stderr
    e = get_fstar(
        data,
        l2=args.l2,
        gtol=args.gtol,
        max_iterations=args.fstar_iterations,
        threads=args.threads,
        recompute=args.recompute,
        log=log,
    )
    if args.json:
        print(json.dumps(e, indent=1, sort_keys=True))
    else:
        print(
            f"{data.name} ({data.feature_set}, l2 = {e['l2']:.6g}, {e['n_train']} sequences, "
            f"{e['n_features']} features)"
        )
        print(_fstar_line(e))
        print(f"{'cached' if e['cached'] else 'computed and cached'}: {e['path']}")
    return 0


def cmd_run(args) -> int:
    from ..bench.fstar import get_fstar
    from ..bench.runner import DEFAULT_ETAS, check_specs, parse_spec, run_benchmark

    specs = [parse_spec(a) for a in args.algorithm]
    check_specs(specs)  # before any data is read or f* computed
    data = _load(args)
    log = None if args.quiet else print_stderr
    fstar = None
    if not args.no_fstar:
        if log:
            log(
                f"{data.name}: reference optimum f* (L-BFGS to ||grad||_inf <= {args.gtol:g} or "
                f"{args.fstar_iterations} iterations; cached)"
            )
        fstar = get_fstar(
            data,
            l2=args.l2,
            gtol=args.gtol,
            max_iterations=args.fstar_iterations,
            threads=args.threads,
            recompute=args.recompute,
        )
        if log:
            log(("  " + _fstar_line(fstar)) + (" [cached]" if fstar["cached"] else ""))
    run_benchmark(
        data,
        specs,
        passes=args.passes,
        out=args.out,
        l2=args.l2,
        seed=args.seed,
        etas=args.etas or DEFAULT_ETAS,
        threads=args.threads,
        fstar=fstar,
        log=log,
        epochs=args.epochs,
        train_scores=args.train_scores,
        skip_done=args.skip_done,
    )
    out = Path(args.out)
    _after_run(out, data, args, log)
    print(f"traces, bench.json{', fstar.json' if fstar else ''} and the figures are in {out}")
    return 0


def _after_run(out: Path, data, args, log) -> None:
    """Figures (when matplotlib is there), the summary and the memory table of a finished run."""
    from ..bench.memory import format_memory_table, measured_memory, state_memory
    from ..bench.plots import format_summary, load_runs, plot_figures, summary
    from ..io.atomic import atomic_file

    if not args.no_plot:
        try:
            for p in plot_figures(out):
                if log:
                    log(f"wrote {p}")
        except CrfkitError as e:
            print_stderr(f"no figures: {e}")
    marks = [m for m in (10, 20, 30) if m <= args.passes] or [args.passes]
    text = format_summary(summary(out, at=marks))
    space, corpus, _ = data.encoded()
    m = state_memory(space, corpus)
    m["support"] = data.support
    text += "\n\nstored state against naive SAG (§6):\n\n" + format_memory_table(
        [(data.name, m)], measured_memory(load_runs(out))
    )
    with atomic_file(out / "summary.md", fsync=False) as f:
        f.write((text + "\n").encode("utf-8"))
    print(text)


def cmd_plot(args) -> int:
    from ..bench.plots import plot_figures

    for p in plot_figures(
        args.dir, out=args.out, fstar=args.fstar, title=args.title, show_all=args.all
    ):
        print(p)
    return 0


def _label_arg(text: str) -> tuple[str, str]:
    stem, sep, label = text.partition(":")
    if not sep or not stem.strip() or not label.strip():
        raise argparse.ArgumentTypeError(
            f"expected TRACE_NAME:LABEL (e.g. 'ngd__period=0,update=u1g1:U1*.G1'), got {text!r}"
        )
    return stem.strip(), label.strip()


def cmd_scores(args) -> int:
    from ..bench.scores import format_score_summary, plot_scores, score_summary, write_summary_json

    labels = dict(args.label or [])
    if args.out:
        path, s = plot_scores(
            args.dirs,
            args.out,
            metric=args.metric,
            epochs=args.epochs,
            baseline=args.baseline,
            title=args.title,
            labels=labels,
            finished_only=args.finished_only,
        )
    else:
        path, s = (
            None,
            score_summary(
                args.dirs,
                metric=args.metric,
                epochs=args.epochs,
                baseline=args.baseline,
                labels=labels,
                finished_only=args.finished_only,
            ),
        )
    if args.json:
        write_summary_json(s, args.json)
    print(
        f"{s['metric']} per epoch, first {s['epochs']} epochs, {len(s['dirs'])} run directories"
        + (
            f"; epochs in which the mean test score is at or above {s['baseline_label']}'s"
            if s["baseline"]
            else ""
        )
    )
    print(format_score_summary(s))
    if path:
        print(f"wrote {path}")
    if args.json:
        print(f"wrote {args.json}")
    return 0


def cmd_report(args) -> int:
    from ..bench.plots import format_summary, summary

    s = summary(args.dir, at=args.at, rel_tol=args.rel_tol, fstar=args.fstar, show_all=args.all)
    if args.json:
        print(json.dumps(s, indent=1))
    else:
        print(format_summary(s))
    return 0


def cmd_memory(args) -> int:
    from ..bench.memory import format_memory_table, measured_memory, state_memory
    from ..bench.plots import load_runs

    if not args.data and not args.dirs:
        raise CrfkitError(
            "crfkit bench memory: give --data NAME (the analytic table) and/or run directories "
            "(what the optimizers reported)"
        )
    from ..bench.data import load

    rows = []
    for name in args.data:
        d = load(name, args.data_dir, limit=args.limit, support=args.support)
        space, corpus, _ = d.encoded()
        m = state_memory(space, corpus)
        m["support"] = d.support
        rows.append((d.name, m))
    measured = []
    for dr in args.dirs:
        for r in measured_memory(load_runs(dr)):
            r["label"] = f"{Path(dr).name}: {r['label']}"
            measured.append(r)
    if args.json:
        print(json.dumps({"data": {n: m for n, m in rows}, "measured": measured}, indent=1))
    else:
        if args.dirs and not measured:
            print_stderr(
                "no trace reports state_bytes (the optimizers that store per-example state report it)"
            )
        print(
            format_memory_table(rows, measured)
            if rows
            else format_memory_table([], measured).split("\n", 2)[2]
        )
    return 0


# --------------------------------------------------------------------------- parser


def add_parser(sub) -> argparse.ArgumentParser:
    """Add ``bench`` and its subcommands to the ``crfkit`` subparsers ``sub``."""
    from ..bench.runner import STEP_SEARCH

    b = sub.add_parser(
        "bench",
        help="optimizer benchmark: f*, runs, figures (the SAG paper's Figures 1-2), memory table",
        description="Reproducible optimizer comparisons on the benchmark data sets (l2 = 1/n by default, the SAG "
        "paper's lambda): the reference optimum f* (a tight L-BFGS run, cached), runs of a list of "
        "optimizers for K effective passes (one trace each), figures of f - f* and test error, and "
        "the stored-state memory against naive SAG.",
    )
    bsub = b.add_subparsers(dest="bench_command", metavar="SUBCOMMAND")

    ls = bsub.add_parser("list", help="the benchmark data sets and their splits")
    ls.set_defaults(func=cmd_list)

    fs = bsub.add_parser(
        "fstar",
        help="the reference optimum f* of a data set (cached)",
        description="Compute (or read from the cache: $CRFKIT_CACHE/fstar, else "
        "~/.cache/crfkit/fstar) f* = min f(w) by L-BFGS to ||grad||_inf <= GTOL "
        "or N iterations, and the test error at w*.",
    )
    _data_args(fs)
    fs.add_argument("--l2", type=nonneg_float, help="L2 strength in crfkit's form (default 1/n)")
    _fstar_args(fs)
    fs.add_argument("--threads", type=pos_int, metavar="N", help="threads (default: all cores)")
    fs.add_argument("--json", action="store_true", help="print the cache entry as JSON")
    fs.add_argument("-q", "--quiet", action="store_true", help="no L-BFGS progress lines")
    fs.set_defaults(func=cmd_fstar)

    r = bsub.add_parser(
        "run",
        help="run optimizers for K effective passes, write traces, figures and a summary",
        description="Run each optimizer (-a, repeatable) for --passes effective passes on --data, the test set "
        "scored after every epoch/iteration. Output in --out: one trace per run (NAME.jsonl; "
        "'*' written '_star', parameters after '__'), bench.json (settings, f*, each run's final "
        "objective and role), fstar.json, the figures (needs matplotlib) and summary.md (f - f* "
        "and test error at 10/20/30 passes, the run lowest at each, time to f - f* <= 1e-4 f*, "
        "memory table). "
        f"{', '.join(STEP_SEARCH)} given without eta are run with every eta of --etas and ranked "
        "by the final training objective (best: solid line, second-best: dashed).",
        epilog="Optimizer specs: NAME or NAME:key=value,... e.g. -a 'sag-nus*' -a sg -a sg:eta=0.1 -a lbfgs.",
    )
    _data_args(r)
    r.add_argument(
        "-a",
        "--algorithm",
        action="append",
        required=True,
        metavar="SPEC",
        help="an optimizer to run, NAME[:key=value,...] (repeatable)",
    )
    r.add_argument(
        "--passes",
        type=pos_float,
        default=30.0,
        metavar="K",
        help="effective passes per run (default 30)",
    )
    r.add_argument(
        "--epochs",
        type=pos_int,
        metavar="N",
        help="run exactly N epochs (iterations of a batch method) instead of --passes effective "
        "passes (a step-size calibration counts as passes, so --passes K would stop earlier)",
    )
    r.add_argument(
        "--train-scores",
        action="store_true",
        help="also score the training set every epoch/iteration (train_accuracy, and train_f1 for "
        "chunk labels, in the traces; costs one Viterbi pass over the training set each time)",
    )
    r.add_argument(
        "--skip-done",
        action="store_true",
        help="keep the runs DIR/bench.json lists as finished (same data, l2, seed, passes/epochs) and "
        "run only the others: a stopped benchmark starts again where it stopped",
    )
    r.add_argument("--out", required=True, metavar="DIR", help="output directory")
    r.add_argument("--l2", type=nonneg_float, help="L2 strength in crfkit's form (default 1/n)")
    r.add_argument(
        "--seed", type=int, default=0, help="seed of the stochastic optimizers (default 0)"
    )
    r.add_argument(
        "--etas",
        type=parse_etas,
        metavar="LO:HI|LIST",
        help="step sizes tried for the classic methods without eta: LO:HI are the powers 10^LO..10^HI, "
        "or a comma list (default -4:1; a negative LO needs the = form: --etas=-2:0)",
    )
    r.add_argument(
        "--threads",
        type=pos_int,
        metavar="N",
        help="threads of the full-batch work (L-BFGS, f*, test scoring) (default: all cores)",
    )
    r.add_argument(
        "--no-fstar",
        action="store_true",
        help="do not compute f* (figures then use the lowest objective seen)",
    )
    _fstar_args(r)
    r.add_argument("--no-plot", action="store_true", help="write no figures")
    r.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    r.set_defaults(func=cmd_run)

    pl = bsub.add_parser(
        "plot",
        help="draw the figures of a run directory from its traces",
        description="From the traces (*.jsonl) of DIR and f* (DIR/fstar.json, --fstar, or else the "
        "lowest objective seen) draw suboptimality_passes.png and "
        "suboptimality_seconds.png (f - f*, log scale; seconds exclude the test "
        "scoring), test_error.png (token error in %) and figure.png (the three). "
        "In each group of step sizes the best run is solid, the second-best dashed.",
    )
    pl.add_argument("dir", metavar="DIR", help="directory of traces (crfkit bench run --out)")
    pl.add_argument("--out", metavar="DIR", help="where the PNG files go (default DIR)")
    pl.add_argument("--fstar", type=float, help="f* to subtract (default: DIR/fstar.json)")
    pl.add_argument("--title", help="figure title (default: the data set)")
    pl.add_argument(
        "--all", action="store_true", help="also draw the other step sizes tried (dotted)"
    )
    pl.set_defaults(func=cmd_plot)

    rp = bsub.add_parser(
        "report",
        help="f - f*, test error and time to a tolerance, per run, from the traces",
        description="A markdown table per drawn run: f - f* and test error at the pass marks, and "
        "the passes and optimizer seconds to reach f - f* <= REL_TOL * |f*|.",
    )
    rp.add_argument("dir", metavar="DIR", help="directory of traces")
    rp.add_argument(
        "--at",
        type=_marks,
        default=[10.0, 20.0, 30.0],
        metavar="LIST",
        help="pass marks (default 10,20,30)",
    )
    rp.add_argument(
        "--rel-tol", type=pos_float, default=1e-4, help="relative tolerance (default 1e-4)"
    )
    rp.add_argument("--fstar", type=float, help="f* (default: DIR/fstar.json)")
    rp.add_argument("--all", action="store_true", help="also the other step sizes tried")
    rp.add_argument("--json", action="store_true", help="JSON instead of a table")
    rp.set_defaults(func=cmd_report)

    sc = bsub.add_parser(
        "scores",
        help="train and test scores per epoch, mean over seeds, against a baseline (Cao's Figures 3-4)",
        description="From run directories of the same benchmark with different seeds (crfkit bench run --seed K "
        "--out DIR_K, with --train-scores for the training side), runs matched by trace name: the "
        "mean over the directories of each run's training and test score per epoch (--metric "
        "accuracy: token accuracy, f1: conlleval chunk F1), drawn in two panels with a band from "
        "the lowest to the highest run (--out), and for each run the number of epochs in which its "
        "mean test score is at or above --baseline's. Traces without training scores are read too.",
    )
    sc.add_argument("dirs", nargs="+", metavar="DIR", help="run directories, one per seed")
    sc.add_argument(
        "--metric", choices=("accuracy", "f1"), default="accuracy", help="score (default accuracy)"
    )
    sc.add_argument(
        "--epochs", type=pos_int, default=50, metavar="N", help="the first N epochs (default 50)"
    )
    sc.add_argument(
        "--baseline",
        metavar="RUN",
        help="the run to compare with: a trace name, a label, a spec (l2sgd:period=0) or an "
        "optimizer name only one run has (l2sgd)",
    )
    sc.add_argument("--out", metavar="FILE.png", help="draw the figure into this PNG file")
    sc.add_argument(
        "--json", metavar="FILE", help="also write the summary (counts included) as JSON"
    )
    sc.add_argument("--title", help="figure title")
    sc.add_argument(
        "--finished-only",
        action="store_true",
        help="only the runs each DIR/bench.json lists as finished (leaves out a run still going or "
        "stopped by Ctrl-C)",
    )
    sc.add_argument(
        "--label",
        action="append",
        type=_label_arg,
        metavar="TRACE_NAME:LABEL",
        help="legend label of a run (repeatable), e.g. 'ngd__period=0,update=u1g1:U1*.G1'",
    )
    sc.set_defaults(func=cmd_scores)

    me = bsub.add_parser(
        "memory",
        help="stored-state memory against naive SAG (the paper's §6 table)",
        description="For each --data: the memory of the Sparse, Marginals and Mixed schemes "
        "divided by naive SAG's (n x features x 8 bytes), counted from the encoded "
        "corpus, next to the paper's figures; for each run directory: the "
        "state_bytes / naive_state_bytes the optimizers reported in their traces.",
    )
    me.add_argument("dirs", nargs="*", metavar="DIR", help="run directories (traces)")
    _data_args(me, many=True)
    me.add_argument("--json", action="store_true", help="JSON instead of tables")
    me.set_defaults(func=cmd_memory)

    def _help(args, _b=b) -> int:
        _b.print_help(sys.stderr)
        return 2

    b.set_defaults(func=_help)
    return b
