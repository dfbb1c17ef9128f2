"""The compile notice: one line on standard error when numba starts compiling a crfkit kernel.

On a fresh install (or after an update) the first kernel calls compile for about a minute; instead
of staying silent, crfkit prints once per process, on standard error, that it is compiling
(:func:`install_compile_notice`, registered by :mod:`crfkit.kernels` on import).  Loading compiled
kernels from the cache prints nothing.  It listens to numba's event API (``numba:compile``).
``CRFKIT_QUIET_COMPILE=1`` silences the line (the listener stays); ``CRFKIT_NO_COMPILE_NOTICE=1``
(or ``CRFKIT_NO_RUNTIME_HOOKS=1``) does not register the listener at all.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

from .switches import enabled

__all__ = [
    "COMPILE_NOTICE",
    "KERNELS_DIR",
    "KERNELS_PACKAGE",
    "compile_seconds",
    "compile_stats",
    "install_compile_notice",
    "work_clock",
]

COMPILE_NOTICE = (
    "crfkit: compiling the numba kernels this command needs (once after installing or updating "
    "crfkit: up to a minute or two; cached in {where} for later runs; `crfkit warmup` compiles "
    "them all ahead)"
)

#: the package whose functions' compilation shows the notice, and its folder (whose ``__pycache__``
#: it names)
KERNELS_PACKAGE = "crfkit.kernels"
KERNELS_DIR = Path(__file__).resolve().parent.parent / "kernels"

_NOTICE = {"installed": False, "shown": False}

#: the compile time of crfkit's kernels in this process: total seconds (outermost compilations only:
#: a kernel's compile includes its callees'), count, and seconds per kernel module
_TIMES: dict = {
    "seconds": 0.0,
    "cpu_seconds": 0.0,
    "count": 0,
    "by_module": {},
    "cpu_by_module": {},
}
_LOCAL = threading.local()


def compile_seconds() -> float:
    """Seconds this process has spent compiling crfkit kernels so far (0.0 when everything came
    from the cache, or without the listener): timings that must not include compilation subtract
    the difference over their interval."""
    return float(_TIMES["seconds"])


def work_clock() -> float:
    """``time.perf_counter()`` less the kernel compile time so far: the difference of two readings
    is the time between them without compilation (training's seconds and its trace's ``wall_s``
    are measured with it, so that a first run reports its work, not the compiler)."""
    return time.perf_counter() - float(_TIMES["seconds"])


def compile_stats() -> dict:
    """``{"seconds", "cpu_seconds", "count", "by_module", "cpu_by_module"}`` of this process's
    kernel compilations (outermost ones: a kernel compiled as a callee counts in its caller's
    module); the ``cpu_`` figures are the compiling thread's CPU time, which other processes on
    the machine do not inflate."""
    return {
        "seconds": float(_TIMES["seconds"]),
        "cpu_seconds": float(_TIMES["cpu_seconds"]),
        "count": int(_TIMES["count"]),
        "by_module": dict(_TIMES["by_module"]),
        "cpu_by_module": dict(_TIMES["cpu_by_module"]),
    }


def _show_notice() -> None:
    if _NOTICE["shown"]:
        return
    _NOTICE["shown"] = True
    if os.environ.get("CRFKIT_QUIET_COMPILE", "").strip() not in ("", "0"):
        return
    where = KERNELS_DIR / "__pycache__"
    try:
        print(COMPILE_NOTICE.format(where=where), file=sys.stderr, flush=True)
    except (
        OSError,
        ValueError,
    ):  # a closed or broken standard error: the notice is not worth failing for
        pass


def install_compile_notice() -> bool:
    """Print :data:`COMPILE_NOTICE` once per process when numba starts compiling a crfkit kernel (a
    cache miss: numba's ``numba:compile`` event, which a kernel loaded from the cache does not
    raise). Returns False when this numba has no event API, or when the hook is switched off
    (nothing is printed then)."""
    if not enabled("compile_notice"):
        return False
    if _NOTICE["installed"]:
        return True
    try:
        from numba.core import event

        listener, register = event.Listener, event.register
    except (ImportError, AttributeError):  # pragma: no cover - an older numba
        return False
    prefix = KERNELS_PACKAGE + "."

    class _CompileNotice(listener):
        def on_start(self, ev):
            data = ev.data if isinstance(ev.data, dict) else {}
            func = getattr(data.get("dispatcher"), "py_func", None)
            module = getattr(func, "__module__", None) or ""
            stack = getattr(_LOCAL, "stack", None)
            if stack is None:
                stack = _LOCAL.stack = []
            stack.append((module, time.perf_counter(), time.thread_time()))
            if module.startswith(prefix):
                _show_notice()

        def on_end(self, ev):
            stack = getattr(_LOCAL, "stack", None)
            if not stack:
                return
            module, t, c = stack.pop()
            if stack or not module.startswith(prefix):
                return  # a callee (counted in its caller's time) or not a crfkit kernel
            dt, dc = time.perf_counter() - t, time.thread_time() - c
            _TIMES["seconds"] += dt
            _TIMES["cpu_seconds"] += dc
            _TIMES["count"] += 1
            short = module[len(prefix) :]
            for key, v in (("by_module", dt), ("cpu_by_module", dc)):
                _TIMES[key][short] = _TIMES[key].get(short, 0.0) + v

    register("numba:compile", _CompileNotice())
    _NOTICE["installed"] = True
    return True
