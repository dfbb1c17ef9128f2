"""The model file: writing it, and reading it back as untrusted input.

Layout (version 1; version 2 when the model has dense features; version 3 when it has
bigram-observation features): ``MAGIC``, a little-endian uint32 header length, a UTF-8 JSON header,
the payload (each array zlib-compressed, laid out as the header's ``arrays`` table says), and last
the SHA-256 of all the bytes before it, so that a truncated or corrupted file (header or payload) is
detected on load.  Nothing is unpickled.  Only non-zero weights are stored.

:func:`save_model` writes a feature space, its weights and the metadata (atomically);
:func:`load_model` reads them back with memory bounded by the file size, checking the header, the
checksums, the array table against the header's counts and the loader's ceilings
(:data:`MAX_HEADER_BYTES`, :data:`MAX_EXPANSION`, ...), every index of the arrays, and the metadata
fields crfkit reads (:func:`check_meta`).  :class:`crfkit.model.CRFModel`'s ``save`` and ``load``
call these; the feature space itself is :mod:`crfkit.features.space`.
"""

from __future__ import annotations

import hashlib
import json
import os
import reprlib
import stat
import struct
import tempfile
import zlib

import numpy as np

from .errors import ModelError, TemplateError
from .features.space import MAX_LABELS, FeatureSpace, StringTable, pack_strings, unpack_strings
from .features.templates import MAX_COLUMN, Templates
from .io.atomic import atomic_file

__all__ = [
    "EXPANSION_ALLOWANCE",
    "FORMAT_VERSION",
    "MAGIC",
    "MAX_COUNT",
    "MAX_EXPANSION",
    "MAX_HEADER_BYTES",
    "MAX_LABELS",
    "LABEL_PAIR_BYTES",
    "check_meta",
    "load_model",
    "read_model",
    "save_model",
]

MAGIC = b"CRFKIT\x00M"
FORMAT_VERSION = (
    3  # 2 adds the dense block, 3 the bigram-observation block; a model is written with the
)
#                     lowest version that holds it (no dense, no bigram block: version 1)


def _small_int(a: np.ndarray) -> np.ndarray:
    """Store integer arrays in the narrowest unsigned type that holds them."""
    if a.size == 0 or a.min() < 0:
        return a
    m = int(a.max())
    for dt in (np.uint8, np.uint16, np.uint32):
        if m <= np.iinfo(dt).max:
            return a.astype(dt)
    return a


def save_model(
    path: str | os.PathLike, space: FeatureSpace, weights: np.ndarray, meta: dict
) -> int:
    """Write the model (``space`` and ``weights`` pruned to the non-zero weights, ``meta``)
    atomically; returns the file size in bytes."""
    space, w = space.prune(weights)
    blob, lens = pack_strings(space.attributes)
    lblob, llens = pack_strings(space.labels)
    arrays = {
        "attr_blob": blob,
        "attr_lens": _small_int(lens),
        "label_blob": lblob,
        "label_lens": _small_int(llens),
        "attr_nfeat": _small_int(np.diff(space.attr_ptr)),
        "feat_label": _small_int(space.feat_label),
        "trans_index": space.trans_index.astype(np.int32),
        "weights": w,
    }
    if space.n_dense:
        dblob, dlens = pack_strings(space.dense_names)
        arrays.update(dense_blob=dblob, dense_lens=_small_int(dlens))
    if space.n_bigram:
        bblob, blens = pack_strings(space.battributes)
        arrays.update(
            battr_blob=bblob,
            battr_lens=_small_int(blens),
            battr_nfeat=_small_int(np.diff(space.battr_ptr)),
            bfeat_pair=_small_int(space.bfeat_pair.astype(np.int64)),
        )
    table = {}
    payload = []
    off = 0
    for name, a in arrays.items():
        a = np.ascontiguousarray(a)
        comp = zlib.compress(a.tobytes(), 6)
        table[name] = {
            "dtype": a.dtype.str,
            "shape": list(a.shape),
            "offset": off,
            "nbytes": len(comp),
        }
        payload.append(comp)
        off += len(comp)
    body = b"".join(payload)
    header = {
        "format": "crfkit-model",
        "format_version": 3 if space.n_bigram else 2 if space.n_dense else 1,
        "n_labels": space.n_labels,
        "n_attributes": space.n_attributes,
        "n_state": space.n_state,
        "n_trans": space.n_trans,
        "n_dense": space.n_dense,
        **(
            {"n_bigram": space.n_bigram, "n_battributes": space.n_battributes}
            if space.n_bigram
            else {}
        ),
        "arrays": table,
        "payload_sha256": hashlib.sha256(body).hexdigest(),
        "meta": meta,
    }
    hb = json.dumps(header, sort_keys=True).encode("utf-8")
    head = MAGIC + struct.pack("<I", len(hb)) + hb
    digest = hashlib.sha256(head)
    digest.update(body)
    with atomic_file(path, what="the model") as f:
        f.write(head)
        f.write(body)
        f.write(digest.digest())
    return len(head) + len(body) + digest.digest_size


