"""``crfkit tag`` on a file against ``crf_test`` and python-crfsuite: whole processes, side by side.

Issue 46 part 2: tagging a file is a process (interpreter, imports, model load, template
expansion, attribute lookup, decoding, output), and the C taggers do it in a fraction of crfkit's
time.  This script builds the data itself from ``$CRFKIT_DATA/conll2000``: every token gets seven
columns (word, POS, lower-cased word, 3-letter suffix, 3-letter prefix, word shape, chunk tag), the
17 unigram templates below (over columns 0-5) and ``B`` go to a template file, and three models are
trained on CoNLL-2000 train (or reused from ``--workdir``):

* crfkit: ``crfkit train -t TEMPLATE --max-iterations 50`` (L-BFGS);
* CRF++: ``crf_learn -m 30 TEMPLATE`` (every attribute x label a feature: many more features);
* CRFsuite: python-crfsuite's L-BFGS (50 iterations) on the same attribute strings, expanded from
  the template in Python (what a python-crfsuite user writes).

Then each tags two inputs, each tool in its own process, writing its output to a file: the
CoNLL-2000 test set (2,012 sentences, 47,377 tokens) and an EWT-sized set (its first sentences up
to 25,094 tokens, the size of the English Web Treebank test set of the issue).  The processes
take turns, round after round (``--repeats``, default 3); per tool the median wall time, CPU time
(user + system, from ``wait4``) and peak RSS are printed, with the ratios crfkit / crf_test and
crfkit / python-crfsuite.  On a loaded machine compare the CPU ratios.  crfkit's modules are
byte-compiled first (``compileall``), as an installed package's are.  ``--before SRC`` adds the
``crfkit tag`` of another source tree (a ``src`` folder) as the baseline ``crfkit-before``.

crfkit's output must be the same every time and the same as ``--before``'s (checked, printed);
its agreement with crf_test's labels is printed too (different models: not 100%).

    PYTHONPATH=src CRFKIT_DATA=/work/shared/data .venv/bin/python \\
        benchmarks/peers/tag_vs_crf_test.py [--workdir DIR] [--peers BIN] [--repeats 3]
        [--before OTHER/src] [--no-record]
"""

from __future__ import annotations

import argparse
import gzip
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from _results import record  # noqa: E402

UNIGRAMS = [
    "%x[-2,0]",
    "%x[-1,0]",
    "%x[0,0]",
    "%x[1,0]",
    "%x[2,0]",
    "%x[-1,0]/%x[0,0]",
    "%x[0,0]/%x[1,0]",
    "%x[-1,1]",
    "%x[0,1]",
    "%x[1,1]",
    "%x[-1,1]/%x[0,1]",
    "%x[0,1]/%x[1,1]",
    "%x[0,2]",
    "%x[0,3]",
    "%x[0,4]",
    "%x[0,5]",
    "%x[-1,5]/%x[0,5]",
]
#: the size of the English Web Treebank test set of the issue
EWT_TOKENS = 25_094

# the python-crfsuite tagger: a process that reads a column file, expands the templates in Python
# and tags with pycrfsuite.Tagger, writing the columns and the label as crf_test does
PYCRFSUITE_TAGGER = r"""
import re, sys
import pycrfsuite
model, path, out, templates = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
MAC = re.compile(r"%x\[(-?\d+),(\d+)\]")
parsed = []
for i, t in enumerate(templates):
    parts = MAC.split(t)
    lit = parts[0::3]
    macs = [(int(r), int(c)) for r, c in zip(parts[1::3], parts[2::3])]
    parsed.append((f"U{i:02d}:", lit, macs))

def pad(r, i, n):
    j = i + r
    return f"_B-{-j}" if j < 0 else f"_B+{j - n + 1}"

def attrs(sent):
    n = len(sent)
    out = []
    for i in range(n):
        xs = []
        for name, lit, macs in parsed:
            s = [name, lit[0]]
            for k, (r, c) in enumerate(macs):
                j = i + r
                s.append(sent[j][c] if 0 <= j < n else pad(r, i, n))
                s.append(lit[k + 1])
            xs.append("".join(s))
        out.append(xs)
    return out

tagger = pycrfsuite.Tagger()
tagger.open(model)
with open(path, encoding="utf-8") as f, open(out, "w", encoding="utf-8") as o:
    sent = []
    for line in list(f) + [""]:
        p = line.split()
        if p:
            sent.append(p)
            continue
        if sent:
            ys = tagger.tag(attrs(sent))
            o.write("".join("\t".join(r) + "\t" + y + "\n" for r, y in zip(sent, ys)) + "\n")
            sent = []
"""


def shape(w: str) -> str:
    s = re.sub("[A-Z]", "A", w)
    s = re.sub("[a-z]", "a", s)
    s = re.sub("[0-9]", "0", s)
    return re.sub(r"(.)\1+", r"\1\1", s)


