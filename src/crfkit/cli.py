"""The ``crfkit`` command line: train, tag, eval, info, demo.

Modelled on ``crf_learn`` / ``crf_test`` (CRF++), ``crfsuite learn`` / ``tag``
and ``wapiti train`` / ``label``::

    crfkit train train.txt -m chunker.crfkit -t template.txt --c2 1
    crfkit tag -m chunker.crfkit test.txt > tagged.txt
    crfkit eval tagged.txt
    crfkit info -m chunker.crfkit --top 20
    crfkit demo

CRFsuite attribute files (``LABEL<TAB>attr[:weight]...``, see
:mod:`crfkit.io.crfsuite`) train and tag with ``--format crfsuite``::

    crfkit train train.crfsuite.txt -m model.crfkit --format crfsuite
    crfkit tag -m model.crfkit --format crfsuite test.crfsuite.txt --eval

and the benchmark data sets are listed, downloaded and checked with
``crfkit data list | fetch NAME... | verify``.

Every error crfkit raises on purpose (:class:`~crfkit.errors.CrfkitError`)
is printed as ``crfkit: error: <message>`` with exit status 2, never as a
traceback.  Ctrl-C during training saves the model reached so far and exits
with status 130.
"""
from __future__ import annotations

import argparse
import gzip
import math
import os
import sys
import time
from typing import Sequence, TextIO

from . import __version__
from .errors import CrfkitError, DataError, TrainingDiverged

EXIT_ERROR = 2
EXIT_INTERRUPTED = 130


def _err(msg: str) -> None:
    print(f"crfkit: error: {msg}", file=sys.stderr, flush=True)


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _human_bytes(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    for unit in ("KiB", "MiB", "GiB"):
        n /= 1024.0
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}"
    return f"{n:.1f} GiB"  # pragma: no cover


def _nonneg_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(v) or v < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
    return v


def _pos_float(text: str) -> float:
    v = _nonneg_float(text)
    if v == 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return v


def _pos_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text!r}")
    return v


def _nonneg_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text!r}")
    return v


# --------------------------------------------------------------------------- train

def _load_templates(path: str | None):
    from .features.templates import Templates, default_chunking_templates
    if path is None:
        return default_chunking_templates()
    return Templates.from_file(path)


FORMATS = ("columns", "crfsuite", "auto")


def _detect_format(fmt: str, path: str):
    """(``"columns"`` or ``"crfsuite"``, the source to read).

    ``auto`` opens the input once (:func:`crfkit.io.columns.open_source`) and
    applies :func:`crfkit.io.crfsuite.looks_like_crfsuite` to its first lines,
    which the reader then gets again from the same stream: a pipe, a FIFO,
    ``/dev/fd/N`` or standard input is never reopened nor read twice, and
    never read whole into memory. The caller closes the returned source.
    """
    if not isinstance(path, str):   # already read and re-encoded (--encoding): bytes in memory
        if fmt != "auto":
            return fmt, path
        from .io.crfsuite import DETECT_LINES, looks_like_crfsuite
        head = path.getvalue()[: 1 << 20].decode("utf-8", errors="replace").splitlines()[: 4 * DETECT_LINES]
        return ("crfsuite" if looks_like_crfsuite(head) else "columns"), path
    if fmt != "auto":
        return fmt, path
    from .io.columns import open_source
    from .io.crfsuite import DETECT_LINES, looks_like_crfsuite

    src = open_source(path)
    head = src.sniff(4 * DETECT_LINES)
    return ("crfsuite" if looks_like_crfsuite(head) else "columns"), src


def _close_source(src) -> None:
    close = getattr(src, "close", None)
    if close is not None and not isinstance(src, str):
        close()


def _recode(path, encoding: str | None):
    """``path`` itself when ``encoding`` is None or UTF-8; else the file read and decoded from
    ``encoding`` (a byte-order mark dropped) into UTF-8 bytes in memory, named as the file."""
    if path is None or not encoding or encoding.lower().replace("-", "").replace("_", "") in ("utf8", "utf8sig"):
        return path
    import codecs
    try:
        codecs.lookup(encoding)
    except LookupError:
        raise CrfkitError(f"--encoding {encoding}: unknown encoding") from None
    if not isinstance(path, str):   # already in memory (crfkit serve: a request's body)
        raw, name = path.getvalue(), getattr(path, "name", "<input>")
        return _recoded(raw, encoding, name)
    name = "<stdin>" if path == "-" else path
    try:
        if path == "-":
            raw = sys.stdin.buffer.read()
        elif path.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                raw = f.read()
        else:
            with open(path, "rb") as f:
                raw = f.read()
    except OSError as e:
        raise DataError(f"cannot read: {e.strerror or e}", name) from None
    return _recoded(raw, encoding, name)


def _recoded(raw: bytes, encoding: str, name: str):
    import io
    try:
        text = raw.decode(encoding)
    except UnicodeDecodeError as e:
        raise DataError(f"not valid {encoding} (byte {e.start + 1} of the file)", name) from None
    src = io.BytesIO(text.lstrip("\ufeff").encode("utf-8"))
    src.name = name
    return src


def _source_name(src) -> str:
    if isinstance(src, str):
        return "<stdin>" if src == "-" else src
    return str(getattr(src, "name", "<stream>"))


def _read_attribute_file(src, progress=None):
    """(X, Y, sequences) of a CRFsuite attribute file; ``progress``: a bar
    factory ``progress(desc, total)`` (see :class:`_Bars`) or ``None``."""
    from .io.crfsuite import read_crfsuite, read_crfsuite_list
    name = _source_name(src)
    if progress is None:
        seqs = read_crfsuite_list(src, name=name)
    else:
        seqs = []
        with progress(f"reading {name}", None) as bar:
            for s in read_crfsuite(src, name=name):
                seqs.append(s)
                bar.update(1)
    return [s.attributes for s in seqs], [s.labels for s in seqs], seqs


class _Bars:
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
        from .progress import stream_is_interactive
        self.quiet = quiet
        self.verbose = verbose
        self.enabled = not quiet and stream_is_interactive(sys.stderr)
        self.max_iterations = max_iterations
        self.current = None  # the bar on screen, if any
        self.train_bar = None

    def __call__(self, desc: str, total: int | None):
        """A bar factory for the readers (``load_columns(progress=...)``)."""
        from .progress import Progress
        bar = Progress(total=total, desc=desc, stream=sys.stderr, enabled=self.enabled,
                       unit="seq")
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
            _log(msg)

    def callback(self, rec: dict) -> None:
        """``train(callback=...)``: advance the iteration bar."""
        if not self.enabled:
            return None
        from .progress import Progress
        if self.train_bar is None:
            self.train_bar = Progress(total=self.max_iterations, desc="training", stream=sys.stderr,
                                      enabled=True, unit="iter",
                                      start=time.monotonic() - float(rec.get("wall_s", 0.0)))
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
    from .train import train
    if args.template is not None:
        raise CrfkitError("-t/--template applies to column files; a CRFsuite attribute file already lists "
                          "the attributes of each item")
    if args.no_pad:
        raise CrfkitError("--no-pad applies to templates over column files, not to CRFsuite attribute files")
    src, dev_src = args.train_source, args.dev_source
    name = _source_name(src)
    X, Y, seqs = _read_attribute_file(src, progress)
    if any(s.weight != 1.0 for s in seqs):
        # CRFsuite's @weight:W lines: the sample weights of the sequences (crfkit.train.train, weights=)
        if not any(s.weight > 0 for s in seqs):
            raise DataError("every sequence has @weight:0: nothing to train on", name)
        kwargs = dict(kwargs, weights=[s.weight for s in seqs])
    X_dev = Y_dev = None
    if dev_src is not None:
        # (the dev file's @weight lines are read and ignored: dev scores are unweighted)
        X_dev, Y_dev, dseqs = _read_attribute_file(dev_src)
    meta = {"input_format": "crfsuite", "train_file": name}
    try:
        return train(X, Y, X_dev=X_dev, Y_dev=Y_dev, meta=meta, **kwargs)
    except DataError as e:
        # a feature value beyond crfkit's bound, found when encoding: say where it is in the file
        if getattr(e, "value_problem", None) is None:
            raise
        dev = e.path == "<dev data>"
        ss, fname = (dseqs, _source_name(dev_src)) if dev else (seqs, name)
        s = ss[e.sequence]
        raise DataError(e.value_problem, fname, s.line + e.token) from None


