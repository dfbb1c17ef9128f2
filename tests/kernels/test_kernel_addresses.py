"""The chain kernels give the same bits wherever their work arrays lie in memory.

Fast-math re-association lets LLVM compile a reduction into code whose summation order can depend on
the arrays' addresses (their alignment): the same inputs then give results that differ in the last
bits from call to call, and with threads, from run to run (per-thread scratch arrays land at
addresses that vary with the timing).  That broke the bit-for-bit equality of the full-batch
gradient across threads (``tests/test_reduction.py``).  Here each recursion is called with each of
its work and output arrays placed at its own offset of 0-7 doubles from a 64-byte boundary (16 draws
per chain, 300 random small chains), and every output must be the same bits for every placement.
"""

from __future__ import annotations

import numpy as np
import pytest

from crfkit.kernels import batch, chain
from crfkit.kernels.simd import padded


def _placed(shape, where, fill):
    """A C-contiguous float64 array of ``shape`` starting 0-7 doubles (drawn from ``where``) into a
    fresh 64-byte-aligned buffer."""
    n = int(np.prod(shape))
    buf = np.full(n + 16, fill)
    start = (-buf.ctypes.data % 64) // 8 + int(where.integers(0, 8))
    return buf[start : start + n].reshape(shape)


def _chain(rng):
    L = int(rng.integers(2, 9))
    T = int(rng.integers(1, 9))
    score = rng.normal(0, 2, (T, L))
    trans = rng.normal(0, 1, (L, L))
    M = rng.normal(0, 1, (T, L, L))
    tmx = M.reshape(T, -1).max(1)
    return L, T, score, trans, M, tmx


def _standard(name):
    def call(rng, where, fill):
        L, T, score, trans, _, _ = _chain(rng)
        tmax = trans.max()
        expM = np.exp(trans - tmax)
        es, alpha, beta = (_placed((T, L), where, fill) for _ in range(3))
        scale = _placed((T,), where, fill)
        if name == "scaled_forward":
            out = chain.scaled_forward(score, T, expM, tmax, es, alpha, scale)
            return out, es, alpha, scale
        if name == "log_partition":
            return (
                chain.log_partition(score, T, trans, expM, tmax, es, alpha, scale),
                es,
                alpha,
                scale,
            )
        if (
            name == "exp_domain_forward_backward"
        ):  # batch._fb_exp: the emissions given as exp(score)
            es[:] = np.exp(score - score.max(1, keepdims=True))
            tmp = _placed((L,), where, fill)
            acc = _placed((L, L), where, 0.0)
            acc[:] = 0.0
            z = batch.forward_backward_exp(
                T, es, expM, expM.T.copy(), tmax, alpha, beta, scale, tmp, acc
            )
            return z, alpha, beta, scale, acc
        if name == "vec_forward_backward":  # batch's: rows padded to a multiple of 8 (kernels.simd)
            lp = padded(L)
            es_p = _placed((T, lp), where, fill)
            es_p[:] = 0.0
            es_p[:, :L] = np.exp(score - score.max(1, keepdims=True))
            m_p = _placed((lp, lp), where, fill)
            m_p[:] = 0.0
            m_p[:L, :L] = expM
            mt_p = _placed((lp, lp), where, fill)
            mt_p[:] = m_p.T
            a_p, b_p = _placed((T, lp), where, fill), _placed((T, lp), where, fill)
            tmp, ones = _placed((lp,), where, fill), _placed((lp,), where, 1.0)
            ones[:] = 1.0
            acc = _placed((lp, lp), where, 0.0)
            acc[:] = 0.0
            z = chain.forward_backward_vec(
                T,
                L,
                es_p,
                m_p,
                mt_p,
                tmax,
                a_p,
                b_p,
                scale,
                tmp,
                acc,
                ones,
                _placed((T, lp), where, fill),
                _placed((T,), where, fill),
            )
            return z, a_p, b_p, scale, acc
        if name == "forward_backward":
            return (
                chain.forward_backward(score, T, trans, expM, tmax, es, alpha, beta, scale),
                es,
                alpha,
                beta,
                scale,
            )
        edges = _placed((L, L), where, 0.0)
        edges[:] = 0.0
        return (
            chain.forward_backward_edges(
                score, T, trans, expM, tmax, es, alpha, beta, scale, edges
            ),
            es,
            alpha,
            beta,
            scale,
            edges,
        )

    return call


