"""CRFsuite's SGD (``l2sgd``) and Cao's natural-gradient (Bregman) updates on top of it (``ngd``).

``l2sgd`` is CRFsuite's ``train_l2sgd.c`` step for step:

* objective ``sum_i nll_i + c2 |w|^2``, i.e. crfkit's ``f`` times ``n``; the
  per-step regulariser ``lam = 2 c2 / N``, which is crfkit's ``l2``;
* step ``eta_t = 1 / (lam (t0 + t)) = eta0 / (1 + lam eta0 t)`` with ``t``
  the steps done over the whole run and ``t0 = 1 / (lam eta0)``;
* one step: ``z <- (1 - eta_t lam) z`` first (the weights are ``w = z v``, so
  the L2 shrinkage of every weight is O(1)), then the gradient of ``nll_i`` at
  the shrunk weights, added to ``v`` with the gain ``eta_t / z``, touching the
  features of the sequence and the transitions only;
* ``eta0`` calibrated on a sample (``calibration_samples`` = 1,000 sequences,
  the first ones of a shuffled order): starting at ``calibration_eta`` = 0.1,
  one pass of SGD from the starting weights per trial, ``eta`` multiplied by
  ``calibration_rate`` = 2 while the trials lower the loss below the initial
  one (until ``calibration_candidates`` = 10 did), then divided by 2 from
  0.05 on until 10 candidates lowered it, at most ``calibration_max_trials``
  = 20 trials in all; the ``eta`` with the lowest loss (the sum of the
  per-step losses over the pass plus ``(lam/2)|w|^2 S``) wins;
* every epoch visits the sequences in a new random order; its "loss" is the
  sum of the per-step losses plus ``(lam/2) |w|^2 N`` (CRFsuite's); the run
  stops once ``(loss[k - period] - loss[k]) / loss[k] < delta`` (``period`` =
  10, ``delta`` = 1e-6) or after ``max_iterations`` epochs (default 1,000),
  and returns the weights of the epoch with the lowest loss (``keep_best``).

``ngd`` is Cao's update (Figure 2 of "Training conditional random fields with
natural gradient descent"): the same loop, schedule and calibration, with the
per-sequence gradient ``g = E_model - E_empirical`` (the net difference per
feature over the sequence) replaced by ``T(g)`` elementwise:

==========  ======================================  =========================
update      T(g)                                    parameter (default)
==========  ======================================  =========================
``u1g1``    ``g / (g^2 + eps)``                     ``eps`` (0.1)
``u2g1``    ``atan(g / sqrt(eps))`` ("arctan.1")    ``eps`` (0.1)
``u2g1b``   ``atan(scale g)`` ("arctan.2")          ``scale`` (10)
``u2g2``    ``erf(alpha g)``                        ``alpha`` (5 sqrt(pi))
``u2g3``    ``gd(beta g) = 2 atan(e^(beta g)) - pi/2``  ``beta`` (10)
==========  ======================================  =========================

L2 goes through the scale as in section 3.5: ``theta = z theta_bar``,
``z_{t+1} = (1 - C lambda_t) z_t``.  The paper prints the gain of Figure 2 as
``lambda_t / ((1 - lambda_t) z_t)``; the algebra of its own previous equation
(``theta_{t+1} = (1 - C lambda_t)(theta_t - lambda_t/(1 - C lambda_t) grad S)``)
needs ``lambda_t / ((1 - C lambda_t) z_t) = lambda_t / z_{t+1}``, which is what
is implemented (and what CRFsuite's ``gain = eta / decay`` is, the paper's
code being CRFsuite's).  As in CRFsuite the gradient is taken at the shrunk
weights ``z_{t+1} theta_bar_t``.  ``table=m`` (odd, >= 3) looks ``T`` up in a
table of ``m`` entries on ``[-table_range, table_range]`` (section 3.6;
nearest entry; computed outside), ``table=0`` computes it.

Sample weights: sequence ``i``'s loss and net gradient are multiplied by
``s_i = omega_i n / W`` (before the transform ``T``), in the epochs, the
calibration and the epoch losses alike.

Both need ``l2 > 0`` (the schedule divides by it).  ``state=`` from
``info["state"]()`` resumes a run bitwise (every epoch's order is drawn from
``(seed, epoch)``); Ctrl-C returns what the run would have returned after its
last completed epoch (with ``keep_best``: the best epoch so far).
"""

