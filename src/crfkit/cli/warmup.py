"""``crfkit warmup``: compile every numba kernel crfkit's commands use, ahead, with a progress bar.

The kernels compile on first use and are cached (``crfkit/kernels/__pycache__``); without a warmup
the first ``train``, ``tag``, ``CRF.fit(c1=...)``, ``predict(constraints="bio")`` or SDCA run of a
fresh install pauses for tens of seconds each.  ``crfkit warmup`` runs each of those on a tiny
synthetic problem (:data:`STEPS`), so that every specialisation they need is compiled and cached;
``make chunker`` runs it in its install step.  The steps run in ``--jobs`` worker processes (the
numba cache is per function, so processes compile in parallel; default: the cores); a kernel that
two workers need at the same time is compiled by both, the cache keeps one.  At the end it prints
the compile seconds per kernel module (``--table``: all of them), the figures behind
``docs/developer.md``'s compile table.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

#: the warmup steps, in the order they are started: (name, what it runs).  ``bigram``, the longest
#: (about a third of the whole compile), starts first, so that the other worker runs the rest beside
#: it instead of both waiting on it at the end (an empty cache, 2 workers: 206 -> 182 s).
#: ``estimator`` needs the decoding and batch kernels that ``train``, ``tag`` and ``decode`` compile:
#: it is started late, so that it loads them from the cache instead of compiling them again at the
#: same time
STEPS: tuple[tuple[str, str], ...] = (
    ("bigram", "bigram features: L-BFGS and BCD"),
    ("train", "crfkit train (templates, L-BFGS, --dev)"),
    (
        "tag",
        "crfkit tag, CRFModel.tag and Viterbi over an encoded corpus (the demo's decoding); the "
        "tagging kernels compiled ahead of time",
    ),
    ("decode", "crfkit tag -n 2, --constraints bio, --marginals, --force; corpus marginals"),
    ("sdca", "SDCA and OEG (dual methods)"),
    ("sgd", "SG, ASG, AdaGrad, Pegasos, SGD-L1, l2sgd, NGD, SMD"),
    ("sag", "SAG, SAG-NUS, SAGA (variance-reduced)"),
    ("online", "PA, AP, AROW, hybrid"),
    (
        "estimator",
        "CRF.fit with c1 (OWL-QN), predict, predict(constraints='bio'), marginals, n-best",
    ),
)

#: what ``crfkit demo`` (``make chunker``) needs: compiled first, by ``make``'s install step, in two
#: processes at once, before the demo runs; the other steps follow the demo.  (Both compile some
#: kernels of ``batch``: ``tag``'s perceptron run reports its objective with ``loss_only``.)
DEMO_STEPS = ("train", "tag")

ALGORITHM_STEPS = {
    "sdca": ("sdca", "oeg"),
    "sag": ("sag", "sag-nus", "sag-nus*", "saga", "saga-nus"),
    "sgd": ("sg", "asg", "adagrad", "pegasos", "sgd-l1", "l2sgd", "ngd", "smd"),
    "online": ("pa", "ap", "arow", "hybrid"),
}


def _toy(seed: int = 0, n: int = 24):
    """A tiny chunking problem: attribute sequences (strings), BIO labels (valid chunks: every
    transition the constraints allow occurs), bigram attributes."""
    import random

    rnd = random.Random(seed)
    phrases = (
        (("the", "a"), ("cat", "dog", "mat"), ("B-NP", "I-NP")),
        (("sat", "ran", "is"), (), ("B-VP",)),
        (("on", "to"), (), ("B-PP",)),
        ((".", ","), (), ("O",)),
    )
    X, Y, B = [], [], []
    for _ in range(n):
        ws, ys = [], []
        for _ in range(rnd.randint(1, 4)):
            first, second, tags = rnd.choice(phrases)
            ws.append(rnd.choice(first))
            if second:
                ws.append(rnd.choice(second))
            ys.extend(tags)
        X.append([[f"w={w}", f"s={w[-1]}", "bias"] for w in ws])
        Y.append(ys)
        B.append([[f"w={w}"] if t else [] for t, w in enumerate(ws)])
    return X, Y, B


def _toy_files(workdir: str):
    """The toy corpus as a two-column file, and a file over :func:`crfkit.npdecode.max_tokens`
    tokens (tagged by the parallel kernels; small ones go to numpy or the serial kernels)."""
    from ..npdecode import max_tokens

    X, Y, _ = _toy(1, 40)
    train = os.path.join(workdir, "train.txt")
    with open(train, "w", encoding="utf-8") as f:
        for xs, ys in zip(X, Y):
            for x, y in zip(xs, ys):
                f.write(f"{x[0][2:]} {x[1][2:]} {y}\n")
            f.write("\n")
    big = os.path.join(workdir, "big.txt")
    text = open(train, encoding="utf-8").read()
    with open(big, "w", encoding="utf-8") as f:
        f.write(text * (max_tokens() // max(sum(map(len, X)), 1) + 2))
    return X, Y, train, big


def _cli(argv) -> None:
    import contextlib
    import io

    from . import main as cli_main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        rc = cli_main(argv)
    if rc != 0:
        raise RuntimeError(f"crfkit {' '.join(argv)} exited with {rc}: {buf.getvalue()[-500:]}")


def _perceptron_model(workdir: str, train: str):
    """A model of the toy corpus trained by one averaged-perceptron epoch (its few small kernels
    compile in seconds): the decoding steps need a model, not the full-batch training kernels."""
    from ..model import CRFModel

    path = os.path.join(workdir, "m.crfkit")
    _cli(["train", train, "-m", path, "-a", "ap", "--max-iterations", "1", "-q"])
    return CRFModel.load(path), path


def _step_train(workdir: str) -> None:
    _, _, train, _ = _toy_files(workdir)
    model = os.path.join(workdir, "m.crfkit")
    _cli(["train", train, "-m", model, "--max-iterations", "3", "-q", "--dev", train])
    # a large model (the demo's 456k features) keeps the L-BFGS pairs in float32 (history "auto"):
    # the toy corpus is far below that size, so its two-loop recursion is compiled here for float32
    _cli(["train", train, "-m", model, "--max-iterations", "3", "-q", "--lbfgs-history", "float32"])


def _decode_step(workdir: str, options, corpus_calls) -> None:
    from ..npdecode import max_tokens

    X, _, train, big = _toy_files(workdir)
    m, model = _perceptron_model(workdir, train)
    out = os.path.join(workdir, "out.txt")
    for data in (train, big):
        for extra in options:
            _cli(["tag", "-m", model, data, "-o", out, *extra])
    attrs = [[[f"w={x[0][2:]}"] for x in xs] for xs in X]
    attrs = attrs * (max_tokens() // max(sum(map(len, attrs)), 1) + 2)
    for data in (attrs[:2], attrs):  # the numpy/serial and the parallel paths
        corpus_calls(m, data)


def _step_tag(workdir: str) -> None:
    def calls(m, data):
        m.viterbi(m.encode(data))  # the demo's path: Viterbi of a whole encoded corpus
        m.tag(data)
        m.tag(data, threads=1)  # attribute strings on one thread: the serial lookup + Viterbi

    _decode_step(workdir, ([],), calls)
    _build_aot()


def _build_aot() -> None:
    """Build the tagging kernels compiled ahead of time (:mod:`crfkit.kernels.aot`), unless the
    module of the current key is there.  A failure (no C compiler, no setuptools) is said on stderr
    and is not the step's: every numba kernel is compiled, and a process without numba tags
    through the numpy decoder, as before these kernels existed."""
    from ..kernels.aot import ensure_built

    try:
        ensure_built()
    except Exception as e:  # noqa: BLE001 - optional: the numpy decoder stands in
        print(
            f"crfkit warmup: the tagging kernels compiled ahead of time were not built ({e}); "
            "a process that only tags takes the numpy decoder instead (slower, the same labels)",
            file=sys.stderr,
            flush=True,
        )


def _step_decode(workdir: str) -> None:
    _decode_step(
        workdir,
        # (--force: the file's last column as forced labels, Wapiti's label --force)
        (["-n", "2"], ["--constraints", "bio"], ["--marginals"], ["--force"]),
        lambda m, data: m.marginals(m.encode(data)),
    )


_CLI_STEPS = {"train": _step_train, "tag": _step_tag, "decode": _step_decode}


def _step_estimator(workdir: str) -> None:
    from ..estimator import CRF
    from ..npdecode import max_tokens

    X, Y, _ = _toy(2)
    # small inputs are decoded in numpy or by the serial kernels, large ones (over max_tokens()
    # tokens) by the parallel kernels: both sizes, and tokens as attribute lists and as dicts
    n_tok = sum(len(x) for x in X)
    big = X * (max_tokens() // max(n_tok, 1) + 2)
    big_dicts = [[{a: 1.0 for a in tok} for tok in x] for x in big]
    for c1 in (0.1, 0.0):
        crf = CRF(c1=c1, c2=0.1, max_iterations=3).fit(X, Y)
        for data in (X[:3], big, big_dicts[:3], big_dicts):
            crf.predict(data)
            crf.predict(data, constraints="bio")
            crf.predict_marginals(data)
            crf.predict_nbest(data, 2)
            crf.predict_nbest(data, 2, constraints="bio")


def _step_algorithms(names) -> None:
    from ..train import train

    X, Y, _ = _toy(3)
    for a in names:
        train(X, Y, algorithm=a, max_iterations=2, c2=0.1)


def _step_bigram(workdir: str) -> None:
    from ..train import train

    X, Y, B = _toy(4)
    for a in ("lbfgs", "bcd"):
        res = train(X, Y, B=B, algorithm=a, max_iterations=2, c2=0.1)
        res.model.tag(X[:2], B=B[:2])


def _delta(after: dict, before: dict) -> dict:
    """The compile statistics between two :func:`compile_stats` readings."""
    out = {k: after[k] - before[k] for k in ("seconds", "cpu_seconds", "count")}
    for key in ("by_module", "cpu_by_module"):
        out[key] = {
            m: v - before[key].get(m, 0.0)
            for m, v in after[key].items()
            if v - before[key].get(m, 0.0) > 0
        }
    return out


def run_step(name: str) -> tuple[str, float, dict, str | None]:
    """Run the warmup step ``name`` (in this process): (name, wall seconds, the compile statistics
    of this step alone, error or None)."""
    import warnings

    from .._runtime.compile_notice import compile_stats

    before = compile_stats()
    t = time.perf_counter()
    err = None
    try:
        with tempfile.TemporaryDirectory(prefix="crfkit-warmup-") as d, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if name in _CLI_STEPS:
                _CLI_STEPS[name](d)
            elif name == "estimator":
                _step_estimator(d)
            elif name == "bigram":
                _step_bigram(d)
            else:
                _step_algorithms(ALGORITHM_STEPS[name])
    except Exception as e:  # noqa: BLE001 - a step that fails must not stop the others
        err = f"{type(e).__name__}: {e}"
    return name, time.perf_counter() - t, _delta(compile_stats(), before), err


def _worker_init() -> None:
    os.environ["CRFKIT_QUIET_COMPILE"] = "1"
    # the steps compile numba's kernels for every path, also those the kernels compiled ahead of
    # time take over where they are built (CRFKIT_NO_AOT=1 with them gone, say)
    os.environ["CRFKIT_NO_AOT"] = "1"
    # one numba thread per worker: the workers themselves are the parallelism
    os.environ.setdefault("CRFKIT_THREADS", "1")


def _bar(done: int, total: int, width: int = 24) -> str:
    k = width * done // max(total, 1)
    return "[" + "#" * k + "." * (width - k) + f"] {done}/{total}"


def warmup(jobs: int | None = None, steps=None, out=None) -> dict:
    """Compile the kernels of ``steps`` (default: all of :data:`STEPS`) in ``jobs`` processes
    (default: the cores; 1: in this process), printing a progress line per finished step on
    ``out`` (default stderr).  Returns ``{"wall_s", "compile_s", "by_module", "steps"}``."""
    from ..parallel import cpu_count

    out = sys.stderr if out is None else out
    names = [n for n, _ in STEPS] if steps is None else list(steps)
    jobs = max(1, min(len(names), jobs or cpu_count()))
    t0 = time.perf_counter()
    results = []

    def report(r):
        results.append(r)
        name, wall, st, err = r
        tail = f"  FAILED: {err}" if err else ""
        print(
            f"crfkit warmup {_bar(len(results), len(names))} {name}: {wall:.1f} s, "
            f"{st['count']} kernels compiled in {st['seconds']:.1f} s "
            f"({st['cpu_seconds']:.1f} s CPU){tail}",
            file=out,
            flush=True,
        )

    print(
        f"crfkit warmup: compiling the numba kernels of {len(names)} groups in {jobs} "
        f"process{'es' if jobs > 1 else ''} (once after installing or updating crfkit)",
        file=out,
        flush=True,
    )
    if jobs == 1:
        saved = {v: os.environ.get(v) for v in ("CRFKIT_QUIET_COMPILE", "CRFKIT_NO_AOT")}
        os.environ["CRFKIT_QUIET_COMPILE"] = os.environ["CRFKIT_NO_AOT"] = "1"
        from .._runtime import aot

        aot.forget()
        try:
            for name in names:
                report(run_step(name))
        finally:
            for var, value in saved.items():
                if value is None:
                    os.environ.pop(var, None)
                else:
                    os.environ[var] = value
            aot.forget()
    else:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor, as_completed

        ctx = mp.get_context("spawn")
        with ProcessPoolExecutor(jobs, mp_context=ctx, initializer=_worker_init) as ex:
            futs = [ex.submit(run_step, n) for n in names]
            for f in as_completed(futs):
                report(f.result())
    by_module: dict[str, float] = {}
    cpu_by_module: dict[str, float] = {}
    for _, _, st, _ in results:
        for k, v in st["by_module"].items():
            by_module[k] = by_module.get(k, 0.0) + v
        for k, v in st["cpu_by_module"].items():
            cpu_by_module[k] = cpu_by_module.get(k, 0.0) + v
    return {
        "wall_s": time.perf_counter() - t0,
        "compile_s": sum(st["seconds"] for _, _, st, _ in results),
        "compile_cpu_s": sum(st["cpu_seconds"] for _, _, st, _ in results),
        "by_module": by_module,
        "cpu_by_module": cpu_by_module,
        "steps": {
            n: {
                "wall_s": w,
                "compile_s": st["seconds"],
                "compile_cpu_s": st["cpu_seconds"],
                "kernels": st["count"],
                "error": e,
            }
            for n, w, st, e in results
        },
        "jobs": jobs,
    }


def cmd_warmup(args) -> int:
    res = warmup(args.jobs, args.step or None)
    failed = [n for n, s in res["steps"].items() if s["error"]]
    rows = sorted(res["by_module"].items(), key=lambda kv: -kv[1])
    if args.table:
        cpu = res["cpu_by_module"]
        print(f"{'kernel module':24s} {'compile s':>10s} {'CPU s':>8s}")
        for k, v in rows:
            print(f"{k:24s} {v:10.1f} {cpu.get(k, 0.0):8.1f}")
    else:
        top = ", ".join(f"{k} {v:.0f} s" for k, v in rows[:5])
        if top:
            print(f"crfkit warmup: most compile time: {top}", file=sys.stderr)
    print(
        f"crfkit warmup: done in {res['wall_s']:.1f} s ({res['compile_s']:.1f} s of compiling, "
        f"{res['compile_cpu_s']:.1f} s CPU, over "
        f"{res['jobs']} process{'es' if res['jobs'] > 1 else ''})"
        + (f"; FAILED steps: {', '.join(failed)}" if failed else ""),
        file=sys.stderr,
    )
    if "tag" in res["steps"]:
        from .._runtime import aot

        aot.forget()
        st = aot.status()
        print(
            "crfkit warmup: tagging kernels compiled ahead of time: "
            + (st["path"] if st["built"] else "not built (a process without numba tags in numpy)"),
            file=sys.stderr,
        )
    if args.json:
        import json

        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(res, f, indent=1)
    return 1 if failed else 0


def add_parser(sub) -> None:
    """Add ``warmup`` to the ``crfkit`` subparsers ``sub``."""
    from .common import pos_int

    w = sub.add_parser(
        "warmup",
        help="compile all the numba kernels now (once after installing), with a progress bar",
        description="Compile and cache every numba kernel crfkit's commands use, so that no later "
        "command pauses to compile. Runs each command on a tiny synthetic problem, in parallel "
        "processes.",
    )
    w.add_argument(
        "-j", "--jobs", type=pos_int, metavar="N", help="worker processes (default: the cores)"
    )
    w.add_argument(
        "--step",
        action="append",
        choices=[n for n, _ in STEPS],
        help="only this step (repeatable): " + "; ".join(f"{n}: {d}" for n, d in STEPS),
    )
    w.add_argument("--table", action="store_true", help="print the compile seconds per module")
    w.add_argument("--json", metavar="PATH", help="write the figures as JSON")
    w.set_defaults(func=cmd_warmup)
