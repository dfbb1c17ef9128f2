"""Issue 13, inputs that stream: CR-only line endings (item 7), ``--format auto`` on
pipes, FIFOs, gz and stdin read once (item 11), ``crfkit tag`` in bounded memory,
batch by batch (item 12), quiet Ctrl-C at start-up and ``data fetch`` under SIGTERM,
with a whole-download deadline and a size cap (item 13).

Each test here failed on the code before the fix (see the report of issue 13).
Subprocess tests run ``python -m crfkit`` (or the console-script target) from
this source tree; data are generated (``crfkit.datasets.synthetic``)."""
from __future__ import annotations

import gzip
import hashlib
import http.server
import io
import os
import random
import re
import select
import signal
import subprocess
import sys
import threading
import time
import tomllib
import warnings
import zipfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import crfkit
from crfkit import cli
from crfkit.datasets import download as dl
from crfkit.datasets import synthetic
from crfkit.datasets.download import DataFile, Dataset, FetchError, fetch
from crfkit.errors import DataWarning
from crfkit.io.columns import LOOKAHEAD, LineSource, open_source, read_columns_list
from crfkit.io.crfsuite import read_crfsuite_list, write_crfsuite
from crfkit.model import CRFModel

SRC = str(Path(crfkit.__file__).resolve().parents[1])
ROOT = Path(SRC).parent


from conftest import run_cli as run


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        env.pop(var, None)
    env["no_proxy"] = "*"
    return env


def crfkit_cmd(*argv) -> list[str]:
    return [sys.executable, "-m", "crfkit", *[str(a) for a in argv]]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("stream")
    synthetic.write(d / "train.txt", 60, seed=1)
    synthetic.write(d / "test.txt", 40, seed=2)
    return {"dir": d, "train": d / "train.txt", "test": d / "test.txt"}


@pytest.fixture(scope="module")
def model(data) -> Path:
    path = data["dir"] / "model.crfkit"
    assert cli.main(["train", str(data["train"]), "-m", str(path), "--max-iterations", "15", "-q"]) == 0
    return path


def _n_sentences(path: Path) -> int:
    return len(read_columns_list(path))


# =========================================================================== item 7: CR-only line endings

def test_cr_only_file_reads_as_its_lines_with_a_warning(data, tmp_path):
    lf = data["train"].read_bytes()
    cr = tmp_path / "mac.txt"
    cr.write_bytes(lf.replace(b"\n", b"\r"))
    with pytest.warns(DataWarning, match=r"mac\.txt: the line endings are CR only"):
        got = read_columns_list(cr)
    want = read_columns_list(data["train"])
    assert [(s.columns, s.labels, s.line) for s in got] == [(s.columns, s.labels, s.line) for s in want]


def test_cr_only_attribute_file_too(tmp_path):
    X = [[["a", ("b", 0.5)], ["c"]], [["d"]]]
    Y = [["L1", "L2"], ["L1"]]
    p = tmp_path / "attrs.txt"
    write_crfsuite(X, p, Y)
    p.write_bytes(p.read_bytes().replace(b"\n", b"\r"))
    with pytest.warns(DataWarning, match="CR only"):
        seqs = read_crfsuite_list(p)
    assert [s.attributes for s in seqs] == X and [s.labels for s in seqs] == Y


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
    rc, out, err = run(capsys, "train", cr, "-m", tmp_path / "m.crfkit", "--max-iterations", "3", "-q")
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
        b[:n] = self.data[self.pos:self.pos + n]
        self.pos += n
        return n


_line = st.text(alphabet="ab \t#x", max_size=6)


@settings(max_examples=150, deadline=None)
@given(lines=st.lists(st.tuples(_line, st.sampled_from(["\r", "\n", "\r\n"])), max_size=30),
       cr_first=st.booleans(), last_open=st.booleans(), seed=st.integers(0, 2 ** 16))
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


# =========================================================================== item 11: --format auto reads once

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
        rc, out, err = run(capsys, "train", f"/dev/fd/{r}", "-f", "auto", "-m", m, "--max-iterations", "2", "-q")
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
        p = subprocess.run(crfkit_cmd("train", fifo, "-f", "auto", "-m", m, "--max-iterations", "2", "-q"),
                           env=_env(), capture_output=True, text=True, timeout=120)
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


# =========================================================================== item 12: tag in batches

OPTION_SETS = [
    [], ["--marginals"], ["--all-marginals"], ["--probability"],
    ["--marginals", "--probability", "--all-marginals"], ["--eval"], ["--eval", "--marginals"],
    ["--labels"],
]


@pytest.mark.parametrize("opts", OPTION_SETS, ids=lambda o: " ".join(o) or "plain")
def test_tag_output_does_not_depend_on_the_batch_size(data, model, capsys, opts):
    """The whole input as one batch is what tagging computed before batching; every
    batch size gives the same bytes (and the same --eval report)."""
    rc, want_out, want_err = run(capsys, "tag", "-m", model, data["test"], *opts, "--batch-tokens", 10 ** 9)
    assert rc == 0, want_err
    for bt in (1, 7, 100):
        rc, out, err = run(capsys, "tag", "-m", model, data["test"], *opts, "--batch-tokens", bt)
        assert rc == 0, err
        assert out == want_out and err == want_err, bt


