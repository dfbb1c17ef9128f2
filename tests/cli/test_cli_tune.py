"""``crfkit tune``: the table and best settings, the model written (and taggable), resuming from the
state file, and clear errors for bad grids."""

from __future__ import annotations

import json

import pytest

from crfkit import cli
from crfkit.datasets import synthetic
from crfkit.model import CRFModel


def _run(tmp_path, *extra):
    return cli.main(
        [
            "tune",
            str(tmp_path / "train.txt"),
            "-k",
            "2",
            "--c1",
            "0.05,0.5",
            "--c2",
            "0.01:0.1:2",
            "--max-iterations",
            "15",
            "--threads",
            "1",
            "-m",
            str(tmp_path / "best.crfkit"),
            "-q",
            *extra,
        ]
    )


def test_tune_command_table_model_and_resume(tmp_path, capsys):
    synthetic.write(tmp_path / "train.txt", 40, seed=5)
    assert _run(tmp_path) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert "conlleval F1" in lines[0] and "iterations" in lines[0]
    rows = lines[1:5]
    assert len(rows) == 4 and sum(r.endswith("*") for r in rows) == 1
    assert rows[0].split()[-1] == "-"  # the first candidate starts cold, the others warm
    assert all(r.split()[7].isdigit() for r in rows[1:])
    assert lines[5].startswith("best: c1=")
    m = CRFModel.load(tmp_path / "best.crfkit")
    assert m.meta["templates"] and m.meta["columns"] == 2
    state = tmp_path / "best.crfkit.tune.jsonl"
    assert len(state.read_text().splitlines()) == 5
    # tag with the model written
    rc = cli.main(["tag", "-m", str(tmp_path / "best.crfkit"), str(tmp_path / "train.txt")])
    assert rc == 0
    capsys.readouterr()
    # run again: every candidate is read back from the state file, none retrained
    assert _run(tmp_path) == 0
    out2 = capsys.readouterr().out
    assert out2.count("(resumed)") == 4
    assert out2.splitlines()[5] == lines[5]
    # another grid with the same state file: refused with a clear message
    rc = _run(tmp_path, "--c1", "0.1")
    assert rc == 2 and "another search" in capsys.readouterr().err
    assert json.loads(state.read_text().splitlines()[0])["crfkit_tune"] == 1


def test_tune_command_errors(tmp_path, capsys):
    synthetic.write(tmp_path / "train.txt", 20, seed=1)
    base = ["tune", str(tmp_path / "train.txt"), "-m", str(tmp_path / "m")]
    assert cli.main(base + ["--c1", "x,y"]) == 2
    assert "--c1" in capsys.readouterr().err
    assert cli.main(base) == 2
    assert "--c1 GRID" in capsys.readouterr().err
    assert cli.main(base + ["--c2", "1", "-a", "nope"]) == 2
    assert "unknown algorithm" in capsys.readouterr().err


def test_tune_jobs_gives_the_same_table(tmp_path, capsys):
    """``--jobs 2``: the folds in two processes, the same best settings and scores as one."""
    synthetic.write(tmp_path / "train.txt", 40, seed=5)
    assert _run(tmp_path, "--state", str(tmp_path / "a.jsonl")) == 0
    one = capsys.readouterr().out.splitlines()
    assert _run(tmp_path, "--state", str(tmp_path / "b.jsonl"), "--jobs", "2") == 0
    two = capsys.readouterr().out.splitlines()
    assert two[5] == one[5]  # best: c1=... c2=... score

    # the candidates' settings, scores and iterations (not the seconds, column 7)
    def cols(rows):
        return [r.split()[:6] + r.split()[7:] for r in rows[1:5]]

    assert cols(two) == cols(one)
    with pytest.raises(SystemExit) as e:
        cli.main(["tune", str(tmp_path / "train.txt"), "-m", "x", "--c1", "1", "-j", "0"])
    assert e.value.code == 2 and "--jobs" in capsys.readouterr().err
