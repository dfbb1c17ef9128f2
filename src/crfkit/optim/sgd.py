"""The classic stochastic gradient baselines of Schmidt et al. (2015, 6), sparse and lazy.

Every method draws one training sequence uniformly per iteration, ``n``
iterations make one effective pass, and the step size is ``eta`` (the name the
benchmark's search over powers of 10 uses):

``sg``
    Constant step: ``w <- w - eta (g_i + l2 w)``.
``asg``
    The same iterates, averaged from the first one (Polyak-Juditsky); the
    result and the per-pass weights are the average, kept lazily with Xu's
    (2010) recursion so an iteration stays O(features of the example).
``adagrad``
    Per-coordinate steps ``a_j = eta / (delta + sqrt(sum of g_j^2))`` with the
    proximal step for the L2 term, ``w_j <- (w_j - a_j g_j)/(1 + a_j l2)``
    (Duchi et al. 2011); ``delta = 1`` as in the paper.
``pegasos``
    ``eta_t = eta / (l2 t)`` (Shalev-Shwartz et al. 2011), without averaging
    and without projection.

``g_i`` is the gradient of ``-log p(y_i|x_i, w)``; the objective is crfkit's
``(1/n) sum_i nll_i + (l2/2)||w||^2``.  With sample weights the draw stays
uniform and ``g_i`` is multiplied by ``s_i = omega_i n / W`` (the objective
``(1/W) sum_i omega_i nll_i + ...``; weight k = k copies in expectation).  Defaults: ``eta = 0.1``
for sg, asg and adagrad, ``eta = 1`` for pegasos (its textbook ``1/(l2 t)``); the paper
picks ``eta`` among powers of 10 by the training objective.  ``state=`` from
``info["state"]()`` resumes a run bitwise.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from ..errors import CrfkitError, ParameterError
from ..kernels import sgd as K
from . import schema as _sc
from .sag import DEFAULT_EPOCHS, check_supported, seed_state
from .stochastic import StochasticResult, notify

#: what a resumed state may hold (checked by crfkit.training.checkpoint.validate_state before it is
#: used): sg, asg, adagrad, pegasos
STATE_SCHEMA = {
    "algorithm": _sc.text(),
    "iteration": _sc.integer(),
    "l2": _sc.number(lo=0.0),
    "x": _sc.vector("p"),
    "w": _sc.vector("p"),
    "sum": _sc.vector("p"),
    "G": _sc.vector("p"),
    "t": _sc.integer(),
    "rng": _sc.integer(hi=_sc.RNG_HI),
    "step": _sc.number(),
}

METHODS = {"sg": K.SG, "asg": K.ASG, "adagrad": K.ADAGRAD, "pegasos": K.PEGASOS}


def _optimize(name, obj, x0, *, reg, max_iterations, callback, seed, state, eta, delta=1.0):
    check_supported(name, obj, reg)
    if not (eta > 0):
        raise ParameterError(f"{name}: eta must be > 0")
    if not (delta > 0):
        raise ParameterError(f"{name}: delta must be > 0")
    method = METHODS[name]
    if method == K.PEGASOS and reg.l2 <= 0:
        raise ParameterError("pegasos needs l2 > 0 (its step is eta / (l2 t))")
    c_, s = obj.corpus, obj.space
    n, p, L = obj.n, s.n_features, s.n_labels
    l2 = float(reg.l2)
    epochs = DEFAULT_EPOCHS if max_iterations is None else int(max_iterations)
    fsc = np.zeros(K.N_FSC)
    isc = np.zeros(K.N_ISC, dtype=np.int64)
    fsc[K.F_BETA] = 1.0
    fsc[K.F_STEP] = np.nan
    if state is not None:
        if (
            state.get("algorithm") != name
            or float(state.get("l2", -1)) != l2
            or np.shape(state.get("x")) != (p,)
        ):
            raise ParameterError(
                f"{name}: state was made by another algorithm, l2 or feature space"
            )
        v = np.array(state["w"], dtype=np.float64, copy=True)
        csum = np.array(state["sum"], dtype=np.float64, copy=True)
        G = np.array(state["G"], dtype=np.float64, copy=True)
        isc[K.I_T] = int(state["t"])
        iteration = int(state["iteration"])
        rng = np.array([int(state["rng"])], dtype=np.uint64)
        fsc[K.F_STEP] = float(state["step"])
    else:
        v = np.array(x0 if x0 is not None else np.zeros(p), dtype=np.float64, copy=True)
        csum = np.zeros(p)
        G = np.zeros(p)
        iteration = 0
        rng = seed_state(seed)
    last = np.full(p, isc[K.I_T], dtype=np.int64)
    average = method == K.ASG
    maxT = max(c_.max_length, 1)
    node, edge, gbuf = np.empty((maxT, L)), np.empty((L, L)), np.zeros(p)
    oracle0, t0 = obj.n_oracle, int(isc[K.I_T])

    def weights():
        if average:
            t = int(isc[K.I_T])
            return csum / t if t else v.copy()
        return v.copy()

    def make_state():
        return {
            "algorithm": name,
            "iteration": iteration,
            "l2": l2,
            "x": weights(),
            "w": v.copy(),
            "sum": csum.copy(),
            "G": G.copy(),
            "t": int(isc[K.I_T]),
            "rng": int(rng[0]),
            "step": float(fsc[K.F_STEP]),
        }

    def close(target):
        """Bookkeeping at the end of a pass (idempotent)."""
        if method == K.ADAGRAD:
            K.adagrad_catch_up_all(v, G, last, target, eta, delta, l2)
        elif average:
            K.asg_close(v, csum, fsc)
        elif fsc[K.F_BETA] != 1.0:
            K.fold(v, csum, fsc, False)
        obj.n_oracle = oracle0 + int(isc[K.I_T]) - t0

    def finish(status, message, f=None):
        x = weights()
        return StochasticResult(
            x=x,
            f=obj.value(x, count=False) if f is None else f,
            status=status,
            message=message,
            iterations=iteration,
            state_fn=make_state,
        )

    f = None
    monitor_s = 0.0
    try:
        while iteration < epochs:
            target = (iteration + 1) * n
            rc = K.sgd_run(
                c_.seq_ptr,
                c_.tok_ptr,
                c_.attr,
                c_.val,
                c_.y,
                s.attr_ptr,
                s.feat_label,
                s.trans_index,
                s.n_state,
                s.n_trans,
                method,
                float(eta),
                l2,
                float(delta),
                target,
                v,
                csum,
                G,
                last,
                fsc,
                isc,
                rng,
                node,
                edge,
                gbuf,
                obj.full_rows,
                obj.sw,
            )
            if rc != 0:
                raise CrfkitError(
                    f"{name}: eta * l2 = {eta * l2:.3g} >= 1 makes the L2 shrinkage "
                    "1 - eta*l2 non-positive; use a smaller eta"
                )
            close(target)
            iteration += 1
            x = weights()
            t_mon = time.perf_counter()
            f = obj.value(x, count=False)
            monitor_s += time.perf_counter() - t_mon
            stop = notify(
                callback,
                iteration=iteration,
                f=f,
                x=x,
                step=float(fsc[K.F_STEP]),
                nnz=int(np.count_nonzero(x)),
                state=make_state,
                monitor_s=monitor_s,
            )
            if stop:
                return finish("stopped", "stopped by the callback", f)
        return finish("max_iterations", f"{epochs} effective passes", f)
    except KeyboardInterrupt:
        target = (iteration + 1) * n
        if isc[K.I_T] >= target:  # this pass's kernel ran (kernel calls are never cut short)
            close(target)
            iteration += 1
        return finish("interrupted", "interrupted")


def sg(
    obj,
    x0,
    *,
    reg,
    max_iterations=None,
    callback: Callable | None = None,
    seed: int = 0,
    state: dict | None = None,
    eta: float = 0.1,
) -> StochasticResult:
    """Stochastic gradient with a constant step ``eta``."""
    return _optimize(
        "sg",
        obj,
        x0,
        reg=reg,
        max_iterations=max_iterations,
        callback=callback,
        seed=seed,
        state=state,
        eta=eta,
    )


def asg(
    obj,
    x0,
    *,
    reg,
    max_iterations=None,
    callback: Callable | None = None,
    seed: int = 0,
    state: dict | None = None,
    eta: float = 0.1,
) -> StochasticResult:
    """Averaged stochastic gradient (constant step ``eta``, average of all iterates, kept
    lazily)."""
    return _optimize(
        "asg",
        obj,
        x0,
        reg=reg,
        max_iterations=max_iterations,
        callback=callback,
        seed=seed,
        state=state,
        eta=eta,
    )


def adagrad(
    obj,
    x0,
    *,
    reg,
    max_iterations=None,
    callback: Callable | None = None,
    seed: int = 0,
    state: dict | None = None,
    eta: float = 0.1,
    delta: float = 1.0,
) -> StochasticResult:
    """Diagonal AdaGrad with the proximal L2 step; ``a_j = eta / (delta + sqrt(G_j))``."""
    return _optimize(
        "adagrad",
        obj,
        x0,
        reg=reg,
        max_iterations=max_iterations,
        callback=callback,
        seed=seed,
        state=state,
        eta=eta,
        delta=delta,
    )


def pegasos(
    obj,
    x0,
    *,
    reg,
    max_iterations=None,
    callback: Callable | None = None,
    seed: int = 0,
    state: dict | None = None,
    eta: float = 1.0,
) -> StochasticResult:
    """Pegasos: step ``eta / (l2 t)`` at iteration t."""
    return _optimize(
        "pegasos",
        obj,
        x0,
        reg=reg,
        max_iterations=max_iterations,
        callback=callback,
        seed=seed,
        state=state,
        eta=eta,
    )
