"""SGD-L1 with label-pair x observation ("bigram") features: the per-sequence oracle against the
full-batch objective and finite differences, the lazy kernel against a dense numpy reference step by
step, resume, interrupts, warm start, eta0=auto, the optimum, the CLI, and the refusal of the other
stochastic methods."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import random_bigram_attributes, random_sequences
from crfkit.corpus import Corpus
from crfkit.errors import CrfkitError
from crfkit.features.encode import build
from crfkit.kernels import sgdl1 as K
from crfkit.objective import Objective, Regularization
from crfkit.optim import sgdl1
from crfkit.optim.sgdl1 import sgd_l1, step_bound
from crfkit.train import train, train_corpus


def bigram_problem(seed=0, n_seq=12, L=3, max_len=5, n_attr=6, n_battr=4, real=True, support="all"):
    rng = np.random.default_rng(seed)
    X, Y = random_sequences(rng, n_seq, n_labels=L, max_len=max_len, n_attr=n_attr, real=real)
    B = random_bigram_attributes(rng, X, n_battr, real)
    space, corpus = build(X, Y, B=B, support=support)
    return X, Y, B, space, corpus


def weighted(corpus: Corpus, weights) -> Corpus:
    c = corpus
    return Corpus(
        c.seq_ptr,
        c.tok_ptr,
        c.attr,
        c.val,
        c.y,
        weight=np.asarray(weights, dtype=np.float64),
        btok_ptr=c.btok_ptr,
        battr=c.battr,
        bval=c.bval,
    )


def sequence_gradient(obj: Objective, i: int, w: np.ndarray) -> tuple[float, np.ndarray]:
    """(s_i nll_i, its gradient) through the bigram oracle at w = beta * (w / beta), beta = 0.7."""
    beta = 0.7
    loss, node, edges, edge = obj.oracle_bigram(i, w / beta, beta)
    g = np.zeros(len(w))
    obj.apply_gradient_bigram(i, node, edges, edge, 1.0, g)
    return loss, g


# ------------------------------------------------------------------ the per-sequence oracle
@pytest.mark.parametrize("support", ["all", "observed"])
def test_oracle_equals_the_batch_objective_of_one_sequence(support):
    X, Y, B, space, corpus = bigram_problem(1, support=support)
    assert space.n_bigram > 0 and corpus.has_bigram
    w = np.random.default_rng(2).normal(scale=0.8, size=space.n_features)
    obj = Objective(corpus, space)
    for i in range(corpus.n_sequences):
        one = Objective(corpus.subset(np.array([i])), space)
        f1, g1 = one.nll_sum_grad(w)
        loss, g = sequence_gradient(obj, i, w)
        assert loss == pytest.approx(f1, rel=1e-12, abs=1e-12)
        np.testing.assert_allclose(g, g1, rtol=1e-10, atol=1e-12)
        # only the step's features (its state and bigram features, the transitions) are touched
        assert set(np.flatnonzero(g)) <= set(sample_features(space, corpus, i))


@pytest.mark.parametrize("support", ["all", "observed"])
def test_oracle_gradient_against_finite_differences(support):
    X, Y, B, space, corpus = bigram_problem(3, support=support)
    # every label pair of every attribute: the scores read each attribute's weights as one row
    assert space.bigram_full_rows.all() == (support == "all")
    w = np.random.default_rng(4).normal(scale=0.5, size=space.n_features)
    obj = Objective(corpus, space)
    rng = np.random.default_rng(5)
    checked = {"state": 0, "trans": 0, "bigram": 0}
    for i in range(corpus.n_sequences):
        if corpus.seq_ptr[i + 1] - corpus.seq_ptr[i] < 2:
            continue
        _, g = sequence_gradient(obj, i, w)
        touched = np.flatnonzero(g)
        for k in rng.choice(touched, size=min(8, len(touched)), replace=False):
            h = 1e-6
            wp, wm = w.copy(), w.copy()
            wp[k] += h
            wm[k] -= h
            fd = (obj.oracle_bigram(i, wp)[0] - obj.oracle_bigram(i, wm)[0]) / (2 * h)
            assert g[k] == pytest.approx(fd, rel=1e-6, abs=1e-8)
            part = (
                "state" if k < space.n_state else ("trans" if k < space.bigram_offset else "bigram")
            )
            checked[part] += 1
    assert min(checked.values()) > 0


def test_oracle_with_sample_weights_sums_to_the_weighted_objective():
    X, Y, B, space, corpus = bigram_problem(6)
    omega = np.random.default_rng(7).uniform(0.0, 3.0, size=corpus.n_sequences)
    omega[2] = 0.0
    wc = weighted(corpus, omega)
    w = np.random.default_rng(8).normal(scale=0.6, size=space.n_features)
    obj = Objective(wc, space)
    f, gref = obj.nll_sum_grad(w)
    tot, g = 0.0, np.zeros(space.n_features)
    for i in range(wc.n_sequences):
        loss, gi = sequence_gradient(obj, i, w)
        tot += loss
        g += gi
    assert tot == pytest.approx(f, rel=1e-12)
    np.testing.assert_allclose(g, gref, rtol=1e-10, atol=1e-12)
    # the monitoring value through the oracle's scores equals the batch value
    reg = Regularization(l1=0.01, l2=0.02)
    robj = Objective(wc, space, reg)
    assert robj.value_bigram(w) == pytest.approx(robj.value(w, count=False), rel=1e-12)


def test_plain_oracle_still_refuses_and_names_sgd_l1():
    X, Y, B, space, corpus = bigram_problem(0)
    with pytest.raises(CrfkitError, match="sgd-l1"):
        Objective(corpus, space).oracle(0, np.zeros(space.n_features))


def test_step_bound_covers_every_step():
    X, Y, B, space, corpus = bigram_problem(9, n_seq=20)
    obj = Objective(corpus, space)
    most = 0
    for i in range(corpus.n_sequences):
        feats = set()
        for t in range(corpus.seq_ptr[i], corpus.seq_ptr[i + 1]):
            for e in range(corpus.tok_ptr[t], corpus.tok_ptr[t + 1]):
                a = corpus.attr[e]
                feats.update(range(space.attr_ptr[a], space.attr_ptr[a + 1]))
            if t > corpus.seq_ptr[i]:
                for e in range(corpus.btok_ptr[t], corpus.btok_ptr[t + 1]):
                    b = corpus.battr[e]
                    feats.update(range(space.battr_ptr[b], space.battr_ptr[b + 1]))
        most = max(most, len(feats) + space.n_trans)
    assert most <= step_bound(obj) <= space.n_features


# ------------------------------------------------------------------ lazy kernel == dense reference
def sample_features(space, corpus, i):
    """A step's features, plainly: the state features of the sequence's attributes, every
    transition, the bigram features of its tokens after the first (each once)."""
    out = set(range(space.n_state, space.bigram_offset))
    t0, t1 = corpus.seq_ptr[i], corpus.seq_ptr[i + 1]
    for t in range(t0, t1):
        for e in range(corpus.tok_ptr[t], corpus.tok_ptr[t + 1]):
            a = corpus.attr[e]
            out.update(range(space.attr_ptr[a], space.attr_ptr[a + 1]))
        if t > t0:
            for e in range(corpus.btok_ptr[t], corpus.btok_ptr[t + 1]):
                b = corpus.battr[e]
                out.update(
                    space.bigram_offset + k
                    for k in range(space.battr_ptr[b], space.battr_ptr[b + 1])
                )
    return np.array(sorted(out), dtype=np.int64)


def batch_gradient(corpus, space, i, w, scale):
    """scale * gradient of nll_i from the full-batch kernel on a one-sequence corpus (independent of
    the per-example oracle)."""
    _, g = Objective(corpus.subset(np.array([i])), space).nll_sum_grad(w)
    return scale * g


def dense_steps(space, corpus, sw, reg, order, penalty, eta0, alpha, n):
    """Every weight at every step: clipping (shrink, gradient step, clip all) or Figure 2
    (cumulative) with u and q shrunk with the weights; the weights after each step."""
    d = space.n_features
    w, q, u = np.zeros(d), np.zeros(d), 0.0
    out = []
    for k, i in enumerate(order):
        eta = eta0 * alpha ** (k / n)
        g = batch_gradient(corpus, space, i, w, sw[i])
        shrink = 1.0 - eta * reg.l2
        p = eta * reg.l1
        if penalty == "naive":
            w = shrink * w - eta * g - p * np.sign(w)
        elif penalty == "clipping":
            half = shrink * w - eta * g
            w = np.where(
                half > 0,
                np.maximum(0.0, half - p),
                np.where(half < 0, np.minimum(0.0, half + p), 0.0),
            )
        else:
            u = shrink * u + p
            q = shrink * q
            w = shrink * w
            for f in sample_features(space, corpus, i):
                w[f] -= eta * g[f]
                z = w[f]
                if w[f] > 0:
                    w[f] = max(0.0, w[f] - (u + q[f]))
                elif w[f] < 0:
                    w[f] = min(0.0, w[f] + (u - q[f]))
                q[f] += w[f] - z
        out.append(w.copy())
    return out


def kernel_steps(obj, reg, order, penalty, eta0, alpha):
    """K.run_steps_bigram one step at a time on the forced ``order``; the weights w = beta * v after
    each step (clipping: every weight brought up to date on a copy first)."""
    c, s = obj.corpus, obj.space
    n, d, L = obj.n, s.n_features, s.n_labels
    pcode = sgdl1.PENALTIES[penalty]
    v, aux, lastk = np.zeros(d), np.zeros(d), np.zeros(d if penalty == "naive" else 1, np.int64)
    scal = np.array([1.0, 0.0])
    stamp = np.full(s.n_attributes + s.n_battributes, -1, np.int64)
    bound = step_bound(obj)
    touched, sign = np.empty(bound, np.int64), np.empty(bound if penalty == "naive" else 1)
    Tmax = int(np.diff(c.seq_ptr).max())
    node, edge = np.empty((Tmax, L)), np.empty((L, L))
    edges = np.empty((Tmax, L, L))
    args = (
        c.seq_ptr,
        c.tok_ptr,
        c.attr,
        c.val,
        c.y,
        s.attr_ptr,
        s.feat_label,
        s.trans_index,
        s.n_state,
        c.btok_ptr,
        c.battr,
        c.bval,
        s.battr_ptr,
        s.bfeat_pair,
        s.bigram_offset,
    )
    order = np.asarray(order, np.int64)
    out = []
    for k in range(len(order)):
        K.run_steps_bigram(
            *args,
            order,
            k,
            k + 1,
            k,
            n,
            K.EXPONENTIAL,
            eta0,
            alpha,
            reg.l1,
            reg.l2,
            pcode,
            v,
            scal,
            aux,
            lastk,
            aux,
            stamp,
            touched,
            sign,
            node,
            edges,
            edges.reshape(Tmax, L * L),
            edge,
            s.full_rows,
            obj.sw,
            *sgdl1.bigram_step_arrays(obj),
        )
        vv, aa, lk = v.copy(), aux.copy(), lastk.copy()
        if pcode != K.CUMUL:
            K.catch_up_all(pcode, vv, scal[K.U], k + 1, aa, lk)
        out.append(scal[K.BETA] * vv)
    return out


@pytest.mark.parametrize(
    "penalty,support", [("cumulative", "all"), ("clipping", "all"), ("cumulative", "observed")]
)
def test_kernel_matches_dense_reference_step_by_step(penalty, support):
    """The cumulative step takes a full attribute (every label pair: support all) seen once in a
    sequence in one walk (gradient and penalty, kernels.sgdl1._step_run), one seen more than once in
    two, and the others (observed support) pair by pair: the problem has sequences of each kind."""
    X, Y, B, space, corpus = bigram_problem(11, n_seq=6, max_len=4, support=support)
    once = again = 0
    for i in range(corpus.n_sequences):
        t0, t1 = corpus.seq_ptr[i], corpus.seq_ptr[i + 1]
        seen = corpus.battr[corpus.btok_ptr[t0 + 1] : corpus.btok_ptr[t1]] if t1 - t0 > 1 else []
        counts = np.bincount(np.asarray(seen, np.int64), minlength=1)
        once += int(np.sum(counts == 1))
        again += int(np.sum(counts > 1))
    assert once > 0 and again > 0
    omega = np.array([1.0, 2.0, 0.5, 1.0, 3.0, 1.5])
    wc = weighted(corpus, omega)
    reg = Regularization(l1=0.04, l2=0.3)
    obj = Objective(wc, space, reg)
    order = [3, 0, 5, 5, 1, 4, 2, 0, 3, 1, 2, 4, 5, 0, 1, 3, 2, 4]  # forced, with repeats
    ref = dense_steps(space, wc, obj.sw, reg, order, penalty, 0.5, 0.85, wc.n_sequences)
    got = kernel_steps(obj, reg, order, penalty, 0.5, 0.85)
    for step, (a, b) in enumerate(zip(got, ref)):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-11, err_msg=f"step {step}")
        np.testing.assert_array_equal(a == 0, b == 0, err_msg=f"step {step}")
    assert (
        np.count_nonzero(ref[-1][space.bigram_offset :] == 0) >= 3
    )  # the penalty did clip bigram weights
    assert np.count_nonzero(ref[-1][space.bigram_offset :]) >= 3


def test_lazy_naive_equals_dense_naive_with_a_constant_rate():
    # naive (subgradient) penalty, lazily: exact with a constant rate and no L2 (see kernels.sgdl1)
    X, Y, B, space, corpus = bigram_problem(13, n_seq=6, max_len=4)
    reg = Regularization(l1=0.05, l2=0.0)
    obj = Objective(corpus, space, reg)
    order = [2, 5, 0, 0, 3, 1, 4, 2, 5, 1, 3, 0]
    ref = dense_steps(space, corpus, np.ones(6), reg, order, "naive", 0.3, 1.0, 6)
    got = kernel_steps(obj, reg, order, "naive", 0.3, 1.0)
    for step, (a, b) in enumerate(zip(got, ref)):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-10, err_msg=f"step {step}")


def test_sgd_l1_with_a_forced_order_equals_the_dense_reference(monkeypatch):
    # the driver (sgd_l1: blocks, end-of-pass folding) on a forced visiting order, against the dense
    # steps
    X, Y, B, space, corpus = bigram_problem(12, n_seq=5, max_len=4)
    reg = Regularization(l1=0.03, l2=0.2)
    orders = {0: [4, 1, 0, 3, 2], 1: [0, 0, 2, 4, 1]}
    monkeypatch.setattr(
        sgdl1, "pass_order", lambda seed, epoch, n: np.array(orders[epoch], np.int64)
    )
    xs = []
    sgd_l1(
        Objective(corpus, space, reg),
        None,
        reg=reg,
        max_iterations=2,
        penalty="cumulative",
        schedule="exponential",
        eta0=0.5,
        alpha=0.85,
        callback=lambda info: xs.append(info["x"].copy()),
    )
    ref = dense_steps(
        space,
        corpus,
        np.ones(corpus.n_sequences),
        reg,
        orders[0] + orders[1],
        "cumulative",
        0.5,
        0.85,
        corpus.n_sequences,
    )
    np.testing.assert_allclose(xs[0], ref[4], rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(xs[1], ref[9], rtol=1e-9, atol=1e-11)


# ------------------------------------------------------------------ the optimum, protocol
@pytest.fixture(scope="module")
def learnable():
    """Labels drawn from a CRF with bigram features (so there is something to learn), 60
    sequences."""
    rng = np.random.default_rng(21)
    X, Y = random_sequences(rng, 60, n_labels=3, max_len=6, n_attr=8, real=False)
    B = random_bigram_attributes(rng, X, 4, False)
    space, corpus = build(X, Y, B=B, support="all")
    from crfkit.model import CRFModel

    w = rng.normal(scale=1.5, size=space.n_features)
    Y = CRFModel(space, w).tag(X, B=B)
    space, corpus = build(X, Y, B=B, support="all")
    return X, Y, B, space, corpus


@pytest.mark.parametrize("support", ["all", "observed"])
def test_reaches_the_owlqn_optimum(learnable, support):
    X, Y, B, _, _ = learnable
    space, corpus = build(X, Y, B=B, support=support)
    reg = Regularization(l1=0.01, l2=0.02)
    ref = train_corpus(
        space,
        corpus,
        algorithm="owlqn",
        reg=reg,
        gtol=1e-12,
        delta=0.0,
        epsilon=0.0,
        max_iterations=3000,
    )
    fstar = ref.objective
    res = sgd_l1(
        Objective(corpus, space, reg),
        None,
        reg=reg,
        max_iterations=300,
        penalty="cumulative",
        schedule="inverse",
        eta0=0.5,
        seed=0,
    )
    assert res.f == pytest.approx(
        Objective(corpus, space, reg).value(res.x, count=False), rel=1e-12
    )
    # measured: 4.7e-6 (all) and 2.2e-6 (observed) relative, weights within 0.007, the same active
    # set
    assert fstar <= res.f * (1 + 1e-12)
    assert (res.f - fstar) / fstar < 2e-5
    np.testing.assert_allclose(res.x, ref.model.weights, atol=0.02)
    np.testing.assert_array_equal(res.x != 0, ref.model.weights != 0)
    # the bigram block is trained, not left at zero
    assert np.count_nonzero(res.x[space.bigram_offset :]) > 0


def test_resume_is_bitwise_and_interrupt_returns_the_last_pass(learnable):
    X, Y, B, space, corpus = learnable
    reg = Regularization(l1=0.01, l2=0.05)
    kw = dict(penalty="cumulative", schedule="exponential", eta0=0.5, alpha=0.85, seed=4)
    xs = []
    full = sgd_l1(
        Objective(corpus, space, reg),
        None,
        reg=reg,
        max_iterations=5,
        callback=lambda info: xs.append(info["x"].copy()),
        **kw,
    )
    states = {}
    sgd_l1(
        Objective(corpus, space, reg),
        None,
        reg=reg,
        max_iterations=2,
        callback=lambda info: states.__setitem__(info["iteration"], info["state"]()),
        **kw,
    )
    rest = sgd_l1(
        Objective(corpus, space, reg), None, reg=reg, max_iterations=5, state=states[2], **kw
    )
    np.testing.assert_array_equal(rest.x, full.x)

    def stop(info):
        if info["iteration"] == 3:
            raise KeyboardInterrupt

    res = sgd_l1(
        Objective(corpus, space, reg), None, reg=reg, max_iterations=5, callback=stop, **kw
    )
    assert res.status == "interrupted" and res.iterations == 3
    np.testing.assert_array_equal(res.x, xs[2])


def test_train_checkpoint_resume_warm_start_and_auto_rates(learnable, tmp_path):
    X, Y, B, space, corpus = learnable
    kw = dict(
        B=B,
        algorithm="sgd-l1",
        support="all",
        l1=0.01,
        l2=0.01,
        seed=3,
        params={"penalty": "cumulative", "eta0": 0.5, "alpha": 0.85},
    )
    full = train(X, Y, max_iterations=4, **kw)
    assert full.model.space.n_bigram == space.n_bigram
    assert np.count_nonzero(full.model.weights[space.bigram_offset :]) > 0
    ck = tmp_path / "b.ckpt"
    part = train(X, Y, max_iterations=2, checkpoint=ck, checkpoint_every=1, **kw)
    assert part.iterations == 2
    rest = train(X, Y, max_iterations=4, resume=ck, **kw)
    np.testing.assert_array_equal(rest.model.weights, full.model.weights)
    # warm start from a model: the first pass starts from its weights (a lower objective than from
    # zero)
    cold = train(X, Y, max_iterations=1, **kw)
    warm = train(X, Y, max_iterations=1, init=full.model, **kw)
    assert warm.objective < cold.objective
    # eta0 / alpha = auto: picked on a sample from the paper's grids
    auto = train(
        X,
        Y,
        max_iterations=2,
        **dict(kw, params={"eta0": "auto", "alpha": "auto", "tune_sample": 20, "tune_passes": 2}),
    )
    assert auto.iterations == 2 and np.isfinite(auto.objective)
    assert "picked on 20 sequences" in auto.message


@pytest.mark.parametrize("algorithm", ["sg", "sag", "adagrad", "l2sgd"])
def test_other_algorithms_refuse_bigram_features_clearly(algorithm):
    X, Y, B, space, corpus = bigram_problem(0)
    with pytest.raises(CrfkitError, match="bigram-observation.*sgd-l1"):
        train(X, Y, B=B, algorithm=algorithm, max_iterations=1)


def test_cli_nettalk_3grm_sgd_l1(tmp_path):
    from crfkit.cli import main
    from crfkit.datasets.nettalk import nettalk_split, write_columns
    from crfkit.model import CRFModel

    train_s, _, test_s = nettalk_split(9)
    write_columns(train_s[:60], tmp_path / "train.txt")
    m = tmp_path / "m.crf"
    rc = main(
        [
            "train",
            str(tmp_path / "train.txt"),
            "--features",
            "nettalk:3-grm",
            "--support",
            "all",
            "-a",
            "sgd-l1",
            "--rho1",
            "0.5",
            "--rho2",
            "1e-5",
            "--max-iterations",
            "3",
            "-p",
            "eta0=0.5",
            "-m",
            str(m),
        ]
    )
    assert rc in (0, None)
    model = CRFModel.load(m)
    assert model.space.n_bigram > 0
    assert model.meta["algorithm"] == "sgd-l1"


def _large_space_run(monkeypatch, algorithm, l1):
    """(space, corpus, reg, run) for the traced-memory tests: a 3,440-feature space with 20 labels,
    the optimizer's kernels loaded, SPILL_MIN 0 (the path of a large space: dense kept vectors go to
    a file)."""
    import importlib

    from crfkit.optim import stochastic
    from crfkit.optim.stochastic import REGISTRY

    monkeypatch.setattr(stochastic, "SPILL_MIN", 0)
    rng = np.random.default_rng(0)
    X, Y = random_sequences(rng, 30, n_labels=20, n_attr=3000, max_len=6)
    space, corpus = build(X, Y, support="all")
    reg = Regularization(l1=l1, l2=0.01)
    mod, fn = REGISTRY[algorithm]
    run = getattr(importlib.import_module(mod), fn)
    run(
        Objective(corpus, space, reg), None, reg=reg, max_iterations=1
    )  # kernels loaded outside the count
    return space, corpus, reg, run


@pytest.mark.parametrize("algorithm", ["sgd-l1", "bcd"])
def test_a_pass_holds_no_more_than_one_transient_vector_beside_the_run_s_state(
    monkeypatch, algorithm
):
    """After the first pass, a pass of the large-scale methods allocates (numpy, traced) at most
    about one vector of the candidate space's size beyond what the run already holds: the kept state
    of the last pass is compact (the weights' non-zeros, SGD-L1's penalties in a temporary file as
    on a large space: SPILL_MIN 0) and replaced, not added to (the callback's dict, which held the
    earlier copies, included), and BCD's transition trials write into the weights."""
    import tracemalloc

    space, corpus, reg, run = _large_space_run(monkeypatch, algorithm, 0.01)
    base = {}

    def cb(info):
        if info["iteration"] == 1:
            tracemalloc.reset_peak()
            base["current"] = tracemalloc.get_traced_memory()[0]

    tracemalloc.start()
    try:
        run(Objective(corpus, space, reg), None, reg=reg, max_iterations=4, callback=cb)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    vectors = (peak - base["current"]) / (space.n_features * 8)
    assert vectors < 1.5, f"{algorithm}: {vectors:.2f} vectors"


