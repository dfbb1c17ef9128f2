"""The scalar bit casts of ``crfkit.kernels.bitcast`` against numpy's views."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit

from crfkit.kernels.bitcast import bits_f64, f64_bits


@njit(cache=False)
def _to_bits(x, out):
    for i in range(x.shape[0]):
        out[i] = f64_bits(x[i])


@njit(cache=False)
def _from_bits(b, out):
    for i in range(b.shape[0]):
        out[i] = bits_f64(b[i])


@settings(deadline=None)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=0, max_size=40))
def test_bits_are_numpys_view_and_round_trip(xs):
    x = np.array(xs, dtype=np.float64)
    b = np.empty(len(x), dtype=np.int64)
    _to_bits(x, b)
    assert np.array_equal(b, x.view(np.int64))
    back = np.empty(len(x))
    _from_bits(b, back)
    assert np.array_equal(back.view(np.int64), x.view(np.int64))  # NaN payloads and -0.0 too


@given(st.integers(-(2**63), 2**63 - 1))
def test_any_int64_pattern_is_a_double(b):
    out = np.empty(1)
    _from_bits(np.array([b], dtype=np.int64), out)
    assert out.view(np.int64)[0] == b


def test_known_patterns():
    out = np.empty(3, dtype=np.int64)
    _to_bits(np.array([1.0, -0.0, 2.0**52]), out)
    assert out.tolist() == [0x3FF0000000000000, -(2**63), 0x4330000000000000]
    d = np.empty(1)
    _from_bits(np.array([0x4330000000000000 + 7], dtype=np.int64), d)
    assert d[0] == 2.0**52 + 7  # the exponent trick of the vectorised log


def test_wrong_types_do_not_compile():
    @njit(cache=False)
    def bad(x):
        return f64_bits(x)

    with pytest.raises(Exception, match="f64_bits"):
        bad(np.float32(1.0))
