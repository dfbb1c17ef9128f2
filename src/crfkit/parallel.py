"""Thread settings for the numba kernels (and numpy's BLAS while crfkit trains).

Idle OpenMP threads spin only briefly (:mod:`crfkit._runtime.omp`), and where no thread count was
asked for, a :class:`ThreadGovernor` runs the full-batch kernels on whichever thread count is fastest
at the moment: on a host where another process holds a core, 2 threads were slower than one.
``CRFKIT_THREADS=N`` (or ``--threads N``) sets a fixed count (:func:`default_threads`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time

import numba


def max_threads() -> int:
    return int(numba.config.NUMBA_NUM_THREADS)


def default_threads() -> int:
    """The threads crfkit uses when none are asked for: all the cores numba may use
    (``NUMBA_NUM_THREADS``), or ``CRFKIT_THREADS=N``.  Without ``CRFKIT_THREADS`` the full-batch
    kernels then run on as many of them as is fastest at the moment (:class:`ThreadGovernor`)."""
    env = os.environ.get("CRFKIT_THREADS", "").strip()
    if env.isdigit() and int(env) > 0:
        return max(1, min(int(env), max_threads()))
    return max_threads()


def auto_threads(threads: int | None) -> bool:
    """Whether the thread count is crfkit's to choose: none asked for (``threads`` None or 0) and
    no ``CRFKIT_THREADS``."""
    return not threads and not os.environ.get("CRFKIT_THREADS", "").strip().isdigit()


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


class _Choice:
    """The governor's state for one kind of call (all of equal work): recent times per thread count,
    the count in use, and when to try another."""

    __slots__ = ("current", "times", "stamp", "trial", "left", "since", "interval", "calls")

    def __init__(self, most: int):
        self.current = most
        self.times: dict[int, list[float]] = {}  # the last KEEP times of each count
        self.stamp: dict[int, int] = {}  # the call at which each count was last tried
        self.trial: int | None = None  # the count being tried
        self.left = 0  # calls of the trial still to run
        self.since = 0  # calls on ``current`` since the last trial
        self.interval = ThreadGovernor.FIRST_INTERVAL
        self.calls = 0


class ThreadGovernor:
    """Runs a parallel kernel on the thread count that is fastest now, chosen by timing the calls.

    A ``parallel=True`` kernel's region ends with its slowest thread, and the full-batch gradient
    runs two regions per block of sequences (72 per evaluation on CoNLL-2000).  On a host where
    another process holds a core, one of the threads shares that core, each region waits for it to
    be scheduled, and 2 threads took up to 2x the time of one (CoNLL-2000 gradient, a busy loop
    pinned to one of 2 cores).  Neither a wait policy nor finer chunks removed that: the count itself
    has to follow the free cores.  So every call of a kind (the same work each time) is timed, and
    the count in use is the fastest one seen.  Now and then up to :attr:`TRIAL` calls try another
    count (1 and half the cores, besides all of them): at once when the count in use slows by
    :attr:`DRIFT` (against each of its last calls), else after :attr:`FIRST_INTERVAL` calls,
    doubling up to :attr:`MAX_INTERVAL` while the choice holds.  A count's time is the least of its
    last :attr:`KEEP` calls (a busy host's noise only ever adds time).  On a quiet machine that
    costs a few trial calls on one thread; on a busy one the kernels run on one thread.

    The results do not depend on the count: the kernels split their work by a plan fixed when the
    objective is made (chunks and attribute groups for the most threads), and sum in the plan's
    order whatever the number of threads that run it.  ``clock``, ``set_threads`` and
    ``get_threads`` are for tests.
    """

    FIRST_INTERVAL = 4
    MAX_INTERVAL = 64
    #: calls per trial of another count (a trial whose first call is :attr:`ABORT` times slower
    #: than the count in use ends there)
    TRIAL = 2
    ABORT = 1.1
    #: another count is taken when its time is at most this fraction of the current one's
    SWITCH = 0.95
    #: a call this much slower than each of the count's last calls is taken as a change of load
    DRIFT = 1.3
    #: calls kept per count
    KEEP = 3

    def __init__(self, most: int, *, clock=time.perf_counter, set_threads=None, get_threads=None):
        self.most = max(1, int(most))
        self.candidates = sorted({self.most, max(1, self.most // 2), 1}, reverse=True)
        self._clock = clock
        self._set = set_threads or numba.set_num_threads
        self._get = get_threads or numba.get_num_threads
        self._choices: dict[str, _Choice] = {}
        self._lock = threading.Lock()
        #: calls run per thread count
        self.calls: dict[int, int] = {}

    @classmethod
    def for_threads(cls, threads: int | None) -> ThreadGovernor | None:
        """A governor over the threads in use (``numba.get_num_threads()``) when the count is
        crfkit's to choose (:func:`auto_threads`) and there is more than one; else None."""
        most = numba.get_num_threads()
        if not auto_threads(threads) or most < 2:
            return None
        return cls(most)

    def _time(self, c: _Choice, n: int, last: int | None = None) -> float:
        t = c.times[n]
        return min(t if last is None else t[-last:])

    def _try(self, c: _Choice, n: int) -> None:
        c.trial, c.left = n, self.TRIAL

    def _record(self, c: _Choice, n: int, dt: float) -> None:
        c.calls += 1
        self.calls[n] = self.calls.get(n, 0) + 1
        if c.calls == 1:
            return  # the first call loads the kernel and warms the caches: not a fair time
        before = c.times.get(n)
        c.times[n] = (before or [])[-(self.KEEP - 1) :] + [dt]
        c.stamp[n] = c.calls
        if n == c.trial:
            c.left -= 1
            if c.left > 0 and dt <= self.ABORT * self._time(c, c.current):
                return  # close: one more call decides
            ran = self.TRIAL - c.left  # this trial's calls (the last ``ran`` times)
            c.trial = None
            c.since = 0
            if self._time(c, n, ran) <= self.SWITCH * self._time(c, c.current):
                c.current = n
                c.interval = self.FIRST_INTERVAL
            else:
                c.interval = min(2 * c.interval, self.MAX_INTERVAL)
            return
        if n != c.current:
            return
        c.since += 1
        others = [k for k in self.candidates if k != c.current]
        if not others:
            return  # one thread: nothing to choose
        untried = [k for k in others if k not in c.times]
        drift = (
            before is not None and len(before) >= self.KEEP - 1 and dt > self.DRIFT * max(before)
        )
        if untried:
            self._try(c, untried[0])
        elif drift or c.since >= c.interval:
            if drift:  # the load changed: the count in use is as fast as its last call
                c.interval = self.FIRST_INTERVAL
                c.times[n] = [dt]
            self._try(c, min(others, key=lambda k: c.stamp.get(k, 0)))

    @contextlib.contextmanager
    def run(self, kind: str = "grad"):
        """Run the block's kernel call on the count chosen for ``kind`` (yields it) and time it."""
        with self._lock:
            c = self._choices.get(kind)
            if c is None:
                c = self._choices[kind] = _Choice(self.most)
            n = c.trial if c.calls and c.trial is not None else c.current
        before = self._get()
        self._set(n)
        t = self._clock()
        try:
            yield n
        finally:
            dt = self._clock() - t
            self._set(before)
            with self._lock:
                self._record(c, n, dt)

    def current(self, kind: str = "grad") -> int:
        """The count in use for ``kind``."""
        c = self._choices.get(kind)
        return self.most if c is None else c.current

    def summary(self) -> str:
        """``"2 threads for 140 calls, 1 for 31"``: the calls run per count, most threads first."""
        parts = sorted(self.calls.items(), reverse=True)
        return ", ".join(
            f"{n} thread{'s' if n > 1 else ''} for {k} call{'s' if k != 1 else ''}"
            if i == 0
            else f"{n} for {k}"
            for i, (n, k) in enumerate(parts)
        )
