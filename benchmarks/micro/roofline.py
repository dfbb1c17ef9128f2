#!/usr/bin/env python
"""The chain oracle against the machine's limits: work counted from the encoded corpus, the
machine's measured peak per core, the bound that follows, and the measured time.

For three data sets (``--data``, default all three):

* ``conll2000``: CoNLL-2000 train with CRFsuite's chunking attributes
  (``peers/conll2000_vs_crfsuite.py`` ``load()``, observed support: 211,727 tokens, 22 labels);
* ``ocr``: the OCR letters (``ocr2`` split: folds 1-9) through the dense-feature path (128 pixels
  per letter, every (pixel, label) and label pair, 26 labels): emissions are ``X @ W`` (BLAS);
* ``nettalk``: NETtalk ``nettalk:3-grm`` in Wapiti's feature space (``support="all"``: every
  label pair with every window value, the label-pair x observation "bigram" features, as
  ``papers/nettalk_tables.py`` builds it; 51 labels),

and three passes over each:

* ``gradient``: one full ``Objective.value_and_grad`` at seeded random weights (N(0, 0.1));
* ``viterbi``: ``CRFModel.viterbi`` of every training sequence at the same weights;
* ``oracle``: ``Objective.oracle`` (``oracle_bigram`` for NETtalk) over ``--oracle-examples``
  sequences drawn at random (seeded), per example; ``oracle+step`` adds the example's
  ``apply_gradient`` (the scatter a stochastic step makes).

Work, counted from the encoded corpus (:func:`corpus_counts`, :func:`work`):

* flops: the chain recursions, forward, backward and edge marginals, 3 multiply-adds per label pair
  per token, 2 flops each (6 N L^2; Viterbi: an add and a max per pair, 2 N L^2; the oracle: the
  recursions of its examples).  The bigram path adds per bigram entry its row of L^2 pair weights
  into M_t (a multiply-add each) and, in the gradient, its L^2 pair gradients (another); the dense
  block adds ``X @ W`` and, in the gradient, ``X^T P`` (2 N D L flops each).
* exps: the log-domain recursions take N L (one per token and label: the scaled forward's
  exponentials of the emission scores) plus, on the bigram path, L^2 per position t >= 1 (M_t);
  the oracle adds L^2 per call (exp of the transitions).  The full-batch gradient on binary
  attributes without dense or bigram features and with small weights (max |w_state| x most
  entries per token <= 300 and a transition range <= 200: the baseline's rule) takes the
  exp-domain path, whose emissions are products of exp(w): n_state + L^2 exps per evaluation.
  Both counts are printed; the bound uses the one of the path the rule picks.
* gathers: per attribute entry the weights of its features (8 bytes each); scatters: the same
  count again in the gradient (``oracle+step``: its examples').  The bigram rows are contiguous
  L^2 runs, counted in flops and shown as bytes streamed, not as gathers.

The machine's peak, per core, measured in every worker: a numba FMA loop over 128 doubles (16
zmm / 32 ymm accumulators; the script checks with ``inspect_asm`` that the loop compiled to
``vfmadd`` on zmm or ymm registers and prints which), ``crfkit.kernels.chain_exp.exp_shift_into``
over 65,536 doubles (exps/s), a gather loop (random 8-byte reads from a 3.6 MB array: gathers/s)
and a scatter-add loop (random read-modify-writes into the same array: scatters/s).  Each is the
best of 21 short runs (a few ms each: a peak, so the runs the shared machine left alone); across
the repetitions the median, and the bound uses the best tree's median.

Bound (1 thread) = max(flops / FMA peak, exps / exp rate, gathers / gather rate + scatters /
scatter rate), halved at 2 threads (2 cores); the binding term is named.  The measured time is
the median of ``--evals`` calls after one warm-up call (wall clock), at each of ``--threads``; at
one thread also the median CPU time (``time.process_time``), which the other jobs of a shared
machine disturb less than the wall clock (they take turns on the core, and CPU time counts only
this process's turns), and its ratio to the bound.

``--src PATH`` (repeatable) runs every measurement for each source tree in its own subprocess
(``PYTHONPATH=PATH``), trees taking turns across the ``--reps`` repetitions (the order reversed
every other repetition), so that "before" and
"after" come from one run on the same load; every figure is the median over the repetitions with
its range.  Without ``--src``, this checkout's ``src``.  The table is printed (markdown) and
recorded in ``benchmarks/results/roofline.jsonl`` (``--no-record`` to skip; the record's figures
carry ``section``/``columns``/``rows`` for ``render_performance.py``).

Usage:  python benchmarks/micro/roofline.py [--src /work/wt/base/src --src src] [--data conll2000,ocr,nettalk]
        [--reps 3] [--evals 5] [--threads 1,2] [--oracle-examples 2000] [--data-dir DIR]
        [--no-record] [--results FILE.jsonl]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
ROOT = os.path.dirname(BENCH)
DATA_SETS = ("conll2000", "ocr", "nettalk")
PASSES = ("gradient", "viterbi", "oracle", "oracle+step")
SECTION = "Kernels against the machine's limits"
#: the baseline's exp-domain rule (crfkit.objective.Objective.EXP_BOUND, chain_exp's
#: MAX_SCALED_TRANSITION_RANGE), copied so that the count does not import the kernels
EXP_BOUND = 300.0
MAX_TRANSITION_RANGE = 200.0


# --------------------------------------------------------------------------- work (pure helpers)


def corpus_counts(
    seq_ptr,
    tok_ptr,
    attr,
    attr_ptr,
    *,
    btok_ptr=None,
    battr=None,
    battr_ptr=None,
    seqs=None,
) -> dict:
    """Counts of an encoded corpus (or of its sequences ``seqs``) that the work follows from:
    ``sequences``, ``tokens``, ``positions`` (tokens after the first of their sequence: the
    transitions), ``entries`` (attribute entries), ``gathers`` (per entry the features of its
    attribute), ``bigram_entries`` and ``bigram_weights`` (per bigram entry the features of its
    bigram attribute)."""
    import numpy as np

    seq_ptr = np.asarray(seq_ptr, dtype=np.int64)
    tok_ptr = np.asarray(tok_ptr, dtype=np.int64)
    width = np.diff(np.asarray(attr_ptr, dtype=np.int64))
    if seqs is None:
        seqs = np.arange(len(seq_ptr) - 1)
    seqs = np.asarray(seqs, dtype=np.int64)
    t0, t1 = seq_ptr[seqs], seq_ptr[seqs + 1]
    lens = t1 - t0
    out = {
        "sequences": int(len(seqs)),
        "tokens": int(lens.sum()),
        "positions": int(np.maximum(lens - 1, 0).sum()),
    }
    # the entries of the chosen sequences: per sequence the range tok_ptr[t0] .. tok_ptr[t1]
    per_entry = width[np.asarray(attr, dtype=np.int64)]
    cum = np.concatenate(([0], np.cumsum(per_entry)))
    e0, e1 = tok_ptr[t0], tok_ptr[t1]
    out["entries"] = int((e1 - e0).sum())
    out["gathers"] = int((cum[e1] - cum[e0]).sum())
    out["bigram_entries"] = 0
    out["bigram_weights"] = 0
    if battr is not None and len(battr):
        bptr = np.asarray(btok_ptr, dtype=np.int64)
        bwidth = np.diff(np.asarray(battr_ptr, dtype=np.int64))[np.asarray(battr, dtype=np.int64)]
        bcum = np.concatenate(([0], np.cumsum(bwidth)))
        b0, b1 = bptr[t0], bptr[t1]
        out["bigram_entries"] = int((b1 - b0).sum())
        out["bigram_weights"] = int((bcum[b1] - bcum[b0]).sum())
    return out


def work(counts: dict, L: int, what: str, *, n_dense: int = 0, n_state: int = 0) -> dict:
    """The work of one pass ``what`` (``gradient``, ``viterbi``, ``oracle``, ``oracle+step``) over
    the sequences of ``counts`` (:func:`corpus_counts`; for the oracle: the examples timed, one call
    each): ``flops``, ``exps_log`` (the log-domain recursions), ``exps_expdomain`` (the full-batch
    gradient's exp-domain path; None for the other passes), ``gathers``, ``scatters``,
    ``bytes_gathered`` / ``bytes_scattered`` (8 per gather / scatter) and ``bytes_streamed`` (the
    bigram rows, read and, in the gradient, written).  See the module docstring for the rules."""
    if what not in PASSES:
        raise ValueError(f"unknown pass {what!r}; expected one of {PASSES}")
    N, P, K = counts["tokens"], counts["positions"], counts["sequences"]
    LL = L * L
    bw = counts["bigram_weights"]
    grad = what in ("gradient", "oracle+step")
    if what == "viterbi":
        flops = 2 * N * LL + 2 * bw + 2 * N * n_dense * L
        exps = 0
    else:
        flops = 6 * N * LL + 2 * bw * (2 if grad else 1) + 2 * N * n_dense * L * (2 if grad else 1)
        exps = N * L + P * LL * (1 if bw else 0) + (K * LL if what.startswith("oracle") else 0)
    gathers = counts["gathers"]
    scatters = gathers if grad else 0
    return {
        "flops": int(flops),
        "exps_log": int(exps),
        "exps_expdomain": int(n_state + LL) if what == "gradient" else None,
        "gathers": int(gathers),
        "scatters": int(scatters),
        "bytes_gathered": 8 * int(gathers),
        "bytes_scattered": 8 * int(scatters),
        "bytes_streamed": 8 * int(bw) * (2 if grad else 1),
    }


def bound(w: dict, peaks: dict, *, exp_domain: bool = False, cores: int = 1) -> dict:
    """The time bound (seconds) of work ``w`` (:func:`work`) on ``cores`` cores with the per-core
    ``peaks`` (``flops``, ``exps``, ``gathers``, ``scatters`` per second): the largest of the
    flop, exp and memory terms (gathers and scatters share the load/store units: their times add),
    and which one binds."""
    exps = w["exps_expdomain"] if exp_domain and w["exps_expdomain"] is not None else w["exps_log"]
    terms = {
        "flops": w["flops"] / peaks["flops"],
        "exps": exps / peaks["exps"],
        "gathers": w["gathers"] / peaks["gathers"] + w["scatters"] / peaks["scatters"],
    }
    binding = max(terms, key=terms.get)
    return {
        "seconds": terms[binding] / cores,
        "binding": binding,
        "terms": {k: v / cores for k, v in terms.items()},
    }


def vector_fma(asm: str) -> str:
    """What the FMA loop's assembly multiplies with: ``"zmm x16"`` (the count of distinct zmm
    registers written by ``vfmadd``), ``"ymm x.."``, ``"xmm x.."`` or ``"none"``."""
    import re

    dest: dict[str, set] = {"zmm": set(), "ymm": set(), "xmm": set()}
    for operands in re.findall(r"vfmadd\w*[ \t]+([^\n]*)", asm):
        regs = re.findall(r"%([xyz]mm\d+)", operands)
        if regs:  # AT&T order: the destination (the accumulator) is the last operand
            dest[regs[-1][:3]].add(regs[-1])
    for reg in ("zmm", "ymm", "xmm"):
        if dest[reg]:
            return f"{reg} x{len(dest[reg])}"
    return "none"


def schedule(n_trees: int, reps: int) -> list[tuple[int, int]]:
    """The order of the workers, (repetition, tree index): every tree once per repetition, in
    turns, the order reversed every other repetition (A B, B A, A B: a load that drifts during the
    run falls on the trees alike)."""
    order = list(range(n_trees))
    return [(r, i) for r in range(reps) for i in (order if r % 2 == 0 else order[::-1])]


def summary(values: list[float]) -> dict:
    """Median and range of ``values`` (None entries dropped; None when none is left)."""
    v = [x for x in values if x is not None]
    if not v:
        return None
    return {"median": statistics.median(v), "min": min(v), "max": max(v), "n": len(v)}


def fmt_time(s: float | None) -> str:
    if s is None:
        return "-"
    if s >= 1:
        return f"{s:.3g} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    return f"{s * 1e6:.3g} us"


def fmt_count(x: float | None) -> str:
    if x is None:
        return "-"
    for div, unit in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.3g}{unit}"
    return f"{x:.3g}"


def fmt_summary(s: dict | None, fmt=fmt_time) -> str:
    if s is None:
        return "-"
    if s["n"] > 1:
        return f"{fmt(s['median'])} ({fmt(s['min'])}-{fmt(s['max'])})"
    return fmt(s["median"])


# --------------------------------------------------------------------------- worker (one tree)


def _peaks() -> dict:
    """The machine's rates on this core (best of 21 short runs each) and the FMA loop's vector
    width."""
    import numpy as np
    from numba import njit

    @njit(fastmath=True)
    def fma_loop(reps, x, m, c):
        for _ in range(reps):
            for j in range(128):  # a constant trip count: unrolled into 16 zmm accumulators
                x[j] = x[j] * m + c

    @njit(fastmath=True)
    def gather_loop(w, idx):
        s = 0.0
        for i in range(idx.shape[0]):
            s += w[idx[i]]
        return s

    @njit
    def scatter_loop(g, idx, v):
        for i in range(idx.shape[0]):
            g[idx[i]] += v

    def best(fn, n_work, runs=21):
        rates = []
        for _ in range(runs):
            t = time.perf_counter()
            fn()
            rates.append(n_work / (time.perf_counter() - t))
        return max(rates)

    out = {}
    x = np.random.default_rng(1).random(128)
    fma_loop(1, x, 0.999999, 1e-7)
    out["fma_asm"] = vector_fma(fma_loop.inspect_asm(fma_loop.signatures[0]))
    reps = 2_000_000
    out["flops"] = best(lambda: fma_loop(reps, x, 0.999999, 1e-7), 2 * 128 * reps)
    try:
        from crfkit.kernels.chain_exp import exp_shift_into

        xe = np.random.default_rng(2).uniform(-30.0, 5.0, 1 << 16)
        oe = np.empty_like(xe)
        exp_shift_into(xe, 0.5, oe)

        def exps():
            for _ in range(100):
                exp_shift_into(xe, 0.5, oe)

        out["exps"] = best(exps, 100 * xe.shape[0])
    except ImportError:  # not in this tree: the bound takes another tree's rate
        out["exps"] = None
    rng = np.random.default_rng(3)
    wv = rng.random(450_000)  # 3.6 MB of weights
    idx = rng.integers(0, wv.shape[0], 1 << 22).astype(np.int32)
    gather_loop(wv, idx[:10])
    out["gathers"] = best(lambda: gather_loop(wv, idx), idx.shape[0])
    scatter_loop(wv, idx[:10], 1e-9)
    out["scatters"] = best(lambda: scatter_loop(wv, idx, 1e-9), idx.shape[0])
    return out


def _load(name: str, ddir: str):
    """(space, corpus, description) of a data set, encoded by the tree under test."""
    from crfkit.features.encode import build

    if name == "conll2000":
        sys.path.insert(0, os.path.join(BENCH, "peers"))
        import conll2000_vs_crfsuite as base

        X, Y = base.load(ddir, "train")
        space, corpus = build(X, Y)
        return space, corpus, "CoNLL-2000 train, CRFsuite's chunking attributes"
    if name == "ocr":
        from crfkit.datasets import ocr_letters_split

        Xtr, Ytr, _, _ = ocr_letters_split("ocr2", data_dir=ddir)
        space, corpus = build(None, Ytr, dense=Xtr, support="all", transitions="all")
        return space, corpus, "OCR letters (ocr2: folds 1-9), dense pixels, support all"
    if name == "nettalk":
        from crfkit.datasets.nettalk import nettalk_split
        from crfkit.features.windows import preset_templates
        from crfkit.pipeline import attributes_of, bigram_attributes_of

        train, _, _ = nettalk_split(data_dir=ddir)
        tpl = preset_templates("nettalk:3-grm")
        X, B = attributes_of(train, tpl), bigram_attributes_of(train, tpl)
        Y = [s.labels for s in train]
        space, corpus = build(X, Y, support="all", B=B, transitions=None if tpl.bigram else "none")
        return space, corpus, "NETtalk train, nettalk:3-grm, Wapiti's space (support all)"
    raise ValueError(f"unknown data set {name!r}; expected one of {DATA_SETS}")


def _exp_domain(space, corpus, w) -> bool:
    """Whether the baseline's full-batch gradient takes its exp-domain path at ``w``."""
    import numpy as np

    if space.n_dense or (space.n_bigram and corpus.has_bigram) or not corpus.all_ones:
        return False
    ns = space.n_state
    if ns == 0:
        return False
    most = int(np.diff(corpus.tok_ptr).max()) if corpus.n_tokens else 0
    if float(np.abs(w[:ns]).max()) * most > EXP_BOUND:
        return False
    t = w[ns : ns + space.n_trans]
    hi, lo = (
        max(float(t.max()), 0.0) if len(t) else 0.0,
        min(float(t.min()), 0.0) if len(t) else 0.0,
    )
    return hi - lo <= MAX_TRANSITION_RANGE


