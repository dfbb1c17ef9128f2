"""``crfkit serve`` before and after issue 45 part 2: the probe suite and the throughput, side by side.

Two servers run as processes on the same model: *before*, ``crfkit serve`` from another tree (by
default /work/main, the standard library's ``ThreadingHTTPServer``) and *after*, this tree's
(uvicorn, the ``crfkit[serve]`` extra; ``--after-stdlib`` adds this tree's stdlib fallback as a
third).  The model: the synthetic CoNLL-2000-like corpus (``crfkit.datasets.synthetic``), 500
sentences, the built-in templates, 10 L-BFGS iterations, tagging on one thread.

Probes (the issue's), each a case whose answer is *clean* (a 4xx, or a 503, with a message; the
server alive after) or a *failure* (a 500, a hang past ``--probe-timeout``, a dropped connection, a
200 for what had to be refused, a dead server):

* ``content_length_-1``: ``Content-Length: -1`` with a 20 MB body;
* ``gzip_bomb``: a ~100 KB gzip body inflating to 52 MB (and how long a small request sent during it
  waits);
* ``nbest_100000``: ``nbest=100000`` on 50 tokens;
* ``slowloris``: 500 connections with stalled headers; ``/health`` during them, and whether the
  server closes them (both servers' header timeout: the after server is started with
  ``--header-timeout 2``);
* ``smuggle_404`` / ``smuggle_411``: a refused request whose body is a ``GET /health``: one answer,
  not two;
* ``json:*``: 18 malformed JSON requests (the issue's 7 and 11 more), and ``?encoding=rot13``.

Reported: cases, clean errors, failures, the server process's peak RSS (``VmHWM``).

Throughput: requests/s of ``POST /tag`` (a column file body) with 1 and 100 sentences, from 1 and 8
concurrent clients (threads, one keep-alive connection each), ``--seconds`` per cell, the servers
measured in turns, median of ``--repeats`` (3); with each, the server process's CPU milliseconds per
request (user + system, from /proc), which the machine's load disturbs less than the wall-clock rate.  The machine may be shared: compare the columns of
one run only.

    .venv/bin/python benchmarks/micro/serve_throughput.py [--before-src /work/main/src] [--repeats 3]
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve()
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from _results import record  # noqa: E402


class Server:
    """A ``crfkit serve`` process from ``src`` with ``extra`` options."""

    def __init__(self, name: str, src: str, model: str, extra=(), tmp="/tmp"):
        self.name = name
        self.url_file = Path(tmp) / f"{name}.url"
        self.log = open(Path(tmp) / f"{name}.log", "w")
        cmd = [sys.executable, "-m", "crfkit", "serve", "-m", model, "--port", "0"]
        cmd += ["--url-file", str(self.url_file), "--threads", "1", *extra]
        env = dict(os.environ, PYTHONPATH=src, NUMBA_NUM_THREADS="1")
        self.p = subprocess.Popen(cmd, stderr=self.log, env=env)
        for _ in range(1200):
            if self.url_file.exists() or self.p.poll() is not None:
                break
            time.sleep(0.1)
        if not self.url_file.exists():
            raise SystemExit(f"{name}: the server did not start (see {self.log.name})")
        url = self.url_file.read_text().strip()
        host, port = url[len("http://") :].split(":")
        self.host, self.port = host, int(port)

    def alive(self) -> bool:
        return self.p.poll() is None

    def peak_rss_mb(self) -> float | None:
        try:
            for line in open(f"/proc/{self.p.pid}/status"):
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            return None
        return None

    def cpu_seconds(self) -> float:
        """User + system CPU seconds of the server process so far (all its threads)."""
        with open(f"/proc/{self.p.pid}/stat") as f:
            parts = f.read().rsplit(")", 1)[1].split()
        return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.p.terminate()
        try:
            self.p.wait(20)
        except subprocess.TimeoutExpired:
            self.p.kill()
        self.log.close()


def request(s, method, path, body=b"", headers=None, timeout=60.0):
    c = http.client.HTTPConnection(s.host, s.port, timeout=timeout)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def raw(s, head: bytes, body: bytes = b"", timeout=60.0) -> bytes:
    """Send ``head`` then (alongside the reading) ``body``; what the server sends until it closes
    or ``timeout`` passes."""
    sk = socket.create_connection((s.host, s.port), timeout=timeout)
    out = b""
    try:
        sk.sendall(head)

        def send():
            try:
                sk.sendall(body)
            except OSError:
                pass

        if body:
            threading.Thread(target=send, daemon=True).start()
        while True:
            try:
                chunk = sk.recv(65536)
            except (TimeoutError, ConnectionResetError):
                break
            if not chunk:
                break
            out += chunk
    finally:
        sk.close()
    return out


def status_of(answer: bytes) -> int | None:
    try:
        return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.") else None
    except (IndexError, ValueError):
        return None


def bad_json() -> list[tuple[str, bytes]]:
    J = json.dumps
    w = [[["w", "NN"]]]
    cases = [
        ("sentences:[1]", J({"sentences": [1]})),
        ("sentences:[[null]]", J({"sentences": [[None]]})),
        ("allowed:[5]", J({"sentences": w, "allowed": [5]})),
        ("constraints:5", J({"sentences": w, "constraints": 5})),
        ("nesting_1e5", "[" * 100_000 + "]" * 100_000),
        ("int_5000_digits", '{"sentences": [], "nbest": ' + "9" * 5000 + "}"),
        ("allowed:[[5]]", J({"sentences": w, "allowed": [[5]]})),
        ("allowed_length", J({"sentences": w, "allowed": [[None, None]]})),
        ("forbid:[1]", J({"sentences": w, "forbid": [1]})),
        ("forbid:[[O]]", J({"sentences": w, "forbid": [["O"]]})),
        ('nbest:"3"', J({"sentences": w, "nbest": "3"})),
        ("nbest:true", J({"sentences": w, "nbest": True})),
        ("decode:beam", J({"sentences": w, "decode": "beam"})),
        ("marginals:1", J({"sentences": w, "marginals": 1})),
        ("token_dict_list", J({"sentences": [[{"a": [1]}]]})),
        ("sentences:3", J({"sentences": 3})),
        ("top_level_list", J([1, 2])),
        ("not_utf8", b'{"sentences": ["\xff"]}'),
    ]
    return [(n, b if isinstance(b, bytes) else b.encode()) for n, b in cases]


def probes(s, test_body: bytes, one: bytes, timeout: float) -> dict:
    """Run the probe suite on ``s``: {case: {"status", "clean", ...}}."""
    out = {}

    def case(name, ok_statuses, fn):
        t = time.perf_counter()
        try:
            st, extra = fn()
        except Exception as e:  # noqa: BLE001 (a probe's failure is a figure)
            st, extra = None, {"exception": repr(e)[:200]}
        sec = time.perf_counter() - t
        alive = s.alive()
        clean = st in ok_statuses and alive and sec < timeout
        out[name] = {
            "status": st,
            "seconds": round(sec, 3),
            "clean": clean,
            "alive": alive,
            **extra,
        }
        print(
            f"  {s.name:8s} {name:24s} status {st}  {sec:6.2f} s  {'clean' if clean else 'FAIL'}"
            f"  {extra or ''}",
            flush=True,
        )

    # the cheap probes first, the ones that kept the old server busy for minutes last
    inner = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"

    def smuggle(path, with_length):
        h = b"POST %s HTTP/1.1\r\nHost: x\r\n" % path
        h += b"Content-Length: %d\r\n\r\n" % len(inner) if with_length else b"\r\n"
        ans = raw(s, h + inner, timeout=3)
        n = ans.count(b"HTTP/1.1 ")
        # the body answered as a request of its own: smuggled
        return (status_of(ans) if n == 1 else None), {"answers": n}

    case("smuggle_404", (404,), lambda: smuggle(b"/nothing", True))
    if s.name != "after":  # h11: a POST without Content-Length has no body (RFC 9112)
        case("smuggle_411", (411,), lambda: smuggle(b"/tag", False))
    for name, body in bad_json():
        case(
            f"json:{name}",
            (400,),
            lambda body=body: (
                request(s, "POST", "/tag", body, {"Content-Type": "application/json"}, timeout)[0],
                {},
            ),
        )
    case(
        "encoding=rot13",
        (400,),
        lambda: (request(s, "POST", "/tag?encoding=rot13", test_body, timeout=timeout)[0], {}),
    )

    def slowloris():
        socks = []
        for _ in range(500):
            try:
                sk = socket.create_connection((s.host, s.port), timeout=5)
                sk.sendall(b"POST /tag HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\nX-a: ")
                socks.append(sk)
            except OSError:
                break
        time.sleep(0.5)
        try:
            health = request(s, "GET", "/health", timeout=5)[0]
        except OSError as e:
            health = repr(e)[:80]
        closed = 0
        t = time.perf_counter()
        for sk in socks:
            sk.settimeout(max(0.01, 6 - (time.perf_counter() - t)))
            try:
                sk.recv(1024)  # b"" (closed) or an answer (503)
                closed += 1
            except ConnectionResetError:  # closed with its head unread: a reset, also closed
                closed += 1
            except (TimeoutError, OSError):
                pass
            sk.close()
        try:
            after = request(s, "GET", "/health", timeout=10)[0]
        except OSError as e:
            after = repr(e)[:80]
        st = health if isinstance(health, int) else None
        if closed < len(socks):
            st = None  # stalled connections never timed out
        return st, {
            "opened": len(socks),
            "closed_by_server_within_6s": closed,
            "health_during": health,
            "health_after": after,
        }

    case("slowloris", (200, 503), slowloris)
    fifty = b"".join(b"w%d NN B-NP\n" % i for i in range(50))
    case(
        "nbest_100000",
        (400, 413),
        lambda: (request(s, "POST", "/tag?nbest=100000", fifty, timeout=timeout)[0], {}),
    )

    bomb = gzip.compress(b"Confidence NN B-NP\n" * 2_750_000, 9)  # 52 MB inflated

    def gzip_bomb():
        other = {}

        def small():
            time.sleep(0.3)
            t = time.perf_counter()
            try:
                other["status"] = request(s, "POST", "/tag", one, timeout=timeout)[0]
            except OSError as e:
                other["status"] = repr(e)
            other["other_client_s"] = round(time.perf_counter() - t, 3)

        th = threading.Thread(target=small)
        th.start()
        st = request(s, "POST", "/tag", bomb, {"Content-Encoding": "gzip"}, timeout)[0]
        th.join()
        return st, {"compressed_kb": len(bomb) >> 10, **other}

    case("gzip_bomb", (413,), gzip_bomb)
    big = b"w NN B-NP\n" * 2_000_000  # 20 MB
    head = b"POST /tag HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n"
    case("content_length_-1", (400, 413), lambda: (status_of(raw(s, head, big, timeout)), {}))

    return out


def throughput(s, body: bytes, clients: int, seconds: float) -> tuple[float, float]:
    """Requests/s of POST /tag with ``body`` from ``clients`` threads for ``seconds``, and the
    server's CPU milliseconds per request (less sensitive to the machine's load)."""
    cpu0 = s.cpu_seconds()
    stop = time.perf_counter() + seconds
    counts = [0] * clients
    errors = []

    def go(i):
        c = http.client.HTTPConnection(s.host, s.port, timeout=60)
        try:
            while time.perf_counter() < stop:
                c.request("POST", "/tag", body=body, headers={"Content-Type": "text/plain"})
                r = c.getresponse()
                r.read()
                if r.status != 200:
                    errors.append(r.status)
                    c.close()
                    c = http.client.HTTPConnection(s.host, s.port, timeout=60)
                    continue
                counts[i] += 1
        finally:
            c.close()

    t = time.perf_counter()
    ths = [threading.Thread(target=go, args=(i,)) for i in range(clients)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    if errors:
        print(f"    {s.name}: {len(errors)} non-200 answers ({sorted(set(errors))})")
    n = sum(counts)
    return n / (time.perf_counter() - t), 1000 * (s.cpu_seconds() - cpu0) / max(n, 1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before-src", default="/work/main/src")
    ap.add_argument("--after-stdlib", action="store_true", help="also this tree's stdlib fallback")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--probe-timeout", type=float, default=60.0)
    ap.add_argument("--skip-probes", action="store_true")
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument(
        "--probe-servers", default="before,after,after-stdlib", help="whose probes to run"
    )
    ap.add_argument("--no-record", action="store_true")
    args = ap.parse_args(argv)
    after_src = str(ROOT / "src")
    sys.path.insert(0, after_src)
    from crfkit import cli
    from crfkit.datasets import synthetic

    tmp = tempfile.mkdtemp(prefix="serve_bench_")
    synthetic.write(f"{tmp}/train.txt", 500, seed=1)
    synthetic.write(f"{tmp}/test.txt", 200, seed=2)
    model = f"{tmp}/model.crfkit"
    assert cli.main(["train", f"{tmp}/train.txt", "-m", model, "--max-iterations", "10", "-q"]) == 0
    sents = Path(f"{tmp}/test.txt").read_bytes().split(b"\n\n")
    one = sents[0] + b"\n\n"
    hundred = b"\n\n".join(sents[:100]) + b"\n\n"
    up = os.getloadavg()
    print(f"load average {up[0]:.2f} {up[1]:.2f} {up[2]:.2f}; model {model}", flush=True)
    after_opts = ["--header-timeout", "2", "--body-timeout", "10"]
    specs = [("before", args.before_src, []), ("after", after_src, after_opts)]
    if args.after_stdlib:
        specs.append(("after-stdlib", after_src, after_opts + ["--stdlib-server"]))
    figures = {"load_start": [round(x, 2) for x in up]}
    servers = [Server(n, src, model, extra, tmp) for n, src, extra in specs]
    try:
        if not args.skip_throughput:
            cells = [(n, c) for n in (1, 100) for c in (1, 8)]
            runs = {s.name: {f"{n}x{c}": [] for n, c in cells} for s in servers}
            cpu = {s.name: {f"{n}x{c}": [] for n, c in cells} for s in servers}
            for r in range(args.repeats):
                for n, c in cells:
                    for s in servers:
                        body = one if n == 1 else hundred
                        rps, ms = throughput(s, body, c, args.seconds)
                        runs[s.name][f"{n}x{c}"].append(rps)
                        cpu[s.name][f"{n}x{c}"].append(ms)
                print(
                    f"  repeat {r + 1}: "
                    + json.dumps(
                        {k: {c: round(v[-1], 1) for c, v in d.items()} for k, d in runs.items()}
                    ),
                    flush=True,
                )
            med = {
                k: {c: round(statistics.median(v), 1) for c, v in d.items()}
                for k, d in runs.items()
            }
            cmed = {
                k: {c: round(statistics.median(v), 2) for c, v in d.items()} for k, d in cpu.items()
            }
            figures["throughput_rps_median"] = med
            figures["throughput_rps_runs"] = runs
            figures["server_cpu_ms_per_request_median"] = cmed
            figures["server_cpu_ms_per_request_runs"] = cpu
            print(f"\nrequests/s (median of {args.repeats}; sentences x clients)")
            print("| cell | " + " | ".join(s.name for s in servers) + " | after/before |")
            for n, c in cells:
                k = f"{n}x{c}"
                row = [med[s.name][k] for s in servers]
                print(
                    f"| {n} sentence(s), {c} client(s) | "
                    + " | ".join(f"{v:.1f}" for v in row)
                    + f" | {row[1] / row[0]:.2f}x |"
                )
            print(f"\nserver CPU ms per request (median of {args.repeats})")
            print("| cell | " + " | ".join(s.name for s in servers) + " | after/before |")
            for n, c in cells:
                k = f"{n}x{c}"
                row = [cmed[s.name][k] for s in servers]
                print(
                    f"| {n} sentence(s), {c} client(s) | "
                    + " | ".join(f"{v:.2f}" for v in row)
                    + f" | {row[1] / row[0]:.2f}x |"
                )
        if not args.skip_probes:
            figures["probes"] = {}
            for s in servers:
                if s.name not in args.probe_servers.split(","):
                    continue
                print(f"\nprobes: {s.name}", flush=True)
                rss = s.peak_rss_mb()
                res = probes(s, hundred, one, args.probe_timeout)
                summary = {
                    "cases": len(res),
                    "clean": sum(v["clean"] for v in res.values()),
                    "failures": sum(not v["clean"] for v in res.values()),
                    "peak_rss_mb": s.peak_rss_mb(),
                    "peak_rss_mb_before_probes": rss,
                    "alive_at_end": s.alive(),
                }
                print(f"  {s.name}: {summary}", flush=True)
                figures["probes"][s.name] = {"summary": summary, "cases": res}
    finally:
        for s in servers:
            s.stop()
    up = os.getloadavg()
    figures["load_end"] = [round(x, 2) for x in up]
    print(f"load average at the end {up[0]:.2f} {up[1]:.2f} {up[2]:.2f}")
    if not args.no_record:
        record(figures, notes="stdlib server (before) against uvicorn (after)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
