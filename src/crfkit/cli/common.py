"""What the commands of :mod:`crfkit.cli` share.

Argument types (:func:`pos_int`, :func:`nonneg_int`, :func:`nonneg_float`, :func:`pos_float`,
:func:`param`), the exit codes (:data:`EXIT_ERROR`, :data:`EXIT_INTERRUPTED`), the messages on
standard error (:func:`print_error`, :func:`print_stderr`, :class:`warnings_as_lines`,
:func:`show_warning`), signal handling (:class:`Terminated`, :func:`quiet_interrupts`) and
:func:`run_command`, which runs a command's function as ``crfkit`` does: SIGTERM unwinds, every
:class:`~crfkit.errors.CrfkitError` is a ``crfkit: error: <message>`` line and exit status 2, Ctrl-C
exit status 130.  Input format detection, re-encoding, the atomic output and the ``--eval`` report
are :mod:`crfkit.tagging`'s (the tagging engine that ``crfkit serve`` shares), re-exported here for
the commands.  :func:`root_parser` is the ``crfkit`` parser without its subcommands.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

from .. import __version__
from ..errors import CrfkitError
from ..tagging import (
    EXIT_ERROR,
    FORMATS,
    EvalReport,
    Output,
    close_source,
    detect_format,
    open_out,
    print_error,
    print_stderr,
    read_attribute_file,
    recode,
    report_eval,
    source_name,
)

__all__ = [
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "FORMATS",
    "EvalReport",
    "Output",
    "Terminated",
    "close_source",
    "detect_format",
    "feature_parts",
    "human_bytes",
    "nonneg_float",
    "nonneg_int",
    "open_out",
    "param",
    "pos_float",
    "pos_int",
    "print_error",
    "print_stderr",
    "quiet_interrupts",
    "read_attribute_file",
    "recode",
    "report_eval",
    "root_parser",
    "run_command",
    "show_warning",
    "source_name",
    "warnings_as_lines",
]

#: the exit status of a run cut short by Ctrl-C (or SIGTERM during training)
EXIT_INTERRUPTED = 130


def human_bytes(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    for unit in ("KiB", "MiB", "GiB"):
        n /= 1024.0
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}"
    return f"{n:.1f} GiB"  # pragma: no cover


def nonneg_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(v) or v < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
    return v


def pos_float(text: str) -> float:
    v = nonneg_float(text)
    if v == 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return v


def pos_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text!r}")
    return v


def nonneg_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text!r}")
    return v


def param(text: str) -> tuple[str, object]:
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


def feature_parts(s) -> str:
    parts = [f"{s.n_state} state", f"{s.n_trans} transition"]
    if s.n_bigram:
        parts.append(f"{s.n_bigram} label-pair x observation")
    if s.n_dense:
        parts.append(f"{s.n_dense * s.n_labels} dense")
    return ", ".join(parts)


class warnings_as_lines:
    """crfkit's own RuntimeWarnings (feature scale, a checkpoint or trace not written) as
    ``crfkit: warning: ...`` lines on standard error, also with -q; other warnings as Python shows
    them."""

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


def _exit_quietly(signum, frame):
    raise SystemExit(128 + signum)


class Terminated(BaseException):
    """SIGTERM, raised where the program is so that its cleanups run (the
    ``.part`` file of a download, the temporary file of ``tag -o`` or of a save)."""


def _terminated(signum, frame):
    raise Terminated()


#: set when Ctrl-C (SIGINT) reached a command run by :func:`run_command`; :func:`crfkit.cli.main`
#: reads it to pass the interrupt on to a program that runs crfkit in-process (pytest)
SIGINT_SEEN = {"seen": False}


def _interrupt(signum, frame):
    SIGINT_SEEN["seen"] = True
    raise KeyboardInterrupt


def quiet_interrupts():
    """Make Ctrl-C exit with status 130 and no traceback (``SystemExit``), and
    return the handler it replaces: what the entry points call first thing,
    before the slow imports (numpy, numba). Does nothing off the main thread."""
    import signal

    try:
        return signal.signal(signal.SIGINT, _exit_quietly)
    except ValueError:  # not the main thread
        return None


def show_warning(message, category, filename, lineno, file=None, line=None, _default=None):
    from ..errors import DataWarning

    if issubclass(category, DataWarning):
        print(f"crfkit: warning: {message}", file=sys.stderr if file is None else file, flush=True)
    else:
        _default(message, category, filename, lineno, file, line)


def root_parser() -> tuple:
    """The ``crfkit`` parser and its subparsers action, to which each command module adds its
    own."""
    p = argparse.ArgumentParser(
        prog="crfkit",
        description="Train linear-chain CRFs on column files and tag with them.",
        epilog="Run `crfkit COMMAND -h` for a command's options.",
    )
    p.add_argument("--version", action="version", version=f"crfkit {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    return p, sub


def run_command(func, args) -> int:
    """``func(args)`` (a command's function and its parsed arguments) as ``crfkit`` runs it, its
    exit status returned: Ctrl-C a ``KeyboardInterrupt`` (training saves what it reached), SIGTERM a
    :class:`Terminated` that unwinds (no temporary file is left behind), crfkit's errors and OS
    errors one ``crfkit: error:`` line (exit status 2); a ``DataWarning`` is a ``crfkit: warning:``
    line.  Where SIGINT is ignored when it starts (an in-process caller that ignores it), Ctrl-C
    stays ignored."""
    import functools
    import signal
    import warnings

    # from here Ctrl-C is a KeyboardInterrupt again: training saves what it reached; SIGTERM
    # unwinds too (training takes it as Ctrl-C), so that no temporary file is left behind
    try:
        # a caller that ignores Ctrl-C (SIG_IGN: a background job, nohup) keeps it ignored
        if signal.getsignal(signal.SIGINT) != signal.SIG_IGN:
            signal.signal(signal.SIGINT, _interrupt)
        prev_term = signal.signal(signal.SIGTERM, _terminated)
    except ValueError:  # not the main thread
        prev_term = None
    show = warnings.showwarning
    warnings.showwarning = functools.partial(show_warning, _default=show)
    try:
        return func(args)
    except Terminated:
        print_error("terminated (SIGTERM)")
        return 128 + signal.SIGTERM
    except CrfkitError as e:
        print_error(str(e))
        return EXIT_ERROR
    except KeyboardInterrupt:
        print_error("interrupted")
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
        print_error(f"{where}{e.strerror or e}")
        return EXIT_ERROR
    finally:
        warnings.showwarning = show
        if prev_term is not None:
            signal.signal(signal.SIGTERM, prev_term)
