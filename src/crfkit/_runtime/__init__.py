"""crfkit's runtime hooks: the only code of crfkit that reaches into numba's, LLVM's or glibc's
internals.

Each hook saves time, memory or reproducibility, none changes what crfkit computes, and each fails
soft: where a private name it uses is missing (another numba or llvmlite, a C library other than
glibc), it does nothing and crfkit works as without it.  Each can be turned off by an environment
variable, set to anything but ``""`` or ``0``; ``CRFKIT_NO_RUNTIME_HOOKS=1`` turns them all off.
The hooks that :mod:`crfkit.kernels` installs on import read their switch then (set it before
importing crfkit); the others read it when called.

=================  ==========================  =============================================================
hook (module)      switch                      what it does, and what it touches
=================  ==========================  =============================================================
numba_cache        CRFKIT_NO_CACHE_STAMP       adds a digest of all of ``crfkit/kernels/*.py`` to the numba
                                               cache stamp of every kernel, so that editing one kernel file
                                               recompiles the kernels that inlined it, and of
                                               ``_runtime/linkage.py``, whose hooks change the compiled code
                                               (numba's private ``CacheImpl._locator_classes``).  Off: a
                                               stale cache may run old code of another kernel file after an
                                               edit.
linkage            CRFKIT_NO_SELF_CONTAINED    makes the ``linkonce_odr`` copies of crfkit kernels linked
                                               into a library ``internal`` before LLVM optimises it, so a run
                                               that compiles and one that loads from the cache give the same
                                               bits (numba's private ``CPUCodeLibrary._optimize_final_module``
                                               and llvmlite's linkage).  Off: the last bits may differ.
linkage            CRFKIT_NO_LINK_ONLY         keeps the two wrapper libraries numba builds around every
                                               ``prange`` loop as IR, optimised and compiled once inside the
                                               kernel that links them (numba's private
                                               ``JITCodeLibrary._finalize_final_module``).  Off: each is
                                               optimised and compiled on its own too (slower compiles).
compile_notice     CRFKIT_NO_COMPILE_NOTICE    prints once that the kernels are compiling (numba's
                                               ``numba:compile`` event); ``CRFKIT_QUIET_COMPILE=1`` only
                                               silences the line, this switch does not register the listener.
blas               CRFKIT_NO_BLAS_DEFER        initialises numba's CPU target without importing
                                               ``scipy.linalg`` (13 MB) before the first kernel load (numba's
                                               compiler lock and event, ``cpu_target``,
                                               ``arraymath._HAVE_BLAS``).
malloc             CRFKIT_NO_MALLOC_TRIM       ``crfkit.memtrim.release_memory``: glibc's ``malloc_trim``
                                               after training (ctypes); and ``fixed_trim_threshold``, glibc's
                                               trim threshold for a Dask client.
malloc             CRFKIT_NO_MMAP_THRESHOLD    ``crfkit.memtrim.fixed_mmap_threshold``: glibc's ``mallopt``
                                               mmap threshold that ``crfkit train`` fixes for L-BFGS/OWL-QN.
code_pages         CRFKIT_NO_CODE_PAGES        ``madvise(MADV_PAGEOUT)`` of ``libllvmlite.so``'s read-only
                                               pages after kernels load, and the listener of numba's compiler
                                               lock that does it after each compilation (glibc via ctypes,
                                               ``global_compiler_lock``).
interrupt          CRFKIT_NO_INTERRUPT_RESET   clears CPython's ``_Py_UnhandledKeyboardInterrupt`` (ctypes) once a
                                               command that handled Ctrl-C has returned, so the process exits
                                               with status 130 and is not killed by SIGINT at exit.
aot                CRFKIT_NO_AOT               loads the tagging kernels compiled ahead of time
                                               (:mod:`crfkit._runtime.aot`, built by ``crfkit warmup``), so a
                                               process tags without importing numba.  Off: such a process
                                               tags through the numpy decoder (the same labels, slower).
=================  ==========================  =============================================================

:mod:`crfkit._runtime.libc` is the ctypes lookup of glibc's functions the malloc and code-page hooks
share; :mod:`crfkit._runtime.switches` reads the switches.  crfkit's own modules call these hooks
through :mod:`crfkit.kernels` (which installs the first four on import) and :mod:`crfkit.memtrim`
(which re-exports the rest).
"""

from __future__ import annotations

from .switches import MASTER_SWITCH, SWITCHES, enabled

__all__ = ["MASTER_SWITCH", "SWITCHES", "enabled"]
