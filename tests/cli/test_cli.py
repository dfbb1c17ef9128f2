"""The command line, run in-process through ``crfkit.cli.main``."""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import run_cli as run
from crfkit import cli
from crfkit.datasets import synthetic
from crfkit.metrics import conlleval, conlleval_lines
from crfkit.model import CRFModel
from crfkit.pipeline import tag_columns


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("cli")
    synthetic.write(d / "train.txt", 60, seed=1)
    synthetic.write(d / "test.txt.gz", 20, seed=2)
    return {"dir": d, "train": d / "train.txt", "test": d / "test.txt.gz"}


@pytest.fixture(scope="module")
def model(data) -> Path:
    path = data["dir"] / "model.crfkit"
    rc = cli.main(["train", str(data["train"]), "-m", str(path), "--max-iterations", "20", "-q"])
    assert rc == 0
    return path


def test_train_prints_progress_and_summary(data, tmp_path, capsys):
    m = tmp_path / "m.crfkit"
    tr = tmp_path / "trace.jsonl"
    tpl = tmp_path / "template.txt"
    tpl.write_text("# words and POS\nU00:%x[0,0]\nU01:%x[-1,1]/%x[0,1]\nU02:%x[0,1]\n\nB\n")
    rc, out, err = run(
        capsys,
        "train",
        data["train"],
        "-m",
        m,
        "-t",
        tpl,
        "--c2",
        "0.5",
        "--max-iterations",
        "4",
        "--trace",
        tr,
        "--dev",
        data["test"],
        "--threads",
        "1",
    )
    assert rc == 0, err
    assert "iter    1" in err and "dev F1" in err
    assert "model:" in out and "features:" in out and "4 iterations" in out and "objective" in out
    assert "c2=0.5" in out
    assert len(tr.read_text().splitlines()) == 4
    loaded = CRFModel.load(m)
    assert loaded.meta["iterations"] == 4
    assert "U01:%x[-1,1]/%x[0,1]" in loaded.meta["templates"]
    assert loaded.meta["l2"] == pytest.approx(2 * 0.5 / 60)


def test_quiet_train_and_regularisation_conventions(data, tmp_path, capsys):
    m = tmp_path / "m.crfkit"
    rc, out, err = run(
        capsys,
        "train",
        data["train"],
        "-m",
        m,
        "--rho2",
        "3",
        "--max-iterations",
        "2",
        "-q",
        "--no-pad",
        "--support",
        "all",
        "--transitions",
        "all",
    )
    assert rc == 0 and err == ""
    meta = CRFModel.load(m).meta
    assert meta["l2"] == pytest.approx(3 / 60)
    assert meta["template_pad"] is False and meta["support"] == "all"


def test_tag_eval_info_round_trip(data, model, tmp_path, capsys):
    out_file = tmp_path / "tagged.txt"
    rc, out, err = run(capsys, "tag", "-m", model, data["test"], "-o", out_file, "--eval")
    assert rc == 0, err
    assert out == ""
    lines = out_file.read_text().splitlines()
    assert all(len(line.split("\t")) == 4 for line in lines if line)
    # the model read back from disk tags as the pipeline does
    res = tag_columns(CRFModel.load(model), data["test"])
    pred = [line.split("\t")[-1] for line in lines if line]
    assert pred == [lab for ys in res.labels for lab in ys]
    # --eval prints conlleval's report on stderr
    expected = conlleval(res.gold, res.labels).format()
    assert err == expected
    # crfkit eval over the tagged file prints exactly conlleval's report
    rc, out, err = run(capsys, "eval", out_file)
    assert rc == 0 and out == expected
    rc, out, _ = run(capsys, "eval", out_file, "--no-iobes", "-r")
    with open(out_file) as f:
        assert out == conlleval_lines(f, raw=True, iobes=False).format()
    # info
    rc, out, err = run(capsys, "info", "-m", model, "--top", "5")
    assert rc == 0
    m = CRFModel.load(model)
    assert f"labels ({len(m.labels)}): " in out
    assert f"state features: {m.space.n_state}" in out
    assert f"non-zero weights: {m.n_active}" in out
    assert "algorithm=lbfgs" in out and "iterations=20" in out
    assert "transition weights" in out and "top 5 state features" in out
    top = out.split("top 5 state features by |weight|:\n")[1].splitlines()
    assert len(top) == 5 and m.top_features(1)[0][0] in top[0]


