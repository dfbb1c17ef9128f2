"""CRFsuite's online large-margin learners: ``pa`` (passive-aggressive), ``ap`` (averaged
perceptron), ``arow`` (adaptive regularization of weights), as ``crfsuite learn -a pa|ap|arow`` runs
them.

Same defaults and semantics as CRFsuite (``train_passive_aggressive.c``,
``train_averaged_perceptron.c``, ``train_arow.c``):

* ``pa``: ``type`` 1 (0: PA, 1: PA-I, 2: PA-II), ``c`` 1.0,
  ``error_sensitive`` True (cost ``s(viterbi) - s(gold) + sqrt(#wrong
  labels)``, else ``+ 1``), ``averaging`` True;
* ``ap``: the perceptron update on the Viterbi mistakes, averaged;
* ``arow``: ``variance`` 1.0 (initial diagonal covariance), ``gamma`` 1.0;
  no averaging;
* all: ``max_iterations`` 100 epochs, each over the sequences in a new random
  order; stop once the epoch's mean loss (``ap``: the mean fraction of wrong
  labels per sequence; ``pa``, ``arow``: the mean cost) is below ``epsilon``
  (0: never).

The kernels are in :mod:`crfkit.kernels.online` (Viterbi, the sparse
difference of the two paths' features, lazy averaging).  These learners do not
minimise crfkit's objective; ``f`` in the trace is that objective at the
returned (averaged) weights, computed only with ``monitor=True``.  A PA step
whose difference vector is zero (the two paths have the same features) is
skipped (CRFsuite would divide by zero).  Sample weights (scales ``s_i = omega_i n / W``):
``ap`` multiplies sequence ``i``'s update by ``s_i``, ``pa`` of types 1 and 2 its ``C``
(``C s_i``); ``arow`` and ``pa`` of type 0 refuse weights.  ``state=`` from ``info["state"]()``
resumes bitwise (the order of epoch ``e`` is drawn from ``(seed, e)``); Ctrl-C
returns the weights of the last completed epoch.
"""

from __future__ import annotations

import math
import time

import numpy as np

from ..errors import CrfkitError, ParameterError
from ..kernels import occ as O
from ..kernels import online as K
from . import schema as _sc
from .sgdl1 import pass_order
from .stochastic import StochasticResult, last_completed, notify

#: what a resumed state may hold (checked by crfkit.training.checkpoint.validate_state before it is
#: used): pa, ap, arow (``ws``: the averaged sum, empty for arow; ``cov``: arow's only)
STATE_SCHEMA = {
    "algorithm": _sc.text(),
    "iteration": _sc.integer(),
    "x": _sc.vector("p"),
    "w": _sc.vector("p"),
    "ws": _sc.array(lambda d: [(d.p,), (0,)]),
    "cov": _sc.array(lambda d: [(d.p,), (0,)]),
    "u": _sc.number(),
    "monitor_s": _sc.number(lo=0.0, required=False),
    "settings": _sc.mapping(),
}

DEFAULT_EPOCHS = 100  # CRFsuite's max_iterations for pa, ap and arow
BLOCK = 2048


