"""The full-batch gradient's attribute-partitioned reduction (crfkit.reduction,
kernels.batch.loss_grad): the plan indexes every corpus entry once, each attribute is owned by one
group per block, and the gradient matches the per-sequence oracle and finite differences, with 1 and
2 threads, one block or many.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import random_bigram_attributes, random_sequences
from crfkit import reduction
from crfkit.features.encode import build
from crfkit.objective import Objective, Regularization
from crfkit.parallel import set_threads


def _bigram_data(rng, n_seq, n_labels=3, real=True, n_battr=5, max_len=7):
    X, Y = random_sequences(rng, n_seq, n_labels=n_labels, real=real, n_attr=9, max_len=max_len)
    return X, Y, random_bigram_attributes(rng, X, n_battr, real)


def _entries(tok_ptr, attr, val, seq_ptr, skip_first, nfeat):
    """Every (token, attribute, value) entry of the corpus whose attribute has features."""
    first = np.zeros(len(tok_ptr) - 1, bool)
    first[seq_ptr[:-1][np.diff(seq_ptr) > 0]] = True
    out = []
    for t in range(len(tok_ptr) - 1):
        if skip_first and first[t]:
            continue
        for e in range(tok_ptr[t], tok_ptr[t + 1]):
            if nfeat[attr[e]] > 0:
                out.append((t, int(attr[e]), float(val[e])))
    return sorted(out)


def _plan_entries(plan, occ, seq_ptr, n_groups, ptr):
    out = []
    nfeat = np.diff(ptr)
    # a run's features are its attribute's: the attribute whose features start at k0
    k0, nk = reduction.unpack_runs(occ.run_feat)
    run_attr = np.searchsorted(ptr, k0, side="right") - 1
    assert np.array_equal(ptr[run_attr], k0)
    assert np.array_equal(nfeat[run_attr], nk) and (nk > 0).all()
    nc = plan.chunks.shape[1] - 1
    for b in range(plan.n_blocks):
        T0 = seq_ptr[plan.blocks[b]]
        first = occ.groups[b * nc][0]
        last = occ.groups[b * nc + nc - 1][-1]
        owner = {}
        for c in range(nc):
            g = occ.groups[b * nc + c]
            assert g[0] <= g[-1] and np.all(np.diff(g) >= 0) and len(g) == n_groups + 1
            # a chunk's runs follow the previous chunk's
            if c:
                assert g[0] == occ.groups[b * nc + c - 1][-1]
            attrs = run_attr[g[0] : g[-1]]
            assert len(set(attrs.tolist())) == len(attrs), "an attribute has two runs in one chunk"
            # a chunk's tokens are its own sequences' tokens
            c0 = seq_ptr[plan.chunks[b, c]] - T0
            c1 = seq_ptr[plan.chunks[b, c + 1]] - T0
            for j in range(n_groups):
                for r in range(g[j], g[j + 1]):
                    # the same attribute belongs to the same group in every chunk of the block
                    assert owner.setdefault(int(run_attr[r]), j) == j
            for r in range(g[0], g[-1]):
                toks = occ.tok[occ.run_ptr[r] : occ.run_ptr[r + 1]]
                assert np.all(np.diff(toks) >= 0), "a run's tokens are not in order"
                assert np.all((toks >= c0) & (toks < c1)), "a run has tokens of another chunk"
                for o in range(occ.run_ptr[r], occ.run_ptr[r + 1]):
                    v = float(occ.val[o]) if len(occ.val) else 1.0
                    out.append((int(T0 + occ.tok[o]), int(run_attr[r]), v))
        assert first <= last
        # consecutive blocks' runs follow each other
        if b + 1 < plan.n_blocks:
            assert occ.groups[(b + 1) * nc][0] == last
    return sorted(out)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10**6),
    n_seq=st.integers(1, 25),
    chunks=st.integers(1, 5),
    budget=st.sampled_from([1, 200, 2000, 1 << 20]),
    real=st.booleans(),
)
def test_plan_indexes_every_entry_once(seed, n_seq, chunks, budget, real):
    rng = np.random.default_rng(seed)
    X, Y, B = _bigram_data(rng, n_seq, real=real)
    space, corpus = build(X, Y, support="all", B=B)
    plan = reduction.grad_plan(
        corpus, space, chunks, budget=budget, edge_budget=budget, bigram=True
    )
    sp = corpus.seq_ptr
    # blocks and chunks partition the sequences in order
    assert (
        plan.blocks[0] == 0
        and plan.blocks[-1] == corpus.n_sequences
        and np.all(np.diff(plan.blocks) > 0)
    )
    for b in range(plan.n_blocks):
        c = plan.chunks[b]
        assert c[0] == plan.blocks[b] and c[-1] == plan.blocks[b + 1] and np.all(np.diff(c) >= 0)
        ntok = sp[plan.blocks[b + 1]] - sp[plan.blocks[b]]
        assert ntok <= plan.store_tokens
        L = space.n_labels
        longest = int(np.diff(sp).max())  # a block holds at least the longest sequence's worth
        assert ntok <= max(budget // (8 * L * L), longest, 1)
    assert _plan_entries(plan, plan.state, sp, chunks, space.attr_ptr) == _entries(
        corpus.tok_ptr, corpus.attr, corpus.val, sp, False, np.diff(space.attr_ptr)
    )
    assert _plan_entries(plan, plan.bigram, sp, chunks, space.battr_ptr) == _entries(
        corpus.btok_ptr, corpus.battr, corpus.bval, sp, True, np.diff(space.battr_ptr)
    )


def _grad(corpus, space, w, threads, budget, monkeypatch, sparse=False):
    monkeypatch.setattr(reduction, "STORE_BUDGET", budget)
    monkeypatch.setattr(reduction, "EDGE_BUDGET", budget)
    set_threads(threads)
    obj = Objective(corpus, space, Regularization(l2=0.1), threads=threads, sparse_fb=sparse)
    f, g = obj.value_and_grad(w)
    return obj, f, g.copy()


@pytest.mark.parametrize(
    "real,n_labels,support",
    [(False, 4, "all"), (True, 4, "all"), (False, 22, "observed"), (True, 19, "all")],
)
def test_gradient_matches_the_per_sequence_oracle(
    restore_threads, monkeypatch, real, n_labels, support
):
    """The full-batch kernel (emissions by runs, the vector recursion on padded rows, dense rows
    scattered as vectors) against the per-example oracle, an independent path: the objective to
    1e-12 relative, the gradient to 1e-10; label counts with whole vectors and a masked tail."""
    rng = np.random.default_rng(3)
    X, Y = random_sequences(rng, 60, n_labels=n_labels, real=real, n_attr=25, max_len=9)
    space, corpus = build(X, Y, support=support)
    w = rng.normal(0, 0.7, space.n_features)
    # reference: sum over sequences of the per-example oracle's sparse gradient (an independent
    # path)
    obj, _, _ = _grad(corpus, space, w, 1, 1 << 20, monkeypatch)
    ref = np.zeros(space.n_features)
    nll = 0.0
    for i in range(corpus.n_sequences):
        loss, node, edge = obj.oracle(i, w)
        obj.apply_gradient(i, node, edge, 1.0, ref)
        nll += loss
    ref = ref / corpus.n_sequences + 0.1 * w
    fref = nll / corpus.n_sequences + 0.05 * float(w @ w)
    for threads in (1, 2):
        for budget in (1, 300, 1 << 20):  # a block per sequence, a few blocks, one block
            obj, f, g = _grad(corpus, space, w, threads, budget, monkeypatch)
            assert (obj._plan.n_blocks == 1) == (budget > 1 << 19)
            assert f == pytest.approx(fref, rel=1e-12)
            np.testing.assert_allclose(g, ref, rtol=1e-10, atol=1e-12 * np.abs(ref).max())


@pytest.mark.parametrize("support,sparse", [("all", False), ("observed", False), ("all", True)])
def test_state_and_bigram_gradients_are_the_same_bits_for_any_threads_and_blocks(
    restore_threads, monkeypatch, support, sparse
):
    """One thread adds each sequence's bigram part at once (loss_grad_bigram's direct path), several
    threads through the attribute-partitioned reduction: the same bits either way, with the standard
    or the sparse recursions (whose sums over labels moved in the last bit with the work arrays'
    addresses until stop 40)."""
    rng = np.random.default_rng(11)
    X, Y, B = _bigram_data(rng, 80, n_labels=4)
    space, corpus = build(X, Y, support=support, B=B)
    w = rng.normal(0, 0.5, space.n_features)
    if sparse:
        w[space.bigram_offset :] *= rng.random(space.n_bigram) < 0.3  # listed pairs: a third
    ns, nt, bo = space.n_state, space.n_trans, space.bigram_offset
    _, f0, g0 = _grad(corpus, space, w, 1, 1 << 22, monkeypatch, sparse)
    junk = []
    for threads, budget in ((2, 1 << 22), (1, 1), (2, 1), (2, 1500)):
        for k in range(5):  # repeated: the per-thread work arrays land at other addresses each time
            junk.append(np.empty(1 + 37 * k))  # (and the heap moves between repetitions)
            obj, f, g = _grad(corpus, space, w, threads, budget, monkeypatch, sparse)
            assert len(obj.bounds) - 1 == threads
            # per weight, the expected counts are summed over the tokens in corpus order, whatever
            # the split; the recursions' sums do not depend on where their arrays lie
            # (tests/test_kernel_addresses.py)
            assert np.array_equal(g[:ns], g0[:ns])
            assert np.array_equal(g[bo:], g0[bo:])
            np.testing.assert_allclose(g[ns : ns + nt], g0[ns : ns + nt], rtol=1e-12, atol=1e-13)
            assert f == pytest.approx(f0, rel=1e-13)


@pytest.mark.parametrize("threads,budget", [(1, 1 << 20), (2, 1), (2, 700)])
def test_bigram_gradient_matches_central_differences(restore_threads, monkeypatch, threads, budget):
    rng = np.random.default_rng(5)
    X, Y, B = _bigram_data(rng, 10, n_labels=3, max_len=5)
    space, corpus = build(X, Y, support="all", B=B)
    w = rng.normal(0, 0.8, space.n_features)
    obj, f, g = _grad(corpus, space, w, threads, budget, monkeypatch)
    h = 1e-6
    num = np.empty_like(w)
    for k in range(len(w)):
        e = np.zeros_like(w)
        e[k] = h
        num[k] = (obj.value(w + e) - obj.value(w - e)) / (2 * h)
    np.testing.assert_allclose(g, num, rtol=1e-5, atol=1e-7)


def test_plan_memory_follows_the_corpus_not_the_candidate_space():
    # 2,000 attributes x every label pair: the candidate space grows with L^2, the plan does not
    rng = np.random.default_rng(2)
    X, Y, B = _bigram_data(rng, 40, n_labels=12, n_battr=2000)
    space, corpus = build(X, Y, support="all", B=B)
    plan = reduction.grad_plan(corpus, space, 2, bigram=True)
    entries = len(corpus.attr) + len(corpus.battr)
    assert plan.nbytes < 64 * (entries + corpus.n_tokens) + 1024
    assert plan.nbytes < space.n_features  # well under one byte per candidate feature


def test_plan_indexes_tokens_in_two_bytes_unless_a_block_is_longer(monkeypatch):
    rng = np.random.default_rng(8)
    X, Y, B = _bigram_data(rng, 30, max_len=9)
    space, corpus = build(X, Y, support="all", B=B)
    sp = corpus.seq_ptr
    plan = reduction.grad_plan(corpus, space, 2, budget=300, edge_budget=300, bigram=True)
    for occ in (plan.state, plan.bigram):
        assert occ.tok.dtype == np.uint16 and occ.run_ptr.dtype == np.int32
    # a block longer than TOK16_TOKENS tokens (here: any of more than 3) and an index of more than
    # RUN32_ENTRIES entries keep 4- and 8-byte ids: the same entries
    monkeypatch.setattr(reduction, "TOK16_TOKENS", 3)
    monkeypatch.setattr(reduction, "RUN32_ENTRIES", 5)
    wide = reduction.grad_plan(corpus, space, 2, budget=300, edge_budget=300, bigram=True)
    for a, b, ptr, skip in (
        (plan.state, wide.state, space.attr_ptr, False),
        (plan.bigram, wide.bigram, space.battr_ptr, True),
    ):
        assert b.tok.dtype == np.int32 and b.run_ptr.dtype == np.int64
        assert np.array_equal(a.tok, b.tok) and np.array_equal(a.run_ptr, b.run_ptr)
        assert np.array_equal(a.run_feat, b.run_feat)
        assert _plan_entries(wide, b, sp, 2, ptr) == _entries(
            *(
                (corpus.tok_ptr, corpus.attr, corpus.val)
                if not skip
                else (corpus.btok_ptr, corpus.battr, corpus.bval)
            ),
            sp,
            skip,
            np.diff(ptr),
        )


@pytest.mark.slow
def test_wide_token_ids_give_the_same_gradient_bits(restore_threads, monkeypatch):
    """The 4- and 8-byte index (a block of more than 65,536 tokens) compiles the kernels for those
    types: the same bits as the 2- and 4-byte one."""
    rng = np.random.default_rng(9)
    X, Y, B = _bigram_data(rng, 40, n_labels=3)
    space, corpus = build(X, Y, support="all", B=B)
    w = rng.normal(0, 0.5, space.n_features)
    _, f0, g0 = _grad(corpus, space, w, 2, 1500, monkeypatch)
    monkeypatch.setattr(reduction, "TOK16_TOKENS", 1)
    monkeypatch.setattr(reduction, "RUN32_ENTRIES", 1)
    obj, f, g = _grad(corpus, space, w, 2, 1500, monkeypatch)
    assert obj._plan.state.tok.dtype == np.int32 and obj._plan.state.run_ptr.dtype == np.int64
    assert f == f0 and np.array_equal(g, g0)


def test_runs_pack_in_four_bytes_while_they_fit():
    """(first feature, feature count) of a run in 4 bytes (what the attribute id took) below 2^24
    features and 2^8 features an attribute, in 8 beyond; unpacked to the same numbers."""
    k0 = np.array([0, 5, (1 << 24) - 1])
    nk = np.array([1, 255, 3])
    p = reduction.pack_runs(k0, nk)
    assert p.dtype == np.uint32
    assert all(np.array_equal(a, b) for a, b in zip(reduction.unpack_runs(p), (k0, nk)))
    for big_k0, big_nk in (([1 << 24], [1]), ([3], [256]), ([(1 << 31) + 7], [70_000])):
        p = reduction.pack_runs(np.array(big_k0), np.array(big_nk))
        assert p.dtype == np.int64
        assert [x.tolist() for x in reduction.unpack_runs(p)] == [big_k0, big_nk]
