"""What every stochastic (per-example) optimizer gives the training driver, and the registry of
them.

An optimizer registered here is a function::

    fn(obj: Objective, x0: np.ndarray, *, reg: Regularization, max_iterations: int | None,
       callback: Callable[[dict], bool | None] | None, seed: int, **params) -> StochasticResult

* ``obj`` is built with the *full* regularisation ``reg`` (``obj.reg is reg``);
  the optimizer calls ``obj.oracle`` / ``obj.apply_gradient`` (or its own
  kernels on ``obj.corpus`` / ``obj.space``), and for monitoring
  ``obj.value(w, count=False)`` which does not count as effective passes.
* ``max_iterations`` counts epochs (effective passes, DESIGN.md); None: the
  optimizer's own default.
* ``callback(info)`` once per epoch with ``info`` holding ``iteration`` (the
  epoch), ``f`` (objective at the epoch's end), ``x`` (the weights, dense; it may be
  the run's own array, valid until the callback returns: copy it to keep it),
  ``step`` (the current step size, or NaN) and where known ``gnorm_inf``,
  ``gnorm``, ``nnz`` and ``state`` (a zero-argument function returning a
  resumable state dict holding at least ``iteration``; a resumed run gets it
  back as ``state=``).  Optional keys copied into the trace record:
  ``crfkit.train.EXTRA_TRACE_KEYS`` (``state_bytes``: memory of the stored
  per-example state; ``naive_state_bytes``: what naive SAG would store;
  ``lipschitz``; ``duality_gap``; ``examples_seen``; ``steps``: parameter
  updates so far, where they differ from the evaluations (the SAG family's
  line searches count as evaluations); ``monitor_s``: seconds
  spent so far, cumulative, on evaluations made only to report ``f`` and
  the like, which plots of time take out of ``wall_s``).  It returns True to stop; KeyboardInterrupt
  inside it or inside the optimizer ends the run with status ``interrupted`` and the last
  weights.
* ``params`` are the optimizer's own settings (step sizes, sampling scheme,
  ...); unknown names raise ``TypeError``.
* ``resumable`` (bool), only to an optimizer whose signature names it:
  :func:`crfkit.train.train` passes ``bool(checkpoint)`` (unless the user set
  it), so that one whose kept state is large (sgd-l1: its cumulative
  penalties) keeps only the weights for a Ctrl-C when nothing will resume.

Names map to ``module:function``; a name is offered (``available()``) once
its module exists.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass
class StochasticResult:
    x: np.ndarray
    f: float
    status: str  # "converged" | "max_iterations" | "stopped" | "interrupted"
    message: str
    iterations: int  # epochs run
    state_fn: Callable[[], dict] | None = None

    @property
    def state(self) -> dict | None:
        return self.state_fn() if self.state_fn is not None else None


# vectors of at least this many entries that must outlive the next pass are kept on disk (a
# temporary file) when they are not sparse: see Kept
SPILL_MIN = 1 << 20


class Kept:
    """A copy of a vector of the run's state that must outlive the run's next steps (the state of
    the last completed pass, for Ctrl-C and for a checkpoint written after it), held as compactly as
    its content allows: its non-zero entries (indices and values; non-zero as bits, so a -0.0 is
    kept) when at most a third of it is non-zero (the weights of an L1 run: SGD-L1 and BCD on a
    candidate space of 10^7-10^8 features hold a few 10^4 non-zeros), else a dense copy, written to
    an anonymous temporary file (``tempfile.TemporaryFile``: in ``TMPDIR``, gone when closed) once
    it has ``spill`` entries or more (default ``SPILL_MIN``), so that it takes no memory while the
    next pass runs (in memory, with a RuntimeWarning, when the file cannot be written).
    :meth:`get` returns a new array with the same bits (dtype, shape, values).

    ``nnz``: the count of entries whose bits are not zero, where the caller already has it (it saves
    a walk over the vector; a wrong count is a ValueError)."""

    def __init__(self, x: np.ndarray, spill: int | None = None, *, nnz: int | None = None):
        spill = SPILL_MIN if spill is None else spill
        x = np.asarray(x)
        self.dtype, self.shape = x.dtype, x.shape
        self.idx = self.vals = self.dense = self.file = None
        flat = np.ascontiguousarray(x).reshape(-1)
        # non-zero as bits (a -0.0 is kept as such, so that a resumed run starts from the same bits)
        bits = flat.view(f"u{flat.itemsize}") if flat.dtype.itemsize in (1, 2, 4, 8) else flat
        if nnz is None:
            nnz = int(np.count_nonzero(bits))
        if 3 * nnz <= flat.size:
            idx = np.empty(nnz, dtype=np.int32 if flat.size < 2**31 else np.int64)
            if bits.dtype.kind == "u" and bits.ndim == 1:
                from ..kernels.vec import nonzero_into

                if nonzero_into(bits, idx) != nnz or (bits[idx[-1] + 1 :] if nnz else bits).any():
                    raise ValueError(
                        f"Kept: nnz={nnz} is not the vector's count of non-zero entries"
                    )
            else:
                idx[:] = np.flatnonzero(bits)
            self.idx, self.vals = idx, flat[idx]
            return
        if flat.size >= spill:
            import tempfile

            try:
                # unbuffered: numpy then writes the array's memory straight to the file
                # (ndarray.tofile) and reads it back with fromfile; through a buffered file it would
                # copy it in 16 MB pieces
                self.file = tempfile.TemporaryFile(buffering=0)
                np.lib.format.write_array(self.file, x, allow_pickle=False)
                return
            except OSError as e:
                # no room in TMPDIR (or none writable): the copy stays in memory, and training goes
                # on
                import warnings

                warnings.warn(
                    f"the last pass's state could not be written to a temporary file ({e}); "
                    "it is kept in memory instead",
                    RuntimeWarning,
                    stacklevel=2,
                )
                self.file = None
        self.dense = x.copy()

    @property
    def nbytes(self) -> int:
        """Bytes held in memory."""
        return sum(a.nbytes for a in (self.idx, self.vals, self.dense) if a is not None)

    def get(self) -> np.ndarray:
        if self.dense is not None:
            return self.dense.copy()
        if self.file is not None:
            self.file.seek(0)
            return np.lib.format.read_array(self.file, allow_pickle=False)
        # lazy zeros for a large vector: the non-zeros' pages only (np.zeros' huge pages would make
        # most of a sparse 10^8-entry vector resident; crfkit.memtrim.lazy_zeros)
        from ..memtrim import from_nonzeros

        return from_nonzeros(int(np.prod(self.shape)), self.dtype, self.idx, self.vals).reshape(
            self.shape
        )


def state_function(
    arrays: dict, values: dict, *, keep: bool, nnz: dict | None = None
) -> Callable[[], dict]:
    """A driver's resumable-state function over the run's own ``arrays`` (name -> array) and
    ``values`` (name -> anything copied as it is now: counts, step sizes, lists, the settings).

    ``keep=False``: the arrays are read when the function is called and copied then; valid while the
    run does not step (during the callback, and once the run has ended).  ``keep=True``: the arrays
    are kept now, as compactly as :class:`Kept` allows, so that the function gives this moment's
    state after the run has gone on (the last completed pass, for a Ctrl-C and the checkpoint
    written after it); ``nnz`` (name -> count of non-zero bits, where the driver has it) goes to
    :class:`Kept`."""
    import copy

    values = copy.deepcopy(values)
    if keep:
        nnz = nnz or {}
        held = {k: Kept(a, nnz=nnz.get(k)) for k, a in arrays.items()}
        return lambda: {**copy.deepcopy(values), **{k: h.get() for k, h in held.items()}}
    from ..memtrim import lazy_copy  # (a large sparse vector copied as its non-zeros)

    return lambda: {**copy.deepcopy(values), **{k: lazy_copy(a) for k, a in arrays.items()}}


def notify(callback: Callable[[dict], bool | None] | None, **info) -> bool:
    """Call a driver's per-epoch ``callback`` with the dict of ``info`` (see the module doc); True
    when it asks to stop.  The dict is made here and dropped when the callback returns: a caller
    that built it and kept it bound would hold its weights copy and state snapshot alive beside the
    next epoch's (at NETtalk scale, two vectors of the candidate space)."""
    return bool(callback(info)) if callback is not None else False


