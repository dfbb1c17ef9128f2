"""Thread settings for the numba kernels."""
from __future__ import annotations

import os

import numba


def max_threads() -> int:
    return int(numba.config.NUMBA_NUM_THREADS)


def set_threads(threads: int | None) -> int:
    """Use ``threads`` numba threads (None or 0: all cores); returns the number in use."""
    n = max_threads() if not threads else max(1, min(int(threads), max_threads()))
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
