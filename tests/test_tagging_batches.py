"""``crfkit tag`` batch by batch (``crfkit.tagging``): the output does not depend on the batch size,
it streams while its input is still open, and an output file is written whole or not at all (an
input error half-way leaves none; a symbolic link and the file's mode are kept).  Data are generated
(``crfkit.datasets.synthetic``)."""

from __future__ import annotations

import os
import select
import subprocess
import threading
from pathlib import Path

import pytest

from conftest import crfkit_cmd, stream_corpus, stream_model
from conftest import crfkit_env as _env
from conftest import run_cli as run
from crfkit import cli
from crfkit.datasets import synthetic
from crfkit.io.columns import read_columns_list
from crfkit.io.crfsuite import write_crfsuite


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict:
    return stream_corpus(tmp_path_factory.mktemp("stream"))


@pytest.fixture(scope="module")
def model(data) -> Path:
    return stream_model(data)


OPTION_SETS = [
    [],
    ["--marginals"],
    ["--all-marginals"],
    ["--probability"],
    ["--marginals", "--probability", "--all-marginals"],
    ["--eval"],
    ["--eval", "--marginals"],
    ["--labels"],
]


@pytest.mark.parametrize("opts", OPTION_SETS, ids=lambda o: " ".join(o) or "plain")
def test_tag_output_does_not_depend_on_the_batch_size(data, model, capsys, opts):
    """The whole input as one batch is what tagging computed before batching; every
    batch size gives the same bytes (and the same --eval report)."""
    rc, want_out, want_err = run(
        capsys, "tag", "-m", model, data["test"], *opts, "--batch-tokens", 10**9
    )
    assert rc == 0, want_err
    for bt in (1, 7, 100):
        rc, out, err = run(capsys, "tag", "-m", model, data["test"], *opts, "--batch-tokens", bt)
        assert rc == 0, err
        assert out == want_out and err == want_err, bt


def test_tag_without_gold_labels_does_not_depend_on_the_batch_size(data, model, tmp_path, capsys):
    nogold = tmp_path / "nogold.txt"
    nogold.write_text(
        "".join(
            (" ".join(line.split()[:-1]) + "\n") if line.strip() else "\n"
            for line in data["test"].read_text().splitlines(keepends=True)
        )
    )
    rc, want, err = run(
        capsys,
        "tag",
        "-m",
        model,
        nogold,
        "--all-marginals",
        "--probability",
        "--batch-tokens",
        10**9,
    )
    assert rc == 0, err
    rc, out, err = run(
        capsys, "tag", "-m", model, nogold, "--all-marginals", "--probability", "--batch-tokens", 5
    )
    assert rc == 0 and out == want
    rc, want, err = run(capsys, "tag", "-m", model, nogold, "--no-labels", "--batch-tokens", 10**9)
    rc, out, err = run(capsys, "tag", "-m", model, nogold, "--no-labels", "--batch-tokens", 3)
    assert rc == 0 and out == want
    rc, out, err = run(capsys, "tag", "-m", model, nogold, "--eval", "--batch-tokens", 5)
    assert rc == 2 and "--eval needs gold labels" in err and out == ""


