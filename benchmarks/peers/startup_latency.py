"""Start-up and small-batch latency against python-crfsuite / sklearn-crfsuite (and ``crf_test``
when given), in one run:

* ``crfkit --version`` and ``crfkit tag`` on a 300-token file, each a fresh process (warm caches: an
  untimed run first, byte-code caches written), median wall and CPU time of ``--repeats``;
  ``crf_test`` on the same file (its own model, trained here with ``crf_learn`` on the same
  templates) when ``--peers`` is given; with ``--before SRC``, the same commands run from another
  source tree too;
* ``CRF.predict_single``: per sentence, over the CoNLL-2000 test set's sentences, crfkit against
  python-crfsuite's ``Tagger.tag`` (what sklearn-crfsuite's ``predict_single`` calls) and
  sklearn-crfsuite's ``predict_single``, the same feature dicts for all three;
* ``CRF.predict`` on the whole CoNLL-2000 test set (2,012 sentences) against sklearn-crfsuite's.

The estimators are trained here (CoNLL-2000 train, word / POS window features as dicts, L-BFGS,
c2 = 1, ``--iterations``): tagging time does not depend on how far training went.  ``--threads`` for
crfkit (default 1).  The machine may be shared: compare the columns of one run only; the load
average is printed.

    PYTHONPATH=src .venv/bin/python benchmarks/peers/startup_latency.py [--peers /work/peers/bin]
        [--before /work/main/src] [--repeats 5] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import gzip
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def timed(cmd, env, repeats, **kw):
    """Median wall time and median CPU time (user + system, from the child's rusage) of ``repeats``
    runs: on a loaded machine the wall time mostly measures the wait for a core, the CPU time what
    the process itself needs (what its wall time is on an idle core)."""
    walls, cpus = [], []
    for _ in range(repeats):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        subprocess.run(
            cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw
        )
        walls.append(time.perf_counter() - t)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
    return statistics.median(walls), statistics.median(cpus)


def read_conll(path):
    sents, cur = [], []
    with gzip.open(path, "rt") as f:
        for line in f:
            line = line.split()
            if not line:
                if cur:
                    sents.append(cur)
                cur = []
            else:
                cur.append(line)
    if cur:
        sents.append(cur)
    return sents


def token_features(sent, i):
    """Word and POS in a window of two, the usual chunking features (as dicts: sklearn-crfsuite's
    input)."""
    f = {"bias": 1.0}
    for d in (-2, -1, 0, 1, 2):
        j = i + d
        if 0 <= j < len(sent):
            f[f"w[{d}]"] = sent[j][0].lower()
            f[f"pos[{d}]"] = sent[j][1]
        else:
            f[f"w[{d}]"] = "__pad__"
    f["pos[-1]|pos[0]"] = f.get("pos[-1]", "__") + "|" + sent[i][1]
    f["w[0].istitle"] = sent[i][0].istitle()
    return f


def features(sents):
    return [[token_features(s, i) for i in range(len(s))] for s in sents], [
        [t[-1] for t in s] for s in sents
    ]


def load_avg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def processes(a, work, data) -> None:
    test = work / "t300.txt"
    if not test.exists():
        lines, n = [], 0
        with gzip.open(data / "conll2000" / "test.txt.gz", "rt") as f:
            for line in f:
                lines.append(line)
                n += bool(line.strip())
                if n >= 300 and not line.strip():
                    break
        test.write_text("".join(lines))
    after = str(HERE.parents[1] / "src")
    env = {
        k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"
    }  # warm byte-code caches
    model = work / "m.crfkit"
    if not model.exists():
        subprocess.run(
            [
                sys.executable,
                "-m",
                "crfkit",
                "train",
                str(data / "conll2000" / "train.txt.gz"),
                "-m",
                str(model),
                "--max-iterations",
                "50",
                "-q",
            ],
            env=dict(env, PYTHONPATH=after),
            check=True,
            stdout=subprocess.DEVNULL,
        )
    ntok = sum(1 for line in test.read_text().splitlines() if line.strip())
    trees = ([("before", a.before)] if a.before else []) + [("crfkit", after)]
    rows = [
        ("crfkit --version", ["--version"]),
        (
            "crfkit tag (300 tokens)",
            ["tag", "-m", str(model), str(test), "--threads", str(a.threads)],
        ),
    ]
    print(
        f"tag input: {ntok} tokens; crfkit model {model.stat().st_size} bytes (CoNLL-2000, built-in templates, "
        f"50 L-BFGS iterations); median of {a.repeats} fresh processes; load average {load_avg()}"
    )
    head = "".join(f" {name + ' wall / cpu s':>22}" for name, _ in trees)
    peer = None
    if a.peers:
        bindir = Path(a.peers)
        tpl = work / "template"
        if not tpl.exists():
            from crfkit.features.templates import default_chunking_templates

            tpl.write_text(default_chunking_templates().source)
        pp = Path(a.crfpp_model) if a.crfpp_model else work / "m.crfpp"
        if not pp.exists():
            plain = work / "train.txt"
            with gzip.open(data / "conll2000" / "train.txt.gz", "rb") as f:
                plain.write_bytes(f.read())
            subprocess.run(
                [str(bindir / "crf_learn"), "-m", "50", "-p", "1", str(tpl), str(plain), str(pp)],
                check=True,
                stdout=subprocess.DEVNULL,
            )
        peer = [str(bindir / "crf_test"), "-m", str(pp), str(test)]
        head += f" {'crf_test wall / cpu s':>22}"
    print(f"{'command':<26}{head}")
    for label, args in rows:
        res = []
        for _, src in trees:
            e = dict(env, PYTHONPATH=src)
            subprocess.run(
                [sys.executable, "-m", "crfkit", *args],
                env=e,
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )  # warm caches
            res.append(timed([sys.executable, "-m", "crfkit", *args], e, a.repeats))
        line = f"{label:<26}" + "".join(f" {w:>11.3f} / {c:>6.3f}" for w, c in res)
        if peer is not None and args[0] == "tag":
            subprocess.run(peer, check=True, stdout=subprocess.DEVNULL)
            tw, tc = timed(peer, env, a.repeats)
            line += (
                f" {tw:>11.3f} / {tc:>6.3f}   (crfkit / crf_test: wall {res[-1][0] / tw:.2f}x, "
                f"cpu {res[-1][1] / max(tc, 1e-9):.2f}x)"
            )
        print(line, flush=True)


def estimators(a, work, data) -> None:
    import pycrfsuite
    import sklearn_crfsuite

    import crfkit

    train, test = (
        read_conll(data / "conll2000" / "train.txt.gz"),
        read_conll(data / "conll2000" / "test.txt.gz"),
    )
    Xtr, ytr = features(train)
    Xte, yte = features(test)
    ck_path, sk_path = work / "est.crfkit", work / "est.crfsuite"
    if not ck_path.exists():
        t = time.perf_counter()
        crfkit.CRF(
            algorithm="lbfgs",
            c2=1.0,
            max_iterations=a.iterations,
            threads=a.threads,
            model_filename=str(ck_path),
        ).fit(Xtr, ytr)
        print(f"crfkit fit: {time.perf_counter() - t:.1f} s", flush=True)
    if not sk_path.exists():
        t = time.perf_counter()
        sklearn_crfsuite.CRF(
            algorithm="lbfgs", c2=1.0, max_iterations=a.iterations, model_filename=str(sk_path)
        ).fit(Xtr, ytr)
        print(f"sklearn-crfsuite fit: {time.perf_counter() - t:.1f} s", flush=True)
    ck = crfkit.CRF(model_filename=str(ck_path), threads=a.threads)
    sk = sklearn_crfsuite.CRF(model_filename=str(sk_path))
    tagger = pycrfsuite.Tagger()
    tagger.open(str(sk_path))
    ntok = sum(map(len, Xte))
    print(
        f"\nCoNLL-2000 test: {len(Xte)} sentences, {ntok} tokens; dict features; crfkit threads {a.threads}; "
        f"load average {load_avg()}"
    )
    # agreement (two differently trained models: a sanity check, not equality)
    p_ck, p_sk = ck.predict(Xte), sk.predict(Xte)
    agree = sum(x == y for s, r in zip(p_ck, p_sk) for x, y in zip(s, r)) / ntok
    acc = [sum(x == y for s, r in zip(p, yte) for x, y in zip(s, r)) / ntok for p in (p_ck, p_sk)]
    print(
        f"token accuracy crfkit {acc[0]:.4f}, sklearn-crfsuite {acc[1]:.4f}; labels agree on {agree:.4f}"
    )

    def best(fns, repeats):
        """Per function, the min wall time and the min CPU time (this process's) of ``repeats``
        runs, the functions taking turns (each round runs every one), so that all see the same
        load."""
        res = {k: [float("inf"), float("inf")] for k in fns}
        for _ in range(repeats):
            for k, f in fns.items():
                t, tc = time.perf_counter(), time.process_time()
                f()
                r = res[k]
                r[0], r[1] = min(r[0], time.perf_counter() - t), min(r[1], time.process_time() - tc)
        return res

    single = Xte[: a.single]
    fns = {
        "crfkit CRF.predict_single": lambda: [ck.predict_single(x) for x in single],
        "python-crfsuite Tagger.tag": lambda: [tagger.tag(x) for x in single],
        "sklearn-crfsuite predict_single": lambda: [sk.predict_single(x) for x in single],
    }
    per = best(fns, a.repeats)
    base = per["python-crfsuite Tagger.tag"]
    print(
        f"\npredict_single, per sentence (the first {len(single)} test sentences, min of {a.repeats}, taking turns; "
        "wall, then CPU time):"
    )
    for k, (v, c) in per.items():
        print(
            f"  {k:<34} {1e3 * v / len(single):8.3f} ms {v / base[0]:5.2f}x | cpu {1e3 * c / len(single):7.3f} ms "
            f"{c / base[1]:5.2f}x python-crfsuite"
        )
    fns = {
        "crfkit CRF.predict": lambda: ck.predict(Xte),
        "sklearn-crfsuite CRF.predict": lambda: sk.predict(Xte),
    }
    whole = best(fns, a.repeats)
    base = whole["sklearn-crfsuite CRF.predict"]
    print(
        f"\npredict on the whole test set (min of {a.repeats}, taking turns; wall, then CPU time):"
    )
    for k, (v, c) in whole.items():
        print(
            f"  {k:<34} {v:8.3f} s {v / base[0]:5.2f}x | cpu {c:7.3f} s {c / base[1]:5.2f}x sklearn-crfsuite"
        )
    print(f"load average {load_avg()}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--before", help="another src directory to time the commands from (e.g. main's)"
    )
    ap.add_argument("--peers", help="directory holding crf_learn / crf_test")
    ap.add_argument(
        "--crfpp-model",
        help="a CRF++ model to time crf_test with (default: train one with crf_learn, "
        "the built-in templates, 50 iterations)",
    )
    ap.add_argument(
        "--data", default=os.environ.get("CRFKIT_DATA", str(HERE.parents[2] / "shared" / "data"))
    )
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--iterations", type=int, default=50)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--single", type=int, default=2012, help="sentences in the predict_single loop")
    ap.add_argument("--only", choices=("processes", "estimators"), help="one half of the benchmark")
    ap.add_argument("--workdir")
    a = ap.parse_args()
    work = Path(a.workdir or tempfile.mkdtemp(prefix="startup-"))
    work.mkdir(parents=True, exist_ok=True)
    data = Path(a.data)
    if a.only != "estimators":
        processes(a, work, data)
    if a.only != "processes":
        estimators(a, work, data)


if __name__ == "__main__":
    main()
