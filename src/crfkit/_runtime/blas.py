"""numba's CPU target initialised without importing ``scipy.linalg`` (the BLAS deferral).

numba's first kernel load initialises its CPU target, and one of the modules that registers
(``numba.np.arraymath``) imports ``scipy.linalg.cython_blas`` on import, only to record that BLAS is
there; that imports all of ``scipy.linalg`` and its BLAS/LAPACK libraries (13 MB of the process,
measured with numba 0.68 / scipy 1.17), which none of crfkit's kernels calls.  :func:`defer_blas`
(registered by :mod:`crfkit.kernels` on import) has :func:`init_target_without_blas` initialise the
target first, without that import.  It reaches into numba's private ``cpu_target`` context, its
compiler lock and ``arraymath._HAVE_BLAS``.  The public names are re-exported by
:mod:`crfkit.memtrim`.

Switch: ``CRFKIT_NO_BLAS_DEFER=1`` (or ``CRFKIT_NO_RUNTIME_HOOKS=1``) leaves numba's target to
initialise as numba does (importing ``scipy.linalg`` where scipy is installed).
"""

from __future__ import annotations

import glob
import importlib.util
import os
import sys

from .switches import enabled

__all__ = ["BLAS_MODULE", "blas_installed", "defer_blas", "init_target_without_blas"]

#: what numba imports to check that BLAS is there
BLAS_MODULE = "scipy.linalg.cython_blas"


def blas_installed() -> bool:
    """Whether ``scipy.linalg.cython_blas`` is installed, found without importing
    ``scipy.linalg``."""
    try:
        spec = importlib.util.find_spec("scipy")
    except (ImportError, ValueError):
        return False
    locations = (spec.submodule_search_locations or []) if spec is not None else []
    return any(glob.glob(os.path.join(loc, "linalg", "cython_blas.*")) for loc in locations)


def init_target_without_blas() -> bool:
    """Initialise numba's CPU target (what its first compile or cache load does) without importing
    ``scipy.linalg``; True when this call did it.

    numba's ``arraymath`` sets ``_HAVE_BLAS`` at import by importing ``scipy.linalg.cython_blas``;
    while the target loads its registries that name is made unimportable (a ``None`` entry in
    ``sys.modules`` makes the import fail before ``scipy.linalg`` loads), then ``_HAVE_BLAS`` is set
    to whether it is installed.  Nothing else changes: numba's linear algebra imports it
    (``ensure_blas``) when a function that uses it compiles, as it always does.  A no-op when the
    target is already initialised, when ``scipy.linalg`` is loaded already, when switched off, or
    with a numba whose target has no ``refresh`` or whose ``arraymath`` lacks ``_HAVE_BLAS``.

    :func:`defer_blas` has it run before the first kernel load."""
    if not enabled("blas_defer"):
        return False
    if "numba.np.arraymath" in sys.modules or BLAS_MODULE in sys.modules:
        return False
    try:
        from numba.core.registry import cpu_target
    except ImportError:  # pragma: no cover - another numba
        return False
    refresh = getattr(cpu_target.target_context, "refresh", None)
    if refresh is None:  # pragma: no cover - another numba
        return False
    sys.modules[BLAS_MODULE] = None
    try:
        refresh()
    finally:
        if BLAS_MODULE in sys.modules and sys.modules[BLAS_MODULE] is None:
            del sys.modules[BLAS_MODULE]
    arraymath = sys.modules.get("numba.np.arraymath")
    if arraymath is not None and getattr(arraymath, "_HAVE_BLAS", None) is False:
        arraymath._HAVE_BLAS = blas_installed()
    return True


_deferring = None


def defer_blas() -> bool:
    """Register (once per process) a listener of numba's event API (``numba:compiler_lock``) that
    runs :func:`init_target_without_blas` when numba first takes its compiler lock after its CPU
    target context exists, i.e. before the first compilation or cache load (building the context
    takes the lock too, at the first ``@njit`` decoration: too early to refresh it).  It runs then,
    not when ``crfkit.kernels`` is imported: measured on CoNLL-2000, a target initialised before the
    file is read left ``crfkit train`` 16 MB more of anonymous memory at its peak than one
    initialised after.  True when registered by this call (False when registered before, switched
    off, or this numba lacks the hooks); ``crfkit.kernels`` calls it on import."""
    global _deferring
    if _deferring is not None or not enabled("blas_defer"):
        return False
    try:
        import numba.core.event as ev
        from numba.core.compiler_lock import global_compiler_lock
        from numba.core.registry import cpu_target

        listener, register = ev.Listener, ev.register
    except (ImportError, AttributeError):  # pragma: no cover - another numba
        return False

    class DeferBlas(listener):
        done = False

        def on_start(self, event):  # (numba emits it before it takes the lock)
            if self.done or "_toplevel_target_context" not in vars(cpu_target):
                return
            self.done = True
            with global_compiler_lock:
                init_target_without_blas()

        def on_end(self, event):
            pass

    _deferring = DeferBlas()
    register("numba:compiler_lock", _deferring)
    return True
