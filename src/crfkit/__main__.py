"""``python -m crfkit``: the command line (see :mod:`crfkit.cli`).

Ctrl-C while the interpreter is still importing crfkit, numpy and numba
exits with status 130 and no traceback: the handler is installed before
anything slow is imported (the console script ``crfkit`` enters here too).
Once the command has returned, Ctrl-C is ignored: the process is only
shutting down, and exits with the command's status.
"""

import signal
import sys


def _exit_quietly(signum, frame):
    raise SystemExit(128 + signum)


def main(argv=None) -> int:
    """The console-script entry point: quiet Ctrl-C first, then :func:`crfkit.cli.main`."""
    try:
        signal.signal(signal.SIGINT, _exit_quietly)
    except ValueError:  # not the main thread
        pass
    from .cli import main as cli_main

    try:
        return cli_main(argv)
    finally:
        # the command is over: a Ctrl-C from here on would land in the interpreter's shutdown,
        # where Python has put back the default action (the process killed by SIGINT, status -2,
        # nothing said); ignored, the exit status is the command's.  Only as the program itself
        # (crfkit's handler in place), never for an in-process caller.
        if signal.getsignal(signal.SIGINT) is _exit_quietly:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


if __name__ == "__main__":
    sys.exit(main())
