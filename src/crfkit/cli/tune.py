"""``crfkit tune``: choose c1 / c2 by cross-validation (or a dev set) along a warm-started
regularisation path (:class:`crfkit.tuning.CRFSearchCV`).

    crfkit tune train.txt -k 3 --c1 0,0.05,0.1,0.5 --c2 0.001:1:4 -m best.crfkit [-t template]
    crfkit tune train.txt --dev dev.txt --c1 0.01:1:5 --c2 0.01,0.1 -m best.crfkit

The features are extracted once, each fold's training part is encoded once, and the candidates run
from strong to weak regularisation, each warm-started from its nearest finished neighbour.  It
prints a line per candidate (score, iterations, seconds, the candidate it started from) in the
order they ran, a table in the grid's order, the best settings, and writes the best model
(``-m``: with ``-k``, retrained on the whole file from the best candidate's first-fold model; with
``--dev``, the best candidate's model itself).  Score: conlleval chunk F1 when the labels follow a
chunk scheme, else token accuracy (``--metric``).  The finished candidates go to a state file
(``--state``, default ``MODEL.tune.jsonl``): interrupted with Ctrl-C, the same command resumes where
it stopped.
"""

from __future__ import annotations

from ..errors import CrfkitError
from .common import (
    EXIT_INTERRUPTED,
    close_source,
    detect_format,
    nonneg_float,
    nonneg_int,
    pos_int,
    print_stderr,
    read_attribute_file,
)


def _scorer(metric: str, labels):
    from ..metrics import conlleval, label_scheme, token_accuracy

    if metric == "auto":
        metric = "f1" if label_scheme(sorted(labels)) else "accuracy"
    if metric == "f1":
        return "conlleval F1", lambda est, X, y: conlleval(y, est.predict(X)).f1 / 100.0
    return "token accuracy", lambda est, X, y: token_accuracy(y, est.predict(X))


def _read(args, path, templates):
    from ..pipeline import load_columns

    fmt, src = detect_format(args.format, path)
    try:
        if fmt == "crfsuite":
            if args.template is not None:
                raise CrfkitError("-t/--template applies to column files, not to attribute files")
            X, Y, _ = read_attribute_file(src)
            ncol = None
        else:
            X, Y, sents = load_columns(src, templates, pad=not args.no_pad)
            ncol = len(sents[0].columns[0]) if sents else None
    finally:
        close_source(src)
    if not Y:
        raise CrfkitError(f"{path}: no sequences to train on")
    return fmt, X, Y, ncol


def cmd_tune(args) -> int:
    from ..estimator import CRF
    from ..train import ALGORITHMS
    from ..tuning import CRFSearchCV, parse_grid

    if args.algorithm not in ALGORITHMS:
        raise CrfkitError(
            f"unknown algorithm {args.algorithm!r}; available: {', '.join(ALGORITHMS)}"
        )
    grid = {}
    if args.c1 is not None:
        grid["c1"] = parse_grid(args.c1, "--c1")
    if args.c2 is not None:
        grid["c2"] = parse_grid(args.c2, "--c2")
    if not grid:
        raise CrfkitError("give the grid to search: --c1 GRID and/or --c2 GRID")
    from .train import _load_templates

    templates = _load_templates(args.template)
    if templates.bigram_observation:
        raise CrfkitError(
            "crfkit tune does not support bigram-observation templates yet (label pair x "
            "observation); use crfkit cv per setting"
        )
    log = (lambda s: None) if args.quiet else print_stderr
    fmt, X, Y, ncol = _read(args, args.train, templates)
    X_dev = Y_dev = None
    if args.dev is not None:
        _, X_dev, Y_dev, _ = _read(args, args.dev, templates)
    meta = {"input_format": fmt, "train_file": args.train}
    transitions = None
    if fmt == "columns":
        # what crfkit tag needs to read a column file with this model (as crfkit train writes)
        meta.update(
            {"templates": templates.source, "template_pad": not args.no_pad, "columns": ncol}
        )
        if not templates.bigram:
            transitions = "none"
    train_params = {"meta": meta}
    if transitions is not None:
        train_params["transitions"] = transitions
    est = CRF(
        algorithm=args.algorithm,
        max_iterations=args.max_iterations,
        epsilon=args.epsilon,
        delta=args.delta,
        period=args.period,
        threads=args.threads,
        min_freq=args.min_freq,
        all_possible_transitions=args.all_transitions or None,
        train_params=train_params,
    )
    labels = {lab for s in Y for lab in s}
    name, scorer = _scorer(args.metric, labels)
    state = args.state or (args.model + ".tune.jsonl")
    search = CRFSearchCV(
        est,
        grid,
        cv=args.folds,
        fold_seed=args.fold_seed,
        scoring=scorer,
        warm_start=not args.cold,
        state=state,
        progress=None if not args.quiet else False,
        log=log,
        warm_max_iterations=args.warm_max_iterations,
        n_jobs=args.jobs,
    )
    log(
        f"tune: {len(X)} sequences, "
        + (f"dev set {args.dev}" if args.dev else f"{args.folds} folds (seed {args.fold_seed})")
        + f", score: {name}, state file {state}"
    )
    try:
        search.fit(X, Y, X_dev=X_dev, y_dev=Y_dev)
    except KeyboardInterrupt:
        print_stderr(
            f"interrupted: the finished candidates are in {state}; run the same command to resume"
        )
        return EXIT_INTERRUPTED
    r = search.cv_results_
    print(
        f"{'#':>3s} {'c1':>10s} {'c2':>10s} {name:>14s} {'sd':>7s} "
        f"{'iterations':>10s} {'seconds':>8s} {'from':>5s}"
    )
    for i in search.path_:
        p = r["params"][i]
        c1 = p.get("c1", est.c1)
        c2 = p.get("c2", est.c2)
        mark = " *" if i == search.best_index_ else ""
        print(
            f"{i:3d} {_num(c1):>10s} {_num(c2):>10s} {r['mean_test_score'][i]:14.4f} "
            f"{r['std_test_score'][i]:7.4f} {int(r['iterations'][i]):10d} "
            f"{r['mean_fit_time'][i] * search.n_splits_:8.2f} "
            f"{('-' if r['warm_from'][i] < 0 else str(int(r['warm_from'][i]))):>5s}"
            + (" (resumed)" if r["resumed"][i] else "")
            + mark
        )
    best = search.best_params_
    print(
        f"best: {' '.join(f'{k}={v:g}' for k, v in best.items())}  {name} "
        f"{search.best_score_:.4f}  (total iterations {int(r['iterations'].sum())})"
    )
    size = search.best_estimator_.model_.save(args.model)
    log(f"model written to {args.model} ({size} bytes)")
    return 0


