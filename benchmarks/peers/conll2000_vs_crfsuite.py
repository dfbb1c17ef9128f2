#!/usr/bin/env python
"""crfkit vs CRFsuite (python-crfsuite) on CoNLL-2000 chunking, same features, same objective.

Attributes: CRFsuite's chunking example (w[-2..2], w[-1]|w[0], w[0]|w[1],
pos[-2..2], pos bigrams and trigrams, templates fire only inside the sentence,
plus __BOS__ / __EOS__), generated once per process by the same function and
fed identically to both trainers.  CRFsuite: ``lbfgs`` with its defaults (c2=1,
delta=1e-5, period=10, epsilon=1e-5, m=6).  crfkit: L-BFGS on the same
objective with the same stopping rules.

Each trainer runs in its own subprocess so that peak RSS (ru_maxrss) is its
own.  Order: CRFsuite first; its final objective is handed to crfkit, which
records when it first reaches it (time-to-CRFsuite's-objective) and then runs
on to its own stopping rule.  A third subprocess evaluates crfkit's objective
at CRFsuite's final weights.

Usage:  python benchmarks/peers/conll2000_vs_crfsuite.py [--data-dir DIR] [--threads N] [--json OUT]
Data dir: --data-dir, else $CRFKIT_DATA, else ../shared/data.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

TEMPLATES = (
    (("w", -2),),
    (("w", -1),),
    (("w", 0),),
    (("w", 1),),
    (("w", 2),),
    (("w", -1), ("w", 0)),
    (("w", 0), ("w", 1)),
    (("pos", -2),),
    (("pos", -1),),
    (("pos", 0),),
    (("pos", 1),),
    (("pos", 2),),
    (("pos", -2), ("pos", -1)),
    (("pos", -1), ("pos", 0)),
    (("pos", 0), ("pos", 1)),
    (("pos", 1), ("pos", 2)),
    (("pos", -2), ("pos", -1), ("pos", 0)),
    (("pos", -1), ("pos", 0), ("pos", 1)),
    (("pos", 0), ("pos", 1), ("pos", 2)),
)
FIELD = {"w": 0, "pos": 1}
NAMES = ["|".join(f"{f}[{o}]" for f, o in t) for t in TEMPLATES]


def data_dir(arg: str | None) -> str:
    return arg or os.environ.get("CRFKIT_DATA") or os.path.join("..", "shared", "data")


def attributes(sent):
    """CRFsuite chunking.py features of one sentence (its [word, pos] columns per token)."""
    T = len(sent)
    out = []
    for t in range(T):
        feats = []
        for name, tpl in zip(NAMES, TEMPLATES):
            vals = []
            for f, o in tpl:
                p = t + o
                if p < 0 or p >= T:
                    vals = None
                    break
                vals.append(sent[p][FIELD[f]])
            if vals:
                feats.append(name + "=" + "|".join(vals))
        if t == 0:
            feats.append("__BOS__")
        if t == T - 1:
            feats.append("__EOS__")
        out.append(feats)
    return out


def load(ddir: str, split: str):
    from crfkit.io.columns import read_columns_list

    sents = read_columns_list(os.path.join(ddir, "conll2000", f"{split}.txt.gz"))
    return [attributes(s.columns) for s in sents], [s.labels for s in sents]


def time_tagging(tag, X, rounds: int = 3) -> tuple[float, float, list]:
    """Seconds of the first call of ``tag(X)`` (for crfkit it loads the parallel decoding kernels
    from numba's cache, once per process), the best of ``rounds`` calls after it (the throughput of
    a tagger that stays up), and the first call's output."""
    t0 = time.perf_counter()
    pred = tag(X)
    first = time.perf_counter() - t0
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        tag(X)
        best = min(best, time.perf_counter() - t0)
    return first, best, pred


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def chunk_scores(gold, pred):
    from crfkit.metrics import conlleval

    rep = conlleval(gold, pred)
    return rep.accuracy, rep.f1


