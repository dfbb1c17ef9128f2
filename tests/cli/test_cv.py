"""``crfkit cv``: folds disjoint and covering, seeded; the command's per-fold and mean report."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crfkit import cli
from crfkit.cli.cv import folds, read_blocks
from crfkit.datasets import synthetic
from crfkit.errors import CrfkitError


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(st.integers(2, 300), st.integers(2, 12), st.integers(0, 2**31))
def test_folds_are_disjoint_cover_and_balanced(n, k, seed):
    if n < k:
        with pytest.raises(CrfkitError):
            folds(n, k, seed)
        return
    parts = folds(n, k, seed)
    assert len(parts) == k
    allidx = np.concatenate(parts)
    assert sorted(allidx.tolist()) == list(range(n))  # disjoint and covering
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1
    again = folds(n, k, seed)
    assert all((a == b).all() for a, b in zip(parts, again))  # seeded


def test_read_blocks_drops_docstart(tmp_path):
    f = tmp_path / "x.txt"
    f.write_text("-DOCSTART- -X- O\n\na b O\nc d B-NP\n\n\n\ne f O\n")
    assert read_blocks(str(f)) == ["a b O\nc d B-NP\n", "e f O\n"]


def test_cv_command(tmp_path, capsys):
    synthetic.write(tmp_path / "train.txt", 40, seed=5)
    rc = cli.main(
        [
            "cv",
            str(tmp_path / "train.txt"),
            "-k",
            "3",
            "--max-iterations",
            "5",
            "--c2",
            "0.5",
            "--fold-seed",
            "2",
        ]
    )
    out, err = capsys.readouterr()
    assert rc == 0, err
    lines = out.splitlines()
    assert "40 sequences, 3 folds" in lines[0] and "chunk F1 (BIO labels)" in lines[0]
    folds_lines = [l for l in lines if l.startswith("fold ")]
    assert len(folds_lines) == 3
    assert sum(int(l.split(": ")[1].split()[0]) for l in folds_lines) == 40
    assert (
        lines[-1].startswith("mean over 3 folds: accuracy")
        and "F1" in lines[-1]
        and "±" in lines[-1]
    )
    rc = cli.main(["cv", str(tmp_path / "train.txt"), "-k", "3", "-m", "x"])
    assert rc == 2 and "does not apply" in capsys.readouterr().err


def test_cv_accuracy_only_for_non_chunk_labels_and_parallel_jobs(tmp_path, capsys):
    rng = np.random.default_rng(0)
    rows = []
    for _ in range(24):
        for _t in range(int(rng.integers(2, 6))):
            y = ["NN", "VB", "DT"][int(rng.integers(3))]
            rows.append(f"{y.lower() if rng.random() < 0.8 else 'x'} {y}")
        rows.append("")
    f = tmp_path / "pos.txt"
    f.write_text("\n".join(rows) + "\n")
    tpl = tmp_path / "tpl"
    tpl.write_text("U00:%x[0,0]\nB\n")
    rc = cli.main(
        ["cv", str(f), "-k", "2", "--jobs", "2", "-t", str(tpl), "--max-iterations", "10"]
    )
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "metric: token accuracy (the labels are not chunk tags)" in out
    assert "F1" not in out.splitlines()[-1]
    assert [l.split(":")[0] for l in out.splitlines() if l.startswith("fold")] == [
        "fold 1/2",
        "fold 2/2",
    ] or sorted(l.split(":")[0] for l in out.splitlines() if l.startswith("fold")) == [
        "fold 1/2",
        "fold 2/2",
    ]