def test_tag_stdin_without_labels_to_stdout(data, model, capsys, monkeypatch):
    text = gzip.decompress(data["test"].read_bytes()).decode()
    stripped = "\n".join(" ".join(line.split()[:2]) for line in text.splitlines()) + "\n"
    monkeypatch.setattr(sys, "stdin", io.StringIO(stripped))
    rc, out, err = run(capsys, "tag", "-m", model)
    assert rc == 0, err
    rows = [line.split("\t") for line in out.splitlines() if line]
    assert all(len(r) == 3 for r in rows)
    assert out.count("\n\n") == 20 and out.endswith("\n\n")  # a blank line after each sentence


def test_tag_marginals_and_probability(data, model, capsys):
    rc, out, err = run(capsys, "tag", "-m", model, data["test"], "--marginals", "--probability")
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("# ")
    p = float(lines[0][2:])
    assert 0.0 < p <= 1.0
    assert sum(1 for line in lines if line.startswith("# ")) == 20
    tok = lines[1].split("\t")
    lab, prob = tok[-1].rsplit("/", 1)
    assert lab in CRFModel.load(model).labels and p <= float(prob) + 1e-6 <= 1.0 + 1e-6


def test_tag_explicit_no_labels_on_labelled_file_is_an_error(data, model, capsys):
    rc, out, err = run(capsys, "tag", "-m", model, data["test"], "--no-labels")
    assert rc == 2
    assert (
        err.startswith("crfkit: error: ")
        and "observation columns" in err
        and "Traceback" not in err
    )


def test_tag_eval_without_gold_is_an_error(data, model, tmp_path, capsys):
    p = tmp_path / "nolab.txt"
    p.write_text("the DT\ncat NN\n")
    rc, out, err = run(capsys, "tag", "-m", model, p, "--eval")
    assert rc == 2 and "gold labels" in err


def test_missing_files_are_named(data, model, tmp_path, capsys):
    missing = tmp_path / "nope.txt"
    rc, out, err = run(capsys, "train", missing, "-m", tmp_path / "m.crfkit")
    assert rc == 2 and f"crfkit: error: {missing}: cannot open" in err and "Traceback" not in err
    rc, out, err = run(capsys, "tag", "-m", tmp_path / "nomodel.crfkit", data["test"])
    assert rc == 2 and "nomodel.crfkit" in err
    rc, out, err = run(capsys, "tag", "-m", model, missing)
    assert rc == 2 and str(missing) in err
    rc, out, err = run(capsys, "eval", missing)
    assert rc == 2 and str(missing) in err
    rc, out, err = run(capsys, "train", data["train"], "-m", tmp_path / "m.crfkit", "-t", missing)
    assert rc == 2 and str(missing) in err
    rc, out, err = run(capsys, "info", "-m", missing)
    assert rc == 2 and str(missing) in err
    rc, out, err = run(capsys, "train", data["train"], "-m", tmp_path / "no" / "dir" / "m.crfkit")
    assert rc == 2 and "does not exist" in err


@pytest.mark.parametrize(
    "args,message",
    [
        (["-a", "saga", "-p", "step=c"], "saga: step must be 'a' or 'b'"),
        (["-a", "sag-nus*", "-p", "store=float16"], "store must be 'float32' or 'float64'"),
        (["-a", "sag", "-p", "bogus=1"], "unexpected keyword argument 'bogus'"),
        (["-a", "sgd-l1", "--c1", "1", "-p", "eta0=-1"], "eta0 must be a positive number"),
        (["-a", "sg", "-p", "eta=0"], "eta must be > 0"),
        (["-a", "bcd", "--c1", "1", "-p", "order=sideways"], "unknown order"),
        (["-a", "lbfgs", "-p", "eta=1"], "takes no optimizer parameters"),
    ],
)
def test_bad_optimizer_parameters_are_errors_not_tracebacks(data, tmp_path, capsys, args, message):
    m = tmp_path / "m.crfkit"
    rc, out, err = run(capsys, "train", data["train"], "-m", m, "--max-iterations", "1", *args)
    assert rc == 2 and message in err and "Traceback" not in err
    assert not m.exists()


