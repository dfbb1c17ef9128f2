"""Block coordinate descent for the elastic-net CRF objective (Lavergne, Cappé & Yvon 2010, §3.4;
Sokolovska, Lavergne, Cappé & Yvon 2010).

Objective: ``f(w) = (1/n) sum_i nll_i(w) + (l2/2)|w|^2 + l1|w|_1`` (DESIGN.md).

Blocks.  One block per attribute (observation test) ``a``: its state features
``attr_ptr[a]:attr_ptr[a+1]`` (one per label seen with it), and one block for
all the transition features.  With label-pair x observation ("bigram")
features, also one block per bigram attribute ``b``: its label-pair features
``bigram_offset + battr_ptr[b]:...`` (every pair with ``--support all``, the
pairs seen in training with the observed support) -- ``blocks="separate"``,
the default.  ``blocks="joint"`` makes one block per *observation*, as
Wapiti: a state attribute and the bigram attribute of the same name (a
Wapiti ``*`` pattern makes both) share a block (see :func:`joint_index`).
A joint block needs one forward-backward and one line search where two
separate blocks need two, but its diagonal leaves out the strong coupling
of its two parts (at a position, raising label ``y`` and raising every pair
``(i, y)`` move the same marginal), so its steps overshoot and are cut back:
measured on NETtalk (Wapiti's feature space, one thread), joint sweeps cost
0.65-0.7x as much and gain less, separate blocks reach a given objective
sooner (1-grm: 65,571 after 3 sweeps in 172 s against 64,477 after 5 in
195 s; 3-grm: 57,755 after 2 sweeps in 207 s against 63,730 after 3 in 217 s),
hence the default.

Attribute block update (eq. 9-11).  With ``g_k`` the gradient of the loss part
``(1/n) sum_i nll_i`` and ``h_k`` its second derivative approximated as the
paper does -- only the diagonal of the block's Hessian, and within it the sum
over the occurrences of the per-position variances ``v^2 p_t(y)(1 - p_t(y))``
(exact when the attribute occurs at most once per sequence; the covariances
between two occurrences in one sequence are left out) -- times ``kappa``::

    w_k <- s(h_k w_k - g_k, l1) / (h_k + l2)          (s: soft-thresholding, eq. 11)

which is eq. (10) with the L2 term kept exactly in the quadratic model.  For a
label-pair feature ``(b, i, j)`` the same with the edge marginals: ``g`` sums
``v (p_t(i, j) - 1[y_{t-1} = i, y_t = j])`` over the occurrences of ``b`` at
positions ``t >= 1`` (the first token has no incoming transition) and ``h`` the
``v^2 p_t(i, j)(1 - p_t(i, j))``, times ``kappa``.  A joint block takes the
step on both parts at once, with one Armijo backtracking.  The
marginals come from forward-backward on the sequences containing ``a`` only
(inverted index attribute -> sequences -> positions), with the truncated
recursions of §4.1: forward over ``0..t_last``, backward over
``T-1..t_first`` where ``t_first``/``t_last`` are the first/last occurrence
of ``a`` in the sequence -- exact, about half the work for an attribute that
occurs once.  (The "window around the occurrences where the marginals
outside have converged" variant is *not* implemented: it would approximate;
this one is exact.)  Beyond the paper, the messages are kept between blocks:
every token's last forward and backward message, with per sequence the last
position where each is still that of the current weights.  A block's step
changes the emissions (and, for label-pair features, the transition rows) at
its occurrences only, so it leaves the forward messages before its first
occurrence and the backward ones from its last on valid; the next block on
that sequence crosses only the positions in between (about a third of a
sequence on average, against a whole one) and, with label-pair features,
builds only their transition rows.  Exact too: the kept messages are what a
recursion from the start would give, to the bit.  Memory: 2 x tokens x labels
doubles.

Safeguard.  The block step ``d`` is scaled by ``step = min(1, max_step /
max|d|)`` and halved (at most ``max_back`` times) until the exact change of
the objective satisfies ``F(w + step d) - F(w) <= sigma * step * Delta`` where
``Delta = g.d + penalty change`` is the decrease the model predicts (Tseng &
Yun's Armijo rule for coordinate gradient descent): the objective never
increases, and the method converges to the optimum.  Each trial needs the
new ``log Z`` of the touched sequences only, and only over the window
``t_first..t_last`` (the forward message before it and the backward message
after it are unchanged and kept from the gradient pass).  A block whose
predicted decrease is below rounding level is left alone.

``safeguard="scale"`` replaces the line search by Wapiti's rule (Wapiti 1.5.0's
BCD, the paper's tool): a block's curvatures are multiplied by ``a = max(1,
max_k |g_k / h_k|)`` (per part: state features, label-pair features; ``h_k =
0`` left out of the maximum, where Wapiti's would be infinite) before the step
of eq. (10) is taken, whole, with no trial: no coordinate's Newton step
exceeds ``1 / kappa`` before the penalties, and a block costs one
forward-backward of its sequences instead of that plus at least one trial.
The transitions take one such step per sweep by default (``trans_steps=1``:
Wapiti's transitions are the label-pair block of its ``*`` observation,
visited once a sweep like every block).  The objective is not guaranteed to
decrease block by block (no convergence proof).  Which rule lowers it faster
depends on the problem: NETtalk in Wapiti's space, 5 sweeps, one thread (sum
form; README, "BCD with label-pair x observation features"): at 3-grm the
scaled rule reaches 35,573 (separate blocks) and 35,695 (joint) against the
Armijo rule's 44,680 (Wapiti 35,518), at 0.44x / 0.30x its time (82.1 s and
56.2 s against 186.9 s, with the messages kept between blocks); at 1-grm it
stays with Wapiti's far-from-converged 91,383 (89,930 / 91,706) where the
Armijo rule reaches 58,551.  Hence Armijo stays the default.  ``log Z`` of
the touched sequences is not updated by scaled steps; the driver recomputes
the caches after the sweep (one forward pass of the corpus, counted in the
oracle calls).

Defaults measured on the first 800 CoNLL-2000 training sentences (c1 = c2 = 1,
gap to OWL-QN's objective after 12 sweeps): ``kappa`` 1.0 -> 3.2%, 1.5 -> 2.1%
(with ``trans_steps=4``, ``max_step=100``; 2.5 -> 5.3%, 4.0 -> 11.6%): the
per-position diagonal underestimates the curvature of the frequent, repeated
attributes, and damping it by 1.5 avoids the
zigzag.  ``trans_steps`` 1 -> 4 and ``max_step`` 10 -> 100 each helped too.

Transition block: ``trans_steps`` (default 4) such diagonal prox-Newton steps
at the start of every sweep, each on a full forward-backward of all sequences
(multi-threaded) with its own Armijo backtracking (forward passes only).
Diagonal: ``sum_t p_t(i,j)(1 - p_t(i,j))``.

Caches: emission scores of every token (and their exponentials), ``log Z``
of every sequence, the kept messages.  An accepted block step updates the
emission rows of its occurrences, the ``log Z`` of its sequences and their
messages' validity; a change of the transitions marks every message stale.
Every sweep starts by
recomputing all caches from the weights, so rounding cannot drift across
sweeps and a run resumed from the weights of sweep k is bitwise the
uninterrupted run.

Sweeps.  ``max_iterations`` sweeps (default 50); a sweep is the transition
step(s), then every attribute block once, in a random order drawn from
``(seed, sweep)`` (``order="random"``) or in attribute order (``"cyclic"``).
Stops (status ``converged``) when the relative decrease of the objective over
``period`` sweeps falls below ``delta`` (``(f[k-period] - f[k]) / |f[k]| <
delta``; ``delta=0`` never) on a sweep that visited every block.

Shrinking (not in the paper; the active-set heuristic of coordinate descent
for L1 problems, e.g. Yuan et al. 2010): with an L1 term most blocks sit at
zero with ``|g_k| <= l1``, yet each visit costs forward-backward on all their
sequences.  A block found at zero and left there for the ``r``-th time in a
row skips its next ``min(2^(r-1), shrink)`` visits (default ``shrink=8``;
0: off).  When the stopping rule fires on a sweep that skipped blocks, the
next sweep visits all of them and the rule is tested again, so a run only
stops after a full sweep.  The objective used for the rule is the exact
value held by the caches at the end of the sweep; ``monitor=True`` (default)
also evaluates ``obj.value`` for the callback's ``f`` (time reported as
``monitor_s``).

Effective passes: a block's forward-backward on a sequence and each trial's
window forward on it count as one oracle call each; the transition step's
full forward-backward and each of its trial forward passes count as one full
evaluation.

Sample weights (``obj.sw``, the scales ``omega_i n / W``): every sequence's contribution to a
block's gradient and curvature, to the change of log Z a trial step makes, and to the transition
statistics is multiplied by its scale (the empirical counts are the objective's, already weighted),
so the blocks minimise the weighted objective exactly.

Position-dependent transitions (bigram features).  The transition scores into token ``t`` are then
``M_t = trans + sum over the bigram attributes b at t of v_b W_b``.  Nothing per position is cached
(a dense float64 ``exp(M_t)`` for every training position is ``n_tokens x L^2 x 8`` bytes, 2.7 GB on
NETtalk 3-grm): the kernels build, for the sequence a block's forward-backward or trial visits, the
rows of the positions they need from the weights, into scratch of ``Tmax x L^2`` (exponentials taken
again only at the pairs that non-zero bigram weights touch, from ``exp(trans - max)``, when those
are few).  A trial step of a joint block changes the emissions at its state occurrences and ``M_t``
at its label-pair occurrences, inside the same window.  The transition block's statistics and trial
log Z's run on the per-position ``M_t`` (its step moves ``trans``, which every ``M_t`` holds).
Weights that make a row ``M_t`` span more than ``MAX_SCALED_TRANSITION_RANGE`` are refused by the
safeguard (the scaled recursions could not represent them); the caches check every row when they are
made.

Dense real-valued feature blocks are refused (CrfkitError).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from ..errors import CrfkitError, ParameterError
from ..kernels import bcd as K
from ..kernels.chain import MAX_SCALED_TRANSITION_RANGE, emissions
from ..kernels.vec import all_finite
from ..memtrim import lazy_copy, lazy_zeros
from ..objective import l1_norm
from .stochastic import StochasticResult, last_completed, notify, state_function

DEFAULT_SWEEPS = 50
ORDERS = ("random", "cyclic")
BLOCKS = ("separate", "joint")
SAFEGUARDS = ("armijo", "scale")
CHUNK = 4096  # blocks per numba call (Ctrl-C is seen between calls)
SKIP_EPS = (
    1e-15  # a block's predicted decrease below this x |log Z| x (its sequences / n): left alone
)


@dataclass
class Index:
    """Inverted index attribute -> sequences -> occurrences (see crfkit.kernels.bcd)."""

    ap: np.ndarray  # (n_attr+1,) groups of attribute a: ap[a]:ap[a+1]
    gseq: np.ndarray  # sequence of each group
    gptr: np.ndarray  # occurrences of group g: gptr[g]:gptr[g+1]
    otok: np.ndarray  # global token index of each occurrence (ascending within a group)
    oval: np.ndarray  # attribute value at the occurrence (entries of one token merged)

    def sequences(self, a: int) -> np.ndarray:
        return self.gseq[self.ap[a] : self.ap[a + 1]]

    def occurrences(self, a: int) -> tuple[np.ndarray, np.ndarray]:
        o0, o1 = self.gptr[self.ap[a]], self.gptr[self.ap[a + 1]]
        return self.otok[o0:o1], self.oval[o0:o1]


def inverted_index(corpus, n_attributes: int) -> Index:
    return Index(
        *K.build_index(corpus.seq_ptr, corpus.tok_ptr, corpus.attr, corpus.val, int(n_attributes))
    )


def bigram_index(corpus, n_battributes: int) -> Index:
    """Inverted index of the bigram (label-pair x observation) attributes: bigram
    attribute -> sequences -> occurrences, leaving out the first token of every sequence (no
    transition enters it, so its bigram attributes are ignored, as everywhere)."""
    btok_ptr, battr, bval = corpus.bigram_arrays()
    nt = corpus.n_tokens
    if battr.shape[0] == 0:
        btok_ptr = np.zeros(nt + 1, np.int64)
    else:
        counts = np.diff(btok_ptr)
        first = np.zeros(nt, bool)
        first[corpus.seq_ptr[:-1][corpus.seq_ptr[:-1] < nt]] = True
        keep = np.repeat(~first, counts)
        counts = np.where(first, 0, counts)
        btok_ptr = np.zeros(nt + 1, np.int64)
        np.cumsum(counts, out=btok_ptr[1:])
        battr, bval = battr[keep], bval[keep]
    return Index(
        *K.build_index(
            corpus.seq_ptr,
            btok_ptr,
            np.ascontiguousarray(battr, np.int32),
            np.ascontiguousarray(bval, np.float64),
            int(n_battributes),
        )
    )


@dataclass
class JointIndex(Index):
    """Inverted index of the joint blocks (feature spaces with label-pair x observation features):
    block ``j`` holds the state features of attribute ``ua[j]`` and the label-pair features of
    bigram attribute ``ub[j]`` (-1: none); its occurrences carry ``okind`` 0 (state attribute at the
    token) or 1 (bigram attribute at the token), in token order, the state one first at a token that
    has both."""

    okind: np.ndarray = None
    ua: np.ndarray = None
    ub: np.ndarray = None
    block_of_battr: np.ndarray = None  # the joint block of every bigram attribute


def joint_index(corpus, space, blocks: str = "joint") -> JointIndex:
    """``blocks="joint"``: one block per observation, as Wapiti: a state attribute and a bigram
    attribute with the same name (a Wapiti ``*`` pattern makes both) share a block; the other
    attributes have blocks of their own.  ``"separate"``: every state attribute and every bigram
    attribute a block of its own.  Blocks ``0..n_attributes-1`` are the state attributes (with their
    bigram twin, if any), then the bigram attributes without a twin, in their order."""
    na, nb = space.n_attributes, space.n_battributes
    uix = inverted_index(corpus, na)
    bix = bigram_index(corpus, nb)
    if blocks == "joint":
        aidx = space.attr_index
        twin = np.fromiter(
            (aidx.get(name, -1) for name in space.battributes), dtype=np.int64, count=nb
        )
    else:
        twin = np.full(nb, -1, np.int64)
    lone = np.flatnonzero(twin < 0)
    block_of_battr = twin.copy()
    block_of_battr[lone] = na + np.arange(len(lone), dtype=np.int64)
    nblk = na + len(lone)
    ua = np.full(nblk, -1, np.int64)
    ua[:na] = np.arange(na)
    ub = np.full(nblk, -1, np.int64)
    ub[block_of_battr] = np.arange(nb, dtype=np.int64)

    def occ(ix, blocks):
        # per occurrence: its block, its sequence (from its group)
        ng = np.diff(ix.ap)
        gblk = np.repeat(blocks, ng)
        no = np.diff(ix.gptr)
        return np.repeat(gblk, no), np.repeat(ix.gseq, no)

    ublk, useq = occ(uix, np.arange(na, dtype=np.int64))
    bblk, bseq = occ(bix, block_of_battr)
    blk = np.concatenate([ublk, bblk])
    seq = np.concatenate([useq, bseq])
    tok = np.concatenate([uix.otok, bix.otok])
    val = np.concatenate([uix.oval, bix.oval])
    kind = np.concatenate([np.zeros(len(ublk), np.int8), np.ones(len(bblk), np.int8)])
    del uix, bix, ublk, useq, bblk, bseq
    order = np.lexsort((kind, tok, blk))
    blk, seq, tok, val, kind = blk[order], seq[order], tok[order], val[order], kind[order]
    del order
    # groups: runs of (block, sequence); tokens of a sequence are contiguous and sequences in order
    new = np.ones(len(blk), bool)
    if len(blk):
        new[1:] = (blk[1:] != blk[:-1]) | (seq[1:] != seq[:-1])
    gstart = np.flatnonzero(new)
    gptr = np.append(gstart, len(blk)).astype(np.int64)
    gseq = seq[gstart].astype(np.int64)
    ap = np.zeros(nblk + 1, np.int64)
    np.cumsum(np.bincount(blk[gstart], minlength=nblk), out=ap[1:])
    return JointIndex(
        ap,
        gseq,
        gptr,
        np.ascontiguousarray(tok, np.int64),
        np.ascontiguousarray(val, np.float64),
        okind=np.ascontiguousarray(kind),
        ua=ua,
        ub=ub,
        block_of_battr=block_of_battr,
    )


def block_order(seed: int, sweep: int, n_attr: int, order: str = "random") -> np.ndarray:
    """The attribute blocks of sweep ``sweep`` (from 0), in visiting order (``n_attr``: the number
    of blocks, state attributes then bigram attributes)."""
    if order == "cyclic":
        return np.arange(n_attr, dtype=np.int64)
    return (
        np.random.default_rng([int(seed) & 0xFFFFFFFF, int(sweep)])
        .permutation(n_attr)
        .astype(np.int64)
    )


class Engine:
    """Caches and scratch of one BCD run."""

    def __init__(self, obj, w: np.ndarray, blocks: str = "separate"):
        c, s = obj.corpus, obj.space
        if getattr(s, "n_dense", 0) > 0:
            raise CrfkitError("bcd does not support dense features (its blocks are attribute rows)")
        self.obj, self.c, self.s = obj, c, s
        self.n, self.L, self.ns = obj.n, s.n_labels, s.n_state
        self.inv_n = 1.0 / obj.n
        self.w = w
        # label-pair x observation features: joint blocks (one per observation), position-dependent
        # transitions
        self.bigram = s.n_bigram > 0
        # per bigram attribute: 1 where its label-pair features are every pair in order (added as
        # one vector)
        self.bfull = s.bigram_full_rows if self.bigram else np.zeros(0, np.int8)
        # the pairs the kernels read for rows not taken as vectors: none when every row is full (an
        # implicit bfeat_pair, ALL_PAIRS, is then never made: kernels.chain.pair_of); bfull and
        # bpair go together
        self.bpair = s.pairs_for_full_rows if self.bigram else np.zeros(0, np.int16)
        self._set_empirical_counts(obj)
        self.index = joint_index(c, s, blocks) if self.bigram else inverted_index(c, s.n_attributes)
        self.n_blocks = len(self.index.ap) - 1
        nt, L = c.n_tokens, s.n_labels
        self.Tmax = max(int(c.max_length), 1)
        self.E = np.zeros((nt, L))
        self.ES = np.zeros((nt, L))
        self.EM = np.zeros(nt)
        self.lz = np.zeros(self.n)
        self.trans = np.zeros((L, L))
        self.expM = np.ones((L, L))
        self.tmax = 0.0
        gmax = int(np.diff(self.index.ap).max()) if self.n_blocks else 0
        if self.bigram:
            ix = self.index
            nku = np.where(
                ix.ua >= 0, np.diff(s.attr_ptr)[np.maximum(ix.ua, 0)] if s.n_attributes else 0, 0
            )
            nkp = np.where(
                ix.ub >= 0, np.diff(s.battr_ptr)[np.maximum(ix.ub, 0)] if s.n_battributes else 0, 0
            )
            kmax = int((nku + nkp).max()) if self.n_blocks else 0
        else:
            kmax = int(np.diff(s.attr_ptr).max()) if s.n_attributes else 0
        T = self.Tmax
        # the block kernels' scratch: tmp (L); per group A0, LA0, B1, LB1, LZ0, NLZ; per feature G,
        # H, d; dl, cur, nxt, es (L)
        self.scratch = (
            np.empty(L),
            np.empty((gmax, L)),
            np.empty(gmax),
            np.empty((gmax, L)),
            np.empty(gmax),
            np.empty(gmax),
            np.empty(gmax),
            np.empty(kmax),
            np.empty(kmax),
            np.empty(kmax),
            np.empty(L),
            np.empty(L),
            np.empty(L),
            np.empty(L),
        )
        # transition features in the order of their weights
        ti, tj = np.nonzero(s.trans_index >= 0)
        korder = np.argsort(s.trans_index[ti, tj], kind="stable")
        self.ti, self.tj = ti[korder], tj[korder]
        # every sequence's forward and backward messages, kept between blocks (block_grad,
        # block_grad_joint): a block's recursions start where the last change to the sequence left
        # them valid
        self.msg = (
            np.zeros((nt, L)),
            np.zeros(nt),
            np.zeros((nt, L)),
            np.zeros(nt),
            np.full(self.n, -1, np.int64),
            np.diff(c.seq_ptr).astype(np.int64),
        )
        nc = len(obj.bounds) - 1
        self.EC = np.zeros((nc, L, L))
        self.SQ = np.zeros((nc, L, L))
        if self.bigram:
            LL = L * L
            # per-call scratch of the position-dependent kernels: one sequence's transition rows (no
            # cache of every position: Tmax x L^2, not n_tokens x L^2), the label-pair direction
            self.pd_scratch = (
                np.zeros(LL),
                np.zeros(LL, np.int64),
                np.empty((T, LL)),
                np.empty((T, LL)),
                np.empty(T),
            )
            self.rngs = np.zeros(nc)

    def _set_empirical_counts(self, obj) -> None:
        """``emp``: the empirical counts, dense; with label-pair features dense only up to the
        label-pair part (state and transition features), the label-pair part kept as its non-zero
        counts: ``evl`` at the label-pair indices ``erel`` (relative to ``bigram_offset``,
        ascending), bigram attribute ``b``'s being ``eptr[b]:eptr[b+1]``.  In Wapiti's feature space
        nearly all of the candidates are label pairs, and most never fire with an observation's gold
        labels, so the dense vector would be a candidate-space vector (114 MB at NETtalk 3-grm) of
        zeros."""
        s = self.s
        if not self.bigram:
            self.emp = obj.empirical_counts
            self.eptr = np.zeros(1, np.int64)
            self.erel = np.zeros(0, np.int64)
            self.evl = np.zeros(0)
            self.ebuf = np.zeros(0)
            return
        boff = s.bigram_offset
        dense, idx, val = obj._emp_args()  # in a large candidate space the non-zero counts only
        if dense.shape[0]:
            idx = np.flatnonzero(dense)
            val = dense[idx]
        head = idx < boff
        self.emp = np.zeros(boff)
        self.emp[idx[head]] = val[head]
        self.erel = (idx[~head] - boff).astype(np.int64)
        self.eptr = np.searchsorted(self.erel, s.battr_ptr, side="left").astype(np.int64)
        self.evl = np.ascontiguousarray(val[~head], dtype=np.float64)
        self.ebuf = np.zeros(max(int(np.diff(s.battr_ptr).max(initial=0)), 1))

    def empirical(self, ks: np.ndarray) -> np.ndarray:
        """The empirical counts of features ``ks`` (any indices)."""
        ks = np.asarray(ks, dtype=np.int64)
        boff = len(self.emp)
        head = ks < boff
        out = np.zeros(len(ks))
        out[head] = self.emp[ks[head]]
        rel = ks[~head] - boff
        i = np.minimum(np.searchsorted(self.erel, rel), max(len(self.erel) - 1, 0))
        hit = self.erel[i] == rel if len(self.erel) else np.zeros(len(rel), bool)
        out[np.flatnonzero(~head)[hit]] = self.evl[i[hit]]
        return out

    def emp_dot(self, w: np.ndarray) -> float:
        """<w, empirical counts>."""
        boff = len(self.emp)
        return float(np.dot(w[:boff], self.emp)) + float(np.dot(w[boff + self.erel], self.evl))

    # -------------------------------------------------------------- caches
    def _invalidate_messages(self) -> None:
        """Mark every sequence's kept messages stale (the transitions, or all weights, change)."""
        self.msg[4][:] = -1
        self.msg[5][:] = np.diff(self.c.seq_ptr)

    def _set_transitions(self, wt_full: np.ndarray) -> bool:
        self._invalidate_messages()
        tmax, tmin = K.transition_scores(wt_full, self.ns, self.s.trans_index, self.trans)
        if tmax - tmin > MAX_SCALED_TRANSITION_RANGE:
            return False
        self.tmax = float(tmax)
        np.exp(self.trans - tmax, out=self.expM)
        return True

    def refresh(self) -> None:
        """All caches from the weights: emissions, their exponentials, transitions, log Z."""
        c, s = self.c, self.s
        emissions(
            c.tok_ptr, c.attr, c.val, 0, c.n_tokens, s.attr_ptr, s.feat_label, self.w, 1.0, self.E
        )
        K.exp_rows(self.E, self.ES, self.EM)
        if not self._set_transitions(self.w):
            raise CrfkitError(
                f"bcd: the transition scores span more than {MAX_SCALED_TRANSITION_RANGE:g}; the "
                "scaled recursions cannot represent them (use lbfgs/owlqn)"
            )
        if self.bigram:
            if not self._all_logz_pd(self.w, self.lz):
                raise CrfkitError(
                    f"bcd: the transition scores of a position (transitions plus label-pair x "
                    f"observation weights) span more than {MAX_SCALED_TRANSITION_RANGE:g}; the "
                    "scaled recursions cannot represent them (use lbfgs/owlqn)"
                )
        else:
            K.all_logz(
                c.seq_ptr,
                self.obj.bounds,
                self.Tmax,
                self.ES,
                self.EM,
                self.expM,
                self.tmax,
                self.lz,
            )
        self.obj.n_full += 1

    def _bargs(self, w):
        c, s = self.c, self.s
        return c.bigram_arrays() + (
            s.battr_ptr,
            self.bpair,
            self.bfull,
            w,
            s.bigram_offset,
            self.trans,
            self.expM,
            self.tmax,
        )

    def _all_logz_pd(self, w, out) -> bool:
        """out = log Z of every sequence at weights w (transitions as set); False when a position's
        transition scores span more than the scaled recursions allow."""
        c = self.c
        K.all_logz_pd(
            c.seq_ptr, self.obj.bounds, self.Tmax, self.ES, self.EM, *self._bargs(w), out, self.rngs
        )
        return bool(self.rngs.max(initial=0.0) <= MAX_SCALED_TRANSITION_RANGE)

    def objective(self) -> float:
        """f(w) from the caches (exact while they are coherent)."""
        w = self.w
        reg = self.obj.reg
        f = (self._lz_sum(self.lz) - self.emp_dot(w)) * self.inv_n
        if reg.l2:
            f += 0.5 * reg.l2 * float(np.dot(w, w))
        if reg.l1:
            f += reg.l1 * l1_norm(w)
        return f

    def _lz_sum(self, lz: np.ndarray) -> float:
        """sum_i s_i lz_i (s_i = omega_i n / W, the sample-weight scales; 1 without weights)."""
        sw = self.obj.sw
        return float(lz.sum()) if sw.shape[0] == 0 else float(np.dot(sw, lz))

    # -------------------------------------------------------------- derivatives
    def attribute_derivatives(self, a: int, l2: float) -> tuple[np.ndarray, np.ndarray]:
        """Block gradient and diagonal curvature of the smooth part (loss + L2) for attribute
        ``a``."""
        ix, c, s = self.index, self.c, self.s
        sc = self.scratch
        k0, k1 = int(s.attr_ptr[a]), int(s.attr_ptr[a + 1])
        if self.bigram:
            return self.block_derivatives(a, l2, part=0)
        G, H = np.zeros(max(k1 - k0, 1)), np.zeros(max(k1 - k0, 1))
        if ix.ap[a + 1] > ix.ap[a]:
            K.block_grad(
                int(a),
                ix.ap,
                ix.gseq,
                ix.gptr,
                ix.otok,
                ix.oval,
                c.seq_ptr,
                s.attr_ptr,
                s.feat_label,
                self.ES,
                self.EM,
                self.expM,
                self.tmax,
                *self.msg,
                *sc[:6],
                G,
                H,
                self.obj.sw,
            )
        G, H = G[: k1 - k0], H[: k1 - k0]
        g = (G - self.emp[k0:k1]) * self.inv_n + l2 * self.w[k0:k1]
        return g, H * self.inv_n + l2

    def block_derivatives(self, j: int, l2: float, part: int | None = None):
        """Gradient and diagonal curvature of the smooth part for joint block ``j`` (feature spaces
        with label-pair features): ``part`` 0 its state features, 1 its label-pair features, None
        both (state part first); returns (g, h), or with ``part=None`` (feature indices, g, h)."""
        s, ix, sc, pd = self.s, self.index, self.scratch, self.pd_scratch
        a, b = int(ix.ua[j]), int(ix.ub[j])
        ku = np.arange(s.attr_ptr[a], s.attr_ptr[a + 1]) if a >= 0 else np.zeros(0, np.int64)
        kp = (
            (s.bigram_offset + np.arange(s.battr_ptr[b], s.battr_ptr[b + 1]))
            if b >= 0
            else np.zeros(0, np.int64)
        )
        ks = np.concatenate([ku, kp])
        G, H = np.zeros(max(len(ks), 1)), np.zeros(max(len(ks), 1))
        if ix.ap[j + 1] > ix.ap[j]:
            K.block_grad_joint(
                int(j),
                ix.ap,
                ix.gseq,
                ix.gptr,
                ix.otok,
                ix.oval,
                ix.okind,
                ix.ua,
                ix.ub,
                s.attr_ptr,
                s.feat_label,
                self.c.seq_ptr,
                self.ES,
                self.EM,
                *self._bargs(self.w),
                pd[2],
                pd[3],
                pd[4],
                *self.msg,
                *sc[:6],
                G,
                H,
                self.obj.sw,
            )
        G, H = G[: len(ks)], H[: len(ks)]
        g = (G - self.empirical(ks)) * self.inv_n + l2 * self.w[ks]
        h = H * self.inv_n + l2
        if part is None:
            return ks, g, h
        sl = slice(0, len(ku)) if part == 0 else slice(len(ku), len(ks))
        return g[sl], h[sl]

    def bigram_derivatives(self, b: int, l2: float) -> tuple[np.ndarray, np.ndarray]:
        """Block gradient and diagonal curvature of the smooth part for the label-pair features of
        bigram attribute ``b`` (``bigram_offset + battr_ptr[b]:...``), from the forward-backward of
        its joint block."""
        return self.block_derivatives(int(self.index.block_of_battr[b]), l2, part=1)

    def _transition_sums(self) -> tuple[np.ndarray, np.ndarray]:
        if self.bigram:
            K.transition_stats_pd(
                self.c.seq_ptr,
                self.obj.bounds,
                self.Tmax,
                self.ES,
                self.EM,
                *self._bargs(self.w)[:-3],
                self.trans,
                self.expM,
                self.tmax,
                self.lz,
                self.EC,
                self.SQ,
                self.obj.sw,
            )
            self.obj.n_full += 1
            ec, sq = self.EC.sum(axis=0), self.SQ.sum(axis=0)
            return ec[self.ti, self.tj], ec[self.ti, self.tj] - sq[self.ti, self.tj]
        K.transition_stats(
            self.c.seq_ptr,
            self.obj.bounds,
            self.Tmax,
            self.ES,
            self.EM,
            self.expM,
            self.tmax,
            self.lz,
            self.EC,
            self.SQ,
            self.obj.sw,
        )
        self.obj.n_full += 1
        ec, sq = self.EC.sum(axis=0), self.SQ.sum(axis=0)
        return ec[self.ti, self.tj], ec[self.ti, self.tj] - sq[self.ti, self.tj]

    def transition_derivatives(self, l2: float) -> tuple[np.ndarray, np.ndarray]:
        """Gradient and diagonal curvature of the smooth part for the transition block (also
        refreshes lz)."""
        G, H = self._transition_sums()
        ns = self.ns
        wt = self.w[ns : ns + len(G)]
        return (G - self.emp[ns : ns + len(G)]) * self.inv_n + l2 * wt, H * self.inv_n + l2

    # -------------------------------------------------------------- steps
    def transition_step(
        self, reg, kappa, sigma, max_step, max_back, stats, safeguard="armijo"
    ) -> None:
        nt = len(self.ti)
        if nt == 0:
            return
        ns, w = self.ns, self.w
        G, H = self._transition_sums()
        d = np.empty(nt)
        if safeguard == "scale":
            kappa = kappa * K.curvature_scale(G, H, self.emp, ns, nt)
        delta = K.newton_direction(
            w, ns, nt, G, H, self.emp, ns, self.inv_n, float(reg.l1), float(reg.l2), float(kappa), d
        )
        if not (-delta > SKIP_EPS * max(1.0, float(np.abs(self.lz).mean()))):
            stats[K.ST_SKIP] += 1
            return
        if safeguard == "scale":
            # Wapiti's rule: the whole scaled step, no trial (log Z goes stale: the driver
            # recomputes it after the sweep); refused only where the transitions would leave the
            # scaled recursions' range
            w0 = w[ns : ns + nt].copy()
            w[ns : ns + nt] += d
            if self._set_transitions(w):
                stats[K.ST_ACCEPT] += 1
            else:
                w[ns : ns + nt] = w0
                stats[K.ST_REJECT] += 1
                self._set_transitions(w)
            return
        gold = float(np.dot(d, self.emp[ns : ns + nt]))
        dmax = float(np.abs(d).max())
        step = min(1.0, max_step / dmax) if dmax > 0 else 1.0
        # the trials are written into w's transition slice (they change nothing else), w0 put back
        # when none is accepted: no copy of the whole weight vector (a candidate-space vector at
        # NETtalk scale)
        w0 = w[ns : ns + nt].copy()
        new_lz = np.empty_like(self.lz)
        xn = w[ns : ns + nt]
        for _ in range(max_back + 1):
            xn[:] = w0 + step * d
            stats[K.ST_TRIALS] += 1
            ok = self._set_transitions(w)
            if ok and self.bigram:
                ok = self._all_logz_pd(w, new_lz)
                self.obj.n_full += 1
            elif ok:
                K.all_logz(
                    self.c.seq_ptr,
                    self.obj.bounds,
                    self.Tmax,
                    self.ES,
                    self.EM,
                    self.expM,
                    self.tmax,
                    new_lz,
                )
                self.obj.n_full += 1
            if ok:
                pen = 0.5 * reg.l2 * float(np.dot(xn, xn) - np.dot(w0, w0)) + reg.l1 * float(
                    np.abs(xn).sum() - np.abs(w0).sum()
                )
                dF = (self._lz_sum(new_lz - self.lz) - step * gold) * self.inv_n + pen
                if dF <= sigma * step * delta:
                    self.lz[:] = new_lz
                    stats[K.ST_ACCEPT] += 1
                    stats[K.ST_DF] += dF
                    return
            step *= 0.5
        xn[:] = w0
        stats[K.ST_REJECT] += 1
        self._set_transitions(w)  # back to the unchanged transitions

    def attribute_blocks(
        self,
        order,
        b0,
        b1,
        reg,
        kappa,
        sigma,
        max_step,
        max_back,
        stats,
        shrink=0,
        zrun=None,
        skip=None,
        safeguard="armijo",
    ) -> None:
        ix, c, s = self.index, self.c, self.s
        tol = SKIP_EPS * max(1.0, float(np.abs(self.lz).mean())) * self.inv_n
        if zrun is None:
            zrun = np.zeros(self.n_blocks, dtype=np.int64)
            skip = np.zeros(self.n_blocks, dtype=np.int64)
        sc = self.scratch
        if self.bigram:
            pd = self.pd_scratch
            btok_ptr, battr, bval = c.bigram_arrays()
            K.sweep_blocks_joint(
                order,
                b0,
                b1,
                ix.ap,
                ix.gseq,
                ix.gptr,
                ix.otok,
                ix.oval,
                ix.okind,
                ix.ua,
                ix.ub,
                c.seq_ptr,
                s.attr_ptr,
                s.feat_label,
                btok_ptr,
                battr,
                bval,
                s.battr_ptr,
                self.bpair,
                self.bfull,
                s.bigram_offset,
                self.trans,
                self.expM,
                self.tmax,
                self.emp,
                self.eptr,
                self.erel,
                self.evl,
                self.ebuf,
                self.w,
                self.E,
                self.ES,
                self.EM,
                self.lz,
                self.inv_n,
                float(reg.l1),
                float(reg.l2),
                float(kappa),
                float(sigma),
                float(max_step),
                int(max_back),
                safeguard == "scale",
                tol,
                int(shrink),
                zrun,
                skip,
                *self.msg,
                *sc[:11],
                pd[0],
                pd[1],
                *sc[11:],
                *pd[2:],
                stats,
                self.obj.sw,
            )
            return
        K.sweep_blocks(
            order,
            b0,
            b1,
            ix.ap,
            ix.gseq,
            ix.gptr,
            ix.otok,
            ix.oval,
            c.seq_ptr,
            s.attr_ptr,
            s.feat_label,
            self.emp,
            self.w,
            self.E,
            self.ES,
            self.EM,
            self.lz,
            self.expM,
            self.tmax,
            self.inv_n,
            float(reg.l1),
            float(reg.l2),
            float(kappa),
            float(sigma),
            float(max_step),
            int(max_back),
            safeguard == "scale",
            tol,
            int(shrink),
            zrun,
            skip,
            *self.msg,
            *sc,
            stats,
            self.obj.sw,
        )


