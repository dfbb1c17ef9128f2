"""``crfkit import`` and ``crfkit export``: models of CRFsuite, CRF++ and Wapiti in and out.

::

    crfkit import crfsuite old.crfsuite -m model.crfkit
    crfkit export crfsuite -m model.crfkit -o model.crfsuite
    crfkit export crfpp -m model.crfkit -o model.crfpp --text

The formats are :mod:`crfkit.interop`'s.  ``crfkit tag -m`` and ``crfkit info -m`` (and
``--init-model``) take a peer's model directly (:func:`crfkit.interop.load_any`); ``import``
makes a crfkit model file of it once.
"""

from __future__ import annotations

import sys
import time

from ..errors import CrfkitError

__all__ = ["add_export_parser", "add_import_parser", "cmd_export", "cmd_import"]

_FORMATS = ("crfsuite", "crfpp", "wapiti")  # crfkit.interop.FORMATS (not imported for --help)


def _summary(model) -> str:
    s = model.space
    return f"{s.n_labels} labels, {s.n_attributes} attributes, {model.n_active} non-zero features"


def cmd_import(args) -> int:
    from ..interop import read_model

    t0 = time.perf_counter()
    model = read_model(args.peer_model, args.format)
    t1 = time.perf_counter()
    model.save(args.model)
    print(
        f"crfkit: imported {args.format} model {args.peer_model} ({_summary(model)}) in "
        f"{t1 - t0:.2f} s; wrote {args.model}",
        file=sys.stderr,
    )
    return 0


def cmd_export(args) -> int:
    from ..interop import load_any, write_model

    options = {}
    if args.text:
        if args.format != "crfpp":
            raise CrfkitError("--text is for the crfpp format (CRF++'s text model)")
        options["text"] = True
    if args.drop_templates:
        if args.format != "crfsuite":
            raise CrfkitError("--drop-templates is for the crfsuite format")
        options["drop_templates"] = True
    model = load_any(args.model)
    t0 = time.perf_counter()
    write_model(model, args.output, args.format, **options)
    print(
        f"crfkit: exported {args.model} ({_summary(model)}) as a {args.format} model "
        f"{args.output} in {time.perf_counter() - t0:.2f} s",
        file=sys.stderr,
    )
    return 0


def add_import_parser(sub) -> None:
    """Add ``import`` to the ``crfkit`` subparsers ``sub``."""
    p = sub.add_parser(
        "import",
        help="convert a CRFsuite, CRF++ or Wapiti model into a crfkit model",
        description="Read a model written by CRFsuite (crfsuite learn, python-crfsuite), CRF++ "
        "(crf_learn) or Wapiti (wapiti train) and write it as a crfkit model file. It tags with "
        "the labels the peer's own tagger gives. (crfkit tag -m and crfkit info -m also take a "
        "peer's model directly.)",
    )
    p.add_argument("format", choices=_FORMATS, help="the peer's model format")
    p.add_argument("peer_model", metavar="PEER_MODEL", help="the peer's model file")
    p.add_argument("-m", "--model", required=True, help="the crfkit model file to write")
    p.set_defaults(func=cmd_import)


def add_export_parser(sub) -> None:
    """Add ``export`` to the ``crfkit`` subparsers ``sub``."""
    p = sub.add_parser(
        "export",
        help="write a crfkit model as a CRFsuite, CRF++ or Wapiti model",
        description="Write a crfkit model in a peer's model format, so that the peer's tagger "
        "(crfsuite tag, python-crfsuite, crf_test, wapiti label) tags with crfkit's labels. What "
        "the format cannot hold (dense features, label-pair x observation features in CRFsuite, "
        "...) is refused with a message naming it.",
    )
    p.add_argument("format", choices=_FORMATS, help="the peer's model format")
    p.add_argument("-m", "--model", required=True, help="the crfkit model to export")
    p.add_argument("-o", "--output", required=True, help="the peer model file to write")
    p.add_argument(
        "--text", action="store_true", help="crfpp: write CRF++'s text model (crf_learn -t)"
    )
    p.add_argument(
        "--drop-templates",
        action="store_true",
        help="crfsuite: export a model trained through feature templates without them (CRFsuite "
        "cannot store templates; its tagger then needs the attribute strings they make)",
    )
    p.set_defaults(func=cmd_export)