from __future__ import annotations

import math
import time

import numpy as np

from ..errors import CrfkitError, ParameterError
from ..kernels import ngd as K
from ..kernels import occ as O
from . import schema as _sc
from .sag import check_supported
from .sgdl1 import pass_order
from .stochastic import StochasticResult, notify

#: what a resumed state may hold (checked by crfkit.training.checkpoint.validate_state before it is
#: used): l2sgd, ngd
STATE_SCHEMA = {
    "algorithm": _sc.text(),
    "iteration": _sc.integer(),
    "x": _sc.vector("p"),
    "w": _sc.vector("p"),
    "best_x": _sc.vector("p"),
    "eta0": _sc.number(),
    "t": _sc.integer(),
    "best_loss": _sc.number(finite=False),
    "best_epoch": _sc.integer(lo=-1),
    "pf": _sc.numbers(lambda d: _sc.BIG, finite=False),
    "step": _sc.number(),
    "monitor_s": _sc.number(lo=0.0, required=False),
    "settings": _sc.mapping(),
}

UPDATES = {
    "u1g1": (K.U1G1, "eps"),
    "u2g1": (K.ATAN, "eps"),
    "u2g1b": (K.ATAN, "scale"),
    "u2g2": (K.ERF, "alpha"),
    "u2g3": (K.GD, "beta"),
}
DEFAULTS = {"eps": 0.1, "scale": 10.0, "alpha": 5.0 * math.sqrt(math.pi), "beta": 10.0}
DEFAULT_EPOCHS = 1000  # CRFsuite's max_iterations for l2sgd
BLOCK = 2048  # steps per numba call (Ctrl-C is seen between calls)


def transform_parameter(update: str, value: float) -> float:
    """The kernel's parameter ``p`` for ``update`` given the paper's parameter (eps, scale, alpha,
    beta)."""
    code, _ = UPDATES[update]
    if update == "u2g1":
        return 1.0 / math.sqrt(value)
    return float(value)


class _Steps:
    """The arrays of one run of the kernel over a corpus (shared by the calibration and the
    epochs)."""

    def __init__(self, obj, lam, code, p, tab, r):
        c, s = obj.corpus, obj.space
        L = s.n_labels
        full = obj.full_rows
        ok0, onk, lab = O.layout(c.tok_ptr, c.attr, s.attr_ptr, s.feat_label, full, L)
        self.args = (
            c.seq_ptr,
            c.tok_ptr,
            ok0,
            onk,
            c.val,
            lab,
            c.y,
            s.trans_index,
            s.n_state,
            s.n_trans,
        )
        self.loss_args = (c.seq_ptr, c.tok_ptr, ok0, onk, c.val, lab, c.y, s.trans_index, s.n_state)
        self.obj, self.lam, self.code, self.p, self.tab, self.r = (
            obj,
            float(lam),
            code,
            float(p),
            tab,
            float(r),
        )
        # per attribute occurrence, the offset of its attribute's block in its sequence's buffer of
        # the net gradient (for a transform T), and the buffers
        if code != K.IDENTITY:
            # an attribute's block is its feature count wide (a full row's count is L); an attribute
            # that occurs once in its sequence with value 1 takes no block (its step reads T of its
            # token's row)
            bo, nbuf = O.buffer_offsets(
                c.seq_ptr, c.tok_ptr, c.attr, np.diff(s.attr_ptr), c.val, True
            )
            most = max(int(nbuf.max()) if nbuf.shape[0] else 0, 0)
            most = max(most + int(s.n_trans), 1)  # and the transition features
            rows = max(int(c.max_length), 1) * L  # T of every token's row
            self.groups = (
                bo,
                nbuf,
                np.empty(most),
                np.empty(most, np.int64),
                np.empty((4, max(most, rows))),
                np.empty(rows),
            )
        else:
            self.groups = (
                np.zeros(0, np.int32),
                np.zeros(1, np.int64),
                np.empty(1),
                np.empty(1, np.int64),
                np.empty((4, 1)),
                np.empty(1),
            )
        self.node = np.empty((max(int(c.max_length), 1), L))
        self.edge = np.empty((L, L))
        self.work = O.Work(c.max_length, L).arrays()

    def run(self, order, start, stop, t0, v, scal):
        eta = K.run_steps(
            *self.args,
            order,
            start,
            stop,
            float(t0),
            self.lam,
            self.code,
            self.p,
            self.tab,
            self.r,
            v,
            scal,
            *self.groups,
            self.node,
            self.edge,
            *self.work,
            self.obj.sw,
        )
        self.obj.n_oracle += stop - start
        return eta

    def loss(self, order, start, stop, v):
        return K.sample_loss(
            *self.loss_args,
            order,
            start,
            stop,
            v,
            1.0,
            self.node,
            self.edge,
            *self.work[:6],
            self.obj.sw,
        )