class _warnings_as_lines:
    """crfkit's own RuntimeWarnings (feature scale, a checkpoint or trace not written) as
    ``crfkit: warning: ...`` lines on standard error, also with -q; other warnings as Python shows them."""

    def __enter__(self):
        import warnings
        self.ctx = warnings.catch_warnings()
        self.ctx.__enter__()
        prev = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None):
            if category is RuntimeWarning and "crfkit" in filename:
                print(f"crfkit: warning: {message}", file=sys.stderr, flush=True)
            else:
                prev(message, category, filename, lineno, file, line)
        warnings.showwarning = show
        return self

    def __exit__(self, *exc):
        return self.ctx.__exit__(*exc)


def cmd_train(args) -> int:
    from .pipeline import train_columns
    from .train import ALGORITHMS

    if args.algorithm not in ALGORITHMS:
        raise CrfkitError(f"unknown algorithm {args.algorithm!r}; available: {', '.join(ALGORITHMS)}")
    if args.algorithm == "sgd-l1" and args.c1 is None and args.l1 is None and args.rho1 is None and not args.quiet:
        _log("crfkit train: warning: -a sgd-l1 without --c1 (or --l1/--rho1) has no L1 term: it trains with L2 "
             "only and gives a dense model; give --c1 for the L1-regularised training SGD-L1 is for")
    # refuse an output that cannot be written before training, not after it (a directory, a read-only
    # place, a dangling symlink): crfkit.io.atomic.check_writable creates and removes a probe file there
    from .io.atomic import check_writable
    check_writable(args.model, "the model")
    # the vectors that a full-batch run allocates and frees at every evaluation get mappings of their own,
    # not holes in the C heap (crfkit.memtrim.opt_in_mmap_threshold: 10-13 MB of CoNLL-2000's peak)
    if args.algorithm in ("lbfgs", "owlqn"):
        from .memtrim import opt_in_mmap_threshold
        opt_in_mmap_threshold()
    if args.checkpoint is not None:
        check_writable(args.checkpoint, "the checkpoint")
    enc = getattr(args, "encoding", None)
    # several training files (globs too) train on a Dask cluster: crfkit.distributed.cli
    files = args.train_file if isinstance(args.train_file, list) else [args.train_file]
    dask_spec = getattr(args, "dask", None)
    if dask_spec:
        from .distributed.cli import check_args
        check_args(args, files)
    elif len(files) > 1:
        raise CrfkitError(f"{len(files)} training files: several files (shards) train on a Dask cluster "
                          "(--dask local:N or --dask SCHEDULER_ADDRESS); in one process, give one file")
    args.train_file = files[0]
    fmt, args.train_source = _detect_format(args.format, _recode(args.train_file, enc))
    args.dev_source = _recode(args.dev, enc)
    if args.dev is not None and args.format == "auto":
        dev_fmt, args.dev_source = _detect_format("auto", args.dev_source)
        if dev_fmt != fmt:
            raise CrfkitError(f"--format auto: the training file reads as {fmt} but the dev file as {dev_fmt}; "
                              "give --format explicitly")
    features = getattr(args, "features", None)
    if features is not None:
        if args.template is not None:
            raise CrfkitError("give -t/--template or --features, not both")
        if fmt != "columns":
            raise CrfkitError("--features generates templates over a column file's first column; the input "
                              "reads as a CRFsuite attribute file")
        from .features.windows import preset_templates
        templates = preset_templates(features)
    else:
        templates = _load_templates(args.template) if fmt == "columns" else None
    if getattr(args, "incremental", False):
        if features is None:
            raise CrfkitError("--incremental grows a window feature set: give --features nettalk:N-grm...")
        for opt, bad in (("--resume", args.resume), ("--checkpoint", args.checkpoint),
                         ("--init-model", args.init_model), ("--dense-columns", args.dense_columns),
                         ("--no-pad", args.no_pad or None), ("--partial-labels", args.partial_labels or None)):
            if bad is not None:
                raise CrfkitError(f"--incremental does not support {opt}")
    dense_cols = None
    if args.dense_columns is not None:
        if fmt != "columns":
            raise CrfkitError("--dense-columns needs a column file (CRFsuite attribute files give real values "
                              "as attr:value)")
        from .pipeline import parse_columns_spec
        try:
            parse_columns_spec(args.dense_columns)
        except ValueError as e:
            raise CrfkitError(f"--dense-columns: {e}") from None
        dense_cols = args.dense_columns
    weight_col = None
    if args.weight_column is not None:
        if fmt != "columns":
            raise CrfkitError("--weight-column needs a column file (a CRFsuite attribute file gives a sequence's "
                              "weight on an @weight:W line before its items)")
        weight_col = args.weight_column
    bars = _Bars(args.quiet, args.verbose, args.max_iterations)
    log = bars.log
    progress = bars if bars.enabled else None
    reg = {k: getattr(args, k) for k in ("c1", "c2", "l1", "l2", "rho1", "rho2") if getattr(args, k) is not None}
    kwargs = dict(algorithm=args.algorithm, max_iterations=args.max_iterations, epsilon=args.epsilon,
                  delta=args.delta, period=args.period, gtol=args.gtol, threads=args.threads,
                  trace=args.trace, verbose=not args.quiet, log=log, callback=bars.callback,
                  dev_every=args.dev_every,
                  support=args.support, transitions=args.transitions, min_freq=args.min_freq,
                  checkpoint=args.checkpoint, checkpoint_every=args.checkpoint_every, resume=args.resume, **reg)
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
        raise CrfkitError("--labels names the label set of partially labelled data: it needs --partial-labels")
    if args.algorithm not in ("lbfgs", "owlqn"):
        kwargs["seed"] = args.seed
    if args.init_model is not None:
        if args.resume is not None:
            raise CrfkitError("--init-model and --resume exclude each other: a checkpoint already holds the weights")
        from .model import CRFModel
        kwargs["init"] = CRFModel.load(args.init_model)
    if not args.quiet:
        if fmt == "crfsuite":
            _log(f"crfkit train: {args.train_file} (CRFsuite attribute file)")
        else:
            _log(f"crfkit train: {args.train_file} with {features or args.template or 'the built-in chunking templates'} "
                 f"({len(templates.unigram)} unigram templates, {'padded' if not args.no_pad else 'no padding'})")
    try:
        try:
            with _warnings_as_lines():
                if dask_spec:
                    from .distributed.cli import train_dask
                    res = train_dask(args, files, fmt, templates, kwargs, log)
                elif fmt == "crfsuite":
                    res = _train_crfsuite(args, kwargs, progress)
                elif getattr(args, "incremental", False):
                    res = _train_incremental(args, features, kwargs)
                else:
                    res = train_columns(args.train_source, templates, dev_path=args.dev_source,
                                        pad=not args.no_pad, progress=progress, dense_columns=dense_cols,
                                        weight_column=weight_col, **kwargs)
        finally:
            bars.close()
            _close_source(args.train_source)
            _close_source(args.dev_source)
    except KeyboardInterrupt:
        _err("interrupted before the optimizer started; no model was written")
        return EXIT_INTERRUPTED
    except TrainingDiverged as e:
        _err(f"{e}\nno model was written: {args.model} is left as it was")
        return EXIT_ERROR
    try:
        size = res.model.save(args.model)
    except OSError as e:
        _err(f"{e}; {args.model} is left as it was"
             + (f" (the checkpoint {args.checkpoint} holds the trained state: --resume it with the same "
                "--max-iterations to write the model without starting over)" if args.checkpoint else ""))
        return EXIT_ERROR
    m = res.model
    interrupted = res.status == "interrupted"
    out = sys.stdout
    print(f"model: {args.model} ({_human_bytes(size)}, {size} bytes)", file=out)
    print(f"labels: {m.space.n_labels}; attributes: {m.space.n_attributes}; features: {m.space.n_features} "
          f"({_feature_parts(m.space)}); non-zero weights: {m.n_active}", file=out)
    c1, c2 = res.reg.crfsuite(float(m.meta.get("train_weight", m.meta.get("n_train", 1))))
    print(f"training: {m.meta.get('algorithm', args.algorithm)}, {res.iterations} iterations, {res.effective_passes:.0f} passes, "
          f"{res.seconds:.2f} s; status: {res.status} ({res.message})", file=out)
    print(f"objective: {res.objective:.10g} (per sequence, l2={res.reg.l2:.6g}); CRFsuite units "
          f"{res.objective_crfsuite:.6f} (c2={c2:.6g}, c1={c1:.6g})", file=out)
    if res.history and "dev_accuracy" in res.history[-1]:
        h = res.history[-1]
        best_it = None if m.meta.get("fine_tune") else m.meta.get("dev_best_iteration")
        if best_it is not None:   # --dev-stop kept the best model: report its scores, not the last iteration's
            h = next((r for r in res.history if r.get("iteration") == best_it and "dev_accuracy" in r), h)
        dev = f"dev accuracy {h['dev_accuracy']:.2f}%"
        if "dev_f1" in h:
            dev += f", dev F1 {h['dev_f1']:.2f}"
        if best_it is not None:
            dev += f" (the saved model: iteration {best_it}, best dev {m.meta.get('dev_metric', 'score')})"
        print(dev, file=out)
    out.flush()
    if interrupted:
        # not an error: the work is kept (exit status 130 tells scripts the run was cut short)
        _log(f"crfkit: interrupted after {res.iterations} iterations; the model reached so far was saved to "
             f"{args.model} (it can be used as is, or continued with --init-model)")
        return EXIT_INTERRUPTED
    return 0