def test_kept_vectors_give_back_the_same_bits(tmp_path, monkeypatch):
    """optim.stochastic.Kept: a sparse vector as its non-zeros, a dense one in memory or (large) in
    a temporary file; get() gives the same dtype, shape and bits, a new array each time."""
    from crfkit.optim.stochastic import Kept

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    rng = np.random.default_rng(5)
    sparse = np.zeros(5000)
    sparse[rng.choice(5000, 40, replace=False)] = rng.normal(size=40)
    sparse[7] = -0.0  # a negative zero is kept as such (its bits)
    dense = rng.normal(size=5000)
    ints = rng.integers(-3, 3, 5000)
    for x, spill, where in (
        (sparse, 0, "idx"),
        (dense, 1 << 20, "dense"),
        (dense, 0, "file"),
        (ints, 0, "file"),
        (np.zeros(0), 0, "idx"),
    ):
        k = Kept(x, spill=spill)
        assert getattr(k, where) is not None
        for _ in range(2):
            got = k.get()
            assert got.dtype == x.dtype and got.shape == x.shape
            assert got.tobytes() == x.tobytes()
            got[:] = 1  # the caller owns what get() gives
        if where == "file":
            assert k.nbytes == 0
        if where == "idx" and x.size:
            assert k.nbytes == 41 * (4 + 8)
    # no room for the temporary file: a warning, and the copy in memory
    monkeypatch.setattr(
        tempfile, "TemporaryFile", lambda **kw: (_ for _ in ()).throw(OSError(28, "No space left"))
    )
    with pytest.warns(RuntimeWarning, match="kept in memory"):
        k = Kept(dense, spill=0)
    assert k.dense is not None and k.get().tobytes() == dense.tobytes()


