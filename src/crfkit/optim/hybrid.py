"""The hybrid deterministic-stochastic method (Friedlander & Schmidt 2012, "Hybrid
deterministic-stochastic methods for data fitting"), as the SAG paper (Schmidt et al. 2015, section
6) compares it: L-BFGS on a sample of the training sequences that grows geometrically until it is
the whole set.

Iteration ``k`` works on the batch ``B_k`` = the first ``b_k`` sequences of a
random permutation (drawn from ``seed``; batches are nested) and its objective
``f_k(w) = (1/b_k) sum_{i in B_k} nll_i(w) + (l2/2)|w|^2``:

* direction ``d = -H g_k`` (the L-BFGS two-loop recursion over the last ``m``
  pairs; steepest descent scaled to a unit first step when there are none);
* Armijo backtracking on ``f_k``: step 1 (the first iteration: ``1/|g|_1``
  capped at 1), halved until ``f_k(w + a d) <= f_k(w) + c1 a g_k.d``
  (``c1`` = 1e-4), at most 30 halvings;
* the batch grows: ``b_{k+1} = min(n, ceil(growth b_k + 1))`` (``growth`` =
  1.1, ``b_0`` = ``batch0`` = 1% of n, at least 1); the curvature pair is
  ``s = w_{k+1} - w_k``, ``y = g_{B_k}(w_{k+1}) - g_{B_k}(w_k)`` (both on the
  old batch, whose gradient at the accepted point the line search already has);
  only the new sequences' gradient at ``w_{k+1}`` is computed on top.

Sample weights: the batch objective is ``(1/b_k) sum_{i in B_k} s_i nll_i(w) + (l2/2)|w|^2`` with
the full objective's scales ``s_i = omega_i n / W`` (an unbiased estimate of ``f``; on the whole set
it is ``f``).

Effective passes count every sequence whose loss (and gradient) is evaluated,
line-search trials included: ``obj.n_oracle`` grows by the batch size per
evaluation (the SAG paper's counting).  ``max_iterations`` is a budget of
effective passes (default 100); the run also stops once the whole set is in
the batch and ``|g|_inf <= gtol`` (default 1e-8).  The callback is called once
per iteration (``iteration`` = iterations done; ``f`` = the full objective at
the iterate, not counted as passes, with ``monitor=True``).  ``state=``
resumes bitwise; Ctrl-C returns the last completed iteration.
"""

from __future__ import annotations

import math
import time

import numpy as np

from ..errors import CrfkitError, ParameterError
from ..objective import Objective, Regularization, abs_max
from . import schema as _sc
from .lbfgs import History
from .sag import check_supported
from .stochastic import StochasticResult, last_completed, notify


#: what a resumed state may hold (checked by crfkit.training.checkpoint.validate_state before it is
#: used): hybrid (its history holds at most its own ``m`` pairs, default 6)
def _hm(d) -> int:
    try:
        return max(1, int(d.params.get("m", 6)))
    except (TypeError, ValueError):
        return 6


STATE_SCHEMA = {
    "x": _sc.vector("p"),
    "gsum": _sc.vector("p"),
    "S": _sc.array(lambda d: [(range(_hm(d) + 1), d.p)]),
    "Y": _sc.array(lambda d: [(range(_hm(d) + 1), d.p)]),
    "rho": _sc.array(lambda d: [(range(_hm(d) + 1),)]),
    "iteration": _sc.integer(),
    "b": _sc.integer(lo=1, hi=lambda d: max(d.n, 1)),
    "vsum": _sc.number(),
    "n_oracle": _sc.integer(),
    "monitor_s": _sc.number(lo=0.0, required=False),
    "settings": _sc.mapping(),
}
STATE_RULES = (
    lambda s, d: (
        None
        if len(s["S"]) == len(s["Y"]) == len(s["rho"])
        else "S, Y and rho hold different numbers of pairs"
    ),
)

DEFAULT_PASSES = 100


class _Batches:
    """Sums of nll and its gradient over ranges of a fixed permutation (sub-objectives built on
    demand)."""

    def __init__(self, obj, perm, threads):
        self.obj, self.perm, self.threads = obj, perm, threads
        self._cache: dict[tuple[int, int], Objective] = {}

    def _sub(self, a, b):
        key = (a, b)
        if key not in self._cache:
            if len(self._cache) > 4:
                self._cache.clear()
            idx = self.perm[a:b]
            sub = self.obj.corpus.subset(idx)
            sub.weight = None
            # sample weights: the batch keeps the full objective's scales omega_i n / W (uniform
            # sampling with weighted losses: f_k is an unbiased estimate of f, and a batch of zero
            # weights is allowed)
            scales = self.obj.sw[idx] if getattr(self.obj, "weighted", False) else None
            self._cache[key] = Objective(
                sub, self.obj.space, Regularization(l2=0.0), threads=self.threads, scales=scales
            )
        return self._cache[key]

    def sum_grad(self, a, b, w):
        v, g = self._sub(a, b).nll_sum_grad(w)
        self.obj.n_oracle += b - a
        return v, g.copy()


