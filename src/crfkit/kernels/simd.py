"""Explicit vector code for the label loops of the chain recursions.

LLVM vectorises a loop over the labels by 8 doubles and interleaves 4 such vectors, so a loop of
fewer than 32 iterations (22 chunking labels, 26 OCR letters) never enters its vector body and runs
as scalar code; and a matrix-vector step written as ``out[j] += x[i] * M[i, j]`` keeps its
accumulators in memory, one store-to-load wait per label.  These intrinsics build the loops in LLVM
IR on ``<8 x double>`` values instead:

* :func:`gemv` ``(out, x, M, n, lp)``: ``out[0:lp] = sum_{i<n} x[i] * M[i, 0:lp]``, the
  accumulators in registers (two sets, even and odd ``i``, to halve the chain of dependent
  multiply-adds), up to 4 vectors (32 labels) at a time;
* :func:`rank1` ``(A, x, y, n, lp)``: ``A[i, 0:lp] += x[i] * y[0:lp]`` for ``i < n``;
* :func:`vmul` ``(out, a, b, c, lp)``: ``out[0:lp] = a[0:lp] * b[0:lp] * c``;
* :func:`axpy` ``(y, a, x, lp)``: ``y[0:lp] += a * x[0:lp]`` (fused multiply-adds);
* :func:`vsum` ``(x, lp)``: ``sum(x[0:lp])``, the vectors added in order and then their lanes in a
  fixed tree.

``lp`` may be any length, and nothing past it is read or written: past the last multiple of 8, a
matrix's rows (read-only in the recursions) are loaded through a lane mask, and everything else goes
through scalar loads and stores (a masked load of memory just written cannot take the stored values
from the store buffer: a masked tail made a 22-label rank-1 update 145 ns against 41 ns for 24
labels); padding the label dimension to a multiple of 8 with zeros (:func:`padded`) saves the
tails.  1-D arguments are
C-contiguous vectors, 2-D ones matrices whose rows are C-contiguous (any row stride), of at least
``n`` rows and ``lp`` columns.  Loads and stores are unaligned, and every sum is formed in an order
fixed by ``n`` and ``lp`` alone: the same bits wherever the arrays lie
(``tests/kernels/test_kernel_addresses.py``).
"""

from __future__ import annotations

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

W = 8  # doubles per vector
GROUP = 4  # vectors per pass of gemv (32 labels)

_f64 = ir.DoubleType()
_i64 = ir.IntType(64)
_vec = ir.VectorType(_f64, W)


