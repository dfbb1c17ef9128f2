"""CRFsuite's online learners (pa, ap, arow): the kernel against a dense numpy reference for a
forced order, zero training error on separable data, agreement with python-crfsuite, resume, warm
start, Ctrl-C."""

from __future__ import annotations

import math

import numpy as np
import pytest

from conftest import markov_corpus, viterbi_reference
from crfkit.errors import ParameterError
from crfkit.features.encode import build
from crfkit.kernels import occ as KO
from crfkit.kernels import online as K
from crfkit.model import CRFModel
from crfkit.objective import Objective, Regularization
from crfkit.optim import online as O
from crfkit.optim.sgdl1 import pass_order
from crfkit.optim.stochastic import available, resolve
from crfkit.train import train


def strings(X):
    return [[[a for a in tok if isinstance(a, str)] for tok in x] for x in X]


@pytest.fixture(scope="module")
def problem():
    X, Y = markov_corpus(5, 40, noise=("noise", 6, 3), real_p=0.0)
    X = strings(X)
    space, corp = build(X, Y)
    return X, Y, space, corp


def objective(problem):
    _, _, space, corp = problem
    return Objective(corp, space, Regularization(l2=0.01), threads=1)


# --------------------------------------------------------------------------- dense numpy reference
def phi(space, x, path):
    """Dense feature vector of a label path, from the names (independent of the kernels)."""
    f = np.zeros(space.n_features)
    for t, tok in enumerate(x):
        for a in tok:
            k = space.attr_index.get(a)
            if k is None:
                continue
            lo, hi = space.attr_ptr[k], space.attr_ptr[k + 1]
            hit = np.flatnonzero(space.feat_label[lo:hi] == path[t])
            if len(hit):
                f[lo + hit[0]] += 1.0
        if t > 0:
            k = space.trans_index[path[t - 1], path[t]]
            if k >= 0:
                f[space.n_state + k] += 1.0
    return f


def np_viterbi(space, x, w):
    L, T = space.n_labels, len(x)
    E = np.zeros((T, L))
    for t, tok in enumerate(x):
        for l in range(L):
            E[t, l] = sum(w[k] for k in _state_ids(space, tok, l))
    tr = np.zeros((L, L))
    for a in range(L):
        for b in range(L):
            k = space.trans_index[a, b]
            if k >= 0:
                tr[a, b] = w[space.n_state + k]
    best, path = viterbi_reference(E, np.broadcast_to(tr, (T, L, L)))
    return path, best


def _state_ids(space, tok, l):
    for a in tok:
        k = space.attr_index.get(a)
        if k is None:
            continue
        lo, hi = space.attr_ptr[k], space.attr_ptr[k + 1]
        for j in np.flatnonzero(space.feat_label[lo:hi] == l):
            yield lo + j


def reference(
    space, X, Y, order, method, pa_type=1, C=1.0, sensitive=True, gamma=1.0, variance=1.0
):
    d = space.n_features
    w, ws, cov = np.zeros(d), np.zeros(d), np.full(d, variance)
    u = 1.0
    for i in order:
        x = X[i]
        y = [space.label_index[lab] for lab in Y[i]]
        vit, sv = np_viterbi(space, x, w)
        nd = sum(a != b for a, b in zip(vit, y))
        if nd:
            delta = phi(space, x, y) - phi(space, x, vit)
            sc = float(w @ phi(space, x, y))
            if method == "ap":
                w += delta
                ws += u * delta
            elif method == "pa":
                cost = sv - sc + (math.sqrt(nd) if sensitive else 1.0)
                n2 = float(delta @ delta)
                tau = [cost / n2, min(C, cost / n2), cost / (n2 + 0.5 / C)][pa_type]
                w += tau * delta
                ws += tau * u * delta
            else:
                cost = sv - sc + nd
                alpha = cost / (gamma + float(delta * delta @ cov))
                w += alpha * cov * delta
                cov = 1.0 / (1.0 / cov + delta * delta / gamma)
        u += 1
    return w, ws, cov, u


