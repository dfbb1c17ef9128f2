"""Listing the entries of a buffer past a threshold, for numba kernels:
``list_above(buf, n, p, split, idx, sv)`` writes the positions ``j`` (into ``idx``) and values (into
``sv``) of the entries of ``buf[:n]`` with ``|p buf[j]| > split``, in order, and returns their
count.

What it is for: the buffer loops of erf and gd (:mod:`crfkit.kernels.vecmath`) evaluate the
small-argument polynomial on every entry and the full formula on the entries past the split point
only, which they list first. Listed one entry at a time (a branch-free compaction: every entry
written at the current count, the count advanced on the listed ones) the listing cost as much as the
polynomial itself: 0.35 ns an entry on ngd's buffers, a loop that cannot vectorise since each
store's address depends on the count before it.

With AVX-512 (``avx512f``) the entries go 8 at a time through AVX-512's compress (LLVM's
``llvm.x86.avx512.mask.compress``: one ``vcompresspd`` for the values and one ``vpcompressq`` for
the positions, into registers, each stored whole at the count, which advances by the popcount of the
comparison's mask), the last ``n mod 8`` one at a time as above.  Measured on 1.9M entries of ngd's
buffers (CoNLL-2000 after two epochs; this project's 2-core AMD EPYC, znver5, 2026-11-29, scratch
``/work/s41/tparts.py``, ``/work/s42/cmpt.py``), per 9.5M entries: 3.7 ms listed one at a time (with
a vectorised count first that skips buffers with nothing to list), 1.9 ms with the memory form of
the compress (``llvm.masked.compressstore``; reported to be microcoded on AMD's Zen 4, not measured
here), 1.2 ms with the register form and a whole-vector store (no count first: cheaper without).
The intrinsic exists only for AVX-512, so the one-at-a-time listing is used elsewhere; the choice
follows the features numba compiles for (``NUMBA_CPU_FEATURES``, empty under
``NUMBA_CPU_NAME=generic``, else the host's), which numba's cache keys its code on, so a cache built
on one machine is not loaded on another.

Both forms list the same entries, in the same order (``tests/test_compress.py``; NaN entries are not
listed).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils, config
from numba.extending import intrinsic

_KERNEL = dict(cache=True, nogil=True, error_model="numpy")


def _target_has_avx512f() -> bool:
    """Whether the code numba compiles has AVX-512F: the features numba's JIT gives LLVM, which are
    ``NUMBA_CPU_FEATURES`` when set (numba sets them empty for ``NUMBA_CPU_NAME=generic``), else the
    host's (without the AVX ones under ``NUMBA_ENABLE_AVX=0``)."""
    features = config.CPU_FEATURES
    if features is None:
        try:
            from numba.core.codegen import get_host_cpu_features

            features = get_host_cpu_features()
        except Exception:  # pragma: no cover - a platform where llvmlite cannot tell
            return False
    return "+avx512f" in str(features).split(",")


HAVE_COMPRESS = _target_has_avx512f()
LANES = 8


def _splat(builder, value, vty):
    undef = ir.Constant(vty, None)
    one = builder.insert_element(undef, value, ir.Constant(ir.IntType(32), 0))
    return builder.shuffle_vector(
        one, undef, ir.Constant(ir.VectorType(ir.IntType(32), vty.count), [0] * vty.count)
    )


