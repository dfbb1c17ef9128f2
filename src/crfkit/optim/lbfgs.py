"""Limited-memory BFGS with a strong-Wolfe line search.

Written to be reused by OWL-QN: the two-loop recursion and the line search are
separate functions, and the driver takes the objective as a callable returning
``(f, g)``.

Stopping rules (any of them ends the run):

* ``epsilon``: ``||g||_2 / max(1, ||x||_2) < epsilon`` (CRFsuite / liblbfgs);
* ``delta`` over ``period``: ``(f_{k-period} - f_k) / f_k < delta`` (CRFsuite);
* ``gtol``: ``||g||_inf <= gtol``;
* ``max_iterations``;
* ``stop_value``: ``f <= stop_value`` (used to time how long reaching a given
  objective takes);
* the callback returning True.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..errors import ParameterError
from ..kernels import vec as _vec
from ..objective import abs_max
from . import schema as _sc

#: what a resumed state may hold (checked by crfkit.training.checkpoint.validate_state before it is
#: used): L-BFGS and OWL-QN, keys of :func:`make_state`
STATE_SCHEMA = {
    "x": _sc.vector("p"),
    "g": _sc.vector("p"),
    "S": _sc.array(lambda d: [(range(d.m + 1), d.p)]),
    "Y": _sc.array(lambda d: [(range(d.m + 1), d.p)]),
    "rho": _sc.array(lambda d: [(range(d.m + 1),)]),
    "past": _sc.array(lambda d: [(range(d.period + 2),)]),
    "f": _sc.number(),
    "f_smooth": _sc.number(),
    "iteration": _sc.integer(),
    "n_evals": _sc.integer(),
    "linesearch_ok": _sc.boolean(required=False),
    "seconds": _sc.number(lo=0.0, required=False),
    "m": _sc.integer(lo=lambda d: d.m, hi=lambda d: d.m),
}
#: checks across keys: the history's pairs are as many as its curvatures
STATE_RULES = (
    lambda s, d: (
        None
        if len(s["S"]) == len(s["Y"]) == len(s["rho"])
        else "S, Y and rho hold different numbers of pairs"
    ),
)

FG = Callable[[np.ndarray], tuple[float, np.ndarray]]


@dataclass
class LbfgsResult:
    x: np.ndarray
    f: float
    g: np.ndarray
    iterations: int
    n_evals: int
    # converged | delta | gtol | max_iterations | stop_value | callback | linesearch_failed |
    # interrupted
    status: str
    message: str
    history: list = field(default_factory=list)
    # builds the optimizer state of the last accepted point (see make_state) on
    # demand: it copies the history pairs, which only checkpointing needs
    state_fn: Callable[[], dict] | None = field(default=None, repr=False, compare=False)

    @property
    def state(self) -> dict | None:
        """The optimizer state of the last accepted point (built on first access)."""
        if self.state_fn is None:
            return None
        cached = self.__dict__.get("_state")
        if cached is None:
            cached = self.__dict__["_state"] = self.state_fn()
        return cached


def two_loop(g: np.ndarray, S: deque, Y: deque, RHO: deque) -> np.ndarray:
    """d = -H g with the L-BFGS inverse-Hessian approximation given by the (s, y) pairs."""
    q = -g.copy()
    k = len(S)
    alpha = np.empty(k)
    for i in range(k - 1, -1, -1):
        alpha[i] = RHO[i] * np.dot(S[i], q)
        q -= alpha[i] * Y[i]
    if k:
        q *= np.dot(S[-1], Y[-1]) / np.dot(Y[-1], Y[-1])
    for i in range(k):
        b = RHO[i] * np.dot(Y[i], q)
        q += (alpha[i] - b) * S[i]
    return q


class History:
    """The last ``m`` (s, y) pairs in a ring buffer, with the two-loop recursion in numba."""

    def __init__(
        self, m: int, n: int, spare: bool = True, dtype=np.float64, sparse_steps: bool = False
    ):
        self.m = m
        # spare: one more row, where push writes a new pair first, so that a pair rejected for weak
        # curvature never overwrites the live history and a snapshot taken before the push stays
        # valid.  Without it (L-BFGS: two vectors of the problem's size less), :meth:`prepare`
        # checks the pair without storing it and :meth:`commit` writes it over the oldest one once
        # the caller's snapshot no longer needs that one.
        # dtype float32 (:func:`history_dtype`): the pairs stored in single precision, half the
        # memory of the 2m vectors that dominate a large feature space's; s.y, 1/s.y and the
        # two-loop sums stay in double precision (over the stored values)
        # sparse_steps (OWL-QN on a large, mostly-zero candidate space): each s kept as (indices,
        # values) of its non-zero entries instead of a dense row; y stays dense.  An L1-trained
        # iterate moves only where its pseudo-gradient is non-zero, so s has about as many non-zeros
        # as the active features (NETtalk 5-grm: under 0.5% of 123.6M), and the m dense rows of S
        # (half the history) go
        rows = m + 1 if spare else m
        if sparse_steps and spare:
            raise ValueError("sparse_steps needs spare=False (prepare / commit)")
        self.rows = rows
        self.n = n
        self.sparse = bool(sparse_steps)
        self.dtype = np.dtype(dtype)
        self.S = None if self.sparse else np.empty((rows, n), dtype=dtype)
        self.s_idx: list = [None] * rows
        self.s_val: list = [None] * rows
        self.Y = np.empty((rows, n), dtype=dtype)
        self.rho = np.empty(rows)
        self.order: list[int] = []  # slots, oldest first
        self._keep: list[int] = []  # slots cleared since the last stored pair (see clear)
        self.pending = None  # a prepared pair not yet written (see prepare / commit)

    def __len__(self) -> int:
        return len(self.order)

    def clear(self) -> None:
        # the cleared slots stay unwritten until the next pair is stored, so a
        # state snapshot taken before the clear stays valid until then
        self._keep = list(self.order)
        self.order = []

    def push(self, x_new, x, g_new, g) -> bool:
        """Store s = x_new - x, y = g_new - g if the curvature s.y is positive enough."""
        if self.sparse:
            raise ValueError("push: a sparse-steps history is written by prepare / commit")
        slot = min(set(range(self.m + 1)) - set(self.order) - set(self._keep))
        s, y = self.S[slot], self.Y[slot]
        np.subtract(x_new, x, out=s)
        np.subtract(g_new, g, out=y)
        sy = _vec.dot(s, y)
        if not sy > 1e-10 * _vec.dot(y, y):
            return False
        self.rho[slot] = 1.0 / sy
        self.order.append(slot)
        self._keep = []
        if len(self.order) > self.m:
            self.order.pop(0)
        return True

    def prepare(self, x_new, x, g_new, g) -> tuple[int, ...]:
        """The slot order after storing s = x_new - x, y = g_new - g (the current order when the
        curvature s.y is too weak), without writing anything; the pair is then :attr:`pending` until
        :meth:`commit`.  The test and 1 / s.y are those of :meth:`push` (the same sums)."""
        sy, yy = _vec.curvature(x_new, x, g_new, g)
        if not sy > 1e-10 * yy:
            self.pending = None
            return tuple(self.order)
        free = sorted(set(range(self.rows)) - set(self.order))
        slot = free[0] if free else self.order[0]
        order = tuple(([k for k in self.order if k != slot] + [slot])[-self.m :])
        self.pending = (slot, x_new, x, g_new, g, 1.0 / sy, order)
        return order

    def commit(self, order: tuple | None = None) -> None:
        """Write the pending pair (idempotent: it is computed again from the four vectors).  With
        ``order``: only if the pending pair is the one that order was prepared with (the very tuple
        :meth:`prepare` returned), so that a snapshot taken before the prepare is never
        overwritten."""
        if self.pending is None or (order is not None and self.pending[-1] is not order):
            return
        slot, x_new, x, g_new, g, rho, order = self.pending
        if self.sparse:
            idx, val = _vec.sparse_diff(x_new, x)
            self.s_idx[slot], self.s_val[slot] = idx, val.astype(self.dtype, copy=False)
        else:
            _vec.diff_into(x_new, x, self.S[slot])
        _vec.diff_into(g_new, g, self.Y[slot])
        if self.dtype != np.float64:
            # over the stored (rounded) pair
            sy = (
                _vec.sparse_dot(self.s_idx[slot], self.s_val[slot], self.Y[slot])
                if self.sparse
                else _vec.dot(self.S[slot], self.Y[slot])
            )
            if sy > 0.0:
                rho = 1.0 / sy
        self.rho[slot] = rho
        self.order = list(order)
        self._keep = []
        self.pending = None

    def pairs(self, order=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The stored ``(S, Y, rho)`` pairs, oldest first (fresh arrays); ``order``: slots to
        take."""
        idx = np.asarray(self.order if order is None else order, dtype=np.int64)
        if not self.sparse:
            return self.S[idx], self.Y[idx], self.rho[idx]
        S = np.zeros((len(idx), self.n), dtype=self.dtype)
        for r, j in enumerate(idx):
            S[r, self.s_idx[j]] = self.s_val[j]
        return S, self.Y[idx], self.rho[idx]

    def load(self, S: np.ndarray, Y: np.ndarray, rho: np.ndarray) -> None:
        """Replace the history by the given pairs, oldest first (as :meth:`pairs` returns them)."""
        k = len(rho)
        if k > self.m or np.shape(S) != (k, self.n) or np.shape(Y) != (k, self.n):
            raise ValueError(f"history of {k} pairs does not fit m={self.m}, n={self.n}")
        if self.sparse:
            for r in range(k):
                nz = np.flatnonzero(S[r])
                self.s_idx[r], self.s_val[r] = nz, np.asarray(S[r][nz], dtype=self.dtype)
        else:
            self.S[:k] = S
        self.Y[:k] = Y
        self.rho[:k] = rho
        self.order = list(range(k))
        self._keep = []

    def direction(self, g: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """-H g (steepest descent when empty), into ``out`` (a fresh array when None)."""
        d = np.empty_like(g) if out is None else out
        order = np.asarray(self.order, dtype=np.int64)
        if not self.sparse:
            _vec.two_loop(g, self.S, self.Y, self.rho, order, d)
            return d
        # the steps of the pairs concatenated, oldest first (small: the non-zeros only)
        sizes = [self.s_idx[j].shape[0] for j in self.order]
        ptr = np.zeros(len(sizes) + 1, np.int64)
        np.cumsum(sizes, out=ptr[1:])
        sidx = (
            np.concatenate([self.s_idx[j] for j in self.order]) if sizes else np.zeros(0, np.int64)
        )
        sval = (
            np.concatenate([self.s_val[j] for j in self.order])
            if sizes
            else np.zeros(0, self.dtype)
        )
        _vec.two_loop_sparse_steps(g, ptr, sidx, sval, self.Y, self.rho, order, d)
        return d


def _cubic_min(a, fa, da, b, fb, db):
    """Minimiser of the cubic interpolating (a, fa, da), (b, fb, db); None if it does not exist."""
    d1 = da + db - 3.0 * (fa - fb) / (a - b)
    disc = d1 * d1 - da * db
    if disc < 0:
        return None
    d2 = math.copysign(math.sqrt(disc), b - a)
    den = db - da + 2.0 * d2
    if den == 0:
        return None
    return b - (b - a) * (db + d2 - d1) / den


def wolfe_line_search(
    phi,
    f0: float,
    d0: float,
    step: float,
    *,
    c1: float = 1e-4,
    c2: float = 0.9,
    max_evals: int = 20,
    step_max: float = 1e20,
):
    """Find a step satisfying the strong Wolfe conditions (Nocedal & Wright, Alg. 3.5/3.6).

    ``phi(a)`` evaluates the objective at ``x + a*d`` and returns ``(f, dphi, payload)``.
    Returns ``(a, f, payload, n_evals, ok)``; when no Wolfe point is found but
    the objective decreased, the best point seen is returned with ok=False.

    A trial's payload (crfkit's: the trial point and its gradient, two vectors of the problem's
    size) is dropped before the next trial is evaluated: the best trial is remembered by its step
    alone and evaluated again when no Wolfe point is found (rare; the same values, one evaluation
    more).  Keeping it made a search of two or more trials hold two more vectors (CoNLL-2000's
    L-BFGS peak: 7 MB).
    """
    n = 0
    best = None  # (f, a)

    def ev(a):
        nonlocal n, best
        n += 1
        f, dphi, pl = phi(a)
        if math.isfinite(f) and f < f0 and (best is None or f < best[0]):
            best = (f, a)
        return f, dphi, pl

    def zoom(lo, flo, dlo, hi, fhi, dhi):
        while n < max_evals:
            a = _cubic_min(lo, flo, dlo, hi, fhi, dhi) if math.isfinite(fhi) else None
            lo_b, hi_b = min(lo, hi), max(lo, hi)
            width = hi_b - lo_b
            if a is None or not (lo_b + 0.1 * width <= a <= hi_b - 0.1 * width):
                a = 0.5 * (lo + hi)
            f, dphi, pl = ev(a)
            if not math.isfinite(f) or f > f0 + c1 * a * d0 or f >= flo:
                hi, fhi, dhi = a, f, dphi
            else:
                if abs(dphi) <= -c2 * d0:
                    return a, f, pl, True
                if dphi * (hi - lo) >= 0:
                    hi, fhi, dhi = lo, flo, dlo
                lo, flo, dlo = a, f, dphi
            pl = None  # not held through the next trial
            if abs(hi - lo) <= 1e-16 * max(1.0, abs(lo)):
                break
        return None

    a_prev, f_prev, d_prev = 0.0, f0, d0
    a = step
    while n < max_evals:
        pl = None  # the previous trial's payload, not held through this one
        f, dphi, pl = ev(a)
        if not math.isfinite(f):
            # overshoot into overflow: shrink towards the last good point
            pl = None
            r = zoom(a_prev, f_prev, d_prev, a, math.inf, math.nan)
            break
        if f > f0 + c1 * a * d0 or (n > 1 and f >= f_prev):
            pl = None
            r = zoom(a_prev, f_prev, d_prev, a, f, dphi)
            break
        if abs(dphi) <= -c2 * d0:
            return a, f, pl, n, True
        if dphi >= 0:
            pl = None
            r = zoom(a, f, dphi, a_prev, f_prev, d_prev)
            break
        a_prev, f_prev, d_prev = a, f, dphi
        a = min(4.0 * a, step_max)
    else:
        r = None
    if r is not None:
        a, f, pl, ok = r
        return a, f, pl, n, ok
    pl = None
    if best is not None:
        f, a = best
        n += 1
        _, _, pl = phi(a)  # the best trial again, for its payload
        return a, f, pl, n, False
    return 0.0, f0, None, n, False


def stopping_rule(
    f: float,
    gnorm: float,
    xnorm: float,
    ginf: float,
    past: deque,
    *,
    epsilon: float,
    delta: float,
    period: int,
    gtol: float | None,
    stop_value: float | None,
    g: str = "g",
) -> tuple[str, str] | None:
    """The stopping rules checked after each iteration, in order; ``(status, message)`` or None.

    ``past`` holds the last ``period + 1`` objective values (the current one
    last); ``g`` names the gradient in the messages (OWL-QN tests its
    pseudo-gradient).
    """
    if stop_value is not None and f <= stop_value:
        return "stop_value", f"objective reached {stop_value}"
    if gnorm / max(1.0, xnorm) <= epsilon:
        return "converged", f"||{g}|| / max(1, ||x||) <= epsilon={epsilon}"
    if gtol is not None and ginf <= gtol:
        return "gtol", f"||{g}||_inf <= {gtol}"
    if period and len(past) > period and f != 0:
        rate = (past[0] - f) / abs(f)
        if abs(rate) < delta:
            return (
                "delta",
                f"objective improved by less than delta={delta} over {period} iterations",
            )
    return None


def make_state(hist: History, snap: tuple, seconds: float, copy: bool = False) -> dict:
    """The optimizer state dict of a snapshot ``(x, f, f_smooth, g, it, n_evals, order, past, ok)``.

    Keys: ``x``, ``g`` (smooth gradient), ``f`` (the minimised objective; OWL-QN:
    with the L1 term), ``f_smooth``, ``iteration``, ``n_evals``, ``S``, ``Y``,
    ``rho`` (the history pairs, oldest first), ``past`` (the objective values
    of the delta rule, oldest first), ``linesearch_ok``, ``seconds``, ``m``.
    The arrays are fresh copies; ``x`` and ``g`` are shared unless ``copy`` (L-BFGS never modifies
    them in place; OWL-QN reuses them as the next line search's buffers, and copies them for a state
    asked for while it runs).
    """
    x, f, f_smooth, g, it, n_evals, order, past, ok = snap
    hist.commit(
        order
    )  # a pair prepared for this snapshot and not yet written (interrupted): write it
    S, Y, rho = hist.pairs(order)
    if copy:
        x, g = np.array(x, copy=True), np.array(g, copy=True)
    return dict(
        x=x,
        g=g,
        f=float(f),
        f_smooth=float(f_smooth),
        iteration=int(it),
        n_evals=int(n_evals),
        S=S,
        Y=Y,
        rho=rho,
        past=np.asarray(past, dtype=np.float64),
        linesearch_ok=bool(ok),
        seconds=float(seconds),
        m=int(hist.m),
    )


def check_state(state: dict, n: int, m: int, period: int) -> None:
    x = np.asarray(state["x"])
    if x.shape != (n,):
        raise ParameterError(
            f"optimizer state for {x.shape[0] if x.ndim == 1 else x.shape} variables, expected {n}"
        )
    if int(state["m"]) != m:
        raise ParameterError(f"optimizer state kept m={state['m']} pairs; this run has m={m}")
    if len(state["past"]) > period + 1:
        raise ParameterError(
            f"optimizer state has {len(state['past'])} past values; "
            f"period={period} keeps {period + 1}"
        )


@dataclass
class RunStart:
    """Where a quasi-Newton run starts: fresh (one evaluation at x0) or resumed from a state."""

    x: np.ndarray
    f_smooth: float
    f: float  # the minimised objective (OWL-QN: with the L1 term)
    g: np.ndarray
    n_evals: int
    iteration: int
    linesearch_ok: bool
    hist: History | None
    past: deque
    t_start: float
    interrupted: LbfgsResult | None = None  # Ctrl-C during the first evaluation


HISTORIES = {"float64": np.float64, "float32": np.float32}


def history_dtype(history: str):
    """The numpy dtype of the ``history`` parameter of :func:`lbfgs` / OWL-QN
    (``float64`` | ``float32``)."""
    try:
        return HISTORIES[history]
    except (KeyError, TypeError):
        raise ParameterError(
            f"history must be one of {', '.join(HISTORIES)} (got {history!r})"
        ) from None


def start_run(
    fg: FG,
    x0,
    state: dict | None,
    m: int,
    period: int,
    full: Callable[[float, np.ndarray], float] = lambda f, x: f,
    spare: bool = True,
    history: str = "float64",
    sparse_steps: bool = False,
    fresh: bool = False,
    adopt_x0: bool = False,
) -> RunStart:
    """The common start of :func:`lbfgs` and OWL-QN; ``full(f, x)`` turns the smooth
    value into the minimised objective (identity for L-BFGS); ``spare``, ``sparse_steps``: see
    :class:`History`; ``history``: the precision of the stored pairs; ``fresh``: ``fg`` returns a
    new gradient array (kept without a copy); ``adopt_x0``: see :func:`lbfgs`."""
    dtype = history_dtype(history)
    t_start = time.perf_counter()
    if state is not None:
        x = np.array(state["x"], dtype=np.float64, copy=True)
        check_state(state, x.shape[0], m, period)
        f, F = float(state["f_smooth"]), float(state["f"])
        g = np.array(state["g"], dtype=np.float64, copy=True)
        n_evals, it = int(state["n_evals"]), int(state["iteration"])
        ok = bool(state.get("linesearch_ok", True))
        t_start -= float(state.get("seconds", 0.0))
    else:
        if adopt_x0 and isinstance(x0, list):
            x0 = (
                x0.pop()
            )  # handed over in a list, which is left empty: the caller keeps no reference
        adopt = (
            adopt_x0
            and isinstance(x0, np.ndarray)
            and x0.dtype == np.float64
            and x0.ndim == 1
            and x0.flags.c_contiguous
            and x0.flags.writeable
        )
        x = x0 if adopt else np.array(x0, dtype=np.float64, copy=True)
        del x0
        try:
            f, g = fg(x)
        except KeyboardInterrupt:
            res = LbfgsResult(
                x=x,
                f=math.nan,
                g=np.full_like(x, math.nan),
                iterations=0,
                n_evals=1,
                status="interrupted",
                message="interrupted before the first evaluation finished",
            )
            return RunStart(x, math.nan, math.nan, res.g, 1, 0, True, None, deque(), t_start, res)
        if not (
            fresh and isinstance(g, np.ndarray) and g.dtype == np.float64 and g.flags.c_contiguous
        ):
            g = np.array(g, dtype=np.float64, copy=True)
        F = full(f, x)
        n_evals, it, ok = 1, 0, True
    hist = History(m, x.shape[0], spare, dtype, sparse_steps=sparse_steps)
    past: deque = deque(maxlen=period + 1)
    if state is not None:
        hist.load(state["S"], state["Y"], state["rho"])
        past.extend(float(v) for v in state["past"])
    else:
        past.append(F)
    return RunStart(x, f, F, g, n_evals, it, ok, hist, past, t_start)


def lbfgs(
    fg: FG,
    x0: np.ndarray | None = None,
    *,
    m: int = 6,
    max_iterations: int | None = None,
    epsilon: float = 1e-5,
    delta: float = 1e-5,
    period: int = 10,
    gtol: float | None = None,
    stop_value: float | None = None,
    c1: float = 1e-4,
    c2: float = 0.9,
    max_linesearch: int = 20,
    callback: Callable[[dict], bool | None] | None = None,
    state: dict | None = None,
    fresh_gradients: bool = False,
    history: str = "float64",
    adopt_x0: bool = False,
) -> LbfgsResult:
    """Minimise a smooth function with L-BFGS.

    ``callback(info)`` is called after every iteration with a dict holding
    ``iteration, f, gnorm, gnorm_inf, xnorm, step, n_evals, seconds, x, g``
    and ``state``, a function returning the optimizer state after this
    iteration (see :func:`make_state`); returning True stops the run (status
    ``callback``).  A KeyboardInterrupt during the run returns the last
    accepted point with status ``interrupted``.  ``result.state`` is the state
    of the last accepted point (None when interrupted before the first
    evaluation).

    ``state``: continue from a state (``x0`` is then ignored): the run goes on
    exactly as the run that produced the state would have (same iterates,
    bitwise), with the stopping rules checked again first.  ``max_iterations``
    counts the iterations of the whole run, the resumed ones included.

    ``fresh_gradients``: ``fg`` returns a new gradient array at every call (crfkit's objectives do),
    so the line search keeps it as it is; otherwise it keeps a copy, in case ``fg`` reuses one
    buffer.  A copy is one more vector of the problem's size alive at a time (a Dask client's
    working memory is little more than these vectors).

    ``history``: ``float64`` (default) or ``float32``, the precision of the stored pairs: the 2m
    vectors are most of the memory of a run in a large feature space, and single precision halves
    them (the products and sums of the two-loop recursion stay in double precision; the direction
    is that of the rounded pairs, an approximation of an approximation of the inverse Hessian).

    ``adopt_x0``: ``x0`` (a writable, contiguous float64 vector the caller gives up) is the first
    iterate itself, instead of a copy of it: one vector of the problem's size less (``crfkit train``
    starts from zeros it made for the run).  Any other ``x0`` is copied.  ``x0`` may then also be a
    one-element list holding the vector, which is emptied: the caller then holds no reference to it
    while the run lasts (an argument is referenced by the caller's frame until the call returns),
    and the first iterate is freed once it is no longer the current one, as are every later one's.
    """
    st = start_run(
        fg,
        x0,
        state,
        m,
        period,
        spare=False,
        history=history,
        fresh=fresh_gradients,
        adopt_x0=adopt_x0,
    )
    if st.interrupted is not None:
        return st.interrupted
    x, f, g, n_evals, it, ok = st.x, st.f, st.g, st.n_evals, st.iteration, st.linesearch_ok
    hist, past, t_start = st.hist, st.past, st.t_start
    # the start's x and g are dropped with the iterate they belong to, not held for the whole run
    # (two vectors of the problem's size: 7 MB of CoNLL-2000's peak)
    del st, x0
    snap = (x, f, f, g, it, n_evals, tuple(hist.order), tuple(past), ok)
    status, message = "max_iterations", "reached the iteration limit"

    def done(st, msg):
        x, f, _, g, it = snap[:5]  # n_evals: all evaluations, the last line search's included
        return LbfgsResult(
            x=x,
            f=f,
            g=g,
            iterations=it,
            n_evals=n_evals,
            status=st,
            message=msg,
            state_fn=lambda s=snap, sec=time.perf_counter() - t_start: make_state(hist, s, sec),  # noqa: B008
        )

    xnorm = float(np.linalg.norm(x))
    gnorm = float(np.linalg.norm(g))
    if state is None and gnorm / max(1.0, xnorm) <= epsilon:
        return done("converged", "gradient norm below epsilon at the starting point")
    try:
        if state is not None:
            # the checks that ended the iteration the state was taken at (it may have been the last)
            ginf = abs_max(g)
            stop = stopping_rule(
                f,
                gnorm,
                xnorm,
                ginf,
                past,
                epsilon=epsilon,
                delta=delta,
                period=period,
                gtol=gtol,
                stop_value=stop_value,
            )
            if stop is not None:
                return done(*stop)
            if not ok and not len(hist):
                return done(
                    "linesearch_failed", "the line search could not satisfy the Wolfe conditions"
                )
        while max_iterations is None or it < max_iterations:
            d = hist.direction(g)
            dg = float(np.dot(d, g))
            if not dg < 0:  # not a descent direction: restart from steepest descent
                hist.clear()
                d = -g
                dg = -float(np.dot(g, g))
            step0 = 1.0 / math.sqrt(-dg) if not len(hist) else 1.0

            def phi(a, d=d):
                xn = d * a  # x + a d with one array (the same roundings as x + a * d)
                xn += x  # noqa: B023
                fn, gn = fg(xn)
                return fn, float(np.dot(gn, d)), (xn, gn if fresh_gradients else gn.copy())

            a, fn, pl, ne, ok = wolfe_line_search(
                phi, f, dg, step0, c1=c1, c2=c2, max_evals=max_linesearch
            )
            n_evals += ne
            if pl is None:
                status, message = (
                    "linesearch_failed",
                    "the line search found no decrease (at numerical precision?)",
                )
                break
            xn, gn = pl
            order = hist.prepare(xn, x, gn, g)
            x, f, g = xn, fn, gn
            it += 1
            past.append(f)
            # one assignment: an interrupt leaves either the previous or this iteration's snapshot.
            # The new pair is written (over the oldest, which this snapshot no longer holds) only
            # after it; an interrupt before it is written leaves it pending, and make_state writes
            # it
            snap = (x, f, f, g, it, n_evals, order, tuple(past), ok)
            hist.commit()
            xnorm = float(np.linalg.norm(x))
            gnorm = float(np.linalg.norm(g))
            ginf = abs_max(g)
            if callback is not None:
                info = dict(
                    iteration=it,
                    f=f,
                    gnorm=gnorm,
                    gnorm_inf=ginf,
                    xnorm=xnorm,
                    step=a,
                    n_evals=n_evals,
                    seconds=time.perf_counter() - t_start,
                    x=x,
                    g=g,
                    linesearch_ok=ok,
                    state=lambda s=snap: make_state(hist, s, time.perf_counter() - t_start),
                )
                if callback(info):
                    status, message = "callback", "stopped by the caller"
                    break
            stop = stopping_rule(
                f,
                gnorm,
                xnorm,
                ginf,
                past,
                epsilon=epsilon,
                delta=delta,
                period=period,
                gtol=gtol,
                stop_value=stop_value,
            )
            if stop is not None:
                status, message = stop
                break
            if not ok and not len(hist):
                status, message = (
                    "linesearch_failed",
                    "the line search could not satisfy the Wolfe conditions",
                )
                break
    except KeyboardInterrupt:
        status, message = (
            "interrupted",
            "interrupted by the user; returning the last accepted point",
        )
    return done(status, message)
