"""crfkit.distributed: training on a Dask LocalCluster of 2 worker processes (issue 17).

The corpora are generated here (column files: word, POS, label), split into shards (one gzipped).
The default suite keeps the feature-space, gradient and L-BFGS equalities and the refusals; the
worker-loss, OWL-QN, parameter-mixing, checkpoint and CLI tests are ``slow``.
"""

from __future__ import annotations

import gzip
import os
import subprocess
import sys

import numpy as np
import pytest

# dask.distributed, not "distributed": this test folder (tests/distributed, on sys.path while the suite
# runs) would pass for a namespace package of that name when the Dask extra is missing
pytest.importorskip("dask.distributed")

from crfkit.errors import ParameterError  # noqa: E402
from crfkit.features.encode import build  # noqa: E402
from crfkit.features.templates import default_chunking_templates  # noqa: E402
from crfkit.objective import Objective, regularization  # noqa: E402
from crfkit.pipeline import load_columns, train_columns  # noqa: E402

SRC = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "src"
)


def _corpus(rng, n_sent, vocab=60):
    """Sentences of (word, POS, label) rows; the label is a function of the word class and the
    previous label, with 5% noise: learnable, not separable."""
    words = [f"w{i}" for i in range(vocab)]
    pos = ["NN", "VB", "DT", "JJ"]
    out = []
    for _ in range(n_sent):
        T = int(rng.integers(1, 12))
        prev = "O"
        rows = []
        for _t in range(T):
            k = int(rng.integers(vocab))
            p = pos[k % 4]
            if k % 5 == 0:
                lab = "B-NP"
            elif k % 5 in (1, 2) and prev != "O":
                lab = "I-NP"
            elif k % 7 == 3:
                lab = "B-VP"
            else:
                lab = "O"
            if rng.random() < 0.05:
                lab = ["O", "B-NP", "I-NP", "B-VP"][int(rng.integers(4))]
            rows.append((words[k], p, lab))
            prev = lab
        out.append(rows)
    return out


def _write(path, sents):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "wt", encoding="utf-8") as f:
        for s in sents:
            f.write("\n".join(" ".join(r) for r in s) + "\n\n")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("shards")
    rng = np.random.default_rng(17)
    sents = _corpus(rng, 240)
    sizes = [50, 70, 40, 80]  # unequal shards; one of them gzipped
    paths, k = [], 0
    for i, m in enumerate(sizes):
        p = str(d / (f"part-{i}.txt" + (".gz" if i == 1 else "")))
        _write(p, sents[k : k + m])
        k += m
        paths.append(p)
    whole = str(d / "all.txt")
    _write(whole, sents)
    dev = str(d / "dev.txt")
    _write(dev, _corpus(rng, 40))
    return {"paths": paths, "whole": whole, "dev": dev, "dir": str(d)}


@pytest.fixture(scope="module")
def client():
    from crfkit.distributed import local_client

    c = local_client(2, 1)
    yield c
    cluster = c.cluster
    c.close()
    cluster.close()


def _single(whole, **kw):
    X, Y, _ = load_columns(whole, default_chunking_templates())
    return build(X, Y, **kw)


def test_single_process_path_imports_no_dask():
    code = (
        "import sys, crfkit, crfkit.train, crfkit.cli, crfkit.estimator\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed') or "
        "m.startswith('crfkit.distributed')]\n"
        "assert not bad, bad\n"
    )
    env = dict(os.environ, PYTHONPATH=SRC)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize(
    "kw", [dict(), dict(min_freq=2), dict(support="all", min_freq=3), dict(transitions="all")]
)
def test_feature_space_equals_single_process(client, data, kw):
    from crfkit.distributed import RemoteNames, load_sharded

    space, sc = load_sharded(client, data["paths"], threads=1, **kw)
    try:
        ref, corpus = _single(data["whole"], **kw)
        # the client holds the number of attribute names, not the names, until something reads them
        assert isinstance(space.attributes, RemoteNames) and space.attributes._table is None
        assert len(space.attributes) == space.n_attributes == ref.n_attributes
        assert space.labels == ref.labels
        assert space.attributes == ref.attributes
        np.testing.assert_array_equal(space.attr_ptr, ref.attr_ptr)
        np.testing.assert_array_equal(space.feat_label, ref.feat_label)
        np.testing.assert_array_equal(space.trans_index, ref.trans_index)
        assert sc.n_sequences == corpus.n_sequences and sc.n_tokens == corpus.n_tokens
        assert sc.nnz == len(corpus.attr)
    finally:
        sc.release()