def test_ragged_train_file_names_file_and_line(tmp_path, capsys):
    p = tmp_path / "ragged.txt"
    p.write_text("He PRP B-NP\nreckons VBZ B-VP\n\nthe DT\n")
    m = tmp_path / "m.crfkit"
    rc, out, err = run(capsys, "train", p, "-m", m)
    assert rc == 2
    assert f"{p}:4:" in err and "ragged" in err and "Traceback" not in err
    assert not m.exists()


def test_template_beyond_columns_names_data_line(data, tmp_path, capsys):
    tpl = tmp_path / "t.txt"
    tpl.write_text("U00:%x[0,7]\nB\n")
    rc, out, err = run(capsys, "train", data["train"], "-m", tmp_path / "m.crfkit", "-t", tpl)
    assert rc == 2 and f"{data['train']}:1:" in err and "column 7" in err


def test_bad_template_file(data, tmp_path, capsys):
    tpl = tmp_path / "t.txt"
    tpl.write_text("U00:%x[0,0]\nX01:oops\n")
    rc, out, err = run(capsys, "train", data["train"], "-m", tmp_path / "m.crfkit", "-t", tpl)
    assert rc == 2 and f"{tpl}:2:" in err


def test_bad_model_file(tmp_path, data, capsys):
    p = tmp_path / "bad.crfkit"
    p.write_bytes(b"not a model")
    rc, out, err = run(capsys, "tag", "-m", p, data["test"])
    assert rc == 2 and "not a crfkit model" in err


def test_l1_with_lbfgs_runs_owlqn(data, tmp_path, capsys):
    # as in CRFsuite: -a lbfgs with an L1 term trains with OWL-QN, and L1 gives exact zeros
    rc, out, err = run(capsys, "train", data["train"], "-m", tmp_path / "m.crfkit", "--c1", "1")
    assert rc == 0 and "training: owlqn" in out
    m = re.search(r"features: (\d+) .*non-zero weights: (\d+)", out)
    assert m and int(m.group(2)) < int(m.group(1))


def test_bad_option_values_are_usage_errors(data, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["train", str(data["train"]), "-m", str(tmp_path / "m"), "--c2", "-1"])
    assert e.value.code == 2
    with pytest.raises(SystemExit):
        cli.main(["train", str(data["train"]), "-m", str(tmp_path / "m"), "--c2", "1", "--l2", "1"])
    capsys.readouterr()


def test_no_command_prints_help(capsys):
    rc, out, err = run(capsys)
    assert rc == 2 and "train" in err


def test_interrupted_training_still_writes_the_model(data, tmp_path, capsys, monkeypatch):
    from crfkit import objective

    real = objective.Objective.value_and_grad
    calls = {"n": 0}

    def flaky(self, w):
        calls["n"] += 1
        if calls["n"] > 4:
            raise KeyboardInterrupt
        return real(self, w)

    monkeypatch.setattr(objective.Objective, "value_and_grad", flaky)
    m = tmp_path / "m.crfkit"
    rc, out, err = run(capsys, "train", data["train"], "-m", m)
    assert rc == 130
    assert "interrupted" in err and str(m) in err
    loaded = CRFModel.load(m)
    assert loaded.meta["status"] == "interrupted"
    assert loaded.meta["iterations"] >= 1
    assert "status: interrupted" in out


def test_interrupt_before_the_optimizer_writes_nothing(data, tmp_path, capsys, monkeypatch):
    from crfkit import objective

    def boom(self, w):
        raise KeyboardInterrupt

    monkeypatch.setattr(objective.Objective, "value_and_grad", boom)
    m = tmp_path / "m.crfkit"
    rc, out, err = run(capsys, "train", data["train"], "-m", m)
    assert rc == 130 and "no model" in err
    assert not m.exists()
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".tmp")]


def test_model_trained_from_attribute_lists_cannot_tag(tmp_path, data, capsys):
    from crfkit.train import train

    m = tmp_path / "attr.crfkit"
    train([[["a"], ["b"]]], [["X", "Y"]], max_iterations=2).model.save(m)
    rc, out, err = run(capsys, "tag", "-m", m, data["test"])
    assert rc == 2 and "no feature templates" in err
    rc, out, err = run(capsys, "info", "-m", m)
    assert rc == 0 and "templates: none" in out


