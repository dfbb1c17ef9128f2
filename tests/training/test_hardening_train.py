"""Issue 13, "training must not destroy good work": divergence, feature values that overflow,
output paths that fail late, permissions, symlinks, orphaned temporary files.

Every test here failed before the fix it covers (see the closing note of issue 13)."""
from __future__ import annotations

import errno
import math
import os
import signal
import stat
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import crfkit.train as train_mod
from crfkit.training import checkpoint as ckpt
from crfkit import cli
from crfkit.datasets import synthetic
from crfkit.errors import CrfkitError, DataError, OutputError, TrainingDiverged
from crfkit.estimator import CRF
from crfkit.features.encode import build
from crfkit.io import atomic
from crfkit.io.atomic import atomic_file, check_writable
from crfkit.model import CRFModel
from crfkit.objective import Objective, Regularization
from crfkit.optim import stochastic as stoch
from crfkit.optim.stochastic import StochasticResult
from crfkit.train import train
from crfkit.training.monitor import DIVERGENCE_FACTOR

from conftest import markov_corpus

ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


from conftest import run_cli as run


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("hardening")
    synthetic.write(d / "train.txt", 40, seed=1)
    good = d / "good.crfkit"
    assert cli.main(["train", str(d / "train.txt"), "-m", str(good), "--max-iterations", "10", "-q"]) == 0
    return {"dir": d, "train": d / "train.txt", "good": good}


@pytest.fixture
def good(data, tmp_path) -> Path:
    """A private copy of a good model (bytes and a mode of 0644)."""
    p = tmp_path / "good.crfkit"
    p.write_bytes(data["good"].read_bytes())
    os.chmod(p, 0o644)
    return p


def _no_temp_files(*dirs) -> bool:
    return not [n for d in dirs for n in os.listdir(d) if n.startswith(".tmp-")]


@pytest.fixture
def umask():
    """Set the process umask for one test (restored after)."""
    saved = []

    def set_(mask: int) -> None:
        saved.append(os.umask(mask))
    yield set_
    if saved:
        os.umask(saved[0])


# ============================================================== 6. diverged training

def test_cli_diverged_run_keeps_the_previous_model_and_fails(data, good, capsys):
    before = good.read_bytes()
    rc, out, err = run(capsys, "train", data["train"], "-m", good, "-a", "sg", "-p", "eta=1e300", "--l2", "0",
                       "--max-iterations", "3")
    assert rc == cli.EXIT_ERROR
    assert "diverged" in err and "eta=1e+300 is too large" in err and "try eta=0.1" in err
    assert "left as it was" in err and "model:" not in out
    assert good.read_bytes() == before
    CRFModel.load(good)                          # still the good, loadable model
    assert _no_temp_files(good.parent)


def test_diverged_run_writes_no_checkpoint_and_traces_the_step(data, tmp_path, capsys):
    ck, tr, m = tmp_path / "c.ckpt", tmp_path / "t.jsonl", tmp_path / "m.crfkit"
    rc, out, err = run(capsys, "train", data["train"], "-m", m, "-a", "sg", "-p", "eta=1e300", "--l2", "0",
                       "--max-iterations", "3", "--checkpoint", ck, "--checkpoint-every", "1", "--trace", tr, "-q")
    assert rc == cli.EXIT_ERROR and "diverged" in err
    assert not ck.exists() and not m.exists()
    import json
    recs = [json.loads(x) for x in tr.read_text().splitlines()]
    assert recs[-1]["status"] == "diverged" and recs[-1]["iteration"] == 1


@pytest.mark.parametrize("algorithm,params,hint", [
    ("sg", {"eta": 1e300}, "eta="),
    ("asg", {"eta": 1e300}, "eta="),
    ("adagrad", {"eta": 1e300}, "eta="),
    ("pegasos", {"eta": 1e300}, "eta="),
    ("adagrad", {"eta": 1e4}, "eta="),          # finite but a thousand times worse than the start
    ("sag", {"L0": 1e-300}, "sets its own steps"),
    ("saga", {"L0": 1e-300}, "sets its own steps"),
])
def test_every_stochastic_optimizer_stops_as_diverged(algorithm, params, hint):
    X, Y = markov_corpus(0, 30)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)   # numpy overflow on the way up
        with pytest.raises(TrainingDiverged) as ei:
            train(X, Y, algorithm=algorithm, params=params, max_iterations=5,
                  l2=0.01 if algorithm == "pegasos" else 0.0)
    e = ei.value
    assert isinstance(e, CrfkitError) and e.status == "diverged" and e.algorithm == algorithm
    assert e.iteration == 1 and hint in str(e) and hint in e.hint
    assert e.history and e.history[-1]["status"] == "diverged"


