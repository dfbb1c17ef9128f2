"""Numba kernels of SGD-L1 (Tsuruoka, Tsujii & Ananiadou 2009): naive, clipping (lazy), cumulative
penalty.

Every quantity is kept in the units of the scaled weights ``w = beta * v``
(``crfkit.kernels.oracle``): the L2 shrinkage ``w <- (1 - eta*l2) w`` changes
``beta`` only, and an L1 penalty of ``eta*l1`` in ``w`` units is ``eta*l1/beta``
in ``v`` units.  ``u`` (``scal[U]``) is the total L1 penalty, in ``v`` units,
that every weight could have received so far (the paper's ``u_k``, eq. 3); per
feature the kernels keep

* ``clipping`` (penalty ``CLIP``): ``last[f]``, the value of ``u`` up to which
  feature ``f``'s penalty has been applied.  A feature is brought up to date
  (clipped at zero by ``u - last[f]``) just before the oracle reads it: clipping
  by a sum of penalties at once equals clipping by each in turn (the shrinkage
  by ``beta`` keeps signs and is linear), so this lazy update gives exactly
  the weights of the dense method that clips every weight at every step.
* ``naive`` (``NAIVE``): ``last[f]`` as above and ``lastk[f]``, the step count
  up to which ``f`` is up to date.  The dense method subtracts
  ``p_t * sign(w)`` from every weight at every step: away from zero a pending
  total ``P`` is one subtraction; a weight that reaches zero within the pending
  ``n`` steps oscillates around it, and the catch-up places it where a constant
  per-step penalty ``P/n`` would (exact with a constant step size and no L2,
  within one per-step penalty otherwise).
* ``cumulative`` (``CUMUL``): ``q[f]``, the total penalty ``f`` has actually
  received (the paper's ``q_i``, eq. 4); Figure 2's ApplyPenalty is applied to
  the features of the current sample only, after their gradient step.

One step for sample ``i`` (global step ``k``, counted from 0 as in Figure 2):
eta = rate(k); the sample's state features (each once) and all transitions are
brought up to date (naive/clipping); the oracle at ``w = beta*v``; ``beta *=
1 - eta*l2``; ``v += -(eta/beta) * grad_i``; ``u += eta*l1/beta``; the penalty
for the sample's features.  With bigram-observation features (:func:`run_steps_bigram`) the
sample's features also include the bigram features of its tokens after the first.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .chain_exp import FAST
from .oracle import add_bigram_gradient, apply_gradient, sequence_oracle, sequence_oracle_bigram

_NOPY = dict(cache=True, nogil=True, fastmath=FAST)
# no re-association: the contiguous penalty loop does exactly the arithmetic of the per-index one
_RUN = dict(cache=True, nogil=True, fastmath={"contract", "arcp", "nsz"})

NAIVE, CLIP, CUMUL = 0, 1, 2
INVERSE, EXPONENTIAL, CONSTANT = 0, 1, 2
# slots of the scalar state array ``scal``
BETA, U = 0, 1


@njit(**_NOPY)
def rate(schedule, eta0, alpha, k, n):
    """Learning rate of step k (from 0) with n samples per pass: eq. (5), eq. (6) or constant."""
    if schedule == INVERSE:
        return eta0 / (1.0 + k / n)
    if schedule == EXPONENTIAL:
        return eta0 * alpha ** (k / n)
    return eta0


@njit(**_NOPY)
def _catch_up(penalty, feats, nf, v, u, k, last, lastk, sign):
    """Apply to v[f], for f in feats[:nf], the penalty of the steps since f was last up to date
    (naive, clipping); naive also sets sign[j] to the sign of v[feats[j]] afterwards.  One call per
    step with the loop inside: a call per feature cost about as much as the rest of the step."""
    for j in range(nf):
        f = feats[j]
        pend = u - last[f]
        x = v[f]
        if penalty == CLIP:
            if pend > 0.0:
                if x > 0.0:
                    v[f] = x - pend if x > pend else 0.0
                elif x < 0.0:
                    v[f] = x + pend if -x > pend else 0.0
        else:
            n = k - lastk[f]
            if n > 0 and pend > 0.0 and x != 0.0:
                s = 1.0 if x > 0.0 else -1.0
                ax = abs(x)
                if ax > pend:
                    x = x - s * pend
                else:
                    p = pend / n
                    m = math.ceil(ax / p)  # steps to reach or cross zero (m <= n)
                    if m < 1:
                        m = 1
                    if m > n:
                        m = n
                    r = ax - m * p  # <= 0: the value, in the original sign, at that step
                    if r == 0.0:
                        x = 0.0  # sign(0) = 0: it stays at zero
                    elif (n - m) % 2 == 0:
                        x = s * r
                    else:
                        x = s * (r + p)
                v[f] = x
            lastk[f] = k
            sign[j] = 1.0 if x > 0.0 else (-1.0 if x < 0.0 else 0.0)
        last[f] = u


@njit(**_NOPY)
def _list_state(seq_ptr, tok_ptr, attr, attr_ptr, i, k, stamp, touched, nt):
    """Append to touched[nt:] the state features of the attributes of sequence i not yet listed at
    step k (``stamp``: one entry per attribute, then one per bigram attribute); returns the new
    count."""
    for e in range(tok_ptr[seq_ptr[i]], tok_ptr[seq_ptr[i + 1]]):
        a = attr[e]
        if stamp[a] != k:
            stamp[a] = k
            for f in range(attr_ptr[a], attr_ptr[a + 1]):
                touched[nt] = f
                nt += 1
    return nt


@njit(**_NOPY)
def _list_bigram(seq_ptr, btok_ptr, battr, battr_ptr, boff, i, k, stamp, touched, nt):
    """Append to touched[nt:] the bigram-observation features (at ``boff + k``) of the bigram
    attributes of sequence i's tokens after its first (those of the first take no part), each once
    (``stamp``: bigram attribute b at ``len(stamp) - len(battr_ptr) + 1 + b``); returns the new
    count."""
    t0 = seq_ptr[i]
    t1 = seq_ptr[i + 1]
    if t1 - t0 < 2:
        return nt
    s0 = stamp.shape[0] - (battr_ptr.shape[0] - 1)
    for e in range(btok_ptr[t0 + 1], btok_ptr[t1]):
        b = battr[e]
        if stamp[s0 + b] != k:
            stamp[s0 + b] = k
            for j in range(battr_ptr[b], battr_ptr[b + 1]):
                touched[nt] = boff + j
                nt += 1
    return nt


@njit(inline="always", fastmath={"contract", "arcp", "nsz"})
def _penalize_one(v, q, u, f, z):
    """The cumulative penalty on feature f whose value before it is z: v[f] and q[f] written.  Both
    candidates computed and one selected (no branch, so that the runs vectorise); the values of
    :func:`_penalize`'s branches: z > 0 takes max(z - (u + q), 0), z < 0 min(z + (u - q), 0), else
    z."""
    qf = q[f]
    a = z - (u + qf)
    a = 0.0 if a < 0.0 else a
    b = z + (u - qf)
    b = 0.0 if b > 0.0 else b
    x = a if z > 0.0 else (b if z < 0.0 else z)
    v[f] = x
    q[f] = qf + (x - z)


@njit(
    **_RUN
)  # no re-association: the same arithmetic per weight as the contiguous runs (_penalize_run)
def _penalize(penalty, touched, nt, v, u, p, k, last, lastk, q, sign):
    """The L1 penalty of step k (``p`` = eta*l1/beta, ``u`` already includes it) on the features
    touched[:nt] of the sample, after its gradient step: clipping, naive (``sign``: their signs
    before the step, from :func:`_catch_up`) or Figure 2's ApplyPenalty (cumulative)."""
    if penalty == CLIP:
        for j in range(nt):
            f = touched[j]
            x = v[f]
            if x > 0.0:
                x = x - p
                if x < 0.0:
                    x = 0.0
            elif x < 0.0:
                x = x + p
                if x > 0.0:
                    x = 0.0
            v[f] = x
            last[f] = u
    elif penalty == NAIVE:
        for j in range(nt):
            f = touched[j]
            v[f] -= p * sign[j]
            last[f] = u
            lastk[f] = k + 1
    else:
        # Figure 2, ApplyPenalty(i), in v units
        for j in range(nt):
            f = touched[j]
            _penalize_one(v, q, u, f, v[f])


