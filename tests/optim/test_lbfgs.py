"""L-BFGS: convergence, the strong-Wolfe line search, CRFsuite's stopping rules, counting."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import minimize

from conftest import random_sequences
from crfkit.features.encode import build
from crfkit.objective import Objective, Regularization
from crfkit.optim.lbfgs import lbfgs, two_loop, wolfe_line_search


class Counted:
    """An (f, g) callable that counts its calls."""

    def __init__(self, fg):
        self.fg = fg
        self.calls = 0

    def __call__(self, x):
        self.calls += 1
        return self.fg(x)


def quadratic(seed=0, d=20, cond=100.0):
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    A = Q @ np.diag(np.geomspace(1.0, cond, d)) @ Q.T
    b = rng.normal(size=d)

    def fg(x):
        Ax = A @ x
        return 0.5 * x @ Ax - b @ x, Ax - b

    return fg, np.linalg.solve(A, b)


def rosenbrock(x):
    a, b = x
    f = (1 - a) ** 2 + 100 * (b - a * a) ** 2
    g = np.array([-2 * (1 - a) - 400 * a * (b - a * a), 200 * (b - a * a)])
    return f, g


def test_converges_on_convex_quadratic():
    fg, xstar = quadratic()
    res = lbfgs(Counted(fg), np.zeros(len(xstar)), epsilon=1e-12, delta=0.0, max_iterations=500)
    np.testing.assert_allclose(res.x, xstar, atol=1e-6)
    assert res.status in ("converged", "linesearch_failed")
    assert res.f == pytest.approx(fg(xstar)[0], rel=1e-12)


def test_converges_on_rosenbrock_from_standard_start():
    res = lbfgs(rosenbrock, np.array([-1.2, 1.0]), epsilon=1e-12, delta=0.0, max_iterations=1000)
    np.testing.assert_allclose(res.x, [1.0, 1.0], atol=1e-6)
    assert res.f < 1e-12
    assert res.iterations < 200


def test_converges_at_start_point():
    fg, xstar = quadratic(1, d=5)
    res = lbfgs(fg, xstar, epsilon=1e-6)
    assert res.status == "converged" and res.iterations == 0 and res.n_evals == 1


# ------------------------------------------------------------------------ line search
def _phi_factory(f, df):
    calls = []

    def phi(a):
        calls.append(a)
        return f(a), df(a), ("payload", a)

    return phi, calls


LINE_FUNCS = {
    "quadratic": (lambda a: (a - 3.0) ** 2, lambda a: 2 * (a - 3.0)),
    "quartic": (lambda a: (a - 0.01) ** 4 - 0.5 * a * 1e-6, lambda a: 4 * (a - 0.01) ** 3 - 0.5e-6),
    "wiggly": (
        lambda a: -a / (a * a + 2.0) + 0.004 * math.sin(20 * a),
        lambda a: (a * a - 2.0) / (a * a + 2.0) ** 2 + 0.08 * math.cos(20 * a),
    ),
    # overflows to +inf (derivative nan) for long steps
    "exp": (
        lambda a: math.exp(a - 5.0) - a if a < 700 else math.inf,
        lambda a: math.exp(a - 5.0) - 1.0 if a < 700 else math.nan,
    ),
}


@pytest.mark.parametrize("name", sorted(LINE_FUNCS))
@pytest.mark.parametrize("step", [1e-6, 0.1, 1.0, 50.0, 1e4])
def test_wolfe_line_search_returns_a_strong_wolfe_step(name, step):
    f, df = LINE_FUNCS[name]
    c1, c2 = 1e-4, 0.9
    phi, calls = _phi_factory(f, df)
    f0, d0 = f(0.0), df(0.0)
    assert d0 < 0
    a, fa, pl, n, ok = wolfe_line_search(phi, f0, d0, step, c1=c1, c2=c2, max_evals=40)
    assert ok
    assert a > 0
    assert fa == f(a) and pl == ("payload", a)
    assert fa <= f0 + c1 * a * d0  # sufficient decrease
    assert abs(df(a)) <= c2 * abs(d0)  # (strong) curvature
    assert n == len(calls)


@pytest.mark.parametrize("name", sorted(LINE_FUNCS))
@pytest.mark.parametrize("step", [1e-6, 1.0, 1e4])
@pytest.mark.parametrize("max_evals", [1, 2, 3, 40])
def test_wolfe_line_search_holds_no_earlier_trial(name, step, max_evals):
    """No trial's payload is alive while the next trial is evaluated (crfkit's payloads are two
    vectors of the problem's size); when no Wolfe point is found, the best trial is evaluated again
    for its payload."""
    import gc
    import weakref

    f, df = LINE_FUNCS[name]

    class Payload:
        def __init__(self, a):
            self.a = a

    alive, steps = [], []

    def phi(a):
        gc.collect()
        assert not any(r() is not None for r in alive), "an earlier trial's payload is still held"
        steps.append(a)
        p = Payload(a)
        alive.append(weakref.ref(p))
        return f(a), df(a), p

    f0, d0 = f(0.0), df(0.0)
    a, fa, pl, n, ok = wolfe_line_search(phi, f0, d0, step, c1=1e-4, c2=0.9, max_evals=max_evals)
    assert n == len(steps)
    if pl is not None:
        assert pl.a == a and fa == f(a)
        if not ok:  # the best (lowest) trial below f0, evaluated once more
            assert steps[-1] == a and n >= 2 and fa == min(f(x) for x in steps[:-1]) < f0
    else:
        assert not ok and a == 0.0 and all(not f(x) < f0 for x in steps)


def test_wolfe_line_search_with_tight_curvature():
    f, df = LINE_FUNCS["wiggly"]
    phi, calls = _phi_factory(f, df)
    a, fa, _, n, ok = wolfe_line_search(phi, f(0.0), df(0.0), 1.0, c1=1e-4, c2=0.1, max_evals=60)
    assert ok and abs(df(a)) <= 0.1 * abs(df(0.0)) and fa <= f(0.0) + 1e-4 * a * df(0.0)


def test_wolfe_line_search_recovers_from_overflow():
    # f is +inf beyond a = 2 (like an objective that overflows on a too-long step)
    def f(a):
        return math.inf if a > 2 else (a - 1.5) ** 2

    def df(a):
        return math.nan if a > 2 else 2 * (a - 1.5)

    phi, calls = _phi_factory(f, df)
    a, fa, _, n, ok = wolfe_line_search(phi, f(0.0), df(0.0), 100.0, max_evals=40)
    assert ok and 0 < a <= 2 and math.isfinite(fa)
    assert fa <= f(0.0) + 1e-4 * a * df(0.0) and abs(df(a)) <= 0.9 * abs(df(0.0))
    assert n == len(calls)


def test_wolfe_line_search_budget_and_no_decrease():
    # an ascent "direction": no decrease anywhere -> no payload, ok False, budget respected
    phi, calls = _phi_factory(lambda a: a * a + a, lambda a: 2 * a + 1)
    a, fa, pl, n, ok = wolfe_line_search(phi, 0.0, -1.0, 1.0, max_evals=7)
    assert not ok and pl is None and a == 0.0 and fa == 0.0
    assert n == len(calls) <= 7


def test_two_loop_without_pairs_is_steepest_descent_and_with_pairs_is_exact_on_quadratic():
    from collections import deque

    g = np.array([1.0, -2.0, 3.0])
    np.testing.assert_array_equal(two_loop(g, deque(), deque(), deque()), -g)
    A = np.diag([1.0, 4.0, 9.0])
    S, Y, R = deque(), deque(), deque()
    for s in np.eye(3):
        y = A @ s
        S.append(s)
        Y.append(y)
        R.append(1.0 / (s @ y))
    np.testing.assert_allclose(two_loop(g, S, Y, R), -np.linalg.solve(A, g), rtol=1e-12)


# ------------------------------------------------------------------- stopping rules
def _shifted_rosenbrock(x):
    f, g = rosenbrock(x)
    return f + 1.0, g


def _tiny_crf_objective(seed=9, l2=0.01):
    rng = np.random.default_rng(seed)
    X, Y = random_sequences(rng, 25, n_labels=3, real=True, n_attr=10, max_len=6)
    space, corpus = build(X, Y)
    return Objective(corpus, space, Regularization(l2=l2)), space.n_features


@pytest.mark.parametrize(
    "problem,period,delta",
    [
        ("rosenbrock", 3, 1e-3),
        ("rosenbrock", 5, 1e-2),
        ("rosenbrock", 1, 1e-2),
        ("crf", 10, 1e-4),
        ("crf", 10, 1e-7),
        ("crf", 2, 1e-5),
    ],
)
def test_delta_stopping_follows_crfsuite_rule(problem, period, delta):
    """Stop at the first iteration k >= period with (f_{k-period} - f_k) / f_k < delta."""
    if problem == "rosenbrock":
        fg = _shifted_rosenbrock
        x0 = np.array([-1.2, 1.0])
    else:
        obj, d = _tiny_crf_objective()
        fg, x0 = obj.value_and_grad, np.zeros(d)
    fs = [fg(x0)[0]]
    res = lbfgs(
        fg,
        x0,
        epsilon=0.0,
        delta=delta,
        period=period,
        max_iterations=500,
        callback=lambda info: fs.append(info["f"]),
    )
    assert res.status == "delta"
    K = res.iterations
    assert len(fs) == K + 1
    for k in range(period, K):
        assert (fs[k - period] - fs[k]) / fs[k] >= delta, f"should have stopped at {k}"
    assert (fs[K - period] - fs[K]) / fs[K] < delta


def test_delta_stopping_never_before_period_iterations():
    # f ~ 1000 + tiny quadratic: the relative improvement is < delta from the start
    fgq, _ = quadratic(2, d=6)

    def fg(x):
        f, g = fgq(x)
        return f + 1000.0, g

    for period in (1, 4, 7):
        res = lbfgs(fg, np.zeros(6), epsilon=0.0, delta=1e-2, period=period, max_iterations=100)
        assert res.status == "delta" and res.iterations == period


def test_epsilon_stopping_rule():
    fg, xstar = quadratic(3)
    gn = []
    res = lbfgs(
        fg,
        np.zeros(len(xstar)),
        epsilon=1e-4,
        delta=0.0,
        max_iterations=500,
        callback=lambda i: gn.append(i["gnorm"] / max(1.0, i["xnorm"])),
    )
    assert res.status == "converged"
    assert gn[-1] <= 1e-4 and all(r > 1e-4 for r in gn[:-1])
    assert np.linalg.norm(res.g) / max(1.0, np.linalg.norm(res.x)) <= 1e-4


@pytest.mark.parametrize("max_it", [1, 3, 7])
def test_max_iterations_respected_and_evals_counted(max_it):
    f = Counted(rosenbrock)
    seen = []
    res = lbfgs(
        f,
        np.array([-1.2, 1.0]),
        epsilon=0.0,
        delta=0.0,
        max_iterations=max_it,
        callback=lambda i: seen.append((i["iteration"], i["n_evals"])),
    )
    assert res.status == "max_iterations" and res.iterations == max_it
    assert res.n_evals == f.calls
    assert [s[0] for s in seen] == list(range(1, max_it + 1))
    assert all(b > a for (_, a), (_, b) in zip(seen, seen[1:]))
    assert res.n_evals >= max_it + 1


def test_gtol_stop_value_and_callback_stops():
    fg, xstar = quadratic(4)
    x0 = np.zeros(len(xstar))
    r = lbfgs(fg, x0, epsilon=0.0, delta=0.0, gtol=1e-3, max_iterations=500)
    assert r.status == "gtol" and np.abs(r.g).max() <= 1e-3
    fstar = fg(xstar)[0]
    target = fstar + 1e-3 * abs(fstar)
    r = lbfgs(fg, x0, epsilon=0.0, delta=0.0, stop_value=target, max_iterations=500)
    assert r.status == "stop_value" and r.f <= target
    r = lbfgs(
        fg, x0, epsilon=0.0, delta=0.0, max_iterations=500, callback=lambda i: i["iteration"] == 2
    )
    assert r.status == "callback" and r.iterations == 2


def test_objective_never_increases():
    fs = []
    lbfgs(
        rosenbrock,
        np.array([-1.2, 1.0]),
        epsilon=1e-10,
        delta=0.0,
        max_iterations=300,
        callback=lambda i: fs.append(i["f"]),
    )
    assert all(b <= a for a, b in zip(fs, fs[1:]))


# --------------------------------------------------------------- on a real (tiny) CRF
@pytest.mark.parametrize("support", ["observed", "all"])
def test_tiny_crf_reaches_the_scipy_optimum(support):
    rng = np.random.default_rng(8)
    X, Y = random_sequences(rng, 25, n_labels=3, real=True, n_attr=10, max_len=6)
    space, corpus = build(X, Y, support=support)
    obj = Objective(corpus, space, Regularization(l2=0.05))
    x0 = np.zeros(space.n_features)
    ref = minimize(
        obj.value_and_grad,
        x0,
        jac=True,
        method="L-BFGS-B",
        tol=1e-14,
        options=dict(maxiter=10_000, maxfun=20_000, ftol=1e-15, gtol=1e-11),
    )
    res = lbfgs(obj.value_and_grad, x0, epsilon=1e-10, delta=0.0, max_iterations=2000)
    assert res.f == pytest.approx(ref.fun, rel=1e-8)
    assert res.f <= ref.fun * (1 + 1e-8)
    assert np.abs(res.g).max() < 1e-6
    np.testing.assert_allclose(res.x, ref.x, atol=1e-4)


def test_history_without_spare_row_matches_push_and_keeps_snapshots():
    """L-BFGS's history has m rows (no spare): prepare checks a pair without writing it, and commit
    writes it over the oldest only for the snapshot it was prepared with.  Over a stream of pairs
    (weak ones included) it holds the pairs, rho and order of the spare-row history that push
    fills."""
    from collections import deque

    from crfkit.optim.lbfgs import History, make_state

    rng = np.random.default_rng(0)
    n, m = 7, 3
    a, b = History(m, n), History(m, n, spare=False)
    assert b.S.shape == (m, n)
    ref = deque(maxlen=m)
    x, g = rng.normal(size=n), rng.normal(size=n)
    for k in range(25):
        xn = x + rng.normal(size=n)
        gn = g + (rng.normal(size=n) if k % 4 else -(xn - x))  # every 4th pair: negative curvature
        ok = a.push(xn, x, gn, g)
        old = tuple(b.order)
        snap_old = (x, 0.0, 0.0, g, k, k, old, (), True)
        before = make_state(b, snap_old, 0.0)
        order = b.prepare(xn, x, gn, g)
        assert (b.pending is not None) == ok
        # a snapshot of the previous iteration is intact until the commit, and make_state of it
        # writes nothing
        again = make_state(b, snap_old, 0.0)
        assert b.pending is not None or not ok
        for key in ("S", "Y", "rho"):
            np.testing.assert_array_equal(again[key], before[key])
        # make_state of the new snapshot writes the pending pair (an interrupt between prepare and
        # commit)
        st = make_state(b, (xn, 0.0, 0.0, gn, k + 1, k + 1, order, (), True), 0.0)
        assert b.pending is None and tuple(b.order) == order
        if ok:
            ref.append((xn - x, gn - g))
        Sa, Ya, ra = a.pairs()
        np.testing.assert_array_equal(st["S"], Sa)
        np.testing.assert_array_equal(st["Y"], Ya)
        np.testing.assert_array_equal(st["rho"], ra)
        assert len(ref) == len(b.order)
        for (s, y), s2, y2 in zip(ref, st["S"], st["Y"]):
            np.testing.assert_allclose(s2, s)
            np.testing.assert_allclose(y2, y)
        x, g = xn, gn
        if k == 13:
            a.clear()
            b.clear()
            ref.clear()


@pytest.mark.parametrize("driver", ["lbfgs", "owlqn"])
def test_adopted_start_is_the_first_iterate_and_gives_the_same_run(driver):
    from crfkit.optim.owlqn import owlqn

    fg0, _ = quadratic(seed=4)
    firsts = []

    def fg(x):
        if not firsts:
            firsts.append(x)
        return fg0(x)

    def run(x0, adopt):
        firsts.clear()
        if driver == "lbfgs":
            res = lbfgs(fg, x0, max_iterations=12, delta=0.0, adopt_x0=adopt)
        else:
            res = owlqn(fg, x0, 0.05, max_iterations=12, delta=0.0, adopt_x0=adopt)
        return res, firsts[0]

    copied_from = np.zeros(20)
    ref, first = run(copied_from, False)
    assert (
        first is not copied_from and not copied_from.any()
    )  # copied: the caller's array is left alone
    mine = np.zeros(20)
    res, first = run(mine, True)
    assert first is mine  # adopted: the iterate's buffer, no copy
    assert res.iterations == ref.iterations and np.array_equal(res.x, ref.x) and res.f == ref.f
    for other in (np.zeros(20, np.float32), np.zeros(40)[::2], np.zeros(20)):
        if other.flags.c_contiguous and other.dtype == np.float64:
            other.flags.writeable = False
        res, first = run(other, True)  # not adoptable: copied
        assert first is not other and not other.any() and np.array_equal(res.x, ref.x)


@pytest.mark.parametrize("driver", ["lbfgs", "owlqn"])
def test_a_start_handed_over_in_a_list_is_freed_with_its_iterate(driver):
    """``adopt_x0`` with a one-element list: the list is emptied, the run is the same, and neither
    the start nor its gradient outlives the iterations that hold them (lbfgs kept both for the whole
    run: two vectors of the problem's size).  OWL-QN reuses its buffers (the start's become the next
    trial's), so only the run's identity is checked there."""
    import gc
    import weakref

    from crfkit.optim.owlqn import owlqn

    fg0, _ = quadratic(seed=4)
    grads = []

    def fg(x):
        f, g = fg0(x)
        g = np.array(g, copy=True)
        if not grads:
            grads.append(weakref.ref(g))
        return f, g

    alive = []

    def run(x0, callback=None):
        grads.clear()
        if driver == "lbfgs":
            return lbfgs(
                fg,
                x0,
                max_iterations=12,
                delta=0.0,
                adopt_x0=True,
                fresh_gradients=True,
                callback=callback,
            )
        return owlqn(
            fg,
            x0,
            0.05,
            max_iterations=12,
            delta=0.0,
            adopt_x0=True,
            fresh_gradients=True,
            callback=callback,
        )

    ref = run(np.zeros(20))
    x0 = np.zeros(20)
    start = weakref.ref(x0)
    box = [x0]
    del x0

    def cb(info):
        if info["iteration"] == 3:
            gc.collect()
            alive.append((start() is not None, grads[0]() is not None))

    res = run(box, cb)
    assert box == []
    assert res.iterations == ref.iterations and np.array_equal(res.x, ref.x) and res.f == ref.f
    if driver == "lbfgs":
        assert alive == [(False, False)]
