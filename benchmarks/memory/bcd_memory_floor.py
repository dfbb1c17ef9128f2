#!/usr/bin/env python
"""What a crfkit BCD run on NETtalk holds before its caches: resident memory at each stage of one
process, against Wapiti's whole peak for the same cell.

Issue 18 asks BCD at 3-grm (Wapiti's feature space, joint blocks, Wapiti's step rule) to peak at
most at Wapiti's RSS (123 MB).  This script shows where a crfkit process stands on the way there.
The training file is written first, by the parent (not measured); the child then reports
VmRSS / VmHWM (``/proc/self/status``) after each of: the interpreter; ``import numpy``;
``import llvmlite.binding`` (the LLVM shared library numba compiles and loads kernels with);
``import numba``; crfkit's modules; the training file read and encoded (BCD's engine about to be
built); the engine built, before any cache page is touched (its caches are ``np.zeros``: untouched
pages are not resident); each sweep; the end.  Wapiti's figure is its record in
``benchmarks/results/nettalk_bcd_2026-11-25.jsonl`` (``ru_maxrss`` of ``wapiti train``, measured by
``nettalk_tables.py`` on this machine).

The engine stages are taken by wrapping ``crfkit.optim.bcd.Engine.__init__`` in the child (a
measurement hook; nothing else changes).

Usage:  python benchmarks/memory/bcd_memory_floor.py [--features nettalk:3-grm] [--sweeps 2] [--data-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
BENCHMARKS = os.path.dirname(HERE)
WAPITI_RECORDS = os.path.join(BENCHMARKS, "results", "nettalk_bcd_2026-11-25.jsonl")
sys.path.insert(0, HERE)
sys.path.insert(0, BENCHMARKS)
# a results record's figures (benchmarks/_results.py; standard library only)
from memory_scale import vm  # noqa: E402  (VmRSS / VmHWM in MB; that module imports the standard library only)

from _results import figures


def child(train_path: str, features: str, sweeps: int) -> None:
    rows = []

    def mark(stage):
        rss, hwm = vm("VmRSS"), vm("VmHWM")
        rows.append({"stage": stage, "rss_mb": rss, "hwm_mb": hwm})
        print(json.dumps(rows[-1]), flush=True)

    mark("interpreter")
    import numpy  # noqa: F401

    mark("import numpy")
    import llvmlite.binding  # noqa: F401

    mark("import llvmlite.binding")
    import numba  # noqa: F401

    mark("import numba")
    import crfkit.optim.bcd as bcd_mod
    from crfkit.features.windows import preset_templates
    from crfkit.pipeline import train_columns

    mark("import crfkit")
    init = bcd_mod.Engine.__init__

    def measured_init(self, *a, **k):
        mark("corpus encoded (engine next)")
        init(self, *a, **k)
        mark("engine built (no cache touched)")

    bcd_mod.Engine.__init__ = measured_init
    sweep = [0]

    def on_sweep(info):
        sweep[0] += 1
        mark(f"sweep {sweep[0]}")

    train_columns(
        train_path,
        preset_templates(features),
        support="all",
        algorithm="bcd",
        threads=1,
        rho1=0.5,
        rho2=1e-5,
        max_iterations=sweeps,
        seed=0,
        params=dict(delta=0.0, blocks="joint", safeguard="scale"),
        callback=on_sweep,
    )
    mark("end")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--features", default="nettalk:3-grm")
    ap.add_argument("--sweeps", type=int, default=2)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument(
        "--child", nargs=3, metavar=("TRAIN", "FEATURES", "SWEEPS"), help=argparse.SUPPRESS
    )
    args = ap.parse_args(argv)
    if args.child:
        child(args.child[0], args.child[1], int(args.child[2]))
        return 0
    if args.data_dir:
        os.environ["CRFKIT_DATA"] = args.data_dir
    from crfkit.datasets.nettalk import nettalk_split, write_columns

    with tempfile.TemporaryDirectory(prefix="bcd_floor_") as tmp:
        train_path = os.path.join(tmp, "train.txt")
        write_columns(nettalk_split(9)[0], train_path)
        p = subprocess.run(
            [
                sys.executable,
                os.path.abspath(__file__),
                "--child",
                train_path,
                args.features,
                str(args.sweeps),
            ],
            capture_output=True,
            text=True,
        )
    if p.returncode != 0:
        sys.stderr.write(p.stderr)
        return p.returncode
    rows = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    cell = "wapiti-bcd:" + args.features.split(":", 1)[1]
    wapiti = None
    if os.path.exists(WAPITI_RECORDS):
        with open(WAPITI_RECORDS) as f:
            for line in f:
                r = figures(json.loads(line))
                if r.get("cell") == cell:
                    wapiti = r.get("peak_rss_mb")  # the last record of the cell
    print(
        f"crfkit BCD ({args.features}, Wapiti's space, joint blocks, Wapiti's step rule, {args.sweeps} sweeps, "
        f"1 thread): resident memory by stage"
    )
    print(
        f"{'stage':34s} {'RSS MB':>8s} {'peak so far':>11s}"
        + ("   x Wapiti's peak" if wapiti else "")
    )
    for r in rows:
        extra = f"   {r['rss_mb'] / wapiti:.2f}x" if wapiti else ""
        print(f"{r['stage']:34s} {r['rss_mb']:8.1f} {r['hwm_mb']:11.1f}{extra}")
    if wapiti:
        print(f"Wapiti's whole run ({cell}, its record): {wapiti:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
