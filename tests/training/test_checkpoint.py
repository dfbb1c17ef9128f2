"""Resumable training: optimizer state export/import (bitwise resume), checkpoint files,
train(checkpoint=..., resume=...), SIGTERM during training."""

from __future__ import annotations

import numpy as np
import pytest

from crfkit.features.encode import build
from crfkit.objective import Objective, Regularization
from crfkit.optim.lbfgs import lbfgs
from crfkit.optim.owlqn import owlqn

LABELS = ["A", "B", "C"]


def data(seed=0, n_seq=40):
    rng = np.random.default_rng(seed)
    X, Y = [], []
    for _ in range(n_seq):
        T = int(rng.integers(2, 9))
        y = rng.integers(3, size=T)
        x = []
        for lab in y:
            sig = lab if rng.random() < 0.8 else int(rng.integers(3))
            x.append([f"sig={LABELS[sig]}", f"n={int(rng.integers(15))}"])
        X.append(x)
        Y.append([LABELS[k] for k in y])
    return X, Y


@pytest.fixture(scope="module")
def problem():
    X, Y = data()
    space, corpus = build(X, Y)
    return space, corpus


def _run(opt, fg, n, l1, **kw):
    if opt == "lbfgs":
        return lbfgs(fg, np.zeros(n), **kw)
    return owlqn(fg, np.zeros(n), l1, **kw)


def _resume(opt, fg, l1, state, **kw):
    if opt == "lbfgs":
        return lbfgs(fg, None, state=state, **kw)
    return owlqn(fg, None, l1, state=state, **kw)


@pytest.mark.parametrize("opt, l1", [("lbfgs", 0.0), ("owlqn", 0.02)])
@pytest.mark.parametrize("k", [1, 4, 9])
def test_optimizer_resume_is_bitwise(problem, opt, l1, k):
    space, corpus = problem
    obj = Objective(corpus, space, Regularization(l2=0.05))
    kw = dict(m=3, epsilon=1e-9, delta=1e-9, period=3)
    full = _run(opt, obj.value_and_grad, space.n_features, l1, **kw)
    assert full.iterations > k + 3
    states = {}

    def keep(info):
        states[info["iteration"]] = info["state"]()

    _run(opt, obj.value_and_grad, space.n_features, l1, callback=keep, **kw)
    st = states[k]
    assert st["iteration"] == k and len(st["rho"]) == min(k, 3) and len(st["past"]) == min(k + 1, 4)
    res = _resume(opt, obj.value_and_grad, l1, st, **kw)
    assert res.status == full.status
    assert res.iterations == full.iterations
    assert res.n_evals == full.n_evals
    np.testing.assert_array_equal(res.x, full.x)
    assert res.f == full.f


@pytest.mark.parametrize("opt, l1", [("lbfgs", 0.0), ("owlqn", 0.02)])
def test_interrupted_result_state_resumes(problem, opt, l1):
    """A KeyboardInterrupt in the middle of a line search: result.state is the last accepted
    point."""
    space, corpus = problem
    obj = Objective(corpus, space, Regularization(l2=0.05))
    kw = dict(m=4, epsilon=1e-9, delta=1e-9, period=5)
    full = _run(opt, obj.value_and_grad, space.n_features, l1, **kw)
    calls = [0]

    def fg(w):
        calls[0] += 1
        if calls[0] == 12:
            raise KeyboardInterrupt
        return obj.value_and_grad(w)

    part = _run(opt, fg, space.n_features, l1, **kw)
    assert part.status == "interrupted" and 0 < part.iterations < full.iterations
    assert part.state["iteration"] == part.iterations
    np.testing.assert_array_equal(part.state["x"], part.x)
    res = _resume(opt, obj.value_and_grad, l1, part.state, **kw)
    assert res.iterations == full.iterations and res.status == full.status
    np.testing.assert_array_equal(res.x, full.x)