def test_gradient_and_objective_equal_single_process(client, data):
    from crfkit.distributed import load_sharded

    space, sc = load_sharded(client, data["paths"], threads=1, min_freq=2)
    try:
        ref, corpus = _single(data["whole"], min_freq=2)
        reg = regularization(corpus.n_sequences, c2=0.7)
        o1 = Objective(corpus, ref, reg, threads=2)
        o2 = sc.objective(space, reg)
        rng = np.random.default_rng(3)
        for scale in (0.0, 0.3, 2.0):
            w = rng.normal(scale=scale, size=space.n_features)
            f1, g1 = o1.value_and_grad(w)
            f2, g2 = o2.value_and_grad(w)
            assert abs(f1 - f2) <= 1e-12 * abs(f1)
            assert np.max(np.abs(g1 - g2)) <= 1e-12 * np.max(np.abs(g1))
            assert abs(o1.value(w) - o2.value(w)) <= 1e-12 * abs(f1)
            v1, h1 = o1.nll_sum_grad(w)
            v2, h2 = o2.nll_sum_grad(w)
            assert abs(v1 - v2) <= 1e-12 * abs(v1)
            assert np.max(np.abs(h1 - h2)) <= 1e-12 * np.max(np.abs(h1))
        np.testing.assert_allclose(o2.empirical_counts, o1.empirical_counts, rtol=0, atol=1e-9)
        assert (
            o2.n_full == o1.n_full == 9 and o2.effective_passes == 9
        )  # every evaluation counts a pass
        o2.value(w, count=False)
        assert o2.n_full == 9  # monitoring does not
    finally:
        sc.release()


def _same_model(a, b, tol):
    assert a.space.labels == b.space.labels and a.space.attributes == b.space.attributes
    np.testing.assert_array_equal(a.space.feat_label, b.space.feat_label)
    scale = max(1.0, float(np.max(np.abs(a.weights))))
    assert np.max(np.abs(a.weights - b.weights)) <= tol * scale


def test_lbfgs_same_iterates_and_optimum_as_single_process(client, data, tmp_path):
    """The iterates are the single-process run's up to summation order: after 25 iterations the
    weights agree to 1e-8 (relative to max |w|) and every iteration's objective to 1e-12; run to
    convergence, both reach the same optimum (objective 1e-12; weights 1e-6: at a gradient of 1e-8,
    the floor of L-BFGS's float64 line search here, the optimum itself is only known to about
    g / l2)."""
    from crfkit.train import train

    T = default_chunking_templates()
    kw = dict(c2=5.0, epsilon=0.0, delta=0.0, threads=1)
    ref = train_columns(data["whole"], T, max_iterations=25, **kw)
    res = train(data["paths"], None, client=client, max_iterations=25, **kw)
    # the client holds the attribute names packed (the vocabulary was merged on a worker): training
    # and saving the model make no Python string of them, and the file is the single-process model's
    from crfkit.model import CRFModel, StringTable

    names = res.model.space.attributes
    assert isinstance(names, StringTable) and names._list is None
    res.model.save(tmp_path / "dask.crfkit")
    assert names._list is None
    _same_model(
        CRFModel.load(tmp_path / "dask.crfkit"),
        CRFModel(*ref.model.space.prune(ref.model.weights)),
        1e-8,
    )
    _same_model(res.model, ref.model, 1e-8)
    for a, b in zip(res.history, ref.history):
        assert abs(a["objective"] - b["objective"]) <= 1e-12 * b["objective"]
    ref = train_columns(data["whole"], T, max_iterations=300, gtol=1e-10, **kw)
    res = train(data["paths"], None, client=client, max_iterations=300, gtol=1e-10, **kw)
    assert max(res.history[-1]["grad_inf_norm"], ref.history[-1]["grad_inf_norm"]) < 1e-7
    assert abs(res.objective - ref.objective) <= 1e-12 * ref.objective
    _same_model(res.model, ref.model, 1e-6)
    # the model tags column files as one from train_columns does
    for k in ("templates", "template_pad", "columns", "support"):
        assert res.model.meta[k] == ref.model.meta[k]
    assert res.model.meta["dask_shards"] == 4


