"""``crfkit data`` (list, fetch, export and verify the benchmark data sets) and ``crfkit demo``."""

from __future__ import annotations

import os

from ..errors import CrfkitError
from .common import EXIT_INTERRUPTED, nonneg_int, pos_float, pos_int, print_stderr


def _dataset_names(names: list[str]) -> list[str]:
    from ..datasets.download import REGISTRY

    if not names or names == ["all"]:
        return list(REGISTRY)
    for n in names:
        if n not in REGISTRY:
            raise CrfkitError(f"unknown data set {n!r}; known: {', '.join(REGISTRY)} (or all)")
    return names


def cmd_data(args) -> int:
    from .. import datasets
    from ..datasets.download import REGISTRY, fetch, verify

    if args.data_command == "fetch":
        names = _dataset_names(args.names)
        log = (lambda s: None) if args.quiet else print_stderr
        root = None
        for n in (
            names
        ):  # SIGTERM and Ctrl-C remove the .part file of the download in progress (see main)
            root = fetch(
                n,
                cache_dir=args.cache_dir,
                base_url=args.base_url,
                force=args.force,
                timeout=args.timeout,
                log=log,
            )
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
            where = [
                label
                for label, d in (("data dir", base), ("cache", cache))
                if (
                    os.path.isfile(os.path.join(str(d), df.path))
                    or os.path.isfile(os.path.join(str(d), df.path[:-3]))
                )
            ]
            print(f"  {df.path:<45} {', '.join(where) if where else 'missing'}")
    return 0


def _data_export(args) -> int:
    """`crfkit data export nettalk OUTDIR`: the NETtalk split as column files (letter TAB label)."""
    from ..datasets.nettalk import nettalk_split, nettalk_split_folds, write_columns

    if args.name != "nettalk":
        raise CrfkitError(
            f"data export writes column files of nettalk only, not {args.name!r} (the other data "
            "sets are column files already)"
        )
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
    folds = (
        f"folds {train_f[0]}-{train_f[-1]}"
        if list(train_f) == list(range(train_f[0], train_f[-1] + 1))
        else "folds " + ",".join(map(str, train_f))
    )
    print(
        f"split: train {folds}, dev fold {dev_f}, test fold {test_f} (word i in fold i mod 10); "
        f"labels: {args.labels}"
    )
    return 0


def cmd_demo(args) -> int:
    from ..demo import run

    res = run(
        data_dir=args.data_dir,
        out_dir=args.out,
        threads=args.threads,
        max_iterations=args.max_iterations,
        synthetic=args.synthetic,
        synthetic_sentences=args.synthetic_sentences,
    )
    return EXIT_INTERRUPTED if res.get("status") == "interrupted" else 0


def add_demo_parser(sub) -> None:
    """Add ``demo`` to the ``crfkit`` subparsers ``sub``."""
    d = sub.add_parser(
        "demo",
        help="train and evaluate a chunker on CoNLL-2000",
        description="Train a chunker on CoNLL-2000 with the built-in templates and L-BFGS "
        "(CRFsuite defaults), evaluate it on the test set. Without CoNLL-2000 "
        "a synthetic corpus is used instead (and the output says so).",
    )
    d.add_argument(
        "--data-dir",
        metavar="DIR",
        help="data directory holding conll2000/ (default: $CRFKIT_DATA or ../shared/data)",
    )
    d.add_argument("--threads", type=nonneg_int, metavar="N", help="threads (default: all cores)")
    d.add_argument(
        "--max-iterations", type=pos_int, metavar="N", help="iteration limit (default: none)"
    )
    d.add_argument(
        "--out",
        default="runs",
        metavar="DIR",
        help="where the model and outputs go (default ./runs)",
    )
    d.add_argument(
        "--synthetic",
        action="store_true",
        help="use the synthetic corpus even if CoNLL-2000 is there",
    )
    d.add_argument(
        "--synthetic-sentences",
        type=pos_int,
        default=2000,
        metavar="N",
        help="training sentences of the synthetic corpus (test: N/4; default 2000)",
    )
    d.set_defaults(func=cmd_demo)


def add_data_parser(sub) -> None:
    """Add ``data`` and its subcommands to the ``crfkit`` subparsers ``sub``."""
    da = sub.add_parser(
        "data",
        help="list, download and verify the benchmark data sets",
        description="The benchmark data sets (CoNLL-2000, CoNLL-2002 es/nl, OCR letters, Penn "
        "Treebank sample, NETtalk) in the shared/data layout: list them, fetch them into the "
        "download cache ($CRFKIT_CACHE, else ~/.cache/crfkit) with SHA-256 "
        "verification, or verify a data directory.",
    )
    dsub = da.add_subparsers(dest="data_command", metavar="SUBCOMMAND")
    dl = dsub.add_parser("list", help="the data sets, their terms and where their files are")
    dl.add_argument(
        "--data-dir", metavar="DIR", help="data directory (default: $CRFKIT_DATA or ../shared/data)"
    )
    df = dsub.add_parser(
        "fetch",
        help="download data sets into the cache, verified by SHA-256",
        description="Download data sets (NAME ... or all) into the cache. Without --base-url "
        "the public NLTK data zips are used (the OCR letters need a mirror); "
        "a file whose SHA-256 differs is refused and not kept.",
    )
    df.add_argument(
        "names", nargs="*", metavar="NAME", help="data set names, or all (default: all)"
    )
    df.add_argument(
        "--cache-dir",
        metavar="DIR",
        help="where to put them (default: $CRFKIT_CACHE or ~/.cache/crfkit)",
    )
    df.add_argument(
        "--base-url",
        metavar="URL",
        help="a mirror serving the shared/data layout (http(s)://, file:// or a directory)",
    )
    df.add_argument(
        "--force", action="store_true", help="download even files that are present and verify"
    )
    df.add_argument(
        "--timeout",
        type=pos_float,
        default=300.0,
        metavar="S",
        help="seconds each download (a file, or a zip) may take in all, connection included: a "
        "deadline for the whole download, not per read (default 300)",
    )
    df.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    dx = dsub.add_parser(
        "export",
        help="write NETtalk's 10-fold split as column files (train/dev/test.txt)",
        description="Write the NETtalk words of a split (test fold K, dev fold K-1 mod 10, the "
        "other eight train; word i is in fold i mod 10) as column files, one letter "
        "and its label per line, a blank line after each word: the input of "
        "crfkit train / tag, wapiti and crf_learn.",
    )
    dx.add_argument("name", metavar="NAME", help="nettalk")
    dx.add_argument("out_dir", metavar="OUT_DIR", help="where train.txt, dev.txt and test.txt go")
    dx.add_argument(
        "--test-fold",
        type=int,
        default=9,
        metavar="K",
        help="test fold 0..9 (default 9: train folds 0-7, dev fold 8)",
    )
    dx.add_argument(
        "--labels",
        choices=("phoneme", "stress", "joint"),
        default="phoneme",
        help="the label column: phonemes (51), stress marks (5) or both joined (default phoneme)",
    )
    dx.add_argument(
        "--data-dir", metavar="DIR", help="data directory (default: $CRFKIT_DATA or ../shared/data)"
    )
    dv = dsub.add_parser(
        "verify", help="check the SHA-256 of the files in a data directory (exit 1 if any fails)"
    )
    dv.add_argument(
        "names", nargs="*", metavar="NAME", help="data set names, or all (default: all)"
    )
    dv.add_argument(
        "--data-dir", metavar="DIR", help="data directory (default: $CRFKIT_DATA or ../shared/data)"
    )
    da.set_defaults(func=cmd_data, data_command="list")