def load_model(path: str | os.PathLike, make=None):
    """Read a model file written by :func:`save_model`: ``make(space=, weights=, meta=)`` of what it
    holds (by default the tuple ``(space, weights, meta)``; :meth:`crfkit.model.CRFModel.load`
    passes the class).

    A model file is untrusted input: whatever its content, this returns a
    valid model or raises :class:`~crfkit.errors.ModelError` naming the
    file, with memory bounded by the file size.  The magic bytes and the
    header are read and checked first (the header is at most
    ``MAX_HEADER_BYTES``), the rest is hashed in chunks and checked against
    the trailing SHA-256 before anything in it is used, the header's array
    table is checked against its counts (every array's dtype and shape
    follow from them) and against a ceiling (the arrays' declared size may
    not exceed ``EXPANSION_ALLOWANCE + MAX_EXPANSION x`` the payload's
    size), and each array is decompressed straight into an array of its
    declared size, refusing a zlib member that holds more or less.  The
    metadata fields crfkit reads (templates, padding, columns, dense
    columns, training settings) are checked too (:func:`check_meta`).
    """
    path = os.fspath(path)
    try:
        f = open(path, "rb")
    except OSError as e:
        raise ModelError(f"{path}: cannot read model file: {e.strerror}") from None
    try:
        with f:
            return read_model(f, path, make)
    except MemoryError:
        raise ModelError(f"{path}: not enough memory to load this model") from None
    except OSError as e:
        raise ModelError(f"{path}: cannot read model file: {e.strerror or e}") from None


def read_model(f, path: str, make=None):
    """:func:`load_model` of an open binary file ``f`` (``path``: its name in the errors)."""
    if make is None:
        make = _triple

    def corrupted(why) -> ModelError:
        return ModelError(f"{path}: model payload is corrupted or inconsistent ({why})")

    header, head = _read_header(f, path)
    try:
        counts, specs, declared = _check_table(header)
    except (KeyError, ValueError, TypeError) as e:
        raise corrupted(e) from None
    # the payload ends where its last array ends (a pipe is read no further than that, plus one
    # byte)
    end = max(spec["offset"] + spec["nbytes"] for spec in specs.values())
    g, size = _seekable(f, head, len(head) + end + 33)
    try:
        payload_len = size - len(head) - 32
        if payload_len < end:
            raise ModelError(
                f"{path}: model file is truncated or corrupted (its array table needs {end} "
                f"bytes of payload, the file holds {max(payload_len, 0)})"
            )
        if payload_len > end:
            raise corrupted(f"{payload_len - end} bytes after the last array")
        ceiling = EXPANSION_ALLOWANCE + MAX_EXPANSION * payload_len
        if declared > ceiling:
            raise corrupted(
                f"the arrays would take {declared} bytes from a {payload_len}-byte payload; "
                f"the loader's ceiling is {EXPANSION_ALLOWANCE} + {MAX_EXPANSION} x the payload"
            )
        # the L x L tables a loaded model holds (the transition index as int64, the tagger's
        # transition scores...) count against the same ceiling, however well they compress
        L = counts["n_labels"]
        pairs = LABEL_PAIR_BYTES * L * L
        if pairs > ceiling:
            raise corrupted(
                f"{L} labels: their L x L tables would take {pairs} bytes "
                f"({LABEL_PAIR_BYTES} per label pair) from a {payload_len}-byte payload; "
                f"the loader's ceiling is {EXPANSION_ALLOWANCE} + {MAX_EXPANSION} x the payload"
            )
        try:
            arrays = _checked_arrays(g.fileno(), path, header, head, size, specs)
            space, weights = _space_of(arrays, counts)
            meta = header.get("meta", {})
            if not isinstance(meta, dict):
                raise ValueError("meta is not a mapping")
        except (
            KeyError,
            zlib.error,
            ValueError,
            TypeError,
            UnicodeDecodeError,
            OverflowError,
        ) as e:
            raise corrupted(e) from None
    finally:
        if g is not f:
            g.close()
    check_meta(meta, space, path)
    return make(space=space, weights=weights, meta=meta)


