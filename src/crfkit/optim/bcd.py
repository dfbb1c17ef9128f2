"""Block coordinate descent for the elastic-net CRF objective (Lavergne, Cappé & Yvon 2010, §3.4;
Sokolovska, Lavergne, Cappé & Yvon 2010).

Objective: ``f(w) = (1/n) sum_i nll_i(w) + (l2/2)|w|^2 + l1|w|_1`` (DESIGN.md).

Blocks.  One block per attribute (observation test) ``a``: its state features
``attr_ptr[a]:attr_ptr[a+1]`` (one per label seen with it), and one block for
all the transition features.  With label-pair x observation ("bigram")
features, also one block per bigram attribute ``b``: its label-pair features
``bigram_offset + battr_ptr[b]:...`` (every pair with ``--support all``, the
pairs seen in training with the observed support) -- ``blocks="separate"``,
the default.  ``blocks="joint"`` makes one block per *observation*, as
Wapiti: a state attribute and the bigram attribute of the same name (a
Wapiti ``*`` pattern makes both) share a block (see :func:`joint_index`).
A joint block needs one forward-backward and one line search where two
separate blocks need two, but its diagonal leaves out the strong coupling
of its two parts (at a position, raising label ``y`` and raising every pair
``(i, y)`` move the same marginal), so its steps overshoot and are cut back:
measured on NETtalk (Wapiti's feature space, one thread), joint sweeps cost
0.65-0.7x as much and gain less, separate blocks reach a given objective
sooner (1-grm: 65,571 after 3 sweeps in 172 s against 64,477 after 5 in
195 s; 3-grm: 57,755 after 2 sweeps in 207 s against 63,730 after 3 in 217 s),
hence the default.

Attribute block update (eq. 9-11).  With ``g_k`` the gradient of the loss part
``(1/n) sum_i nll_i`` and ``h_k`` its second derivative approximated as the
paper does -- only the diagonal of the block's Hessian, and within it the sum
over the occurrences of the per-position variances ``v^2 p_t(y)(1 - p_t(y))``
(exact when the attribute occurs at most once per sequence; the covariances
between two occurrences in one sequence are left out) -- times ``kappa``::

    w_k <- s(h_k w_k - g_k, l1) / (h_k + l2)          (s: soft-thresholding, eq. 11)

which is eq. (10) with the L2 term kept exactly in the quadratic model.  For a
label-pair feature ``(b, i, j)`` the same with the edge marginals: ``g`` sums
``v (p_t(i, j) - 1[y_{t-1} = i, y_t = j])`` over the occurrences of ``b`` at
positions ``t >= 1`` (the first token has no incoming transition) and ``h`` the
``v^2 p_t(i, j)(1 - p_t(i, j))``, times ``kappa``.  A joint block takes the
step on both parts at once, with one Armijo backtracking.  The
marginals come from forward-backward on the sequences containing ``a`` only
(inverted index attribute -> sequences -> positions), with the truncated
recursions of §4.1: forward over ``0..t_last``, backward over
``T-1..t_first`` where ``t_first``/``t_last`` are the first/last occurrence
of ``a`` in the sequence -- exact, about half the work for an attribute that
occurs once.  (The "window around the occurrences where the marginals
outside have converged" variant is *not* implemented: it would approximate;
this one is exact.)  Beyond the paper, the messages are kept between blocks:
every token's last forward and backward message, with per sequence the last
position where each is still that of the current weights.  A block's step
changes the emissions (and, for label-pair features, the transition rows) at
its occurrences only, so it leaves the forward messages before its first
occurrence and the backward ones from its last on valid; the next block on
that sequence crosses only the positions in between (about a third of a
sequence on average, against a whole one) and, with label-pair features,
builds only their transition rows.  Exact too: the kept messages are what a
recursion from the start would give, to the bit.  Memory: 2 x tokens x labels
doubles.

Safeguard.  The block step ``d`` is scaled by ``step = min(1, max_step /
max|d|)`` and halved (at most ``max_back`` times) until the exact change of
the objective satisfies ``F(w + step d) - F(w) <= sigma * step * Delta`` where
``Delta = g.d + penalty change`` is the decrease the model predicts (Tseng &
Yun's Armijo rule for coordinate gradient descent): the objective never
increases, and the method converges to the optimum.  Each trial needs the
new ``log Z`` of the touched sequences only, and only over the window
``t_first..t_last`` (the forward message before it and the backward message
after it are unchanged and kept from the gradient pass).  A block whose
predicted decrease is below rounding level is left alone.

``safeguard="scale"`` replaces the line search by Wapiti's rule (Wapiti 1.5.0's
BCD, the paper's tool): a block's curvatures are multiplied by ``a = max(1,
max_k |g_k / h_k|)`` (per part: state features, label-pair features; ``h_k =
0`` left out of the maximum, where Wapiti's would be infinite) before the step
of eq. (10) is taken, whole, with no trial: no coordinate's Newton step
exceeds ``1 / kappa`` before the penalties, and a block costs one
forward-backward of its sequences instead of that plus at least one trial.
The transitions take one such step per sweep by default (``trans_steps=1``:
Wapiti's transitions are the label-pair block of its ``*`` observation,
visited once a sweep like every block).  The objective is not guaranteed to
decrease block by block (no convergence proof).  Which rule lowers it faster
depends on the problem: NETtalk in Wapiti's space, 5 sweeps, one thread (sum
form; README, "BCD with label-pair x observation features"): at 3-grm the
scaled rule reaches 35,573 (separate blocks) and 35,695 (joint) against the
Armijo rule's 44,680 (Wapiti 35,518), at 0.44x / 0.30x its time (82.1 s and
56.2 s against 186.9 s, with the messages kept between blocks); at 1-grm it
stays with Wapiti's far-from-converged 91,383 (89,930 / 91,706) where the
Armijo rule reaches 58,551.  Hence Armijo stays the default.  ``log Z`` of
the touched sequences is not updated by scaled steps; the driver recomputes
the caches after the sweep (one forward pass of the corpus, counted in the
oracle calls).

Defaults measured on the first 800 CoNLL-2000 training sentences (c1 = c2 = 1,
gap to OWL-QN's objective after 12 sweeps): ``kappa`` 1.0 -> 3.2%, 1.5 -> 2.1%
(with ``trans_steps=4``, ``max_step=100``; 2.5 -> 5.3%, 4.0 -> 11.6%): the
per-position diagonal underestimates the curvature of the frequent, repeated
attributes, and damping it by 1.5 avoids the
zigzag.  ``trans_steps`` 1 -> 4 and ``max_step`` 10 -> 100 each helped too.

Transition block: ``trans_steps`` (default 4) such diagonal prox-Newton steps
at the start of every sweep, each on a full forward-backward of all sequences
(multi-threaded) with its own Armijo backtracking (forward passes only).
Diagonal: ``sum_t p_t(i,j)(1 - p_t(i,j))``.

Caches: emission scores of every token (and their exponentials), ``log Z``
of every sequence, the kept messages.  An accepted block step updates the
emission rows of its occurrences, the ``log Z`` of its sequences and their
messages' validity; a change of the transitions marks every message stale.
Every sweep starts by
recomputing all caches from the weights, so rounding cannot drift across
sweeps and a run resumed from the weights of sweep k is bitwise the
uninterrupted run.

Sweeps.  ``max_iterations`` sweeps (default 50); a sweep is the transition
step(s), then every attribute block once, in a random order drawn from
``(seed, sweep)`` (``order="random"``) or in attribute order (``"cyclic"``).
Stops (status ``converged``) when the relative decrease of the objective over
``period`` sweeps falls below ``delta`` (``(f[k-period] - f[k]) / |f[k]| <
delta``; ``delta=0`` never) on a sweep that visited every block.

Shrinking (not in the paper; the active-set heuristic of coordinate descent
for L1 problems, e.g. Yuan et al. 2010): with an L1 term most blocks sit at
zero with ``|g_k| <= l1``, yet each visit costs forward-backward on all their
sequences.  A block found at zero and left there for the ``r``-th time in a
row skips its next ``min(2^(r-1), shrink)`` visits (default ``shrink=8``;
0: off).  When the stopping rule fires on a sweep that skipped blocks, the
next sweep visits all of them and the rule is tested again, so a run only
stops after a full sweep.  The objective used for the rule is the exact
value held by the caches at the end of the sweep; ``monitor=True`` (default)
also evaluates ``obj.value`` for the callback's ``f`` (time reported as
``monitor_s``).

Effective passes: a block's forward-backward on a sequence and each trial's
window forward on it count as one oracle call each; the transition step's
full forward-backward and each of its trial forward passes count as one full
evaluation.

Sample weights (``obj.sw``, the scales ``omega_i n / W``): every sequence's contribution to a
block's gradient and curvature, to the change of log Z a trial step makes, and to the transition
statistics is multiplied by its scale (the empirical counts are the objective's, already weighted),
so the blocks minimise the weighted objective exactly.

Position-dependent transitions (bigram features).  The transition scores into token ``t`` are then
``M_t = trans + sum over the bigram attributes b at t of v_b W_b``.  Nothing per position is cached
(a dense float64 ``exp(M_t)`` for every training position is ``n_tokens x L^2 x 8`` bytes, 2.7 GB on
NETtalk 3-grm): the kernels build, for the sequence a block's forward-backward or trial visits, the
rows of the positions they need from the weights, into scratch of ``Tmax x L^2`` (exponentials taken
again only at the pairs that non-zero bigram weights touch, from ``exp(trans - max)``, when those
are few).  A trial step of a joint block changes the emissions at its state occurrences and ``M_t``
at its label-pair occurrences, inside the same window.  The transition block's statistics and trial
log Z's run on the per-position ``M_t`` (its step moves ``trans``, which every ``M_t`` holds).
Weights that make a row ``M_t`` span more than ``MAX_SCALED_TRANSITION_RANGE`` are refused by the
safeguard (the scaled recursions could not represent them); the caches check every row when they are
made.

Dense real-valued feature blocks are refused (CrfkitError).

Code: this module holds the entry point :func:`bcd` (its checks and the sweep loop) and the block
order; :mod:`crfkit.optim.bcd_index` the inverted indexes, :mod:`crfkit.optim.bcd_engine` the
:class:`Engine` (caches, derivatives, steps).  Their names are re-exported here.
"""

