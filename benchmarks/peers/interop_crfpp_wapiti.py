"""CRF++ 0.59 and Wapiti 1.5.0 models in and out of crfkit on CoNLL-2000: exactness and speed.

With CRF++'s chunking template (19 unigram templates over words and POS tags, and ``B``; for
Wapiti the same lines as ``u``/``b`` patterns):

* **import**: ``crf_learn -m N`` and ``wapiti train -i N`` train on the full training set (models
  need not converge for an exactness test; they are reused from ``--work`` when there); crfkit
  reads them (``crfkit.interop.crfpp.read``, ``.wapiti.read``) and tags the test set.  Figures: the
  share of test tokens whose crfkit Viterbi label is the peer tagger's (``crf_test``, ``wapiti
  label``), every differing token shown with crfkit's scores of both paths (a tie shows as a gap
  of ~1e-6 or less), and the largest difference between crfkit's marginals and the peer's printed
  ones (``crf_test -v2``: every label's marginal, 6 significant digits; ``wapiti label -p -s``: the
  marginal of the label it picks, 6 decimals).
* **export**: crfkit trains on the same data and template (L-BFGS, ``--crfkit-iterations``),
  writes the model as a CRF++ binary model (float32 weights), a CRF++ text model (turned binary by
  ``crf_learn -C``) and a Wapiti model; the peers tag the test set with them.  Figures: the share of
  tokens labelled as crfkit labels them, ties shown, and the marginal differences.
* **times**: reading and writing each format (median of ``--repeats``), next to the peer's own
  start-up with the same model (``crf_test`` / ``wapiti label`` tagging one sentence), as a ratio.

    PYTHONPATH=src .venv/bin/python benchmarks/peers/interop_crfpp_wapiti.py [--peers BIN]
        [--work DIR] [--crfpp-iterations 6] [--wapiti-iterations 6] [--crfkit-iterations 30]
        [--repeats 3] [--results benchmarks/results/interop_crfpp_wapiti.jsonl]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent

TEMPLATE = """# Unigram
U00:%x[-2,0]
U01:%x[-1,0]
U02:%x[0,0]
U03:%x[1,0]
U04:%x[2,0]
U05:%x[-1,0]/%x[0,0]
U06:%x[0,0]/%x[1,0]

U10:%x[-2,1]
U11:%x[-1,1]
U12:%x[0,1]
U13:%x[1,1]
U14:%x[2,1]
U15:%x[-2,1]/%x[-1,1]
U16:%x[-1,1]/%x[0,1]
U17:%x[0,1]/%x[1,1]
U18:%x[1,1]/%x[2,1]

U20:%x[-2,1]/%x[-1,1]/%x[0,1]
U21:%x[-1,1]/%x[0,1]/%x[1,1]
U22:%x[0,1]/%x[1,1]/%x[2,1]

