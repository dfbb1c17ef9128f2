"""Memory helpers of training: vectors whose zeros take no memory, and the memory given back after
kernels load and after training.

What lives here: :func:`lazy_zeros` (a vector whose pages count in the RSS only once written),
:func:`lazy_copy`, :func:`sparse_bits` and :func:`from_nonzeros` (a mostly-zero vector copied or
stored as its non-zeros), and :func:`warm_compiler` (the first kernel load done before a run
allocates).

The calls that reach into glibc or numba live in :mod:`crfkit._runtime` and are re-exported here,
where crfkit's modules call them (each can be switched off, see :mod:`crfkit._runtime`):

- glibc's heap (:mod:`crfkit._runtime.malloc`): :func:`release_memory` (``malloc_trim``),
  :func:`fixed_trim_threshold`, :func:`fixed_mmap_threshold`, :func:`opt_in_mmap_threshold` and
  :func:`full_batch_vectors`;
- LLVM's code pages handed back (:mod:`crfkit._runtime.code_pages`): :func:`release_code_pages`,
  :func:`code_mappings` and :func:`release_after_compiles`;
- numba's target initialised without ``scipy.linalg`` (:mod:`crfkit._runtime.blas`):
  :func:`init_target_without_blas` and :func:`defer_blas`.
"""

from __future__ import annotations

import mmap

from ._runtime.blas import defer_blas, init_target_without_blas
from ._runtime.code_pages import (
    MADV_PAGEOUT,
    code_mappings,
    release_after_compiles,
    release_code_pages,
)
from ._runtime.malloc import (
    M_MMAP_THRESHOLD,
    MMAP_THRESHOLD,
    MMAP_THRESHOLD_MAX,
    fixed_mmap_threshold,
    fixed_trim_threshold,
    full_batch_vectors,
    opt_in_mmap_threshold,
    release_memory,
)

__all__ = [
    "LAZY_MIN",
    "MADV_PAGEOUT",
    "MMAP_THRESHOLD",
    "MMAP_THRESHOLD_MAX",
    "M_MMAP_THRESHOLD",
    "code_mappings",
    "defer_blas",
    "fixed_mmap_threshold",
    "fixed_trim_threshold",
    "from_nonzeros",
    "full_batch_vectors",
    "init_target_without_blas",
    "lazy_copy",
    "lazy_zeros",
    "opt_in_mmap_threshold",
    "release_after_compiles",
    "release_code_pages",
    "release_memory",
    "sparse_bits",
    "warm_compiler",
]


def lazy_zeros(n: int, dtype=None):
    """A vector of ``n`` zeros whose memory pages count in the process's RSS only once written.

    ``np.zeros`` gets its zeros from ``calloc``, whose large blocks are untouched mappings too, but
    numpy marks blocks of 4 MB and more ``MADV_HUGEPAGE``: the first write anywhere in 2 MB of them
    then makes the whole 2 MB resident.  This vector is an anonymous mapping of its own, marked
    ``MADV_NOHUGEPAGE`` where the call exists, so a write costs its 4 KB page: a vector of which a
    few scattered entries are ever written (block coordinate descent's weights in a candidate space
    of 100M features, of which 50k end up non-zero, when the optimizer writes only the entries it
    changes) takes those pages, not the vector's size.  Reading an entry never written costs nothing
    (the kernel's shared zero page).  Falls back to ``np.zeros`` where anonymous mappings are not
    available."""
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


#: vectors of at least this many entries are copied by lazy_copy as their non-zeros (8 MB of
#: float64)
LAZY_MIN = 1 << 20


def sparse_bits(a, min_size: int | None = None):
    """The indices (ascending) of the entries of ``a`` whose bits are not zero (a -0.0 counts), when
    ``a`` is a contiguous 1-D float vector of at least ``min_size`` entries (default
    :data:`LAZY_MIN`) of which at most a quarter are non-zero; else None.  What :func:`lazy_copy`
    copies and what a checkpoint stores of such a vector (:mod:`crfkit.training.checkpoint`)."""
    import numpy as np

    lim = LAZY_MIN if min_size is None else int(min_size)
    if (
        not isinstance(a, np.ndarray)
        or a.ndim != 1
        or a.size < lim
        or a.dtype.kind != "f"
        or a.dtype.itemsize not in (4, 8)
        or not a.flags.c_contiguous
    ):
        return None
    nz = np.flatnonzero(a.view(f"u{a.dtype.itemsize}"))
    return None if 4 * nz.shape[0] > a.size else nz


def from_nonzeros(n: int, dtype, idx, vals, lazy: bool | None = None):
    """A vector of ``n`` entries of ``dtype``, ``vals`` at the indices ``idx`` and zeros elsewhere,
    its zeros :func:`lazy_zeros` (``lazy``; default: from :data:`LAZY_MIN` entries) so that it takes
    the pages of its non-zeros only, else ``np.zeros``.  How a sparse vector is made whole again:
    :func:`lazy_copy`, a kept state (:class:`crfkit.optim.stochastic.Kept`), a checkpoint's sparse
    member."""
    import numpy as np

    n = int(n)
    dt = np.dtype(dtype)
    out = lazy_zeros(n, dt) if (n >= LAZY_MIN if lazy is None else lazy) else np.zeros(n, dt)
    out[idx] = vals
    return out


def lazy_copy(a, min_size: int | None = None):
    """A copy of the vector ``a`` (same dtype, shape and bits): when it is sparse in
    :func:`sparse_bits`'s sense, its non-zeros written into :func:`lazy_zeros`, so that the copy
    takes the pages of its non-zeros only (a plain copy writes, so makes resident, every page: 1.9
    GB for BCD's weights at NETtalk 5-grm+, of which 46,570 are non-zero); otherwise a plain
    copy."""
    import numpy as np

    a = np.asarray(a)
    nz = sparse_bits(a, min_size)
    if nz is None:
        return np.array(a, copy=True)
    return from_nonzeros(a.size, a.dtype, nz, a[nz], lazy=True)


def warm_compiler() -> None:
    """Load one small kernel, then :func:`release_code_pages` (and :func:`release_after_compiles`).

    The process's first kernel load (from numba's cache or compiled) initialises numba's code
    generator, and that touches most of what LLVM ever will: 48 MB of ``libllvmlite.so``'s pages,
    against about 10 MB for the six kernels of an L-BFGS run after it (measured with one numba
    version).  Done before a run allocates its gradient plan and buffers, that transient no longer
    adds to the run's peak; a process that already loaded a kernel pays the release's 0.2 ms."""
    import numpy as np

    from .kernels.vec import all_finite

    release_after_compiles()
    all_finite(np.zeros(0))
    release_code_pages()
