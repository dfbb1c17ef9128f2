"""``crfkit train``: its parser and :func:`cmd_train`, which trains a model from the parsed
arguments.

One column file (``-f columns``, CRF++ templates or ``--features``), one CRFsuite attribute file
(``-f crfsuite``), or, with ``--dask ADDRESS|local:N``, several files (shards) read and encoded by
the workers of a Dask cluster (:func:`crfkit.distributed.train_files`; the single-process path never
imports dask).  ``--incremental`` grows a window feature set stage by stage
(:mod:`crfkit.training.incremental`).  The progress bars (:class:`Bars`) are drawn on a terminal
only.  ``crfkit cv`` trains each fold through :func:`cmd_train` too.
"""

from __future__ import annotations

import os
import sys
import time

from ..errors import CrfkitError, DataError, TrainingDiverged
from .common import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    close_source,
    detect_format,
    feature_parts,
    human_bytes,
    print_error,
    print_stderr,
    read_attribute_file,
    recode,
    source_name,
    warnings_as_lines,
)
from .train_options import add_train_arguments


def _load_templates(path: str | None):
    from ..features.templates import Templates, default_chunking_templates

    if path is None:
        return default_chunking_templates()
    return Templates.from_file(path)


class Bars:
    """The progress bars of ``crfkit train`` on standard error.

    Drawn only when standard error is a terminal (see
    :func:`crfkit.progress.stream_is_interactive`) and not ``-q``: one bar
    while the training file is read and its features extracted, one over the
    iterations (out of ``--max-iterations`` when given, else a counter) with
    the current objective.  While a bar is up the per-iteration lines of
    :func:`crfkit.train.train` are left out unless ``-v``; other log lines
    are printed above the bar.  Off a terminal nothing changes: every line
    goes to standard error as before.
    """

    def __init__(self, quiet: bool, verbose: bool, max_iterations: int | None):
        from ..progress import stream_is_interactive

        self.quiet = quiet
        self.verbose = verbose
        self.enabled = not quiet and stream_is_interactive(sys.stderr)
        self.max_iterations = max_iterations
        self.current = None  # the bar on screen, if any
        self.train_bar = None

    def __call__(self, desc: str, total: int | None):
        """A bar factory for the readers (``load_columns(progress=...)``)."""
        from ..progress import Progress

        bar = Progress(total=total, desc=desc, stream=sys.stderr, enabled=self.enabled, unit="seq")
        self.current = bar
        return bar

    def log(self, msg: str) -> None:
        if self.quiet:
            return
        if self.enabled and not self.verbose and msg.startswith("iter "):
            return  # the bar shows the iterations
        bar = self.current
        if bar is not None and not bar.closed:
            bar.write(msg)
        else:
            print_stderr(msg)

    def callback(self, rec: dict) -> None:
        """``train(callback=...)``: advance the iteration bar."""
        if not self.enabled:
            return None
        from ..progress import Progress

        if self.train_bar is None:
            self.train_bar = Progress(
                total=self.max_iterations,
                desc="training",
                stream=sys.stderr,
                enabled=True,
                unit="iter",
                start=time.monotonic() - float(rec.get("wall_s", 0.0)),
            )
            self.current = self.train_bar
        bar = self.train_bar
        post = f"obj {rec['objective']:.8g}"
        if "dev_f1" in rec:
            post += f" dev F1 {rec['dev_f1']:.2f}"
        elif "dev_accuracy" in rec:
            post += f" dev acc {rec['dev_accuracy']:.2f}%"
        bar.postfix = post
        bar.update(int(rec["iteration"]) - bar.n)
        return None

    def close(self) -> None:
        if self.train_bar is not None:
            self.train_bar.close()


