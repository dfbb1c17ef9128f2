"""``crfkit cv``: k-fold cross-validation, as ``crfsuite learn -x``.

    crfkit cv train.txt -k 10 [--jobs 2] [--fold-seed 0] [any `crfkit train` option: -t, -a, --c2, ...]

Sample weights (``--weight-column N`` of column files, ``@weight:W`` lines of attribute files)
weight the training folds; the held-out fold is scored unweighted.

The sequences of the file (column file or CRFsuite attribute file: blank-line separated blocks;
``-DOCSTART-`` blocks left out) are shuffled with ``--fold-seed`` and cut into k folds of sizes that
differ by at most one; fold i is tagged by a model trained on the other k-1 (the train command's
:func:`crfkit.cli.train.cmd_train`, with the options given, parsed once by its parser), and scored:
token accuracy, and conlleval chunk precision / recall / F1 when the labels follow a chunk scheme
(``B-``/``I-``/``E-``/``S-`` plus a type, or ``O``; see :func:`crfkit.decode.label_scheme`).  It
prints a line per fold, then the mean and the sample standard deviation over the folds.
``--jobs N`` trains N folds at a time in separate processes (each with about cores/N threads unless
``--threads`` is given).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

from ..errors import CrfkitError, DataError
from ..tuning import folds  # the fold split crfkit tune shares
from .common import detect_format, nonneg_int, pos_int, root_parser, run_command
from .train import add_parser as add_train_parser
from .train import cmd_train


def read_blocks(path: str) -> list[str]:
    """The blank-line separated blocks of a text file (one per sequence; ``-DOCSTART-`` blocks
    dropped)."""
    from ..io.columns import open_text

    f = open_text(path)
    try:
        try:
            text = f.read()
        except UnicodeDecodeError as e:
            raise DataError(f"not valid UTF-8 (byte {e.start + 1})", path) from None
    finally:
        if path != "-":
            f.close()
    blocks, cur = [], []
    for line in text.splitlines():
        if line.strip():
            cur.append(line)
        elif cur:
            blocks.append(cur)
            cur = []
    if cur:
        blocks.append(cur)
    return [
        "\n".join(b) + "\n" for b in blocks if not (len(b) == 1 and b[0].split()[0] == "-DOCSTART-")
    ]


def _drop_column(block: str, column: int) -> str:
    """A column-file block without its observation column ``column`` (1-based; the label, last,
    stays): the test fold of a file with a sample-weight column is tagged as a file without one."""
    out = []
    for line in block.splitlines():
        f = line.split()
        if column < len(f):
            del f[column - 1]
        out.append(" ".join(f))
    return "\n".join(out) + "\n"


def _fold_job(
    i: int,
    train_path: str,
    test_path: str,
    model_path: str,
    train_args: argparse.Namespace,
    fmt: str,
) -> dict:
    """Train on ``train_path`` with ``crfkit train``'s parsed options ``train_args`` (quiet, writing
    ``model_path``), tag ``test_path``, score it."""
    import contextlib
    import io

    from ..metrics import conlleval, token_accuracy
    from ..model import CRFModel

    t = time.perf_counter()
    args = argparse.Namespace(**vars(train_args))
    args.train_file = [train_path, *train_args.train_file[1:]]
    args.model, args.format, args.quiet = model_path, fmt, True
    buf_out, buf_err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(buf_out), contextlib.redirect_stderr(buf_err):
        rc = run_command(cmd_train, args)
    if rc != 0:
        raise CrfkitError(f"fold {i + 1}: training failed: {buf_err.getvalue().strip()}")
    train_s = time.perf_counter() - t
    model = CRFModel.load(model_path)
    if fmt == "crfsuite":
        from ..io.crfsuite import read_crfsuite_list

        seqs = read_crfsuite_list(test_path)
        gold = [s.labels for s in seqs]
        pred = model.tag([s.attributes for s in seqs])
    else:
        from ..pipeline import tag_columns

        res = tag_columns(model, test_path, has_labels=True)
        gold, pred = res.gold, res.labels
    rep = conlleval(gold, pred)
    return {
        "fold": i,
        "accuracy": 100.0 * token_accuracy(gold, pred),
        "precision": rep.precision,
        "recall": rep.recall,
        "f1": rep.f1,
        "n_test": len(gold),
        "tokens": sum(map(len, gold)),
        "seconds": time.perf_counter() - t,
        "train_seconds": train_s,
    }


def cmd_cv(args) -> int:
    from ..decode import label_scheme
    from ..parallel import cpu_count

    mini = argparse.ArgumentParser(prog="crfkit cv", add_help=False)
    mini.add_argument("-k", "--folds", type=pos_int)
    mini.add_argument("--jobs", type=pos_int)
    mini.add_argument("--fold-seed", type=nonneg_int)
    mini.add_argument("-f", "--format", choices=("columns", "crfsuite", "auto"))
    mini.add_argument("--weight-column", type=pos_int)
    if args.file == "-":
        raise CrfkitError("crfkit cv needs a file (it is read once per fold)")
    known, rest = mini.parse_known_args(args.rest)
    k = known.folds or args.folds
    jobs = known.jobs or args.jobs
    seed = known.fold_seed if known.fold_seed is not None else args.fold_seed
    fmt = known.format or args.format
    wcol = known.weight_column
    if wcol is not None:
        rest = rest + [
            "--weight-column",
            str(wcol),
        ]  # the folds train with it; the test folds drop it
    for bad in ("-m", "--model", "-o", "--resume", "--checkpoint"):
        if bad in rest:
            raise CrfkitError(
                f"crfkit cv: {bad} does not apply (each fold trains its own model in a "
                "temporary directory)"
            )
    # the train options are read once, here, by the train command's own parser; each fold trains
    # with them
    parser, sub = root_parser()
    add_train_parser(sub)
    train_args = parser.parse_args(["train", args.file, "-m", os.devnull, *rest])
    if jobs > 1 and "--threads" not in rest:
        train_args.threads = max(1, cpu_count() // jobs)
    fmt, _ = detect_format(fmt, args.file)
    blocks = read_blocks(args.file)
    parts = folds(len(blocks), k, seed)
    if fmt == "columns":
        gold_labels = {line.split()[-1] for b in blocks for line in b.splitlines()}
    else:
        gold_labels = {
            line.split("\t")[0]
            for b in blocks
            for line in b.splitlines()
            if not line.startswith("@")
        }
    scheme = label_scheme(sorted(gold_labels))
    metric = (
        f"token accuracy and chunk F1 ({scheme.upper()} labels)"
        if scheme
        else "token accuracy (the labels are not chunk tags)"
    )
    print(
        f"crfkit cv: {args.file}: {len(blocks)} sequences, {k} folds (seed {seed}), "
        f"{jobs} job{'s' if jobs > 1 else ''}; metric: {metric}",
        flush=True,
    )
    t0 = time.perf_counter()
    results = []
    with tempfile.TemporaryDirectory(prefix="crfkit-cv-") as d:
        jobs_args = []
        for i, test_idx in enumerate(parts):
            mask = np.ones(len(blocks), bool)
            mask[test_idx] = False
            tr, te, mp = (os.path.join(d, f"fold{i + 1}.{x}") for x in ("train", "test", "crfkit"))
            with open(tr, "w", encoding="utf-8") as f:
                f.write("\n".join(blocks[j] for j in np.flatnonzero(mask).tolist()))
            with open(te, "w", encoding="utf-8") as f:
                f.write(
                    "\n".join(
                        blocks[j]
                        if wcol is None or fmt != "columns"
                        else _drop_column(blocks[j], wcol)
                        for j in test_idx.tolist()
                    )
                )
            jobs_args.append((i, tr, te, mp, train_args, fmt))

        def report(r):
            line = (
                f"fold {r['fold'] + 1}/{k}: {r['n_test']} sequences, {r['tokens']} tokens; "
                f"accuracy {r['accuracy']:.2f}%"
            )
            if scheme:
                line += (
                    f"; precision {r['precision']:.2f}, recall {r['recall']:.2f}, F1 {r['f1']:.2f}"
                )
            print(line + f" ({r['seconds']:.1f} s)", flush=True)

        if jobs > 1:
            import multiprocessing as mp_
            from concurrent.futures import ProcessPoolExecutor, as_completed

            with ProcessPoolExecutor(max_workers=jobs, mp_context=mp_.get_context("spawn")) as ex:
                futs = [ex.submit(_fold_job, *a) for a in jobs_args]
                for fut in as_completed(futs):
                    r = fut.result()
                    results.append(r)
                    report(r)
        else:
            for a in jobs_args:
                r = _fold_job(*a)
                results.append(r)
                report(r)
    results.sort(key=lambda r: r["fold"])

    def ms(key):
        v = np.array([r[key] for r in results])
        return v.mean(), (v.std(ddof=1) if len(v) > 1 else 0.0)

    acc = ms("accuracy")
    line = f"mean over {k} folds: accuracy {acc[0]:.2f} ± {acc[1]:.2f}%"
    if scheme:
        p, r_, f1 = ms("precision"), ms("recall"), ms("f1")
        line += (
            f"; precision {p[0]:.2f} ± {p[1]:.2f}, recall {r_[0]:.2f} ± {r_[1]:.2f}, "
            f"F1 {f1[0]:.2f} ± {f1[1]:.2f}"
        )
    print(line + f" ({time.perf_counter() - t0:.1f} s in all)", flush=True)
    return 0


def add_parser(sub) -> None:
    """Add ``cv`` to the ``crfkit`` subparsers ``sub``."""
    c = sub.add_parser(
        "cv",
        help="k-fold cross-validation (as crfsuite learn -x)",
        description="Cut the sequences of a labelled file into k folds (shuffled, seeded), "
        "train on k-1 and score the held-out one, for each fold; print per-fold and "
        "mean (± sd) token accuracy and, for chunk labels, conlleval F1. Every other "
        "option is a `crfkit train` option (-t, -a, --c1, --c2, --max-iterations, ...).",
        usage="crfkit cv FILE [-k K] [--jobs N] [--fold-seed S] [crfkit train options]",
    )
    c.add_argument(
        "file", metavar="FILE", help="labelled column file or CRFsuite attribute file (.gz ok)"
    )
    c.add_argument("-k", "--folds", type=pos_int, default=10, help="number of folds (default 10)")
    c.add_argument(
        "--jobs", type=pos_int, default=1, help="folds trained at a time, in separate processes"
    )
    c.add_argument(
        "--fold-seed", type=nonneg_int, default=0, help="seed of the fold assignment (default 0)"
    )
    c.add_argument(
        "-f",
        "--format",
        choices=("columns", "crfsuite", "auto"),
        default="columns",
        help="input format, as for train (default columns)",
    )
    c.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    c.set_defaults(func=cmd_cv)
