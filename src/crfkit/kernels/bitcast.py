"""Scalar bit casts for numba kernels: ``f64_bits(x)`` is the IEEE-754 bit pattern of the float64
``x`` as an int64, ``bits_f64(b)`` the float64 whose bits are the int64 ``b`` (LLVM's ``bitcast``;
no instruction of its own once vectorised).

What they are for: the vectorisable log and exp of the kernels split a double into mantissa and
exponent, or build 2^k, through its bits.  Done with arrays (``a.view(np.int64)``) that took an
int64 scratch array, a second loop, and a view per call: 30-90 ns a call, which on an SDCA step's
short blocks (26 to 676 entries) cost more than the logs themselves (``kernels.sdca.log_fast_into``:
17.5 against 6.1 us for 5,070 logs in blocks of 26, 2.5 against 1.6 us in blocks of 676, the same
values to the bit; scratch measurement 2026-11-29).
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic


@intrinsic
def f64_bits(typingctx, x):
    """The bits of the float64 ``x`` as an int64."""
    if not isinstance(x, types.Float) or x.bitwidth != 64:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))

    return types.int64(x), codegen


@intrinsic
def bits_f64(typingctx, b):
    """The float64 whose bits are the int64 (or uint64) ``b``."""
    if not isinstance(b, types.Integer) or b.bitwidth != 64:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())

    return types.float64(b), codegen
