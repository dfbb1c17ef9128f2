"""Numba kernels (every ``@njit`` function of crfkit lives in this package).

Cache invalidation.  Numba's on-disk cache (``cache=True``) keys a compiled
function on the source of its own file only: a kernel in ``sag.py`` keeps the
``chain.py`` code it was compiled with after ``chain.py`` changes, until
``sag.py`` itself changes (numba/numba#8396, open).  After a ``git pull`` or
an edit that touches one kernel file, the others would run stale code.  So
:func:`stamp_directory` (called below for this package) adds a digest of all
the ``.py`` files of a directory to the cache stamp of every function defined
there: changing any kernel file recompiles them all on their next use.  It
wraps numba's cache locators (``CacheImpl._locator_classes``); where that
hook is missing (another numba), the caches behave as numba's own.

Vectorisation.  Numba tests every array index for a negative value (Python's
wrap-around) unless it can prove it is not: a loop ``for k in range(lo, hi):
x[k] ...`` or ``x[base + j]`` over ``j`` keeps that test (a branch per access)
and LLVM then leaves the loop scalar.  Hot loops go over a slice indexed from
0 in a ``range`` from 0 (``xb = x[lo:hi]; for j in range(hi - lo): xb[j]``)
and choose between computed candidates rather than branch; the SGD-L1 penalty
runs (``sgdl1._penalize_run``) and the bigram score rows
(``oracle._bigram_scores``) written that way made a NETtalk 3-grm SGD-L1
pass 2.8 -> 1.8 s, BCD's forward propagation a sweep 7-10% cheaper, with
the same results to the bit (``benchmarks/sgdl1_pass_ab.py``).

Self-contained libraries.  A kernel that calls another (``sdca_step`` calls ``chain_marginals_pf``)
gets, in its own compiled library, a copy of the callee linked in with ``linkonce_odr`` linkage, and the
callee has its own library as well.  The two copies are optimised in different modules, so with fast-math
reassociation they can round differently.  Which one a call runs was left to the JIT's symbol
resolution: the definition loaded first in the process wins.  A process that compiles the caller has
loaded the callee's own library first (it compiled it on the way); a process that loads the caller
from the cache often has not, and runs the caller's copy.  So a run that compiled the kernels and a
run that loaded them gave other last bits, and so could two cache-loaded runs that called kernels in
another order (a resume).  :func:`self_contained_libraries` makes every
crfkit library use its own copies: before a library's module is optimised, the ``linkonce_odr``
definitions linked into it become ``internal`` (private to the module, so no other definition can be
picked).  Only crfkit's kernels are internalised, not numba's helpers (some are found by name at run
time).  The machine code that runs is then the code compiled into the caller's library, whether it was
just compiled or loaded from the cache, whatever was loaded before.  The same copies were compiled into
every module before; only which one runs changes.

Compile notice.  On a fresh install (or after an update) the first kernel
calls compile for about a minute; instead of staying silent, crfkit prints
once per process, on standard error, that it is compiling (see
:func:`install_compile_notice`; ``CRFKIT_QUIET_COMPILE=1`` silences it).
Loading compiled kernels from the cache prints nothing.
"""
from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

from .. import memtrim as _memtrim

__all__ = ["stamp_directory", "sources_digest", "install_compile_notice", "self_contained_libraries",
           "COMPILE_NOTICE"]

COMPILE_NOTICE = ("crfkit: compiling the numba kernels (once after installing or updating crfkit, about a "
                  "minute; cached in {where} for later runs)")

_STAMPED: dict[Path, bytes] = {}


def sources_digest(directory) -> bytes:
    """SHA-256 over the names and contents of the ``.py`` files in ``directory`` (sorted by name)."""
    h = hashlib.sha256()
    for p in sorted(Path(directory).glob("*.py")):
        h.update(p.name.encode())
        h.update(b"\0")
        h.update(p.read_bytes())
        h.update(b"\0")
    return h.digest()


def _stamped(cls):
    class Stamped(cls):
        _crfkit_stamped = True

        def get_source_stamp(self):
            stamp = super().get_source_stamp()
            f = getattr(self, "_py_file", None)
            digest = _STAMPED.get(Path(f).resolve().parent) if f else None
            return stamp if digest is None else (stamp, digest)

    Stamped.__name__ = Stamped.__qualname__ = "Stamped" + cls.__name__
    return Stamped


