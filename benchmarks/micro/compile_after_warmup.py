#!/usr/bin/env python
"""After ``crfkit warmup``: does any main command still compile?  Runs the commands of a new user's
first hour in this process on a CoNLL-2000 sample and prints, per command, its wall seconds and the
kernels it compiled (crfkit's compile listener, ``crfkit._runtime.compile_notice.compile_stats``):
``crfkit train`` with L-BFGS, OWL-QN (c1), SDCA, SGD-L1, SAG; ``crfkit tag``, ``tag -n 3``,
``tag --constraints bio``, ``tag --marginals``; ``CRF.fit(c1=...)``, ``predict``,
``predict(constraints="bio")``, ``predict_nbest``; the demo.

Run it with the numba cache that ``crfkit warmup`` filled (for a fresh-install check:
``NUMBA_CACHE_DIR=$(mktemp -d) crfkit warmup && NUMBA_CACHE_DIR=<same> python
benchmarks/micro/compile_after_warmup.py``).  The target: no command compiles (the longest compile
pause printed last is 0 s, at most 2 s).

Usage:  python benchmarks/micro/compile_after_warmup.py [--sentences 500] [--results FILE.jsonl]
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _sample(src: str, n: int, out: str) -> str:
    opener = gzip.open if src.endswith(".gz") else open
    k = 0
    with opener(src, "rt", encoding="utf-8") as f, open(out, "w", encoding="utf-8") as g:
        for line in f:
            g.write(line)
            if not line.strip():
                k += 1
                if k >= n:
                    break
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sentences", type=int, default=500)
    ap.add_argument("--results", metavar="FILE.jsonl", default=None)
    ap.add_argument(
        "--skip",
        action="append",
        default=[],
        metavar="TEXT",
        help="leave out the commands whose name contains TEXT (repeatable)",
    )
    args = ap.parse_args(argv)
    os.environ.setdefault("CRFKIT_QUIET_COMPILE", "1")
    from crfkit import CRF
    from crfkit._runtime.compile_notice import compile_stats
    from crfkit.cli import main as cli
    from crfkit.io.columns import read_columns_list

    base = os.environ.get("CRFKIT_DATA") or os.path.join(ROOT, "..", "shared", "data")
    rows = []
    with tempfile.TemporaryDirectory() as d:
        train = _sample(os.path.join(base, "conll2000", "train.txt.gz"), args.sentences, f"{d}/tr")
        test = _sample(os.path.join(base, "conll2000", "test.txt.gz"), args.sentences, f"{d}/te")
        m = f"{d}/m.crfkit"
        sents = read_columns_list(train)
        X = [[[f"w={c[0]}", f"p={c[1]}"] for c in s.columns] for s in sents]
        Y = [list(s.labels) for s in sents]

        def run(name, fn):
            if any(t in name for t in args.skip):
                return
            before = compile_stats()
            t = time.perf_counter()
            with (
                contextlib.redirect_stdout(io.StringIO()),
                contextlib.redirect_stderr(io.StringIO()),
            ):
                fn()
            wall = time.perf_counter() - t
            st = compile_stats()
            rows.append(
                (name, wall, st["count"] - before["count"], st["seconds"] - before["seconds"])
            )
            print(
                f"{name:40s} {wall:7.2f} s  compiled {rows[-1][2]:3d} kernels in "
                f"{rows[-1][3]:6.2f} s",
                flush=True,
            )

        def cl(*a):
            return lambda: cli([str(x) for x in a])

        for alg in ("lbfgs", "sdca", "sgd-l1", "sag"):
            run(
                f"crfkit train -a {alg}",
                cl("train", train, "-m", m, "-a", alg, "--max-iterations", "3", "-q"),
            )
        run(
            "crfkit train --c1 0.1 (owlqn)",
            cl("train", train, "-m", m, "--c1", "0.1", "--max-iterations", "3", "-q"),
        )
        out = f"{d}/out"
        run("crfkit tag", cl("tag", "-m", m, test, "-o", out, "--force"))
        run("crfkit tag -n 3", cl("tag", "-m", m, test, "-o", out, "--force", "-n", "3"))
        run(
            "crfkit tag --constraints bio",
            cl("tag", "-m", m, test, "-o", out, "--force", "--constraints", "bio"),
        )
        run("crfkit tag --marginals", cl("tag", "-m", m, test, "-o", out, "--force", "--marginals"))
        crf = CRF(c1=0.1, c2=0.1, max_iterations=3)
        run("CRF(c1=0.1).fit", lambda: crf.fit(X, Y))
        run("CRF.predict", lambda: crf.predict(X))
        run("CRF.predict(constraints='bio')", lambda: crf.predict(X, constraints="bio"))
        run("CRF.predict_nbest(3)", lambda: crf.predict_nbest(X, 3))
        run("CRF.predict_marginals", lambda: crf.predict_marginals(X))
        sd = CRF(algorithm="sdca", c2=0.1, max_iterations=2)
        run("CRF(algorithm='sdca').fit", lambda: sd.fit(X, Y))
    worst = max(rows, key=lambda r: r[3])
    print(
        f"\nlongest compile pause: {worst[3]:.2f} s ({worst[0]}); kernels compiled in all: "
        f"{sum(r[2] for r in rows)}; load {os.getloadavg()}"
    )
    if args.results:
        from _results import record

        record(
            {
                "longest_compile_s": worst[3],
                "kernels_compiled": sum(r[2] for r in rows),
                "commands": {
                    r[0]: {"wall_s": r[1], "compiled": r[2], "compile_s": r[3]} for r in rows
                },
            },
            args.results,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