def _check_params(
    reg,
    max_iterations,
    delta,
    period,
    order,
    kappa,
    trans_steps,
    sigma,
    max_step,
    max_back,
    shrink,
    blocks="separate",
    safeguard="armijo",
):
    def num(name, x):
        try:
            x = float(x)
        except (TypeError, ValueError):
            raise ParameterError(f"bcd: {name} must be a number (got {x!r})") from None
        if not math.isfinite(x):
            raise ParameterError(f"bcd: {name} must be finite (got {x!r})")
        return x

    def count(name, x, lo):
        if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or int(x) < lo:
            raise ParameterError(f"bcd: {name} must be an integer >= {lo} (got {x!r})")
        return int(x)

    if order not in ORDERS:
        raise ParameterError(f"bcd: unknown order {order!r}; one of {', '.join(ORDERS)}")
    if blocks not in BLOCKS:
        raise ParameterError(f"bcd: unknown blocks {blocks!r}; one of {', '.join(BLOCKS)}")
    if safeguard not in SAFEGUARDS:
        raise ParameterError(
            f"bcd: unknown safeguard {safeguard!r}; one of {', '.join(SAFEGUARDS)}"
        )
    delta, kappa, sigma, max_step = (
        num("delta", delta),
        num("kappa", kappa),
        num("sigma", sigma),
        num("max_step", max_step),
    )
    if delta < 0:
        raise ParameterError(f"bcd: delta must be >= 0 (got {delta!r})")
    if kappa <= 0:
        raise ParameterError(f"bcd: kappa must be > 0 (got {kappa!r})")
    if not 0 < sigma < 1:
        raise ParameterError(f"bcd: sigma must be in (0, 1) (got {sigma!r})")
    if max_step <= 0:
        raise ParameterError(f"bcd: max_step must be > 0 (got {max_step!r})")
    period = count("period", period, 1)
    trans_steps = count("trans_steps", trans_steps, 0)
    max_back = count("max_back", max_back, 0)
    shrink = count("shrink", shrink, 0)
    if max_iterations is not None:
        count("max_iterations (sweeps)", max_iterations, 0)
    return delta, period, kappa, trans_steps, sigma, max_step, max_back, shrink