def derive(src: Path, dst: Path) -> None:
    """CoNLL-2000 (word POS chunk) -> word POS lower suffix3 prefix3 shape chunk."""
    with gzip.open(src, "rt", encoding="utf-8") as f, open(dst, "w", encoding="utf-8") as o:
        for line in f:
            p = line.split()
            if not p:
                o.write("\n")
                continue
            w, pos, y = p
            o.write(" ".join([w, pos, w.lower(), w[-3:], w[:3], shape(w), y]) + "\n")


def sentences_head(src: Path, dst: Path, tokens: int) -> int:
    """The first sentences of a column file up to the one that reaches ``tokens`` tokens; returns
    their tokens."""
    tok = 0
    with open(src, encoding="utf-8") as f, open(dst, "w", encoding="utf-8") as o:
        for line in f:
            o.write(line)
            if line.strip():
                tok += 1
            elif tok >= tokens:
                break
    return tok


def read_sents(path: Path) -> list[list[list[str]]]:
    out, cur = [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            p = line.split()
            if p:
                cur.append(p)
            elif cur:
                out.append(cur)
                cur = []
    if cur:
        out.append(cur)
    return out


def train_crfsuite(train: Path, model: Path, py: str) -> None:
    code = (
        PYCRFSUITE_TAGGER.split("tagger = pycrfsuite.Tagger()")[0]
        + r"""
tr = pycrfsuite.Trainer(verbose=False)
sent = []
for line in list(open(path, encoding="utf-8")) + [""]:
    p = line.split()
    if p:
        sent.append(p)
        continue
    if sent:
        tr.append(attrs([r[:-1] for r in sent]), [r[-1] for r in sent])
        sent = []
tr.select("lbfgs")
tr.set_params({"max_iterations": 50})
tr.train(model)
"""
    )
    subprocess.run([py, "-c", code, str(model), str(train), "-", *UNIGRAMS], check=True)


def run(cmd: list[str], env=None) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS MB) of one process."""
    import time

    t = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    err = p.stderr.read().decode(errors="replace")
    p.stderr.close()
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise SystemExit(f"{cmd[:3]}... failed ({p.returncode}): {err[-2000:]}")
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024


def agreement(a: Path, b: Path) -> float:
    """Share of tokens whose last column (the predicted label) agrees."""
    la = [x.split()[-1] for x in open(a, encoding="utf-8") if x.strip()]
    lb = [x.split()[-1] for x in open(b, encoding="utf-8") if x.strip()]
    if len(la) != len(lb):
        return float("nan")
    return sum(x == y for x, y in zip(la, lb)) / max(len(la), 1)


def peer_rows(results: dict, tool: str) -> list[dict]:
    """The rows of a peer comparison (``benchmarks/render_performance.py``) against ``tool``."""
    rows = []
    for label, r in results.items():
        what = f"{label} ({r['tokens']:,} tokens)"
        k, p = r["tools"]["crfkit"], r["tools"][tool]
        for key, name, unit in (
            ("wall_s", "wall", "s"),
            ("cpu_s", "CPU", "s"),
            ("peak_rss_mb", "peak RSS", "MB"),
        ):
            rows.append(
                {
                    "measure": f"crfkit tag process {name}, {what}",
                    "peer": f"{p[key]} {unit}",
                    "crfkit": f"{k[key]} {unit}",
                    "ratio": f"{k[key] / p[key]:.2f}x",
                    "better": "lower",
                }
            )
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", help="data and models, reused when there (default: a temp dir)")
    ap.add_argument("--peers", help="folder of crf_learn/crf_test (default: /work/wt/peers/bin)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--before", help="another crfkit source tree (its src folder): crfkit-before")
    ap.add_argument("--no-record", action="store_true")
    args = ap.parse_args()
    data = Path(os.environ.get("CRFKIT_DATA", "/work/shared/data")) / "conll2000"
    peers = Path(args.peers or "/work/wt/peers/bin")
    py = sys.executable
    work = Path(args.workdir or tempfile.mkdtemp(prefix="tag_vs_crf_test."))
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(HERE.parents[1] / "src"))

    train, test, ewt = work / "train.txt", work / "test.txt", work / "ewt.txt"
    for name, dst in (("train.txt.gz", train), ("test.txt.gz", test)):
        if not dst.exists():
            derive(data / name, dst)
    ewt_tokens = sentences_head(test, ewt, EWT_TOKENS)
    tpl = work / "template.txt"
    tpl.write_text("".join(f"U{i:02d}:{t}\n" for i, t in enumerate(UNIGRAMS)) + "\nB\n")
    mk, mc, ms = work / "model.crfkit", work / "crfpp.model", work / "model.crfsuite"
    if not mk.exists():
        print("training crfkit ...", flush=True)
        subprocess.run(
            [py, "-m", "crfkit", "train", "-m", str(mk), "-t", str(tpl)]
            + ["--max-iterations", "50", str(train)],
            check=True,
            env=env,
        )
    if not mc.exists():
        print("training CRF++ ...", flush=True)
        with open(work / "crfpp_learn.log", "w") as log:
            subprocess.run(
                [str(peers / "crf_learn"), "-m", "30", str(tpl), str(train), str(mc)],
                check=True,
                stdout=log,
            )
    if not ms.exists():
        print("training CRFsuite ...", flush=True)
        train_crfsuite(train, ms, py)
    tagger = work / "pycrfsuite_tag.py"
    tagger.write_text(PYCRFSUITE_TAGGER)

    tools = {
        "crfkit": lambda i, o: (
            [py, "-m", "crfkit", "tag", "-m", str(mk), str(i), "-o", str(o)],
            env,
        ),
        "crf_test": lambda i, o: (
            [
                "sh",
                "-c",
                'exec "$0" -m "$1" "$2" > "$3"',
                str(peers / "crf_test"),
                str(mc),
                str(i),
                str(o),
            ],
            None,
        ),
        "python-crfsuite": lambda i, o: (
            [py, str(tagger), str(ms), str(i), str(o), *UNIGRAMS],
            None,
        ),
    }
    if args.before:
        benv = dict(os.environ, PYTHONPATH=os.path.abspath(args.before))
        tools["crfkit-before"] = lambda i, o: (
            [py, "-m", "crfkit", "tag", "-m", str(mk), str(i), "-o", str(o)],
            benv,
        )
    # crfkit's modules byte-compiled first, as an installed package's are (under
    # PYTHONDONTWRITEBYTECODE every process would compile them again: ~0.07 s of CPU)
    for tree in [HERE.parents[1] / "src"] + ([Path(args.before)] if args.before else []):
        subprocess.run([py, "-m", "compileall", "-q", str(tree / "crfkit")], check=True)
    load = os.getloadavg()
    results = {}
    for label, inp in (("conll2000-test", test), ("ewt-like", ewt)):
        times = {t: [] for t in tools}
        for r in range(args.repeats):
            for t, make in tools.items():
                cmd, e = make(inp, work / f"out.{label}.{t}.{r}")
                times[t].append(run(cmd, e))
        outs = {t: [work / f"out.{label}.{t}.{r}" for r in range(args.repeats)] for t in tools}
        same = all(p.read_bytes() == outs["crfkit"][0].read_bytes() for p in outs["crfkit"])
        if args.before:
            same_before = outs["crfkit"][0].read_bytes() == outs["crfkit-before"][0].read_bytes()
        else:
            same_before = None
        fig = {}
        for t, v in times.items():
            fig[t] = {
                "wall_s": round(statistics.median(x[0] for x in v), 3),
                "cpu_s": round(statistics.median(x[1] for x in v), 3),
                "peak_rss_mb": round(statistics.median(x[2] for x in v), 1),
            }
        k = fig["crfkit"]
        ratios = {
            f"crfkit/{p}": {
                "wall": round(k["wall_s"] / fig[p]["wall_s"], 2),
                "cpu": round(k["cpu_s"] / fig[p]["cpu_s"], 2),
            }
            for p in fig
            if p != "crfkit"
        }
        tokens = ewt_tokens if label == "ewt-like" else sum(map(len, read_sents(inp)))
        results[label] = {
            "tokens": tokens,
            "tools": fig,
            "ratios": ratios,
            "crfkit_output_stable": same,
            "crfkit_output_same_as_before": same_before,
            "label_agreement_crfkit_crf_test": round(
                agreement(outs["crfkit"][0], outs["crf_test"][0]), 4
            ),
        }
        print(f"\n{label}: {tokens} tokens, median of {args.repeats}")
        print(f"  {'tool':16s} {'wall s':>8s} {'CPU s':>8s} {'peak RSS MB':>12s}")
        for t, f in fig.items():
            print(f"  {t:16s} {f['wall_s']:8.3f} {f['cpu_s']:8.3f} {f['peak_rss_mb']:12.1f}")
        for name, r in ratios.items():
            print(f"  {name:28s} wall {r['wall']:.2f}x  CPU {r['cpu']:.2f}x")
        print(f"  crfkit output stable: {same}; same as --before: {same_before}; label agreement")
        print(f"  with crf_test: {results[label]['label_agreement_crfkit_crf_test']:.4f}")
    print(f"\nload average at the start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    if not args.no_record:
        details = {"load_avg_1m": round(load[0], 2), "repeats": args.repeats, **results}
        note = f"load {load[0]:.1f}; crfkit tag as a whole process, medians of 3"
        for family, peer, tool in (
            ("CRF++", "CRF++ 0.59 crf_test", "crf_test"),
            (
                "python-crfsuite / CRFsuite",
                "python-crfsuite (templates in Python)",
                "python-crfsuite",
            ),
        ):
            record(
                {
                    "peer_family": family,
                    "peer": peer,
                    "task": "tagging a file, 17 templates over 7 columns (CoNLL-2000)",
                    "rows": peer_rows(results, tool),
                    "details": details,
                },
                notes=note,
            )
    if args.workdir is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
