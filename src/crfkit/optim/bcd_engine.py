"""The engine of block coordinate descent (:mod:`crfkit.optim.bcd`): the caches and scratch of one
run, the blocks' derivatives, the transition step and the attribute blocks' sweep."""

from __future__ import annotations

import numpy as np

from ..errors import CrfkitError
from ..kernels import bcd as K
from ..kernels.chain import MAX_SCALED_TRANSITION_RANGE, emissions
from ..objective import l1_norm
from .bcd_index import inverted_index, joint_index

SKIP_EPS = (
    1e-15  # a block's predicted decrease below this x |log Z| x (its sequences / n): left alone
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