@njit(**_NOPY)
def _list_bigram_attributes(seq_ptr, btok_ptr, battr, battr_ptr, i, k, stamp, tb):
    """The bigram attributes of sequence i's tokens after its first, each once, into ``tb`` (rows:
    attribute, its first occurrence, that occurrence's position in the sequence); returns how many.
    ``stamp`` as in :func:`_list_bigram`, except that an attribute seen more than once in the
    sequence is left marked ``-2 - k`` instead of ``k``.  With the cumulative penalty the step works
    on their features as contiguous runs of ``v``
    (:func:`~crfkit.kernels.oracle.add_bigram_gradient`, :func:`_penalize_run`, :func:`_step_run`)
    instead of a list of indices."""
    t0 = seq_ptr[i]
    t1 = seq_ptr[i + 1]
    if t1 - t0 < 2:
        return 0
    s0 = stamp.shape[0] - (battr_ptr.shape[0] - 1)
    nb = 0
    for t in range(t0 + 1, t1):
        for e in range(btok_ptr[t], btok_ptr[t + 1]):
            b = battr[e]
            m = stamp[s0 + b]
            if m == k:
                stamp[s0 + b] = -2 - k
            elif m != -2 - k:
                stamp[s0 + b] = k
                tb[nb, 0] = b
                tb[nb, 1] = e
                tb[nb, 2] = t - t0
                nb += 1
    return nb


