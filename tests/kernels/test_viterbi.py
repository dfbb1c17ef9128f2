"""The Viterbi kernels (``chain.viterbi``, ``chain.pd_viterbi``, and ``chain.viterbi_m``, the
constrained decoder's) against a plain running-arg-max reference (``conftest.viterbi_reference``),
to the bit, on tables full of ties and of -inf entries (forbidden transitions), where the tie rule
shows: the lowest label wins, for the last label and for every predecessor.  (Their scores against
brute-force enumeration on random chains are in ``test_kernels.py`` and ``test_bigram.py``;
constrained decoding against enumeration in ``test_decode.py``.)"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import viterbi_reference as reference
from crfkit.kernels import chain


@st.composite
def tables(draw, position_dependent=False):
    T = draw(st.integers(1, 7))
    L = draw(st.integers(1, 12))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    levels = draw(st.sampled_from([2, 3, 1000]))  # few levels: many exact ties
    score = rng.integers(-levels, levels, size=(T, L)).astype(float) / 2
    shape = (T, L, L) if position_dependent else (L, L)
    trans = rng.integers(-levels, levels, size=shape).astype(float) / 2
    forbid = draw(st.sampled_from([0.0, 0.3, 0.9, 1.0]))
    trans[rng.random(shape) < forbid] = -np.inf
    if draw(st.booleans()):
        score[rng.random((T, L)) < forbid / 2] = -np.inf
    return score, trans


@settings(max_examples=300, deadline=None)
@given(tables())
def test_viterbi_matches_the_running_arg_max_with_ties_and_forbidden_pairs(tab):
    score, trans = tab
    T = score.shape[0]
    out = np.full(T + 2, -7, dtype=np.int64)
    got = chain.viterbi(score, T, trans, out, 1)
    want, path = reference(score, np.broadcast_to(trans, (T,) + trans.shape))
    assert got == want or (np.isnan(got) and np.isnan(want))
    assert out[1 : T + 1].tolist() == path
    assert out[0] == -7 and out[T + 1] == -7  # nothing written outside out[o0:o0+T]


@settings(max_examples=300, deadline=None)
@given(tables(position_dependent=True))
def test_pd_viterbi_matches_the_running_arg_max_with_ties_and_forbidden_pairs(tab):
    score, M = tab
    T = score.shape[0]
    out = np.zeros(T, dtype=np.int64)
    got = chain.pd_viterbi(score, T, M, out, 0)
    want, path = reference(score, M)
    assert got == want
    assert out.tolist() == path


@settings(max_examples=200, deadline=None)
@given(tables(position_dependent=True), st.booleans())
def test_viterbi_m_with_and_without_position_dependent_tables(tab, pd):
    score, M = tab
    T = score.shape[0]
    out = np.zeros(T, dtype=np.int64)
    got = chain.viterbi_m(score, T, M, pd, out, 0)
    want, path = reference(score, M if pd else np.broadcast_to(M[0], M.shape))
    assert got == want
    assert out.tolist() == path


def test_ties_go_to_the_lowest_label():
    # every path scores the same: the all-zero path
    L, T = 5, 4
    out = np.zeros(T, dtype=np.int64)
    assert chain.viterbi(np.zeros((T, L)), T, np.zeros((L, L)), out, 0) == 0.0
    assert out.tolist() == [0] * T
    # label 3 best at the end, reached equally from 1 and 2 (and nothing else): predecessor 1
    score = np.zeros((2, L))
    score[1, 3] = 5.0
    trans = np.full((L, L), -np.inf)
    trans[1, 3] = trans[2, 3] = 0.0
    out = np.zeros(2, dtype=np.int64)
    assert chain.viterbi(score, 2, trans, out, 0) == 5.0
    assert out.tolist() == [1, 3]


def test_no_allowed_path():
    # every transition forbidden: the score is -inf and the path the scan form's (all 0)
    L, T = 4, 3
    out = np.full(T, 9, dtype=np.int64)
    got = chain.viterbi(np.ones((T, L)), T, np.full((L, L), -np.inf), out, 0)
    assert got == -np.inf
    assert out.tolist() == [0, 0, 0]


@pytest.mark.parametrize("L", [3, 23, 45])
def test_random_real_tables_match(L):
    rng = np.random.default_rng(L)
    for _ in range(20):
        T = int(rng.integers(1, 30))
        score = rng.normal(size=(T, L))
        trans = rng.normal(size=(L, L))
        out = np.zeros(T, dtype=np.int64)
        got = chain.viterbi(score, T, trans, out, 0)
        want, path = reference(score, np.broadcast_to(trans, (T, L, L)))
        assert got == want and out.tolist() == path