def _run(
    name,
    method,
    obj,
    x0,
    *,
    reg,
    max_iterations,
    callback,
    seed,
    state,
    epsilon,
    monitor,
    pa_type=1,
    c=1.0,
    error_sensitive=True,
    averaging=True,
    variance=1.0,
    gamma=1.0,
):
    if getattr(obj.space, "n_dense", 0) > 0:
        raise CrfkitError(f"{name} does not support dense features yet")
    try:
        epsilon, c, variance, gamma = float(epsilon), float(c), float(variance), float(gamma)
        pa_type = int(pa_type)
    except (TypeError, ValueError):
        raise ParameterError(
            f"{name}: type must be an integer; c, variance, gamma, epsilon numbers"
        ) from None
    if pa_type not in (0, 1, 2):
        raise ParameterError(f"{name}: type must be 0 (PA), 1 (PA-I) or 2 (PA-II), got {pa_type}")
    if not (c > 0 and variance > 0 and gamma > 0):
        raise ParameterError(f"{name}: c, variance and gamma must be > 0")
    if getattr(obj, "weighted", False) and (method == K.AROW or (method == K.PA and pa_type == 0)):
        raise ParameterError(
            f"{'arow' if method == K.AROW else 'pa with type=0'} does not support sample weights "
            "(its step has no per-example constant to scale); use ap, pa with type 1 or 2 "
            "(C is multiplied by the weight), or lbfgs"
        )
    if max_iterations is not None and int(max_iterations) < 0:
        raise ParameterError(f"{name}: max_iterations must be >= 0")
    cr, s = obj.corpus, obj.space
    n, d = obj.n, s.n_features
    epochs = DEFAULT_EPOCHS if max_iterations is None else int(max_iterations)
    averaged = method == K.AP or (method == K.PA and bool(averaging))
    settings = {
        "algorithm": name,
        "n": int(n),
        "n_features": int(d),
        "seed": int(seed),
        "type": pa_type,
        "c": c,
        "error_sensitive": bool(error_sensitive),
        "averaging": bool(averaging),
        "variance": variance,
        "gamma": gamma,
    }
    if state is not None:
        bad = [k for k, val in settings.items() if state.get("settings", {}).get(k) != val]
        if bad:
            raise ParameterError(
                f"{name}: the state was made with other settings: "
                + ", ".join(
                    f"{k}={state.get('settings', {}).get(k)!r} there, {settings[k]!r} now"
                    for k in bad
                )
            )
        w = np.array(state["w"], dtype=np.float64, copy=True)
        ws = np.array(state["ws"], dtype=np.float64, copy=True)
        cov = np.array(state["cov"], dtype=np.float64, copy=True)
        u = float(state["u"])
        epoch = int(state["iteration"])
        monitor_s = float(state.get("monitor_s", 0.0))
    else:
        w = np.zeros(d) if x0 is None else np.array(x0, dtype=np.float64, copy=True)
        if w.shape != (d,):
            raise ParameterError(f"x0 has shape {w.shape}; the feature space has {d} features")
        ws = np.zeros(
            d if method != K.AROW else 0
        )  # the kernel writes it for pa (averaged or not) and ap
        cov = np.full(d if method == K.AROW else 0, variance)
        u = 1.0
        epoch = 0
        monitor_s = 0.0
    need = {"w": d, "ws": d if method != K.AROW else 0, "cov": d if method == K.AROW else 0}
    for key, arr in (("w", w), ("ws", ws), ("cov", cov)):
        if arr.shape != (need[key],):
            raise ParameterError(
                f"{name}: the state's {key} has shape {arr.shape}, expected ({need[key]},)"
            )
    dbuf = np.zeros(d)
    stamp = np.full(d, -1, dtype=np.int64)
    touched = np.empty(d, dtype=np.int64)
    Tmax = max(int(cr.max_length), 1)
    path = np.empty(Tmax, dtype=np.int64)
    ok0, onk, lab = O.layout(
        cr.tok_ptr, cr.attr, s.attr_ptr, s.feat_label, obj.full_rows, s.n_labels
    )
    args = (
        cr.seq_ptr,
        cr.tok_ptr,
        ok0,
        onk,
        cr.val,
        lab,
        cr.y,
        s.trans_index,
        s.n_state,
        s.n_trans,
    )
    score, trans = np.empty((Tmax, s.n_labels)), np.empty((s.n_labels, s.n_labels))

    def weights():
        if averaged:
            out = np.empty(d)
            K.average(w, ws, u, out)
            return out
        return w.copy()

    def snapshot():
        x, w_, ws_, cov_, u_, ep, ms = (
            weights(),
            w.copy(),
            ws.copy(),
            cov.copy(),
            u,
            epoch,
            monitor_s,
        )
        return lambda: {
            "algorithm": name,
            "iteration": int(ep),
            "x": x,
            "w": w_,
            "ws": ws_,
            "cov": cov_,
            "u": float(u_),
            "monitor_s": float(ms),
            "settings": dict(settings),
        }

    state_fn = snapshot() if epoch > 0 else None
    status, message = "max_iterations", f"{epochs} epochs"
    f, x = float("nan"), weights()
    try:
        while epoch < epochs:
            order = pass_order(seed, epoch, n)
            scal = np.array([u, 0.0])
            stamp[:] = -1
            for b0 in range(0, n, BLOCK):
                b1 = min(n, b0 + BLOCK)
                K.run_online(
                    *args,
                    order,
                    b0,
                    b1,
                    method,
                    pa_type,
                    c,
                    bool(error_sensitive),
                    gamma,
                    w,
                    ws,
                    cov,
                    scal,
                    dbuf,
                    stamp,
                    touched,
                    path,
                    score,
                    trans,
                    obj.sw,
                )
                obj.n_oracle += b1 - b0
            u = float(scal[K.U])
            loss = float(scal[K.LOSS])
            epoch += 1
            if not np.all(np.isfinite(w)):
                raise CrfkitError(f"{name}: non-finite weights in epoch {epoch}")
            x = weights()
            state_fn = snapshot()
            tm = time.perf_counter()
            f = obj.value(x, count=False) if monitor else float("nan")
            monitor_s += time.perf_counter() - tm
            if callback is not None:
                stop = notify(
                    callback,
                    iteration=epoch,
                    f=f,
                    x=x,
                    step=float("nan"),
                    nnz=int(np.count_nonzero(x)),
                    state=state_fn,
                    examples_seen=epoch * n,
                    monitor_s=monitor_s,
                )
                if stop:
                    status, message = "stopped", f"stopped by the callback after epoch {epoch}"
                    break
            if loss / n < epsilon:
                status, message = (
                    "converged",
                    f"mean loss {loss / n:.6g} < epsilon={epsilon:g} in epoch {epoch}",
                )
                break
    except KeyboardInterrupt:
        status, message = "interrupted", "interrupted"
        x, epoch = last_completed(state_fn, x0, d)
        f = float("nan")
    if not math.isfinite(f):
        f = obj.value(x, count=False)
    return StochasticResult(
        x=x, f=f, status=status, message=message, iterations=int(epoch), state_fn=state_fn
    )


