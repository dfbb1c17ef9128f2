"""``crfkit eval``: conlleval's chunk scores of a tagged file (its parser and :func:`cmd_eval`)."""

from __future__ import annotations

import argparse
import sys

from ..errors import DataError


def cmd_eval(args) -> int:
    from ..io.columns import open_text
    from ..metrics import conlleval_lines, label_scheme

    name = "<stdin>" if args.file == "-" else args.file
    f = open_text(args.file)
    labels: set[str] = set()
    try:
        try:
            rep = conlleval_lines(
                f,
                delimiter=args.delimiter,
                boundary=args.boundary,
                raw=args.raw,
                otag=args.otag,
                name=name,
                iobes=args.iobes,
                labels=labels,
            )
        except UnicodeDecodeError:
            raise DataError("invalid UTF-8", name) from None
    finally:
        if f is not sys.stdin and args.file != "-":
            f.close()
    if not args.raw and rep.tokens and label_scheme(sorted(labels)) is None:
        # POS tags, phoneme classes...: conlleval would print "0 phrases ... FB1 0.00"
        sys.stdout.write(
            f"processed {rep.tokens} tokens; accuracy: {rep.accuracy:6.2f}%; the labels are not "
            "chunk tags, so no chunk F1 (-r/--raw scores every tag as a chunk, as conlleval -r)\n"
        )
        return 0
    sys.stdout.write(rep.format())
    return 0


def add_parser(sub) -> None:
    """Add ``eval`` to the ``crfkit`` subparsers ``sub``."""
    e = sub.add_parser(
        "eval",
        help="conlleval chunk scores of a tagged file",
        description="Score a file whose last two columns are the gold and the guessed tag "
        "(what `crfkit tag` writes on labelled input), exactly as conlleval.pl. When the tags "
        "are not chunk tags (B-/I-/E-/S- prefixes and O), prints the token accuracy instead "
        "(-r scores every tag as a chunk).",
    )
    e.add_argument(
        "file",
        metavar="FILE",
        nargs="?",
        default="-",
        help="file to score (.gz ok; default/-: stdin)",
    )
    e.add_argument("-d", "--delimiter", help="column delimiter (default: any whitespace)")
    e.add_argument("-b", "--boundary", default="-X-", help="sentence boundary token (default -X-)")
    e.add_argument(
        "-r", "--raw", action="store_true", help="tags have no B-/I- prefix (conlleval -r)"
    )
    e.add_argument("-o", "--otag", default="O", help="outside tag in raw mode (default O)")
    e.add_argument(
        "--iobes",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also split chunks on IOBES S- and E->B (default on; --no-iobes: conlleval.pl verbatim)",
    )
    e.set_defaults(func=cmd_eval)
