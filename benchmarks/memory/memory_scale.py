#!/usr/bin/env python
"""Peak RSS of training against the size of the candidate feature space (OWL-QN, SGD-L1, BCD).

A synthetic corpus shaped like NETtalk (words of ~8 letters, 51 labels, Lavergne et al. 2010 section
5) whose candidate space is set by the number of distinct attributes: with ``owlqn`` most candidates
are label-pair x observation features (every one of the L^2 label pairs with each bigram attribute,
as Wapiti's ``*`` patterns and the paper's 5-grm: 123.6M features), the rest (attribute, label)
state features; SGD-L1 and BCD do not take label-pair x observation features yet, so their
candidates are all state features (every label with each attribute).  Every attribute occurs in the
corpus.  The labels follow a Markov chain and about half of a token's attributes depend on its label
(and, for bigram attributes, on the previous one), so training makes progress and L1 leaves few
features active.

Each (size, algorithm) runs in its own subprocess (peak RSS is its own, VmHWM), which builds the
feature space and the encoded corpus with numpy (no Python token lists), then trains a few
iterations (``--iterations``; epochs for the stochastic methods) with rho1 = 0.5, rho2 = 1e-5 in
Wapiti's units.  A watchdog kills a run whose RSS passes ``--max-gb`` (the machine is shared), and
the table says so.

Printed per run: candidate features, RSS after the build (the feature space, the corpus, the start
of the interpreter), peak RSS, the peak's bytes per candidate feature, the training's own excess
(peak - RSS after the build) per candidate, seconds per iteration and the active features at the
end. ``--baseline-src DIR`` also runs the worker on another tree (e.g. the revision before the
gradient reduction), for before/after figures in one run.

Usage:  python benchmarks/memory/memory_scale.py [--sizes 10e6 30e6 100e6] [--algorithms owlqn sgd-l1 bcd]
        [--iterations 3] [--threads 1] [--max-gb 10] [--baseline-src DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))  # the repository: this file is in benchmarks/memory/

L = 51  # NETtalk's phonemes
SEQ_LEN = 8  # letters per word, about
STATE_PER_TOKEN = 6  # 5-grm: the letter and the centred windows of 3 and 5, ... (as attributes)
BIGRAM_PER_TOKEN = 6


def vm(key: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def synthetic(candidates: float, bigram: bool, seed: int = 0):
    """(space, corpus) with about ``candidates`` features, all numpy."""
    import numpy as np

    from crfkit.corpus import Corpus
    from crfkit.model import FeatureSpace

    rng = np.random.default_rng(seed)
    if bigram:
        n_battr = max(1, int(0.95 * candidates) // (L * L))
        n_attr = max(1, int(0.05 * candidates) // L)
    else:
        n_battr = 0
        n_attr = max(1, int(candidates) // L)
    # enough tokens that every attribute occurs: at least ~2 occurrences per attribute
    n_tok_needed = max(2 * n_attr // STATE_PER_TOKEN, 2 * n_battr // BIGRAM_PER_TOKEN, 100_000)
    n_seq = n_tok_needed // SEQ_LEN + 1
    lens = rng.integers(SEQ_LEN - 4, SEQ_LEN + 5, size=n_seq)
    seq_ptr = np.zeros(n_seq + 1, np.int64)
    np.cumsum(lens, out=seq_ptr[1:])
    T = int(seq_ptr[-1])
    # labels: a sticky random Markov chain
    P = rng.dirichlet(np.full(L, 0.3), size=L)
    cum = np.cumsum(P, axis=1)
    y = np.empty(T, np.int32)
    u = rng.random(T)
    first = np.zeros(T, bool)
    first[seq_ptr[:-1]] = True
    prev = 0
    start = rng.integers(0, L, size=n_seq)
    si = 0
    for t in range(T):  # 100k..1M steps: fine in Python for a benchmark's set-up
        if first[t]:
            prev = int(start[si])
            si += 1
        else:
            prev = int(np.searchsorted(cum[prev], u[t]))
            prev = min(prev, L - 1)
        y[t] = prev
    ypre = np.where(first, L, np.roll(y, 1))  # previous label (L at a word's start)

    def entries(n_names, per_token, key):
        a = rng.integers(0, n_names, size=(T, per_token), dtype=np.int64)
        informative = rng.random((T, per_token)) < 0.5
        a = np.where(
            informative, (key[:, None] * 7919 + np.arange(per_token) * 104729) % n_names, a
        )
        return a.astype(np.int32).ravel()

    attr = entries(n_attr, STATE_PER_TOKEN, y.astype(np.int64))
    tok_ptr = np.arange(T + 1, dtype=np.int64) * STATE_PER_TOKEN
    kw = {}
    bspace = {}
    if n_battr:
        battr = entries(n_battr, BIGRAM_PER_TOKEN, ypre.astype(np.int64) * (L + 1) + y)
        kw = dict(
            btok_ptr=np.arange(T + 1, dtype=np.int64) * BIGRAM_PER_TOKEN,
            battr=battr,
            bval=np.ones(len(battr)),
        )
        bspace = dict(
            battributes=[f"b{b}" for b in range(n_battr)],
            battr_ptr=np.arange(n_battr + 1, dtype=np.int64) * (L * L),
            bfeat_pair=np.tile(np.arange(L * L, dtype=np.int32), n_battr),
        )
    corpus = Corpus(seq_ptr=seq_ptr, tok_ptr=tok_ptr, attr=attr, val=np.ones(len(attr)), y=y, **kw)
    space = FeatureSpace(
        labels=[f"p{k}" for k in range(L)],
        attributes=[f"u{a}" for a in range(n_attr)],
        attr_ptr=np.arange(n_attr + 1, dtype=np.int64) * L,
        feat_label=np.tile(np.arange(L, dtype=np.int32), n_attr),
        trans_index=np.arange(L * L, dtype=np.int32).reshape(L, L),
        **bspace,
    )
    return space, corpus


def worker(args) -> None:
    import numpy as np

    from crfkit.objective import regularization
    from crfkit.train import train_corpus

    t0 = time.perf_counter()
    space, corpus = synthetic(args.size, args.algorithm == "owlqn")
    build_s = time.perf_counter() - t0
    rss_build = vm("VmRSS")
    reg = regularization(corpus.n_sequences, rho1=0.5, rho2=1e-5)
    iters = []
    last = [time.perf_counter()]

    def cb(rec):
        now = time.perf_counter()
        iters.append(now - last[0])
        last[0] = now

    t1 = time.perf_counter()
    res = train_corpus(
        space,
        corpus,
        algorithm=args.algorithm,
        reg=reg,
        max_iterations=args.iterations,
        threads=args.threads,
        callback=cb,
        checkpoint=None,
        verbose=False,
    )
    train_s = time.perf_counter() - t1
    out = dict(
        algorithm=args.algorithm,
        candidates=int(space.n_features),
        n_tokens=int(corpus.n_tokens),
        n_bigram=int(space.n_bigram),
        build_s=build_s,
        rss_build_mb=rss_build,
        peak_mb=vm("VmHWM"),
        train_s=train_s,
        iterations=int(res.iterations),
        s_per_iter=train_s / max(res.iterations, 1),
        objective=float(res.objective),
        active=int(np.count_nonzero(res.model.weights)),
    )
    print("RESULT " + json.dumps(out), flush=True)


def run(src: str, size: float, algorithm: str, args) -> dict:
    import psutil

    env = dict(os.environ, PYTHONPATH=os.path.join(src, "src"))
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--worker",
        "--size",
        str(size),
        "--algorithm",
        algorithm,
        "--iterations",
        str(args.iterations),
        "--threads",
        str(args.threads),
    ]
    with tempfile.TemporaryFile("w+") as log:
        p = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
        killed = [False]
        peak = [0.0]

        def watch():
            proc = psutil.Process(p.pid)
            while p.poll() is None:
                try:
                    rss = proc.memory_info().rss / 2**30
                except psutil.Error:
                    break
                peak[0] = max(peak[0], rss)
                if rss > args.max_gb:
                    killed[0] = True
                    p.kill()
                    break
                time.sleep(0.2)

        th = threading.Thread(target=watch, daemon=True)
        th.start()
        p.wait()
        th.join()
        log.seek(0)
        text = log.read()
    for line in text.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    why = f"killed above {args.max_gb} GB" if killed[0] else f"failed (exit {p.returncode})"
    return dict(
        algorithm=algorithm,
        candidates=int(size),
        error=why,
        peak_mb=peak[0] * 1024,
        tail=text[-1500:],
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", type=float, default=[10e6, 30e6, 100e6])
    ap.add_argument("--algorithms", nargs="+", default=["owlqn", "sgd-l1", "bcd"])
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-gb", type=float, default=10.0)
    ap.add_argument("--baseline-src", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument(
        "--results",
        metavar="FILE.jsonl",
        default=None,
        help="also append the figures as one record (benchmarks/_results.py: command, date, "
        "commit, machine, figures) to FILE.jsonl, e.g. benchmarks/results/NAME.jsonl",
    )
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--size", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--algorithm", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    trees = [("after", ROOT)] + ([("before", args.baseline_src)] if args.baseline_src else [])
    print(
        f"load average before: {os.getloadavg()}; {args.threads} thread(s), {args.iterations} iterations, "
        f"L={L}, rho1=0.5, rho2=1e-5",
        flush=True,
    )
    print(
        f"{'tree':>6} {'algorithm':>9} {'candidates':>11} {'tokens':>8} {'build MB':>9} {'peak MB':>8} "
        f"{'B/cand':>7} {'train B/cand':>12} {'s/iter':>7} {'active':>9}",
        flush=True,
    )
    results = []
    for size in args.sizes:
        for alg in args.algorithms:
            for name, src in trees:
                r = run(src, size, alg, args)
                r["tree"] = name
                results.append(r)
                if "error" in r:
                    print(
                        f"{name:>6} {alg:>9} {r['candidates']:>11} {'':>8} {'':>9} {r['peak_mb']:>8.0f} "
                        f"  {r['error']}",
                        flush=True,
                    )
                    continue
                c = r["candidates"]
                print(
                    f"{name:>6} {alg:>9} {c:>11} {r['n_tokens']:>8} {r['rss_build_mb']:>9.0f} "
                    f"{r['peak_mb']:>8.0f} {r['peak_mb'] * 2**20 / c:>7.1f} "
                    f"{(r['peak_mb'] - r['rss_build_mb']) * 2**20 / c:>12.1f} {r['s_per_iter']:>7.2f} "
                    f"{r['active']:>9}",
                    flush=True,
                )
    print(f"load average after: {os.getloadavg()}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if args.results:  # one record in the benchmarks/results/ schema
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        import _results

        _results.record(results, args.results)


if __name__ == "__main__":
    main()
