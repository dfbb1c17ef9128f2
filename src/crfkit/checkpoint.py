"""Training checkpoints: the optimizer state, written atomically, read without pickle.

A checkpoint is a NumPy ``.npz`` archive (written with :func:`numpy.savez` into
:func:`crfkit.io.atomic.atomic_file`, so it appears whole or not at all, and
read with ``allow_pickle=False``) holding

* the optimizer state arrays: ``x``, ``g``, ``S``, ``Y``, ``rho`` (the L-BFGS
  pairs, oldest first), ``past`` (the objective values of the delta rule) and
  ``scalars`` (``f``, ``f_smooth``, ``seconds``: floats kept exact in binary);
* ``header``: UTF-8 JSON bytes with ``format``, ``version``, the ``settings``
  that decide the optimisation path (algorithm, l1, l2, m, period), the
  ``fingerprint`` of the training data and feature space, the iteration,
  evaluation and effective-pass counts, and the ``history`` (the trace
  records so far).

Resuming checks the fingerprint and the settings and refuses, with a
:class:`CheckpointError`, a checkpoint made with other data or settings.
"""
from __future__ import annotations

import hashlib
import json
import os
import zipfile
from dataclasses import dataclass, field

import numpy as np

from .errors import CrfkitError
from .io.atomic import atomic_file

FORMAT = "crfkit-checkpoint"
VERSION = 1
STATE_ARRAYS = ("x", "g", "S", "Y", "rho", "past")


class CheckpointError(CrfkitError):
    """A checkpoint that cannot be read or does not belong to this training run."""


@dataclass
class Checkpoint:
    state: dict                      # the optimizer state (crfkit.optim.lbfgs.make_state's keys)
    fingerprint: str
    settings: dict
    history: list = field(default_factory=list)
    extra: dict = field(default_factory=dict)   # effective_passes, wall_s, ...

    @property
    def iteration(self) -> int:
        return int(self.state["iteration"])


def fingerprint(space, corpus) -> str:
    """SHA-256 of the encoded training corpus and the feature space (labels, attributes, layout)."""
    h = hashlib.sha256()

    def arr(a):
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())

    def strings(ss):
        h.update(len(ss).to_bytes(8, "little"))
        for s in ss:
            b = s.encode("utf-8")
            h.update(len(b).to_bytes(8, "little"))
            h.update(b)

    strings(space.labels)
    strings(space.attributes)
    for a in (space.attr_ptr, space.feat_label, space.trans_index,
              corpus.seq_ptr, corpus.tok_ptr, corpus.attr, corpus.val, corpus.y):
        arr(a)
    return h.hexdigest()


def save(path: str | os.PathLike, state: dict, *, fingerprint: str, settings: dict,
         history: list | None = None, extra: dict | None = None) -> None:
    """Write a checkpoint atomically (an existing file at ``path`` is replaced only once the new one is whole)."""
    header = {
        "format": FORMAT, "version": VERSION, "settings": settings, "fingerprint": fingerprint,
        "iteration": int(state["iteration"]), "n_evals": int(state["n_evals"]), "m": int(state["m"]),
        "linesearch_ok": bool(state["linesearch_ok"]), "history": list(history or []), "extra": dict(extra or {}),
    }
    arrays = {k: np.ascontiguousarray(state[k], dtype=np.float64) for k in STATE_ARRAYS}
    arrays["scalars"] = np.array([state["f"], state["f_smooth"], state.get("seconds", 0.0)], dtype=np.float64)
    arrays["header"] = np.frombuffer(json.dumps(header).encode("utf-8"), dtype=np.uint8)
    with atomic_file(path) as f:
        np.savez(f, **arrays)


def load(path: str | os.PathLike) -> Checkpoint:
    """Read a checkpoint written by :func:`save` (nothing is unpickled)."""
    path = os.fspath(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            header = json.loads(bytes(z["header"]).decode("utf-8"))
            if header.get("format") != FORMAT:
                raise CheckpointError(f"{path}: not a crfkit checkpoint")
            if header.get("version") != VERSION:
                raise CheckpointError(f"{path}: checkpoint version {header.get('version')} "
                                      f"(this crfkit reads version {VERSION})")
            state = {k: np.array(z[k]) for k in STATE_ARRAYS}
            f, f_smooth, seconds = (float(v) for v in z["scalars"])
    except CheckpointError:
        raise
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such checkpoint file") from None
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path}: cannot read the checkpoint ({e})") from None
    state.update(f=f, f_smooth=f_smooth, seconds=seconds, iteration=int(header["iteration"]),
                 n_evals=int(header["n_evals"]), m=int(header["m"]), linesearch_ok=bool(header["linesearch_ok"]))
    return Checkpoint(state=state, fingerprint=header["fingerprint"], settings=header["settings"],
                      history=header.get("history", []), extra=header.get("extra", {}))


def check(ck: Checkpoint, fingerprint: str, settings: dict, path: str | os.PathLike = "<checkpoint>") -> None:
    """Refuse (CheckpointError) a checkpoint made with other training data or other settings."""
    path = os.fspath(path)
    if ck.fingerprint != fingerprint:
        raise CheckpointError(f"{path}: the checkpoint was made with other training data or another feature "
                              "space (fingerprint mismatch); resume with the same data and feature options")
    diff = [f"{k}={ck.settings.get(k)!r} in the checkpoint, {v!r} now" for k, v in settings.items()
            if ck.settings.get(k) != v]
    if diff:
        raise CheckpointError(f"{path}: the checkpoint was made with other training settings: " + "; ".join(diff))