@njit(cache=True, nogil=True)
def padded(n_labels):
    """The padded label dimension: a multiple of 8, at least ``n_labels`` (and at least 8)."""
    return max(W, ((n_labels + W - 1) // W) * W)


def _arr(t, ndim=None):
    """A C-contiguous array type (of ``ndim`` dimensions): the intrinsics read its rows as
    contiguous doubles, so other layouts are refused at typing (no silent strided reads)."""
    return (
        isinstance(t, types.Array)
        and t.layout == "C"
        and t.dtype == types.float64
        and (ndim is None or t.ndim == ndim)
    )


def _ptr(context, builder, aty, val):
    a = context.make_array(aty)(context, builder, val)
    return a, builder.bitcast(a.data, _f64.as_pointer())


def _row_stride(builder, a):
    """Row stride of a 2-D array, in doubles."""
    s0 = cgutils.unpack_tuple(builder, a.strides, 2)[0]
    return builder.sdiv(s0, ir.Constant(_i64, 8))


def _load(builder, base, off, mask=None):
    """The 8 doubles at ``base + off`` (``mask``: only the lanes it sets, the others 0 and never
    read)."""
    p = builder.bitcast(builder.gep(base, [off]), _vec.as_pointer())
    if mask is None:
        return builder.load(p, align=8)
    fnty = ir.FunctionType(_vec, [p.type, ir.IntType(32), mask.type, _vec])
    fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.masked.load.v8f64.p0")
    return builder.call(fn, [p, ir.Constant(ir.IntType(32), 8), mask, ir.Constant(_vec, [0.0] * W)])


def _store(builder, v, base, off, mask=None):
    p = builder.bitcast(builder.gep(base, [off]), _vec.as_pointer())
    if mask is None:
        builder.store(v, p, align=8)
        return
    fnty = ir.FunctionType(ir.VoidType(), [_vec, p.type, ir.IntType(32), mask.type])
    fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.masked.store.v8f64.p0")
    builder.call(fn, [v, p, ir.Constant(ir.IntType(32), 8), mask])


def _tail_mask(builder, n):
    """The lanes ``q < n % 8`` of the last, partial vector of ``n`` doubles."""
    rem = builder.srem(n, ir.Constant(_i64, W))
    lanes = ir.Constant(ir.VectorType(_i64, W), list(range(W)))
    splat = builder.insert_element(
        ir.Constant(ir.VectorType(_i64, W), ir.Undefined), rem, ir.Constant(ir.IntType(32), 0)
    )
    splat = builder.shuffle_vector(
        splat,
        ir.Constant(ir.VectorType(_i64, W), ir.Undefined),
        ir.Constant(ir.VectorType(ir.IntType(32), W), [0] * W),
    )
    return builder.icmp_signed("<", lanes, splat)


def _fma1(builder, a, b, c):
    fnty = ir.FunctionType(_f64, [_f64, _f64, _f64])
    fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.fma.f64")
    return builder.call(fn, [a, b, c])


def _tail_vec(builder, base, full, n):
    """The doubles base[full .. n) (fewer than 8) as a vector, 0 in the other lanes, read by scalar
    loads: a masked load of memory just written by scalar stores cannot take the stored values
    from the store buffer and waits for them (about 100 ns a step in a recursion)."""
    slot = cgutils.alloca_once_value(builder, ir.Constant(_vec, [0.0] * W))
    with cgutils.for_range(builder, builder.sub(n, full)) as lq:
        x = builder.load(builder.gep(base, [builder.add(full, lq.index)]))
        builder.store(builder.insert_element(builder.load(slot), x, lq.index), slot)
    return builder.load(slot)


def _tail_store(builder, v, base, full, n):
    """base[full .. n) = the first lanes of ``v``, by scalar stores (see :func:`_tail_vec`)."""
    with cgutils.for_range(builder, builder.sub(n, full)) as lq:
        x = builder.extract_element(v, lq.index)
        builder.store(x, builder.gep(base, [builder.add(full, lq.index)]))


def _full(builder, n):
    """The offset of the last, partial vector of ``n`` doubles (n rounded down to a multiple of 8)."""
    return builder.mul(builder.sdiv(n, ir.Constant(_i64, W)), ir.Constant(_i64, W))


def _has_tail(builder, n):
    return builder.icmp_signed("!=", builder.srem(n, ir.Constant(_i64, W)), ir.Constant(_i64, 0))


def _splat(builder, x):
    v = builder.insert_element(ir.Constant(_vec, ir.Undefined), x, ir.Constant(ir.IntType(32), 0))
    return builder.shuffle_vector(
        v, ir.Constant(_vec, ir.Undefined), ir.Constant(ir.VectorType(ir.IntType(32), W), [0] * W)
    )


def _fma(builder, a, b, c):
    fnty = ir.FunctionType(_vec, [_vec, _vec, _vec])
    fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.fma.v8f64")
    return builder.call(fn, [a, b, c])


def _int(context, builder, val, ty):
    return context.cast(builder, val, ty, types.int64)


def _gemv_group(builder, k, out_p, x_p, m_p, rs, n, j0, mask=None, lp=None):
    """Accumulate vectors j0 .. j0 + k*8 of out over the rows 0..n-1 (k accumulators per parity;
    ``mask``: one partial vector, k = 1, ending at ``lp``: the matrix's lanes read through the mask,
    the result's written by scalar stores)."""
    zero = ir.Constant(_vec, [0.0] * W)
    one = ir.Constant(_i64, 1)
    two = ir.Constant(_i64, 2)
    pre = builder.block
    loop = builder.append_basic_block("gemv.loop")
    body_end = builder.append_basic_block("gemv.tail")
    done = builder.append_basic_block("gemv.done")
    n_even = builder.and_(n, ir.Constant(_i64, -2))
    builder.branch(loop)
    builder.position_at_end(loop)
    i = builder.phi(_i64)
    accs_e = [builder.phi(_vec) for _ in range(k)]
    accs_o = [builder.phi(_vec) for _ in range(k)]
    go = builder.icmp_signed("<", i, n_even)
    # the loop body is guarded: a block computes the next values, then jumps back
    body = builder.append_basic_block("gemv.body")
    exit_ = builder.append_basic_block("gemv.exit")
    builder.cbranch(go, body, exit_)
    builder.position_at_end(body)
    i1 = builder.add(i, one)
    xe = _splat(builder, builder.load(builder.gep(x_p, [i])))
    xo = _splat(builder, builder.load(builder.gep(x_p, [i1])))
    re_ = builder.mul(i, rs)
    ro = builder.mul(i1, rs)
    new_e, new_o = [], []
    for q in range(k):
        off = builder.add(j0, ir.Constant(_i64, q * W))
        new_e.append(_fma(builder, xe, _load(builder, m_p, builder.add(re_, off), mask), accs_e[q]))
        new_o.append(_fma(builder, xo, _load(builder, m_p, builder.add(ro, off), mask), accs_o[q]))
    inext = builder.add(i, two)
    body_last = builder.block
    builder.branch(loop)
    i.add_incoming(ir.Constant(_i64, 0), pre)
    i.add_incoming(inext, body_last)
    for q in range(k):
        accs_e[q].add_incoming(zero, pre)
        accs_e[q].add_incoming(new_e[q], body_last)
        accs_o[q].add_incoming(zero, pre)
        accs_o[q].add_incoming(new_o[q], body_last)
    # odd n: the last row into the even set
    builder.position_at_end(exit_)
    odd = builder.icmp_signed("<", n_even, n)
    builder.cbranch(odd, body_end, done)
    builder.position_at_end(body_end)
    xl = _splat(builder, builder.load(builder.gep(x_p, [n_even])))
    rl = builder.mul(n_even, rs)
    tail = []
    for q in range(k):
        off = builder.add(j0, ir.Constant(_i64, q * W))
        tail.append(_fma(builder, xl, _load(builder, m_p, builder.add(rl, off), mask), accs_e[q]))
    builder.branch(done)
    builder.position_at_end(done)
    ends = []
    for q in range(k):  # the phis first: LLVM wants them at the top of the block
        e = builder.phi(_vec)
        e.add_incoming(accs_e[q], exit_)
        e.add_incoming(tail[q], body_end)
        ends.append(e)
    for q in range(k):
        off = builder.add(j0, ir.Constant(_i64, q * W))
        if mask is None:
            _store(builder, builder.fadd(ends[q], accs_o[q]), out_p, off)
        else:
            _tail_store(builder, builder.fadd(ends[q], accs_o[q]), out_p, off, lp)


@intrinsic
def gemv(typingctx, out, x, M, n, lp):
    """``out[0:lp] = sum_{i<n} x[i] * M[i, 0:lp]`` (see the module docstring)."""
    if not (
        _arr(out)
        and _arr(x)
        and _arr(M, 2)
        and isinstance(n, types.Integer)
        and isinstance(lp, types.Integer)
    ):
        return None
    sig = types.void(out, x, M, n, lp)

    def codegen(context, builder, signature, args):
        t_out, t_x, t_m, t_n, t_lp = signature.args
        _, out_p = _ptr(context, builder, t_out, args[0])
        _, x_p = _ptr(context, builder, t_x, args[1])
        m, m_p = _ptr(context, builder, t_m, args[2])
        rs = _row_stride(builder, m)
        n_v = _int(context, builder, args[3], t_n)
        lp_v = _int(context, builder, args[4], t_lp)
        # passes of GROUP vectors while they fit, then one of 2 and one of 1 as needed
        j = cgutils.alloca_once_value(builder, ir.Constant(_i64, 0))
        step = ir.Constant(_i64, GROUP * W)
        with cgutils.for_range(builder, builder.sdiv(lp_v, step)) as loop:
            j0 = builder.mul(loop.index, step)
            _gemv_group(builder, GROUP, out_p, x_p, m_p, rs, n_v, j0)
            builder.store(builder.add(j0, step), j)
        full = _full(builder, lp_v)
        for k in (2, 1):
            j0 = builder.load(j)
            fits = builder.icmp_signed("<=", builder.add(j0, ir.Constant(_i64, k * W)), full)
            with builder.if_then(fits):
                _gemv_group(builder, k, out_p, x_p, m_p, rs, n_v, j0)
                builder.store(builder.add(j0, ir.Constant(_i64, k * W)), j)
        with builder.if_then(_has_tail(builder, lp_v)):
            mask = _tail_mask(builder, lp_v)
            _gemv_group(builder, 1, out_p, x_p, m_p, rs, n_v, full, mask, lp_v)
        return context.get_dummy_value()

    return sig, codegen


def _lanes_sum(builder, v):
    """The 8 lanes of ``v`` added in a fixed tree: (0+1)+(2+3) ... ."""
    i32 = ir.IntType(32)
    lanes = [builder.extract_element(v, ir.Constant(i32, q)) for q in range(W)]
    while len(lanes) > 1:
        lanes = [builder.fadd(lanes[q], lanes[q + 1]) for q in range(0, len(lanes), 2)]
    return lanes[0]


@intrinsic
def rank1(typingctx, A, x, y, n, lp):
    """``A[i, 0:lp] += x[i] * y[0:lp]`` for ``i < n``."""
    if not (
        _arr(A, 2)
        and _arr(x)
        and _arr(y)
        and isinstance(n, types.Integer)
        and isinstance(lp, types.Integer)
    ):
        return None
    sig = types.void(A, x, y, n, lp)

    def codegen(context, builder, signature, args):
        t_a, t_x, t_y, t_n, t_lp = signature.args
        a, a_p = _ptr(context, builder, t_a, args[0])
        _, x_p = _ptr(context, builder, t_x, args[1])
        _, y_p = _ptr(context, builder, t_y, args[2])
        rs = _row_stride(builder, a)
        n_v = _int(context, builder, args[3], t_n)
        lp_v = _int(context, builder, args[4], t_lp)
        nv = builder.sdiv(lp_v, ir.Constant(_i64, W))
        full = _full(builder, lp_v)
        tail = _has_tail(builder, lp_v)
        with cgutils.for_range(builder, n_v) as li:
            xi = _splat(builder, builder.load(builder.gep(x_p, [li.index])))
            r = builder.mul(li.index, rs)
            with cgutils.for_range(builder, nv) as lj:
                off = builder.mul(lj.index, ir.Constant(_i64, W))
                ao = builder.add(r, off)
                v = _fma(builder, xi, _load(builder, y_p, off), _load(builder, a_p, ao))
                _store(builder, v, a_p, ao)
            with builder.if_then(tail):
                # the last, partial vector as scalar multiply-adds (see _tail_vec)
                xs = builder.load(builder.gep(x_p, [li.index]))
                with cgutils.for_range(builder, builder.sub(lp_v, full)) as lq:
                    q = builder.add(full, lq.index)
                    ap = builder.gep(a_p, [builder.add(r, q)])
                    yq = builder.load(builder.gep(y_p, [q]))
                    builder.store(_fma1(builder, xs, yq, builder.load(ap)), ap)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def vmul(typingctx, out, a, b, c, lp):
    """``out[0:lp] = a[0:lp] * b[0:lp] * c`` (``c`` a scalar)."""
    if not (
        _arr(out)
        and _arr(a)
        and _arr(b)
        and isinstance(c, types.Float)
        and isinstance(lp, types.Integer)
    ):
        return None
    sig = types.void(out, a, b, c, lp)

    def codegen(context, builder, signature, args):
        t_o, t_a, t_b, t_c, t_lp = signature.args
        _, o_p = _ptr(context, builder, t_o, args[0])
        _, a_p = _ptr(context, builder, t_a, args[1])
        _, b_p = _ptr(context, builder, t_b, args[2])
        cv = _splat(builder, context.cast(builder, args[3], t_c, types.float64))
        lp_v = _int(context, builder, args[4], t_lp)

        with cgutils.for_range(builder, builder.sdiv(lp_v, ir.Constant(_i64, W))) as lj:
            off = builder.mul(lj.index, ir.Constant(_i64, W))
            ab = builder.fmul(_load(builder, a_p, off), _load(builder, b_p, off))
            _store(builder, builder.fmul(ab, cv), o_p, off)
        # the last, partial vector in scalars (see _tail_vec)
        cs = context.cast(builder, args[3], t_c, types.float64)
        full = _full(builder, lp_v)
        with cgutils.for_range(builder, builder.sub(lp_v, full)) as lq:
            q = builder.add(full, lq.index)
            ab = builder.fmul(
                builder.load(builder.gep(a_p, [q])), builder.load(builder.gep(b_p, [q]))
            )
            builder.store(builder.fmul(ab, cs), builder.gep(o_p, [q]))
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def axpy(typingctx, y, a, x, lp):
    """``y[0:lp] += a * x[0:lp]``, each element one fused multiply-add (``a = 1.0``: exactly the
    sum ``y + x``)."""
    if not (_arr(y) and isinstance(a, types.Float) and _arr(x) and isinstance(lp, types.Integer)):
        return None
    sig = types.void(y, a, x, lp)

    def codegen(context, builder, signature, args):
        t_y, t_a, t_x, t_lp = signature.args
        _, y_p = _ptr(context, builder, t_y, args[0])
        av = _splat(builder, context.cast(builder, args[1], t_a, types.float64))
        _, x_p = _ptr(context, builder, t_x, args[2])
        lp_v = _int(context, builder, args[3], t_lp)

        with cgutils.for_range(builder, builder.sdiv(lp_v, ir.Constant(_i64, W))) as lj:
            off = builder.mul(lj.index, ir.Constant(_i64, W))
            v = _fma(builder, av, _load(builder, x_p, off), _load(builder, y_p, off))
            _store(builder, v, y_p, off)
        # the last, partial vector in scalars (see _tail_vec)
        a_s = context.cast(builder, args[1], t_a, types.float64)
        full = _full(builder, lp_v)
        with cgutils.for_range(builder, builder.sub(lp_v, full)) as lq:
            q = builder.add(full, lq.index)
            yp = builder.gep(y_p, [q])
            v = _fma1(builder, a_s, builder.load(builder.gep(x_p, [q])), builder.load(yp))
            builder.store(v, yp)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def vsum(typingctx, x, lp):
    """``sum(x[0:lp])``: the vectors added in index order, then the 8 lanes in a fixed tree."""
    if not (_arr(x) and isinstance(lp, types.Integer)):
        return None
    sig = types.float64(x, lp)

    def codegen(context, builder, signature, args):
        t_x, t_lp = signature.args
        _, x_p = _ptr(context, builder, t_x, args[0])
        lp_v = _int(context, builder, args[1], t_lp)
        acc = cgutils.alloca_once_value(builder, ir.Constant(_vec, [0.0] * W))
        with cgutils.for_range(builder, builder.sdiv(lp_v, ir.Constant(_i64, W))) as lj:
            off = builder.mul(lj.index, ir.Constant(_i64, W))
            builder.store(builder.fadd(builder.load(acc), _load(builder, x_p, off)), acc)
        with builder.if_then(_has_tail(builder, lp_v)):
            xt = _tail_vec(builder, x_p, _full(builder, lp_v), lp_v)
            builder.store(builder.fadd(builder.load(acc), xt), acc)
        return _lanes_sum(builder, builder.load(acc))

    return sig, codegen