def _train_crfsuite(args, kwargs, progress=None):
    from ..train import train

    if args.template is not None:
        raise CrfkitError(
            "-t/--template applies to column files; a CRFsuite attribute file already lists "
            "the attributes of each item"
        )
    if args.no_pad:
        raise CrfkitError(
            "--no-pad applies to templates over column files, not to CRFsuite attribute files"
        )
    src, dev_src = args.train_source, args.dev_source
    name = source_name(src)
    X, Y, seqs = read_attribute_file(src, progress)
    if any(s.weight != 1.0 for s in seqs):
        # CRFsuite's @weight:W lines: the sample weights of the sequences (crfkit.train.train,
        # weights=)
        if not any(s.weight > 0 for s in seqs):
            raise DataError("every sequence has @weight:0: nothing to train on", name)
        kwargs = dict(kwargs, weights=[s.weight for s in seqs])
    X_dev = Y_dev = None
    if dev_src is not None:
        # (the dev file's @weight lines are read and ignored: dev scores are unweighted)
        X_dev, Y_dev, dseqs = read_attribute_file(dev_src)
    meta = {"input_format": "crfsuite", "train_file": name}
    try:
        return train(X, Y, X_dev=X_dev, Y_dev=Y_dev, meta=meta, **kwargs)
    except DataError as e:
        # a feature value beyond crfkit's bound, found when encoding: say where it is in the file
        if getattr(e, "value_problem", None) is None:
            raise
        dev = e.path == "<dev data>"
        ss, fname = (dseqs, source_name(dev_src)) if dev else (seqs, name)
        s = ss[e.sequence]
        raise DataError(e.value_problem, fname, s.line + e.token) from None