CASES = [
    ("pa", dict(pa_type=0)),
    ("pa", dict(pa_type=1)),
    ("pa", dict(pa_type=2, C=0.3)),
    ("pa", dict(pa_type=1, sensitive=False, C=0.05)),
    ("ap", {}),
    ("arow", dict(gamma=0.5, variance=2.0)),
]


@pytest.mark.parametrize("method,kw", CASES)
def test_kernel_matches_dense_reference(problem, method, kw):
    X, Y, space, corp = problem
    obj = objective(problem)
    n = corp.n_sequences
    order = np.concatenate([pass_order(2, 0, n), pass_order(2, 1, n)])
    w_ref, ws_ref, cov_ref, u_ref = reference(space, X, Y, order, method, **kw)
    d = space.n_features
    w, ws, cov = np.zeros(d), np.zeros(d), np.full(d, kw.get("variance", 1.0))
    scal = np.array([1.0, 0.0])
    code = {"pa": K.PA, "ap": K.AP, "arow": K.AROW}[method]
    T = int(corp.max_length)
    for a, b in ((0, n), (n, 2 * n)):
        ok0, onk, lab = KO.layout(
            corp.tok_ptr, corp.attr, space.attr_ptr, space.feat_label, obj.full_rows, space.n_labels
        )
        K.run_online(
            corp.seq_ptr,
            corp.tok_ptr,
            ok0,
            onk,
            corp.val,
            lab,
            corp.y,
            space.trans_index,
            space.n_state,
            space.n_trans,
            order,
            a,
            b,
            code,
            kw.get("pa_type", 1),
            kw.get("C", 1.0),
            kw.get("sensitive", True),
            kw.get("gamma", 1.0),
            w,
            ws,
            cov,
            scal,
            np.zeros(d),
            np.full(d, -1, dtype=np.int64),
            np.empty(d, dtype=np.int64),
            np.empty(T, dtype=np.int64),
            np.empty((T, space.n_labels)),
            np.empty((space.n_labels, space.n_labels)),
            np.zeros(0),
        )
    assert scal[K.U] == u_ref
    np.testing.assert_allclose(w, w_ref, rtol=1e-10, atol=1e-10)
    if method != "arow":
        np.testing.assert_allclose(ws, ws_ref, rtol=1e-10, atol=1e-8)
    else:
        np.testing.assert_allclose(cov, cov_ref, rtol=1e-12)
    assert np.any(w != 0)


# --------------------------------------------------------------------------- separable data
@pytest.mark.parametrize(
    "alg,params",
    [
        ("pa", {}),
        ("pa", {"type": 0}),
        ("pa", {"type": 2}),
        ("ap", {}),
        ("pa", {"averaging": False}),
    ],
)
def test_zero_training_error_on_separable_data(alg, params):
    X, Y = markov_corpus(9, 60, sig_p=1.0, real_p=0.0)
    X = strings(X)
    res = train(
        X, Y, algorithm=alg, max_iterations=20, params=dict(params, epsilon=1e-12), threads=1
    )
    pred = res.model.tag(X)
    assert all(p == y for p, y in zip(pred, Y))
    assert res.status == "converged"  # an epoch without a mistake: mean loss 0 < epsilon


