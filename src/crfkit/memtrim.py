"""Giving freed memory back to the operating system after training (glibc's ``malloc_trim``).

Training frees large arrays when it ends (the encoded corpus, the gradient plan, the optimizer's
buffers), but glibc keeps freed heap memory for reuse by ``malloc``, so the process's RSS stays at the
training's peak; what runs next in the same process and does not allocate through ``malloc`` (Python
objects live in pymalloc's own ``mmap`` arenas; numba loads its kernels into new mappings) then grows
the RSS past that peak.  Measured on the sklearn-crfsuite tutorial (``CRF.fit`` then ``predict`` in one
process): the peak went from 711 MB to 696 MB with a trim between the two (README, issue 18).
Dask's workers trim the same way.  Elsewhere than glibc this is a no-op.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import sys

__all__ = ["release_memory"]

_trim = None


def _load():
    global _trim
    if _trim is None:
        _trim = False
        if sys.platform.startswith("linux"):
            try:
                libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
                fn = libc.malloc_trim
                fn.argtypes = [ctypes.c_size_t]
                fn.restype = ctypes.c_int
                _trim = fn
            except (OSError, AttributeError):      # not glibc (musl has no malloc_trim)
                _trim = False
    return _trim


def release_memory() -> bool:
    """Return the C heap's free memory to the operating system; ``True`` when some was released
    (glibc), ``False`` otherwise (nothing to release, or not glibc)."""
    fn = _load()
    return bool(fn(0)) if fn else False
