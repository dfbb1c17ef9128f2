"""Thread settings for the numba kernels (and numpy's BLAS while crfkit trains).

Idle OpenMP threads sleep rather than spin (:mod:`crfkit._runtime.omp`): on a busy host, spinning
threads made 2 threads slower than one.  ``CRFKIT_THREADS=N`` sets the default thread count
(:func:`default_threads`).
"""

from __future__ import annotations

import contextlib
import functools
import os

import numba


def max_threads() -> int:
    return int(numba.config.NUMBA_NUM_THREADS)


def default_threads() -> int:
    """The threads crfkit uses when none are asked for: all the cores numba may use
    (``NUMBA_NUM_THREADS``), or ``CRFKIT_THREADS=N``.  With idle OpenMP threads sleeping rather
    than spinning (:mod:`crfkit._runtime.omp`), threads beyond the free cores no longer hurt: with a
    busy loop on one of 2 cores (and a load of about 22), 2 threads took 0.54x the time of 1, where
    2 spinning threads took 1.75x (``benchmarks/micro/thread_contention.py``)."""
    env = os.environ.get("CRFKIT_THREADS", "").strip()
    if env.isdigit() and int(env) > 0:
        return max(1, min(int(env), max_threads()))
    return max_threads()


def set_threads(threads: int | None) -> int:
    """Use ``threads`` numba threads (None or 0: :func:`default_threads`, all cores); returns
    the number in use."""
    n = default_threads() if not threads else max(1, min(int(threads), max_threads()))
    numba.set_num_threads(n)
    return n


def n_chunks(threads: int | None, n_items: int, per_thread: int = 1) -> int:
    """How many work chunks to cut ``n_items`` sequences into."""
    t = numba.get_num_threads() if not threads else int(threads)
    return max(1, min(n_items, t * per_thread))


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        return os.cpu_count() or 1


@contextlib.contextmanager
def blas_threads(n: int = 1):
    """numpy's BLAS (OpenBLAS, MKL, ...) limited to ``n`` threads inside the block, restored after.

    crfkit's kernels do their own threading (numba); what the optimizers hand to BLAS are vector dot
    products and norms of the parameter size.  OpenBLAS splits such a dot over its threads, and its
    idle threads then busy-wait (about 0.1 s) for the next call: on a 2-core machine that spinning
    thread takes a core from numba's threads in the evaluation that follows.  Measured on CoNLL-2000
    (L-BFGS, 2 numba threads, 30 iterations): 8.6-10.1 s of optimizer time against 6.4-7.0 s with
    BLAS on one thread, the same iterates (``benchmarks/blas_spin.py``).  Uses threadpoolctl (a
    dependency); without it the block runs unchanged.
    """
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl is a dependency
        yield
        return
    # threadpoolctl limits the libraries loaded at entry.  scipy's own BLAS (scipy.linalg) is not
    # one that training loads: numba's target is initialised without it
    # (crfkit._runtime.blas.init_target_without_blas, 13 MB) and no crfkit kernel calls BLAS, so it
    # is not imported here for the limit's sake either.
    with threadpool_limits(limits=n, user_api="blas"):
        yield


def single_blas(fn):
    """Decorator: ``fn`` runs inside :func:`blas_threads` ``(1)`` (the signature is kept)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with blas_threads(1):
            return fn(*args, **kwargs)

    return wrapper