def _train_incremental(args, features: str, kwargs: dict):
    """`crfkit train --features nettalk:... --incremental`: crfkit.incremental.train_incremental."""
    from .incremental import train_incremental
    from .io.columns import read_columns_list
    sents = read_columns_list(args.train_source)
    dev = read_columns_list(args.dev_source) if args.dev_source is not None else None
    for name, ss in (("training", sents), ("dev", dev or [])):
        for snt in ss[:1]:
            if len(snt.columns[0]) < 1:
                raise DataError(f"the {name} data has no observation column",
                                str(args.train_file if name == "training" else args.dev), snt.line)
    kw = dict(kwargs)
    for k in ("callback", "checkpoint", "checkpoint_every", "resume", "transitions", "min_freq"):
        kw.pop(k, None)
    trace = kw.pop("trace", None)
    support = kw.pop("support", "all")
    its = [int(x) for x in args.stage_iterations.split(",")] if "," in args.stage_iterations \
        else int(args.stage_iterations)
    r = train_incremental(sents, features=features, dev=dev, stage_iterations=its,
                          final_iterations=kw.pop("max_iterations", None), trace=trace, support=support, **kw)
    if not args.quiet:
        for st in r.stages:
            _log(f"stage {st['stage']}: windows {', '.join(st['windows'])}: +{st['features_added']} features "
                 f"(of {st['candidate_features']} candidates), {st['features']} in all, {st['active']} active, "
                 f"{st['iterations']} iterations, {st['wall_s']:.1f}s")
    return r.result


def cmd_patterns(args) -> int:
    """`crfkit patterns nettalk:5-grm+`: write the template/pattern lines of a window feature set."""
    from .features.windows import candidate_counts, parse_preset, pattern_text
    try:
        spec = parse_preset(args.preset)
    except ValueError as e:
        raise CrfkitError(str(e)) from None
    text = pattern_text(spec, args.format)
    if args.output and args.output != "-":
        from .io.atomic import atomic_file
        with atomic_file(args.output, what="the pattern file") as f:
            f.write(text.encode("utf-8"))
    else:
        sys.stdout.write(text)
    if args.count is not None:
        from .io.columns import read_columns_list
        sents = read_columns_list(args.count)
        words = [[tok[spec.col] for tok in snt.columns] for snt in sents]
        L = len({y for snt in sents for y in snt.labels})
        c = candidate_counts(spec, words, L)
        print(f"{spec.name} on {args.count}: {len(sents)} sequences, {L} labels: {c['total']} candidate features "
              f"as Wapiti counts them ({c['unigram']} label-unigram, {c['pair']} label-pair); crfkit --support all: "
              f"{c['total_crfkit']} (no label-pair features for values seen only at a first letter); distinct "
              "values per window: "
              + ", ".join(f"{k} {v}" for k, v in c["values"].items()), file=sys.stderr)
    return 0


# --------------------------------------------------------------------------- tag

def _open_out(path) -> tuple[TextIO, bool]:
    """(the stream ``crfkit tag`` writes to, whether the caller closes it): standard output for
    None or ``-``, a stream given instead of a path as it is (``crfkit serve``), else the file."""
    if path is None or path == "-":
        return sys.stdout, False
    if hasattr(path, "write"):
        return path, False
    try:
        if path.endswith(".gz"):
            return gzip.open(path, "wt", encoding="utf-8", newline="\n"), True
        return open(path, "w", encoding="utf-8", newline="\n"), True
    except OSError as e:
        raise DataError(f"cannot open for writing: {e.strerror or e}", path) from None


class _Output:
    """Where ``crfkit tag`` writes: standard output, or ``-o PATH`` written to a
    temporary file beside it and renamed onto it at the end, so that an error
    in the input met half-way (tagging streams) leaves no partial output and an
    existing file untouched. A symbolic link is written through (its target is
    replaced, as ``open`` would write it); an existing file keeps its
    permissions. A path that is not a regular file (a FIFO, ``/dev/stdout``) is
    written directly."""

    def __init__(self, path: str | None):
        self.path = path
        self.tmp = None
        self.raw = None
        if path is None or path == "-":
            self.f = sys.stdout
            return
        if hasattr(path, "write"):      # a stream (crfkit serve): written as it is, not closed
            self.f = path
            return
        if os.path.exists(path) and not os.path.isfile(path):
            self.f, _ = _open_out(path)
            return
        import tempfile
        target = os.path.realpath(path)  # through a symbolic link, to what it names
        self.target = target
        d = os.path.dirname(target)
        base = os.path.basename(path)
        try:
            mode = os.stat(target).st_mode & 0o7777
        except OSError:
            mode = 0o666 & ~_umask()  # as an ordinary open would create it
        try:
            fd, self.tmp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".part", dir=d)
            os.close(fd)
            os.chmod(self.tmp, mode)
        except OSError as e:
            raise DataError(f"cannot open for writing: {e.strerror or e}", path) from None
        try:
            if path.endswith(".gz"):  # the gzip header names the file, not the temporary one
                import io
                self.raw = open(self.tmp, "wb")
                gz = gzip.GzipFile(filename=base, mode="wb", fileobj=self.raw)
                self.f = io.TextIOWrapper(gz, encoding="utf-8", newline="\n")
            else:
                self.f = open(self.tmp, "w", encoding="utf-8", newline="\n")
        except OSError as e:
            self._drop()
            raise DataError(f"cannot open for writing: {e.strerror or e}", path) from None

    def _drop(self) -> None:
        if self.tmp is not None:
            try:
                os.unlink(self.tmp)
            except OSError:
                pass
            self.tmp = None

    def __enter__(self):
        return self.f

    def __exit__(self, exc_type, exc, tb):
        if self.f is sys.stdout or self.f is self.path:
            if exc_type is None:
                self.f.flush()
            return False
        try:
            self.f.close()
            if self.raw is not None:
                self.raw.close()
        except BaseException:
            self._drop()
            raise
        if exc_type is not None:
            self._drop()
        elif self.tmp is not None:
            try:
                os.replace(self.tmp, self.target)
            except OSError as e:
                self._drop()
                raise DataError(f"cannot write: {e.strerror or e}", self.path) from None
            self.tmp = None
        return False


def _umask() -> int:
    m = os.umask(0o022)
    os.umask(m)
    return m


