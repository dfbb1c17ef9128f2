"""Numba kernels of CRFsuite's online large-margin learners: passive-aggressive (PA, PA-I, PA-II),
the averaged structured perceptron (AP) and AROW, as ``crfsuite learn -a pa|ap|arow`` runs them.

For sequence ``i`` the Viterbi path ``v`` at the current weights is compared
with the gold path ``y``; when ``d`` (the number of positions where they
differ) is positive, the difference ``delta = Phi(x, y) - Phi(x, v)`` of their
feature vectors is summed per feature (a feature on both paths cancels; only
features of the model count, as CRFsuite's ``features_on_path``), then

* PA: ``cost = s(v) - s(y) + sqrt(d)`` (``error_sensitive``; else ``+ 1``),
  ``tau = cost / |delta|^2`` (type 0), ``min(C, cost / |delta|^2)`` (I),
  ``cost / (|delta|^2 + 1 / (2C))`` (II); ``w += tau delta``;
* AP: ``w += delta``;
* AROW: ``cost = s(v) - s(y) + d``, ``alpha = cost / (gamma + sum delta_k^2
  cov_k)``, ``w_k += alpha cov_k delta_k``, ``cov_k <- 1 / (1/cov_k +
  delta_k^2 / gamma)``.

The average (PA with ``averaging``, AP) is kept lazily with Daume's trick:
``ws += u * (the change of w)`` with ``u`` the 1-based count of sequences seen
(CRFsuite's ``u``/``c``), and the average is ``w - ws / u``.  Work per sequence:
Viterbi plus the features of the sequence and the transitions.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .chain import gold_score
from .chain_exp import FAST
from .chain_viterbi import viterbi
from .occ import emissions, transitions

_NOPY = dict(cache=True, nogil=True, fastmath=FAST)

PA, AP, AROW = 0, 1, 2
# slots of ``scal``: u (sequences seen + 1), the loss summed over the current epoch
U, LOSS = 0, 1


@njit(**_NOPY)
def run_online(
    seq_ptr,
    tok_ptr,
    ok0,
    onk,
    val,
    lab,
    y,
    trans_index,
    n_state,
    n_trans,
    order,
    start,
    stop,
    method,
    pa_type,
    C,
    error_sensitive,
    gamma,
    w,
    ws,
    cov,
    scal,
    dbuf,
    stamp,
    touched,
    path,
    score,
    trans,
    sw,
):
    """Process the sequences ``order[start:stop]`` (see the module docstring).

    ``ok0, onk, lab``: :func:`crfkit.kernels.occ.layout` of the corpus; ``score``
    (longest sequence x L) and ``trans`` (L x L): scratch.

    ``ws`` (pa, ap) and ``cov`` (arow): one entry per feature (no bounds checks here).
    ``scal`` = [u, loss]: carried on.  ``dbuf``: zeros, one per feature (left
    zero); ``stamp``: int64 per feature, initially -1; ``touched``: int64
    scratch of n_features; ``path``: int64 scratch of the longest sequence.
    ``sw``: sample-weight scales per sequence (empty: all 1): AP's update is
    multiplied by the sequence's scale, PA-I/PA-II's ``C`` too (AROW and PA
    type 0 take no weights: the caller refuses them).
    """
    L = trans_index.shape[0]
    u = scal[U]
    total = scal[LOSS]
    for s in range(start, stop):
        i = order[s]
        t0 = seq_ptr[i]
        T = seq_ptr[i + 1] - t0
        wi = 1.0 if sw.shape[0] == 0 else sw[i]
        if T > 0 and wi > 0.0:
            emissions(tok_ptr, ok0, onk, val, lab, t0, t0 + T, w, 1.0, score)
            transitions(w, 1.0, n_state, trans_index, trans)
            sv = viterbi(score, T, trans, path, 0)
            d = 0
            for t in range(T):
                if path[t] != y[t0 + t]:
                    d += 1
            if d > 0:
                sc = gold_score(score, y, t0, T, trans)
                # delta = Phi(gold) - Phi(viterbi): a token whose Viterbi label is the gold one adds
                # nothing to the state features, so only the d wrong tokens are walked (here, for
                # the touched list and for the reset): per occurrence, +val on the gold label's
                # feature, -val on the predicted label's (labels without a feature for this
                # attribute are not in the model)
                for t in range(T):
                    yt = y[t0 + t]
                    pt = path[t]
                    if pt == yt:
                        continue
                    for e in range(tok_ptr[t0 + t], tok_ptr[t0 + t + 1]):
                        k0 = ok0[e]
                        nk = onk[e] if onk[e] >= 0 else L
                        x = val[e]
                        for k in range(k0, k0 + nk):
                            lk = lab[k]
                            if lk == yt:
                                dbuf[k] += x
                            elif lk == pt:
                                dbuf[k] -= x
                for t in range(1, T):
                    ga = y[t0 + t - 1]
                    gb = y[t0 + t]
                    va = path[t - 1]
                    vb = path[t]
                    if ga != va or gb != vb:
                        k = trans_index[ga, gb]
                        if k >= 0:
                            dbuf[n_state + k] += 1.0
                        k = trans_index[va, vb]
                        if k >= 0:
                            dbuf[n_state + k] -= 1.0
                nt = 0
                mark = np.int64(u)
                for t in range(T):
                    if path[t] == y[t0 + t]:
                        continue
                    for e in range(tok_ptr[t0 + t], tok_ptr[t0 + t + 1]):
                        k0 = ok0[e]
                        nk = onk[e] if onk[e] >= 0 else L
                        for k in range(k0, k0 + nk):
                            if stamp[k] != mark:
                                stamp[k] = mark
                                if dbuf[k] != 0.0:
                                    touched[nt] = k
                                    nt += 1
                for k in range(n_state, n_state + n_trans):
                    if dbuf[k] != 0.0:
                        touched[nt] = k
                        nt += 1
                if method == AP:
                    for j in range(nt):
                        k = touched[j]
                        w[k] += wi * dbuf[k]
                        ws[k] += u * wi * dbuf[k]
                    total += wi * d / T
                elif method == PA:
                    cost = sv - sc + (math.sqrt(d) if error_sensitive else 1.0)
                    norm2 = 0.0
                    for j in range(nt):
                        norm2 += dbuf[touched[j]] * dbuf[touched[j]]
                    if norm2 > 0.0:
                        if pa_type == 0:
                            tau = cost / norm2
                        elif pa_type == 1:
                            tau = min(C * wi, cost / norm2)
                        else:
                            tau = cost / (norm2 + 0.5 / (C * wi))
                        for j in range(nt):
                            k = touched[j]
                            w[k] += tau * dbuf[k]
                            ws[k] += tau * u * dbuf[k]
                    total += wi * cost
                else:
                    cost = sv - sc + d
                    frac = gamma
                    for j in range(nt):
                        k = touched[j]
                        frac += dbuf[k] * dbuf[k] * cov[k]
                    alpha = cost / frac
                    for j in range(nt):
                        k = touched[j]
                        w[k] += alpha * cov[k] * dbuf[k]
                        cov[k] = 1.0 / (1.0 / cov[k] + (1.0 / gamma) * (dbuf[k] * dbuf[k]))
                    total += cost
                # reset the buffer (the features of the wrong tokens and the transitions)
                for t in range(T):
                    if path[t] == y[t0 + t]:
                        continue
                    for e in range(tok_ptr[t0 + t], tok_ptr[t0 + t + 1]):
                        k0 = ok0[e]
                        nk = onk[e] if onk[e] >= 0 else L
                        for k in range(k0, k0 + nk):
                            dbuf[k] = 0.0
                for k in range(n_state, n_state + n_trans):
                    dbuf[k] = 0.0
        u += 1.0
    scal[U] = u
    scal[LOSS] = total


@njit(**_NOPY)
def average(w, ws, u, out):
    """out = w - ws / u (CRFsuite's averaged weights)."""
    for k in range(w.shape[0]):
        out[k] = w[k] - ws[k] / u