def stamp_directory(directory) -> bool:
    """Make the numba cache of the functions defined in ``directory`` depend on all of its ``.py`` files.

    Must run before those functions are decorated (module import).  Returns
    False when this numba has no locator hook (nothing is changed then).
    """
    from numba.core import caching
    impl = getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl", None)
    classes = getattr(impl, "_locator_classes", None)
    if not isinstance(classes, list):
        return False
    _STAMPED[Path(directory).resolve()] = sources_digest(directory)
    if not all(getattr(c, "_crfkit_stamped", False) for c in classes):
        impl._locator_classes = [c if getattr(c, "_crfkit_stamped", False) else _stamped(c) for c in classes]
    return True


# the mangled names of crfkit's kernels (numba's Itanium-style mangling of crfkit.kernels.*)
_OWN_PREFIX = "_ZN6crfkit7kernels"
_SELF_CONTAINED = {"installed": False}


def self_contained_libraries() -> bool:
    """Make every numba library call its own copies of the crfkit kernels linked into it (see the module
    docstring): wraps numba's ``CPUCodeLibrary._optimize_final_module`` so that the ``linkonce_odr`` definitions
    of crfkit kernels (their mangled names start with :data:`_OWN_PREFIX`) become ``internal`` before the module
    is optimised.  Numba's own helpers and the parallel loops' gufuncs keep their linkage: some are found by name
    at run time (internalising every ``linkonce_odr`` definition crashed the parallel Viterbi).  Must run
    before the kernels compile (module import).  Returns False when this numba has no such hook (nothing is
    changed then)."""
    if _SELF_CONTAINED["installed"]:
        return True
    try:
        import llvmlite.binding as ll
        from numba.core import codegen
    except ImportError:   # pragma: no cover - numba is a dependency
        return False
    cls = getattr(codegen, "CPUCodeLibrary", None)
    orig = getattr(cls, "_optimize_final_module", None)
    if orig is None:     # pragma: no cover - another numba
        return False
    odr = ll.Linkage.linkonce_odr

    def _optimize_final_module(self):
        for fn in self._final_module.functions:
            if fn.linkage == odr and not fn.is_declaration and fn.name.startswith(_OWN_PREFIX):
                fn.linkage = "internal"
        return orig(self)

    cls._optimize_final_module = _optimize_final_module
    _SELF_CONTAINED["installed"] = True
    return True


_NOTICE = {"installed": False, "shown": False}


def _show_notice() -> None:
    if _NOTICE["shown"]:
        return
    _NOTICE["shown"] = True
    if os.environ.get("CRFKIT_QUIET_COMPILE", "").strip() not in ("", "0"):
        return
    where = Path(__file__).resolve().parent / "__pycache__"
    try:
        print(COMPILE_NOTICE.format(where=where), file=sys.stderr, flush=True)
    except (OSError, ValueError):   # a closed or broken standard error: the notice is not worth failing for
        pass


def install_compile_notice() -> bool:
    """Print :data:`COMPILE_NOTICE` once per process when numba starts compiling a crfkit kernel (a cache
    miss: numba's ``numba:compile`` event, which a kernel loaded from the cache does not raise).
    Returns False when this numba has no event API (nothing is printed then)."""
    if _NOTICE["installed"]:
        return True
    try:
        from numba.core import event
    except ImportError:   # pragma: no cover - an older numba
        return False
    prefix = __name__ + "."

    class _CompileNotice(event.Listener):
        def on_start(self, ev):
            data = ev.data if isinstance(ev.data, dict) else {}
            func = getattr(data.get("dispatcher"), "py_func", None)
            if (getattr(func, "__module__", None) or "").startswith(prefix):
                _show_notice()

        def on_end(self, ev):
            pass

    event.register("numba:compile", _CompileNotice())
    _NOTICE["installed"] = True
    return True


stamp_directory(Path(__file__).parent)
self_contained_libraries()
install_compile_notice()
_memtrim.defer_blas()       # numba's first kernel load without scipy.linalg (crfkit.memtrim)