def cmd_train(args) -> int:
    from ..pipeline import train_columns
    from ..train import ALGORITHMS

    if args.algorithm not in ALGORITHMS:
        raise CrfkitError(
            f"unknown algorithm {args.algorithm!r}; available: {', '.join(ALGORITHMS)}"
        )
    if (
        args.algorithm == "sgd-l1"
        and args.c1 is None
        and args.l1 is None
        and args.rho1 is None
        and not args.quiet
    ):
        print_stderr(
            "crfkit train: warning: -a sgd-l1 without --c1 (or --l1/--rho1) has no L1 term: it trains "
            "with L2 only and gives a dense model; give --c1 for the L1-regularised training SGD-L1 is for"
        )
    # refuse an output that cannot be written before training, not after it (a directory, a
    # read-only place, a dangling symlink): crfkit.io.atomic.check_writable creates and removes a
    # probe file there
    from ..io.atomic import check_writable

    check_writable(args.model, "the model")
    # the vectors that a full-batch run allocates and frees at every evaluation get mappings of
    # their own, not holes in the C heap (crfkit.memtrim.opt_in_mmap_threshold: 10-13 MB of
    # CoNLL-2000's peak)
    if args.algorithm in ("lbfgs", "owlqn"):
        from ..memtrim import opt_in_mmap_threshold

        opt_in_mmap_threshold()
    if args.checkpoint is not None:
        check_writable(args.checkpoint, "the checkpoint")
    enc = getattr(args, "encoding", None)
    # several training files (globs too) train on a Dask cluster: _check_dask_args, _train_dask
    files = args.train_file if isinstance(args.train_file, list) else [args.train_file]
    dask_spec = getattr(args, "dask", None)
    if dask_spec:
        _check_dask_args(args, files)
    elif len(files) > 1:
        raise CrfkitError(
            f"{len(files)} training files: several files (shards) train on a Dask cluster "
            "(--dask local:N or --dask SCHEDULER_ADDRESS); in one process, give one file"
        )
    args.train_file = files[0]
    fmt, args.train_source = detect_format(args.format, recode(args.train_file, enc))
    args.dev_source = recode(args.dev, enc)
    if args.dev is not None and args.format == "auto":
        dev_fmt, args.dev_source = detect_format("auto", args.dev_source)
        if dev_fmt != fmt:
            raise CrfkitError(
                f"--format auto: the training file reads as {fmt} but the dev file as {dev_fmt}; "
                "give --format explicitly"
            )
    features = getattr(args, "features", None)
    if features is not None:
        if args.template is not None:
            raise CrfkitError("give -t/--template or --features, not both")
        if fmt != "columns":
            raise CrfkitError(
                "--features generates templates over a column file's first column; the input "
                "reads as a CRFsuite attribute file"
            )
        from ..features.windows import preset_templates

        templates = preset_templates(features)
    else:
        templates = _load_templates(args.template) if fmt == "columns" else None
    if getattr(args, "incremental", False):
        if features is None:
            raise CrfkitError(
                "--incremental grows a window feature set: give --features nettalk:N-grm..."
            )
        for opt, bad in (
            ("--resume", args.resume),
            ("--checkpoint", args.checkpoint),
            ("--init-model", args.init_model),
            ("--dense-columns", args.dense_columns),
            ("--no-pad", args.no_pad or None),
            ("--partial-labels", args.partial_labels or None),
        ):
            if bad is not None:
                raise CrfkitError(f"--incremental does not support {opt}")
    dense_cols = None
    if args.dense_columns is not None:
        if fmt != "columns":
            raise CrfkitError(
                "--dense-columns needs a column file (CRFsuite attribute files give real values "
                "as attr:value)"
            )
        from ..pipeline import parse_columns_spec

        try:
            parse_columns_spec(args.dense_columns)
        except ValueError as e:
            raise CrfkitError(f"--dense-columns: {e}") from None
        dense_cols = args.dense_columns
    weight_col = None
    if args.weight_column is not None:
        if fmt != "columns":
            raise CrfkitError(
                "--weight-column needs a column file (a CRFsuite attribute file gives a sequence's "
                "weight on an @weight:W line before its items)"
            )
        weight_col = args.weight_column
    bars = Bars(args.quiet, args.verbose, args.max_iterations)
    log = bars.log
    progress = bars if bars.enabled else None
    reg = {
        k: getattr(args, k)
        for k in ("c1", "c2", "l1", "l2", "rho1", "rho2")
        if getattr(args, k) is not None
    }
    kwargs = dict(
        algorithm=args.algorithm,
        max_iterations=args.max_iterations,
        epsilon=args.epsilon,
        delta=args.delta,
        period=args.period,
        gtol=args.gtol,
        threads=args.threads,
        trace=args.trace,
        verbose=not args.quiet,
        log=log,
        callback=bars.callback,
        dev_every=args.dev_every,
        support=args.support,
        transitions=args.transitions,
        min_freq=args.min_freq,
        checkpoint=args.checkpoint,
        checkpoint_every=args.checkpoint_every,
        resume=args.resume,
        **reg,
    )
    if getattr(args, "sparse_fb", "off") != "off":
        kwargs["sparse_fb"] = args.sparse_fb
    if getattr(args, "lbfgs_history", "auto") != "auto":
        kwargs["history"] = args.lbfgs_history
    if args.param:
        kwargs["params"] = dict(args.param)
    if args.dev_stop is not None:
        if args.dev is None:
            raise CrfkitError("--dev-stop needs a development file (--dev)")
        kwargs.update(dev_stop=args.dev_stop, dev_metric=args.dev_metric)
    if args.fine_tune:
        kwargs.update(fine_tune=args.fine_tune, fine_tune_l2=args.fine_tune_l2)
    if getattr(args, "partial_labels", False):
        if fmt != "columns":
            raise CrfkitError("--partial-labels reads the label column of column files")
        kwargs["partial_labels"] = True
        if args.labels:
            kwargs["labels"] = [lab.strip() for lab in args.labels.split(",") if lab.strip()]
    elif getattr(args, "labels", None):
        raise CrfkitError(
            "--labels names the label set of partially labelled data: it needs --partial-labels"
        )
    if args.algorithm not in ("lbfgs", "owlqn"):
        kwargs["seed"] = args.seed
    if args.init_model is not None:
        if args.resume is not None:
            raise CrfkitError(
                "--init-model and --resume exclude each other: a checkpoint already holds the weights"
            )
        from ..interop import load_any

        # a crfkit model, or a peer's (CRFsuite, CRF++, Wapiti) detected by its first bytes
        kwargs["init"] = load_any(args.init_model)
    if not args.quiet:
        if fmt == "crfsuite":
            print_stderr(f"crfkit train: {args.train_file} (CRFsuite attribute file)")
        else:
            print_stderr(
                f"crfkit train: {args.train_file} with "
                f"{features or args.template or 'the built-in chunking templates'} "
                f"({len(templates.unigram)} unigram templates, "
                f"{'padded' if not args.no_pad else 'no padding'})"
            )
    try:
        try:
            with warnings_as_lines():
                if dask_spec:
                    res = _train_dask(args, files, fmt, templates, kwargs, log)
                elif fmt == "crfsuite":
                    res = _train_crfsuite(args, kwargs, progress)
                elif getattr(args, "incremental", False):
                    res = _train_incremental(args, features, kwargs)
                else:
                    res = train_columns(
                        args.train_source,
                        templates,
                        dev_path=args.dev_source,
                        pad=not args.no_pad,
                        progress=progress,
                        dense_columns=dense_cols,
                        weight_column=weight_col,
                        **kwargs,
                    )
        finally:
            bars.close()
            close_source(args.train_source)
            close_source(args.dev_source)
    except KeyboardInterrupt:
        print_error("interrupted before the optimizer started; no model was written")
        return EXIT_INTERRUPTED
    except TrainingDiverged as e:
        print_error(f"{e}\nno model was written: {args.model} is left as it was")
        return EXIT_ERROR
    try:
        size = res.model.save(args.model)
    except OSError as e:
        print_error(
            f"{e}; {args.model} is left as it was"
            + (
                f" (the checkpoint {args.checkpoint} holds the trained state: --resume it with the same "
                "--max-iterations to write the model without starting over)"
                if args.checkpoint
                else ""
            )
        )
        return EXIT_ERROR
    m = res.model
    interrupted = res.status == "interrupted"
    out = sys.stdout
    print(f"model: {args.model} ({human_bytes(size)}, {size} bytes)", file=out)
    print(
        f"labels: {m.space.n_labels}; attributes: {m.space.n_attributes}; features: {m.space.n_features} "
        f"({feature_parts(m.space)}); non-zero weights: {m.n_active}",
        file=out,
    )
    c1, c2 = res.reg.crfsuite(float(m.meta.get("train_weight", m.meta.get("n_train", 1))))
    print(
        f"training: {m.meta.get('algorithm', args.algorithm)}, {res.iterations} iterations, "
        f"{res.effective_passes:.0f} passes, "
        f"{res.seconds:.2f} s; status: {res.status} ({res.message})",
        file=out,
    )
    if res.threads:
        print(f"threads: chosen by speed ({res.threads})", file=out)
    print(
        f"objective: {res.objective:.10g} (per sequence, l2={res.reg.l2:.6g}); CRFsuite units "
        f"{res.objective_crfsuite:.6f} (c2={c2:.6g}, c1={c1:.6g})",
        file=out,
    )
    if res.history and "dev_accuracy" in res.history[-1]:
        h = res.history[-1]
        best_it = None if m.meta.get("fine_tune") else m.meta.get("dev_best_iteration")
        if (
            best_it is not None
        ):  # --dev-stop kept the best model: report its scores, not the last iteration's
            h = next(
                (r for r in res.history if r.get("iteration") == best_it and "dev_accuracy" in r), h
            )
        dev = f"dev accuracy {h['dev_accuracy']:.2f}%"
        if "dev_f1" in h:
            dev += f", dev F1 {h['dev_f1']:.2f}"
        if best_it is not None:
            dev += f" (the saved model: iteration {best_it}, best dev {m.meta.get('dev_metric', 'score')})"
        print(dev, file=out)
    out.flush()
    if interrupted:
        # not an error: the work is kept (exit status 130 tells scripts the run was cut short)
        if args.checkpoint:
            # the checkpoint holds the optimizer's state too: --resume continues the same run
            import shlex

            how = (
                f"or continued where it stopped: the same command with --resume "
                f"{shlex.quote(str(args.checkpoint))}"
            )
        else:
            how = "or continued with --init-model"
        print_stderr(
            f"crfkit: interrupted after {res.iterations} iterations; the model reached so far was saved "
            f"to {args.model} (it can be used as is, {how})"
        )
        return EXIT_INTERRUPTED
    return 0