def calibrate(
    steps: _Steps,
    x0: np.ndarray,
    order: np.ndarray,
    *,
    eta: float = 0.1,
    rate: float = 2.0,
    samples: int = 1000,
    candidates: int = 10,
    max_trials: int = 20,
) -> dict:
    """CRFsuite's ``l2sgd_calibration`` on the first ``samples`` sequences of ``order``.

    Returns ``{"eta0", "init_loss", "trials": [(eta, loss), ...], "samples"}``.
    """
    S = min(int(samples), order.shape[0])
    lam = steps.lam
    init_loss = steps.loss(order, 0, S, x0) + 0.5 * lam * float(np.dot(x0, x0)) * S
    init_eta = float(eta)
    best_eta, best_loss = init_eta, math.inf
    num, dec, trial_no = int(candidates), False, 1
    trials = []
    oracle0 = steps.obj.n_oracle
    while num > 0 or not dec:
        v = np.array(x0, dtype=np.float64, copy=True)
        scal = np.array([1.0, 0.0, 0.0])
        with np.errstate(all="ignore"):
            rc = steps.run(order, 0, S, 1.0 / (lam * eta), v, scal)
            K.fold(v, scal)
            loss = scal[K.LOSS] + 0.5 * lam * float(np.dot(v, v)) * S if rc >= 0 else math.inf
        ok = math.isfinite(loss) and loss < init_loss
        trials.append((float(eta), float(loss)))
        if ok:
            num -= 1
        if math.isfinite(loss) and loss < best_loss:
            best_loss, best_eta = loss, eta
        if not dec:
            if ok and num > 0:
                eta *= rate
            else:
                dec, num, eta = True, int(candidates), init_eta / rate
        else:
            eta /= rate
        trial_no += 1
        if max_trials <= trial_no:
            break
    steps.obj.n_oracle = oracle0 + S * (len(trials) + 1)
    return {"eta0": float(best_eta), "init_loss": float(init_loss), "trials": trials, "samples": S}