def test_demo_falls_back_to_synthetic(tmp_path, capsys):
    out_dir = tmp_path / "runs"
    rc, out, err = run(
        capsys,
        "demo",
        "--data-dir",
        tmp_path / "empty",
        "--out",
        out_dir,
        "--max-iterations",
        "3",
        "--synthetic-sentences",
        "40",
        "--threads",
        "1",
    )
    assert rc == 0, err
    lines = out.strip().splitlines()
    assert "SYNTHETIC" in lines[0] and "NOT found" in lines[0]
    assert "SYNTHETIC" in lines[-1] and "F1" in lines[-1]
    assert "NOT found" in err
    assert "processed" in out and "token accuracy" in out and "tokens/s" in out
    assert (out_dir / "synthetic-chunker.crfkit").is_file()
    assert (out_dir / "synthetic" / "train.txt.gz").is_file()
    # the tagged test set is what `crfkit eval` reads
    rc, out2, _ = run(capsys, "eval", out_dir / "synthetic-test.tagged.txt")
    assert rc == 0 and out2 in out


def test_demo_uses_conll2000_when_present(tmp_path, capsys):
    d = tmp_path / "data" / "conll2000"
    synthetic.write(d / "train.txt.gz", 30, seed=5)
    synthetic.write(d / "test.txt.gz", 10, seed=6)
    rc, out, err = run(
        capsys,
        "demo",
        "--data-dir",
        tmp_path / "data",
        "--out",
        tmp_path / "runs",
        "--max-iterations",
        "2",
    )
    assert rc == 0, err
    lines = out.strip().splitlines()
    assert "CoNLL-2000" in lines[0] and "SYNTHETIC" not in lines[0]
    assert "CoNLL-2000" in lines[-1]
    assert (tmp_path / "runs" / "conll2000-chunker.crfkit").is_file()