def hybrid(
    obj,
    x0,
    *,
    reg,
    max_iterations=None,
    callback=None,
    seed: int = 0,
    state: dict | None = None,
    m: int = 6,
    growth: float = 1.1,
    batch0: int | None = None,
    c1: float = 1e-4,
    gtol: float = 1e-8,
    monitor: bool = True,
) -> StochasticResult:
    """L-BFGS on a geometrically growing sample (see the module docstring)."""
    check_supported("hybrid", obj, reg)
    try:
        m, growth, c1, gtol = int(m), float(growth), float(c1), float(gtol)
        batch0 = None if batch0 is None else int(batch0)
    except (TypeError, ValueError):
        raise ParameterError(
            "hybrid: m and batch0 must be integers; growth, c1, gtol numbers"
        ) from None
    if m < 1 or not growth >= 1.0 or not 0 < c1 < 1 or gtol < 0:
        raise ParameterError("hybrid: m >= 1, growth >= 1, 0 < c1 < 1, gtol >= 0")
    n, d, l2 = obj.n, obj.n_features, float(reg.l2)
    if batch0 is not None and not 1 <= batch0:
        raise ParameterError("hybrid: batch0 must be >= 1")
    budget = DEFAULT_PASSES if max_iterations is None else float(max_iterations)
    b = min(n, batch0 if batch0 is not None else max(1, math.ceil(0.01 * n)))
    perm = np.random.default_rng(int(seed)).permutation(n).astype(np.int64)
    batches = _Batches(obj, perm, getattr(obj, "threads", None))
    hist = History(m, d)
    settings = {
        "n": int(n),
        "n_features": int(d),
        "l2": l2,
        "seed": int(seed),
        "m": m,
        "growth": growth,
        # (a resumed state's own, not used again: its b has grown since)
        "batch0": b if state is None else state.get("settings", {}).get("batch0"),
        "c1": c1,
    }
    if state is not None:
        bad = [k for k, val in settings.items() if state.get("settings", {}).get(k) != val]
        if bad:
            raise ParameterError(
                "hybrid: the state was made with other settings: " + ", ".join(bad)
            )
        x = np.array(state["x"], dtype=np.float64, copy=True)
        b, k = int(state["b"]), int(state["iteration"])
        gsum = np.array(state["gsum"], dtype=np.float64, copy=True)
        vsum = float(state["vsum"])
        hist.load(np.asarray(state["S"]), np.asarray(state["Y"]), np.asarray(state["rho"]))
        obj.n_oracle = int(state["n_oracle"])
        monitor_s = float(state.get("monitor_s", 0.0))
    else:
        x = np.zeros(d) if x0 is None else np.array(x0, dtype=np.float64, copy=True)
        if x.shape != (d,):
            raise ParameterError(f"x0 has shape {x.shape}; the feature space has {d} features")
        vsum, gsum = batches.sum_grad(0, b, x)
        k = 0
        monitor_s = 0.0

    def snapshot():
        # x and gsum are never changed in place (each iteration binds new arrays to them): shared,
        # not copied; the history's rows are (its ring buffer is overwritten by the next pushes)
        S, Y, rho = hist.pairs()
        st = {
            "iteration": k,
            "x": x,
            "b": b,
            "gsum": gsum,
            "vsum": vsum,
            "S": S,
            "Y": Y,
            "rho": rho,
            "n_oracle": int(obj.n_oracle),
            "monitor_s": monitor_s,
            "settings": dict(settings),
        }
        return lambda: st

    state_fn = snapshot() if k > 0 else None
    status, message = "max_iterations", f"{budget:g} effective passes"
    f = float("nan")
    try:
        while obj.n_oracle / n < budget:
            fk = vsum / b + 0.5 * l2 * float(x @ x)
            g = gsum / b + l2 * x
            ginf = abs_max(g) if d else 0.0
            if b == n and ginf <= gtol:
                status, message = "converged", f"|g|_inf = {ginf:.3g} <= gtol on the whole set"
                break
            dirn = hist.direction(g)
            gd = float(g @ dirn)
            if not gd < 0:
                hist.clear()
                dirn = -g
                gd = -float(g @ g)
            step = 1.0 if len(hist) else min(1.0, 1.0 / max(float(np.abs(g).sum()), 1e-300))
            for _ in range(31):
                xt = x + step * dirn
                vt, gt = batches.sum_grad(0, b, xt)
                ft = vt / b + 0.5 * l2 * float(xt @ xt)
                if math.isfinite(ft) and ft <= fk + c1 * step * gd:
                    break
                step *= 0.5
            else:
                if b == n:
                    status, message = (
                        "converged",
                        "the line search found no decrease on the whole set",
                    )
                    break
                xt, vt, gt = x, vsum, gsum  # no progress on this batch: just grow it
            # curvature pair on the old batch
            hist.push(xt, x, gt / b + l2 * xt, g)
            b_new = min(n, math.ceil(growth * b + 1))
            if b_new > b:
                vn, gn = batches.sum_grad(b, b_new, xt)
                vt, gt = vt + vn, gt + gn
            x, vsum, gsum, b = xt, vt, gt, b_new
            k += 1
            if not np.all(np.isfinite(x)):
                raise CrfkitError(f"hybrid: non-finite weights at iteration {k}")
            tm = time.perf_counter()
            f = obj.value(x, count=False) if monitor else float("nan")
            monitor_s += time.perf_counter() - tm
            state_fn = snapshot()
            if callback is not None:
                stop = notify(
                    callback,
                    iteration=k,
                    f=f,
                    x=x,
                    step=step,
                    nnz=int(np.count_nonzero(x)),
                    state=state_fn,
                    examples_seen=int(obj.n_oracle),
                    monitor_s=monitor_s,
                    gnorm_inf=ginf,
                )
                if stop:
                    status, message = "stopped", f"stopped by the callback after iteration {k}"
                    break
    except KeyboardInterrupt:
        status, message = "interrupted", "interrupted"
        x, k = last_completed(state_fn, x0, d)
        f = float("nan")
    if not math.isfinite(f):
        f = obj.value(x, count=False)
    return StochasticResult(
        x=x,
        f=f,
        status=status,
        message=message + f"; batch {b} of {n} at the end",
        iterations=int(k),
        state_fn=state_fn,
    )