class _Eval:
    """What ``crfkit tag --eval`` reports, accumulated batch by batch: the
    conlleval counts (not the sentences), the token accuracy, the labels seen and
    the gold labels the model never saw. ``raw``: every tag but O is a chunk of
    its own (conlleval -r)."""

    def __init__(self, model, raw: bool = False):
        from collections import Counter

        from .metrics import _ConllCounter
        self.known = set(model.labels)
        self.raw = bool(raw)
        self.unseen: Counter = Counter()
        self.gold_labels: set = set()
        self.counter = _ConllCounter()
        self.n_tokens = 0
        self.n_correct = 0
        self.n_sequences = 0

    def add(self, gold, pred) -> None:
        feed = self.counter.feed
        known = self.known
        raw = self.raw
        for i, (g, p) in enumerate(zip(gold, pred)):
            if len(g) != len(p):  # pragma: no cover (the tagger gives one label per token)
                raise DataError(f"sentence {i}: gold has {len(g)} tokens but the prediction has {len(p)}")
            self.n_sequences += 1
            for gt, pt in zip(g, p):
                if raw:
                    feed(gt if gt == "O" else f"B-{gt}", pt if pt == "O" else f"B-{pt}")
                else:
                    feed(gt, pt)
                self.n_tokens += 1
                self.n_correct += gt == pt
                self.gold_labels.add(gt)
                if gt not in known:
                    self.unseen[gt] += 1
            self.counter.boundary()

    def report(self) -> None:
        """On stderr: the conlleval report when the labels are chunk tags (or ``raw``), else token
        accuracy; and a line about gold labels the model never saw (their tokens were tagged
        anyway; they can only count as errors)."""
        from .metrics import label_scheme
        unseen = self.unseen
        if not self.raw and label_scheme(sorted(self.known | self.gold_labels)) is None:
            n = self.n_tokens
            acc = 100.0 * self.n_correct / n if n else 0.0
            sys.stderr.write(f"accuracy: {acc:.2f}% of {n} tokens ({self.n_sequences} sequences); the labels are "
                             "not chunk tags, so no chunk F1 (--raw scores every tag as a chunk, as conlleval -r)\n")
        else:
            sys.stderr.write(self.counter.report().format())
        if unseen:
            listed = ", ".join(f"{lab} ({n})" for lab, n in unseen.most_common(10))
            more = f" and {len(unseen) - 10} more" if len(unseen) > 10 else ""
            sys.stderr.write(f"gold labels the model never saw in training, {sum(unseen.values())} tokens: "
                             f"{listed}{more}\n")
        sys.stderr.flush()


def _crfsuite_sequence(args, names, ys, gold, prob, marg, full) -> str:
    """One tagged sequence in ``crfkit tag --format crfsuite``'s layout (see :func:`_tag_crfsuite`):
    ``prob`` the sequence's probability, ``marg[t]`` the predicted label's marginal, ``full[t]`` the
    marginals of every label (in ``names``' order); each None when not asked for."""
    buf = []
    if prob is not None:
        buf.append(f"@probability\t{float(prob):.6f}")
    for t, lab in enumerate(ys):
        line = f"{gold[t]}\t{lab}" if args.reference else lab
        if marg is not None:
            line += f":{marg[t]:.6f}"
        if full is not None:
            line += "\t" + "\t".join(f"{n}:{p:.6f}" for n, p in zip(names, full[t].tolist()))
        buf.append(line)
    buf.append("")
    return "\n".join(buf) + "\n"


def _tag_crfsuite(args, model, src) -> int:
    """``crfkit tag --format crfsuite``: one predicted label per line, a blank line
    after each sequence (as ``crfsuite tag``); ``--reference`` puts the file's
    label and a TAB before it, ``--marginals`` appends ``:p`` (the label's
    marginal), ``--probability`` writes ``@probability<TAB>p`` before each
    sequence (CRFsuite's ``-r``, ``-i``, ``-p``); ``--all-marginals`` appends
    ``<TAB>label:p`` for every label of the model, in the model's order.
    Sequences are read, tagged and written batch by batch (``--batch-tokens``)."""
    from .io.crfsuite import read_crfsuite
    from .pipeline import batches, split_marginals

    if args.labels is False and (args.eval or args.reference):
        raise CrfkitError("--eval/--reference use the labels of the attribute file (its first field); "
                          "they cannot go with --no-labels")
    names = list(model.space.labels)
    want_marg = args.marginals or args.probability or args.all_marginals
    ev = _Eval(model, getattr(args, "raw", False)) if args.eval else None
    with _Output(args.output) as f:
        for seqs in batches(read_crfsuite(src, name=_source_name(src)), args.batch_tokens):
            X = [s.attributes for s in seqs]
            gold = [s.labels for s in seqs]
            del seqs
            marg = probs = full = None
            if want_marg:
                pred, probs, node, corpus = model.tag_with_probability(X, threads=args.threads)
                marg, full = split_marginals(model, pred, node, corpus)
            else:
                pred = model.tag(X, threads=args.threads)
            del X
            for i, ys in enumerate(pred):
                f.write(_crfsuite_sequence(args, names, ys, gold[i], probs[i] if args.probability else None,
                                           marg[i] if args.marginals else None,
                                           full[i] if args.all_marginals else None))
            f.flush()
            if ev is not None:
                ev.add(gold, pred)
    if ev is not None:
        ev.report()
    return 0


def _report_eval(model, gold, pred, raw: bool = False) -> None:
    """The ``--eval`` report of whole lists of gold and predicted label sequences (see :class:`_Eval`)."""
    ev = _Eval(model, raw)
    ev.add(gold, pred)
    ev.report()


def cmd_tag(args) -> int:
    """``crfkit tag``; an empty input gives an empty output and exit status 0 (as crf_test), with a
    warning on standard error.  With ``--server URL`` the tagging is a ``crfkit serve`` process's
    (:func:`crfkit.serve.client_tag`)."""
    if getattr(args, "server", None):
        from .serve import client_tag
        return client_tag(args)
    if args.model is None:
        raise CrfkitError("crfkit tag needs -m/--model MODEL (or --server URL, a `crfkit serve` process)")
    from .model import CRFModel
    return run_tag(args, CRFModel.load(args.model))


def run_tag(args, model) -> int:
    """``crfkit tag`` with ``model`` already loaded (``crfkit serve`` runs every request through it:
    ``args.file`` may then be a named ``BytesIO`` and ``args.output`` a text stream)."""
    try:
        return _cmd_tag(args, model)
    except DataError as e:
        if "empty input" not in str(e):
            raise
        _log(f"crfkit tag: warning: {e}; nothing to tag")
        f, owned = _open_out(args.output)
        if owned:
            f.close()
        return 0


def _cmd_tag(args, model) -> int:
    has_templates = bool(isinstance(model.meta, dict) and model.meta.get("templates"))
    fmt = args.format
    if fmt == "auto" and not has_templates:
        fmt = "crfsuite"  # a model without templates can only tag attribute files
    fmt, src = _detect_format(fmt, _recode(args.file, getattr(args, "encoding", None)))
    try:
        from .decode_cli import wants_decoding
        if wants_decoding(args):   # n-best, constraints, forced labels, posterior decoding
            from .decode_cli import run
            return run(args, model, fmt, src)
        if fmt == "crfsuite":
            return _tag_crfsuite(args, model, src)
        return _tag_columns(args, model, src, has_templates)
    finally:
        _close_source(src)


def _tag_columns(args, model, src, has_templates: bool) -> int:
    """``crfkit tag`` on a column file: read, tag and write batch by batch
    (``--batch-tokens``), so memory stays bounded whatever the input's size;
    the output is the same as tagging the whole input at once."""
    from .io.columns import write_columns
    from .pipeline import tag_column_batches

    if args.reference:
        raise CrfkitError("--reference is for --format crfsuite (column output already shows the gold label)")
    if not has_templates:
        raise CrfkitError(f"the model {args.model} has no feature templates (it was trained from a CRFsuite "
                          "attribute file or from attribute lists), so it cannot tag column files; tag "
                          "CRFsuite attribute files with --format crfsuite")
    parts = tag_column_batches(model, src, has_labels=args.labels, marginals=args.marginals or args.probability,
                               all_marginals=args.all_marginals, threads=args.threads,
                               batch_tokens=args.batch_tokens)
    first = next(parts)  # read and tag the first batch before any output is opened
    if args.eval and not first.has_labels:
        raise DataError("--eval needs gold labels, but the input has none (it has as many columns as the "
                        "training data's observation columns; pass --labels if the last column is a label)",
                        _source_name(src))
    ev = _Eval(model, getattr(args, "raw", False)) if args.eval else None
    with _Output(args.output) as f:
        res = first
        while res is not None:
            for i, (s, pred) in enumerate(zip(res.sentences, res.labels)):
                if args.probability:
                    f.write(f"# {res.probabilities[i]:.6f}\n")
                if args.marginals:
                    extra = [f"{lab}/{p:.6f}" for lab, p in zip(pred, res.marginals[i])]
                else:
                    extra = pred
                if args.all_marginals:
                    names = res.label_names
                    extra = [[e] + [f"{n}/{p:.6f}" for n, p in zip(names, row)]
                             for e, row in zip(extra, res.all_marginals[i].tolist())]
                write_columns([s], f, extra=[extra], sep="\t")
            f.flush()
            if ev is not None:
                ev.add(res.gold, res.labels)
            res = first = None
            res = next(parts, None)
    if ev is not None:
        ev.report()
    return 0


