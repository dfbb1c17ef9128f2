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
import math
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


#: the JSON header's largest size (bytes) and deepest nesting: the trace records of 10^5 iterations
#: fit
MAX_HEADER_BYTES = 64 << 20
MAX_JSON_DEPTH = 64
#: the largest iteration and evaluation count (what a model file's metadata holds: the resumed model
#: records them)
MAX_COUNT = 2**53
#: the most members an archive may hold (a state has a few dozen keys)
MAX_MEMBERS = 256
#: an npy member's own header (numpy writes a few hundred bytes)
MAX_NPY_HEADER = 4096
#: without the run's dimensions (:func:`load` alone): a member's data may be at most this many
#: times the checkpoint file's size (plus 1 MiB), and a sparse vector at most this long
GENERIC_INFLATE = 16
GENERIC_SPARSE_LEN = 1 << 34
_NUMERIC_KINDS = "biuf"


@dataclass(frozen=True)
class Expect:
    """What :func:`load` checks a checkpoint against before reading its arrays: the run's data
    ``fingerprint`` and ``settings`` (as :func:`check`), the optimizer's state ``schema`` (a dict of
    :class:`crfkit.optim.schema.Field`, with cross-key ``rules``) and the run's dimensions
    (:class:`crfkit.optim.schema.Dims`)."""

    fingerprint: str | None
    settings: dict | None
    schema: dict
    dims: object
    rules: tuple = ()


def schema_for(algorithm: str) -> tuple[dict, tuple]:
    """The state schema (and cross-key rules) declared next to ``algorithm``'s optimizer
    (``STATE_SCHEMA`` / ``STATE_RULES`` of its module)."""
    import importlib

    from ..optim import stochastic

    if algorithm in ("lbfgs", "owlqn"):
        mod = "crfkit.optim.lbfgs"
    elif algorithm in stochastic.REGISTRY:
        mod = stochastic.REGISTRY[algorithm][0]
    else:
        raise CheckpointError(f"no checkpoint state is known for the algorithm {algorithm!r}")
    m = importlib.import_module(mod)
    return m.STATE_SCHEMA, tuple(getattr(m, "STATE_RULES", ()))


def _json_depth_ok(text: str, limit: int) -> bool:
    """True when the JSON ``text`` nests arrays/objects at most ``limit`` deep (strings skipped);
    counted over the bytes with numpy, a block at a time, before the parser recurses."""
    import re

    bare = re.sub(r'"(?:[^"\\]|\\.)*"', "", text).encode("utf-8", "replace")
    depth = 0
    for k in range(0, len(bare), 1 << 22):
        b = np.frombuffer(bare[k : k + (1 << 22)], np.uint8)
        step = (b == ord("[")).astype(np.int32) + (b == ord("{"))
        step -= (b == ord("]")).astype(np.int32) + (b == ord("}"))
        run = np.cumsum(step, dtype=np.int64) + depth
        if len(run) and int(run.max()) > limit:
            return False
        depth = int(run[-1]) if len(run) else depth
    return True


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