# Bigram
B
"""


def peers_bin(arg: str | None) -> Path:
    if arg:
        return Path(arg)
    out = subprocess.run(
        ["bash", str(HERE.parents[2] / "shared" / "peers" / "build.sh"), "/work/wt/peers"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return Path(out.strip().splitlines()[-1])


def sentences(path: Path) -> list[list[list[str]]]:
    out, cur = [], []
    for line in path.read_text().splitlines():
        if line.strip():
            cur.append(line.split())
        elif cur:
            out.append(cur)
            cur = []
    if cur:
        out.append(cur)
    return out


def run(cmd, **kw) -> str:
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    if r.returncode:
        raise SystemExit(f"{cmd[0]} failed ({r.returncode}): {r.stderr[-2000:]}")
    return r.stdout


def median_time(fn, repeats: int) -> float:
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def parse_crf_test_v2(text: str, n_cols: int):
    """Per token: crf_test's label and its {label: marginal} (``n_cols``: the input's columns, the
    gold label included; then come ``label/p`` of the chosen label and one per label)."""
    labels, margs = [], []
    for line in text.splitlines():
        if not line or (line.startswith("# ") and "\t" not in line):
            continue
        f = line.split("\t")
        labels.append(f[n_cols].rsplit("/", 1)[0])
        margs.append({lab: float(p) for lab, p in (x.rsplit("/", 1) for x in f[n_cols + 1 :])})
    return labels, margs


def parse_wapiti(text: str, scores: bool):
    labels, probs = [], []
    for line in text.splitlines():
        if not line or (line.startswith("# ") and "\t" not in line):
            continue
        f = line.split("\t")
        if scores:
            lab, p = f[-1].rsplit("/", 1)
            labels.append(lab)
            probs.append(float(p))
        else:
            labels.append(f[-1])
    return labels, probs


def crfkit_tag(model, sents):
    """Viterbi labels (flat), marginals (n_tokens x L), the corpus, the ids."""
    from crfkit.features.rows import row_inputs

    X, B, _ = row_inputs(model.meta, [[tok[:2] for tok in s] for s in sents])
    corpus = model.encode(X, B=B)
    r = model.decode(corpus, path=True, marginals=True)
    ids = r["ids"]
    return [model.labels[i] for i in ids.tolist()], r["marginals"], corpus, ids


def ties(model, corpus, ids, other_labels):
    """Sentences where the labels differ: crfkit's path score of its own and of the other tool's
    labels (a gap near 0 is a tie)."""
    lab = np.array([model.space.label_index.get(x, -1) for x in other_labels], dtype=np.int32)
    if np.any(lab < 0):
        return [{"unknown_label": True}]
    diff = np.flatnonzero(lab != ids)
    if len(diff) == 0:
        return []
    r = model.decode(corpus, path=True, labels=lab)
    seq = np.searchsorted(corpus.seq_ptr, diff, side="right") - 1
    out = []
    for s in sorted(set(seq.tolist())):
        out.append(
            {
                "sentence": s,
                "tokens": int(np.sum(seq == s)),
                "crfkit_path_score": float(r["path_score"][s]),
                "peer_path_score_under_crfkit": float(r["label_score"][s]),
                "gap": float(r["path_score"][s] - r["label_score"][s]),
            }
        )
    return out


def compare(name, model, sents, corpus, ids, mine, theirs, figures):
    same = sum(a == b for a, b in zip(mine, theirs))
    n = len(mine)
    figures[f"{name}_tokens"] = n
    figures[f"{name}_same_share"] = same / n
    t = ties(model, corpus, ids, theirs) if same != n else []
    figures[f"{name}_differences"] = t
    print(f"{name}: {same}/{n} tokens labelled alike ({100 * same / n:.4f}%)")
    for d in t[:20]:
        print(f"    differs: {d}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--peers", default=None, help="bin dir of crf_learn, crf_test, wapiti")
    ap.add_argument("--data-dir", default=os.environ.get("CRFKIT_DATA", "/work/shared/data"))
    ap.add_argument("--work", default=None, help="where models and outputs go (reused)")
    ap.add_argument("--crfpp-iterations", type=int, default=6)
    ap.add_argument("--wapiti-iterations", type=int, default=6)
    ap.add_argument("--crfkit-iterations", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--results", default=None, metavar="FILE.jsonl")
    ap.add_argument("--json", default=None)
    ap.add_argument(
        "--parts", default="import,export", help="import, export or both (default import,export)"
    )
    args = ap.parse_args(argv)

    bin_ = peers_bin(args.peers)
    work = Path(args.work or "/tmp/crfkit-interop-crfpp-wapiti")
    work.mkdir(parents=True, exist_ok=True)
    for part in ("train", "test"):
        dst = work / f"{part}.txt"
        if not dst.exists():
            with gzip.open(Path(args.data_dir) / "conll2000" / f"{part}.txt.gz", "rt") as f:
                dst.write_text(f.read())
    (work / "template").write_text(TEMPLATE)
    pats = "".join(
        (ln[:1].lower() + ln[1:] if ln[:1] in "UB" else ln) + "\n" for ln in TEMPLATE.splitlines()
    )
    (work / "patterns").write_text(pats)
    test = work / "test.txt"
    sents = sentences(test)
    one = work / "one.txt"
    one.write_text("\n".join(" ".join(t) for t in sents[0]) + "\n\n")
    figures: dict = {"uptime": os.getloadavg()}
    print(f"load average: {os.getloadavg()}")

    parts = set(args.parts.split(","))
    if "import" in parts:
        do_import(args, bin_, work, sents, one, figures)
    if "export" in parts:
        do_export(args, bin_, work, sents, one, figures)
    figures["uptime_end"] = os.getloadavg()
    print(f"load average at the end: {os.getloadavg()}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
    if args.results:
        sys.path.insert(0, str(HERE.parent))
        import _results

        _results.record(figures, args.results)
    return 0


def do_import(args, bin_, work, sents, one, figures):
    from crfkit.interop import crfpp, wapiti

    test = work / "test.txt"
    # ------------------------------------------------------------------ CRF++ import
    cm = work / "crfpp.model"
    if not cm.exists() or not (work / "crfpp.model.txt").exists():
        run(
            [
                bin_ / "crf_learn",
                "-m",
                args.crfpp_iterations,
                "-p",
                "1",
                "-t",
                work / "template",
                work / "train.txt",
                cm,
            ]
        )
    figures["crfpp_import_read_s"] = median_time(lambda: crfpp.read(cm), args.repeats)
    figures["crfpp_import_read_text_s"] = median_time(
        lambda: crfpp.read(work / "crfpp.model.txt"), 1
    )
    figures["crf_test_one_sentence_s"] = median_time(
        lambda: run([bin_ / "crf_test", "-m", cm, one]), args.repeats
    )
    m = crfpp.read(cm)
    print(
        f"crfpp import: read {figures['crfpp_import_read_s']:.3f} s (crf_test on one sentence "
        f"{figures['crf_test_one_sentence_s']:.3f} s), text model {figures['crfpp_import_read_text_s']:.3f} s; "
        f"{m.space.n_attributes} feature strings, {m.space.n_features} weights"
    )
    figures["crfpp_import_weights"] = m.space.n_features
    mine, marg, corpus, ids = crfkit_tag(m, sents)
    theirs, tmarg = parse_crf_test_v2(run([bin_ / "crf_test", "-v2", "-m", cm, test]), 3)
    compare("crfpp_import", m, sents, corpus, ids, mine, theirs, figures)
    li = m.space.label_index
    md = max(abs(marg[k, li[lab]] - p) for k, d in enumerate(tmarg) for lab, p in d.items())
    figures["crfpp_import_max_marginal_diff"] = md
    print(f"crfpp import: largest marginal difference vs crf_test -v2: {md:.2e}")
    mt = crfpp.read(work / "crfpp.model.txt")
    mine_t, marg_t, _, _ = crfkit_tag(mt, sents)
    figures["crfpp_text_vs_binary_same_share"] = float(
        np.mean([a == b for a, b in zip(mine_t, mine)])
    )
    print(
        f"crfpp text model: {100 * figures['crfpp_text_vs_binary_same_share']:.4f}% tokens as the binary"
    )

    # ------------------------------------------------------------------ Wapiti import
    wm = work / "wapiti.model"
    if not wm.exists():
        run(
            [
                bin_ / "wapiti",
                "train",
                "-p",
                work / "patterns",
                "-i",
                args.wapiti_iterations,
                work / "train.txt",
                wm,
            ]
        )
    figures["wapiti_import_read_s"] = median_time(lambda: wapiti.read(wm), args.repeats)
    figures["wapiti_label_one_sentence_s"] = median_time(
        lambda: run([bin_ / "wapiti", "label", "-m", wm, one]), args.repeats
    )
    m = wapiti.read(wm)
    print(
        f"wapiti import: read {figures['wapiti_import_read_s']:.3f} s (wapiti label on one sentence "
        f"{figures['wapiti_label_one_sentence_s']:.3f} s); {m.space.n_features} weights"
    )
    mine, marg, corpus, ids = crfkit_tag(m, sents)
    theirs, _ = parse_wapiti(run([bin_ / "wapiti", "label", "-m", wm, test]), False)
    compare("wapiti_import", m, sents, corpus, ids, mine, theirs, figures)
    plab, pp = parse_wapiti(run([bin_ / "wapiti", "label", "-p", "-s", "-m", wm, test]), True)
    li = m.space.label_index
    md = max(abs(marg[k, li[lab]] - p) for k, (lab, p) in enumerate(zip(plab, pp)))
    figures["wapiti_import_max_marginal_diff"] = md
    print(f"wapiti import: largest marginal difference vs wapiti label -p -s: {md:.2e}")


def do_export(args, bin_, work, sents, one, figures):
    from crfkit.features.templates import Templates
    from crfkit.interop import crfpp, wapiti
    from crfkit.pipeline import train_columns

    test = work / "test.txt"
    # ------------------------------------------------------------------ export
    km = work / f"crfkit.i{args.crfkit_iterations}.crfkit"
    from crfkit.model import CRFModel

    if not km.exists():
        t0 = time.perf_counter()
        res = train_columns(
            work / "train.txt",
            Templates.parse(TEMPLATE, name="template"),
            algorithm="lbfgs",
            max_iterations=args.crfkit_iterations,
        )
        res.model.save(km)
        print(f"crfkit trained in {time.perf_counter() - t0:.1f} s")
    model = CRFModel.load(km)
    mine, marg, corpus, ids = crfkit_tag(model, sents)
    li = model.space.label_index
    figures["export_weights"] = model.space.n_features
    out = work / "export.crfpp"
    figures["crfpp_export_write_s"] = median_time(lambda: crfpp.write(model, out), args.repeats)
    figures["crfpp_export_write_text_s"] = median_time(
        lambda: crfpp.write(model, work / "export.crfpp.txt", text=True), 1
    )
    figures["crf_test_one_sentence_export_s"] = median_time(
        lambda: run([bin_ / "crf_test", "-m", out, one]), args.repeats
    )
    print(
        f"crfpp export: write {figures['crfpp_export_write_s']:.3f} s, text "
        f"{figures['crfpp_export_write_text_s']:.3f} s (crf_test on one sentence "
        f"{figures['crf_test_one_sentence_export_s']:.3f} s); {model.space.n_features} weights"
    )
    theirs, tmarg = parse_crf_test_v2(run([bin_ / "crf_test", "-v2", "-m", out, test]), 3)
    compare("crfpp_export", model, sents, corpus, ids, mine, theirs, figures)
    md = max(abs(marg[k, li[lab]] - p) for k, d in enumerate(tmarg) for lab, p in d.items())
    figures["crfpp_export_max_marginal_diff"] = md
    print(f"crfpp export: largest marginal difference vs crf_test -v2: {md:.2e} (float32 weights)")
    # the same against crfkit's marginals under the weights the file holds (float32)
    r32 = CRFModel(model.space, model.weights.astype(np.float32).astype(np.float64), model.meta)
    m32 = crfkit_tag(r32, sents)[1]
    md = max(abs(m32[k, li[lab]] - p) for k, d in enumerate(tmarg) for lab, p in d.items())
    figures["crfpp_export_max_marginal_diff_float32_weights"] = md
    print(f"crfpp export: the same against crfkit with the file's float32 weights: {md:.2e}")
    run([bin_ / "crf_learn", "-C", work / "export.crfpp.txt", work / "export.fromtext.crfpp"])
    theirs_t, _ = parse_crf_test_v2(
        run([bin_ / "crf_test", "-v2", "-m", work / "export.fromtext.crfpp", test]), 3
    )
    compare("crfpp_export_text", model, sents, corpus, ids, mine, theirs_t, figures)

    out = work / "export.wapiti"
    figures["wapiti_export_write_s"] = median_time(lambda: wapiti.write(model, out), args.repeats)
    figures["wapiti_label_one_sentence_export_s"] = median_time(
        lambda: run([bin_ / "wapiti", "label", "-m", out, one]), args.repeats
    )
    print(
        f"wapiti export: write {figures['wapiti_export_write_s']:.3f} s (wapiti label on one "
        f"sentence {figures['wapiti_label_one_sentence_export_s']:.3f} s)"
    )
    theirs, _ = parse_wapiti(run([bin_ / "wapiti", "label", "-m", out, test]), False)
    compare("wapiti_export", model, sents, corpus, ids, mine, theirs, figures)
    plab, pp = parse_wapiti(run([bin_ / "wapiti", "label", "-p", "-s", "-m", out, test]), True)
    md = max(abs(marg[k, li[lab]] - p) for k, (lab, p) in enumerate(zip(plab, pp)))
    figures["wapiti_export_max_marginal_diff"] = md
    print(f"wapiti export: largest marginal difference vs wapiti label -p -s: {md:.2e}")


if __name__ == "__main__":
    sys.exit(main())
