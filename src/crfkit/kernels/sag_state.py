"""What a SAG run's kernels share (:mod:`crfkit.kernels.sag`): the method and step-rule codes, the
slots of the scalar state arrays ``fsc``/``isc`` and the run's thresholds; the splitmix64 generator
(one ``uint64`` of state); the sum tree over the per-example ``L_i``; bounds on an example's
occurrences and coordinates for sizing its buffers.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .chain_exp import FAST

_NOPY = dict(cache=True, nogil=True, fastmath=FAST)


# methods
SAG, SAG_NUS, SAG_NUS_STAR, SAGA, SAGA_NUS = 0, 1, 2, 3, 4
# SAGA step rules of Proposition 1
STEP_A, STEP_B = 0, 1
# float scalars: fsc[...]
F_BETA, F_LG, F_STEP, F_LMAX = 0, 1, 2, 3
N_FSC = 4
# int scalars: isc[...]
I_M, I_EVALS, I_T, I_ITER, I_MK = 0, 1, 2, 3, 4
N_ISC = 5
# a window is closed (full catch-up, fold) when beta falls below this
BETA_FLOOR = 1e-100
# Algorithm 1, line 11: the line search runs only when ||g_i||^2 > this
LS_MIN_GNORM2 = 1e-8
LS_MAX_DOUBLINGS = 60
# line-search skipping: at most 2^(this - 1) line searches of one example skipped in a row
LS_SKIP_MAX_STREAK = 20

_U53 = 1.0 / 9007199254740992.0


# --------------------------------------------------------------------- random
@njit(**_NOPY)
def rng_uniform(st):
    """A uniform double in [0, 1) from the splitmix64 generator whose state is ``st[0]``
    (uint64)."""
    st[0] += np.uint64(0x9E3779B97F4A7C15)
    z = st[0]
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return float(z >> np.uint64(11)) * _U53


@njit(**_NOPY)
def rng_below(st, n):
    """A uniform integer in [0, n)."""
    k = int(rng_uniform(st) * n)
    return k if k < n else n - 1


# ------------------------------------------------------------------- sum tree
def tree_size(n: int) -> int:
    """Number of leaves P (a power of two >= n); the tree arrays have 2P entries, leaf i at
    P + i."""
    P = 1
    while P < max(n, 1):
        P *= 2
    return P


@njit(**_NOPY)
def tree_clear(tsum, tmax, tmin):
    for k in range(tsum.shape[0]):
        tsum[k] = 0.0
        tmax[k] = -np.inf
        tmin[k] = np.inf


@njit(**_NOPY)
def tree_set(tsum, tmax, tmin, i, value):
    """Leaf i <- value (value > 0 makes it active); recompute its O(log n) ancestors from their
    children."""
    P = tsum.shape[0] // 2
    k = P + i
    if value > 0.0:
        tsum[k] = value
        tmax[k] = value
        tmin[k] = value
    else:
        tsum[k] = 0.0
        tmax[k] = -np.inf
        tmin[k] = np.inf
    k //= 2
    while k >= 1:
        a = 2 * k
        tsum[k] = tsum[a] + tsum[a + 1]
        tmax[k] = max(tmax[a], tmax[a + 1])
        tmin[k] = min(tmin[a], tmin[a + 1])
        k //= 2


@njit(**_NOPY)
def tree_sample(tsum, u):
    """The leaf whose cumulative-weight interval holds ``u * total`` (u in [0, 1)):
    P(i) = w_i / total."""
    P = tsum.shape[0] // 2
    target = u * tsum[1]
    k = 1
    while k < P:
        a = 2 * k
        if tsum[a + 1] <= 0.0:
            k = a
        elif tsum[a] <= 0.0 or target >= tsum[a]:
            if tsum[a] > 0.0:
                target -= tsum[a]
            k = a + 1
        else:
            k = a
    return k - P


@njit(**_NOPY)
def tree_build(tsum, tmax, tmin, Li):
    """The tree of leaves ``Li`` (0: inactive); the same arrays as setting the leaves one by one."""
    tree_clear(tsum, tmax, tmin)
    for i in range(Li.shape[0]):
        tree_set(tsum, tmax, tmin, i, Li[i])


def max_occurrences(seq_ptr, tok_ptr) -> int:
    """The largest number of attribute occurrences of one sequence (a bound on its distinct
    attributes)."""
    if len(seq_ptr) < 2:
        return 1
    return max(int(np.max(tok_ptr[seq_ptr[1:]] - tok_ptr[seq_ptr[:-1]])), 1)


def max_coordinates(seq_ptr, tok_ptr, attr, attr_ptr, n_trans) -> int:
    """A bound on the coordinates one sequence touches: the features of its attribute occurrences
    (largest over the sequences) plus the transition features; the size of the example-local
    buffers."""
    if len(seq_ptr) < 2:
        return max(int(n_trans), 1)
    cs = np.concatenate(([0], np.cumsum(np.diff(attr_ptr)[attr])))
    per = cs[tok_ptr[seq_ptr[1:]]] - cs[tok_ptr[seq_ptr[:-1]]]
    return max(int(per.max()) + int(n_trans), 1)
