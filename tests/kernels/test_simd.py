"""The explicit vector intrinsics of crfkit.kernels.simd against numpy, on any label count, any
number of rows and any placement of the arrays: the right values, nothing written past ``lp`` or
``n``, and the same bits wherever the arrays lie."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit

from crfkit.kernels.chain import forward_backward_exp, forward_backward_vec
from crfkit.kernels.simd import axpy, gemv, padded, rank1, vmul, vsum


@njit(cache=False)
def _gemv(out, x, M, n, lp):
    gemv(out, x, M, n, lp)


@njit(cache=False)
def _rank1(A, x, y, n, lp):
    rank1(A, x, y, n, lp)


@njit(cache=False)
def _vmul(out, a, b, c, lp):
    vmul(out, a, b, c, lp)


@njit(cache=False)
def _axpy(y, a, x, lp):
    axpy(y, a, x, lp)


@njit(cache=False)
def _vsum(x, lp):
    return vsum(x, lp)


def _at(shape, offset, fill=np.nan):
    """A C-contiguous array of ``shape`` starting ``offset`` doubles past a 64-byte boundary."""
    n = int(np.prod(shape))
    buf = np.full(n + 16, fill)
    start = (-buf.ctypes.data % 64) // 8 + offset
    return buf[start : start + n].reshape(shape)


def test_padded_is_a_multiple_of_8_at_least_the_labels():
    assert [padded(n) for n in (1, 2, 8, 9, 22, 24, 26, 45, 64)] == [
        8,
        8,
        8,
        16,
        24,
        24,
        32,
        48,
        64,
    ]


@settings(max_examples=120, deadline=None)
@given(
    n=st.integers(0, 70),
    lp=st.integers(1, 72),
    extra=st.integers(0, 17),
    seed=st.integers(0, 10**6),
    offsets=st.tuples(*[st.integers(0, 7)] * 4),
)
def test_gemv_rank1_vmul_axpy_vsum_match_numpy_and_write_only_their_range(
    n, lp, extra, seed, offsets
):
    """Any length: whole vectors, then the masked partial one."""
    rng = np.random.default_rng(seed)
    width = lp + extra  # the matrices may be wider than lp: their other columns stay untouched
    M = _at((max(n, 1), width), offsets[0])
    M[:] = rng.normal(0, 1, M.shape)
    x = _at((max(n, 1),), offsets[1])
    x[:] = rng.normal(0, 1, x.shape)
    out = _at((width,), offsets[2], fill=-7.0)
    _gemv(out, x, M, n, lp)
    np.testing.assert_allclose(out[:lp], x[:n] @ M[:n, :lp], rtol=1e-12, atol=1e-12)
    assert np.all(out[lp:] == -7.0)

    A = _at((max(n, 1) + 1, width), offsets[3])
    A[:] = rng.normal(0, 1, A.shape)
    before = A.copy()
    y = rng.normal(0, 1, lp)
    _rank1(A, x, y, n, lp)
    np.testing.assert_allclose(
        A[:n, :lp], before[:n, :lp] + np.outer(x[:n], y), rtol=1e-12, atol=1e-14
    )
    assert np.array_equal(A[n:], before[n:]) and np.array_equal(A[:, lp:], before[:, lp:])

    a, b = rng.normal(0, 1, lp), rng.normal(0, 1, lp)
    o = _at((width,), offsets[0], fill=-7.0)
    _vmul(o, a, b, 0.75, lp)
    assert np.array_equal(o[:lp], a * b * 0.75) and np.all(o[lp:] == -7.0)
    yv = _at((width,), offsets[1], fill=-7.0)
    yv[:lp] = b
    _axpy(yv, 0.5, a, lp)
    np.testing.assert_allclose(yv[:lp], b + 0.5 * a, rtol=1e-13, atol=1e-15)
    assert np.all(yv[lp:] == -7.0)
    yv[:lp] = b
    _axpy(yv, 1.0, a, lp)  # a = 1: exactly the sums
    assert np.array_equal(yv[:lp], b + a)
    assert abs(_vsum(a, lp) - a.sum()) <= 1e-12 * (1 + np.abs(a).sum())


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 40), lp=st.integers(1, 50), seed=st.integers(0, 10**6))
def test_the_same_bits_wherever_the_arrays_lie(n, lp, seed):
    rng = np.random.default_rng(seed)
    Mv, xv = rng.normal(0, 1, (n, lp)), rng.normal(0, 1, n)
    got = set()
    for off in range(8):
        M, x, out = _at((n, lp), off), _at((n,), 7 - off), _at((lp,), off)
        M[:] = Mv
        x[:] = xv
        _gemv(out, x, M, n, lp)
        got.add((out.tobytes(), float(_vsum(out, lp))))
    assert len(got) == 1


@settings(max_examples=60, deadline=None)
@given(L=st.integers(1, 40), T=st.integers(1, 12), seed=st.integers(0, 10**6))
def test_vector_forward_backward_matches_the_scalar_one(L, T, seed):
    rng = np.random.default_rng(seed)
    trans = rng.normal(0, 1, (L, L))
    tmax = trans.max()
    M = np.exp(trans - tmax)
    score = rng.normal(0, 2, (T, L))
    es = np.exp(score - score.max(1, keepdims=True))
    alpha, beta, scale = np.empty((T, L)), np.empty((T, L)), np.empty(T)
    acc = np.zeros((L, L))
    z0 = forward_backward_exp(T, es, M, M.T.copy(), tmax, alpha, beta, scale, np.empty(L), acc)
    lp = padded(L)
    Mp = np.zeros((lp, lp))
    Mp[:L, :L] = M
    esp = np.zeros((T, lp))
    esp[:, :L] = es
    ap, bp, sp = np.full((T, lp), np.nan), np.full((T, lp), np.nan), np.empty(T)
    accp = np.zeros((lp, lp))
    z1 = forward_backward_vec(
        T,
        L,
        esp,
        Mp,
        Mp.T.copy(),
        tmax,
        ap,
        bp,
        sp,
        np.zeros(lp),
        accp,
        np.ones(lp),
        np.full((T, lp), np.nan),
        np.full(T, np.nan),
    )
    assert abs(z1 - z0) <= 1e-12 * max(1.0, abs(z0))
    np.testing.assert_allclose(ap[:, :L] * bp[:, :L], alpha * beta, rtol=1e-11, atol=1e-14)
    np.testing.assert_allclose(accp[:L, :L], acc, rtol=1e-11, atol=1e-14)
    # the pads stay zero: nothing leaks into the labels' sums
    assert np.all(ap[:, L:] == 0.0) and np.all(accp[L:] == 0.0) and np.all(accp[:, L:] == 0.0)