from __future__ import annotations

import math
import time

import numpy as np

from ..errors import CrfkitError, ParameterError
from ..kernels import bcd as K
from ..kernels.vec import all_finite
from ..memtrim import lazy_copy, lazy_zeros
from . import schema as _sc
from .bcd_engine import SKIP_EPS, Engine
from .bcd_index import Index, JointIndex, bigram_index, inverted_index, joint_index
from .stochastic import StochasticResult, last_completed, notify, state_function

#: what a resumed state may hold (checked by crfkit.training.checkpoint.validate_state before it is
#: used): the shrinking counters have one entry per block (at most the attributes and bigram
#: attributes; the run checks the exact count)
STATE_SCHEMA = {
    "x": _sc.vector("p"),
    "zrun": _sc.array(lambda d: [(range(d.A + 1),)], dtypes=_sc.I8, lo=0, hi=_sc.BIG),
    "skip": _sc.array(lambda d: [(range(d.A + 1),)], dtypes=_sc.I8, lo=0, hi=_sc.BIG),
    "iteration": _sc.integer(),
    "fs": _sc.numbers(lambda d: _sc.BIG),
    "settings": _sc.mapping(),
}

__all__ = [
    "BLOCKS",
    "CHUNK",
    "DEFAULT_SWEEPS",
    "ORDERS",
    "SAFEGUARDS",
    "SKIP_EPS",
    "Engine",
    "Index",
    "JointIndex",
    "bcd",
    "bigram_index",
    "block_order",
    "inverted_index",
    "joint_index",
]

