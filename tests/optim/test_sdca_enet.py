"""Elastic net for ``sdca`` (Prox-SDCA with g(w) = (l2/2)||w||^2 + l1||w||_1): the primal weights
are w = S_l1(v) / l2 = S_kappa(z), kappa = l1 / l2, z = w_hat(mu); the dual's regulariser term is
g*(v) = ||S_l1(v)||^2 / (2 l2); the line search's derivative gets -h(gamma) (kernels.sdca, "elastic
net").

Checked here: h and the line-search derivative against finite differences of the dual (the
one-dimensional model and the full dual of the store), the line search against a dense grid, the
optimum and its sparsity pattern against OWL-QN's, the duality gap as a certificate, l1 = 0 bitwise
the code before the elastic net (weights pinned from it), bitwise resume with l1 > 0, and OEG's
refusal."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import markov_corpus, refined_grid_max, sdca_mean_divergence, sdca_step_prefix
from crfkit.errors import ParameterError
from crfkit.features.encode import build
from crfkit.kernels import sdca as K
from crfkit.objective import Objective, Regularization
from crfkit.optim import sdca as S
from crfkit.train import train

L2 = 0.05


def soft(z, k):
    return np.sign(z) * np.maximum(np.abs(z) - k, 0.0)


@pytest.fixture(scope="module")
def problem():
    # more noise attributes than test_sdca's corpus, so that L1 zeroes a good share of the weights
    X, Y = markov_corpus(3, 30, noise=("noise", 30, 3))
    space, corp = build(X, Y)
    return X, Y, space, corp


def objective(space, corp, l1, l2=L2):
    return Objective(corp, space, Regularization(l1=l1, l2=l2), threads=1)


def enet_run(space, corp, l1, store=np.float64, epochs=2):
    obj = objective(space, corp, l1)
    run = S._Dual("sdca", obj, None, L2, 0, None, store, "gold", 10.0, K.UNIFORM, l1=l1)
    run.run_until(K.SDCA, K.UNIFORM, 0.0, 1e-3, epochs * run.n)
    run.recompute_w()
    return obj, run


def step_setup(run, i, space, corp):
    """What sdca_step computes before its line search, on sequence i at the run's point."""
    c, s = corp, space
    p = sdca_step_prefix(run, i, s, c, lambda: run.d_node[: c.seq_ptr[i + 1] - c.seq_ptr[i]].copy())
    t0, t1, T, e0, f, tdir = p["t0"], p["t1"], p["T"], p["e0"], p["f"], p["tdir"]
    gap, fp0, ent = p["gap"], p["fp0"], p["ent"]
    acc, alist, na = p["acc"], p["alist"], p["na"]
    ez = np.zeros((3, run.p))
    nz = K.enet_pack(
        s.attr_ptr,
        acc,
        alist,
        na,
        tdir,
        s.trans_index,
        s.n_state,
        run.z,
        -1.0 / run.l2n,
        run.kappa,
        ez,
    )
    # the dense z direction: delta = -(E_d F) / (l2 n)
    delta = np.zeros_like(run.w)
    K.apply_direction(
        s.attr_ptr, acc.copy(), alist, na, tdir, s.trans_index, s.n_state, -1.0 / run.l2n, delta
    )
    ns, ps = run.node_store[t0:t1].copy(), run.pair_store[e0 : e0 + max(T - 1, 0)].copy()
    nn, pn = run.node_n[:T].copy(), run.pair_n[: max(T - 1, 0)].copy()
    z0 = run.z.copy()

    def dual1d(g):
        """n * D(mu with mu_i + g d) up to a constant: H_i(mu_i + g d) - (l2 n / 2)||S_kappa(z + g
        delta)||^2."""
        return K.chain_entropy(ns + g * (nn - ns), ps + g * (pn - ps), T) - 0.5 * run.l2n * np.sum(
            soft(z0 + g * delta, run.kappa) ** 2
        )

    def fprime(g):
        s_, sp = K.fprime(g, *ent, 0.0, f[0], f[1])
        h, hp = K.enet_h(g, nz, ez, run.kappa, run.l2n)
        return s_ - h, sp - hp

    def search(tol):
        isc = np.zeros(K.N_ISC, dtype=np.int64)
        return K.line_search_enet(
            *ent, fp0, p["c0"], p["c1"], tol, f[0], f[1], isc, nz, ez, run.kappa, run.l2n
        )

    return dict(
        T=T,
        t0=t0,
        e0=e0,
        gap=gap,
        fp0=fp0,
        nz=nz,
        ez=ez,
        delta=delta,
        z0=z0,
        ns=ns,
        ps=ps,
        nn=nn,
        pn=pn,
        dual1d=dual1d,
        fprime=fprime,
        search=search,
    )