def _triple(space, weights, meta):
    return space, weights, meta


# ----------------------------------------------------------------------------------------------
# loading Ceilings of the loader (see CRFModel.load and the README's "Model file" section).
MAX_HEADER_BYTES = 64 << 20  # the JSON header: counts, array table, metadata (templates...)
MAX_EXPANSION = 32  # declared array bytes per compressed payload byte, beyond...
EXPANSION_ALLOWANCE = (
    256 << 20
)  # ... this much (saved models expand about 2x; zlib's limit is ~1000x)
MAX_COUNT = 2**31 - 1  # attributes, features, labels: int32 ids in the kernels
# MAX_LABELS (46340, features.space): label pairs i*L + j are int32 too
LABEL_PAIR_BYTES = 32  # memory per label pair of a loaded model, held against the ceiling too

_READ_CHUNK = 1 << 20
_INFLATE_CHUNK = 4 << 20
_KINDS = {"blob": "u", "int": "iu", "float": "f"}


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _read_exact(f, n: int) -> bytes:
    """n bytes from f, fewer only at the end of the file (a pipe may return short reads)."""
    out = []
    while n > 0:
        b = f.read(min(n, _READ_CHUNK))
        if not b:
            break
        out.append(b)
        n -= len(b)
    return b"".join(out)


def _read_header(f, path: str) -> tuple[dict, bytes]:
    """The header (parsed) and its bytes (magic, length, JSON), checked before anything else is
    read."""
    magic = _read_exact(f, len(MAGIC))
    if magic != MAGIC:
        raise ModelError(f"{path}: not a crfkit model file (bad magic bytes)")
    hb = _read_exact(f, 4)
    if len(hb) < 4:
        raise ModelError(f"{path}: model header is truncated or corrupted")
    (hl,) = struct.unpack("<I", hb)
    if hl > MAX_HEADER_BYTES:
        raise ModelError(
            f"{path}: model header is truncated or corrupted "
            f"(a header length of {hl} bytes is over the {MAX_HEADER_BYTES}-byte limit)"
        )
    raw = _read_exact(f, hl)
    try:
        if len(raw) < hl:
            raise ValueError
        header = json.loads(raw.decode("utf-8"))
        if not isinstance(header, dict):
            raise ValueError
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ModelError(f"{path}: model header is truncated or corrupted") from None
    # a newer format may lay the rest out differently: its version is reported before anything else
    ver = header.get("format_version")
    if _is_int(ver) and ver > FORMAT_VERSION:
        raise ModelError(
            f"{path}: model format version {ver} is newer than this crfkit reads "
            f"(up to {FORMAT_VERSION}); upgrade crfkit"
        )
    if not _is_int(ver) or ver < 1:
        raise ModelError(f"{path}: model header is truncated or corrupted (format version {ver!r})")
    return header, magic + hb + raw


def _seekable(f, head: bytes, limit: int):
    """(f, its size) when f is a regular file; otherwise (a pipe, a device) a temporary file holding
    ``head`` and the rest of f up to ``limit`` bytes in all, so that the payload can be read twice
    (checksum, then arrays) in bounded memory."""
    st = os.fstat(f.fileno())
    if stat.S_ISREG(st.st_mode):
        return f, st.st_size
    tmp = tempfile.TemporaryFile()
    try:
        tmp.write(head)
        left = limit - len(head)
        while left > 0:
            b = f.read(min(left, _READ_CHUNK))
            if not b:
                break
            tmp.write(b)
            left -= len(b)
        tmp.flush()  # read back through its descriptor (os.pread), not its buffer
        return tmp, tmp.tell()
    except BaseException:
        tmp.close()
        raise