# --------------------------------------------------------------------------- workers
def worker_crfsuite(args) -> dict:
    import pycrfsuite

    X, Y = load(args.data_dir, "train")
    t0 = time.perf_counter()
    trainer = pycrfsuite.Trainer(verbose=False)
    for x, y in zip(X, Y):
        trainer.append(x, y)
    t_append = time.perf_counter() - t0
    del X, Y
    trainer.select("lbfgs")
    params = {"c2": 1.0, "delta": 1e-5, "period": 10}
    if args.c1:
        params["c1"] = args.c1  # CRFsuite then runs OWL-QN
    trainer.set_params(params)
    model_path = os.path.join(args.tmp, "crfsuite.model")
    t0 = time.perf_counter()
    trainer.train(model_path)
    t_train = time.perf_counter() - t0
    its = trainer.logparser.iterations
    last = trainer.logparser.last_iteration
    n_features = int(trainer.logparser.last_iteration.get("active_features", 0))
    feature_space = trainer.logparser.featgen_num_features
    # final weights for the objective check
    tagger = pycrfsuite.Tagger()
    tagger.open(model_path)
    info = tagger.info()
    weights = {
        "state": [[a, l, w] for (a, l), w in info.state_features.items()],
        "trans": [[a, b, w] for (a, b), w in info.transitions.items()],
    }
    with open(os.path.join(args.tmp, "crfsuite_weights.json"), "w") as f:
        json.dump(weights, f)
    Xt, Yt = load(args.data_dir, "test")
    t_first, t_tag, pred = time_tagging(lambda X: [tagger.tag(x) for x in X], Xt)
    n_tok = sum(len(y) for y in Yt)
    acc, f1 = chunk_scores(Yt, pred)
    return {
        "system": "crfsuite",
        "features": n_features,
        "iterations": len(its),
        "train_s": t_train,
        "load_data_s": t_append,
        "objective": float(last["loss"]),
        "time_to_target_s": t_train,
        "curve": [[sum(i["time"] for i in its[: k + 1]), i["loss"]] for k, i in enumerate(its)],
        "model_bytes": os.path.getsize(model_path),
        "tag_tokens_per_s": n_tok / t_tag,
        "tag_first_tokens_per_s": n_tok / t_first,
        "accuracy": acc,
        "f1": f1,
        "peak_rss_mb": peak_rss_mb(),
        "feature_space": feature_space,
        "optimizer_s": sum(i["time"] for i in its),
        "evaluations": 1 + sum(i.get("linesearch_trials", 1) for i in its),
    }


def worker_crfkit(args) -> dict:
    from crfkit.features.encode import build
    from crfkit.model import CRFModel
    from crfkit.objective import regularization
    from crfkit.train import train_corpus

    X, Y = load(args.data_dir, "train")
    # numba compiles once per installation and caches the machine code on
    # disk; load it (or compile it on a fresh checkout) before the clock runs
    train_corpus(
        *build(X[:20], Y[:20]),
        max_iterations=2,
        threads=args.threads,
        reg=regularization(20, c1=args.c1 or None, c2=1.0),
    )
    t0 = time.perf_counter()
    space, corpus = build(X, Y)
    t_build = time.perf_counter() - t0
    del X, Y
    reg = regularization(corpus.n_sequences, c1=args.c1 or None, c2=1.0)
    # One run, from scratch, until crfkit reaches CRFsuite's final objective
    # (delta rule off, stop_value on); where crfkit's own delta rule (same
    # delta/period as CRFsuite) would have stopped is read off the history.
    target = args.target / corpus.n_sequences if args.target else None
    both = target is not None and args.until_own_stop
    seen, fired = [], [False]

    def until_both(rec):
        # --until-own-stop: run on until crfkit's own delta rule has fired too
        seen.append(rec["objective"])
        k = len(seen) - 1
        fired[0] = fired[0] or (
            k >= 10 and seen[k] != 0 and abs((seen[k - 10] - seen[k]) / seen[k]) < 1e-5
        )
        return fired[0] and min(seen) <= target

    res = train_corpus(
        space,
        corpus,
        reg=reg,
        delta=0.0 if target else 1e-5,
        period=10,
        epsilon=1e-5,
        m=6,
        threads=args.threads,
        stop_value=None if both else target,
        max_iterations=2000,
        callback=until_both if both else None,
    )
    hist = res.history
    fs = [h["objective"] for h in hist]
    k = delta_stop_index(fs, 1e-5, 10)
    own = hist[k] if k is not None else hist[-1]
    reached = next((h for h in hist if target is not None and h["objective"] <= target), None)
    model_path = os.path.join(args.tmp, "crfkit.model")
    model_bytes = res.model.save(model_path)
    model = CRFModel.load(model_path)
    Xt, Yt = load(args.data_dir, "test")
    t_first, t_tag, pred = time_tagging(model.tag, Xt)
    n_tok = sum(len(y) for y in Yt)
    acc, f1 = chunk_scores(Yt, pred)
    return {
        "system": "crfkit",
        "features": space.n_features,
        "iterations": own["iteration"],
        "train_s": own["wall_s"],
        "load_data_s": t_build,
        "objective": own["objective"] * corpus.n_sequences,
        "time_to_target_s": reached["wall_s"] if reached else None,
        "target_iteration": reached["iteration"] if reached else None,
        "final_objective": res.objective_crfsuite,
        "final_iterations": res.iterations,
        "final_s": res.seconds,
        "evaluations": int(round(hist[-1]["effective_passes"])) if hist else 0,
        "curve": [[h["wall_s"], h["objective"] * corpus.n_sequences] for h in hist],
        "status": res.status,
        "model_bytes": model_bytes,
        "tag_tokens_per_s": n_tok / t_tag,
        "tag_first_tokens_per_s": n_tok / t_first,
        "accuracy": acc,
        "f1": f1,
        "peak_rss_mb": peak_rss_mb(),
        "threads": args.threads,
        "algorithm": res.model.meta["algorithm"],
        "nnz": own["nnz"],
        "final_nnz": hist[-1]["nnz"] if hist else 0,
        "target_evaluations": int(round(reached["effective_passes"])) if reached else None,
        "target_nnz": reached["nnz"] if reached else None,
        "own_evaluations": int(round(own["effective_passes"])) if hist else 0,
        "own_rule_fired": k is not None,
    }


