"""crfkit.bench: data sets, the f* cache, the runner and its step-size choice, figures, memory
table, CLI."""

from __future__ import annotations

import importlib.util
import json
import math
import warnings
from pathlib import Path

import pytest

import crfkit.train
from crfkit.bench import data as bdata
from crfkit.bench import fstar as bfstar
from crfkit.bench import memory as bmemory
from crfkit.bench import plots as bplots
from crfkit.bench import runner as brunner
from crfkit.errors import CrfkitError

REPO = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TRACE_KEYS = {
    "algorithm",
    "iteration",
    "effective_passes",
    "wall_s",
    "objective",
    "grad_inf_norm",
    "nnz",
    "dev_accuracy",
}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("CRFKIT_CACHE", str(d))
    return d


@pytest.fixture(scope="module")
def small():
    """40 training sentences of the synthetic corpus (l2 = 1/40), the 50 test sentences."""
    return bdata.load("synthetic", limit=40)


def _png_ok(path: Path) -> None:
    raw = path.read_bytes()
    assert raw[:8] == PNG_MAGIC, path
    mpimg = pytest.importorskip("matplotlib.image")
    img = mpimg.imread(path)
    assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100
    assert float(img[..., :3].std()) > 0.01  # something is drawn


# --------------------------------------------------------------------------- data sets


def test_synthetic_data_set_and_limit(small):
    full = bdata.load("synthetic")
    assert full.n_train == 200 and len(full.X_test) == 50 and full.chunks
    assert small.n_train == 40 and small.name == "synthetic[:40]"
    assert small.default_l2 == pytest.approx(1 / 40)
    assert small.X_train == full.X_train[:40] and small.X_test == full.X_test
    assert small.feature_set == "crfsuite-chunking/observed"
    space, corpus, test = small.encoded()
    assert corpus.n_sequences == 40 and test.n_sequences == 50
    assert (
        bdata.load("synthetic", limit=40, support="all").encoded()[0].n_features > space.n_features
    )


def test_unknown_data_set_and_bad_options():
    with pytest.raises(CrfkitError, match="unknown benchmark data set 'nope'.*conll2000"):
        bdata.load("nope")
    with pytest.raises(CrfkitError, match="support"):
        bdata.load("synthetic", support="some")
    with pytest.raises(CrfkitError, match="limit"):
        bdata.load("synthetic", limit=0)