@intrinsic
def compress8_above(typingctx, buf, j, p, split, idx, sv, cnt):
    """List the entries ``j .. j+7`` of ``buf`` with ``|p x| > split`` at
    ``sv[cnt:]`` / ``idx[cnt:]`` (values, positions) and return the new count.  Writes 8 entries of
    each from ``cnt`` (the listed ones first): with ``cnt <= j``, as when listing from the start,
    that stays below ``j + 8``.  AVX-512 only (an x86 intrinsic: compiled for another CPU it fails);
    no bounds check."""
    if not (
        isinstance(buf, types.Array)
        and buf.dtype == types.float64
        and buf.ndim == 1
        and isinstance(sv, types.Array)
        and sv.dtype == types.float64
        and sv.ndim == 1
        and isinstance(idx, types.Array)
        and idx.dtype == types.int64
        and idx.ndim == 1
        and isinstance(j, types.Integer)
        and isinstance(cnt, types.Integer)
        and isinstance(p, types.Float)
        and isinstance(split, types.Float)
    ):
        return None
    if buf.layout != "C" or sv.layout != "C" or idx.layout != "C":
        return None
    sig = types.int64(buf, j, p, split, idx, sv, cnt)

    def codegen(context, builder, signature, args):
        bty, jty, pty, sty, ity, vty, cty = signature.args
        f64 = ir.DoubleType()
        i64 = ir.IntType(64)
        v8d = ir.VectorType(f64, LANES)
        v8i = ir.VectorType(i64, LANES)
        v8b = ir.VectorType(ir.IntType(1), LANES)
        a_buf = context.make_array(bty)(context, builder, args[0])
        a_idx = context.make_array(ity)(context, builder, args[4])
        a_sv = context.make_array(vty)(context, builder, args[5])
        jv = context.cast(builder, args[1], jty, types.int64)
        cv = context.cast(builder, args[6], cty, types.int64)
        pv = context.cast(builder, args[2], pty, types.float64)
        sp = context.cast(builder, args[3], sty, types.float64)
        src = builder.bitcast(builder.gep(a_buf.data, [jv]), v8d.as_pointer())
        x = builder.load(src, align=8)
        fabs = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(v8d, [v8d]), "llvm.fabs.v8f64"
        )
        ax = builder.call(fabs, [builder.fmul(x, _splat(builder, pv, v8d))])
        mask = builder.fcmp_ordered(">", ax, _splat(builder, sp, v8d))
        # the compress into a register, then a whole-vector store at the count (faster here than the
        # memory form of vcompresspd, see the module docstring); lanes past the popcount are zero
        # and overwritten later
        cp_d = cgutils.get_or_insert_function(
            builder.module,
            ir.FunctionType(v8d, [v8d, v8d, v8b]),
            "llvm.x86.avx512.mask.compress.v8f64",
        )
        cp_i = cgutils.get_or_insert_function(
            builder.module,
            ir.FunctionType(v8i, [v8i, v8i, v8b]),
            "llvm.x86.avx512.mask.compress.v8i64",
        )
        vals = builder.call(cp_d, [x, ir.Constant(v8d, None), mask])
        builder.store(
            vals, builder.bitcast(builder.gep(a_sv.data, [cv]), v8d.as_pointer()), align=8
        )
        pos = builder.add(_splat(builder, jv, v8i), ir.Constant(v8i, list(range(LANES))))
        poss = builder.call(cp_i, [pos, ir.Constant(v8i, None), mask])
        builder.store(
            poss, builder.bitcast(builder.gep(a_idx.data, [cv]), v8i.as_pointer()), align=8
        )
        i8 = ir.IntType(8)
        ctpop = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(i8, [i8]), "llvm.ctpop.i8"
        )
        listed = builder.zext(builder.call(ctpop, [builder.bitcast(mask, i8)]), i64)
        return builder.add(cv, listed)

    return sig, codegen


@njit(inline="always", **_KERNEL)
def _list_tail(buf, lo, n, p, split, idx, sv, cnt):
    """The one-at-a-time listing of ``buf[lo:n]``, from the count ``cnt`` (branch-free: every entry
    is written at the current count, which advances on the listed ones)."""
    for j in range(lo, n):
        x = buf[j]
        idx[cnt] = j
        sv[cnt] = x
        cnt += 1 if abs(p * x) > split else 0
    return cnt


@njit(inline="always", **_KERNEL)
def list_above_serial(buf, n, p, split, idx, sv):
    """:func:`list_above` without AVX-512: a vectorised count first (a buffer with nothing to list,
    about half of ngd's factor buffers, skips the listing), then one entry at a time."""
    big = 0
    for j in range(n):
        big += 1 if abs(p * buf[j]) > split else 0
    if big == 0:
        return 0
    return _list_tail(buf, 0, n, p, split, idx, sv, 0)


@njit(inline="always", **_KERNEL)
def list_above_compress(buf, n, p, split, idx, sv):
    """:func:`list_above` with AVX-512: 8 entries at a time through :func:`compress8_above`, the
    rest one at a time."""
    cnt = 0
    n8 = n - n % LANES
    for j in range(0, n8, LANES):
        cnt = compress8_above(buf, j, p, split, idx, sv, cnt)
    return _list_tail(buf, n8, n, p, split, idx, sv, cnt)


#: The positions (``idx``, int64) and values (``sv``) of the entries of ``buf[:n]`` with
#: ``|p x| > split``, in order; ``list_above(buf, n, p, split, idx, sv)`` returns their count.
#: ``idx`` and ``sv`` hold at least ``n`` entries (beyond the count they may be overwritten).  The
#: compress form where numba compiles for AVX-512, the serial one elsewhere (chosen here, so that
#: the other is never compiled).
list_above = list_above_compress if HAVE_COMPRESS else list_above_serial


@njit(**_KERNEL)
def _as_arrays(listing, buf, p, split):
    """``listing`` (one of the two forms) over all of ``buf``, as ``(positions, values)``."""
    n = buf.shape[0]
    idx = np.empty(n, np.int64)
    sv = np.empty(n)
    cnt = listing(buf, n, p, split, idx, sv)
    return idx[:cnt].copy(), sv[:cnt].copy()


def list_above_array(buf, p, split, compress):
    """For tests: the listing of all of ``buf`` through the compress form (``compress``; AVX-512
    only) or the serial one; returns ``(positions, values)``."""
    if compress and not HAVE_COMPRESS:
        raise RuntimeError("the compress form needs AVX-512 in the code numba compiles")
    listing = list_above_compress if compress else list_above_serial
    return _as_arrays(listing, np.ascontiguousarray(buf, dtype=np.float64), float(p), float(split))