# --------------------------------------------------------------------------- eval

def cmd_eval(args) -> int:
    from .io.columns import open_text
    from .metrics import conlleval_lines

    name = "<stdin>" if args.file == "-" else args.file
    f = open_text(args.file)
    try:
        try:
            rep = conlleval_lines(f, delimiter=args.delimiter, boundary=args.boundary, raw=args.raw,
                                  otag=args.otag, name=name, iobes=args.iobes)
        except UnicodeDecodeError:
            raise DataError("invalid UTF-8", name) from None
    finally:
        if f is not sys.stdin and args.file != "-":
            f.close()
    sys.stdout.write(rep.format())
    return 0


# --------------------------------------------------------------------------- info

def _fmt_table(labels: list[str], trans: dict) -> list[str]:
    w = max([len(lab) for lab in labels] + [7])
    lines = [" " * w + "  " + " ".join(f"{lab:>{w}}" for lab in labels)]
    for a in labels:
        cells = []
        for b in labels:
            v = trans.get((a, b))
            cells.append(f"{'.':>{w}}" if v is None else f"{v:>{w}.3f}")
        lines.append(f"{a:>{w}}  " + " ".join(cells))
    return lines


def _feature_parts(s) -> str:
    parts = [f"{s.n_state} state", f"{s.n_trans} transition"]
    if s.n_bigram:
        parts.append(f"{s.n_bigram} label-pair x observation")
    if s.n_dense:
        parts.append(f"{s.n_dense * s.n_labels} dense")
    return ", ".join(parts)


def _ranges(cols) -> str:
    """[3, 4, 5, 9] -> '3-5,9'."""
    parts = []
    for c in cols:
        if parts and parts[-1][1] == c - 1:
            parts[-1][1] = c
        else:
            parts.append([c, c])
    return ",".join(f"{a}-{b}" if b > a else f"{a}" for a, b in parts)


def cmd_info(args) -> int:
    from .model import CRFModel

    model = CRFModel.load(args.model)
    s = model.space
    meta = model.meta if isinstance(model.meta, dict) else {}
    out = []
    size = os.path.getsize(args.model)
    out.append(f"model: {args.model} ({_human_bytes(size)}, {size} bytes)")
    out.append(f"labels ({s.n_labels}): {' '.join(s.labels)}")
    out.append(f"attributes: {s.n_attributes}")
    out.append(f"state features: {s.n_state}")
    out.append(f"transition features: {s.n_trans}")
    if s.n_bigram:
        out.append(f"label-pair x observation features: {s.n_bigram} ({s.n_battributes} observations)")
    if s.n_dense:
        cols = meta.get("dense_columns")
        where = f" (columns {_ranges(cols)})" if cols else ""
        out.append(f"dense features: {s.n_dense} dimensions{where} x {s.n_labels} labels = "
                   f"{s.n_dense * s.n_labels} weights")
    out.append(f"non-zero weights: {model.n_active}")
    cand = meta.get("n_candidates")
    if isinstance(cand, int) and cand > 0:
        out.append(f"features: {model.n_active} active of {cand} candidates in training "
                   f"({100.0 * model.n_active / cand:.3g}%; the file holds the active ones only)")
    if meta.get("templates"):
        from .features.templates import Templates
        try:
            t = Templates.parse(meta["templates"], name="<model templates>")
            out.append(f"templates: {len(t.unigram)} unigram, {'B' if t.has_transitions else 'no B'} "
                       f"(padding {'on' if meta.get('template_pad', True) else 'off'}); "
                       f"observation columns: {meta.get('columns', '?')}")
        except CrfkitError:
            out.append("templates: (unreadable)")
    else:
        src = "a CRFsuite attribute file" if meta.get("input_format") == "crfsuite" else "attribute lists"
        out.append(f"templates: none (trained from {src}; `crfkit tag --format crfsuite` tags attribute files)")
    tr = []
    for key in ("algorithm", "l2", "l1", "n_train", "train_weight", "iterations", "status", "support", "transitions",
                "min_freq", "train_file"):
        if key in meta:
            v = meta[key]
            tr.append(f"{key}={v:.6g}" if isinstance(v, float) else f"{key}={v}")
    if "l2" in meta and "n_train" in meta:
        tr.append(f"(CRFsuite c2={meta['l2'] * meta.get('train_weight', meta['n_train']) / 2:.6g})")
    out.append("training: " + (" ".join(tr) if tr else "(no metadata)"))
    trans = model.transition_features()
    out.append("")
    out.append("transition weights (row: from, column: to; '.' = no feature):")
    out += _fmt_table(list(s.labels), trans)
    out.append("")
    top = model.top_features(args.top)
    out.append(f"top {len(top)} state features by |weight|:")
    for attr, lab, w in top:
        out.append(f"  {w:+10.4f}  {lab:<10} {attr}")
    sys.stdout.write("\n".join(out) + "\n")
    return 0


# --------------------------------------------------------------------------- data

def _dataset_names(names: list[str]) -> list[str]:
    from .datasets.download import REGISTRY
    if not names or names == ["all"]:
        return list(REGISTRY)
    for n in names:
        if n not in REGISTRY:
            raise CrfkitError(f"unknown data set {n!r}; known: {', '.join(REGISTRY)} (or all)")
    return names


def cmd_data(args) -> int:
    from . import datasets
    from .datasets.download import REGISTRY, fetch, verify

    if args.data_command == "fetch":
        names = _dataset_names(args.names)
        log = (lambda s: None) if args.quiet else _log
        root = None
        for n in names:  # SIGTERM and Ctrl-C remove the .part file of the download in progress (see main)
            root = fetch(n, cache_dir=args.cache_dir, base_url=args.base_url, force=args.force,
                         timeout=args.timeout, log=log)
        print(f"fetched {', '.join(names)} into {root}")
        return 0
    if args.data_command == "export":
        return _data_export(args)
    if args.data_command == "verify":
        base = args.data_dir if args.data_dir is not None else datasets.data_dir()
        bad = 0
        for n in _dataset_names(args.names):
            for path, status in verify(n, base):
                print(f"{status:<8} {os.path.join(str(base), path)}")
                bad += status != "ok"
        return 1 if bad else 0
    # list
    base = args.data_dir if args.data_dir is not None else datasets.data_dir()
    cache = datasets.cache_dir()
    print(f"data directory: {base}")
    print(f"download cache: {cache}")
    for name, ds in REGISTRY.items():
        print(f"{name}: {ds.description}")
        print(f"  terms: {ds.terms}")
        print(f"  source: {ds.source_url or '(mirror only: crfkit data fetch --base-url URL)'}")
        for df in ds.files:
            where = [label for label, d in (("data dir", base), ("cache", cache))
                     if (os.path.isfile(os.path.join(str(d), df.path))
                         or os.path.isfile(os.path.join(str(d), df.path[:-3])))]
            print(f"  {df.path:<45} {', '.join(where) if where else 'missing'}")
    return 0


def _data_export(args) -> int:
    """`crfkit data export nettalk OUTDIR`: the NETtalk split as column files (letter TAB label)."""
    from .datasets.nettalk import nettalk_split, nettalk_split_folds, write_columns
    if args.name != "nettalk":
        raise CrfkitError(f"data export writes column files of nettalk only, not {args.name!r} (the other data "
                          "sets are column files already)")
    try:
        train_f, dev_f, test_f = nettalk_split_folds(args.test_fold)
    except ValueError as e:
        raise CrfkitError(f"--test-fold: {e}") from None
    parts = nettalk_split(args.test_fold, args.data_dir, labels=args.labels)
    os.makedirs(args.out_dir, exist_ok=True)
    for split, sents in zip(("train", "dev", "test"), parts):
        path = os.path.join(args.out_dir, f"{split}.txt")
        write_columns(sents, path)
        print(f"{path}: {len(sents)} words, {sum(len(s) for s in sents)} letters")
    folds = f"folds {train_f[0]}-{train_f[-1]}" if list(train_f) == list(range(train_f[0], train_f[-1] + 1)) \
        else "folds " + ",".join(map(str, train_f))
    print(f"split: train {folds}, dev fold {dev_f}, test fold {test_f} (word i in fold i mod 10); "
          f"labels: {args.labels}")
    return 0


# --------------------------------------------------------------------------- demo