@pytest.fixture(scope="module")
def attr_data(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("stream_attrs")
    sents = read_columns_list(_synthetic(d))
    X = [[[f"w={c[0]}", f"p={c[1]}", ("len", len(c[0]) / 4)] for c in s.columns] for s in sents]
    Y = [s.labels for s in sents]
    write_crfsuite(X[:50], d / "train.txt", Y[:50])
    write_crfsuite(X[50:], d / "test.txt", Y[50:])
    m = d / "m.crfkit"
    assert (
        cli.main(
            [
                "train",
                str(d / "train.txt"),
                "-m",
                str(m),
                "-f",
                "crfsuite",
                "--max-iterations",
                "10",
                "-q",
            ]
        )
        == 0
    )
    return {"test": d / "test.txt", "model": m}


def _synthetic(d: Path) -> Path:
    synthetic.write(d / "src.txt", 80, seed=5)
    return d / "src.txt"


@pytest.mark.parametrize(
    "opts",
    [
        [],
        ["-r"],
        ["--marginals"],
        ["--all-marginals"],
        ["--probability"],
        ["-r", "--marginals", "--probability", "--all-marginals", "--eval"],
    ],
    ids=lambda o: " ".join(o) or "plain",
)
def test_crfsuite_tag_output_does_not_depend_on_the_batch_size(attr_data, capsys, opts):
    args = ("tag", "-m", attr_data["model"], "-f", "crfsuite", attr_data["test"], *opts)
    rc, want_out, want_err = run(capsys, *args, "--batch-tokens", 10**9)
    assert rc == 0, want_err
    for bt in (1, 13):
        rc, out, err = run(capsys, *args, "--batch-tokens", bt)
        assert rc == 0 and out == want_out and err == want_err, bt


def test_tag_streams_while_its_input_is_still_open(data, model, tmp_path):
    """The tags of the first sentences come out before standard input ends:
    `crfkit tag` works batch by batch (default batch size) instead of reading
    everything first."""
    one = data["test"].read_bytes()
    reps = 30_000 // sum(len(s) for s in read_columns_list(data["test"])) + 1  # > one default batch
    big = tmp_path / "big.txt"
    big.write_bytes(one * reps)
    p = subprocess.Popen(
        crfkit_cmd("tag", "-m", model),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
    )
    seen = threading.Event()

    def feed():  # in a thread: the child's output must be read while it reads its input
        try:
            p.stdin.write(one * reps)
            p.stdin.flush()
            seen.wait(300)  # the input stays open until output was seen
        finally:
            p.stdin.close()

    t = threading.Thread(target=feed, daemon=True)
    t.start()
    try:
        ready, _, _ = select.select([p.stdout], [], [], 240)
        assert ready, "no output while the input was still open"
        first = os.read(p.stdout.fileno(), 1 << 16)
        assert first.count(b"\n") > 1, p.stderr.read()
        assert p.poll() is None and t.is_alive()
    finally:
        seen.set()
    rest = p.stdout.read()
    t.join(60)
    assert p.wait(60) == 0, p.stderr.read()
    ref = subprocess.run(
        crfkit_cmd("tag", "-m", model, big), env=_env(), capture_output=True, timeout=300
    )
    assert first + rest == ref.stdout


def test_an_input_error_half_way_leaves_no_output_file(data, model, tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_text(data["test"].read_text() + "a b\n")  # a ragged line at the very end
    out = tmp_path / "out.txt"
    rc, _, err = run(capsys, "tag", "-m", model, bad, "-o", out, "--batch-tokens", 10)
    assert rc == 2 and "ragged columns" in err
    assert not out.exists() and os.listdir(tmp_path) == ["bad.txt"]
    out.write_text("old\n")
    rc, _, err = run(capsys, "tag", "-m", model, bad, "-o", out, "--batch-tokens", 10)
    assert rc == 2 and out.read_text() == "old\n"
    rc, _, err = run(capsys, "tag", "-m", model, data["test"], "-o", out, "--batch-tokens", 10)
    assert rc == 0 and out.read_text().count("\n") > 100
    assert sorted(os.listdir(tmp_path)) == ["bad.txt", "out.txt"]


def test_tag_output_file_through_a_symlink_keeps_the_link_and_the_mode(
    data, model, tmp_path, capsys
):
    real = tmp_path / "real.txt"
    real.write_text("old\n")
    real.chmod(0o640)
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    rc, want, err = run(capsys, "tag", "-m", model, data["test"])
    rc, _, err = run(capsys, "tag", "-m", model, data["test"], "-o", link)
    assert rc == 0, err
    assert link.is_symlink() and real.read_text() == want
    assert real.stat().st_mode & 0o777 == 0o640
    assert sorted(os.listdir(tmp_path)) == ["link.txt", "real.txt"]
