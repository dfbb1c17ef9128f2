#!/usr/bin/env python
"""Tagging Python lists, warm: crfkit against python-crfsuite's ``Tagger`` on the CoNLL-2000 test set.

One model, both taggers: crfkit trains a chunker once on the CoNLL-2000 training set (CRFsuite's
chunking attributes, as ``conll2000_vs_crfsuite.py`` builds them, written ``name:value`` so that the
same attributes come from strings and from sklearn-crfsuite's feature dicts; L-BFGS, c2 = 1,
``--iterations``), saves it and writes it as a CRFsuite model (:func:`crfkit.interop.write_crfsuite`);
both files are kept in ``--model-dir`` and reused by later runs.  Then the 2,012 test sentences are
tagged from the same Python lists by both, in one process:

* attribute strings (per token a list of ``"name:value"`` strings): ``CRFModel.tag(X)`` against
  ``[tagger.tag(x) for x in X]``;
* feature dicts (per token ``{name: value}``, what sklearn-crfsuite users pass):
  ``crfkit.CRF(model_filename=...).predict(X)`` against ``[tagger.tag(x) for x in X]`` (what
  ``sklearn_crfsuite.CRF.predict`` runs).

Warm: each tagger has tagged the whole set once before the clock runs (numba's kernels loaded, the
dict memo filled).  A run times one call of each of the four, interleaved (so all see the same
load); ``--runs`` runs (default 3); the script prints per measurement the median and range of the
seconds and of the ratio (CRFsuite's time over crfkit's, per run: higher is better for crfkit), checks
that both taggers give the same labels, and appends its figures to ``--results`` (default
``benchmarks/results/peers.jsonl``; ``--no-record``: print only).

Usage:  python benchmarks/peers/tag_lists_vs_crfsuite.py [--data-dir DIR] [--model-dir DIR]
        [--iterations N] [--runs N] [--threads N] [--results FILE.jsonl | --no-record] [--json OUT]
Data dir: --data-dir, else $CRFKIT_DATA, else ../shared/data.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conll2000_vs_crfsuite import FIELD, NAMES, TEMPLATES, data_dir  # noqa: E402

import _results  # noqa: E402  (standard library only)


def token_dicts(sent) -> list[dict]:
    """CRFsuite's chunking attributes of one sentence (its [word, pos] columns per token) as
    sklearn-crfsuite feature dicts: ``{template name: value}``, ``__BOS__`` / ``__EOS__`` as 1.0."""
    T = len(sent)
    out = []
    for t in range(T):
        d: dict = {}
        for name, tpl in zip(NAMES, TEMPLATES):
            vals = []
            for f, o in tpl:
                p = t + o
                if p < 0 or p >= T:
                    vals = None
                    break
                vals.append(sent[p][FIELD[f]])
            if vals:
                d[name] = "|".join(vals)
        if t == 0:
            d["__BOS__"] = 1.0
        if t == T - 1:
            d["__EOS__"] = 1.0
        out.append(d)
    return out


def as_strings(dicts: list[dict]) -> list[list[str]]:
    """The attribute strings python-crfsuite makes of those dicts (``name:value``; ``name`` for
    the value 1.0)."""
    return [[k if type(v) is float else f"{k}:{v}" for k, v in d.items()] for d in dicts]


def load(ddir: str, split: str):
    from crfkit.io.columns import read_columns_list

    sents = read_columns_list(os.path.join(ddir, "conll2000", f"{split}.txt.gz"))
    D = [token_dicts(s.columns) for s in sents]
    return D, [as_strings(d) for d in D], [s.labels for s in sents]


def models(args) -> tuple[str, str, dict]:
    """The crfkit and CRFsuite model files in ``--model-dir`` (trained and written when absent)."""
    os.makedirs(args.model_dir, exist_ok=True)
    ck = os.path.join(args.model_dir, f"conll2000_it{args.iterations}.crfkit")
    cs = os.path.join(args.model_dir, f"conll2000_it{args.iterations}.crfsuite")
    info = {"trained_now": False}
    if not (os.path.exists(ck) and os.path.exists(cs)):
        from crfkit.interop import write_crfsuite
        from crfkit.train import train

        _, X, Y = load(args.data_dir, "train")
        t0 = time.perf_counter()
        r = train(X, Y, c2=1.0, max_iterations=args.iterations)
        info.update(trained_now=True, train_s=round(time.perf_counter() - t0, 1))
        model = r.model if hasattr(r, "model") else r
        model.save(ck)
        write_crfsuite(model, cs)
    return ck, cs, info


def common_arguments(doc: str) -> argparse.ArgumentParser:
    """The options this script shares with ``first_predict_vs_crfsuite.py``: the data, the models
    (``--model-dir``, ``--iterations``), ``--runs``, and where the figures go."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument(
        "--model-dir", default=os.path.join(tempfile.gettempdir(), "crfkit_tag_lists_models")
    )
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--results", default=os.path.join(_results.RESULTS, "peers.jsonl"))
    ap.add_argument("--no-record", action="store_true")
    return ap


