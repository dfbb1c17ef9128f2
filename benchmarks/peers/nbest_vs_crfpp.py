"""n-best tagging throughput on the CoNLL-2000 test set: ``crfkit tag -n K`` against
``crf_test -n K``.

Both tools train the same model type on CoNLL-2000 train: crfkit's built-in chunking templates (19
unigram templates and ``B``, CRF++ syntax) written to a template file, every (attribute, label) pair
and every label pair a feature (``--support all --transitions all``, what CRF++ builds), L2, a
capped number of L-BFGS iterations (throughput does not depend on how far training went; the models
are trained here, once per run).  Then each tags the test set (2,012 sentences) with ``-n K`` for
each K, writing the output to a file; sentences per second are taken from the wall time (min over
``--repeats``).

crfkit is timed three ways:

* ``cli``: a ``python -m crfkit tag -n K`` process (start-up, model load, reading, templates,
  decoding, writing: what ``crf_test`` does);
* ``in-process``: the same work (:func:`crfkit.tagging.run_decoding`) in this warm process, without
  the interpreter start-up and imports;
* ``kernel``: the n-best decoding itself over the encoded corpus (``CRFModel.nbest`` on attribute
  lists built once), threads as given.

* ``server-tN``: a ``crfkit tag --server URL`` client process against a warm ``crfkit serve``
  process with N threads (``--server-threads``; the server's CPU time during the run is added to the
  client's): what a shell loop or a web service pays once the model is loaded.  Its output must be
  byte-identical to the ``crfkit tag -m`` process's (printed).

crf_test is one process per run; the whole processes (crf_test, crfkit, and with ``--before SRC``
the crfkit of another source tree) take turns, each round running every one, and their CPU times are
printed too.  The machine may be shared: compare the figures of one run only.

    PYTHONPATH=src .venv/bin/python benchmarks/peers/nbest_vs_crfpp.py [--peers /tmp/peers/bin] [--k 5,10]
        [--iterations 30] [--repeats 3] [--threads 1] [--server-threads 1,0] [--before /path/to/other/src]
"""

from __future__ import annotations