def _median_time(fn, evals: int) -> tuple[float, float]:
    """Median wall and median CPU seconds (this process, all threads) of ``evals`` calls of ``fn``
    after one untimed call."""
    fn()  # warm-up: kernels loaded, plans and buffers made
    ts, cs = [], []
    for _ in range(evals):
        c = time.process_time()
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
        cs.append(time.process_time() - c)
    return statistics.median(ts), statistics.median(cs)


def _measure(name: str, spec: dict) -> dict:
    import numba
    import numpy as np

    from crfkit.model import CRFModel
    from crfkit.objective import Objective, regularization

    t_load = time.perf_counter()
    space, corpus, desc = _load(name, spec["data_dir"])
    t_load = time.perf_counter() - t_load
    L = space.n_labels
    n = corpus.n_sequences
    bigram = bool(space.n_bigram and corpus.has_bigram)
    bargs = (
        dict(btok_ptr=corpus.btok_ptr, battr=corpus.battr, battr_ptr=space.battr_ptr)
        if bigram
        else {}
    )
    rng = np.random.default_rng(spec["seed"])
    w = rng.normal(0.0, 0.1, space.n_features)
    k = min(spec["oracle_examples"], n)
    ex = np.sort(rng.choice(n, size=k, replace=False))
    full = corpus_counts(corpus.seq_ptr, corpus.tok_ptr, corpus.attr, space.attr_ptr, **bargs)
    some = corpus_counts(
        corpus.seq_ptr, corpus.tok_ptr, corpus.attr, space.attr_ptr, seqs=ex, **bargs
    )
    kw = dict(n_dense=space.n_dense, n_state=space.n_state)
    out = {
        "description": desc,
        "load_s": t_load,
        "labels": L,
        "features": int(space.n_features),
        "state_features": int(space.n_state),
        "dense": int(space.n_dense),
        "counts": full,
        "oracle_counts": some,
        "exp_domain": _exp_domain(space, corpus, w),
        "work": {
            "gradient": work(full, L, "gradient", **kw),
            "viterbi": work(full, L, "viterbi", **kw),
            "oracle": work(some, L, "oracle", **kw),
            "oracle+step": work(some, L, "oracle+step", **kw),
        },
        "times": {},
        "cpu": {},
    }
    reg = regularization(n, c2=1.0)
    for th in spec["threads"]:
        numba.set_num_threads(th)
        obj = Objective(corpus, space, reg, threads=th)
        key = f"gradient@{th}"
        out["times"][key], out["cpu"][key] = _median_time(
            lambda: obj.value_and_grad(w),
            spec["evals"],
        )
        del obj
        model = CRFModel(space, w)
        key = f"viterbi@{th}"
        out["times"][key], out["cpu"][key] = _median_time(
            lambda: model.viterbi(corpus, threads=th),
            spec["evals"],
        )
    numba.set_num_threads(1)
    obj = Objective(corpus, space, reg, threads=1)
    exl = ex.tolist()
    if bigram:

        def oracle():
            for i in exl:
                obj.oracle_bigram(i, w)

        v = w.copy()

        def step():
            for i in exl:
                _, node, edges, edge = obj.oracle_bigram(i, v)
                obj.apply_gradient_bigram(i, node, edges, edge, -1e-9, v)

    else:

        def oracle():
            for i in exl:
                obj.oracle(i, w)

        v = w.copy()

        def step():
            for i in exl:
                _, node, edge = obj.oracle(i, v)
                obj.apply_gradient(i, node, edge, -1e-9, v)

    for key, fn in (("oracle@1", oracle), ("oracle+step@1", step)):
        t, c = _median_time(fn, spec["evals"])
        out["times"][key], out["cpu"][key] = t / k, c / k
    out["oracle_examples"] = k
    return out