def test_model_on_remote_names_saves_without_python_strings(client, data, tmp_path):
    from crfkit.distributed import RemoteNames, load_sharded
    from crfkit.model import CRFModel

    space, sc = load_sharded(client, data["paths"], threads=1)
    try:
        ref, _ = _single(data["whole"])
        w = np.random.default_rng(5).normal(size=space.n_features)
        w[::3] = 0.0
        names = space.attributes
        CRFModel(space, w).save(tmp_path / "m.crfkit")  # prune + pack: the table, fetched packed
        assert (
            isinstance(names, RemoteNames)
            and names._table is not None
            and names._table._list is None
        )
        m = CRFModel.load(tmp_path / "m.crfkit")
        r = CRFModel.load(_saved(CRFModel(ref, w), tmp_path / "r.crfkit"))
        assert m.space.attributes == r.space.attributes
        np.testing.assert_array_equal(m.weights, r.weights)
    finally:
        sc.release()


def _saved(model, path):
    model.save(path)
    return path


def test_dev_set_scored_as_in_one_process(client, data):
    """A development set (a file, or attribute lists) is encoded on a worker, where the names are,
    and scored on the client as in one process."""
    from crfkit.pipeline import load_columns
    from crfkit.train import train

    T = default_chunking_templates()
    kw = dict(c2=1.0, max_iterations=4, threads=1)
    ref = train_columns(data["whole"], T, dev_path=data["dev"], **kw)
    res = train(data["paths"], None, client=client, dev_path=data["dev"], **kw)
    Xd, Yd, _ = load_columns(data["dev"], T)
    res2 = train(data["paths"], None, client=client, X_dev=Xd, Y_dev=Yd, **kw)
    for r in (res, res2):
        assert [h["dev_accuracy"] for h in r.history] == pytest.approx(
            [h["dev_accuracy"] for h in ref.history]
        )
        assert r.model.tag(Xd) == ref.model.tag(Xd)


def test_refusals(client, data):
    from crfkit.train import train

    with pytest.raises(ParameterError, match="sag cannot train on a Dask cluster.*memory"):
        train(data["paths"], None, client=client, algorithm="sag", max_iterations=1)
    with pytest.raises(ParameterError, match="sdca cannot train on a Dask cluster.*dual"):
        train(data["paths"], None, client=client, algorithm="sdca", max_iterations=1)
    with pytest.raises(ParameterError, match="eta0=auto"):
        train(
            data["paths"],
            None,
            client=client,
            algorithm="sgd-l1",
            params={"eta0": "auto"},
            c1=0.1,
            max_iterations=1,
        )
    with pytest.raises(ParameterError, match="list of training files"):
        train(data["paths"], [["O"]], client=client)
    from crfkit.errors import DataError

    with pytest.raises(DataError, match="matches no file"):
        train([os.path.join(data["dir"], "nothing-*.txt")], None, client=client)


