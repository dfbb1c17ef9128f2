"""Position-dependent transitions (bigram-observation features): building the per-position
transition scores ``M[t]`` (``bigram_transitions``, ``compact_bigram``) and the scaled
forward-backward with them (``pd_scaled_forward``, ``pd_forward_backward``, ``pd_edge``,
``pd_node``, ``pd_log_partition``), the log-domain fallback being
:func:`crfkit.kernels.chain_log.pd_log`.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .chain_exp import (
    FAST,
    MAX_SCALED_TRANSITION_RANGE,
    back_step,
    exp_shift_into,
    propagate,
    row_exp,
    row_sum,
)
from .chain_log import pd_log

_NOPY = dict(cache=True, nogil=True, fastmath=FAST)


# ---------------------------------------------------------------------------
# Position-dependent transitions (bigram-observation features).
#
# A bigram-observation feature tests an attribute of token t and the label
# pair (y_{t-1}, y_t).  With such features the transition scores into token t
# are M[t] = trans + sum over the bigram attributes b of token t of
# value_b * W_b (W_b: L x L, zero where b has no feature), for 1 <= t < T
# (M[0] is never read: the first token has no incoming transition, so bigram
# attributes carried by it are ignored).  The recursions below are those
# above with M[t] in place of the one matrix; the scaled recursion shifts each
# M[t] by its own maximum tmx[t] and falls back to the log domain when one of
# them spans more than MAX_SCALED_TRANSITION_RANGE (the same rule as above,
# per position) or a scale under/overflows.


# Implicit label pairs.  An empty ``bfeat_pair`` beside bigram-observation features (what
# FeatureSpace.pairs_for_full_rows gives for FeatureSpace(bfeat_pair=ALL_PAIRS): every attribute has
# its L^2 features in pair order) means feature ``k0 + q`` of an attribute whose features start at
# ``k0`` is label pair ``q``: a candidate space of 123.6M label-pair features (NETtalk 5-grm) then
# needs no 247 MB array of pairs.  The kernels read a row's pairs from a slice: of ``bfeat_pair``,
# or of :func:`row_pairs`'s identity row (0 .. L^2 - 1), chosen once per row.  A test of the layout
# inside the loop over a row's weights kept LLVM from vectorising it (BCD sweeps 2-4x slower on
# NETtalk with a helper called per feature).


@njit(**_NOPY)
def row_pairs(bfeat_pair, LL):
    """The identity row ``0 .. LL - 1`` (``bfeat_pair``'s type) when ``bfeat_pair`` is empty
    (implicit pairs, see above), else an empty array: a row's pairs are then ``ident[:n]`` or
    ``bfeat_pair[k0:k0 + n]``."""
    n = LL if bfeat_pair.shape[0] == 0 else 0
    ident = np.empty(n, bfeat_pair.dtype)
    for q in range(n):
        ident[q] = q
    return ident


@njit(inline="always", **_NOPY)
def bigram_row(w, boff, battr_ptr, bfeat_pair, ident, b):
    """``(weights, pairs)`` of bigram attribute ``b``'s features, as slices: ``w[boff + k0:...]``
    and ``bfeat_pair[k0:...]`` or, with implicit pairs, ``ident[:n]`` (:func:`row_pairs`)."""
    k0 = battr_ptr[b]
    n = battr_ptr[b + 1] - k0
    return w[boff + k0 : boff + k0 + n], (ident[:n] if ident.shape[0] else bfeat_pair[k0 : k0 + n])


@njit(**_NOPY)
def bigram_transitions(
    btok_ptr, battr, bval, t0, T, battr_ptr, bfeat_pair, w, boff, trans, M, tmx, expM0, tmax0, expM
):
    """Fill M[t] (1 <= t < T) with the transition scores into token t0+t and tmx[t] with their
    maximum.

    ``w[boff + k]`` is the weight of bigram-observation feature ``k``, for the
    label pair ``bfeat_pair[k] = i*L + j``.  Returns the largest range
    (max - min) of the M[t] (0 when T < 2).

    When ``expM`` has rows, it also receives ``expM[t] = exp(M[t] - tmx[t])``.
    Where the token's features with a non-zero weight touch at most half of
    the label pairs, it is built from ``expM0 = exp(trans - tmax0)`` times one
    factor ``exp(tmax0 - tmx[t])``, with ``exp`` taken again only for the
    pairs those features touch (an L1-trained model has few); otherwise every
    entry is ``exp`` taken directly (fewer exponentials than one per touched
    pair and feature; vectorised, :func:`exp_shift_into`).  Both factors stay within
    exp(+-MAX_SCALED_TRANSITION_RANGE) whenever the scaled recursion is used
    (the caller checks the returned range).  Features with a zero weight are
    skipped (they add nothing); the matrices are read and written as flat
    rows of L*L entries (no division per entry).
    """
    L = trans.shape[0]
    LL = L * L
    want_exp = expM.shape[0] > 0
    ident = row_pairs(bfeat_pair, LL)  # (implicit pairs, see above)
    Mf = M.reshape((M.shape[0], LL))
    Ef = expM.reshape((expM.shape[0], LL))
    rng = 0.0
    for t in range(1, T):
        Mt = Mf[t]
        for i in range(L):
            for j in range(L):
                Mt[i * L + j] = trans[i, j]
        nnz = 0
        for e in range(btok_ptr[t0 + t], btok_ptr[t0 + t + 1]):
            v = bval[e]
            wb, pb = bigram_row(w, boff, battr_ptr, bfeat_pair, ident, battr[e])
            for q in range(wb.shape[0]):
                x = wb[q]
                if x != 0.0:
                    Mt[pb[q]] += x * v
                    nnz += 1
        mx = Mt[0]
        mn = mx
        for q in range(LL):
            x = Mt[q]
            mx = max(mx, x)
            mn = min(mn, x)
        tmx[t] = mx
        if mx - mn > rng:
            rng = mx - mn
        if not want_exp:
            continue
        Et = Ef[t]
        if 6 * nnz > LL or tmax0 - mx > MAX_SCALED_TRANSITION_RANGE:
            # many touched pairs (a vectorised exponential costs about a sixth of one through libm),
            # or the features lowered the base maximum far (exp(trans - tmax0) may have underflowed
            # where exp(M[t] - mx) does not): every exponential directly
            exp_shift_into(Mt, mx, Et)
        else:
            c = np.exp(tmax0 - mx)
            for i in range(L):
                for j in range(L):
                    Et[i * L + j] = expM0[i, j] * c
            for e in range(btok_ptr[t0 + t], btok_ptr[t0 + t + 1]):
                wb, pb = bigram_row(w, boff, battr_ptr, bfeat_pair, ident, battr[e])
                for q in range(wb.shape[0]):
                    if wb[q] != 0.0:
                        p = pb[q]
                        Et[p] = np.exp(Mt[p] - mx)
    return rng


# Base matrices.  After L1 a few bigram attributes (NETtalk: the letter itself, x[0]) keep hundreds
# of non-zero label pairs and occur at most tokens, so that most positions touched 300-1300 of the
# 2601 pairs at 3-grm and :func:`bigram_transitions` rebuilt, scanned and exponentiated every M[t]
# (60-70% of a gradient evaluation).  :func:`bigram_bases` builds, once per evaluation, the matrix
# ``trans + W_b``, its extremes and its shifted exponentials for each such heavy attribute ``b``;
# :func:`based_transitions` then starts position t from the base of its heaviest attribute and lists
# only the pairs its other attributes touch (a few), so that a position costs one scaled copy of the
# base's exponentials and a handful of exponentials, with no M[t] written.

# bases at most (the heaviest attributes first): 512 x 2 x L^2 doubles, 21 MB at L = 51
MAX_BASES = 512


@njit(**_NOPY)
def bigram_bases(w, boff, battr_ptr, bfeat_pair, trans):
    """The base matrices of :func:`based_transitions` for weights ``w`` (bigram rows as in
    :func:`bigram_transitions`, usually the compact ones): ``(hid, bM, bE, bmax, bmin)`` with
    ``bM[0] = trans`` and, for each heavy bigram attribute ``b`` (at least ``max(2, L^2 // 64)``
    non-zero weights; the :data:`MAX_BASES` - 1 heaviest, ties to the lower index), ``hid[b] = h > 0``
    and ``bM[h] = trans + W_b`` (flat, L^2), its maximum ``bmax[h]`` and minimum ``bmin[h]`` and
    ``bE[h] = exp(bM[h] - bmax[h])``; ``hid[b] = 0`` for the others."""
    L = trans.shape[0]
    LL = L * L
    nb = battr_ptr.shape[0] - 1
    ident = row_pairs(bfeat_pair, LL)
    heavy_min = max(2, LL // 64)
    nnz = np.zeros(nb, np.int64)
    cand = 0
    for b in range(nb):
        wb, _ = bigram_row(w, boff, battr_ptr, bfeat_pair, ident, b)
        n = 0
        for q in range(wb.shape[0]):
            if wb[q] != 0.0:
                n += 1
        nnz[b] = n
        if n >= heavy_min:
            cand += 1
    hid = np.zeros(nb, np.int64)
    if cand > MAX_BASES - 1:
        # the heaviest MAX_BASES - 1 (a stable sort: ties to the lower index)
        order = np.argsort(-nnz, kind="mergesort")
        for r in range(MAX_BASES - 1):
            hid[order[r]] = 1
    else:
        for b in range(nb):
            if nnz[b] >= heavy_min:
                hid[b] = 1
    nh = 1
    for b in range(nb):
        if hid[b] > 0:
            hid[b] = nh
            nh += 1
    bM = np.empty((nh, LL))
    bE = np.empty((nh, LL))
    bmax = np.empty(nh)
    bmin = np.empty(nh)
    for h in range(nh):
        for i in range(L):
            for j in range(L):
                bM[h, i * L + j] = trans[i, j]
    for b in range(nb):
        h = hid[b]
        if h > 0:
            wb, pb = bigram_row(w, boff, battr_ptr, bfeat_pair, ident, b)
            for q in range(wb.shape[0]):
                x = wb[q]
                if x != 0.0:
                    bM[h, pb[q]] += x
    for h in range(nh):
        mx = bM[h, 0]
        mn = mx
        for q in range(LL):
            x = bM[h, q]
            mx = max(mx, x)
            mn = min(mn, x)
        bmax[h] = mx
        bmin[h] = mn
        exp_shift_into(bM[h], mx, bE[h])
    return hid, bM, bE, bmax, bmin


@njit(**_NOPY)
def based_transitions(
    btok_ptr, battr, bval, t0, T, battr_ptr, bfeat_pair, w, boff, bases, expM, tmx, work
):
    """expM[t] = exp(M[t] - tmx[t]) (1 <= t < T) from the base matrices ``bases``
    (:func:`bigram_bases`), M[t] itself not written: position t starts from the base of its heaviest
    attribute with a base and value 1 (else ``bM[0] = trans``), its other attributes' non-zero
    weights listed per pair (``work = (slot, pairs, scores, exps)``: ``slot`` L^2 ints, all -1 on
    entry and on return; the others L^2 long).  ``tmx[t]`` is an upper bound of M[t]'s maximum (the
    base's and the listed scores'), at least the base's maximum, so ``expM[t] <= 1``.  Returns an
    upper bound of the largest range of the M[t] (the same extremes, so the scaled recursion is used
    only where it is safe: the caller checks it against MAX_SCALED_TRANSITION_RANGE), or ``inf``
    where a position's other attributes touch more than a sixth of the pairs (then the caller builds
    M with :func:`bigram_transitions`)."""
    hid, bM, bE, bmax, bmin = bases
    slot, touched, xb, eb = work
    LL = bM.shape[1]
    ident = row_pairs(bfeat_pair, LL)
    Ef = expM.reshape((expM.shape[0], LL))
    rng = 0.0
    for t in range(1, T):
        e0 = btok_ptr[t0 + t]
        e1 = btok_ptr[t0 + t + 1]
        h = 0
        eh = -1
        best = 0
        m = 0
        for e in range(e0, e1):
            b = battr[e]
            nbf = battr_ptr[b + 1] - battr_ptr[b]
            m += nbf
            if hid[b] > 0 and bval[e] == 1.0 and nbf > best:
                best = nbf
                h = hid[b]
                eh = e
        if 6 * (m - best) > LL:
            return np.inf
        n = 0
        for e in range(e0, e1):
            if e == eh:
                continue
            v = bval[e]
            wb, pb = bigram_row(w, boff, battr_ptr, bfeat_pair, ident, battr[e])
            for q in range(wb.shape[0]):
                x = wb[q]
                if x != 0.0:
                    p = np.int64(pb[q])
                    k = slot[p]
                    if k < 0:
                        slot[p] = n
                        touched[n] = p
                        xb[n] = bM[h, p] + x * v
                        n += 1
                    else:
                        xb[k] += x * v
        hi = bmax[h]
        lo = bmin[h]
        for k in range(n):
            slot[touched[k]] = -1
            x = xb[k]
            hi = max(hi, x)
            lo = min(lo, x)
        tmx[t] = hi
        d = hi - lo
        if not np.isfinite(d):
            return np.inf
        if d > rng:
            rng = d
        c = np.exp(bmax[h] - hi)
        Et = Ef[t]
        Bh = bE[h]
        for q in range(LL):
            Et[q] = Bh[q] * c
        exp_shift_into(xb[:n], hi, eb[:n])
        for k in range(n):
            Et[touched[k]] = eb[k]
    return rng


@njit(**_NOPY)
def based_work(L):
    """The scratch of :func:`based_transitions` for L labels."""
    LL = L * L
    return np.full(LL, -1, np.int64), np.empty(LL, np.int64), np.empty(LL), np.empty(LL)


@njit(**_NOPY)
def compact_bigram(w, boff, battr_ptr, bfeat_pair, max_share):
    """The bigram-observation features with a non-zero weight, when at most ``max_share`` of them
    are: ``(ptr, pair, wz)`` with ``wz = w[:boff]`` followed by those weights, attribute ``b``'s at
    ``wz[boff + ptr[b]:boff + ptr[b + 1]]`` (label pairs in ``pair``), so that
    ``(ptr, pair, wz, boff)`` stands for ``(battr_ptr, bfeat_pair, w, boff)`` wherever scores are
    built (a zero weight adds nothing) but the per-position work skips the zeros: an L1-trained
    candidate space is mostly zero. Otherwise the three arrays are empty (the caller keeps the full
    ones)."""
    nb = battr_ptr.shape[0] - 1
    nf = battr_ptr[nb]
    nnz = 0
    for k in range(nf):
        if w[boff + k] != 0.0:
            nnz += 1
    if nnz > max_share * nf:
        return np.empty(0, np.int64), np.empty(0, bfeat_pair.dtype), np.empty(0)
    ptr = np.empty(nb + 1, np.int64)
    pair = np.empty(nnz, bfeat_pair.dtype)
    wz = np.empty(boff + nnz)
    for k in range(boff):
        wz[k] = w[k]
    q = 0
    ptr[0] = 0
    ident = row_pairs(
        bfeat_pair, battr_ptr[1] - battr_ptr[0] if nb > 0 else 0
    )  # (every row: L^2 pairs)
    for b in range(nb):
        wb, pb = bigram_row(w, boff, battr_ptr, bfeat_pair, ident, b)
        for r in range(wb.shape[0]):
            x = wb[r]
            if x != 0.0:
                pair[q] = pb[r]
                wz[boff + q] = x
                q += 1
        ptr[b + 1] = q
    return ptr, pair, wz


@njit(**_NOPY)
def pd_exp(T, M, tmx, expM):
    """expM[t] = exp(M[t] - tmx[t]) for 1 <= t < T, directly (what bigram_transitions builds)."""
    L = M.shape[1]
    for t in range(1, T):
        for i in range(L):
            for j in range(L):
                expM[t, i, j] = np.exp(M[t, i, j] - tmx[t])


@njit(**_NOPY)
def pd_scaled_forward(score, T, M, tmx, expM, es, alpha, scale):
    """Scaled forward recursion with transition matrices M[t]; returns log Z or NaN (scale failure).

    Reads ``expM[t] = exp(M[t] - tmx[t])`` (t >= 1, see
    :func:`bigram_transitions`); fills ``es`` with exp(score - rowmax),
    ``alpha`` with the normalised messages and ``scale``.
    """
    L = score.shape[1]
    logz = 0.0
    for t in range(T):
        m = row_exp(score, t, es)
        s = 0.0
        if t == 0:
            for j in range(L):
                alpha[0, j] = es[0, j]
            s = row_sum(es, 0)
        else:
            propagate(alpha, t, expM[t], es, t)
            s = row_sum(alpha, t)
            logz += tmx[t]
        logz += m
        if not (s > 1e-300) or not np.isfinite(s):
            return np.nan
        scale[t] = s
        inv = 1.0 / s
        for j in range(L):
            alpha[t, j] *= inv
        logz += np.log(s)
    return logz


@njit(**_NOPY)
def pd_forward_backward(score, T, M, tmx, rng, expM, es, alpha, beta, scale):
    """Forward-backward with position-dependent transitions; returns log Z.

    ``rng``: the largest range of the M[t] and ``expM`` their shifted
    exponentials (both from :func:`bigram_transitions`).  On
    return, in the scaled domain (``scale[0] > 0``) ``alpha``/``beta`` are the
    scaled messages as in :func:`forward_backward`; in the log domain
    (``scale[0] < 0``) ``es`` holds log-alpha, ``beta`` log-beta and ``alpha``
    the node marginals.  Read the results with :func:`pd_edge` (edge
    marginals, first) and :func:`pd_node` (node marginals, into ``alpha``).
    """
    L = score.shape[1]
    if rng <= MAX_SCALED_TRANSITION_RANGE:
        logz = pd_scaled_forward(score, T, M, tmx, expM, es, alpha, scale)
        if np.isfinite(logz):
            for j in range(L):
                beta[T - 1, j] = 1.0
            tmp = np.empty(L)
            for t in range(T - 2, -1, -1):
                back_step(beta, t, expM[t + 1], es, t + 1, 1.0 / scale[t + 1], tmp)
            return logz
    logz = pd_log(score, T, M, es, beta)
    for t in range(T):
        for j in range(L):
            alpha[t, j] = np.exp(es[t, j] + beta[t, j] - logz)
        scale[t] = -1.0
    return logz


@njit(**_NOPY)
def pd_edge(t, score, M, expM, es, alpha, beta, scale, logz, xi):
    """xi[i, j] = p(y_{t-1} = i, y_t = j | x) after :func:`pd_forward_backward` (1 <= t < T)."""
    L = score.shape[1]
    if scale[0] < 0.0:
        for i in range(L):
            for j in range(L):
                xi[i, j] = np.exp(es[t - 1, i] + M[t, i, j] + score[t, j] + beta[t, j] - logz)
        return
    inv = 1.0 / scale[t]
    for i in range(L):
        a = alpha[t - 1, i] * inv
        for j in range(L):
            xi[i, j] = a * expM[t, i, j] * es[t, j] * beta[t, j]


@njit(**_NOPY)
def pd_node(T, alpha, beta, scale):
    """Turn ``alpha`` into the node marginals after :func:`pd_forward_backward` (call after
    pd_edge)."""
    if scale[0] < 0.0:
        return
    L = alpha.shape[1]
    for t in range(T):
        for l in range(L):
            alpha[t, l] *= beta[t, l]


@njit(**_NOPY)
def pd_log_partition(score, T, M, tmx, rng, expM, es, alpha, scale):
    """log Z alone (forward pass) with position-dependent transitions, same log-domain rules."""
    if rng <= MAX_SCALED_TRANSITION_RANGE:
        logz = pd_scaled_forward(score, T, M, tmx, expM, es, alpha, scale)
        if np.isfinite(logz):
            return logz
    return pd_log(score, T, M, es, np.empty_like(alpha))


@njit(**_NOPY)
def pd_gold_score(score, y, t0, T, M):
    """Score of the label path y[t0:t0+T] with position-dependent transitions."""
    s = 0.0
    for t in range(T):
        s += score[t, y[t0 + t]]
        if t > 0:
            s += M[t, y[t0 + t - 1], y[t0 + t]]
    return s
