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
from pathlib import Path

from .switches import enabled

__all__ = ["COMPILE_NOTICE", "KERNELS_DIR", "KERNELS_PACKAGE", "install_compile_notice"]

COMPILE_NOTICE = (
    "crfkit: compiling the numba kernels (once after installing or updating crfkit, about a "
    "minute; cached in {where} for later runs)"
)

#: the package whose functions' compilation shows the notice, and its folder (whose ``__pycache__``
#: it names)
KERNELS_PACKAGE = "crfkit.kernels"
KERNELS_DIR = Path(__file__).resolve().parent.parent / "kernels"

_NOTICE = {"installed": False, "shown": False}


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
            if (getattr(func, "__module__", None) or "").startswith(prefix):
                _show_notice()

        def on_end(self, ev):
            pass

    register("numba:compile", _CompileNotice())
    _NOTICE["installed"] = True
    return True