def _num(v) -> str:
    return "default" if v is None else f"{v:.6g}"


def add_parser(sub) -> None:
    """Add ``tune`` to the ``crfkit`` subparsers ``sub``."""
    t = sub.add_parser(
        "tune",
        help="choose c1/c2 by cross-validation along a warm-started regularisation path",
        description="Search a grid of c1 x c2 by k-fold cross-validation (or on a dev set): "
        "features encoded once per fold, candidates run from strong to weak regularisation, "
        "each warm-started from its nearest finished neighbour. A GRID is comma-separated "
        "numbers (0,0.01,0.1) or LO:HI:N (N log-spaced values).",
    )
    t.add_argument("train", help="training data (column file or CRFsuite attribute file)")
    where = t.add_mutually_exclusive_group()
    where.add_argument("--dev", metavar="DEV", help="score on this file instead of folds")
    where.add_argument(
        "-k", "--folds", type=pos_int, default=3, metavar="K", help="folds (default 3)"
    )
    t.add_argument("--c1", metavar="GRID", help="L1 strengths (CRFsuite's c1)")
    t.add_argument("--c2", metavar="GRID", help="L2 strengths (CRFsuite's c2)")
    t.add_argument("-m", "--model", required=True, help="where to write the best model")
    t.add_argument("-a", "--algorithm", default="lbfgs", help="optimizer (default lbfgs)")
    t.add_argument("-t", "--template", help="CRF++ template file (column files)")
    t.add_argument(
        "-f",
        "--format",
        choices=["auto", "columns", "crfsuite"],
        default="auto",
        help="input format (default: detected)",
    )
    t.add_argument("--no-pad", action="store_true", help="templates do not pad beyond the edges")
    t.add_argument("--metric", choices=["auto", "f1", "accuracy"], default="auto")
    t.add_argument("--max-iterations", type=pos_int, metavar="N")
    t.add_argument(
        "--warm-max-iterations",
        type=pos_int,
        metavar="N",
        help="iteration cap of the warm-started candidates (default: --max-iterations)",
    )
    t.add_argument("--epsilon", type=nonneg_float, metavar="E")
    t.add_argument("--delta", type=nonneg_float, metavar="D")
    t.add_argument("--period", type=pos_int, metavar="P")
    t.add_argument("--min-freq", type=nonneg_float, metavar="F")
    t.add_argument("--all-transitions", action="store_true", help="every label pair a feature")
    t.add_argument("--threads", type=nonneg_int, metavar="N")
    t.add_argument(
        "-j",
        "--jobs",
        type=pos_int,
        default=1,
        metavar="N",
        help="train a candidate's folds in N processes at once (the threads are shared out)",
    )
    t.add_argument("--fold-seed", type=nonneg_int, default=0, metavar="S")
    t.add_argument("--state", metavar="FILE", help="resume file (default MODEL.tune.jsonl)")
    t.add_argument("--cold", action="store_true", help="no warm starts: every candidate from zero")
    t.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    t.set_defaults(func=cmd_tune)


__all__ = ["add_parser", "cmd_tune"]