def delta_stop_index(fs, delta, period):
    """Index of the iteration at which CRFsuite's delta rule stops:
    (f[k-period] - f[k]) / f[k] < delta."""
    for k in range(period, len(fs)):
        if fs[k] != 0 and abs((fs[k - period] - fs[k]) / fs[k]) < delta:
            return k
    return None


def worker_check(args) -> dict:
    """crfkit's objective (CRFsuite units) at CRFsuite's final weights."""
    import numpy as np

    from crfkit.features.encode import build
    from crfkit.objective import Objective, regularization

    X, Y = load(args.data_dir, "train")
    space, corpus = build(X, Y)
    with open(os.path.join(args.tmp, "crfsuite_weights.json")) as f:
        cw = json.load(f)
    w = np.zeros(space.n_features)
    ai, li = space.attr_index, space.label_index
    missing = 0
    for a, lab, val in cw["state"]:
        k = ai.get(a)
        found = False
        if k is not None:
            lo, hi = space.attr_ptr[k], space.attr_ptr[k + 1]
            hits = np.flatnonzero(space.feat_label[lo:hi] == li[lab])
            if len(hits):
                w[lo + hits[0]] = val
                found = True
        missing += not found
    for a, b, val in cw["trans"]:
        k = space.trans_index[li[a], li[b]]
        if k < 0:
            missing += 1
        else:
            w[space.n_state + k] = val
    obj = Objective(
        corpus,
        space,
        regularization(corpus.n_sequences, c1=args.c1 or None, c2=1.0),
        threads=args.threads,
    )
    f = obj.to_crfsuite(obj.value(w))
    return {
        "objective_at_crfsuite_weights": f,
        "crfsuite_features_not_in_crfkit": missing,
        "crfsuite_features": len(cw["state"]) + len(cw["trans"]),
    }


def print_table(rows, cs: dict, ck: dict, width: int = 40) -> None:
    """One line per (label, key, format) row: CRFsuite's figure, crfkit's, and their ratio."""
    print()
    print(f"{'':{width}s} {'crfsuite':>16s} {'crfkit':>16s} {'crfkit/crfsuite':>16s}")
    for label, key, fmt in rows:
        a, b = cs.get(key), ck.get(key)
        fa = fmt.format(a) if a is not None else "-"
        fb = fmt.format(b) if b is not None else "not reached"
        ratio = (
            f"{b / a:.3f}"
            if isinstance(a, (int, float)) and isinstance(b, (int, float)) and a
            else "-"
        )
        print(f"{label:{width}s} {fa:>16s} {fb:>16s} {ratio:>16s}")


