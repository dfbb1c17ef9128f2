"""Start-up latency of the command line: ``crfkit --version`` and ``crfkit tag`` on a 300-token file,
for two source trees in the same run (``--before SRC`` against this checkout's ``src``).

The model is trained here once (CoNLL-2000 train, the built-in templates, observed features, 50
iterations) and the 300-token file is the first sentences of the CoNLL-2000 test set.  Each command runs
as a fresh process (numba caches warm: one untimed run first); wall times, median of ``--repeats``.
The machine may be shared: compare the two columns of one run only.

    PYTHONPATH=src .venv/bin/python benchmarks/startup_latency.py --before /work/main/src [--repeats 5]
"""
from __future__ import annotations

import argparse
import gzip
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def timed(cmd, env, repeats):
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", required=True, help="the src directory to compare against")
    ap.add_argument("--data", default=os.environ.get("CRFKIT_DATA", str(HERE.parent.parent / "shared" / "data")))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--workdir")
    a = ap.parse_args()
    work = Path(a.workdir or tempfile.mkdtemp(prefix="startup-"))
    work.mkdir(parents=True, exist_ok=True)
    after = str(HERE.parent / "src")
    test = work / "t300.txt"
    if not test.exists():
        lines, n = [], 0
        with gzip.open(Path(a.data) / "conll2000" / "test.txt.gz", "rt") as f:
            for line in f:
                lines.append(line)
                n += bool(line.strip())
                if n >= 300 and not line.strip():
                    break
        test.write_text("".join(lines))
    model = work / "m.crfkit"
    env_after = dict(os.environ, PYTHONPATH=after)
    if not model.exists():
        subprocess.run([sys.executable, "-m", "crfkit", "train", str(Path(a.data) / "conll2000" / "train.txt.gz"),
                        "-m", str(model), "--max-iterations", "50", "-q"], env=env_after, check=True,
                       stdout=subprocess.DEVNULL)
    ntok = sum(1 for line in test.read_text().splitlines() if line.strip())
    print(f"tag input: {ntok} tokens; model {model.stat().st_size} bytes; median of {a.repeats}; shared machine")
    print(f"{'command':<28} {'before s':>9} {'after s':>9}")
    for label, args in (("crfkit --version", ["--version"]),
                        ("crfkit tag (300 tokens)", ["tag", "-m", str(model), str(test)])):
        res = []
        for src in (a.before, after):
            env = dict(os.environ, PYTHONPATH=src)
            subprocess.run([sys.executable, "-m", "crfkit", *args], env=env, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)   # warm caches
            res.append(timed([sys.executable, "-m", "crfkit", *args], env, a.repeats))
        print(f"{label:<28} {res[0]:>9.2f} {res[1]:>9.2f}", flush=True)


if __name__ == "__main__":
    main()