def last_completed(
    state_fn: Callable[[], dict] | None, x0: np.ndarray | None, n_features: int
) -> tuple[np.ndarray, int]:
    """The weights and count of the last completed epoch, from the run's latest ``state_fn`` (its
    state's ``x`` and ``iteration``), or the starting point (``x0``, else zeros) and 0 when none
    completed: what an interrupted run returns."""
    if state_fn is not None:
        st = state_fn()
        return np.array(st["x"], dtype=np.float64, copy=True), int(st["iteration"])
    return (np.zeros(n_features) if x0 is None else np.array(x0, dtype=np.float64, copy=True)), 0


# name -> (module, function)
REGISTRY: dict[str, tuple[str, str]] = {
    # Schmidt et al. 2015 (issue 4)
    "sag": ("crfkit.optim.sag", "sag"),
    "sag-nus": ("crfkit.optim.sag", "sag_nus"),
    "sag-nus*": ("crfkit.optim.sag", "sag_nus_star"),
    "saga": ("crfkit.optim.sag", "saga"),
    "saga-nus": ("crfkit.optim.sag", "saga_nus"),
    "sg": ("crfkit.optim.sgd", "sg"),
    "asg": ("crfkit.optim.sgd", "asg"),
    "adagrad": ("crfkit.optim.sgd", "adagrad"),
    "pegasos": ("crfkit.optim.sgd", "pegasos"),
    # Tsuruoka et al. 2009 (issue 5)
    "sgd-l1": ("crfkit.optim.sgdl1", "sgd_l1"),
    # Lavergne et al. 2010 §3.4 (issue 5): block coordinate descent, one block per observation
    "bcd": ("crfkit.optim.bcd", "bcd"),
    # Le Priol, Touati & Lacoste-Julien; Collins et al. 2008 (issue 14): dual methods on clique
    # marginals
    "sdca": ("crfkit.optim.sdca", "sdca"),
    "oeg": ("crfkit.optim.sdca", "oeg"),
    # Cao (natural-gradient CRF training) on CRFsuite's SGD; CRFsuite's online learners (issue 15)
    "l2sgd": ("crfkit.optim.ngd", "l2sgd"),
    "ngd": ("crfkit.optim.ngd", "ngd"),
    "pa": ("crfkit.optim.online", "pa"),
    "ap": ("crfkit.optim.online", "ap"),
    "arow": ("crfkit.optim.online", "arow"),
    # Friedlander & Schmidt 2012, the SAG paper's Hybrid baseline (issue 15)
    "hybrid": ("crfkit.optim.hybrid", "hybrid"),
    # Vishwanathan, Schraudolph, Schmidt & Murphy 2006, the SAG paper's SMD baseline (issue 15)
    "smd": ("crfkit.optim.smd", "smd"),
}


def available() -> tuple[str, ...]:
    """Registered names whose module is present."""
    out = []
    for name, (mod, _) in REGISTRY.items():
        try:
            if importlib.util.find_spec(mod) is not None:
                out.append(name)
        except ModuleNotFoundError:  # pragma: no cover
            pass
    return tuple(out)


def resolve(name: str) -> Callable:
    mod, fn = REGISTRY[name]
    return getattr(importlib.import_module(mod), fn)