def test_kernel_matches_dense_reference_with_full_and_partial_bigram_attributes():
    """A space where some bigram attributes have every label pair (observed support, 2 labels) and
    others do not: the cumulative step takes the full ones seen once in one walk and the others pair
    by pair, in the same sequences, and matches the dense reference step by step."""
    X, Y, B, space, corpus = bigram_problem(
        8, n_seq=40, L=2, max_len=5, n_attr=4, n_battr=3, support="observed"
    )
    full = space.bigram_full_rows.astype(bool)
    assert full.any() and not full.all()
    mixed = 0
    for i in range(corpus.n_sequences):
        t0, t1 = corpus.seq_ptr[i], corpus.seq_ptr[i + 1]
        seen = corpus.battr[corpus.btok_ptr[t0 + 1] : corpus.btok_ptr[t1]] if t1 - t0 > 1 else []
        mixed += bool(len(seen)) and full[seen].any() and not full[seen].all()
    assert mixed > 0
    wc = weighted(corpus, np.random.default_rng(1).uniform(0.5, 2.0, corpus.n_sequences))
    reg = Regularization(l1=0.04, l2=0.3)
    obj = Objective(wc, space, reg)
    order = list(np.random.default_rng(2).permutation(wc.n_sequences)[:25])
    ref = dense_steps(space, wc, obj.sw, reg, order, "cumulative", 0.5, 0.85, wc.n_sequences)
    got = kernel_steps(obj, reg, order, "cumulative", 0.5, 0.85)
    for step, (a, b) in enumerate(zip(got, ref)):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-11, err_msg=f"step {step}")
        np.testing.assert_array_equal(a == 0, b == 0, err_msg=f"step {step}")


