"""Stopping on a development set and fine-tuning on the active features (Lavergne et al. 2010,
5.3.1)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_train import learnable

from crfkit.features.encode import build
from crfkit.model import CRFModel
from crfkit.objective import Objective, Regularization
from crfkit.train import train
from crfkit.training import train_corpus


def test_dev_stop_keeps_the_best_model_and_stops_after_the_window(tmp_path):
    X, Y = learnable(1, n_seq=80)
    Xd, Yd = learnable(2, n_seq=40)
    trace = tmp_path / "t.jsonl"
    # the labels A, B, C are not chunk tags (auto would stop on accuracy): ask for F1 explicitly
    res = train(
        X,
        Y,
        X_dev=Xd,
        Y_dev=Yd,
        c2=0.001,
        dev_stop=3,
        max_iterations=200,
        trace=trace,
        dev_metric="f1",
    )
    assert res.status == "dev_stop" and res.converged
    recs = [json.loads(x) for x in trace.read_text().splitlines()]
    f1 = [r["dev_f1"] for r in recs]
    best_it = res.model.meta["dev_best_iteration"]
    # the run stopped exactly W evaluations after the best one, and none after it was better
    assert recs[-1]["iteration"] == best_it + 3
    assert max(f1) == res.model.meta["dev_best"] == f1[best_it - 1]
    assert all(x <= f1[best_it - 1] for x in f1[best_it:])
    # the model kept is the best one: its dev F1 is the best F1, and its objective is reported for
    # it
    from crfkit.metrics import conlleval

    pred = res.model.tag(Xd)
    assert conlleval(Yd, pred).f1 == pytest.approx(max(f1))
    space, corpus = build(X, Y)
    assert res.objective == pytest.approx(
        Objective(corpus, space, res.reg).value(res.model.weights), rel=1e-12
    )


def test_dev_stop_with_accuracy_and_every_k_iterations():
    X, Y = learnable(3, n_seq=60)
    Xd, Yd = learnable(4, n_seq=30)
    res = train(
        X,
        Y,
        X_dev=Xd,
        Y_dev=Yd,
        c2=0.001,
        dev_stop=2,
        dev_every=2,
        dev_metric="accuracy",
        max_iterations=200,
    )
    scored = [r for r in res.history if "dev_accuracy" in r]
    assert all(r["iteration"] % 2 == 0 for r in scored)
    assert res.model.meta["dev_metric"] == "accuracy"
    if res.status == "dev_stop":
        assert scored[-1]["iteration"] - res.model.meta["dev_best_iteration"] == 4


def test_dev_stop_works_with_a_stochastic_optimizer():
    X, Y = learnable(5, n_seq=60)
    Xd, Yd = learnable(6, n_seq=30)
    res = train(
        X,
        Y,
        X_dev=Xd,
        Y_dev=Yd,
        algorithm="sg",
        params={"eta": 0.5},
        c2=0.001,
        dev_stop=2,
        max_iterations=100,
    )
    assert res.status in ("dev_stop", "max_iterations")
    if res.status == "dev_stop":
        assert res.iterations == res.model.meta["dev_best_iteration"] + 2


def test_dev_stop_needs_a_dev_set_and_sane_values():
    X, Y = learnable(7, n_seq=10)
    with pytest.raises(ValueError, match="needs a development set"):
        train(X, Y, dev_stop=3)
    with pytest.raises(ValueError, match=">= 1"):
        train(X, Y, X_dev=X, Y_dev=Y, dev_stop=0)
    with pytest.raises(ValueError, match="dev_metric"):
        train(X, Y, X_dev=X, Y_dev=Y, dev_stop=2, dev_metric="bleu")


def test_fine_tuning_refits_only_the_active_features():
    X, Y = learnable(8, n_seq=60)
    base = train(X, Y, c1=0.5, max_iterations=100)
    tuned = train(X, Y, c1=0.5, max_iterations=100, fine_tune=30, fine_tune_l2=0.01)
    w0, w1 = base.model.weights, tuned.model.weights
    assert np.count_nonzero(w0) > 0
    assert not np.any(w1[w0 == 0])  # nothing outside the L1 run's support
    # on the support, the fine-tuned weights are the optimum of nll + (0.01/2)|w|^2 restricted to it
    space, corpus = build(X, Y)
    sub = Objective(corpus, space, Regularization(l2=0.01))
    _, g = sub.value_and_grad(w1)
    assert np.abs(g[w0 != 0]).max() < 1e-3
    # less L1 shrinkage: the training loss goes down
    assert sub.nll_sum(w1) < sub.nll_sum(w0)
    assert tuned.model.meta["fine_tune"] == 30
    phases = [r.get("phase") for r in tuned.history]
    assert phases.count("fine_tune") >= 1 and phases[-1] == "fine_tune"


def test_fine_tune_after_dev_stop_starts_from_the_best_model():
    X, Y = learnable(9, n_seq=60)
    Xd, Yd = learnable(10, n_seq=30)
    res = train(X, Y, X_dev=Xd, Y_dev=Yd, c1=0.2, dev_stop=2, max_iterations=150, fine_tune=3)
    best_it = res.model.meta["dev_best_iteration"]
    main = [r for r in res.history if r.get("phase") != "fine_tune"]
    assert main[best_it - 1]["nnz"] >= np.count_nonzero(res.model.weights)


def test_train_corpus_refuses_bad_fine_tune():
    X, Y = learnable(11, n_seq=10)
    space, corpus = build(X, Y)
    with pytest.raises(ValueError, match="fine_tune"):
        train_corpus(space, corpus, fine_tune=-1)


def test_cli_dev_stop_and_fine_tune(tmp_path, capsys):
    from crfkit.cli import main

    rng = np.random.default_rng(0)

    def write(path, n):
        lines = []
        for _ in range(n):
            for _ in range(int(rng.integers(2, 6))):
                lab = ["B-NP", "I-NP", "O"][int(rng.integers(0, 3))]
                lines.append(f"w{rng.integers(0, 6)}{lab[0]} P{rng.integers(0, 3)} {lab}")
            lines.append("")
        path.write_text("\n".join(lines) + "\n")

    tr, dv = tmp_path / "train.txt", tmp_path / "dev.txt"
    write(tr, 60)
    write(dv, 30)
    model = tmp_path / "m.crfkit"
    assert (
        main(
            [
                "train",
                str(tr),
                "-m",
                str(model),
                "--dev",
                str(dv),
                "--dev-stop",
                "2",
                "--c1",
                "0.5",
                "--fine-tune",
                "3",
                "-q",
            ]
        )
        == 0
    )
    m = CRFModel.load(model)
    assert m.meta["fine_tune"] == 3 and "dev_best_iteration" in m.meta
    assert main(["train", str(tr), "-m", str(model), "--dev-stop", "2", "-q"]) == 2
    assert "--dev-stop needs a development file" in capsys.readouterr().err


@pytest.mark.parametrize(
    "labels, metric",
    [
        (("I", "E", "O", "S", "B"), "accuracy"),  # NETtalk-like phonemes
        (("NN", "VB", "DT"), "accuracy"),
        (("B-NP", "I-NP", "O"), "f1"),
        (("S-PER", "B-PER", "E-PER", "O"), "f1"),
    ],
)
def test_dev_metric_auto_takes_f1_only_for_chunk_tags(labels, metric):
    from conftest import markov_corpus

    X, Y = markov_corpus(11, 40, labels=labels)
    Xd, Yd = markov_corpus(12, 20, labels=labels)
    logs = []
    res = train(
        X,
        Y,
        X_dev=Xd,
        Y_dev=Yd,
        c2=0.01,
        dev_stop=2,
        max_iterations=6,
        verbose=True,
        log=logs.append,
    )
    assert res.model.meta["dev_metric"] == metric
    line = [x for x in logs if x.startswith("dev metric for --dev-stop")]
    assert len(line) == 1 and (("chunk F1" in line[0]) == (metric == "f1"))


def test_cli_summary_reports_the_saved_models_dev_score(tmp_path, capsys):
    from crfkit.cli import main

    rng = np.random.default_rng(3)

    def write(path, n, noise):
        lines = []
        for _ in range(n):
            for _ in range(int(rng.integers(2, 6))):
                lab = ["B-NP", "I-NP", "O"][int(rng.integers(0, 3))]
                w = lab[0] if rng.random() > noise else "x"
                lines.append(f"w{w}{rng.integers(0, 3)} P{rng.integers(0, 3)} {lab}")
            lines.append("")
        path.write_text("\n".join(lines) + "\n")

    tr, dv = tmp_path / "train.txt", tmp_path / "dev.txt"
    write(tr, 80, 0.2)
    write(dv, 40, 0.6)
    model = tmp_path / "m.crfkit"
    trace = tmp_path / "t.jsonl"
    assert (
        main(
            [
                "train",
                str(tr),
                "-m",
                str(model),
                "--dev",
                str(dv),
                "--dev-stop",
                "2",
                "--c2",
                "0.01",
                "--trace",
                str(trace),
                "-q",
                "--max-iterations",
                "60",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    m = CRFModel.load(model)
    recs = [json.loads(x) for x in trace.read_text().splitlines()]
    best = next(r for r in recs if r["iteration"] == m.meta["dev_best_iteration"])
    line = next(x for x in out.splitlines() if x.startswith("dev accuracy"))
    assert f"dev F1 {best['dev_f1']:.2f}" in line and f"iteration {best['iteration']}" in line
