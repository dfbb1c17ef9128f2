"""Giving freed memory back to the operating system after training (glibc's ``malloc_trim``).

Training frees large arrays when it ends (the encoded corpus, the gradient plan, the optimizer's
buffers), but glibc keeps freed heap memory for reuse by ``malloc``, so the process's RSS stays at the
training's peak; what runs next in the same process and does not allocate through ``malloc`` (Python
objects live in pymalloc's own ``mmap`` arenas; numba loads its kernels into new mappings) then grows
the RSS past that peak.  Measured on the sklearn-crfsuite tutorial (``CRF.fit`` then ``predict`` in one
process): the peak went from 711 MB to 696 MB with a trim between the two (README, issue 18).
Dask's workers trim the same way.  Elsewhere than glibc this is a no-op.

:func:`release_code_pages` hands back another kind of memory: the pages of LLVM's code and read-only
data (``libllvmlite.so``) that numba touched while it loaded (or compiled) the kernels.  They are clean
pages of the library file, counted in the process's RSS (68 MB of the 358 MB peak of ``crfkit train`` on
CoNLL-2000, more than python-crfsuite's whole process takes beyond the interpreter's), and nothing runs
in them while the loaded kernels train.  ``madvise(MADV_PAGEOUT)`` (Linux 5.4+) asks the kernel to reclaim
them: it never changes what the memory holds (a page touched again is read back from the file, as after
any reclaim, and a written page is never dropped), so it is safe on any mapping, and a no-op where the
call is not supported.

:func:`init_target_without_blas` saves memory of a third kind: numba's first kernel load initialises its CPU
target, and one of the modules that registers (``numba.np.arraymath``) imports ``scipy.linalg.cython_blas``
on import, only to record that BLAS is there; that imports all of ``scipy.linalg`` and its BLAS/LAPACK
libraries (13 MB of the process, measured with numba 0.68 / scipy 1.17), which none of crfkit's kernels calls.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import glob
import importlib.util
import mmap
import os
import sys

__all__ = ["release_memory", "release_code_pages", "release_after_compiles", "warm_compiler",
           "init_target_without_blas", "defer_blas", "fixed_mmap_threshold", "opt_in_mmap_threshold",
           "full_batch_vectors", "lazy_zeros", "lazy_copy", "sparse_bits", "from_nonzeros", "LAZY_MIN"]

_libc_fns: dict = {}
_ranges: list = []
_CODE_LIBRARIES = ("libllvmlite",)     # file names whose read-only mappings release_code_pages hands back
# Linux's MADV_PAGEOUT (asm-generic/mman-common.h; Python's mmap module names it only when built against
# headers that have it)
MADV_PAGEOUT = getattr(mmap, "MADV_PAGEOUT", 21)


def _libc(name: str, argtypes: list, restype=ctypes.c_int):
    """glibc's function ``name`` with its ctypes signature, looked up once; False where there is none
    (not Linux, or a C library without it: musl has no malloc_trim)."""
    if name not in _libc_fns:
        fn = False
        if sys.platform.startswith("linux"):
            try:
                fn = getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), name)
                fn.argtypes = argtypes
                fn.restype = restype
            except (OSError, AttributeError):
                fn = False
        _libc_fns[name] = fn
    return _libc_fns[name]


# glibc's M_MMAP_THRESHOLD (malloc.h), and its initial value (128 KiB)
M_MMAP_THRESHOLD, MMAP_THRESHOLD = -3, 128 * 1024


def fixed_mmap_threshold(nbytes: int = MMAP_THRESHOLD) -> bool:
    """Fix glibc's mmap threshold at ``nbytes`` (``mallopt(M_MMAP_THRESHOLD)``), unless
    ``MALLOC_MMAP_THRESHOLD_`` is set (the user's choice wins).  Returns whether it was set (False off
    glibc).

    glibc serves a request of at least the threshold by a mapping of its own, unmapped when freed; but
    by default the threshold is dynamic: freeing such a block raises it to the block's size (up to 32
    MB), so that from then on arrays of that size come from the heap.  A training run frees and allocates
    vectors of the problem's size at every evaluation, and once they live in the heap, the blocks of
    different lifetimes between them leave holes that the heap cannot hand back: 10-13 MB of ``crfkit
    train``'s peak on CoNLL-2000 (238.5-241.2 MB with the dynamic threshold, 228.1-229.8 MB fixed at 128
    KiB; the cost, a fresh mapping per vector, is a few hundred microseconds an evaluation).  A process
    setting: ``crfkit train`` fixes it for the full-batch optimizers (:func:`opt_in_mmap_threshold`); the
    library leaves it to its caller."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    fn = _libc("mallopt", [ctypes.c_int, ctypes.c_int])
    return bool(fn(M_MMAP_THRESHOLD, int(nbytes))) if fn else False


