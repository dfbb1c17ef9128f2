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
    if (sys.argv[1:] if argv is None else list(argv))[:1] == ["tag"]:
        # a tagging process calls no BLAS routine: numpy's OpenBLAS threads would only spin
        from ._runtime.omp import single_blas_thread

        single_blas_thread()
    from .cli import main as cli_main

    try:
        status = cli_main(argv)
    except KeyboardInterrupt:  # a Ctrl-C between the command's end and crfkit's handler coming back
        sys.stderr.write("crfkit: error: interrupted\n")
        status = 130
    finally:
        # the command is over: a Ctrl-C from here on would land in the interpreter's shutdown,
        # where Python has put back the default action (the process killed by SIGINT, status -2,
        # nothing said); ignored, the exit status is the command's.  Only as the program itself
        # (one of crfkit's handlers in place), never for an in-process caller.
        handler = signal.getsignal(signal.SIGINT)
        if handler is _exit_quietly or getattr(handler, "__module__", "").startswith("crfkit"):
            signal.signal(signal.SIGINT, signal.SIG_IGN)
    # a Ctrl-C the command handled must not turn the exit into a kill by SIGINT (CPython's flag)
    from ._runtime.interrupt import forget_handled_interrupt

    forget_handled_interrupt()
    return status


if __name__ == "__main__":
    sys.exit(main())
