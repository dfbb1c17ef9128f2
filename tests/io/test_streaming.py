"""Inputs that stream (``crfkit.io.columns``: ``LineSource``, ``open_source``): CR-only line endings
(read as their lines, with a warning), ``--format auto`` on pipes, FIFOs, gz and standard input,
read once.  Subprocess tests run ``python -m crfkit`` from this source tree; data are generated
(``crfkit.datasets.synthetic``)."""

from __future__ import annotations

import gzip
import io
import os
import random
import re
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import crfkit_cmd, stream_corpus, stream_model
from conftest import crfkit_env as _env
from conftest import run_cli as run
from crfkit.errors import DataWarning
from crfkit.io.columns import LOOKAHEAD, LineSource, open_source, read_columns_list
from crfkit.model import CRFModel


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict:
    return stream_corpus(tmp_path_factory.mktemp("stream"))


@pytest.fixture(scope="module")
def model(data) -> Path:
    return stream_model(data)


def _n_sentences(path: Path) -> int:
    return len(read_columns_list(path))


# --------------------------------------------------------------------------- CR-only line endings


def test_cr_only_file_reads_as_its_lines_with_a_warning(data, tmp_path):
    lf = data["train"].read_bytes()
    cr = tmp_path / "mac.txt"
    cr.write_bytes(lf.replace(b"\n", b"\r"))
    with pytest.warns(DataWarning, match=r"mac\.txt: the line endings are CR only"):
        got = read_columns_list(cr)
    want = read_columns_list(data["train"])
    assert [(s.columns, s.labels, s.line) for s in got] == [
        (s.columns, s.labels, s.line) for s in want
    ]


