"""Orthant-wise limited-memory quasi-Newton (OWL-QN) for ``F(x) = f(x) + l1 * ||x||_1``.

Andrew & Gao (2007), "Scalable training of L1-regularized log-linear models";
the elastic-net CRF setting is Lavergne et al. (2010), section 3.  ``f`` is
smooth (the CRF loss plus the L2 term); the L1 term is handled here:

* the *pseudo-gradient* ``pg`` of ``F`` is the one-sided derivative that
  points downhill: ``g_i + l1 sign(x_i)`` where ``x_i != 0``; at ``x_i = 0``
  ``g_i + l1`` when that is negative, ``g_i - l1`` when that is positive,
  and 0 when ``|g_i| <= l1`` (no move out of zero decreases ``F``);
* the direction is the L-BFGS two-loop recursion applied to ``pg``, with the
  ``(s, y)`` pairs built from differences of the *smooth* gradient ``g``
  (the L1 term has no curvature); components whose sign disagrees with
  ``-pg`` are zeroed so that the direction stays a descent direction;
* the line search backtracks from step 1 (``1/||d||`` on the first
  iteration and after a restart), projecting every trial point onto the
  orthant of the current point (``sign(x_i)``, or ``sign(-pg_i)`` where
  ``x_i = 0``): a coordinate that would cross zero is set to zero, which is
  how exact zeros appear; a trial is accepted on Andrew & Gao's sufficient
  decrease ``F(x') <= F(x) + c * pg . (x' - x)`` measured along the
  projected step.

Stopping rules mean what they mean for :func:`crfkit.optim.lbfgs.lbfgs`, with
the pseudo-gradient in place of the gradient and ``F`` in place of ``f``:
``epsilon`` (``||pg||_2 / max(1, ||x||_2)``), ``delta`` over ``period`` (on
``F``), ``gtol`` (``||pg||_inf``), ``stop_value`` (``F <= stop_value``),
``max_iterations``, the callback; Ctrl-C returns status ``interrupted``.
This is also what CRFsuite (liblbfgs) runs for ``lbfgs`` with ``c1 > 0``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np

from ..errors import ParameterError
from ..kernels.vec import constrain_direction as _constrain_direction
from ..kernels.vec import orthant_step as _orthant_step
from ..kernels.vec import pseudo_gradient as _pseudo_gradient
from ..objective import l1_norm
from .lbfgs import FG, LbfgsResult, make_state, start_run, stopping_rule

#: the problem size from which owlqn keeps its steps sparse by default (``sparse_steps=None``)
SPARSE_STEPS_MIN = 1_000_000


def pseudo_gradient(x: np.ndarray, g: np.ndarray, l1: float) -> np.ndarray:
    """The pseudo-gradient of ``f + l1*||x||_1`` at ``x`` given the smooth gradient ``g`` (a fresh
    array)."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    g = np.ascontiguousarray(g, dtype=np.float64)
    pg = np.empty_like(x)
    _pseudo_gradient(x, g, float(l1), pg)
    return pg


