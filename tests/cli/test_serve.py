"""``crfkit serve`` and ``crfkit tag --server``: the same output as ``crfkit tag -m``, errors, JSON
API."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import run_cli as run
from crfkit import cli
from crfkit.cli.tag import argv_of, query_of
from crfkit.datasets import synthetic
from crfkit.io.columns import read_columns_list
from crfkit.model import CRFModel
from crfkit.serving import TagService, make_server

SRC = str(Path(__file__).resolve().parents[2] / "src")


@pytest.fixture(scope="module", params=["asgi", "stdlib"])
def served(tmp_path_factory, request):
    d = tmp_path_factory.mktemp("serve")
    synthetic.write(d / "train.txt", 50, seed=5)
    synthetic.write(d / "test.txt", 14, seed=6)
    m = d / "model.crfkit"
    assert (
        cli.main(
            [
                "train",
                str(d / "train.txt"),
                "-m",
                str(m),
                "--max-iterations",
                "3",
                "-q",
                "--support",
                "all",
                "--transitions",
                "all",
            ]
        )
        == 0
    )
    service = TagService(str(m), threads=1)
    service.warm()
    if request.param == "asgi":  # uvicorn (crfkit[serve])
        from crfkit.serving_asgi import start

        url, stop = start(service)
        host, port = url[len("http://") :].split(":")
        port = int(port)
    else:  # the standard library's fallback
        server = make_server(service, "127.0.0.1", 0)
        th = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        th.start()
        host, port = server.server_address[:2]

        def stop():
            server.shutdown()
            server.server_close()

    yield {
        "kind": request.param,
        "dir": d,
        "model": m,
        "test": d / "test.txt",
        "url": f"http://{host}:{port}",
        "host": host,
        "port": port,
        "service": service,
    }
    stop()


def request(s, method, path, body=b"", ctype="text/plain"):
    c = http.client.HTTPConnection(s["host"], s["port"], timeout=30)
    try:
        c.request(method, path, body=body, headers={"Content-Type": ctype})
        r = c.getresponse()
        return r.status, r.headers, r.read()
    finally:
        c.close()


@pytest.mark.parametrize(
    "opts",
    [
        [],
        ["-n", "3"],
        ["--marginals"],
        ["--probability", "--all-marginals"],
        ["--constraints", "bio", "-n", "2"],
        ["--decode", "posterior"],
        ["--forbid", "O,I-NP", "--marginals"],
        ["--no-labels"],
    ],
)
def test_server_output_is_crfkit_tags(served, opts, capsys):
    test = str(served["test"])
    if "--no-labels" in opts:  # a file without the gold column
        rows = [
            line.rsplit(None, 1)[0] if line.strip() else ""
            for line in served["test"].read_text().splitlines()
        ]
        p = served["dir"] / "nolab.txt"
        p.write_text("\n".join(rows) + "\n")
        test = str(p)
        opts = []
    rc, local, _ = run(capsys, *["tag", "-m", str(served["model"]), test, *opts])
    assert rc == 0
    rc, remote, err = run(capsys, *["tag", "--server", served["url"], test, *opts])
    assert rc == 0, err
    assert remote == local and local


def test_server_eval_report_and_output_file(served, capsys, tmp_path):
    rc, _, err_local = run(
        capsys, *["tag", "-m", str(served["model"]), str(served["test"]), "--eval"]
    )
    out = tmp_path / "out.txt"
    rc, stdout, err = run(
        capsys, *["tag", "--server", served["url"], str(served["test"]), "--eval", "-o", str(out)]
    )
    assert rc == 0 and stdout == ""
    assert err == err_local and "FB1" in err
    rc, local, _ = run(capsys, *["tag", "-m", str(served["model"]), str(served["test"])])
    assert out.read_text() == local
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".part")]


def test_server_bad_input_is_the_same_error(served, capsys, tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("w1 NN B-NP\nw2 NN\n")
    rc, _, err_local = run(capsys, *["tag", "-m", str(served["model"]), str(bad)])
    rc2, out, err = run(capsys, *["tag", "--server", served["url"], str(bad)])
    assert rc == rc2 == 2 and out == ""
    assert "ragged columns" in err and "<request>:2" in err
    assert err_local.replace(str(bad), "<request>") == err


def test_server_empty_input(served, capsys, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    rc, out, err = run(capsys, *["tag", "--server", served["url"], str(empty), "-n", "2"])
    assert rc == 0 and out == "" and "nothing to tag" in err


def test_client_errors(served, capsys):
    rc, _, err = run(
        capsys, *["tag", "--server", served["url"], "-m", str(served["model"]), str(served["test"])]
    )
    assert rc == 2 and "drop -m" in err
    rc, _, err = run(
        capsys, *["tag", "--server", served["url"], "--threads", "2", str(served["test"])]
    )
    assert rc == 2 and "threads are the server's" in err
    rc, _, err = run(capsys, *["tag", str(served["test"])])
    assert rc == 2 and "-m/--model" in err
    # nothing listens there (a port just freed)
    import socket

    sk = socket.socket()
    sk.bind(("127.0.0.1", 0))
    port = sk.getsockname()[1]
    sk.close()
    rc, _, err = run(capsys, *["tag", "--server", f"127.0.0.1:{port}", str(served["test"])])
    assert rc == 2 and "cannot reach a crfkit server" in err and "crfkit serve -m MODEL" in err


def test_http_errors(served):
    body = served["test"].read_bytes()
    st, h, b = request(served, "POST", "/tag?bogus=1", body)
    assert st == 400 and b"bogus: not an option of crfkit tag" in b
    st, h, b = request(served, "POST", "/tag?nbest=x", body)
    assert st == 400 and b"not an integer" in b
    st, h, b = request(served, "POST", "/tag?model=/etc/passwd", body)
    assert st == 400 and b"the model and the threads are the server's" in b
    st, h, b = request(served, "POST", "/tag?eval=maybe", body)
    assert st == 400 and b"a flag takes 1 or 0" in b
    st, h, b = request(served, "POST", "/nothing", body)
    assert st == 404
    st, h, b = request(served, "GET", "/health")
    info = json.loads(b)
    assert (
        st == 200
        and info["status"] == "ok"
        and info["labels"] == CRFModel.load(served["model"]).labels
    )


def test_curl_style_query(served, capsys):
    st, h, b = request(
        served, "POST", "/tag?nbest=2&constraints=bio&eval=1", served["test"].read_bytes()
    )
    rc, local, err = run(
        capsys,
        *[
            "tag",
            "-m",
            str(served["model"]),
            str(served["test"]),
            "-n",
            "2",
            "--constraints",
            "bio",
            "--eval",
        ],
    )
    assert st == 200 and h["X-Crfkit-Status"] == "0"
    assert b.decode() == local
    from urllib.parse import unquote

    assert unquote(h["X-Crfkit-Stderr"]) == err


def test_query_round_trip():
    ns = cli.build_parser("tag").parse_args(
        [
            "tag",
            "--server",
            "x",
            "-n",
            "4",
            "--forbid",
            "O,I-X",
            "--forbid",
            "B-X,I-Y",
            "--no-labels",
            "--constraints",
            "bio",
            "--marginals",
        ]
    )
    q = query_of(ns)
    assert ("nbest", "4") in q and ("no-labels", "1") in q and q.count(("forbid", "O,I-X")) == 1
    again = cli.build_parser("tag").parse_args(["tag", "-m", "m", *argv_of(q), "-"])
    for k in ("nbest", "forbid", "labels", "constraints", "marginals"):
        assert getattr(again, k) == getattr(ns, k), k


def test_json_api(served):
    model = CRFModel.load(served["model"])
    sents = read_columns_list(str(served["test"]), has_labels=True)
    rows = [s.columns for s in sents]
    ans = json.loads(
        request(
            served, "POST", "/tag", json.dumps({"sentences": rows}).encode(), "application/json"
        )[2]
    )
    assert ans["labels"] == model.tag_rows(rows)
    ans = json.loads(
        request(
            served,
            "POST",
            "/tag",
            json.dumps({"sentences": rows, "nbest": 3}).encode(),
            "application/json",
        )[2]
    )
    from crfkit.pipeline import inputs_of_rows

    X, B, dense = inputs_of_rows(model, rows)
    ref = model.nbest(X, 3)
    assert [[c["labels"] for c in nb] for nb in ans["nbest"]] == [list(nb.labels) for nb in ref]
    assert ans["nbest"][0][0]["probability"] == pytest.approx(ref[0].probabilities[0], rel=1e-12)
    ans = json.loads(
        request(
            served,
            "POST",
            "/tag",
            json.dumps(
                {
                    "sentences": [" ".join(t) for t in rows[0]]
                    and [[" ".join(t) for t in rows[0]]],
                    "marginals": True,
                    "probability": True,
                    "constraints": "bio",
                }
            ).encode(),
            "application/json",
        )[2]
    )
    pred, probs, marg, corpus = model.tag_with_probability(X[:1], constraints="bio")
    assert ans["labels"] == pred and ans["probability"][0] == pytest.approx(
        float(probs[0]), rel=1e-12
    )
    assert len(ans["marginals"][0]) == len(rows[0])
    # forced labels through "allowed"
    first = model.labels[0]
    allowed = [[first] + [None] * (len(rows[0]) - 1)]
    ans = json.loads(
        request(
            served,
            "POST",
            "/tag",
            json.dumps({"sentences": rows[:1], "allowed": allowed}).encode(),
            "application/json",
        )[2]
    )
    assert ans["labels"][0][0] == first
    for bad, msg in [
        ({"sentences": 3}, "sentences: Input should be a valid array"),
        ({"sentences": [], "frob": 1}, "unknown field"),
        ({"sentences": rows[:1], "nbest": -1}, "positive integer"),
        ({"sentences": rows[:1], "constraints": "xyz"}, "unknown constraint scheme"),
        ({"sentences": rows[:1], "decode": "posterior", "nbest": 2}, "does not combine"),
    ]:
        st, h, b = request(served, "POST", "/tag", json.dumps(bad).encode(), "application/json")
        assert st == 400 and msg in json.loads(b)["error"], (bad, b)
    st, h, b = request(served, "POST", "/tag", b"{not json", "application/json")
    assert st == 400 and "not JSON" in json.loads(b)["error"]


def test_client_imports_no_numpy(served):
    code = (
        "import sys; from crfkit import cli; rc = cli.main(['tag', '--server', sys.argv[1], sys.argv[2], '-n', '2']);"
        "sys.stderr.write('numpy' if 'numpy' in sys.modules else 'clean'); sys.exit(rc)"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, served["url"], str(served["test"])],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=SRC),
        timeout=120,
    )
    assert r.returncode == 0 and r.stderr.endswith("clean"), r.stderr
    assert r.stdout.startswith("# 0 ")


def test_crfkit_serve_process(served, tmp_path):
    url_file = tmp_path / "url"
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "crfkit",
            "serve",
            "-m",
            str(served["model"]),
            "--port",
            "0",
            "--url-file",
            str(url_file),
            "--threads",
            "1",
        ],
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=SRC),
    )
    try:
        for _ in range(600):
            if url_file.exists() or p.poll() is not None:
                break
            time.sleep(0.2)
        assert url_file.exists(), p.stderr.read() if p.poll() is not None else "no URL file"
        url = url_file.read_text().strip()
        r = subprocess.run(
            [sys.executable, "-m", "crfkit", "tag", "--server", url, str(served["test"])],
            capture_output=True,
            text=True,
            env=dict(os.environ, PYTHONPATH=SRC),
            timeout=120,
        )
        assert r.returncode == 0 and r.stdout.count("\n\n") >= 13
    finally:
        p.send_signal(signal.SIGTERM)  # a service manager's stop: exit 0, URL file removed
        _, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert (
        "listening on http://127.0.0.1:" in err
        and "kernels warmed" in err
        and "stopped after 1 request" in err
    )
    assert not url_file.exists()


def test_the_parser_schemes_are_the_decoders():
    from crfkit import decode
    from crfkit import tagging as decode_cli

    assert decode_cli.SCHEMES == decode.SCHEMES


def test_concurrent_requests_are_served_one_at_a_time(served, capsys):
    body = served["test"].read_bytes()
    rc, local, _ = run(
        capsys, *["tag", "-m", str(served["model"]), str(served["test"]), "-n", "2", "--eval"]
    )
    stderr_before = sys.stderr
    results = [None] * 6

    def go(i):
        results[i] = request(served, "POST", "/tag?nbest=2&eval=1", body)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    from urllib.parse import unquote

    reports = {unquote(h["X-Crfkit-Stderr"]) for st, h, b in results}
    assert all(st == 200 and b.decode() == local for st, h, b in results)
    assert len(reports) == 1 and "FB1" in reports.pop()  # each request got its own report, whole
    assert sys.stderr is stderr_before