@njit(**_RUN)
def _penalize_run(v, q, u, lo, hi):
    """Figure 2's ApplyPenalty (cumulative, in v units) on the features lo..hi-1:
    :func:`_penalize`'s arithmetic, over a contiguous run (both loads unconditional, so that LLVM
    can vectorise it)."""
    vb = v[lo:hi]  # indices from 0 in a range from 0: no negative-index wrap-around test per access
    qb = q[lo:hi]
    for f in range(vb.shape[0]):
        _penalize_one(vb, qb, u, f, vb[f])


@njit(**_RUN)
def _step_run(v, q, u, lo, c, xi, gold):
    """The gradient of one occurrence (coefficient c, edge marginals xi, the gold pair's 1 taken
    off) and then the cumulative penalty, on the L*L features lo.. of a bigram attribute that has
    every label pair in pair order and occurs once in the sequence: one walk over its weights
    instead of two (the gradient's, then the penalty's), with the arithmetic of
    :func:`~crfkit.kernels.oracle.add_bigram_gradient` followed by :func:`_penalize_run` for every
    weight."""
    n = xi.shape[0]
    vb = v[lo : lo + n]
    qb = q[lo : lo + n]
    for r in range(gold):
        _penalize_one(vb, qb, u, r, vb[r] + c * xi[r])
    z = vb[gold] + c * xi[gold]
    _penalize_one(vb, qb, u, gold, z - c)
    vb = vb[gold + 1 :]
    qb = qb[gold + 1 :]
    xb = xi[gold + 1 :]
    for r in range(xb.shape[0]):
        _penalize_one(vb, qb, u, r, vb[r] + c * xb[r])