def worker(spec: dict) -> dict:
    """One tree's measurements (in a subprocess with that tree on PYTHONPATH)."""
    import crfkit

    res = {
        "crfkit": os.path.dirname(os.path.abspath(crfkit.__file__)),
        "load_before": os.getloadavg()[0],
        "peaks": _peaks(),
        "data": {},
    }
    for name in spec["data"]:
        res["data"][name] = _measure(name, spec)
    res["load_after"] = os.getloadavg()[0]
    return res


# --------------------------------------------------------------------------- driver


def run_worker(src: str, spec: dict, tmp: str, tag: str) -> dict:
    out = os.path.join(tmp, f"{tag}.json")
    env = dict(
        os.environ,
        PYTHONPATH=os.path.abspath(src),
        NUMBA_NUM_THREADS=str(max(spec["threads"])),
        CRFKIT_QUIET_COMPILE="1",
    )
    p = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(spec), "--out", out],
        env=env,
        capture_output=True,
        text=True,
    )
    if p.returncode != 0:
        raise SystemExit(f"worker for {src} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    with open(out) as f:
        return json.load(f)


def tree_labels(trees: list[str]) -> list[str]:
    """The column names of the trees: each path as given, with ``#k`` (its place, from 1) where a
    path is given more than once."""
    return [t if trees.count(t) == 1 else f"{t}#{i + 1}" for i, t in enumerate(trees)]


def aggregate(runs: dict, labels: list[str], data: list[str], threads: list[int]) -> dict:
    """Medians and ranges over the repetitions, per tree: peaks, times, bounds and ratios."""
    peaks = {
        lab: {
            k: summary([r["peaks"][k] for r in runs[lab]])
            for k in ("flops", "exps", "gathers", "scatters")
        }
        for lab in labels
    }
    best = {}
    for k in ("flops", "exps", "gathers", "scatters"):
        meds = [peaks[lab][k]["median"] for lab in labels if peaks[lab][k] is not None]
        best[k] = max(meds)
    agg = {"peaks": peaks, "peak_used": best, "data": {}}
    for name in data:
        first = runs[labels[0]][0]["data"][name]
        d = {
            "description": first["description"],
            "labels": first["labels"],
            "features": first["features"],
            "counts": first["counts"],
            "oracle_examples": first["oracle_examples"],
            "exp_domain": first["exp_domain"],
            "work": first["work"],
            "bounds": {},
            "times": {},
            "ratios": {},
            "cpu": {},
            "cpu_ratios": {},
        }
        for p in PASSES:
            for th in threads if p in ("gradient", "viterbi") else [1]:
                key = f"{p}@{th}"
                b = bound(
                    first["work"][p],
                    best,
                    exp_domain=first["exp_domain"] and p == "gradient",
                    cores=th,
                )
                if p.startswith("oracle"):  # the oracle's times are per example: so its bound
                    k = first["oracle_examples"]
                    b = dict(
                        b, seconds=b["seconds"] / k, terms={t: v / k for t, v in b["terms"].items()}
                    )
                d["bounds"][key] = b
                for lab in labels:
                    for what, ratio in (("times", "ratios"), ("cpu", "cpu_ratios")):
                        ts = [r["data"][name][what][key] for r in runs[lab]]
                        d[what].setdefault(key, {})[lab] = summary(ts)
                        d[ratio].setdefault(key, {})[lab] = summary([t / b["seconds"] for t in ts])
        agg["data"][name] = d
    return agg


def table(agg: dict, labels: list[str], data: list[str], threads: list[int]) -> list[list[str]]:
    """Rows (data set, pass, measure, one cell per tree) of the printed and recorded table."""
    rows = []
    for k, unit, scale in (
        ("flops", "FMA peak, GFLOP/s", 1e-9),
        ("exps", "exp_shift_into, M exps/s", 1e-6),
        ("gathers", "random 8-byte gathers (3.6 MB), M/s", 1e-6),
        ("scatters", "random scatter-adds (3.6 MB), M/s", 1e-6),
    ):
        rows.append(
            ["machine", "peak per core", unit]
            + [
                fmt_summary(agg["peaks"][lab][k], lambda x, s=scale: f"{x * s:.4g}")
                for lab in labels
            ]
        )
    for name in data:
        d = agg["data"][name]
        for p in PASSES:
            w = d["work"][p]
            exps = w["exps_log"]
            path = "log domain"
            if p == "gradient" and d["exp_domain"]:
                exps, path = w["exps_expdomain"], "exp domain"
            desc = (
                f"{fmt_count(w['flops'])} flops, {fmt_count(exps)} exps ({path}), "
                f"{fmt_count(w['gathers'])} gathers, {fmt_count(w['scatters'])} scatters"
                + (
                    f", {fmt_count(w['bytes_streamed'])}B bigram rows"
                    if w["bytes_streamed"]
                    else ""
                )
            )
            if p.startswith("oracle"):
                desc += f" ({d['oracle_examples']} examples; times per example)"
            same = ["same"] * (len(labels) - 1)  # counted from the corpus: one figure for all trees
            rows.append([name, p, "work"] + [desc] + same)
            for th in threads if p in ("gradient", "viterbi") else [1]:
                key = f"{p}@{th}"
                b = d["bounds"][key]
                rows.append(
                    [name, p, f"bound, {th} thread{'s' if th > 1 else ''}"]
                    + [f"{fmt_time(b['seconds'])} ({b['binding']})"]
                    + same
                )
                rows.append(
                    [name, p, f"time, {th} thread{'s' if th > 1 else ''}"]
                    + [fmt_summary(d["times"][key][lab]) for lab in labels]
                )
                rows.append(
                    [name, p, f"time / bound, {th} thread{'s' if th > 1 else ''}"]
                    + [fmt_summary(d["ratios"][key][lab], lambda x: f"{x:.3g}") for lab in labels]
                )
                if th == 1:  # one thread: the CPU time, which time-sharing with other jobs spares
                    rows.append(
                        [name, p, "CPU time, 1 thread"]
                        + [fmt_summary(d["cpu"][key][lab]) for lab in labels]
                    )
                    rows.append(
                        [name, p, "CPU time / bound, 1 thread"]
                        + [
                            fmt_summary(d["cpu_ratios"][key][lab], lambda x: f"{x:.3g}")
                            for lab in labels
                        ]
                    )
    return rows


def markdown(columns: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        out.append("| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--src",
        action="append",
        default=None,
        help="a source tree (the directory holding crfkit/), repeatable; default this checkout's src",
    )
    ap.add_argument("--data", default=",".join(DATA_SETS))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--evals", type=int, default=5)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--oracle-examples", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--no-record", action="store_true")
    ap.add_argument("--results", default=None, help="record into this .jsonl file")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        res = worker(json.loads(args.worker))
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(res, f)
        os.replace(tmp, args.out)
        return 0
    trees = args.src or [os.path.join(ROOT, "src")]
    data = [x for x in args.data.split(",") if x]
    bad = [x for x in data if x not in DATA_SETS]
    if bad:
        ap.error(f"unknown data set(s) {bad}; expected some of {DATA_SETS}")
    threads = [int(x) for x in args.threads.split(",")]
    ddir = (
        args.data_dir or os.environ.get("CRFKIT_DATA") or os.path.join(ROOT, "..", "shared", "data")
    )
    spec = dict(
        data=data,
        threads=threads,
        evals=args.evals,
        oracle_examples=args.oracle_examples,
        seed=args.seed,
        data_dir=os.path.abspath(ddir),
    )
    labels = tree_labels(trees)
    runs: dict = {lab: [] for lab in labels}
    loads = []
    t_all = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="crfkit-roofline-") as tmp:
        for r, i in schedule(len(trees), args.reps):
            src, lab = trees[i], labels[i]
            t = time.perf_counter()
            res = run_worker(src, spec, tmp, f"r{r}t{i}")
            loads += [res["load_before"], res["load_after"]]
            runs[lab].append(res)
            print(
                f"repetition {r + 1}, {lab} ({res['crfkit']}): {time.perf_counter() - t:.0f} s, "
                f"FMA {res['peaks']['fma_asm']}, load {res['load_before']:.2f} -> "
                f"{res['load_after']:.2f}",
                flush=True,
            )
    agg = aggregate(runs, labels, data, threads)
    columns = ["data set", "pass", "measure"] + labels
    rows = table(agg, labels, data, threads)
    for name in data:
        d = agg["data"][name]
        c = d["counts"]
        print(
            f"\n{name}: {d['description']}: {c['sequences']:,} sequences, {c['tokens']:,} tokens, "
            f"{d['labels']} labels, {d['features']:,} features, {c['entries']:,} attribute entries, "
            f"{c['gathers']:,} feature gathers"
            + (
                f", {c['bigram_entries']:,} bigram entries ({c['bigram_weights']:,} pair weights)"
                if c["bigram_entries"]
                else ""
            )
            + f"; gradient path: {'exp domain' if d['exp_domain'] else 'log domain'}"
        )
    load = (
        f"load average {min(loads):.2f}-{max(loads):.2f} during the workers"
        f" ({time.perf_counter() - t_all:.0f} s in all)"
    )
    print(
        f"\nmedian over {args.reps} repetitions (range in brackets), trees in turns; each time the "
        f"median of {args.evals} calls; bounds with the best tree's peak per core; {load}\n"
    )
    print(markdown(columns, rows))
    if not args.no_record:
        sys.path.insert(0, BENCH)
        import _results

        figures = {
            "section": SECTION,
            "task": "the chain oracle: " + ", ".join(data),
            "columns": columns,
            "rows": rows,
            "trees": [
                {
                    "label": lab,
                    "src": os.path.abspath(t),
                    "commit": _results.git_commit(os.path.dirname(os.path.abspath(t))),
                }
                for lab, t in zip(labels, trees)
            ],
            "aggregate": agg,
            "runs": {
                lab: [
                    {
                        "peaks": r["peaks"],
                        "times": {n: r["data"][n]["times"] for n in data},
                        "cpu": {n: r["data"][n]["cpu"] for n in data},
                    }
                    for r in runs[lab]
                ]
                for lab in labels
            },
        }
        notes = (
            f"{load}; {args.reps} repetitions, trees in turns; bounds from the measured peak per "
            "core (FMA loop, exp_shift_into, random gathers and scatter-adds), halved at 2 threads"
        )
        _results.record(figures, args.results, notes=notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