def test_kept_trusts_only_a_true_count_and_gathers_every_dtype():
    """Kept(nnz=...) takes the caller's count of non-zero bits (the driver has it from its pass-end
    walk), and a wrong count is an error, not a silently wrong copy; the sparse path gives numpy's
    non-zero positions for every dtype, -0.0 included."""
    from crfkit.optim.stochastic import Kept

    rng = np.random.default_rng(9)
    for dtype in (np.float64, np.float32, np.int64, np.int8, np.uint16):
        x = np.zeros(4000, dtype=dtype)
        x[rng.choice(4000, 50, replace=False)] = 3
        if dtype in (np.float64, np.float32):
            x[11] = -0.0
        bits = x.view(f"u{x.itemsize}")
        nnz = int(np.count_nonzero(bits))
        for given in (None, nnz):
            k = Kept(x, nnz=given)
            assert k.idx is not None and np.array_equal(k.idx, np.flatnonzero(bits))
            assert k.get().tobytes() == x.tobytes()
        for wrong in (nnz - 1, nnz + 1, 0):
            with pytest.raises(ValueError, match="not the vector's count"):
                Kept(x, nnz=wrong)


def test_fold_returns_the_pass_end_counts_and_finiteness():
    """kernels.sgdl1.fold: v and aux scaled by beta exactly as before, and from the same walk the
    counts the pass end needs: np.count_nonzero(v) (-0.0 is zero), the non-zero bits (-0.0 counts)
    and whether all are finite."""
    rng = np.random.default_rng(3)
    for case in range(40):
        v = rng.normal(size=500) * (rng.random(500) < 0.2)
        v[rng.choice(500, 5)] = -0.0
        if case % 4 == 1:
            v[rng.integers(500)] = np.nan
        if case % 4 == 2:
            v[rng.integers(500)] = -np.inf
        aux = rng.normal(size=500)
        b = 1.0 if case % 5 == 0 else rng.uniform(0.5, 1.0)
        scal = np.array([b, 0.25])
        v0, aux0 = v.copy(), aux.copy()
        nz, nzbits, finite = K.fold(v, aux, scal)
        assert v.tobytes() == (v0 * b).tobytes() and aux.tobytes() == (aux0 * b).tobytes()
        assert scal[K.BETA] == 1.0 and scal[K.U] == 0.25 * b
        assert nz == np.count_nonzero(v)
        assert nzbits == np.count_nonzero(v.view(np.uint64))
        assert finite == bool(np.isfinite(v).all())