@njit(**_NOPY)
def run_steps(
    seq_ptr,
    tok_ptr,
    attr,
    val,
    y,
    attr_ptr,
    feat_label,
    trans_index,
    n_state,
    order,
    start,
    stop,
    k0,
    n_per_pass,
    schedule,
    eta0,
    alpha,
    l1,
    l2,
    penalty,
    v,
    scal,
    last,
    lastk,
    q,
    stamp,
    touched,
    sign,
    node,
    edge,
    full,
    sw,
):
    """Run the steps for samples order[start:stop]; the first is global step k0.  Returns the last
    eta.

    ``scal`` holds [beta, u]; ``last``/``lastk`` (naive, clipping) or ``q``
    (cumulative) are per feature; ``stamp`` (int64, one per attribute, then one
    per bigram attribute, initially -1) marks attributes already listed for the current step;
    ``touched`` and ``sign`` are scratch buffers of at least as many entries as a step lists
    (:func:`crfkit.optim.sgdl1.step_bound`); ``node`` has at
    least as many rows as the longest sequence; ``full``: :func:`crfkit.kernels.chain.full_rows`.
    ``sw``: sample-weight scales per sequence (empty: all 1) multiplying the sample's loss gradient.
    """
    d = v.shape[0]
    eta = 0.0
    for s in range(start, stop):
        k = k0 + (s - start)
        i = order[s]
        eta = rate(schedule, eta0, alpha, k, n_per_pass)
        beta = scal[BETA]
        u = scal[U]
        # the sample's state features, each once, then all transitions (the cumulative penalty takes
        # these as one run after the step); naive and clipping bring them up to date before the
        # oracle reads them
        nt = _list_state(seq_ptr, tok_ptr, attr, attr_ptr, i, k, stamp, touched, 0)
        if penalty != CUMUL:
            for f in range(n_state, d):
                touched[nt] = f
                nt += 1
            _catch_up(penalty, touched, nt, v, u, k, last, lastk, sign)
        sequence_oracle(
            seq_ptr,
            tok_ptr,
            attr,
            val,
            y,
            attr_ptr,
            feat_label,
            trans_index,
            v,
            beta,
            n_state,
            i,
            node,
            edge,
            full,
        )
        beta = beta * (1.0 - eta * l2)
        apply_gradient(
            seq_ptr,
            tok_ptr,
            attr,
            val,
            y,
            attr_ptr,
            feat_label,
            trans_index,
            n_state,
            i,
            node,
            edge,
            -eta * (1.0 if sw.shape[0] == 0 else sw[i]) / beta,
            v,
            full,
        )
        p = eta * l1 / beta
        u = u + p
        _penalize(penalty, touched, nt, v, u, p, k, last, lastk, q, sign)
        if penalty == CUMUL:
            _penalize_run(v, q, u, n_state, d)  # the transitions, one contiguous run
        scal[BETA] = beta
        scal[U] = u
    return eta


