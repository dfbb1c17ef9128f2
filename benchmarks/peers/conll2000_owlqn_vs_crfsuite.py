#!/usr/bin/env python
"""crfkit OWL-QN vs CRFsuite OWL-QN (python-crfsuite) on CoNLL-2000 chunking: elastic net c1 = 1,
c2 = 1.

Same attributes, same objective ``sum_i nll_i + c1 ||w||_1 + c2 ||w||^2`` as
``conll2000_vs_crfsuite.py`` (whose loaders, attribute function and worker
subprocesses are reused: each trainer runs in its own subprocess so that its
peak RSS is its own).  CRFsuite: ``lbfgs`` with ``c1 = 1`` -- it then runs
OWL-QN (liblbfgs, backtracking line search) -- and its default delta = 1e-5,
period = 10, epsilon = 1e-5, m = 6.  crfkit: ``train_corpus`` with the same
``c1``/``c2``, which runs ``crfkit.optim.owlqn``; it runs until it reaches
CRFsuite's final objective (time to CRFsuite's objective) *and* its own delta
rule (same delta/period) has fired; both points are read off its history.
A third subprocess evaluates crfkit's objective (L1 term included) at
CRFsuite's final weights; CRFsuite's model file leaves out zero weights,
which is harmless since they are zero.

Usage:  python benchmarks/peers/conll2000_owlqn_vs_crfsuite.py [--c1 1.0] [--data-dir DIR] [--threads N] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conll2000_vs_crfsuite as base  # noqa: E402  (workers, loaders and plumbing live there)


def load_average() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "load average: " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--c1", type=float, default=1.0, help="CRFsuite's L1 strength (default 1.0)")
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
    args = ap.parse_args(argv)
    if not args.c1 > 0:
        ap.error("--c1 must be > 0 (this benchmark is about L1)")
    args.data_dir = base.data_dir(args.data_dir)
    if not os.path.exists(os.path.join(args.data_dir, "conll2000", "train.txt.gz")):
        print(
            f"CoNLL-2000 not found under {args.data_dir} (set CRFKIT_DATA or --data-dir)",
            file=sys.stderr,
        )
        return 2
    loads = [load_average()]
    with tempfile.TemporaryDirectory(prefix="crfkit-owlqn-bench-") as tmp:
        args.tmp = tmp
        print(
            f"data: {os.path.abspath(args.data_dir)}/conll2000; c1={args.c1:g}, c2=1; crfkit threads: "
            f"{args.threads}; cores: {os.cpu_count()}",
            flush=True,
        )
        print(f"before: {loads[0]}", flush=True)
        cs = base.run_worker("crfsuite", args)
        print(f"crfsuite done: {cs['iterations']} iterations, {cs['train_s']:.1f}s", flush=True)
        loads.append(load_average())
        ck = base.run_worker(
            "crfkit", args, ["--target", repr(cs["objective"]), "--until-own-stop"]
        )
        print(
            f"crfkit ({ck['algorithm']}) done: {ck['iterations']} iterations to its own delta rule, "
            f"{ck['train_s']:.1f}s",
            flush=True,
        )
        loads.append(load_average())
        chk = base.run_worker("check", args)
    rel = abs(chk["objective_at_crfsuite_weights"] - cs["objective"]) / abs(cs["objective"])
    # CRFsuite stops by its delta rule: its "own" and "to its final objective" figures coincide
    cs = dict(
        cs,
        nnz=cs["features"],
        own_evaluations=cs["evaluations"],
        target_iteration=cs["iterations"],
        target_evaluations=cs["evaluations"],
        target_nnz=cs["features"],
    )
    ck = dict(ck, feature_space=ck["features"])
    if not ck.get("own_rule_fired"):
        for key in ("iterations", "own_evaluations", "train_s", "objective", "nnz"):
            ck[key] = None  # printed as "not reached"
    rows = [
        ("feature space (generated features)", "feature_space", "{:d}"),
        ("iterations (own delta rule)", "iterations", "{:d}"),
        ("evaluations (own delta rule)", "own_evaluations", "{:d}"),
        ("training wall time (own delta rule), s", "train_s", "{:.2f}"),
        ("objective at own delta rule (CRFsuite units)", "objective", "{:.6f}"),
        ("active features at own delta rule", "nnz", "{:d}"),
        ("time to CRFsuite's final objective, s", "time_to_target_s", "{:.2f}"),
        ("iterations to CRFsuite's final objective", "target_iteration", "{:d}"),
        ("evaluations to CRFsuite's final objective", "target_evaluations", "{:d}"),
        ("active features at CRFsuite's objective", "target_nnz", "{:d}"),
        ("peak RSS, MB", "peak_rss_mb", "{:.1f}"),
        ("model file, bytes", "model_bytes", "{:d}"),
        ("tagging, tokens/s (best of 3 calls)", "tag_tokens_per_s", "{:.0f}"),
        ("tagging, tokens/s (first call)", "tag_first_tokens_per_s", "{:.0f}"),
        ("token accuracy, %", "accuracy", "{:.3f}"),
        ("chunk F1 (conlleval)", "f1", "{:.3f}"),
    ]
    base.print_table(rows, cs, ck, width=46)
    print(
        f"CRFsuite: train() wall time {cs['train_s']:.2f}s includes its feature generation and model "
        f"writing; its iterations alone took {cs['optimizer_s']:.2f}s "
        f"(crfkit/that: {ck['time_to_target_s'] / cs['optimizer_s'] if ck['time_to_target_s'] else float('nan'):.3f}"
        f" to CRFsuite's objective). crfkit's feature space is built before its clock starts "
        f"({ck['load_data_s']:.2f}s)."
    )
    print(
        f"crfkit ran until it had both reached CRFsuite's final objective and met its own delta rule: "
        f"objective {ck['final_objective']:.6f} after {ck['final_iterations']} iterations "
        f"({ck['evaluations']} evaluations), {ck['final_s']:.2f}s, {ck['final_nnz']} active features; "
        f"model, tagging, accuracy and F1 figures are for that final model"
    )
    print()
    print(
        f"objective check: crfkit F at CRFsuite's final weights = {chk['objective_at_crfsuite_weights']:.6f}, "
        f"CRFsuite reported {cs['objective']:.6f}, relative difference {rel:.2e} "
        f"({chk['crfsuite_features_not_in_crfkit']} of {chk['crfsuite_features']} CRFsuite non-zero features "
        f"missing from crfkit's feature space)"
    )
    print(
        f"  objective agrees within 1e-6 relative: {'PASS' if rel <= 1e-6 else 'FAIL'} ({rel:.2e})"
    )
    print()
    print("load (uptime) before / after CRFsuite / after crfkit:")
    for line in loads:
        print(f"  {line}")
    figures = {
        "c1": args.c1,
        "crfsuite": cs,
        "crfkit": ck,
        "check": chk,
        "objective_rel_diff": rel,
        "load": loads,
    }
    if args.json:
        tmpf = args.json + ".tmp"
        with open(tmpf, "w") as f:
            json.dump(figures, f, indent=1)
        os.replace(tmpf, args.json)
    if args.results:  # one record in the benchmarks/results/ schema
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        import _results

        _results.record(figures, args.results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