@pytest.mark.parametrize("l1", [0.002, 0.01])
def test_enet_h_is_the_regulariser_slope_and_touches_only_the_step_coordinates(problem, l1):
    _, _, space, corp = problem
    _, run = enet_run(space, corp, l1)
    assert run.kappa == pytest.approx(l1 / L2)
    assert np.array_equal(run.w, soft(run.z, run.kappa))
    assert 0 < np.count_nonzero(run.w) < run.p
    for i in range(0, run.n, 4):
        q = step_setup(run, i, space, corp)
        nz, ez, delta, z0 = q["nz"], q["ez"], q["delta"], q["z0"]
        # the packed coordinates are the support of the direction (plus zero-direction transitions)
        assert nz >= np.count_nonzero(delta) and np.count_nonzero(ez[1, :nz]) == np.count_nonzero(
            delta
        )

        def reg(g):  # n * g*(v(g)) = (l2 n / 2)||S_kappa(z + g delta)||^2
            return 0.5 * run.l2n * np.sum(soft(z0 + g * delta, run.kappa) ** 2)

        prev = -1.0
        for g in np.linspace(0.0, 1.0, 11):
            h, hp = K.enet_h(g, nz, ez, run.kappa, run.l2n)
            # h(g) = n <w(g) - w(0), u> = d/dg reg(g) - d/dg reg(0) ... checked through reg's
            # central difference
            e = 1e-6
            slope = (reg(g + e) - reg(g - e)) / (2 * e)
            slope0 = (reg(e) - reg(-e)) / (2 * e)
            assert h == pytest.approx(slope - slope0, rel=1e-5, abs=1e-7)
            assert h >= prev - 1e-15  # non-decreasing (S is monotone)
            prev = h
            # h' against the difference of h (away from the kinks the two agree)
            h1 = K.enet_h(g + 1e-7, nz, ez, run.kappa, run.l2n)[0]
            h0 = K.enet_h(g - 1e-7, nz, ez, run.kappa, run.l2n)[0]
            if g > 0:
                x = z0 + g * delta
                kink = np.any(
                    (delta != 0) & (np.abs(np.abs(x) - run.kappa) < 1e-6 * (np.abs(delta) + 1e-300))
                )
                if not kink:
                    assert hp == pytest.approx((h1 - h0) / 2e-7, rel=1e-4, abs=1e-8)
        # kappa = 0 would give back the L2 term g q
        ez0 = ez.copy()
        ez0[2] = ez0[0]  # S_0(z) = z
        hq = K.enet_h(0.5, nz, ez0, 0.0, run.l2n)[0]
        assert hq == pytest.approx(0.5 * run.l2n * np.dot(delta, delta), rel=1e-12, abs=1e-300)


@pytest.mark.parametrize("l1", [0.002, 0.01])
def test_enet_line_search_derivative_is_the_dual_finite_difference(problem, l1):
    _, _, space, corp = problem
    obj, run = enet_run(space, corp, l1)
    grid = np.linspace(0.0, 1.0, 2001)
    for i in range(0, run.n, 3):
        q = step_setup(run, i, space, corp)
        dual1d, fprime = q["dual1d"], q["fprime"]
        assert q["fp0"] > 0
        assert fprime(0.0)[0] == pytest.approx(
            q["fp0"], rel=1e-7
        )  # f' takes K.log_fast_into (3e-9)
        f1 = fprime(1.0)[0]
        assert f1 == pytest.approx(
            -K.enet_h(1.0, q["nz"], q["ez"], run.kappa, run.l2n)[0], rel=1e-12, abs=1e-300
        )
        assert f1 <= 0.0
        for g in (0.15, 0.4, 0.75):
            e = 1e-5
            assert fprime(g)[0] == pytest.approx(
                (dual1d(g + e) - dual1d(g - e)) / (2 * e), rel=1e-4, abs=1e-8
            )
        # the line search against the best point of a dense grid, then a finer one around it
        gm = q["search"](1e-8)
        fine, fvals = refined_grid_max(dual1d, grid)
        assert dual1d(gm) >= fvals.max() - 1e-10 * max(1.0, abs(fvals.max()))
        assert abs(gm - fine[fvals.argmax()]) <= 2e-6
        gm3 = q["search"](1e-3)
        assert abs(gm3 - gm) <= 1e-3 and dual1d(gm3) >= dual1d(0.0)
    # the one-dimensional model is the full dual: n times the central difference of D(mu) itself
    # (the store's entropies, w recomputed from the store) at a few gammas on two sequences
    for i in (1, 7):
        q = step_setup(run, i, space, corp)
        t0, T, e0 = q["t0"], q["T"], q["e0"]
        ns, ps, nn, pn = q["ns"], q["ps"], q["nn"], q["pn"]

        def D(g):
            run.node_store[t0 : t0 + T] = ns + g * (nn - ns)
            run.pair_store[e0 : e0 + max(T - 1, 0)] = ps + g * (pn - ps)
            return run.dual()

        try:
            for g in (0.3, 0.6):
                e = 1e-4
                fd = run.n * (D(g + e) - D(g - e)) / (2 * e)
                assert q["fprime"](g)[0] == pytest.approx(fd, rel=1e-3, abs=1e-7)
        finally:
            run.node_store[t0 : t0 + T] = ns
            run.pair_store[e0 : e0 + max(T - 1, 0)] = ps
            run.recompute_w()


