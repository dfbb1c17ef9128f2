"""OWL-QN: the elastic-net optimum (against scipy on split variables), KKT, exact zeros, orthant
projection, stopping rules, Ctrl-C, and the lbfgs -> owlqn switch of train() for L1."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.optimize import minimize

from conftest import random_sequences
from crfkit.features.encode import build
from crfkit.objective import Objective, Regularization, regularization
from crfkit.optim.lbfgs import lbfgs
from crfkit.optim.owlqn import owlqn, pseudo_gradient
from crfkit.train import ALGORITHMS, train, train_corpus


# ------------------------------------------------------------------ problems
def quadratic(seed=0, d=30, cond=100.0, scale=3.0):
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    A = Q @ np.diag(np.geomspace(1.0, cond, d)) @ Q.T
    b = scale * rng.normal(size=d)

    def fg(x):
        Ax = A @ x
        return 0.5 * x @ Ax - b @ x, Ax - b

    return fg, d


def logistic(seed=1, n=200, d=25, l2=1e-3):
    """Mean logistic loss on a sparse ground truth (+ a small L2 term)."""
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(n, d))
    w_true = np.zeros(d)
    w_true[:5] = rng.normal(scale=2.0, size=5)
    y = np.where(rng.random(n) < 1.0 / (1.0 + np.exp(-A @ w_true)), 1.0, -1.0)

    def fg(x):
        z = y * (A @ x)
        f = np.mean(np.logaddexp(0.0, -z)) + 0.5 * l2 * x @ x
        s = -y / (1.0 + np.exp(z))  # d/dz_i of log(1 + e^{-z_i}) times y_i
        return f, A.T @ s / n + l2 * x

    return fg, d


def tiny_crf(seed=9, l2=0.01):
    """Smooth part (nll/n + l2/2 |w|^2) of a tiny CRF objective, and the full objective's
    Objective."""
    rng = np.random.default_rng(seed)
    X, Y = random_sequences(rng, 30, n_labels=3, real=True, n_attr=12, max_len=6)
    space, corpus = build(X, Y)
    smooth = Objective(corpus, space, Regularization(l2=l2), threads=1)
    return smooth, space.n_features, (corpus, space)


def elastic_net_reference(fg, d, l1):
    """min f(w) + l1 |w|_1 by L-BFGS-B on w = u - v, u, v >= 0 (exact for L1), tight tolerances."""

    def h(z):
        f, g = fg(z[:d] - z[d:])
        return f + l1 * z.sum(), np.concatenate([g + l1, -g + l1])

    r = minimize(
        h,
        np.zeros(2 * d),
        jac=True,
        method="L-BFGS-B",
        bounds=[(0.0, None)] * (2 * d),
        options=dict(maxiter=100_000, maxfun=200_000, ftol=1e-16, gtol=1e-13, maxcor=20),
    )
    w = r.x[:d] - r.x[d:]
    return w, fg(w)[0] + l1 * np.abs(w).sum()


def kkt_violation(x, g, l1):
    nz = x != 0
    return max(
        np.abs(g[nz] + l1 * np.sign(x[nz])).max(initial=0.0),
        np.maximum(np.abs(g[~nz]) - l1, 0.0).max(initial=0.0),
    )


PROBLEMS = {
    "quadratic": (lambda: quadratic(), 1.0),
    "quadratic-strong-l1": (lambda: quadratic(seed=3, cond=1e3), 2.5),
    "logistic": (lambda: logistic(), 0.02),
}


# -------------------------------------------------------------- pseudo-gradient
def test_pseudo_gradient_by_hand():
    l1 = 1.0
    x = np.array([2.0, -3.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    g = np.array([0.5, 0.5, 0.3, -0.7, 1.0, 1.5, -4.0])
    # x>0: g+l1; x<0: g-l1; x=0: g+l1 if <0, g-l1 if >0, else 0 (|g| <= l1, including |g| = l1)
    np.testing.assert_array_equal(pseudo_gradient(x, g, l1), [1.5, -0.5, 0.0, 0.0, 0.0, 0.5, -3.0])
    np.testing.assert_array_equal(pseudo_gradient(x, g, 0.0), g)


# ------------------------------------------------------- optimum against scipy
@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_reaches_the_elastic_net_optimum(name):
    make, l1 = PROBLEMS[name]
    fg, d = make()
    w_ref, F_ref = elastic_net_reference(fg, d, l1)
    res = owlqn(fg, np.zeros(d), l1, epsilon=1e-11, delta=0.0, max_iterations=3000)
    assert res.status in ("converged", "linesearch_failed"), res.message
    F = fg(res.x)[0] + l1 * np.abs(res.x).sum()
    assert res.f == pytest.approx(F, rel=1e-14)  # res.f is the full objective
    assert abs(res.f - F_ref) <= 1e-6 * abs(F_ref)
    assert res.f <= F_ref + 1e-9 * abs(F_ref)  # not worse than the reference
    # same zero pattern where the reference is clearly zero / clearly non-zero
    g_ref = fg(w_ref)[1]
    clearly_zero = (np.abs(w_ref) < 1e-9) & (np.abs(g_ref) < 0.9 * l1)
    clearly_nonzero = np.abs(w_ref) > 1e-4
    assert clearly_zero.any() and clearly_nonzero.any()  # the problem is a real L1 problem
    assert np.all(res.x[clearly_zero] == 0.0)  # exact zeros, not small numbers
    assert np.all(res.x[clearly_nonzero] != 0.0)
    assert np.all(np.sign(res.x[clearly_nonzero]) == np.sign(w_ref[clearly_nonzero]))
    assert kkt_violation(res.x, res.g, l1) < 1e-6
    np.testing.assert_allclose(res.x, w_ref, atol=1e-5)


def test_tiny_crf_elastic_net_optimum_and_kkt():
    smooth, d, (corpus, space) = tiny_crf()
    n = corpus.n_sequences
    l1 = 0.05
    full = Objective(corpus, space, Regularization(l1=l1, l2=smooth.reg.l2), threads=1)
    w_ref, F_ref = elastic_net_reference(smooth.value_and_grad, d, l1)
    res = owlqn(
        smooth.value_and_grad, np.zeros(d), l1, epsilon=1e-10, delta=0.0, max_iterations=3000
    )
    assert res.status in ("converged", "linesearch_failed"), res.message
    assert res.f == pytest.approx(
        full.value(res.x), rel=1e-12
    )  # same objective as Objective(l1, l2)
    assert abs(res.f - F_ref) <= 1e-6 * abs(F_ref)
    g_ref = smooth.value_and_grad(w_ref)[1]
    clearly_zero = (np.abs(w_ref) < 1e-9) & (np.abs(g_ref) < 0.9 * l1)
    clearly_nonzero = np.abs(w_ref) > 1e-4
    assert clearly_zero.sum() >= 3 and clearly_nonzero.sum() >= 3
    assert np.all(res.x[clearly_zero] == 0.0) and np.all(res.x[clearly_nonzero] != 0.0)
    # KKT of f + l1|w|_1: g_i + l1 sign(w_i) = 0 on the support, |g_i| <= l1 off it
    assert kkt_violation(res.x, res.g, l1) < 1e-6
    assert n == 30


@pytest.mark.parametrize("problem", ["quadratic", "crf"])
def test_l1_zero_gives_the_lbfgs_optimum(problem):
    if problem == "quadratic":
        fg, d = quadratic(seed=5)
    else:
        obj, d, _ = tiny_crf(seed=4)
        fg = obj.value_and_grad
    a = lbfgs(fg, np.zeros(d), epsilon=1e-11, delta=0.0, max_iterations=3000)
    b = owlqn(fg, np.zeros(d), 0.0, epsilon=1e-11, delta=0.0, max_iterations=3000)
    assert b.f == pytest.approx(a.f, rel=1e-10)
    np.testing.assert_allclose(b.x, a.x, atol=1e-6)
    assert np.abs(b.g).max() < 1e-6  # Armijo on f alone resolves no better at f ~ 10


def test_huge_l1_gives_zero_and_stops_at_once():
    fg, d = quadratic()
    g0 = fg(np.zeros(d))[1]
    res = owlqn(fg, np.zeros(d), np.abs(g0).max() * 1.01, epsilon=1e-8)
    assert res.status == "converged" and res.iterations == 0 and not res.x.any()


# -------------------------------------------------- line search and iterates
def test_iterates_stay_in_orthants_and_objective_never_increases():
    fg, d = quadratic(seed=7, cond=1e3)
    l1 = 1.5
    xs, fs, infos = [np.zeros(d)], [fg(np.zeros(d))[0]], []

    def cb(info):
        xs.append(info["x"].copy())
        fs.append(info["f"])
        # x, g, pg: the driver's buffers, rewritten by the next iterations (copies kept)
        infos.append(dict(info, pg=info["pg"].copy(), x=info["x"].copy(), g=info["g"].copy()))

    owlqn(fg, np.zeros(d), l1, epsilon=1e-9, delta=0.0, max_iterations=300, callback=cb)
    assert len(xs) > 10
    for a, b in zip(xs, xs[1:]):
        assert np.all(a * b >= 0.0)  # no coordinate jumps over zero within one step
    assert all(b <= a for a, b in zip(fs, fs[1:]))
    pgs = [pseudo_gradient(xs[0], fg(xs[0])[1], l1)] + [i["pg"] for i in infos]
    for k in range(len(infos)):
        step = xs[k + 1] - xs[k]
        # every coordinate moves against its pseudo-gradient (the direction is constrained) ...
        assert np.all(step * pgs[k] <= 0.0)
        assert not np.any(step[pgs[k] == 0.0])
        # ... and the step satisfies Andrew & Gao's sufficient decrease along the projected step
        assert fs[k + 1] <= fs[k] + 1e-4 * float(pgs[k] @ step)
    for info in infos:
        x, g = info["x"], info["g"]
        assert info["f"] == pytest.approx(fg(x)[0] + l1 * np.abs(x).sum(), rel=1e-13)
        assert info["f_smooth"] == pytest.approx(fg(x)[0], rel=1e-13)
        np.testing.assert_array_equal(info["pg"], pseudo_gradient(x, g, l1))
        assert info["nnz"] == np.count_nonzero(x)
        assert info["gnorm"] == pytest.approx(np.linalg.norm(info["pg"]))
        assert info["gnorm_inf"] == pytest.approx(np.abs(info["pg"]).max())
        assert info["xnorm"] == pytest.approx(np.linalg.norm(x))


def test_evaluations_are_counted():
    fg, d = logistic()
    calls = [0]

    def counted(x):
        calls[0] += 1
        return fg(x)

    seen = []
    res = owlqn(
        counted,
        np.zeros(d),
        0.02,
        epsilon=0.0,
        delta=0.0,
        max_iterations=12,
        callback=lambda i: seen.append(i["n_evals"]),
    )
    assert res.status == "max_iterations" and res.iterations == 12 and len(seen) == 12
    assert res.n_evals == calls[0] == seen[-1]
    assert all(b > a for a, b in zip(seen, seen[1:]))


def test_no_trial_accepted_takes_the_best_rejected_trial_evaluated_again():
    """With an Armijo constant no curved step can meet, every line search ends without an accepted
    trial: the point taken is the rejected trial with the lowest F, evaluated once more (the same
    point and values), and F still never increases."""
    fg, d = logistic()
    l1 = 0.02
    calls = []

    def recorded(x):
        f, g = fg(x)
        calls.append((x.copy(), f + l1 * float(np.abs(x).sum())))
        return f, g

    infos = []
    res = owlqn(
        recorded,
        np.zeros(d),
        l1,
        epsilon=0.0,
        delta=0.0,
        max_iterations=6,
        armijo=0.999,
        max_linesearch=5,
        callback=lambda i: infos.append((i["x"].copy(), i["f"], i["n_evals"], i["linesearch_ok"])),
    )
    assert res.iterations >= 3
    used = 1  # the starting point's evaluation
    F_prev = calls[0][1]
    fallbacks = 0
    for x, F, n_evals, ok in infos:
        trials = calls[used:n_evals]
        used = n_evals
        if not ok:
            fallbacks += 1
            best = min(trials[:-1], key=lambda t: t[1])
            np.testing.assert_array_equal(
                trials[-1][0], best[0]
            )  # the last call: the best trial again
            assert trials[-1][1] == best[1] and best[1] < F_prev
        np.testing.assert_array_equal(x, trials[-1][0])
        # (F here sums |x| in numpy's order, owlqn in the kernel's: equal to rounding)
        assert F == pytest.approx(trials[-1][1], rel=1e-13) and trials[-1][1] <= F_prev
        F_prev = trials[-1][1]
    assert fallbacks >= 1


# ------------------------------------------------------------ stopping rules
@pytest.mark.parametrize("period,delta", [(1, 1e-3), (3, 1e-4), (10, 1e-7)])
def test_delta_rule_on_the_full_objective(period, delta):
    obj, d, _ = tiny_crf(seed=2)
    l1 = 0.02
    F0 = obj.value_and_grad(np.zeros(d))[0]
    fs = [F0]
    res = owlqn(
        obj.value_and_grad,
        np.zeros(d),
        l1,
        epsilon=0.0,
        delta=delta,
        period=period,
        max_iterations=1000,
        callback=lambda i: fs.append(i["f"]),
    )
    assert res.status == "delta", res.message
    K = res.iterations
    assert len(fs) == K + 1 and fs[-1] == res.f
    for k in range(period, K):
        assert (fs[k - period] - fs[k]) / fs[k] >= delta, f"should have stopped at {k}"
    assert (fs[K - period] - fs[K]) / fs[K] < delta


def test_epsilon_gtol_stop_value_max_iterations_and_callback():
    fg, d = quadratic(seed=11)
    l1 = 1.0
    x0 = np.zeros(d)
    ratios = []
    r = owlqn(
        fg,
        x0,
        l1,
        epsilon=1e-4,
        delta=0.0,
        max_iterations=1000,
        callback=lambda i: ratios.append(i["gnorm"] / max(1.0, i["xnorm"])),
    )
    assert r.status == "converged"
    assert ratios[-1] <= 1e-4 and all(q > 1e-4 for q in ratios[:-1])
    pg = pseudo_gradient(r.x, r.g, l1)
    assert np.linalg.norm(pg) / max(1.0, np.linalg.norm(r.x)) <= 1e-4

    r = owlqn(fg, x0, l1, epsilon=0.0, delta=0.0, gtol=1e-3, max_iterations=1000)
    assert r.status == "gtol" and np.abs(pseudo_gradient(r.x, r.g, l1)).max() <= 1e-3

    _, F_ref = elastic_net_reference(fg, d, l1)
    target = F_ref + 1e-3 * abs(F_ref)
    fs = []
    r = owlqn(
        fg,
        x0,
        l1,
        epsilon=0.0,
        delta=0.0,
        stop_value=target,
        max_iterations=1000,
        callback=lambda i: fs.append(i["f"]),
    )
    assert r.status == "stop_value" and r.f <= target and all(f > target for f in fs[:-1])

    r = owlqn(fg, x0, l1, epsilon=0.0, delta=0.0, max_iterations=5)
    assert r.status == "max_iterations" and r.iterations == 5

    r = owlqn(
        fg,
        x0,
        l1,
        epsilon=0.0,
        delta=0.0,
        max_iterations=100,
        callback=lambda i: i["iteration"] == 3,
    )
    assert r.status == "callback" and r.iterations == 3


def test_keyboard_interrupt_returns_the_last_accepted_point():
    fg, d = quadratic(seed=12)
    calls = [0]
    accepted = []

    def fg_int(x):
        calls[0] += 1
        if calls[0] == 15:
            raise KeyboardInterrupt
        return fg(x)

    r = owlqn(
        fg_int,
        np.zeros(d),
        1.0,
        epsilon=0.0,
        delta=0.0,
        max_iterations=1000,
        callback=lambda i: accepted.append((i["x"].copy(), i["f"])),
    )
    assert r.status == "interrupted" and r.iterations == len(accepted) > 0
    np.testing.assert_array_equal(r.x, accepted[-1][0])
    assert r.f == accepted[-1][1]

    def fg_first(x):
        raise KeyboardInterrupt

    r = owlqn(fg_first, np.zeros(d), 1.0)
    assert r.status == "interrupted" and r.iterations == 0 and math.isnan(r.f)


def test_bad_arguments():
    fg, d = quadratic()
    with pytest.raises(ValueError):
        owlqn(fg, np.zeros(d), -1.0)
    with pytest.raises(ValueError):
        owlqn(fg, np.zeros(d), float("nan"))


# ------------------------------------------------------------------ train()
def chunky(seed=3, n_seq=50):
    """Labels from a Markov chain, one informative attribute per token and many noise attributes."""
    rng = np.random.default_rng(seed)
    labels = ["A", "B", "C"]
    X, Y = [], []
    for _ in range(n_seq):
        T = int(rng.integers(3, 10))
        y = [int(rng.integers(3))]
        for _t in range(1, T):
            y.append(y[-1] if rng.random() < 0.6 else int(rng.integers(3)))
        X.append(
            [
                [
                    f"sig={labels[l if rng.random() < 0.85 else int(rng.integers(3))]}",
                    f"noise={int(rng.integers(40))}",
                ]
                for l in y
            ]
        )
        Y.append([labels[l] for l in y])
    return X, Y


def test_train_lbfgs_with_c1_switches_to_owlqn_and_gives_exact_zeros(tmp_path):
    assert "owlqn" in ALGORITHMS
    X, Y = chunky()
    trace = tmp_path / "trace.jsonl"
    res = train(
        X, Y, c1=2.0, c2=0.1, epsilon=1e-9, delta=0.0, max_iterations=2000, threads=1, trace=trace
    )
    w = res.model.weights
    assert res.model.meta["algorithm"] == "owlqn"
    recs = [json.loads(line) for line in trace.read_text().splitlines()]
    assert recs and all(r["algorithm"] == "owlqn" for r in recs)
    assert recs[-1]["nnz"] == np.count_nonzero(w) == res.history[-1]["nnz"]
    n_zero = int(np.sum(w == 0.0))
    assert n_zero > len(w) // 4 and np.count_nonzero(w) > 0  # L1 does its job, with exact zeros
    # the optimum of CRFsuite's c1/c2 objective, checked by KKT on the smooth part
    space, corpus = build(X, Y)
    reg = regularization(corpus.n_sequences, c1=2.0, c2=0.1)
    assert res.reg == reg
    full = Objective(corpus, space, reg, threads=1)
    smooth = Objective(corpus, space, Regularization(l2=reg.l2), threads=1)
    assert res.objective == pytest.approx(full.value(w), rel=1e-12)
    assert res.objective_crfsuite == pytest.approx(corpus.n_sequences * full.value(w), rel=1e-12)
    assert kkt_violation(w, smooth.value_and_grad(w)[1], reg.l1) < 1e-6
    # the explicit algorithm name gives the same run
    again = train(
        X,
        Y,
        c1=2.0,
        c2=0.1,
        epsilon=1e-9,
        delta=0.0,
        max_iterations=2000,
        threads=1,
        algorithm="owlqn",
    )
    assert again.objective == res.objective and again.iterations == res.iterations


def test_train_without_l1_keeps_lbfgs_and_owlqn_is_selectable():
    X, Y = chunky(seed=5, n_seq=30)
    a = train(X, Y, c2=1.0, max_iterations=30, threads=1)
    assert a.model.meta["algorithm"] == "lbfgs"
    b = train(
        X, Y, c2=1.0, algorithm="owlqn", epsilon=1e-9, delta=0.0, max_iterations=500, threads=1
    )
    assert b.model.meta["algorithm"] == "owlqn"
    c = train(X, Y, c2=1.0, epsilon=1e-9, delta=0.0, max_iterations=500, threads=1)
    assert b.objective == pytest.approx(c.objective, rel=1e-9)


def test_train_default_stopping_with_l1_uses_crfsuite_epsilon_units():
    X, Y = chunky(seed=6, n_seq=40)
    space, corpus = build(X, Y)
    n = corpus.n_sequences
    reg = regularization(n, c1=1.0)
    res = train_corpus(
        space, corpus, reg=reg, epsilon=1e-3, delta=0.0, max_iterations=1000, threads=1
    )
    assert res.status == "converged"
    smooth = Objective(corpus, space, Regularization(l2=reg.l2), threads=1)
    w = res.model.weights
    pg = pseudo_gradient(w, smooth.value_and_grad(w)[1], reg.l1)
    # CRFsuite's rule on the sum-form pseudo-gradient (n times ours)
    assert n * np.linalg.norm(pg) / max(1.0, np.linalg.norm(w)) <= 1e-3


# ----------------------------------------------------------------------------- float32 history
@pytest.mark.parametrize("l1", [0.0, 0.05])
def test_float32_history_reaches_the_same_optimum(l1):
    """history='float32' stores the (s, y) pairs in single precision (half the memory of a large
    space's run): the same optimum as float64 to 1e-6, on the tiny CRF, by owlqn and (l1 = 0)
    lbfgs."""
    smooth, d, (corpus, space) = tiny_crf()
    fg = smooth.value_and_grad
    runs = {}
    for h in ("float64", "float32"):
        if l1:
            runs[h] = owlqn(
                fg,
                np.zeros(d),
                l1,
                epsilon=1e-9,
                delta=0.0,
                max_iterations=2000,
                history=h,
                fresh_gradients=True,
            )
        else:
            runs[h] = lbfgs(
                fg,
                np.zeros(d),
                epsilon=1e-9,
                delta=0.0,
                max_iterations=2000,
                history=h,
                fresh_gradients=True,
            )
        assert runs[h].status in ("converged", "linesearch_failed"), runs[h].message
    assert abs(runs["float32"].f - runs["float64"].f) <= 1e-6 * abs(runs["float64"].f)
    np.testing.assert_allclose(runs["float32"].x, runs["float64"].x, atol=1e-3)
    st = runs["float32"].state
    assert st["S"].dtype == np.float32 and st["Y"].dtype == np.float32
    assert runs["float64"].state["S"].dtype == np.float64
    # the paths differ (the directions are those of the rounded pairs): the test is not vacuous
    assert not np.array_equal(runs["float32"].x, runs["float64"].x)


@pytest.mark.parametrize("algo", ["owlqn", "lbfgs"])
def test_float32_history_resumes_bitwise(algo):
    smooth, d, _ = tiny_crf()
    fg = smooth.value_and_grad
    states = {}

    def keep(info):
        states[info["iteration"]] = info["state"]()

    def run(**kw):
        if algo == "owlqn":
            return owlqn(fg, np.zeros(d), 0.05, delta=0.0, epsilon=0.0, history="float32", **kw)
        return lbfgs(fg, np.zeros(d), delta=0.0, epsilon=0.0, history="float32", **kw)

    full = run(max_iterations=14, callback=keep)
    resumed = run(max_iterations=14, state=states[6])
    assert np.array_equal(full.x, resumed.x) and full.f == resumed.f


def test_owlqn_fresh_gradients_is_the_same_run():
    smooth, d, _ = tiny_crf()
    a = owlqn(smooth.value_and_grad, np.zeros(d), 0.05, max_iterations=25, fresh_gradients=True)
    b = owlqn(smooth.value_and_grad, np.zeros(d), 0.05, max_iterations=25)
    assert np.array_equal(a.x, b.x) and a.f == b.f and a.iterations == b.iterations


def test_owlqn_gradients_into_reused_buffers_is_the_same_run():
    """fg_into (the gradient written into the driver's two buffers, the trial points in reused
    arrays) gives the same iterates, bit for bit, as fresh arrays; the caller's x0 is left alone;
    the callback's x and g are the driver's buffers (valid until it returns), so a kept copy is what
    it saw."""
    smooth, d, _ = tiny_crf()
    x0 = np.zeros(d)
    seen_fresh, seen_into, arrays = [], [], set()

    def keep(seen):
        def cb(info):
            seen.append((info["x"].copy(), info["g"].copy(), info["f"]))
            arrays.add(id(info["x"]))

        return cb

    a = owlqn(
        smooth.value_and_grad,
        x0.copy(),
        0.05,
        max_iterations=25,
        fresh_gradients=True,
        epsilon=0.0,
        delta=0.0,
        callback=keep(seen_fresh),
    )
    arrays.clear()
    b = owlqn(
        smooth.value_and_grad,
        x0,
        0.05,
        max_iterations=25,
        fg_into=smooth.value_and_grad_into,
        epsilon=0.0,
        delta=0.0,
        callback=keep(seen_into),
    )
    assert (
        a.iterations == b.iterations == 25 and np.array_equal(a.x, b.x) and np.array_equal(a.g, b.g)
    )
    assert a.f == b.f and a.n_evals == b.n_evals
    for (xa, ga, fa), (xb, gb, fb) in zip(seen_fresh, seen_into):
        assert np.array_equal(xa, xb) and np.array_equal(ga, gb) and fa == fb
    assert not x0.any()  # x0 was copied, never used as a trial buffer
    assert len(arrays) <= 2  # x and the trial point take turns
    # a run with rejected trials (the best one evaluated again) is the same run too
    fg, dl = logistic()

    def fg_into(x, out):
        f, g = fg(x)
        out[:] = g
        return f

    kw = dict(epsilon=0.0, delta=0.0, max_iterations=8, armijo=0.999, max_linesearch=5)
    c = owlqn(fg, np.zeros(dl), 0.02, **kw)
    e = owlqn(fg, np.zeros(dl), 0.02, fg_into=fg_into, **kw)
    assert np.array_equal(c.x, e.x) and c.f == e.f and c.n_evals == e.n_evals


def test_train_history_auto_choice_meta_and_errors(monkeypatch):
    from crfkit import train as train_mod
    from crfkit.errors import ParameterError

    assert train_mod.lbfgs_history("auto", 6, 299_000) == "float64"  # 2 * 7 * 8 * 299k < 32 MiB
    assert train_mod.lbfgs_history("auto", 6, 300_000) == "float32"
    assert train_mod.lbfgs_history("auto", 6, 10_000_000) == "float32"
    assert train_mod.lbfgs_history("float64", 6, 10**9) == "float64"
    with pytest.raises(ParameterError, match="history"):
        train_mod.lbfgs_history("half", 6, 10)
    X, Y = chunky()
    r64 = train(X, Y, c1=0.1, max_iterations=8, threads=1)
    assert r64.model.meta["lbfgs_history"] == "float64"
    r32 = train(X, Y, c1=0.1, max_iterations=8, threads=1, history="float32")
    assert r32.model.meta["lbfgs_history"] == "float32"
    import crfkit.training.config as config_mod

    monkeypatch.setattr(config_mod, "HISTORY_AUTO_BYTES", 1)  # every space is "large"
    ra = train(X, Y, c1=0.1, max_iterations=8, threads=1)
    assert ra.model.meta["lbfgs_history"] == "float32"
    assert np.array_equal(ra.model.weights, r32.model.weights)
    with pytest.raises(ParameterError, match="history"):
        train(X, Y, max_iterations=2, threads=1, history="float16")


# ------------------------------------------------------------ sparse steps
def test_sparse_steps_history_matches_the_dense_one():
    """A history that keeps its steps sparse gives the dense history's directions (to rounding), its
    pairs densify back exactly, and loading them gives the same directions bit for bit."""
    from crfkit.optim.lbfgs import History

    rng = np.random.default_rng(4)
    n, m = 400, 4
    for dtype in (np.float64, np.float32):
        dense, sparse = (
            History(m, n, spare=False, dtype=dtype),
            History(m, n, spare=False, dtype=dtype, sparse_steps=True),
        )
        x, g = np.zeros(n), rng.normal(size=n)
        for it in range(7):
            x_new = x.copy()
            moved = rng.choice(n, size=25, replace=False)
            x_new[moved] += rng.normal(size=25)
            g_new = g + rng.normal(size=n) * 0.1
            g_new[moved] += 2.0 * (x_new - x)[moved]  # positive curvature along the step
            for h in (dense, sparse):
                h.prepare(x_new, x, g_new, g)
                h.commit()
            x, g = x_new, g_new
            assert len(sparse) == len(dense) == min(it + 1, m)
            q = rng.normal(size=n)
            d1, d2 = dense.direction(q), sparse.direction(q)
            np.testing.assert_allclose(
                d2, d1, rtol=1e-12 if dtype == np.float64 else 1e-5, atol=1e-12
            )
            assert all(sparse.s_idx[j].shape[0] <= 25 for j in sparse.order)
        S1, Y1, r1 = dense.pairs()
        S2, Y2, r2 = sparse.pairs()
        assert np.array_equal(S1, S2) and np.array_equal(Y1, Y2)
        # float32 pairs: 1/s.y over the stored pair, summed in another order
        np.testing.assert_allclose(r2, r1, rtol=0 if dtype == np.float64 else 1e-6)
        again = History(m, n, spare=False, dtype=dtype, sparse_steps=True)
        again.load(S2, Y2, r2)
        q = rng.normal(size=n)
        assert np.array_equal(again.direction(q), sparse.direction(q))
    with pytest.raises(ValueError):
        History(m, n, spare=True, sparse_steps=True)


@pytest.mark.parametrize("history", ["float64", "float32"])
def test_owlqn_sparse_steps_reaches_the_same_optimum_and_resumes_bitwise(history):
    smooth, d, _ = tiny_crf()
    l1 = 0.05
    kw = dict(epsilon=0.0, delta=0.0, history=history)
    dense = owlqn(
        smooth.value_and_grad, np.zeros(d), l1, max_iterations=200, sparse_steps=False, **kw
    )
    states = {}
    sparse = owlqn(
        smooth.value_and_grad,
        np.zeros(d),
        l1,
        max_iterations=200,
        sparse_steps=True,
        callback=lambda i: (
            states.__setitem__(i["iteration"], i["state"]()) if i["iteration"] == 9 else None
        ),
        **kw,
    )
    assert sparse.f == pytest.approx(dense.f, rel=1e-9)
    np.testing.assert_allclose(sparse.x, dense.x, atol=1e-5)
    assert np.array_equal(sparse.x == 0, dense.x == 0)
    full = owlqn(smooth.value_and_grad, np.zeros(d), l1, max_iterations=20, sparse_steps=True, **kw)
    resumed = owlqn(
        smooth.value_and_grad,
        np.zeros(d),
        l1,
        max_iterations=20,
        sparse_steps=True,
        state=states[9],
        **kw,
    )
    assert np.array_equal(full.x, resumed.x) and full.f == resumed.f
    # the paths differ from the dense history's (the sums run in another order): not vacuous
    d20 = owlqn(smooth.value_and_grad, np.zeros(d), l1, max_iterations=20, sparse_steps=False, **kw)
    assert np.allclose(full.x, d20.x, atol=1e-8)


def test_owlqn_sparse_steps_default_follows_size_and_l1(monkeypatch):
    import crfkit.optim.owlqn as oq

    made = []
    real = oq.start_run

    def spy(*a, **k):
        made.append(k["sparse_steps"])
        return real(*a, **k)

    monkeypatch.setattr(oq, "start_run", spy)
    smooth, d, _ = tiny_crf()
    owlqn(smooth.value_and_grad, np.zeros(d), 0.05, max_iterations=2)
    owlqn(smooth.value_and_grad, np.zeros(d), 0.0, max_iterations=2)
    monkeypatch.setattr(oq, "SPARSE_STEPS_MIN", 10)
    owlqn(smooth.value_and_grad, np.zeros(d), 0.05, max_iterations=2)
    owlqn(smooth.value_and_grad, np.zeros(d), 0.0, max_iterations=2)
    assert made == [False, False, True, False]
