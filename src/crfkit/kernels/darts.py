"""The double-array trie builder of CRF++ model files (:mod:`crfkit.interop._crfpp_darts` holds the
layout, the Python side and the reader of untrusted arrays): first-fit placement of sorted keys,
an iterative depth-first pass."""

import numpy as np
from numba import njit

__all__ = ["PAD", "darts_build"]

PAD = 257  # units past the largest base: every p = base + byte + 1 stays inside the array
_PAD = PAD


@njit(cache=True, nogil=True)
def darts_build(blob, starts, lens, values, capacity):  # pragma: no cover (compiled)
    n = len(starts)
    base = np.zeros(capacity, np.int64)
    check = np.zeros(capacity, np.int64)
    used = np.zeros(capacity, np.uint8)
    used_base = np.zeros(capacity, np.uint8)
    used[0] = 1
    # stack of (left, right, depth, unit)
    st_l = np.empty(n + 1 + int(lens.sum()), np.int64)
    st_r = np.empty_like(st_l)
    st_d = np.empty_like(st_l)
    st_u = np.empty_like(st_l)
    top = 0
    st_l[0], st_r[0], st_d[0], st_u[0] = 0, n, 0, 0
    top = 1
    codes = np.empty(257, np.int64)
    sl = np.empty(257, np.int64)
    sr = np.empty(257, np.int64)
    next_free = 1
    max_used = 0
    max_base = 0
    while top > 0:
        top -= 1
        left, right, depth, unit = st_l[top], st_r[top], st_d[top], st_u[top]
        ns = 0
        for i in range(left, right):
            c = 0 if lens[i] == depth else np.int64(blob[starts[i] + depth]) + 1
            if ns == 0 or codes[ns - 1] != c:
                if ns > 0 and codes[ns - 1] > c:
                    return base, check, -1, -1  # keys not sorted
                if ns > 0:
                    sr[ns - 1] = i
                codes[ns] = c
                sl[ns] = i
                ns += 1
        sr[ns - 1] = right
        if codes[0] == 0 and sr[0] - sl[0] != 1:
            return base, check, -2, -1  # a key twice
        while next_free < capacity and used[next_free]:
            next_free += 1
        pos = max(next_free, codes[0] + 1)
        start = pos
        filled = 0  # used units the search passed: a dense stretch moves next_free past it
        while True:
            b = pos - codes[0]
            if b + _PAD >= capacity:
                return base, check, -3, -1  # out of room: the caller grows the array
            ok = used_base[b] == 0
            if ok:
                for k in range(ns):
                    if used[b + codes[k]]:
                        ok = False
                        break
            if ok:
                break
            pos += 1
            while pos < capacity and used[pos]:
                pos += 1
                filled += 1
        if pos > start and filled >= 0.95 * (pos - start):
            next_free = pos
        used_base[b] = 1
        base[unit] = b
        if b > max_base:
            max_base = b
        for k in range(ns):
            p = b + codes[k]
            used[p] = 1
            check[p] = b
            if p > max_used:
                max_used = p
            if codes[k] == 0:
                base[p] = -np.int64(values[sl[k]]) - 1
            else:
                st_l[top], st_r[top], st_d[top], st_u[top] = sl[k], sr[k], depth + 1, p
                top += 1
    return base, check, max_used, max_base