class _Archive:
    """A checkpoint's zip archive read member by member, each bounded before it is read: the npy
    header parsed (its size capped), its dtype plain numeric, its declared size (shape x itemsize,
    in Python integers) within the caller's limit and equal to what the zip entry holds, the bytes
    then read through the decompressor, which stops at the entry's declared size (its CRC checked
    at the end)."""

    def __init__(self, path: str):
        self.path = path
        self.size = os.path.getsize(path)
        self.z = zipfile.ZipFile(path)
        infos = self.z.infolist()
        if len(infos) > MAX_MEMBERS:
            raise CheckpointError(f"{path}: {len(infos)} archive members (at most {MAX_MEMBERS})")
        self.info = {}
        for i in infos:
            if not i.filename.endswith(".npy") or i.filename[:-4] in self.info:
                raise CheckpointError(f"{path}: unexpected archive member {i.filename!r}")
            if i.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                raise CheckpointError(
                    f"{path}: member {i.filename!r} uses compression {i.compress_type} "
                    "(stored or deflated only)"
                )
            self.info[i.filename[:-4]] = i
        self.files = list(self.info)

    def close(self) -> None:
        self.z.close()

    def shape_of(self, name: str) -> tuple[np.dtype, tuple]:
        """The dtype and shape a member declares (its npy header only)."""
        with self.z.open(self.info[name]) as f:
            return self._npy_header(f, name)[:2]

    def _npy_header(self, f, name: str):
        fmt = np.lib.format
        try:
            version = fmt.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = fmt.read_array_header_1_0(f, max_header_size=MAX_NPY_HEADER)
            elif version in ((2, 0), (3, 0)):
                shape, fortran, dtype = fmt.read_array_header_2_0(f, max_header_size=MAX_NPY_HEADER)
            else:
                raise ValueError(f"npy version {version}")
        except Exception as e:  # numpy parses the (size-capped) header with tokenize and ast
            raise CheckpointError(
                f"{self.path}: member {name!r}: not an npy array ({type(e).__name__}: {e})"
            ) from None
        if (
            dtype.kind not in _NUMERIC_KINDS
            or dtype.fields is not None
            or dtype.subdtype is not None
            or dtype.byteorder == ">"
            or fortran
        ):
            raise CheckpointError(f"{self.path}: member {name!r}: unsupported array type {dtype}")
        if not isinstance(shape, tuple) or not all(_is_int(k) and k >= 0 for k in shape):
            raise CheckpointError(f"{self.path}: member {name!r}: bad shape {shape!r}")
        return dtype, shape, f.tell()

    def read(self, name: str, max_bytes: int, check=None) -> np.ndarray:
        """Member ``name`` as an array of at most ``max_bytes`` bytes; ``check(dtype, shape)``
        (raising CheckpointError) is called on the declared type before anything is read."""
        if name not in self.info:
            raise CheckpointError(f"{self.path}: the checkpoint lacks the member {name!r}")
        info = self.info[name]
        if info.file_size > max_bytes + MAX_NPY_HEADER + 256:
            raise CheckpointError(
                f"{self.path}: member {name!r} inflates to {info.file_size} bytes "
                f"(at most {max_bytes} expected)"
            )
        with self.z.open(info) as f:
            dtype, shape, at = self._npy_header(f, name)
            if check is not None:
                check(dtype, shape)
            nbytes = math.prod(shape) * dtype.itemsize
            if nbytes > max_bytes:
                raise CheckpointError(
                    f"{self.path}: member {name!r} declares {shape} of {dtype} ({nbytes} bytes; at "
                    f"most {max_bytes} expected)"
                )
            if at + nbytes != info.file_size:
                raise CheckpointError(
                    f"{self.path}: member {name!r} holds {info.file_size - at} bytes of data for "
                    f"{shape} of {dtype} ({nbytes} bytes)"
                )
            out = np.empty(shape, dtype=dtype)
            view = memoryview(out.reshape(-1).view(np.uint8)) if nbytes else memoryview(b"")
            done = 0
            while done < nbytes:
                chunk = f.read(min(16 << 20, nbytes - done))
                if not chunk:
                    raise CheckpointError(f"{self.path}: member {name!r} is cut short")
                view[done : done + len(chunk)] = chunk
                done += len(chunk)
            if f.read(1):  # (also checks the CRC, at the member's end)
                raise CheckpointError(f"{self.path}: member {name!r} has trailing bytes")
        return out