def _train_incremental(args, features: str, kwargs: dict):
    """`crfkit train --features nettalk:... --incremental`:
    crfkit.training.incremental.train_incremental."""
    from ..io.columns import read_columns_list
    from ..training.incremental import train_incremental

    sents = read_columns_list(args.train_source)
    dev = read_columns_list(args.dev_source) if args.dev_source is not None else None
    for name, ss in (("training", sents), ("dev", dev or [])):
        for snt in ss[:1]:
            if len(snt.columns[0]) < 1:
                raise DataError(
                    f"the {name} data has no observation column",
                    str(args.train_file if name == "training" else args.dev),
                    snt.line,
                )
    kw = dict(kwargs)
    for k in ("callback", "checkpoint", "checkpoint_every", "resume", "transitions", "min_freq"):
        kw.pop(k, None)
    trace = kw.pop("trace", None)
    support = kw.pop("support", "all")
    its = (
        [int(x) for x in args.stage_iterations.split(",")]
        if "," in args.stage_iterations
        else int(args.stage_iterations)
    )
    r = train_incremental(
        sents,
        features=features,
        dev=dev,
        stage_iterations=its,
        final_iterations=kw.pop("max_iterations", None),
        trace=trace,
        support=support,
        **kw,
    )
    if not args.quiet:
        for st in r.stages:
            print_stderr(
                f"stage {st['stage']}: windows {', '.join(st['windows'])}: +{st['features_added']} "
                f"features (of {st['candidate_features']} candidates), {st['features']} in all, "
                f"{st['active']} active, {st['iterations']} iterations, {st['wall_s']:.1f}s"
            )
    return r.result


