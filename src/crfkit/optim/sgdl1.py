"""SGD-L1 (Tsuruoka, Tsujii & Ananiadou 2009): per-sample SGD for the elastic-net CRF objective with
the naive, clipping (lazy update) and cumulative L1 penalties.

Normalisation.  crfkit minimises ``f(w) = (1/n) sum_j nll_j(w) + (l2/2)|w|^2 +
l1 |w|_1`` (DESIGN.md), which is the mean over samples of ``f_j(w) = nll_j(w)
+ (l2/2)|w|^2 + l1 |w|_1``.  The paper maximises ``sum_j L(j, w) - C |w|_1``
and steps, at sample ``j``, along the gradient of ``L(j, w) - (C/N) |w|_1``:
that is ``-f_j`` with

    l1 = C / N        (C = l1 * n = CRFsuite's c1 = Wapiti's rho1),

so one step here is ``w <- w - eta * d f_j(w)`` with the paper's ``eta``
unchanged (its grid 1.0, 0.5, 0.2, 0.1 carries over as it is), the per-step L1
penalty is ``eta * l1`` (the paper's ``eta * C / N``) and
``u_k = l1 * sum_{t<=k} eta_t`` (eq. 3).  The objective per sample the paper
reports, ``L_w / N``, is ``-f(w)`` with ``l2 = 0``: pass ``l2=0`` (or ``c2=0``)
explicitly, since crfkit keeps CRFsuite's default ``c2 = 1`` otherwise.

Sample weights (``omega_i``, objective ``(1/W) sum_j omega_j nll_j + ...``): the
visiting order is unchanged and sample ``j``'s loss gradient is multiplied by
``s_j = omega_j n / W`` (the penalties are not), so that the mean over samples
is still the objective.

L2 (elastic net, ``l2 > 0``) is applied exactly and lazily: the weights are
``w = beta * v``, the shrinkage ``(1 - eta*l2)`` of every weight at every step
changes ``beta`` only, and the L1 bookkeeping (``u``, ``q_i``, the lazy
penalties) is kept in ``v`` units, where a step's penalty is ``eta*l1/beta``.
For clipping this is the dense method (shrink, gradient step, clip every
weight) exactly; for cumulative it is Figure 2 with the penalties a weight
"could have received" discounted by the shrinkage since they were due.

Penalties (``penalty=``):

* ``naive``: the subgradient step ``- eta * l1 * sign(w_i)`` on every weight at
  every step (§3.1), done lazily: a weight is brought up to date when a sample
  uses it (exact while it stays on one side of zero; a weight that reaches zero
  in between is put where the dense method's oscillation around zero would be
  with the mean per-step penalty: exact for a constant step size without L2).
  Like the paper's, its weights hover around zero instead of becoming zero.
* ``clipping``: Carpenter's clipping at zero with the lazy update (§3.1),
  exactly equal to the dense clip-every-weight-every-step method.
* ``cumulative``: Figure 2 (§3.2): ``u`` the total penalty each weight could
  have received, per-feature ``q_i`` the penalty it did receive, the penalty
  applied only to the features of the current sample.

Learning rates (``schedule=``): ``inverse`` eq. (5) ``eta_k = eta0 / (1 +
k/N)``; ``exponential`` eq. (6) ``eta_k = eta0 * alpha^(k/N)`` (the paper
prints ``alpha^(-k/N)``; with its ``0 < alpha < 1`` the rate must decay, so
the sign of the exponent is a misprint); ``constant`` ``eta_k = eta0``.  ``k``
counts samples from 0 over the whole run and ``N`` is the number of training
sequences.  Every pass visits the sequences in a random order drawn from
``(seed, pass)``, so a resumed run draws the same orders.

Work per step is the sample's oracle plus O(its state features + the
transitions); O(all features) work happens once per pass (bringing every
weight up to date, folding ``beta``, the monitoring value ``f``).

Bigram-observation features (label pair x observation, Lavergne et al. 2010;
Wapiti's ``*``/``b`` patterns): the oracle is the full-batch kernel's
per-sequence recursion with position-dependent transition scores
(:func:`crfkit.kernels.oracle.sequence_oracle_bigram`), and the sample's
features a step brings up to date, updates and penalises include the bigram
features of its tokens after the first (each once): O(its state features +
its bigram features + the transitions) per step, as Wapiti's ``sgd-l1``.

Checkpoints: the state (``info['state']()``) is taken at the end of a pass,
where every weight is up to date and ``beta = 1``; a run interrupted (Ctrl-C)
during a pass returns the weights and state of the last completed pass.
"""