def _header(ar: _Archive) -> dict:
    """The JSON header, size and nesting bounded, every field's type checked."""
    path = ar.path

    def u8(dtype, shape):
        if dtype != np.uint8 or len(shape) != 1:
            raise CheckpointError(f"{path}: the header member is not a byte array")

    raw = ar.read("header", MAX_HEADER_BYTES, u8)
    text = raw.tobytes().decode("utf-8")
    if not _json_depth_ok(text, MAX_JSON_DEPTH):
        raise CheckpointError(f"{path}: the header nests deeper than {MAX_JSON_DEPTH} levels")
    header = json.loads(text)
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a crfkit checkpoint")
    version = header.get("version")
    if not _is_int(version) or version not in (1, 2, VERSION):
        raise CheckpointError(
            f"{path}: checkpoint version {version!r} (this crfkit reads versions 1 to {VERSION})"
        )

    def bad(key, why):
        raise CheckpointError(f"{path}: the header's {key!r} {why}")

    for key, kind in (("settings", dict), ("fingerprint", str)):
        if not isinstance(header.get(key), kind):
            bad(key, f"is not a {kind.__name__}")
    for key in ("iteration", "n_evals") + (("m",) if version == 1 else ()):
        v = header.get(key, 0 if key == "n_evals" else None)
        if not _is_int(v) or not 0 <= v <= MAX_COUNT:
            bad(key, f"is not an integer in [0, 2^53] ({v!r})")
    for key, kind, default in (
        ("history", list, []),
        ("extra", dict, {}),
        ("state_scalars", dict, {}),
        ("sparse_arrays", dict, {}),
    ):
        v = header.setdefault(key, default)
        if not isinstance(v, kind):
            bad(key, f"is not a {kind.__name__}")
    for k, rec in enumerate(header["history"]):
        if (
            not isinstance(rec, dict)
            or not _is_int(rec.get("iteration"))
            or not 0 <= rec["iteration"] <= header["iteration"]
        ):
            bad(
                "history",
                f"record {k} is not a trace record of iterations 0..{header['iteration']}",
            )
    extra = header["extra"]
    for key in ("n_full", "n_oracle", "n_train", "n_features"):
        if key in extra and (not _is_int(extra[key]) or not 0 <= extra[key] <= 2**62):
            bad("extra", f"{key}={extra[key]!r} is not a count")
    for key in ("wall_s", "f_start"):
        if key in extra and (not _is_num(extra[key]) or not math.isfinite(extra[key])):
            bad("extra", f"{key}={extra[key]!r} is not a finite number")
    if "wall_s" in extra and extra["wall_s"] < 0:
        bad("extra", "wall_s is negative")
    for k, v in header["sparse_arrays"].items():
        if (
            not isinstance(v, list)
            or len(v) != 2
            or not _is_int(v[0])
            or not 0 <= v[0] <= GENERIC_SPARSE_LEN
            or not isinstance(v[1], str)
        ):
            bad("sparse_arrays", f"entry {k!r} is not [length, dtype]")
    return header


def _member_limit(ar: _Archive, name: str, key: str, expect: Expect | None):
    """(the byte limit, the declared-type check) of the member ``name`` holding state ``key``."""
    if expect is None:
        return GENERIC_INFLATE * ar.size + (1 << 20), None
    from ..optim.schema import Field

    fld = expect.schema.get(key)
    if not isinstance(fld, Field) or fld.kind != "array":
        raise CheckpointError(f"{ar.path}: the state holds an unexpected array {key!r}")
    shapes = fld.shapes(expect.dims)

    def biggest(shape):
        return math.prod((d.stop - 1 if isinstance(d, range) else d) for d in shape)

    limit = max(biggest(sh) for sh in shapes) * 8

    def check(dtype, shape):
        _check_array_type(ar.path, key, fld, dtype, shape, shapes)

    return limit, check


def _shape_ok(shape, allowed) -> bool:
    return len(shape) == len(allowed) and all(
        (k in d) if isinstance(d, range) else k == d for k, d in zip(shape, allowed, strict=True)
    )


def _check_array_type(path, key, fld, dtype, shape, shapes) -> None:
    if np.dtype(dtype).str not in fld.dtypes:
        raise CheckpointError(
            f"{path}: the state's {key!r} is {np.dtype(dtype)} (expected {', '.join(fld.dtypes)})"
        )
    if not any(_shape_ok(tuple(shape), sh) for sh in shapes):
        want = " or ".join(
            "("
            + ", ".join(f"0..{d.stop - 1}" if isinstance(d, range) else str(d) for d in sh)
            + ("," if len(sh) == 1 else "")
            + ")"
            for sh in shapes
        )
        raise CheckpointError(
            f"{path}: the state's {key!r} has shape {tuple(shape)}; this run needs {want}"
        )


