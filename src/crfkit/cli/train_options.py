"""The options of ``crfkit train`` (:func:`add_train_arguments`, called by
:func:`crfkit.cli.train.add_parser`): input, templates and feature sets, regularisation, the optimizer
and its stopping rules, dev sets, warm starts, checkpoints, Dask."""

from __future__ import annotations

import argparse

from .common import FORMATS, nonneg_float, nonneg_int, param, pos_float, pos_int


def add_train_arguments(t: argparse.ArgumentParser) -> None:
    """Add ``crfkit train``'s arguments to its subparser ``t``."""
    # the algorithm names without importing crfkit.train (and with it numba and every kernel)
    from ..optim import stochastic

    ALGORITHMS = ("lbfgs", "owlqn") + tuple(stochastic.available())
    t.add_argument(
        "train_file",
        metavar="TRAIN_FILE",
        nargs="+",
        help="labelled column file (.gz ok, - for stdin); with --dask, several files or globs (shards)",
    )
    t.add_argument("-m", "--model", required=True, help="where to write the model")
    t.add_argument(
        "-f",
        "--format",
        choices=FORMATS,
        default="columns",
        help="input format: columns (CoNLL/CRF++ column file, the default), crfsuite (CRFsuite "
        "attribute file: LABEL<TAB>attr[:weight]..., no templates), or auto (crfsuite when "
        "the first 200 non-blank lines all hold a TAB and either their field counts differ "
        "or at least half of the fields after the first hold '=' or ':'; columns otherwise)",
    )
    t.add_argument(
        "-t",
        "--template",
        metavar="TEMPLATE_FILE",
        help="CRF++ template file (default: built-in chunking templates over columns word, POS)",
    )
    t.add_argument(
        "--features",
        metavar="PRESET",
        help="a generated window feature set instead of -t: nettalk:N-grm, N-grm-, N-grm+, N-grm++ "
        "(N odd; Lavergne et al. 2010, 5.1.1) over the first column; a :u suffix drops the "
        "label-pair x observation features (`crfkit patterns PRESET` prints the lines)",
    )
    t.add_argument(
        "--incremental",
        action="store_true",
        help="with --features: grow the feature set by window radius, adding a longer window's values "
        "only where the embedded shorter window is active (Lavergne et al. 2010, 5.4)",
    )
    t.add_argument(
        "--stage-iterations",
        default="10",
        metavar="N[,N...]",
        help="with --incremental: iterations of each stage but the last (which runs to "
        "--max-iterations or the stopping rules); one value, or one per stage (default 10)",
    )
    t.add_argument(
        "--dense-columns",
        metavar="COLS",
        help="observation columns (1-based, e.g. 3-130) read as real numbers into dense features, "
        "a weight per (column, label): embeddings, pixels; `crfkit tag` reads them back",
    )
    t.add_argument(
        "--weight-column",
        metavar="N",
        type=pos_int,
        help="observation column N (1-based) holds each sentence's sample weight (a number >= 0, "
        "the same on every token of the sentence); it is taken out of the tokens before the "
        "templates and --dense-columns read them, which count the remaining columns (put it "
        "last to keep the numbering of the file without it). CRFsuite attribute files give "
        "weights on @weight:W lines instead",
    )
    t.add_argument(
        "--no-pad",
        action="store_true",
        help="templates reaching outside the sentence give no attribute (CRFsuite style) "
        "instead of _B-1/_B+1 padding (CRF++ style)",
    )
    t.add_argument(
        "-a", "--algorithm", default="lbfgs", help=f"training algorithm ({', '.join(ALGORITHMS)})"
    )
    g2 = t.add_mutually_exclusive_group()
    g2.add_argument("--c2", type=nonneg_float, help="L2 strength, CRFsuite's sum form (default 1)")
    g2.add_argument(
        "--l2", type=nonneg_float, help="L2 strength, crfkit's per-sequence form (l2 = 2*c2/n)"
    )
    g2.add_argument("--rho2", type=nonneg_float, help="L2 strength, Wapiti's form (l2 = rho2/n)")
    g1 = t.add_mutually_exclusive_group()
    g1.add_argument("--c1", type=nonneg_float, help="L1 strength, CRFsuite's form (l1 = c1/n)")
    g1.add_argument("--l1", type=nonneg_float, help="L1 strength, crfkit's form")
    g1.add_argument("--rho1", type=nonneg_float, help="L1 strength, Wapiti's form (l1 = rho1/n)")
    t.add_argument(
        "-p",
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        type=param,
        help="a setting of a stochastic optimizer, e.g. -p eta0=0.1 -p penalty=cumulative "
        "(repeatable; like crfsuite learn -p)",
    )
    t.add_argument(
        "--seed",
        type=nonneg_int,
        default=0,
        help="random seed of stochastic optimizers (default 0)",
    )
    t.add_argument(
        "--max-iterations",
        type=pos_int,
        metavar="N",
        help="iteration limit; epochs (effective passes) for stochastic optimizers (default: none)",
    )
    t.add_argument(
        "--delta",
        type=nonneg_float,
        default=1e-5,
        help="stop when the objective improved by less than this (relative) over --period "
        "iterations (default 1e-5)",
    )
    t.add_argument(
        "--period", type=nonneg_int, default=10, help="period of the --delta test (default 10)"
    )
    t.add_argument(
        "--epsilon",
        type=nonneg_float,
        default=1e-5,
        help="stop when ||g|| / max(1, ||w||) < epsilon (default 1e-5)",
    )
    t.add_argument("--gtol", type=pos_float, help="stop when the gradient's max-norm is below this")
    t.add_argument(
        "--support",
        choices=("observed", "all"),
        default="observed",
        help="state features: (attribute, label) pairs seen in training (CRFsuite) or all pairs "
        "(CRF++/Wapiti) (default observed)",
    )
    t.add_argument(
        "--transitions",
        choices=("observed", "all"),
        help="transition features: label bigrams seen in training, or all (default: as --support)",
    )
    t.add_argument(
        "--min-freq",
        type=nonneg_float,
        default=0,
        metavar="N",
        help="drop features (observed) / attributes (all) seen fewer than N times",
    )
    t.add_argument("--dev", metavar="DEV_FILE", help="labelled column file scored during training")
    t.add_argument(
        "--encoding",
        metavar="ENC",
        help="encoding of the training and dev files, e.g. utf-16 (default UTF-8)",
    )
    t.add_argument(
        "--dev-every",
        type=pos_int,
        default=1,
        metavar="N",
        help="score the dev file every N iterations",
    )
    t.add_argument(
        "--dev-stop",
        type=pos_int,
        metavar="W",
        help="stop when the dev score has not improved for W evaluations and keep the best model "
        "(needs --dev)",
    )
    t.add_argument(
        "--sparse-fb",
        choices=("off", "on", "auto"),
        default="off",
        help="with label-pair x observation features (lbfgs/owlqn): compute the gradient with the "
        "sparse forward-backward recursions, which visit only the non-zero label-pair scores "
        "(Lavergne et al. 2010, 4.1; same result; faster once L1 has zeroed most of them); "
        "auto: when there is an L1 term (default off: the standard L x L recursions)",
    )
    t.add_argument(
        "--lbfgs-history",
        choices=("auto", "float64", "float32"),
        default="auto",
        help="precision of the (s, y) pairs lbfgs/owlqn keep (default auto: float32 when the float64 "
        "pairs would pass 32 MiB, about 300k features, where they are most of the memory)",
    )
    t.add_argument(
        "--dev-metric",
        choices=("auto", "accuracy", "f1"),
        default="auto",
        help="dev score for --dev-stop: chunk F1 or token accuracy (default auto: F1 when the "
        "labels are chunks)",
    )
    t.add_argument(
        "--partial-labels",
        action="store_true",
        help="label cells may be partial: ? (any label) or A|B (one of these); the likelihood sums "
        "over the sequences consistent with them (Tsuboi et al. 2008); needs --support all and "
        "-a lbfgs/owlqn",
    )
    t.add_argument(
        "--labels",
        metavar="A,B,...",
        help="with --partial-labels: the label set (? cells allow any of them; every label a cell "
        "names must be one of them); default: the labels the cells name",
    )
    t.add_argument(
        "--fine-tune",
        type=nonneg_int,
        default=0,
        metavar="K",
        help="after training, K L-BFGS iterations on the non-zero features only, without L1 "
        "(after an L1 run: Wapiti/Lavergne et al.'s fine-tuning)",
    )
    t.add_argument(
        "--fine-tune-l2",
        type=nonneg_float,
        metavar="L2",
        help="L2 of the fine-tuning, crfkit's form (default: the training L2)",
    )
    t.add_argument(
        "--threads",
        type=nonneg_int,
        metavar="N",
        help="threads (default: up to all cores, the count that runs fastest now)",
    )
    t.add_argument("--trace", metavar="PATH.jsonl", help="write one JSON line per iteration")
    t.add_argument(
        "--checkpoint",
        metavar="PATH",
        help="write the optimizer state there every --checkpoint-every "
        "iterations and when training ends or is interrupted (Ctrl-C, SIGTERM)",
    )
    t.add_argument(
        "--checkpoint-every",
        type=nonneg_int,
        default=10,
        metavar="N",
        help="iterations between checkpoints (0: only at the end or on interruption; default 10)",
    )
    t.add_argument(
        "--resume",
        metavar="PATH",
        help="continue from a checkpoint (same data, features, algorithm "
        "and regularisation) to the result an uninterrupted run would give",
    )
    t.add_argument(
        "--init-model",
        metavar="MODEL",
        help="warm start: begin from this model's weights, mapped "
        "by (attribute, label) and label pair (a crfkit model, or a CRFsuite, CRF++ or Wapiti "
        "model, detected by its first bytes)",
    )
    t.add_argument(
        "--dask",
        metavar="ADDRESS",
        help="train on a Dask cluster (pip install 'crfkit[dask]'): a "
        "scheduler address (tcp://host:8786), or local:N for a LocalCluster of N worker processes; "
        "the training files are read and encoded by the workers (one shard per file)",
    )
    t.add_argument(
        "--dask-threads",
        type=pos_int,
        metavar="N",
        help="with --dask: numba threads inside each "
        "worker task (default --threads, else the cores divided by the local workers, else 1)",
    )
    t.add_argument(
        "--dask-worker-timeout",
        type=pos_float,
        metavar="SECONDS",
        help="with --dask: stop with an error once the cluster has had no live worker for this "
        "long (all lost, none restarted); the last --checkpoint is kept (default "
        "$CRFKIT_DASK_WORKER_TIMEOUT, else 120)",
    )
    t.add_argument(
        "-q", "--quiet", action="store_true", help="no progress lines and no progress bar"
    )
    t.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="on a terminal, also print the per-iteration lines the progress bar replaces "
        "(off a terminal they are always printed, and no bar is drawn)",
    )
