"""Dual methods on clique marginals: Prox-SDCA with duality-gap sampling (Le Priol, Touati &
Lacoste-Julien, "Adaptive Stochastic Dual Coordinate Ascent for Conditional Random Fields") and
online exponentiated gradient (Collins, Globerson, Koo, Carreras & Bartlett, JMLR 2008).

Both follow the protocol of :mod:`crfkit.optim.stochastic` and share one dual store.

The dual.  For the objective ``P(w) = (1/n) sum_i -log p(y_i|x_i, w) + (l2/2) ||w||^2`` the dual
variable of sequence i is a distribution over its labellings, kept as its clique marginals: node
marginals (T_i x L) and pairwise marginals ((T_i - 1) x L x L), in two ragged stores (rows by
``seq_ptr`` and by ``eptr``), float32 by default (``store="float64"`` for doubles).  The dual is
``D(mu) = -(l2/2) ||w_hat(mu)||^2 + (1/n) sum_i H(mu_i)`` with ``w_hat(mu) = (1/(l2 n)) sum_i
(F(x_i, y_i) - E_{mu_i} F(x_i, .))`` and H the entropy of eq. (9); the weights are always ``w =
w_hat(mu)`` (the step changes them sparsely: the attributes of the sequence and the transitions, no
scaling needed; at the end of every epoch ``w`` is recomputed from the store, which removes the
float32 rounding of the store and the float64 drift of the increments).  The duality gap
``P(w) - D(mu) = (1/n) sum_i KL(mu_i || p(.|x_i, w)) >= 0`` bounds ``f(w) - f*``: it is computed
exactly every epoch (the trace's ``duality_gap``) and the run stops (status ``converged``) when it
falls below ``gap_tol``.

``sdca``
    Algorithm 1 of Le Priol et al. (Prox-SDCA, option II): draw i; one marginalisation at w gives
    mu'_i; the individual gap ``g_i = KL(mu_i || mu'_i)`` (eq. 10); the primal direction ``v_i`` and
    the exact line search on ``gamma`` in [0, 1] (safeguarded Newton / bisection on the derivative,
    see :mod:`crfkit.kernels.sdca`; ``tol`` its tolerance on gamma, default 1e-3: the paper finds
    a tighter one does not converge faster); ``mu_i += gamma (mu'_i - mu_i)``, ``w += gamma v_i``.
    ``sampling="gap"`` (default): i is drawn uniformly with probability ``mixing`` (default 0.2, the
    authors') and otherwise proportionally to the stored individual gaps (stale: each is the gap of
    the example's last visit; an O(log n) sum tree), examples not visited yet scoring
    ``GAP_UNSEEN`` (1e10, so the first pass mostly visits unseen examples); ``refresh=K`` recomputes
    every gap at the start of every K-th epoch (n marginalisations, counted as oracle calls).
    ``sampling="uniform"``: i uniformly.
``oeg``
    Online exponentiated gradient (Collins et al. 2008) on the same marginals: the new dual variable
    of i is the chain ``alpha_i^(1 - eta_i) exp(eta_i w . F)``, whose log-potentials are those of
    the stored marginals (``log pair_t - log node_t``) mixed with the scores under w, marginalised
    by one forward-backward (one oracle call).  Step sizes are per example: ``eta_i`` starts at 0.5;
    a step that would decrease the dual is not taken, ``eta_i`` is halved and the step recomputed,
    another oracle call; an accepted step multiplies ``eta_i`` by 1.05, at most 1 (``eta_i = 1`` is
    SDCA's full step, mu'_i the model's marginals).  The update is the EG update of Collins et al.
    (JMLR 9:1775-1822, 2008) for log-linear models, ``alpha'_i(y) ~ alpha_i(y) exp(-eta grad_{i,y}
    Q)`` with Q the negated dual, which is ``alpha_i^(1 - eta) exp(eta w . F)``.  The step-size
    adaptation (0.5, halving on a dual decrease, x1.05, the cap) is NOT checked against the paper:
    two sessions' searches reached only the abstract (jmlr.org/papers/v9/collins08a.html) and first
    page, not its experimental section, and neither the SAG paper nor Le Priol et al. state the rule
    of the OEG they compare with; so the paper's rule is not stated here and the code was not
    changed to a guess.  The dense reference test (tests/test_sdca.py, ``dense_oeg``) pins our rule
    step by step.  ``eta_i`` is not halved below ``OEG_ETA_MIN`` (1e-4): a step refused there ends
    the visit without a step.  Without that floor, on CoNLL-2002 Dutch (lambda = 1/n) half of the
    oracle calls were refused tries: examples that no step could improve (converged, or made so by
    the float32 store's rounding) were tried 31 times a visit and their eta_i halved past 1e-100,
    frozen for the rest of the run (README, "Dual methods").  Examples are drawn uniformly (an OEG
    step computes no individual gap to sample by).

Initialisation (both; paper section 3, from Schmidt et al. 2015): the marginals of the chain whose
gold node and gold transition scores are ``init_score`` (10) and all others 0, and ``w0 =
w_hat(mu0)``.  ``init="warm"`` takes the marginals under the given weights ``x0`` instead (then
``w = w_hat(mu)``, which is not ``x0``); ``init="auto"`` (default) is ``warm`` when ``x0`` has a
non-zero weight, ``gold`` otherwise.

Effective passes: every marginalisation counts as one oracle call (line-search evaluations are not
oracle calls: they only read the marginals); an epoch is n oracle calls (after the gap refresh when
one is due).  The trace's ``steps`` counts parameter updates.  ``state_bytes`` is the memory of the
two stores.

Resuming: ``state=`` a state from an earlier run (``info["state"]()``, ``result.state``): made with
the same algorithm, ``l2`` and ``l1`` it resumes bitwise; otherwise the run starts from its
marginals (the dual point does not depend on l1, l2; w is recomputed for the new ones; the gaps and
OEG step sizes start afresh).
On the test problem a start from the l2 = 0.08 optimum's marginals took 48 epochs to a 1e-9 gap at
l2 = 0.05 against 31 from the gold initialisation: the marginals are a valid start, not a faster
one. OEG with a float32 store stalls near a 1e-8 gap (its accept test compares dual values computed
from rounded marginals); ``store="float64"`` for tighter runs.

Elastic net (``sdca`` only): with ``l1 > 0`` the objective is ``P(w) = (1/n) sum_i nll_i + g(w)``,
``g(w) = (l2/2) ||w||^2 + l1 ||w||_1``, and Prox-SDCA works with its conjugate: ``v = l2
w_hat(mu) = (1/n) sum_i (F(x_i, y_i) - E_{mu_i} F)``, ``w = grad g*(v) = S_l1(v) / l2``
coordinate-wise (S the soft-thresholding: ``sign(v) max(|v| - l1, 0)``) and
``D(mu) = (1/n) sum_i H(mu_i) - g*(v)`` with ``g*(v) = ||S_l1(v)||^2 / (2 l2) = (l2/2) ||w||^2``.
The run keeps ``z = w_hat(mu) = v / l2`` and ``w = S_kappa(z)``, ``kappa = l1 / l2``, both explicit
(the ``w = beta v`` scaling trick does not survive the thresholding, so none is used): a step moves
z on the sequence's attributes and the transitions and re-thresholds those coordinates only.  The
gap is still ``P(w) - D(mu) = (1/n) sum_i KL(mu_i || p(.|x_i, w))`` (Fenchel-Young holds with
equality at ``w = grad g*(v)``), so it certifies ``f(w) - f*`` and ``gap_tol`` stops the run as with
L2; the line search's derivative replaces the L2 term ``- gamma q`` by ``- h(gamma)``, ``h``
piecewise linear and non-decreasing (:mod:`crfkit.kernels.sdca`, "elastic net"), still bracketed on
[0, 1].  With ``l1 = 0`` the code path is the L2 one, bitwise.  ``oeg`` refuses ``l1 > 0``
(ParameterError): its step is Collins et al.'s EG step on the L2 dual, and its accept test computes
the dual change with the quadratic g* (``- w.u - ||u||^2 / (2 l2 n)``); the EG update itself would
carry over with ``w = S_kappa(z)``, but neither the paper nor this code treats the L1 dual.  A state
resumes bitwise when made with the same algorithm, l2 and l1.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from ..errors import CrfkitError, ParameterError
from ..kernels import sdca as K
from ..kernels.occ import buffer_offsets as occ_buffer_offsets
from ..kernels.occ import layout as occ_layout
from ..kernels.sag import tree_build, tree_size
from . import schema as _sc
from .sag import seed_state
from .stochastic import StochasticResult, notify

#: what a resumed state may hold (checked by crfkit.training.checkpoint.validate_state before it is
#: used): sdca, oeg
STATE_SCHEMA = {
    "algorithm": _sc.text(),
    "iteration": _sc.integer(),
    "l2": _sc.number(lo=0.0),
    "l1": _sc.number(lo=0.0, required=False),
    "x": _sc.vector("p"),
    "node": _sc.array(lambda d: [(d.T, d.L)], dtypes=_sc.F4F8),
    "pair": _sc.array(lambda d: [(d.E, d.L, d.L)], dtypes=_sc.F4F8),
    "gaps": _sc.vector("n"),
    "etas": _sc.vector("n", required=False),
    "evals": _sc.integer(),
    "steps": _sc.integer(),
    "ls_evals": _sc.integer(required=False),
    "ls_nf": _sc.integer(required=False),
    "ls_nc": _sc.integer(required=False),
    "rejected": _sc.integer(required=False),
    "rng": _sc.integer(hi=_sc.RNG_HI),
    "refreshed": _sc.integer(lo=-1, required=False),
}

DEFAULT_EPOCHS = 100
STORES = {"float32": np.float32, "float64": np.float64}
SAMPLINGS = {"uniform": K.UNIFORM, "gap": K.GAP}
METHODS = {"sdca": K.SDCA, "oeg": K.OEG}


def edge_offsets(seq_ptr: np.ndarray) -> np.ndarray:
    """Row offsets of the pairwise store: sequence i owns rows eptr[i]:eptr[i+1] (T_i - 1 of
    them)."""
    lens = np.diff(seq_ptr)
    return np.concatenate(([0], np.cumsum(np.maximum(lens - 1, 0)))).astype(np.int64)


def dual_store_bytes(seq_ptr, n_labels: int, itemsize: int = 4) -> int:
    """Bytes of the node and pairwise stores of a corpus."""
    n_tok = int(seq_ptr[-1])
    n_edges = int(edge_offsets(seq_ptr)[-1])
    return (n_tok * n_labels + n_edges * n_labels * n_labels) * itemsize


class _Dual:
    """The arrays of one dual run and their (de)serialisation."""

    def __init__(self, name, obj, x0, l2, seed, state, store, init, init_score, sampling, l1=0.0):
        c, s = obj.corpus, obj.space
        self.name, self.obj, self.l2, self.l1 = name, obj, float(l2), float(l1)
        # elastic net: z = w_hat(mu) (what the L2 code calls w) and w = S_kappa(z); kappa = 0: z is
        # w
        self.kappa = self.l1 / self.l2
        n, p, L = obj.n, s.n_features, s.n_labels
        self.n, self.p, self.L = n, p, L
        self.l2n = self.l2 * n
        self.eptr = edge_offsets(c.seq_ptr)
        n_edges = int(self.eptr[-1])
        maxT = max(c.max_length, 1)
        self.full = obj.full_rows
        # the per-occurrence layout the steps' walks read (6 bytes per attribute occurrence while
        # the run lasts)
        self.ok0, self.onk, self.lab = occ_layout(
            c.tok_ptr, c.attr, s.attr_ptr, s.feat_label, self.full, L
        )
        # scratch
        self.trans = np.empty((L, L))
        self.score = np.empty((maxT, L))
        self.es = np.empty((maxT, L))
        self.alpha = np.empty((maxT, L))
        self.beta = np.empty((maxT, L))
        self.scale = np.empty(maxT)
        self.node_n = np.empty((maxT, L))
        self.pair_n = np.empty((maxT, L, L))
        self.m_node = np.empty((maxT, L))
        self.d_node = np.empty((maxT, L))
        oeg = name == "oeg"
        # OEG's copies of the stored and changed pairwise marginals (sdca reads the store in place)
        self.m_pair = np.empty((maxT if oeg else 1, L, L))
        self.d_pair = np.empty((maxT if oeg else 1, L, L))
        self.M = np.empty((maxT if oeg else 1, L, L))
        self.expM = np.empty((maxT if oeg else 1, L, L))
        self.theta = np.empty((maxT if oeg else 1, L, L))
        self.pot = np.zeros((1, L))
        self.acc = np.zeros(p)
        na = len(s.attr_ptr) - 1
        # per attribute occurrence, the offset of its attribute's row in its sequence's local layout
        # (kernels.sdca.accumulate_direction; 4 bytes per occurrence while the run lasts)
        self.bo = occ_buffer_offsets(
            c.seq_ptr, c.tok_ptr, c.attr, np.diff(s.attr_ptr), c.val, False
        )[0]
        self.alist = np.zeros(max(na, 1), dtype=np.int64)
        self.tdir = np.zeros((L, L))
        # the step's L1 scratch: an edge's L^2 entries in the gap pass, LS_BLOCK in the line search
        nflat = max(L * L, K.LS_BLOCK)
        self.flat = np.zeros((2, nflat))
        self.isc = np.zeros(K.N_ISC, dtype=np.int64)
        self.fsc = np.zeros(K.N_FSC)
        P = tree_size(n)
        self.tsum = np.zeros(2 * P)
        self.tmax = np.zeros(2 * P)
        self.tmin = np.zeros(2 * P)
        self.w = np.zeros(p)
        self.z = np.zeros(p) if self.kappa > 0 else self.w
        self.ez = np.zeros((3, p if self.kappa > 0 else 1))
        resume = (
            state is not None
            and state.get("algorithm") == name
            and float(state.get("l2", -1)) == self.l2
            and float(state.get("l1", 0.0)) == self.l1
        )
        if state is None:
            self.node_store = np.zeros((c.n_tokens, L), dtype=store)
            self.pair_store = np.zeros((n_edges, L, L), dtype=store)
            if init == "warm":
                K.warm_store(
                    c.seq_ptr,
                    self.eptr,
                    c.tok_ptr,
                    c.attr,
                    c.val,
                    s.attr_ptr,
                    s.feat_label,
                    self.full,
                    s.trans_index,
                    s.n_state,
                    np.ascontiguousarray(x0, dtype=np.float64),
                    self.node_store,
                    self.pair_store,
                )
            else:
                K.init_store(
                    c.seq_ptr,
                    self.eptr,
                    c.y,
                    L,
                    float(init_score),
                    self.node_store,
                    self.pair_store,
                )
            self.gaps = np.full(n, K.GAP_UNSEEN)
            self.etas = np.full(n, K.OEG_ETA0)
        else:
            self._check_state(state, n, c.n_tokens, n_edges, L)
            sdt = np.float32 if np.asarray(state["node"]).dtype == np.float32 else np.float64
            self.node_store = np.array(state["node"], dtype=sdt, copy=True)
            self.pair_store = np.array(state["pair"], dtype=sdt, copy=True)
            if resume:
                self.gaps = np.array(state["gaps"], dtype=np.float64, copy=True)
                self.etas = np.array(
                    state.get("etas", np.full(n, K.OEG_ETA0)), dtype=np.float64, copy=True
                )
            else:
                # another problem (l1, l2) or method: its gaps and step sizes are not this problem's
                self.gaps = np.full(n, K.GAP_UNSEEN)
                self.etas = np.full(n, K.OEG_ETA0)
        if sampling == K.GAP:
            tree_build(self.tsum, self.tmax, self.tmin, self.gaps)
        self.recompute_w()
        if resume:
            self.iteration = int(state["iteration"])
            self.isc[K.I_EVALS] = int(state["evals"])
            self.isc[K.I_STEPS] = int(state["steps"])
            self.isc[K.I_LS] = int(state.get("ls_evals", 0))
            self.isc[K.I_REJECT] = int(state.get("rejected", 0))
            self.isc[K.I_NF] = int(state.get("ls_nf", 0))
            self.isc[K.I_NC] = int(state.get("ls_nc", 0))
            self.rng = np.array([int(state["rng"])], dtype=np.uint64)
            self.refreshed = int(state.get("refreshed", -1))
        else:
            self.refreshed = -1
            self.iteration = 0
            self.rng = seed_state(seed)

    @staticmethod
    def _check_state(state, n, n_tokens, n_edges, L):
        for key in ("node", "pair", "gaps"):
            if key not in state:
                raise ParameterError(f"state lacks {key!r}: not a state of crfkit.optim.sdca")
        if (
            np.shape(state["node"]) != (n_tokens, L)
            or np.shape(state["pair"]) != (n_edges, L, L)
            or len(state["gaps"]) != n
        ):
            raise ParameterError("state was made for another corpus or label set")

    def recompute_w(self, H=None) -> None:
        """w = w_hat of the chain distributions the store holds (see kernels.sdca.project_dual),
        through the soft-thresholding when l1 > 0 (z = w_hat, w = S_kappa(z)); their entropies into
        ``H`` when given."""
        c, s = self.obj.corpus, self.obj.space
        K.project_dual(
            c.seq_ptr,
            self.eptr,
            c.tok_ptr,
            c.attr,
            c.val,
            c.y,
            s.attr_ptr,
            s.feat_label,
            self.full,
            s.trans_index,
            s.n_state,
            1.0 / self.l2n,
            self.node_store,
            self.pair_store,
            self.z,
            np.empty(self.n) if H is None else H,
            H is not None,
        )
        if self.kappa > 0:
            K.soft_threshold(self.z, self.kappa, self.w)

    def state(self) -> dict:
        return {
            "algorithm": self.name,
            "iteration": self.iteration,
            "l2": self.l2,
            "l1": self.l1,
            "x": self.w.copy(),
            "node": self.node_store.copy(),
            "pair": self.pair_store.copy(),
            "gaps": self.gaps.copy(),
            "etas": self.etas.copy(),
            "evals": int(self.isc[K.I_EVALS]),
            "steps": int(self.isc[K.I_STEPS]),
            "ls_evals": int(self.isc[K.I_LS]),
            "ls_nf": int(self.isc[K.I_NF]),
            "ls_nc": int(self.isc[K.I_NC]),
            "rejected": int(self.isc[K.I_REJECT]),
            "rng": int(self.rng[0]),
            "refreshed": int(self.refreshed),
        }

    @property
    def state_bytes(self) -> int:
        return int(self.node_store.nbytes + self.pair_store.nbytes)

    def run_until(self, method, sampling, mixing, tol, target) -> None:
        c, s = self.obj.corpus, self.obj.space
        K.dual_run(
            method,
            sampling,
            float(mixing),
            int(target),
            c.seq_ptr,
            self.eptr,
            c.tok_ptr,
            c.attr,
            c.val,
            s.attr_ptr,
            self.ok0,
            self.onk,
            self.lab,
            s.trans_index,
            s.n_state,
            self.l2n,
            float(tol),
            self.w,
            self.node_store,
            self.pair_store,
            self.gaps,
            self.etas,
            self.tsum,
            self.tmax,
            self.tmin,
            self.rng,
            self.trans,
            self.score,
            self.es,
            self.alpha,
            self.beta,
            self.scale,
            self.node_n,
            self.pair_n,
            self.m_node,
            self.d_node,
            self.m_pair,
            self.d_pair,
            self.M,
            self.expM,
            self.theta,
            self.pot,
            self.acc,
            self.bo,
            self.alist,
            self.tdir,
            self.flat,
            self.isc,
            self.fsc,
            self.kappa,
            self.z,
            self.ez,
        )

    def refresh(self) -> None:
        c, s = self.obj.corpus, self.obj.space
        K.refresh_gaps(
            c.seq_ptr,
            self.eptr,
            c.tok_ptr,
            c.attr,
            c.val,
            s.attr_ptr,
            s.feat_label,
            self.full,
            s.trans_index,
            s.n_state,
            self.w,
            self.node_store,
            self.pair_store,
            self.gaps,
            self.tsum,
            self.tmax,
            self.tmin,
            self.trans,
            self.score,
            self.es,
            self.alpha,
            self.beta,
            self.scale,
            self.node_n,
            self.pair_n,
        )
        self.isc[K.I_EVALS] += self.n

    def dual(self) -> float:
        """D(mu) = -(l2/2) ||w||^2 + mean H(mu_i) of the store's chain distributions, w = w_hat(mu)
        (l1 > 0: w = S_kappa(w_hat(mu)), and (l2/2)||w||^2 = g*(v) = ||S_l1(v)||^2 / (2 l2), v = l2
        w_hat(mu)); this recomputes w, to the same values as :meth:`recompute_w`."""
        H = np.empty(self.n)
        self.recompute_w(H)
        return float(-0.5 * self.l2 * np.dot(self.w, self.w) + H.mean())

    def primal(self) -> float:
        return float(self.obj.value(self.w, count=False))


def _check(name, obj, reg, store, sampling, mixing, tol, gap_tol, refresh, init, init_score, x0):
    if not (reg.l1 >= 0 and np.isfinite(reg.l1)):
        raise ParameterError(f"{name}: l1 must be finite and >= 0, not {reg.l1!r}")
    if reg.l1 > 0 and name == "oeg":
        raise ParameterError(
            "oeg optimizes the L2-regularised objective only; l1 > 0 is not supported (its "
            "accept test and Collins et al.'s analysis use the quadratic dual term; use sdca, "
            "owlqn or sgd-l1)"
        )
    if not (reg.l2 > 0):
        raise ParameterError(
            f"{name} needs l2 > 0 (the dual of the unregularised objective is not defined)"
        )
    if getattr(obj.space, "n_dense", 0) > 0:
        raise CrfkitError(f"{name} does not support dense features yet")
    if getattr(obj.space, "n_bigram", 0) > 0:
        raise CrfkitError(
            f"{name} does not support bigram-observation features yet: use lbfgs or owlqn"
        )
    if store not in STORES:
        raise ParameterError(f"{name}: store must be 'float32' or 'float64', not {store!r}")
    if sampling not in SAMPLINGS:
        raise ParameterError(f"{name}: sampling must be 'uniform' or 'gap', not {sampling!r}")
    if not (0.0 <= mixing <= 1.0):
        raise ParameterError(f"{name}: mixing (probability of a uniform draw) must be in [0, 1]")
    if not (0.0 < tol < 1.0):
        raise ParameterError(f"{name}: tol (line-search tolerance on gamma) must be in (0, 1)")
    if not (gap_tol >= 0.0):
        raise ParameterError(f"{name}: gap_tol must be >= 0")
    if int(refresh) != refresh or refresh < 0:
        raise ParameterError(f"{name}: refresh is a number of epochs (>= 0; 0: never)")
    if init not in ("auto", "gold", "warm"):
        raise ParameterError(f"{name}: init must be 'auto', 'gold' or 'warm', not {init!r}")
    if init == "warm" and x0 is None:
        raise ParameterError(f"{name}: init='warm' needs starting weights")
    if not np.isfinite(init_score):
        raise ParameterError(f"{name}: init_score must be finite")


def _optimize(
    name,
    obj,
    x0,
    *,
    reg,
    max_iterations,
    callback,
    seed,
    state,
    sampling,
    mixing,
    tol,
    gap_tol,
    refresh,
    store,
    init,
    init_score,
):
    _check(name, obj, reg, store, sampling, mixing, tol, gap_tol, refresh, init, init_score, x0)
    if init == "auto":
        init = "warm" if x0 is not None and np.any(np.asarray(x0) != 0) else "gold"
    method = METHODS[name]
    samp = SAMPLINGS[sampling]
    epochs = DEFAULT_EPOCHS if max_iterations is None else int(max_iterations)
    run = _Dual(
        name, obj, x0, reg.l2, seed, state, STORES[store], init, init_score, samp, l1=reg.l1
    )
    n = run.n
    evals0 = int(run.isc[K.I_EVALS])
    oracle0 = obj.n_oracle

    def sync_counter():
        obj.n_oracle = oracle0 + int(run.isc[K.I_EVALS]) - evals0

    def finish(status, message, f=None):
        x = run.w.copy()
        return StochasticResult(
            x=x,
            f=obj.value(x, count=False) if f is None else f,
            status=status,
            message=message,
            iterations=run.iteration,
            state_fn=run.state,
        )

    monitor_s = 0.0
    f = None
    gap = float("nan")
    ran = False  # this epoch's kernel has run, its bookkeeping not yet
    try:
        while run.iteration < epochs:
            if (
                refresh
                and samp == K.GAP
                and run.iteration > 0
                and run.iteration % int(refresh) == 0
                and run.refreshed != run.iteration
            ):
                run.refresh()
                run.refreshed = run.iteration
            target = int(run.isc[K.I_EVALS]) + n
            run.run_until(method, samp, mixing, tol, target)
            ran = True
            # w is recomputed from the store (removing the store's rounding and the increments'
            # drift) by the dual's pass over the store, which gives w and the entropies in one sweep
            # (the same w as recompute_w alone, bitwise); the primal is then taken at that w
            t_mon = time.perf_counter()
            d = run.dual()
            sync_counter()
            run.iteration += 1
            ran = False
            f = run.primal()
            monitor_s += time.perf_counter() - t_mon
            gap = f - d
            steps = int(run.isc[K.I_STEPS])
            seen = (
                {"examples_seen": int(np.count_nonzero(run.gaps < K.GAP_UNSEEN))}
                if samp == K.GAP
                else {}
            )
            stop = notify(
                callback,
                iteration=run.iteration,
                f=f,
                x=run.w.copy(),
                step=float(run.fsc[K.F_GAMMA]) if name == "sdca" else float(np.median(run.etas)),
                nnz=int(np.count_nonzero(run.w)),
                state=run.state,
                state_bytes=run.state_bytes,
                duality_gap=gap,
                dual=d,
                steps=steps,
                ls_evals_per_step=int(run.isc[K.I_LS]) / max(steps, 1),
                ls_entries=int(run.isc[K.I_NC]) / max(int(run.isc[K.I_NF]), 1),
                rejected=int(run.isc[K.I_REJECT]),
                monitor_s=monitor_s,
                **seen,
            )
            if gap <= gap_tol:
                return finish(
                    "converged",
                    f"duality gap P(w) - D(mu) = {gap:.3g} <= gap_tol = {gap_tol:g}; "
                    f"certified f(w) - f* <= {gap:.3g}",
                    f,
                )
            if stop:
                return finish(
                    "stopped",
                    f"stopped by the callback; certified f(w) - f* <= {gap:.3g} (duality gap)",
                    f,
                )
        return finish(
            "max_iterations", f"{epochs} epochs; certified f(w) - f* <= {gap:.3g} (duality gap)", f
        )
    except KeyboardInterrupt:
        # a kernel call is never cut short: if this epoch's kernel ran, finish its bookkeeping
        if ran:
            run.recompute_w()
            sync_counter()
            run.iteration += 1
        return finish("interrupted", "interrupted")


def sdca(
    obj,
    x0,
    *,
    reg,
    max_iterations=None,
    callback: Callable | None = None,
    seed: int = 0,
    state: dict | None = None,
    sampling: str = "gap",
    mixing: float = 0.2,
    tol: float = 1e-3,
    gap_tol: float = 1e-6,
    refresh: int = 0,
    store: str = "float32",
    init: str = "auto",
    init_score: float = 10.0,
) -> StochasticResult:
    """Prox-SDCA for CRFs (Le Priol et al., Algorithm 1) with gap or uniform sampling; see the
    module docstring."""
    return _optimize(
        "sdca",
        obj,
        x0,
        reg=reg,
        max_iterations=max_iterations,
        callback=callback,
        seed=seed,
        state=state,
        sampling=sampling,
        mixing=mixing,
        tol=tol,
        gap_tol=gap_tol,
        refresh=refresh,
        store=store,
        init=init,
        init_score=init_score,
    )


def oeg(
    obj,
    x0,
    *,
    reg,
    max_iterations=None,
    callback: Callable | None = None,
    seed: int = 0,
    state: dict | None = None,
    gap_tol: float = 1e-6,
    store: str = "float32",
    init: str = "auto",
    init_score: float = 10.0,
) -> StochasticResult:
    """Online exponentiated gradient (Collins et al. 2008) on the dual marginals; see the module
    docstring."""
    return _optimize(
        "oeg",
        obj,
        x0,
        reg=reg,
        max_iterations=max_iterations,
        callback=callback,
        seed=seed,
        state=state,
        sampling="uniform",
        mixing=0.0,
        tol=0.5,
        gap_tol=gap_tol,
        refresh=0,
        store=store,
        init=init,
        init_score=init_score,
    )