def test_tag_without_gold_labels_does_not_depend_on_the_batch_size(data, model, tmp_path, capsys):
    nogold = tmp_path / "nogold.txt"
    nogold.write_text("".join((" ".join(line.split()[:-1]) + "\n") if line.strip() else "\n"
                              for line in data["test"].read_text().splitlines(keepends=True)))
    rc, want, err = run(capsys, "tag", "-m", model, nogold, "--all-marginals", "--probability",
                        "--batch-tokens", 10 ** 9)
    assert rc == 0, err
    rc, out, err = run(capsys, "tag", "-m", model, nogold, "--all-marginals", "--probability", "--batch-tokens", 5)
    assert rc == 0 and out == want
    rc, want, err = run(capsys, "tag", "-m", model, nogold, "--no-labels", "--batch-tokens", 10 ** 9)
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
    assert cli.main(["train", str(d / "train.txt"), "-m", str(m), "-f", "crfsuite", "--max-iterations", "10",
                     "-q"]) == 0
    return {"test": d / "test.txt", "model": m}


def _synthetic(d: Path) -> Path:
    synthetic.write(d / "src.txt", 80, seed=5)
    return d / "src.txt"


@pytest.mark.parametrize("opts", [[], ["-r"], ["--marginals"], ["--all-marginals"], ["--probability"],
                                  ["-r", "--marginals", "--probability", "--all-marginals", "--eval"]],
                         ids=lambda o: " ".join(o) or "plain")
