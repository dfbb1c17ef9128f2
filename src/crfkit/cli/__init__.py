"""The ``crfkit`` command line: train, tag, serve, eval, info, demo, data, patterns, dump, prune,
cv, tune, bench, report, import, export, warmup.

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

This file holds :func:`main`, :func:`build_parser` and the command registry, and is the only one
that imports the command modules: ``train``, ``tag``, ``serve``, ``eval``, ``info`` (info, dump,
prune, patterns), ``data`` (data, demo), ``cv``, ``tune``, ``bench``, ``report``, ``interop``
(import, export) and ``warmup``, each of which adds its own subparser and sets its function;
:mod:`crfkit.cli.common` is what they share.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from .common import EXIT_ERROR, EXIT_INTERRUPTED, quiet_interrupts, root_parser, run_command

__all__ = ["COMMANDS", "EXIT_ERROR", "EXIT_INTERRUPTED", "build_parser", "main", "quiet_interrupts"]


#: the command registry, in the order ``crfkit --help`` lists the commands: (the commands one call
#: adds, the module of :mod:`crfkit.cli` that holds them, its function that adds their subparsers)
REGISTRY = (
    (("train",), "train", "add_parser"),
    (("tag",), "tag", "add_parser"),
    (("serve",), "serve", "add_parser"),
    (("eval",), "eval", "add_parser"),
    (("info",), "info", "add_info_parser"),
    (("demo",), "data", "add_demo_parser"),
    (("data",), "data", "add_data_parser"),
    (("patterns",), "info", "add_patterns_parser"),
    (("dump", "prune"), "info", "add_dump_parsers"),
    (("cv",), "cv", "add_parser"),
    (("tune",), "tune", "add_parser"),
    (("bench",), "bench", "add_parser"),
    (("report",), "report", "add_parser"),
    (("import",), "interop", "add_import_parser"),
    (("export",), "interop", "add_export_parser"),
    (("warmup",), "warmup", "add_parser"),
)

#: the subcommands (``crfkit COMMAND``); :func:`build_parser` can build one of them alone
COMMANDS = tuple(name for names, _, _ in REGISTRY for name in names)


def _command_of(argv: Sequence[str]) -> str | None:
    """The subcommand named by ``argv`` when it is the first argument (``crfkit tag ...``), ``""``
    for ``crfkit --version`` (no subcommand needed), else None (help, errors: the whole parser)."""
    if not argv:
        return None
    first = argv[0]
    if first == "--version":
        return ""
    return first if first in COMMANDS else None


def build_parser(command: str | None = None):
    """The argument parser; with ``command``, only that subcommand's parser is built (``""``: none),
    so that ``crfkit tag`` does not import what ``train``, ``cv`` or ``bench`` need to describe
    their options (the optimizers' registry, numpy, the benchmark harness)."""
    p, sub = root_parser()
    for names, module, adder in REGISTRY:
        if command is None or command in names:
            getattr(importlib.import_module(f"{__name__}.{module}"), adder)(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``crfkit ARGV`` and return its exit status.

    Ctrl-C: as the ``crfkit`` program, it exits with status 130 (training first saves what it
    reached).  Called in-process by another program (a test runner, a notebook: any caller whose
    SIGINT handler is not crfkit's own), the command ends as it would, and then the interrupt is
    passed on in the caller's own terms:

    * a Python handler (``KeyboardInterrupt``, pytest's case): the handler is restored and a
      ``KeyboardInterrupt`` raised, so that the caller stops too (pytest went on with the next
      test before);
    * the default action (``SIG_DFL``): restored, and the signal raised again, which ends the
      process as it would have without crfkit, once the command has saved what it reached;
    * ignored (``SIG_IGN``: a background job of a non-interactive shell, ``nohup``): the command
      ignores Ctrl-C too.  Taking it would end the command early and return normally, and the
      caller, which never expected an interrupt, went on (a loop of trainings never stopped)."""
    import signal

    from .common import SIGINT_SEEN

    current = signal.getsignal(signal.SIGINT)
    # in-process under another program: its own Ctrl-C handler stays until the command runs
    embedded = getattr(current, "__name__", "") != "_exit_quietly"
    previous = current if embedded else quiet_interrupts()
    seen = SIGINT_SEEN["seen"]
    SIGINT_SEEN["seen"] = False
    try:
        return _main(argv)
    finally:
        if previous is not None:
            try:
                signal.signal(signal.SIGINT, previous)
            except ValueError:  # not the main thread: nothing was installed
                pass
        interrupted = SIGINT_SEEN["seen"]
        SIGINT_SEEN["seen"] = seen or interrupted
        # (a caller that ignores SIGINT is never interrupted: run_command left it ignored)
        if interrupted and embedded:
            if previous == signal.SIG_DFL:
                signal.raise_signal(signal.SIGINT)
            raise KeyboardInterrupt


def _main(argv) -> int:
    parser = build_parser(_command_of(sys.argv[1:] if argv is None else list(argv)))
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help(sys.stderr)
        return EXIT_ERROR
    return run_command(args.func, args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
