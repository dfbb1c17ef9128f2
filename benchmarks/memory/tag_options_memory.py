"""Peak memory of `crfkit tag` for each option set at about 2M tokens (issue 45, part 4).

Builds the input by repeating CoNLL-2000 train (211,727 tokens) to about --tokens tokens, trains a
small CoNLL-2000 model (or takes --model), and pipes the input into a fresh `crfkit tag` process per
option set, measuring the child's peak RSS (``ru_maxrss`` of ``os.wait4``; stdin streamed, stdout
hashed and dropped):

- plain Viterbi tagging;
- ``-n 3 --constraints bio`` (the decoding path: n-best lists under the BIO constraints);
- ``--encoding latin-1`` (the input re-encoded as it is read);
- ``--allowed-column 3`` (the decoding path, an allowed-labels column ``*`` added to the input).

Each figure is printed with its ratio to the plain path; the decoding path and ``--encoding`` must
stay near it (bounded memory whatever the input's size).  With --reference-src DIR (another crfkit
source tree, e.g. the code before the change) the same runs are made with that tree, for the before
and after table.  --results PATH appends one record in the benchmarks/results/ schema.

    python benchmarks/memory/tag_options_memory.py --reference-src /work/main/src \\
        --results benchmarks/results/tag_options_memory.jsonl

Memory figures do not depend on the machine's load; wall times do (printed for information only).
"""

from __future__ import annotations

import argparse
import gzip
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from tag_memory import SRC, data_dir, env_for, mib, run_tag  # noqa: E402

OPTION_SETS = {
    "plain": [],
    "-n 3 --constraints bio": ["-n", "3", "--constraints", "bio"],
    "--encoding latin-1": ["--encoding", "latin-1"],
    "--allowed-column 3": ["--allowed-column", "3"],
}


def build_inputs(work: Path, tokens: int) -> tuple[int, Path, Path]:
    """(tokens, the repeated CoNLL-2000 train file, the same with a ``*`` allowed column third)."""
    train = gzip.decompress((data_dir() / "conll2000" / "train.txt.gz").read_bytes())
    if not train.endswith(b"\n\n"):
        train = train.rstrip(b"\n") + b"\n\n"
    n = sum(1 for line in train.splitlines() if line.strip())
    reps = max(1, round(tokens / n))
    plain, allowed = work / f"train-x{reps}.txt", work / f"train-x{reps}-allowed.txt"
    if not plain.exists():
        with open(plain, "wb") as f:
            for _ in range(reps):
                f.write(train)
    if not allowed.exists():
        one = b"".join(
            (b" ".join(p[:2] + [b"*"] + p[2:]) + b"\n") if (p := line.split()) else b"\n"
            for line in train.splitlines()
        )
        with open(allowed, "wb") as f:
            for _ in range(reps):
                f.write(one)
    return reps * n, plain, allowed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--model", type=Path, help="a CoNLL-2000 model (default: train one into --work)"
    )
    ap.add_argument(
        "--work", type=Path, default=Path(tempfile.gettempdir()) / "crfkit-tag-options-memory"
    )
    ap.add_argument("--tokens", type=float, default=2e6, help="input size in tokens (about)")
    ap.add_argument(
        "--max-iterations", type=int, default=10, help="iterations of the model trained"
    )
    ap.add_argument("--reference-src", type=Path, help="another crfkit source tree to compare with")
    ap.add_argument("--threads", type=int, default=2, help="tagging threads")
    ap.add_argument("--results", help="append one record to this .jsonl (benchmarks/results/)")
    ap.add_argument(
        "--parallel",
        action="store_true",
        help="run every (tree, option set) at once: each child's peak RSS is its own, so the "
        "memory figures do not change; the wall times then mean nothing",
    )
    args = ap.parse_args()
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    model = args.model
    if model is None:
        model = work / "conll2000-small.crfkit"
        if not model.exists():
            print(f"training {model} ({args.max_iterations} L-BFGS iterations)...", flush=True)
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "crfkit",
                    "train",
                    str(data_dir() / "conll2000" / "train.txt.gz"),
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
    n_tok, plain, allowed = build_inputs(work, int(args.tokens))
    print(
        f"model: {model} ({os.path.getsize(model)} bytes); input: {n_tok} tokens "
        f"(CoNLL-2000 train repeated); load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    first = plain.read_bytes().split(b"\n\n")[0] + b"\n\n"
    trees = [("after", SRC)]
    if args.reference_src is not None:
        trees.insert(0, ("before", args.reference_src.resolve()))
    figures: dict = {"tokens": n_tok, "model_bytes": os.path.getsize(model), "runs": {}}
    for label, src in trees:
        run_tag(src, model, first, threads=args.threads)  # warm the kernel cache of the tree
        foot = run_tag(src, model, first, threads=args.threads)
        print(f"[{label}] {src}: one sentence {mib(foot['rss'])}", flush=True)
        figures["runs"][label] = {"one_sentence_mb": foot["rss"] / 2**20}
    jobs = [
        (label, src, name, opts, allowed if "--allowed-column" in opts else plain)
        for label, src in trees
        for name, opts in OPTION_SETS.items()
    ]

    def one(job):
        label, src, name, opts, inp = job
        return job, run_tag(src, model, inp, opts, threads=args.threads)

    if args.parallel:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(len(jobs)) as ex:
            done = list(ex.map(one, jobs))
    else:
        done = [one(j) for j in jobs]
    for label, _src in trees:
        print(f"\n[{label}]")
        runs = figures["runs"][label]
        base = next(r["rss"] for (lb, _, n, _, _), r in done if lb == label and n == "plain")
        for (lb, _, name, _, _), r in done:
            if lb != label:
                continue
            runs[name] = {
                "peak_rss_mb": r["rss"] / 2**20,
                "wall_s": r["wall"],
                "vs_plain": r["rss"] / base,
            }
            print(
                f"  {name:<26} peak RSS {mib(r['rss'])}  {r['rss'] / base:5.2f}x plain  "
                f"wall {r['wall']:6.1f} s",
                flush=True,
            )
    figures["parallel"] = bool(args.parallel)
    figures["load_average"] = os.getloadavg()[0]
    if args.results:
        sys.path.insert(0, str(HERE.parent))
        import _results

        _results.record(figures, args.results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
