#!/usr/bin/env python
"""Peak RSS of everyday training against python-crfsuite's (issue 18's everyday-scale target: at
most python-crfsuite's), each trainer in its own process, on the two sets the issue names.

* ``conll2000``: ``crfkit train`` (the CLI, its built-in chunking templates: CRFsuite's chunking
  attributes) on CoNLL-2000's training file, against python-crfsuite fed the same attributes
  (``benchmarks/peers/conll2000_vs_crfsuite.py``'s generator, which the README's Performance table
  uses), appended one sentence at a time as they are read (python-crfsuite's best case: no list of
  the training set is held).  Both L-BFGS, c2 = 1, ``--iterations`` iterations.
* ``tutorial``: the sklearn-crfsuite tutorial (CoNLL-2002 Spanish, its ``word2features`` dicts for
  the training and test sets held by the caller, as in the tutorial), ``CRF.fit`` then ``predict``
  with crfkit and with sklearn-crfsuite (``benchmarks/peers/sklearn_crfsuite_port.py``'s features
  and call).

Peak RSS is the child's ``ru_maxrss`` (``os.wait4``), so start-up, imports and reading count for
both.  The iteration count matters little to the peak (it is reached in the first iterations:
nothing grows per iteration but the trace); the default is 30.  Numba's kernel cache is warmed first
in a separate process (a fresh checkout would otherwise compile inside the measured run).  Memory
figures are not affected by other load on the machine; the wall times printed are.

Usage:  python benchmarks/memory/train_memory.py [--sets conll2000,tutorial] [--iterations 30] [--data-dir DIR]
                                          [--json OUT] [--src OTHER_TREE/src]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "..", "src")
PEERS = os.path.join(
    os.path.dirname(HERE), "peers"
)  # conll2000_vs_crfsuite.py, sklearn_crfsuite_port.py


def data_dir(arg: str | None) -> str:
    return (
        arg
        or os.environ.get("CRFKIT_DATA")
        or os.path.join(HERE, "..", "..", "..", "shared", "data")
    )


# --------------------------------------------------------------------------- workers (child
# processes)
def _read_sentences(path):
    """(rows, labels) per sentence of a column file, in plain Python (no crfkit import in crfsuite's
    process)."""
    import gzip

    rows, labels = [], []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                if rows:
                    yield rows, labels
                rows, labels = [], []
                continue
            parts = line.split()
            rows.append(parts[:-1])
            labels.append(parts[-1])
    if rows:
        yield rows, labels


def worker_crfsuite_conll(args) -> dict:
    import pycrfsuite

    sys.path.insert(0, PEERS)
    from conll2000_vs_crfsuite import attributes

    tr = pycrfsuite.Trainer(verbose=False)
    n = 0
    for rows, labels in _read_sentences(os.path.join(args.data_dir, "conll2000", "train.txt.gz")):
        tr.append(attributes(rows), labels)
        n += 1
    tr.select("lbfgs")
    tr.set_params({"c2": 1.0, "max_iterations": args.iterations})
    tr.train(os.path.join(args.tmp, "crfsuite.model"))
    return {
        "sequences": n,
        "features": int(tr.logparser.featgen_num_features or 0),
        "iterations": len(tr.logparser.iterations),
    }


def run_crfkit_conll(args) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "crfkit",
        "train",
        os.path.join(args.data_dir, "conll2000", "train.txt.gz"),
        "-m",
        os.path.join(args.tmp, "crfkit.model"),
        "--c2",
        "1",
        "--max-iterations",
        str(args.iterations),
        "--delta",
        "0",
        "--epsilon",
        "0",
    ]
    return _child(cmd, out_file=None)


def worker_tutorial(args, lib: str) -> dict:
    sys.path.insert(0, PEERS)
    from sklearn_crfsuite_port import load

    if lib == "crfkit":
        import crfkit as sklearn_crfsuite
    else:
        import sklearn_crfsuite
    X_train, y_train = load(args.data_dir, "train")
    X_test, _ = load(args.data_dir, "testb")
    crf = sklearn_crfsuite.CRF(
        algorithm="lbfgs",
        c1=0.1,
        c2=0.1,
        max_iterations=args.iterations,
        all_possible_transitions=True,
    )
    crf.fit(X_train, y_train)
    crf.predict(X_test)
    return {"sequences": len(X_train)}


# --------------------------------------------------------------------------- parent
def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("MALLOC_MMAP_THRESHOLD_", None)
    return env


def _child(cmd, out_file) -> dict:
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    err = p.stderr.read().decode(errors="replace")
    p.stderr.close()
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd[:4])} ... failed:\n{err[-3000:]}")
    res = {}
    if out_file:
        with open(out_file) as f:
            res = json.load(f)
    res.update(peak_rss_mb=ru.ru_maxrss / 1024.0, wall_s=wall)
    return res


def _worker_cmd(args, kind, out):
    return [
        sys.executable,
        os.path.abspath(__file__),
        "--worker",
        kind,
        "--out",
        out,
        "--src",
        SRC,
        "--iterations",
        str(args.iterations),
        "--data-dir",
        args.data_dir,
        "--tmp",
        args.tmp,
    ]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default="conll2000,tutorial")
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument(
        "--results",
        metavar="FILE.jsonl",
        default=None,
        help="also append the figures as one record (benchmarks/_results.py: command, date, "
        "commit, machine, figures) to FILE.jsonl, e.g. benchmarks/results/NAME.jsonl",
    )
    ap.add_argument(
        "--src",
        default=None,
        help="crfkit source tree to measure (default: this checkout's src; "
        "e.g. a worktree of an older revision, for a before/after comparison)",
    )
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--tmp", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.data_dir = data_dir(args.data_dir)
    global SRC
    if args.src:
        SRC = os.path.abspath(args.src)
    if args.worker:
        if args.worker == "crfsuite_conll":
            res = worker_crfsuite_conll(args)
        else:
            res = worker_tutorial(args, args.worker.split("_", 1)[1])
        with open(args.out + ".tmp", "w") as f:
            json.dump(res, f)
        os.replace(args.out + ".tmp", args.out)
        return 0
    sets = [s for s in args.sets.split(",") if s]
    results = {}
    with tempfile.TemporaryDirectory(prefix="crfkit-trainmem-") as tmp:
        args.tmp = tmp
        # load (or, on a fresh checkout, compile) numba's kernel cache outside the measured runs
        subprocess.run(
            [
                sys.executable,
                "-c",
                "from crfkit.train import train; from crfkit import CRF; "
                "train([[['a'], ['b']]] * 3, [['x', 'y']] * 3, max_iterations=2); "
                "c = CRF(max_iterations=2).fit([[{'a': 'x'}, {'b': 1.0}]] * 3, [['x', 'y']] * 3); "
                "c.predict([[{'a': 'x'}, {'b': 1.0}]] * 300)",
            ],
            env=_env(),
            check=True,
        )
        for s in sets:
            if s == "conll2000":
                peer = _child(
                    _worker_cmd(args, "crfsuite_conll", os.path.join(tmp, "cs.json")),
                    os.path.join(tmp, "cs.json"),
                )
                ours = run_crfkit_conll(args)
                results[s] = {"python-crfsuite": peer, "crfkit train": ours}
            elif s == "tutorial":
                peer = _child(
                    _worker_cmd(args, "tutorial_sklearn_crfsuite", os.path.join(tmp, "sk.json")),
                    os.path.join(tmp, "sk.json"),
                )
                ours = _child(
                    _worker_cmd(args, "tutorial_crfkit", os.path.join(tmp, "ck.json")),
                    os.path.join(tmp, "ck.json"),
                )
                results[s] = {"sklearn-crfsuite": peer, "crfkit CRF.fit": ours}
            else:
                raise SystemExit(f"unknown set {s!r} (conll2000, tutorial)")
            (pn, p), (on, o) = results[s].items()
            ratio = o["peak_rss_mb"] / p["peak_rss_mb"]
            results[s]["ratio"] = ratio
            print(
                f"{s:10s} peak RSS: {pn} {p['peak_rss_mb']:.1f} MB ({p['wall_s']:.1f} s wall), "
                f"{on} {o['peak_rss_mb']:.1f} MB ({o['wall_s']:.1f} s wall): {ratio:.3f}x "
                f"({'met' if ratio <= 1.0 else 'MISSED'}: target <= 1)",
                flush=True,
            )
    figures = {"iterations": args.iterations, "results": results}
    if args.json:
        with open(args.json + ".tmp", "w") as f:
            json.dump(figures, f, indent=1)
        os.replace(args.json + ".tmp", args.json)
    if args.results:  # one record in the benchmarks/results/ schema
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        import _results

        _results.record(figures, args.results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