DEFAULT_SWEEPS = 50
ORDERS = ("random", "cyclic")
BLOCKS = ("separate", "joint")
SAFEGUARDS = ("armijo", "scale")
CHUNK = 4096  # blocks per numba call (Ctrl-C is seen between calls)


def block_order(seed: int, sweep: int, n_attr: int, order: str = "random") -> np.ndarray:
    """The attribute blocks of sweep ``sweep`` (from 0), in visiting order (``n_attr``: the number
    of blocks, state attributes then bigram attributes)."""
    if order == "cyclic":
        return np.arange(n_attr, dtype=np.int64)
    return (
        np.random.default_rng([int(seed) & 0xFFFFFFFF, int(sweep)])
        .permutation(n_attr)
        .astype(np.int64)
    )


def _check_params(
    reg,
    max_iterations,
    delta,
    period,
    order,
    kappa,
    trans_steps,
    sigma,
    max_step,
    max_back,
    shrink,
    blocks="separate",
    safeguard="armijo",
):
    def num(name, x):
        try:
            x = float(x)
        except (TypeError, ValueError):
            raise ParameterError(f"bcd: {name} must be a number (got {x!r})") from None
        if not math.isfinite(x):
            raise ParameterError(f"bcd: {name} must be finite (got {x!r})")
        return x

    def count(name, x, lo):
        if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or int(x) < lo:
            raise ParameterError(f"bcd: {name} must be an integer >= {lo} (got {x!r})")
        return int(x)

    if order not in ORDERS:
        raise ParameterError(f"bcd: unknown order {order!r}; one of {', '.join(ORDERS)}")
    if blocks not in BLOCKS:
        raise ParameterError(f"bcd: unknown blocks {blocks!r}; one of {', '.join(BLOCKS)}")
    if safeguard not in SAFEGUARDS:
        raise ParameterError(
            f"bcd: unknown safeguard {safeguard!r}; one of {', '.join(SAFEGUARDS)}"
        )
    delta, kappa, sigma, max_step = (
        num("delta", delta),
        num("kappa", kappa),
        num("sigma", sigma),
        num("max_step", max_step),
    )
    if delta < 0:
        raise ParameterError(f"bcd: delta must be >= 0 (got {delta!r})")
    if kappa <= 0:
        raise ParameterError(f"bcd: kappa must be > 0 (got {kappa!r})")
    if not 0 < sigma < 1:
        raise ParameterError(f"bcd: sigma must be in (0, 1) (got {sigma!r})")
    if max_step <= 0:
        raise ParameterError(f"bcd: max_step must be > 0 (got {max_step!r})")
    period = count("period", period, 1)
    trans_steps = count("trans_steps", trans_steps, 0)
    max_back = count("max_back", max_back, 0)
    shrink = count("shrink", shrink, 0)
    if max_iterations is not None:
        count("max_iterations (sweeps)", max_iterations, 0)
    return delta, period, kappa, trans_steps, sigma, max_step, max_back, shrink