def _run(
    name,
    obj,
    x0,
    *,
    reg,
    max_iterations,
    callback,
    seed,
    state,
    update,
    tparam,
    table,
    table_range,
    eta0,
    period,
    delta,
    keep_best,
    monitor,
    calibration_eta,
    calibration_rate,
    calibration_samples,
    calibration_candidates,
    calibration_max_trials,
):
    check_supported(name, obj, reg)
    lam = float(reg.l2)
    if not lam > 0:
        raise ParameterError(
            f"{name} needs l2 > 0 (c2 > 0): its step 1 / (l2 (t0 + t)) divides by it"
        )
    try:
        period, delta = int(period), float(delta)
        table, table_range = int(table), float(table_range)
        samples, candidates, max_trials = (
            int(calibration_samples),
            int(calibration_candidates),
            int(calibration_max_trials),
        )
        cal_eta, cal_rate = float(calibration_eta), float(calibration_rate)
    except (TypeError, ValueError):
        raise ParameterError(
            f"{name}: period, table, calibration_samples/candidates/max_trials must be integers, "
            "delta, table_range, calibration_eta/rate numbers"
        ) from None
    if period < 0:
        raise ParameterError(f"{name}: period must be >= 0 (0: no stopping rule)")
    if table and (table < 3 or table % 2 == 0):
        raise ParameterError(
            f"{name}: table must be 0 (off) or an odd number >= 3 of entries (got {table})"
        )
    if table and not table_range > 0:
        raise ParameterError(f"{name}: table_range must be > 0")
    if not (cal_eta > 0 and cal_rate > 1 and samples >= 1 and candidates >= 1 and max_trials >= 1):
        raise ParameterError(
            f"{name}: calibration_eta > 0, calibration_rate > 1, calibration_samples, "
            "calibration_candidates and calibration_max_trials >= 1"
        )
    code, p = update
    s = obj.space
    n, d = obj.n, s.n_features
    epochs = DEFAULT_EPOCHS if max_iterations is None else int(max_iterations)
    tab = (
        K.make_table(code, p, table, table_range) if (table and code != K.IDENTITY) else np.empty(0)
    )
    steps = _Steps(obj, lam, code, p, tab, table_range)
    settings = {
        "algorithm": name,
        "l2": lam,
        "n": int(n),
        "n_features": int(d),
        "seed": int(seed),
        "update": int(code),
        "p": float(p),
        "table": int(table),
        "table_range": float(table_range),
    }
    calib = None
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
        v = np.array(state["w"], dtype=np.float64, copy=True)
        eta0 = float(state["eta0"])
        t = int(state["t"])
        epoch = int(state["iteration"])
        best_x = np.array(state["best_x"], dtype=np.float64, copy=True)
        best_loss = float(state["best_loss"])
        best_epoch = int(state["best_epoch"])
        pf = [float(x) for x in state["pf"]]
        eta = float(state["step"])
        monitor_s = float(state.get("monitor_s", 0.0))
    else:
        v = np.zeros(d) if x0 is None else np.array(x0, dtype=np.float64, copy=True)
        if v.shape != (d,):
            raise ParameterError(f"x0 has shape {v.shape}; the feature space has {d} features")
        if eta0 is None or eta0 == "auto":
            # CRFsuite shuffles once, calibrates on the first samples, then shuffles at every epoch
            calib = calibrate(
                steps,
                v,
                pass_order(seed, -1 & 0x7FFFFFFF, n),
                eta=cal_eta,
                rate=cal_rate,
                samples=samples,
                candidates=candidates,
                max_trials=max_trials,
            )
            eta0 = calib["eta0"]
        else:
            try:
                eta0 = float(eta0)
            except (TypeError, ValueError):
                raise ParameterError(
                    f"{name}: eta0 must be a number or 'auto' (got {eta0!r})"
                ) from None
            if not (math.isfinite(eta0) and eta0 > 0):
                raise ParameterError(f"{name}: eta0 must be > 0 (got {eta0!r})")
        t, epoch = 0, 0
        best_x, best_loss, best_epoch = v.copy(), math.inf, 0
        pf = []
        eta = float("nan")
        monitor_s = 0.0
    t0 = 1.0 / (lam * eta0)
    picked = (
        ""
        if calib is None
        else (
            f"; eta0={eta0:g} calibrated on {calib['samples']} sequences (initial loss {calib['init_loss']:.6g}; "
            + ", ".join(f"eta={e:g}: {f:.6g}" for e, f in calib["trials"])
            + ")"
        )
    )

    def snapshot():
        w, bx, pf_ = v.copy(), best_x.copy(), list(pf)
        ep, t_, bl, be, st, ms = epoch, t, best_loss, best_epoch, eta, monitor_s
        return lambda: {
            "algorithm": name,
            "iteration": int(ep),
            "x": (bx if keep_best else w),
            "w": w,
            "eta0": float(eta0),
            "t": int(t_),
            "best_x": bx,
            "best_loss": float(bl),
            "best_epoch": int(be),
            "pf": list(pf_),
            "step": float(st),
            "monitor_s": float(ms),
            "settings": dict(settings),
        }

    state_fn = snapshot() if epoch > 0 else None
    status, message = "max_iterations", f"{epochs} epochs"
    f_last = float("nan")
    try:
        while epoch < epochs:
            order = pass_order(seed, epoch, n)
            scal = np.array([1.0, float(t), 0.0])
            for b0 in range(0, n, BLOCK):
                eta = steps.run(order, b0, min(n, b0 + BLOCK), t0, v, scal)
                if eta < 0:
                    raise CrfkitError(
                        f"{name}: eta0={eta0:g} is too large: eta * l2 >= 1 makes the L2 shrinkage "
                        "1 - eta*l2 non-positive (give a smaller eta0, or let it be calibrated)"
                    )
            K.fold(v, scal)
            loss = scal[K.LOSS] + 0.5 * lam * float(np.dot(v, v)) * n
            if not (math.isfinite(loss) and np.all(np.isfinite(v))):
                raise CrfkitError(
                    f"{name} diverged in epoch {epoch + 1} (loss {loss}); eta0={eta0:g} is too large "
                    "(give a smaller eta0, or let it be calibrated)"
                )
            t = int(scal[K.T_])
            epoch += 1
            if loss < best_loss:
                best_loss, best_epoch = float(loss), epoch
                best_x = v.copy()
            # CRFsuite's rule: the relative improvement over `period` epochs ago
            if period:
                improvement = (pf[(epoch - 1) % period] - loss) / loss if period < epoch else delta
                if len(pf) < period:
                    pf.append(float(loss))
                else:
                    pf[(epoch - 1) % period] = float(loss)
            else:
                improvement = math.inf
            state_fn = snapshot()
            x = v.copy()
            tm = time.perf_counter()
            f_last = obj.value(x, count=False) if monitor else float("nan")
            monitor_s += time.perf_counter() - tm
            if callback is not None:
                stop = notify(
                    callback,
                    iteration=epoch,
                    f=f_last,
                    x=x,
                    step=float(eta),
                    nnz=int(np.count_nonzero(x)),
                    state=state_fn,
                    examples_seen=epoch * n,
                    monitor_s=monitor_s,
                    steps=t,
                )
                if stop:
                    status, message = "stopped", f"stopped by the callback after epoch {epoch}"
                    break
            if improvement < delta:
                status, message = (
                    "converged",
                    (
                        f"relative improvement {improvement:.3g} < delta={delta:g} over "
                        f"{period} epochs"
                    ),
                )
                break
    except KeyboardInterrupt:
        status, message = "interrupted", f"interrupted; the weights as of epoch {epoch}"
        if state_fn is None:
            x = np.zeros(d) if x0 is None else np.array(x0, dtype=np.float64, copy=True)
            return StochasticResult(
                x=x,
                f=obj.value(x, count=False),
                status=status,
                message=message + picked,
                iterations=0,
                state_fn=None,
            )
        st = state_fn()
        epoch = st["iteration"]
        x = np.array(st["x"], copy=True)
        return StochasticResult(
            x=x,
            f=obj.value(x, count=False),
            status=status,
            message=message + picked,
            iterations=int(epoch),
            state_fn=state_fn,
        )
    if keep_best and best_epoch > 0:
        x = best_x.copy()
        message += f"; the weights of epoch {best_epoch} (lowest loss {best_loss:.8g})"
        f = (
            obj.value(x, count=False)
            if (best_epoch != epoch or not math.isfinite(f_last))
            else f_last
        )
    else:
        x = v.copy()
        f = f_last if math.isfinite(f_last) else obj.value(x, count=False)
    return StochasticResult(
        x=x, f=f, status=status, message=message + picked, iterations=int(epoch), state_fn=state_fn
    )


