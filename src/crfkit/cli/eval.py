"""``crfkit eval``: conlleval's chunk scores of a tagged file (its parser and :func:`cmd_eval`)."""

from __future__ import annotations

import argparse
import sys

from ..errors import DataError


def cmd_eval(args) -> int:
    from ..io.columns import open_text
    from ..metrics import conlleval_lines

    name = "<stdin>" if args.file == "-" else args.file
    f = open_text(args.file)
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
            )
        except UnicodeDecodeError:
            raise DataError("invalid UTF-8", name) from None
    finally:
        if f is not sys.stdin and args.file != "-":
            f.close()
    sys.stdout.write(rep.format())
    return 0


def add_parser(sub) -> None:
    """Add ``eval`` to the ``crfkit`` subparsers ``sub``."""
    e = sub.add_parser(
        "eval",
        help="conlleval chunk scores of a tagged file",
        description="Score a file whose last two columns are the gold and the guessed tag "
        "(what `crfkit tag` writes on labelled input), exactly as conlleval.pl.",
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
