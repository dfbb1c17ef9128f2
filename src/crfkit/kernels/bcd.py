"""Numba kernels of block coordinate descent (Lavergne, Cappé & Yvon 2010, §3.4 and §4.1).

Caches (kept coherent by the kernels that change weights):

* ``E`` (tokens x L): the state-feature emission scores of every token;
* ``ES``, ``EM``: ``ES[t] = exp(E[t] - EM[t])`` with ``EM[t] = max(E[t])``, so
  forward-backward never calls ``exp`` on a row it did not change;
* ``lz`` (n): ``log Z`` of every sequence;
* ``CA``/``CLA``, ``CB``/``CLB`` (tokens x L, tokens) with the markers ``VA``/``VB`` (n): every
  sequence's last forward and backward messages and how far each still holds (:func:`block_grad`).

Recursions (exp domain, every message normalised to sum 1, its log-scale kept
apart): ``alpha~_t = alpha_t * exp(la_t)``, ``beta~_t = beta_t * exp(lb_t)``
and ``Z = exp(la_t + lb_t) * <alpha_t, beta_t>`` at any ``t``.  Transitions
enter as ``expM = exp(trans - tmax)``; while the transition scores span at
most ``MAX_SCALED_TRANSITION_RANGE`` no normaliser can underflow (the caller
checks the span).

Truncated recursions (§4.1): a block of attribute ``a`` needs, in a sequence
where ``a`` occurs at positions ``t1 <= ... <= t2``, the node marginals at
those positions only: the forward recursion runs over ``0..t2`` and the
backward one over ``T-1..t1`` (``T + (t2 - t1) + 1`` steps instead of ``2T``;
one occurrence: about half the work).  Exact, no approximation.  A trial step
changes the emissions at ``t1..t2`` only, so its ``log Z`` needs only the
forward messages over the window ``t1..t2``, started from the stored
``alpha_{t1-1}`` and closed with the stored ``beta_{t2}``.  The messages are
kept between blocks, so a block's recursions start where the last change to
the sequence left them valid (``VA``/``VB``), not at its ends.

Sample weights: ``block_grad``, ``sweep_blocks`` and ``transition_stats`` take ``sw``,
the sequences' scales ``omega_i n / W`` (empty: all 1), by which each sequence's
expected counts, curvature and change of log Z are multiplied.

Label-pair x observation features (``*_pd``, ``*_joint`` kernels): position-dependent transitions
built per sequence where needed (see the section below), joint blocks of one observation's state and
label-pair features (:func:`crfkit.optim.bcd.joint_index`).

Inverted index (``build_index``): for attribute ``a``, its groups
``ap[a]:ap[a+1]``, one per sequence that contains it (``gseq[g]``), each with
its occurrences ``gptr[g]:gptr[g+1]`` (token ``otok``, value ``oval``; entries
of one attribute in one token are merged, their values added), in token order.

Where it lives: the windowed recursions in :mod:`crfkit.kernels.chain_window` (beside the other
forward-backward forms), the attribute blocks and the transition block in
:mod:`crfkit.kernels.bcd_block`, the label-pair x observation kernels in
:mod:`crfkit.kernels.bcd_pd` (position-dependent transitions), :mod:`crfkit.kernels.bcd_joint_grad`
(a joint block's gradient) and :mod:`crfkit.kernels.bcd_joint` (their sweep); this module
re-exports them (``__all__``, the names it held before the split).
"""

from __future__ import annotations

from .bcd_block import (
    N_STATS,
    ST_ACCEPT,
    ST_DF,
    ST_ORACLE,
    ST_REJECT,
    ST_SHRUNK,
    ST_SKIP,
    ST_TRIALS,
    all_logz,
    block_grad,
    build_index,
    curvature_scale,
    exp_rows,
    newton_direction,
    sweep_blocks,
    transition_scores,
    transition_stats,
)
from .bcd_joint import sweep_blocks_joint
from .bcd_joint_grad import block_grad_joint
from .bcd_pd import all_logz_pd, range_of, transition_stats_pd
from .chain_exp import (
    FAST,
    MAX_SCALED_TRANSITION_RANGE,
    back_step,
    exp_shift_into,
    propagate,
    row_exp,
    row_sum,
)

# the names this module held before it was split keep working from here
__all__ = [
    "range_of",
    "all_logz",
    "all_logz_pd",
    "back_step",
    "block_grad",
    "block_grad_joint",
    "build_index",
    "curvature_scale",
    "exp_rows",
    "exp_shift_into",
    "FAST",
    "MAX_SCALED_TRANSITION_RANGE",
    "N_STATS",
    "newton_direction",
    "propagate",
    "row_exp",
    "row_sum",
    "ST_ACCEPT",
    "ST_DF",
    "ST_ORACLE",
    "ST_REJECT",
    "ST_SHRUNK",
    "ST_SKIP",
    "ST_TRIALS",
    "sweep_blocks",
    "sweep_blocks_joint",
    "transition_scores",
    "transition_stats",
    "transition_stats_pd",
]
