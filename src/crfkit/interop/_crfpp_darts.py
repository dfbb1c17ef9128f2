"""The double-array trie of CRF++ 0.59 model files (Darts 0.31's layout), built and read here.

A CRF++ binary model maps each feature string to its first weight through a double array: units of
two 32-bit fields, ``base`` (signed) and ``check`` (unsigned).  The root is unit 0.  From a node
whose unit has base ``b``, byte ``c`` of a key leads to unit ``p = b + c + 1``, which belongs to
that node when ``check[p] == b``; once the key is spent, unit ``b`` itself (code 0) ends it when
``check[b] == b`` and ``base[b] < 0``, and ``-base[b] - 1`` is the key's value.  Bases of nodes are
distinct, so ``check`` names the parent.  ``crf_test`` follows units without bounds checks, so an
array written here ends 257 units past its largest base.

:func:`build` places the sorted keys (an iterative depth-first pass, first-fit placement, compiled
with numba: :func:`crfkit.kernels.darts.darts_build`);
:func:`decode` recovers the keys and values of an untrusted array by inverting the
parent relation (numpy, every unit, offset and length bounded before use).
"""

from __future__ import annotations

import numpy as np

from ..kernels.darts import PAD as _PAD
from ..kernels.darts import darts_build as _build

__all__ = ["UNIT", "build", "decode", "lookup"]

UNIT = np.dtype([("base", "<i4"), ("check", "<u4")])


def build(keys: list[bytes], values: np.ndarray) -> np.ndarray:
    """The double array (``UNIT`` records) of ``keys`` (distinct byte strings without a NUL, sorted
    bytewise) and their ``values`` (non-negative, below 2**31)."""
    n = len(keys)
    if n == 0:
        out = np.zeros(_PAD + 2, UNIT)
        out["base"][0] = 1
        return out
    lens = np.fromiter(map(len, keys), dtype=np.int64, count=n)
    starts = np.zeros(n, np.int64)
    if n:
        np.cumsum(lens[:-1], out=starts[1:])
    blob = np.frombuffer(b"".join(keys) or b"\0", dtype=np.uint8)
    values = np.ascontiguousarray(values, dtype=np.int64)
    capacity = 2 * (n + int(lens.sum())) + 4 * _PAD + 1024
    while True:
        base, check, max_used, max_base = _build(blob, starts, lens, values, capacity)
        if max_used == -3:
            capacity *= 2
            continue
        if max_used < 0:
            raise ValueError("keys must be distinct and sorted bytewise")
        break
    size = max(max_used + 1, max_base + _PAD + 1)
    if size >= 2**31:
        raise ValueError("the double array would be over 2**31 units")
    out = np.zeros(size, UNIT)
    out["base"] = base[:size]
    out["check"] = check[:size]
    return out


def lookup(units: np.ndarray, key: bytes) -> int:
    """The value of ``key`` in the double array, or -1 (``crf_test``'s exact-match search, with
    bounds checks)."""
    base, check = units["base"], units["check"]
    n = len(units)
    b = int(base[0])
    for ch in key:
        p = b + ch + 1
        if p < 0 or p >= n or int(check[p]) != b:
            return -1
        b = int(base[p])
    if 0 <= b < n and int(check[b]) == b and int(base[b]) < 0:
        return -int(base[b]) - 1
    return -1


class DartsError(ValueError):
    """A double array that does not decode (the message says why)."""


def decode(
    units: np.ndarray, *, max_key_length: int, max_total_bytes: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(blob, lens, values)``: the keys of an untrusted double array as packed bytes (in no
    particular order), their byte lengths and values.

    Every used unit (``check != 0``) must be a child of the one node whose base is its check, at a
    code of 0..256; a code-0 unit ends a key (negative base), any other is an inner node (positive
    base).  Keys are rebuilt by walking from their end up to the root, at most ``max_key_length``
    steps (a cycle of units ends there), and at most ``max_total_bytes`` bytes in all.  Raises
    :class:`DartsError`."""
    n = len(units)
    if n == 0:
        raise DartsError("the double array is empty")
    base = units["base"].astype(np.int64)
    check = units["check"].astype(np.int64)
    if base[0] <= 0:
        raise DartsError("the root of the double array has no children")
    live = check != 0
    live[0] = False
    is_owner = base > 0
    is_owner[1:] &= live[1:]
    owners = np.flatnonzero(is_owner)
    ob = base[owners]
    if np.any(ob >= n):
        u = int(owners[np.flatnonzero(ob >= n)[0]])
        raise DartsError(f"unit {u} has base {int(base[u])}, beyond the {n} units of the array")
    owner_of = np.full(n, -1, np.int64)
    owner_of[ob] = owners
    if len(ob) and np.count_nonzero(owner_of >= 0) != len(ob):
        dup = np.flatnonzero(np.bincount(ob, minlength=n) > 1)[0]
        raise DartsError(f"two units share the base {int(dup)}")
    used = np.flatnonzero(live)
    c = check[used]
    if np.any(c >= n):
        u = int(used[np.flatnonzero(c >= n)[0]])
        raise DartsError(f"unit {u} names a parent base {int(check[u])} beyond the array")
    par = owner_of[c]
    if np.any(par < 0):
        u = int(used[np.flatnonzero(par < 0)[0]])
        raise DartsError(f"unit {u} names a parent base {int(check[u])} that no node has")
    parent = np.full(n, -1, np.int64)
    parent[used] = par
    code = np.full(n, -1, np.int64)
    cu = used - c
    code[used] = cu
    bad = (cu < 0) | (cu > 256)
    if bad.any():
        u = int(used[np.flatnonzero(bad)[0]])
        raise DartsError(f"unit {u} is {int(code[u])} units from its parent's base (0..256)")
    term = used[code[used] == 0]
    inner = used[code[used] > 0]
    if np.any(base[term] >= 0):
        u = int(term[np.flatnonzero(base[term] >= 0)[0]])
        raise DartsError(f"unit {u} ends a key but holds no value (base {int(base[u])})")
    if np.any(base[inner] <= 0):
        u = int(inner[np.flatnonzero(base[inner] <= 0)[0]])
        raise DartsError(f"unit {u} is an inner node without children (base {int(base[u])})")
    values = -base[term] - 1
    nt = len(term)
    # walk up: level k gives the k-th byte from the end of each key still below the root
    cur = parent[term]
    active = np.arange(nt, dtype=np.int64)
    levels_t, levels_c = [], []
    lens = np.zeros(nt, np.int64)
    total = 0
    for _ in range(max_key_length + 1):
        keep = cur != 0
        active, cur = active[keep], cur[keep]
        if len(active) == 0:
            break
        if np.any(code[cur] <= 0):
            raise DartsError("a key's path leaves the tree (a unit without a parent)")
        levels_t.append(active)
        levels_c.append((code[cur] - 1).astype(np.uint8))
        lens[active] += 1
        total += len(active)
        if total > max_total_bytes:
            raise DartsError(f"the keys hold over {max_total_bytes} bytes")
        cur = parent[cur]
    else:
        raise DartsError(f"a key is over {max_key_length} bytes long (or the units form a cycle)")
    ends = np.cumsum(lens)
    blob = np.zeros(int(total), np.uint8)
    for k, (t, ch) in enumerate(zip(levels_t, levels_c)):
        blob[ends[t] - 1 - k] = ch
    return blob, lens, values