@pytest.mark.parametrize("store", ["float64", "float32"])
def test_enet_gap_is_p_minus_d_a_sum_of_divergences_and_the_dual_never_decreases(problem, store):
    _, _, space, corp = problem
    l1 = 0.005
    obj = objective(space, corp, l1)
    recs = []
    res = S.sdca(
        obj, None, reg=obj.reg, callback=recs.append, max_iterations=15, gap_tol=0.0, store=store
    )
    for r in recs:
        assert r["duality_gap"] == pytest.approx(r["f"] - r["dual"], abs=1e-14)
        assert r["duality_gap"] >= -1e-12
        assert r["nnz"] == np.count_nonzero(r["x"])
    duals = [r["dual"] for r in recs]
    assert all(b >= a - 1e-12 for a, b in zip(duals, duals[1:]))
    # P(w) includes the l1 term
    w = res.x
    obj0 = objective(space, corp, 0.0)
    assert recs[-1]["f"] == pytest.approx(
        obj0.value(w, count=False) + l1 * np.abs(w).sum(), rel=1e-13
    )
    if store == "float64":
        run = S._Dual(
            "sdca", obj, None, L2, 0, res.state, np.float64, "gold", 10.0, K.UNIFORM, l1=l1
        )
        assert np.array_equal(run.w, w)
        assert recs[-1]["duality_gap"] == pytest.approx(
            sdca_mean_divergence(run, obj.n, space, corp), rel=1e-6, abs=1e-13
        )


@pytest.mark.parametrize("l1", [0.002, 0.01, 0.03])
def test_enet_reaches_owlqn_optimum_with_its_sparsity_and_the_gap_bounds_the_suboptimality(
    problem, l1
):
    X, Y, _, _ = problem
    ref = train(X, Y, l2=L2, l1=l1, algorithm="owlqn", gtol=1e-12, max_iterations=5000, threads=1)
    res = train(
        X,
        Y,
        l2=L2,
        l1=l1,
        algorithm="sdca",
        params=dict(gap_tol=1e-11, store="float64"),
        max_iterations=1000,
        threads=1,
    )
    assert res.status == "converged"
    gap = res.history[-1]["duality_gap"]
    assert 0 <= gap <= 1e-11
    assert abs(res.objective - ref.objective) <= 1e-6 * ref.objective
    # the certificate: f(w) - f(w_owlqn) <= f(w) - f* <= gap
    assert res.objective - ref.objective <= gap + 1e-13
    ws, wr = res.model.weights, ref.model.weights
    big = np.maximum(np.abs(ws), np.abs(wr)) > 1e-6
    assert np.array_equal((ws != 0)[big], (wr != 0)[big])  # same pattern up to tiny weights
    assert 0 < np.count_nonzero(ws) < ws.size
    assert np.abs(ws - wr).max() < 1e-3


def test_enet_resume_is_bitwise(problem, tmp_path):
    X, Y, space, corp = problem
    kw = dict(
        l2=L2,
        l1=0.005,
        algorithm="sdca",
        threads=1,
        params={"sampling": "gap", "refresh": 2, "gap_tol": 0.0},
    )
    full = train(X, Y, max_iterations=6, **kw)
    part = train(X, Y, max_iterations=3, checkpoint=tmp_path / "enet.ckpt", **kw)
    assert part.iterations == 3
    res = train(X, Y, max_iterations=6, resume=tmp_path / "enet.ckpt", **kw)
    assert np.array_equal(res.model.weights, full.model.weights)
    assert res.effective_passes == full.effective_passes
    assert [h["duality_gap"] for h in res.history[-3:]] == [
        h["duality_gap"] for h in full.history[-3:]
    ]
    # a state of another l1 keeps only its marginals (gaps afresh), and still reaches this l1's
    # optimum
    obj = objective(space, corp, 0.02)
    first = S.sdca(obj, None, reg=obj.reg, max_iterations=300, gap_tol=1e-10, store="float64")
    assert first.state["l1"] == 0.02
    obj2 = objective(space, corp, 0.005)
    cold = S.sdca(obj2, None, reg=obj2.reg, max_iterations=300, gap_tol=1e-10, store="float64")
    obj3 = objective(space, corp, 0.005)
    warm = S.sdca(
        obj3,
        None,
        reg=obj3.reg,
        max_iterations=300,
        gap_tol=1e-10,
        store="float64",
        state=first.state,
    )
    assert cold.status == warm.status == "converged"
    assert abs(warm.f - cold.f) <= 1e-9


def test_oeg_refuses_l1_and_sdca_checks_it(problem):
    _, _, space, corp = problem
    obj = objective(space, corp, 0.01)
    with pytest.raises(ParameterError, match="l1 > 0"):
        S.oeg(obj, None, reg=obj.reg, max_iterations=1)
    with pytest.raises(ParameterError, match="l1"):
        S.sdca(obj, None, reg=Regularization(l1=float("nan"), l2=L2), max_iterations=1)
    with pytest.raises(ParameterError, match="l2 > 0"):
        S.sdca(obj, None, reg=Regularization(l1=0.01, l2=0.0), max_iterations=1)
