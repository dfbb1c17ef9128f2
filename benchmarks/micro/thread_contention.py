#!/usr/bin/env python
"""Training threads on a busy host: the default thread count against ``--threads 1`` (and the old
default, ``--threads 2``), on a quiet machine and with a competing busy loop pinned to one core.

Why: at a load of 1.6-3, 2 threads took 87.8 s where ``--threads 1`` took 41.3 s.  The numba
kernels' OpenMP threads spun while waiting (libgomp's default wait policy) and a parallel region ends
with its slowest thread, so a thread on a core held by another process slowed every region.  crfkit
now sets a short spin, ``GOMP_SPINCOUNT=2000`` (``crfkit._runtime.omp``); ``threads2_spin`` (2
threads with ``GOMP_SPINCOUNT=300000``, libgomp's default spin, which crfkit leaves alone) is the
first behaviour, ``threads2_passive`` (``OMP_WAIT_POLICY=PASSIVE``) the one before the short spin.

Each configuration (``default``, ``--threads 1``, ``--threads 2``) runs ``crfkit train`` (L-BFGS,
``--iterations`` iterations, on the first ``--sentences`` sentences of CoNLL-2000's training set)
``--rounds`` times, interleaved, once without and once with ``taskset -c 0 python -c 'while 1:
pass'`` running.  Printed: the median optimizer seconds (the ``training:`` line of ``crfkit
train``) and the median wall seconds, and the ratio default / ``--threads 1`` in each setting;
``os.getloadavg()`` before and after (the other load of the machine matters: say it).

Usage:  python benchmarks/micro/thread_contention.py [--sentences 3000] [--iterations 30]
                                                     [--rounds 3] [--cpu 0] [--results FILE.jsonl]
"""

from __future__ import annotations

import argparse
import gzip
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SECONDS = re.compile(r"^training: .*?, ([0-9.]+) s;", re.M)


def _data_file(n: int, d: str) -> str:
    base = os.environ.get("CRFKIT_DATA") or os.path.join(ROOT, "..", "shared", "data")
    src = os.path.join(base, "conll2000", "train.txt.gz")
    opener = gzip.open if src.endswith(".gz") else open
    out = os.path.join(d, f"train{n}.txt")
    k = 0
    with opener(src, "rt", encoding="utf-8") as f, open(out, "w", encoding="utf-8") as g:
        for line in f:
            g.write(line)
            if not line.strip():
                k += 1
                if k >= n:
                    break
    return out


#: name -> (--threads, extra environment); ``threads2_spin`` is the old behaviour: 2 threads with
#: libgomp's default spinning wait (GOMP_SPINCOUNT=300000, which crfkit leaves alone)
CONFIGS = {
    "default": (None, {}),
    "threads1": ("1", {}),
    "threads2": ("2", {}),
    "threads2_spin": ("2", {"GOMP_SPINCOUNT": "300000"}),
    "threads2_passive": ("2", {"OMP_WAIT_POLICY": "PASSIVE"}),
}


def _run(train: str, model: str, iterations: int, config: str) -> tuple[float, float]:
    threads, extra = CONFIGS[config]
    cmd = [sys.executable, "-m", "crfkit", "train", train, "-m", model]
    cmd += ["--max-iterations", str(iterations)]
    if threads is not None:
        cmd += ["--threads", threads]
    env = dict(os.environ, CRFKIT_QUIET_COMPILE="1", **extra)
    for k in ("CRFKIT_THREADS", "OMP_WAIT_POLICY", *(() if extra else ("GOMP_SPINCOUNT",))):
        env.pop(k, None)
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t
    if p.returncode != 0:
        raise SystemExit(f"crfkit train failed ({p.returncode}):\n{p.stderr[-2000:]}")
    m = SECONDS.search(p.stdout + p.stderr)
    return (float(m.group(1)) if m else float("nan")), wall


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sentences", type=int, default=3000)
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cpu", type=int, default=0, help="the core the busy loop is pinned to")
    ap.add_argument("--results", metavar="FILE.jsonl", default=None)
    ap.add_argument(
        "--wait-policies",
        action="store_true",
        help="also run 2 threads with libgomp's long spin and with a passive wait",
    )
    args = ap.parse_args(argv)
    configs = {
        k: v
        for k, v in CONFIGS.items()
        if args.wait_policies or k in ("default", "threads1", "threads2")
    }
    figures: dict = {"load_before": list(os.getloadavg())}
    with tempfile.TemporaryDirectory() as d:
        train = _data_file(args.sentences, d)
        model = os.path.join(d, "m.crfkit")
        _run(train, model, 2, "threads1")  # the kernels loaded (or compiled) once, before timing
        for busy in (False, True):
            hog = None
            if busy:
                hog = subprocess.Popen(
                    ["taskset", "-c", str(args.cpu), sys.executable, "-c", "while True: pass"]
                )
                time.sleep(1.0)
            try:
                got: dict = {k: [] for k in configs}
                for r in range(args.rounds):
                    for name in configs:
                        got[name].append(_run(train, model, args.iterations, name))
                        print(
                            f"{'busy' if busy else 'quiet'} round {r + 1} {name}: "
                            f"optimizer {got[name][-1][0]:.2f} s, wall {got[name][-1][1]:.2f} s "
                            f"(load {os.getloadavg()[0]:.2f})",
                            flush=True,
                        )
            finally:
                if hog is not None:
                    hog.terminate()
                    hog.wait()
            tag = "busy" if busy else "quiet"
            for name in configs:
                figures[f"{tag}_{name}_opt_s"] = statistics.median(x for x, _ in got[name])
                figures[f"{tag}_{name}_wall_s"] = statistics.median(w for _, w in got[name])
            figures[f"{tag}_default_over_threads1"] = (
                figures[f"{tag}_default_opt_s"] / figures[f"{tag}_threads1_opt_s"]
            )
            for n in [k for k in configs if k.startswith("threads2")]:
                figures[f"{tag}_{n}_over_threads1"] = (
                    figures[f"{tag}_{n}_opt_s"] / figures[f"{tag}_threads1_opt_s"]
                )
    figures["load_after"] = list(os.getloadavg())
    print(
        "\nmedian optimizer seconds (wall) over "
        f"{args.rounds} rounds, {args.sentences} sentences, {args.iterations} L-BFGS iterations"
    )
    for tag in ("quiet", "busy"):
        row = "  ".join(
            f"{n} {figures[f'{tag}_{n}_opt_s']:.2f} ({figures[f'{tag}_{n}_wall_s']:.1f})"
            for n in configs
        )
        ratios = "  ".join(
            f"{n}/threads1 {figures[f'{tag}_{n}_over_threads1']:.2f}"
            for n in ("default", *[k for k in configs if k.startswith("threads2")])
        )
        print(f"{tag:5s}: {row}   {ratios}")
    print(f"load average before {figures['load_before']}, after {figures['load_after']}")
    if args.results:
        from _results import record

        record(figures, args.results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
