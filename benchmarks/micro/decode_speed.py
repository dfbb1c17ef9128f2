"""Tagging speed: Viterbi and marginals over a whole corpus, label rows as vectors against the
scatter.

``CRFModel.decode`` computes each token's emission scores either through the
plain scatter over ``feat_label`` or, when the model has attributes whose
features are every label in order (``full_rows``: dense pixel attributes,
CRF++-style templates, ``--support all``), reading those as contiguous label
rows (``emissions_rows``).  This script times both paths on the same model and
corpus in the same run (random weights; one thread; min over repeats):

* ``ocr``: fold 0 of the OCR letters, every pixel x label (all rows full);
* ``conll2000/all``: CoNLL-2000 with CRFsuite's chunking attributes, every
  attribute x label (all rows full);
* ``conll2000/observed``: the same attributes with the observed features only
  (no row is full; decode keeps the scatter, so both columns are that path).

The machine may be shared: compare figures from the same run only.

    .venv/bin/python benchmarks/micro/decode_speed.py [--repeats 5] [--sets ocr,conll2000/all,conll2000/observed]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from crfkit.bench import data as D
from crfkit.kernels.batch import chunk_bounds, decode_all
from crfkit.kernels.chain import full_rows
from crfkit.model import CRFModel


def timed_decode(model, corpus, full, marginals, repeats):
    """Seconds of one decode_all call over the corpus (one chunk, one thread), min over repeats."""
    s = model.space
    nt, ns, L = corpus.n_tokens, corpus.n_sequences, s.n_labels
    b = chunk_bounds(corpus.seq_ptr, 1)
    ids = np.zeros(0 if marginals else nt, dtype=np.int32)
    ps = np.zeros(0 if marginals else ns)
    marg = np.zeros((nt, L) if marginals else (0, L))
    logz = np.zeros(ns if marginals else 0)
    args = (
        corpus.seq_ptr,
        corpus.tok_ptr,
        corpus.attr,
        corpus.val,
        s.attr_ptr,
        s.feat_label,
        s.trans_index,
        model.weights,
        s.n_state,
        b,
        ids,
        ps,
        marg,
        logz,
        np.zeros(0, dtype=np.int32),
        np.zeros(0),
        np.zeros((0, L)),
        full,
    )
    decode_all(*args)
    best = np.inf
    for _ in range(repeats):
        t = time.perf_counter()
        decode_all(*args)
        best = min(best, time.perf_counter() - t)
    return best, (marg if marginals else ids)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--sets", default="ocr,conll2000/all,conll2000/observed")
    a = ap.parse_args(argv)
    for item in a.sets.split(","):
        name, _, support = item.partition("/")
        b = D.load(name, support=support or ("all" if name.startswith("ocr") else "observed"))
        space, corpus, _test = b.encoded()
        model = CRFModel(space, np.random.default_rng(0).normal(0.0, 0.1, space.n_features))
        full = full_rows(space.attr_ptr, space.feat_label, space.n_labels)
        rows = full if full.any() else full[:0]
        print(
            f"{item:20s} tokens={corpus.n_tokens} features={space.n_features} full rows="
            f"{int(full.sum())}/{len(full)}",
            flush=True,
        )
        for what, marginals in (("viterbi", False), ("marginals", True)):
            t_sc, r_sc = timed_decode(model, corpus, full[:0], marginals, a.repeats)
            t_rw, r_rw = timed_decode(model, corpus, rows, marginals, a.repeats)
            same = (
                np.array_equal(r_sc, r_rw) if not marginals else float(np.max(np.abs(r_sc - r_rw)))
            )
            print(
                f"    {what:9s}: scatter {t_sc * 1e3:8.2f} ms, rows {t_rw * 1e3:8.2f} ms "
                f"({t_sc / t_rw:4.2f}x); {'same paths' if same is True else ('paths differ' if same is False else f'max marginal difference {same:.1e}')}",
                flush=True,
            )


if __name__ == "__main__":
    main()