def test_crfsuite_tag_output_does_not_depend_on_the_batch_size(attr_data, capsys, opts):
    args = ("tag", "-m", attr_data["model"], "-f", "crfsuite", attr_data["test"], *opts)
    rc, want_out, want_err = run(capsys, *args, "--batch-tokens", 10 ** 9)
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
    p = subprocess.Popen(crfkit_cmd("tag", "-m", model), stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
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
    ref = subprocess.run(crfkit_cmd("tag", "-m", model, big), env=_env(), capture_output=True, timeout=300)
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


def test_tag_output_file_through_a_symlink_keeps_the_link_and_the_mode(data, model, tmp_path, capsys):
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


# =========================================================================== item 13: signals, downloads

def test_sigterm_during_tag_to_a_file_leaves_no_temporary_file(data, model, tmp_path):
    out = tmp_path / "out.txt"
    p = subprocess.Popen(crfkit_cmd("tag", "-m", model, "-o", out, "--batch-tokens", 5), stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
    try:
        p.stdin.write(data["test"].read_bytes())  # the input stays open: tag waits for more
        p.stdin.flush()
        deadline = time.monotonic() + 240
        while not [f for f in os.listdir(tmp_path) if f.endswith(".part")]:
            assert p.poll() is None, p.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        p.send_signal(signal.SIGTERM)
        err = p.communicate(timeout=60)[1]
    finally:
        p.kill()
    assert p.returncode == 128 + signal.SIGTERM, err
    assert b"terminated" in err and b"Traceback" not in err
    assert os.listdir(tmp_path) == []



def _entry_point() -> tuple[str, str]:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    mod, _, fn = scripts["crfkit"].partition(":")
    return mod, fn


@pytest.mark.parametrize("delay", [0.15, 0.4, 1.0])
def test_ctrl_c_during_start_up_exits_130_quietly(model, delay):
    """SIGINT while the console-script target imports crfkit, numpy and numba (or
    later, while it waits for input): exit status 130, no traceback."""
    mod, fn = _entry_point()
    code = (f"import sys; sys.argv = ['crfkit', 'tag', '-m', {str(model)!r}]; print('go', flush=True); "
            f"from {mod} import {fn}; sys.exit({fn}())")
    p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=_env())
    assert p.stdout.readline() == b"go\n"
    time.sleep(delay)
    p.send_signal(signal.SIGINT)
    try:
        _, err = p.communicate(timeout=120)
    finally:
        p.kill()
    assert p.returncode == 130, err
    assert b"Traceback" not in err, err.decode()


def test_python_dash_m_start_up_too(model):
    p = subprocess.Popen(crfkit_cmd("info", "-m", model), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=_env())
    time.sleep(0.4)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode in (0, 130), err  # 0: it had already finished
    assert b"Traceback" not in err, err.decode()


class _Server:
    """A loopback HTTP server whose GET handler is ``handler(request)``."""

    def __init__(self, handler):
        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                try:
                    handler(self)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.t = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.t.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def _trickle(total: int, every: float, length: int | None | bool = None, block: int = 1):
    """A handler sending ``total`` bytes, ``block`` bytes every ``every`` seconds
    (``length``: the Content-Length announced; ``False``: none, the end is the close)."""
    def handler(req):
        req.send_response(200)
        if length is not False:
            req.send_header("Content-Length", str(total if length is None else length))
        req.end_headers()
        sent = 0
        while sent < total:
            n = min(block, total - sent)
            req.wfile.write(b"x" * n)
            req.wfile.flush()
            sent += n
            if every:
                time.sleep(every)
    return handler


def _registry(size: int | None = None) -> dict:
    df = DataFile("t/file.gz", "0" * 64, "0" * 64) if size is None else DataFile("t/file.gz", "0" * 64, "0" * 64,
                                                                                  size=size)
    return {"t": Dataset("t", (df,), None)}


def _no_partials(d: Path) -> None:
    assert not [p for p in d.rglob("*") if p.name.startswith(".")], list(d.rglob("*"))


def test_timeout_is_a_deadline_for_the_whole_download(tmp_path):
    srv = _Server(_trickle(200, 0.05))  # 10 s in all, a byte every 50 ms: no single read times out
    try:
        t0 = time.monotonic()
        with pytest.raises(FetchError, match=r"did not finish within the 1 s timeout"):
            fetch("t", cache_dir=tmp_path / "c", base_url=srv.url, timeout=1.0, registry=_registry())
        assert time.monotonic() - t0 < 6
    finally:
        srv.close()
    _no_partials(tmp_path / "c")


def test_download_larger_than_the_table_says_is_abandoned(tmp_path):
    srv = _Server(_trickle(4 << 20, 0, length=False, block=1 << 16))  # 4 MiB, no length announced
    try:
        with pytest.raises(FetchError, match=r"more than the 1000 bytes expected"):
            fetch("t", cache_dir=tmp_path / "c", base_url=srv.url, registry=_registry(1000))
    finally:
        srv.close()
    _no_partials(tmp_path / "c")
    srv = _Server(_trickle(10, 0, length=50 << 20))  # announces 50 MiB
    try:
        t0 = time.monotonic()
        with pytest.raises(FetchError, match=r"announces 52428800 bytes, more than the 1000"):
            fetch("t", cache_dir=tmp_path / "c", base_url=srv.url, registry=_registry(1000))
        assert time.monotonic() - t0 < 5
    finally:
        srv.close()
    _no_partials(tmp_path / "c")


def test_zip_members_larger_than_the_content_are_refused_before_decompressing(tmp_path):
    z = tmp_path / "src.zip"
    with zipfile.ZipFile(z, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("d/a.txt", b"\0" * (8 << 20))  # 8 MiB of zeros: a few KB compressed
    content = b"w P O\n"
    df = DataFile("d/a.txt.gz", "0" * 64, hashlib.sha256(content).hexdigest(), ("d/a.txt",), None, len(content))
    reg = {"z": Dataset("z", (df,), z.as_uri())}
    with pytest.raises(FetchError, match=r"declare 8388608 bytes, more than the 6 expected"):
        fetch("z", cache_dir=tmp_path / "c", registry=reg)
    _no_partials(tmp_path / "c")


def test_registry_sizes_match_the_shared_files():
    from crfkit import datasets
    seen = 0
    for ds in dl.REGISTRY.values():
        for df in ds.files:
            assert df.size and df.content_size, df.path
            p = datasets.data_dir() / df.path
            if p.is_file():
                seen += 1
                assert p.stat().st_size == df.size, df.path
                with gzip.open(p, "rb") as f:
                    assert sum(len(b) for b in iter(lambda: f.read(1 << 20), b"")) == df.content_size
    if not seen:
        pytest.skip("no shared data here")


def test_sigterm_during_data_fetch_leaves_no_part_file(tmp_path):
    srv = _Server(_trickle(500_000, 0.02, block=1000))  # a slow download: 10 s
    cache = tmp_path / "cache"
    try:
        p = subprocess.Popen(crfkit_cmd("data", "fetch", "conll2000", "--base-url", srv.url, "--cache-dir", cache),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
        deadline = time.monotonic() + 120
        while not list(cache.rglob("*.part")):
            assert p.poll() is None, p.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(0.3)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
    finally:
        srv.close()
    assert p.returncode == 128 + signal.SIGTERM, err
    assert b"terminated" in err and b"Traceback" not in err
    _no_partials(cache)


def test_a_stale_part_file_left_by_kill_9_is_removed_by_the_next_fetch(tmp_path):
    content = b"w P O\n"
    gz = gzip.compress(content, mtime=0)
    www = tmp_path / "www" / "t"
    www.mkdir(parents=True)
    (www / "file.gz").write_bytes(gz)
    df = DataFile("t/file.gz", hashlib.sha256(gz).hexdigest(), hashlib.sha256(content).hexdigest(),
                  size=len(gz), content_size=len(content))
    cache = tmp_path / "c"
    (cache / "t").mkdir(parents=True)
    stale = cache / "t" / ".file.gz.abc123.part"
    fresh = cache / "t" / ".file.gz.def456.part"  # another fetch, still running
    other = cache / "t" / ".other.gz.abc123.part"
    for p in (stale, fresh, other):
        p.write_bytes(b"partial")
    old = time.time() - 2 * 3600
    os.utime(stale, (old, old))
    os.utime(other, (old, old))
    fetch("t", cache_dir=cache, base_url=str(tmp_path / "www"), registry={"t": Dataset("t", (df,), None)})
    assert (cache / "t" / "file.gz").read_bytes() == gz
    assert not stale.exists() and fresh.exists() and other.exists()
