"""Numba kernels of the dual methods on clique marginals: Prox-SDCA (Le Priol, Touati & Lacoste-Julien)
and online exponentiated gradient (Collins, Globerson, Koo, Carreras & Bartlett 2008).

The dual variable of sequence i is the set of its clique marginals: node marginals ``node`` (T x L,
rows ``seq_ptr[i]:seq_ptr[i+1]`` of the node store) and pairwise marginals ``pair`` ((T-1) x L x L,
rows ``eptr[i]:eptr[i+1]`` of the pair store; ``pair[t][a, b] = p(y_t = a, y_{t+1} = b)``).  The
chain's cliques are its T-1 edges and its separators the T-2 interior nodes, so (paper, eq. 9, 10)

    H(mu)          = sum_t H(pair_t) - sum_{t=1}^{T-2} H(node_t)            (T = 1: H(node_0))
    KL(mu || mu')  = sum_t KL(pair_t || pair'_t) - sum_{t=1}^{T-2} KL(node_t || node'_t)

are the entropy and the divergence of the chain distributions with those marginals.

The weights are the conjugate ``w = w_hat(mu) = (1/(l2 n)) sum_i (F(x_i, y_i) - E_{mu_i} F(x_i, .))``;
a step on sequence i changes only the state features of its attributes and the transition features,
so it is applied sparsely and needs no scaling of ``w``.

SDCA's line search maximises ``f(g) = H(mu + g d) - (l2 n / 2) ||w + g v||^2`` on [0, 1] (d = mu' - mu,
mu' the marginals under w, v the primal direction).  Its derivative, written so that every term is a
well-conditioned ``log1p`` of a relative change,

    f'(g) = sum_cliques d . log(mu' / mu_g) - sum_separators (same) - g q,
    log(mu' / mu_g) = log1p((1 - g) d / mu_g),     q = ||E_d F||^2 / (l2 n)

(the ``w . v`` term is folded in through ``log mu' = w . F - log Z``), gives ``f'(0) = KL(mu||mu') +
KL(mu'||mu) > 0`` and ``f'(1) = -q = -l2 n ||v||^2 < 0``: the root is bracketed, and a safeguarded
Newton (``f''(g) = -sum_cliques d^2 / mu_g + sum_separators d^2 / mu_g - q``) with bisection finds it.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from .bitcast import bits_f64, f64_bits
from .chain import (EXACT, FAST, _log_backward, add_full_row, emissions_rows, exp_minus, forward_backward, max_min,
                    pd_edge, pd_exp, pd_forward_backward, pd_node)
from .occ import emissions as occ_emissions
from .prefetch import prefetch_range
from .sag import rng_below, rng_uniform, tree_sample, tree_set

# error_model="numpy": a float division is IEEE (no ZeroDivisionError branch), so that the loops over
# marginal entries vectorise (the branch kept LLVM from it; every division here is guarded anyway)
_NOPY = dict(cache=True, nogil=True, fastmath=FAST, error_model="numpy")
_PAR = dict(cache=True, nogil=True, fastmath=FAST, parallel=True, error_model="numpy")

# methods
SDCA, OEG = 0, 1
# sampling schemes
UNIFORM, GAP = 0, 1
# int scalars isc[...]
I_EVALS, I_STEPS, I_LS, I_REJECT, I_NF, I_NC = 0, 1, 2, 3, 4, 5
N_ISC = 6
# float scalars fsc[...]
F_GAMMA, F_GAPSUM = 0, 1
N_FSC = 2
# the score of an example not visited yet (gap sampling)
GAP_UNSEEN = 1e10
# logs of marginals are taken of max(mu, LOG_FLOOR)
LOG_FLOOR = 1e-300
# OEG: position-dependent potentials are raised to (their maximum - this) so that the scaled
# forward-backward applies (crfkit.kernels.chain.MAX_SCALED_TRANSITION_RANGE is 200)
OEG_RANGE = 190.0
# OEG step sizes (Collins et al. 2008, per-example rates): start, growth after an accepted step, cap
OEG_ETA0, OEG_GROW, OEG_ETA_MAX, OEG_MAX_HALVINGS = 0.5, 1.05, 1.0, 30
# ... and floor: a step refused at this eta ends the example's visit without a step (see oeg_step)
OEG_ETA_MIN = 1e-4
LS_MAXIT = 60


# ------------------------------------------------------------- a vectorisable log
# The line search and the individual gaps take a log per clique-marginal entry (thousands per step):
# libm's log one by one dominated an SDCA step (30 ns each).  log_fast_into is a log that LLVM vectorises:
# x = m 2^e with m in [sqrt(1/2), sqrt(2)) from the exponent bits, log m = 2 atanh(s), s = (m-1)/(m+1),
# |s| <= 0.172, by its series to s^9, e ln 2 added in two parts.  (A series to s^21, within a few ulp of
# libm, served the gap pass until 2026-11-29.)
_EXACT = dict(EXACT, error_model="numpy")   # no reassociation (chain.EXACT), numpy's division
_SQRT2 = 1.4142135623730951
_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_ATANH_C = tuple(1.0 / (2 * k + 1) for k in range(11))
_MANT = 0x000FFFFFFFFFFFFF
_ONE_BITS = 0x3FF0000000000000
_TWO52_BITS = 0x4330000000000000          # the bits of 2^52: (2^52 + k) for 0 <= k < 2^52 is exact
_TWO52_BIAS = 4503599627370496.0 + 1023.0


@njit(inline="always", **_EXACT)
def _atanh_argument(mi, eb):
    """For x = 2^e' m' (``mi`` = m' in [1, 2), ``eb`` = 2^52 + e'): x = 2^e m with m in [sqrt(2)/2,
    sqrt(2)], and ``(e, s, s^2)`` with s = (m - 1) / (m + 1), so that log x = e log 2 + 2 atanh(s)."""
    e = eb - _TWO52_BIAS
    big = mi > _SQRT2
    mi = mi * 0.5 if big else mi
    e = e + 1.0 if big else e
    s = (mi - 1.0) / (mi + 1.0)
    return e, s, s * s


@njit(**_EXACT)
def log_fast_into(x, out, n):
    """out[i] = log(x[i]) for i < n, x[i] a positive normal finite double (callers clamp), by the atanh
    series to s^9: relative error below 3e-9 (the omitted terms are at most s^10 / 11 of the result, |s|
    <= 0.172, and vanish as x nears a power of 2, so the log of a ratio near 1 keeps full precision);
    about a third less time than the series to s^21 (a few ulp).  Mantissa and exponent come from the bits
    (:mod:`crfkit.kernels.bitcast`), the exponent reaching double as the bits of ``2^52 + e``, not by an
    int-to-double conversion, which AVX2 cannot vectorise.  (Until 2026-11-29 the bits went through int64
    views of the arrays and an int64 scratch, in a loop of their own: the same values, but 30-90 ns a call
    more, which on the gap pass's blocks of L and L^2 entries cost more than the logs.)  The line search's f'
    takes it: f' is wanted to the tolerance of gamma (1e-3 by default), far above 3e-9 of its terms; so does
    the gap pass (:func:`load_gap`), whose gap only weighs the example's sampling and whose f'(0) only starts
    the line search (2-4% of an OCR step, 2026-11-29)."""
    c = _ATANH_C
    for i in range(n):
        b = f64_bits(x[i])
        e, s, z = _atanh_argument(bits_f64((b & _MANT) | _ONE_BITS), bits_f64(((b >> 52) & 0x7FF) | _TWO52_BITS))
        # Estrin's scheme (two independent halves): 17% less time than Horner's chain here
        z2 = z * z
        p = (1.0 + c[1] * z) + ((c[2] + c[3] * z) + c[4] * z2) * z2
        out[i] = e * _LN2_HI + (2.0 * s * p + e * _LN2_LO)


# ------------------------------------------------------------- marginals
@njit(**_NOPY)
def chain_marginals(score, T, trans, es, alpha, beta, scale, node, pair):
    """Forward-backward on a chain with emission scores ``score[:T]`` and shared transition scores
    ``trans``: node marginals into ``node[:T]``, pairwise marginals into ``pair[:T-1]``; returns log Z.
    (:func:`chain_marginals_pf` with nothing else to prefetch: its prefetches go to its own outputs.)"""
    return chain_marginals_pf(score, T, trans, es, alpha, beta, scale, node, pair, node.reshape(node.size), 0,
                              pair.reshape(pair.size), 0)


@njit(**_NOPY)
def chain_marginals_pf(score, T, trans, es, alpha, beta, scale, node, pair, nflat, n0, pflat, p0):
    """:func:`chain_marginals`, prefetching on the way the stored marginals the caller sweeps next (SDCA's gap
    pass): the T node rows ``nflat[n0:n0 + T L]`` and the T - 1 pairwise rows ``pflat[p0:p0 + (T - 1) L^2]``
    (flat views of the stores).  The pairwise loop asks for the stored edge's row it is at, a label row (L
    entries) at a time, so that the lines are requested spread over the loop (:mod:`crfkit.kernels.prefetch`)."""
    L = trans.shape[0]
    LL = L * L
    tmax = max_min(trans)[0]
    expM = exp_minus(trans, tmax)
    logz = forward_backward(score, T, trans, expM, tmax, es, alpha, beta, scale)
    if scale[0] < 0.0:
        # log domain: alpha holds the node marginals, es log-alpha
        lb = np.empty((T, L))
        _log_backward(score, T, trans, lb)
        for t in range(T - 1):
            for a in range(L):
                for b in range(L):
                    pair[t, a, b] = np.exp(es[t, a] + trans[a, b] + score[t + 1, b] + lb[t + 1, b] - logz)
        for t in range(T):
            for l in range(L):
                node[t, l] = alpha[t, l]
        return logz
    prefetch_range(nflat, n0, n0 + T * L)
    tmp = np.empty(L)
    for t in range(T - 1):
        inv = 1.0 / scale[t + 1]
        for b in range(L):
            tmp[b] = es[t + 1, b] * beta[t + 1, b] * inv
        for a in range(L):
            k = p0 + t * LL + a * L
            prefetch_range(pflat, k, k + L)
            x = alpha[t, a]
            pr = pair[t, a]
            er = expM[a]
            for b in range(L):
                pr[b] = x * er[b] * tmp[b]
    for t in range(T):
        for l in range(L):
            node[t, l] = alpha[t, l] * beta[t, l]
    return logz


@njit(**_NOPY)
def pd_chain_marginals(score, T, M, es, alpha, beta, scale, expM, node, pair):
    """Marginals of a chain with position-dependent transition scores ``M[t]`` (between t-1 and t,
    1 <= t < T): node marginals into ``node[:T]``, pairwise into ``pair[:T-1]``; returns log Z."""
    L = score.shape[1]
    tmx = np.zeros(T)
    rng = 0.0
    for t in range(1, T):
        hi, lo = max_min(M[t])
        tmx[t] = hi
        if hi - lo > rng:
            rng = hi - lo
    pd_exp(T, M, tmx, expM)
    logz = pd_forward_backward(score, T, M, tmx, rng, expM, es, alpha, beta, scale)
    for t in range(1, T):
        pd_edge(t, score, M, expM, es, alpha, beta, scale, logz, pair[t - 1])
    pd_node(T, alpha, beta, scale)
    for t in range(T):
        for l in range(L):
            node[t, l] = alpha[t, l]
    return logz


@njit(**_NOPY)
def gold_marginals(y, t0, T, L, value, node, pair):
    """The marginals of the chain whose gold node and gold transition scores are ``value``, all
    others 0 (the initialisation of Schmidt et al. 2015, used by Le Priol et al. section 3)."""
    score = np.zeros((T, L))
    M = np.zeros((max(T, 1), L, L))
    for t in range(T):
        score[t, y[t0 + t]] = value
        if t > 0:
            M[t, y[t0 + t - 1], y[t0 + t]] = value
    es = np.empty((T, L))
    alpha = np.empty((T, L))
    beta = np.empty((T, L))
    scale = np.empty(T)
    expM = np.empty((max(T, 1), L, L))
    return pd_chain_marginals(score, T, M, es, alpha, beta, scale, expM, node, pair)


@njit(**_NOPY)
def gold_marginals_closed(y, t0, T, L, value, node, pair):
    """:func:`gold_marginals` in closed form, written into ``node`` (T x L) and ``pair`` ((T-1) x L x L),
    which may be rows of a float32 store.  Every label but the gold one scores 0 at a position and on
    an edge, so the forward (backward) messages take two values per position, the gold label's and the
    others' (all equal), and an edge's pairwise marginals four: gold-gold, gold-other, other-gold,
    other-other.  The messages are normalised at every position and each edge's (node's) marginals by
    their own sum, so no exp but ``exp(value)`` and no overflow; O(T) arithmetic besides writing the
    T L + (T-1) L^2 entries (the forward-backward on a position-dependent chain took 176 us per CoNLL-2000
    sentence, most of an SDCA step)."""
    E = np.exp(value)
    o = L - 1.0
    ag = np.empty(T)
    ao = np.empty(T)
    bg = np.empty(T)
    bo = np.empty(T)
    g = E
    x = 1.0
    sm = g + o * x
    ag[0] = g / sm
    ao[0] = x / sm
    for t in range(1, T):
        # gold at t: from gold at t-1 with the transition's and the node's score, from any other with the
        # node's; others at t: from everything with score 0 (the previous messages sum to 1)
        g = E * (1.0 + ag[t - 1] * (E - 1.0))
        sm = g + o
        ag[t] = g / sm
        ao[t] = 1.0 / sm
    bg[T - 1] = 1.0
    bo[T - 1] = 1.0
    for t in range(T - 2, -1, -1):
        g = E * E * bg[t + 1] + o * bo[t + 1]
        x = E * bg[t + 1] + o * bo[t + 1]
        bg[t] = 1.0
        bo[t] = x / g
    for t in range(T):
        pg = ag[t] * bg[t]
        po = ao[t] * bo[t]
        z = pg + o * po
        po /= z
        for l in range(L):
            node[t, l] = po
        node[t, y[t0 + t]] = pg / z
    for t in range(T - 1):
        wgg = ag[t] * E * E * bg[t + 1]
        wgo = ag[t] * bo[t + 1]
        wog = ao[t] * E * bg[t + 1]
        woo = ao[t] * bo[t + 1]
        z = wgg + o * (wgo + wog) + o * o * woo
        a = y[t0 + t]
        b = y[t0 + t + 1]
        pt = pair[t]
        v = woo / z
        for i in range(L):
            for j in range(L):
                pt[i, j] = v
        v = wgo / z
        for j in range(L):
            pt[a, j] = v
        v = wog / z
        for i in range(L):
            pt[i, b] = v
        pt[a, b] = wgg / z


# |value| up to which the closed form's exp(value)^2 stays finite with room to spare
GOLD_CLOSED_MAX = 300.0


@njit(**_PAR)
def init_store(seq_ptr, eptr, y, L, value, node_store, pair_store):
    """Every sequence's marginals of :func:`gold_marginals` into the stores (one thread per sequence),
    from the closed form :func:`gold_marginals_closed`, written straight into the store rows; for
    ``|value| > GOLD_CLOSED_MAX`` (exp(value)^2 would overflow) from :func:`gold_marginals` itself."""
    n = seq_ptr.shape[0] - 1
    closed = abs(value) <= GOLD_CLOSED_MAX
    for i in prange(n):
        t0 = seq_ptr[i]
        T = seq_ptr[i + 1] - t0
        if T == 0:
            continue
        e0 = eptr[i]
        if closed:
            gold_marginals_closed(y, t0, T, L, value, node_store[t0:t0 + T], pair_store[e0:e0 + max(T - 1, 0)])
        else:
            node = np.empty((T, L))
            pair = np.empty((max(T - 1, 1), L, L))
            gold_marginals(y, t0, T, L, value, node, pair)
            _store_marginals(node, pair, T, t0, e0, node_store, pair_store)


@njit(**_NOPY)
def _store_marginals(node, pair, T, t0, e0, node_store, pair_store):
    """A sequence's node marginals (T x L) and pairwise marginals ((T-1) x L x L) into the ragged
    stores, at token offset ``t0`` and edge offset ``e0`` (rounded to the stores' precision)."""
    L = node.shape[1]
    for t in range(T):
        for l in range(L):
            node_store[t0 + t, l] = node[t, l]
    for t in range(T - 1):
        for a in range(L):
            for b in range(L):
                pair_store[e0 + t, a, b] = pair[t, a, b]


@njit(**_NOPY)
def _trans_into(w, n_state, trans_index, out):
    L = trans_index.shape[0]
    for a in range(L):
        for b in range(L):
            k = trans_index[a, b]
            out[a, b] = w[n_state + k] if k >= 0 else 0.0


@njit(**_PAR)
def warm_store(seq_ptr, eptr, tok_ptr, attr, val, attr_ptr, feat_label, full, trans_index, n_state, w,
               node_store, pair_store):
    """Every sequence's marginals under the weights ``w`` into the stores (a warm start)."""
    n = seq_ptr.shape[0] - 1
    L = trans_index.shape[0]
    trans = np.empty((L, L))
    _trans_into(w, n_state, trans_index, trans)
    for i in prange(n):
        t0 = seq_ptr[i]
        T = seq_ptr[i + 1] - t0
        if T == 0:
            continue
        score = np.empty((T, L))
        emissions_rows(tok_ptr, attr, val, t0, t0 + T, attr_ptr, feat_label, full, w, 1.0, score)
        node = np.empty((T, L))
        pair = np.empty((max(T - 1, 1), L, L))
        chain_marginals(score, T, trans, np.empty((T, L)), np.empty((T, L)), np.empty((T, L)), np.empty(T),
                        node, pair)
        _store_marginals(node, pair, T, t0, eptr[i], node_store, pair_store)


@njit(**_NOPY)
def w_hat(seq_ptr, eptr, tok_ptr, attr, val, y, attr_ptr, feat_label, trans_index, n_state, coef,
          node_store, pair_store, w):
    """w = coef * sum_i (F(x_i, y_i) - E_{mu_i} F(x_i, .)) with mu the stored marginals
    (coef = 1 / (l2 n): the conjugate weights w_hat(mu))."""
    L = trans_index.shape[0]
    for k in range(w.shape[0]):
        w[k] = 0.0
    n = seq_ptr.shape[0] - 1
    d = np.empty(L)
    tacc = np.zeros((L, L))
    for i in range(n):
        t0 = seq_ptr[i]
        T = seq_ptr[i + 1] - t0
        for t in range(T):
            for l in range(L):
                d[l] = -node_store[t0 + t, l]
            d[y[t0 + t]] += 1.0
            for e in range(tok_ptr[t0 + t], tok_ptr[t0 + t + 1]):
                a = attr[e]
                x = val[e]
                for k in range(attr_ptr[a], attr_ptr[a + 1]):
                    w[k] += x * d[feat_label[k]]
        e0 = eptr[i]
        for t in range(T - 1):
            tacc[y[t0 + t], y[t0 + t + 1]] += 1.0
            for a in range(L):
                for b in range(L):
                    tacc[a, b] -= pair_store[e0 + t, a, b]
    for a in range(L):
        for b in range(L):
            k = trans_index[a, b]
            if k >= 0:
                w[n_state + k] += tacc[a, b]
    for k in range(w.shape[0]):
        w[k] *= coef


@njit(**_NOPY)
def project_dual(seq_ptr, eptr, tok_ptr, attr, val, y, attr_ptr, feat_label, full, trans_index, n_state, coef,
                 node_store, pair_store, w, H, entropy):
    """The weights and (``entropy`` True) the entropies of the chain distributions the store holds.

    Rounded (float32) marginals are not exactly consistent: the pairwise marginals of neighbouring
    edges disagree on their shared node in the last bits, so no distribution has them as marginals and
    eq. (9) is not exactly an entropy.  The distribution used here is the Markov chain they define:
    ``p(y_0, y_1) = pair_0 / sum(pair_0)`` and ``p(y_{t+1} | y_t) = pair_t[y_t, .] / sum_b
    pair_t[y_t, b]`` (T = 1: the normalised node marginals); its exact marginals are propagated
    forward in float64, ``w = coef * sum_i (F(x_i, y_i) - E F)`` is taken from them and ``H[i]`` is
    its entropy (chain rule).  For a float64 store this is the store itself up to rounding; for
    float32 it moves each marginal by about its rounding.  Then ``P(w) - D`` is the duality gap of
    a genuine dual point, >= 0 up to float64 rounding."""
    L = trans_index.shape[0]
    for k in range(w.shape[0]):
        w[k] = 0.0
    n = seq_ptr.shape[0] - 1
    maxT = 1
    for i in range(n):
        maxT = max(maxT, seq_ptr[i + 1] - seq_ptr[i])
    node = np.zeros((maxT, L))
    d = np.empty(L)
    tacc = np.zeros((L, L))
    for i in range(n):
        t0 = seq_ptr[i]
        T = seq_ptr[i + 1] - t0
        h = 0.0
        if T == 0:
            H[i] = 0.0
            continue
        e0 = eptr[i]
        if T == 1:
            s = 0.0
            for l in range(L):
                s += np.float64(node_store[t0, l])
            for l in range(L):
                node[0, l] = np.float64(node_store[t0, l]) / s
                if entropy:
                    h -= _xlogx(node[0, l])
        else:
            s = 0.0
            for a in range(L):
                r = 0.0
                for b in range(L):
                    r += np.float64(pair_store[e0, a, b])
                node[0, a] = r
                s += r
            for a in range(L):
                node[0, a] /= s
                if entropy:
                    h -= _xlogx(node[0, a])
            for t in range(T - 1):
                nx = node[t + 1]
                for b in range(L):
                    nx[b] = 0.0
                pt = pair_store[e0 + t]
                for a in range(L):
                    pa = node[t, a]
                    r = 0.0
                    for b in range(L):
                        r += np.float64(pt[a, b])
                    if r > 0.0:
                        inv = 1.0 / r
                        if entropy and pa > 0.0:
                            # pa * H(c) with c = p / r:  -pa * (sum p log p / r - log r)
                            sl = 0.0
                            for b in range(L):
                                sl += _xlogx(np.float64(pt[a, b]))
                            h -= pa * (sl * inv - np.log(r))
                        for b in range(L):
                            pj = pa * np.float64(pt[a, b]) * inv
                            nx[b] += pj
                            tacc[a, b] -= pj
                    else:
                        if entropy and pa > 0.0:
                            h += pa * np.log(L)
                        for b in range(L):
                            pj = pa / L
                            nx[b] += pj
                            tacc[a, b] -= pj
                tacc[y[t0 + t], y[t0 + t + 1]] += 1.0
        H[i] = h
        for t in range(T):
            for l in range(L):
                d[l] = -node[t, l]
            d[y[t0 + t]] += 1.0
            # the attributes whose features are all the labels in order (``full``) as vector rows; the
            # same products added in the same order as the generic loop
            for e in range(tok_ptr[t0 + t], tok_ptr[t0 + t + 1]):
                a = attr[e]
                x = val[e]
                k0 = attr_ptr[a]
                if full[a]:
                    add_full_row(w[k0:k0 + L], d, 0, x)
                else:
                    for k in range(k0, attr_ptr[a + 1]):
                        w[k] += x * d[feat_label[k]]
    for a in range(L):
        for b in range(L):
            k = trans_index[a, b]
            if k >= 0:
                w[n_state + k] += tacc[a, b]
    for k in range(w.shape[0]):
        w[k] *= coef


# ------------------------------------------------------------- entropy and divergence (eq. 9, 10)
@njit(inline="always", **_NOPY)
def _xlogx(x):
    return x * np.log(x) if x > 0.0 else 0.0


@njit(**_NOPY)
def chain_entropy(node, pair, T):
    """H(mu) of eq. (9) from the node (>= T x L) and pairwise (>= (T-1) x L x L) marginals."""
    L = node.shape[1]
    if T <= 0:
        return 0.0
    h = 0.0
    if T == 1:
        for l in range(L):
            h -= _xlogx(np.float64(node[0, l]))
        return h
    for t in range(T - 1):
        pr = pair[t].ravel()
        for k in range(pr.shape[0]):
            h -= _xlogx(np.float64(pr[k]))
    for t in range(1, T - 1):
        for l in range(L):
            h += _xlogx(np.float64(node[t, l]))
    return h


@njit(inline="always", **_NOPY)
def _kl_term(p, q):
    if p <= 0.0:
        return 0.0
    return p * (np.log(p) - np.log(max(q, LOG_FLOOR)))


@njit(**_NOPY)
def chain_kl(node_a, pair_a, node_b, pair_b, T):
    """KL(mu_a || mu_b) of eq. (10) from the marginals of two chains."""
    L = node_a.shape[1]
    if T <= 0:
        return 0.0
    s = 0.0
    if T == 1:
        for l in range(L):
            s += _kl_term(np.float64(node_a[0, l]), np.float64(node_b[0, l]))
        return s
    for t in range(T - 1):
        pa = pair_a[t].ravel()
        pb = pair_b[t].ravel()
        for k in range(pa.shape[0]):
            s += _kl_term(np.float64(pa[k]), np.float64(pb[k]))
    for t in range(1, T - 1):
        for l in range(L):
            s -= _kl_term(np.float64(node_a[t, l]), np.float64(node_b[t, l]))
    return s


@njit(**_PAR)
def store_entropies(seq_ptr, eptr, node_store, pair_store, out):
    """out[i] = H(mu_i) of every sequence's stored marginals."""
    n = seq_ptr.shape[0] - 1
    for i in prange(n):
        t0 = seq_ptr[i]
        T = seq_ptr[i + 1] - t0
        e0 = eptr[i]
        out[i] = chain_entropy(node_store[t0:t0 + T], pair_store[e0:e0 + max(T - 1, 0)], T)


# ------------------------------------------------------------- SDCA line search
# The entries of the cliques (edges; T = 1: the node) and of the separators (interior nodes, sign -1)
# of one sequence: mu (the store) and mu' (the new marginals).  Ratios are formed from mu' itself, never
# as 1 + d / mu: where mu ~ 1 and mu' ~ 1e-17, mu + d is 0 in floating point and the log of the ratio
# would be the floor's instead of -39.  The direction d = mu' - mu is recomputed from the two where needed
# (the same double subtraction every time).
#
# Both passes over the entries work in blocks whose scratch stays in L1 (an edge's L^2 entries for the
# gap pass, LS_BLOCK entries for f'): the ratios and their logs are formed and used block by block.
# Nothing is written out at full length: the line search reads mu from the store's rows (float32 or
# float64) and mu' from the new marginals where they are (:func:`ls_entries`).
#
# (Until 2026-11-29 the gap pass also copied mu and mu' out and, where at most 60% of the entries had an
# f'(0) term above 1e-6 f'(0) / (their count), compacted those into the copies for the line search.  On
# OCR folds 1-9, CoNLL-2000 and CoNLL-2002 Dutch a step was 0-5% faster without copies and compaction: a
# step makes 1.1-1.2 evaluations of f', too few to repay a compaction's sequential stores.)
LS_BLOCK = 512


@njit(inline="always", **_NOPY)
def _gap_block(src, xs, nb, bu, bl, td, clique):
    """The gap pass over one block of ``nb`` entries: stored marginals ``src`` (float32 or float64) and new ones
    ``xs``.  Forms the ratios ``bu = max(mu', floor) / mu`` (1 where mu = 0) and their logs ``bl``
    (:func:`log_fast_into`, as the line search: relative error below 3e-9, and none where the ratio nears 1, so the
    gap of a converged example keeps its digits) in the L1 scratch; returns the block's sums of ``mu log(mu' / mu)``
    (the gap's term), ``d log(mu' / mu)`` (f'(0)'s), the curvatures ``d^2 / mu`` and ``d^2 / mu'`` (from the ratios:
    ``d (bu - 1)`` and ``d (1 - 1 / bu)``; entries with mu = 0 add 0: they make f'(0) infinite anyway) and the count
    of entries with mu <= 0 < d.  ``clique``: also adds d into ``td`` (the transition direction), in the loop that
    forms the ratios.  ``src`` is read twice (converted again) rather than copied to float64 scratch: 6% less
    time for the pass on OCR."""
    for j in range(nb):
        m = np.float64(src[j])
        x = xs[j]
        bu[j] = max(x, LOG_FLOOR) / m if m > 0.0 else 1.0
        if clique:
            td[j] += x - m
    log_fast_into(bu, bl, nb)
    g = 0.0
    fp = 0.0
    c0 = 0.0
    c1 = 0.0
    nbad = 0
    for j in range(nb):
        m = np.float64(src[j])
        x = xs[j]
        d = x - m
        lr = bl[j]
        g += m * lr
        fp += d * lr
        r = bu[j]
        c0 += d * (r - 1.0)
        c1 += d * (1.0 - 1.0 / r)
        nbad += 1 if (m <= 0.0 and d > 0.0) else 0
    return g, fp, c0, c1, nbad


@njit(**_NOPY)
def load_gap(T, t0, e0, node_store, pair2, node_n, pn2, m_node, d_node, tdir, scratch):
    """One sweep over sequence i's stored marginals (node rows from ``t0`` of ``node_store``, pairwise rows
    of the flattened store ``pair2`` ((edges, L*L)) from ``e0``) and its new ones (``node_n``, ``pn2``:
    (maxT, L*L)): the individual gap g = KL(mu || mu') (eq. 10), f'(0) = KL(mu || mu') + KL(mu' || mu)
    (inf where an entry has mu <= 0 < mu'), and the curvatures of the entropy part of f' at both ends,
    ``c0 = -(f''(0) + q) = sum_cliques d^2 / mu - sum_separators (same)`` and ``c1 = -(f''(1) + q)`` (the
    same with mu'; the line search's first guess); also m_node = the stored node marginals (float64),
    d_node = new - stored, and tdir (L x L) = the summed pairwise differences sum_t (pair'_t - pair_t).
    ``scratch``: (2, >= L^2) float64.  Returns (g, f'(0), c0, c1).

    The stored pairwise entries are read edge by edge (the ratios and their logs of an edge stay in L1); the
    separators (the interior nodes, rows 1 .. T-2 of ``m_node`` and ``node_n``, contiguous) in blocks of the
    scratch's length, not row by row (L entries: a call's fixed cost outweighed its work)."""
    L = node_store.shape[1]
    LL = L * L
    td = tdir.reshape(LL)
    for k in range(LL):
        td[k] = 0.0
    for t in range(T):
        nr = node_store[t0 + t]
        nn = node_n[t]
        for l in range(L):
            m = np.float64(nr[l])
            m_node[t, l] = m
            d_node[t, l] = nn[l] - m
    bu, bl = scratch[0], scratch[1]
    gp = fpp = c0p = c1p = 0.0
    gs = fps = c0s = c1s = 0.0
    nbad = 0
    if T == 1:
        gp, fpp, c0p, c1p, nbad = _gap_block(m_node[0], node_n[0], L, bu, bl, td, False)
    else:
        for t in range(T - 1):
            g_, f_, a_, b_, nb_ = _gap_block(pair2[e0 + t], pn2[t], LL, bu, bl, td, True)
            gp += g_
            fpp += f_
            c0p += a_
            c1p += b_
            nbad += nb_
        mf = m_node.reshape(m_node.size)
        nf = node_n.reshape(node_n.size)
        hi = (T - 1) * L
        blk = bu.shape[0]
        for b in range(L, hi, blk):
            nb = min(blk, hi - b)
            g_, f_, a_, b_, nb_ = _gap_block(mf[b:b + nb], nf[b:b + nb], nb, bu, bl, td, False)
            gs += g_
            fps += f_
            c0s += a_
            c1s += b_
            nbad += nb_
    fp0 = fpp - fps
    if nbad > 0:
        fp0 = np.inf
    return gs - gp, fp0, c0p - c0s, c1p - c1s


@njit(**_NOPY)
def ls_entries(T, t0, e0, node_store, pair_store, node_n, pair_n):
    """The line search's entries of sequence i where they are, as four flat views: the cliques' mu (the
    store's rows, float32 or float64) and mu' (the new marginals), then the separators' (the interior
    nodes' rows of the store and of ``node_n``).  The cliques are the T - 1 edges, or the node where T = 1
    (then no separators)."""
    L = node_store.shape[1]
    LL = L * L
    ns = node_store.reshape(node_store.shape[0] * L)
    nn = node_n.reshape(node_n.shape[0] * L)
    if T == 1:
        return ns[t0 * L:(t0 + 1) * L], nn[:L], ns[:0], nn[:0]
    npair = (T - 1) * LL
    pm = pair_store.reshape(pair_store.shape[0] * LL)[e0 * LL:e0 * LL + npair]
    pn = pair_n.reshape(pair_n.shape[0] * LL)[:npair]
    return pm, pn, ns[(t0 + 1) * L:(t0 + T - 1) * L], nn[L:(T - 1) * L]


@njit(**_NOPY)
def _fprime_range_m(g, cm, cn, bu, bl):
    """Over the entries (mu in ``cm``: float32 or float64, mu' in ``cn``), in blocks of LS_BLOCK (the ratios and
    their logs in the L1 scratch ``bu``, ``bl``), f'(g)'s terms and, in the same sweep, what the certified Taylor
    model of f' around g needs (:func:`_taylor_root`), with rho = d / mu_g per entry: the sums of
    ``d log(mu' / mu_g)``, ``d rho`` (= d^2 / mu_g), ``d rho^2`` and ``d rho^3`` (three multiply-adds an entry
    more than f' alone; every ``d rho^k`` with k odd is >= 0, rho having the sign of d)."""
    omg = 1.0 - g
    s = 0.0
    s2 = 0.0
    m2 = 0.0
    m3 = 0.0
    b = 0
    hi = cm.shape[0]
    while b < hi:
        nb = min(LS_BLOCK, hi - b)
        m_ = cm[b:b + nb]
        x_ = cn[b:b + nb]
        for j in range(nb):
            m = np.float64(m_[j])
            x = x_[j]
            d = x - m
            r = 1.0 / max(omg * m + g * x, LOG_FLOOR)
            bu[j] = max(x, LOG_FLOOR) * r
            rho = d * r
            dp = d * rho
            s2 += dp
            m2 += dp * rho
            m3 += dp * (rho * rho)
        log_fast_into(bu, bl, nb)
        for j in range(nb):
            s += (x_[j] - np.float64(m_[j])) * bl[j]
        b += nb
    return s, s2, m2, m3


@njit(**_NOPY)
def fprime_moments(g, pm, pn, sm, sn, bu, bl, out):
    """The entropy part of f' at g, A(g) = sum_cliques d log(mu' / mu_g) - sum_separators (same), and the
    Taylor data of A around g (:func:`_taylor_root`), written into ``out`` (float64, 7): A(g), a1 = -A'(g)
    = sum d rho (cliques minus separators), a2 = A''(g) = sum d rho^2, a3 = -A^(3)(g) / 2 = sum d rho^3,
    b4 >= sum |d| rho^4 (all entries), rmax >= max |rho|, sabs = the scale of the evaluation's error
    (:data:`TAYLOR_LOG_ERR`).  rho = d / mu_g.

    No sweep for the bounds: marginals lie in [0, 1], so mu_g = (1 - g) mu + g mu' >= g d where d > 0 and
    >= (1 - g) |d| where d < 0, i.e. |rho| <= rmax = max(1 / g, 1 / (1 - g)); then |d| rho^4 = d rho^3
    |rho| <= rmax d rho^3 (d rho^3 >= 0), so b4 = rmax sum d rho^3 over all entries; the terms d log(mu' /
    mu_g) are >= 0 (the log has the sign of d), so sum |.| = |sum over cliques| + |sum over separators|,
    and |d| <= 1 gives sum |d| <= nc."""
    sp, s2p, m2p, m3p = _fprime_range_m(g, pm, pn, bu, bl)
    ss, s2s, m2s, m3s = _fprime_range_m(g, sm, sn, bu, bl)
    nc = pm.shape[0] + sm.shape[0]
    rb = max(1.0 / g, 1.0 / (1.0 - g)) * (1.0 + 1e-12) if (g > 0.0 and g < 1.0) else np.inf
    out[0] = sp - ss
    out[1] = s2p - s2s
    out[2] = m2p - m2s
    out[3] = m3p - m3s
    out[4] = rb * (m3p + m3s)
    out[5] = rb
    out[6] = abs(sp) + abs(ss) + s2p + s2s + TAYLOR_ULP * nc


# the certified Taylor model's allowance for the evaluation's own error, per unit of ``sabs`` (the sum of
# the terms' sizes |d log(mu' / mu_g)| + d^2 / mu_g, plus TAYLOR_ULP sum |d|): the fast log's relative
# error (3e-9) with a margin, and the rounding of the sums; TAYLOR_ULP |d| stands for the absolute error of
# a log of a ratio formed with a few roundings (about 5e-16 per entry, times |d|), which dominates the
# relative one where mu' ~ mu
TAYLOR_LOG_ERR = 5e-9
TAYLOR_ROUND = 1e-11
TAYLOR_ULP = 1e-7


@njit(**_NOPY)
def _taylor_err(dl, b4, rmax, sabs):
    """A bound on |A(x0 + dl) - (its Taylor polynomial of degree 3 around x0)| plus the evaluation's own
    error: per entry -d log1p(dl rho) with the series' remainder after the cube below |dl rho|^4 / (4 (1 -
    |dl rho|)); inf where |dl| rmax >= 1 (the series may not converge)."""
    z = abs(dl) * rmax
    if not (z < 1.0):
        return np.inf
    d2 = dl * dl
    return d2 * d2 * b4 / (4.0 * (1.0 - z)) + (TAYLOR_LOG_ERR + TAYLOR_ROUND) * sabs * (1.0 + abs(dl) * rmax)


@njit(**_NOPY)
def _other(x, q, nz, ez, kappa, l2n):
    """The regulariser's part of f' (subtracted from A): (x q, q) for l2 alone, (h(x), h'(x)) with l1."""
    if kappa > 0.0:
        return enet_h(x, nz, ez, kappa, l2n)
    return x * q, q


@njit(**_NOPY)
def _taylor_root(x0, mo, lo, hi, tol, q, nz, ez, kappa, l2n):
    """A certified bracket of the root of f' = A - (regulariser part) from one evaluation at x0.

    With rho = d / mu_x0 per entry, mu_{x0 + t} = mu_x0 (1 + t rho), so A(x0 + t) = A(x0) - sum d log1p(t
    rho) (cliques minus separators) = A(x0) - a1 t + a2 t^2 / 2 - a3 t^3 / 3 + R(t), |R(t)| <= t^4 b4 / (4
    (1 - |t| rmax)) (``mo`` from :func:`fprime_moments`; :func:`_taylor_err` adds the evaluation's error).
    The root xr of the model is found by safeguarded Newton in [lo, hi] (no log: a few flops a
    step); then the points a = xr - e, b = xr + e, e = 2 |error bound at xr| / |slope| (at least 1e-12),
    are tested: f'(a) > 0 and f'(b) < 0 are certain where the model's value exceeds its error bound
    (a <= lo and b >= hi need no test: f'(lo) > 0 > f'(hi) are known).  Returns the left end of the
    certified bracket [max(a, lo), min(b, hi)] contains the root; where it is at most ``tol`` wide and e at
    most a quarter of xr, returns xr (within tol of the root, as the Newton point the search's other stop
    returns, and at most twice the root, so that a tiny root is not rounded to a step of 0), else -1."""
    a0, a1, a2, a3, b4, rmax, sabs = mo[0], mo[1], mo[2], mo[3], mo[4], mo[5], mo[6]
    if not (np.isfinite(a0) and np.isfinite(a1) and np.isfinite(a2) and np.isfinite(a3) and np.isfinite(b4)):
        return -1.0
    tl = lo - x0
    th = hi - x0
    t = 0.0
    for _ in range(40):
        o, op = _other(x0 + t, q, nz, ez, kappa, l2n)
        fm = a0 - a1 * t + 0.5 * a2 * t * t - a3 * t * t * t / 3.0 - o
        dm = -a1 + a2 * t - a3 * t * t - op
        if fm > 0.0:
            tl = max(tl, t)
        elif fm < 0.0:
            th = min(th, t)
        else:
            break
        nt = t - fm / dm if dm < 0.0 else -np.inf
        if not (nt > tl and nt < th):
            nt = 0.5 * (tl + th)
        if abs(nt - t) <= 1e-3 * tol or th - tl <= 1e-3 * tol:
            t = nt
            break
        t = nt
    o, op = _other(x0 + t, q, nz, ez, kappa, l2n)
    slope = abs(-a1 + a2 * t - a3 * t * t - op)
    e = max(2.0 * _taylor_err(t, b4, rmax, sabs) / slope, 1e-12) if slope > 0.0 else np.inf
    if not (2.0 * e <= tol):
        return -1.0
    a = x0 + t - e
    b = x0 + t + e
    if a > lo:
        ta = a - x0
        o, _ = _other(a, q, nz, ez, kappa, l2n)
        if not (a0 - a1 * ta + 0.5 * a2 * ta * ta - a3 * ta * ta * ta / 3.0 - o
                - _taylor_err(ta, b4, rmax, sabs) > 0.0):
            return -1.0
    else:
        a = lo
    if b < hi:
        tb = b - x0
        o, _ = _other(b, q, nz, ez, kappa, l2n)
        if not (a0 - a1 * tb + 0.5 * a2 * tb * tb - a3 * tb * tb * tb / 3.0 - o
                + _taylor_err(tb, b4, rmax, sabs) < 0.0):
            return -1.0
    else:
        b = hi
    if b - a <= tol and e <= 0.25 * (x0 + t):
        return x0 + t
    return -1.0


@njit(**_NOPY)
def fprime(g, pm, pn, sm, sn, q, bu, bl):
    """(f'(g), f''(g)) of the line search over its entries (module docstring): the cliques' mu, mu' in
    ``pm``, ``pn``, the separators' in ``sm``, ``sn`` (:func:`ls_entries`); ``bu``, ``bl``: float64
    scratch of at least LS_BLOCK entries.  The values the search itself evaluates (:func:`fprime_moments`);
    for the tests and benchmarks."""
    mo = np.empty(7)
    fprime_moments(g, pm, pn, sm, sn, bu, bl, mo)
    return mo[0] - g * q, -mo[1] - q


_NO_EZ = np.zeros((3, 0))    # the L2 line search's (empty) elastic-net coordinates


@njit(**_NOPY)
def line_search(pm, pn, sm, sn, q, fp0, c0, c1, tol, bu, bl, isc):
    """argmax over [0, 1] of the 1-D dual f: the root of f', bracketed by f'(0) = fp0 > 0 > f'(1) = -q.

    Safeguarded Newton (as rtsafe): a Newton step on f' from the last point, replaced by bisection of
    the bracket when it would leave the bracket or when the previous step did not shrink |f'| fast
    enough (|2 f'| > |previous step * f''|).  The first point is :func:`first_guess` (from f' and the
    entropy part's curvatures ``c0``, ``c1`` at both ends, known without logs).  Stops when the bracket
    is below ``tol`` (returning its left end, where f' > 0: the dual then does not decrease), or when
    both the Newton step and the secant step to the bracket's other end are below ``tol`` (the Newton
    step alone is not enough: where f'' is large at a point far left of the root its step is tiny; the
    root lies between the two steps' ends where f' is convex or concave between them).  After every
    evaluation the search first tries :func:`_taylor_root`: the same sweep that evaluates f' at x also
    sums the moments of the entries' d / mu_x, which give f' near x as a cubic with a rigorous bound on
    its error; where the cubic's root is certified inside a bracket at most ``tol`` wide (f' > 0 at its
    left end, < 0 at its right, each by more than the bound), the search returns the cubic's root without
    another evaluation.  Counts its f' evaluations into ``isc[I_LS]``."""
    return _safeguarded_root(pm, pn, sm, sn, q, fp0, c0, c1, tol, bu, bl, isc, 0, _NO_EZ, 0.0, 1.0)


@njit(**_NOPY)
def first_guess(a0, q, c0, c1):
    """The line search's first point: the root in (0, 1) of ``A(g) = g q`` for the model of the entropy
    part of f', ``A(g) = a0 (1 - g)(1 + c g) / (1 + b g)``, fitted to its values (a0 = f'(0) at 0, 0 at
    1) and slopes (-c0 at 0, -c1 at 1): ``1 + b = (c0 / a0 - 1) / (1 - c1 / a0)``, ``c = b + 1 - c0 /
    a0``.  The root is that of a quadratic.  Falls back to the chord's root ``a0 / (a0 + q)`` where the
    fit has a pole or zero in [0, 1] or no root there.  (With c = 0 the model is the rational one
    fitted at 0 alone; on CoNLL-2000 after 2 epochs it starts left of the root every time and took more
    evaluations than the chord; a cubic Hermite model of f' was tried earlier and dropped, the note
    of :func:`line_search`.)"""
    x = a0 / (a0 + q)
    den = 1.0 - c1 / a0
    if abs(den) > 1e-12 and np.isfinite(c0) and np.isfinite(c1):
        beta = (c0 / a0 - 1.0) / den - 1.0
        gam = beta + 1.0 - c0 / a0
        if beta > -1.0 and gam > -1.0:
            qa = q * beta + a0 * gam
            qb = q - a0 * (gam - 1.0)
            disc = qb * qb + 4.0 * qa * a0
            if disc >= 0.0:
                den2 = qb + np.sqrt(disc)
                if den2 > 0.0:
                    y = 2.0 * a0 / den2
                    if y > 0.0 and y < 1.0:
                        x = y
    return x


@njit(**_NOPY)
def _safeguarded_root(pm, pn, sm, sn, q, fp0, c0, c1, tol, bu, bl, isc, nz, ez, kappa, l2n):
    """The root finder of :func:`line_search` (``kappa`` = 0: f' from :func:`fprime` with ``q``) and of
    :func:`line_search_enet` (``kappa`` > 0: f' = the entropy part minus :func:`enet_h`, and f'(1) =
    -h(1) in place of -q; the first guess takes h(1) for q)."""
    if not (fp0 > 0.0):
        return 0.0
    enet = kappa > 0.0
    if enet:
        q = enet_h(1.0, nz, ez, kappa, l2n)[0]
    if not (q > 0.0):
        return 1.0                  # f' >= 0 on [0, 1]
    lo = 0.0
    hi = 1.0
    flo = fp0
    fhi = -q
    x = first_guess(fp0, q, c0, c1) if np.isfinite(fp0) else 0.5
    if not (x > lo and x < hi):
        x = 0.5
    dxold = 1.0
    mo = np.empty(7)
    for _ in range(LS_MAXIT):
        fprime_moments(x, pm, pn, sm, sn, bu, bl, mo)
        ox, opx = _other(x, q, nz, ez, kappa, l2n)
        fx = mo[0] - ox
        fpp = -mo[1] - opx
        isc[I_LS] += 1
        if fx > 0.0:
            lo = x
            flo = fx
        elif fx < 0.0:
            hi = x
            fhi = fx
        else:
            return x
        if hi - lo <= tol:
            return lo
        xc = _taylor_root(x, mo, lo, hi, tol, q, nz, ez, kappa, l2n)
        if xc >= 0.0:
            return xc
        nx = x - fx / fpp if (fpp < 0.0 and np.isfinite(fpp)) else -1.0
        if not (nx > lo and nx < hi) or abs(2.0 * fx) > abs(dxold * fpp):
            nx = 0.5 * (lo + hi)
        dx = nx - x
        sec = fx * (hi - lo) / (flo - fhi)          # the secant step across the bracket (flo > 0 > fhi)
        if abs(dx) < tol and abs(sec) < tol:
            return nx
        dxold = dx
        x = nx
    return lo


# ------------------------------------------------------------- elastic net (l1 > 0)
# With g(w) = (l2/2)||w||^2 + l1||w||_1 the dual's regulariser term is g*(v) = (1/(2 l2)) ||S_l1(v)||^2
# (S the soft-thresholding) and w = grad g*(v) = S_l1(v) / l2.  The kernels keep z = v / l2 (the
# weights the L2 code keeps, w_hat(mu)) and w = S_kappa(z), kappa = l1 / l2, both explicit: a step
# moves z by gamma * delta on the touched coordinates (the sequence's attributes and the transitions)
# and re-thresholds those only.  The line search's derivative loses its ``- g q`` term for
#     - h(g),   h(g) = l2 n sum_j delta_j (S_kappa(z_j + g delta_j) - S_kappa(z_j))
# (n times <w(g) - w(0), u>, u = l2 n delta), piecewise linear and non-decreasing in g, with slope
# h'(g) = l2 n sum_j delta_j^2 [|z_j + g delta_j| > kappa]; kappa = 0 gives back h = g q.
@njit(inline="always", **_NOPY)
def _soft(x, k):
    return max(x - k, 0.0) + min(x + k, 0.0)


@njit(**_NOPY)
def soft_threshold(z, kappa, w):
    """w = S_kappa(z) coordinate-wise (sign(z) max(|z| - kappa, 0))."""
    for k in range(z.shape[0]):
        w[k] = _soft(z[k], kappa)


@njit(**_NOPY)
def enet_pack(attr_ptr, acc, alist, na, tdir, trans_index, n_state, z, c, kappa, ez):
    """The touched coordinates of a step, compacted: ez[0] = z_j, ez[1] = delta_j = c * (E_d F)_j
    (c = -1 / (l2 n)), ez[2] = S_kappa(z_j), over the listed attributes' features, then the
    transition features (the order of :func:`apply_direction`).  Returns their count."""
    zc, dc, sc = ez[0], ez[1], ez[2]
    m = 0
    for j in range(na):
        a = alist[j]
        for k in range(attr_ptr[a], attr_ptr[a + 1]):
            x = z[k]
            zc[m] = x
            dc[m] = c * acc[m]          # acc holds the listed attributes' rows one after the other
            sc[m] = _soft(x, kappa)
            m += 1
    L = trans_index.shape[0]
    for a in range(L):
        for b in range(L):
            k = trans_index[a, b]
            if k >= 0:
                x = z[n_state + k]
                zc[m] = x
                dc[m] = c * tdir[a, b]
                sc[m] = _soft(x, kappa)
                m += 1
    return m


@njit(**_NOPY)
def enet_h(g, nz, ez, kappa, l2n):
    """(h(g), h'(g)) of the elastic-net line search (see above) over the packed coordinates."""
    zc, dc, sc = ez[0], ez[1], ez[2]
    h = 0.0
    hp = 0.0
    for m in range(nz):
        d = dc[m]
        x = zc[m] + g * d
        h += d * (_soft(x, kappa) - sc[m])
        hp += d * d if abs(x) > kappa else 0.0
    return l2n * h, l2n * hp


@njit(**_NOPY)
def line_search_enet(pm, pn, sm, sn, fp0, c0, c1, tol, bu, bl, isc, nz, ez, kappa, l2n):
    """:func:`line_search` for l1 > 0: the same safeguarded Newton / bisection on
    f'(g) = (entropy part, :func:`fprime` with q = 0) - h(g), bracketed by f'(0) = fp0 > 0 and
    f'(1) = -h(1) <= 0 (h(1) = 0: f' >= 0 on [0, 1], the step is 1).  f'' = -(entropy curvature) -
    h'(g); h' jumps where a coordinate crosses +-kappa, where the bisection safeguard takes over."""
    return _safeguarded_root(pm, pn, sm, sn, 0.0, fp0, c0, c1, tol, bu, bl, isc, nz, ez, kappa, l2n)


@njit(**_NOPY)
def apply_direction_enet(attr_ptr, acc, alist, na, tdir, trans_index, n_state, c, kappa, z, w):
    """z += c * (E_d F) and w = S_kappa(z) on the touched coordinates; clears ``acc``."""
    o = 0
    for j in range(na):
        a = alist[j]
        k0 = attr_ptr[a]
        nk = attr_ptr[a + 1] - k0
        for q in range(nk):
            x = z[k0 + q] + c * acc[o + q]
            z[k0 + q] = x
            w[k0 + q] = _soft(x, kappa)
            acc[o + q] = 0.0
        o += nk
    L = trans_index.shape[0]
    for a in range(L):
        for b in range(L):
            k = trans_index[a, b]
            if k >= 0:
                x = z[n_state + k] + c * tdir[a, b]
                z[n_state + k] = x
                w[n_state + k] = _soft(x, kappa)


# ------------------------------------------------------------- sparse primal direction
# The state part of the direction is gathered in a local layout: ``acc[0:total]`` holds the feature rows
# of the sequence's distinct attributes one after the other, in the order of ``alist`` (the order of
# their first occurrences: :func:`crfkit.kernels.occ.buffer_offsets` gives each occurrence the offset
# of its attribute's row, once before the run).  The rows of a step are
# then contiguous (a few kB), not scattered over a vector of all the features (3.6 MB on CoNLL-2000),
# and the norm and the update read them as one array.
@njit(**_NOPY)
def accumulate_direction(tok_ptr, attr, ok0, onk, val, lab, bo, t0, t1, dn, acc, alist):
    """(E_d F) of the state features over the attribute occurrences of tokens t0..t1-1 (dn: T x L) into the local
    layout above: ``acc[o + q] += x * dn[t, label(k0 + q)]`` (o = ``bo[e]`` the offset of the attribute's row,
    :func:`crfkit.kernels.occ.buffer_offsets`; k0 its first feature); the distinct attributes are listed in
    ``alist`` (an occurrence is its attribute's first where its offset is the total width listed so far and the
    attribute has features).  Returns their count.  Reads the occurrences through the per-occurrence layout ``(ok0,
    onk, lab)`` of :func:`crfkit.kernels.occ.layout` (the attribute's first feature and feature count, -1 for a full
    row, read in order with the occurrence) instead of ``attr_ptr``, ``full`` and ``feat_label`` by attribute: the
    same additions in the same order."""
    L = dn.shape[1]
    na = 0
    total = 0
    for t in range(t0, t1):
        d = dn[t - t0]
        part = False
        for e in range(tok_ptr[t], tok_ptr[t + 1]):
            nk = onk[e]
            o = bo[e]
            if o == total and nk != 0:         # (an attribute without features is not listed)
                alist[na] = attr[e]
                na += 1
                total += L if nk < 0 else nk
            if nk < 0:
                add_full_row(acc[o:o + L], d, 0, val[e])
            else:
                part = True
        if part:
            for e in range(tok_ptr[t], tok_ptr[t + 1]):
                nk = onk[e]
                if nk >= 0:
                    x = val[e]
                    o = bo[e]
                    k0 = ok0[e]
                    for q in range(nk):
                        acc[o + q] += x * d[lab[k0 + q]]
    return na


@njit(inline="always", **_NOPY)
def _local_total(attr_ptr, alist, na):
    total = 0
    for j in range(na):
        a = alist[j]
        total += attr_ptr[a + 1] - attr_ptr[a]
    return total


@njit(**_NOPY)
def direction_norm2(attr_ptr, acc, alist, na, tdir, trans_index):
    """||u||^2 over the listed attributes' features (``acc`` in the local layout of
    :func:`accumulate_direction`) and the transition features (tdir: L x L)."""
    s = 0.0
    for k in range(_local_total(attr_ptr, alist, na)):
        s += acc[k] * acc[k]
    L = trans_index.shape[0]
    for a in range(L):
        for b in range(L):
            if trans_index[a, b] >= 0:
                s += tdir[a, b] * tdir[a, b]
    return s


@njit(**_NOPY)
def apply_direction(attr_ptr, acc, alist, na, tdir, trans_index, n_state, c, w):
    """w += c * u (listed attributes, ``acc`` in the local layout of :func:`accumulate_direction`, and
    transitions); clears ``acc`` for the next step."""
    o = 0
    for j in range(na):
        a = alist[j]
        k0 = attr_ptr[a]
        nk = attr_ptr[a + 1] - k0
        wr = w[k0:k0 + nk]
        ar = acc[o:o + nk]
        for q in range(nk):
            wr[q] += c * ar[q]
            ar[q] = 0.0
        o += nk
    L = trans_index.shape[0]
    for a in range(L):
        for b in range(L):
            k = trans_index[a, b]
            if k >= 0:
                w[n_state + k] += c * tdir[a, b]


@njit(**_NOPY)
def scores_dot(T, score, trans, dn, dp):
    """sum_t dn[t] . score[t] + sum_t dp[t] . trans: the inner product of w with E_d F for a
    sequence whose emission scores at w are ``score`` (d: node and pairwise differences)."""
    L = trans.shape[0]
    s = 0.0
    for t in range(T):
        for l in range(L):
            s += dn[t, l] * score[t, l]
    for t in range(T - 1):
        for a in range(L):
            for b in range(L):
                s += dp[t, a, b] * trans[a, b]
    return s


# ------------------------------------------------------------- the runs
@njit(**_NOPY)
def _sample(n, sampling, mixing, tsum, rng):
    if sampling == GAP and tsum[1] > 0.0 and rng_uniform(rng) >= mixing:
        return tree_sample(tsum, rng_uniform(rng))
    return rng_below(rng, n)


@njit(**_NOPY)
def _set_gap(tsum, tmax, tmin, gaps, i, g):
    if not (g > 0.0):
        g = 0.0
    gaps[i] = g
    tree_set(tsum, tmax, tmin, i, g)


@njit(**_NOPY)
def _store_slices(node_store, pair_store, t0, T, e0):
    return node_store[t0:t0 + T], pair_store[e0:e0 + max(T - 1, 0)]


@njit(**_NOPY)
def sdca_step(i, seq_ptr, eptr, tok_ptr, attr, val, attr_ptr, ok0, onk, lab, trans_index, n_state, l2n, tol,
              w, node_store, pair_store, trans, score, es, alpha, beta, scale, node_n, pair_n,
              m_node, d_node, flat, acc, bo, alist, tdir, isc, kappa, z, ez):
    """One Prox-SDCA step on sequence i (Algorithm 1): returns (g_i, gamma).  ``flat``: float64 scratch of shape
    (2, >= max(L^2, LS_BLOCK)).

    One sweep over the stored marginals, edge by edge, gives the gap, f'(0) and the transition part of the direction
    (:func:`load_gap`); the line search reads the store's rows and the new marginals where they are
    (:func:`ls_entries`); one sweep writes the mixed marginals back.  The emission scores and the direction read the
    attribute occurrences through ``(ok0, onk, lab)`` (:func:`crfkit.kernels.occ.layout`; ``attr_ptr`` serves the
    per-attribute loops over the touched rows).

    ``kappa = l1 / l2 > 0`` (elastic net): ``z`` holds w_hat(mu) and ``w = S_kappa(z)`` (the scores are taken at w);
    the line search is :func:`line_search_enet` over the coordinates packed into ``ez`` ((3, >= touched) float64
    scratch).  ``kappa = 0``: ``z`` is unused (pass ``w``)."""
    L = trans_index.shape[0]
    LL = L * L
    t0 = seq_ptr[i]
    T = seq_ptr[i + 1] - t0
    if T == 0:
        return 0.0, 0.0
    e0 = eptr[i]
    pair2 = pair_store.reshape((pair_store.shape[0], LL))
    pn2 = pair_n.reshape((pair_n.shape[0], LL))
    _trans_into(w, n_state, trans_index, trans)
    occ_emissions(tok_ptr, ok0, onk, val, lab, t0, t0 + T, w, 1.0, score)
    # the forward-backward prefetches the stored rows the gap pass sweeps next (cold: 2 of its 8 us on OCR)
    chain_marginals_pf(score, T, trans, es, alpha, beta, scale, node_n, pair_n, node_store.reshape(node_store.size),
                       t0 * L, pair_store.reshape(pair_store.size), e0 * LL)
    gap, fp0, c0, c1 = load_gap(T, t0, e0, node_store, pair2, node_n, pn2, m_node, d_node, tdir, flat)
    bu, bl = flat[0], flat[1]
    pm, pn, sm, sn = ls_entries(T, t0, e0, node_store, pair_store, node_n, pair_n)
    isc[I_NF] += pm.shape[0] + sm.shape[0]
    isc[I_NC] += pm.shape[0] + sm.shape[0]
    # u = E_mu F - E_mu' F = -E_d F: the node part through the attributes, the pairwise through trans
    na = accumulate_direction(tok_ptr, attr, ok0, onk, val, lab, bo, t0, t0 + T, d_node, acc, alist)
    if kappa > 0.0:
        nz = enet_pack(attr_ptr, acc, alist, na, tdir, trans_index, n_state, z, -1.0 / l2n, kappa, ez)
        gamma = line_search_enet(pm, pn, sm, sn, fp0, c0, c1, tol, bu, bl, isc, nz, ez, kappa, l2n)
        apply_direction_enet(attr_ptr, acc, alist, na, tdir, trans_index, n_state, -gamma / l2n, kappa,
                             z, w)
    else:
        q = direction_norm2(attr_ptr, acc, alist, na, tdir, trans_index) / l2n
        gamma = line_search(pm, pn, sm, sn, q, fp0, c0, c1, tol, bu, bl, isc)
        # acc and tdir hold E_d F = -u: w += gamma u / (l2 n)
        apply_direction(attr_ptr, acc, alist, na, tdir, trans_index, n_state, -gamma / l2n, w)
    if gamma > 0.0:
        omg = 1.0 - gamma
        for t in range(T):
            nr = node_store[t0 + t]
            for l in range(L):
                nr[l] = omg * m_node[t, l] + gamma * node_n[t, l]
        for t in range(T - 1):
            row = pair2[e0 + t]
            pn = pn2[t]
            for k in range(LL):
                row[k] = omg * np.float64(row[k]) + gamma * pn[k]
    return gap, gamma


@njit(**_NOPY)
def oeg_step(i, seq_ptr, eptr, tok_ptr, attr, val, attr_ptr, ok0, onk, lab, trans_index, n_state, l2n,
             w, node_store, pair_store, etas, trans, score, es, alpha, beta, scale, node_n, pair_n,
             m_node, d_node, m_pair, d_pair, M, expM, theta, pot, acc, bo, alist, tdir, isc):
    """One online EG step on sequence i: mu_i <- the chain with potentials (1 - eta) theta_i + eta s_w,
    theta_i the log-potentials of the stored marginals, s_w the scores under w; the step is taken when
    it increases the dual, otherwise eta_i is halved and the step recomputed (each try one
    marginalisation, counted in ``isc[I_EVALS]``), but not below ``OEG_ETA_MIN``: a step refused there
    ends the visit without a step (eta_i stays at the floor).  Without the floor an example whose
    steps cannot increase the dual at any eta was tried 31 times at every visit, its eta_i halved to
    1e-100 and beyond: with the float32 store the chain of the stored marginals' log-potentials is not
    exactly the stored marginals (they are rounded, so not exactly consistent), so even eta -> 0
    moves them by that rounding, and the dual change of that move decides the test (measured on
    CoNLL-2002 Dutch: 189 examples below eta 1e-6 after 10 epochs and 5,516 refused tries in the
    10th, 35% of its oracle calls; with the float64 store none and 525).  Returns the dual increase
    times n."""
    L = trans_index.shape[0]
    t0 = seq_ptr[i]
    T = seq_ptr[i + 1] - t0
    if T == 0:
        isc[I_EVALS] += 1
        return 0.0
    e0 = eptr[i]
    ns, ps = _store_slices(node_store, pair_store, t0, T, e0)
    _trans_into(w, n_state, trans_index, trans)
    occ_emissions(tok_ptr, ok0, onk, val, lab, t0, t0 + T, w, 1.0, score)
    # theta: log-potentials of the stored chain (log pair_t - log node_t on edge t >= 1; T = 1: log node_0)
    for t in range(T):
        for l in range(L):
            m_node[t, l] = np.float64(ns[t, l])
    for t in range(T - 1):
        for a in range(L):
            for b in range(L):
                m_pair[t, a, b] = np.float64(ps[t, a, b])
    h_old = chain_entropy(m_node, m_pair, T)
    for t in range(T - 1):
        for a in range(L):
            sep = np.log(max(m_node[t, a], LOG_FLOOR)) if t >= 1 else 0.0
            for b in range(L):
                theta[t + 1, a, b] = np.log(max(m_pair[t, a, b], LOG_FLOOR)) - sep
    if T == 1:
        for l in range(L):
            pot[0, l] = np.log(max(m_node[0, l], LOG_FLOOR))
    eta = etas[i]
    dual_gain = 0.0
    for _ in range(OEG_MAX_HALVINGS + 1):
        isc[I_EVALS] += 1
        for t in range(1, T):
            for a in range(L):
                for b in range(L):
                    M[t, a, b] = (1.0 - eta) * theta[t, a, b] + eta * trans[a, b]
            hi = max_min(M[t])[0]
            floor = hi - OEG_RANGE
            for a in range(L):
                for b in range(L):
                    if M[t, a, b] < floor:
                        M[t, a, b] = floor
        for t in range(T):
            for l in range(L):
                es[t, l] = eta * score[t, l] + ((1.0 - eta) * pot[0, l] if T == 1 else 0.0)
        # es is overwritten by the forward-backward: the potentials go through d_node
        for t in range(T):
            for l in range(L):
                d_node[t, l] = es[t, l]
        pd_chain_marginals(d_node, T, M, es, alpha, beta, scale, expM, node_n, pair_n)
        h_new = chain_entropy(node_n, pair_n, T)
        # u = E_old F - E_new F; n * dual change = H_new - H_old - w.u - ||u||^2 / (2 l2 n)
        for t in range(T):
            for l in range(L):
                d_node[t, l] = m_node[t, l] - node_n[t, l]
        for t in range(T - 1):
            for a in range(L):
                for b in range(L):
                    d_pair[t, a, b] = m_pair[t, a, b] - pair_n[t, a, b]
        wu = scores_dot(T, score, trans, d_node, d_pair)
        na = accumulate_direction(tok_ptr, attr, ok0, onk, val, lab, bo, t0, t0 + T, d_node, acc, alist)
        for a in range(L):
            for b in range(L):
                tdir[a, b] = 0.0
        for t in range(T - 1):
            for a in range(L):
                for b in range(L):
                    tdir[a, b] += d_pair[t, a, b]
        u2 = direction_norm2(attr_ptr, acc, alist, na, tdir, trans_index)
        gain = h_new - h_old - wu - 0.5 * u2 / l2n
        if gain > 0.0:
            apply_direction(attr_ptr, acc, alist, na, tdir, trans_index, n_state, 1.0 / l2n, w)
            for t in range(T):
                for l in range(L):
                    ns[t, l] = node_n[t, l]
            for t in range(T - 1):
                for a in range(L):
                    for b in range(L):
                        ps[t, a, b] = pair_n[t, a, b]
            etas[i] = min(eta * OEG_GROW, OEG_ETA_MAX)
            dual_gain = gain
            break
        apply_direction(attr_ptr, acc, alist, na, tdir, trans_index, n_state, 0.0, w)
        isc[I_REJECT] += 1
        if eta <= OEG_ETA_MIN:
            break
        eta = max(0.5 * eta, OEG_ETA_MIN)
        etas[i] = eta
    return dual_gain


@njit(**_NOPY)
def dual_run(method, sampling, mixing, target, seq_ptr, eptr, tok_ptr, attr, val, attr_ptr, ok0, onk, lab,
             trans_index, n_state, l2n, tol, w, node_store, pair_store, gaps, etas, tsum, tmax, tmin, rng,
             trans, score, es, alpha, beta, scale, node_n, pair_n, m_node, d_node, m_pair, d_pair, M, expM,
             theta, pot, acc, bo, alist, tdir, flat, isc, fsc, kappa, z, ez):
    """Steps of ``method`` (SDCA or OEG) until ``isc[I_EVALS]`` reaches ``target`` (``kappa``, ``z``,
    ``ez``: SDCA's elastic net, see :func:`sdca_step`)."""
    n = seq_ptr.shape[0] - 1
    while isc[I_EVALS] < target:
        i = _sample(n, sampling, mixing, tsum, rng)
        if method == SDCA:
            isc[I_EVALS] += 1
            g, gamma = sdca_step(i, seq_ptr, eptr, tok_ptr, attr, val, attr_ptr, ok0, onk, lab, trans_index,
                                 n_state, l2n, tol, w, node_store, pair_store, trans, score, es, alpha, beta,
                                 scale, node_n, pair_n, m_node, d_node, flat, acc, bo, alist, tdir, isc, kappa, z,
                                 ez)
            fsc[F_GAMMA] = gamma
            if sampling == GAP:
                _set_gap(tsum, tmax, tmin, gaps, i, g)
        else:
            oeg_step(i, seq_ptr, eptr, tok_ptr, attr, val, attr_ptr, ok0, onk, lab, trans_index, n_state, l2n,
                     w, node_store, pair_store, etas, trans, score, es, alpha, beta, scale, node_n, pair_n,
                     m_node, d_node, m_pair, d_pair, M, expM, theta, pot, acc, bo, alist, tdir, isc)
        isc[I_STEPS] += 1


@njit(**_NOPY)
def refresh_gaps(seq_ptr, eptr, tok_ptr, attr, val, attr_ptr, feat_label, full, trans_index, n_state, w,
                 node_store, pair_store, gaps, tsum, tmax, tmin, trans, score, es, alpha, beta, scale,
                 node_n, pair_n):
    """g_i = KL(mu_i || mu_i(w)) for every sequence (one marginalisation each); returns their sum."""
    n = seq_ptr.shape[0] - 1
    L = trans_index.shape[0]
    nflat = node_store.reshape(node_store.size)
    pflat = pair_store.reshape(pair_store.size)
    _trans_into(w, n_state, trans_index, trans)
    total = 0.0
    for i in range(n):
        t0 = seq_ptr[i]
        T = seq_ptr[i + 1] - t0
        g = 0.0
        if T > 0:
            e0 = eptr[i]
            emissions_rows(tok_ptr, attr, val, t0, t0 + T, attr_ptr, feat_label, full, w, 1.0, score)
            chain_marginals_pf(score, T, trans, es, alpha, beta, scale, node_n, pair_n, nflat, t0 * L, pflat,
                               e0 * L * L)
            g = chain_kl(node_store[t0:t0 + T], pair_store[e0:e0 + max(T - 1, 0)], node_n, pair_n, T)
        _set_gap(tsum, tmax, tmin, gaps, i, g)
        total += gaps[i]
    return total
