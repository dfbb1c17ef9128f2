"""``crfkit demo`` (``make chunker``): train and evaluate a chunker on CoNLL-2000.

What it does, in order:

1. finds CoNLL-2000 (``<data dir>/conll2000/{train,test}.txt.gz``, see
   :func:`crfkit.datasets.data_dir`); when it is not there it says so loudly
   and generates the synthetic corpus of :mod:`crfkit.datasets.synthetic`
   into the output directory instead.  The first and the last line of the
   output name the data set that was used;
2. trains with the built-in chunking templates
   (:func:`~crfkit.features.templates.default_chunking_templates`: CRFsuite's
   chunking-example features written as CRF++ templates) applied with CRF++
   padding (``pad=True``), and L-BFGS with CRFsuite's defaults (``c2=1``,
   ``delta=1e-5`` over ``period=10`` iterations, ``epsilon=1e-5``), printing
   one progress line per iteration;
3. saves the model and tags the test set, printing token accuracy, the full
   conlleval report, the model size and the tagging speed, and writes the
   tagged test set (input columns, gold, guess) so that ``crfkit eval`` can
   score it again.

Why padding: CRFsuite's chunking example also gives the first and last token
the attributes ``__BOS__`` / ``__EOS__``, which templates cannot express.
With CRF++ padding the templates reaching outside the sentence produce
``_B-1``/``_B+1``-style attributes instead, which carry the same "sentence
starts/ends here" information (and a little more: the POS n-grams over the
boundary), so the feature set is CRFsuite's example features plus boundary
features, rather than CRFsuite's minus them.  ``pad=False`` would give exactly
CRFsuite's features without ``__BOS__``/``__EOS__``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TextIO

from ._runtime.compile_notice import compile_seconds, work_clock

__all__ = ["run"]


def _say(out: TextIO, msg: str = "") -> None:
    out.write(msg + "\n")
    out.flush()


def run(
    data_dir: str | os.PathLike | None = None,
    out_dir: str | os.PathLike = "runs",
    *,
    threads: int | None = None,
    max_iterations: int | None = None,
    synthetic: bool = False,
    synthetic_sentences: int = 2000,
    out: TextIO | None = None,
) -> dict:
    """Run the demo; returns its figures (``dataset``, ``f1``, ``accuracy``,
    ``iterations``, ``train_seconds``, ``status``, ``model_path``,
    ``model_bytes``, ``tokens_per_second``...)."""
    from . import datasets
    from .datasets import synthetic as syn
    from .features.templates import default_chunking_templates
    from .io.columns import write_columns
    from .metrics import conlleval, token_accuracy
    from .pipeline import load_columns, train_columns

    out = out or sys.stdout
    base = Path(data_dir) if data_dir is not None else datasets.data_dir()
    out_path = Path(out_dir)
    out_path.mkdir(parents=True, exist_ok=True)
    paths = None if synthetic else datasets.conll2000_paths(base)
    if paths is not None:
        name = "CoNLL-2000"
        train_path, test_path = paths
        _say(
            out,
            f"crfkit demo: data set: CoNLL-2000 chunking (train {train_path}, test {test_path})",
        )
        stem = "conll2000"
    else:
        name = "SYNTHETIC"
        stem = "synthetic"
        why = (
            "--synthetic was given"
            if synthetic
            else f"CoNLL-2000 was NOT found in {base / 'conll2000'} (set CRFKIT_DATA or --data-dir)"
        )
        _say(out, f"crfkit demo: data set: SYNTHETIC chunking corpus, NOT CoNLL-2000: {why}")
        banner = "!" * 78
        _say(out, banner)
        _say(out, "!! No CoNLL-2000: using crfkit's synthetic chunking corpus instead. The scores")
        _say(out, "!! below say how well crfkit learns that corpus, not CoNLL-2000 figures.")
        _say(out, banner)
        if out is not sys.stderr:
            print(
                f"crfkit demo: WARNING: {why}; using the synthetic corpus",
                file=sys.stderr,
                flush=True,
            )
        syn_dir = out_path / "synthetic"
        n_test = max(1, synthetic_sentences // 4)
        train_path, test_path = syn_dir / "train.txt.gz", syn_dir / "test.txt.gz"
        ntr = syn.write(train_path, synthetic_sentences, seed=1)
        nte = syn.write(test_path, n_test, seed=2)
        _say(
            out,
            f"generated {train_path} ({synthetic_sentences} sentences, {ntr} tokens) and "
            f"{test_path} ({n_test} sentences, {nte} tokens)",
        )

    templates = default_chunking_templates()
    _say(
        out,
        f"features: built-in chunking templates ({len(templates.unigram)} unigram templates over "
        "word and POS, label bigrams), CRF++ padding",
    )
    _say(
        out,
        "training: L-BFGS, CRFsuite defaults (c2=1, delta=1e-5 over 10 iterations, epsilon=1e-5)"
        + (f", at most {max_iterations} iterations" if max_iterations else ""),
    )
    trace = out_path / f"{stem}-trace.jsonl"
    c_start = compile_seconds()
    res = train_columns(
        train_path,
        templates,
        pad=True,
        c2=1.0,
        delta=1e-5,
        period=10,
        epsilon=1e-5,
        max_iterations=max_iterations,
        threads=threads,
        trace=trace,
        verbose=True,
        log=lambda s: _say(out, s),
    )
    model = res.model
    model_path = out_path / f"{stem}-chunker.crfkit"
    size = model.save(model_path)
    _say(
        out,
        f"model: {model_path}: {size} bytes ({size / 1024:.1f} KiB), {model.n_active} non-zero weights "
        f"of {model.space.n_features} features",
    )

    # tagging the test set, timed: reading + templates + encoding, then Viterbi; the clock is
    # work_clock (perf_counter less the kernels' compile time): no figure includes compiling
    t0 = work_clock()
    X, Y, sents = load_columns(test_path, templates, pad=True)
    t1 = work_clock()
    corpus = model.encode(X)
    t2 = work_clock()
    model.viterbi(model.encode(X[:1]), threads)  # load the compiled kernel before timing it
    t3 = work_clock()
    ids, _ = model.viterbi(corpus, threads)
    t4 = work_clock()
    compiled = compile_seconds() - c_start
    pred = model._split(corpus, ids)
    n_tok = corpus.n_tokens
    t_all = (t1 - t0) + (t2 - t1) + (t4 - t3)
    tagged = out_path / f"{stem}-test.tagged.txt"
    write_columns(sents, tagged, extra=pred, sep="\t")

    acc = token_accuracy(Y, pred) * 100.0
    rep = conlleval(Y, pred)
    _say(out)
    _say(out, f"test set: {len(sents)} sentences, {n_tok} tokens")
    _say(out, f"token accuracy: {acc:.2f}%")
    _say(out, "conlleval:")
    out.write(rep.format())
    _say(
        out,
        f"tagging speed: {n_tok / t_all:,.0f} tokens/s end to end (read {t1 - t0:.2f} s, "
        f"encode {t2 - t1:.2f} s, Viterbi {t4 - t3:.3f} s = {n_tok / max(t4 - t3, 1e-9):,.0f} tokens/s)",
    )
    if compiled > 0.05:
        _say(
            out,
            f"compiling the numba kernels: {compiled:.1f} s (not in the figures above; "
            "`crfkit warmup` compiles them once, ahead)",
        )
    _say(out, f"tagged test set: {tagged} (score it again with: crfkit eval {tagged})")
    _say(out, f"trace: {trace}")
    _say(
        out,
        f"report (curves, weights, errors; needs matplotlib): crfkit report -m {model_path} "
        f"--trace {trace} --test {test_path} -o {out_path / (stem + '-report.html')}",
    )
    interrupted = res.status == "interrupted"
    _say(
        out,
        f"crfkit demo: data set: {name}; {res.iterations} iterations in {res.seconds:.1f} s "
        f"({res.status}{', INTERRUPTED' if interrupted else ''}); token accuracy {acc:.2f}%; "
        f"chunk F1 {rep.f1:.2f}; model {size / 1024:.1f} KiB",
    )
    return {
        "dataset": name,
        "train_path": str(train_path),
        "test_path": str(test_path),
        "f1": rep.f1,
        "accuracy": acc,
        "iterations": res.iterations,
        "train_seconds": res.seconds,
        "status": res.status,
        "objective": res.objective,
        "model_path": str(model_path),
        "model_bytes": size,
        "tokens_per_second": n_tok / t_all,
        "test_tokens": n_tok,
        "tagged_path": str(tagged),
        "compile_seconds": compiled,
    }