def test_bad_shard_names_its_file(client, data, tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("w1 NN O\nw2 NN\n\n")
    from crfkit.errors import DataError
    from crfkit.train import train

    with pytest.raises(DataError) as e:
        train([data["paths"][0], str(bad)], None, client=client, max_iterations=1)
    assert str(bad) in str(e.value) and ":2:" in str(e.value)


@pytest.mark.slow
def test_owlqn_reaches_the_single_process_optimum(client, data):
    from crfkit.train import train

    kw = dict(c1=0.3, c2=0.1, max_iterations=400, epsilon=0.0, delta=0.0, gtol=1e-9, threads=1)
    ref = train_columns(data["whole"], default_chunking_templates(), **kw)
    res = train(data["paths"], None, client=client, **kw)
    assert res.model.meta["algorithm"] == ref.model.meta["algorithm"] == "owlqn"
    _same_model(res.model, ref.model, 1e-8)
    assert np.array_equal(res.model.weights != 0, ref.model.weights != 0)


@pytest.mark.slow
def test_worker_killed_during_training_same_result(client, data):
    """A worker process terminated (by its PID) at iteration 4: its shards are re-read and
    re-encoded on the restarted / remaining worker and training ends at the same weights, bitwise
    (the sums are a fixed tree by shard index)."""
    import signal

    from crfkit.train import train

    kw = dict(c2=0.5, max_iterations=25, epsilon=0.0, delta=0.0, threads=1)
    ref = train(data["paths"], None, client=client, **kw)
    killed = []

    def kill(rec):
        if rec["iteration"] == 4 and not killed:
            pids = client.run(os.getpid)  # {worker address: pid}, from the scheduler's workers
            addr = sorted(pids)[0]
            os.kill(
                pids[addr], signal.SIGKILL
            )  # lost, not shut down: no chance to hand its data over
            killed.append((addr, pids[addr]))
        return None

    res = train(data["paths"], None, client=client, callback=kill, **kw)
    assert killed
    assert res.iterations == ref.iterations == 25
    np.testing.assert_array_equal(res.model.weights, ref.model.weights)
    client.wait_for_workers(2, timeout=60)


@pytest.mark.slow
def test_every_worker_lost_stops_with_a_clear_error_and_keeps_the_checkpoint(data, tmp_path):
    """Both workers of a LocalCluster killed (SIGKILL, by PID) at iteration 3: with no live worker
    for dask_worker_timeout seconds, training stops with NoLiveWorkers naming the timeout and the
    checkpoint, which holds the last state written (before: hung for over 600 s).  A cluster of its
    own (the module's client keeps its workers)."""
    import signal
    import time

    from crfkit.distributed import NoLiveWorkers, local_client
    from crfkit.train import train
    from crfkit.training import checkpoint as ckpt

    c = local_client(2, 1)
    ck = tmp_path / "ck.npz"
    killed = []

    def kill_all(rec):
        if rec["iteration"] == 3 and not killed:
            pids = c.run(os.getpid)
            for pid in pids.values():
                os.kill(pid, signal.SIGKILL)
            killed.append(time.monotonic())

    try:
        with pytest.raises(NoLiveWorkers) as e:
            train(
                data["paths"],
                None,
                client=c,
                c2=0.5,
                max_iterations=30,
                threads=1,
                checkpoint=ck,
                checkpoint_every=1,
                callback=kill_all,
                dask_worker_timeout=3,
            )
        waited = time.monotonic() - killed[0]
    finally:
        cluster = c.cluster
        c.close()
        cluster.close()
    msg = str(e.value)
    assert "no live Dask worker for 3 s" in msg and str(ck) in msg, msg
    assert waited >= 3
    assert ckpt.load(ck).iteration == 3


def test_worker_timeout_setting(monkeypatch):
    from crfkit.distributed import DEFAULT_WORKER_TIMEOUT, worker_timeout

    monkeypatch.delenv("CRFKIT_DASK_WORKER_TIMEOUT", raising=False)
    assert worker_timeout() == DEFAULT_WORKER_TIMEOUT and worker_timeout(7) == 7.0
    monkeypatch.setenv("CRFKIT_DASK_WORKER_TIMEOUT", "2.5")
    assert worker_timeout() == 2.5 and worker_timeout(9) == 9.0
    for bad in ("0", "-1", "inf", "nan", "soon"):
        monkeypatch.setenv("CRFKIT_DASK_WORKER_TIMEOUT", bad)
        with pytest.raises(ParameterError, match="CRFKIT_DASK_WORKER_TIMEOUT"):
            worker_timeout()


@pytest.mark.slow
def test_checkpoint_resume_same_result(client, data, tmp_path):
    from crfkit.train import train

    ck = str(tmp_path / "ck.npz")
    kw = dict(c2=0.5, epsilon=0.0, delta=0.0, threads=1)
    full = train(data["paths"], None, client=client, max_iterations=12, **kw)
    train(data["paths"], None, client=client, max_iterations=5, checkpoint=ck, **kw)
    res = train(data["paths"], None, client=client, max_iterations=12, resume=ck, **kw)
    np.testing.assert_array_equal(res.model.weights, full.model.weights)
    assert res.model.meta["resumed_from"] == 5


@pytest.mark.slow
@pytest.mark.parametrize(
    "algorithm,params,reg",
    [
        ("sg", {"eta": 0.05}, dict(c2=1.0)),
        # measured (4 shards, 30 rounds): asg mixed 0.0286 against 0.0088 in one process, sgd-l1
        # 0.0516 against 0.0065: the running average / the cumulative L1 penalty restarted every
        # round cost more than the factor 2 this test allows; known shortfall, strict so that an
        # improvement is noticed
        pytest.param(
            "asg",
            {"eta": 0.05},
            dict(c2=1.0),
            marks=pytest.mark.xfail(
                strict=True, reason="mixed asg: 3.3x the single-process gap (measured)"
            ),
        ),
        pytest.param(
            "sgd-l1",
            {"eta0": 0.1},
            dict(c1=0.5, c2=0.5),
            marks=pytest.mark.xfail(
                strict=True, reason="mixed sgd-l1: 8x the single-process gap (measured)"
            ),
        ),
    ],
)
def test_parameter_mixing_reaches_the_optimum_neighbourhood(client, data, algorithm, params, reg):
    """Parameter mixing over 2 workers on a learnable corpus ends in the neighbourhood of the
    optimum the single-process run of the same method reaches: its gap to the L-BFGS optimum f* (as
    a fraction of f(0) - f*) is at most twice the single-process run's, or 2%."""
    from crfkit.train import train

    T = default_chunking_templates()
    opt = train_columns(
        data["whole"], T, max_iterations=500, epsilon=0.0, delta=0.0, gtol=1e-8, threads=1, **reg
    )
    single = train_columns(
        data["whole"], T, algorithm=algorithm, params=params, max_iterations=30, threads=1, **reg
    )
    mixed = train(
        data["paths"],
        None,
        client=client,
        algorithm=algorithm,
        params=params,
        max_iterations=30,
        threads=1,
        **reg,
    )
    X, Y, _ = load_columns(data["whole"], T)
    space, corpus = build(X, Y)
    obj = Objective(corpus, space, regularization(corpus.n_sequences, **reg), threads=1)
    f_zero = obj.value(np.zeros(space.n_features))
    fstar = opt.objective
    gap_mixed = (mixed.objective - fstar) / (f_zero - fstar)
    gap_single = (single.objective - fstar) / (f_zero - fstar)
    assert mixed.iterations == 30 and abs(mixed.effective_passes - 30) < 1e-9
    print(
        f"{algorithm}: gap to f* (fraction of f(0) - f*): mixed {gap_mixed:.4f}, one process {gap_single:.4f}"
    )
    assert gap_mixed <= max(0.02, 2.0 * gap_single), (gap_mixed, gap_single)


@pytest.mark.slow
def test_cli_dask_local2_end_to_end(data, tmp_path):
    model = str(tmp_path / "m.crfkit")
    env = dict(os.environ, PYTHONPATH=SRC)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "crfkit",
            "train",
            *data["paths"][:2],
            os.path.join(data["dir"], "part-[23].txt"),
            "--dask",
            "local:2",
            "--dask-threads",
            "1",
            "-m",
            model,
            "--c2",
            "0.5",
            "--max-iterations",
            "20",
            "--dev",
            data["dev"],
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    assert "dask: LocalCluster with 2 workers" in r.stderr
    assert "dev accuracy" in r.stdout
    r2 = subprocess.run(
        [sys.executable, "-m", "crfkit", "tag", "-m", model, data["dev"], "--eval"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r2.returncode == 0, r2.stderr
    # the same model as one process on the concatenated file
    ref = subprocess.run(
        [
            sys.executable,
            "-m",
            "crfkit",
            "train",
            data["whole"],
            "-m",
            str(tmp_path / "r.crfkit"),
            "--c2",
            "0.5",
            "--max-iterations",
            "20",
            "--threads",
            "1",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert ref.returncode == 0, ref.stderr
    from crfkit.model import CRFModel

    a, b = CRFModel.load(model), CRFModel.load(str(tmp_path / "r.crfkit"))
    _same_model(a, b, 1e-8)


def test_cli_several_files_without_dask_is_an_error(data, tmp_path, capsys):
    from conftest import run_cli

    rc, out, err = run_cli(capsys, "train", *data["paths"][:2], "-m", str(tmp_path / "m.crfkit"))
    assert rc == 2 and "--dask" in err


# ------------------------------------------------------- the vocabulary merge, without a cluster

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@st.composite
def _sharded_corpus(draw):
    attrs = [f"a{i}" for i in range(draw(st.integers(1, 12)))]
    labels = [f"L{i}" for i in range(draw(st.integers(1, 4)))]
    seq = st.lists(
        st.tuples(
            st.sampled_from(labels), st.lists(st.sampled_from(attrs), min_size=0, max_size=4)
        ),
        min_size=1,
        max_size=6,
    )
    shards = draw(st.lists(st.lists(seq, min_size=1, max_size=5), min_size=1, max_size=4))
    return shards


@settings(max_examples=60, deadline=None)
@given(
    _sharded_corpus(),
    st.sampled_from(
        [dict(), dict(min_freq=2), dict(support="all", min_freq=2), dict(transitions="all")]
    ),
)
def test_merged_counts_give_builds_feature_space(shards, kw):
    """Property: count_shard on every shard + merge_counts == build on the concatenation (CRFsuite
    attribute files, repeated attributes in a token included)."""
    import tempfile

    from crfkit.distributed.shards import Source, count_shard
    from crfkit.distributed.vocab import merge_counts

    with tempfile.TemporaryDirectory() as d:
        srcs = []
        for i, sh in enumerate(shards):
            p = os.path.join(d, f"s{i}.txt")
            with open(p, "w") as f:
                for seq in sh:
                    f.write("".join(lab + "\t" + "\t".join(at) + "\n" for lab, at in seq) + "\n")
            srcs.append(Source(p, "crfsuite"))
        space = merge_counts((count_shard(s) for s in srcs), **kw)
    X = [[list(at) for _, at in seq] for sh in shards for seq in sh]
    Y = [[lab for lab, _ in seq] for sh in shards for seq in sh]
    ref, _ = build(X, Y, **kw)
    assert space.labels == ref.labels and space.attributes == ref.attributes
    np.testing.assert_array_equal(space.attr_ptr, ref.attr_ptr)
    np.testing.assert_array_equal(space.feat_label, ref.feat_label)
    np.testing.assert_array_equal(space.trans_index, ref.trans_index)


def test_client_heap_trim_respects_the_environment(monkeypatch):
    from crfkit.distributed.core import trim_client_heap

    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "131072")
    assert trim_client_heap() is False  # the user's setting wins
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_")
    assert trim_client_heap() is (sys.platform.startswith("linux") and _glibc())


def _glibc() -> bool:
    import platform

    return platform.libc_ver()[0] == "glibc"