def _read_state(ar: _Archive, header: dict, expect: Expect | None) -> dict:
    path, version = ar.path, header["version"]
    if version == 1:
        state = {}
        for k in STATE_ARRAYS:
            state[k] = ar.read(k, *_member_limit(ar, k, k, expect))
        sc = ar.read("scalars", 64)
        if sc.shape != (3,) or sc.dtype.kind != "f":
            raise CheckpointError(f"{path}: the scalars member is not 3 numbers")
        f, f_smooth, seconds = (float(v) for v in sc)
        if not isinstance(header.get("linesearch_ok"), bool):
            raise CheckpointError(f"{path}: the header's 'linesearch_ok' is not a flag")
        state.update(
            f=f,
            f_smooth=f_smooth,
            seconds=seconds,
            iteration=header["iteration"],
            n_evals=header["n_evals"],
            m=header["m"],
            linesearch_ok=header["linesearch_ok"],
        )
        return state
    sparse = header["sparse_arrays"] if version >= 3 else {}
    state = {}
    for name in ar.files:
        if name == "header":
            continue
        if name.startswith("s."):
            key = name[2:]
            state[key] = ar.read(name, *_member_limit(ar, name, key, expect))
        elif name.startswith("z.") and name[2:].rsplit(".", 1)[0] in sparse:
            continue
        else:
            raise CheckpointError(f"{path}: unexpected archive member {name!r}")
    for key, (n, dt) in sparse.items():
        try:
            dtype = np.dtype(dt)
        except TypeError:
            raise CheckpointError(f"{path}: sparse member {key!r}: bad dtype {dt!r}") from None
        if dtype.kind not in _NUMERIC_KINDS or dtype.fields is not None or dtype.byteorder == ">":
            raise CheckpointError(f"{path}: sparse member {key!r}: bad dtype {dt!r}")
        if expect is not None:
            _member_limit(ar, f"z.{key}", key, expect)[1](dtype, (n,))
        elif n > GENERIC_SPARSE_LEN:
            raise CheckpointError(f"{path}: sparse member {key!r} of {n} entries")
        cap = n * 8

        def vec(dt_ok, n=n, key=key):
            def c(d, shape):
                if len(shape) != 1 or shape[0] > n or not dt_ok(d):
                    raise CheckpointError(
                        f"{path}: sparse member {key!r}: {shape} of {d} for a vector of {n}"
                    )

            return c

        idx = ar.read(f"z.{key}.idx", cap, vec(lambda d: d.kind in "iu"))
        val = ar.read(f"z.{key}.val", cap, vec(lambda d, t=dtype: d == t))
        if idx.shape != val.shape or (idx.shape[0] and (int(idx.min()) < 0 or int(idx.max()) >= n)):
            raise CheckpointError(f"{path}: the sparse member {key!r} is inconsistent")
        state[key] = from_nonzeros(n, dtype, idx, val, lazy=True)
    for k, v in header["state_scalars"].items():
        if k in state:
            raise CheckpointError(f"{path}: the state's {k!r} is stored twice")
        state[k] = v
    state["iteration"] = header["iteration"]
    return state