def test_resumed_state_of_finished_run_stops_at_once(problem):
    space, corpus = problem
    obj = Objective(corpus, space, Regularization(l2=0.05))
    full = lbfgs(obj.value_and_grad, np.zeros(space.n_features), m=3)
    res = lbfgs(obj.value_and_grad, None, state=full.state, m=3)
    assert res.status == full.status and res.iterations == full.iterations
    np.testing.assert_array_equal(res.x, full.x)


def test_state_mismatch_refused(problem):
    space, corpus = problem
    obj = Objective(corpus, space, Regularization(l2=0.05))
    part = lbfgs(obj.value_and_grad, np.zeros(space.n_features), m=3, max_iterations=2)
    with pytest.raises(ValueError, match="m=3"):
        lbfgs(obj.value_and_grad, None, state=part.state, m=5)


# ------------------------------------------------------------------ train(checkpoint=...,
# resume=...)
import json  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

from crfkit.errors import CrfkitError  # noqa: E402
from crfkit.train import train  # noqa: E402
from crfkit.training import checkpoint as ckpt  # noqa: E402

KW = dict(threads=1, epsilon=1e-8, delta=1e-10, m=4, period=5, c2=0.5)


@pytest.mark.parametrize("c1", [0.0, 0.05])
def test_train_interrupted_then_resumed_equals_uninterrupted(tmp_path, c1):
    X, Y = data(1)
    full = train(X, Y, c1=c1, **KW)
    ck = tmp_path / "run.ckpt"

    def stop_at_7(rec):
        if rec["iteration"] == 7:
            raise KeyboardInterrupt  # as Ctrl-C in the middle of the run

    part = train(X, Y, c1=c1, checkpoint=ck, checkpoint_every=3, callback=stop_at_7, **KW)
    assert part.status == "interrupted" and part.iterations == 7
    c = ckpt.load(ck)
    assert c.iteration == 7 and [r["iteration"] for r in c.history] == list(range(1, 8))
    trace = tmp_path / "trace.jsonl"
    res = train(X, Y, c1=c1, resume=ck, trace=trace, **KW)
    assert res.status == full.status and res.iterations == full.iterations
    np.testing.assert_array_equal(res.model.weights, full.model.weights)
    assert res.objective == full.objective
    assert [r["objective"] for r in res.history] == [r["objective"] for r in full.history]
    assert [r["effective_passes"] for r in res.history] == [
        r["effective_passes"] for r in full.history
    ]
    lines = [json.loads(x) for x in trace.read_text().splitlines()]
    assert [r["iteration"] for r in lines] == list(range(1, full.iterations + 1))
    assert res.model.meta["resumed_from"] == 7


def test_periodic_checkpoint_and_continue_with_more_iterations(tmp_path):
    X, Y = data(2)
    full = train(X, Y, max_iterations=12, **KW)
    ck = tmp_path / "c.ckpt"
    first = train(X, Y, max_iterations=5, checkpoint=ck, checkpoint_every=2, **KW)
    assert first.status == "max_iterations" and ckpt.load(ck).iteration == 5
    more = train(X, Y, max_iterations=12, resume=ck, **KW)
    assert more.iterations == 12
    np.testing.assert_array_equal(more.model.weights, full.model.weights)


def test_resume_refuses_other_data_or_settings(tmp_path):
    X, Y = data(3)
    ck = tmp_path / "c.ckpt"
    train(X, Y, max_iterations=3, checkpoint=ck, **KW)
    X2, Y2 = data(4)
    with pytest.raises(ckpt.CheckpointError, match="other training data"):
        train(X2, Y2, resume=ck, **KW)
    with pytest.raises(CrfkitError, match="l2="):
        train(X, Y, resume=ck, **{**KW, "c2": 2.0})
    with pytest.raises(CrfkitError, match="m=4 in the checkpoint"):
        train(X, Y, resume=ck, **{**KW, "m": 6})
    bad = tmp_path / "bad.ckpt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(CrfkitError, match="cannot read"):
        train(X, Y, resume=bad, **KW)
    with pytest.raises(CrfkitError, match="no such"):
        train(X, Y, resume=tmp_path / "missing", **KW)


