"""glibc's functions through ctypes, looked up once (the only place in crfkit that loads the C
library).

Used by :mod:`crfkit._runtime.malloc` (``malloc_trim``, ``mallopt``) and
:mod:`crfkit._runtime.code_pages` (``madvise``).  Off Linux, or with a C library that lacks a
function (musl has no ``malloc_trim``), the lookup gives False and the caller does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

__all__ = ["LIBC_FUNCTIONS", "c_int", "c_size_t", "c_void_p", "libc_function"]

#: function name -> the ctypes function, or False where there is none (filled by
#: :func:`libc_function`)
LIBC_FUNCTIONS: dict = {}

# the argument types the callers name (so that they need not import ctypes)
c_int, c_size_t, c_void_p = ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p


def libc_function(name: str, argtypes: list, restype=ctypes.c_int):
    """glibc's function ``name`` with its ctypes signature, looked up once; False where there is
    none (not Linux, or a C library without it: musl has no malloc_trim)."""
    if name not in LIBC_FUNCTIONS:
        fn = False
        if sys.platform.startswith("linux"):
            try:
                fn = getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), name)
                fn.argtypes = argtypes
                fn.restype = restype
            except (OSError, AttributeError):
                fn = False
        LIBC_FUNCTIONS[name] = fn
    return LIBC_FUNCTIONS[name]
