"""LLVM's code pages handed back to the kernel once numba has loaded (or compiled) the kernels.

:func:`release_code_pages` hands back the pages of LLVM's code and read-only data
(``libllvmlite.so``) that numba touched while it loaded (or compiled) the kernels.  They are clean
pages of the library file, counted in the process's RSS (68 MB of the 358 MB peak of
``crfkit train`` on CoNLL-2000, more than python-crfsuite's whole process takes beyond the
interpreter's), and nothing runs in them while the loaded kernels train.  ``madvise(MADV_PAGEOUT)``
(Linux 5.4+, called through glibc) asks the kernel to reclaim them: it never changes what the memory
holds (a page touched again is read back from the file, as after any reclaim, and a written page is
never dropped), so it is safe on any mapping, and a no-op where the call is not supported.
:func:`release_after_compiles` does it after each outermost hold of numba's compiler lock (numba's
event API and its private ``global_compiler_lock``).  The public names are re-exported by
:mod:`crfkit.memtrim`, where crfkit calls them.

Switch: ``CRFKIT_NO_CODE_PAGES=1`` (or ``CRFKIT_NO_RUNTIME_HOOKS=1``) makes the release a no-op and
keeps the listener out of numba.
"""

from __future__ import annotations

import mmap

from .libc import c_int, c_size_t, c_void_p, libc_function
from .switches import enabled

__all__ = [
    "CODE_LIBRARIES",
    "MADV_PAGEOUT",
    "code_mappings",
    "release_after_compiles",
    "release_code_pages",
]

_ranges: list = []
#: file names whose read-only mappings release_code_pages hands back
CODE_LIBRARIES = ("libllvmlite",)
# Linux's MADV_PAGEOUT (asm-generic/mman-common.h; Python's mmap module names it only when built
# against headers that have it)
MADV_PAGEOUT = getattr(mmap, "MADV_PAGEOUT", 21)


def code_mappings(maps: str = "/proc/self/maps", libraries=CODE_LIBRARIES) -> list[tuple[int, int]]:
    """``(start, end)`` of every read-only (not writable) mapping of a file whose name contains one
    of ``libraries``, from the ``/proc/<pid>/maps`` listing ``maps``."""
    out = []
    try:
        with open(maps) as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) < 6 or "w" in parts[1]:
                    continue
                name = parts[5].rstrip("\n").rsplit("/", 1)[-1]
                if any(lib in name for lib in libraries):
                    a, b = parts[0].split("-")
                    out.append((int(a, 16), int(b, 16)))
    except OSError:
        return []
    return out


def release_code_pages() -> int:
    """Ask the kernel to reclaim the resident pages of LLVM's read-only mappings (see the module's
    docstring); the number of bytes of mappings advised (0 where ``MADV_PAGEOUT`` or ``/proc`` is
    missing, or with ``CRFKIT_NO_CODE_PAGES``).  Cheap when nothing is resident: call it after
    anything that may have loaded kernels."""
    global _ranges
    if not enabled("code_pages"):
        return 0
    fn = libc_function("madvise", [c_void_p, c_size_t, c_int])
    if not fn:
        return 0
    if not _ranges:
        _ranges = code_mappings()  # a loaded library does not move: listed once
    done = 0
    for a, b in _ranges:
        if fn(a, b - a, MADV_PAGEOUT) == 0:
            done += b - a
    return done


_hook = None


def release_after_compiles() -> bool:
    """Register (once per process) a listener of numba's event API (``numba:compiler_lock``) that
    calls :func:`release_code_pages` each time the outermost hold of numba's compiler lock ends,
    i.e. after each kernel numba compiled or loaded from its cache, so that the code pages a load
    touches are handed back as soon as it ends, not at the next iteration (a stochastic method's
    first pass loads its kernels after allocating its weights, whose pages then fill while LLVM's
    were held: 10 MB more at the peak of NETtalk 3-grm's SGD-L1).  True when registered by this
    call; False when registered before, switched off, or this numba lacks the event API or the
    lock."""
    global _hook
    if _hook is not None or not enabled("code_pages"):
        return False
    try:
        import numba.core.event as ev
        from numba.core.compiler_lock import global_compiler_lock

        listener, register, is_locked = ev.Listener, ev.register, global_compiler_lock.is_locked
    except (ImportError, AttributeError):  # pragma: no cover - another numba
        return False

    class ReleaseAfterCompiles(listener):
        def on_start(self, event):
            pass

        def on_end(self, event):
            if not is_locked():  # not a nested hold (a callee's compilation)
                release_code_pages()

    _hook = ReleaseAfterCompiles()
    register("numba:compiler_lock", _hook)
    return True
