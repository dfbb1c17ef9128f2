"""Reproducible optimizer benchmarks (``crfkit bench``): the SAG paper's Figures 1-2 and §6 table on
our data.

* :mod:`crfkit.bench.data`: the data sets by name (conll2000, ocr, ocr-large,
  conll2002-nl, ptb, synthetic) with their splits and attribute sets;
* :mod:`crfkit.bench.fstar`: the reference optimum f* (tight L-BFGS), cached;
* :mod:`crfkit.bench.runner`: runs a list of optimizers for K effective
  passes, one trace each, picking step sizes of the classic methods;
* :mod:`crfkit.bench.plots`: figures and summaries from the traces alone;
* :mod:`crfkit.bench.memory`: stored state against naive SAG;
* :mod:`crfkit.bench.command`: the ``crfkit bench`` subcommands.

Submodules are imported on use, so ``import crfkit.bench`` stays light.
"""