@njit(**_NOPY)
def run_steps_bigram(
    seq_ptr,
    tok_ptr,
    attr,
    val,
    y,
    attr_ptr,
    feat_label,
    trans_index,
    n_state,
    btok_ptr,
    battr,
    bval,
    battr_ptr,
    bfeat_pair,
    boff,
    order,
    start,
    stop,
    k0,
    n_per_pass,
    schedule,
    eta0,
    alpha,
    l1,
    l2,
    penalty,
    v,
    scal,
    last,
    lastk,
    q,
    stamp,
    touched,
    sign,
    node,
    edges,
    eflat,
    edge,
    full,
    sw,
    tb,
    bfull,
):
    """:func:`run_steps` for a feature space with bigram-observation features (weights of bigram
    feature k at ``v[boff + k]``; transitions ``n_state:boff``).  A step lists the sample's state
    features, the transitions and the bigram features of its tokens after the first (each once):
    naive and clipping bring them up to date before the oracle
    (:func:`crfkit.kernels.oracle.sequence_oracle_bigram`) reads them, the gradient
    (:func:`~crfkit.kernels.oracle.apply_gradient_bigram`) touches only them, and the penalty goes
    to them after it, so a step costs O(those features), never O(all features).  ``edges`` (at least
    longest sequence x L x L) and ``eflat`` (its view as rows of L*L): per-position edge marginals;
    ``edge``: L x L.  With the cumulative penalty the transitions and the bigram features are not
    listed one by one: the transitions are penalised as one run, and ``tb`` (rows of 3, at least a
    sequence's bigram attribute occurrences) receives the step's bigram attributes, whose features
    are then updated and penalised as contiguous runs of ``v``; ``bfull`` (per bigram attribute: a
    feature for every label pair, in pair order) lets the gradient add whole rows, and for such an
    attribute seen once in the sequence the gradient and the penalty share one walk
    (:func:`_step_run`).  The same arithmetic per weight as listing them (a test compares the two
    step by step)."""
    eta = 0.0
    for s in range(start, stop):
        k = k0 + (s - start)
        i = order[s]
        eta = rate(schedule, eta0, alpha, k, n_per_pass)
        beta = scal[BETA]
        u = scal[U]
        nt = _list_state(seq_ptr, tok_ptr, attr, attr_ptr, i, k, stamp, touched, 0)
        nb = 0
        if penalty == CUMUL:
            nb = _list_bigram_attributes(seq_ptr, btok_ptr, battr, battr_ptr, i, k, stamp, tb)
        else:
            for f in range(n_state, boff):
                touched[nt] = f
                nt += 1
            nt = _list_bigram(seq_ptr, btok_ptr, battr, battr_ptr, boff, i, k, stamp, touched, nt)
            _catch_up(penalty, touched, nt, v, u, k, last, lastk, sign)
        sequence_oracle_bigram(
            seq_ptr,
            tok_ptr,
            attr,
            val,
            y,
            attr_ptr,
            feat_label,
            trans_index,
            btok_ptr,
            battr,
            bval,
            battr_ptr,
            bfeat_pair,
            boff,
            v,
            beta,
            n_state,
            i,
            node,
            edges,
            edge,
            full,
            bfull,
        )
        beta = beta * (1.0 - eta * l2)
        coef = -eta * (1.0 if sw.shape[0] == 0 else sw[i]) / beta
        apply_gradient(
            seq_ptr,
            tok_ptr,
            attr,
            val,
            y,
            attr_ptr,
            feat_label,
            trans_index,
            n_state,
            i,
            node,
            edge,
            coef,
            v,
            full,
        )
        # with the cumulative penalty, a full attribute that occurs once in the sequence takes its
        # gradient in the penalty's walk (_step_run) instead: the gradient here skips it (stamp k:
        # listed, seen once)
        add_bigram_gradient(
            seq_ptr,
            y,
            btok_ptr,
            battr,
            bval,
            battr_ptr,
            bfeat_pair,
            boff,
            i,
            eflat,
            trans_index.shape[0],
            coef,
            v,
            bfull,
            stamp if penalty == CUMUL else stamp[:0],
            k,
        )
        p = eta * l1 / beta
        u = u + p
        _penalize(penalty, touched, nt, v, u, p, k, last, lastk, q, sign)
        if penalty == CUMUL:
            _penalize_run(v, q, u, n_state, boff)  # the transitions, one contiguous run
        if nb > 0:
            s0 = stamp.shape[0] - (battr_ptr.shape[0] - 1)
            t0 = seq_ptr[i]
            L = edge.shape[0]
            for j in range(nb):
                b = tb[j, 0]
                lo = boff + battr_ptr[b]
                if bfull.shape[0] > 0 and bfull[b] and stamp[s0 + b] == k:
                    t = tb[j, 2]
                    _step_run(
                        v, q, u, lo, coef * bval[tb[j, 1]], eflat[t], y[t0 + t - 1] * L + y[t0 + t]
                    )
                else:
                    _penalize_run(v, q, u, lo, boff + battr_ptr[b + 1])
        scal[BETA] = beta
        scal[U] = u
    return eta


@njit(**_NOPY)
def catch_up_all(penalty, v, u, k, last, lastk):
    """Bring every feature up to date (naive, clipping) at step count k."""
    d = v.shape[0]
    _catch_up(
        penalty, np.arange(d), d, v, u, k, last, lastk, np.empty(d if penalty == NAIVE else 1)
    )


@njit(cache=True, nogil=True)  # no fast-math: its count must tell -0.0 (nsz would let it be +0.0)
def fold(v, aux, scal):
    """Fold beta into v: w = beta*v unchanged; u and aux (last or q, in v units) rescaled with it.

    Returns, from the same walk over v (what the end of a pass needs, without three more walks over
    a vector of the candidate space): the number of non-zero weights (``np.count_nonzero(v)``: -0.0
    is zero), the number of weights whose bits are not all zero (-0.0 counted:
    :class:`crfkit.optim.stochastic.Kept`'s count), and whether every weight is finite."""
    b = scal[BETA]
    nz = 0
    nzbits = 0
    finite = True
    for f in range(v.shape[0]):
        x = v[f] * b
        v[f] = x
        aux[f] *= b
        if x != 0.0:
            nz += 1
            nzbits += 1
            if not math.isfinite(x):
                finite = False
        elif math.copysign(1.0, x) < 0.0:
            nzbits += 1
    scal[U] *= b
    scal[BETA] = 1.0
    return nz, nzbits, finite