# glibc's largest dynamic mmap threshold on 64-bit systems (DEFAULT_MMAP_THRESHOLD_MAX): blocks above it are
# always mapped, whatever the threshold did
MMAP_THRESHOLD_MAX = 32 << 20
_mmap_opt_in = False


def opt_in_mmap_threshold() -> bool:
    """Fix glibc's mmap threshold at 128 KiB now (:func:`fixed_mmap_threshold`), before a full-batch run
    (L-BFGS, OWL-QN) reads its data, and let :func:`full_batch_vectors` adjust it once the run's vector size
    is known.  ``crfkit train`` calls it for those optimizers (a process setting, which a library call
    leaves to its caller).  Not for the per-sequence optimizers: their scratch arrays of a few hundred KB,
    allocated per sequence, would each get a mapping (SGD-L1 on NETtalk 3-grm took twice as long).
    Returns whether the threshold was fixed."""
    global _mmap_opt_in
    _mmap_opt_in = fixed_mmap_threshold()
    return _mmap_opt_in


def full_batch_vectors(nbytes: int) -> bool:
    """Called before a full-batch run whose vectors take ``nbytes`` each.  In a process that opted in
    (:func:`opt_in_mmap_threshold`), vectors above :data:`MMAP_THRESHOLD_MAX` are mapped whatever the
    threshold, and a threshold of 128 KiB would only map the run's medium blocks too (3-5% of an OWL-QN run
    at NETtalk 3-grm): the threshold is then raised to that maximum, where glibc's dynamic threshold ends
    up anyway.  Returns whether it was changed."""
    if not _mmap_opt_in or int(nbytes) <= MMAP_THRESHOLD_MAX:
        return False
    return fixed_mmap_threshold(MMAP_THRESHOLD_MAX)