def _verify_checksums(fd: int, path: str, header: dict, head: bytes, size: int) -> None:
    """The trailing SHA-256 (of every byte before it) and the header's payload SHA-256, hashed in
    chunks read by ``os.pread`` (no shared file position: see :func:`_checked_arrays`)."""
    bad = ModelError(f"{path}: model file is truncated or corrupted (checksum mismatch)")
    if size < len(head) + 32:
        raise bad
    whole = hashlib.sha256(head)
    body = hashlib.sha256()
    at = len(head)
    left = size - 32 - len(head)
    while left:
        b = os.pread(fd, min(left, _READ_CHUNK), at)
        if not b:
            raise bad
        whole.update(b)
        body.update(b)
        left -= len(b)
        at += len(b)
    if os.pread(fd, 33, at) != whole.digest() or body.hexdigest() != header.get("payload_sha256"):
        raise bad


def _checked_arrays(fd: int, path: str, header: dict, head: bytes, size: int, specs: dict) -> dict:
    """The arrays of ``specs`` (name -> array of its declared shape), the checksums verified, in two
    lanes at once (zlib and SHA-256 run outside the GIL: a 4 MB model loads in about half the time
    on 2 cores): a thread hashes the file and inflates every array but the largest, this thread
    inflates the largest; both read by ``os.pread``.  A checksum mismatch (a :class:`ModelError`) or
    a read error of the checksum lane is raised whatever else failed; then the first array's error
    in file order (a ``ValueError`` or ``zlib.error`` the caller reports as a corrupted payload, a
    ``MemoryError``...), as a serial load raised them."""
    import threading

    order = sorted(specs.items(), key=lambda kv: kv[1]["offset"])
    largest = max(order, key=lambda kv: kv[1]["nbytes"])[0] if order else None
    arrays: dict = {}
    errors: dict = {}  # array name -> its error; None -> the checksum lane's

    def inflate(name, spec) -> None:
        try:
            arrays[name] = _inflate(
                fd,
                len(head) + spec["offset"],
                spec["nbytes"],
                np.empty(spec["shape"], spec["dtype"]),
                name,
            )
        except Exception as e:  # noqa: BLE001 (raised by the caller, in this thread)
            errors[name] = e

    def lane() -> None:
        try:
            _verify_checksums(fd, path, header, head, size)
        except Exception as e:  # noqa: BLE001 (as above)
            errors[None] = e
            return
        for name, spec in order:
            if name != largest:
                inflate(name, spec)

    other = threading.Thread(target=lane, name="crfkit-model-checksums", daemon=True)
    other.start()
    try:
        if largest is not None:
            inflate(largest, specs[largest])
    finally:
        other.join()
    for name in [None] + [name for name, _spec in order]:
        if name in errors:
            raise errors[name]
    return arrays


def _count(header: dict, key: str, default=None, limit: int = MAX_COUNT) -> int:
    v = header.get(key, default)
    if not isinstance(v, int) or isinstance(v, bool) or v < 0 or v > limit:
        raise ValueError(f"header field {key!r} is {v!r}, not a count in 0..{limit}")
    return v


