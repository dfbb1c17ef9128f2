"""Training on a Dask cluster against one process, on a corpus of at least 2 million tokens (issue
17).

The corpus: CoNLL-2000 (chunking) and CoNLL-2002 Dutch (NER, word POS NER columns) training sets,
replicated ``--copies`` times with a distinct prefix on the word and POS columns of every copy (so
every copy brings its own attributes: a vocabulary that grows with the corpus, as a real one does),
written as ``--shards`` gzipped column files to a temporary directory.  Default chunking templates.

For each configuration, in its own process (so that the peak RSS is that configuration's):

* ``single``: ``load_columns`` on every shard, ``build`` on the concatenation, ``Objective``;
* ``dask1`` / ``dask2``: a LocalCluster of 1 / 2 worker processes (one Dask thread each), the shards
  read, counted and encoded on the workers (``crfkit.distributed.load_sharded``), the
  ``DistributedObjective``;
* ``overhead``: both of ``single`` and ``dask1`` in one process, their evaluations alternated at the
  same w (``--evals`` each), so that both see the same load on a shared machine: the ratio of the
  Dask path's time per evaluation to the single process's, and how much of it is the worker's
  kernels.

it reports: seconds to read + encode, seconds per gradient evaluation (median of ``--evals`` at the
same random w) and the CPU seconds per evaluation of every process involved (the client, which
also runs the LocalCluster's scheduler, plus the workers: ``time.process_time`` deltas; on a shared
machine CPU time is the steadier measure of the Dask path's overhead), seconds per L-BFGS iteration
(``--iterations`` iterations of crfkit's L-BFGS from 0, wall / iterations, and the evaluations it
made; from 7 iterations on, the L-BFGS history of m = 6 pairs is full, as in a real run), the model
(attribute names and weights) saved to a file, the client's peak RSS (``ru_maxrss``, over all of
that) and the workers' peak RSS (``ru_maxrss`` in each worker, through ``client.run``).  numba
threads: ``--threads`` (default 1) in the single process and inside every worker task.

    PYTHONPATH=src python benchmarks/micro/dask_scaling.py [--copies 5] [--shards 16] [--threads 1]

The ratios (dask1 / single per evaluation, client RSS / single RSS) are the figures to quote; the
load average is printed, the machine may be shared.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "..", "..", "shared", "data")


def _sentences(path):
    with gzip.open(path, "rt", encoding="latin-1") as f:
        cur = []
        for line in f:
            line = line.strip()
            if not line:
                if cur:
                    yield cur
                cur = []
                continue
            cols = line.split()
            if cols[0] == "-DOCSTART-":
                continue
            cur.append(cols)
        if cur:
            yield cur


def write_corpus(out_dir: str, copies: int, shards: int, data_dir: str) -> tuple[list[str], int]:
    """The replicated corpus as ``shards`` gzipped column files; returns (paths, tokens)."""
    base = [
        list(_sentences(os.path.join(data_dir, "conll2000", "train.txt.gz"))),
        list(_sentences(os.path.join(data_dir, "conll2002", "ned.train.gz"))),
    ]
    sents = []
    for k in range(copies):
        for corpus in base:
            for s in corpus:
                sents.append([[f"c{k}{t[0]}", f"c{k}{t[1]}", t[-1]] for t in s])
    paths, n_tok = [], 0
    per = (len(sents) + shards - 1) // shards
    for i in range(shards):
        p = os.path.join(out_dir, f"part-{i:03d}.txt.gz")
        with gzip.open(p, "wt", encoding="utf-8", compresslevel=1) as f:
            for s in sents[i * per : (i + 1) * per]:
                f.write("\n".join(" ".join(t) for t in s) + "\n\n")
                n_tok += len(s)
        paths.append(p)
    return paths, n_tok


def _lbfgs(fg, p, iterations, fresh):
    from crfkit.optim.lbfgs import lbfgs

    evals = [0]

    def counted(w):
        evals[0] += 1
        return fg(w)

    t = time.perf_counter()
    res = lbfgs(
        counted,
        np.zeros(p),
        max_iterations=iterations,
        epsilon=0.0,
        delta=0.0,
        period=10,
        fresh_gradients=fresh,
    )  # as train_corpus calls it
    return (
        (time.perf_counter() - t) / max(res.iterations, 1),
        res.iterations,
        evals[0],
        float(res.f),
        res.x,
    )


def single_objective(paths: list[str], threads: int):
    """``(space, corpus, Objective)`` of one process over the concatenated files (default chunking
    templates, c2 = 1)."""
    from crfkit.features.encode import build
    from crfkit.features.templates import default_chunking_templates
    from crfkit.objective import Objective, regularization
    from crfkit.pipeline import load_columns

    T = default_chunking_templates()
    X, Y = [], []
    for p in paths:
        x, y, _ = load_columns(p, T)
        X += x
        Y += y
    space, corpus = build(X, Y)
    del X, Y
    return (
        space,
        corpus,
        Objective(corpus, space, regularization(corpus.n_sequences, c2=1.0), threads=threads),
    )


def run_config(config: str, paths: list[str], threads: int, evals: int, iterations: int) -> dict:
    from crfkit.objective import regularization
    from crfkit.parallel import set_threads

    set_threads(threads)
    out: dict = {"config": config}
    t0 = time.perf_counter()
    client = None
    if config == "single":
        space, corpus, obj = single_objective(paths, threads)
        out.update(n_tokens=corpus.n_tokens, n_sequences=corpus.n_sequences)
    else:
        from crfkit.distributed import load_sharded, local_client

        client = local_client(int(config[4:]), 1)
        out["cluster_start_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        space, sc = load_sharded(client, paths, threads=threads)
        reg = regularization(sc.n_sequences, c2=1.0)
        obj = sc.objective(space, reg)
        out.update(n_tokens=sc.n_tokens, n_sequences=sc.n_sequences, corpus_mib=sc.nbytes / 2**20)
    out["load_s"] = time.perf_counter() - t0
    out.update(
        n_features=space.n_features, n_attributes=space.n_attributes, n_labels=space.n_labels
    )
    w = np.random.default_rng(0).normal(scale=0.01, size=space.n_features)
    obj.value_and_grad(w)  # warm-up (first call allocates, compiles nothing: kernels are cached)

    def worker_cpu():
        return sum(client.run(time.process_time).values()) if client is not None else 0.0

    ts, fs = [], []
    cpu0, wcpu0 = time.process_time(), worker_cpu()
    for _ in range(evals):
        t = time.perf_counter()
        f, g = obj.value_and_grad(w)
        ts.append(time.perf_counter() - t)
        fs.append(f)
    out.update(
        eval_cpu_s=(time.process_time() - cpu0 + worker_cpu() - wcpu0) / evals,
        client_cpu_s=(time.process_time() - cpu0) / evals,
    )
    out.update(
        eval_s=statistics.median(ts),
        eval_all_s=ts,
        f_at_w=fs[-1],
        gnorm_at_w=float(np.linalg.norm(g)),
    )
    del g, w  # the test point is the benchmark's, not training's: not alive during the L-BFGS run
    it_s, its, nev, f, x = _lbfgs(
        obj.value_and_grad, space.n_features, iterations, getattr(obj, "fresh_gradients", False)
    )
    out.update(iter_s=it_s, iterations=its, lbfgs_evals=nev, lbfgs_f=f)
    out["peak_after_lbfgs_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    # the end of a training run: the model (attribute names included) written to a file
    from crfkit.model import CRFModel

    with tempfile.TemporaryDirectory() as td:
        t = time.perf_counter()
        if client is not None:
            from crfkit.distributed import resolve_names

            resolve_names(space)  # as train_files does at the end of training: the names, packed
        out["model_bytes"] = CRFModel(space, x).save(os.path.join(td, "model.crfkit"))
        out["save_s"] = time.perf_counter() - t
    out["client_peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if client is not None:

        def peak():
            import resource as r

            import psutil

            return {
                "peak_mib": r.getrusage(r.RUSAGE_SELF).ru_maxrss / 1024,
                "rss_mib": psutil.Process().memory_info().rss / 2**20,
            }

        out["workers"] = list(client.run(peak).values())
        client.close()
    return out


def run_overhead(paths: list[str], threads: int, evals: int) -> dict:
    """The Dask path's overhead at one worker, robust to a shared machine: one process holds both
    the single-process objective and a LocalCluster of 1 worker over the same files, and alternates
    their evaluations at the same w (single, dask, single, dask, ...), so that both see the same
    load.  Also the worker's CPU seconds inside each Dask evaluation (the part that is the kernels'
    work) and the single process's CPU seconds per evaluation, so that the overhead splits into the
    kernels' time and the rest (messages, scheduling)."""
    from crfkit.distributed import load_sharded, local_client
    from crfkit.objective import regularization
    from crfkit.parallel import set_threads

    set_threads(threads)
    space, corpus, single = single_objective(paths, threads)
    client = local_client(1, 1)
    dspace, sc = load_sharded(client, paths, threads=threads)
    if dspace.n_features != space.n_features:
        raise SystemExit("the sharded space differs from the single one")
    dist = sc.objective(dspace, regularization(sc.n_sequences, c2=1.0))
    w = np.random.default_rng(0).normal(scale=0.01, size=space.n_features)
    fs, fd = single.value_and_grad(w)[0], dist.value_and_grad(w)[0]  # warm-up of both

    def worker_cpu():
        return sum(client.run(time.process_time).values())

    ts, td, cs, cw = [], [], [], []
    for _ in range(evals):
        c, t = time.process_time(), time.perf_counter()
        single.value_and_grad(w)
        ts.append(time.perf_counter() - t)
        cs.append(time.process_time() - c)
        c = worker_cpu()
        t = time.perf_counter()
        dist.value_and_grad(w)
        td.append(time.perf_counter() - t)
        cw.append(worker_cpu() - c)
    client.close()
    med = statistics.median
    return {
        "config": "overhead",
        "n_features": space.n_features,
        "n_tokens": corpus.n_tokens,
        "evals": evals,
        "single_eval_s": ts,
        "dask1_eval_s": td,
        "single_cpu_s": cs,
        "dask1_worker_cpu_s": cw,
        "f_single": fs,
        "f_dask1": fd,
        "ratio_median": med(td) / med(ts),
        "ratio_mean": sum(td) / sum(ts),
        "ratio_pairs_median": med([d / s for d, s in zip(td, ts)]),
        "worker_cpu_ratio": med(cw) / med(cs),
        "rest_s": med([d - c for d, c in zip(td, cw)]),
    }


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--copies", type=int, default=5)
    ap.add_argument("--shards", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--evals", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=8)
    ap.add_argument("--configs", nargs="+", default=["single", "dask1", "dask2"])
    ap.add_argument("--data-dir", default=DATA)
    ap.add_argument("--dir", help="shard directory (kept); default a temporary one")
    ap.add_argument("--out", help="append each configuration's JSON line here")
    ap.add_argument(
        "--run", help=argparse.SUPPRESS
    )  # internal: one configuration, in a child process
    a = ap.parse_args(argv)
    if a.run:
        paths = sorted(os.path.join(a.dir, f) for f in os.listdir(a.dir) if f.startswith("part-"))
        if a.run == "overhead":
            print(json.dumps(run_overhead(paths, a.threads, a.evals)), flush=True)
        else:
            print(
                json.dumps(run_config(a.run, paths, a.threads, a.evals, a.iterations)), flush=True
            )
        return
    tmp = None
    if a.dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="crfkit-dask-")
        a.dir = tmp.name
    os.makedirs(a.dir, exist_ok=True)
    if not any(f.startswith("part-") for f in os.listdir(a.dir)):
        paths, n_tok = write_corpus(a.dir, a.copies, a.shards, a.data_dir)
        print(f"corpus: {n_tok} tokens in {len(paths)} shards under {a.dir}", flush=True)
    results = []
    for cfg in a.configs:
        print(f"# {cfg}: load average {os.getloadavg()[0]:.2f}", flush=True)
        cmd = [
            sys.executable,
            os.path.abspath(__file__),
            "--run",
            cfg,
            "--dir",
            a.dir,
            "--threads",
            str(a.threads),
            "--evals",
            str(a.evals),
            "--iterations",
            str(a.iterations),
        ]
        p = subprocess.run(cmd, capture_output=True, text=True)
        line = [x for x in p.stdout.splitlines() if x.startswith("{")]
        if p.returncode or not line:
            print(f"{cfg} failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}", flush=True)
            continue
        r = json.loads(line[-1])
        r["loadavg_1m"] = os.getloadavg()[0]
        results.append(r)
        print(json.dumps(r), flush=True)
        if a.out:
            with open(a.out, "a") as f:
                f.write(json.dumps(r) + "\n")
    for r in results:
        if r["config"] == "overhead":
            print(
                f"\noverhead at 1 worker, {r['evals']} alternating evaluations in one process: dask1 / single "
                f"{r['ratio_median']:.3f}x (medians), {r['ratio_mean']:.3f}x (sums), {r['ratio_pairs_median']:.3f}x "
                f"(median of the pairs' ratios); the worker's CPU per evaluation / the single process's "
                f"{r['worker_cpu_ratio']:.3f}x; the rest of a Dask evaluation (wall minus the worker's CPU) "
                f"{r['rest_s']:.3f} s"
            )
    results = [r for r in results if r["config"] != "overhead"]
    base = next((r for r in results if r["config"] == "single"), None)
    print(f"\nload average now {os.getloadavg()}")
    print(
        "| config | tokens | features | load s | s / gradient eval | x single | CPU s / eval (client) | x single | "
        "s / L-BFGS iter (evals) | client peak RSS MiB | x single | workers' peak RSS MiB |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        re = f"{r['eval_s'] / base['eval_s']:.3f}" if base else "-"
        rr = f"{r['client_peak_rss_mib'] / base['client_peak_rss_mib']:.3f}" if base else "-"
        wk = ", ".join(f"{w['peak_mib']:.0f}" for w in r.get("workers", [])) or "-"
        rc = f"{r['eval_cpu_s'] / base['eval_cpu_s']:.3f}" if base else "-"
        print(
            f"| {r['config']} | {r['n_tokens']} | {r['n_features']} | {r['load_s']:.1f} | {r['eval_s']:.3f} | {re} | "
            f"{r['eval_cpu_s']:.3f} ({r['client_cpu_s']:.3f}) | {rc} | "
            f"{r['iter_s']:.3f} ({r['lbfgs_evals']} evals / {r['iterations']} it) | {r['client_peak_rss_mib']:.0f} | "
            f"{rr} | {wk} |"
        )
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