def test_crlf_and_lf_read_without_a_warning(data, tmp_path):
    crlf = tmp_path / "dos.txt.gz"
    with gzip.open(crlf, "wb") as f:
        f.write(data["train"].read_bytes().replace(b"\n", b"\r\n"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = read_columns_list(crlf)
        want = read_columns_list(data["train"])
    assert [(s.columns, s.labels) for s in got] == [(s.columns, s.labels) for s in want]


def test_train_on_a_cr_only_file_learns_every_label(data, tmp_path, capsys):
    cr = tmp_path / "mac.txt"
    cr.write_bytes(data["train"].read_bytes().replace(b"\n", b"\r"))
    rc, out, err = run(
        capsys, "train", cr, "-m", tmp_path / "m.crfkit", "--max-iterations", "3", "-q"
    )
    assert rc == 0, err
    assert f"crfkit: warning: {cr}: the line endings are CR only" in err
    n_labels = len({lab for s in read_columns_list(data["train"]) for lab in s.labels})
    m = CRFModel.load(tmp_path / "m.crfkit")
    assert len(m.labels) == n_labels > 1
    assert m.meta["n_train"] == _n_sentences(data["train"])


class _Trickle(io.RawIOBase):
    """A pipe-like stream: ``read`` gives at most a few bytes at a time."""

    def __init__(self, data: bytes, sizes):
        self.data = data
        self.pos = 0
        self.sizes = sizes

    def readable(self):
        return True

    def readinto(self, b):
        n = min(len(b), next(self.sizes), len(self.data) - self.pos)
        b[:n] = self.data[self.pos : self.pos + n]
        self.pos += n
        return n


_line = st.text(alphabet="ab \t#x", max_size=6)


@settings(max_examples=150, deadline=None)
@given(
    lines=st.lists(st.tuples(_line, st.sampled_from(["\r", "\n", "\r\n"])), max_size=30),
    cr_first=st.booleans(),
    last_open=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_line_source_splits_like_universal_newlines(lines, cr_first, last_open, seed):
    """Through reads of random sizes, with or without a sniff first: a file whose
    first line ends in a lone CR gives the lines of ``str.splitlines``; any other
    file splits on LF only, as before, and nothing is lost or duplicated."""
    if cr_first:
        lines = [("first", "\r")] + lines
    text = "".join(a + b for a, b in lines) + ("tail" if last_open else "")
    raw = text.encode()
    rng = random.Random(seed)
    sizes = iter(lambda: rng.randint(1, 7), None)
    src = LineSource(io.BufferedReader(_Trickle(raw, sizes), buffer_size=8), "<t>")
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        if rng.random() < 0.5:
            src.sniff(rng.randint(0, 5))
        got = [x.decode() for x in src]
    first_eol = re.search(r"\r\n?|\n", text)
    if first_eol is not None and first_eol.group() == "\r" and first_eol.end() < len(text):
        assert src.line_endings == "cr"
        assert [g.rstrip("\n") for g in got] == text.splitlines()
        assert all(g.endswith("\n") for g in got[:-1])
    else:
        assert src.line_endings == "lf"
        parts = text.split("\n")
        assert got == [x + "\n" for x in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def test_cr_handling_across_the_lookahead(tmp_path):
    """A CR-only file larger than the lookahead, with a CRLF pair cut by the end
    of the first read block: one line end, not two (which would split the sentence)."""
    k = (LOOKAHEAD - 9) // 6
    body = "w P O\r" * k + "x" * (LOOKAHEAD - 1 - 6 * k - 4) + " P O\r\n" + "w P O\r\n" * 10 + "\r"
    assert body.index("\r\n") == LOOKAHEAD - 1
    p = tmp_path / "big.txt"
    p.write_bytes(body.encode())
    with pytest.warns(DataWarning):
        sents = read_columns_list(p)
    assert len(sents) == 1 and len(sents[0]) == k + 11


# --------------------------------------------------------------------------- --format auto reads
# once


def _pipe_from(path: Path) -> tuple[int, subprocess.Popen]:
    """A pipe a `cat` subprocess writes ``path`` into: (read end, the writer)."""
    r, w = os.pipe()
    writer = subprocess.Popen(["cat", str(path)], stdout=w)
    os.close(w)
    return r, writer


def test_auto_format_on_a_dev_fd_pipe_trains_on_every_sentence(data, tmp_path, capsys):
    r, writer = _pipe_from(data["train"])
    try:
        m = tmp_path / "m.crfkit"
        rc, out, err = run(
            capsys, "train", f"/dev/fd/{r}", "-f", "auto", "-m", m, "--max-iterations", "2", "-q"
        )
    finally:
        os.close(r)
        writer.wait()
    assert rc == 0, err
    assert CRFModel.load(m).meta["n_train"] == _n_sentences(data["train"])


def test_auto_format_tag_on_a_dev_fd_pipe(data, model, capsys):
    rc, want, err = run(capsys, "tag", "-m", model, data["test"])
    assert rc == 0, err
    r, writer = _pipe_from(data["test"])
    try:
        rc, out, err = run(capsys, "tag", "-f", "auto", "-m", model, f"/dev/fd/{r}")
    finally:
        os.close(r)
        writer.wait()
    assert rc == 0, err
    assert out == want


def test_auto_format_on_a_fifo_does_not_hang(data, model, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    m = tmp_path / "m.crfkit"
    writer = subprocess.Popen(["sh", "-c", f'cat "{data["train"]}" > "{fifo}"'])
    try:
        p = subprocess.run(
            crfkit_cmd("train", fifo, "-f", "auto", "-m", m, "--max-iterations", "2", "-q"),
            env=_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        writer.kill()
        writer.wait()
    assert p.returncode == 0, p.stderr
    assert CRFModel.load(m).meta["n_train"] == _n_sentences(data["train"])


def test_auto_format_on_gz_stdin_and_a_gz_fifo(data, model, tmp_path, capsys, monkeypatch):
    """A .gz on standard input (no name to go by) is recognised by its magic bytes."""
    rc, want, err = run(capsys, "tag", "-m", model, data["test"])
    gz = gzip.compress(data["test"].read_bytes())

    class _Stdin:
        buffer = io.BufferedReader(io.BytesIO(gz))

    monkeypatch.setattr(sys, "stdin", _Stdin())
    rc, out, err = run(capsys, "tag", "-f", "auto", "-m", model)
    assert rc == 0, err
    assert out == want
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    t = threading.Thread(target=lambda: fifo.write_bytes(gz), daemon=True)
    t.start()
    rc, out, err = run(capsys, "tag", "-f", "auto", "-m", model, fifo)
    t.join(10)
    assert rc == 0, err
    assert out == want


def test_auto_sniff_does_not_read_all_of_stdin(data, tmp_path):
    """``--format auto`` on standard input used to read all of it into memory
    first; now it looks at the first lines only: a sniff of a long stream stops
    early and gives every line back to the reader."""
    body = data["test"].read_bytes() * 50
    src = open_source(io.BufferedReader(io.BytesIO(body)), "<stdin>")
    head = src.sniff(800)
    assert len(head) == 800
    assert b"".join(src) == body
