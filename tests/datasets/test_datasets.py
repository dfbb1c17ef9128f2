"""crfkit.datasets: loaders (shared data and tiny hand-made files), fetch through a
loopback HTTP server (never the internet), verification, the `crfkit data` command."""

from __future__ import annotations

import gzip
import hashlib
import http.server
import os
import shutil
import signal
import subprocess
import threading
import time
import zipfile
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from conftest import crfkit_cmd
from conftest import crfkit_env as _env
from crfkit import cli, datasets
from crfkit.datasets import download as dl
from crfkit.datasets import download as fetch_mod
from crfkit.datasets.download import (
    REGISTRY,
    DataFile,
    Dataset,
    FetchError,
    fetch,
    mrg_to_columns,
    verify,
)
from crfkit.errors import DataError

SHARED = datasets.data_dir()


def shared_file(rel: str) -> Path:
    p = SHARED / rel
    if not p.is_file():
        pytest.skip(f"{p} is not here")
    return p


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    """No test reads the user's cache or goes through a proxy."""
    monkeypatch.setenv("CRFKIT_CACHE", str(tmp_path / "user-cache"))
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("no_proxy", "*")


# --------------------------------------------------------------------------- loopback server


class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # quiet
        pass


@pytest.fixture
def server(tmp_path):
    """(root directory served, base URL, list of requested paths)."""
    root = tmp_path / "www"
    root.mkdir()
    requests: list[str] = []

    class H(_Handler):
        def do_GET(self):
            requests.append(self.path)
            super().do_GET()

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(H, directory=str(root)))
    t = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    try:
        yield root, f"http://127.0.0.1:{httpd.server_address[1]}/", requests
    finally:
        httpd.shutdown()
        httpd.server_close()
        t.join(5)


SMALL = ("conll2000/test.txt.gz", "conll2002/ned.testa.gz")


def _registry_file(rel: str) -> DataFile:
    for ds in REGISTRY.values():
        for df in ds.files:
            if df.path == rel:
                return df
    raise KeyError(rel)


def _small_registry(source_url=None) -> dict:
    return {"small": Dataset("small", tuple(_registry_file(r) for r in SMALL), source_url)}


def _mirror(root: Path, rels=SMALL) -> None:
    for rel in rels:
        src = shared_file(rel)
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, root / rel)


def _no_partials(d: Path) -> None:
    assert not [p for p in d.rglob("*") if p.name.startswith(".")], list(d.rglob("*"))


# --------------------------------------------------------------------------- fetch


def test_registry_matches_the_shared_files():
    for ds in REGISTRY.values():
        for df in ds.files:
            p = SHARED / df.path
            if p.is_file():
                assert fetch_mod.sha256_file(p) == df.sha256, df.path
                assert fetch_mod._content_sha256(p) == df.content_sha256, df.path


def test_fetch_from_a_loopback_mirror(server, tmp_path):
    root, url, requests = server
    _mirror(root)
    cache = tmp_path / "cache"
    lines = []
    got = fetch(
        "small", cache_dir=cache, base_url=url, registry=_small_registry(), log=lines.append
    )
    assert got == cache
    for rel in SMALL:
        assert (cache / rel).read_bytes() == (root / rel).read_bytes()
        assert fetch_mod.sha256_file(cache / rel) == _registry_file(rel).sha256
    assert sorted(requests) == sorted("/" + r for r in SMALL)
    assert any("downloading" in s for s in lines)
    # loaders read from the cache given as data_dir
    assert len(datasets.load_conll2000("test", data_dir=cache)) == 2012
    # present and verified: not downloaded again
    fetch("small", cache_dir=cache, base_url=url, registry=_small_registry())
    assert len(requests) == 2
    # force: downloaded again
    fetch("small", cache_dir=cache, base_url=url, registry=_small_registry(), force=True)
    assert len(requests) == 4
    _no_partials(cache)
    assert verify("small", cache, registry=_small_registry()) == [(r, "ok") for r in SMALL]