def bcd(
    obj,
    x0: np.ndarray | None,
    *,
    reg,
    max_iterations: int | None = None,
    callback=None,
    seed: int = 0,
    delta: float = 1e-5,
    period: int = 1,
    order: str = "random",
    kappa: float = 1.5,
    trans_steps: int | None = None,
    sigma: float = 1e-4,
    max_step: float = 100.0,
    max_back: int = 20,
    shrink: int = 8,
    monitor: bool = True,
    blocks: str = "separate",
    safeguard: str = "armijo",
    state: dict | None = None,
) -> StochasticResult:
    """Block coordinate descent (one block per attribute + the transition block); see the module
    doc.

    ``max_iterations``: sweeps (default 50).  ``delta``/``period``: stop when the
    objective decreased by less than ``delta`` (relative) over ``period`` sweeps.
    ``order``: ``random`` (a permutation per sweep from ``seed``) or ``cyclic``.
    ``kappa``: factor on the diagonal curvature (> 1: shorter, safer steps).
    ``trans_steps``: transition-block steps per sweep (default 4; 1 with ``safeguard="scale"``:
    Wapiti's sweep visits every block once, its transitions the bigram block of its ``*``
    observation).  ``sigma``, ``max_step``, ``max_back``: the Armijo safeguard; ``safeguard``:
    ``armijo`` (default) or ``scale`` (Wapiti's rule, no line search; see the module doc).
    ``shrink``: the most sweeps a block found at zero (and staying there) is left out of (0: never).
    ``blocks`` (label-pair x observation features only): ``separate`` (a block per state attribute
    and one per bigram attribute) or ``joint`` (one per observation, as Wapiti).  ``monitor``:
    evaluate ``obj.value`` for the callback's ``f`` (else the value held by the caches).  ``state``:
    resume from ``info['state']()`` of an earlier run with the same settings.
    """
    if trans_steps is None:
        trans_steps = 1 if safeguard == "scale" else 4
    delta, period, kappa, trans_steps, sigma, max_step, max_back, shrink = _check_params(
        reg,
        max_iterations,
        delta,
        period,
        order,
        kappa,
        trans_steps,
        sigma,
        max_step,
        max_back,
        shrink,
        blocks,
        safeguard,
    )
    if getattr(obj.space, "n_dense", 0) > 0:
        raise CrfkitError("bcd does not support dense features (its blocks are attribute rows)")
    sweeps = DEFAULT_SWEEPS if max_iterations is None else int(max_iterations)
    s = obj.space
    d = s.n_features
    settings = {
        "order": order,
        "kappa": kappa,
        "trans_steps": trans_steps,
        "sigma": sigma,
        "max_step": max_step,
        "max_back": max_back,
        "shrink": shrink,
        "seed": int(seed),
        "l1": float(reg.l1),
        "l2": float(reg.l2),
        "n": int(obj.n),
        "n_features": int(d),
    }
    if getattr(s, "n_bigram", 0) > 0:
        settings["blocks"] = blocks
    if safeguard != "armijo":
        settings["safeguard"] = safeguard
    if state is not None:
        bad = [k for k, v in settings.items() if state.get("settings", {}).get(k) != v]
        if bad:
            raise ParameterError(
                "bcd: the state was made with other settings: "
                + ", ".join(
                    f"{k}={state.get('settings', {}).get(k)!r} there, {settings[k]!r} now"
                    for k in bad
                )
            )
        w = lazy_copy(
            np.asarray(state["x"], dtype=np.float64), min_size=0
        )  # (sparse: its non-zeros)
        if w.shape != (d,):
            raise ParameterError(
                f"bcd: the state's weights have shape {w.shape}; the feature space has {d} features"
            )
        fs = [float(x) for x in state["fs"]]
        sweep0 = int(state["iteration"])
    else:
        # zeros whose pages count once written: the kernels write only the weights that move, so a
        # large candidate space of which few weights become non-zero takes their pages, not the
        # vector's size
        w = lazy_zeros(d) if x0 is None else lazy_copy(np.asarray(x0, dtype=np.float64), min_size=0)
        if w.shape != (d,):
            raise ParameterError(f"x0 has shape {w.shape}; the feature space has {d} features")
        fs = []
        sweep0 = 0
    eng = Engine(obj, w, blocks)
    n_attr = eng.n_blocks
    if state is not None:
        zrun = np.array(state["zrun"], dtype=np.int64, copy=True)
        skip = np.array(state["skip"], dtype=np.int64, copy=True)
        if zrun.shape != (n_attr,) or skip.shape != (n_attr,):
            raise ParameterError(
                "bcd: the state's shrinking counters do not match the feature space"
            )
    else:
        zrun = np.zeros(n_attr, dtype=np.int64)
        skip = np.zeros(n_attr, dtype=np.int64)
    monitor_s = 0.0

    def state_at(sweep_, keep):
        # keep=False: the run's own arrays, copied when asked for (valid until the next sweep
        # steps); keep=True: the sweep just ended, kept through the next sweep (for Ctrl-C and the
        # checkpoint written after it) in the least memory: an L1 model's weights as their non-zeros
        return state_function(
            {"x": w, "zrun": zrun, "skip": skip},
            {"iteration": int(sweep_), "fs": fs, "settings": settings},
            keep=keep,
        )

    state_fn = state_at(sweep0, True) if sweep0 > 0 else None
    last_f = float("nan")
    sweep = sweep0
    status, message = "max_iterations", f"{sweeps} sweeps"
    stats = np.zeros(K.N_STATS)
    try:
        # fresh: the caches were just computed from the weights as they are (a refresh is a function
        # of w, so a second one before the weights move would find the same values)
        fresh = False
        if not fs:
            eng.refresh()
            fresh = True
            fs.append(eng.objective())  # f at the start: the reference of the first sweeps' rule
        while sweep < sweeps:
            if not fresh:
                eng.refresh()
            fresh = False
            stats[:] = 0.0
            for _ in range(trans_steps):
                eng.transition_step(reg, kappa, sigma, max_step, max_back, stats, safeguard)
            blocks = block_order(seed, sweep, n_attr, order)
            for b0 in range(0, n_attr, CHUNK):
                eng.attribute_blocks(
                    blocks,
                    b0,
                    min(n_attr, b0 + CHUNK),
                    reg,
                    kappa,
                    sigma,
                    max_step,
                    max_back,
                    stats,
                    shrink,
                    zrun,
                    skip,
                    safeguard,
                )
            if safeguard == "scale":
                eng.refresh()  # the blocks' steps took no trial: log Z of every sequence is stale
                fresh = True  # and the next sweep starts from these caches
                obj.n_oracle += obj.n
            obj.n_oracle += int(stats[K.ST_ORACLE])
            sweep += 1
            if not all_finite(w):  # no bool temporary of the candidate space's size
                raise CrfkitError(f"bcd: non-finite weights in sweep {sweep}")
            f_cache = eng.objective()
            fs.append(f_cache)
            shrunk = int(stats[K.ST_SHRUNK])
            conv = (
                delta > 0
                and len(fs) > period
                and (fs[-1 - period] - fs[-1]) / max(abs(fs[-1]), 1e-300) < delta
            )
            if conv and shrunk:
                # converged on a sweep that left blocks out: the next sweep visits every block
                conv = False
                skip[:] = 0
            # until the next sweep starts, the run's own arrays are this sweep's state (no copies:
            # the callback's info["x"] is w, valid until it returns, as with OWL-QN)
            state_fn = state_at(sweep, False)
            t = time.perf_counter()
            last_f = obj.value(w, count=False) if monitor else f_cache
            monitor_s += time.perf_counter() - t
            if callback is not None:
                stop = notify(
                    callback,
                    iteration=sweep,
                    f=last_f,
                    x=w,
                    step=float("nan"),
                    nnz=int(np.count_nonzero(w)),
                    state=state_fn,
                    monitor_s=monitor_s,
                    accepted=int(stats[K.ST_ACCEPT]),
                    rejected=int(stats[K.ST_REJECT]),
                    trials=int(stats[K.ST_TRIALS]),
                    shrunk=shrunk,
                )
                if stop:
                    status, message = "stopped", f"stopped by the callback after sweep {sweep}"
                    break
            if conv:
                status, message = (
                    "converged",
                    (f"relative decrease of the objective below {delta:g} over {period} sweep(s)"),
                )
                break
            if sweep < sweeps:
                state_fn = state_at(sweep, True)
    except KeyboardInterrupt:
        status, message = "interrupted", f"interrupted; the weights of sweep {sweep}"
        x, sweep = last_completed(state_fn, x0, d)
        last_f = float("nan")
    else:
        x = w
    if not math.isfinite(last_f):
        last_f = obj.value(x, count=False)
    return StochasticResult(
        x=x, f=last_f, status=status, message=message, iterations=int(sweep), state_fn=state_fn
    )