def test_all_finite_is_numpy_s():
    from crfkit.kernels.vec import all_finite

    rng = np.random.default_rng(4)
    for n in (0, 1, 7, 1000):
        x = rng.normal(size=n)
        assert all_finite(x)
        for bad in (np.nan, np.inf, -np.inf):
            if n:
                y = x.copy()
                y[rng.integers(n)] = bad
                assert not all_finite(y)


def test_not_resumable_keeps_the_weights_only_and_train_asks_for_it_without_a_checkpoint(
    learnable, monkeypatch, tmp_path
):
    """sgd_l1(resumable=False): the same run, and a Ctrl-C in a pass returns the last completed
    pass's weights with no state (its penalties were not kept); train() asks for it exactly when no
    checkpoint is written."""
    import functools

    from crfkit.optim import stochastic

    monkeypatch.setattr(stochastic, "SPILL_MIN", 0)
    X, Y, B, space, corpus = learnable
    reg = Regularization(l1=0.02, l2=0.01)
    kw = dict(reg=reg, seed=3, penalty="cumulative", eta0=0.5)
    full = sgd_l1(Objective(corpus, space, reg), None, max_iterations=4, **kw)
    lean = sgd_l1(Objective(corpus, space, reg), None, max_iterations=4, resumable=False, **kw)
    assert lean.x.tobytes() == full.x.tobytes() and lean.f == full.f
    seen = {}
    real = K.run_steps_bigram

    def interrupting(*a, **k):
        out = real(*a, **k)
        if len(seen) == 2:
            raise KeyboardInterrupt
        return out

    monkeypatch.setattr(K, "run_steps_bigram", interrupting)
    res = sgd_l1(
        Objective(corpus, space, reg),
        None,
        max_iterations=4,
        resumable=False,
        callback=lambda info: seen.__setitem__(info["iteration"], info["x"].copy()),
        **kw,
    )
    monkeypatch.setattr(K, "run_steps_bigram", real)
    assert res.status == "interrupted" and res.iterations == 2 and res.state is None
    np.testing.assert_array_equal(res.x, seen[2])
    asked = []
    inner = sgdl1.sgd_l1

    @functools.wraps(inner)
    def spy(*a, **k):
        asked.append(k.get("resumable"))
        return inner(*a, **k)

    monkeypatch.setattr(sgdl1, "sgd_l1", spy)
    tkw = dict(
        B=B,
        algorithm="sgd-l1",
        support="all",
        l1=0.01,
        l2=0.01,
        max_iterations=1,
        params={"eta0": 0.5},
    )
    train(X, Y, **tkw)
    train(X, Y, checkpoint=tmp_path / "c.ckpt", **tkw)
    train(X, Y, **dict(tkw, params={"eta0": 0.5, "resumable": True}))
    assert asked == [False, True, True]


