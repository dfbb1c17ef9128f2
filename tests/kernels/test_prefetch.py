"""``kernels.prefetch.prefetch_range`` only hints: it compiles for every array type the kernels
pass, takes empty, unaligned and end-of-array ranges, and changes no value; the SDCA oracle that
prefetches the stored marginals (``kernels.sdca.chain_marginals_pf``) gives ``chain_marginals``'
values."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit

from crfkit.kernels import sdca as K
from crfkit.kernels.prefetch import prefetch_range


@njit(cache=False)
def _sum_with_prefetch(a, lo, hi):
    prefetch_range(a, lo, hi)
    s = 0.0
    for x in a.reshape(a.size):
        s += x
    return s


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int16, np.int32, np.int64, np.uint8])
@pytest.mark.parametrize("shape", [(0,), (1,), (37,), (5, 13), (3, 4, 5)])
def test_prefetch_changes_nothing(dtype, shape):
    a = np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)
    before = a.copy()
    n = a.size
    ref = float(before.astype(np.float64).sum())
    # empty, reversed, whole, unaligned and past-the-end ranges: hints only, never a fault
    for lo, hi in ((0, 0), (3, 1), (0, n), (1, n), (n // 2, n + 100), (n, n + 64)):
        assert _sum_with_prefetch(a, lo, hi) == ref
    assert np.array_equal(a, before)


def test_prefetch_rejects_non_arrays():
    @njit(cache=False)
    def bad(x):
        prefetch_range(x, 0, 1)

    with pytest.raises(Exception):
        bad(1.5)


@settings(max_examples=30, deadline=None)
@given(T=st.integers(1, 7), L=st.integers(2, 9), seed=st.integers(0, 10**6), f32=st.booleans())
def test_chain_marginals_pf_is_chain_marginals(T, L, seed, f32):
    rng = np.random.default_rng(seed)
    score = rng.normal(0, 3, (T, L))
    trans = rng.normal(0, 1, (L, L))
    dt = np.float32 if f32 else np.float64
    ns = rng.random((T + 3, L)).astype(dt)
    ps = rng.random((T + 2, L, L)).astype(dt)
    out = []
    for pf in (False, True):
        node, pair = np.zeros((T, L)), np.zeros((max(T - 1, 1), L, L))
        args = (
            score.copy(),
            T,
            trans,
            np.empty((T, L)),
            np.empty((T, L)),
            np.empty((T, L)),
            np.empty(T),
            node,
            pair,
        )
        if pf:
            lz = K.chain_marginals_pf(*args, ns.reshape(-1), 2 * L, ps.reshape(-1), 1 * L * L)
        else:
            lz = K.chain_marginals(*args)
        out.append((lz, node, pair))
    # the same computation, compiled with the prefetches in between: equal up to the rounding of a
    # reassociated sum
    assert out[1][0] == pytest.approx(out[0][0], rel=1e-14, abs=1e-14)
    np.testing.assert_allclose(out[1][1], out[0][1], rtol=1e-13, atol=1e-300)
    np.testing.assert_allclose(out[1][2], out[0][2], rtol=1e-13, atol=1e-300)
