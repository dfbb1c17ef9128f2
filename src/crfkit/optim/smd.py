"""Stochastic meta-descent (SMD) for CRFs (Vishwanathan, Schraudolph, Schmidt & Murphy, ICML 2006,
"Accelerated training of conditional random fields with stochastic gradient methods"), the SAG
paper's SMD baseline (Schmidt et al. 2015, section 6).

Per-coordinate gains adapted multiplicatively by the correlation of the
current gradient with ``v``, an exponential average (decay ``lam``) of the
effect of past gains on the weights, which needs a Hessian-vector product per
step; crfkit computes it exactly (the covariance of the features under the
model, by a forward-backward that differentiates the marginals along ``v``:
:mod:`crfkit.kernels.smd`).  With ``g`` and ``H`` the gradient and Hessian of
the mini-batch's regularised loss ``(1/b) sum_{i in batch} nll_i + (l2/2)|w|^2``
at ``w_t``::

    gain_t  = gain_{t-1} * max(1/2, 1 - mu g_t v_t)      (elementwise)
    w_{t+1} = w_t - gain_t g_t
    v_{t+1} = lam v_t - gain_t (g_t + lam H_t v_t)

from ``gain_0 = eta`` (every coordinate; the SAG paper's ``alpha_j = eta``, chosen
among powers of 10 by the training objective) and ``v_0 = 0``.

Settings: ``eta`` (initial gain, default 0.1), ``mu`` (meta-gain, default 0.1),
``lam`` (decay of ``v``, 0 <= lam <= 1, default 0.99), ``batch`` (examples per
step, drawn uniformly with replacement, default 1; the last step of a pass
takes what is left of it so that passes end on a step).  These defaults are
crfkit's choice, not values taken from the paper.  An effective pass is ``n``
examples (each costs one forward-backward that also gives ``H_i v``, about
twice an ordinary oracle call).  Every step updates every coordinate (the L2
term and the coupled gain/``v`` recursions make it dense; see the kernel
module), so a step costs O(features) on top of the example's sparse work: on
large sparse feature sets SMD's passes are much slower than SG's.

``state=`` from ``info["state"]()`` resumes a run bitwise; Ctrl-C returns the
last completed pass; ``x0`` warm-starts the weights (gains and ``v`` start
afresh).  L2 only; no dense or bigram-observation blocks.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from ..errors import ParameterError
from ..kernels import smd as K
from . import schema as _sc
from .sag import DEFAULT_EPOCHS, check_supported, seed_state
from .stochastic import StochasticResult, notify

#: what a resumed state may hold (checked by crfkit.training.checkpoint.validate_state before it is
#: used): smd
STATE_SCHEMA = {
    "algorithm": _sc.text(),
    "iteration": _sc.integer(),
    "x": _sc.vector("p"),
    "w": _sc.vector("p"),
    "gain": _sc.vector("p"),
    "v": _sc.vector("p"),
    "settings": _sc.mapping(),
    "seen": _sc.integer(),
    "steps": _sc.integer(),
    "mean_gain": _sc.number(),
    "rng": _sc.integer(hi=_sc.RNG_HI),
}


def smd(
    obj,
    x0,
    *,
    reg,
    max_iterations=None,
    callback: Callable | None = None,
    seed: int = 0,
    state: dict | None = None,
    eta: float = 0.1,
    mu: float = 0.1,
    lam: float = 0.99,
    batch: int = 1,
) -> StochasticResult:
    """Stochastic meta-descent with exact Hessian-vector products (see the module docstring)."""
    name = "smd"
    check_supported(name, obj, reg)
    try:
        eta, mu, lam = float(eta), float(mu), float(lam)
        if int(batch) != float(batch):
            raise ValueError
        batch = int(batch)
    except (TypeError, ValueError):
        raise ParameterError("smd: eta, mu and lam must be numbers, batch an integer") from None
    if not eta > 0:
        raise ParameterError("smd: eta (the initial gain) must be > 0")
    if not mu >= 0:
        raise ParameterError("smd: mu (the meta-gain) must be >= 0")
    if not 0.0 <= lam <= 1.0:
        raise ParameterError("smd: lam (the decay of v) must be in [0, 1]")
    if batch < 1:
        raise ParameterError("smd: batch must be >= 1")
    if getattr(obj.space, "n_bigram", 0):
        raise ParameterError("smd does not support bigram-observation features")
    c_, s = obj.corpus, obj.space
    n, p, L = obj.n, s.n_features, s.n_labels
    l2 = float(reg.l2)
    epochs = DEFAULT_EPOCHS if max_iterations is None else int(max_iterations)
    fsc = np.zeros(K.N_FSC)
    isc = np.zeros(K.N_ISC, dtype=np.int64)
    settings = {"l2": l2, "eta": eta, "mu": mu, "lam": lam, "batch": batch, "n": int(n)}
    if state is not None:
        if state.get("algorithm") != name or np.shape(state.get("w")) != (p,):
            raise ParameterError("smd: the state was made by another algorithm or feature space")
        bad = [k for k, val in settings.items() if state.get("settings", {}).get(k) != val]
        if bad:
            raise ParameterError("smd: the state was made with other settings: " + ", ".join(bad))
        w = np.array(state["w"], dtype=np.float64, copy=True)
        gain = np.array(state["gain"], dtype=np.float64, copy=True)
        v = np.array(state["v"], dtype=np.float64, copy=True)
        isc[K.I_SEEN] = int(state["seen"])
        isc[K.I_STEPS] = int(state["steps"])
        fsc[K.F_GAIN] = float(state["mean_gain"])
        iteration = int(state["iteration"])
        rng = np.array([int(state["rng"])], dtype=np.uint64)
    else:
        w = np.zeros(p) if x0 is None else np.array(x0, dtype=np.float64, copy=True)
        if w.shape != (p,):
            raise ParameterError(f"x0 has shape {w.shape}; the feature space has {p} features")
        gain = np.full(p, eta)
        v = np.zeros(p)
        fsc[K.F_GAIN] = eta
        iteration = 0
        rng = seed_state(seed)
    maxT = max(c_.max_length, 1)
    node, dnode = np.empty((maxT, L)), np.empty((maxT, L))
    edge, dedge = np.empty((L, L)), np.empty((L, L))
    gbuf, hbuf = np.zeros(p), np.zeros(p)
    oracle0, seen0 = obj.n_oracle, int(isc[K.I_SEEN])
    saved = {}

    def snapshot():
        st = {
            "algorithm": name,
            "iteration": iteration,
            "settings": dict(settings),
            "x": w.copy(),
            "w": w.copy(),
            "gain": gain.copy(),
            "v": v.copy(),
            "seen": int(isc[K.I_SEEN]),
            "steps": int(isc[K.I_STEPS]),
            "mean_gain": float(fsc[K.F_GAIN]),
            "rng": int(rng[0]),
        }
        saved["state"] = st
        return lambda: st

    state_fn = snapshot() if state is not None else None

    def finish(status, message, x, f=None):
        return StochasticResult(
            x=x,
            f=obj.value(x, count=False) if f is None else f,
            status=status,
            message=message,
            iterations=iteration,
            state_fn=state_fn,
        )

    f = None
    monitor_s = 0.0
    try:
        while iteration < epochs:
            K.smd_run(
                c_.seq_ptr,
                c_.tok_ptr,
                c_.attr,
                c_.val,
                c_.y,
                s.attr_ptr,
                s.feat_label,
                s.trans_index,
                s.n_state,
                obj.full_rows,
                batch,
                mu,
                lam,
                l2,
                (iteration + 1) * n,
                w,
                gain,
                v,
                gbuf,
                hbuf,
                fsc,
                isc,
                rng,
                node,
                dnode,
                edge,
                dedge,
            )
            obj.n_oracle = oracle0 + int(isc[K.I_SEEN]) - seen0
            iteration += 1
            state_fn = snapshot()
            x = w.copy()
            t_mon = time.perf_counter()
            f = obj.value(x, count=False)
            monitor_s += time.perf_counter() - t_mon
            stop = notify(
                callback,
                iteration=iteration,
                f=f,
                x=x,
                step=float(fsc[K.F_GAIN]),
                nnz=int(np.count_nonzero(x)),
                state=state_fn,
                monitor_s=monitor_s,
                steps=int(isc[K.I_STEPS]),
            )
            if stop:
                return finish("stopped", "stopped by the callback", x, f)
        return finish("max_iterations", f"{epochs} effective passes", w.copy(), f)
    except KeyboardInterrupt:
        # kernel calls are never cut short: the weights are those of the last pass that finished
        if isc[K.I_SEEN] >= (iteration + 1) * n:
            obj.n_oracle = oracle0 + int(isc[K.I_SEEN]) - seen0
            iteration += 1
            state_fn = snapshot()
        if state_fn is None:
            x = np.zeros(p) if x0 is None else np.array(x0, dtype=np.float64, copy=True)
        else:
            x = np.array(saved["state"]["x"], copy=True)
        return finish("interrupted", "interrupted", x)