# --------------------------------------------------------------------------- CRFsuite
@pytest.mark.parametrize(
    "alg",
    [
        "pa",
        "ap",
        pytest.param(
            "arow",
            marks=pytest.mark.xfail(
                strict=False,
                reason="open: crfkit's AROW has scored 0.83-0.87 against CRFsuite's 0.84-0.88 on this corpus "
                "(means 1.5-4 points apart over 3 orders; the kernel matches the dense reference of "
                "train_arow.c's update)",
            ),
        ),
    ],
)
def test_against_crfsuite(alg, tmp_path):
    """Test accuracy after 20 epochs, the mean over 3 visiting orders on each side (CRFsuite's order
    varied through the order the sequences are appended in): within 0.5 points for the averaged
    learners; AROW (not averaged) moves by about 2 points from one order to the next, so its means
    are compared within three standard errors of their difference."""
    pycrfsuite = pytest.importorskip("pycrfsuite")
    X, Y = markov_corpus(21, 400, noise=("noise", 30, 3), real_p=0.0)
    Xt, Yt = markov_corpus(22, 400, noise=("noise", 30, 3), real_p=0.0)
    X, Xt = strings(X), strings(Xt)
    gold = [l for y in Yt for l in y]
    ours, theirs = [], []
    for rep in range(3):
        tr = pycrfsuite.Trainer(algorithm=alg, verbose=False)
        for i in np.random.default_rng(rep).permutation(len(X)):
            tr.append(X[i], Y[i])
        tr.set_params({"max_iterations": 20})
        tr.train(str(tmp_path / f"m{rep}"))
        tagger = pycrfsuite.Tagger()
        tagger.open(str(tmp_path / f"m{rep}"))
        theirs.append(
            np.mean([a == b for a, b in zip(gold, [l for x in Xt for l in tagger.tag(x)])])
        )
        res = train(
            X, Y, algorithm=alg, max_iterations=20, threads=1, seed=rep, params={"monitor": False}
        )
        ours.append(
            np.mean([a == b for a, b in zip(gold, [l for p in res.model.tag(Xt) for l in p])])
        )
    tol = 0.005
    if alg == "arow":
        tol = max(tol, 3 * math.sqrt((np.var(ours, ddof=1) + np.var(theirs, ddof=1)) / 3))
    assert abs(np.mean(ours) - np.mean(theirs)) <= tol, (ours, theirs)


# --------------------------------------------------------------------------- resume, warm start,
# Ctrl-C
@pytest.mark.parametrize("alg", ["pa", "ap", "arow"])
def test_bitwise_resume_and_ctrl_c(problem, alg):
    fn = resolve(alg)
    full = fn(objective(problem), None, reg=Regularization(l2=0.01), max_iterations=5)
    states, xs = {}, {}

    def stop3(info):
        states[info["iteration"]] = info["state"]()
        xs[info["iteration"]] = info["x"].copy()
        if info["iteration"] == 3:
            raise KeyboardInterrupt

    cut = fn(
        objective(problem), None, reg=Regularization(l2=0.01), max_iterations=5, callback=stop3
    )
    assert cut.status == "interrupted" and cut.iterations == 3
    np.testing.assert_array_equal(cut.x, xs[3])
    again = fn(
        objective(problem), None, reg=Regularization(l2=0.01), max_iterations=5, state=states[3]
    )
    np.testing.assert_array_equal(again.x, full.x)
    assert again.iterations == 5


@pytest.mark.parametrize("alg", ["pa", "ap", "arow"])
def test_warm_start(problem, alg):
    X, Y, _, _ = problem
    r1 = train(X, Y, algorithm=alg, max_iterations=5, threads=1)
    w1 = r1.model.weights if hasattr(r1.model, "weights") else r1.model.w
    r2 = resolve(alg)(
        objective(problem), np.asarray(w1), reg=Regularization(l2=0.01), max_iterations=1
    )
    r0 = resolve(alg)(objective(problem), None, reg=Regularization(l2=0.01), max_iterations=1)
    assert not np.array_equal(r2.x, r0.x)
    acc = lambda x: np.mean(
        [a == b for y, p in zip(Y, CRFModel(problem[2], x).tag(X)) for a, b in zip(y, p)]
    )
    assert acc(r2.x) >= acc(r0.x) - 0.02


def test_refusals(problem):
    obj = objective(problem)
    with pytest.raises(ParameterError, match="type must be"):
        O.pa(obj, None, reg=obj.reg, type=3)
    with pytest.raises(ParameterError, match="> 0"):
        O.arow(obj, None, reg=obj.reg, gamma=0.0)
    with pytest.raises(TypeError):
        O.ap(obj, None, reg=obj.reg, c=1.0)
    assert {"pa", "ap", "arow"} <= set(available())