def test_checkpoint_file_has_no_pickle(tmp_path):
    X, Y = data(3)
    ck = tmp_path / "c.ckpt"
    train(X, Y, max_iterations=3, checkpoint=ck, **KW)
    with np.load(ck, allow_pickle=False) as z:
        assert set(z.files) == {"s.x", "s.g", "s.S", "s.Y", "s.rho", "s.past", "header"}
        assert all(z[k].dtype != object for k in z.files)
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".tmp-")]


def test_any_optimizer_state_round_trips_exactly(tmp_path):
    from crfkit.training import checkpoint as ckpt

    rng = np.random.default_rng(0)
    state = {
        "iteration": 7,
        "x": rng.normal(size=5),
        "seen": np.array([True, False]),
        "order": np.arange(4, dtype=np.int32),
        "L": 0.1 + 0.2,
        "eta": float("inf"),
        "name": "sag-nus*",
        "rng": {"state": 2**70 + 3, "inc": [1, 2]},
        "flag": True,
        "n": np.int64(3),
    }
    p = tmp_path / "s.ckpt"
    ckpt.save(p, state, fingerprint="fp", settings={"algorithm": "sag"})
    back = ckpt.load(p).state
    assert set(back) == set(state)
    for k, v in state.items():
        if isinstance(v, np.ndarray):
            assert back[k].dtype == v.dtype
            np.testing.assert_array_equal(back[k], v)
        else:
            assert back[k] == (v.item() if isinstance(v, np.generic) else v)
    assert back["L"] == 0.1 + 0.2  # floats exactly, not rounded
    with pytest.raises(TypeError, match="cannot store"):
        ckpt.save(p, dict(state, bad=object()), fingerprint="fp", settings={})


