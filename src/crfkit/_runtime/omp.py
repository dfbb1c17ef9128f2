"""OpenMP threads that sleep when idle: ``OMP_WAIT_POLICY=PASSIVE`` unless the user chose a policy.

Numba's ``omp`` threading layer (the one numba picks where GNU libgomp is found) runs the
``parallel=True`` kernels on libgomp's threads.  By default libgomp lets a thread that waits at a
barrier, or for the next parallel region, spin for a while (``GOMP_SPINCOUNT``, 300,000 iterations)
before it sleeps.  crfkit's kernels run one parallel region per objective evaluation or per batch,
with serial optimizer work in between, so on a machine where another process holds a core the
spinning threads take CPU from the one doing the work: with a busy loop on one of 2 cores, 2 threads
were slower than 1 (``benchmarks/micro/thread_contention.py``).  A passive wait puts the thread to
sleep at once; waking it costs some microseconds per region, nothing at crfkit's region sizes.

libgomp reads the variable when it is loaded, which numba does at the first parallel launch, so
:func:`passive_omp_wait` (called by ``import crfkit``) sets it in ``os.environ``
before that.  A value the user set (``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT``) is left alone.
"""

from __future__ import annotations

import os

__all__ = ["passive_omp_wait"]


def passive_omp_wait() -> bool:
    """Set ``OMP_WAIT_POLICY=PASSIVE`` in the environment unless ``OMP_WAIT_POLICY`` or
    ``GOMP_SPINCOUNT`` is already set; returns whether it was set here."""
    if "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ:
        return False
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    return True