from __future__ import annotations

import math
import time

import numpy as np

from ..errors import CrfkitError, ParameterError, TrainingDiverged
from ..kernels import sgdl1 as K
from . import schema as _sc
from .stochastic import StochasticResult, last_completed, notify, state_function

#: what a resumed state may hold (checked by crfkit.training.checkpoint.validate_state before it is
#: used): sgd-l1 (``lastk``: one entry per feature for the naive penalty, else one)
STATE_SCHEMA = {
    "x": _sc.vector("p"),
    "aux": _sc.vector("p"),
    "lastk": _sc.array(lambda d: [(d.p,), (1,)], dtypes=_sc.I8, lo=0, hi=_sc.BIG),
    "iteration": _sc.integer(),
    "u": _sc.number(),
    "step": _sc.number(finite=False, required=False),
    "settings": _sc.mapping(),
}

PENALTIES = {"naive": K.NAIVE, "clipping": K.CLIP, "cumulative": K.CUMUL}
SCHEDULES = {"inverse": K.INVERSE, "exponential": K.EXPONENTIAL, "constant": K.CONSTANT}
DEFAULT_PASSES = 30  # the paper's number of passes
ETA0_GRID = (1.0, 0.5, 0.2, 0.1)  # §4.1
ALPHA_GRID = (0.9, 0.85, 0.8)  # §4.1
BLOCK = 512  # samples per numba call (Ctrl-C is seen between calls)
FOLD_BELOW = 1e-6  # fold beta into v mid-pass when it gets this small


def learning_rate(
    k, n: int, *, schedule: str = "exponential", eta0: float = 0.1, alpha: float = 0.85
):
    """eta_k of ``schedule`` for step(s) ``k`` (from 0) with ``n`` samples per pass (eq. 5 / eq.
    6)."""
    k = np.asarray(k, dtype=np.float64)
    if schedule == "inverse":
        return eta0 / (1.0 + k / n)
    if schedule == "exponential":
        return eta0 * alpha ** (k / n)
    if schedule == "constant":
        return eta0 + 0.0 * k
    raise ParameterError(f"unknown schedule {schedule!r}; one of {', '.join(SCHEDULES)}")


def pass_order(seed: int, epoch: int, n: int) -> np.ndarray:
    """The visiting order of pass ``epoch`` (from 0): a permutation drawn from (seed, epoch)."""
    return (
        np.random.default_rng([int(seed) & 0xFFFFFFFF, int(epoch)]).permutation(n).astype(np.int64)
    )


def step_bound(obj) -> int:
    """The most features one step lists (a sequence's state features, each of its attribute
    occurrences counted, plus the transitions, plus its bigram features after the first token): the
    size of the kernels' ``touched`` buffer, which need not span the whole feature space."""
    c, s = obj.corpus, obj.space
    per_entry = np.diff(s.attr_ptr)[c.attr] if len(c.attr) else np.zeros(0, np.int64)
    cum = np.concatenate(([0], np.cumsum(per_entry, dtype=np.int64)))[c.tok_ptr]
    per_seq = cum[c.seq_ptr[1:]] - cum[c.seq_ptr[:-1]]
    if s.n_bigram:
        btok_ptr, battr, _ = c.bigram_arrays()
        bper = np.diff(s.battr_ptr)[battr] if len(battr) else np.zeros(0, np.int64)
        bcum = np.concatenate(([0], np.cumsum(bper, dtype=np.int64)))[btok_ptr]
        first = np.minimum(c.seq_ptr[:-1] + 1, c.seq_ptr[1:])
        per_seq = per_seq + (bcum[c.seq_ptr[1:]] - bcum[first])
    most = int(per_seq.max()) if len(per_seq) else 0
    return max(1, min(s.n_features, most + s.n_trans))