_CAL = dict(
    calibration_eta=0.1,
    calibration_rate=2.0,
    calibration_samples=1000,
    calibration_candidates=10,
    calibration_max_trials=20,
)


def l2sgd(
    obj,
    x0,
    *,
    reg,
    max_iterations=None,
    callback=None,
    seed: int = 0,
    state: dict | None = None,
    eta0: float | str = "auto",
    period: int = 10,
    delta: float = 1e-6,
    keep_best: bool = True,
    monitor: bool = True,
    calibration_eta: float = 0.1,
    calibration_rate: float = 2.0,
    calibration_samples: int = 1000,
    calibration_candidates: int = 10,
    calibration_max_trials: int = 20,
) -> StochasticResult:
    """CRFsuite's SGD (``crfsuite learn -a l2sgd``); see the module docstring.

    ``eta0``: ``"auto"`` (calibrated as CRFsuite does) or a number.  ``period``,
    ``delta``: CRFsuite's stopping rule (``period=0`` turns it off; with
    ``delta=0`` it stops once the loss rose over ``period`` epochs).
    ``keep_best``: return the weights of the epoch with the lowest loss.
    ``monitor``: compute crfkit's objective ``f`` after every epoch (for the
    trace; it does not count as effective passes); False reports NaN.
    ``max_iterations``: epochs (default 1,000).
    """
    return _run(
        "l2sgd",
        obj,
        x0,
        reg=reg,
        max_iterations=max_iterations,
        callback=callback,
        seed=seed,
        state=state,
        update=(K.IDENTITY, 0.0),
        tparam=None,
        table=0,
        table_range=1.0,
        eta0=eta0,
        period=period,
        delta=delta,
        keep_best=keep_best,
        monitor=monitor,
        calibration_eta=calibration_eta,
        calibration_rate=calibration_rate,
        calibration_samples=calibration_samples,
        calibration_candidates=calibration_candidates,
        calibration_max_trials=calibration_max_trials,
    )