@pytest.mark.parametrize("algorithm", ["sgd-l1", "bcd"])
def test_interrupt_in_a_pass_returns_the_kept_state_and_resumes_bitwise(
    learnable, monkeypatch, algorithm
):
    """The last completed pass's state, kept compactly through the next pass (the weights as their
    non-zeros, SGD-L1's penalty state in a temporary file: SPILL_MIN 0), is what a Ctrl-C in the
    middle of that pass returns, and a run resumed from it ends with the uninterrupted run's
    weights, to the bit."""
    import importlib

    from crfkit.optim import stochastic
    from crfkit.optim.stochastic import REGISTRY

    monkeypatch.setattr(stochastic, "SPILL_MIN", 0)
    X, Y, B, space, corpus = learnable
    reg = Regularization(l1=0.02, l2=0.01)
    mod, fn = REGISTRY[algorithm]
    run = getattr(importlib.import_module(mod), fn)
    kw = dict(reg=reg, seed=3)
    full = run(Objective(corpus, space, reg), None, max_iterations=5, **kw)
    seen = {}

    def keep(info):
        seen[info["iteration"]] = info["x"].copy()

    # a Ctrl-C in the third pass, after the kernel that steps (sgd-l1) / a block sweep (bcd)
    module = importlib.import_module(mod)
    target = (
        (module.K, "run_steps_bigram")
        if algorithm == "sgd-l1"
        else (module.Engine, "attribute_blocks")
    )
    real = getattr(*target)

    def interrupting(*a, **k):
        out = real(*a, **k)
        if len(seen) == 2:  # the third pass has stepped (the weights moved): Ctrl-C
            raise KeyboardInterrupt
        return out

    monkeypatch.setattr(*target, interrupting)
    res = run(Objective(corpus, space, reg), None, max_iterations=5, callback=keep, **kw)
    monkeypatch.setattr(*target, real)
    assert res.status == "interrupted" and res.iterations == 2
    np.testing.assert_array_equal(res.x, seen[2])
    state = res.state
    assert state["iteration"] == 2
    rest = run(Objective(corpus, space, reg), None, max_iterations=5, state=state, **kw)
    np.testing.assert_array_equal(rest.x, full.x)