def bigram_step_arrays(obj) -> tuple[np.ndarray, np.ndarray]:
    """``(tb, bfull)`` for :func:`crfkit.kernels.sgdl1.run_steps_bigram`: room for the most bigram
    attribute occurrences of a sequence after its first token (the step's distinct bigram
    attributes, each with its first occurrence and that occurrence's position), and per bigram
    attribute whether it has a feature for every label pair in pair order
    (:attr:`~crfkit.model.FeatureSpace.bigram_full_rows`; Wapiti's space: its scores, gradient and
    penalty then run over contiguous rows)."""
    c, s = obj.corpus, obj.space
    btok_ptr = c.bigram_arrays()[0]
    first = np.minimum(c.seq_ptr[:-1] + 1, c.seq_ptr[1:])
    per_seq = btok_ptr[c.seq_ptr[1:]] - btok_ptr[first] if len(first) else np.zeros(0, np.int64)
    most = int(per_seq.max()) if len(per_seq) else 0
    return np.empty((max(most, 1), 3), np.int64), s.bigram_full_rows


def check_params(penalty, schedule, eta0, alpha, reg, max_iterations):
    if penalty not in PENALTIES:
        raise ParameterError(f"sgd-l1: unknown penalty {penalty!r}; one of {', '.join(PENALTIES)}")
    if schedule not in SCHEDULES:
        raise ParameterError(
            f"sgd-l1: unknown schedule {schedule!r}; one of {', '.join(SCHEDULES)}"
        )
    try:
        eta0 = float(eta0)
        alpha = float(alpha)
    except (TypeError, ValueError):
        raise ParameterError(
            f"sgd-l1: eta0 and alpha must be numbers (got {eta0!r}, {alpha!r})"
        ) from None
    if not (math.isfinite(eta0) and eta0 > 0):
        raise ParameterError(f"sgd-l1: eta0 must be a positive number (got {eta0!r})")
    if schedule == "exponential" and not (0 < alpha <= 1):
        raise ParameterError(
            f"sgd-l1: alpha must be in (0, 1] for the exponential schedule (got {alpha!r})"
        )
    if reg.l2 > 0 and eta0 * reg.l2 >= 1:
        raise ParameterError(
            f"sgd-l1: eta0 * l2 = {eta0 * reg.l2:g} >= 1: the L2 shrinkage (1 - eta*l2) would not "
            "be positive; lower eta0"
        )
    if max_iterations is not None and int(max_iterations) < 0:
        raise ParameterError("sgd-l1: max_iterations (passes) must be >= 0")
    return eta0, alpha


def _auto_rates(
    obj, reg, penalty, schedule, eta0, alpha, max_iterations, seed, tune_sample, tune_passes, state
):
    """Resolve ``eta0="auto"`` / ``alpha="auto"``: from the state being resumed (the values its run
    picked), else with :func:`tune_sgd_l1` on a sample.  Returns (eta0, alpha, tuning result or
    None)."""
    auto_eta, auto_alpha = eta0 == "auto", alpha == "auto"
    if not (auto_eta or auto_alpha):
        return eta0, alpha, None
    if auto_alpha and schedule != "exponential":
        alpha, auto_alpha = 0.85, False  # not used by this schedule
        if not auto_eta:
            return eta0, alpha, None
    if state is not None:
        picked = state.get("settings", {})
        return (
            (picked.get("eta0", eta0) if auto_eta else eta0),
            (picked.get("alpha", alpha) if auto_alpha else alpha),
            None,
        )
    try:
        sample = int(tune_sample)
        passes = (
            int(tune_passes)
            if tune_passes is not None
            else (DEFAULT_PASSES if max_iterations is None else max(1, int(max_iterations)))
        )
    except (TypeError, ValueError):
        raise ParameterError(
            f"sgd-l1: tune_sample and tune_passes must be integers (got {tune_sample!r}, "
            f"{tune_passes!r})"
        ) from None
    if sample < 1 or passes < 1:
        raise ParameterError("sgd-l1: tune_sample and tune_passes must be >= 1")
    if not auto_eta:
        check_params(penalty, schedule, eta0, 0.85, reg, None)
    out = tune_sgd_l1(
        obj,
        reg=reg,
        sample_size=sample,
        passes=passes,
        penalty=penalty,
        schedule=schedule,
        eta0_grid=ETA0_GRID if auto_eta else (float(eta0),),
        alpha_grid=ALPHA_GRID if auto_alpha else (),
        alpha=0.85 if auto_alpha else alpha,
        seed=seed,
        threads=getattr(obj, "threads", None),
    )
    if not math.isfinite(out["f"]):
        raise CrfkitError(
            "sgd-l1: every learning rate tried on the sample diverged "
            f"(eta0 grid {', '.join(f'{e:g}' for e in ETA0_GRID)}); give eta0 explicitly"
        )
    return out["eta0"], out["alpha"], out


