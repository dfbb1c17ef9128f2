"""OpenMP threads that spin only briefly when idle: ``GOMP_SPINCOUNT=2000`` unless the user chose.

Numba's ``omp`` threading layer (the one numba picks where GNU libgomp is found) runs the
``parallel=True`` kernels on libgomp's threads.  By default libgomp lets a thread that waits at a
barrier, or for the next parallel region, spin for a while (``GOMP_SPINCOUNT``, 300,000 iterations)
before it sleeps.  Between objective evaluations crfkit runs serial optimizer work, so on a machine
where another process holds a core the long spin takes CPU from the thread doing the work: with a
busy loop on one of 2 cores, 2 threads were slower than 1 (``benchmarks/micro/thread_contention.py``).
A passive wait (``OMP_WAIT_POLICY=PASSIVE``, crfkit's setting until 2026-12-02) puts the thread to
sleep at once; but the full-batch gradient runs two parallel regions per block of sequences (72 on
CoNLL-2000), and waking the sleeping thread for each cost about 15% of a 2-thread evaluation
(0.068 s against 0.058 s with a short spin, median of 3 x 9 evaluations).  A spin of 2,000
iterations (microseconds) bridges the gaps between those regions and still sleeps through the
optimizer's serial work.

libgomp reads the variables when it is loaded, which numba does at the first parallel launch, so
:func:`short_omp_wait` (called by ``import crfkit``) sets ``GOMP_SPINCOUNT`` in ``os.environ``
before that.  A value the user set (``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT``) is left alone.
"""

from __future__ import annotations

import os
import sys

__all__ = ["BLAS_THREAD_VARIABLES", "SPIN_COUNT", "short_omp_wait", "single_blas_thread"]

SPIN_COUNT = "2000"


def short_omp_wait() -> bool:
    """Set ``GOMP_SPINCOUNT`` to :data:`SPIN_COUNT` in the environment unless ``OMP_WAIT_POLICY`` or
    ``GOMP_SPINCOUNT`` is already set; returns whether it was set here."""
    if "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ:
        return False
    os.environ["GOMP_SPINCOUNT"] = SPIN_COUNT
    return True


#: the variables OpenBLAS reads for its thread count, in its order
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")


def single_blas_thread() -> bool:
    """Set ``OPENBLAS_NUM_THREADS=1`` unless a thread count for OpenBLAS is set already or numpy is
    imported (its OpenBLAS has read the variables then); returns whether it was set here.

    For a process that calls no BLAS routine (``crfkit tag``: numpy's element-wise Viterbi, or
    numba's kernels): numpy's OpenBLAS starts one thread per core when it loads, and they spin
    before they sleep: 0.12 s of CPU in a 0.5 s ``crfkit tag`` process on 2 cores, taken from
    whatever else runs on the machine."""
    if "numpy" in sys.modules or any(v in os.environ for v in BLAS_THREAD_VARIABLES):
        return False
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    return True