def test_corrupted_download_is_refused_and_not_kept(server, tmp_path):
    root, url, requests = server
    _mirror(root)
    bad = root / SMALL[0]
    data = bytearray(bad.read_bytes())
    data[len(data) // 2] ^= 0xFF
    bad.write_bytes(bytes(data))
    cache = tmp_path / "cache"
    with pytest.raises(FetchError, match="SHA-256 mismatch.*not kept"):
        fetch("small", cache_dir=cache, base_url=url, registry=_small_registry())
    assert not (cache / SMALL[0]).exists()
    _no_partials(cache)
    # a good file in the cache is not replaced by a bad download
    shutil.copyfile(shared_file(SMALL[0]), cache / SMALL[0])
    with pytest.raises(FetchError, match="SHA-256 mismatch"):
        fetch("small", cache_dir=cache, base_url=url, registry=_small_registry(), force=True)
    assert fetch_mod.sha256_file(cache / SMALL[0]) == _registry_file(SMALL[0]).sha256
    _no_partials(cache)


def test_missing_on_the_server_and_unknown_names(server, tmp_path):
    root, url, _ = server
    with pytest.raises(FetchError, match="HTTP 404"):
        fetch("small", cache_dir=tmp_path / "c", base_url=url, registry=_small_registry())
    _no_partials(tmp_path / "c")
    with pytest.raises(FetchError, match="unknown data set 'nope'"):
        fetch("nope", cache_dir=tmp_path / "c")
    with pytest.raises(FetchError, match="no public source"):
        fetch("ocr_letters", cache_dir=tmp_path / "c")


def test_fetch_real_registry_entry_and_default_cache(server, tmp_path, monkeypatch):
    root, url, _ = server
    _mirror(root, [df.path for df in REGISTRY["conll2000"].files])
    got = fetch("conll2000", base_url=url.rstrip("/"))  # the default cache: $CRFKIT_CACHE
    assert got == Path(os.environ["CRFKIT_CACHE"])
    assert verify("conll2000", got) == [(df.path, "ok") for df in REGISTRY["conll2000"].files]
    # the loaders look in the cache when the data directory lacks the file
    monkeypatch.setenv("CRFKIT_DATA", str(tmp_path / "empty"))
    assert len(datasets.load_conll2000("test")) == 2012


def test_fetch_from_a_directory_or_file_url(tmp_path):
    mirror = tmp_path / "mirror"
    _mirror(mirror)
    fetch("small", cache_dir=tmp_path / "a", base_url=str(mirror), registry=_small_registry())
    fetch("small", cache_dir=tmp_path / "b", base_url=mirror.as_uri(), registry=_small_registry())
    for d in ("a", "b"):
        assert verify("small", tmp_path / d, registry=_small_registry()) == [
            (r, "ok") for r in SMALL
        ]


def test_fetch_from_a_zip_source(server, tmp_path):
    """The public-source path (NLTK zips), against a zip served on loopback:
    members extracted, content hash checked, gzip-compressed into the cache."""
    root, url, _ = server
    members = {}
    for rel in SMALL:
        members[rel] = gzip.decompress(shared_file(rel).read_bytes())
    reg = {
        "z": Dataset(
            "z",
            tuple(
                DataFile(
                    r,
                    _registry_file(r).sha256,
                    _registry_file(r).content_sha256,
                    (f"corpus/{r.split('/')[-1][:-3]}",),
                )
                for r in SMALL
            ),
            url + "corpus.zip",
        )
    }
    with zipfile.ZipFile(root / "corpus.zip", "w") as z:
        for rel, content in members.items():
            z.writestr(f"corpus/{rel.split('/')[-1][:-3]}", content)
    cache = tmp_path / "cache"
    fetch("z", cache_dir=cache, registry=reg)
    for rel, content in members.items():
        assert gzip.decompress((cache / rel).read_bytes()) == content
    assert verify("z", cache, registry=reg) == [(r, "ok") for r in SMALL]
    _no_partials(cache)
    # a zip whose member differs is refused
    with zipfile.ZipFile(root / "corpus.zip", "w") as z:
        for rel, content in members.items():
            z.writestr(f"corpus/{rel.split('/')[-1][:-3]}", content + b"x")
    with pytest.raises(FetchError, match="content of .*not kept"):
        fetch("z", cache_dir=tmp_path / "cache2", registry=reg)
    assert not any((tmp_path / "cache2").rglob("*.gz"))
    _no_partials(tmp_path / "cache2")
    # not a zip
    (root / "corpus.zip").write_bytes(b"<html>nope</html>")
    with pytest.raises(FetchError, match="not a zip"):
        fetch("z", cache_dir=tmp_path / "cache3", registry=reg)
    _no_partials(tmp_path / "cache3")


def test_mrg_conversion():
    text = """( (S
    (NP-SBJ (NNP Pierre) (NNP Vinken) )
    (VP (MD will) (NP (-NONE- *-1) ) (VP (VB join) ))
    (. .) ))
( (S (NP-SBJ (-NONE- *) ) ) )
( (FRAG (NN -LRB-) (CD 1\\/2) ))
"""
    assert mrg_to_columns(text) == [
        [("Pierre", "NNP"), ("Vinken", "NNP"), ("will", "MD"), ("join", "VB"), (".", ".")],
        [("-LRB-", "NN"), ("1\\/2", "CD")],
    ]
    with pytest.raises(ValueError, match="unbalanced"):
        mrg_to_columns("( (S (NN a) )")
    with pytest.raises(ValueError, match="unbalanced"):
        mrg_to_columns("(NN a))")


# --------------------------------------------------------------------------- loaders on hand-made
# files


def _letter_line(i, letter, next_id, word, pos, fold, pixels):
    return "\t".join(map(str, [i, letter, next_id, word, pos, fold, *pixels])) + "\n"


def test_loaders_on_tiny_files(tmp_path):
    d = tmp_path / "data"
    (d / "conll2000").mkdir(parents=True)
    (d / "conll2000" / "test.txt").write_text("He PRP B-NP\nran VBD B-VP\n\nOk UH O\n")
    s = datasets.load_conll2000("test", data_dir=d)
    assert [x.labels for x in s] == [["B-NP", "B-VP"], ["O"]] and s[0].columns == [
        ["He", "PRP"],
        ["ran", "VBD"],
    ]
    (d / "conll2002").mkdir()
    with gzip.open(d / "conll2002" / "ned.testb.gz", "wt") as f:
        f.write("-DOCSTART- -DOCSTART- O\nDe Art O\nJan N B-PER\n\nZo Adv O\n")
    assert [len(x) for x in datasets.load_conll2002("nl", "testb", data_dir=d)] == [2, 1]
    assert [
        len(x) for x in datasets.load_conll2002("ned", "testb", data_dir=d, docstart="keep")
    ] == [3, 1]
    (d / "ocr_letters").mkdir()
    px = [[int(k % (j + 2) == 0) for k in range(128)] for j in range(5)]
    (d / "ocr_letters" / "letter.data").write_text(
        _letter_line(1, "a", 2, 1, 1, 0, px[0])
        + _letter_line(2, "b", -1, 1, 2, 0, px[1])
        + _letter_line(3, "c", -1, 2, 1, 3, px[2])
        + _letter_line(4, "d", 5, 3, 1, 3, [0.5] * 128)
        + _letter_line(5, "e", -1, 3, 2, 3, px[4])
    )
    X, Y = datasets.load_ocr_letters(data_dir=d)
    assert Y == [["a", "b"], ["c"], ["d", "e"]]
    assert X[0].shape == (2, 128) and X[0].dtype == np.float64
    assert np.array_equal(X[0], np.array(px[:2], dtype=float))
    assert np.all(X[2][0] == 0.5) and np.array_equal(X[2][1], px[4])
    X3, Y3, F3 = datasets.load_ocr_letters(3, data_dir=d, with_folds=True)
    assert Y3 == [["c"], ["d", "e"]] and F3 == [3, 3]
    assert datasets.load_ocr_letters([0, 9], data_dir=d)[1] == [["a", "b"]]
    Xtr, Ytr, Xte, Yte = datasets.ocr_letters_split("ocr", data_dir=d)
    assert Ytr == [["a", "b"]] and Yte == [["c"], ["d", "e"]]
    attrs = datasets.pixel_attributes(X)
    assert attrs[0][0][0] == "bias" and "p0" in attrs[0][0] and "p1" not in attrs[0][0]
    assert ("p0", 0.5) in attrs[2][0]
    with pytest.raises(ValueError, match="folds"):
        datasets.load_ocr_letters(10, data_dir=d)
    (d / "ptb_wsj_sample").mkdir()
    (d / "ptb_wsj_sample" / "treebank_wsj_sample.txt").write_text(
        "".join(f"w{i} NN\n\n" for i in range(3002))
    )
    assert len(datasets.load_ptb_sample("train", data_dir=d)) == 3000
    assert len(datasets.load_ptb_sample("test", data_dir=d)) == 2
    assert len(datasets.load_ptb_sample(data_dir=d)) == 3002


@pytest.mark.parametrize(
    "body, match, line",
    [
        (_letter_line(1, "a", -1, 1, 1, 0, [0] * 127), "133 fields", 1),
        (_letter_line(1, "a", -1, 1, 1, 0, ["x"] * 128), "not a number", 1),
        (_letter_line(1, "a", -1, 1, 1, 11, [0] * 128), "fold 11", 1),
        (
            _letter_line(1, "a", 2, 1, 1, 0, [0] * 128)
            + _letter_line(2, "b", -1, 1, 3, 0, [0] * 128),
            "position 3",
            2,
        ),
        (
            _letter_line(1, "a", 2, 1, 1, 0, [0] * 128)
            + _letter_line(2, "b", -1, 2, 2, 0, [0] * 128),
            "changes word_id",
            2,
        ),
        (_letter_line(1, "a", 2, 1, 1, 0, [0] * 128), "ends inside word", None),
    ],
)
def test_bad_letter_files(tmp_path, body, match, line):
    d = tmp_path / "ocr_letters"
    d.mkdir()
    (d / "letter.data").write_text(body)
    with pytest.raises(DataError, match=match) as ei:
        datasets.load_ocr_letters(data_dir=tmp_path)
    assert ei.value.line == line and ei.value.path.endswith("letter.data")


def test_missing_files_and_bad_arguments(tmp_path, monkeypatch):
    with pytest.raises(
        DataError, match=r"conll2000/test.txt.gz not found .*crfkit data fetch conll2000"
    ):
        datasets.load_conll2000("test", data_dir=tmp_path)
    monkeypatch.setenv("CRFKIT_DATA", str(tmp_path / "nowhere"))
    with pytest.raises(DataError, match="nowhere.* or .*user-cache"):
        datasets.load_ptb_sample()
    with pytest.raises(ValueError, match="split"):
        datasets.load_conll2000("dev", data_dir=tmp_path)
    with pytest.raises(ValueError, match="lang"):
        datasets.load_conll2002("de", data_dir=tmp_path)
    with pytest.raises(ValueError, match="split"):
        datasets.load_conll2002("es", "dev", data_dir=tmp_path)


# --------------------------------------------------------------------------- loaders on the shared
# data


def test_conll_counts_on_shared_data():
    shared_file("conll2000/test.txt.gz")
    s = datasets.load_conll2000("test")
    assert len(s) == 2012 and sum(map(len, s)) == 47377
    assert len({lab for x in s for lab in x.labels}) == 19
    shared_file("conll2002/esp.testb.gz")
    s = datasets.load_conll2002("es", "testb")
    assert len(s) == 1517 and sum(map(len, s)) == 51533
    shared_file("conll2002/ned.testa.gz")
    s = datasets.load_conll2002("nl", "testa")  # the 74 -DOCSTART- lines dropped
    assert sum(map(len, s)) == 37761 - 74
    assert {lab for x in s for lab in x.labels} == {
        "O",
        *(f"{p}-{t}" for p in "BI" for t in ("PER", "LOC", "ORG", "MISC")),
    }


def test_ocr_and_ptb_on_shared_data():
    shared_file("ocr_letters/letter.data.gz")
    X, Y, F = datasets.load_ocr_letters(with_folds=True)
    assert len(X) == 6877 and sum(len(y) for y in Y) == 52152
    assert np.bincount(F).tolist() == [626, 704, 684, 698, 693, 651, 739, 717, 690, 675]
    assert "".join(Y[0]) == "ommanding" and F[0] == 0
    assert all(x.shape == (len(y), 128) for x, y in zip(X, Y))
    assert set(np.unique(np.concatenate(X))) <= {0.0, 1.0}
    assert len({c for y in Y for c in y}) == 26
    shared_file("ptb_wsj_sample/treebank_wsj_sample.txt.gz")
    tr, te = datasets.load_ptb_sample("train"), datasets.load_ptb_sample("test")
    assert (len(tr), len(te)) == (3000, 914)
    assert (sum(map(len, tr)), sum(map(len, te))) == (72422, 21662)
    assert tr[0].columns[0] == ["Pierre"] and tr[0].labels[0] == "NNP"


# --------------------------------------------------------------------------- the `crfkit data`
# command


def test_data_command(server, tmp_path, capsys):
    root, url, _ = server
    _mirror(root, [df.path for df in REGISTRY["conll2000"].files])
    cache = tmp_path / "c"
    rc = cli.main(
        ["data", "fetch", "conll2000", "--cache-dir", str(cache), "--base-url", url, "-q"]
    )
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "fetched conll2000" in out
    rc = cli.main(["data", "verify", "conll2000", "--data-dir", str(cache)])
    out, err = capsys.readouterr()
    assert rc == 0 and out.count("ok ") == 2
    (cache / "conll2000" / "test.txt.gz").write_bytes(b"junk")
    rc = cli.main(["data", "verify", "conll2000", "--data-dir", str(cache)])
    out, err = capsys.readouterr()
    assert rc == 1 and "MISMATCH" in out
    rc = cli.main(["data", "verify", "ocr_letters", "--data-dir", str(cache)])
    out, err = capsys.readouterr()
    assert rc == 1 and "missing" in out
    rc = cli.main(["data", "list", "--data-dir", str(cache)])
    out, err = capsys.readouterr()
    assert rc == 0 and "conll2002/ned.testb.gz" in out and "mirror only" in out
    rc = cli.main(["data", "fetch", "nope", "--cache-dir", str(cache)])
    out, err = capsys.readouterr()
    assert rc == 2 and "unknown data set" in err
    rc = cli.main(
        ["data", "fetch", "ocr_letters", "--cache-dir", str(cache), "--base-url", url, "-q"]
    )
    out, err = capsys.readouterr()
    assert rc == 2 and "HTTP 404" in err


def test_content_hash_helper(tmp_path):
    p = tmp_path / "x.gz"
    p.write_bytes(gzip.compress(b"hello"))
    assert fetch_mod._content_sha256(p) == hashlib.sha256(b"hello").hexdigest()
    (tmp_path / "y.gz").write_bytes(b"not gzip")
    assert fetch_mod._content_sha256(tmp_path / "y.gz") is None


# --------------------------------------------------------------------------- download limits,
# interruptions


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
        self.t = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
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
    df = (
        DataFile("t/file.gz", "0" * 64, "0" * 64)
        if size is None
        else DataFile("t/file.gz", "0" * 64, "0" * 64, size=size)
    )
    return {"t": Dataset("t", (df,), None)}


def test_timeout_is_a_deadline_for_the_whole_download(tmp_path):
    srv = _Server(_trickle(200, 0.05))  # 10 s in all, a byte every 50 ms: no single read times out
    try:
        t0 = time.monotonic()
        with pytest.raises(FetchError, match=r"did not finish within the 1 s timeout"):
            fetch(
                "t", cache_dir=tmp_path / "c", base_url=srv.url, timeout=1.0, registry=_registry()
            )
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
    df = DataFile(
        "d/a.txt.gz",
        "0" * 64,
        hashlib.sha256(content).hexdigest(),
        ("d/a.txt",),
        None,
        len(content),
    )
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
                    assert (
                        sum(len(b) for b in iter(lambda: f.read(1 << 20), b"")) == df.content_size
                    )
    if not seen:
        pytest.skip("no shared data here")


def test_sigterm_during_data_fetch_leaves_no_part_file(tmp_path):
    srv = _Server(_trickle(500_000, 0.02, block=1000))  # a slow download: 10 s
    cache = tmp_path / "cache"
    try:
        p = subprocess.Popen(
            crfkit_cmd("data", "fetch", "conll2000", "--base-url", srv.url, "--cache-dir", cache),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_env(),
        )
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
    df = DataFile(
        "t/file.gz",
        hashlib.sha256(gz).hexdigest(),
        hashlib.sha256(content).hexdigest(),
        size=len(gz),
        content_size=len(content),
    )
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
    fetch(
        "t",
        cache_dir=cache,
        base_url=str(tmp_path / "www"),
        registry={"t": Dataset("t", (df,), None)},
    )
    assert (cache / "t" / "file.gz").read_bytes() == gz
    assert not stale.exists() and fresh.exists() and other.exists()
