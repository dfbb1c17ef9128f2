"""Training-set scores in the traces (train_corpus(train_scores=True), crfkit bench run
--train-scores), --epochs and --skip-done of bench run, conlleval on label ids, and crfkit bench
scores (Cao's Figures 3-4)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import crfkit.train
from crfkit.bench import data as bdata
from crfkit.bench import runner as brunner
from crfkit.bench import scores as bscores
from crfkit.errors import CrfkitError, DataError, ParameterError
from crfkit.metrics import conlleval, conlleval_ids

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
HAS_MPL = importlib.util.find_spec("matplotlib") is not None


@pytest.fixture(scope="module")
def small():
    return bdata.load("synthetic", limit=40)


# --------------------------------------------------------------------------- conlleval on ids

LABEL_SETS = (
    ("O", "B-NP", "I-NP", "B-VP", "I-VP"),
    ("O", "B-X", "I-X", "E-X", "S-X", "B-Y", "I-Y", "E-Y", "S-Y"),
    ("O", "I-A", "B-A", "I-B", "[", "]", ".", "B-0", "I", "E-A", "S"),
)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_conlleval_ids_is_conlleval(data):
    labels = data.draw(st.sampled_from(LABEL_SETS))
    lens = data.draw(st.lists(st.integers(0, 7), min_size=1, max_size=6))
    n = sum(lens)
    g = data.draw(st.lists(st.integers(0, len(labels) - 1), min_size=n, max_size=n))
    p = data.draw(st.lists(st.integers(0, len(labels) - 1), min_size=n, max_size=n))
    ptr = np.concatenate(([0], np.cumsum(lens))).astype(np.int64)
    gs = [[labels[i] for i in g[a:b]] for a, b in zip(ptr[:-1], ptr[1:])]
    ps = [[labels[i] for i in p[a:b]] for a, b in zip(ptr[:-1], ptr[1:])]
    for iobes in (True, False):
        assert conlleval_ids(g, p, ptr, labels, iobes=iobes) == conlleval(gs, ps, iobes=iobes)


def test_conlleval_ids_bad_input():
    labels = ("O", "B-NP", "I-NP")
    with pytest.raises(DataError, match="tokens"):
        conlleval_ids([0, 1], [0], [0, 2], labels)
    with pytest.raises(DataError, match="seq_ptr"):
        conlleval_ids([0, 1], [0, 1], [0, 3], labels)
    with pytest.raises(DataError, match=r"label ids must lie in \[0, 3\)"):
        conlleval_ids([0, 3], [0, 1], [0, 2], labels)


# --------------------------------------------------------------------------- train scores in the
# trace


def _direct(space, weights, X, Y, corpus):
    model = crfkit.model.CRFModel(space, weights)
    ids, _ = model.viterbi(corpus)
    acc = float(np.mean(ids == corpus.y)) * 100.0
    f1 = conlleval(Y, model.tag(X)).f1  # the string path, from the attribute sequences
    return acc, f1


@pytest.mark.parametrize(
    "algorithm,params", [("ngd", {"update": "u2g1", "period": 0}), ("lbfgs", None)]
)
def test_train_scores_equal_a_direct_decode(small, tmp_path, algorithm, params):
    import crfkit.model  # noqa: F401

    space, corpus, test = small.encoded()
    for epochs in (1, 2, 3):
        trace = tmp_path / f"{algorithm}{epochs}.jsonl"
        res = crfkit.train.train_corpus(
            space,
            corpus,
            algorithm=algorithm,
            max_iterations=epochs,
            threads=1,
            dev=test,
            dev_labels=small.Y_test,
            trace=trace,
            train_scores=True,
            epsilon=0.0,
            delta=0.0,
            **({"params": params} if params else {}),
        )
        recs = [json.loads(line) for line in trace.read_text().splitlines()]
        assert [r["iteration"] for r in recs] == list(range(1, res.iterations + 1))
        last = recs[-1]
        acc, f1 = _direct(space, res.model.weights, small.X_train, small.Y_train, corpus)
        assert last["train_accuracy"] == pytest.approx(acc, abs=1e-12)
        assert last["train_f1"] == pytest.approx(f1, abs=1e-12)
        # the dev (test) scores are still there, and the scoring time is taken out of wall_s
        tacc, tf1 = _direct(space, res.model.weights, small.X_test, small.Y_test, test)
        assert last["dev_accuracy"] == pytest.approx(tacc, abs=1e-12)
        assert last["dev_f1"] == pytest.approx(tf1, abs=1e-12)
        assert last["wall_s_with_dev"] >= last["wall_s"]
    # the scores move: training accuracy after the last epoch differs from the first's
    assert len({r["train_accuracy"] for r in recs}) > 1


def test_train_scores_without_dev_and_for_non_chunk_labels(tmp_path):
    from crfkit.features.encode import build

    X = [[["w=a"], ["w=b"]], [["w=b"], ["w=a"], ["w=c"]]]
    Y = [["x", "y"], ["y", "x", "z"]]  # not chunk tags: accuracy only
    space, corpus = build(X, Y)
    trace = tmp_path / "t.jsonl"
    crfkit.train.train_corpus(
        space,
        corpus,
        algorithm="lbfgs",
        max_iterations=3,
        threads=1,
        trace=trace,
        train_scores=True,
        epsilon=0.0,
        delta=0.0,
    )
    recs = [json.loads(line) for line in trace.read_text().splitlines()]
    assert recs and all(
        "train_accuracy" in r and "train_f1" not in r and "dev_accuracy" not in r for r in recs
    )
    assert recs[-1]["train_accuracy"] == pytest.approx(100.0)


def test_train_scores_off_by_default_and_rejected_with_partial_labels(small, tmp_path):
    space, corpus, test = small.encoded()
    trace = tmp_path / "t.jsonl"
    crfkit.train.train_corpus(
        space,
        corpus,
        algorithm="lbfgs",
        max_iterations=2,
        threads=1,
        trace=trace,
        dev=test,
        dev_labels=small.Y_test,
    )
    recs = [json.loads(line) for line in trace.read_text().splitlines()]
    assert all("train_accuracy" not in r and "dev_accuracy" in r for r in recs)
    allowed = np.ones((corpus.n_tokens, space.n_labels), dtype=bool)
    with pytest.raises(ParameterError, match="train_scores"):
        crfkit.train.train_corpus(
            space, corpus, algorithm="lbfgs", max_iterations=1, allowed=allowed, train_scores=True
        )


# --------------------------------------------------------------------------- bench run: epochs,
# skip-done


def test_run_one_lasts_exactly_the_epochs_with_train_scores(small, tmp_path):
    """l2sgd's calibration counts as effective passes: --epochs, not --passes, gives the epochs
    asked for."""
    r = brunner.run_one(
        small,
        brunner.Spec("l2sgd", {"period": 0}),
        passes=4.0,
        epochs=4,
        trace_path=tmp_path / "a.jsonl",
        l2=small.default_l2,
        train_scores=True,
        threads=1,
    )
    recs = [json.loads(line) for line in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert r.iterations == 4 and [x["iteration"] for x in recs] == [1, 2, 3, 4]
    assert recs[-1]["effective_passes"] > 4  # the calibration's oracle calls
    assert all({"train_accuracy", "train_f1", "dev_accuracy", "dev_f1"} <= set(x) for x in recs)
    b = brunner.run_one(
        small,
        brunner.Spec("l2sgd", {"period": 0}),
        passes=4.0,
        trace_path=tmp_path / "b.jsonl",
        l2=small.default_l2,
        threads=1,
    )
    assert b.iterations < 4  # passes: stopped once 4 passes were counted


def _fake_runner(calls, interrupt=()):
    def run(data, spec, *, passes, trace_path, l2, seed=0, threads=None, **kw):
        calls.append((spec.name, kw))
        Path(trace_path).write_text(
            json.dumps(
                {"iteration": 1, "effective_passes": 1.0, "objective": 1.0, "dev_accuracy": 50.0}
            )
            + "\n"
        )
        return brunner.RunResult(
            name=spec.name,
            params=dict(spec.params),
            trace=Path(trace_path).name,
            final_objective=1.0,
            effective_passes=1.0,
            iterations=1,
            status="interrupted" if spec.name in interrupt else "stopped",
            seconds=0.1,
        )

    return run


def test_skip_done_keeps_finished_runs_and_checks_settings(small, tmp_path, monkeypatch):
    monkeypatch.setattr(crfkit.train, "ALGORITHMS", ("lbfgs", "sag", "saga"))
    specs = [brunner.Spec("sag"), brunner.Spec("lbfgs")]
    calls = []
    kw = dict(passes=3, epochs=3, out=tmp_path, warm_up=False, train_scores=True, seed=2)
    brunner.run_benchmark(small, specs, runner=_fake_runner(calls), **kw)
    assert [c[0] for c in calls] == ["sag", "lbfgs"]
    assert calls[0][1] == {"epochs": 3, "train_scores": True}
    man = json.loads((tmp_path / "bench.json").read_text())
    assert man["epochs"] == 3 and man["train_scores"] is True
    calls.clear()
    with pytest.raises(KeyboardInterrupt):  # saga interrupted (Ctrl-C): the benchmark stops there
        brunner.run_benchmark(
            small,
            specs + [brunner.Spec("saga")],
            runner=_fake_runner(calls, {"saga"}),
            skip_done=True,
            **kw,
        )
    assert [c[0] for c in calls] == ["saga"]  # the finished ones are kept
    man = json.loads((tmp_path / "bench.json").read_text())
    assert [(r["name"], r["status"]) for r in man["runs"]] == [
        ("sag", "stopped"),
        ("lbfgs", "stopped"),
        ("saga", "interrupted"),
    ]
    # an interrupted run is run again; a finished one whose trace is gone too
    (tmp_path / "sag.jsonl").unlink()
    calls.clear()
    brunner.run_benchmark(
        small, specs + [brunner.Spec("saga")], runner=_fake_runner(calls), skip_done=True, **kw
    )
    assert sorted(c[0] for c in calls) == ["sag", "saga"]
    # other settings: a clear error, nothing run
    calls.clear()
    with pytest.raises(CrfkitError, match="other settings.*seed 2 there, 3 now"):
        brunner.run_benchmark(
            small, specs, runner=_fake_runner(calls), skip_done=True, **{**kw, "seed": 3}
        )
    assert calls == []


def test_skip_done_with_a_broken_manifest(small, tmp_path, monkeypatch):
    monkeypatch.setattr(crfkit.train, "ALGORITHMS", ("lbfgs",))
    (tmp_path / "bench.json").write_text("{not json")
    with pytest.raises(CrfkitError, match="bench.json: not a JSON manifest"):
        brunner.run_benchmark(
            small,
            [brunner.Spec("lbfgs")],
            passes=1,
            out=tmp_path,
            warm_up=False,
            runner=_fake_runner([]),
            skip_done=True,
        )


# --------------------------------------------------------------------------- bench scores


def _write_trace(path: Path, test: list, train: list | None = None, f1_shift: float = 0.0) -> None:
    lines = []
    for k, t in enumerate(test, 1):
        rec = {
            "algorithm": "x",
            "iteration": k,
            "effective_passes": float(k),
            "objective": 1.0 / k,
            "wall_s": 0.1 * k,
            "dev_accuracy": t,
            "dev_f1": t - 2.0 + f1_shift,
        }
        if train is not None:
            rec["train_accuracy"] = train[k - 1]
            rec["train_f1"] = train[k - 1] - 1.0
        lines.append(json.dumps(rec))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture
def seeds(tmp_path):
    """Two seed directories with hand-made curves over 6 epochs.

    baseline l2sgd means:      90, 91, 92, 93, 94, 95
    ngd u=a means:             91, 91, 91, 94, 94, 94   -> at or above in epochs 1, 2, 4, 5: 4 of 6
    ngd u=b means (5 epochs):  80, 95, 95, 95, 95       -> 4 of 5 (it stopped after 5 epochs)
    pa (one seed only, no train fields): 92 everywhere  -> epochs 1, 2, 3: 3 of 6
    """
    d0, d1 = tmp_path / "seed0", tmp_path / "seed1"
    _write_trace(d0 / "l2sgd__period=0.jsonl", [89, 90, 91, 92, 93, 94], [95] * 6)
    _write_trace(d1 / "l2sgd__period=0.jsonl", [91, 92, 93, 94, 95, 96], [97] * 6)
    _write_trace(
        d0 / "ngd__period=0,update=a.jsonl", [91, 90, 90, 94, 93, 94], [90, 91, 92, 93, 94, 95]
    )
    _write_trace(
        d1 / "ngd__period=0,update=a.jsonl", [91, 92, 92, 94, 95, 94], [92, 93, 94, 95, 96, 97]
    )
    _write_trace(d0 / "ngd__period=0,update=b.jsonl", [80, 95, 95, 95, 95], [99] * 5)
    _write_trace(d1 / "ngd__period=0,update=b.jsonl", [80, 95, 95, 95, 95], [99] * 5)
    _write_trace(d0 / "pa.jsonl", [92] * 6)
    return [d0, d1]


def test_counts_at_or_above_the_baseline_on_hand_made_curves(seeds):
    s = bscores.score_summary(seeds, epochs=6, baseline="l2sgd")
    rows = {r["run"]: r for r in s["rows"]}
    assert s["baseline"] == "l2sgd__period=0" and s["rows"][0]["run"] == "l2sgd__period=0"
    assert (
        rows["ngd__period=0,update=a"]["at_or_above"],
        rows["ngd__period=0,update=a"]["compared"],
    ) == (4, 6)
    assert (
        rows["ngd__period=0,update=b"]["at_or_above"],
        rows["ngd__period=0,update=b"]["compared"],
    ) == (4, 5)
    assert (rows["pa"]["at_or_above"], rows["pa"]["compared"]) == (3, 6)
    assert rows["l2sgd__period=0"]["at_or_above"] == 6
    assert rows["ngd__period=0,update=a"]["train_last"] == pytest.approx(96.0)
    assert rows["ngd__period=0,update=b"]["epochs_max"] == 5 and rows["pa"]["runs"] == 1
    assert rows["pa"]["train_last"] is None  # no train fields: read all the same
    # the labels leave out period=0 (every run that has it sets it alike)
    assert (
        rows["ngd__period=0,update=a"]["label"] == "ngd (update=a)" and rows["pa"]["label"] == "pa"
    )
    # the first N epochs only
    s3 = bscores.score_summary(seeds, epochs=3, baseline="l2sgd")
    assert {r["run"]: r["at_or_above"] for r in s3["rows"]}["ngd__period=0,update=a"] == 2
    # chunk F1 (dev_f1 = accuracy - 2 in these traces): the same counts
    f1 = bscores.score_summary(seeds, metric="f1", epochs=6, baseline="l2sgd__period=0")
    assert {r["run"]: r["at_or_above"] for r in f1["rows"]}["ngd__period=0,update=a"] == 4


def test_the_baseline_is_found_by_stem_label_spec_or_name(seeds):
    groups = bscores.load_score_groups(seeds, epochs=6)
    for name in ("l2sgd", "l2sgd__period=0", "l2sgd:period=0"):
        assert bscores.find_baseline(groups, name).stem == "l2sgd__period=0"
    assert bscores.find_baseline(groups, "ngd (update=b)").stem == "ngd__period=0,update=b"
    assert bscores.find_baseline(groups, "ngd:update=a,period=0").stem == "ngd__period=0,update=a"
    with pytest.raises(CrfkitError, match="baseline 'sgd' is none of the runs: .*l2sgd__period=0"):
        bscores.find_baseline(groups, "sgd")
    with pytest.raises(CrfkitError, match="names 2 runs"):
        bscores.find_baseline(groups, "ngd")


@pytest.mark.skipif(not HAS_MPL, reason="matplotlib is not installed")
def test_cli_draws_the_figure_and_writes_the_counts(seeds, tmp_path, capsys):
    from crfkit.cli import main

    png, js = tmp_path / "fig.png", tmp_path / "counts.json"
    assert (
        main(
            [
                "bench",
                "scores",
                *map(str, seeds),
                "--epochs",
                "6",
                "--baseline",
                "l2sgd",
                "--out",
                str(png),
                "--json",
                str(js),
                "--title",
                "hand-made",
                "--label",
                "ngd__period=0,update=a:U-A",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert (
        "| U-A | 2 | 6 |" in out
        and "| 4 of 6 |" in out
        and "(baseline)" in out
        and f"wrote {png}" in out
    )
    raw = png.read_bytes()
    assert raw[:8] == PNG_MAGIC
    import matplotlib.image as mpimg

    img = mpimg.imread(png)
    assert img.shape[1] > 800 and float(img[..., :3].std()) > 0.01
    s = json.loads(js.read_text())
    assert {r["label"]: r["at_or_above"] for r in s["rows"]} == {
        "l2sgd": 6,
        "U-A": 4,
        "ngd (update=b)": 4,
        "pa": 3,
    }


@pytest.mark.skipif(not HAS_MPL, reason="matplotlib is not installed")
def test_traces_without_train_fields_still_plot(tmp_path):
    d = tmp_path / "old"
    _write_trace(d / "sg__eta=0.1.jsonl", [90, 91, 92])
    _write_trace(d / "lbfgs.jsonl", [89, 92, 93])
    path, s = bscores.plot_scores([d], tmp_path / "f.png", epochs=3, baseline="lbfgs")
    assert path.read_bytes()[:8] == PNG_MAGIC
    assert {r["run"]: r["at_or_above"] for r in s["rows"]} == {"lbfgs": 3, "sg__eta=0.1": 1}
    # and the older readers take the new traces as they took the old ones
    from crfkit.bench import plots as bplots

    _write_trace(tmp_path / "new" / "pa.jsonl", [90, 91], [95, 96])
    runs = bplots.load_runs(tmp_path / "new")
    assert runs[0].column("train_accuracy") == [95, 96] and bplots.test_errors(runs[0].records) == [
        10.0,
        9.0,
    ]


def test_bad_input_gives_clear_errors(seeds, tmp_path, capsys):
    from crfkit.cli import main

    with pytest.raises(CrfkitError, match="no run directories given"):
        bscores.load_score_groups([])
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CrfkitError, match="no traces"):
        bscores.load_score_groups([empty])
    with pytest.raises(CrfkitError, match="no such directory"):
        bscores.load_score_groups([tmp_path / "missing"])
    with pytest.raises(CrfkitError, match="metric must be one of"):
        bscores.load_score_groups(seeds, metric="loss")
    d = tmp_path / "noscores"
    d.mkdir()
    (d / "lbfgs.jsonl").write_text(
        json.dumps({"iteration": 1, "effective_passes": 1.0, "objective": 1.0}) + "\n"
    )
    with pytest.raises(CrfkitError, match="holds a test score dev_f1"):
        bscores.load_score_groups([d], metric="f1")
    assert main(["bench", "scores", *map(str, seeds), "--baseline", "nope"]) == 2
    assert "baseline 'nope' is none of the runs" in capsys.readouterr().err
    assert main(["bench", "scores", str(empty)]) == 2
    assert "no traces" in capsys.readouterr().err
    assert main(["bench", "scores", *map(str, seeds), "--label", "nope:X"]) == 2
    assert "no run is named 'nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["bench", "scores", str(empty), "--label", "no-colon"])
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "x.jsonl").write_text(
        '{"iteration": 1, "effective_passes": 1, "objective": 1}\nnot json\n'
    )
    assert main(["bench", "scores", str(bad)]) == 2
    assert "x.jsonl" in capsys.readouterr().err


def test_finished_only_leaves_out_runs_bench_json_does_not_list(seeds, tmp_path):
    d0 = seeds[0]
    (d0 / "bench.json").write_text(
        json.dumps(
            {
                "runs": [
                    {"trace": "l2sgd__period=0.jsonl", "status": "stopped"},
                    {"trace": "pa.jsonl", "status": "interrupted"},
                    {"trace": "ngd__period=0,update=a.jsonl", "status": "stopped"},
                ]
            }
        )
    )
    with pytest.raises(CrfkitError, match="seed1: no readable bench.json"):
        bscores.load_score_groups(seeds, finished_only=True)
    groups = bscores.load_score_groups([d0], epochs=6, finished_only=True)
    assert sorted(g.stem for g in groups) == ["l2sgd__period=0", "ngd__period=0,update=a"]
    assert len(bscores.load_score_groups([d0], epochs=6)) == 4  # without it: every trace