# --------------------------------------------------------------------------- --dask


def _check_dask_args(args, files) -> None:
    """Refuse the options the Dask path does not take, before anything is read."""
    if files == ["-"] or "-" in files:
        raise CrfkitError(
            "--dask: the workers read the training files: standard input (-) cannot be a shard"
        )
    for opt, name in (
        ("encoding", "--encoding"),
        ("dense_columns", "--dense-columns"),
        ("partial_labels", "--partial-labels"),
        ("fine_tune", "--fine-tune"),
        ("init_model", "--init-model"),
    ):
        if getattr(args, opt, None):
            raise CrfkitError(f"{name} is not supported with --dask yet")


def _train_dask(args, files, fmt, templates, kwargs, log):
    """Start or reach the cluster, print the dashboard link, train, close what was started."""
    from ..distributed import connect, dashboard, train_files

    spec = args.dask
    local = spec.startswith("local:")
    client = connect(spec)
    try:
        nworkers = len(client.scheduler_info()["workers"])
        threads = args.dask_threads or args.threads
        if threads is None:
            from ..parallel import cpu_count

            threads = max(1, cpu_count() // max(nworkers, 1)) if local else 1
        link = dashboard(client)
        if not args.quiet:
            log(
                f"dask: {'LocalCluster' if local else spec} with {nworkers} workers, {threads} numba threads per task"
                + (f"; dashboard: {link}" if link else " (no dashboard: install bokeh for one)")
            )
        kw = dict(kwargs)
        kw["threads"] = threads
        kw["dask_worker_timeout"] = getattr(args, "dask_worker_timeout", None)
        return train_files(
            client,
            files,
            templates=templates,
            format=fmt,
            pad=not args.no_pad,
            dev_path=os.fspath(args.dev) if args.dev is not None else None,
            **kw,
        )
    finally:
        cluster = getattr(client, "cluster", None)
        client.close()
        if local and cluster is not None:
            cluster.close()


# --------------------------------------------------------------------------- parser


def add_parser(sub) -> None:
    """Add ``train`` to the ``crfkit`` subparsers ``sub``."""
    t = sub.add_parser(
        "train",
        help="train a model on a labelled column file",
        description="Train a CRF on a column file (observation columns, label last; a blank "
        "line after each sentence), like crf_learn / crfsuite learn.",
    )
    add_train_arguments(t)
    t.set_defaults(func=cmd_train)