def test_sgd_l1_divergence_is_a_clear_error():
    # sgd-l1 checks its weights itself (before the driver sees them); the contract is the same
    X, Y = markov_corpus(0, 30)
    with pytest.raises(TrainingDiverged, match="diverged.*eta0") as ei:
        train(X, Y, algorithm="sgd-l1", params={"eta0": 1e300}, max_iterations=3, l1=0.01, l2=0.0)
    assert ei.value.status == "diverged" and ei.value.algorithm == "sgd-l1" and "eta0" in ei.value.hint


@pytest.mark.parametrize("algorithm", ["lbfgs", "owlqn", "sag", "bcd"])
def test_absurd_starting_weights_are_divergence_for_batch_and_stochastic(algorithm):
    # L-BFGS / OWL-QN: NaN at the start (scores overflow); SAG / BCD: an impossible negative objective
    X, Y = markov_corpus(0, 30)
    space, _ = build(X, Y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.raises(TrainingDiverged, match="diverged") as ei:
            train(X, Y, algorithm=algorithm, w0=np.full(space.n_features, 1e300), max_iterations=3,
                  l2=0.0, **({"l1": 0.01} if algorithm == "owlqn" else {}))
    if algorithm in ("lbfgs", "owlqn"):
        assert "line search" in ei.value.hint


def test_objective_at_zero_is_the_uniform_log_partition_whatever_n():
    # the divergence rule's reference: f(0) = (tokens / sequences) * log(labels), nothing about n itself
    X, Y = markov_corpus(3, 40)
    for k in (10, 40):
        space, corpus = build(X[:k], Y[:k], support="all")
        obj = Objective(corpus, space, Regularization(l2=0.5))
        f0 = obj.value(np.zeros(space.n_features), count=False)
        assert f0 == pytest.approx(corpus.n_tokens / k * math.log(space.n_labels), rel=1e-12)
        w = train_mod.DivergenceWatch(obj, obj.reg, corpus, space, None)
        assert w.f_uniform == pytest.approx(f0, rel=1e-12)
        # observed transitions only: missing transitions have weight 0, not -inf, so f(0) is the same
        space2, corpus2 = build(X[:k], Y[:k])
        f0b = Objective(corpus2, space2, Regularization()).value(np.zeros(space2.n_features), count=False)
        assert f0b == pytest.approx(f0, rel=1e-12)


class _Scripted:
    """A stochastic optimizer that reports the objectives it is given (weights stay finite)."""

    def __init__(self, fs, x_bad_at=None):
        self.fs, self.x_bad_at = list(fs), x_bad_at

    def __call__(self, obj, x0, *, reg, max_iterations, callback, seed, state=None, monitor=True):
        x = np.zeros(obj.space.n_features)
        for k, f in enumerate(self.fs, 1):
            if self.x_bad_at == k:
                x[0] = np.inf
            if callback({"iteration": k, "f": f, "x": x, "step": 0.1}):
                return StochasticResult(x=x, f=f, status="stopped", message="stopped", iterations=k)
        return StochasticResult(x=x, f=self.fs[-1] if not math.isnan(self.fs[-1]) else 1.0,
                                status="max_iterations", message="done", iterations=len(self.fs))


@pytest.fixture
def scripted(monkeypatch):
    def install(fn):
        import crfkit.training.config as config_mod   # where the driver checks the name
        monkeypatch.setattr(train_mod, "ALGORITHMS", train_mod.ALGORITHMS + ("scripted",))
        monkeypatch.setattr(config_mod, "ALGORITHMS", train_mod.ALGORITHMS)
        real = stoch.resolve
        monkeypatch.setattr(stoch, "resolve", lambda name: fn if name == "scripted" else real(name))
    return install


def test_the_growth_rule_fires_above_the_factor_and_not_below(scripted):
    X, Y = markov_corpus(1, 20)
    space, corpus = build(X, Y)
    ref = corpus.n_tokens / len(X) * math.log(space.n_labels)
    # just below the limit: a bad run, but not diverged (e.g. sgd-l1 eta0=100 recovered from 81x)
    scripted(_Scripted([0.5 * ref, 0.999 * DIVERGENCE_FACTOR * ref, 0.3 * ref]))
    res = train(X, Y, algorithm="scripted", max_iterations=3)
    assert res.status == "max_iterations"
    scripted(_Scripted([0.5 * ref, 1.001 * DIVERGENCE_FACTOR * ref, 0.3 * ref]))
    with pytest.raises(TrainingDiverged, match="iteration 2") as ei:
        train(X, Y, algorithm="scripted", max_iterations=3)
    assert ei.value.limit == pytest.approx(DIVERGENCE_FACTOR * ref)
    assert len(ei.value.history) == 2                 # the run stopped there


def test_nan_objective_counts_unless_monitoring_is_off(scripted):
    X, Y = markov_corpus(1, 20)
    scripted(_Scripted([1.0, float("nan"), 1.0]))
    with pytest.raises(TrainingDiverged, match="NaN"):
        train(X, Y, algorithm="scripted", max_iterations=3)
    # monitor=False: NaN means "not evaluated"; the weights are still checked at every epoch
    res = train(X, Y, algorithm="scripted", max_iterations=3, params={"monitor": False})
    assert res.status == "max_iterations"
    scripted(_Scripted([float("nan"), float("nan"), 1.0], x_bad_at=2))
    with pytest.raises(TrainingDiverged, match="weights are no longer finite"):
        train(X, Y, algorithm="scripted", max_iterations=3, params={"monitor": False})


def test_warm_start_far_from_zero_is_not_divergence(scripted):
    # the reference is max(f(0), f(x0)): a start worse than the limit computed from f(0) is allowed
    X, Y = markov_corpus(1, 20)
    space, corpus = build(X, Y)
    w0 = np.zeros(space.n_features)
    w0[space.n_state:] = 3000.0 * np.sign(np.arange(space.n_trans) % 2 - 0.5)   # transitions that fight y
    f_x0 = Objective(corpus, space, Regularization(l2=2 / len(X))).value(w0, count=False)
    ref = corpus.n_tokens / len(X) * math.log(space.n_labels)
    assert f_x0 > 2 * DIVERGENCE_FACTOR * ref
    scripted(_Scripted([0.9 * f_x0, 0.5 * f_x0]))
    res = train(X, Y, algorithm="scripted", max_iterations=2, w0=w0)
    assert res.status == "max_iterations"


def test_checkpoint_keeps_the_divergence_reference_for_resume(tmp_path, scripted):
    X, Y = markov_corpus(1, 20)
    space, corpus = build(X, Y)
    w0 = np.zeros(space.n_features)
    w0[space.n_state:] = 3000.0 * np.sign(np.arange(space.n_trans) % 2 - 0.5)
    f_x0 = Objective(corpus, space, Regularization(l2=2 / len(X))).value(w0, count=False)
    ck = tmp_path / "warm.ckpt"
    train(X, Y, max_iterations=2, w0=w0, checkpoint=ck)
    assert ckpt.load(ck).extra["f_start"] == pytest.approx(f_x0, rel=1e-12)
    train(X, Y, max_iterations=2, checkpoint=tmp_path / "zero.ckpt")
    assert ckpt.load(tmp_path / "zero.ckpt").extra["f_start"] == 0.0
    # a resumed run judges by the same reference: f(x0) of the warm start, not f(0)
    watch = train_mod.DivergenceWatch(None, None, corpus, space, None, f_start=f_x0)
    assert watch.check(0.9 * DIVERGENCE_FACTOR * f_x0, None) is None
    assert "more than 1000 times" in watch.check(1.1 * DIVERGENCE_FACTOR * f_x0, None)


def test_estimator_fit_raises_and_keeps_its_previous_model(tmp_path):
    X, Y = markov_corpus(2, 30)
    path = tmp_path / "est.crfkit"
    crf = CRF(algorithm="sg", algorithm_params={"eta": 0.1}, max_iterations=3, model_filename=str(path))
    crf.fit(X, Y)
    before, model_before, pred = path.read_bytes(), crf.model_, crf.predict(X[:5])
    crf.set_params(algorithm_params={"eta": 1e300}, c2=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.raises(TrainingDiverged, match="eta=1e\\+300 is too large"):
            crf.fit(X, Y)
    assert crf.model_ is model_before and crf.predict(X[:5]) == pred
    assert path.read_bytes() == before


def test_bench_records_a_diverged_step_size_and_goes_on(tmp_path, monkeypatch):
    from crfkit.bench import data as bdata
    from crfkit.bench import runner as brunner
    small = bdata.load("synthetic", limit=20)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        man = brunner.run_benchmark(small, [brunner.Spec("sg")], passes=2, out=tmp_path, etas=[1e10, 1e-2], l2=1e-12,
                                    warm_up=False)
    runs = {r["params"]["eta"]: r for r in man["runs"]}
    assert runs[1e10]["status"] == "diverged" and runs[1e10]["final_objective"] is None
    assert runs[1e-2]["role"] == "best"


# ============================================================== 7. feature values that overflow

def _attr_file(path: Path, value: str) -> Path:
    lines = []
    for i in range(12):
        lines += [f"A\tw=a{i % 3}\tx:{value if i == 7 else '0.5'}", f"B\tw=b{i % 2}", ""]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("value", ["1e300", "1e150", "-2e6", "1000000.5"])
def test_cli_refuses_huge_attribute_values_with_file_and_line(tmp_path, capsys, value):
    f = _attr_file(tmp_path / "big.txt", value)
    rc, out, err = run(capsys, "train", f, "-m", tmp_path / "m.crfkit", "-f", "crfsuite", "-q")
    assert rc == cli.EXIT_ERROR, out
    # item 7 of the sequences: the 8th sequence starts on line 3*7 + 1 = 22
    assert f"{f}:22:" in err and "'x'" in err and "|value| <= 1e+06" in err
    assert not (tmp_path / "m.crfkit").exists()


def test_the_bound_itself_is_accepted(tmp_path, capsys):
    f = _attr_file(tmp_path / "edge.txt", "-1e6")
    rc, out, err = run(capsys, "train", f, "-m", tmp_path / "m.crfkit", "-f", "crfsuite", "-q",
                       "--max-iterations", "3")
    assert rc == 0, err
    # the CLI shows crfkit's warnings as lines, also with -q
    assert "crfkit: warning: feature values reach 1e+06 (sequence 7, token 0)" in err


def test_estimator_and_api_refuse_huge_values_naming_sequence_and_token():
    X, Y = markov_corpus(2, 10)
    Xd = [[{a if isinstance(a, str) else a[0]: 1.0 for a in tok} for tok in s] for s in X]
    Xd[3][1]["len"] = 1e300
    with pytest.raises(DataError, match=r"sequence 3, token 1: attribute 'len' has the value 1e\+300"):
        CRF(max_iterations=2).fit(Xd, Y)
    X[4][0].append(("big", -1e150))
    with pytest.raises(DataError, match=r"sequence 4, token 0: attribute 'big'"):
        train(X, Y, max_iterations=2)
    # tagging refuses them too (scores would be inf)
    Xc, Yc = markov_corpus(2, 10)
    model = train(Xc, Yc, max_iterations=2).model
    with pytest.raises(DataError, match="sequence 0, token 0"):
        model.tag([[[("len", 2e6)]]])


def test_dense_values_are_bounded(tmp_path, capsys):
    X, Y = markov_corpus(2, 6)
    dense = [np.ones((len(s), 2)) for s in X]
    dense[2][1, 1] = 1e300
    with pytest.raises(DataError, match=r"sequence 2, token 1: dense feature 1 is 1e\+300"):
        train(X, Y, dense=dense, max_iterations=2)
    # a dense column of a column file: file:line
    f = tmp_path / "d.txt"
    f.write_text("a N 0.5 B-NP\nb V 3e200 B-VP\n\nc N 0.1 B-NP\n")
    rc, out, err = run(capsys, "train", f, "-m", tmp_path / "m.crfkit", "--dense-columns", "3", "-q")
    assert rc == cli.EXIT_ERROR and f"{f}:2:" in err and "3e200" in err


def test_large_values_within_the_bound_warn():
    X, Y = markov_corpus(2, 10)
    X[1][0].append(("big", 500.0))
    with pytest.warns(RuntimeWarning, match="feature values reach 500 \\(sequence 1, token 0\\)"):
        train(X, Y, max_iterations=2)
    logged = []
    train(X, Y, max_iterations=1, verbose=True, log=logged.append)
    assert any(x.startswith("warning: feature values reach 500") for x in logged)


# ============================================================== 8. late failures

def test_model_path_that_is_a_directory_is_refused_before_training(data, tmp_path, capsys, monkeypatch):
    d = tmp_path / "out"
    d.mkdir()
    called = []
    monkeypatch.setattr("crfkit.pipeline.train_columns", lambda *a, **k: called.append(1))
    rc, out, err = run(capsys, "train", data["train"], "-m", d, "-q")
    assert rc == cli.EXIT_ERROR and not called
    assert f"cannot write the model {d}: it is a directory" in err and ".tmp-" not in err


def test_unwritable_directory_is_refused_before_training(data, tmp_path, capsys, monkeypatch):
    called = []
    monkeypatch.setattr("crfkit.pipeline.train_columns", lambda *a, **k: called.append(1))

    def denied(d, base):
        raise PermissionError(errno.EACCES, "Permission denied", os.path.join(d, ".tmp-x"))
    monkeypatch.setattr(atomic, "_create_tmp", denied)
    m = tmp_path / "m.crfkit"
    rc, out, err = run(capsys, "train", data["train"], "-m", m, "-q")
    assert rc == cli.EXIT_ERROR and not called
    assert f"cannot write the model {m}: cannot create files in {tmp_path} (Permission denied)" in err


@pytest.mark.skipif(ROOT, reason="root writes into read-only directories")
def test_read_only_directory_really_refused(data, tmp_path, capsys):
    ro = tmp_path / "ro"
    ro.mkdir()
    os.chmod(ro, 0o555)
    try:
        rc, out, err = run(capsys, "train", data["train"], "-m", ro / "m.crfkit", "-q")
    finally:
        os.chmod(ro, 0o755)
    assert rc == cli.EXIT_ERROR and "Permission denied" in err and "iter" not in err


@pytest.mark.skipif(ROOT, reason="root may write read-only files")
def test_read_only_model_file_is_not_replaced(good, data, capsys):
    os.chmod(good, 0o444)
    before = good.read_bytes()
    rc, out, err = run(capsys, "train", data["train"], "-m", good, "-q")
    assert rc == cli.EXIT_ERROR and "read-only" in err and good.read_bytes() == before


def test_full_disk_names_the_model_and_keeps_the_previous_one(data, good, capsys, monkeypatch):
    before = good.read_bytes()

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "fsync", full)
    rc, out, err = run(capsys, "train", data["train"], "-m", good, "-q", "--max-iterations", "2")
    assert rc == cli.EXIT_ERROR
    assert f"cannot write the model {good}: No space left on device" in err and ".tmp-" not in err
    assert good.read_bytes() == before and _no_temp_files(good.parent)


def test_output_error_is_an_oserror_with_errno(tmp_path, monkeypatch):
    p = tmp_path / "x.bin"

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError) as ei:
        with atomic_file(p) as f:
            f.write(b"data")
    assert isinstance(ei.value, OutputError) and ei.value.errno == errno.ENOSPC
    assert ei.value.filename == str(p) and str(p) in str(ei.value) and not p.exists()
    # an OSError about another file raised by the caller's own code passes unchanged
    with pytest.raises(FileNotFoundError) as ei:
        with atomic_file(p) as f:
            open(tmp_path / "nope", "rb")
    assert not isinstance(ei.value, OutputError)


