"""CRFsuite's binary model (what ``crfsuite learn`` and python-crfsuite's ``Trainer`` write).

Layout (all integers little-endian uint32; offsets from the start of the file):

* a 48-byte header: ``lCRF``, the file size, ``FOMC``, version 100, the feature count (CRFsuite
  leaves it 0), the label and attribute counts, and the offsets of the feature table, of the label
  and attribute string databases and of the label and attribute reference chunks;
* the feature table: ``FEAT``, the chunk size, the feature count ``K``, then ``K`` records of 20
  bytes: type (0: state, 1: transition), source (attribute or previous label), destination (label)
  and the weight (a little-endian float64);
* two CQDB string databases (labels, attributes): ``CQDB``, the chunk size, a flag, the byte-order
  mark ``0x62445371``, the count of the id -> string array and its offset, 256 (offset, size)
  references of the hash tables, the records (id, key size counting its NUL, the key and its NUL),
  the hash tables (buckets of (hash, record offset), twice as many as the keys, filled by linear
  probing from ``(hash >> 8) % size``; a key's table is ``hash % 256``, the hash Bob Jenkins'
  lookup3 ``hashlittle`` of the key and its NUL with seed 0), then the id -> record offset array;
  every offset inside a CQDB is from its start;
* ``LFRF`` and ``AFRF`` chunks (each at a 4-byte boundary): chunk size, count, an offset per label
  (``L + 2`` slots, two unused) or attribute, then at each offset a count and the feature ids of
  that label's transitions or that attribute's state features.

CRFsuite's tagger reaches the features only through the reference lists: a token's attribute adds
``value x weight`` of each state feature its list names to the feature's destination label; the
transition ``i -> j`` is the weight of the feature in label ``i``'s list whose destination is
``j``.  :func:`read` builds the crfkit model from those lists (and requires each referenced
feature's type and source to agree with the list it is in, so that the model is also the one
``Tagger.dump()`` shows); :func:`write` lays a crfkit model out as CRFsuite does.

The file is untrusted input: the magic is checked first, then every count and offset against the
file size (and the label count against a ceiling on the label-pair table) before anything is
allocated; every problem is a :class:`~crfkit.errors.ModelError` naming the file.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from ..errors import CrfkitError, ModelError

if TYPE_CHECKING:
    from ..model import CRFModel

__all__ = ["MAGIC", "hashlittle", "hashlittle_many", "read", "sniff", "write"]

MAGIC = b"lCRF"
MODEL_TYPE = b"FOMC"
VERSION = 100
HEADER_SIZE = 48
CHUNK_SIZE = 12
FEATURE_SIZE = 20
CQDB_MAGIC = b"CQDB"
CQDB_BYTEORDER = 0x62445371
CQDB_TABLES = 256
CQDB_HEADER = 24 + 8 * CQDB_TABLES  # header, then the 256 table references: records start here
MAX_FILE_BYTES = 2**32 - 1  # offsets are uint32

#: The reader's ceilings (``read(..., limits={...})`` overrides them): ``max_bytes`` (file size),
#: ``max_labels``, and ``pair_table_bytes`` + ``pair_table_factor`` x the file size for the
#: L x L label-pair table that the label count asks for.
DEFAULT_LIMITS = {
    "max_bytes": MAX_FILE_BYTES,
    "max_labels": 46340,
    "pair_table_bytes": 64 << 20,
    "pair_table_factor": 16,
}

_FEATURE_DTYPE = np.dtype([("type", "<u4"), ("src", "<u4"), ("dst", "<u4"), ("weight", "<f8")])
assert _FEATURE_DTYPE.itemsize == FEATURE_SIZE


def sniff(head: bytes) -> bool:
    """Whether the first bytes of a file look like a CRFsuite model (``lCRF`` then, at byte 8,
    ``FOMC``)."""
    return head[:4] == MAGIC and (len(head) < 12 or head[8:12] == MODEL_TYPE)


# --------------------------------------------------------------------------- lookup3 hashlittle
_M32 = 0xFFFFFFFF


def _rot(x: int, k: int) -> int:
    return ((x << k) | (x >> (32 - k))) & _M32


def hashlittle(key: bytes, initval: int = 0) -> int:
    """Bob Jenkins' lookup3 ``hashlittle`` of ``key`` (the byte-wise definition; one key at a
    time, for tests and small tables; :func:`hashlittle_many` hashes many at once)."""
    n = len(key)
    a = b = c = (0xDEADBEEF + n + initval) & _M32
    if n == 0:
        return c
    pos = 0
    while n - pos > 12:
        k = key[pos : pos + 12]
        a = (a + int.from_bytes(k[0:4], "little")) & _M32
        b = (b + int.from_bytes(k[4:8], "little")) & _M32
        c = (c + int.from_bytes(k[8:12], "little")) & _M32
        a = (a - c) & _M32
        a ^= _rot(c, 4)
        c = (c + b) & _M32
        b = (b - a) & _M32
        b ^= _rot(a, 6)
        a = (a + c) & _M32
        c = (c - b) & _M32
        c ^= _rot(b, 8)
        b = (b + a) & _M32
        a = (a - c) & _M32
        a ^= _rot(c, 16)
        c = (c + b) & _M32
        b = (b - a) & _M32
        b ^= _rot(a, 19)
        a = (a + c) & _M32
        c = (c - b) & _M32
        c ^= _rot(b, 4)
        b = (b + a) & _M32
        pos += 12
    k = key[pos:].ljust(12, b"\0")  # the last 1..12 bytes, zero-padded: the same sums
    a = (a + int.from_bytes(k[0:4], "little")) & _M32
    b = (b + int.from_bytes(k[4:8], "little")) & _M32
    c = (c + int.from_bytes(k[8:12], "little")) & _M32
    c ^= b
    c = (c - _rot(b, 14)) & _M32
    a ^= c
    a = (a - _rot(c, 11)) & _M32
    b ^= a
    b = (b - _rot(a, 25)) & _M32
    c ^= b
    c = (c - _rot(b, 16)) & _M32
    a ^= c
    a = (a - _rot(c, 4)) & _M32
    b ^= a
    b = (b - _rot(a, 14)) & _M32
    c ^= b
    c = (c - _rot(b, 24)) & _M32
    return c


def _vrot(x: np.ndarray, k: int) -> np.ndarray:
    return (x << np.uint32(k)) | (x >> np.uint32(32 - k))


def _mark(n: int, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """A boolean mask of length ``n``, True inside the disjoint ranges ``[starts, ends)``."""
    keep = ends > starts  # (empty ranges could share an end with their neighbour)
    starts, ends = starts[keep], ends[keep]
    delta = np.zeros(n + 1, dtype=np.int8)
    delta[starts] += 1
    delta[ends] -= 1
    return np.cumsum(delta[:-1], dtype=np.int8).view(np.bool_)


def hashlittle_many(blob: np.ndarray, lens, initval: int = 0, nuls: int = 0) -> np.ndarray:
    """``hashlittle`` of each of the keys packed in ``blob`` (uint8) with byte lengths ``lens``,
    each followed by ``nuls`` zero bytes (CQDB hashes a key with its NUL: ``nuls=1``); uint32.
    The keys are laid out zero-padded, each in whole 12-byte blocks, and hashed in numpy for all
    keys of the same number of blocks at once."""
    lens = np.asarray(lens, dtype=np.int64)
    n = len(lens)
    out = np.empty(n, dtype=np.uint32)
    if n == 0:
        return out
    hl = lens + nuls
    nblocks = np.maximum((hl + 11) // 12, 1)
    slot = 12 * nblocks
    start = np.cumsum(slot) - slot
    padded = np.zeros(int(slot.sum()), dtype=np.uint8)
    padded[_mark(len(padded), start, start + lens)] = blob
    words = padded.view("<u4")
    wstart = start // 4
    for nb in np.unique(nblocks).tolist():
        sel = np.flatnonzero(nblocks == nb)
        ls = hl[sel]
        if len(sel) == n:
            w = words.reshape(n, 3 * nb)
        else:
            w = words[wstart[sel][:, None] + np.arange(3 * nb)[None, :]]
        words_nb = w.astype(np.uint32)  # (m, 3 * nb)
        init = ((0xDEADBEEF + ls + initval) & _M32).astype(np.uint32)
        a = init.copy()
        b = init.copy()
        c = init.copy()
        for blk in range(nb - 1):
            a += words_nb[:, 3 * blk]
            b += words_nb[:, 3 * blk + 1]
            c += words_nb[:, 3 * blk + 2]
            a -= c
            a ^= _vrot(c, 4)
            c += b
            b -= a
            b ^= _vrot(a, 6)
            a += c
            c -= b
            c ^= _vrot(b, 8)
            b += a
            a -= c
            a ^= _vrot(c, 16)
            c += b
            b -= a
            b ^= _vrot(a, 19)
            a += c
            c -= b
            c ^= _vrot(b, 4)
            b += a
        blk = nb - 1
        a += words_nb[:, 3 * blk]
        b += words_nb[:, 3 * blk + 1]
        c += words_nb[:, 3 * blk + 2]
        c ^= b
        c -= _vrot(b, 14)
        a ^= c
        a -= _vrot(c, 11)
        b ^= a
        b -= _vrot(a, 25)
        c ^= b
        c -= _vrot(b, 16)
        a ^= c
        a -= _vrot(c, 4)
        b ^= a
        b -= _vrot(a, 14)
        c ^= b
        c -= _vrot(b, 24)
        # an empty key is never hashed here (CQDB keys count their NUL), but keep lookup3's rule
        c[ls == 0] = init[ls == 0]
        out[sel] = c
    return out


# --------------------------------------------------------------------------- reading
def _u32_at(buf: np.ndarray, offs: np.ndarray) -> np.ndarray:
    """Little-endian uint32 at each (checked) byte offset of ``buf`` (uint8), as int64."""
    o = np.asarray(offs, dtype=np.int64)
    return (
        buf[o].astype(np.int64)
        | (buf[o + 1].astype(np.int64) << 8)
        | (buf[o + 2].astype(np.int64) << 16)
        | (buf[o + 3].astype(np.int64) << 24)
    )


class _Bad(Exception):
    """A problem with the file (turned into a ModelError naming it)."""


def _a(what: str) -> str:
    return ("an " if what[0] in "aeiou" else "a ") + what


def _read_cqdb(buf: np.ndarray, off: int, n: int, what: str):
    """The ``n`` strings of the CQDB at ``off`` as a StringTable in id order."""
    from ..features.space import StringTable

    size = len(buf)
    if off + CQDB_HEADER > size:
        raise _Bad(f"the {what} database at offset {off} runs past the end of the file")
    if buf[off : off + 4].tobytes() != CQDB_MAGIC:
        raise _Bad(f"no {what} database at offset {off} (no CQDB mark)")
    csize, _flag, order, bwd_n, bwd_off = struct.unpack_from("<5I", buf, off + 4)
    if order != CQDB_BYTEORDER:
        raise _Bad(f"the {what} database has a bad byte-order mark {order:#x}")
    if csize < CQDB_HEADER or off + csize > size:
        raise _Bad(f"the {what} database's size {csize} does not fit the file")
    end = off + csize
    if bwd_n != n:
        raise _Bad(f"the {what} database holds {bwd_n} strings, the header says {n}")
    if n == 0:
        return StringTable(np.zeros(0, np.uint8), np.zeros(0, np.int64))
    if n > (csize - CQDB_HEADER) // 13:  # a record (9 bytes at least) and its id and 1 bucket
        raise _Bad(f"{n} {what}s cannot fit a {csize}-byte database")
    if bwd_off < CQDB_HEADER or off + bwd_off + 4 * n > end:
        raise _Bad(f"the {what} database's id array (offset {bwd_off}) does not fit it")
    rec = np.frombuffer(buf, dtype="<u4", count=n, offset=off + bwd_off).astype(np.int64) + off
    if rec.min() < off + CQDB_HEADER or rec.max() + 8 > end:
        raise _Bad(f"{_a(what)} record offset is outside the database")
    ids = _u32_at(buf, rec)
    bad = np.flatnonzero(ids != np.arange(n))
    if len(bad):
        raise _Bad(f"the {what} record of id {bad[0]} holds id {ids[bad[0]]}")
    ksize = _u32_at(buf, rec + 4)
    kend = rec + 8 + ksize  # one past the NUL
    if ksize.min() < 1 or kend.max() > end:
        raise _Bad(f"{_a(what)} string runs outside the database (or has no NUL)")
    if np.any(buf[kend - 1] != 0):
        raise _Bad(f"{_a(what)} string does not end with a NUL byte")
    order = np.argsort(rec, kind="stable")
    r_sorted = rec[order]
    if n > 1 and np.any(r_sorted[1:] < kend[order][:-1]):
        raise _Bad(f"{what} records overlap")
    # the key bytes (without their NULs), in file order, by a running count of starts and ends
    delta = np.zeros(end - off + 1, dtype=np.int8)
    delta[rec + 8 - off] += 1
    delta[kend - 1 - off] -= 1
    inside = np.cumsum(delta[:-1], dtype=np.int8).astype(bool)
    blob = buf[off:end][inside]
    if len(blob) and not blob.all():
        raise _Bad(f"{_a(what)} string holds a NUL byte")
    lens = (ksize - 1)[order]
    _check_distinct(blob, lens, what)
    try:
        table = StringTable(blob, lens)
    except (UnicodeDecodeError, ValueError):
        raise _Bad(f"{_a(what)} string is not UTF-8") from None
    if np.all(order[1:] > order[:-1]):
        return table
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    return table.take(rank)


def _check_distinct(blob: np.ndarray, lens: np.ndarray, what: str) -> None:
    """Raise unless the packed strings are distinct (CRFsuite's lookup would find one of two equal
    names, crfkit's another): equal hashes first, then the bytes of those few."""
    if len(lens) < 2:
        return
    h = hashlittle_many(blob, lens)
    o = np.argsort(h, kind="stable")
    hs = h[o]
    same = np.flatnonzero(hs[1:] == hs[:-1])
    if not len(same):
        return
    starts = np.cumsum(lens) - lens
    seen: dict[tuple, int] = {}
    for i in np.unique(np.concatenate([o[same], o[same + 1]])).tolist():
        key = (int(h[i]), blob[starts[i] : starts[i] + lens[i]].tobytes())
        if key in seen:
            raise _Bad(f"the {what} {key[1].decode('utf-8', 'replace')!r} occurs twice")
        seen[key] = i


def _read_refs(buf, off: int, n: int, n_slots_min: int, chunk: bytes, what: str):
    """(per list: count, the concatenated feature ids) of the first ``n`` lists of the reference
    chunk at ``off``."""
    size = len(buf)
    if off + CHUNK_SIZE > size or buf[off : off + 4].tobytes() != chunk:
        raise _Bad(f"no {what} reference chunk at offset {off}")
    csize, num = struct.unpack_from("<2I", buf, off + 4)
    if num < n_slots_min or off + CHUNK_SIZE + 4 * num > size or off + csize > size:
        raise _Bad(f"the {what} reference chunk ({num} lists, {csize} bytes) does not fit")
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    lo = np.frombuffer(buf, dtype="<u4", count=n, offset=off + CHUNK_SIZE).astype(np.int64)
    if lo.max() + 4 > size:
        raise _Bad(f"{_a(what)} reference list is outside the file")
    cnt = _u32_at(buf, lo)
    if np.any(lo + 4 + 4 * cnt > size):
        raise _Bad(f"{_a(what)} reference list runs past the end of the file")
    return lo, cnt


def _gather_lists(buf, lo, cnt, total_max: int, what: str) -> np.ndarray:
    total = int(cnt.sum())
    if total > total_max:
        raise _Bad(f"the {what} reference lists name {total} features, the table has {total_max}")
    base = np.repeat(lo + 4 - 4 * (np.cumsum(cnt) - cnt), cnt)
    return _u32_at(buf, base + 4 * np.arange(total, dtype=np.int64))


def read(path: str | os.PathLike, *, limits: Mapping | None = None) -> CRFModel:
    """The CRFsuite model file at ``path`` as a :class:`~crfkit.model.CRFModel` (labels and
    attributes in CRFsuite's id order; the state features of an attribute in label order).  Raises
    :class:`~crfkit.errors.ModelError` naming the file and the problem."""
    name = os.fspath(path)
    lim = {**DEFAULT_LIMITS, **(limits or {})}
    try:
        with open(name, "rb") as f:
            head = f.read(HEADER_SIZE)
            if not sniff(head[:12]) or len(head) < 4:
                raise ModelError(f"{name}: not a CRFsuite model file (bad magic bytes)")
            size = os.fstat(f.fileno()).st_size
            if size > lim["max_bytes"]:
                raise ModelError(
                    f"{name}: {size} bytes is over the CRFsuite reader's {lim['max_bytes']}-byte "
                    "limit (offsets are 32-bit)"
                )
            if len(head) < HEADER_SIZE:
                raise ModelError(f"{name}: CRFsuite model header is truncated")
            f.seek(0)
            data = f.read(size + 1)
    except OSError as e:
        raise ModelError(f"{name}: cannot read model file: {e.strerror or e}") from None
    except MemoryError:
        raise ModelError(f"{name}: not enough memory to load this model") from None
    try:
        return _parse(np.frombuffer(data, dtype=np.uint8), name, lim)
    except _Bad as e:
        raise ModelError(f"{name}: corrupted CRFsuite model: {e}") from None
    except MemoryError:
        raise ModelError(f"{name}: not enough memory to load this model") from None


def _parse(buf: np.ndarray, name: str, lim: dict) -> CRFModel:
    from ..features.space import FeatureSpace
    from ..model import CRFModel

    size = len(buf)
    (fsize,) = struct.unpack_from("<I", buf, 4)
    (version,) = struct.unpack_from("<I", buf, 12)
    _nf, L, A, off_f, off_l, off_a, off_lr, off_ar = struct.unpack_from("<8I", buf, 16)
    if fsize != size:
        raise _Bad(f"the header says {fsize} bytes, the file has {size} (truncated or extended)")
    if version != VERSION:
        raise _Bad(f"version {version} (this reader knows {VERSION})")
    if L == 0:
        raise _Bad("the model has no labels")
    if (
        L > lim["max_labels"]
        or 4 * L * L > lim["pair_table_bytes"] + lim["pair_table_factor"] * size
    ):
        raise _Bad(f"{L} labels is over the reader's ceiling for a {size}-byte file")
    # the feature table
    if off_f + CHUNK_SIZE > size or buf[off_f : off_f + 4].tobytes() != b"FEAT":
        raise _Bad(f"no feature table at offset {off_f}")
    _csize, K = struct.unpack_from("<2I", buf, off_f + 4)
    if K > (size - off_f - CHUNK_SIZE) // FEATURE_SIZE:
        raise _Bad(f"{K} features do not fit in the file after offset {off_f}")
    feats = np.frombuffer(buf, dtype=_FEATURE_DTYPE, count=K, offset=off_f + CHUNK_SIZE)
    ftype = feats["type"].astype(np.int64)
    fsrc = feats["src"].astype(np.int64)
    fdst = feats["dst"].astype(np.int64)
    fw = feats["weight"].astype(np.float64)
    labels = _read_cqdb(buf, off_l, L, "label")
    attributes = _read_cqdb(buf, off_a, A, "attribute")
    label_list = list(labels)
    # state features: per attribute, the features its list names
    lo, cnt = _read_refs(buf, off_ar, A, A, b"AFRF", "attribute")
    fids = _gather_lists(buf, lo, cnt, K, "attribute")
    if len(fids) and fids.max() >= K:
        raise _Bad(f"an attribute references feature {fids.max()} of {K}")
    aid = np.repeat(np.arange(A, dtype=np.int64), cnt)
    if len(fids) and (np.any(ftype[fids] != 0) or np.any(fsrc[fids] != aid)):
        k = int(np.flatnonzero((ftype[fids] != 0) | (fsrc[fids] != aid))[0])
        raise _Bad(f"attribute {aid[k]} references feature {fids[k]}, which is not its own")
    dst = fdst[fids]
    if len(dst) and dst.max() >= L:
        raise _Bad(f"a state feature's label {dst.max()} is not one of the {L} labels")
    order = np.lexsort((dst, aid))
    aid, dst, fids = aid[order], dst[order], fids[order]
    if len(aid) > 1 and np.any((aid[1:] == aid[:-1]) & (dst[1:] == dst[:-1])):
        raise _Bad("an attribute has two features for the same label")
    attr_ptr = np.zeros(A + 1, dtype=np.int64)
    np.cumsum(cnt, out=attr_ptr[1:])
    # transitions: per label, the features its list names (the last of equal pairs wins, as in
    # CRFsuite's tagger)
    llo, lcnt = _read_refs(buf, off_lr, L, L, b"LFRF", "label")
    tf = _gather_lists(buf, llo, lcnt, K, "label")
    if len(tf) and tf.max() >= K:
        raise _Bad(f"a label references feature {tf.max()} of {K}")
    src = np.repeat(np.arange(L, dtype=np.int64), lcnt)
    if len(tf) and (np.any(ftype[tf] != 1) or np.any(fsrc[tf] != src) or fdst[tf].max() >= L):
        raise _Bad("a label's transition list names a feature that is not its transition")
    trans_index = np.full((L, L), -1, dtype=np.int32)
    tw = np.zeros(L * L)
    pair = src * L + fdst[tf]
    tw[pair] = fw[tf]  # sequential assignment: the last of equal pairs wins
    used = np.zeros(L * L, dtype=bool)
    used[pair] = True
    up = np.flatnonzero(used)
    trans_index.ravel()[up] = np.arange(len(up), dtype=np.int32)
    space = FeatureSpace(
        labels=label_list,
        attributes=attributes,
        attr_ptr=attr_ptr,
        feat_label=dst.astype(np.int32),
        trans_index=trans_index,
    )
    weights = np.concatenate([fw[fids], tw[up]])
    meta = {
        "input_format": "crfsuite",
        "imported_from": "crfsuite",
        "imported_file": os.path.basename(name),
    }
    return CRFModel(space=space, weights=weights, meta=meta)


# --------------------------------------------------------------------------- writing
def _cqdb_bytes(blob: np.ndarray, lens: np.ndarray) -> bytes:
    """A CQDB of the strings packed in ``blob``/``lens`` (ids in order), as CRFsuite lays it out:
    header, table references, records, hash tables, the id -> record offset array."""
    n = len(lens)
    lens = np.asarray(lens, dtype=np.int64)
    ksize = lens + 1
    rec_size = 8 + ksize
    rec_off = CQDB_HEADER + np.cumsum(rec_size) - rec_size
    data_end = CQDB_HEADER + int(rec_size.sum())
    # records: id, key size, key, NUL
    recs = np.zeros(data_end - CQDB_HEADER, dtype=np.uint8)
    base = rec_off - CQDB_HEADER
    head = np.empty((n, 2), dtype="<u4")
    head[:, 0] = np.arange(n)
    head[:, 1] = ksize
    hb = head.view(np.uint8).reshape(n, 8)
    recs[(base[:, None] + np.arange(8)[None, :]).ravel()] = hb.ravel()
    recs[_mark(len(recs), base + 8, base + 8 + lens)] = blob
    # the hash of each key with its NUL
    hv = hashlittle_many(blob, lens, nuls=1).astype(np.int64)
    table = hv % CQDB_TABLES
    tnum = np.bincount(table, minlength=CQDB_TABLES).astype(np.int64)
    tsize = 2 * tnum
    tstart = np.cumsum(tsize) - tsize  # bucket index of each table's first bucket
    nb = int(tsize.sum())
    slot_hash = np.zeros(nb, dtype=np.int64)
    slot_off = np.zeros(nb, dtype=np.int64)
    taken = np.zeros(nb, dtype=bool)
    # linear probing, all keys at once: in each round every key not yet placed tries its next slot;
    # of keys that try the same free slot the first (in id order) gets it.  Every slot a key passes
    # is taken (before or in that round) and stays taken, so the reader's probe from the key's home
    # slot reaches it.
    pending = np.arange(n, dtype=np.int64)
    if n:
        probe = (hv >> 8) % tsize[table]
    while len(pending):
        t = table[pending]
        slot = tstart[t] + probe[pending]
        free = ~taken[slot]
        cand, cs = pending[free], slot[free]
        _, first = np.unique(cs, return_index=True)
        win, ws = cand[first], cs[first]
        taken[ws] = True
        slot_hash[ws] = hv[win]
        slot_off[ws] = rec_off[win]
        placed = np.zeros(n, dtype=bool)
        placed[win] = True
        pending = pending[~placed[pending]]
        t = table[pending]
        probe[pending] = (probe[pending] + 1) % tsize[t]
    buckets = np.empty((nb, 2), dtype="<u4")
    buckets[:, 0] = slot_hash
    buckets[:, 1] = slot_off
    table_off = np.where(tnum > 0, data_end + 8 * tstart, 0)
    bwd_off = data_end + 8 * nb
    csize = bwd_off + 4 * n
    refs = np.empty((CQDB_TABLES, 2), dtype="<u4")
    refs[:, 0] = table_off
    refs[:, 1] = tsize
    header = CQDB_MAGIC + struct.pack("<5I", csize, 0, CQDB_BYTEORDER, n, bwd_off if n else 0)
    return b"".join(
        [
            header,
            refs.tobytes(),
            recs.tobytes(),
            buckets.tobytes(),
            rec_off.astype("<u4").tobytes(),
        ]
    )


def _check_strings(strings, what: str) -> tuple[np.ndarray, np.ndarray]:
    from ..features.space import StringTable

    table = strings if isinstance(strings, StringTable) else StringTable.of(list(strings))
    if table is None:
        raise CrfkitError(f"{_a(what)} cannot be written as UTF-8 (it holds a lone surrogate)")
    blob, lens = table.packed()
    if len(blob) and not blob.all():
        k = int(np.searchsorted(np.cumsum(lens), int(np.flatnonzero(blob == 0)[0]), "right"))
        raise CrfkitError(
            f"{what} {strings[k]!r} holds a NUL character, which a CRFsuite model cannot hold"
        )
    return blob, np.asarray(lens, dtype=np.int64)


def _align4(parts: list, pos: int) -> int:
    pad = (-pos) % 4
    if pad:
        parts.append(b"\0" * pad)
    return pos + pad


def _refs_chunk(chunk: bytes, pos: int, n_slots: int, cnt: np.ndarray, ids: np.ndarray) -> bytes:
    """A reference chunk at file offset ``pos``: ``n_slots`` offsets (the first ``len(cnt)`` used),
    then per list its count and its feature ids."""
    n = len(cnt)
    lists_at = pos + CHUNK_SIZE + 4 * n_slots
    lsize = 4 + 4 * cnt
    loff = lists_at + np.cumsum(lsize) - lsize
    slots = np.zeros(n_slots, dtype="<u4")
    slots[:n] = loff
    body = np.empty(int(n + cnt.sum()), dtype="<u4")
    head_at = np.cumsum(lsize // 4) - lsize // 4  # word index of each list's count
    body[head_at] = cnt
    is_id = np.ones(len(body), dtype=bool)
    is_id[head_at] = False
    body[is_id] = ids
    size = CHUNK_SIZE + 4 * n_slots + 4 * len(body)
    return chunk + struct.pack("<2I", size, n_slots) + slots.tobytes() + body.tobytes()


def write(
    model: CRFModel, path: str | os.PathLike, *, drop_templates: bool = False, **options
) -> None:
    """Write ``model`` as a CRFsuite model file at ``path`` (atomically: a temporary file renamed),
    laid out as CRFsuite's ``crfsuite learn`` does (zero weights left out, as CRFsuite leaves them
    out).  A model CRFsuite cannot hold raises :class:`~crfkit.errors.CrfkitError` naming what:
    dense features, label-pair x observation features (position-dependent transitions), a label or
    attribute holding a NUL character, a file over 4 GiB.  A model trained from token columns
    through feature templates keeps its features (the attribute strings the templates made), but
    CRFsuite cannot store the templates: it is refused unless ``drop_templates`` (then the
    CRFsuite tagger needs those attribute strings as its input)."""
    from ..io.atomic import atomic_file

    if options:
        raise CrfkitError(
            f"the CRFsuite writer takes no option {', '.join(sorted(options))} "
            "(CRFsuite has one model format)"
        )
    space = model.space
    if space.n_dense:
        raise CrfkitError(
            f"the model has {space.n_dense} dense (real-valued vector) features, which a CRFsuite "
            "model cannot hold"
        )
    if space.n_bigram:
        raise CrfkitError(
            f"the model has {space.n_bigram} label-pair x observation features (position-dependent "
            "transitions), which a CRFsuite model cannot hold"
        )
    if model.meta.get("templates") and not drop_templates:
        raise CrfkitError(
            "the model tags token columns through feature templates, which a CRFsuite model cannot "
            "hold (its attribute strings can cross: export with --drop-templates, and give "
            "CRFsuite's tagger those attributes)"
        )
    w = model.weights
    space, w = space.prune(w)
    L, A = space.n_labels, space.n_attributes
    lblob, llens = _check_strings(space.labels, "label")
    ablob, alens = _check_strings(space.attributes, "attribute")
    ns = space.n_state
    # features: the state features in attribute order, then the transitions in pair order
    ti = space.trans_index
    pairs = np.flatnonzero(ti.ravel() >= 0)
    tsrc, tdst = pairs // L, pairs % L
    K = ns + len(pairs)
    feats = np.empty(K, dtype=_FEATURE_DTYPE)
    feats["type"][:ns] = 0
    feats["src"][:ns] = space.feature_attr()
    feats["dst"][:ns] = space.feat_label
    feats["weight"][:ns] = w[:ns]
    feats["type"][ns:] = 1
    feats["src"][ns:] = tsrc
    feats["dst"][ns:] = tdst
    feats["weight"][ns:] = w[ns + ti.ravel()[pairs]]
    parts: list[bytes] = [b"\0" * HEADER_SIZE]
    pos = HEADER_SIZE
    off_f = pos
    fchunk = b"FEAT" + struct.pack("<2I", CHUNK_SIZE + FEATURE_SIZE * K, K) + feats.tobytes()
    parts.append(fchunk)
    pos += len(fchunk)
    off_l = pos
    parts.append(_cqdb_bytes(lblob, llens))
    pos += len(parts[-1])
    off_a = pos
    parts.append(_cqdb_bytes(ablob, alens))
    pos += len(parts[-1])
    pos = _align4(parts, pos)
    off_lr = pos
    lcnt = np.bincount(tsrc, minlength=L).astype(np.int64)
    parts.append(_refs_chunk(b"LFRF", pos, L + 2, lcnt, ns + np.arange(len(pairs))))
    pos += len(parts[-1])
    pos = _align4(parts, pos)
    off_ar = pos
    parts.append(_refs_chunk(b"AFRF", pos, A, np.diff(space.attr_ptr), np.arange(ns)))
    pos += len(parts[-1])
    if pos > MAX_FILE_BYTES:
        raise CrfkitError(f"the model needs {pos} bytes, over a CRFsuite model's 4 GiB")
    parts[0] = (
        MAGIC
        + struct.pack("<I", pos)
        + MODEL_TYPE
        + struct.pack("<9I", VERSION, K, L, A, off_f, off_l, off_a, off_lr, off_ar)
    )
    with atomic_file(path, what="the CRFsuite model") as f:
        for p in parts:
            f.write(p)
