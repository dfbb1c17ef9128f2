"""The rough edges of a new user's first hour (issue 46, part 5): eval on POS tags, the progress
lines of non-chunk labels and of SDCA, the n-best return types, the message after an interrupted run
with a checkpoint, the bench plot's colours and markers."""

from __future__ import annotations

import random

import pytest

from conftest import run_cli


def _pos_problem(seed=0, n=30):
    rnd = random.Random(seed)
    lex = {"the": "DT", "a": "DT", "cat": "NN", "dog": "NN", "sat": "VBD", "ran": "VBD", ".": "."}
    words = list(lex)
    X, Y = [], []
    for _ in range(n):
        ws = [rnd.choice(words) for _ in range(rnd.randint(2, 6))]
        X.append([[f"w={w}"] for w in ws])
        Y.append([lex[w] for w in ws])
    return X, Y


def _chunk_problem(seed=0, n=30):
    rnd = random.Random(seed)
    X, Y = [], []
    for _ in range(n):
        xs, ys = [], []
        for _ in range(rnd.randint(1, 3)):
            if rnd.random() < 0.6:
                xs += [["w=the"], [f"w={rnd.choice(['cat', 'dog'])}"]]
                ys += ["B-NP", "I-NP"]
            else:
                xs.append([f"w={rnd.choice(['sat', 'ran'])}"])
                ys.append("B-VP")
        X.append(xs)
        Y.append(ys)
    return X, Y


# ----------------------------------------------------------------------------- crfkit eval
def test_eval_on_pos_tags_prints_accuracy_not_f1_zero(tmp_path, capsys):
    f = tmp_path / "pos.tagged"
    f.write_text("the DT DT\ncat NN NN\nsat VBD NN\n\na DT DT\ndog NN NN\n")
    rc, out, err = run_cli(capsys, "eval", f)
    assert rc == 0, err
    assert "not chunk tags" in out and "accuracy:  80.00%" in out, out
    assert "FB1" not in out and "phrases" not in out
    # -r: every tag a chunk, conlleval's report
    rc, out, _ = run_cli(capsys, "eval", "-r", f)
    assert rc == 0 and "FB1" in out and "not chunk tags" not in out


def test_eval_on_chunk_tags_keeps_conlleval_report(tmp_path, capsys):
    f = tmp_path / "chunk.tagged"
    f.write_text("the DT B-NP B-NP\ncat NN I-NP I-NP\nsat VBD B-VP O\n")
    rc, out, _ = run_cli(capsys, "eval", f)
    assert rc == 0 and "processed 3 tokens with 2 phrases" in out and "FB1" in out


# ----------------------------------------------------------------------------- progress lines
def test_dev_progress_lines_of_pos_labels_have_accuracy_only():
    from crfkit.train import train

    X, Y = _pos_problem()
    lines = []
    res = train(
        X, Y, X_dev=X[:8], Y_dev=Y[:8], max_iterations=3, verbose=True, log=lines.append, c2=0.1
    )
    iters = [s for s in lines if s.startswith("iter")]
    assert iters and all("dev acc" in s for s in iters), lines
    assert not any("dev F1" in s for s in lines), lines
    assert "dev_f1" not in res.history[-1] and "dev_accuracy" in res.history[-1]


def test_dev_progress_lines_of_chunk_labels_keep_f1():
    from crfkit.train import train

    X, Y = _chunk_problem()
    lines = []
    train(X, Y, X_dev=X[:8], Y_dev=Y[:8], max_iterations=2, verbose=True, log=lines.append)
    assert any("dev F1" in s for s in lines if s.startswith("iter")), lines


def test_sdca_progress_lines_print_the_duality_gap():
    from crfkit.train import train

    X, Y = _chunk_problem(1)
    lines = []
    res = train(X, Y, algorithm="sdca", max_iterations=2, verbose=True, log=lines.append, c2=0.1)
    iters = [s for s in lines if s.startswith("iter")]
    assert iters, lines
    assert all("gap " in s and "nan" not in s for s in iters), iters
    assert all(r.get("duality_gap") is not None for r in res.history)


# ----------------------------------------------------------------------------- n-best types
def test_predict_nbest_pairs_are_the_models_nbest_entries():
    from crfkit import CRF
    from crfkit.decode import NBest

    X, Y = _chunk_problem(2)
    crf = CRF(c2=0.1, max_iterations=5).fit(X, Y)
    pairs = crf.predict_nbest(X[:4], 3)
    objs = crf.model_.nbest(X[:4], 3)
    assert all(isinstance(o, NBest) for o in objs)
    for p, o in zip(pairs, objs):
        assert [lab for lab, _ in p] == o.labels
        assert [q for _, q in p] == pytest.approx(o.probabilities)
        assert [(lab, pytest.approx(q)) for lab, q in o] == p  # NBest iterates as the same pairs


def test_api_reference_documents_both_nbest_shapes():
    from pathlib import Path

    api = (Path(__file__).resolve().parents[2] / "docs" / "reference" / "api.md").read_text()
    assert "predict_nbest" in api and "crfkit.decode.NBest" in api


# ----------------------------------------------------------------------------- interrupted run
@pytest.mark.parametrize("with_checkpoint", [True, False])
def test_interrupted_train_suggests_resume_with_a_checkpoint(
    tmp_path, capsys, monkeypatch, with_checkpoint
):
    import crfkit.pipeline as pipeline

    X, Y = _chunk_problem(3)
    data = tmp_path / "train.txt"
    data.write_text(
        "\n".join(
            "\n".join(f"{x[0][2:]} P{x[0][-1]} {y}" for x, y in zip(xs, ys)) + "\n"
            for xs, ys in zip(X, Y)
        )
    )
    real = pipeline.train_columns

    def interrupted_after_two(*a, **kw):
        def stop(rec):
            if rec["iteration"] >= 2:
                raise KeyboardInterrupt

        kw["callback"] = stop
        return real(*a, **kw)

    monkeypatch.setattr(pipeline, "train_columns", interrupted_after_two)
    ckpt = tmp_path / "run.ckpt"
    argv = ["train", data, "-m", tmp_path / "m.crfkit", "--max-iterations", "20", "-q"]
    if with_checkpoint:
        argv += ["--checkpoint", ckpt]
    rc, _, err = run_cli(capsys, *argv)
    assert rc == 130, err
    if with_checkpoint:
        assert f"--resume {ckpt}" in err and "--init-model" not in err, err
    else:
        assert "--init-model" in err and "--resume" not in err, err


# ----------------------------------------------------------------------------- bench plot style
def test_every_method_has_its_own_colour_and_marker():
    from crfkit.bench import plots

    styles = plots._METHOD_STYLES
    colours = [c for c, _ in styles.values()]
    markers = [m for _, m in styles.values()]
    assert len(set(colours)) == len(colours) and len(set(markers)) == len(markers)
    assert plots._color("lbfgs") != plots._color("sdca")
    assert plots.marker("lbfgs") != plots.marker("sdca")
    assert plots.marker("some-new-method") == plots.marker("some-new-method")  # stable fallback
