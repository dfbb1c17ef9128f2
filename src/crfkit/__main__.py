"""``python -m crfkit``: the command line (see :mod:`crfkit.cli`).

Ctrl-C while the interpreter is still importing crfkit, numpy and numba
exits with status 130 and no traceback: the handler is installed before
anything slow is imported (the console script ``crfkit`` enters here too).
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

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