def cmd_demo(args) -> int:
    from .demo import run
    res = run(data_dir=args.data_dir, out_dir=args.out, threads=args.threads,
              max_iterations=args.max_iterations, synthetic=args.synthetic,
              synthetic_sentences=args.synthetic_sentences)
    return EXIT_INTERRUPTED if res.get("status") == "interrupted" else 0


# --------------------------------------------------------------------------- parser

def _param(text: str) -> tuple[str, object]:
    """NAME=VALUE with VALUE read as an int, a float, true/false, or else kept as a string."""
    name, sep, value = text.partition("=")
    name = name.strip()
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    value = value.strip()
    low = value.lower()
    if low in ("true", "false"):
        return name, low == "true"
    for conv in (int, float):
        try:
            return name, conv(value)
        except ValueError:
            pass
    return name, value


#: the subcommands (``crfkit COMMAND``); :func:`build_parser` can build one of them alone
COMMANDS = ("train", "tag", "serve", "eval", "info", "demo", "data", "patterns", "dump", "prune", "cv", "bench")


def _command_of(argv: Sequence[str]) -> str | None:
    """The subcommand named by ``argv`` when it is the first argument (``crfkit tag ...``), ``""`` for
    ``crfkit --version`` (no subcommand needed), else None (help, errors: the whole parser)."""
    if not argv:
        return None
    first = argv[0]
    if first == "--version":
        return ""
    return first if first in COMMANDS else None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser; with ``command``, only that subcommand's parser is built (``""``: none), so
    that ``crfkit tag`` does not import what ``train``, ``cv`` or ``bench`` need to describe their options
    (the optimizers' registry, numpy, the benchmark harness)."""
    def want(name: str) -> bool:
        return command is None or command == name

    p = argparse.ArgumentParser(
        prog="crfkit",
        description="Train linear-chain CRFs on column files and tag with them.",
        epilog="Run `crfkit COMMAND -h` for a command's options.")
    p.add_argument("--version", action="version", version=f"crfkit {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    if want("train"):
        _add_train_parser(sub)
    if want("tag"):
        _add_tag_parser(sub)
    if want("serve"):
        from .serve import add_serve_parser
        add_serve_parser(sub)
    if want("eval"):
        _add_eval_parser(sub)
    if want("info"):
        _add_info_parser(sub)
    if want("demo"):
        _add_demo_parser(sub)
    if want("data"):
        _add_data_parser(sub)
    if want("patterns"):
        _add_patterns_parser(sub)
    if want("dump") or want("prune"):
        from .dump import add_parsers as add_dump_parsers   # `crfkit dump`, `crfkit prune`
        add_dump_parsers(sub)
    if want("cv"):
        from .cv import add_parser as add_cv_parser        # `crfkit cv`
        add_cv_parser(sub)
    if want("bench"):
        import importlib.util
        if importlib.util.find_spec("crfkit.bench.command") is not None:
            # `crfkit bench`: the optimizer benchmark harness (crfkit.bench.command.add_parser)
            from .bench.command import add_parser as add_bench_parser
            add_bench_parser(sub)
    return p


def _add_train_parser(sub) -> None:
    # the algorithm names without importing crfkit.train (and with it numba and every kernel)
    from .optim import stochastic
    ALGORITHMS = ("lbfgs", "owlqn") + tuple(stochastic.available())
    t = sub.add_parser("train", help="train a model on a labelled column file",
                       description="Train a CRF on a column file (observation columns, label last; a blank "
                                   "line after each sentence), like crf_learn / crfsuite learn.")
    t.add_argument("train_file", metavar="TRAIN_FILE", nargs="+",
                   help="labelled column file (.gz ok, - for stdin); with --dask, several files or globs (shards)")
    t.add_argument("-m", "--model", required=True, help="where to write the model")
    t.add_argument("-f", "--format", choices=FORMATS, default="columns",
                   help="input format: columns (CoNLL/CRF++ column file, the default), crfsuite (CRFsuite "
                        "attribute file: LABEL<TAB>attr[:weight]..., no templates), or auto (crfsuite when "
                        "the first 200 non-blank lines all hold a TAB and either their field counts differ "
                        "or at least half of the fields after the first hold '=' or ':'; columns otherwise)")
    t.add_argument("-t", "--template", metavar="TEMPLATE_FILE",
                   help="CRF++ template file (default: built-in chunking templates over columns word, POS)")
    t.add_argument("--features", metavar="PRESET",
                   help="a generated window feature set instead of -t: nettalk:N-grm, N-grm-, N-grm+, N-grm++ "
                        "(N odd; Lavergne et al. 2010, 5.1.1) over the first column; a :u suffix drops the "
                        "label-pair x observation features (`crfkit patterns PRESET` prints the lines)")
    t.add_argument("--incremental", action="store_true",
                   help="with --features: grow the feature set by window radius, adding a longer window's values "
                        "only where the embedded shorter window is active (Lavergne et al. 2010, 5.4)")
    t.add_argument("--stage-iterations", default="10", metavar="N[,N...]",
                   help="with --incremental: iterations of each stage but the last (which runs to "
                        "--max-iterations or the stopping rules); one value, or one per stage (default 10)")
    t.add_argument("--dense-columns", metavar="COLS",
                   help="observation columns (1-based, e.g. 3-130) read as real numbers into dense features, "
                        "a weight per (column, label): embeddings, pixels; `crfkit tag` reads them back")
    t.add_argument("--weight-column", metavar="N", type=_pos_int,
                   help="observation column N (1-based) holds each sentence's sample weight (a number >= 0, "
                        "the same on every token of the sentence); it is taken out of the tokens before the "
                        "templates and --dense-columns read them, which count the remaining columns (put it "
                        "last to keep the numbering of the file without it). CRFsuite attribute files give "
                        "weights on @weight:W lines instead")
    t.add_argument("--no-pad", action="store_true",
                   help="templates reaching outside the sentence give no attribute (CRFsuite style) "
                        "instead of _B-1/_B+1 padding (CRF++ style)")
    t.add_argument("-a", "--algorithm", default="lbfgs", help=f"training algorithm ({', '.join(ALGORITHMS)})")
    g2 = t.add_mutually_exclusive_group()
    g2.add_argument("--c2", type=_nonneg_float, help="L2 strength, CRFsuite's sum form (default 1)")
    g2.add_argument("--l2", type=_nonneg_float, help="L2 strength, crfkit's per-sequence form (l2 = 2*c2/n)")
    g2.add_argument("--rho2", type=_nonneg_float, help="L2 strength, Wapiti's form (l2 = rho2/n)")
    g1 = t.add_mutually_exclusive_group()
    g1.add_argument("--c1", type=_nonneg_float, help="L1 strength, CRFsuite's form (l1 = c1/n)")
    g1.add_argument("--l1", type=_nonneg_float, help="L1 strength, crfkit's form")
    g1.add_argument("--rho1", type=_nonneg_float, help="L1 strength, Wapiti's form (l1 = rho1/n)")
    t.add_argument("-p", "--param", action="append", default=[], metavar="NAME=VALUE", type=_param,
                   help="a setting of a stochastic optimizer, e.g. -p eta0=0.1 -p penalty=cumulative "
                        "(repeatable; like crfsuite learn -p)")
    t.add_argument("--seed", type=_nonneg_int, default=0, help="random seed of stochastic optimizers (default 0)")
    t.add_argument("--max-iterations", type=_pos_int, metavar="N",
                   help="iteration limit; epochs (effective passes) for stochastic optimizers (default: none)")
    t.add_argument("--delta", type=_nonneg_float, default=1e-5,
                   help="stop when the objective improved by less than this (relative) over --period "
                        "iterations (default 1e-5)")
    t.add_argument("--period", type=_nonneg_int, default=10, help="period of the --delta test (default 10)")
    t.add_argument("--epsilon", type=_nonneg_float, default=1e-5,
                   help="stop when ||g|| / max(1, ||w||) < epsilon (default 1e-5)")
    t.add_argument("--gtol", type=_pos_float, help="stop when the gradient's max-norm is below this")
    t.add_argument("--support", choices=("observed", "all"), default="observed",
                   help="state features: (attribute, label) pairs seen in training (CRFsuite) or all pairs "
                        "(CRF++/Wapiti) (default observed)")
    t.add_argument("--transitions", choices=("observed", "all"),
                   help="transition features: label bigrams seen in training, or all (default: as --support)")
    t.add_argument("--min-freq", type=_nonneg_float, default=0, metavar="N",
                   help="drop features (observed) / attributes (all) seen fewer than N times")
    t.add_argument("--dev", metavar="DEV_FILE", help="labelled column file scored during training")
    t.add_argument("--encoding", metavar="ENC", help="encoding of the training and dev files, e.g. utf-16 "
                   "(default UTF-8)")
    t.add_argument("--dev-every", type=_pos_int, default=1, metavar="N", help="score the dev file every N iterations")
    t.add_argument("--dev-stop", type=_pos_int, metavar="W",
                   help="stop when the dev score has not improved for W evaluations and keep the best model "
                        "(needs --dev)")
    t.add_argument("--sparse-fb", choices=("off", "on", "auto"), default="off",
                   help="with label-pair x observation features (lbfgs/owlqn): compute the gradient with the "
                        "sparse forward-backward recursions, which visit only the non-zero label-pair scores "
                        "(Lavergne et al. 2010, 4.1; same result; faster once L1 has zeroed most of them); "
                        "auto: when there is an L1 term (default off: the standard L x L recursions)")
    t.add_argument("--lbfgs-history", choices=("auto", "float64", "float32"), default="auto",
                   help="precision of the (s, y) pairs lbfgs/owlqn keep (default auto: float32 when the float64 "
                        "pairs would pass 32 MiB, about 300k features, where they are most of the memory)")
    t.add_argument("--dev-metric", choices=("auto", "accuracy", "f1"), default="auto",
                   help="dev score for --dev-stop: chunk F1 or token accuracy (default auto: F1 when the "
                        "labels are chunks)")
    t.add_argument("--partial-labels", action="store_true",
                   help="label cells may be partial: ? (any label) or A|B (one of these); the likelihood sums "
                        "over the sequences consistent with them (Tsuboi et al. 2008); needs --support all and "
                        "-a lbfgs/owlqn")
    t.add_argument("--labels", metavar="A,B,...",
                   help="with --partial-labels: the label set (? cells allow any of them; every label a cell "
                        "names must be one of them); default: the labels the cells name")
    t.add_argument("--fine-tune", type=_nonneg_int, default=0, metavar="K",
                   help="after training, K L-BFGS iterations on the non-zero features only, without L1 "
                        "(after an L1 run: Wapiti/Lavergne et al.'s fine-tuning)")
    t.add_argument("--fine-tune-l2", type=_nonneg_float, metavar="L2",
                   help="L2 of the fine-tuning, crfkit's form (default: the training L2)")
    t.add_argument("--threads", type=_nonneg_int, metavar="N", help="threads (default: all cores)")
    t.add_argument("--trace", metavar="PATH.jsonl", help="write one JSON line per iteration")
    t.add_argument("--checkpoint", metavar="PATH", help="write the optimizer state there every --checkpoint-every "
                   "iterations and when training ends or is interrupted (Ctrl-C, SIGTERM)")
    t.add_argument("--checkpoint-every", type=_nonneg_int, default=10, metavar="N",
                   help="iterations between checkpoints (0: only at the end or on interruption; default 10)")
    t.add_argument("--resume", metavar="PATH", help="continue from a checkpoint (same data, features, algorithm "
                   "and regularisation) to the result an uninterrupted run would give")
    t.add_argument("--init-model", metavar="MODEL", help="warm start: begin from this model's weights, mapped "
                   "by (attribute, label) and label pair")
    t.add_argument("--dask", metavar="ADDRESS", help="train on a Dask cluster (pip install 'crfkit[dask]'): a "
                   "scheduler address (tcp://host:8786), or local:N for a LocalCluster of N worker processes; "
                   "the training files are read and encoded by the workers (one shard per file)")
    t.add_argument("--dask-threads", type=_pos_int, metavar="N", help="with --dask: numba threads inside each "
                   "worker task (default --threads, else the cores divided by the local workers, else 1)")
    t.add_argument("-q", "--quiet", action="store_true", help="no progress lines and no progress bar")
    t.add_argument("-v", "--verbose", action="store_true",
                   help="on a terminal, also print the per-iteration lines the progress bar replaces "
                        "(off a terminal they are always printed, and no bar is drawn)")
    t.set_defaults(func=cmd_train)


def _add_tag_parser(sub) -> None:
    g = sub.add_parser("tag", help="tag a column file with a model",
                       description="Tag a column file. Output: the input columns then the predicted label, "
                                   "tab-separated, a blank line after each sentence (like crf_test).")
    g.add_argument("file", metavar="FILE", nargs="?", default="-", help="column file (.gz ok; default/-: stdin)")
    g.add_argument("-m", "--model", help="model file written by `crfkit train` (required unless --server)")
    g.add_argument("--server", metavar="URL",
                   help="tag with a `crfkit serve` process at URL (http://HOST:PORT) instead of loading a "
                        "model: the same output, without the start-up (the model and threads are the server's)")
    g.add_argument("-f", "--format", choices=FORMATS, default="columns",
                   help="input format: columns (default), crfsuite (CRFsuite attribute file; output: one "
                        "predicted label per line, a blank line after each sequence, as `crfsuite tag`), "
                        "or auto (crfsuite for a model without templates, else detected as for train)")
    g.add_argument("-r", "--reference", action="store_true",
                   help="with --format crfsuite: write the file's label, a TAB, then the predicted one "
                        "(crfsuite tag -r)")
    g.add_argument("--marginals", action="store_true",
                   help="write the predicted label as label/probability (its marginal), like crf_test -v1 "
                        "(--format crfsuite: label:probability, like crfsuite tag -i)")
    g.add_argument("--all-marginals", action="store_true",
                   help="after the predicted label, write the marginal of every label as label/probability "
                        "(one column per label, in the model's label order), like crf_test -v2 "
                        "(--format crfsuite: label:probability, TAB-separated, after the predicted label)")
    g.add_argument("--probability", action="store_true",
                   help="print '# p' before each sentence: the probability of its predicted labels "
                        "(--format crfsuite: '@probability<TAB>p', like crfsuite tag -p)")
    lab = g.add_mutually_exclusive_group()
    lab.add_argument("--labels", dest="labels", action="store_const", const=True, default=None,
                     help="the input's last column is a gold label (default: detected from the column count)")
    lab.add_argument("--no-labels", dest="labels", action="store_const", const=False,
                     help="the input has no gold label column")
    g.add_argument("--eval", action="store_true", help="print the conlleval report on the gold labels to stderr "
                   "(token accuracy when the labels are not chunk tags)")
    g.add_argument("--raw", action="store_true", help="with --eval: every tag but O is a chunk of its own "
                   "(conlleval -r; -r here is --reference)")
    g.add_argument("-o", "--output", metavar="OUT", help="output file (default stdout; .gz ok)")
    g.add_argument("--threads", type=_nonneg_int, metavar="N", help="threads (default: all cores)")
    g.add_argument("--batch-tokens", type=_pos_int, default=10_000, metavar="N",
                   help="read, tag and write about N tokens at a time (whole sentences; default 10000): "
                        "memory stays bounded whatever the input's size; the output does not depend on it")
    g.add_argument("--encoding", metavar="ENC", help="the input's encoding, e.g. utf-16 (default UTF-8); the "
                   "output is UTF-8")
    from .decode_cli import add_tag_arguments
    add_tag_arguments(g)
    g.set_defaults(func=cmd_tag)


def _add_eval_parser(sub) -> None:
    e = sub.add_parser("eval", help="conlleval chunk scores of a tagged file",
                       description="Score a file whose last two columns are the gold and the guessed tag "
                                   "(what `crfkit tag` writes on labelled input), exactly as conlleval.pl.")
    e.add_argument("file", metavar="FILE", nargs="?", default="-", help="file to score (.gz ok; default/-: stdin)")
    e.add_argument("-d", "--delimiter", help="column delimiter (default: any whitespace)")
    e.add_argument("-b", "--boundary", default="-X-", help="sentence boundary token (default -X-)")
    e.add_argument("-r", "--raw", action="store_true", help="tags have no B-/I- prefix (conlleval -r)")
    e.add_argument("-o", "--otag", default="O", help="outside tag in raw mode (default O)")
    e.add_argument("--iobes", action=argparse.BooleanOptionalAction, default=True,
                   help="also split chunks on IOBES S- and E->B (default on; --no-iobes: conlleval.pl verbatim)")
    e.set_defaults(func=cmd_eval)


def _add_info_parser(sub) -> None:
    i = sub.add_parser("info", help="describe a model", description="Labels, feature counts, training "
                       "metadata, transition weights and the strongest state features of a model.")
    i.add_argument("-m", "--model", required=True, help="model file")
    i.add_argument("--top", type=_nonneg_int, default=20, metavar="N", help="state features to list (default 20)")
    i.set_defaults(func=cmd_info)


def _add_demo_parser(sub) -> None:
    d = sub.add_parser("demo", help="train and evaluate a chunker on CoNLL-2000",
                       description="Train a chunker on CoNLL-2000 with the built-in templates and L-BFGS "
                                   "(CRFsuite defaults), evaluate it on the test set. Without CoNLL-2000 "
                                   "a synthetic corpus is used instead (and the output says so).")
    d.add_argument("--data-dir", metavar="DIR",
                   help="data directory holding conll2000/ (default: $CRFKIT_DATA or ../shared/data)")
    d.add_argument("--threads", type=_nonneg_int, metavar="N", help="threads (default: all cores)")
    d.add_argument("--max-iterations", type=_pos_int, metavar="N", help="iteration limit (default: none)")
    d.add_argument("--out", default="runs", metavar="DIR", help="where the model and outputs go (default ./runs)")
    d.add_argument("--synthetic", action="store_true", help="use the synthetic corpus even if CoNLL-2000 is there")
    d.add_argument("--synthetic-sentences", type=_pos_int, default=2000, metavar="N",
                   help="training sentences of the synthetic corpus (test: N/4; default 2000)")
    d.set_defaults(func=cmd_demo)


def _add_data_parser(sub) -> None:
    da = sub.add_parser("data", help="list, download and verify the benchmark data sets",
                        description="The benchmark data sets (CoNLL-2000, CoNLL-2002 es/nl, OCR letters, Penn "
                                    "Treebank sample, NETtalk) in the shared/data layout: list them, fetch them into the "
                                    "download cache ($CRFKIT_CACHE, else ~/.cache/crfkit) with SHA-256 "
                                    "verification, or verify a data directory.")
    dsub = da.add_subparsers(dest="data_command", metavar="SUBCOMMAND")
    dl = dsub.add_parser("list", help="the data sets, their terms and where their files are")
    dl.add_argument("--data-dir", metavar="DIR", help="data directory (default: $CRFKIT_DATA or ../shared/data)")
    df = dsub.add_parser("fetch", help="download data sets into the cache, verified by SHA-256",
                         description="Download data sets (NAME ... or all) into the cache. Without --base-url "
                                     "the public NLTK data zips are used (the OCR letters need a mirror); "
                                     "a file whose SHA-256 differs is refused and not kept.")
    df.add_argument("names", nargs="*", metavar="NAME", help="data set names, or all (default: all)")
    df.add_argument("--cache-dir", metavar="DIR", help="where to put them (default: $CRFKIT_CACHE or ~/.cache/crfkit)")
    df.add_argument("--base-url", metavar="URL",
                    help="a mirror serving the shared/data layout (http(s)://, file:// or a directory)")
    df.add_argument("--force", action="store_true", help="download even files that are present and verify")
    df.add_argument("--timeout", type=_pos_float, default=300.0, metavar="S",
                    help="seconds each download (a file, or a zip) may take in all, connection included: a "
                         "deadline for the whole download, not per read (default 300)")
    df.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    dx = dsub.add_parser("export", help="write NETtalk's 10-fold split as column files (train/dev/test.txt)",
                         description="Write the NETtalk words of a split (test fold K, dev fold K-1 mod 10, the "
                                     "other eight train; word i is in fold i mod 10) as column files, one letter "
                                     "and its label per line, a blank line after each word: the input of "
                                     "crfkit train / tag, wapiti and crf_learn.")
    dx.add_argument("name", metavar="NAME", help="nettalk")
    dx.add_argument("out_dir", metavar="OUT_DIR", help="where train.txt, dev.txt and test.txt go")
    dx.add_argument("--test-fold", type=int, default=9, metavar="K", help="test fold 0..9 (default 9: train "
                    "folds 0-7, dev fold 8)")
    dx.add_argument("--labels", choices=("phoneme", "stress", "joint"), default="phoneme",
                    help="the label column: phonemes (51), stress marks (5) or both joined (default phoneme)")
    dx.add_argument("--data-dir", metavar="DIR", help="data directory (default: $CRFKIT_DATA or ../shared/data)")
    dv = dsub.add_parser("verify", help="check the SHA-256 of the files in a data directory (exit 1 if any fails)")
    dv.add_argument("names", nargs="*", metavar="NAME", help="data set names, or all (default: all)")
    dv.add_argument("--data-dir", metavar="DIR", help="data directory (default: $CRFKIT_DATA or ../shared/data)")
    da.set_defaults(func=cmd_data, data_command="list")


def _add_patterns_parser(sub) -> None:
    pt = sub.add_parser("patterns", help="write the template lines of a window feature set (nettalk:5-grm+)",
                        description="Write the Wapiti pattern file (or CRF++ template file) of a generated "
                                    "window feature set of Lavergne et al. (2010), 5.1.1: nettalk:N-grm (centred "
                                    "windows of size 1, 3, ..., N and the label bias/transitions), N-grm- (the "
                                    "N-window only), N-grm+ (plus the most centred even windows), N-grm++ (every "
                                    "letter sequence in the N-window); a :u suffix: no label-pair x observation "
                                    "features.")
    pt.add_argument("preset", metavar="PRESET", help="e.g. nettalk:5-grm+")
    pt.add_argument("--format", choices=("wapiti", "crfpp"), default="wapiti",
                    help="wapiti (* and u patterns; crfkit reads it too) or crfpp (U and B lines) (default wapiti)")
    pt.add_argument("-o", "--output", metavar="PATH", help="write there (default: standard output)")
    pt.add_argument("--count", metavar="TRAIN_FILE",
                    help="also print (to stderr) the candidate feature count on this labelled column file, as "
                         "Wapiti and crfkit --support all count them")
    pt.set_defaults(func=cmd_patterns)


def _exit_quietly(signum, frame):
    raise SystemExit(128 + signum)


class _Terminated(BaseException):
    """SIGTERM, raised where the program is so that its cleanups run (the
    ``.part`` file of a download, the temporary file of ``tag -o`` or of a save)."""


def _terminated(signum, frame):
    raise _Terminated()


def quiet_interrupts():
    """Make Ctrl-C exit with status 130 and no traceback (``SystemExit``), and
    return the handler it replaces: what the entry points call first thing,
    before the slow imports (numpy, numba). Does nothing off the main thread."""
    import signal
    try:
        return signal.signal(signal.SIGINT, _exit_quietly)
    except ValueError:  # not the main thread
        return None


def _show_warning(message, category, filename, lineno, file=None, line=None, _default=None):
    from .errors import DataWarning
    if issubclass(category, DataWarning):
        print(f"crfkit: warning: {message}", file=sys.stderr if file is None else file, flush=True)
    else:
        _default(message, category, filename, lineno, file, line)


def main(argv: Sequence[str] | None = None) -> int:
    import signal
    previous = quiet_interrupts()
    try:
        return _main(argv)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def _main(argv) -> int:
    import functools
    import signal
    import warnings

    parser = build_parser(_command_of(sys.argv[1:] if argv is None else list(argv)))
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help(sys.stderr)
        return EXIT_ERROR
    # from here Ctrl-C is a KeyboardInterrupt again: training saves what it reached; SIGTERM
    # unwinds too (training takes it as Ctrl-C), so that no temporary file is left behind
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        prev_term = signal.signal(signal.SIGTERM, _terminated)
    except ValueError:  # not the main thread
        prev_term = None
    show = warnings.showwarning
    warnings.showwarning = functools.partial(_show_warning, _default=show)
    try:
        return args.func(args)
    except _Terminated:
        _err("terminated (SIGTERM)")
        return 128 + signal.SIGTERM
    except CrfkitError as e:
        _err(str(e))
        return EXIT_ERROR
    except KeyboardInterrupt:
        _err("interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # the reader went away (`crfkit tag ... | head`): not an error
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0
    except OSError as e:
        where = f"{e.filename}: " if getattr(e, "filename", None) else ""
        _err(f"{where}{e.strerror or e}")
        return EXIT_ERROR
    finally:
        warnings.showwarning = show
        if prev_term is not None:
            signal.signal(signal.SIGTERM, prev_term)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