def validate_state(
    state: dict, schema: dict, dims, rules: tuple = (), where: str = "<checkpoint>"
) -> None:
    """Check every value of an optimizer ``state`` against the optimizer's ``schema`` (its
    ``STATE_SCHEMA``: :class:`crfkit.optim.schema.Field` per key) and the run's dimensions ``dims``
    (:class:`crfkit.optim.schema.Dims`): no unknown key, no required key missing, every array of
    an allowed dtype and shape, every number of the right type, finite where it must be and within
    its range, then the cross-key ``rules``.  Raises :class:`CheckpointError` naming ``where`` and
    the key; nothing of a state that fails reaches the optimizer or a kernel."""

    def fail(key, why):
        raise CheckpointError(f"{where}: the state's {key!r} {why}")

    def bound(b):
        return b(dims) if callable(b) else b

    for key in state:
        if key not in schema:
            fail(key, "is not part of this optimizer's state")
    for key, fld in schema.items():
        if key not in state:
            if fld.required:
                raise CheckpointError(f"{where}: the state lacks {key!r}")
            continue
        v = state[key]
        lo, hi = bound(fld.lo), bound(fld.hi)
        if fld.kind == "array":
            if not isinstance(v, np.ndarray):
                fail(key, f"is a {type(v).__name__}, not an array")
            _check_array_type(where, key, fld, v.dtype, v.shape, fld.shapes(dims))
            if v.size == 0:
                continue
            if v.dtype.kind == "f":
                if fld.finite and not np.isfinite(v).all():
                    fail(key, "holds NaN or infinite values")
                vals = v[np.isfinite(v)] if not fld.finite else v
                if not vals.size:
                    continue
            else:
                vals = v
            if lo is not None and vals.min() < lo:
                fail(key, f"holds {vals.min()} (at least {lo} expected)")
            if hi is not None and vals.max() > hi:
                fail(key, f"holds {vals.max()} (at most {hi} expected)")
            continue
        if fld.kind == "int":
            if not _is_int(v):
                fail(key, f"is {v!r}, not an integer")
        elif fld.kind == "float":
            if not _is_num(v):
                fail(key, f"is {v!r}, not a number")
            if fld.finite and not math.isfinite(v):
                fail(key, f"is {v!r}, not finite")
        elif fld.kind == "bool":
            if not isinstance(v, bool):
                fail(key, f"is {v!r}, not a flag")
        elif fld.kind == "str":
            if not isinstance(v, str) or (fld.choices is not None and v not in fld.choices):
                fail(key, f"is {v!r}, not one of the expected names")
        elif fld.kind == "numbers":
            if not isinstance(v, list) or not all(_is_num(x) for x in v):
                fail(key, "is not a list of numbers")
            if len(v) > bound(fld.length):
                fail(key, f"holds {len(v)} numbers (at most {bound(fld.length)})")
            if fld.finite and not all(math.isfinite(x) for x in v):
                fail(key, "holds NaN or infinite values")
        elif fld.kind == "dict":
            if not isinstance(v, dict):
                fail(key, f"is {type(v).__name__}, not a dict")
        if fld.kind in ("int", "float") and math.isfinite(v):
            if lo is not None and v < lo:
                fail(key, f"is {v!r} (at least {lo} expected)")
            if hi is not None and v > hi:
                fail(key, f"is {v!r} (at most {hi} expected)")
    for rule in rules:
        why = rule(state, dims)
        if why:
            raise CheckpointError(f"{where}: the state does not fit together: {why}")


def load(path: str | os.PathLike, expect: Expect | None = None) -> Checkpoint:
    """Read a checkpoint written by :func:`save` (nothing is unpickled), as a file from anyone:
    the JSON header (size and nesting bounded) with every field's type and range checked, then each
    member, its npy header parsed and its size bounded before it is read.  With ``expect`` (what a
    resumed run passes), the fingerprint and settings are checked (:func:`check`) before any array
    is read, every array's declared dtype and shape must be the optimizer schema's for the run's
    dimensions, and the whole state goes through :func:`validate_state`; without it, a member may
    inflate to at most :data:`GENERIC_INFLATE` times the file's size."""
    path = os.fspath(path)
    try:
        ar = _Archive(path)
        try:
            header = _header(ar)
            if expect is not None and expect.fingerprint is not None:
                check_header(header, expect.fingerprint, expect.settings or {}, path)
            state = _read_state(ar, header, expect)
        finally:
            ar.close()
    except CheckpointError:
        raise
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such checkpoint file") from None
    except (
        OSError,
        ValueError,
        KeyError,
        TypeError,
        OverflowError,
        RecursionError,
        zipfile.BadZipFile,
        zipfile.LargeZipFile,
        EOFError,
        UnicodeDecodeError,
        NotImplementedError,
    ) as e:
        raise CheckpointError(f"{path}: cannot read the checkpoint ({e})") from None
    except MemoryError:
        raise CheckpointError(f"{path}: cannot read the checkpoint (out of memory)") from None
    if expect is not None:
        validate_state(state, expect.schema, expect.dims, expect.rules, path)
    return Checkpoint(
        state=state,
        fingerprint=header["fingerprint"],
        settings=header["settings"],
        history=header["history"],
        extra=header["extra"],
    )


def check_header(header: dict, fingerprint: str, settings: dict, path: str) -> None:
    """:func:`check` on a header (before the arrays are read)."""
    check(
        Checkpoint(state={}, fingerprint=header["fingerprint"], settings=header["settings"]),
        fingerprint,
        settings,
        path,
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
