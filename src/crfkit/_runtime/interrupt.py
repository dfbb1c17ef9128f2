"""CPython's record of an unhandled Ctrl-C, cleared once crfkit has handled it.

CPython 3.11 keeps a process-wide flag (``_Py_UnhandledKeyboardInterrupt``) that some of its
evaluation paths set when a ``KeyboardInterrupt`` passes through them, and that nothing resets when
Python code then catches the exception; at exit, CPython then kills the process with SIGINT
instead of returning its status (seen here: the flag was 1 at exit in each such run).  crfkit
handles Ctrl-C itself (``crfkit: error: interrupted``, exit status 130), so its entry point clears
the flag once the command has returned: without it, about 1 run in 60 that was interrupted near
the end of ``crfkit info`` ended killed by SIGINT (status -2) after printing that it had handled
the interrupt.  ``CRFKIT_NO_INTERRUPT_RESET=1`` leaves the flag alone.
"""

from __future__ import annotations

from .switches import enabled

__all__ = ["forget_handled_interrupt"]


def forget_handled_interrupt() -> bool:
    """Clear CPython's unhandled-``KeyboardInterrupt`` flag (the command handled it); False where
    this interpreter has no such flag or the hook is switched off (``CRFKIT_NO_INTERRUPT_RESET``)."""
    if not enabled("interrupt_flag"):
        return False
    try:
        import ctypes

        flag = ctypes.c_int.in_dll(ctypes.pythonapi, "_Py_UnhandledKeyboardInterrupt")
    except (ImportError, ValueError, AttributeError, OSError):  # another Python: no such symbol
        return False
    flag.value = 0
    return True
