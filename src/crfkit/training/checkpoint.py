"""Training checkpoints: the optimizer state, written atomically, read without pickle.

A checkpoint is a NumPy ``.npz`` archive (written with :func:`numpy.savez` into
:func:`crfkit.io.atomic.atomic_file`, so it appears whole or not at all, and
read with ``allow_pickle=False``) holding

* the optimizer's state: every numpy array of the state dict as an archive
  member ``s.<name>`` (dtype kept), every other value (numbers, strings,
  flags, small lists) in the header's ``state_scalars`` (JSON writes floats
  in their shortest exact form, so they come back bit for bit).  Any
  optimizer's state fits: L-BFGS's ``x``, ``g``, ``S``, ``Y``, ``rho``,
  ``past``, ``f`` ...; a stochastic method's weights, per-example memory,
  random generator state ...;
* ``header``: UTF-8 JSON bytes with ``format``, ``version``, the ``settings``
  that decide the optimisation path (algorithm, l1, l2, m, period, and the
  stochastic methods' parameters and seed), the ``fingerprint`` of the
  training data and feature space, the iteration, evaluation and
  effective-pass counts, and the ``history`` (the trace records so far).

A large vector that is mostly zero (at least :data:`crfkit.memtrim.LAZY_MIN` entries, at most a
quarter of them non-zero as bits: the weights of an L1 run in a candidate space of 10^8 features, of
which 10^4 end up non-zero) is stored as its non-zeros: members ``z.<name>.idx`` and
``z.<name>.val``, its length and dtype in the header's ``sparse_arrays``; it is read back into
:func:`crfkit.memtrim.lazy_zeros`, whose pages count in memory only where written.  A checkpoint of
BCD at NETtalk 5-grm+ was 1.9 GB of zeros, and resuming it made them all resident.  Such a
checkpoint is version 3 (a checkpoint without one is written as version 2, which earlier crfkit
reads).

Version 1 checkpoints (L-BFGS / OWL-QN only, fixed members) are still read.
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

from ..errors import CrfkitError
from ..io.atomic import atomic_file
from ..memtrim import from_nonzeros, sparse_bits

FORMAT = "crfkit-checkpoint"
VERSION = 3  # the newest this crfkit writes and reads: 3 with sparse members, else 2
STATE_ARRAYS = ("x", "g", "S", "Y", "rho", "past")  # the fixed members of version 1


class CheckpointError(CrfkitError):
    """A checkpoint that cannot be read or does not belong to this training run."""


@dataclass
class Checkpoint:
    state: dict  # the optimizer state (e.g. crfkit.optim.lbfgs.make_state's keys)
    fingerprint: str
    settings: dict
    history: list = field(default_factory=list)
    extra: dict = field(default_factory=dict)  # effective_passes, wall_s, ...

    @property
    def iteration(self) -> int:
        return int(self.state["iteration"])


def digest_strings(h, ss, block: int = 1 << 16) -> None:
    """Feed ``h`` the count of the strings ``ss``, then each one's UTF-8 byte length (8 bytes,
    little endian) and bytes.  A packed table (:class:`crfkit.model.StringTable`) gives the same
    stream from its bytes, ``block`` strings at a time, without making the strings."""
    h.update(len(ss).to_bytes(8, "little"))
    if not hasattr(ss, "packed"):
        for s in ss:
            b = s.encode("utf-8")
            h.update(len(b).to_bytes(8, "little"))
            h.update(b)
        return
    blob, lens = ss.packed()
    ends = np.cumsum(lens)
    for k in range(0, len(lens), block):
        ln = np.asarray(lens[k : k + block], dtype="<i8")
        body = blob[int(ends[k] - lens[k]) : int(ends[k + len(ln) - 1])]
        out = np.empty(8 * len(ln) + len(body), np.uint8)
        at = (np.cumsum(ln) - ln) + 8 * np.arange(len(ln))  # where each length goes
        pos = (at[:, None] + np.arange(8)).reshape(-1)
        is_len = np.zeros(len(out), bool)
        is_len[pos] = True
        out[pos] = ln.view(np.uint8)
        out[~is_len] = body
        h.update(memoryview(out))


def fingerprint(space, corpus) -> str:
    """SHA-256 of the encoded training corpus and the feature space (labels, attributes, layout)."""
    h = hashlib.sha256()

    def arr(a, as_dtype=None):
        # the array's bytes through the buffer protocol (no copy of a candidate-space array); with
        # ``as_dtype``, the digest of ``a.astype(as_dtype)``, converted a block at a time
        a = np.ascontiguousarray(a)
        dt = a.dtype if as_dtype is None else np.dtype(as_dtype)
        h.update(f"{dt.str}{a.shape}".encode())
        flat = a.reshape(-1)
        if dt == a.dtype:
            h.update(memoryview(flat).cast("B"))
            return
        for k in range(0, len(flat), 1 << 20):
            h.update(memoryview(flat[k : k + (1 << 20)].astype(dt)).cast("B"))

    digest_strings(h, space.labels)
    digest_strings(h, space.attributes)

    def ones(n):
        # the digest of np.ones(n) (a corpus of ones that never made the array), fed a block at a
        # time
        h.update(f"{np.dtype(np.float64).str}{(n,)}".encode())
        block = np.ones(min(n, 1 << 16)).tobytes()
        for k in range(0, n, 1 << 16):
            h.update(block if n - k >= 1 << 16 else block[: 8 * (n - k)])

    raw = getattr(corpus, "raw_val", None)
    for a in (
        space.attr_ptr,
        space.feat_label,
        space.trans_index,
        corpus.seq_ptr,
        corpus.tok_ptr,
        corpus.attr,
        None,
        corpus.y,
    ):
        if a is not None:
            arr(a)
        elif raw is not None and len(raw) == 0 and len(corpus.attr):
            ones(len(corpus.attr))
        else:
            arr(corpus.val)
    if getattr(space, "n_bigram", 0) or getattr(corpus, "has_bigram", False):
        digest_strings(h, space.battributes)
        arr(space.battr_ptr)
        if space.__dict__.get("_all_pairs") and "bfeat_pair" not in space.__dict__:
            # implicit pairs (crfkit.model.ALL_PAIRS): the digest of their int32 array, fed whole
            # periods of L^2 pairs at a time, without making the array
            LL, n = space.n_labels**2, space.n_bigram
            h.update(f"{np.dtype(np.int32).str}{(n,)}".encode())
            reps = max(1, (1 << 20) // max(LL, 1))
            block = np.tile(np.arange(LL, dtype=np.int32), reps).tobytes()
            for k in range(0, n, reps * LL):
                h.update(block if n - k >= reps * LL else block[: 4 * (n - k)])
        else:
            arr(
                space.bfeat_pair, np.int32
            )  # its type became int16 for L <= 181; digests of older runs hold
        for a in corpus.bigram_arrays():
            arr(a)
    if (
        space.n_dense or corpus.dense is not None
    ):  # (fingerprints of models without one are unchanged)
        digest_strings(h, space.dense_names)
        arr(corpus.dense if corpus.dense is not None else np.zeros(0))
    if getattr(
        corpus, "is_weighted", False
    ):  # sample weights (fingerprints of unweighted corpora are unchanged)
        h.update(b"sample weights")
        arr(corpus.weight)
    return h.hexdigest()


def _plain(v, name: str):
    """A JSON-able copy of a non-array state value."""
    if isinstance(v, np.generic):
        return v.item()
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)):
        return [_plain(x, name) for x in v]
    if isinstance(v, dict):
        return {str(k): _plain(x, name) for k, x in v.items()}
    raise TypeError(f"checkpoint state {name!r}: cannot store a {type(v).__name__}")


def save(
    path: str | os.PathLike,
    state: dict,
    *,
    fingerprint: str,
    settings: dict,
    history: list | None = None,
    extra: dict | None = None,
) -> None:
    """Write a checkpoint atomically (an existing file at ``path`` is replaced only once the new one
    is whole).

    ``state`` needs an ``iteration``; its arrays are stored as they are, its other values as JSON.
    """
    arrays = {}
    scalars = {}
    sparse = {}
    for k, v in state.items():
        if isinstance(v, np.ndarray):
            if v.dtype == object:
                raise TypeError(f"checkpoint state {k!r}: object arrays cannot be stored")
            nz = sparse_bits(v)  # (a large vector that is mostly zero: its non-zeros)
            if nz is None:
                arrays[f"s.{k}"] = np.ascontiguousarray(v)
            else:
                arrays[f"z.{k}.val"] = v[nz]
                arrays[f"z.{k}.idx"] = nz.astype(np.int32 if v.shape[0] < 2**31 else np.int64)
                sparse[k] = [int(v.shape[0]), v.dtype.str]
        else:
            scalars[k] = _plain(v, k)
    header = {
        "format": FORMAT,
        "version": VERSION if sparse else 2,
        "sparse_arrays": sparse,
        "settings": settings,
        "fingerprint": fingerprint,
        "iteration": int(state["iteration"]),
        "n_evals": int(state.get("n_evals", 0)),
        "state_scalars": scalars,
        "history": list(history or []),
        "extra": dict(extra or {}),
    }
    arrays["header"] = np.frombuffer(json.dumps(header).encode("utf-8"), dtype=np.uint8)
    with atomic_file(path, what="the checkpoint") as f:
        np.savez(f, **arrays)


def _sparse_state(z, sparse: dict) -> dict:
    """The vectors stored as their non-zeros, each made whole in lazy zeros."""
    out = {}
    for k, (n, dtype) in sparse.items():
        idx, val = z[f"z.{k}.idx"], z[f"z.{k}.val"]
        if (
            idx.shape != val.shape
            or idx.ndim != 1
            or (idx.shape[0] and (idx.min() < 0 or idx.max() >= n))
        ):
            raise ValueError(f"the sparse member {k!r} is inconsistent")
        out[k] = from_nonzeros(n, dtype, idx, val, lazy=True)
    return out


def load(path: str | os.PathLike) -> Checkpoint:
    """Read a checkpoint written by :func:`save` (nothing is unpickled)."""
    path = os.fspath(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            header = json.loads(bytes(z["header"]).decode("utf-8"))
            if header.get("format") != FORMAT:
                raise CheckpointError(f"{path}: not a crfkit checkpoint")
            version = header.get("version")
            if version == 1:
                state = {k: np.array(z[k]) for k in STATE_ARRAYS}
                f, f_smooth, seconds = (float(v) for v in z["scalars"])
                state.update(
                    f=f,
                    f_smooth=f_smooth,
                    seconds=seconds,
                    iteration=int(header["iteration"]),
                    n_evals=int(header["n_evals"]),
                    m=int(header["m"]),
                    linesearch_ok=bool(header["linesearch_ok"]),
                )
            elif version in (2, VERSION):
                state = {k[2:]: np.array(z[k]) for k in z.files if k.startswith("s.")}
                state.update(
                    _sparse_state(z, header.get("sparse_arrays", {}) if version >= 3 else {})
                )
                state.update(header["state_scalars"])
                state["iteration"] = int(header["iteration"])
            else:
                raise CheckpointError(
                    f"{path}: checkpoint version {version} "
                    f"(this crfkit reads versions 1 to {VERSION})"
                )
    except CheckpointError:
        raise
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such checkpoint file") from None
    except (
        OSError,
        ValueError,
        KeyError,
        TypeError,
        zipfile.BadZipFile,
        EOFError,
        UnicodeDecodeError,
    ) as e:
        raise CheckpointError(f"{path}: cannot read the checkpoint ({e})") from None
    return Checkpoint(
        state=state,
        fingerprint=header["fingerprint"],
        settings=header["settings"],
        history=header.get("history", []),
        extra=header.get("extra", {}),
    )


def check(
    ck: Checkpoint, fingerprint: str, settings: dict, path: str | os.PathLike = "<checkpoint>"
) -> None:
    """Refuse (CheckpointError) a checkpoint made with other training data or other settings."""
    path = os.fspath(path)
    if ck.fingerprint != fingerprint:
        raise CheckpointError(
            f"{path}: the checkpoint was made with other training data or another feature "
            "space (fingerprint mismatch); resume with the same data and feature options"
        )
    diff = [
        f"{k}={ck.settings.get(k)!r} in the checkpoint, {v!r} now"
        for k, v in settings.items()
        if ck.settings.get(k) != v
    ]
    if diff:
        raise CheckpointError(
            f"{path}: the checkpoint was made with other training settings: " + "; ".join(diff)
        )