@pytest.mark.parametrize("algorithm", ["sgd-l1", "bcd"])
def test_a_pass_holds_the_run_s_own_vectors_only(monkeypatch, algorithm):
    """Between passes (at the callback) the memory a run holds is its own working vectors (SGD-L1:
    the weights and the cumulative penalties; BCD: the weights and its caches), not copies of them:
    the last completed pass is kept as the weights' non-zeros and, on a large space, the penalties
    in a temporary file (SPILL_MIN 0 here).  Traced numpy memory at the third pass's callback, in
    vectors of the candidate space, against what the same run held with the copies of earlier
    code."""
    import tracemalloc

    space, corpus, reg, run = _large_space_run(monkeypatch, algorithm, 0.05)
    obj = Objective(corpus, space, reg)
    obj.value(np.zeros(space.n_features))  # the objective's own arrays built before the count
    held = {}

    def cb(info):
        if info["iteration"] == 3:
            held["current"] = tracemalloc.get_traced_memory()[0]

    tracemalloc.start()
    try:
        run(obj, None, reg=reg, max_iterations=4, callback=cb)
    finally:
        tracemalloc.stop()
    held_bytes = held["current"]
    if algorithm == "bcd":
        # BCD's kept forward and backward messages (2 x tokens x (labels + 1) doubles, two int64
        # markers per sequence) follow the corpus, not the candidate space: left out of the count
        # (here 1.2 vectors of this small space; 0.1 of NETtalk 5-grm's)
        held_bytes -= 8 * (
            2 * corpus.n_tokens * (space.n_labels + 1) + 2 * (len(corpus.seq_ptr) - 1)
        )
    vectors = held_bytes / (space.n_features * 8)
    # measured: sgd-l1 2.54 (4.51 with the earlier copies), bcd 4.93 (6.01; 5.04 with the kept
    # messages left out)
    limit = {"sgd-l1": 3.0, "bcd": 5.5}[algorithm]
    assert vectors < limit, f"{algorithm}: {vectors:.2f} vectors held"


def test_l1_norm_needs_no_temporary_of_the_vector_s_size():
    """objective.l1_norm: sum |w| to rounding, through chunks (no np.abs(w) of the candidate space's
    size at the end of an L1 run's pass)."""
    import tracemalloc

    from crfkit import objective

    rng = np.random.default_rng(2)
    for n in (0, 5, objective.ABS_CHUNK, objective.ABS_CHUNK + 1, 5 * objective.ABS_CHUNK + 77):
        w = rng.normal(size=n) * (rng.random(n) < 0.3)
        assert objective.l1_norm(w) == pytest.approx(float(np.abs(w).sum()), rel=1e-13, abs=0)
    w = rng.normal(size=40 * objective.ABS_CHUNK)
    tracemalloc.start()
    try:
        objective.l1_norm(w)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * objective.ABS_CHUNK * 8


# ------------------------------------------------------------------ Wapiti's space: the label pairs
# implicit
def test_every_pair_space_keeps_its_pairs_implicit_through_sgd_l1():
    """support="all" builds the label-pair features with bfeat_pair implicit (ALL_PAIRS); SGD-L1
    (its steps and its per-pass objective read full rows as vectors) trains without making it, to
    the same bits as the same space with the pairs stored, and reading it gives the stored
    layout."""
    from crfkit.model import ALL_PAIRS, FeatureSpace
    from crfkit.train import regularization

    _, _, _, space, corpus = bigram_problem(seed=4, n_seq=20, L=4)
    assert "bfeat_pair" not in space.__dict__ and space.n_bigram == space.n_battributes * 16 > 0
    assert np.array_equal(space.bigram_full_rows, np.ones(space.n_battributes, np.int8))
    assert len(space.pairs_for_full_rows) == 0 and "bfeat_pair" not in space.__dict__
    assert "bfeat_pair=ALL_PAIRS" in repr(space) and "bfeat_pair" not in space.__dict__
    reg = regularization(corpus.total_weight, rho1=0.5, rho2=0.1)
    params = dict(penalty="cumulative", schedule="exponential", eta0=0.5, alpha=0.9)
    res = train_corpus(
        space, corpus, algorithm="sgd-l1", reg=reg, max_iterations=3, params=params, seed=1
    )
    assert "bfeat_pair" not in space.__dict__  # trained without making the pairs
    from crfkit.checkpoint import fingerprint

    stored = FeatureSpace(
        labels=list(space.labels),
        attributes=list(space.attributes),
        attr_ptr=space.attr_ptr,
        feat_label=space.feat_label,
        trans_index=space.trans_index,
        battributes=list(space.battributes),
        battr_ptr=space.battr_ptr,
        bfeat_pair=np.tile(np.arange(16), space.n_battributes),
    )
    ref = train_corpus(
        stored, corpus, algorithm="sgd-l1", reg=reg, max_iterations=3, params=params, seed=1
    )
    # a checkpoint's fingerprint digests the implicit pairs as the stored ones, without making them
    assert (
        fingerprint(space, corpus) == fingerprint(stored, corpus)
        and "bfeat_pair" not in space.__dict__
    )
    assert np.array_equal(res.model.weights, ref.model.weights) and res.objective == ref.objective
    # read from Python (a model's pruning, its dump...): made once, the stored layout
    assert (
        np.array_equal(space.bfeat_pair, stored.bfeat_pair) and space.bfeat_pair.dtype == np.int16
    )
    assert space.__dict__["bfeat_pair"] is space.bfeat_pair
    # the layout is checked: an attribute without its L^2 features is refused
    with pytest.raises(ValueError, match="ALL_PAIRS"):
        FeatureSpace(
            labels=list(space.labels),
            attributes=list(space.attributes),
            attr_ptr=space.attr_ptr,
            feat_label=space.feat_label,
            trans_index=space.trans_index,
            battributes=list(space.battributes),
            battr_ptr=space.battr_ptr - 1,
            bfeat_pair=ALL_PAIRS,
        )


def _stored_pairs_twin(space):
    from crfkit.model import FeatureSpace

    L2 = space.n_labels**2
    return FeatureSpace(
        labels=list(space.labels),
        attributes=list(space.attributes),
        attr_ptr=space.attr_ptr,
        feat_label=space.feat_label,
        trans_index=space.trans_index,
        battributes=list(space.battributes),
        battr_ptr=space.battr_ptr,
        bfeat_pair=np.tile(np.arange(L2), space.n_battributes),
    )


