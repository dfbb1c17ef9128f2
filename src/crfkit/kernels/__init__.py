"""Numba kernels (every ``@njit`` function of crfkit lives in this package).

Runtime hooks.  Importing this package installs, before any kernel is decorated, the hooks of
:mod:`crfkit._runtime` that concern the kernels (each can be switched off by an environment
variable, see there): the cache stamp (:func:`stamp_directory` over this folder, so that a change to
any kernel file recompiles every kernel on its next use), self-contained libraries
(:func:`self_contained_libraries`: a kernel runs its own copies of the kernels it calls, the same
bits whether compiled or loaded from the cache), the compile notice (:func:`install_compile_notice`,
silenced by ``CRFKIT_QUIET_COMPILE=1``) and the deferral of numba's BLAS check
(:func:`crfkit._runtime.blas.defer_blas`).

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
"""

from __future__ import annotations

from pathlib import Path

from .._runtime.blas import defer_blas
from .._runtime.compile_notice import COMPILE_NOTICE, install_compile_notice
from .._runtime.linkage import link_only_wrappers, self_contained_libraries
from .._runtime.numba_cache import sources_digest, stamp_directory

__all__ = [
    "COMPILE_NOTICE",
    "install_compile_notice",
    "self_contained_libraries",
    "sources_digest",
    "stamp_directory",
]

stamp_directory(
    Path(__file__).parent
)  # every kernel's cache follows all of this folder's *.py files
self_contained_libraries()
link_only_wrappers()
install_compile_notice()
defer_blas()  # numba's first kernel load without scipy.linalg