def _check_table(header: dict) -> tuple[dict, dict, int]:
    """The header's counts, its array table checked against them ({name: offset, nbytes, shape,
    dtype}: every array's dtype and shape follow from the counts), and the bytes the arrays declare.
    Only the header is read so far; nothing is allocated."""
    ver = header["format_version"]
    c = {k: _count(header, k) for k in ("n_labels", "n_attributes", "n_state", "n_trans")}
    if c["n_labels"] > MAX_LABELS:
        raise ValueError(f"{c['n_labels']} labels (at most {MAX_LABELS})")
    c["n_dense"] = _count(header, "n_dense", 0)
    c["n_bigram"] = _count(header, "n_bigram", 0)
    c["n_battributes"] = _count(header, "n_battributes", 0)
    if c["n_dense"] and ver < 2:
        raise ValueError(f"bad dense dimension count {c['n_dense']} for format version {ver}")
    if c["n_bigram"] and ver < 3:
        raise ValueError(
            f"bad bigram-observation feature count {c['n_bigram']} for format version {ver}"
        )
    if c["n_battributes"] and not c["n_bigram"]:
        raise ValueError("bigram-observation attributes without bigram-observation features")
    L = c["n_labels"]
    if c["n_trans"] > L * L:
        raise ValueError(f"{c['n_trans']} transition features for {L} labels")
    n_weights = c["n_state"] + c["n_trans"] + c["n_bigram"] + c["n_dense"] * L
    if n_weights > 2**62:
        raise ValueError(f"{n_weights} weights")
    expect = {
        "attr_blob": ("blob", None),
        "attr_lens": ("int", (c["n_attributes"],)),
        "label_blob": ("blob", None),
        "label_lens": ("int", (L,)),
        "attr_nfeat": ("int", (c["n_attributes"],)),
        "feat_label": ("int", (c["n_state"],)),
        "trans_index": ("int", (L, L)),
        "weights": ("float", (n_weights,)),
    }
    if c["n_dense"]:
        expect.update(dense_blob=("blob", None), dense_lens=("int", (c["n_dense"],)))
    if c["n_bigram"]:
        expect.update(
            battr_blob=("blob", None),
            battr_lens=("int", (c["n_battributes"],)),
            battr_nfeat=("int", (c["n_battributes"],)),
            bfeat_pair=("int", (c["n_bigram"],)),
        )
    table = header.get("arrays")
    if not isinstance(table, dict):
        raise ValueError("no array table")
    missing = sorted(set(expect) - set(table))
    extra = sorted(set(table) - set(expect))
    if missing or extra:
        raise ValueError(
            "array table "
            + "; ".join(
                ([f"lacks {', '.join(missing)}"] if missing else [])
                + ([f"has unknown {', '.join(extra)}"] if extra else [])
            )
        )
    specs = {}
    declared = 0
    for name, (kind, shape) in expect.items():
        spec = table[name]
        if not isinstance(spec, dict):
            raise ValueError(f"array {name}: not a table entry")
        dt = spec.get("dtype")
        if (
            not isinstance(dt, str)
            or len(dt) != 3
            or dt[0] not in "<>|"
            or dt[1] not in _KINDS[kind]
            or dt[2] not in ("1" if kind == "blob" else "48" if kind == "float" else "1248")
        ):
            raise ValueError(f"array {name}: dtype {dt!r} is not a {kind} type")
        dtype = np.dtype(dt)
        got = spec.get("shape")
        if (
            not isinstance(got, list)
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in got)
            or (shape is not None and tuple(got) != shape)
            or (shape is None and (len(got) != 1 or not 0 <= got[0] <= MAX_COUNT))
        ):
            raise ValueError(
                f"array {name}: shape {got!r}, expected "
                f"{list(shape) if shape is not None else '[length]'} from the header's counts"
            )
        off, nb = spec.get("offset"), spec.get("nbytes")
        if not _is_int(off) or not _is_int(nb) or off < 0 or nb < 0:
            raise ValueError(f"array {name}: offset {off!r} and size {nb!r} are not byte counts")
        n = 1
        for x in got:
            n *= x
        declared += n * dtype.itemsize
        specs[name] = {"offset": off, "nbytes": nb, "shape": tuple(got), "dtype": dtype}
    return c, specs, declared


def _inflate(fd: int, start: int, nbytes: int, out: np.ndarray, name: str) -> np.ndarray:
    """Decompress the zlib member in bytes start..start+nbytes of the file ``fd`` into ``out``, which
    it must fill exactly: never more output than ``out`` holds plus one byte is produced (a
    decompression bomb is refused after that byte), never more than 4 MiB at a time."""
    want = out.nbytes
    view = memoryview(out.reshape(-1).view(np.uint8)) if want else memoryview(bytearray())
    d = zlib.decompressobj()
    pos = 0
    at = start
    left = nbytes

    def take(piece: bytes) -> None:
        nonlocal pos
        if pos + len(piece) > want:
            raise ValueError(f"array {name} holds more than the {want} bytes its shape declares")
        view[pos : pos + len(piece)] = piece
        pos += len(piece)

    while left:
        chunk = os.pread(fd, min(left, _READ_CHUNK), at)
        if not chunk:
            raise ValueError(f"array {name}: the payload ends early")
        left -= len(chunk)
        at += len(chunk)
        if d.eof:
            raise ValueError(f"array {name}: bytes after the end of its compressed stream")
        while chunk:
            take(d.decompress(chunk, min(_INFLATE_CHUNK, want - pos + 1)))
            chunk = d.unconsumed_tail
    while not d.eof:  # output zlib still holds after the last input
        piece = d.decompress(b"", min(_INFLATE_CHUNK, want - pos + 1))
        if not piece:
            break
        take(piece)
    if not d.eof:
        raise ValueError(f"array {name}: its compressed stream is cut short")
    if d.unused_data:
        raise ValueError(f"array {name}: bytes after the end of its compressed stream")
    if pos != want:
        raise ValueError(f"array {name} holds {pos} bytes, its shape declares {want}")
    return out