def test_failed_checkpoint_write_is_a_warning(data, tmp_path, capsys, monkeypatch):
    real_save = ckpt.save
    calls = []

    def flaky(path, *a, **k):
        calls.append(1)
        if len(calls) == 1:   # the first checkpoint hits a full disk, the next ones work
            raise OutputError(f"cannot write the checkpoint {path}: No space left on device", path=str(path),
                              errno=errno.ENOSPC)
        return real_save(path, *a, **k)
    monkeypatch.setattr(ckpt, "save", flaky)
    m, ck = tmp_path / "m.crfkit", tmp_path / "c.ckpt"
    rc, out, err = run(capsys, "train", data["train"], "-m", m, "--max-iterations", "4", "--checkpoint", ck,
                       "--checkpoint-every", "2")
    assert rc == 0, err
    assert "warning: checkpoint at iteration 2 not written (cannot write the checkpoint" in err
    assert "training goes on" in err
    CRFModel.load(m)
    assert ckpt.load(ck).iteration == 4


def test_checkpoint_path_is_checked_before_training(data, tmp_path, capsys):
    d = tmp_path / "ckdir"
    d.mkdir()
    rc, out, err = run(capsys, "train", data["train"], "-m", tmp_path / "m.crfkit", "--checkpoint", d, "-q")
    assert rc == cli.EXIT_ERROR and "cannot write the checkpoint" in err and "directory" in err
    assert not (tmp_path / "m.crfkit").exists()