def test_python_dash_m_help():
    r = subprocess.run(
        [sys.executable, "-m", "crfkit", "--help"], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0
    for cmd in ("train", "tag", "eval", "info", "demo"):
        assert cmd in r.stdout


# --------------------------------------------------------------------------- progress bars, tag
# options


class _TTY(io.StringIO):
    def isatty(self):
        return True


def _train_on_a_terminal(monkeypatch, *argv) -> tuple[int, str]:
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    err = _TTY()
    monkeypatch.setattr(sys, "stderr", err)
    rc = cli.main([str(a) for a in argv])
    return rc, err.getvalue()


def test_train_on_a_terminal_draws_bars_instead_of_iteration_lines(
    data, tmp_path, monkeypatch, capsys
):
    rc, err = _train_on_a_terminal(
        monkeypatch,
        "train",
        data["train"],
        "-m",
        tmp_path / "m.crfkit",
        "--max-iterations",
        "5",
        "--threads",
        "1",
    )
    assert rc == 0, err
    assert (
        "\r" in err and "features: 60/60" in err and "training: 5/5 (100%)" in err and "obj " in err
    )
    assert "iter    1" not in err  # the bar replaces them
    assert "crfkit lbfgs: 60 sequences" in err  # other log lines stay
    assert "model:" in capsys.readouterr().out


def test_train_on_a_terminal_verbose_keeps_iteration_lines_quiet_silences_all(
    data, tmp_path, monkeypatch
):
    rc, err = _train_on_a_terminal(
        monkeypatch,
        "train",
        data["train"],
        "-m",
        tmp_path / "m.crfkit",
        "--max-iterations",
        "3",
        "-v",
        "--threads",
        "1",
    )
    assert rc == 0 and "iter    3" in err and "training: 3/3" in err
    rc, err = _train_on_a_terminal(
        monkeypatch,
        "train",
        data["train"],
        "-m",
        tmp_path / "m.crfkit",
        "--max-iterations",
        "3",
        "-q",
    )
    assert rc == 0 and err == ""


def test_train_bars_stay_off_under_ci_and_without_iteration_limit(data, tmp_path, monkeypatch):
    monkeypatch.setenv("CI", "1")
    err = _TTY()
    monkeypatch.setattr(sys, "stderr", err)
    assert (
        cli.main(
            ["train", str(data["train"]), "-m", str(tmp_path / "m.crfkit"), "--max-iterations", "2"]
        )
        == 0
    )
    assert "\r" not in err.getvalue() and "iter    2" in err.getvalue()
    rc, err = _train_on_a_terminal(
        monkeypatch,
        "train",
        data["train"],
        "-m",
        tmp_path / "m.crfkit",
        "--epsilon",
        "1e-2",
        "--threads",
        "1",
    )
    assert rc == 0 and "training: " in err and "/" not in err.split("training: ")[-1].split()[0]


def _parse_all_marginals(fields: list[str], sep: str, labels: list[str]) -> dict:
    pairs = [f.rsplit(sep, 1) for f in fields]
    assert [lab for lab, _ in pairs] == labels  # every label, in model order
    return {lab: float(p) for lab, p in pairs}


def test_tag_all_marginals_columns(data, model, capsys):
    m = CRFModel.load(model)
    labels = list(m.labels)
    rc, out, err = run(
        capsys, "tag", "-m", model, data["test"], "--all-marginals", "--marginals", "--probability"
    )
    assert rc == 0, err
    res = tag_columns(m, data["test"], all_marginals=True)
    assert res.label_names == labels and len(res.all_marginals) == 20
    assert res.all_marginals[0].shape == (len(res.sentences[0].columns), len(labels))
    rows = [line.split("\t") for line in out.splitlines() if line and not line.startswith("# ")]
    assert len(rows) == sum(len(s.columns) for s in res.sentences)
    for r in rows:
        assert len(r) == 4 + len(labels)  # word, POS, gold, pred/p, then one column per label
        pred, p = r[3].rsplit("/", 1)
        probs = _parse_all_marginals(r[4:], "/", labels)
        assert sum(probs.values()) == pytest.approx(1.0, abs=1e-5)
        assert probs[pred] == pytest.approx(float(p), abs=1e-6)
    # without --marginals the predicted label stays bare
    rc, out, err = run(capsys, "tag", "-m", model, data["test"], "--all-marginals")
    first = out.splitlines()[0].split("\t")
    assert first[3] in labels and len(first) == 4 + len(labels)


def test_tag_all_marginals_is_one_decoding_pass(data, model, monkeypatch):
    m = CRFModel.load(model)
    calls = []
    orig = CRFModel.decode

    def counting(self, *a, **k):
        calls.append(k.get("marginals"))
        return orig(self, *a, **k)

    monkeypatch.setattr(CRFModel, "decode", counting)
    res = tag_columns(m, data["test"], all_marginals=True, marginals=True)
    assert calls == [True] and res.marginals is not None and res.probabilities is not None


@pytest.fixture(scope="module")
def crfsuite_data(data, tmp_path_factory) -> dict:
    from crfkit.features.templates import default_chunking_templates
    from crfkit.io.crfsuite import write_crfsuite
    from crfkit.pipeline import attributes_of

    d = tmp_path_factory.mktemp("cli_crfsuite")
    for name, n, seed in (("train", 60, 1), ("test", 10, 2)):
        sents = synthetic.generate(n, seed)
        write_crfsuite(
            attributes_of(sents, default_chunking_templates()),
            d / f"{name}.txt",
            [s.labels for s in sents],
        )
    path = d / "model.crfkit"
    assert (
        cli.main(
            [
                "train",
                str(d / "train.txt"),
                "-m",
                str(path),
                "--format",
                "crfsuite",
                "--max-iterations",
                "10",
                "-q",
                "--threads",
                "1",
            ]
        )
        == 0
    )
    return {"train": d / "train.txt", "test": d / "test.txt", "model": path}


def test_tag_crfsuite_all_marginals(crfsuite_data, capsys):
    labels = list(CRFModel.load(crfsuite_data["model"]).labels)
    rc, out, err = run(
        capsys,
        "tag",
        "-m",
        crfsuite_data["model"],
        "--format",
        "crfsuite",
        crfsuite_data["test"],
        "--all-marginals",
        "--marginals",
        "-r",
    )
    assert rc == 0, err
    rows = [line.split("\t") for line in out.splitlines() if line]
    assert rows and all(len(r) == 2 + len(labels) for r in rows)
    for gold, pred_p, *rest in rows:
        pred, p = pred_p.rsplit(":", 1)
        probs = _parse_all_marginals(rest, ":", labels)
        assert (
            probs[pred]
            == pytest.approx(float(p), abs=1e-6)
            == pytest.approx(max(probs.values()), abs=0.5)
        )
        assert sum(probs.values()) == pytest.approx(1.0, abs=1e-5)


def _pipe(args: list, stdin: bytes) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "crfkit", *map(str, args)],
        input=stdin,
        capture_output=True,
        timeout=120,
    )