def stats(xs: list[float]) -> dict:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "runs": xs}


def main(argv=None) -> dict:
    ap = common_arguments(__doc__)
    ap.add_argument("--threads", type=int, default=None, help="crfkit's threads (default: all)")
    ap.add_argument("--only", choices=("strings", "dicts"), default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--notes", default=None, help="notes for the record (e.g. the load)")
    args = ap.parse_args(argv)
    args.data_dir = data_dir(args.data_dir)

    import pycrfsuite

    import crfkit
    from crfkit.model import CRFModel

    ck, cs, info = models(args)
    D, S, _ = load(args.data_dir, "test")
    n_tok = sum(map(len, S))
    tagger = pycrfsuite.Tagger()
    tagger.open(cs)
    model = CRFModel.load(ck)
    est = crfkit.CRF(model_filename=ck, threads=args.threads)

    cases = {
        "strings": (
            lambda: [tagger.tag(x) for x in S],
            lambda: model.tag(S, threads=args.threads),
        ),
        "dicts": (lambda: [tagger.tag(x) for x in D], lambda: est.predict(D)),
    }
    if args.only:
        cases = {args.only: cases[args.only]}
    agree = {}
    for name, (peer, ours) in cases.items():  # warm up: kernels loaded, memo filled
        a, b = peer(), ours()
        agree[name] = a == b
        if not agree[name]:
            diff = sum(p != q for x, y in zip(a, b) for p, q in zip(x, y))
            print(f"{name}: labels differ at {diff} of {n_tok} tokens", file=sys.stderr)
    times: dict = {(n, who): [] for n in cases for who in ("peer", "crfkit")}
    for _ in range(args.runs):
        for name, (peer, ours) in cases.items():
            for who, fn in (("peer", peer), ("crfkit", ours)):
                t0 = time.perf_counter()
                fn()
                times[name, who].append(time.perf_counter() - t0)
    load_avg = os.getloadavg()
    rows, out = [], {"tokens": n_tok, "sentences": len(S), "agree": agree, **info}
    for name in cases:
        p, c = times[name, "peer"], times[name, "crfkit"]
        ratio = [a / b for a, b in zip(p, c)]
        sp, sc, sr = stats(p), stats(c), stats(ratio)
        out[name] = {"crfsuite_s": sp, "crfkit_s": sc, "ratio": sr}
        print(
            f"{name:8s} CRFsuite {sp['median']:.3f} s [{sp['min']:.3f}-{sp['max']:.3f}]  "
            f"crfkit {sc['median']:.3f} s [{sc['min']:.3f}-{sc['max']:.3f}]  "
            f"ratio {sr['median']:.2f}x [{sr['min']:.2f}-{sr['max']:.2f}]  "
            f"same labels: {agree[name]}"
        )
        what = (
            "attribute strings: CRFModel.tag(X) / [Tagger.tag(x) for x in X]"
            if name == "strings"
            else "feature dicts: crfkit.CRF.predict(X) / [Tagger.tag(x) for x in X]"
        )
        rows.append(
            {
                "measure": f"warm tagging from Python lists of {what}, s (median of {args.runs})",
                "peer": f"{sp['median']:.3f} [{sp['min']:.3f}-{sp['max']:.3f}]",
                "crfkit": f"{sc['median']:.3f} [{sc['min']:.3f}-{sc['max']:.3f}]",
                "ratio": f"{sr['median']:.2f}x [{sr['min']:.2f}-{sr['max']:.2f}]",
                "better": "higher",
            }
        )
    print(f"load average {load_avg[0]:.2f} {load_avg[1]:.2f} {load_avg[2]:.2f}")
    out["load_average"] = [round(x, 2) for x in load_avg]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    if not args.no_record:
        figures = {
            "peer_family": "python-crfsuite / CRFsuite",
            "peer": f"python-crfsuite {getattr(pycrfsuite, '__version__', '')}".strip(),
            "task": (
                f"tagging the CoNLL-2000 test set ({len(S):,} sentences, {n_tok:,} tokens) from "
                "Python lists, warm, one model for both (crfkit's, written as a CRFsuite model); "
                "ratio: CRFsuite's time over crfkit's, per interleaved run"
            ),
            "rows": rows,
            "detail": out,
        }
        notes = args.notes or (
            f"load average {load_avg[0]:.2f} {load_avg[1]:.2f} {load_avg[2]:.2f} on "
            f"{os.cpu_count()} cores; crfkit threads {args.threads or 'default'}"
        )
        _results.record(figures, args.results, notes=notes)
    return out


if __name__ == "__main__":
    main()
