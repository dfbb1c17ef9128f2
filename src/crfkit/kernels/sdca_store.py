"""SDCA/OEG's dual store: the run's constants and scalar slots, the clique-marginal store (gold
marginals, initial and warm stores), the conjugate weights ``w_hat``, the projection of a primal
point onto the dual, and the entropies and divergences of stored chains (paper eq. 9, 10).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .chain_emit import add_full_row, emissions_rows
from .chain_exp import FAST
from .chain_pairs import chain_marginals, pd_chain_marginals

# error_model="numpy": a float division is IEEE (no ZeroDivisionError branch), so that the loops
# over marginal entries vectorise (the branch kept LLVM from it; every division here is guarded
# anyway)
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
    """:func:`gold_marginals` in closed form, written into ``node`` (T x L) and ``pair``
    ((T-1) x L x L), which may be rows of a float32 store.  Every label but the gold one scores 0 at
    a position and on an edge, so the forward (backward) messages take two values per position, the
    gold label's and the others' (all equal), and an edge's pairwise marginals four: gold-gold,
    gold-other, other-gold, other-other.  The messages are normalised at every position and each
    edge's (node's) marginals by their own sum, so no exp but ``exp(value)`` and no overflow; O(T)
    arithmetic besides writing the T L + (T-1) L^2 entries (the forward-backward on a
    position-dependent chain took 176 us per CoNLL-2000 sentence, most of an SDCA step)."""
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
        # gold at t: from gold at t-1 with the transition's and the node's score, from any other
        # with the node's; others at t: from everything with score 0 (the previous messages sum to
        # 1)
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
    """Every sequence's marginals of :func:`gold_marginals` into the stores (one thread per
    sequence), from the closed form :func:`gold_marginals_closed`, written straight into the store
    rows; for ``|value| > GOLD_CLOSED_MAX`` (exp(value)^2 would overflow) from
    :func:`gold_marginals` itself."""
    n = seq_ptr.shape[0] - 1
    closed = abs(value) <= GOLD_CLOSED_MAX
    for i in prange(n):
        t0 = seq_ptr[i]
        T = seq_ptr[i + 1] - t0
        if T == 0:
            continue
        e0 = eptr[i]
        if closed:
            gold_marginals_closed(
                y, t0, T, L, value, node_store[t0 : t0 + T], pair_store[e0 : e0 + max(T - 1, 0)]
            )
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
def trans_into(w, n_state, trans_index, out):
    L = trans_index.shape[0]
    for a in range(L):
        for b in range(L):
            k = trans_index[a, b]
            out[a, b] = w[n_state + k] if k >= 0 else 0.0


@njit(**_PAR)
def warm_store(
    seq_ptr,
    eptr,
    tok_ptr,
    attr,
    val,
    attr_ptr,
    feat_label,
    full,
    trans_index,
    n_state,
    w,
    node_store,
    pair_store,
):
    """Every sequence's marginals under the weights ``w`` into the stores (a warm start)."""
    n = seq_ptr.shape[0] - 1
    L = trans_index.shape[0]
    trans = np.empty((L, L))
    trans_into(w, n_state, trans_index, trans)
    for i in prange(n):
        t0 = seq_ptr[i]
        T = seq_ptr[i + 1] - t0
        if T == 0:
            continue
        score = np.empty((T, L))
        emissions_rows(tok_ptr, attr, val, t0, t0 + T, attr_ptr, feat_label, full, w, 1.0, score)
        node = np.empty((T, L))
        pair = np.empty((max(T - 1, 1), L, L))
        chain_marginals(
            score,
            T,
            trans,
            np.empty((T, L)),
            np.empty((T, L)),
            np.empty((T, L)),
            np.empty(T),
            node,
            pair,
        )
        _store_marginals(node, pair, T, t0, eptr[i], node_store, pair_store)


@njit(**_NOPY)
def w_hat(
    seq_ptr,
    eptr,
    tok_ptr,
    attr,
    val,
    y,
    attr_ptr,
    feat_label,
    trans_index,
    n_state,
    coef,
    node_store,
    pair_store,
    w,
):
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
def project_dual(
    seq_ptr,
    eptr,
    tok_ptr,
    attr,
    val,
    y,
    attr_ptr,
    feat_label,
    full,
    trans_index,
    n_state,
    coef,
    node_store,
    pair_store,
    w,
    H,
    entropy,
):
    """The weights and (``entropy`` True) the entropies of the chain distributions the store holds.

    Rounded (float32) marginals are not exactly consistent: the pairwise marginals of neighbouring
    edges disagree on their shared node in the last bits, so no distribution has them as marginals
    and eq. (9) is not exactly an entropy.  The distribution used here is the Markov chain they
    define: ``p(y_0, y_1) = pair_0 / sum(pair_0)`` and ``p(y_{t+1} | y_t) = pair_t[y_t, .] / sum_b
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
            # the attributes whose features are all the labels in order (``full``) as vector rows;
            # the same products added in the same order as the generic loop
            for e in range(tok_ptr[t0 + t], tok_ptr[t0 + t + 1]):
                a = attr[e]
                x = val[e]
                k0 = attr_ptr[a]
                if full[a]:
                    add_full_row(w[k0 : k0 + L], d, 0, x)
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
        out[i] = chain_entropy(node_store[t0 : t0 + T], pair_store[e0 : e0 + max(T - 1, 0)], T)