def _positional(name):
    def call(rng, where, fill):
        L, T, score, _, M, tmx = _chain(rng)
        expM = np.exp(M - tmx[:, None, None])
        es, alpha, beta = (_placed((T, L), where, fill) for _ in range(3))
        scale = _placed((T,), where, fill)
        rng_ = (
            float((M.reshape(T, -1).max(1) - M.reshape(T, -1).min(1))[1:].max()) if T > 1 else 0.0
        )
        if name == "pd_scaled_forward":
            return (
                chain.pd_scaled_forward(score, T, M, tmx, expM, es, alpha, scale),
                es,
                alpha,
                scale,
            )
        if name == "pd_log_partition":
            return (
                chain.pd_log_partition(score, T, M, tmx, rng_, expM, es, alpha, scale),
                es,
                alpha,
                scale,
            )
        z = chain.pd_forward_backward(score, T, M, tmx, rng_, expM, es, alpha, beta, scale)
        xi = _placed((L, L), where, fill)
        edges = [
            xi.copy()
            for t in range(1, T)
            if chain.pd_edge(t, score, M, expM, es, alpha, beta, scale, z, xi) is None
        ]
        chain.pd_node(T, alpha, beta, scale)
        return (z, es, alpha, beta, scale, *edges)

    return call


def _sparse(rng, where, fill):
    """The sparse forward-backward (crfkit.kernels.sparse_fb, Lavergne et al.'s listed pair scores):
    each position lists a random subset of the L x L pairs, some positions all of them or none."""
    from crfkit.kernels import sparse_fb

    L, T, score, _, _, _ = _chain(rng)
    lists = []
    for t in range(T):
        if t == 0:
            lists.append([])
            continue
        share = float(rng.choice([0.0, 0.3, 0.7, 1.0]))
        lists.append([(i, j) for i in range(L) for j in range(L) if rng.random() < share])
    pair_ptr = np.zeros(T + 1, np.int64)
    pair_ptr[1:] = np.cumsum([len(x) for x in lists])
    flat = [p for x in lists for p in x]
    n = max(len(flat), 1)
    pf = np.array([p[0] for p in flat] + [0] * (n - len(flat)), np.int32)
    pt = np.array([p[1] for p in flat] + [0] * (n - len(flat)), np.int32)
    ps = rng.normal(0, 1.5, n)
    node, alpha, beta, es, sc = (_placed((T, L), where, fill) for _ in range(5))
    sc[:] = score
    scale = _placed((2 * T,), where, fill)
    em1, enz = _placed((n,), where, fill), _placed((n,), where, fill)
    acc, mark = _placed((L,), where, fill), _placed((L,), where, fill)
    cnt = np.zeros(L, np.int64)
    z = sparse_fb.sparse_forward_backward(
        sc, T, pair_ptr, pf, pt, ps, node, enz, alpha, beta, es, scale, em1, acc, mark, cnt
    )
    return z, node[:T], enz[: len(flat)], alpha[:T], beta[:T], scale[:T]


KERNELS = {
    name: _standard(name)
    for name in (
        "scaled_forward",
        "log_partition",
        "forward_backward",
        "forward_backward_edges",
        "exp_domain_forward_backward",
        "vec_forward_backward",
    )
}
KERNELS.update(
    {
        name: _positional(name)
        for name in ("pd_scaled_forward", "pd_log_partition", "pd_forward_backward")
    }
)
KERNELS["sparse_forward_backward"] = _sparse


def _bits(out):
    return [np.asarray(o, dtype=np.float64).tobytes() for o in out]


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_outputs_do_not_depend_on_where_the_work_arrays_lie(name):
    call = KERNELS[name]
    differ = []
    for seed in range(300):
        ref = None
        where = np.random.default_rng(seed + 10**6)
        for k in range(16):
            for fill in (0.0, np.nan):
                got = _bits(call(np.random.default_rng(seed), where, fill))
                if ref is None:
                    ref = got
                elif got != ref:
                    differ.append((seed, k, fill))
    assert not differ, (
        f"{name}: {len(differ)} placements of 300 x 16 give other bits, e.g. {differ[:3]}"
    )