def test_tag_reads_standard_input_in_a_subprocess(data, model, crfsuite_data):
    text = gzip.decompress(data["test"].read_bytes())
    want = subprocess.run(
        [
            sys.executable,
            "-m",
            "crfkit",
            "tag",
            "-m",
            str(model),
            str(data["test"]),
            "--probability",
        ],
        capture_output=True,
        timeout=120,
    )
    assert want.returncode == 0, want.stderr
    for args in (["tag", "-m", model, "--probability"], ["tag", "-m", model, "-", "--probability"]):
        r = _pipe(args, text)
        assert r.returncode == 0, r.stderr
        assert r.stdout == want.stdout
    att = crfsuite_data["test"].read_bytes()
    ref = _pipe(
        [
            "tag",
            "-m",
            crfsuite_data["model"],
            "--format",
            "crfsuite",
            crfsuite_data["test"],
            "--probability",
        ],
        b"",
    )
    assert ref.returncode == 0, ref.stderr
    assert ref.stdout.startswith(b"@probability\t")
    for args in (
        ["tag", "-m", crfsuite_data["model"], "--format", "crfsuite", "--probability"],
        ["tag", "-m", crfsuite_data["model"], "--format", "auto", "-", "--probability"],
    ):
        r = _pipe(args, att)
        assert r.returncode == 0, r.stderr
        assert r.stdout == ref.stdout


def test_train_crfsuite_format_on_a_terminal_draws_bars(crfsuite_data, tmp_path, monkeypatch):
    rc, err = _train_on_a_terminal(
        monkeypatch,
        "train",
        crfsuite_data["train"],
        "-m",
        tmp_path / "m.crfkit",
        "--format",
        "crfsuite",
        "--max-iterations",
        "3",
        "--threads",
        "1",
    )
    assert rc == 0, err
    assert (
        "reading " in err and ": 60 " in err and "training: 3/3" in err and "iter    1" not in err
    )


def test_checkpoint_and_resume_give_the_uninterrupted_model(data, tmp_path, capsys):
    # a run cut short by the iteration limit, then resumed, ends where a straight run ends
    common = ("--threads", "1", "--max-iterations", "12", "-q")
    rc, _, _ = run(capsys, "train", data["train"], "-m", tmp_path / "straight.crfkit", *common)
    assert rc == 0
    ck = tmp_path / "run.ckpt"
    rc, _, _ = run(
        capsys,
        "train",
        data["train"],
        "-m",
        tmp_path / "part.crfkit",
        "--threads",
        "1",
        "--max-iterations",
        "5",
        "-q",
        "--checkpoint",
        ck,
    )
    assert rc == 0 and ck.exists()
    rc, _, _ = run(
        capsys, "train", data["train"], "-m", tmp_path / "resumed.crfkit", *common, "--resume", ck
    )
    assert rc == 0
    a = CRFModel.load(tmp_path / "straight.crfkit")
    b = CRFModel.load(tmp_path / "resumed.crfkit")
    assert a.space.attributes == b.space.attributes
    np.testing.assert_array_equal(a.weights, b.weights)
    # a checkpoint of other data is refused with a clear error
    rc, _, err = run(
        capsys, "train", data["test"], "-m", tmp_path / "x.crfkit", *common, "--resume", ck
    )
    assert rc == 2 and "checkpoint" in err.lower()