def _strings(arrays: dict, blob: str, lens: str, what: str) -> list[str]:
    b, n = arrays[blob], arrays[lens]
    if n.size and (n.min() < 0 or n.max() > b.size):
        raise ValueError(f"{what} string lengths out of range")
    if int(n.sum(dtype=np.int64)) != b.size:
        raise ValueError(f"{what} string lengths do not add up to the string table")
    return unpack_strings(b, n.astype(np.int64))


def _string_table(arrays: dict, blob: str, lens: str, what: str) -> StringTable:
    b, n = arrays[blob], arrays[lens]
    if n.size and (n.min() < 0 or n.max() > b.size):
        raise ValueError(f"{what} string lengths out of range")
    if int(n.sum(dtype=np.int64)) != b.size:
        raise ValueError(f"{what} string lengths do not add up to the string table")
    return StringTable(b, n.astype(np.int64))


def _space_of(arrays: dict, c: dict) -> tuple[FeatureSpace, np.ndarray]:
    """The feature space and weights of decoded arrays, every index and count checked."""
    L = c["n_labels"]
    labels = _strings(arrays, "label_blob", "label_lens", "label")
    attributes = _string_table(arrays, "attr_blob", "attr_lens", "attribute")
    problems = []
    if L == 0:
        problems.append("no labels")
    if len(set(labels)) != L:
        problems.append("duplicate labels")
    nfeat = arrays["attr_nfeat"].astype(np.int64)
    if (nfeat < 0).any() or (nfeat.size and nfeat.max() > c["n_state"]):
        raise ValueError("feature counts out of range")
    attr_ptr = np.zeros(len(nfeat) + 1, np.int64)
    np.cumsum(nfeat, out=attr_ptr[1:])
    # the labels are checked on the stored values (any integer type), then converted once, to the
    # int32 the feature space holds (not int64 first: 7.4M features took ~0.1 s more and 60 MB
    # more); the inflated weights are already float64 in every file crfkit writes (no copy then)
    fl = arrays["feat_label"]
    if len(fl) and (fl.min() < 0 or fl.max() >= L):
        problems.append("a state feature has a label outside the label table")
    feat_label = fl.astype(np.int32)
    trans_index = arrays["trans_index"].astype(np.int64)
    weights = np.asarray(arrays["weights"], dtype=np.float64)
    live = trans_index[trans_index >= 0]
    n_dense, n_bigram = c["n_dense"], c["n_bigram"]
    dense_names = _strings(arrays, "dense_blob", "dense_lens", "dense name") if n_dense else []
    if n_bigram:
        bnfeat = arrays["battr_nfeat"].astype(np.int64)
        if (bnfeat < 0).any() or (bnfeat.size and bnfeat.max() > n_bigram):
            raise ValueError("bigram-observation feature counts out of range")
        battr_ptr = np.zeros(len(bnfeat) + 1, np.int64)
        np.cumsum(bnfeat, out=battr_ptr[1:])
        bfeat_pair = arrays["bfeat_pair"].astype(np.int64)
        battributes = _strings(arrays, "battr_blob", "battr_lens", "bigram attribute")
        if battr_ptr[-1] != n_bigram:
            problems.append("bigram-observation feature counts do not add up")
        elif n_bigram and (bfeat_pair.min() < 0 or bfeat_pair.max() >= L * L):
            problems.append("a bigram-observation feature has a label pair outside the label table")
    else:
        battr_ptr, bfeat_pair, battributes = np.zeros(1, np.int64), np.zeros(0, np.int64), []
    if attr_ptr[-1] != c["n_state"]:
        problems.append("feature counts do not add up")
    if (trans_index < -1).any() or (len(live) and live.max() >= len(live)):
        problems.append("bad transition table")
    elif (
        len(live) and np.bincount(live).max() > 1
    ):  # (np.unique would import numpy.ma: 40 ms at start-up)
        problems.append("transition indices are not a permutation")
    elif len(live) != c["n_trans"]:
        problems.append(f"{len(live)} transition features, the header says {c['n_trans']}")
    if not np.all(np.isfinite(weights)):
        problems.append("non-finite weights")
    if problems:
        raise ValueError("; ".join(problems))
    space = FeatureSpace(
        labels=labels,
        attributes=attributes,
        attr_ptr=attr_ptr,
        feat_label=feat_label,
        trans_index=trans_index,
        n_dense=n_dense,
        dense_names=dense_names,
        battributes=battributes,
        battr_ptr=battr_ptr,
        bfeat_pair=bfeat_pair,
    )
    return space, weights


