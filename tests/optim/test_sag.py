"""SAG, SAG-NUS, SAG-NUS*, SAGA, SAGA-NUS (crfkit.optim.sag, kernels/sag.py).

The lazy sparse kernels are checked against a plain numpy implementation that
stores a dense gradient per example (naive SAG) and updates every coordinate
every iteration, drawing from the same random stream.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

from conftest import markov_corpus
from crfkit.errors import CrfkitError
from crfkit.features.encode import build
from crfkit.kernels import sag as K
from crfkit.kernels.chain import emissions, full_rows, transition_matrix
from crfkit.objective import Objective, Regularization
from crfkit.optim import sag as S
from crfkit.optim.stochastic import resolve
from crfkit.train import train

LABELS = ["A", "B", "C"]
L2 = 0.05


def corpus(seed, n_seq=30):
    """Markov-chain labels; a token shows its label's signature attribute 85% of the time, plus
    noise."""
    return markov_corpus(seed, n_seq)


@pytest.fixture(scope="module")
def problem():
    X, Y = corpus(0)
    space, corp = build(X, Y)
    ref = train(X, Y, l2=L2, algorithm="lbfgs", gtol=1e-10, max_iterations=1000, threads=1)
    return X, Y, space, corp, ref


def objective(problem, l2=L2):
    _, _, space, corp, _ = problem
    return Objective(corp, space, Regularization(l2=l2), threads=1)


ALGOS = [
    ("sag", {}),
    ("sag-nus", {}),
    ("sag-nus*", {}),
    ("sag-nus*", {"ls_skip": False}),
    ("sag-nus*", {"lmax": "current"}),
    ("saga", {"step": "a"}),
    ("saga", {"step": "b"}),
    ("saga-nus", {"step": "b"}),
    ("saga-nus", {"step": "a"}),
    ("saga-nus", {"step": "a", "lmax": "current"}),
]


@pytest.mark.parametrize("alg,params", ALGOS)
def test_converges_to_the_lbfgs_optimum(problem, alg, params):
    X, Y, _, _, ref = problem
    # SAGA-NUS with rule (a) takes the small step n p_min / (4L + n l2) of Proposition 1 (a)
    epochs = 2000 if (alg == "saga-nus" and params.get("step") == "a") else 400
    res = train(
        X,
        Y,
        l2=L2,
        algorithm=alg,
        params=dict(params, delta=1e-9),
        max_iterations=epochs,
        threads=1,
    )
    assert abs(res.objective - ref.objective) <= 1e-6 * ref.objective
    assert np.abs(res.model.weights - ref.model.weights).max() < 1e-3


# ------------------------------------------------------------------ reference wrappers of the
# kernel's pieces
@njit(cache=False)
def _example_oracle(
    seq_ptr,
    tok_ptr,
    attr,
    val,
    y,
    attr_ptr,
    feat_label,
    trans_index,
    n_state,
    i,
    v,
    beta,
    node,
    edge,
    score,
    bm,
    es,
    scale,
):
    """The SAG kernel's oracle on example i from scratch: emissions at w = beta*v, then its chain
    oracle."""
    t0, t1 = seq_ptr[i], seq_ptr[i + 1]
    emissions(tok_ptr, attr, val, t0, t1, attr_ptr, feat_label, v, beta, score)
    return K.chain_oracle(
        y, t0, t1 - t0, v, beta, n_state, trans_index, node, edge, score, bm, es, scale
    )


@njit(cache=False)
def _line_search_at(
    seq_ptr,
    tok_ptr,
    attr,
    val,
    y,
    attr_ptr,
    feat_label,
    trans_index,
    n_state,
    i,
    v,
    beta,
    g,
    gnorm2,
    f,
    L,
    score,
    shift,
    sc2,
    es,
    alpha,
    scale,
):
    """The kernel's Algorithm 2 at w = beta*v for a dense gradient vector g: the scores at w and
    those of g, then its line search over them."""
    t0, t1 = seq_ptr[i], seq_ptr[i + 1]
    emissions(tok_ptr, attr, val, t0, t1, attr_ptr, feat_label, v, beta, score)
    trans = transition_matrix(v, beta, n_state, trans_index)
    emissions(tok_ptr, attr, val, t0, t1, attr_ptr, feat_label, g, 1.0, shift)
    gtr = transition_matrix(g, 1.0, n_state, trans_index)
    return K.line_search_scores(
        y, t0, t1 - t0, score, shift, trans, gtr, gnorm2, f, L, sc2, es, alpha, scale
    )


# ------------------------------------------------------------------ dense reference
def dense_reference(
    obj, method, epochs, seed=0, L0=1.0, step="a", ls_skip=False, store=np.float32, lmax="decayed"
):
    """The same algorithm with dense vectors: a stored gradient vector per example, every coordinate
    every step (``ls_skip``: the line-search skipping of the per-example L_i methods, written out
    the same way; ``lmax``: the L_max of sag-nus*'s step and saga-nus's rule (a), the running
    maximum decayed by 2^(-1/n) per step or the current max_i L_i).  What is
    stored is the gradient rebuilt from the node marginals and the transition gradient rounded to
    ``store`` (the kernels' Mixed memory); the line search works with the exact gradient."""
    n, p, l2 = obj.n, obj.n_features, obj.reg.l2
    L = obj.space.n_labels
    tr = slice(obj.space.n_state, obj.space.n_state + obj.space.n_trans)
    skip_left, streak = np.zeros(n, dtype=int), np.zeros(n, dtype=int)
    per_example = method in (K.SAG_NUS, K.SAG_NUS_STAR, K.SAGA_NUS)
    rng = S.seed_state(seed)

    def U():
        return K.rng_uniform(rng)

    def below(k):
        return K.rng_below(rng, k)

    w, d, s = np.zeros(p), np.zeros(p), np.zeros((n, p))
    perm, pos, kperm, kpos = (np.arange(n) for _ in range(4))
    m = mk = evals = 0
    Li = np.zeros(n)
    Lg = Lmax = L0
    decay = 2.0 ** (-1.0 / n)

    def grad(i, x):
        """(loss, exact gradient, the gradient as the store rebuilds it)."""
        loss, node, edge = obj.oracle(i, x)
        g = np.zeros(p)
        obj.apply_gradient(i, node, edge, 1.0, g)
        gs = np.zeros(p)
        obj.apply_gradient(i, node.astype(store).astype(np.float64), np.zeros((L, L)), 1.0, gs)
        gs[tr] = g[tr].astype(store)
        return loss, g, gs

    def lsearch(i, f, g, L):
        g2 = float(g @ g)
        nev = 0
        if g2 <= K.LS_MIN_GNORM2:
            return L, 0
        while True:
            fp = obj.oracle(i, w - g / L)[0]
            nev += 1
            if fp < f - g2 / (2 * L) or nev > K.LS_MAX_DOUBLINGS:
                return L, nev
            L *= 2

    def tree(u):
        cs = np.cumsum(Li)
        return int(np.searchsorted(cs, u * cs[-1], side="right"))

    def move(i, arr, where, cnt):
        q = where[i]
        if q >= cnt:
            other = arr[cnt]
            arr[cnt], arr[q] = i, other
            where[i], where[other] = cnt, q
            return cnt + 1
        return cnt

    out = []
    for epoch in range(1, epochs + 1):
        while evals < epoch * n:
            lsum = Li.sum()
            lbar = lsum / mk if mk else L0
            pj = pmin = 1.0 / n
            if method in (K.SAG, K.SAGA):
                j = below(n)
            elif method == K.SAG_NUS:
                if U() * n < n - m:
                    j = perm[m + below(n - m)]
                elif U() < 0.5:
                    j = perm[below(m)]
                elif U() * (lsum + mk * l2) < lsum:
                    j = tree(U())
                else:
                    j = kperm[below(mk)]
            elif method == K.SAG_NUS_STAR:
                j = below(n) if (mk == 0 or U() < 0.5) else tree(U())
            else:
                total = lsum + (n - mk) * lbar
                if U() * total < lsum:
                    j = tree(U())
                    pj = Li[j] / total
                else:
                    j = kperm[mk + below(n - mk)]
                    pj = lbar / total
                known = Li[Li > 0]
                lo = known.min() if mk else lbar
                pmin = min(lo, lbar) / total if mk < n else lo / total
            known_j = kpos[j] < mk
            skipping = ls_skip and per_example and known_j and skip_left[j] > 0
            if method in (K.SAG, K.SAGA):
                Lstart = Lg
            elif skipping:
                Lstart = Li[j]
            elif method == K.SAG_NUS:
                Lstart = 0.5 * Li[j] if known_j else L0
            else:
                Lstart = 0.9 * Li[j] if known_j else 0.5 * lbar
            f, g, gs = grad(j, w)
            Lnew, nev = (Lstart, 0) if skipping else lsearch(j, f, g, Lstart)
            evals += 1 + nev
            if ls_skip and per_example:
                if skipping:
                    skip_left[j] -= 1
                elif g @ g > K.LS_MIN_GNORM2:
                    if nev == 1:
                        streak[j] = min(streak[j] + 1, K.LS_SKIP_MAX_STREAK)
                        skip_left[j] = 2 ** (streak[j] - 1)
                    else:
                        streak[j] = 0
            saga_b = method in (K.SAGA, K.SAGA_NUS) and step == "b"
            diff_j = g - s[j] if saga_b else gs - s[j]
            if not saga_b:
                s[j] = gs
                m = move(j, perm, pos, m)
            if method in (K.SAG, K.SAGA):
                Lg = Lnew
            else:
                Li[j] = Lnew
                mk = move(j, kperm, kpos, mk)
                Lmax = max(Lmax, Lnew)
            lbar = Li.sum() / mk if mk else L0
            if method == K.SAG:
                a = 1 / (Lg + l2)
            elif method == K.SAG_NUS:
                lm = Lmax + l2
                a = ((n - m) / n) / lm + (m / n) * (0.5 / lm + 0.5 / (lbar + l2))
            elif method == K.SAG_NUS_STAR:
                hi = Lmax if lmax == "decayed" else Li.max()
                a = 0.5 * (1 / (hi + l2) + 1 / (lbar + l2))
            elif method == K.SAGA:
                a = 1 / (4 * (Lg + l2) + n * l2) if step == "a" else 1 / (4 * (Lg + l2))
            else:
                hi = Lmax if lmax == "decayed" else Li.max()
                hi = max(hi, lbar) if mk < n else hi
                a = n * pmin / (4 * (hi + l2) + n * l2) if step == "a" else 1 / (4 * (lbar + l2))
            if method <= K.SAG_NUS_STAR:
                d += diff_j
                w = (1 - a * l2) * w - (a / m) * d
            elif not saga_b:
                w = (1 - a * l2) * w - a * (diff_j / (n * pj) + d / n)
                d += diff_j
            else:
                r = below(n)
                _, _, gr = grad(r, w)
                evals += 1
                w = (1 - a * l2) * w - a * (diff_j / (n * pj) + d / n)
                d += gr - s[r]
                s[r] = gr
                m = move(r, perm, pos, m)
            if method in (K.SAG, K.SAGA):
                Lg *= decay
            elif method == K.SAG_NUS or (
                lmax == "decayed" and method in (K.SAG_NUS_STAR, K.SAGA_NUS)
            ):
                Lmax *= decay
        out.append(w.copy())
    return out


@pytest.mark.parametrize(
    "alg,step,skip,store,lmax",
    [
        ("sag", "a", False, "float32", None),
        ("sag-nus", "a", False, "float32", None),
        ("sag-nus*", "a", True, "float32", None),
        ("sag-nus*", "a", False, "float32", None),
        ("sag-nus*", "a", True, "float32", "current"),
        ("sag-nus*", "a", False, "float32", "current"),
        ("sag-nus", "a", True, "float32", None),
        ("saga", "a", False, "float32", None),
        ("saga", "b", False, "float32", None),
        ("saga-nus", "b", False, "float32", None),
        ("saga-nus", "a", True, "float32", None),
        ("saga-nus", "a", False, "float32", "current"),
        ("sag", "a", False, "float64", None),
        ("sag-nus*", "a", True, "float64", None),
        ("saga", "b", False, "float64", None),
    ],
)
def test_lazy_sparse_updates_equal_the_dense_algorithm(problem, alg, step, skip, store, lmax):
    """Every method against its dense transcription; sag-nus* with its default line-search skipping
    and without, the skipping on the other per-example-L_i methods too; stores in float32 (default)
    and float64; sag-nus* and saga-nus (a) with L_max decayed (default) and the current max_i
    L_i."""
    obj = objective(problem)
    seen = []
    kw = {"step": step} if alg.startswith("saga") else {}
    if store != "float32":
        kw["store"] = store
    if lmax is not None:
        kw["lmax"] = lmax
    if alg in ("sag-nus", "sag-nus*", "saga-nus") and skip != (alg == "sag-nus*"):
        kw["ls_skip"] = skip
    states = []

    def cb(info):
        seen.append(info["x"])
        states.append(info["state"]())

    resolve(alg)(obj, None, reg=obj.reg, max_iterations=4, callback=cb, seed=3, delta=0.0, **kw)
    streak = states[-1]["ls_skip_streak"]
    if (
        skip and alg != "sag-nus"
    ):  # (sag-nus halves L_i before each line search: it rarely passes at once)
        assert (
            streak.max() >= 2 and states[-1]["ls_skip_left"].max() >= 1
        )  # line searches were skipped
    elif not skip:
        assert not streak.any()
    assert (
        states[-1]["node"].dtype == S.STORES[store] and states[-1]["trans"].dtype == S.STORES[store]
    )
    ref = dense_reference(
        objective(problem),
        S.METHODS[alg],
        4,
        seed=3,
        step=step,
        ls_skip=skip,
        store=S.STORES[store],
        lmax=lmax or "decayed",
    )
    for x, r in zip(seen, ref):
        np.testing.assert_allclose(x, r, rtol=1e-9, atol=1e-11)


# ------------------------------------------------------------------ sum tree
def test_sum_tree_samples_proportionally():
    rng = np.random.default_rng(0)
    n = 37
    w = rng.uniform(0.1, 3.0, n)
    w[[3, 10, 11, 36]] = 0.0  # inactive leaves are never drawn
    P = K.tree_size(n)
    tsum, tmax, tmin = np.zeros(2 * P), np.zeros(2 * P), np.zeros(2 * P)
    K.tree_clear(tsum, tmax, tmin)
    for i in range(n):
        K.tree_set(tsum, tmax, tmin, i, w[i])
    assert tsum[1] == pytest.approx(w.sum()) and tmax[1] == w.max() and tmin[1] == w[w > 0].min()
    st = S.seed_state(1)
    draws = 200_000
    counts = np.bincount(
        [K.tree_sample(tsum, K.rng_uniform(st)) for _ in range(draws)], minlength=P
    )
    assert counts[n:].sum() == 0 and counts[[3, 10, 11, 36]].sum() == 0
    live = w > 0
    expected = draws * w[live] / w.sum()
    chi2 = float((((counts[:n][live] - expected) ** 2) / expected).sum())
    # 32 degrees of freedom: the 0.999 quantile is about 62
    assert chi2 < 62.0


def test_sum_tree_update_touches_log_n_nodes_and_equals_a_rebuild():
    rng = np.random.default_rng(1)
    n = 1000
    Li = rng.uniform(0.5, 2.0, n)
    P = K.tree_size(n)
    arrays = [np.zeros(2 * P) for _ in range(3)]
    K.tree_build(*arrays, Li)
    for _ in range(50):
        i = int(rng.integers(n))
        Li[i] = float(rng.uniform(0.5, 5.0)) if rng.random() < 0.9 else 0.0
        before = [a.copy() for a in arrays]
        K.tree_set(*arrays, i, Li[i])
        changed = np.flatnonzero(np.any([a != b for a, b in zip(arrays, before)], axis=0))
        # only the leaf and its ancestors: log2(P) + 1 entries
        assert len(changed) <= int(np.log2(P)) + 1
        assert set(changed.tolist()) <= {(P + i) >> k for k in range(int(np.log2(P)) + 1)}
    rebuilt = [np.zeros(2 * P) for _ in range(3)]
    K.tree_build(*rebuilt, Li)
    for a, b in zip(arrays, rebuilt):
        assert np.array_equal(a, b)  # bitwise: a resumed run rebuilds the same tree


# ------------------------------------------------------------------ stopping, state, memory
def test_stopping_rule_needs_all_examples_seen_and_a_small_average_gradient(problem):
    obj = objective(problem)
    seen = []
    res = S.sag(
        obj,
        None,
        reg=obj.reg,
        max_iterations=50,
        callback=lambda i: seen.append(i["examples_seen"]),
        delta=1e9,
    )
    # the gradient test always passes with this delta: the run stops at the first pass that saw
    # every example
    assert res.status == "converged" and seen[-1] == obj.n and all(m < obj.n for m in seen[:-1])
    obj = objective(problem)
    infos = []
    res = S.sag(
        obj,
        None,
        reg=obj.reg,
        max_iterations=400,
        callback=lambda i: infos.append(i["gnorm_inf"]),
        delta=1e-6,
    )
    assert res.status == "converged" and infos[-1] < 1e-6 and min(infos[:-1]) >= 1e-6
    _, g = obj.value_and_grad(res.x)
    assert np.abs(g).max() < 1e-4  # d/n + l2 w is close to the true gradient at the end


@pytest.mark.parametrize("alg", ["sag", "sag-nus", "sag-nus*", "saga", "saga-nus"])
def test_steps_count_the_updates_and_evaluations_count_the_line_search_too(problem, alg):
    obj = objective(problem)
    n = obj.n
    infos = []
    resolve(alg)(
        obj,
        None,
        reg=obj.reg,
        max_iterations=4,
        delta=0.0,
        callback=lambda i: infos.append((i["steps"], obj.n_oracle)),
    )
    steps = [s for s, _ in infos]
    evals = [e for _, e in infos]
    assert all(a < b for a, b in zip(steps, steps[1:]))
    for k, (s, e) in enumerate(infos, 1):
        assert (
            k * n <= e <= k * n + K.LS_MAX_DOUBLINGS + 3
        )  # a pass ends at the first multiple of n
        # every step evaluates at least one example; SAGA (b) evaluates two; line searches add more
        assert s <= e / (2 if alg == "saga-nus" else 1)
        if alg != "saga-nus":
            assert s < e  # some line searches ran
    if alg in ("sag", "saga"):
        assert evals[0] / steps[0] > 1.5  # Algorithm 2 after (almost) every oracle call


@pytest.mark.parametrize(
    "alg,kw",
    [
        ("sag", {}),
        ("sag-nus*", {}),
        ("sag-nus*", {"lmax": "current"}),
        ("saga-nus", {}),
        ("saga-nus", {"step": "a"}),
    ],
)
def test_resume_from_state_is_bitwise_the_uninterrupted_run(problem, alg, kw):
    fn = resolve(alg)
    obj = objective(problem)
    full = fn(obj, None, reg=obj.reg, max_iterations=8, seed=5, delta=0.0, **kw)
    obj1 = objective(problem)
    half = fn(obj1, None, reg=obj1.reg, max_iterations=3, seed=5, delta=0.0, **kw)
    obj2 = objective(problem)
    obj2.n_oracle = obj1.n_oracle
    rest = fn(
        obj2, None, reg=obj2.reg, max_iterations=8, seed=999, delta=0.0, state=half.state, **kw
    )
    assert rest.iterations == 8 and np.array_equal(rest.x, full.x)
    assert obj2.n_oracle == obj.n_oracle


def test_lmax_decayed_and_current_are_the_two_step_rules(problem):
    """sag-nus*'s L_max: the decayed running maximum (default) is what the callback reports and the
    state carries; it decays below the largest current L_i between the visits that raise it;
    'current' reports max_i L_i.  The two rules give different iterates."""
    runs = {}
    for lmax in ("decayed", "current"):
        obj = objective(problem)
        infos = []
        kw = {} if lmax == "decayed" else {"lmax": lmax}
        res = S.sag_nus_star(
            obj,
            None,
            reg=obj.reg,
            max_iterations=6,
            delta=0.0,
            seed=2,
            callback=lambda i: infos.append((i["lipschitz"], i["state"]())),
            **kw,
        )
        runs[lmax] = res.x
        for lip, st in infos:
            if lmax == "current":
                assert lip == st["Li"].max()
            else:
                assert lip == st["Lmax"]
        if lmax == "decayed":
            # 2^(-1/n) per step: after a pass's ~n steps without a visit that raises it, it is below
            # the max
            assert any(st["Lmax"] < st["Li"].max() for _, st in infos)
    assert not np.array_equal(runs["decayed"], runs["current"])


def test_lmax_bad_values_are_parameter_errors(problem):
    obj = objective(problem)
    with pytest.raises(S.ParameterError, match="lmax must be"):
        S.sag_nus_star(obj, None, reg=obj.reg, max_iterations=1, lmax="decaying")
    with pytest.raises(S.ParameterError, match="step rule 'a'"):
        S.saga_nus(obj, None, reg=obj.reg, max_iterations=1, lmax="current")  # rule (b): no L_max
    with pytest.raises(TypeError):
        S.sag(obj, None, reg=obj.reg, max_iterations=1, lmax="current")  # sag has no L_i


def test_train_checkpoint_and_resume(problem, tmp_path):
    X, Y, *_ = problem
    full = train(
        X, Y, l2=L2, algorithm="sag-nus*", max_iterations=6, threads=1, params={"delta": 0.0}
    )
    part = train(
        X,
        Y,
        l2=L2,
        algorithm="sag-nus*",
        max_iterations=3,
        threads=1,
        params={"delta": 0.0},
        checkpoint=tmp_path / "c.ckpt",
    )
    assert part.iterations == 3
    res = train(
        X,
        Y,
        l2=L2,
        algorithm="sag-nus*",
        max_iterations=6,
        threads=1,
        params={"delta": 0.0},
        resume=tmp_path / "c.ckpt",
    )
    assert np.array_equal(res.model.weights, full.model.weights)
    assert res.effective_passes == full.effective_passes and res.iterations == 6


def test_a_state_keeps_the_precision_of_its_store(problem, tmp_path):
    """A state keeps its store's precision: a float64 checkpoint resumes bitwise the uninterrupted
    float64 run; a float32 state given to a call that asks for float64 (a warm start) stays float32,
    so that d remains the sum of what its store rebuilds."""
    X, Y, *_ = problem
    kw = dict(l2=L2, algorithm="sag-nus*", threads=1, params={"delta": 0.0, "store": "float64"})
    full = train(X, Y, max_iterations=5, **kw)
    train(X, Y, max_iterations=2, checkpoint=tmp_path / "c.ckpt", **kw)
    res = train(X, Y, max_iterations=5, resume=tmp_path / "c.ckpt", **kw)
    assert np.array_equal(res.model.weights, full.model.weights)
    obj = objective(problem)
    half = S.sag_nus_star(obj, None, reg=obj.reg, max_iterations=2, delta=0.0)
    assert half.state["node"].dtype == np.float32
    rest = S.sag_nus_star(
        objective(problem),
        None,
        reg=obj.reg,
        max_iterations=3,
        delta=0.0,
        state=half.state,
        store="float64",
    )
    assert rest.state["node"].dtype == np.float32 and rest.state["trans"].dtype == np.float32


def test_warm_start_over_a_sequence_of_l2_values(problem):
    obj_a = objective(problem, l2=0.06)
    first = S.sag_nus_star(obj_a, None, reg=obj_a.reg, max_iterations=200, delta=1e-7)
    assert first.status == "converged"
    obj_cold = objective(problem)
    cold = S.sag_nus_star(obj_cold, None, reg=obj_cold.reg, max_iterations=400, delta=1e-7)
    obj_warm = objective(problem)
    warm = S.sag_nus_star(
        obj_warm, None, reg=obj_warm.reg, max_iterations=400, delta=1e-7, state=first.state
    )
    assert cold.status == warm.status == "converged"
    assert warm.iterations < cold.iterations  # the passes count from 0 for the new problem
    assert abs(warm.f - cold.f) <= 1e-8 * cold.f


def test_memory_figures_are_the_mixed_scheme(problem):
    _, _, space, corp, _ = problem
    obj = objective(problem)
    infos = []
    S.sag(obj, None, reg=obj.reg, max_iterations=1, callback=infos.append)
    S.sag(obj, None, reg=obj.reg, max_iterations=1, callback=infos.append, store="float64")
    L = space.n_labels
    values = corp.n_tokens * L + corp.n_sequences * space.n_trans
    assert infos[0]["state_bytes"] == 4 * values  # float32 by default
    assert infos[1]["state_bytes"] == 8 * values
    for info in infos:
        assert info["naive_state_bytes"] == 8 * corp.n_sequences * space.n_features
        assert info["state_bytes"] < info["naive_state_bytes"]
    with pytest.raises(ValueError, match="store must be"):
        S.sag(obj, None, reg=obj.reg, max_iterations=1, store="float16")


def test_effective_passes_count_line_search_evaluations(problem):
    obj = objective(problem)
    res = S.sag(obj, None, reg=obj.reg, max_iterations=3, delta=0.0)
    st = res.state
    assert (
        obj.n_oracle == st["evals"]
        and 3 * obj.n <= st["evals"] < 3 * obj.n + 2 * K.LS_MAX_DOUBLINGS
    )
    assert st["evals"] > st["steps"]  # the line search ran and was counted
    assert obj.n_full == 0  # monitoring with value(count=False) is not counted


def test_interrupt_returns_the_last_pass(problem):
    obj = objective(problem)
    xs = []

    def cb(info):
        xs.append(info["x"])
        if info["iteration"] == 2:
            raise KeyboardInterrupt

    res = S.saga(obj, None, reg=obj.reg, max_iterations=10, callback=cb)
    assert res.status == "interrupted" and res.iterations == 2 and np.array_equal(res.x, xs[-1])


def test_refusals(problem):
    obj = objective(problem)
    with pytest.raises(ValueError, match="sag"):
        S.sag(obj, None, reg=Regularization(l1=0.1, l2=L2), max_iterations=1)
    with pytest.raises(TypeError):
        S.sag(obj, None, reg=obj.reg, max_iterations=1, eta=0.1)
    with pytest.raises(ValueError, match="step"):
        S.saga(obj, None, reg=obj.reg, max_iterations=1, step="c")
    obj.space.n_dense = 2
    try:
        with pytest.raises(CrfkitError, match="sag-nus\\* does not support dense features"):
            S.sag_nus_star(obj, None, reg=obj.reg, max_iterations=1)
    finally:
        obj.space.n_dense = 0


# ------------------------------------------------------------------ line search (Algorithm 2)
def test_line_search_is_algorithm_2_against_direct_evaluation(problem):
    """The kernel's Lipschitz search returns the first L0 * 2^k that gives the sufficient decrease
    -log p(y_i|x_i, w - g/L) < f - ||g||^2/(2L), counting one forward pass per trial, for
    w = beta * v."""
    obj = objective(problem)
    c, s = obj.corpus, obj.space
    rng = np.random.default_rng(7)
    w = 0.5 * rng.standard_normal(obj.n_features)
    Lab, maxT = s.n_labels, c.max_length
    bufs = [np.empty((maxT, Lab)) for _ in range(5)] + [np.empty(maxT)]

    def loss(i, x):
        return obj.oracle(i, x)[0]

    grew = 0
    for i in range(obj.n):
        f, node, edge = obj.oracle(i, w)
        g = np.zeros(obj.n_features)
        obj.apply_gradient(i, node, edge, 1.0, g)
        g2 = float(g @ g)
        start = 0.05
        for beta in (1.0, 0.25):
            L, nev = _line_search_at(
                c.seq_ptr,
                c.tok_ptr,
                c.attr,
                c.val,
                c.y,
                s.attr_ptr,
                s.feat_label,
                s.trans_index,
                s.n_state,
                i,
                w / beta,
                beta,
                g,
                g2,
                f,
                start,
                *bufs,
            )
            k = round(np.log2(L / start))
            assert L == start * 2.0**k and nev == k + 1
            assert loss(i, w - g / L) < f - g2 / (2 * L) + 1e-12
            if k > 0:  # the previous trial failed the test
                assert loss(i, w - 2 * g / L) >= f - g2 / L - 1e-12
                grew += 1
    assert grew > 0


def test_example_oracle_is_the_sequence_oracle_and_keeps_the_scores(problem):
    """The SAG kernel's own oracle (which hands its emission/transition scores to the line search)
    returns what kernels.oracle.sequence_oracle returns (to rounding: its exponentials of the
    transition scores are within 1 ulp of libm's), and bitwise the scores the line search starts
    from."""
    from crfkit.kernels import oracle as O

    obj = objective(problem)
    c, s = obj.corpus, obj.space
    Lab, maxT = s.n_labels, c.max_length
    v = np.random.default_rng(3).standard_normal(obj.n_features)
    beta = 0.7
    for i in range(obj.n):
        T = int(c.seq_ptr[i + 1] - c.seq_ptr[i])
        node_a, edge_a = np.empty((maxT, Lab)), np.empty((Lab, Lab))
        node_b, edge_b = np.empty((maxT, Lab)), np.empty((Lab, Lab))
        score, bm, es, scale = (
            np.empty((maxT, Lab)),
            np.empty((maxT, Lab)),
            np.empty((maxT, Lab)),
            np.empty(maxT),
        )
        ref = O.sequence_oracle(*obj._args(), v, beta, s.n_state, i, node_a, edge_a, obj.full_rows)
        loss, trans = _example_oracle(
            *obj._args(), s.n_state, i, v, beta, node_b, edge_b, score, bm, es, scale
        )
        assert loss == pytest.approx(ref, rel=1e-14, abs=1e-14)
        np.testing.assert_allclose(node_b[:T], node_a[:T], rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(edge_b, edge_a, rtol=1e-13, atol=1e-15)
        want = np.empty((T, Lab))
        emissions(
            c.tok_ptr,
            c.attr,
            c.val,
            c.seq_ptr[i],
            c.seq_ptr[i + 1],
            s.attr_ptr,
            s.feat_label,
            v,
            beta,
            want,
        )
        assert np.array_equal(score[:T], want)
        assert np.array_equal(trans, transition_matrix(v, beta, s.n_state, s.trans_index))


# ------------------------------------------------------------------ fused per-example kernel
def _fused_case(space, corp, obj, full, seed, store=np.float64):
    """process_example (fused catch-up + emissions, gradient and g_new - g_old from marginals in
    example-local buffers, ||g||^2) and consume against the unfused computation, example by example;
    ``store``: the precision of the stored marginals and transition gradients (float32: g_new in
    g_new - g_old is the one rebuilt from the rounded stored values)."""
    c, s = corp, space
    rng = np.random.default_rng(seed)
    p, L, na, nt = s.n_features, s.n_labels, len(s.attr_ptr) - 1, s.n_trans
    maxT = c.max_length
    occ = K.max_occurrences(c.seq_ptr, c.tok_ptr)
    nloc = K.max_coordinates(c.seq_ptr, c.tok_ptr, c.attr, s.attr_ptr, nt)
    mark = np.zeros((na + 1, 2), dtype=np.int64)
    ulist, obase = np.zeros(occ, dtype=np.int64), np.zeros(occ, dtype=np.int64)
    gloc, dloc = np.zeros(nloc), np.zeros(nloc)
    bufs = [np.empty((maxT, L)) for _ in range(8)] + [np.empty(maxT)]
    node, pm, dp, score, shift, sc2, es, alpha, scale = bufs[0], *bufs[1:]
    edge = np.empty((L, L))
    cum = np.cumsum(rng.uniform(0.0, 0.1, 12))
    t = 10
    for i in range(obj.n):
        T = int(c.seq_ptr[i + 1] - c.seq_ptr[i])
        t0 = int(c.seq_ptr[i])
        v0 = rng.standard_normal(p)
        d = rng.standard_normal(p)
        alast = rng.integers(0, t + 1, na + 1)
        beta = float(rng.uniform(0.5, 1.5))
        node_store = rng.dirichlet(np.ones(L), c.n_tokens).astype(store)
        trans_store = rng.standard_normal((obj.n, nt)).astype(store)
        stored = bool(i % 3)
        # the unfused reference: catch-up coordinate by coordinate, oracle, dense gradients
        attrs = np.unique(c.attr[c.tok_ptr[t0] : c.tok_ptr[t0 + T]])
        ref_v = v0.copy()
        for a in attrs:
            ks = slice(s.attr_ptr[a], s.attr_ptr[a + 1])
            ref_v[ks] -= d[ks] * (cum[t] - cum[alast[a]])
        tr = slice(s.n_state, s.n_state + nt)
        ref_v[tr] -= d[tr] * (cum[t] - cum[alast[na]])
        f_ref, node_ref, edge_ref = obj.oracle(i, ref_v, beta)
        g_new = np.zeros(p)
        obj.apply_gradient(i, node_ref, edge_ref, 1.0, g_new)
        g_old = np.zeros(p)
        if stored:
            obj.apply_gradient(i, node_store[t0 : t0 + T], np.zeros((L, L)), 1.0, g_old)
            g_old[tr] = trans_store[i]
        want_score = np.empty((T, L))
        emissions(
            c.tok_ptr, c.attr, c.val, t0, t0 + T, s.attr_ptr, s.feat_label, ref_v, beta, want_score
        )
        # the fused kernel
        v = v0.copy()
        dd = d.copy()
        ns, ts_ = node_store.copy(), trans_store.copy()
        loss, g2, _L, nev, nu = K.process_example(
            c.seq_ptr,
            c.tok_ptr,
            c.attr,
            c.val,
            c.y,
            s.attr_ptr,
            s.feat_label,
            full,
            s.trans_index,
            s.n_state,
            nt,
            i,
            True,
            stored,
            False,
            1.0,
            v,
            beta,
            dd,
            alast.copy(),
            cum,
            t,
            mark,
            ulist,
            obase,
            ns,
            ts_,
            node,
            edge,
            gloc,
            dloc,
            pm,
            dp,
            score,
            shift,
            sc2,
            es,
            alpha,
            scale,
        )
        assert nev == 1 and np.array_equal(dd, d) and not gloc.any()
        np.testing.assert_allclose(v, ref_v, rtol=1e-14, atol=1e-14)
        np.testing.assert_allclose(score[:T], want_score, rtol=1e-12, atol=1e-12)
        assert loss == pytest.approx(f_ref, rel=1e-12)
        assert g2 == pytest.approx(float(g_new @ g_new), rel=1e-12)
        assert list(ulist[:nu]) == list(
            dict.fromkeys(c.attr[c.tok_ptr[t0] : c.tok_ptr[t0 + T]].tolist())
        )
        # dloc back into the parameter layout: the features of ulist[0], ulist[1], ..., then the
        # transitions
        diff = np.zeros(p)
        off = 0
        for a in ulist[:nu]:
            k0, k1 = s.attr_ptr[a], s.attr_ptr[a + 1]
            diff[k0:k1] = dloc[off : off + k1 - k0]
            off += k1 - k0
        diff[tr] = dloc[off : off + nt]
        # what was stored: the new marginals and transition gradient, in the store's precision ...
        tol = 1e-12 if store == np.float64 else 1e-7
        assert ns.dtype == store and ts_.dtype == store
        np.testing.assert_allclose(ns[t0 : t0 + T], node_ref, rtol=tol, atol=1e-14)
        np.testing.assert_allclose(ts_[i], g_new[tr], rtol=tol, atol=1e-12)
        # ... and g_new in dloc is the gradient rebuilt from them, so that d stays the sum of what
        # is stored
        g_kept = np.zeros(p)
        obj.apply_gradient(i, ns[t0 : t0 + T].astype(np.float64), np.zeros((L, L)), 1.0, g_kept)
        g_kept[tr] = ts_[i]
        np.testing.assert_allclose(diff, g_kept - g_old, rtol=1e-12, atol=1e-12)
        if store == np.float32:
            assert np.abs(g_kept - g_new).max() > 0  # the rounding is there to be seen
        # consume: d += dloc, v += 0.3 dloc on those coordinates, dloc back to zero
        K.consume(s.attr_ptr, s.n_state, nt, ulist, nu, dloc, 1.0, 0.3, dd, v)
        np.testing.assert_allclose(dd, d + diff, rtol=1e-14, atol=1e-14)
        np.testing.assert_allclose(v, ref_v + 0.3 * diff, rtol=1e-13, atol=1e-13)
        assert not dloc.any()
        # the line-search shift: emissions of the gradient from the example-local buffer
        K.catch_up_emissions(
            c.tok_ptr,
            c.attr,
            c.val,
            t0,
            t0 + T,
            s.attr_ptr,
            s.feat_label,
            full,
            s.n_state,
            nt,
            v,
            1.0,
            dd,
            np.full(na + 1, t),
            cum,
            t,
            mark,
            ulist,
            obase,
            score,
        )
        K.gradient_and_difference(
            c.tok_ptr,
            c.attr,
            c.val,
            t0,
            t0 + T,
            s.attr_ptr,
            s.feat_label,
            full,
            obase,
            pm,
            dp,
            gloc,
            dloc,
        )
        K.local_emissions(
            c.tok_ptr, c.attr, c.val, t0, t0 + T, s.attr_ptr, s.feat_label, full, obase, gloc, shift
        )
        g_state = np.zeros(p)
        obj.apply_gradient(
            i, pm[:T] + (np.arange(L) == c.y[t0 : t0 + T, None]), np.zeros((L, L)), 1.0, g_state
        )
        want_shift = np.empty((T, L))
        emissions(
            c.tok_ptr, c.attr, c.val, t0, t0 + T, s.attr_ptr, s.feat_label, g_state, 1.0, want_shift
        )
        np.testing.assert_allclose(shift[:T], want_shift, rtol=1e-12, atol=1e-12)
        gloc[:] = 0.0
        dloc[:] = 0.0


@pytest.mark.parametrize("support", ["observed", "all"])
def test_fused_example_kernel_equals_the_unfused_computation(support):
    # real-valued ("len") and binary attributes; with few sequences under "observed" support most
    # attributes lack some labels (the scattered path), under "all" every attribute is a full label
    # row
    X, Y = corpus(4, n_seq=8)
    space, corp = build(X, Y, support=support)
    obj = Objective(corp, space, Regularization(l2=L2), threads=1)
    full = full_rows(space.attr_ptr, space.feat_label, space.n_labels)
    assert (support == "all") == bool(full.all())
    assert support == "all" or not full.all()
    _fused_case(space, corp, obj, full, 0)
    _fused_case(
        space, corp, obj, np.zeros_like(full), 1
    )  # the same data through the scattered path
    _fused_case(space, corp, obj, full, 2, store=np.float32)
