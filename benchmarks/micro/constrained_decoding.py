"""BIO-constrained decoding on CoNLL-2000 (chunking) and CoNLL-2002 Dutch (NER): chunk F1 with and
without the constraints on the same model, and how many invalid label sequences (``O -> I-X``,
``B-X -> I-Y``, an ``I-X`` first) unconstrained decoding produces.

Per data set one model is trained here (``crfkit train`` with the built-in chunking templates over
the word and POS columns, L-BFGS, c2 = 1, ``--max-iterations``; cached in ``--workdir``), then the
test set is tagged four ways from the same model: Viterbi, Viterbi with ``--constraints bio``,
posterior (max-marginal) decoding, posterior with the constraints.  Scores: conlleval
(``crfkit.metrics.conlleval``).

    PYTHONPATH=src .venv/bin/python benchmarks/micro/constrained_decoding.py [--iterations 100] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

SETS = {
    "conll2000": ("conll2000/train.txt.gz", "conll2000/test.txt.gz"),
    "conll2002-nl": ("conll2002/ned.train.gz", "conll2002/ned.testb.gz"),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--data", default=os.environ.get("CRFKIT_DATA", str(HERE.parents[2] / "shared" / "data"))
    )
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--workdir")
    a = ap.parse_args()
    work = Path(a.workdir or tempfile.mkdtemp(prefix="constrained-bench-"))
    work.mkdir(parents=True, exist_ok=True)

    from crfkit.decode import Constraints
    from crfkit.io.columns import read_columns_list
    from crfkit.metrics import conlleval, token_accuracy
    from crfkit.model import CRFModel
    from crfkit.pipeline import attributes_of, tagger_from_model

    print(
        f"{'data':<13} {'decoding':<22} {'F1':>6} {'P':>6} {'R':>6} {'acc':>6} {'invalid seq':>12}"
    )
    for name in a.sets.split(","):
        tr, te = (Path(a.data) / p for p in SETS[name])
        mpath = work / f"{name}.i{a.iterations}.crfkit"
        if not mpath.exists():
            t = time.perf_counter()
            cmd = [
                sys.executable,
                "-m",
                "crfkit",
                "train",
                str(tr),
                "-m",
                str(mpath),
                "--max-iterations",
                str(a.iterations),
                "-q",
            ] + (["--threads", str(a.threads)] if a.threads else [])
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            print(
                f"# {name}: trained in {time.perf_counter() - t:.0f} s ({a.iterations} iterations max)",
                flush=True,
            )
        model = CRFModel.load(mpath)
        templates, pad = tagger_from_model(model)
        sents = read_columns_list(str(te), has_labels=True)
        X = attributes_of(sents, templates, pad=pad)
        gold = [s.labels for s in sents]
        c = Constraints.scheme(model.labels, "bio")
        for label, kw in (
            ("viterbi", {}),
            ("viterbi + bio", {"constraints": "bio"}),
            ("posterior", {"method": "posterior"}),
            ("posterior + bio", {"method": "posterior", "constraints": "bio"}),
        ):
            pred = model.tag(X, **kw)
            rep = conlleval(gold, pred)
            bad = sum(not c.valid(p) for p in pred)
            print(
                f"{name:<13} {label:<22} {rep.f1:>6.2f} {rep.precision:>6.2f} {rep.recall:>6.2f} "
                f"{100 * token_accuracy(gold, pred):>6.2f} {bad:>5} / {len(pred):<5}",
                flush=True,
            )
        gb = sum(not c.valid(g) for g in gold if all(x in model.space.label_index for x in g))
        print(
            f"{name:<13} {'(gold labels)':<22} {'':>6} {'':>6} {'':>6} {'':>6} {gb:>5} / {len(gold):<5}"
        )


if __name__ == "__main__":
    main()
