"""Stochastic average gradient methods for CRFs (Schmidt, Babanezhad, Ahmed, Defazio,
Clifton & Sarkar, 2015).

Five optimizers, each following the protocol of :mod:`crfkit.optim.stochastic`
(``max_iterations`` counts effective passes; the callback runs once per pass):

``sag``
    Algorithm 1 of the paper: ``w <- (1 - a*l2) w - (a/m) d`` where ``d`` is
    the sum of the last loss gradient seen for every example and ``m`` the
    number of examples seen so far.  The step is ``a = 1/(L_g + l2)`` with
    ``L_g`` estimated by the Lipschitz line search of Algorithm 2 (forward
    passes only, run when ``||g_i||^2 > 1e-8``) and multiplied by
    ``2^(-1/n)`` after every step.  It stops (status ``converged``) when
    ``m == n`` and ``||d/n + l2*w||_inf < delta`` (4.1), tested at the end of
    every pass.
``sag-nus``
    The non-uniform sampling of Schmidt, Le Roux & Bach (2013, 5.5), which
    the paper summarises in 5: an unseen example with probability
    ``(n-m)/n``, otherwise a seen one, half of the time uniformly and half
    proportionally to ``L_i + l2``; ``L_i`` starts at ``L0`` and is halved
    each time example ``i`` comes back before its line search; the step is
    ``((n-m)/n)/L + (m/n)(1/(2L) + 1/(2 Lbar))`` with ``L = L_max + l2``
    (``L_max`` the largest ``L_i`` found, decayed by ``2^(-1/n)`` per step)
    and ``Lbar = mean L_i + l2``.
``sag-nus*``
    The paper's scheme (5): with probability 1/2 an example uniformly, with
    1/2 one of the seen examples proportionally to ``L_i``; ``L_i`` starts
    at ``0.5*Lbar`` the first time ``i`` is drawn and becomes ``0.9*L_i``
    before the line search each later time; step ``0.5 (1/L + 1/Lbar)`` with
    ``Lbar = mean_i L_i + l2`` over seen examples and ``L = L_max + l2``.
    ``lmax`` says what ``L_max`` is.  ``"decayed"`` (default): the largest
    ``L_i`` the visits have returned, multiplied by ``2^(-1/n)`` after every
    step, as ``sag-nus`` and the 2013 SAG code keep it: section 4 of the
    paper defines the ``L`` of the step ``1/L`` as this online estimate of
    the largest Lipschitz constant (Algorithm 1 raises it by the line search
    and decreases it by ``2^(-1/n)`` per step "to allow ... a more aggressive
    step-size as we approach the solution"), and section 5 asks for a step
    "larger than 1/L" by averaging it with ``1/Lbar``, listing what it
    changes from the 2013 scheme (sampling, step formula, the start and
    decrease of ``L_i``) and not this.  ``"current"``: ``max_i L_i`` over the
    seen examples' current estimates, the literal ``L = max_j L_j`` of the
    paper's section 5 opening (which speaks of the true constants).
    With line-search skipping (``ls_skip``, on by default here): Le Priol,
    Touati & Lacoste-Julien (section 4) describe the authors' code as
    "SAG-NUS* (improved version of SAG with a line-search skipping scheme)"
    without spelling the scheme out; ours: after k line searches of example
    i in a row that accepted their starting ``0.9*L_i`` at once, the next
    ``2^(k-1)`` visits of i skip the line search (no forward pass, ``L_i``
    kept), and a line search that has to double ``L_i`` resets k.  It cuts
    the evaluations per step from 2.2 to 1.4 (OCR, first 30 passes) and from
    2.3 to 1.7 (CoNLL-2000, first 10 passes), and the passes to
    ``f - f* <= 1e-4 f*`` from 87 to 50 (OCR) and from 65 to 47 (CoNLL-2000).
    ``ls_skip=False`` is the scheme exactly as section 5 of the paper states
    it; ``sag-nus`` and ``saga-nus`` take ``ls_skip=True`` as an option.
``saga``, ``saga-nus``
    The update of Proposition 1: ``w <- w - a [ (g_j - s_j)/(n p_j) +
    (1/n) sum_i s_i + l2 w ]`` (the regulariser's gradient exact, ``s_i`` the
    stored loss gradients, 0 until first stored).  ``step="a"`` (default of
    ``saga``): ``s_j`` replaced by the new gradient, ``a = n p_min / (4L +
    n l2)``; ``step="b"`` (default of ``saga-nus``): the memory is refreshed
    at a second, uniformly drawn example ``r`` (a second oracle call per
    iteration) and ``a = 1/(4L)``.  ``saga`` samples uniformly (``L`` from
    the line search as in ``sag``); ``saga-nus`` samples ``p_j = L_j /
    sum_i L_i`` (an example without an estimate counting as ``Lbar``; ``L_i``
    maintained as in ``sag-nus*``) and takes ``L = Lbar`` in rule (b), the
    Lipschitz constant of the reweighted gradients ``g_j/(n p_j)``.  Rule
    (a)'s ``L`` is ``L_max`` (or ``Lbar`` where larger while some example has
    no estimate), ``L_max`` as ``lmax`` says (decayed by default, as in
    ``sag-nus*``; ``lmax`` goes with ``step="a"`` only).

Memory (4.2, "Mixed"): per example the node marginals (T_i x L) and the
transition gradient (one value per transition feature) from its last visit;
``g_old`` is rebuilt from them, never stored as a vector.  ``store`` is their
precision: ``"float32"`` (default) halves the memory; the kernels then take
the new gradient that enters ``d`` from the rounded stored values, so ``d``
stays exactly the sum of the gradients the store rebuilds and the method
still converges to the optimum (the fixed point moves by the rounding of
the marginals, relative 1e-7: sag-nus*'s f - f* at 10, 20, 30 passes and
its passes to 1e-4 f* are the float64 run's on OCR and CoNLL-2000, and on
OCR its f - f* matches to three digits down to 1.6e-8 at 120 passes).
``"float64"`` stores them exactly.  A resumed or
warm-started state keeps the precision it was made with.  The updates are
sparse and lazy (see :mod:`crfkit.kernels.sag`): an iteration costs
O(features of the example).  The callback's ``state_bytes`` is the memory of
these stored marginals and transition gradients, ``naive_state_bytes`` that of
naive SAG (``n * n_features * 8``).

Effective passes: every oracle call and every forward pass of the line search
counts as one evaluation (as in the paper's plots); a pass ends when the
evaluations reach the next multiple of ``n``.

Warm start (footnote 1): ``state=`` a state from an earlier run (a callback's
``info["state"]()`` or ``result.state``).  When it was made with the same
algorithm and ``l2`` the run resumes it exactly (bitwise the uninterrupted
run, ``max_iterations`` counting the whole run); made with another ``l2`` (or
another method of this module), the new run starts from its weights, stored
marginals, ``d``, ``m`` and Lipschitz estimates: the stored loss gradients do
not depend on ``l2``, so the path over a sequence of regularisation values
starts each problem with a full memory.  Parameters: ``delta`` (stopping
tolerance, default 1e-5 on the objective's gradient scale), ``L0`` (the
initial Lipschitz estimate, default 1), ``store`` (see Memory), for the SAGA
methods ``step``, for the per-example ``L_i`` methods ``ls_skip`` (see
``sag-nus*``), and for ``sag-nus*`` and ``saga-nus`` (rule a) ``lmax``
(``"decayed"`` or ``"current"``, see ``sag-nus*``; a resumed state carries
``L_max``, so the same ``lmax`` resumes bitwise).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from ..errors import CrfkitError, ParameterError
from ..kernels import sag as K
from . import schema as _sc
from .stochastic import StochasticResult, notify

#: what a resumed state may hold (checked by crfkit.training.checkpoint.validate_state before it is
#: used): the SAG family, keys of :meth:`SagRun.state`
STATE_SCHEMA = {
    "algorithm": _sc.text(),
    "iteration": _sc.integer(),
    "l2": _sc.number(lo=0.0),
    "x": _sc.vector("p"),
    "d": _sc.vector("p"),
    "node": _sc.array(lambda d: [(d.T, d.L)], dtypes=_sc.F4F8),
    "trans": _sc.array(lambda d: [(d.n, d.n_trans)], dtypes=_sc.F4F8),
    "perm": _sc.vector("n", dtypes=_sc.I8, lo=0, hi=lambda d: d.n - 1),
    "kperm": _sc.vector("n", dtypes=_sc.I8, lo=0, hi=lambda d: d.n - 1),
    "Li": _sc.vector("n", lo=0.0),
    "ls_skip_left": _sc.vector("n", dtypes=_sc.I8, lo=0, hi=_sc.BIG, required=False),
    "ls_skip_streak": _sc.vector("n", dtypes=_sc.I8, lo=0, hi=_sc.BIG, required=False),
    "m": _sc.integer(hi=lambda d: d.n),
    "mk": _sc.integer(hi=lambda d: d.n),
    "evals": _sc.integer(),
    "steps": _sc.integer(),
    "L": _sc.number(lo=0.0),
    "Lmax": _sc.number(lo=0.0),
    "step": _sc.number(),
    "rng": _sc.integer(hi=_sc.RNG_HI),
}

DEFAULT_EPOCHS = 100
METHODS = {
    "sag": K.SAG,
    "sag-nus": K.SAG_NUS,
    "sag-nus*": K.SAG_NUS_STAR,
    "saga": K.SAGA,
    "saga-nus": K.SAGA_NUS,
}


def check_supported(name: str, obj, reg) -> None:
    """The settings these kernels do not handle: an L1 term, dense real-valued feature blocks."""
    if reg.l1 > 0:
        raise ParameterError(
            f"{name} optimizes the L2-regularised objective only; l1 > 0 is not supported "
            "(use lbfgs/owlqn or sgd-l1)"
        )
    if getattr(obj.space, "n_dense", 0) > 0:
        raise CrfkitError(f"{name} does not support dense features yet")


def seed_state(seed: int) -> np.ndarray:
    """The generator state for a seed (splitmix64 of the seed, so nearby seeds give unrelated
    streams)."""
    return np.array(
        [(int(seed) * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) % (1 << 64)], dtype=np.uint64
    )


class _Run:
    """The arrays of one SAG-family run and their (de)serialisation."""

    def __init__(
        self,
        name: str,
        obj,
        x0,
        l2: float,
        seed: int,
        L0: float,
        state: dict | None,
        store=np.float32,
    ):
        c, s = obj.corpus, obj.space
        self.name, self.obj, self.l2 = name, obj, float(l2)
        n, p, L = obj.n, s.n_features, s.n_labels
        self.n, self.p = n, p
        self.n_trans = s.n_trans
        maxT = max(c.max_length, 1)
        # scratch
        self.node = np.empty((maxT, L))
        self.edge = np.empty((L, L))
        self.score = np.empty((maxT, L))
        self.shift = np.empty((maxT, L))
        self.sc2 = np.empty((maxT, L))
        self.es = np.empty((maxT, L))
        self.alpha = np.empty((maxT, L))
        self.scale = np.empty(maxT)
        self.pm = np.empty((maxT, L))
        self.dp = np.empty((maxT, L))
        # per attribute (plus one entry for the transition block): see
        # kernels.sag.catch_up_emissions
        self.full = obj.full_rows
        na = len(s.attr_ptr) - 1
        self.alast = np.zeros(na + 1, dtype=np.int64)
        self.mark = np.zeros((na + 1, 2), dtype=np.int64)
        occ = K.max_occurrences(c.seq_ptr, c.tok_ptr)
        self.ulist = np.zeros(occ, dtype=np.int64)
        self.ulist2 = np.zeros(occ, dtype=np.int64)
        self.obase = np.zeros(occ, dtype=np.int64)
        # example-local gradient and gradient-difference buffers
        nloc = K.max_coordinates(c.seq_ptr, c.tok_ptr, c.attr, s.attr_ptr, self.n_trans)
        self.gloc = np.zeros(nloc)
        self.dloc = np.zeros(nloc)
        self.dloc2 = np.zeros(nloc)
        self.cum = np.zeros(n + 3)
        P = K.tree_size(n)
        self.tsum = np.zeros(2 * P)
        self.tmax = np.zeros(2 * P)
        self.tmin = np.zeros(2 * P)
        self.fsc = np.zeros(K.N_FSC)
        self.isc = np.zeros(K.N_ISC, dtype=np.int64)
        resume = (
            state is not None
            and state.get("algorithm") == name
            and float(state.get("l2", -1)) == self.l2
        )
        if state is None:
            self.v = np.array(x0 if x0 is not None else np.zeros(p), dtype=np.float64, copy=True)
            self.d = np.zeros(p)
            self.node_store = np.zeros((c.n_tokens, L), dtype=store)
            self.trans_store = np.zeros((n, self.n_trans), dtype=store)
            self.perm = np.arange(n, dtype=np.int64)
            self.kperm = np.arange(n, dtype=np.int64)
            self.Li = np.zeros(n)
            self.skip_left = np.zeros(n, dtype=np.int64)
            self.skip_streak = np.zeros(n, dtype=np.int64)
            self.fsc[K.F_LG] = L0
            self.fsc[K.F_LMAX] = L0
            self.fsc[K.F_STEP] = np.nan
        else:
            self._check_state(state, n, p, c.n_tokens, L)
            self.v = np.array(state["x"], dtype=np.float64, copy=True)
            self.d = np.array(state["d"], dtype=np.float64, copy=True)
            # the store keeps the precision it was made with: d is the sum of what it rebuilds
            sdt = np.float32 if np.asarray(state["node"]).dtype == np.float32 else np.float64
            self.node_store = np.array(state["node"], dtype=sdt, copy=True)
            self.trans_store = np.array(state["trans"], dtype=sdt, copy=True)
            self.perm = np.array(state["perm"], dtype=np.int64, copy=True)
            self.kperm = np.array(state["kperm"], dtype=np.int64, copy=True)
            self.Li = np.array(state["Li"], dtype=np.float64, copy=True)
            # line-search skipping counters (states written before they existed: none)
            self.skip_left = np.array(
                state.get("ls_skip_left", np.zeros(n)), dtype=np.int64, copy=True
            )
            self.skip_streak = np.array(
                state.get("ls_skip_streak", np.zeros(n)), dtype=np.int64, copy=True
            )
            self.isc[K.I_M] = int(state["m"])
            self.isc[K.I_MK] = int(state["mk"])
            self.fsc[K.F_LG] = float(state["L"])
            self.fsc[K.F_LMAX] = float(state["Lmax"])
            self.fsc[K.F_STEP] = float(state["step"])
        self.fsc[K.F_BETA] = 1.0
        self.pos = np.empty(n, dtype=np.int64)
        self.pos[self.perm] = np.arange(n)
        self.kpos = np.empty(n, dtype=np.int64)
        self.kpos[self.kperm] = np.arange(n)
        K.tree_build(self.tsum, self.tmax, self.tmin, self.Li)
        if resume:
            self.iteration = int(state["iteration"])
            self.isc[K.I_EVALS] = int(state["evals"])
            self.isc[K.I_ITER] = int(state["steps"])
            self.rng = np.array([int(state["rng"])], dtype=np.uint64)
        else:
            self.iteration = 0
            self.rng = seed_state(seed)

    @staticmethod
    def _check_state(state, n, p, n_tokens, L):
        for key in (
            "x",
            "d",
            "node",
            "trans",
            "perm",
            "kperm",
            "Li",
            "m",
            "mk",
            "L",
            "Lmax",
            "step",
        ):
            if key not in state:
                raise ParameterError(f"state lacks {key!r}: not a state of crfkit.optim.sag")
        if (
            np.shape(state["x"]) != (p,)
            or np.shape(state["node"]) != (n_tokens, L)
            or len(state["perm"]) != n
        ):
            raise ParameterError("state was made for another corpus or feature space")

    def state(self) -> dict:
        """The resumable state at the end of the last pass (arrays copied)."""
        return {
            "algorithm": self.name,
            "iteration": self.iteration,
            "l2": self.l2,
            "x": self.v.copy(),
            "d": self.d.copy(),
            "node": self.node_store.copy(),
            "trans": self.trans_store.copy(),
            "perm": self.perm.copy(),
            "kperm": self.kperm.copy(),
            "Li": self.Li.copy(),
            "ls_skip_left": self.skip_left.copy(),
            "ls_skip_streak": self.skip_streak.copy(),
            "m": int(self.isc[K.I_M]),
            "mk": int(self.isc[K.I_MK]),
            "evals": int(self.isc[K.I_EVALS]),
            "steps": int(self.isc[K.I_ITER]),
            "L": float(self.fsc[K.F_LG]),
            "Lmax": float(self.fsc[K.F_LMAX]),
            "step": float(self.fsc[K.F_STEP]),
            "rng": int(self.rng[0]),
        }

    @property
    def state_bytes(self) -> int:
        return int(self.node_store.nbytes + self.trans_store.nbytes)

    @property
    def naive_state_bytes(self) -> int:
        return int(self.n) * int(self.p) * 8

    def run_until(
        self,
        method: int,
        step_rule: int,
        L0: float,
        target: int,
        ls_skip: bool = False,
        lmax_decayed: bool = False,
    ) -> int:
        c, s = self.obj.corpus, self.obj.space
        return K.sag_run(
            c.seq_ptr,
            c.tok_ptr,
            c.attr,
            c.val,
            c.y,
            s.attr_ptr,
            s.feat_label,
            self.full,
            s.trans_index,
            s.n_state,
            self.n_trans,
            method,
            step_rule,
            self.l2,
            float(L0),
            int(target),
            bool(ls_skip),
            bool(lmax_decayed),
            self.v,
            self.d,
            self.alast,
            self.cum,
            self.node_store,
            self.trans_store,
            self.perm,
            self.pos,
            self.kperm,
            self.kpos,
            self.Li,
            self.skip_left,
            self.skip_streak,
            self.tsum,
            self.tmax,
            self.tmin,
            self.fsc,
            self.isc,
            self.rng,
            self.mark,
            self.ulist,
            self.ulist2,
            self.obase,
            self.node,
            self.edge,
            self.gloc,
            self.dloc,
            self.dloc2,
            self.pm,
            self.dp,
            self.score,
            self.shift,
            self.sc2,
            self.es,
            self.alpha,
            self.scale,
        )

    def close_window(self) -> None:
        if self.isc[K.I_T] != 0 or self.fsc[K.F_BETA] != 1.0:
            s = self.obj.space
            K.full_catch_up(
                s.attr_ptr,
                s.n_state,
                self.n_trans,
                self.v,
                self.d,
                self.alast,
                self.cum,
                self.fsc,
                self.isc,
            )

    def lipschitz(self, method: int, lmax_decayed: bool = False) -> float:
        if method in (K.SAG, K.SAGA):
            return float(self.fsc[K.F_LG])
        if method == K.SAG_NUS or lmax_decayed:
            return float(self.fsc[K.F_LMAX])
        return float(self.tmax[1]) if self.isc[K.I_MK] > 0 else float("nan")


STORES = {"float32": np.float32, "float64": np.float64}
LMAX_RULES = ("decayed", "current")


def _optimize(
    name: str,
    obj,
    x0,
    *,
    reg,
    max_iterations,
    callback,
    seed,
    state,
    delta,
    L0,
    step_rule,
    ls_skip=False,
    store="float32",
    lmax="current",
):
    check_supported(name, obj, reg)
    if lmax not in LMAX_RULES:
        raise ParameterError(f"{name}: lmax must be 'decayed' or 'current', not {lmax!r}")
    lmax_decayed = lmax == "decayed"
    if store not in STORES:
        raise ParameterError(f"{name}: store must be 'float32' or 'float64', not {store!r}")
    if not (delta >= 0):
        raise ParameterError(f"{name}: delta must be >= 0")
    if not (L0 > 0):
        raise ParameterError(f"{name}: L0 must be > 0")
    method = METHODS[name]
    epochs = DEFAULT_EPOCHS if max_iterations is None else int(max_iterations)
    run = _Run(name, obj, x0, reg.l2, seed, L0, state, STORES[store])
    n, l2 = run.n, run.l2
    evals0 = int(run.isc[K.I_EVALS])
    oracle0 = obj.n_oracle

    def sync_counter():
        obj.n_oracle = oracle0 + int(run.isc[K.I_EVALS]) - evals0

    def finish(status, message, f=None):
        x = run.v.copy()
        return StochasticResult(
            x=x,
            f=obj.value(x, count=False) if f is None else f,
            status=status,
            message=message,
            iterations=run.iteration,
            state_fn=run.state,
        )

    f = None
    monitor_s = 0.0
    try:
        while run.iteration < epochs:
            target = (run.iteration + 1) * n
            rc = run.run_until(method, step_rule, L0, target, ls_skip, lmax_decayed)
            run.close_window()
            sync_counter()
            if rc != 0:
                raise CrfkitError(
                    f"{name}: the step {run.fsc[K.F_STEP]:.3g} times l2={l2:.3g} reached 1; "
                    "the Lipschitz estimates are inconsistent"
                )
            run.iteration += 1
            x = run.v
            t_mon = time.perf_counter()
            f = obj.value(x, count=False)
            monitor_s += time.perf_counter() - t_mon
            m = int(run.isc[K.I_M])
            gnorm_inf = float(np.abs(run.d / n + l2 * x).max()) if run.p else 0.0
            stop = notify(
                callback,
                iteration=run.iteration,
                f=f,
                x=x.copy(),
                step=float(run.fsc[K.F_STEP]),
                gnorm_inf=gnorm_inf,
                nnz=int(np.count_nonzero(x)),
                state=run.state,
                state_bytes=run.state_bytes,
                naive_state_bytes=run.naive_state_bytes,
                lipschitz=run.lipschitz(method, lmax_decayed),
                examples_seen=m,
                steps=int(run.isc[K.I_ITER]),
                monitor_s=monitor_s,
            )
            if m == n and gnorm_inf < delta:
                return finish(
                    "converged", f"||d/n + l2*w||_inf = {gnorm_inf:.3g} < delta = {delta:g}", f
                )
            if stop:
                return finish("stopped", "stopped by the callback", f)
        return finish("max_iterations", f"{epochs} effective passes", f)
    except KeyboardInterrupt:
        # a kernel call is never cut short: if this pass's kernel ran, finish its bookkeeping
        if run.isc[K.I_EVALS] >= (run.iteration + 1) * n:
            run.close_window()
            sync_counter()
            run.iteration += 1
        return finish("interrupted", "interrupted")


def sag(
    obj,
    x0,
    *,
    reg,
    max_iterations=None,
    callback: Callable | None = None,
    seed: int = 0,
    state: dict | None = None,
    delta: float = 1e-5,
    L0: float = 1.0,
    store: str = "float32",
) -> StochasticResult:
    """SAG for CRFs (Algorithm 1 with the line search of Algorithm 2); see the module docstring."""
    return _optimize(
        "sag",
        obj,
        x0,
        reg=reg,
        max_iterations=max_iterations,
        callback=callback,
        seed=seed,
        state=state,
        delta=delta,
        L0=L0,
        step_rule=K.STEP_A,
        store=store,
    )


def sag_nus(
    obj,
    x0,
    *,
    reg,
    max_iterations=None,
    callback: Callable | None = None,
    seed: int = 0,
    state: dict | None = None,
    delta: float = 1e-5,
    L0: float = 1.0,
    ls_skip: bool = False,
    store: str = "float32",
) -> StochasticResult:
    """SAG with the non-uniform sampling of Schmidt, Le Roux & Bach (2013, 5.5); see the module
    docstring."""
    return _optimize(
        "sag-nus",
        obj,
        x0,
        reg=reg,
        max_iterations=max_iterations,
        callback=callback,
        seed=seed,
        state=state,
        delta=delta,
        L0=L0,
        step_rule=K.STEP_A,
        ls_skip=ls_skip,
        store=store,
    )


def sag_nus_star(
    obj,
    x0,
    *,
    reg,
    max_iterations=None,
    callback: Callable | None = None,
    seed: int = 0,
    state: dict | None = None,
    delta: float = 1e-5,
    L0: float = 1.0,
    ls_skip: bool = True,
    store: str = "float32",
    lmax: str = "decayed",
) -> StochasticResult:
    """SAG-NUS*, the sampling and step of 5 of the paper; see the module docstring."""
    return _optimize(
        "sag-nus*",
        obj,
        x0,
        reg=reg,
        max_iterations=max_iterations,
        callback=callback,
        seed=seed,
        state=state,
        delta=delta,
        L0=L0,
        step_rule=K.STEP_A,
        ls_skip=ls_skip,
        store=store,
        lmax=lmax,
    )


def _step_rule(name, step):
    if step not in ("a", "b"):
        raise ParameterError(f"{name}: step must be 'a' or 'b' (Proposition 1), not {step!r}")
    return K.STEP_A if step == "a" else K.STEP_B


def saga(
    obj,
    x0,
    *,
    reg,
    max_iterations=None,
    callback: Callable | None = None,
    seed: int = 0,
    state: dict | None = None,
    delta: float = 1e-5,
    L0: float = 1.0,
    step: str = "a",
    store: str = "float32",
) -> StochasticResult:
    """SAGA with uniform sampling, the update of Proposition 1; see the module docstring."""
    return _optimize(
        "saga",
        obj,
        x0,
        reg=reg,
        max_iterations=max_iterations,
        callback=callback,
        seed=seed,
        state=state,
        delta=delta,
        L0=L0,
        step_rule=_step_rule("saga", step),
        store=store,
    )


def saga_nus(
    obj,
    x0,
    *,
    reg,
    max_iterations=None,
    callback: Callable | None = None,
    seed: int = 0,
    state: dict | None = None,
    delta: float = 1e-5,
    L0: float = 1.0,
    step: str = "b",
    ls_skip: bool = False,
    store: str = "float32",
    lmax: str | None = None,
) -> StochasticResult:
    """SAGA sampling proportionally to the L_i, the update of Proposition 1; see the module
    docstring."""
    rule = _step_rule("saga-nus", step)
    if lmax is not None and rule == K.STEP_B:
        raise ParameterError(
            "saga-nus: lmax sets the L of step rule 'a'; rule 'b' (the default) takes "
            "a = 1/(4 Lbar) and no L_max (give step=a with it)"
        )
    return _optimize(
        "saga-nus",
        obj,
        x0,
        reg=reg,
        max_iterations=max_iterations,
        callback=callback,
        seed=seed,
        state=state,
        delta=delta,
        L0=L0,
        step_rule=rule,
        ls_skip=ls_skip,
        store=store,
        lmax=lmax if lmax is not None else ("decayed" if rule == K.STEP_A else "current"),
    )