@pytest.mark.parametrize(
    "blocks,safeguard", [("joint", "scale"), ("joint", "armijo"), ("separate", "armijo")]
)
def test_bcd_dev_scores_decoding_and_pruning_keep_the_pairs_implicit(blocks, safeguard):
    """BCD (empirical counts, block gradients, trial steps, per-position transitions), its
    objective, the dev set's decoding, sparse and dense marginals and the model's pruning read the
    implicit pairs through kernels.chain.pair_of: nothing makes bfeat_pair, and every result has the
    stored layout's bits."""
    from crfkit.train import regularization

    _, _, _, space, corpus = bigram_problem(seed=7, n_seq=24, L=4)
    _, _, _, dspace, dev = bigram_problem(seed=8, n_seq=10, L=4)
    assert "bfeat_pair" not in space.__dict__
    stored = _stored_pairs_twin(space)
    reg = regularization(corpus.total_weight, rho1=0.3, rho2=0.1)
    params = dict(blocks=blocks, safeguard=safeguard)
    kw = dict(algorithm="bcd", reg=reg, max_iterations=4, params=params, seed=2)
    res = train_corpus(space, corpus, dev=corpus, dev_labels=corpus.y, **kw)
    assert "bfeat_pair" not in space.__dict__  # trained and scored without the pairs
    ref = train_corpus(stored, corpus, dev=corpus, dev_labels=corpus.y, **kw)
    assert np.array_equal(res.model.weights, ref.model.weights) and res.objective == ref.objective
    assert (
        0 < np.count_nonzero(res.model.weights[space.bigram_offset :]) < space.n_bigram
    )  # some zeros (L1)
    for kw2 in (
        dict(marginals=True, sparse=True),
        dict(marginals=True, sparse=False),
        dict(marginals=True),
        dict(labels=corpus.y),
    ):
        got, want = res.model.decode(corpus, **kw2), ref.model.decode(corpus, **kw2)
        assert set(got) == set(want) and "ids" in got
        for key in want:
            assert np.array_equal(got[key], want[key]), key
    assert res.model.space is space and "bfeat_pair" not in space.__dict__
    pruned, wp = space.prune(res.model.weights)
    spruned, swp = stored.prune(ref.model.weights)
    assert "bfeat_pair" not in space.__dict__
    assert np.array_equal(wp, swp) and np.array_equal(pruned.bfeat_pair, spruned.bfeat_pair)
    assert (
        np.array_equal(pruned.battr_ptr, spruned.battr_ptr)
        and pruned.battributes == spruned.battributes
    )
    assert pruned.bfeat_pair.dtype == spruned.bfeat_pair.dtype


@pytest.mark.parametrize("threads,sparse", [(1, False), (2, False), (1, True), (2, True)])
def test_owlqn_keeps_the_pairs_implicit(threads, sparse):
    """The full-batch gradient (one chunk: each sequence's label-pair part added at once; several:
    the attribute-partitioned reduction), with the standard or the sparse forward-backward, reads
    implicit pairs as identity rows: OWL-QN trains without making bfeat_pair, to the stored layout's
    bits."""
    from crfkit.train import regularization

    _, _, _, space, corpus = bigram_problem(seed=9, n_seq=30, L=4)
    stored = _stored_pairs_twin(space)
    reg = regularization(corpus.total_weight, rho1=0.3, rho2=0.1)
    kw = dict(algorithm="owlqn", reg=reg, max_iterations=6, threads=threads, sparse_fb=sparse)
    res = train_corpus(space, corpus, **kw)
    ref = train_corpus(stored, corpus, **kw)
    assert "bfeat_pair" not in space.__dict__
    # bitwise also with the sparse recursions over several chunks: their sums over labels are in
    # index order since stop 40 (they moved in the last bit with the per-thread arrays' addresses
    # before)
    assert np.array_equal(res.model.weights, ref.model.weights) and res.objective == ref.objective


def test_every_pair_space_pickles_its_pairs_as_implicit():
    """A space whose label pairs are every pair pickles them as ALL_PAIRS (made or not): the pickle
    holds no array of one entry per label-pair feature, unpickling does not make it, and the copy
    reads the same layout.  A model saved with pickle (or a space sent to Dask's workers) at NETtalk
    5-grm would otherwise carry 247 MB of pair indices."""
    import copy
    import pickle

    from crfkit.model import ALL_PAIRS

    _, _, _, space, corpus = bigram_problem(seed=4, n_seq=20, L=4)
    n_pairs = space.n_bigram
    assert n_pairs == space.n_battributes * 16 > 0 and "bfeat_pair" not in space.__dict__
    blob = pickle.dumps(space)
    assert "bfeat_pair" not in space.__dict__  # pickling did not make them
    back = pickle.loads(blob)
    assert "bfeat_pair" not in back.__dict__ and back.__dict__["_all_pairs"]
    assert pickle.loads(pickle.dumps(ALL_PAIRS)) is ALL_PAIRS
    # once made (read from Python), they still travel implicit: the pickle is no larger
    made = space.bfeat_pair
    assert len(pickle.dumps(space)) == len(blob)
    again = pickle.loads(pickle.dumps(space))
    assert "bfeat_pair" not in again.__dict__
    assert np.array_equal(again.bfeat_pair, made) and again.bfeat_pair.dtype == made.dtype
    assert np.array_equal(copy.deepcopy(space).battr_ptr, space.battr_ptr)
    # a stored (not every-pair) layout travels as its array, unchanged
    from crfkit.model import FeatureSpace

    part = FeatureSpace(
        labels=list(space.labels),
        attributes=list(space.attributes),
        attr_ptr=space.attr_ptr,
        feat_label=space.feat_label,
        trans_index=space.trans_index,
        battributes=list(space.battributes[:1]),
        battr_ptr=np.array([0, 3]),
        bfeat_pair=np.array([0, 5, 15]),
    )
    back = pickle.loads(pickle.dumps(part))
    assert not back.__dict__["_all_pairs"] and np.array_equal(back.bfeat_pair, [0, 5, 15])
    # the pickle of the every-pair space is smaller than its pairs alone would be
    assert len(blob) < len(pickle.dumps(space.__getstate__() | {"bfeat_pair": made}))