def test_a_large_sparse_vector_is_stored_as_its_non_zeros(tmp_path):
    """A vector of 2M float64 of which 6 are non-zero (a -0.0 and a NaN among them: non-zero as
    bits) is stored as indices and values (a checkpoint of kilobytes, not 16 MB), comes back with
    the same bits in lazy zeros (its untouched pages not resident), beside a dense vector of the
    same size and a small one stored whole; a state without such a vector is still written as
    version 2."""
    import json
    import sys

    from crfkit.training import checkpoint as ckpt

    n = 2 << 20
    x = np.zeros(n)
    x[[0, 5, 77, n // 2, n - 1]] = [1.5, -0.0, np.nan, -3.25, 7.0]
    x32 = np.zeros(n, np.float32)
    x32[[3, n - 2]] = [2.0, -1.0]
    dense = np.random.default_rng(0).normal(size=n // 4)
    state = {"iteration": 3, "x": x, "x32": x32, "dense": dense, "small": np.zeros(10)}
    p = tmp_path / "sparse.ckpt"
    ckpt.save(p, state, fingerprint="fp", settings={})
    assert os.path.getsize(p) < dense.nbytes + (1 << 16)
    with np.load(p, allow_pickle=False) as z:
        assert {"z.x.idx", "z.x.val", "z.x32.idx", "z.x32.val", "s.dense", "s.small"} <= set(
            z.files
        )
        assert "s.x" not in z.files
        header = json.loads(bytes(z["header"]).decode())
        assert header["version"] == 3 and header["sparse_arrays"]["x"] == [n, x.dtype.str]
    back = ckpt.load(p).state
    for k in ("x", "x32", "dense", "small"):
        assert back[k].dtype == state[k].dtype and back[k].tobytes() == state[k].tobytes()
    if sys.platform.startswith("linux"):
        from conftest import mapping_rss_kb

        assert mapping_rss_kb(back["x"]) <= 5 * 4 + 16  # the pages of its non-zeros
    ckpt.save(p, {"iteration": 1, "x": np.ones(n)}, fingerprint="fp", settings={})
    with np.load(p, allow_pickle=False) as z:
        assert json.loads(bytes(z["header"]).decode())["version"] == 2 and "s.x" in z.files


def test_a_broken_sparse_member_is_a_checkpoint_error(tmp_path):
    import json

    from crfkit.training import checkpoint as ckpt

    header = {
        "format": "crfkit-checkpoint",
        "version": 3,
        "settings": {},
        "fingerprint": "fp",
        "iteration": 1,
        "n_evals": 0,
        "state_scalars": {},
        "history": [],
        "extra": {},
        "sparse_arrays": {"x": [10, "<f8"]},
    }
    p = tmp_path / "bad.ckpt"
    with open(p, "wb") as f:
        np.savez(
            f,
            **{
                "z.x.idx": np.array([3, 12]),
                "z.x.val": np.array([1.0, 2.0]),
                "header": np.frombuffer(json.dumps(header).encode(), dtype=np.uint8),
            },
        )
    with pytest.raises(ckpt.CheckpointError, match="sparse member 'x' is inconsistent"):
        ckpt.load(p)


def test_version_1_checkpoints_are_still_read(tmp_path):
    import json

    from crfkit.training import checkpoint as ckpt

    header = {
        "format": "crfkit-checkpoint",
        "version": 1,
        "settings": {},
        "fingerprint": "fp",
        "iteration": 4,
        "n_evals": 5,
        "m": 6,
        "linesearch_ok": True,
        "history": [],
        "extra": {},
    }
    arrays = {k: np.arange(3.0) for k in ckpt.STATE_ARRAYS}
    arrays["scalars"] = np.array([1.5, 1.25, 9.0])
    arrays["header"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    p = tmp_path / "v1.npz"
    np.savez(p, **arrays)
    st = ckpt.load(p).state
    assert st["iteration"] == 4 and st["m"] == 6 and st["f"] == 1.5 and st["f_smooth"] == 1.25
    np.testing.assert_array_equal(st["S"], np.arange(3.0))


CHILD = r"""
import sys, time
import numpy as np
sys.path.insert(0, {tests!r})
from test_checkpoint import data, KW
import crfkit.objective as o
from crfkit.train import train
orig = o.Objective.value_and_grad
def slow(self, w):
    time.sleep(0.05)
    return orig(self, w)
o.Objective.value_and_grad = slow
X, Y = data(5)
def cb(rec):
    print("iter", rec["iteration"], flush=True)
res = train(X, Y, checkpoint={ck!r}, checkpoint_every=100, callback=cb, **KW)
np.save({out!r}, res.model.weights)
print("status", res.status, res.iterations, flush=True)
"""


def test_sigterm_writes_checkpoint_and_resume_matches(tmp_path):
    ck, out = str(tmp_path / "c.ckpt"), str(tmp_path / "w.npy")
    code = CHILD.format(tests=os.path.dirname(__file__), ck=ck, out=out)
    p = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 60
        for line in p.stdout:
            if line.startswith("iter") and int(line.split()[1]) >= 3:
                break
            assert time.monotonic() < deadline
        p.send_signal(signal.SIGTERM)
        rest, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err
    status = [x for x in rest.splitlines() if x.startswith("status")][0].split()
    assert status[1] == "interrupted"
    k = int(status[2])
    assert ckpt.load(ck).iteration == k >= 3
    np.testing.assert_array_equal(np.load(out), ckpt.load(ck).state["x"])
    X, Y = data(5)
    full = train(X, Y, **KW)
    assert full.iterations > k
    res = train(X, Y, resume=ck, **KW)
    assert res.iterations == full.iterations and res.status == full.status
    np.testing.assert_array_equal(res.model.weights, full.model.weights)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # training restored the handler here