import argparse
import argparse as _ap
import gzip
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def peers_bin(arg: str | None) -> Path:
    if arg:
        return Path(arg)
    out = (
        subprocess.run(
            ["bash", str(HERE.parents[2] / "shared" / "peers" / "build.sh")],
            check=True,
            capture_output=True,
            text=True,
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    return Path(out)


def _cpu_of(proc) -> float:
    """User + system CPU seconds of a running process so far (0 for None)."""
    if proc is None:
        return 0.0
    with open(f"/proc/{proc.pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_server(py, model, threads: int, work: Path, env) -> tuple[subprocess.Popen, str]:
    """A ``crfkit serve`` process on a free port (kernels warmed before it listens) and its URL."""
    url_file = work / f"serve.t{threads}.url"
    if url_file.exists():
        url_file.unlink()
    log = open(work / f"serve.t{threads}.log", "w")
    proc = subprocess.Popen(
        py
        + [
            "serve",
            "-m",
            str(model),
            "--port",
            "0",
            "--url-file",
            str(url_file),
            "--threads",
            str(threads),
        ],
        env=env,
        stderr=log,
        stdout=log,
    )
    for _ in range(1200):
        if url_file.exists():
            return proc, url_file.read_text().strip()
        if proc.poll() is not None:
            raise SystemExit(f"crfkit serve exited with status {proc.returncode}: see {log.name}")
        time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"crfkit serve did not start in 120 s: see {log.name}")


def turns(runs: dict, repeats: int) -> dict:
    """Min wall and min CPU time (the child's rusage) of each of ``runs`` ({name: (cmd, kwargs)}),
    the commands taking turns (each round runs every one), so that all see the same load.
    ``kwargs`` go to ``subprocess.run``, but ``stdout_path``: standard output to that file,
    rewritten by each run."""
    res = {k: [float("inf"), float("inf")] for k in runs}
    for _ in range(repeats):
        for k, (cmd, kw) in runs.items():
            kw = dict(kw)
            out = kw.pop("stdout_path", None)
            server = kw.pop("server", None)  # a crfkit serve process: its CPU time counts too
            s0 = _cpu_of(server)
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            t = time.perf_counter()
            if out is None:
                subprocess.run(cmd, check=True, **kw)
            else:  # a fresh file per run (one run's output, not every run's appended)
                with open(out, "w") as f:
                    subprocess.run(cmd, check=True, stdout=f, **kw)
            w = time.perf_counter() - t
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            c = r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime + _cpu_of(server) - s0
            res[k] = [min(res[k][0], w), min(res[k][1], c)]
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--peers",
        help="directory holding crf_learn / crf_test (default: build with shared/peers/build.sh)",
    )
    ap.add_argument(
        "--data", default=os.environ.get("CRFKIT_DATA", str(HERE.parents[2] / "shared" / "data"))
    )
    ap.add_argument("--k", default="5,10")
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--workdir", help="keep the models and outputs here (default: a temporary directory)"
    )
    ap.add_argument(
        "--server-threads",
        default="1,0",
        help="threads of the `crfkit serve` processes timed through `crfkit tag --server` "
        "(comma-separated; 0: all cores, the server's default; empty: none)",
    )
    ap.add_argument(
        "--before",
        help="another src directory (e.g. main's) whose crfkit tag process is timed too, "
        "taking turns with crfkit's and crf_test's",
    )
    a = ap.parse_args()
    ks = [int(k) for k in a.k.split(",")]
    bindir = peers_bin(a.peers)
    work = Path(a.workdir or tempfile.mkdtemp(prefix="nbest-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    src = Path(a.data) / "conll2000"
    for name in ("train", "test"):
        dst = work / f"{name}.txt"
        if not dst.exists():
            with gzip.open(src / f"{name}.txt.gz", "rb") as f, open(dst, "wb") as g:
                shutil.copyfileobj(f, g)
    from crfkit.features.templates import default_chunking_templates

    tpl = work / "template"
    tpl.write_text(default_chunking_templates().source)
    env = dict(os.environ)
    py = [sys.executable, "-m", "crfkit"]
    ck_model, pp_model = work / "chunker.crfkit", work / "chunker.crfpp"
    if not ck_model.exists():
        t = time.perf_counter()
        subprocess.run(
            py
            + [
                "train",
                str(work / "train.txt"),
                "-m",
                str(ck_model),
                "-t",
                str(tpl),
                "--support",
                "all",
                "--transitions",
                "all",
                "--max-iterations",
                str(a.iterations),
                "-q",
                "--threads",
                str(a.threads),
            ],
            check=True,
            env=env,
            stdout=subprocess.DEVNULL,
        )
        print(f"crfkit train: {time.perf_counter() - t:.1f} s", flush=True)
    if not pp_model.exists():
        t = time.perf_counter()
        subprocess.run(
            [
                str(bindir / "crf_learn"),
                "-m",
                str(a.iterations),
                "-p",
                str(a.threads),
                str(tpl),
                str(work / "train.txt"),
                str(pp_model),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        print(f"crf_learn: {time.perf_counter() - t:.1f} s", flush=True)
    test = work / "test.txt"
    n_sent = sum(1 for s in test.read_text().split("\n\n") if s.strip())

    # warm the numba caches once (not timed)
    subprocess.run(
        py
        + [
            "tag",
            "-m",
            str(ck_model),
            str(test),
            "-n",
            "2",
            "-o",
            str(work / "warm.txt"),
            "--threads",
            str(a.threads),
        ],
        check=True,
        env=env,
    )

    from crfkit.io.columns import read_columns_list
    from crfkit.model import CRFModel
    from crfkit.parallel import set_threads
    from crfkit.pipeline import attributes_of, tagger_from_model

    set_threads(a.threads)
    model = CRFModel.load(ck_model)
    templates, pad = tagger_from_model(model)
    sents = read_columns_list(str(test), has_labels=True)
    X = attributes_of(sents, templates, pad=pad)

    print(
        f"CoNLL-2000 test: {n_sent} sentences; {model.space.n_labels} labels; crfkit {model.space.n_features} "
        f"features; threads {a.threads}; min of {a.repeats} runs; machine shared with other jobs; load average "
        + " ".join(f"{x:.2f}" for x in os.getloadavg())
    )
    print(
        f"{'K':>3} {'crf_test s':>10} {'sent/s':>8} | {'crfkit cli s':>12} {'sent/s':>8} {'x':>5} | "
        f"{'in-proc s':>9} {'sent/s':>8} {'x':>5} | {'kernel s':>8} {'sent/s':>9}"
    )
    servers = {}
    for t in [int(x) for x in a.server_threads.split(",") if x.strip()]:
        servers[f"server-t{t or os.cpu_count()}"] = start_server(py, ck_model, t, work, env)
    cpu_rows = []
    try:
        _time_all(
            a,
            ks,
            py,
            env,
            work,
            bindir,
            ck_model,
            pp_model,
            test,
            n_sent,
            model,
            X,
            servers,
            cpu_rows,
        )
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait()
    report(a, ks, work, cpu_rows, servers)


def _time_all(
    a, ks, py, env, work, bindir, ck_model, pp_model, test, n_sent, model, X, servers, cpu_rows
):
    from crfkit.model import CRFModel
    from crfkit.tagging import run_decoding

    for k in ks:
        tag = ["tag", "-m", str(ck_model), str(test), "-n", str(k), "--threads", str(a.threads)]
        runs = {
            "crf_test": (
                [str(bindir / "crf_test"), "-n", str(k), "-m", str(pp_model), str(test)],
                dict(stdout_path=work / f"crfpp.n{k}.txt"),
            ),
            "crfkit": (py + tag + ["-o", str(work / f"crfkit.n{k}.txt")], dict(env=env)),
        }
        if a.before:
            runs["before"] = (
                py + tag + ["-o", str(work / f"before.n{k}.txt")],
                dict(env=dict(env, PYTHONPATH=a.before)),
            )
        for name, (proc, url) in servers.items():
            runs[name] = (
                py
                + [
                    "tag",
                    "--server",
                    url,
                    str(test),
                    "-n",
                    str(k),
                    "-o",
                    str(work / f"{name}.n{k}.txt"),
                ],
                dict(env=env, server=proc),
            )
        res = turns(runs, a.repeats)
        t_pp, t_cli = res["crf_test"][0], res["crfkit"][0]
        cpu_rows.append((k, res))
        best_in = float("inf")
        for _ in range(a.repeats):
            args = _ap.Namespace(
                nbest=k,
                constraints=None,
                forbid=None,
                allowed_column=None,
                force=False,
                decode="viterbi",
                reference=False,
                labels=None,
                threads=a.threads,
                output=str(work / f"crfkit-inproc.n{k}.txt"),
                marginals=False,
                probability=False,
                all_marginals=False,
                eval=False,
            )
            t = time.perf_counter()
            run_decoding(args, CRFModel.load(ck_model), "columns", str(test))
            best_in = min(best_in, time.perf_counter() - t)
        best_k = float("inf")
        for _ in range(a.repeats):
            t = time.perf_counter()
            model.nbest(X, k, threads=a.threads)
            best_k = min(best_k, time.perf_counter() - t)
        print(
            f"{k:>3} {t_pp:>10.2f} {n_sent / t_pp:>8.0f} | {t_cli:>12.2f} {n_sent / t_cli:>8.0f} "
            f"{t_pp / t_cli:>5.2f} | {best_in:>9.2f} {n_sent / best_in:>8.0f} {t_pp / best_in:>5.2f} | "
            f"{best_k:>8.3f} {n_sent / best_k:>9.0f}",
            flush=True,
        )


def report(a, ks, work, cpu_rows, servers):
    # agreement of the top candidates (different trainers: a rough check, not equality)
    def tops(path):
        out, cur, take = [], [], False
        for line in open(path):
            line = line.rstrip("\n")
            if line.startswith("# "):
                take = line.split()[1] == "0"
                continue
            if not line:
                if cur:
                    out.append(cur)
                cur = []
                continue
            if take:
                cur.append(line.split("\t")[-1])
        return out

    print("whole processes, taking turns (min wall / min CPU s; crf_test's over crfkit's):")
    for k, res in cpu_rows:
        pp = res["crf_test"]
        print(
            f"  K={k}: "
            + "; ".join(
                f"{n} {w:.2f} / {c:.2f} ({pp[0] / w:.2f}x / {pp[1] / c:.2f}x)"
                for n, (w, c) in res.items()
            )
        )
    if servers:
        print(
            "crfkit tag --server URL (a client process; the warm `crfkit serve` process's CPU counted too):"
        )
        for k, res in cpu_rows:
            pp = res["crf_test"]
            for name in servers:
                w, c = res[name]
                same = (work / f"{name}.n{k}.txt").read_bytes() == (
                    work / f"crfkit.n{k}.txt"
                ).read_bytes()
                print(
                    f"  K={k} {name}: {w:.2f} s wall, {pp[0] / w:.2f}x crf_test's sentences per second ({pp[1] / c:.2f}x its CPU); output "
                    f"{'identical to' if same else 'DIFFERENT from'} `crfkit tag -m`'s"
                )
    if a.before:
        for k in ks:
            same = (work / f"before.n{k}.txt").read_bytes() == (
                work / f"crfkit.n{k}.txt"
            ).read_bytes()
            print(f"  K={k}: output {'identical to' if same else 'DIFFERENT from'} --before's")
    a_pp, a_ck = tops(work / f"crfpp.n{ks[0]}.txt"), tops(work / f"crfkit.n{ks[0]}.txt")
    same = sum(x == y for x, y in zip(a_pp, a_ck))
    print(
        f"top-1 candidates identical in {same} of {len(a_ck)} sentences (two differently trained models)"
    )
    print("load average " + " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