# ----------------------------------------------------------------------- driver
def owlqn(
    fg: FG,
    x0: np.ndarray | None,
    l1: float,
    *,
    m: int = 6,
    max_iterations: int | None = None,
    epsilon: float = 1e-5,
    delta: float = 1e-5,
    period: int = 10,
    gtol: float | None = None,
    stop_value: float | None = None,
    armijo: float = 1e-4,
    backtrack: float = 0.5,
    max_linesearch: int = 20,
    callback: Callable[[dict], bool | None] | None = None,
    state: dict | None = None,
    fresh_gradients: bool = False,
    history: str = "float64",
    fg_into: Callable[[np.ndarray, np.ndarray], float] | None = None,
    sparse_steps: bool | None = None,
    adopt_x0: bool = False,
) -> LbfgsResult:
    """Minimise ``F(x) = f(x) + l1 * ||x||_1`` with OWL-QN; ``fg(x)`` returns the *smooth*
    ``(f, g)``.

    Returns an :class:`~crfkit.optim.lbfgs.LbfgsResult` whose ``f`` is ``F``
    (L1 term included) and whose ``g`` is the smooth gradient at ``x`` (see
    :func:`pseudo_gradient` for the pseudo-gradient).  ``callback(info)`` gets
    the same dict as with :func:`~crfkit.optim.lbfgs.lbfgs` (``f`` is ``F``;
    ``gnorm``/``gnorm_inf`` are norms of the pseudo-gradient; ``g`` is the
    smooth gradient) plus ``f_smooth``, ``pg`` (a buffer rewritten every
    iteration: copy it to keep it) and ``nnz`` (non-zero coordinates of ``x``).  ``armijo`` is the
    sufficient-decrease constant, ``backtrack`` the step reduction per rejected trial,
    ``max_linesearch`` the evaluations allowed per line search.  With ``l1 = 0`` this is L-BFGS
    with a backtracking (Armijo) line search.

    ``state`` / ``info["state"]`` / ``result.state``: resume and export, as
    with :func:`~crfkit.optim.lbfgs.lbfgs` (``f`` is ``F``, ``f_smooth`` the
    smooth part); a resumed run repeats the uninterrupted one bitwise.

    ``fresh_gradients``, ``history`` and ``adopt_x0``: as with :func:`~crfkit.optim.lbfgs.lbfgs` (a
    gradient kept without a copy; the precision of the stored pairs; ``x0`` written over, not
    copied, and possibly handed over in a one-element list).

    ``fg_into(x, out)``: optional, the same function writing the gradient into ``out`` and returning
    f (``Objective.value_and_grad_into``); then the line search's gradients go to two buffers that
    take turns, as its trial points do.  Either way the driver reuses the previous iterate's arrays,
    so an iteration allocates nothing of the problem's size: a fresh array of that size costs its
    page faults, and at NETtalk 5-grm (123.6M candidates, 1 GB a vector) those were 1.7-2 s of
    system time in a 7-8 s iteration (README, NETtalk).  So ``info["x"]`` and ``info["g"]`` (like
    ``info["pg"]``) are valid until the callback returns: copy them to keep them.  The iterates are
    the same either way.

    ``sparse_steps``: keep each stored step ``s = x_new - x`` as its non-zero entries (indices and
    values) instead of a dense row (``y`` stays dense): OWL-QN moves only the coordinates whose
    pseudo-gradient is non-zero, so with ``l1 > 0`` a step has about as many non-zeros as the model
    has active features, and half the history's memory (m rows of the problem's size) goes.
    ``None`` (default): on when ``l1 > 0`` and the problem has at least ``SPARSE_STEPS_MIN`` (1M)
    variables.  The two-loop's sums over s then run in another order (the same directions to
    rounding; a run resumes bitwise either way).  A step with many non-zeros costs up to 1.5x
    (float64 pairs) or 3x (float32) its dense row.
    """
    l1 = float(l1)
    if not (l1 >= 0.0 and math.isfinite(l1)):
        raise ParameterError(f"l1 must be finite and non-negative, got {l1!r}")
    if not 0.0 < backtrack < 1.0:
        raise ParameterError(f"backtrack must be in (0, 1), got {backtrack!r}")
    x0_size = (
        np.shape(state["x"])
        if state is not None
        else np.shape(x0[0] if isinstance(x0, list) else x0)
    )[0]  # (adopt_x0's list: see lbfgs)
    if sparse_steps is None:
        sparse_steps = l1 > 0.0 and x0_size >= SPARSE_STEPS_MIN
    st = start_run(
        fg,
        x0,
        state,
        m,
        period,
        full=lambda f, x: f + l1 * l1_norm(x),
        spare=False,
        history=history,
        sparse_steps=bool(sparse_steps),
        fresh=fresh_gradients,
        adopt_x0=adopt_x0,
    )
    if st.interrupted is not None:
        return st.interrupted
    x, f, F, g, n_evals, it, ok = (
        st.x,
        st.f_smooth,
        st.f,
        st.g,
        st.n_evals,
        st.iteration,
        st.linesearch_ok,
    )
    hist, past, t_start = st.hist, st.past, st.t_start
    del st, x0  # (as lbfgs: nothing here holds the start's vectors but the iterate)
    # one buffer, rewritten every iteration (a fresh array of the problem's size costs its page
    # faults: 0.2-0.4 s at 13M features), holds the pseudo-gradient between iterations and then, in
    # place, the direction computed from it; the kernels that need the pseudo-gradient again (the
    # direction's constraint, the orthant step) compute it from (x, g), so that no vector of it is
    # kept
    dbuf = np.empty_like(x)
    pgsq, pginf, nnz, xx = _pseudo_gradient(x, g, l1, dbuf)
    # the previous iterate's x and g once the new pair is in the history: the next line search's
    # buffers
    spare_x = spare_g = None
    snap = (x, F, f, g, it, n_evals, tuple(hist.order), tuple(past), ok)
    status, message = "max_iterations", "reached the iteration limit"

    def done(st, msg):
        x, F, _, g, it = snap[:5]  # n_evals: all evaluations, the last line search's included
        return LbfgsResult(
            x=x,
            f=F,
            g=g,
            iterations=it,
            n_evals=n_evals,
            status=st,
            message=msg,
            state_fn=lambda s=snap, sec=time.perf_counter() - t_start: make_state(hist, s, sec),  # noqa: B008
        )

    if state is None and math.sqrt(pgsq) / max(1.0, math.sqrt(xx)) <= epsilon:
        return done("converged", "pseudo-gradient norm below epsilon at the starting point")
    if state is not None:
        # the checks that ended the iteration the state was taken at (it may have been the last)
        stop = stopping_rule(
            F,
            math.sqrt(pgsq),
            math.sqrt(xx),
            pginf,
            past,
            epsilon=epsilon,
            delta=delta,
            period=period,
            gtol=gtol,
            stop_value=stop_value,
            g="pg",
        )
        if stop is not None:
            return done(*stop)
        if not ok and not len(hist):
            return done(
                "linesearch_failed",
                "the line search could not satisfy the sufficient-decrease condition",
            )
    try:
        while max_iterations is None or it < max_iterations:
            if pgsq == 0.0:
                status, message = "converged", "the pseudo-gradient is zero"
                break
            d = hist.direction(dbuf, out=dbuf)  # -H pg, over the pseudo-gradient
            dg, dd = _constrain_direction(d, x, g, l1)
            if not dg < 0.0:
                # the quasi-Newton direction has no component along -pg: restart from steepest
                # descent
                hist.clear()
                _pseudo_gradient(x, g, l1, dbuf)
                np.negative(dbuf, out=dbuf)
                d = dbuf
                dg, dd = -pgsq, pgsq
            a = 1.0 if len(hist) else 1.0 / math.sqrt(dd)

            # backtracking along the orthant-projected path; the trial points share one buffer, and
            # a rejected trial's gradient is dropped before the next evaluation: the best rejected
            # step is remembered by its length only and evaluated again if no trial is accepted
            # (rare; one more evaluation, the same point and values), so a line search holds at most
            # five vectors of the problem's size (x, g, d, the trial point, its gradient)
            accepted = None  # (a, F, f, x, g)
            best = None  # (a, F) of the best rejected trial below F
            ok = False
            xn = spare_x if spare_x is not None else np.empty_like(x)
            spare_x = None
            if fg_into is not None and spare_g is None:
                spare_g = np.empty_like(g)

            def evaluate(xn):
                if fg_into is None:
                    return fg(xn)
                return fg_into(xn, spare_g), spare_g  # noqa: B023

            for _ in range(max_linesearch):
                l1n, ddir = _orthant_step(x, d, a, g, l1, xn)
                fn, gn = evaluate(xn)
                n_evals += 1
                Fn = fn + l1 * l1n
                if ddir < 0.0 and Fn <= F + armijo * ddir:
                    accepted, ok = (a, Fn, fn, xn, gn), True
                    break
                gn = None
                if math.isfinite(Fn) and Fn < F and (best is None or Fn < best[1]):
                    best = (a, Fn)
                if ddir == 0.0:
                    break  # the step no longer moves x: nothing left to try
                a *= backtrack
            if accepted is None and best is not None:
                a = best[0]
                l1n, _ = _orthant_step(x, d, a, g, l1, xn)
                fn, gn = evaluate(xn)
                n_evals += 1
                accepted = (a, fn + l1 * l1n, fn, xn, gn)
            if accepted is None:
                status, message = (
                    "linesearch_failed",
                    "the line search found no decrease (at numerical precision?)",
                )
                break
            a, Fn, fn, xn, gn = accepted
            accepted = None
            if fg_into is None and not fresh_gradients:
                gn = np.array(gn, dtype=np.float64, copy=True)
            order = hist.prepare(xn, x, gn, g)
            x_old, g_old = x, g
            x, f, g, F = xn, fn, gn, Fn
            pgsq, pginf, nnz, xx = _pseudo_gradient(x, g, l1, dbuf)
            it += 1
            xnorm = math.sqrt(xx)
            pgnorm = math.sqrt(pgsq)
            past.append(F)
            # as lbfgs: the new pair is written over the oldest one only after the snapshot that no
            # longer holds it (no spare row: two vectors of the problem's size less)
            snap = (x, F, f, g, it, n_evals, order, tuple(past), ok)
            hist.commit()
            # the pair is written: the previous iterate's arrays are free (nothing else holds them)
            spare_x, spare_g, x_old, g_old = (
                x_old,
                (g_old if fg_into is not None else None),
                None,
                None,
            )
            if callback is not None:
                info = dict(
                    iteration=it,
                    f=F,
                    gnorm=pgnorm,
                    gnorm_inf=pginf,
                    xnorm=xnorm,
                    step=a,
                    n_evals=n_evals,
                    seconds=time.perf_counter() - t_start,
                    x=x,
                    g=g,
                    linesearch_ok=ok,
                    f_smooth=f,
                    pg=dbuf,
                    nnz=nnz,
                    state=lambda s=snap: make_state(
                        hist, s, time.perf_counter() - t_start, copy=True
                    ),
                )
                if callback(info):
                    status, message = "callback", "stopped by the caller"
                    break
            stop = stopping_rule(
                F,
                pgnorm,
                xnorm,
                pginf,
                past,
                epsilon=epsilon,
                delta=delta,
                period=period,
                gtol=gtol,
                stop_value=stop_value,
                g="pg",
            )
            if stop is not None:
                status, message = stop
                break
            if not ok and not len(hist):
                status, message = (
                    "linesearch_failed",
                    "the line search could not satisfy the sufficient-decrease condition",
                )
                break
    except KeyboardInterrupt:
        status, message = (
            "interrupted",
            "interrupted by the user; returning the last accepted point",
        )
    return done(status, message)
