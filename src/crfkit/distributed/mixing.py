"""Iterative parameter mixing (McDonald, Hall & Mann 2010; Zinkevich, Weimer, Smola & Li 2010) for
``sg``, ``asg`` and ``sgd-l1`` on a Dask cluster.

Each round (one effective pass): the client broadcasts ``w``; every worker runs one epoch of the
method over its own sequences (its block of shards) from ``w`` (in a random order drawn from the
seed, the round and the block); the client sets ``w`` to the average of the workers' weights,
weighted by their numbers of sequences, and evaluates the objective at it (over every shard, not
counted as a pass).

* ``sg``: constant step ``eta``; the mixed weights are the iterate.
* ``asg``: every shard also returns the average of its epoch's iterates; the client keeps the
  running mean of the mixed epoch averages over the rounds (Polyak averaging over the whole run)
  and reports it, while the next round starts from the mixed plain iterates.
* ``sgd-l1`` (Tsuruoka et al. 2009): the learning-rate schedule continues over the rounds (the
  shard's step ``k`` starts at ``round * n_shard``, so that ``eta_k`` decays per pass as in one
  process); the cumulative-penalty bookkeeping restarts from the mixed weights each round.

Unlike the full-batch oracle this is not the single-process run: its iterates differ (each shard
sees only its data during an epoch), and it converges to a neighbourhood of the optimum whose size
shrinks with the step size (Zinkevich et al., Thm 1); ``tests/test_distributed.py`` measures it.
The state for checkpoints holds the round, the weights and the running average, so ``--resume``
continues to the same result.
"""

from __future__ import annotations

import time

import numpy as np

from ..errors import ParameterError
from ..optim import schema as _sc
from ..optim.stochastic import StochasticResult
from . import shards as S

#: what a resumed state may hold (checked by crfkit.training.checkpoint.validate_state before it is
#: used): the round, the weights and the running average
STATE_SCHEMA = {
    "algorithm": _sc.text(),
    "iteration": _sc.integer(),
    "x": _sc.vector("p"),
    "w": _sc.vector("p"),
    "avg": _sc.vector("p"),
}

DEFAULT_EPOCHS = 50


def parameter_mixing(
    obj,
    x0,
    *,
    reg,
    max_iterations=None,
    callback=None,
    seed: int = 0,
    state=None,
    _algorithm: str | None = None,
    **params,
) -> StochasticResult:
    """Run parameter mixing for ``_algorithm`` on a
    :class:`~crfkit.distributed.core.DistributedObjective`; the stochastic-optimizer contract of
    :mod:`crfkit.optim.stochastic`."""
    algorithm = _algorithm
    if algorithm not in ("sg", "asg", "sgd-l1"):
        raise ParameterError(f"parameter mixing does not run {algorithm!r}")
    _check(algorithm, reg, params)
    c = obj.corpus
    client = obj.client
    n, p = obj.n, obj.space.n_features
    epochs = (
        (DEFAULT_EPOCHS if algorithm != "sgd-l1" else 30)
        if max_iterations is None
        else int(max_iterations)
    )
    if state is not None:
        if state.get("algorithm") != "mix-" + algorithm or np.shape(state.get("x")) != (p,):
            raise ParameterError(
                "parameter mixing: the state was made by another algorithm or feature space"
            )
        w = np.array(state["w"], dtype=np.float64, copy=True)
        avg = np.array(state["avg"], dtype=np.float64, copy=True)
        epoch = int(state["iteration"])
    else:
        w = np.zeros(p) if x0 is None else np.array(x0, dtype=np.float64, copy=True)
        avg = np.zeros(p)
        epoch = 0

    def weights():
        return avg.copy() if (algorithm == "asg" and epoch > 0) else w.copy()

    def make_state():
        snap = {
            "algorithm": "mix-" + algorithm,
            "iteration": epoch,
            "x": weights(),
            "w": w.copy(),
            "avg": avg.copy(),
        }
        return lambda: snap

    state_fn = make_state() if epoch else None
    status, message = (
        "max_iterations",
        f"{epochs} rounds of parameter mixing over {len(c.shards)} workers' blocks",
    )
    f = float("nan")
    monitor_s = 0.0
    try:
        while epoch < epochs:
            wf = obj.scatter(w)
            parts = [
                client.submit(
                    S.mix_epoch,
                    s,
                    wf,
                    algorithm,
                    epoch,
                    int(seed),
                    dict(params),
                    float(reg.l1),
                    float(reg.l2),
                    c.threads,
                    pure=False,
                )
                for s in c.shards
            ]
            root = _tree(client, parts)
            del parts
            from .core import await_futures

            await_futures(client, [root], c.worker_timeout)
            total = root.result()
            root.release()
            w = total[0] / n
            if algorithm == "asg":
                avg = (avg * epoch + total[1] / n) / (epoch + 1)
            epoch += 1
            obj.n_oracle += n
            x = weights()
            t = time.perf_counter()
            f = obj.value(x, count=False)
            monitor_s += time.perf_counter() - t
            state_fn = make_state()
            if callback is not None:
                info = {
                    "iteration": epoch,
                    "f": f,
                    "x": x,
                    "step": float(params.get("eta", params.get("eta0", 0.1))),
                    "nnz": int(np.count_nonzero(x)),
                    "state": state_fn,
                    "examples_seen": epoch * n,
                    "monitor_s": monitor_s,
                }
                if callback(info):
                    status, message = "stopped", f"stopped by the callback after round {epoch}"
                    break
    except KeyboardInterrupt:
        status, message = "interrupted", f"interrupted; the weights of round {epoch}"
    x = weights()
    if not np.isfinite(f):
        f = obj.value(x, count=False)
    return StochasticResult(
        x=x, f=f, status=status, message=message, iterations=epoch, state_fn=state_fn
    )


def _tree(client, parts):
    from .core import tree_sum

    return tree_sum(client, parts)


def _check(algorithm, reg, params):
    allowed = {"sg": {"eta"}, "asg": {"eta"}, "sgd-l1": {"eta0", "alpha", "penalty", "schedule"}}[
        algorithm
    ]
    bad = sorted(set(params) - allowed)
    if bad:
        raise ParameterError(
            f"{algorithm} with parameter mixing takes {', '.join(sorted(allowed))}; not "
            f"{', '.join(bad)}"
            + (
                " (eta0=auto tunes on a sample of the corpus, which the client "
                "does not hold: give eta0)"
                if "tune_sample" in bad
                else ""
            )
        )
    if algorithm == "sgd-l1":
        if params.get("eta0") == "auto" or params.get("alpha") == "auto":
            raise ParameterError(
                "sgd-l1 with parameter mixing: eta0=auto / alpha=auto tune on a sample of the "
                "corpus, which the client does not hold; give eta0 (and alpha) as numbers"
            )
        from ..optim.sgdl1 import check_params

        check_params(
            params.get("penalty", "cumulative"),
            params.get("schedule", "exponential"),
            params.get("eta0", 0.1),
            params.get("alpha", 0.85),
            reg,
            None,
        )
    else:
        if reg.l1 > 0:
            raise ParameterError(
                f"{algorithm} optimizes the L2-regularised objective only; l1 > 0 is not supported "
                "(use owlqn or sgd-l1)"
            )
        eta = params.get("eta", 0.1)
        if not (isinstance(eta, (int, float)) and eta > 0):
            raise ParameterError(f"{algorithm}: eta must be > 0")