def test_init_model_warm_start(data, tmp_path, capsys):
    rc, _, _ = run(
        capsys,
        "train",
        data["train"],
        "-m",
        tmp_path / "a.crfkit",
        "--threads",
        "1",
        "-q",
        "--trace",
        tmp_path / "a.jsonl",
    )
    assert rc == 0
    rc, out, _ = run(
        capsys,
        "train",
        data["train"],
        "-m",
        tmp_path / "b.crfkit",
        "--threads",
        "1",
        "-q",
        "--init-model",
        tmp_path / "a.crfkit",
        "--trace",
        tmp_path / "b.jsonl",
    )
    assert rc == 0
    a = [json.loads(line) for line in open(tmp_path / "a.jsonl")]
    b = [json.loads(line) for line in open(tmp_path / "b.jsonl")]
    # the warm run starts where the first one ended (CRFsuite's delta rule still needs `period`
    # iterations of history before it can stop, so the iteration count says little)
    assert b[0]["objective"] <= a[-1]["objective"] * (1 + 1e-9)
    assert a[0]["objective"] > a[-1]["objective"] * 1.01
    rc, _, err = run(
        capsys,
        "train",
        data["train"],
        "-m",
        tmp_path / "c.crfkit",
        "--init-model",
        tmp_path / "a.crfkit",
        "--resume",
        tmp_path / "none.ckpt",
    )
    assert rc == 2 and "exclude" in err


def test_unseen_gold_labels_are_tagged_and_reported(data, model, tmp_path, capsys):
    # a gold label the model never saw: the file is tagged anyway, and eval says so
    lines = gzip.open(data["test"], "rt").read().splitlines()
    edited, done = [], 0
    for line in lines:
        if line.strip() and done < 3:
            cols = line.split()
            cols[-1] = "B-NEWTYPE"
            line = " ".join(cols)
            done += 1
        edited.append(line)
    p = tmp_path / "unseen.txt"
    p.write_text("\n".join(edited) + "\n")
    rc, out, err = run(capsys, "tag", "-m", model, p, "--eval")
    assert rc == 0 and out.strip()
    assert "never saw" in err and "B-NEWTYPE (3)" in err
    assert "processed" in err  # the conlleval report is still there


def test_train_lbfgs_history_option(data, tmp_path):
    from crfkit.model import CRFModel

    m = tmp_path / "m32.crfkit"
    assert (
        cli.main(
            [
                "train",
                str(data["train"]),
                "-m",
                str(m),
                "--max-iterations",
                "5",
                "-q",
                "--lbfgs-history",
                "float32",
            ]
        )
        == 0
    )
    assert CRFModel.load(m).meta["lbfgs_history"] == "float32"
    m = tmp_path / "m64.crfkit"
    assert cli.main(["train", str(data["train"]), "-m", str(m), "--max-iterations", "5", "-q"]) == 0
    assert CRFModel.load(m).meta["lbfgs_history"] == "float64"


def test_sgd_l1_without_c1_says_it_trains_l2_only(chunker, tmp_path, capsys):
    rc, out, err = run(
        capsys,
        "train",
        chunker["dir"] / "train.txt",
        "-m",
        tmp_path / "m.crfkit",
        "-a",
        "sgd-l1",
        "--max-iterations",
        "1",
    )
    assert rc == 0 and "without --c1" in err and "L2" in err
    rc, out, err = run(
        capsys,
        "train",
        chunker["dir"] / "train.txt",
        "-m",
        tmp_path / "m.crfkit",
        "-a",
        "sgd-l1",
        "--max-iterations",
        "1",
        "--c1",
        "0.1",
    )
    assert "without --c1" not in err


def test_interrupt_message_is_not_an_error(chunker, tmp_path, capsys, monkeypatch):
    import crfkit.pipeline as pl

    real = pl.train_columns

    def interrupted(*a, **kw):
        res = real(*a, **{**kw, "max_iterations": 2})
        res.status = "interrupted"
        return res

    monkeypatch.setattr(pl, "train_columns", interrupted)
    rc, out, err = run(
        capsys, "train", chunker["dir"] / "train.txt", "-m", tmp_path / "m.crfkit", "-q"
    )
    assert rc == 130
    assert "error" not in err and "was saved to" in err and "interrupted" in err
    assert CRFModel.load(tmp_path / "m.crfkit").n_active > 0
