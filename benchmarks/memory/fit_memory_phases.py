#!/usr/bin/env python
"""Where CRF.fit's memory goes on the sklearn-crfsuite tutorial data (CoNLL-2002 Spanish NER
features).

Prints VmRSS and VmHWM after each phase: imports, the training data as feature dicts (what the user
holds, with either library), the feature space and encoded corpus (``build`` on the dicts converted
lazily, a chunk at a time, as ``CRF.fit`` does), the import of the trainer (numba), and training
(L-BFGS, c1 = c2 = 0.1, ``argv[1]`` iterations, default 5; the first iteration also loads the numba
kernels).

Usage:  PYTHONPATH=src python benchmarks/memory/fit_memory_phases.py [ITERATIONS]   (data: ../shared/data)
"""

import os
import sys

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "peers")
)


def vm(k):
    for line in open("/proc/self/status"):
        if line.startswith(k + ":"):
            return int(line.split()[1]) / 1024


def mark(what):
    print(f"{what:40s} RSS {vm('VmRSS'):8.1f}  HWM {vm('VmHWM'):8.1f}", flush=True)


mark("start")
import numpy as np  # noqa: F401  (its memory counts in the imports' phase)
from sklearn_crfsuite_port import load

import crfkit

mark("imports")
DATA = os.environ.get("CRFKIT_DATA") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared", "data"
)
X, Y = load(DATA, "train")
mark("X_train loaded (dicts)")
from crfkit.features.dicts import LazyAttributes
from crfkit.features.encode import build

space, corpus = build(LazyAttributes(X, name="X"), Y, support="observed", transitions="all")
mark("build (space+corpus, lazy input)")
import crfkit.train  # noqa: F401  (the phase measures this import: numba)

mark("import crfkit.train (numba)")
print(
    "features",
    space.n_features,
    "attrs",
    space.n_attributes,
    "entries",
    len(corpus.attr),
    "tokens",
    corpus.n_tokens,
)
from crfkit.objective import regularization
from crfkit.train import train_corpus

reg = regularization(corpus.n_sequences, c1=0.1, c2=0.1)
res = train_corpus(
    space,
    corpus,
    algorithm="lbfgs",
    reg=reg,
    max_iterations=int(sys.argv[1]) if len(sys.argv) > 1 else 5,
)
mark("train")