def pa(
    obj,
    x0,
    *,
    reg,
    max_iterations=None,
    callback=None,
    seed: int = 0,
    state: dict | None = None,
    type: int = 1,
    c: float = 1.0,
    error_sensitive: bool = True,
    averaging: bool = True,
    epsilon: float = 0.0,
    monitor: bool = True,
) -> StochasticResult:
    """Passive-aggressive (``crfsuite learn -a pa``): ``type`` 0 | 1 | 2, ``c``,
    ``error_sensitive``, ``averaging``, ``epsilon``; ``max_iterations`` epochs (default 100)."""
    return _run(
        "pa",
        K.PA,
        obj,
        x0,
        reg=reg,
        max_iterations=max_iterations,
        callback=callback,
        seed=seed,
        state=state,
        epsilon=epsilon,
        monitor=monitor,
        pa_type=type,
        c=c,
        error_sensitive=error_sensitive,
        averaging=averaging,
    )


def ap(
    obj,
    x0,
    *,
    reg,
    max_iterations=None,
    callback=None,
    seed: int = 0,
    state: dict | None = None,
    epsilon: float = 0.0,
    monitor: bool = True,
) -> StochasticResult:
    """Averaged structured perceptron (``crfsuite learn -a ap``); ``max_iterations`` epochs (default
    100)."""
    return _run(
        "ap",
        K.AP,
        obj,
        x0,
        reg=reg,
        max_iterations=max_iterations,
        callback=callback,
        seed=seed,
        state=state,
        epsilon=epsilon,
        monitor=monitor,
    )


def arow(
    obj,
    x0,
    *,
    reg,
    max_iterations=None,
    callback=None,
    seed: int = 0,
    state: dict | None = None,
    variance: float = 1.0,
    gamma: float = 1.0,
    epsilon: float = 0.0,
    monitor: bool = True,
) -> StochasticResult:
    """AROW (``crfsuite learn -a arow``): ``variance`` (initial), ``gamma``; ``max_iterations``
    epochs (default 100)."""
    return _run(
        "arow",
        K.AROW,
        obj,
        x0,
        reg=reg,
        max_iterations=max_iterations,
        callback=callback,
        seed=seed,
        state=state,
        epsilon=epsilon,
        monitor=monitor,
        variance=variance,
        gamma=gamma,
    )
