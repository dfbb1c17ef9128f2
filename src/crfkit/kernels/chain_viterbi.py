"""Viterbi on one chain: the maxima-then-back form (``viterbi`` with one transition matrix,
``viterbi_m`` / ``pd_viterbi`` with position-dependent ones; the first maximum wins ties) and the
dictionary-coded tagging paths (``tag_codes``, ``tag_codes_seqs``) built on it.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .chain_exp import FAST

_NOPY = dict(cache=True, nogil=True, fastmath=FAST)


@njit(inline="always", **_NOPY)
def _viterbi_max(delta, raw, t, trans, score):
    """raw[t, j] = max_i (delta[t-1, i] + trans[i, j]) and delta[t, j] = raw[t, j] + score[t, j]:
    the maxima only, with i outside and j inside (one loop over a contiguous row of ``trans`` per i,
    which LLVM vectorises); the arg max is found afterwards for the path's labels alone
    (:func:`_viterbi_arg`).  Against a running arg max per (t, j) (a scalar loop), a whole decode of
    24 tokens took 2.89 against 5.07 us at L = 22 and 8.16 against 22.88 at L = 45, 0.40 against
    0.26 at L = 3 (``benchmarks/viterbi_step.py``, 2026-11-30)."""
    L = trans.shape[0]
    prev = delta[t - 1]
    cur = raw[t]
    for j in range(L):
        cur[j] = -np.inf
    for i in range(L):
        a = prev[i]
        tr = trans[i]
        for j in range(L):
            x = a + tr[j]
            cur[j] = x if x > cur[j] else cur[j]
    for j in range(L):
        delta[t, j] = cur[j] + score[t, j]


@njit(inline="always", **_NOPY)
def _viterbi_arg(delta, raw, t, trans, j):
    """The predecessor of label j at t on the best path: the first i whose
    ``delta[t-1, i] + trans[i, j]`` equals the maximum ``raw[t, j]`` (the same sum as
    :func:`_viterbi_max`'s, so the equality is exact), which is the i that a running arg max with
    ``>`` keeps; 0 when the maximum is -inf (no predecessor above -inf), as that running arg max
    leaves it."""
    target = raw[t, j]
    if target == -np.inf:
        return 0
    for i in range(trans.shape[0]):
        if delta[t - 1, i] + trans[i, j] == target:
            return i
    return 0


@njit(inline="always", **_NOPY)
def _viterbi_last(delta, T):
    """The best last label of the Viterbi table (the first maximum of its last row) and its
    score."""
    best = -np.inf
    arg = 0
    for j in range(delta.shape[1]):
        if delta[T - 1, j] > best:
            best = delta[T - 1, j]
            arg = j
    return best, arg


@njit(**_NOPY)
def viterbi(score, T, trans, out, o0):
    """Best label path of the first T rows of ``score``; written to out[o0:o0+T]. Returns its score.
    Ties go to the lowest label, at the end and for every predecessor."""
    L = trans.shape[0]
    delta = np.empty((T, L))
    raw = np.empty((T, L))
    for j in range(L):
        delta[0, j] = score[0, j]
    for t in range(1, T):
        _viterbi_max(delta, raw, t, trans, score)
    best, arg = _viterbi_last(delta, T)
    out[o0 + T - 1] = arg
    for t in range(T - 1, 0, -1):
        arg = _viterbi_arg(delta, raw, t, trans, arg)
        out[o0 + t - 1] = arg
    return best


@njit(**_NOPY)
def _code_emissions(codes, e, cnt, t0, T, val, attr_ptr, feat_label, w, score):
    """score[:T] = the emission scores of tokens t0..t0+T-1 given as attribute codes from
    ``codes[e]`` on, ``cnt[t]`` of them for token t (a code below 0: unknown to the model, skipped;
    ``val``: their values, or empty for all 1); returns the position after the last code read."""
    L = score.shape[1]
    ones = val.shape[0] == 0
    for t in range(T):
        for l in range(L):
            score[t, l] = 0.0
        for _ in range(cnt[t0 + t]):
            a = codes[e]
            if a >= 0:
                v = 1.0 if ones else val[e]
                for k in range(attr_ptr[a], attr_ptr[a + 1]):
                    score[t, feat_label[k]] += w[k] * v
            e += 1
    return e


@njit(**_NOPY)
def tag_codes(codes, cnt, val, attr_ptr, feat_label, w, trans, out):
    """Viterbi labels of one sequence given as attribute codes, ``cnt[t]`` of them for token t (a
    code below 0: an attribute the model does not know, skipped; ``val``: their values, or empty for
    all 1), written to ``out[:T]``; returns the best path's score.  Emissions and Viterbi in one
    call: the tagging path of one small sentence (:mod:`crfkit.features.dictenc`), where each kernel
    call's dispatch costs more than its work."""
    T = cnt.shape[0]
    L = trans.shape[0]
    if T == 0 or L == 0:
        return 0.0
    score = np.empty((T, L))
    _code_emissions(codes, 0, cnt, 0, T, val, attr_ptr, feat_label, w, score)
    return viterbi(score, T, trans, out, 0)


@njit(**_NOPY)
def tag_codes_seqs(
    codes, cnt, val, seq_ptr, ent_ptr, s0, s1, attr_ptr, feat_label, w, trans, out, path_score
):
    """:func:`tag_codes` for the sequences s0..s1-1 of a batch, in one call: sequence s has the
    tokens ``seq_ptr[s]:seq_ptr[s + 1]`` (``cnt`` per token, over the whole batch) and the codes
    (and values, when ``val`` is not empty) ``ent_ptr[s]:ent_ptr[s + 1]``.  Labels to ``out``
    (n_tokens), best path scores to ``path_score`` (n_seq; 0 for an empty sequence or no labels)."""
    L = trans.shape[0]
    maxT = 1
    for s in range(s0, s1):
        d = seq_ptr[s + 1] - seq_ptr[s]
        if d > maxT:
            maxT = d
    score = np.empty((maxT, L))
    for s in range(s0, s1):
        t0 = seq_ptr[s]
        T = seq_ptr[s + 1] - t0
        if T == 0 or L == 0:
            path_score[s] = 0.0
            continue
        _code_emissions(codes, ent_ptr[s], cnt, t0, T, val, attr_ptr, feat_label, w, score)
        path_score[s] = viterbi(score, T, trans, out, t0)


@njit(**_NOPY)
def viterbi_m(score, T, M, pd, out, o0):
    """:func:`viterbi` with the transitions into position t in ``M[t]`` (``pd``) or ``M[0]`` for
    every t (the same ties; -inf when no path is finite)."""
    L = score.shape[1]
    delta = np.empty((T, L))
    raw = np.empty((T, L))
    for j in range(L):
        delta[0, j] = score[0, j]
    for t in range(1, T):
        _viterbi_max(delta, raw, t, M[t] if pd else M[0], score)
    best, arg = _viterbi_last(delta, T)
    out[o0 + T - 1] = arg
    for t in range(T - 1, 0, -1):
        arg = _viterbi_arg(delta, raw, t, M[t] if pd else M[0], arg)
        out[o0 + t - 1] = arg
    return best


@njit(**_NOPY)
def pd_viterbi(score, T, M, out, o0):
    """Best label path with position-dependent transitions; written to out[o0:o0+T]. Returns its
    score."""
    return viterbi_m(score, T, M, True, out, o0)