def sgd_l1(
    obj,
    x0: np.ndarray | None,
    *,
    reg,
    max_iterations: int | None = None,
    callback=None,
    seed: int = 0,
    penalty: str = "cumulative",
    schedule: str = "exponential",
    eta0: float | str = 0.1,
    alpha: float | str = 0.85,
    monitor: bool = True,
    state: dict | None = None,
    tune_sample: int = 1000,
    tune_passes: int | None = None,
    resumable: bool = True,
) -> StochasticResult:
    """SGD with an L1 penalty (``naive`` | ``clipping`` | ``cumulative``) and L2 shrinkage; see the
    module doc.

    ``max_iterations``: passes over the data (default 30).  ``eta0``, ``alpha``:
    the learning-rate parameters (``alpha`` is used by ``exponential`` only).
    ``eta0="auto"`` picks eta0 with :func:`tune_sgd_l1` as §4.1 does (the grid
    1.0, 0.5, 0.2, 0.1, each run for ``tune_passes`` passes, default the run's
    own number of passes, on ``tune_sample`` sequences drawn with ``seed``,
    default 1,000; the lowest objective wins); ``alpha="auto"`` then picks
    alpha among 0.9, 0.85, 0.8 for the exponential schedule.  The values picked
    are in the result's message, and a resumed run reuses them.  ``monitor``:
    compute ``f`` over the whole training set at the end of every pass (not
    counted as effective passes); False: only after the last pass (the others
    report NaN).  ``state``: resume from ``info['state']()`` of an earlier run
    with the same data and settings.  ``resumable=False``: the caller will not
    resume from the state of an interrupted run (``crfkit.train`` without a
    checkpoint), so between passes only the weights are kept for a Ctrl-C, not
    the cumulative penalties (a vector of the candidate space written to a
    temporary file after every pass: at 10^8 features about 0.8 s a pass); an
    interrupted run then returns the last completed pass's weights and no
    state.
    """
    if getattr(obj.space, "n_dense", 0) > 0:
        raise CrfkitError("sgd-l1 does not support dense features yet")
    if penalty not in PENALTIES or schedule not in SCHEDULES:
        check_params(penalty, schedule, 0.1, 0.85, reg, max_iterations)
    eta0, alpha, tuned = _auto_rates(
        obj,
        reg,
        penalty,
        schedule,
        eta0,
        alpha,
        max_iterations,
        seed,
        tune_sample,
        tune_passes,
        state,
    )
    eta0, alpha = check_params(penalty, schedule, eta0, alpha, reg, max_iterations)
    picked = (
        ""
        if tuned is None
        else (
            f"; eta0={eta0:g}"
            + (f", alpha={alpha:g}" if schedule == "exponential" else "")
            + f" picked on {tuned['sample_size']} sequences (objective after {tuned['passes']} passes: "
            + ", ".join(
                (f"eta0={e:g} alpha={a:g}" if schedule == "exponential" else f"eta0={e:g}")
                + f" {f:.6g}"
                for e, a, f in tuned["trials"]
            )
            + ")"
        )
    )
    pcode, scode = PENALTIES[penalty], SCHEDULES[schedule]
    epochs = DEFAULT_PASSES if max_iterations is None else int(max_iterations)
    c, s = obj.corpus, obj.space
    n, d, ns = obj.n, s.n_features, s.n_state
    settings = {
        "penalty": penalty,
        "schedule": schedule,
        "eta0": eta0,
        "alpha": alpha,
        "seed": int(seed),
        "l1": float(reg.l1),
        "l2": float(reg.l2),
        "n": int(n),
        "n_features": int(d),
    }
    if state is not None:
        bad = [k for k, val in settings.items() if state.get("settings", {}).get(k) != val]
        if bad:
            raise ParameterError(
                "sgd-l1: the state was made with other settings: "
                + ", ".join(
                    f"{k}={state.get('settings', {}).get(k)!r} there, {settings[k]!r} now"
                    for k in bad
                )
            )
        v = np.array(state["x"], dtype=np.float64, copy=True)
        aux = np.array(state["aux"], dtype=np.float64, copy=True)
        lastk = np.array(state["lastk"], dtype=np.int64, copy=True)
        u = float(state["u"])
        epoch0 = int(state["iteration"])
        eta = float(state.get("step", float("nan")))
    else:
        v = np.zeros(d) if x0 is None else np.array(x0, dtype=np.float64, copy=True)
        if v.shape != (d,):
            raise ParameterError(f"x0 has shape {v.shape}; the feature space has {d} features")
        aux = np.zeros(d)  # last (naive, clipping) or q (cumulative)
        lastk = np.zeros(d if pcode == K.NAIVE else 1, dtype=np.int64)
        u = 0.0
        epoch0 = 0
        eta = float("nan")
    scal = np.array([1.0, u])
    # listed-at-step marks, per attribute then per bigram attribute (not per feature)
    stamp = np.full(s.n_attributes + s.n_battributes, -1, dtype=np.int64)
    bound = step_bound(obj)
    touched = np.empty(bound, dtype=np.int64)
    sign = np.empty(bound if pcode == K.NAIVE else 1)
    Tmax = int(np.diff(c.seq_ptr).max())
    L = s.n_labels
    node = np.empty((Tmax, L))
    edge = np.empty((L, L))
    args = (c.seq_ptr, c.tok_ptr, c.attr, c.val, c.y, s.attr_ptr, s.feat_label, s.trans_index, ns)
    bigram = s.n_bigram > 0
    if bigram:
        # position-dependent transitions (bigram features after the transitions, which then end at
        # bigram_offset, also when this corpus has no bigram attribute): the per-position edge
        # marginals
        edges = np.empty((max(Tmax, 1), L, L))
        args += c.bigram_arrays() + (s.battr_ptr, s.pairs_for_full_rows, s.bigram_offset)
        tb, bfull = bigram_step_arrays(obj)
    monitor_s = 0.0

    def state_at(epoch_, u_, step, keep, nnz=None):
        # keep=False: the run's own arrays, copied when asked for (valid until the next pass steps);
        # keep=True: the pass just ended, kept through the next pass (for Ctrl-C and the checkpoint
        # written after it) in the least memory: the weights as their non-zeros, q (dense) in a
        # temporary file once the space is large, so that a pass holds two vectors of the candidate
        # space (v and q), not four; not resumable: the weights only (what an interrupted run
        # returns), not a state to resume from
        arrays = {"x": v, "aux": aux, "lastk": lastk} if resumable or not keep else {"x": v}
        return state_function(
            arrays,
            {"iteration": int(epoch_), "u": float(u_), "step": float(step), "settings": settings},
            keep=keep,
            nnz=nnz,
        )

    # the per-pass objective; with bigram features through the oracle's own scores
    # (Objective.value_bigram)
    value = (
        obj.value_bigram
        if bigram and getattr(obj, "_bigram", False)
        else (lambda x: obj.value(x, count=False))
    )
    # the kept state of the last completed pass (what a Ctrl-C returns)
    state_fn = kept_fn = state_at(epoch0, u, eta, True) if epoch0 > 0 else None
    last_f = done_f = float("nan")
    epoch = epoch0
    status, message = "max_iterations", f"{epochs} passes"
    try:
        while epoch < epochs:
            order = pass_order(seed, epoch, n)
            k0 = epoch * n
            for b0 in range(0, n, BLOCK):
                b1 = min(n, b0 + BLOCK)
                if bigram:
                    eta = K.run_steps_bigram(
                        *args,
                        order,
                        b0,
                        b1,
                        k0 + b0,
                        n,
                        scode,
                        eta0,
                        alpha,
                        float(reg.l1),
                        float(reg.l2),
                        pcode,
                        v,
                        scal,
                        aux,
                        lastk,
                        aux,
                        stamp,
                        touched,
                        sign,
                        node,
                        edges,
                        edges.reshape(edges.shape[0], L * L),
                        edge,
                        obj.full_rows,
                        obj.sw,
                        tb,
                        bfull,
                    )
                else:
                    eta = K.run_steps(
                        *args,
                        order,
                        b0,
                        b1,
                        k0 + b0,
                        n,
                        scode,
                        eta0,
                        alpha,
                        float(reg.l1),
                        float(reg.l2),
                        pcode,
                        v,
                        scal,
                        aux,
                        lastk,
                        aux,
                        stamp,
                        touched,
                        sign,
                        node,
                        edge,
                        obj.full_rows,
                        obj.sw,
                    )
                obj.n_oracle += b1 - b0
                if scal[K.BETA] < FOLD_BELOW:
                    K.fold(v, aux, scal)
            # end of the pass: every weight up to date, beta folded into v
            k = (epoch + 1) * n
            if pcode != K.CUMUL:
                K.catch_up_all(pcode, v, scal[K.U], k, aux, lastk)
            # one walk over v: beta folded in, and the counts and the finiteness check the pass end
            # needs
            nnz, nnz_bits, finite = K.fold(v, aux, scal)
            if pcode != K.CUMUL:
                aux[:] = 0.0  # all up to date: u restarts from 0 (keeps its precision)
                scal[K.U] = 0.0
            epoch += 1
            if not finite:
                hint = f"eta0={eta0:g} is too large for this problem (lower it, or pick it with eta0=auto)"
                raise TrainingDiverged(
                    f"sgd-l1 diverged: non-finite weights in pass {epoch}; {hint}",
                    algorithm="sgd-l1",
                    iteration=epoch,
                    hint=hint,
                )
            # until the next pass starts, the run's own arrays are this pass's state (no copies: the
            # callback's info["x"] is v, valid until it returns, as with OWL-QN)
            state_fn = state_at(epoch, scal[K.U], eta, False)
            t = time.perf_counter()
            last_f = value(v) if (monitor or epoch == epochs) else float("nan")
            done_f = last_f
            monitor_s += time.perf_counter() - t
            if callback is not None:
                stop = notify(
                    callback,
                    iteration=epoch,
                    f=last_f,
                    x=v,
                    step=float(eta),
                    nnz=int(nnz),
                    state=state_fn,
                    examples_seen=epoch * n,
                    monitor_s=monitor_s,
                )
                if stop:
                    status, message = "stopped", f"stopped by the callback after pass {epoch}"
                    break
            if epoch < epochs:
                state_fn = kept_fn = state_at(epoch, scal[K.U], eta, True, nnz={"x": int(nnz_bits)})
    except KeyboardInterrupt:
        status, message = "interrupted", f"interrupted; the weights of pass {epoch}"
        v, epoch = last_completed(state_fn, x0, d)
        last_f = done_f
        if not resumable and state_fn is kept_fn:
            state_fn = None  # the weights only: not a state to resume from
    if not math.isfinite(last_f) and status != "interrupted":
        last_f = value(v)
    return StochasticResult(
        x=v,
        f=last_f,
        status=status,
        message=message + picked,
        iterations=int(epoch),
        state_fn=state_fn,
    )