def run_worker(kind: str, args, extra=()) -> dict:
    out = os.path.join(args.tmp, f"{kind}.json")
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--worker",
        kind,
        "--data-dir",
        args.data_dir,
        "--tmp",
        args.tmp,
        "--out",
        out,
        "--threads",
        str(args.threads),
        *extra,
    ]
    if getattr(args, "c1", None):
        cmd += ["--c1", repr(args.c1)]
    subprocess.run(cmd, check=True)
    with open(out) as f:
        return json.load(f)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--json", default=None, help="also write all figures to this JSON file")
    ap.add_argument(
        "--results",
        metavar="FILE.jsonl",
        default=None,
        help="also append the figures as one record (benchmarks/_results.py: command, date, "
        "commit, machine, figures) to FILE.jsonl, e.g. benchmarks/results/NAME.jsonl",
    )
    ap.add_argument("--worker", choices=["crfsuite", "crfkit", "check"], help=argparse.SUPPRESS)
    ap.add_argument("--tmp", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--target", type=float, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--until-own-stop", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument(
        "--c1", type=float, default=None, help=argparse.SUPPRESS
    )  # L1 (OWL-QN), see conll2000_owlqn_vs_crfsuite.py
    args = ap.parse_args(argv)
    args.data_dir = data_dir(args.data_dir)
    if args.worker:
        res = {"crfsuite": worker_crfsuite, "crfkit": worker_crfkit, "check": worker_check}[
            args.worker
        ](args)
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(res, f)
        os.replace(tmp, args.out)
        return 0
    if not os.path.exists(os.path.join(args.data_dir, "conll2000", "train.txt.gz")):
        print(
            f"CoNLL-2000 not found under {args.data_dir} (set CRFKIT_DATA or --data-dir)",
            file=sys.stderr,
        )
        return 2
    with tempfile.TemporaryDirectory(prefix="crfkit-bench-") as tmp:
        args.tmp = tmp
        print(
            f"data: {os.path.abspath(args.data_dir)}/conll2000; crfkit threads: {args.threads}; "
            f"cores: {os.cpu_count()}",
            flush=True,
        )
        cs = run_worker("crfsuite", args)
        print(f"crfsuite done: {cs['iterations']} iterations, {cs['train_s']:.1f}s", flush=True)
        ck = run_worker("crfkit", args, ["--target", repr(cs["objective"])])
        print(f"crfkit done: {ck['iterations']} iterations, {ck['train_s']:.1f}s", flush=True)
        chk = run_worker("check", args)
    rel = abs(chk["objective_at_crfsuite_weights"] - cs["objective"]) / abs(cs["objective"])
    rows = [
        ("features", "features", "{:d}"),
        ("iterations (own delta rule)", "iterations", "{:d}"),
        ("training wall time (own delta rule), s", "train_s", "{:.2f}"),
        ("time to CRFsuite's final objective, s", "time_to_target_s", "{:.2f}"),
        ("objective at own delta rule (CRFsuite units)", "objective", "{:.6f}"),
        ("peak RSS, MB", "peak_rss_mb", "{:.1f}"),
        ("model file, bytes", "model_bytes", "{:d}"),
        ("tagging, tokens/s (best of 3 calls)", "tag_tokens_per_s", "{:.0f}"),
        ("tagging, tokens/s (first call)", "tag_first_tokens_per_s", "{:.0f}"),
        ("token accuracy, %", "accuracy", "{:.3f}"),
        ("chunk F1 (conlleval)", "f1", "{:.3f}"),
    ]
    print_table(rows, cs, ck, width=40)
    print(
        f"crfkit went on to CRFsuite's final objective: {ck['final_objective']:.6f} after "
        f"{ck['final_iterations']} iterations ({ck['evaluations']} evaluations), {ck['final_s']:.2f}s; "
        f"accuracy, F1, model and tagging figures are for that final model"
    )
    print()
    print(
        f"objective check: crfkit f at CRFsuite's final weights = {chk['objective_at_crfsuite_weights']:.6f}, "
        f"CRFsuite reported {cs['objective']:.6f}, relative difference {rel:.2e} "
        f"({chk['crfsuite_features_not_in_crfkit']} of {chk['crfsuite_features']} CRFsuite features "
        f"missing from crfkit's feature space)"
    )
    t = ck["time_to_target_s"]
    print("targets:")
    print(
        f"  objective agrees within 1e-6 relative: {'PASS' if rel <= 1e-6 else 'FAIL'} ({rel:.2e})"
    )
    print(
        f"  time to CRFsuite's objective <= 0.5x CRFsuite's training time: "
        f"{'PASS' if t is not None and t <= 0.5 * cs['train_s'] else 'FAIL'} "
        f"({(t / cs['train_s']) if t is not None else float('nan'):.3f}x)"
    )
    print(
        f"  token accuracy within 0.05 points: {'PASS' if abs(ck['accuracy'] - cs['accuracy']) <= 0.05 else 'FAIL'} "
        f"({ck['accuracy'] - cs['accuracy']:+.3f})"
    )
    print(
        f"  chunk F1 within 0.1: {'PASS' if abs(ck['f1'] - cs['f1']) <= 0.1 else 'FAIL'} ({ck['f1'] - cs['f1']:+.3f})"
    )
    print(
        f"  tagging throughput >= CRFsuite's: {'PASS' if ck['tag_tokens_per_s'] >= cs['tag_tokens_per_s'] else 'FAIL'} "
        f"({ck['tag_tokens_per_s'] / cs['tag_tokens_per_s']:.2f}x)"
    )
    print(
        f"  peak RSS <= 1.5x CRFsuite's: {'PASS' if ck['peak_rss_mb'] <= 1.5 * cs['peak_rss_mb'] else 'FAIL'} "
        f"({ck['peak_rss_mb'] / cs['peak_rss_mb']:.2f}x)"
    )
    figures = {"crfsuite": cs, "crfkit": ck, "check": chk, "objective_rel_diff": rel}
    if args.json:
        tmp = args.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(figures, f, indent=1)
        os.replace(tmp, args.json)
    if args.results:  # one record in the benchmarks/results/ schema
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        import _results

        _results.record(figures, args.results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
