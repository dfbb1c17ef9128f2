#!/usr/bin/env python
"""Wall and CPU time and size of ``crfkit report`` on the CoNLL-2000 demo model, against ``crfkit tag
--eval`` on the same test file, run in turns in one session.

The model and its trace are what ``crfkit demo --out DIR`` (``make chunker``) writes:
``DIR/conll2000-chunker.crfkit`` and ``DIR/conll2000-trace.jsonl``. Three commands are timed, each
``--runs`` times in turns (each a fresh process, as a user runs them): the report from the model and
the trace, the report with the test set too, and ``crfkit tag --eval`` of the test set (the peer:
reading, tagging and scoring the same file). It prints every run, the medians, the ratios of the
medians to the peer's, the sizes of the reports and the load average, and records them.

Usage:  python benchmarks/micro/report_time.py --dir runs [--test TEST] [--runs 3] [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _results import record  # noqa: E402


def _timed(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + sys) of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", required=True, help="crfkit demo's output directory")
    ap.add_argument("--test", help="the test file (default: CoNLL-2000's, from $CRFKIT_DATA)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", help="where the reports go (default: a temporary directory)")
    ap.add_argument("--no-record", action="store_true", help="do not append to benchmarks/results")
    a = ap.parse_args(argv)
    model = os.path.join(a.dir, "conll2000-chunker.crfkit")
    trace = os.path.join(a.dir, "conll2000-trace.jsonl")
    if not (os.path.isfile(model) and os.path.isfile(trace)):
        print(f"no demo model and trace in {a.dir}: run crfkit demo --out {a.dir}", file=sys.stderr)
        return 2
    test = a.test
    if test is None:
        from crfkit.datasets import conll2000_paths

        paths = conll2000_paths()
        if paths is None:
            print("CoNLL-2000 not found: give --test or set CRFKIT_DATA", file=sys.stderr)
            return 2
        test = str(paths[1])
    out = a.out or tempfile.mkdtemp(prefix="crfkit-report-time-")
    crfkit = [sys.executable, "-m", "crfkit"]
    html1, html2 = os.path.join(out, "model-trace.html"), os.path.join(out, "with-test.html")
    cmds = {
        "report model+trace": crfkit + ["report", "-m", model, "--trace", trace, "-o", html1],
        "report model+trace+test": crfkit
        + ["report", "-m", model, "--trace", trace, "--test", test, "-o", html2],
        "peer: tag --eval": crfkit + ["tag", "-m", model, test, "--eval", "-o", os.devnull],
    }
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in cmds}
    load = [os.getloadavg()]
    for _ in range(a.runs):
        for name, cmd in cmds.items():
            times[name].append(_timed(cmd))
    load.append(os.getloadavg())
    med = {
        k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
        for k, v in times.items()
    }
    peer = med["peer: tag --eval"]
    for name, v in times.items():
        runs = ", ".join(f"{w:.2f}/{c:.2f}" for w, c in v)
        print(
            f"{name:<25} wall/CPU s: {runs}; median wall {med[name][0]:.2f} s, CPU {med[name][1]:.2f} s"
            f" ({med[name][0] / peer[0]:.2f}x / {med[name][1] / peer[1]:.2f}x the peer)"
        )
    sizes = {"model+trace": os.path.getsize(html1), "model+trace+test": os.path.getsize(html2)}
    print("report sizes: " + ", ".join(f"{k} {v:,} bytes" for k, v in sizes.items()))
    la = " -> ".join(" ".join(f"{x:.2f}" for x in x3) for x3 in load)
    print(f"load average (1, 5, 15 min) before -> after: {la}")
    if not a.no_record:
        record(
            {
                "runs": {k: [{"wall_s": w, "cpu_s": c} for w, c in v] for k, v in times.items()},
                "median_wall_s": {k: v[0] for k, v in med.items()},
                "median_cpu_s": {k: v[1] for k, v in med.items()},
                "ratio_wall_to_peer": {k: v[0] / peer[0] for k, v in med.items()},
                "report_bytes": sizes,
                "loadavg": load,
            },
            notes=f"load average {la}",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