def bcd(
    obj,
    x0: np.ndarray | None,
    *,
    reg,
    max_iterations: int | None = None,
    callback=None,
    seed: int = 0,
    delta: float = 1e-5,
    period: int = 1,
    order: str = "random",
    kappa: float = 1.5,
    trans_steps: int | None = None,
    sigma: float = 1e-4,
    max_step: float = 100.0,
    max_back: int = 20,
    shrink: int = 8,
    monitor: bool = True,
    blocks: str = "separate",
    safeguard: str = "armijo",
    state: dict | None = None,
) -> StochasticResult:
    """Block coordinate descent (one block per attribute + the transition block); see the module
    doc.

    ``max_iterations``: sweeps (default 50).  ``delta``/``period``: stop when the
    objective decreased by less than ``delta`` (relative) over ``period`` sweeps.
    ``order``: ``random`` (a permutation per sweep from ``seed``) or ``cyclic``.
    ``kappa``: factor on the diagonal curvature (> 1: shorter, safer steps).
    ``trans_steps``: transition-block steps per sweep (default 4; 1 with ``safeguard="scale"``:
    Wapiti's sweep visits every block once, its transitions the bigram block of its ``*``
    observation).  ``sigma``, ``max_step``, ``max_back``: the Armijo safeguard; ``safeguard``:
    ``armijo`` (default) or ``scale`` (Wapiti's rule, no line search; see the module doc).
    ``shrink``: the most sweeps a block found at zero (and staying there) is left out of (0: never).
    ``blocks`` (label-pair x observation features only): ``separate`` (a block per state attribute
    and one per bigram attribute) or ``joint`` (one per observation, as Wapiti).  ``monitor``:
    evaluate ``obj.value`` for the callback's ``f`` (else the value held by the caches).  ``state``:
    resume from ``info['state']()`` of an earlier run with the same settings.
    """
    if trans_steps is None:
        trans_steps = 1 if safeguard == "scale" else 4
    delta, period, kappa, trans_steps, sigma, max_step, max_back, shrink = _check_params(
        reg,
        max_iterations,
        delta,
        period,
        order,
        kappa,
        trans_steps,
        sigma,
        max_step,
        max_back,
        shrink,
        blocks,
        safeguard,
    )
    if getattr(obj.space, "n_dense", 0) > 0:
        raise CrfkitError("bcd does not support dense features (its blocks are attribute rows)")
    sweeps = DEFAULT_SWEEPS if max_iterations is None else int(max_iterations)
    s = obj.space
    d = s.n_features
    settings = {
        "order": order,
        "kappa": kappa,
        "trans_steps": trans_steps,
        "sigma": sigma,
        "max_step": max_step,
        "max_back": max_back,
        "shrink": shrink,
        "seed": int(seed),
        "l1": float(reg.l1),
        "l2": float(reg.l2),
        "n": int(obj.n),
        "n_features": int(d),
    }
    if getattr(s, "n_bigram", 0) > 0:
        settings["blocks"] = blocks
    if safeguard != "armijo":
        settings["safeguard"] = safeguard
    if state is not None:
        bad = [k for k, v in settings.items() if state.get("settings", {}).get(k) != v]
        if bad:
            raise ParameterError(
                "bcd: the state was made with other settings: "
                + ", ".join(
                    f"{k}={state.get('settings', {}).get(k)!r} there, {settings[k]!r} now"
                    for k in bad
                )
            )
        w = lazy_copy(
            np.asarray(state["x"], dtype=np.float64), min_size=0
        )  # (sparse: its non-zeros)
        if w.shape != (d,):
            raise ParameterError(
                f"bcd: the state's weights have shape {w.shape}; the feature space has {d} features"
            )
        fs = [float(x) for x in state["fs"]]
        sweep0 = int(state["iteration"])
    else:
        # zeros whose pages count once written: the kernels write only the weights that move, so a
        # large candidate space of which few weights become non-zero takes their pages, not the
        # vector's size
        w = lazy_zeros(d) if x0 is None else lazy_copy(np.asarray(x0, dtype=np.float64), min_size=0)
        if w.shape != (d,):
            raise ParameterError(f"x0 has shape {w.shape}; the feature space has {d} features")
        fs = []
        sweep0 = 0
    eng = Engine(obj, w, blocks)
    n_attr = eng.n_blocks
    if state is not None:
        zrun = np.array(state["zrun"], dtype=np.int64, copy=True)
        skip = np.array(state["skip"], dtype=np.int64, copy=True)
        if zrun.shape != (n_attr,) or skip.shape != (n_attr,):
            raise ParameterError(
                "bcd: the state's shrinking counters do not match the feature space"
            )
    else:
        zrun = np.zeros(n_attr, dtype=np.int64)
        skip = np.zeros(n_attr, dtype=np.int64)
    monitor_s = 0.0

    def state_at(sweep_, keep):
        # keep=False: the run's own arrays, copied when asked for (valid until the next sweep
        # steps); keep=True: the sweep just ended, kept through the next sweep (for Ctrl-C and the
        # checkpoint written after it) in the least memory: an L1 model's weights as their non-zeros
        return state_function(
            {"x": w, "zrun": zrun, "skip": skip},
            {"iteration": int(sweep_), "fs": fs, "settings": settings},
            keep=keep,
        )

    state_fn = state_at(sweep0, True) if sweep0 > 0 else None
    last_f = float("nan")
    sweep = sweep0
    status, message = "max_iterations", f"{sweeps} sweeps"
    stats = np.zeros(K.N_STATS)
    try:
        # fresh: the caches were just computed from the weights as they are (a refresh is a function
        # of w, so a second one before the weights move would find the same values)
        fresh = False
        if not fs:
            eng.refresh()
            fresh = True
            fs.append(eng.objective())  # f at the start: the reference of the first sweeps' rule
        while sweep < sweeps:
            if not fresh:
                eng.refresh()
            fresh = False
            stats[:] = 0.0
            for _ in range(trans_steps):
                eng.transition_step(reg, kappa, sigma, max_step, max_back, stats, safeguard)
            blocks = block_order(seed, sweep, n_attr, order)
            for b0 in range(0, n_attr, CHUNK):
                eng.attribute_blocks(
                    blocks,
                    b0,
                    min(n_attr, b0 + CHUNK),
                    reg,
                    kappa,
                    sigma,
                    max_step,
                    max_back,
                    stats,
                    shrink,
                    zrun,
                    skip,
                    safeguard,
                )
            if safeguard == "scale":
                eng.refresh()  # the blocks' steps took no trial: log Z of every sequence is stale
                fresh = True  # and the next sweep starts from these caches
                obj.n_oracle += obj.n
            obj.n_oracle += int(stats[K.ST_ORACLE])
            sweep += 1
            if not all_finite(w):  # no bool temporary of the candidate space's size
                raise CrfkitError(f"bcd: non-finite weights in sweep {sweep}")
            f_cache = eng.objective()
            fs.append(f_cache)
            shrunk = int(stats[K.ST_SHRUNK])
            conv = (
                delta > 0
                and len(fs) > period
                and (fs[-1 - period] - fs[-1]) / max(abs(fs[-1]), 1e-300) < delta
            )
            if conv and shrunk:
                # converged on a sweep that left blocks out: the next sweep visits every block
                conv = False
                skip[:] = 0
            # until the next sweep starts, the run's own arrays are this sweep's state (no copies:
            # the callback's info["x"] is w, valid until it returns, as with OWL-QN)
            state_fn = state_at(sweep, False)
            t = time.perf_counter()
            last_f = obj.value(w, count=False) if monitor else f_cache
            monitor_s += time.perf_counter() - t
            if callback is not None:
                stop = notify(
                    callback,
                    iteration=sweep,
                    f=last_f,
                    x=w,
                    step=float("nan"),
                    nnz=int(np.count_nonzero(w)),
                    state=state_fn,
                    monitor_s=monitor_s,
                    accepted=int(stats[K.ST_ACCEPT]),
                    rejected=int(stats[K.ST_REJECT]),
                    trials=int(stats[K.ST_TRIALS]),
                    shrunk=shrunk,
                )
                if stop:
                    status, message = "stopped", f"stopped by the callback after sweep {sweep}"
                    break
            if conv:
                status, message = (
                    "converged",
                    (f"relative decrease of the objective below {delta:g} over {period} sweep(s)"),
                )
                break
            if sweep < sweeps:
                state_fn = state_at(sweep, True)
    except KeyboardInterrupt:
        status, message = "interrupted", f"interrupted; the weights of sweep {sweep}"
        x, sweep = last_completed(state_fn, x0, d)
        last_f = float("nan")
    else:
        x = w
    if not math.isfinite(last_f):
        last_f = obj.value(x, count=False)
    return StochasticResult(
        x=x, f=last_f, status=status, message=message, iterations=int(sweep), state_fn=state_fn
    )