def test_chunking_attributes_are_the_core_benchmarks():
    """The bench's CoNLL-2000 attributes are benchmarks/conll2000_vs_crfsuite.py's (names aside)."""
    path = REPO / "benchmarks" / "peers" / "conll2000_vs_crfsuite.py"
    if not path.is_file():
        pytest.skip("benchmarks/conll2000_vs_crfsuite.py not in this checkout")
    spec = importlib.util.spec_from_file_location("_core_bench", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    from crfkit.datasets.synthetic import generate

    sents = generate(25, seed=3)
    ours = bdata.chunking_attributes(sents)
    for s, mine in zip(sents, ours):
        ref = mod.attributes(s.columns)
        assert len(ref) == len(mine)
        for r, m in zip(ref, mine):
            rv = [a.split("=", 1)[1].replace("|", "/") if "=" in a else a for a in r]
            mv = [a.split(":", 1)[1] if ":" in a else a for a in m]
            assert rv == mv


def test_ner_and_pos_attributes_stay_inside_the_sentence():
    from crfkit.io.columns import Sentence

    s = Sentence([["Van", "N"], ["Dijk-3", "N"]], ["B-PER", "I-PER"], 1)
    ner = bdata.ner_attributes([s])[0]
    assert "__BOS__" in ner[0] and "__EOS__" in ner[1]
    assert "w[-1]=van" in ner[1] and not any(a.startswith("w[-1]=") for a in ner[0])
    assert "shape[0]=Xx-d" in ner[1] and "flag=hasdigit" in ner[1] and "flag=hyphen" in ner[1]
    pos = bdata.pos_attributes([s])[0]
    assert "suf4=jk-3" in pos[1] and "w=Van" in pos[0] and "__EOS__" in pos[1]


# --------------------------------------------------------------------------- f*


def test_fstar_is_computed_once_then_read_from_the_cache(small, cache, monkeypatch):
    e1 = bfstar.get_fstar(small)
    assert e1["cached"] is False and Path(e1["path"]).is_file()
    assert Path(e1["path"]).parent == cache / "fstar"
    assert e1["status"] == "gtol" and e1["grad_inf_norm"] <= 1e-7
    assert e1["l2"] == pytest.approx(1 / 40) and e1["n_train"] == 40
    assert 0 <= e1["test_error"] <= 100 and "test_f1" in e1
    # f* is the minimum: the objective at the cached w* is f*, and no lower than a short L-BFGS run
    space, corpus, _ = small.encoded()
    from crfkit.objective import Objective, Regularization

    obj = Objective(corpus, space, Regularization(l2=1 / 40))
    w = bfstar.load_weights(e1["key"])
    assert obj.value(w, count=False) == pytest.approx(e1["fstar"], rel=1e-12)
    short = crfkit.train.train_corpus(
        space, corpus, reg=Regularization(l2=1 / 40), max_iterations=5
    )
    assert short.objective > e1["fstar"]

    def boom(*a, **k):
        raise AssertionError("f* recomputed although it is cached")

    monkeypatch.setattr(bfstar, "compute_fstar", boom)
    e2 = bfstar.get_fstar(bdata.load("synthetic", limit=40))  # a fresh object: same data, same key
    assert e2["cached"] is True and e2["fstar"] == e1["fstar"] and e2["key"] == e1["key"]
    # a tighter request, another l2 or other data are other computations
    with pytest.raises(AssertionError, match="recomputed"):
        bfstar.get_fstar(small, gtol=1e-12, max_iterations=5000)
    with pytest.raises(AssertionError, match="recomputed"):
        bfstar.get_fstar(small, l2=0.5)
    with pytest.raises(AssertionError, match="recomputed"):
        bfstar.get_fstar(bdata.load("synthetic", limit=39))


def test_fstar_key_depends_on_data_features_and_l2(small):
    space, corpus, _ = small.encoded()
    k = bfstar.fstar_key(space, corpus, features="a", l2=0.1)
    assert k == bfstar.fstar_key(space, corpus, features="a", l2=0.1)
    assert k != bfstar.fstar_key(space, corpus, features="b", l2=0.1)
    assert k != bfstar.fstar_key(space, corpus, features="a", l2=0.2)
    s2, c2, _ = bdata.load("synthetic", limit=41).encoded()
    assert k != bfstar.fstar_key(s2, c2, features="a", l2=0.1)


def test_a_broken_cache_entry_is_recomputed(small, cache):
    e1 = bfstar.get_fstar(small)
    Path(e1["path"]).write_text("{ not json")
    e2 = bfstar.get_fstar(small)
    assert e2["cached"] is False and e2["fstar"] == pytest.approx(e1["fstar"], rel=1e-12)
    assert json.loads(Path(e2["path"]).read_text())["fstar"] == e2["fstar"]


# --------------------------------------------------------------------------- specs and names


def test_specs_and_trace_names_round_trip():
    s = brunner.parse_spec("sg:eta=0.01,avg=true")
    assert s.name == "sg" and s.params == {"eta": 0.01, "avg": True} and not s.searches_step
    assert brunner.parse_spec("asg").searches_step and not brunner.parse_spec("sag").searches_step
    for name, params in (("sag-nus*", {}), ("sg", {"eta": 0.01}), ("lbfgs", {})):
        stem = brunner.trace_stem(name, params)
        assert "*" not in stem
        n, p = bplots.parse_stem(stem)
        assert n == name and p == {k: f"{v:g}" for k, v in params.items()}
    with pytest.raises(CrfkitError, match="key=value"):
        brunner.parse_spec("sg:eta")
    with pytest.raises(CrfkitError):
        brunner.parse_spec(":eta=1")


def test_unavailable_optimizer_is_a_clear_error(small, tmp_path):
    with pytest.raises(CrfkitError, match="'nope' is not available here; available: lbfgs"):
        brunner.run_benchmark(small, [brunner.Spec("nope")], passes=1, out=tmp_path, warm_up=False)
    with pytest.raises(CrfkitError, match="lbfgs takes no parameters"):
        brunner.run_benchmark(
            small, [brunner.Spec("lbfgs", {"eta": 1.0})], passes=1, out=tmp_path, warm_up=False
        )


# --------------------------------------------------------------------------- step-size selection


def _fake_runner(finals: dict, calls: list):
    """A runner whose final objective is set per eta; writes a small trace as run_one would."""

    def run(data, spec, *, passes, trace_path, l2, seed, threads):
        calls.append(dict(spec.params))
        eta = spec.params.get("eta")
        f_end = finals[eta]
        if isinstance(f_end, Exception):
            raise f_end
        with open(trace_path, "w") as fh:
            for k in range(1, int(passes) + 1):
                f = f_end + (passes - k) if math.isfinite(f_end) else float("nan")
                fh.write(
                    json.dumps(
                        {
                            "algorithm": spec.name,
                            "iteration": k,
                            "effective_passes": float(k),
                            "wall_s": 0.1 * k,
                            "objective": f,
                            "grad_inf_norm": 1.0,
                            "nnz": 3,
                            "dev_accuracy": 90.0 + k,
                            "wall_s_with_dev": 0.1 * k + 0.05,
                        }
                    )
                    + "\n"
                )
        return brunner.RunResult(
            name=spec.name,
            params=dict(spec.params),
            trace=Path(trace_path).name,
            final_objective=f_end if math.isfinite(f_end) else math.inf,
            effective_passes=float(passes),
            iterations=int(passes),
            status="max_iterations",
            seconds=0.1,
        )

    return run


def test_step_size_is_chosen_by_the_final_objective(small, tmp_path, monkeypatch):
    monkeypatch.setattr(crfkit.train, "ALGORITHMS", crfkit.train.ALGORITHMS + ("sg",), raising=True)
    # the best is neither the first, the last, the smallest nor the largest eta tried
    finals = {
        1e-3: 5.0,
        1e-2: 3.5,
        1e-1: 2.0,
        1.0: float("nan"),
        10.0: FloatingPointError("overflow"),
        0.3: 7.0,
    }
    calls = []
    man = brunner.run_benchmark(
        small,
        [brunner.Spec("sg")],
        passes=3,
        out=tmp_path,
        etas=[1e-3, 1e-2, 1e-1, 1.0, 10.0],
        runner=_fake_runner(finals, calls),
        warm_up=False,
    )
    assert [c["eta"] for c in calls] == [1e-3, 1e-2, 1e-1, 1.0, 10.0]
    roles = {r["params"]["eta"]: r["role"] for r in man["runs"]}
    assert roles == {0.1: "best", 0.01: "second", 0.001: "tried", 1.0: "tried", 10.0: "tried"}
    failed = [r for r in man["runs"] if r["params"]["eta"] == 10.0][0]
    assert (
        failed["status"] == "failed"
        and "overflow" in failed["error"]
        and failed["final_objective"] is None
    )
    on_disk = json.loads((tmp_path / "bench.json").read_text())
    assert on_disk["runs"] == man["runs"] and on_disk["l2"] == pytest.approx(1 / 40)
    # a fixed eta is run as given, alone
    calls.clear()
    man = brunner.run_benchmark(
        small,
        [brunner.Spec("sg", {"eta": 0.3})],
        passes=2,
        out=tmp_path / "fixed",
        runner=_fake_runner(finals, calls),
        warm_up=False,
    )
    assert calls == [{"eta": 0.3}] and [r["role"] for r in man["runs"]] == ["only"]
    # the figures rank the traces by the same rule: same best and second-best
    runs = {r.params["eta"]: r.role for r in bplots.load_runs(tmp_path)}
    assert runs["0.1"] == "best" and runs["0.01"] == "second" and runs["0.001"] == "tried"


def test_rank_group_orders_and_handles_failures():
    def rr(eta, f):
        return brunner.RunResult("sg", {"eta": eta}, "x", f, 1.0, 1, "ok", 0.0)

    order = brunner.rank_group([rr(1, math.inf), rr(2, 4.0), rr(3, 1.0), rr(4, 2.0)])
    assert [(r.params["eta"], r.role) for r in order] == [
        (3, "best"),
        (4, "second"),
        (2, "tried"),
        (1, "tried"),
    ]
    assert brunner.rank_group([rr(1, 3.0)])[0].role == "only"


# --------------------------------------------------------------------------- real runs


def test_runner_end_to_end_with_the_installed_optimizers(small, cache, tmp_path):
    fs = bfstar.get_fstar(small)
    avail = crfkit.train.ALGORITHMS
    specs = [brunner.Spec("lbfgs")]
    specs += [brunner.Spec(n) for n in ("sag-nus*", "sag", "saga") if n in avail]
    specs += [
        brunner.Spec(n) for n in ("sg", "asg") if n in avail
    ]  # searched over the two etas below
    out = tmp_path / "run"
    man = brunner.run_benchmark(
        small, specs, passes=3, out=out, etas=[1e-2, 1e-1], fstar=fs, warm_up=False
    )
    assert json.loads((out / "fstar.json").read_text())["fstar"] == fs["fstar"]
    expected = sum(2 if s.searches_step else 1 for s in specs)
    assert len(man["runs"]) == expected
    for r in man["runs"]:
        recs = bplots.read_trace(out / r["trace"])
        assert recs, r
        assert TRACE_KEYS <= set(recs[0]), r
        assert "dev_f1" in recs[0]  # chunk labels: F1 too
        assert recs[-1]["effective_passes"] >= 3 - 1e-9 or r["status"] not in (
            "callback",
            "max_iterations",
        )
        assert r["final_objective"] == pytest.approx(recs[-1]["objective"])
        # no method gets below the reference optimum
        assert min(x["objective"] for x in recs) >= fs["fstar"] - 1e-9 * abs(fs["fstar"])
        assert [x["iteration"] for x in recs] == list(range(1, len(recs) + 1))
    lb = [r for r in man["runs"] if r["name"] == "lbfgs"][0]
    assert lb["role"] == "only" and lb["trace"] == "lbfgs.jsonl"
    s = bplots.summary(out, at=[1, 3])
    assert s["fstar"] == fs["fstar"] and not s["fstar_estimated"]
    row = [x for x in s["rows"] if x["run"] == "lbfgs"][0]
    lrecs = bplots.read_trace(out / "lbfgs.jsonl")
    first3 = [x for x in lrecs if x["effective_passes"] >= 3][0]
    assert row["subopt"][3] == pytest.approx(first3["objective"] - fs["fstar"])
    assert row["test_error"][3] == pytest.approx(100 - first3["dev_accuracy"])


def test_plots_from_traces_are_valid_pngs(small, cache, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "run"
    fs = bfstar.get_fstar(small)
    specs = [brunner.Spec("lbfgs")] + [
        brunner.Spec(n) for n in ("sag-nus*",) if n in crfkit.train.ALGORITHMS
    ]
    brunner.run_benchmark(small, specs, passes=2, out=out, fstar=fs, warm_up=False)
    paths = bplots.plot_figures(out)
    assert [p.name for p in paths] == list(bplots.FIGURES)
    for p in paths:
        _png_ok(p)
    # elsewhere, with f* given, and no temporary files left behind
    other = tmp_path / "figs"
    bplots.plot_figures(out, out=other, fstar=fs["fstar"] - 1.0, show_all=True)
    assert sorted(p.name for p in other.iterdir()) == sorted(bplots.FIGURES)


def _write_traces(d, objectives, dev=True):
    """One trace per run ({stem: objectives per pass}), a record per pass (wall_s = pass number)."""
    d.mkdir()
    for name, fs in objectives.items():
        with open(d / f"{name}.jsonl", "w") as fh:
            for k, f in enumerate(fs, 1):
                rec = {
                    "algorithm": name.split("__")[0],
                    "iteration": k,
                    "effective_passes": k,
                    "wall_s": k,
                    "objective": f,
                }
                if dev:
                    rec["dev_accuracy"] = 80 + k
                fh.write(json.dumps(rec) + "\n")


def test_plots_without_fstar_estimate_it(tmp_path):
    pytest.importorskip("matplotlib")
    d = tmp_path / "t"
    _write_traces(
        d, {"lbfgs": [3.0, 2.0, 1.5], "sg__eta=0.1": [3.5, 2.5, 2.0], "sg__eta=1": [4.0, 3.9, 3.8]}
    )
    runs = {r.stem: r.role for r in bplots.load_runs(d)}
    assert runs == {"lbfgs": "only", "sg__eta=0.1": "best", "sg__eta=1": "second"}
    s = bplots.summary(d, at=[2])
    assert s["fstar_estimated"] and s["fstar"] == 1.5
    assert {r["run"]: r["subopt"][2] for r in s["rows"]} == {
        "lbfgs": 0.5,
        "sg__eta=0.1": 1.0,
        "sg__eta=1": 2.4,
    }
    assert s["lowest"] == {2: (0.5, "lbfgs")}
    assert (
        "lowest f - f* (each classic method at its best step size): @2 lbfgs (5.000e-01)"
        in bplots.format_summary(s)
    )
    for p in bplots.plot_figures(d):
        _png_ok(p)


def test_lowest_at_each_mark_counts_only_the_best_step_size(tmp_path):
    d = tmp_path / "low"
    # sg (eta=1) starts lowest but ends above sg (eta=0.1): it is the dashed second-best, not a
    # contender
    _write_traces(
        d,
        {"lbfgs": [3.0, 2.0, 1.0], "sg__eta=0.1": [2.5, 1.5, 1.2], "sg__eta=1": [2.0, 1.9, 1.8]},
        dev=False,
    )
    s = bplots.summary(d, at=[1, 3], fstar=0.5)
    assert s["lowest"] == {1: (2.0, "sg (eta=0.1)"), 3: (0.5, "lbfgs")}


def test_variants_of_one_optimizer_are_told_apart_in_the_legend():
    base = bplots.TraceRun("sag-nus_star", "sag-nus*", {})
    variant = bplots.TraceRun("sag-nus_star__ls_skip=False", "sag-nus*", {"ls_skip": "False"})
    best = bplots.TraceRun("sg__eta=0.1", "sg", {"eta": "0.1"}, role="best")
    second = bplots.TraceRun("sg__eta=1", "sg", {"eta": "1"}, role="second")
    assert bplots.line_style(base) == ("sag-nus*", "-", bplots.line_style(variant)[2])
    assert bplots.line_style(variant)[:2] == ("sag-nus* (ls_skip=False)", "-.")
    assert bplots.line_style(best)[:2] == ("sg (eta=0.1)", "-")
    assert bplots.line_style(second)[:2] == ("sg (eta=1)", "--")


def test_optimizer_seconds_take_out_the_test_scoring():
    recs = [
        {"wall_s": 1.0, "wall_s_with_dev": 1.5},
        {"wall_s": 2.5, "wall_s_with_dev": 3.0},
        {"wall_s": 4.0},
    ]
    assert bplots.optimizer_seconds(recs) == [1.0, 2.0, 3.0]
    # monitoring seconds an optimizer reports (cumulative: all epochs so far) come out too
    recs = [
        {"wall_s": 1.0, "monitor_s": 0.25, "wall_s_with_dev": 1.5},
        {"wall_s": 2.5, "monitor_s": 0.5},
        {"wall_s": 4.0, "monitor_s": float("nan")},
    ]
    assert bplots.optimizer_seconds(recs) == [0.75, 1.5, 3.0]
    assert bplots.test_errors([{"dev_accuracy": 97.5}, {}]) == [2.5, None]


def test_bad_trace_names_file_and_line(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text(json.dumps({"effective_passes": 1, "objective": 1.0}) + "\n{oops\n")
    with pytest.raises(CrfkitError, match=r"x\.jsonl:2: not a JSON record"):
        bplots.read_trace(p)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CrfkitError, match="no traces"):
        bplots.load_runs(empty)


# --------------------------------------------------------------------------- memory


def test_memory_schemes_counted_by_hand():
    from crfkit.features.encode import build

    # labels x, y; attributes a (with x and y), b (with x), c (with y); one transition x->y
    X = [[["a", "b"], ["a"]], [["c"]]]
    Y = [["x", "y"], ["y"]]
    space, corpus = build(X, Y)
    assert (space.n_state, space.n_trans, space.n_features) == (4, 1, 5)
    m = bmemory.state_memory(space, corpus)
    assert m["naive_bytes"] == 2 * 5 * 8
    # sparse: seq 0 {a: 2, b: 1} + 1 transition; seq 1 {c: 1} + 1 transition
    assert m["sparse_bytes"] == 8 * ((2 + 1 + 1) + (1 + 1))
    # marginals: T*L + (T-1)*L*L
    assert m["marginals_bytes"] == 8 * ((2 * 2 + 1 * 4) + (1 * 2 + 0))
    # mixed: T*L + n_trans
    assert m["mixed_bytes"] == 8 * ((2 * 2 + 1) + (1 * 2 + 1))
    assert m["ratio_mixed"] == pytest.approx(64 / 80)
    # what the SAG family holds by default: the Mixed values in float32
    assert m["stored_bytes"] == 4 * ((2 * 2 + 1) + (1 * 2 + 1)) and m[
        "ratio_stored"
    ] == pytest.approx(32 / 80)
    table = bmemory.format_memory_table([("conll2000", m)])
    assert "| 6.1e-04 |" in table and f"| {0.8 / 6.1e-4:.2f} |" in table
    assert f"| 4.0e-01 | {0.4 / 6.1e-4:.2f} |" in table


def test_measured_memory_from_traces(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    (d / "sag.jsonl").write_text(
        json.dumps(
            {
                "algorithm": "sag",
                "effective_passes": 1,
                "objective": 1.0,
                "state_bytes": 1000,
                "naive_state_bytes": 100000,
            }
        )
        + "\n"
    )
    (d / "lbfgs.jsonl").write_text(
        json.dumps({"algorithm": "lbfgs", "effective_passes": 1, "objective": 1.0}) + "\n"
    )
    rows = bmemory.measured_memory(bplots.load_runs(d))
    assert rows == [
        {
            "run": "sag",
            "label": "sag",
            "state_bytes": 1000,
            "naive_state_bytes": 100000,
            "ratio": 0.01,
        }
    ]
    assert "1.0e-02" in bmemory.format_memory_table([], rows)


# --------------------------------------------------------------------------- CLI


def test_cli_round_trip(cache, tmp_path, capsys):
    from crfkit.cli import main

    out = tmp_path / "cli"
    base = ["--data", "synthetic", "--limit", "30"]
    assert main(["bench", "fstar", *base, "-q"]) == 0
    assert "computed and cached" in capsys.readouterr().out
    assert main(["bench", "fstar", *base, "--json"]) == 0
    e = json.loads(capsys.readouterr().out)
    assert e["cached"] is True and e["n_train"] == 30
    plot = [] if importlib.util.find_spec("matplotlib") else ["--no-plot"]
    assert (
        main(
            ["bench", "run", *base, "-a", "lbfgs", "--passes", "2", "--out", str(out), "-q", *plot]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "| lbfgs | only |" in text and "stored state against naive SAG" in text
    assert (out / "lbfgs.jsonl").is_file() and (out / "summary.md").is_file()
    assert json.loads((out / "bench.json").read_text())["fstar"]["fstar"] == e["fstar"]
    assert main(["bench", "report", str(out), "--at", "1,2", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["fstar"] == e["fstar"] and rep["rows"][0]["run"] == "lbfgs"
    assert main(["bench", "memory", *base, str(out)]) == 0
    assert "| synthetic[:30] | observed | 30 |" in capsys.readouterr().out
    if not plot:
        figs = tmp_path / "figs"
        assert main(["bench", "plot", str(out), "--out", str(figs)]) == 0
        for name in bplots.FIGURES:
            _png_ok(figs / name)
    assert main(["bench", "list"]) == 0
    assert "conll2002-nl" in capsys.readouterr().out


def test_cli_errors_are_clear(cache, tmp_path, capsys):
    from crfkit.cli import main

    assert main(["bench", "run", "--data", "nope", "-a", "lbfgs", "--out", str(tmp_path)]) == 2
    assert "unknown benchmark data set 'nope'" in capsys.readouterr().err
    assert main(["bench", "run", "--data", "synthetic", "-a", "nope", "--out", str(tmp_path)]) == 2
    assert "optimizer 'nope' is not available" in capsys.readouterr().err
    assert main(["bench", "plot", str(tmp_path / "missing")]) == 2
    assert "no such directory" in capsys.readouterr().err
    assert main(["bench", "memory"]) == 2
    assert "give --data" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(
            [
                "bench",
                "run",
                "--data",
                "synthetic",
                "-a",
                "sg",
                "--etas",
                "1:0",
                "--out",
                str(tmp_path),
            ]
        )
    assert main(["bench"]) == 2


def test_an_interrupted_run_stops_the_benchmark(small, tmp_path, monkeypatch):
    calls = []
    inner = _fake_runner({None: 1.0}, calls)

    def run(data, spec, **kw):
        r = inner(data, spec, **kw)
        if spec.name == "sag":
            r.status = "interrupted"  # what train_corpus reports after Ctrl-C / SIGTERM
        return r

    monkeypatch.setattr(crfkit.train, "ALGORITHMS", ("lbfgs", "sag", "saga"))
    with pytest.raises(KeyboardInterrupt):
        brunner.run_benchmark(
            small,
            [brunner.Spec("lbfgs"), brunner.Spec("sag"), brunner.Spec("saga")],
            passes=2,
            out=tmp_path,
            runner=run,
            warm_up=False,
        )
    assert len(calls) == 2
    man = json.loads((tmp_path / "bench.json").read_text())
    assert [(r["name"], r["status"]) for r in man["runs"]] == [
        ("lbfgs", "max_iterations"),
        ("sag", "interrupted"),
    ]


def test_sag_runs_last_the_passes_asked_for(small, tmp_path):
    """The SAG family's own stopping rule is off in a benchmark run unless the spec sets delta: with
    delta=1e-3 sag-nus* stops early ("converged") on the small set, without it it runs the K
    passes."""
    if "sag-nus*" not in crfkit.train.ALGORITHMS:
        pytest.skip("sag-nus* is not installed")
    l2 = small.default_l2
    loose = brunner.run_one(
        small,
        brunner.Spec("sag-nus*", {"delta": 1e-3}),
        passes=40,
        trace_path=tmp_path / "a.jsonl",
        l2=l2,
    )
    assert loose.status == "converged" and loose.effective_passes < 40
    full = brunner.run_one(
        small, brunner.Spec("sag-nus*"), passes=40, trace_path=tmp_path / "b.jsonl", l2=l2
    )
    assert full.effective_passes >= 40 - 1e-9 and full.status != "converged"


def test_bench_records_a_diverged_step_size_and_goes_on(tmp_path, monkeypatch):
    from crfkit.bench import data as bdata
    from crfkit.bench import runner as brunner

    small = bdata.load("synthetic", limit=20)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        man = brunner.run_benchmark(
            small,
            [brunner.Spec("sg")],
            passes=2,
            out=tmp_path,
            etas=[1e10, 1e-2],
            l2=1e-12,
            warm_up=False,
        )
    runs = {r["params"]["eta"]: r for r in man["runs"]}
    assert runs[1e10]["status"] == "diverged" and runs[1e10]["final_objective"] is None
    assert runs[1e-2]["role"] == "best"