def ngd(
    obj,
    x0,
    *,
    reg,
    max_iterations=None,
    callback=None,
    seed: int = 0,
    state: dict | None = None,
    update: str = "u2g1",
    eps: float | None = None,
    scale: float | None = None,
    alpha: float | None = None,
    beta: float | None = None,
    table: int = 0,
    table_range: float = 1.0,
    eta0: float | str = "auto",
    period: int = 10,
    delta: float = 1e-6,
    keep_best: bool = False,
    monitor: bool = True,
    calibration_eta: float = 0.1,
    calibration_rate: float = 2.0,
    calibration_samples: int = 1000,
    calibration_candidates: int = 10,
    calibration_max_trials: int = 20,
    libm: bool = False,
) -> StochasticResult:
    """Cao's natural-gradient updates (``update`` = u1g1 | u2g1 | u2g1b | u2g2 | u2g3) on CRFsuite's
    SGD.

    ``eps`` (u1g1, u2g1; 0.1), ``scale`` (u2g1b; 10), ``alpha`` (u2g2; 5
    sqrt(pi)), ``beta`` (u2g3; 10): the transform's parameter; giving one that
    the update does not use is an error.  ``table``: 0, or the (odd) number of
    entries of the lookup table of section 3.6 on ``[-table_range,
    table_range]``.  The rest as :func:`l2sgd`, except ``keep_best``, off by
    default: these updates do not minimise the log-loss, which can rise from
    the first epoch on while the tagger improves (CoNLL-2000 with every
    attribute x label: the loss of u1g1 doubled over epochs 1-11 while test
    accuracy went from 95.36 to 96.01), so the lowest-loss epoch is not the
    best model; the period/delta rule still stops a run whose loss rose.
    ``libm``: compute arctan, erf and gd through libm (one call per gradient entry) instead of the
    vectorisable approximations of :mod:`crfkit.kernels.vecmath` (the default: within 1.2, 4 and 2.9
    ulp of libm's values, well inside the tests' tolerances, and 4-8 times cheaper per entry:
    2.5-4.5 times ``u1g1``'s division per entry, against 11-37 times through libm;
    ``benchmarks/ngd_profile.py``).
    """
    if update not in UPDATES:
        raise ParameterError(f"ngd: unknown update {update!r}; one of {', '.join(UPDATES)}")
    code, pname = UPDATES[update]
    given = {"eps": eps, "scale": scale, "alpha": alpha, "beta": beta}
    wrong = [k for k, val in given.items() if val is not None and k != pname]
    if wrong:
        raise ParameterError(f"ngd: update {update} takes {pname}, not {', '.join(wrong)}")
    value = given[pname] if given[pname] is not None else DEFAULTS[pname]
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise ParameterError(f"ngd: {pname} must be a number (got {value!r})") from None
    if not (math.isfinite(value) and value > 0):
        raise ParameterError(f"ngd: {pname} must be > 0 (got {value!r})")
    if libm in (True, "true", "True", "1", 1):
        code = {K.ATAN: K.ATAN_LIBM, K.ERF: K.ERF_LIBM, K.GD: K.GD_LIBM}.get(code, code)
    elif libm not in (False, "false", "False", "0", 0):
        raise ParameterError(f"ngd: libm must be true or false (got {libm!r})")
    return _run(
        "ngd",
        obj,
        x0,
        reg=reg,
        max_iterations=max_iterations,
        callback=callback,
        seed=seed,
        state=state,
        update=(code, transform_parameter(update, value)),
        tparam=value,
        table=table,
        table_range=table_range,
        eta0=eta0,
        period=period,
        delta=delta,
        keep_best=keep_best,
        monitor=monitor,
        calibration_eta=calibration_eta,
        calibration_rate=calibration_rate,
        calibration_samples=calibration_samples,
        calibration_candidates=calibration_candidates,
        calibration_max_trials=calibration_max_trials,
    )