# metadata fields crfkit reads, and what they must be (anything else in ``meta`` is the user's and
# kept as is)
_META_STR = (
    "templates",
    "input_format",
    "algorithm",
    "status",
    "train_file",
    "support",
    "transitions",
    "dev_metric",
)
_META_COUNT = (
    "columns",
    "n_train",
    "iterations",
    "resumed_from",
    "dev_best_iteration",
    "fine_tune",
    "n_candidates",
)
_META_NONNEG = ("l1", "l2", "min_freq", "fine_tune_l2")


def check_meta(meta: dict, space: FeatureSpace, path: str) -> None:
    """Raise :class:`ModelError` (naming ``path`` and the field) when a metadata field crfkit reads
    is not what crfkit writes: ``templates`` (a template set that parses, within the template
    limits; :mod:`crfkit.features.templates`), ``template_pad`` (a bool), ``columns`` (a count that
    covers the templates' columns), ``dense_columns`` (one 1-based column per dense dimension,
    within ``columns``), the training settings printed by ``crfkit info`` (strings, counts,
    non-negative numbers)."""

    def bad(key: str, why: str) -> ModelError:
        v = reprlib.repr(meta[key])
        return ModelError(f"{path}: metadata field {key!r} is {v}: {why}")

    for k in _META_STR:
        if k in meta and not isinstance(meta[k], str):
            raise bad(k, "expected a string")
    for k in _META_COUNT:
        top = MAX_COLUMN if k == "columns" else 2**53
        if k in meta and not (_is_int(meta[k]) and 0 <= meta[k] <= top):
            raise bad(k, f"expected a whole number in 0..{top}")
    for k in _META_NONNEG:
        v = meta.get(k)
        if k in meta and not ((_is_int(v) or isinstance(v, float)) and 0 <= v < float("inf")):
            raise bad(k, "expected a finite number >= 0")
    if "train_weight" in meta and not (
        (_is_int(meta["train_weight"]) or isinstance(meta["train_weight"], float))
        and 0 <= meta["train_weight"] < float("inf")
    ):
        raise bad("train_weight", "expected a finite number >= 0")
    if "dev_best" in meta and not (
        isinstance(meta["dev_best"], (int, float)) and not isinstance(meta["dev_best"], bool)
    ):
        raise bad("dev_best", "expected a number")
    if "template_pad" in meta and not isinstance(meta["template_pad"], bool):
        raise bad("template_pad", "expected true or false")
    columns = meta.get("columns")
    if meta.get("templates"):
        try:
            t = Templates.parse(meta["templates"], name=f"{path} (stored templates)")
        except TemplateError as e:
            raise ModelError(str(e)) from None
        if columns is not None and t.max_column() >= columns:
            raise bad("columns", f"the stored templates use column {t.max_column()} (0-based)")
    if "dense_columns" in meta:
        dc = meta["dense_columns"]
        if not isinstance(dc, list) or not all(_is_int(x) and 1 <= x <= MAX_COLUMN for x in dc):
            raise bad("dense_columns", "expected a list of 1-based column numbers")
        if len(dc) != space.n_dense:
            raise bad("dense_columns", f"{len(dc)} columns for {space.n_dense} dense dimensions")
        if columns is not None and dc and max(dc) > columns:
            raise bad(
                "dense_columns", f"column {max(dc)} is beyond the {columns} observation columns"
            )