def test_estimator_refuses_an_unwritable_model_filename_before_training(tmp_path, monkeypatch):
    X, Y = markov_corpus(2, 10)
    called = []
    monkeypatch.setattr(train_mod, "train", lambda *a, **k: called.append(1))
    with pytest.raises(OutputError, match="it is a directory"):
        CRF(model_filename=str(tmp_path)).fit(X, Y)
    assert not called


def test_the_model_saved_after_a_failure_can_be_written_from_the_checkpoint(data, tmp_path, capsys, monkeypatch):
    # the advice the CLI gives after a failed save: resume the final checkpoint, nothing is retrained
    m, ck = tmp_path / "m.crfkit", tmp_path / "c.ckpt"
    real = CRFModel.save

    def fail(self, path):
        raise OutputError(f"cannot write the file {path}: No space left on device", path=str(path),
                          errno=errno.ENOSPC)
    monkeypatch.setattr(CRFModel, "save", fail)
    rc, out, err = run(capsys, "train", data["train"], "-m", m, "--max-iterations", "3", "--checkpoint", ck, "-q")
    assert rc == cli.EXIT_ERROR and "--resume it" in err and str(ck) in err
    monkeypatch.setattr(CRFModel, "save", real)
    rc, out, err = run(capsys, "train", data["train"], "-m", m, "--max-iterations", "3", "--resume", ck, "-q")
    assert rc == 0 and "3 iterations" in out
    ref = tmp_path / "ref.crfkit"
    assert cli.main(["train", str(data["train"]), "-m", str(ref), "--max-iterations", "3", "-q"]) == 0
    assert np.array_equal(CRFModel.load(m).weights, CRFModel.load(ref).weights)


