"""Peak memory and speed of `crfkit tag` on large inputs from standard input.

Trains a CoNLL-2000 chunker (or takes --model), then pipes the CoNLL-2000
test set repeated to about 0.5M and 2M tokens into a fresh `crfkit tag`
process and measures the child's peak RSS (``ru_maxrss`` of ``os.wait4``) and
wall time. The model's own footprint is the peak RSS of tagging a single
sentence (the model loaded, the kernels loaded or compiled, no real input).
Prints, per input size: tokens, peak RSS, peak / footprint, and tokens/s
(net of the one-sentence run's wall time, i.e. of start-up and model loading).

With --reference-src DIR (another crfkit source tree, e.g. the code before
batching) the same runs are made with that tree on PYTHONPATH (--reference-sizes,
smaller by default: the unbatched tagger takes about 2.7 KB a token), and the
outputs of both trees are compared byte for byte on the test set for every
option set of `crfkit tag` (--marginals, --all-marginals, --probability,
--eval, --no-labels input) and on the 0.5M run.

    python benchmarks/memory/tag_memory.py --reference-src /work/main/src

The machine may be shared: wall times are noisy; memory figures are not.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "src"


def data_dir() -> Path:
    env = os.environ.get("CRFKIT_DATA")
    return Path(env) if env else HERE.parents[2] / "shared" / "data"


def env_for(src: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(src)
    return env


def run_tag(src: Path, model: Path, payload: bytes | Path, args=(), threads=None) -> dict:
    """Run `crfkit tag` of tree ``src`` on ``payload`` (bytes written to its stdin
    by a thread, or a path streamed to it); returns peak RSS (bytes), wall seconds,
    the SHA-256 of its stdout and its stderr."""
    cmd = [sys.executable, "-m", "crfkit", "tag", "-m", str(model), *args]
    if threads:
        cmd += ["--threads", str(threads)]
    t0 = time.perf_counter()
    p = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env_for(src)
    )

    def feed():
        try:
            if isinstance(payload, Path):
                with open(payload, "rb") as f:
                    for block in iter(lambda: f.read(1 << 20), b""):
                        p.stdin.write(block)
            else:
                p.stdin.write(payload)
        except BrokenPipeError:
            pass
        finally:
            try:
                p.stdin.close()
            except BrokenPipeError:
                pass

    err = []
    t_in = threading.Thread(target=feed, daemon=True)
    t_err = threading.Thread(target=lambda: err.append(p.stderr.read()), daemon=True)
    t_in.start()
    t_err.start()
    h = hashlib.sha256()
    n = 0
    for block in iter(lambda: p.stdout.read(1 << 20), b""):
        h.update(block)
        n += len(block)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    t_in.join()
    t_err.join()
    if p.returncode != 0:
        raise SystemExit(
            f"crfkit tag ({src}) failed with status {p.returncode}: {err[0].decode()[-2000:]}"
        )
    return {
        "rss": ru.ru_maxrss * 1024,
        "wall": wall,
        "sha": h.hexdigest(),
        "bytes": n,
        "stderr": err[0],
    }


def mib(n: float) -> str:
    return f"{n / 2**20:8.1f} MiB"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--model", type=Path, help="a CoNLL-2000 model (default: train one into --work)"
    )
    ap.add_argument(
        "--work",
        type=Path,
        default=Path(tempfile.gettempdir()) / "crfkit-tag-memory",
        help="where the model and the inputs go",
    )
    ap.add_argument(
        "--max-iterations",
        type=int,
        default=30,
        help="L-BFGS iterations of the model trained here (its size does not depend on them)",
    )
    ap.add_argument("--sizes", default="500000,2000000", help="input sizes in tokens (about)")
    ap.add_argument("--reference-src", type=Path, help="another crfkit source tree to compare with")
    ap.add_argument(
        "--reference-sizes", default="500000,1000000", help="input sizes for the reference tree"
    )
    ap.add_argument("--threads", type=int, help="tagging threads (default: all cores)")
    args = ap.parse_args()

    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    test_gz = data_dir() / "conll2000" / "test.txt.gz"
    train_gz = data_dir() / "conll2000" / "train.txt.gz"
    test = gzip.decompress(test_gz.read_bytes())
    if not test.endswith(b"\n\n"):
        test = test.rstrip(b"\n") + b"\n\n"
    n_test = sum(1 for line in test.splitlines() if line.strip())
    model = args.model
    if model is None:
        model = work / "conll2000.crfkit"
        if not model.exists():
            print(f"training {model} ({args.max_iterations} L-BFGS iterations)...", flush=True)
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "crfkit",
                    "train",
                    str(train_gz),
                    "-m",
                    str(model),
                    "-q",
                    "--max-iterations",
                    str(args.max_iterations),
                ],
                env=env_for(SRC),
                check=True,
                stdout=subprocess.DEVNULL,
            )
    print(
        f"model: {model} ({os.path.getsize(model)} bytes); CoNLL-2000 test: {n_test} tokens; "
        f"cpus: {os.cpu_count()}; load average: {os.getloadavg()[0]:.1f}"
    )
    first_sentence = test.split(b"\n\n")[0] + b"\n\n"

    def inputs(sizes: str):
        for want in (int(float(x)) for x in sizes.split(",")):
            reps = max(1, round(want / n_test))
            path = work / f"input-{reps}.txt"
            if not path.exists():
                with open(path, "wb") as f:
                    for _ in range(reps):
                        f.write(test)
            yield reps * n_test, path

    trees = [("current", SRC, args.sizes)]
    if args.reference_src is not None:
        trees.append(("reference", args.reference_src.resolve(), args.reference_sizes))
    results = {}
    for label, src, sizes in trees:
        run_tag(
            src, model, first_sentence, threads=args.threads
        )  # warm the kernel cache of this tree
        foot = run_tag(src, model, first_sentence, threads=args.threads)
        print(f"\n[{label}] {src}")
        print(
            f"  model footprint (one sentence): peak RSS {mib(foot['rss'])}, wall {foot['wall']:.2f} s"
        )
        print(
            f"  {'tokens':>9}  {'peak RSS':>12}  {'/footprint':>10}  {'-footprint':>12}  {'wall':>7}  tokens/s (net)"
        )
        for n_tok, path in inputs(sizes):
            r = run_tag(src, model, path, threads=args.threads)
            net = max(r["wall"] - foot["wall"], 1e-9)
            results[(label, n_tok)] = r
            print(
                f"  {n_tok:>9}  {mib(r['rss'])}  {r['rss'] / foot['rss']:>9.2f}x  {mib(r['rss'] - foot['rss'])}"
                f"  {r['wall']:>6.1f}s  {n_tok / net:,.0f}"
            )
        results[(label, "foot")] = foot

    if args.reference_src is not None:
        print("\nbyte-identical output, current vs reference (CoNLL-2000 test):")
        nogold = b"\n".join(b" ".join(line.split()[:-1]) for line in test.split(b"\n")) + b"\n"
        option_sets = [
            [],
            ["--marginals"],
            ["--all-marginals"],
            ["--probability"],
            ["--marginals", "--all-marginals", "--probability"],
            ["--eval"],
            ["--eval", "--marginals", "--probability"],
            ["--labels"],
        ]
        ok = True
        for opts in option_sets:
            a = run_tag(SRC, model, test, opts, threads=args.threads)
            b = run_tag(args.reference_src.resolve(), model, test, opts, threads=args.threads)
            same = a["sha"] == b["sha"] and a["stderr"] == b["stderr"]
            ok &= same
            print(
                f"  {' '.join(opts) or '(plain)':<45} {'same' if same else 'DIFFERENT'} ({a['bytes']} bytes)"
            )
        for opts in ([], ["--all-marginals", "--probability"]):
            a = run_tag(SRC, model, nogold, ["--no-labels", *opts], threads=args.threads)
            b = run_tag(
                args.reference_src.resolve(),
                model,
                nogold,
                ["--no-labels", *opts],
                threads=args.threads,
            )
            same = a["sha"] == b["sha"]
            ok &= same
            print(
                f"  {'(no gold column) ' + ' '.join(opts):<45} {'same' if same else 'DIFFERENT'} ({a['bytes']} bytes)"
            )
        common = sorted(
            k[1]
            for k in results
            if k[0] == "current" and k[1] != "foot" and ("reference", k[1]) in results
        )
        for n in common:
            same = results[("current", n)]["sha"] == results[("reference", n)]["sha"]
            ok &= same
            print(f"  {n} tokens from stdin{'':<26} {'same' if same else 'DIFFERENT'}")
            rc, rr = results[("current", n)], results[("reference", n)]
            print(
                f"  at {n} tokens: peak RSS {mib(rr['rss'])} before, {mib(rc['rss'])} now; "
                f"wall {rr['wall']:.1f} s before, {rc['wall']:.1f} s now (ratio {rc['wall'] / rr['wall']:.2f})"
            )
        print("all outputs identical" if ok else "OUTPUTS DIFFER")
        return 0 if ok else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