def tune_sgd_l1(
    obj,
    space=None,
    *,
    reg=None,
    sample_size: int = 1000,
    passes: int = DEFAULT_PASSES,
    penalty: str = "cumulative",
    schedule: str = "exponential",
    eta0_grid=ETA0_GRID,
    alpha_grid=ALPHA_GRID,
    alpha: float = 0.85,
    seed: int = 0,
    threads: int | None = None,
) -> dict:
    """Pick ``eta0`` (and ``alpha``) on a random sample of the training sequences, as §4.1 does.

    ``obj``: an :class:`~crfkit.objective.Objective` (its corpus, space and
    regularisation are used; ``reg`` overrides the latter), or an encoded
    :class:`~crfkit.corpus.Corpus` with its ``space`` and ``reg``.

    What it does: draws ``sample_size`` sequences (all when there are fewer)
    with ``seed``; on that sample, with the same ``l1``/``l2`` (crfkit's
    per-sequence normalisation keeps the balance of loss and penalty per sample
    the same on a sample as on the whole set) and ``N`` = the sample size in
    the schedule, runs ``passes`` passes of :func:`sgd_l1` with ``penalty`` and
    ``schedule`` for every ``eta0`` in ``eta0_grid`` (the paper's 1.0, 0.5, 0.2,
    0.1; exponential: with ``alpha``, the paper's rule of thumb 0.85) and keeps
    the one with the lowest objective ``f`` on the sample after those passes
    (the paper: the highest ``L_w``).  Then, for the exponential schedule only,
    it tries every ``alpha`` in ``alpha_grid`` (0.9, 0.85, 0.8) with that
    ``eta0`` and keeps the best.  A run that diverges counts as ``f = inf``.

    Returns ``{"eta0", "alpha", "f", "sample_size", "passes", "trials": [(eta0, alpha, f), ...]}``.
    """
    from ..objective import Objective

    if isinstance(obj, Objective):
        corpus, space = obj.corpus, obj.space
        reg = obj.reg if reg is None else reg
    else:
        corpus = obj
        if space is None or reg is None:
            raise ParameterError(
                "tune_sgd_l1: give an Objective, or a corpus with its space and reg"
            )
    if getattr(space, "n_dense", 0) > 0:
        raise CrfkitError("sgd-l1 does not support dense features yet")
    if int(sample_size) < 1 or int(passes) < 1:
        raise ParameterError("tune_sgd_l1: sample_size and passes must be >= 1")
    if not len(eta0_grid):
        raise ParameterError("tune_sgd_l1: eta0_grid is empty")
    n = corpus.n_sequences
    m = min(int(sample_size), n)
    idx = (
        np.sort(np.random.default_rng(int(seed)).choice(n, size=m, replace=False))
        if m < n
        else np.arange(n)
    )
    sub = Objective(corpus.subset(idx), space, reg, threads=threads)
    trials = []

    def trial(e0, a):
        try:
            res = sgd_l1(
                sub,
                None,
                reg=reg,
                max_iterations=int(passes),
                seed=int(seed),
                penalty=penalty,
                schedule=schedule,
                eta0=e0,
                alpha=a,
                monitor=False,
            )
            f = res.f if math.isfinite(res.f) else math.inf
        except ParameterError:
            raise  # a bad setting, not a rate that diverged
        except CrfkitError:
            f = math.inf
        trials.append((float(e0), float(a), float(f)))
        return f

    best_eta = min(eta0_grid, key=lambda e0: trial(e0, alpha))
    best_alpha, best_f = float(alpha), min(f for e0, a, f in trials if e0 == best_eta)
    if schedule == "exponential":
        for a in alpha_grid:
            if float(a) == float(alpha):
                continue  # already tried with this eta0
            f = trial(best_eta, a)
            if f < best_f:
                best_alpha, best_f = float(a), f
    return {
        "eta0": float(best_eta),
        "alpha": best_alpha,
        "f": float(best_f),
        "sample_size": m,
        "passes": int(passes),
        "trials": trials,
    }