# ============================================================== 9. permissions

@pytest.mark.parametrize("mask,mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_new_model_and_checkpoint_follow_the_umask(data, tmp_path, capsys, umask, mask, mode):
    umask(mask)
    m, ck = tmp_path / "m.crfkit", tmp_path / "c.ckpt"
    rc, out, err = run(capsys, "train", data["train"], "-m", m, "--max-iterations", "2", "--checkpoint", ck, "-q")
    assert rc == 0, err
    assert stat.S_IMODE(m.stat().st_mode) == mode
    assert stat.S_IMODE(ck.stat().st_mode) == mode


def test_replaced_model_keeps_its_mode(good, umask):
    umask(0o022)
    os.chmod(good, 0o640)
    CRFModel.load(good).save(good)
    assert stat.S_IMODE(good.stat().st_mode) == 0o640
    os.chmod(good, 0o604)
    CRFModel.load(good).save(good)
    assert stat.S_IMODE(good.stat().st_mode) == 0o604


# ============================================================== 10. symlinks

def test_symlink_is_written_through(good, tmp_path):
    other = tmp_path / "store"
    other.mkdir()
    target = other / "real.crfkit"
    target.write_bytes(good.read_bytes())
    os.chmod(target, 0o640)
    link = tmp_path / "link.crfkit"
    link.symlink_to(os.path.relpath(target, tmp_path))
    m = CRFModel.load(good)
    m.weights[:] = 0.25
    m.save(link)
    assert link.is_symlink() and os.readlink(link) == os.path.relpath(target, tmp_path)
    assert np.allclose(CRFModel.load(target).weights, 0.25)
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert _no_temp_files(tmp_path, other)


def test_chain_of_links_and_cli(data, good, tmp_path, capsys):
    l1, l2 = tmp_path / "l1", tmp_path / "l2"
    l2.symlink_to(good)
    l1.symlink_to(l2)
    rc, out, err = run(capsys, "train", data["train"], "-m", l1, "-q", "--max-iterations", "2")
    assert rc == 0, err
    assert l1.is_symlink() and l2.is_symlink() and not good.is_symlink()
    assert CRFModel.load(good).meta["iterations"] == 2


def test_dangling_and_looping_links_are_refused(good, tmp_path, capsys, data):
    dangling = tmp_path / "dangling.crfkit"
    dangling.symlink_to(tmp_path / "missing" / "x.crfkit")
    with pytest.raises(OutputError, match="symbolic link to .*which does not exist"):
        CRFModel.load(good).save(dangling)
    assert dangling.is_symlink() and not (tmp_path / "missing").exists()
    rc, out, err = run(capsys, "train", data["train"], "-m", dangling, "-q")
    assert rc == cli.EXIT_ERROR and "dangling" in err
    a, b = tmp_path / "a", tmp_path / "b"
    a.symlink_to(b)
    b.symlink_to(a)
    with pytest.raises(OutputError, match="cannot be resolved"):
        check_writable(a)
    assert a.is_symlink() and b.is_symlink()


def test_non_regular_destination_is_refused(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OutputError, match="not a regular file"):
        with atomic_file(fifo) as f:
            f.write(b"x")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and _no_temp_files(tmp_path)


# ============================================================== 13. orphans of kill -9

_KILLED_WRITER = r"""
import os, signal, sys
from crfkit.io.atomic import atomic_file
with atomic_file(sys.argv[1]) as f:
    f.write(b"half a model")
    f.flush()
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_orphan_of_a_killed_writer_is_removed_on_the_next_save(good, tmp_path):
    before = good.read_bytes()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    p = subprocess.run([sys.executable, "-c", _KILLED_WRITER, str(good)], env=env)
    assert p.returncode == -signal.SIGKILL
    orphans = [n for n in os.listdir(tmp_path) if n.startswith(".tmp-")]
    assert len(orphans) == 1 and good.read_bytes() == before
    CRFModel.load(good).save(good)
    assert _no_temp_files(tmp_path)


def test_only_dead_or_stale_orphans_of_that_path_are_removed(good, tmp_path):
    host = atomic._host_tag()
    live = os.getppid()                                   # alive: our parent
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    names = {
        "dead": f".tmp-{host}-{dead}-abcdefgh-good.crfkit",
        "live": f".tmp-{host}-{live}-abcdefgh-good.crfkit",
        "other_host_fresh": f".tmp-00000000-{dead}-abcdefgh-good.crfkit",
        "other_host_old": f".tmp-00000000-{live}-ijklmnop-good.crfkit",
        "other_path": f".tmp-{host}-{dead}-abcdefgh-other.crfkit",
        "legacy": ".tmp-k2j4h5g6",
    }
    for key, n in names.items():
        (tmp_path / n).write_bytes(b"x")
    old = time.time() - 2 * atomic.STALE_SECONDS
    os.utime(tmp_path / names["other_host_old"], (old, old))
    CRFModel.load(good).save(good)
    left = {k for k, n in names.items() if (tmp_path / n).exists()}
    assert left == {"live", "other_host_fresh", "other_path", "legacy"}


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_trace_on_a_full_disk_is_a_warning_not_the_end_of_the_run():
    X, Y = markov_corpus(2, 10)
    with pytest.warns(RuntimeWarning, match="the trace /dev/full could not be written at iteration 1"):
        res = train(X, Y, max_iterations=3, trace="/dev/full")
    assert res.iterations == 3 and len(res.history) == 3