def lazy_zeros(n: int, dtype=None):
    """A vector of ``n`` zeros whose memory pages count in the process's RSS only once written.

    ``np.zeros`` gets its zeros from ``calloc``, whose large blocks are untouched mappings too, but numpy
    marks blocks of 4 MB and more ``MADV_HUGEPAGE``: the first write anywhere in 2 MB of them then makes
    the whole 2 MB resident.  This vector is an anonymous mapping of its own, marked
    ``MADV_NOHUGEPAGE`` where the call exists, so a write costs its 4 KB page: a vector of which a
    few scattered entries are ever written (block coordinate descent's weights in a candidate space of
    100M features, of which 50k end up non-zero, when the optimizer writes only the entries it changes)
    takes those pages, not the vector's size.  Reading an entry never written costs nothing (the kernel's
    shared zero page).  Falls back to ``np.zeros`` where anonymous mappings are not available."""
    import numpy as np
    dt = np.dtype(np.float64 if dtype is None else dtype)
    n = int(n)
    if n <= 0 or not hasattr(mmap, "MAP_ANONYMOUS"):
        return np.zeros(max(n, 0), dt)
    try:
        buf = mmap.mmap(-1, n * dt.itemsize, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    except (OSError, ValueError):
        return np.zeros(n, dt)
    if hasattr(mmap, "MADV_NOHUGEPAGE"):
        try:
            buf.madvise(mmap.MADV_NOHUGEPAGE)
        except OSError:
            pass
    return np.frombuffer(buf, dtype=dt, count=n)


#: vectors of at least this many entries are copied by lazy_copy as their non-zeros (8 MB of float64)
LAZY_MIN = 1 << 20


def sparse_bits(a, min_size: int | None = None):
    """The indices (ascending) of the entries of ``a`` whose bits are not zero (a -0.0 counts), when ``a`` is
    a contiguous 1-D float vector of at least ``min_size`` entries (default :data:`LAZY_MIN`) of which at
    most a quarter are non-zero; else None.  What :func:`lazy_copy` copies and what a checkpoint stores of
    such a vector (:mod:`crfkit.checkpoint`)."""
    import numpy as np
    lim = LAZY_MIN if min_size is None else int(min_size)
    if not isinstance(a, np.ndarray) or a.ndim != 1 or a.size < lim or a.dtype.kind != "f" \
            or a.dtype.itemsize not in (4, 8) or not a.flags.c_contiguous:
        return None
    nz = np.flatnonzero(a.view(f"u{a.dtype.itemsize}"))
    return None if 4 * nz.shape[0] > a.size else nz


def from_nonzeros(n: int, dtype, idx, vals, lazy: bool | None = None):
    """A vector of ``n`` entries of ``dtype``, ``vals`` at the indices ``idx`` and zeros elsewhere, its zeros
    :func:`lazy_zeros` (``lazy``; default: from :data:`LAZY_MIN` entries) so that it takes the pages of its
    non-zeros only, else ``np.zeros``.  How a sparse vector is made whole again: :func:`lazy_copy`, a kept
    state (:class:`crfkit.optim.stochastic.Kept`), a checkpoint's sparse member."""
    import numpy as np
    n = int(n)
    dt = np.dtype(dtype)
    out = lazy_zeros(n, dt) if (n >= LAZY_MIN if lazy is None else lazy) else np.zeros(n, dt)
    out[idx] = vals
    return out


def lazy_copy(a, min_size: int | None = None):
    """A copy of the vector ``a`` (same dtype, shape and bits): when it is sparse in :func:`sparse_bits`'s
    sense, its non-zeros written into :func:`lazy_zeros`, so that the copy takes the pages of its non-zeros
    only (a plain copy writes, so makes resident, every page: 1.9 GB for BCD's weights at NETtalk 5-grm+,
    of which 46,570 are non-zero); otherwise a plain copy."""
    import numpy as np
    a = np.asarray(a)
    nz = sparse_bits(a, min_size)
    if nz is None:
        return np.array(a, copy=True)
    return from_nonzeros(a.size, a.dtype, nz, a[nz], lazy=True)


def release_memory() -> bool:
    """Return the C heap's free memory to the operating system; ``True`` when some was released
    (glibc), ``False`` otherwise (nothing to release, or not glibc)."""
    fn = _libc("malloc_trim", [ctypes.c_size_t])
    return bool(fn(0)) if fn else False


def code_mappings(maps: str = "/proc/self/maps", libraries=_CODE_LIBRARIES) -> list[tuple[int, int]]:
    """``(start, end)`` of every read-only (not writable) mapping of a file whose name contains one of
    ``libraries``, from the ``/proc/<pid>/maps`` listing ``maps``."""
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
    missing).  Cheap when nothing is resident: call it after anything that may have loaded kernels."""
    global _ranges
    fn = _libc("madvise", [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int])
    if not fn:
        return 0
    if not _ranges:
        _ranges = code_mappings()       # a loaded library does not move: listed once
    done = 0
    for a, b in _ranges:
        if fn(a, b - a, MADV_PAGEOUT) == 0:
            done += b - a
    return done


_hook = None


def release_after_compiles() -> bool:
    """Register (once per process) a listener of numba's event API (``numba:compiler_lock``) that calls
    :func:`release_code_pages` each time the outermost hold of numba's compiler lock ends, i.e. after each
    kernel numba compiled or loaded from its cache, so that the code pages a load touches are handed back
    as soon as it ends, not at the next iteration (a stochastic method's first pass loads its kernels after
    allocating its weights, whose pages then fill while LLVM's were held: 10 MB more at the peak of
    NETtalk 3-grm's SGD-L1).  True when registered by this call."""
    global _hook
    if _hook is not None:
        return False
    import numba.core.event as ev
    from numba.core.compiler_lock import global_compiler_lock

    class ReleaseAfterCompiles(ev.Listener):
        def on_start(self, event):
            pass

        def on_end(self, event):
            if not global_compiler_lock.is_locked():     # not a nested hold (a callee's compilation)
                release_code_pages()

    _hook = ReleaseAfterCompiles()
    ev.register("numba:compiler_lock", _hook)
    return True


_BLAS_MODULE = "scipy.linalg.cython_blas"    # what numba imports to check that BLAS is there


def _blas_installed() -> bool:
    """Whether ``scipy.linalg.cython_blas`` is installed, found without importing ``scipy.linalg``."""
    try:
        spec = importlib.util.find_spec("scipy")
    except (ImportError, ValueError):
        return False
    locations = (spec.submodule_search_locations or []) if spec is not None else []
    return any(glob.glob(os.path.join(loc, "linalg", "cython_blas.*")) for loc in locations)


def init_target_without_blas() -> bool:
    """Initialise numba's CPU target (what its first compile or cache load does) without importing
    ``scipy.linalg``; True when this call did it.

    numba's ``arraymath`` sets ``_HAVE_BLAS`` at import by importing ``scipy.linalg.cython_blas``; while
    the target loads its registries that name is made unimportable (a ``None`` entry in ``sys.modules``
    makes the import fail before ``scipy.linalg`` loads), then ``_HAVE_BLAS`` is set to whether it is
    installed.  Nothing else changes: numba's linear algebra imports it (``ensure_blas``) when a function
    that uses it compiles, as it always does.  A no-op when the target is already initialised, when
    ``scipy.linalg`` is loaded already, or with a numba whose ``arraymath`` lacks ``_HAVE_BLAS``.

    :func:`defer_blas` has it run before the first kernel load."""
    if "numba.np.arraymath" in sys.modules or _BLAS_MODULE in sys.modules:
        return False
    from numba.core.registry import cpu_target
    sys.modules[_BLAS_MODULE] = None
    try:
        cpu_target.target_context.refresh()
    finally:
        if _BLAS_MODULE in sys.modules and sys.modules[_BLAS_MODULE] is None:
            del sys.modules[_BLAS_MODULE]
    arraymath = sys.modules.get("numba.np.arraymath")
    if arraymath is not None and getattr(arraymath, "_HAVE_BLAS", None) is False:
        arraymath._HAVE_BLAS = _blas_installed()
    return True


_deferring = None


def defer_blas() -> bool:
    """Register (once per process) a listener of numba's event API (``numba:compiler_lock``) that runs
    :func:`init_target_without_blas` when numba first takes its compiler lock after its CPU target context
    exists, i.e. before the first compilation or cache load (building the context takes the lock too, at
    the first ``@njit`` decoration: too early to refresh it).  It runs then, not when ``crfkit.kernels``
    is imported: measured on CoNLL-2000, a target initialised before the file is read left ``crfkit
    train`` 16 MB more of anonymous memory at its peak than one initialised after.  True when registered
    by this call; ``crfkit.kernels`` calls it on import."""
    global _deferring
    if _deferring is not None:
        return False
    import numba.core.event as ev
    from numba.core.compiler_lock import global_compiler_lock
    from numba.core.registry import cpu_target

    class DeferBlas(ev.Listener):
        done = False

        def on_start(self, event):      # (numba emits it before it takes the lock)
            if self.done or "_toplevel_target_context" not in vars(cpu_target):
                return
            self.done = True
            with global_compiler_lock:
                init_target_without_blas()

        def on_end(self, event):
            pass

    _deferring = DeferBlas()
    ev.register("numba:compiler_lock", _deferring)
    return True


def warm_compiler() -> None:
    """Load one small kernel, then :func:`release_code_pages` (and :func:`release_after_compiles`).

    The process's first kernel load (from numba's cache or compiled) initialises numba's code generator,
    and that touches most of what LLVM ever will: 48 MB of ``libllvmlite.so``'s pages, against about 10 MB
    for the six kernels of an L-BFGS run after it (measured with one numba version).  Done before a run
    allocates its gradient plan and buffers, that transient no longer adds to the run's peak; a process
    that already loaded a kernel pays the release's 0.2 ms."""
    import numpy as np
    from .kernels.vec import all_finite
    release_after_compiles()
    all_finite(np.zeros(0))
    release_code_pages()
