"""The pure helpers of benchmarks/micro/roofline.py and micro/optimizer_passes.py (work counted
from an encoded corpus, the bound, the FMA loop's assembly check, the tree schedule, the pass
times of a trace) and the tables render_performance.py draws from their records.  No timing."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
MICRO = REPO / "benchmarks" / "micro"


def _script(path: Path, name: str):
    if not path.is_file():
        pytest.skip(f"{path.relative_to(REPO)} not in this checkout")
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def roof():
    return _script(MICRO / "roofline.py", "roofline")


@pytest.fixture(scope="module")
def passes(roof):
    return _script(MICRO / "optimizer_passes.py", "optimizer_passes")


@pytest.fixture(scope="module")
def render():
    sys.path.insert(0, str(REPO / "benchmarks"))
    return _script(REPO / "benchmarks" / "render_performance.py", "render_performance")


# A corpus of 2 sequences, L = 2, by hand: sequence 0 has tokens (a, b) and (a); sequence 1 the
# token (c).  Attribute a has 2 features, b and c one each; the bigram attribute 0 (every label
# pair: 4 features) fires at the second token of sequence 0.
SEQ_PTR = [0, 2, 3]
TOK_PTR = [0, 2, 3, 4]
ATTR = [0, 1, 0, 2]
ATTR_PTR = [0, 2, 3, 4]
BIGRAM = dict(btok_ptr=[0, 0, 1, 1], battr=[0], battr_ptr=[0, 4])


def test_counts_of_a_hand_made_corpus(roof):
    c = roof.corpus_counts(SEQ_PTR, TOK_PTR, ATTR, ATTR_PTR)
    assert c == {
        "sequences": 2,
        "tokens": 3,
        "positions": 1,  # one transition, in sequence 0
        "entries": 4,
        "gathers": 2 + 1 + 2 + 1,  # a, b | a | c
        "bigram_entries": 0,
        "bigram_weights": 0,
    }
    one = roof.corpus_counts(SEQ_PTR, TOK_PTR, ATTR, ATTR_PTR, seqs=[1])
    assert (one["sequences"], one["tokens"], one["positions"]) == (1, 1, 0)
    assert (one["entries"], one["gathers"]) == (1, 1)
    b = roof.corpus_counts(SEQ_PTR, TOK_PTR, ATTR, ATTR_PTR, **BIGRAM)
    assert (b["bigram_entries"], b["bigram_weights"]) == (1, 4)
    assert (
        roof.corpus_counts(SEQ_PTR, TOK_PTR, ATTR, ATTR_PTR, seqs=[1], **BIGRAM)["bigram_weights"]
        == 0
    )


def test_counts_of_a_corpus_encoded_by_crfkit(roof):
    """The same corpus through crfkit's encoder (observed support: a with labels A and B, b and c
    with A): the counts do not depend on the order of the ids."""
    from crfkit.features.encode import build

    X = [[["a", "b"], ["a"]], [["c"]]]
    Y = [["A", "B"], ["A"]]
    space, corpus = build(X, Y)
    assert space.n_state == 4 and space.n_labels == 2
    c = roof.corpus_counts(corpus.seq_ptr, corpus.tok_ptr, corpus.attr, space.attr_ptr)
    assert c == roof.corpus_counts(SEQ_PTR, TOK_PTR, ATTR, ATTR_PTR)


def test_work_by_hand(roof):
    c = roof.corpus_counts(SEQ_PTR, TOK_PTR, ATTR, ATTR_PTR)
    g = roof.work(c, 2, "gradient", n_state=4)
    # 3 tokens x L^2 = 4 pairs x 3 multiply-adds x 2 flops; N L exps; n_state + L^2 exp-domain
    assert g == {
        "flops": 72,
        "exps_log": 6,
        "exps_expdomain": 8,
        "gathers": 6,
        "scatters": 6,
        "bytes_gathered": 48,
        "bytes_scattered": 48,
        "bytes_streamed": 0,
    }
    v = roof.work(c, 2, "viterbi")
    assert (v["flops"], v["exps_log"], v["scatters"], v["exps_expdomain"]) == (24, 0, 0, None)
    o = roof.work(c, 2, "oracle")
    assert (o["flops"], o["exps_log"], o["scatters"]) == (72, 6 + 2 * 4, 0)  # + L^2 per call
    assert roof.work(c, 2, "oracle+step")["scatters"] == 6
    # the bigram path: 4 pair weights into M_t (and 4 pair gradients), L^2 exps at the position
    b = roof.work(roof.corpus_counts(SEQ_PTR, TOK_PTR, ATTR, ATTR_PTR, **BIGRAM), 2, "gradient")
    assert (b["flops"], b["exps_log"], b["bytes_streamed"]) == (72 + 16, 6 + 4, 64)
    bv = roof.work(roof.corpus_counts(SEQ_PTR, TOK_PTR, ATTR, ATTR_PTR, **BIGRAM), 2, "viterbi")
    assert bv["flops"] == 24 + 8 and bv["bytes_streamed"] == 32
    # a dense block of D = 3: X @ W and X^T P, 2 N D L flops each
    assert roof.work(c, 2, "gradient", n_dense=3)["flops"] == 72 + 2 * 2 * 3 * 3 * 2
    assert roof.work(c, 2, "viterbi", n_dense=3)["flops"] == 24 + 2 * 3 * 3 * 2
    with pytest.raises(ValueError, match="unknown pass"):
        roof.work(c, 2, "backward")


def test_bound_takes_the_largest_term_and_halves_on_two_cores(roof):
    w = {"flops": 100, "exps_log": 30, "exps_expdomain": 3, "gathers": 10, "scatters": 10}
    peaks = {"flops": 50.0, "exps": 10.0, "gathers": 20.0, "scatters": 5.0}
    b = roof.bound(w, peaks)
    assert b["terms"] == {"flops": 2.0, "exps": 3.0, "gathers": 0.5 + 2.0}
    assert b["binding"] == "exps" and b["seconds"] == 3.0
    e = roof.bound(w, peaks, exp_domain=True, cores=2)
    assert e["binding"] == "gathers" and e["seconds"] == pytest.approx(1.25)
    assert e["terms"]["exps"] == pytest.approx(0.15)


def test_vector_fma_reads_the_accumulators_of_the_assembly(roof):
    zmm = "\n".join(f"\tvfmadd213pd\t%zmm1, %zmm17, %zmm{k}" for k in range(16))
    assert roof.vector_fma(zmm + "\n\tvmovupd\t%zmm16, (%rax)") == "zmm x16"
    assert roof.vector_fma("\tvfmadd231pd\t%ymm2, %ymm3, %ymm4\n") == "ymm x1"
    assert roof.vector_fma("\tvfmadd231sd\t%xmm0, %xmm1, %xmm2\n") == "xmm x1"
    assert roof.vector_fma("\tvaddpd\t%zmm0, %zmm1, %zmm2\n") == "none"


def test_trees_take_turns_and_repeated_paths_get_distinct_columns(roof):
    # every tree once per repetition, the order reversed every other one (A B, B A, A B)
    assert roof.schedule(2, 3) == [(0, 0), (0, 1), (1, 1), (1, 0), (2, 0), (2, 1)]
    assert roof.schedule(1, 2) == [(0, 0), (1, 0)]
    assert roof.tree_labels(["base/src", "src"]) == ["base/src", "src"]
    assert roof.tree_labels(["src", "b", "src"]) == ["src#1", "b", "src#3"]


def test_summary_and_formats(roof):
    assert roof.summary([3.0, 1.0, None, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0, "n": 3}
    assert roof.summary([None]) is None
    assert roof.fmt_time(2.5) == "2.5 s" and roof.fmt_time(0.0123) == "12.3 ms"
    assert roof.fmt_time(4.2e-5) == "42 us"
    assert roof.fmt_count(30_637_525) == "30.6M" and roof.fmt_count(4.12e9) == "4.12G"
    s = roof.summary([0.3, 0.2, 0.25])
    assert roof.fmt_summary(s) == "250 ms (200 ms-300 ms)"
    assert roof.markdown(["a", "b"], [["x|y", 1]]) == "| a | b |\n|---|---|\n| x\\|y | 1 |"


def test_exp_domain_rule(roof):
    from crfkit.features.encode import build

    space, corpus = build([[["a", "b"], ["a"]], [["c"]]], [["A", "B"], ["A"]])
    w = np.full(space.n_features, 0.1)
    assert roof._exp_domain(space, corpus, w)
    w[0] = 200.0  # 200 x 2 entries > 300: the log domain
    assert not roof._exp_domain(space, corpus, w)
    dspace, dcorpus = build(None, [["A", "B"]], dense=[np.ones((2, 3))])
    assert not roof._exp_domain(dspace, dcorpus, np.zeros(dspace.n_features))


def test_pass_times_of_a_trace(passes):
    sgd = [
        {"iteration": 1, "effective_passes": 1.0, "wall_s": 2.0, "monitor_s": 0.5},
        {"iteration": 2, "effective_passes": 2.0, "wall_s": 3.0, "monitor_s": 0.7},
        {"iteration": 3, "effective_passes": 3.0, "wall_s": 4.2, "monitor_s": 0.9},
    ]
    t = passes.pass_times(sgd)
    # (4.2 - 0.9) - (2.0 - 0.5) = 1.8 s over 2 iterations and 2 passes
    assert t["per_iteration"] == pytest.approx(0.9) and t["per_pass"] == pytest.approx(0.9)
    assert (t["iterations"], t["passes"]) == (2, 2.0)
    lbfgs = [
        {"iteration": 1, "effective_passes": 3.0, "wall_s": 1.0},
        {"iteration": 2, "effective_passes": 4.0, "wall_s": 1.5},
        {"iteration": 3, "effective_passes": 6.0, "wall_s": 2.5},
    ]
    t = passes.pass_times(lbfgs)
    assert t["per_iteration"] == pytest.approx(0.75) and t["per_pass"] == pytest.approx(0.5)
    assert "cpu_per_pass" not in t
    # CPU seconds at each record: (9.0 - 5.0) over 2 iterations and 3 passes, no monitoring
    t = passes.pass_times(lbfgs, [5.0, 7.0, 9.0])
    assert t["cpu_per_iteration"] == pytest.approx(2.0) and t["cpu_per_pass"] == pytest.approx(
        4 / 3
    )
    # with monitoring: 5.0 CPU seconds over 2.2 s of wall time of which 0.4 s monitoring: the
    # share 1.8 / 2.2 of them, over 2 iterations
    t = passes.pass_times(sgd, [1.0, 3.5, 6.0])
    assert t["cpu_per_iteration"] == pytest.approx(5.0 * 1.8 / 2.2 / 2)
    assert passes.pass_times(sgd, [1.0])["cpu_per_iteration"] is None  # stamps do not match
    assert passes.pass_times(lbfgs[:1])["per_pass"] is None
    assert passes.pass_times([])["per_iteration"] is None


def test_iterations_option(passes):
    assert passes.parse_iterations("lbfgs=11, bcd=2") == {"lbfgs": 11, "bcd": 2}
    assert passes.parse_iterations("") == {}
    with pytest.raises(ValueError, match="unknown algorithm"):
        passes.parse_iterations("adam=3")
    with pytest.raises(ValueError, match=">= 2"):
        passes.parse_iterations("bcd=1")
    # every optimizer the chain-oracle work names is measured, under crfkit's names
    from crfkit.optim.stochastic import REGISTRY

    assert list(passes.ALGORITHMS) == [
        "lbfgs",
        "sag-nus*",
        "sdca",
        "l2sgd",
        "ngd",
        "sgd-l1",
        "bcd",
    ]
    assert all(a in REGISTRY for a in passes.ALGORITHMS if a != "lbfgs")


def _rec(date, task, value, commit="abcdef1234"):
    return {
        "benchmark": "benchmarks/micro/roofline.py",
        "command": "python benchmarks/micro/roofline.py --src a --src b",
        "date": date,
        "commit": commit,
        "machine": None,
        "figures": {
            "section": "Kernels against the machine's limits",
            "task": task,
            "columns": ["data set", "measure", "a", "b"],
            "rows": [["conll2000", "time", value, value]],
            "trees": [{"label": "a", "commit": "1234567890"}, {"label": "b", "commit": None}],
        },
        "notes": "load average 1.00-2.00",
    }


def test_render_shows_the_latest_table_of_each_task(render, tmp_path):
    lines = [
        _rec("2026-12-01", "the chain oracle", "old"),
        _rec("2026-12-02", "the chain oracle", "new"),
        _rec("2026-12-01", "passes", "p"),
        {"benchmark": "x", "figures": {"peer_family": "Wapiti", "task": "t", "rows": []}},
    ]
    (tmp_path / "roofline.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    recs = render.tables(str(tmp_path))
    # the latest record of each task, in the order of those records (by date)
    assert [r["figures"]["task"] for r in recs] == ["passes", "the chain oracle"]
    text = "\n".join(render.render_tables(recs))
    assert text.count("## Kernels against the machine's limits") == 1
    assert "| a (1234567) | b |" in text
    assert "| conll2000 | time | new | new |" in text and "old" not in text
    assert "load average 1.00-2.00" in text
    page = render.render({}, False, recs)
    assert page.startswith("# Performance") and "### The chain oracle" in page
