#!/usr/bin/env python
"""NETtalk tables of Lavergne, Cappé & Yvon (2010), section 5, with crfkit (and Wapiti 1.5.0 beside
it).

Data: ``shared/data/nettalk`` through :mod:`crfkit.datasets.nettalk`, the documented split (word
``i`` in fold ``i mod 10``; folds 0-7 train, 8 dev, 9 test), exported once as column files (letter,
phoneme) into the work directory.  Feature sets: :mod:`crfkit.features.windows` presets
(``nettalk:3-grm`` ...), the same pattern file for crfkit and Wapiti.  rho1 = 0.5, rho2 = 1e-5
(Wapiti's sum form; crfkit's ``--rho1``/``--rho2`` convert them) unless a cell says otherwise.

Cells (``--cells`` picks some by name; the default runs them all, in the order of ``CELLS``: cheap
first):

* ``t1:{3,5}-grm:u``: Table 1 "without" (no label-pair x observation features), Wapiti's space
  (``support all``); ``t1:5-grm:obs``: 5-grm "with" over the observed support;
* ``t3:{1,3}-grm:{en,l1,l2}``: Table 3 (L2: rho1 = 0, L-BFGS; L1: rho2 = 0; elastic net), label-pair
  features over the *observed* support (label pairs seen with the observation in training: a smaller
  space than the paper's, said so in the README);
* ``wapiti:3-grm`` then ``crfkit:3-grm``: Wapiti ``train -a l-bfgs -d dev`` with the 3-grm patterns
  (``--wapiti-iterations`` caps it), then crfkit OWL-QN in the same feature space (``support all``:
  every label pair with every observation, 13.4M features) until it reaches Wapiti's final objective
  (``stop_value``); same threads;
* ``wapiti-sgdl1:{1,3,5}-grm`` then ``sgdl1:{1,3,5}-grm``: SGD-L1 on both sides in Wapiti's feature
  space (``support all``): Wapiti ``train -a sgd-l1 -d dev -i P --eta0 E --alpha A`` and crfkit
  ``-a sgd-l1`` (cumulative penalty, exponential schedule: Wapiti's method) with the same eta0,
  alpha and number of passes P (``--sgd-passes``, ``--sgd-eta0``, ``--sgd-alpha``: Wapiti's defaults
  0.8 and 0.85).  Wapiti's SGD-L1 prints no objective, so the Wapiti worker reads its model file
  back (:func:`wapiti_weights`) and computes the objective of its weights with crfkit in crfkit's
  space (the same data, patterns, rho1 and rho2; Wapiti's SGD-L1 steps leave rho2 out, the objective
  here keeps it); crfkit records its objective after every pass, and the report gives the time at
  which it first reaches Wapiti's final one;
* ``wapiti-bcd:{1,3,5}-grm`` then ``bcd[-joint][-scale]:{1,3,5}-grm``: BCD on both sides in Wapiti's
  feature space (``support all``): Wapiti ``train -a bcd -d dev -i S`` and crfkit ``-a bcd`` (its
  defaults: random order, kappa 1.5, Armijo safeguard, shrinking; ``bcd-joint``: ``blocks=joint``,
  one block per observation as Wapiti; ``bcd-scale`` / ``bcd-joint-scale``: Wapiti's step rule,
  ``safeguard=scale``, each block's curvatures scaled by ``max(1, max|g/h|)`` and no line search,
  separate / joint blocks) with the same number of sweeps S (``--bcd-sweeps``); Wapiti's BCD prints
  no objective either: its model is read back and scored as for SGD-L1 (``--rescore`` too);
* ``{full,inc}:{5,7}-grm:u:bcd`` and ``inc:5-grm:owlqn``: the incremental strategy
  (:mod:`crfkit.incremental`) against training the whole set;
* ``t2:{1-grm,3-grm-,3-grm}:{l2,l1-sparse,l1}``: Table 2, sparse against standard forward-backward
  (``--t2-iterations`` each, no dev scoring);
* ``t3f:{1,3}-grm:{en,l1,l2}``, ``t3f:5-grm:l2``: Table 3 in Wapiti's feature space
  (``support all``), the paper's space;
* ``t4:{1-grm,7-grm,5-grm+}:owlqn``: Table 4's OWL-QN rows, Wapiti's feature space (5-grm+ is 236.8M
  candidates: 19.5 GB peak with the dev stopping; 7-grm, about 310M, does not fit 24 GB);
  ``t4:5-grm+:sgd-l1``: the SGD-L1 row at 5-grm+ (the 1-grm SGD-L1 and BCD rows are the ``sgdl1`` /
  ``bcd`` cells); ``t4:{7-grm,5-grm+}:bcd``: BCD's rows, with Wapiti's blocks and step rule
  (``blocks=joint``, ``safeguard=scale``) for ``--bcd-sweeps`` sweeps.

OWL-QN cells stop on the dev fold (scored every ``--dev-every`` iterations, ``--dev-stop``
evaluations without improvement, the best model kept) or at ``--cap`` iterations.

Each cell runs in a subprocess of its own (its peak RSS, ``ru_maxrss``, is its own) and its figures
are appended to ``--out`` (JSON lines) as soon as it ends; a cell already there is skipped, so a
stopped run resumes where it was (``--redo`` runs cells again).  ``--report`` prints the tables from
the file.  Error rates are phoneme (token) error on the test fold.  No cell checks the machine's
memory first: the largest (5-grm with every label pair, t4 at 7-grm and 5-grm+) need 8-17 GB.

Usage::

    python benchmarks/papers/nettalk_tables.py --out runs/nettalk/results.jsonl --threads 1
    python benchmarks/papers/nettalk_tables.py --out runs/nettalk/results.jsonl --report
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import time

RHO1, RHO2 = 0.5, 1e-5
WAPITI = os.environ.get("WAPITI", "/work/peers/bin/wapiti")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import _results  # benchmarks/_results.py: the results schema (standard library only)

# name -> settings of a crfkit cell
CELLS: dict[str, dict] = {}


def _cell(name, **kw):
    CELLS[name] = kw


# the order is the order of priority on a loaded machine: cheap cells first
_cell(
    "t1:3-grm:u",
    table="1",
    features="nettalk:3-grm:u",
    support="all",
    rho1=RHO1,
    rho2=RHO2,
    reg="en",
)
_cell(
    "t3:3-grm:en",
    table="3",
    features="nettalk:3-grm",
    support="observed",
    rho1=RHO1,
    rho2=RHO2,
    reg="en",
)
_cell(
    "t1:5-grm:u",
    table="1",
    features="nettalk:5-grm:u",
    support="all",
    rho1=RHO1,
    rho2=RHO2,
    reg="en",
)
_cell(
    "full:5-grm:u:bcd",
    table="inc",
    features="nettalk:5-grm:u",
    support="all",
    rho1=RHO1,
    rho2=RHO2,
    reg="en",
    algorithm="bcd",
    max_it=6,
)
_cell(
    "inc:5-grm:u:bcd",
    table="inc",
    features="nettalk:5-grm:u",
    support="all",
    rho1=RHO1,
    rho2=RHO2,
    reg="en",
    algorithm="bcd",
    incremental=True,
    max_it=2,
    stage_it=2,
)
for reg, (r1, r2) in {"en": (RHO1, RHO2), "l2": (0.0, RHO2), "l1": (RHO1, 0.0)}.items():
    _cell(
        f"t3:1-grm:{reg}",
        table="3",
        features="nettalk:1-grm",
        support="observed",
        rho1=r1,
        rho2=r2,
        reg=reg,
    )
_cell("wapiti:3-grm", table="wapiti", features="nettalk:3-grm", peer=True)
# m = 5: Wapiti's default L-BFGS history (--histsz 5), the same settings on both sides (crfkit's
# default is CRFsuite's 6)
_cell(
    "crfkit:3-grm",
    table="wapiti",
    features="nettalk:3-grm",
    support="all",
    rho1=RHO1,
    rho2=RHO2,
    reg="en",
    target="wapiti:3-grm",
    m=5,
)
# the same at 5-grm (129.8M candidates in Wapiti's space, 123.6M in crfkit's): last, the longest
# pair
_cell("wapiti:5-grm", table="wapiti", features="nettalk:5-grm", peer=True)
_cell(
    "crfkit:5-grm",
    table="wapiti",
    features="nettalk:5-grm",
    support="all",
    rho1=RHO1,
    rho2=RHO2,
    reg="en",
    target="wapiti:5-grm",
    m=5,
)
for reg, (r1, r2) in {"l1": (RHO1, 0.0), "l2": (0.0, RHO2)}.items():
    _cell(
        f"t3:3-grm:{reg}",
        table="3",
        features="nettalk:3-grm",
        support="observed",
        rho1=r1,
        rho2=r2,
        reg=reg,
    )
for reg, (r1, r2) in {"l1": (RHO1, 0.0), "l2": (0.0, RHO2)}.items():
    _cell(
        f"t3:5-grm:{reg}",
        table="3",
        features="nettalk:5-grm",
        support="observed",
        rho1=r1,
        rho2=r2,
        reg=reg,
    )
_cell(
    "t1:5-grm:obs",
    table="1",
    features="nettalk:5-grm",
    support="observed",
    rho1=RHO1,
    rho2=RHO2,
    reg="en",
)
_cell(
    "inc:5-grm:owlqn",
    table="inc",
    features="nettalk:5-grm",
    support="observed",
    rho1=RHO1,
    rho2=RHO2,
    reg="en",
    incremental=True,
)
_cell(
    "full:7-grm:u:bcd",
    table="inc",
    features="nettalk:7-grm:u",
    support="all",
    rho1=RHO1,
    rho2=RHO2,
    reg="en",
    algorithm="bcd",
    max_it=6,
)
_cell(
    "inc:7-grm:u:bcd",
    table="inc",
    features="nettalk:7-grm:u",
    support="all",
    rho1=RHO1,
    rho2=RHO2,
    reg="en",
    algorithm="bcd",
    incremental=True,
    max_it=2,
    stage_it=2,
)

# the sets on which crfkit and Wapiti run side by side (SGD-L1 and BCD cells, their report)
PEER_SETS = ("1-grm", "3-grm", "5-grm")

# SGD-L1 against Wapiti's, Wapiti's feature space, the same eta0 / alpha / passes (Table 4's SGD-L1
# row at 1-grm; 5-grm: 123.6M features, the second set for the comparison)
for _n in PEER_SETS:
    _cell(
        f"wapiti-sgdl1:{_n}", table="sgdl1", features=f"nettalk:{_n}", peer=True, algorithm="sgd-l1"
    )
    _cell(
        f"sgdl1:{_n}",
        table="sgdl1",
        features=f"nettalk:{_n}",
        support="all",
        rho1=RHO1,
        rho2=RHO2,
        reg="en",
        algorithm="sgd-l1",
        no_dev=True,
        peer_cell=f"wapiti-sgdl1:{_n}",
    )

# BCD against Wapiti's (``-a bcd``), Wapiti's feature space (every label pair with every
# observation), the same number of sweeps on both sides (--bcd-sweeps); Table 4's BCD row at 1-grm
for _n in PEER_SETS:
    _cell(f"wapiti-bcd:{_n}", table="bcd", features=f"nettalk:{_n}", peer=True, algorithm="bcd")
    _cell(
        f"bcd:{_n}",
        table="bcd",
        features=f"nettalk:{_n}",
        support="all",
        rho1=RHO1,
        rho2=RHO2,
        reg="en",
        algorithm="bcd",
        no_dev=True,
        peer_cell=f"wapiti-bcd:{_n}",
    )
    # one block per observation (a state attribute and its label-pair twin together), as Wapiti
    _cell(
        f"bcd-joint:{_n}",
        table="bcd",
        features=f"nettalk:{_n}",
        support="all",
        rho1=RHO1,
        rho2=RHO2,
        reg="en",
        algorithm="bcd",
        no_dev=True,
        peer_cell=f"wapiti-bcd:{_n}",
        bcd_params={"blocks": "joint"},
    )
    # Wapiti's step rule (curvature scaled by max(1, max|g/h|), no line search), separate and joint
    # blocks
    _cell(
        f"bcd-scale:{_n}",
        table="bcd",
        features=f"nettalk:{_n}",
        support="all",
        rho1=RHO1,
        rho2=RHO2,
        reg="en",
        algorithm="bcd",
        no_dev=True,
        peer_cell=f"wapiti-bcd:{_n}",
        bcd_params={"safeguard": "scale"},
    )
    _cell(
        f"bcd-joint-scale:{_n}",
        table="bcd",
        features=f"nettalk:{_n}",
        support="all",
        rho1=RHO1,
        rho2=RHO2,
        reg="en",
        algorithm="bcd",
        no_dev=True,
        peer_cell=f"wapiti-bcd:{_n}",
        bcd_params={"blocks": "joint", "safeguard": "scale"},
    )

# Table 2: sparse vs standard forward-backward, Wapiti's feature space (every label pair with every
# observation: the paper's M has L x L entries at every position), no dev scoring during training
# (the times are the optimizer's), the same iteration limit for the cells of a set
# (--t2-iterations); l2: L-BFGS, rho1 = 0
for _n in ("1-grm", "3-grm-", "3-grm"):
    _cell(
        f"t2:{_n}:l2",
        table="2",
        features=f"nettalk:{_n}",
        support="all",
        rho1=0.0,
        rho2=RHO2,
        reg="l2",
        sparse_fb="off",
        no_dev=True,
    )
    _cell(
        f"t2:{_n}:l1-sparse",
        table="2",
        features=f"nettalk:{_n}",
        support="all",
        rho1=RHO1,
        rho2=RHO2,
        reg="en",
        sparse_fb="on",
        no_dev=True,
    )
    _cell(
        f"t2:{_n}:l1",
        table="2",
        features=f"nettalk:{_n}",
        support="all",
        rho1=RHO1,
        rho2=RHO2,
        reg="en",
        sparse_fb="off",
        no_dev=True,
    )

# Table 4: OWL-QN in Wapiti's feature space (every label pair with every observation, as the paper's
# counts), the usual dev stopping (--dev-every / --dev-stop) and iteration cap (--cap); the largest
# sets last
for _n in ("1-grm", "7-grm", "5-grm+"):
    _cell(
        f"t4:{_n}:owlqn",
        table="4",
        features=f"nettalk:{_n}",
        support="all",
        rho1=RHO1,
        rho2=RHO2,
        reg="en",
    )
# Table 5 (Nettalk + prosody, the joint phoneme + stress labels): SGD-L1 as the sgdl1 cells.  The
# paper's rows (5-grm, 5-grm+ and up) have 642M+ candidates with its 114 labels (12,996 label pairs
# per observation), 1.3G+ with the 161 composites of this file's training folds
# (crfkit.datasets.nettalk): more than this machine's memory; 3-grm (131.6M here, 69M in the paper:
# the largest its OWL-QN handled) is the cell here
_cell(
    "t5:3-grm:sgd-l1",
    table="sgdl1",
    features="nettalk:3-grm",
    support="all",
    rho1=RHO1,
    rho2=RHO2,
    reg="en",
    algorithm="sgd-l1",
    no_dev=True,
    labels="joint",
)
# and BCD with Wapiti's blocks and step rule, as Table 4's BCD cells (--bcd-sweeps sweeps)
_cell(
    "t5:3-grm:bcd",
    table="bcd",
    features="nettalk:3-grm",
    support="all",
    rho1=RHO1,
    rho2=RHO2,
    reg="en",
    algorithm="bcd",
    no_dev=True,
    labels="joint",
    bcd_params={"blocks": "joint", "safeguard": "scale"},
)
# 5-grm with BCD (stop 34, since the label pairs are int16: about 1.2G candidates, 9.7 GB of
# weights): the paper has 5-grm for SGD only; SGD-L1 (weights and penalties, 20 GB) still does not
# fit
_cell(
    "t5:5-grm:bcd",
    table="bcd",
    features="nettalk:5-grm",
    support="all",
    rho1=RHO1,
    rho2=RHO2,
    reg="en",
    algorithm="bcd",
    no_dev=True,
    labels="joint",
    bcd_params={"blocks": "joint", "safeguard": "scale"},
)
# Table 4's SGD-L1 row at 5-grm+: as the sgdl1 cells (--sgd-passes passes, Wapiti's eta0 / alpha, no
# dev stopping)
_cell(
    "t4:5-grm+:sgd-l1",
    table="sgdl1",
    features="nettalk:5-grm+",
    support="all",
    rho1=RHO1,
    rho2=RHO2,
    reg="en",
    algorithm="sgd-l1",
    no_dev=True,
)
# Table 4's BCD rows at 7-grm and 5-grm+: as the bcd cells (--bcd-sweeps sweeps, no dev stopping),
# with the paper's tool's BCD: one block per observation and Wapiti's step rule (blocks=joint,
# safeguard=scale)
for _n in ("7-grm", "5-grm+"):
    _cell(
        f"t4:{_n}:bcd",
        table="bcd",
        features=f"nettalk:{_n}",
        support="all",
        rho1=RHO1,
        rho2=RHO2,
        reg="en",
        algorithm="bcd",
        no_dev=True,
        bcd_params={"blocks": "joint", "safeguard": "scale"},
    )

# Table 3 again in Wapiti's feature space (every label pair with every observation, as the paper's
# counts: 71,604 features at 1-grm), to test the diagnosis of the observed-support misses (L2 lacks
# the label pairs an observation was never seen with); same regularisers and dev stopping as the t3
# cells
for _n in ("1-grm", "3-grm"):
    for reg, (r1, r2) in {"en": (RHO1, RHO2), "l1": (RHO1, 0.0), "l2": (0.0, RHO2)}.items():
        _cell(
            f"t3f:{_n}:{reg}",
            table="3",
            features=f"nettalk:{_n}",
            support="all",
            rho1=r1,
            rho2=r2,
            reg=reg,
        )
# 5-grm L2 (the one 5-grm cell the observed support missed): 123.6M weights, all non-zero, L-BFGS
# (about 11 GB)
_cell(
    "t3f:5-grm:l2",
    table="3",
    features="nettalk:5-grm",
    support="all",
    rho1=0.0,
    rho2=RHO2,
    reg="l2",
)

PAPER = {
    "t1": {
        "3-grm": ("10.74%", "14.3M", "14.59%", "0.3M"),
        "5-grm": ("8.48%", "132.5M", "11.54%", "2.5M"),
    },
    "t3": {
        "1-grm": ("17.81%", "17.86%", "17.79%"),
        "3-grm": ("10.62%", "10.74%", "10.70%"),
        "5-grm": ("8.50%", "8.45%", "8.48%"),
    },
    # l2 / l1-sparse / l1 minutes, % zero of M
    "t2": {"1-grm": (84, 41, 57, 44.6), "3-grm-": (65, 16, 44, 99.6), "3-grm": (72, 48, 58, 19.9)},
    # iterations, active features, error, time
    "t4": {
        ("owlqn", "1-grm"): (63.4, 4684, "17.79%", "11min"),
        ("owlqn", "7-grm"): (140.2, 38214, "8.12%", "1h02min"),
        ("owlqn", "5-grm+"): (141.0, 43429, "7.89%", "1h37min"),
        ("sgd-l1", "1-grm"): (21.4, 3540, "18.21%", "9min"),
        ("sgd-l1", "5-grm+"): (28.5, 34319, "8.01%", "45min"),
        ("bcd", "1-grm"): (28.2, 5017, "18.27%", "27min"),
        ("bcd", "7-grm"): (9.2, 3692, "8.21%", "1h22min"),
        ("bcd", "5-grm+"): (8.7, 47675, "7.91%", "2h18min"),
    },
    # joint / phoneme error, time
    "t5": {
        ("sgd-l1", "3-grm"): "not in the paper",
        ("bcd", "3-grm"): "not in the paper",
        ("sgd-l1", "5-grm"): "14.57% / 8.06%, 2h46min",
        ("bcd", "5-grm"): "not in the paper (its SGD row: 14.57% / 8.06%)",
        ("sgd-l1", "5-grm+"): "13.91% / 7.51%, 2h45min",
        ("bcd", "7-grm"): "14.12% / 7.86%, 3h02min",
        ("bcd", "5-grm+"): "13.85% / 7.47%, 7h14min",
        ("bcd", "5-grm++"): "13.69% / 7.36%, 16h03min",
    },
}


def load_average() -> str:
    return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def export(work: str) -> dict:
    from crfkit.datasets.nettalk import nettalk_split, write_columns

    paths = {k: os.path.join(work, f"{k}.txt") for k in ("train", "dev", "test")}
    if not all(os.path.exists(p) for p in paths.values()):
        for k, sents in zip(("train", "dev", "test"), nettalk_split(9)):
            write_columns(sents, paths[k])
    return paths


def token_error(model, sentences, project=None) -> float | tuple[float, float]:
    """Token error (%) of the model on ``sentences``; with ``project`` (a label -> label function,
    e.g. the phoneme of a joint label) also the error of the projected labels: (error, projected
    error)."""
    from crfkit.pipeline import attributes_of, bigram_attributes_of, tagger_from_model

    templates, pad = tagger_from_model(model)
    X = attributes_of(sentences, templates, pad=pad)
    B = bigram_attributes_of(sentences, templates, pad=pad) if model.space.n_bigram else None
    pred = model.tag(X, B=B)
    wrong = wrong_p = total = 0
    for s, p in zip(sentences, pred):
        wrong += sum(a != b for a, b in zip(s.labels, p))
        if project is not None:
            wrong_p += sum(project(a) != project(b) for a, b in zip(s.labels, p))
        total += len(p)
    if project is not None:
        return 100.0 * wrong / total, 100.0 * wrong_p / total
    return 100.0 * wrong / total


# --------------------------------------------------------------------------- workers (subprocesses)


def warm_kernels(threads: int) -> None:
    """Run every optimizer the cells use, a step each, with label-pair features on a few words (and
    tag with the result), at one thread and at ``threads``: loads (or compiles) numba's kernels into
    the cache."""
    from crfkit.datasets.nettalk import nettalk_split
    from crfkit.features.windows import preset_templates
    from crfkit.pipeline import attributes_of, bigram_attributes_of
    from crfkit.train import train

    words = nettalk_split(9)[0][:40]
    for preset in ("nettalk:3-grm", "nettalk:3-grm:u"):
        tp = preset_templates(preset)
        X, Y, B = (
            attributes_of(words, tp),
            [s.labels for s in words],
            bigram_attributes_of(words, tp),
        )
        kw = {"B": B} if B is not None else {}
        for th in sorted({1, max(1, threads)}):
            # (BCD's joint blocks with Wapiti's step rule are the bcd-joint-scale cells': other
            # kernels)
            for alg, extra in (
                ("owlqn", {}),
                ("lbfgs", {"l1": 0.0}),
                ("sgd-l1", {"params": {"penalty": "cumulative"}}),
                ("bcd", {}),
                ("bcd", {"params": {"blocks": "joint", "safeguard": "scale"}}),
            ):
                r1 = {} if "l1" in extra else {"rho1": RHO1}
                res = train(
                    X,
                    Y,
                    support="all",
                    algorithm=alg,
                    rho2=RHO2,
                    max_iterations=1,
                    threads=th,
                    **r1,
                    **extra,
                    **kw,
                )
                res.model.tag(X, **kw)


def worker_crfkit(args) -> dict:
    from crfkit.features.windows import preset_templates
    from crfkit.io.columns import read_columns_list

    c = CELLS[args.worker]
    if c.get("labels"):
        # Table 5: the joint phoneme + stress labels, straight from the data set's split
        from crfkit.datasets.nettalk import nettalk_split

        train, dev, test = nettalk_split(9, labels=c["labels"])
        paths = None
    else:
        # the training and dev folds as files, read by what reads them for crfkit train
        # (train_columns)
        paths = export(args.work)
        train = dev = None
        test = read_columns_list(paths["test"])
    kw = dict(
        algorithm=c.get("algorithm", "owlqn"),
        threads=args.threads,
        verbose=True,
        log=lambda s: print(s, file=sys.stderr, flush=True),
    )
    if c["rho1"] > 0:
        kw["rho1"] = c["rho1"]
    else:
        kw["l1"] = 0.0
    kw["rho2"] = c["rho2"]
    if c.get("m"):
        kw["m"] = c["m"]
    if kw["algorithm"] == "owlqn" and c["rho1"] == 0:
        kw["algorithm"] = "lbfgs"
    trace = os.path.join(args.work, args.worker.replace(":", "_") + ".trace.jsonl")
    t0 = time.perf_counter()
    out = {"cell": args.worker, **{k: v for k, v in c.items() if k != "target"}}
    if c.get("target"):
        kw.update(
            stop_value=args.stop_value,
            max_iterations=args.max_iterations or 200,
            delta=0.0,
            epsilon=0.0,
        )
    elif c["table"] == "sgdl1":
        # Wapiti's SGD-L1: Figure 2's cumulative penalty, eta_k = eta0 * alpha^(k/N); every pass
        # scored
        kw.update(
            max_iterations=args.sgd_passes,
            seed=0,
            params=dict(
                penalty="cumulative",
                schedule="exponential",
                eta0=args.sgd_eta0,
                alpha=args.sgd_alpha,
                monitor=args.sgd_monitor == "on",
            ),
        )
    elif c["table"] == "bcd":
        # crfkit's BCD with its defaults (random block order, kappa 1.5, Armijo safeguard,
        # shrinking), exactly --bcd-sweeps sweeps (delta 0), the objective recorded after every
        # sweep
        kw.update(
            max_iterations=args.bcd_sweeps,
            seed=0,
            params=dict(delta=0.0, **c.get("bcd_params", {})),
        )
    elif c["table"] == "2":
        # the same stopping rule for every cell of a set: the iteration limit (or the usual delta
        # rule first)
        kw.update(
            max_iterations=args.max_iterations or args.t2_iterations, sparse_fb=c["sparse_fb"]
        )
    else:
        kw.update(
            dev_stop=args.dev_stop,
            dev_every=args.dev_every,
            max_iterations=args.max_iterations or c.get("max_it", args.cap),
        )
    if c.get("incremental"):
        from crfkit.incremental import train_incremental

        if train is None:
            train, dev = read_columns_list(paths["train"]), read_columns_list(paths["dev"])
        kw.pop("log")
        its = c.get("stage_it", 10)
        r = train_incremental(
            train,
            features=c["features"],
            dev=dev,
            stage_iterations=its,
            final_iterations=kw.pop("max_iterations"),
            trace=trace,
            support=c["support"],
            log=lambda s: print(s, file=sys.stderr, flush=True),
            **kw,
        )
        res = r.result
        out["stages"] = r.stages
        out["iterations"] = sum(st["iterations"] for st in r.stages)
        out["features"] = res.model.space.n_features
    else:
        templates = preset_templates(c["features"])
        if paths is not None:
            # crfkit train's path: the file read, its templates applied a chunk of words at a time,
            # the words dropped once encoded; N-grm- sets (no empty window) get no plain label-pair
            # features, as in Wapiti's space
            from crfkit.pipeline import train_columns

            dev_kw = {} if c.get("no_dev") else dict(dev_path=paths["dev"])
            res = train_columns(
                paths["train"], templates, support=c["support"], trace=trace, **dev_kw, **kw
            )
        else:
            from crfkit.pipeline import attributes_of, bigram_attributes_of
            from crfkit.train import train as train_fn

            X = attributes_of(train, templates, lazy=True)
            Y = [s.labels for s in train]
            B = bigram_attributes_of(train, templates, lazy=True)
            meta = {"templates": templates.source, "template_pad": True, "columns": 1}
            if B is not None:
                kw["B"] = B
                if not c.get("no_dev"):
                    kw["B_dev"] = bigram_attributes_of(dev, templates)
            dev_kw = (
                {}
                if c.get("no_dev")
                else dict(X_dev=attributes_of(dev, templates), Y_dev=[s.labels for s in dev])
            )
            if not templates.bigram:
                kw["transitions"] = "none"
            res = train_fn(X, Y, support=c["support"], trace=trace, meta=meta, **dev_kw, **kw)
        out["n_transitions"] = res.model.space.n_trans
        out["iterations"] = res.iterations
        out["features"] = res.model.space.n_features
        # the optimizer's seconds (from its first gradient; the feature encoding before it is not
        # counted)
        out["optimizer_s"] = res.seconds
        out["s_per_iteration"] = res.seconds / max(res.iterations, 1)
        out["n_evaluations"] = res.effective_passes
        if "pair_zero_share" in res.model.meta:
            out["pair_zero_share"] = res.model.meta["pair_zero_share"]
            out["pair_zero_share_by_iteration"] = [r.get("pair_zero_share") for r in res.history]
        out["objective_by_iteration"] = [r["objective"] for r in res.history]
        out["n_train"] = res.model.meta.get("n_train")
        out["wall_s_by_iteration"] = [r["wall_s"] for r in res.history]
        out["monitor_s_by_iteration"] = [r.get("monitor_s") for r in res.history]
    out["train_s"] = time.perf_counter() - t0
    out["objective_sum"] = res.objective * res.model.meta["n_train"]
    out["status"] = res.status
    out["active"] = res.model.n_active
    if c.get("labels") == "joint":
        from crfkit.datasets.nettalk import phoneme_of

        out["test_error"], out["test_error_phoneme"] = token_error(
            res.model, test, project=phoneme_of
        )
        out["n_labels"] = res.model.space.n_labels
    else:
        out["test_error"] = token_error(res.model, test)
    if c["table"] == "sgdl1":
        out["sgd_monitor"] = (
            args.sgd_monitor
        )  # whether train_s includes an objective after every pass
    out["dev_best_iteration"] = res.model.meta.get("dev_best_iteration")
    out["peak_rss_mb"] = peak_rss_mb()
    out["threads"] = args.threads
    return out


def worker_wapiti(args) -> dict:
    paths = export(args.work)
    c = CELLS[args.worker]
    from crfkit.features.windows import pattern_text

    pat = os.path.join(args.work, args.worker.replace(":", "_") + ".pat")
    with open(pat, "w") as f:
        f.write(pattern_text(c["features"], "wapiti"))
    model = os.path.join(args.work, args.worker.replace(":", "_") + ".wapiti.model")
    log = os.path.join(args.work, args.worker.replace(":", "_") + ".wapiti.log")
    sgd = c.get("algorithm") == "sgd-l1"
    bcd = c.get("algorithm") == "bcd"
    cmd = [
        WAPITI,
        "train",
        "-a",
        "sgd-l1" if sgd else "bcd" if bcd else "l-bfgs",
        "-p",
        pat,
        "-1",
        str(RHO1),
        "-2",
        str(RHO2),
        "-t",
        str(args.threads),
        "-d",
        paths["dev"],
    ]
    if sgd:
        cmd += [
            "-i",
            str(args.sgd_passes),
            "--eta0",
            repr(args.sgd_eta0),
            "--alpha",
            repr(args.sgd_alpha),
        ]
    elif bcd:
        cmd += ["-i", str(args.bcd_sweeps)]
    elif args.wapiti_iterations or args.max_iterations:
        cmd += ["-i", str(args.wapiti_iterations or args.max_iterations)]
    cmd += [paths["train"], model]
    t0 = time.perf_counter()
    with open(log, "w") as lf:
        p = subprocess.Popen(cmd, stdout=lf, stderr=subprocess.STDOUT)
        _, status, ru = os.wait4(p.pid, 0)
    train_s = time.perf_counter() - t0
    if status != 0:
        raise SystemExit(f"wapiti failed (status {status}); see {log}")
    text = open(log).read()
    its = re.findall(r"\[\s*(\d+)\]\s+obj=([0-9.]+)\s+act=(\d+)", text)
    nftr = re.search(r"nb features:\s*(\d+)", text) or re.search(r"(\d+)\s+features", text)
    out_lab = model + ".test.out"
    subprocess.run(
        [WAPITI, "label", "-m", model, paths["test"], out_lab], check=True, capture_output=True
    )
    wrong = total = 0
    with open(out_lab) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3:
                total += 1
                wrong += parts[-1] != parts[-2]
    out = {
        "cell": args.worker,
        "table": c["table"],
        "features": c["features"],
        "peer": "wapiti 1.5.0",
        "iterations": int(its[-1][0]) if its else None,
        "objective_sum": float(its[-1][1]) if its else None,
        "active": int(its[-1][2]) if its else None,
        "n_features": int(nftr.group(1)) if nftr else None,
        "train_s": train_s,
        "peak_rss_mb": ru.ru_maxrss / 1024.0,
        "test_error": 100.0 * wrong / total,
        "threads": args.threads,
        "command": " ".join(cmd),
    }
    if sgd or bcd:
        # obj=NA: Wapiti's SGD-L1 and BCD do not compute the objective; its per-pass (time, active,
        # dev error)
        rows = re.findall(
            r"\[\s*(\d+)\]\s+obj=\S+\s+act=(\d+)\s+err=\s*([0-9.]+)%/\s*([0-9.]+)%\s+"
            r"time=([0-9.]+)s/([0-9.]+)s",
            text,
        )
        out.update(
            iterations=int(rows[-1][0]) if rows else None,
            active=int(rows[-1][1]) if rows else None,
            wapiti_s_by_iteration=[float(r[5]) for r in rows],
            dev_error_by_iteration=[float(r[2]) for r in rows],
        )
        t = time.perf_counter()
        out.update(wapiti_objective(model, paths["train"], c["features"]))
        out["objective_eval_s"] = time.perf_counter() - t
    return out


def wapiti_weights(model_path: str, space) -> tuple:
    """The weights of a Wapiti 1.5.0 model file (``train`` output: its reader, labels and
    observations as netstrings, then ``index=hexfloat`` for every non-zero weight) in crfkit's
    feature space ``space``, mapped by name: Wapiti's observation strings are crfkit's attribute
    strings for the same pattern file (but for the out-of-word marks: Wapiti's ``_x-1`` is crfkit's
    ``_B-1``); a ``u``/``*`` observation has a weight per label (a state feature), a ``b``/``*`` one
    per label pair (a bigram-observation feature, or a transition for the bare ``*``/``b``
    observation).  Returns (w, number of non-zero weights, non-zero weights crfkit's space has no
    feature for, their sum |w|)."""
    import numpy as np

    with open(model_path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    pos = 0

    def netstring():
        nonlocal pos
        line = lines[pos]
        pos += 1
        n, rest = line.split(":", 1)
        return rest[: int(n)]

    m = re.match(r"#mdl#(\d+)#(\d+)$", lines[0]) or re.match(r"#mdl#()(\d+)$", lines[0])
    nact = int(m.group(2))
    npats = int(re.match(r"#rdr#(\d+)/", lines[1]).group(1))
    pos = 2
    for _ in range(npats):
        netstring()
    nlab = int(lines[pos].split("#")[2])
    pos += 1
    labels = [netstring() for _ in range(nlab)]
    nobs = int(lines[pos].split("#")[2])
    pos += 1
    # Wapiti writes an out-of-word position as _x-1, _x+1 (pattern.c), crfkit as _B-1, _B+1
    # (CRF++'s)
    obs = [re.sub(r"_x([-+])", r"_B\1", netstring()) for _ in range(nobs)]
    Y = len(labels)
    lab = space.label_index
    cl = np.array([lab.get(x, -1) for x in labels])
    aidx, bidx = space.attr_index, space.battr_index
    # (observation, offset, kind) of every Wapiti feature block, in Wapiti's order (mdl_sync)
    starts, owners, kinds = [], [], []
    F = 0
    for o, sobs in enumerate(obs):
        kind = {"u": 1, "b": 2, "*": 3}[sobs[0]]
        if kind & 1:
            starts.append(F), owners.append(o), kinds.append(1)
            F += Y
        if kind & 2:
            starts.append(F), owners.append(o), kinds.append(2)
            F += Y * Y
    starts = np.array(starts)
    w = np.zeros(space.n_features)
    missing = 0
    missing_abs = 0.0
    for line in lines[pos : pos + nact]:
        fi, val = line.split("=")
        fi, val = int(fi), float.fromhex(val)
        blk = int(np.searchsorted(starts, fi, side="right")) - 1
        o, kind, r = owners[blk], kinds[blk], fi - starts[blk]
        k = -1
        if kind == 1:
            a = aidx.get(obs[o], -1)
            if a >= 0 and cl[r] >= 0:
                k0, k1 = space.attr_ptr[a], space.attr_ptr[a + 1]
                hit = np.flatnonzero(space.feat_label[k0:k1] == cl[r])
                k = int(k0 + hit[0]) if len(hit) else -1
        else:
            i, j = cl[r // Y], cl[r % Y]
            if i >= 0 and j >= 0:
                if obs[o] in ("*", "b"):
                    t = int(space.trans_index[i, j])
                    k = space.n_state + t if t >= 0 else -1
                else:
                    b = bidx.get(obs[o], -1)
                    if b >= 0:
                        k0, k1 = space.battr_ptr[b], space.battr_ptr[b + 1]
                        hit = np.flatnonzero(space.bfeat_pair[k0:k1] == i * space.n_labels + j)
                        k = int(space.bigram_offset + k0 + hit[0]) if len(hit) else -1
        if k < 0:
            missing += 1
            missing_abs += abs(val)
        else:
            w[k] = val
    return w, nact, missing, missing_abs


def wapiti_objective(model_path: str, train_path: str, features: str) -> dict:
    """crfkit's objective (sum form: Wapiti's units) of a Wapiti model's weights on the training
    file, in crfkit's ``support all`` space for the preset ``features``, rho1 = RHO1,
    rho2 = RHO2."""
    from crfkit.features.encode import build
    from crfkit.features.windows import preset_templates
    from crfkit.io.columns import read_columns_list
    from crfkit.objective import Objective, regularization
    from crfkit.pipeline import attributes_of, bigram_attributes_of

    train = read_columns_list(train_path)
    templates = preset_templates(features)
    X = attributes_of(train, templates)
    B = bigram_attributes_of(train, templates)
    space, corpus = build(X, [s.labels for s in train], B=B, support="all")
    w, nact, missing, missing_abs = wapiti_weights(model_path, space)
    reg = regularization(corpus.total_weight, rho1=RHO1, rho2=RHO2)
    f = Objective(corpus, space, reg).value(w, count=False)
    return {
        "objective_sum": f * corpus.total_weight,
        "wapiti_nonzero": nact,
        "wapiti_unmapped": missing,
        "wapiti_unmapped_abs": missing_abs,
        "crfkit_space_features": space.n_features,
    }


# --------------------------------------------------------------------------- driver


def read_results(path: str) -> dict:
    out = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                if line.strip():
                    r = _results.figures(
                        json.loads(line)
                    )  # a flat record, or one of benchmarks/results/
                    out[r["cell"]] = r
    return out


def run_cell(name: str, args, results: dict) -> dict | None:
    c = CELLS[name]
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--worker",
        name,
        "--work",
        args.work,
        "--threads",
        str(args.threads),
        "--cap",
        str(args.cap),
        "--dev-every",
        str(args.dev_every),
        "--dev-stop",
        str(args.dev_stop),
        "--t2-iterations",
        str(args.t2_iterations),
        "--sgd-passes",
        str(args.sgd_passes),
        "--sgd-eta0",
        repr(args.sgd_eta0),
        "--sgd-alpha",
        repr(args.sgd_alpha),
        "--bcd-sweeps",
        str(args.bcd_sweeps),
        "--sgd-monitor",
        args.sgd_monitor,
    ]
    if args.wapiti_iterations:
        cmd += ["--wapiti-iterations", str(args.wapiti_iterations)]
    if c.get("target"):
        t = results.get(c["target"])
        if t is None or t.get("objective_sum") is None:
            print(f"{name}: skipped, {c['target']} has no result yet", flush=True)
            return None
        # crfkit's per-sequence objective = Wapiti's sum-form objective / n (rounded to 2 decimals
        # by Wapiti: aim at its upper end)
        n = sum(1 for _ in open(os.path.join(args.work, "train.txt")) if not _.strip())
        cmd += ["--stop-value", repr((t["objective_sum"] + 0.005) / n)]
    if args.max_iterations:
        cmd += ["--max-iterations", str(args.max_iterations)]
    before = load_average()
    t0 = time.time()
    print(f"{time.strftime('%H:%M:%S')} {name}: start ({before})", flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True)
    errlog = os.path.join(args.work, name.replace(":", "_") + ".log")
    with open(errlog, "w") as f:
        f.write(p.stderr)
    if p.returncode != 0:
        print(
            f"{name}: FAILED (status {p.returncode}); last lines of {errlog}:\n"
            + "\n".join(p.stderr.splitlines()[-8:]),
            flush=True,
        )
        return None
    rec = json.loads(p.stdout.strip().splitlines()[-1])
    rec.update(load_before=before, load_after=load_average(), wall_total_s=time.time() - t0)
    with open(args.out, "a") as f:
        f.write(json.dumps(rec) + "\n")
    if args.results:
        _results.record(rec, args.results)
    print(
        f"{time.strftime('%H:%M:%S')} {name}: error {rec['test_error']:.2f}%, {rec.get('iterations')} iterations, "
        f"{rec['train_s']:.1f}s, peak RSS {rec['peak_rss_mb']:.0f} MB",
        flush=True,
    )
    return rec


def _fmt_m(x) -> str:
    if x is None:
        return "-"
    return f"{x / 1e6:.2f}M" if x >= 1e5 else f"{x / 1e3:.1f}K"


def table3(results: dict, prefix: str, title: str, detail: bool = False) -> list[str]:
    """Table 3's lines (L2 / L1 / elastic net by set, the paper's error beside the cells
    ``prefix:set:reg``); ``detail``: each cell's features, active features and iterations too."""
    lines = ["", title, "| set | L2 | L1 | elastic net |", "|---|---|---|---|"]
    for n in ("1-grm", "3-grm", "5-grm"):
        cells = []
        for paper, reg in zip(PAPER["t3"][n], ("l2", "l1", "en")):
            r = results.get(f"{prefix}:{n}:{reg}")
            mine = (
                "not run"
                if not r
                else f"{r['test_error']:.2f}%"
                + (
                    f" ({_fmt_m(r['features'])}, {r['active']:,} active, {r['iterations']} its)"
                    if detail
                    else ""
                )
            )
            cells.append(f"{paper} \\| {mine}")
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    return lines


def report(results: dict) -> str:
    lines = [
        "Table 1 (OWL-QN, rho1 0.5, rho2 1e-5): test phoneme error / features, with and without label-pair "
        "x observation features",
        "| set | with (paper) | with (crfkit) | without (paper) | without (crfkit) |",
        "|---|---|---|---|---|",
    ]
    for n, with_cell in (("3-grm", "t3:3-grm:en"), ("5-grm", "t1:5-grm:obs")):
        p = PAPER["t1"][n]
        w = results.get(with_cell)
        wo = results.get(f"t1:{n}:u")
        lines.append(
            f"| {n} | {p[0]} / {p[1]} | "
            + (
                f"{w['test_error']:.2f}% / {_fmt_m(w['features'])} ({w['support']} support)"
                if w
                else "not run"
            )
            + f" | {p[2]} / {p[3]} | "
            + (f"{wo['test_error']:.2f}% / {_fmt_m(wo['features'])}" if wo else "not run")
            + " |"
        )
    lines += table3(
        results, "t3", "Table 3: test phoneme error, L2 / L1 / elastic net (paper | crfkit)"
    )
    if any(k.startswith("t3f:") for k in results):
        lines += table3(
            results,
            "t3f",
            "Table 3 in Wapiti's feature space (every label pair with every observation): "
            "test phoneme error (paper | crfkit, features)",
            detail=True,
        )
    if any(k.startswith("t2:") for k in results):
        lines += [
            "",
            "Table 2: sparse vs standard forward-backward (OWL-QN rho1 0.5 rho2 1e-5; l2: L-BFGS rho1 0), "
            "Wapiti's feature space; paper: minutes, crfkit: iterations / optimizer seconds / s per iteration",
            "| set | paper l2 / l1-sparse / l1 (sparse/std) | paper % zero of M | crfkit l2 | crfkit l1-sparse | "
            "crfkit l1 | sparse/std (time per iteration) | crfkit % zero of M | test error l2 / l1-sparse / l1 |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for n in ("1-grm", "3-grm-", "3-grm"):
            p = PAPER["t2"][n]
            r = {c: results.get(f"t2:{n}:{c}") for c in ("l2", "l1-sparse", "l1")}
            cell = lambda x: (
                f"{x['iterations']} it / {x['optimizer_s']:.0f} s / {x['s_per_iteration']:.2f} s"  # noqa
                if x
                else "not run"
            )
            a, b = r["l1-sparse"], r["l1"]
            ratio = (
                f"{a['s_per_iteration'] / b['s_per_iteration']:.2f} ({b['s_per_iteration'] / a['s_per_iteration']:.2f}x faster)"
                if a and b
                else "-"
            )
            zero = (
                f"{100 * a['pair_zero_share']:.1f}%"
                if a and a.get("pair_zero_share") is not None
                else "-"
            )
            errs = " / ".join(f"{x['test_error']:.2f}%" if x else "-" for x in r.values())
            lines.append(
                f"| {n} | {p[0]} / {p[1]} / {p[2]} min ({p[1] / p[2]:.2f}) | {p[3]}% | {cell(r['l2'])} | "
                f"{cell(a)} | {cell(b)} | {ratio} | {zero} | {errs} |"
            )
    if any(k.startswith("t4:") for k in results):
        lines += [
            "",
            "Table 4 (Wapiti's feature space, rho1 0.5, rho2 1e-5): iterations / active features / test "
            "error / time / peak RSS (paper | crfkit)",
            "| method | set | paper | crfkit |",
            "|---|---|---|---|",
        ]
        for (alg, n), p in PAPER["t4"].items():
            # SGD-L1's and BCD's rows: their cells against Wapiti (the same space and settings, no
            # dev stopping)
            r = results.get(f"t4:{n}:{alg}") or results.get(
                {"sgd-l1": f"sgdl1:{n}", "bcd": f"bcd:{n}"}.get(alg, "")
            )
            mine = (
                f"{r['iterations']} / {r['active']:,} / {r['test_error']:.2f}% / {r['train_s'] / 60:.1f} min / "
                f"{r['peak_rss_mb']:,.0f} MB ({r['features']:,} candidates)"
                if r
                else "not run"
            )
            lines.append(f"| {alg} | {n} | {p[0]} / {p[1]:,} / {p[2]} / {p[3]} | {mine} |")
    if any(k.startswith("t5:") for k in results):
        lines += [
            "",
            "Table 5 (joint phoneme + stress labels): test error joint / phoneme only (paper | crfkit)",
            "| method | set | paper | crfkit |",
            "|---|---|---|---|",
        ]
        for (alg, n), p in PAPER["t5"].items():
            r = results.get(f"t5:{n}:{alg}")
            mine = (
                f"{r['test_error']:.2f}% / {r['test_error_phoneme']:.2f}% ({r['n_labels']} labels, "
                f"{r['features']:,} candidates, {r['active']:,} active, {r['iterations']} passes, "
                f"{r['train_s'] / 60:.1f} min, {r['peak_rss_mb']:,.0f} MB)"
                if r
                else "not run"
            )
            lines.append(f"| {alg} | {n} | {p} | {mine} |")
    lines += [
        "",
        "Runs (every cell): iterations, features, active, seconds, peak RSS, threads, load",
        "| cell | algorithm | support | iterations | features | active | train s | peak RSS MB | "
        "test error | objective (sum form) | load before |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for k, r in results.items():
        lines.append(
            f"| {k} | {r.get('algorithm', r.get('peer', 'owlqn'))} | {r.get('support', '-')} | "
            f"{r.get('iterations')} | {r.get('features', r.get('n_features'))} | {r.get('active')} | "
            f"{r['train_s']:.1f} | {r['peak_rss_mb']:.0f} | {r['test_error']:.2f}% | "
            f"{r.get('objective_sum') or float('nan'):.2f} | {r.get('load_before', '')} |"
        )
    for n in ("3-grm", "5-grm"):
        w, c = results.get(f"wapiti:{n}"), results.get(f"crfkit:{n}")
        if not (w and c):
            continue
        lines += [
            "",
            f"Against Wapiti at {n} ({w['threads']} thread(s), one run each): crfkit reached "
            f"objective {c['objective_sum']:.2f} (Wapiti's final {w['objective_sum']:.2f}) in {c['train_s']:.1f}s "
            f"against Wapiti's {w['train_s']:.1f}s ({c['train_s'] / w['train_s']:.2f}x; target <= 0.5x), peak "
            f"RSS {c['peak_rss_mb']:.0f} MB against {w['peak_rss_mb']:.0f} MB "
            f"({c['peak_rss_mb'] / w['peak_rss_mb']:.2f}x; target <= 1x), test error {c['test_error']:.2f}% "
            f"against {w['test_error']:.2f}% (target within 0.2 points)",
        ]
    for n in PEER_SETS:
        w, c = results.get(f"wapiti-sgdl1:{n}"), results.get(f"sgdl1:{n}")
        if w and c:
            lines += ["", sgdl1_summary(n, w, c)]
    for n in PEER_SETS:
        for cell in (f"bcd:{n}", f"bcd-joint:{n}", f"bcd-scale:{n}", f"bcd-joint-scale:{n}"):
            w, c = results.get(f"wapiti-bcd:{n}"), results.get(cell)
            if w and c:
                lines += ["", f"[{cell}] " + bcd_summary(n, w, c)]
    for alg, inc, full in (
        ("owlqn", "inc:5-grm:owlqn", "t1:5-grm:obs"),
        ("bcd", "inc:5-grm:u:bcd", "full:5-grm:u:bcd"),
    ):
        a, b = results.get(inc), results.get(full)
        if a and b:
            lines += [
                "",
                f"Incremental vs full ({alg}, {CELLS[inc]['features']}): error {a['test_error']:.2f}% vs "
                f"{b['test_error']:.2f}%, features {a['features']} vs {b['features']}, active {a['active']} vs "
                f"{b['active']}, time {a['train_s']:.1f}s vs {b['train_s']:.1f}s, peak RSS "
                f"{a['peak_rss_mb']:.0f} vs {b['peak_rss_mb']:.0f} MB",
            ]
            for st in a.get("stages", []):
                lines.append(
                    f"  stage {st['stage']} ({', '.join(st['windows'])}): +{st['features_added']} features "
                    f"of {st['candidate_features']} candidates, {st['active']} active, "
                    f"{st['iterations']} iterations, {st['wall_s']:.1f}s"
                )
    return "\n".join(lines)


def stochastic_summary(method: str, unit: str, n: str, w: dict, c: dict) -> str:
    """``method`` (SGD-L1, BCD) against Wapiti's at set ``n``: the ``unit`` (pass, sweep) and time
    at which crfkit first reaches Wapiti's final objective (time: crfkit's whole cell minus the
    units after that one), final objectives, RSS, error."""
    nt = c.get("n_train") or 16007
    objs = [o * nt for o in c["objective_by_iteration"]]
    walls = c["wall_s_by_iteration"]
    hit = next((i for i, o in enumerate(objs) if o <= w["objective_sum"]), None)
    mon = c.get("monitor_s_by_iteration") or [None]
    units = unit + ("es" if unit.endswith("s") else "s")
    if hit is None:
        reach = f"did not reach it in {len(objs)} {units}"
    else:
        t = c["train_s"] - (walls[-1] - walls[hit])
        reach = f"reached it after {unit} {hit + 1} at {t:.1f}s ({t / w['train_s']:.2f}x Wapiti's time; target <= 0.5x"
        if mon[hit] is not None:
            reach += f"; {(t - mon[hit]) / w['train_s']:.2f}x without its per-{unit} objective, {mon[hit]:.1f}s"
        reach += ")"
    return (
        f"{method} against Wapiti at {n} ({w['threads']} thread(s), {w['iterations']} / {c['iterations']} "
        f"{units}, one run each): Wapiti's final objective {w['objective_sum']:.2f} (sum form, computed by "
        f"crfkit from its model: {w.get('wapiti_unmapped', '?')} of its {w.get('wapiti_nonzero', '?')} non-zero "
        f"weights without a crfkit feature) in {w['train_s']:.1f}s; crfkit's final {objs[-1]:.2f} in "
        f"{c['train_s']:.1f}s ({c['train_s'] / w['train_s']:.2f}x); crfkit {reach}; active {c['active']} vs "
        f"{w['active']}; peak RSS {c['peak_rss_mb']:.0f} MB vs {w['peak_rss_mb']:.0f} MB "
        f"({c['peak_rss_mb'] / w['peak_rss_mb']:.2f}x; target <= 1x); test error {c['test_error']:.2f}% vs "
        f"{w['test_error']:.2f}% ({c['test_error'] - w['test_error']:+.2f} points; target within 0.2)"
    )


def sgdl1_summary(n: str, w: dict, c: dict) -> str:
    return stochastic_summary("SGD-L1", "pass", n, w, c)


def bcd_summary(n: str, w: dict, c: dict) -> str:
    return stochastic_summary("BCD", "sweep", n, w, c)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", default="runs/nettalk/results.jsonl")
    ap.add_argument("--work", default=None, help="work directory (default: beside --out)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--cells", default=None, help="comma-separated cell names (default: all, in order)"
    )
    ap.add_argument("--redo", action="store_true")
    ap.add_argument("--report", action="store_true")
    ap.add_argument(
        "--results",
        metavar="FILE.jsonl",
        default=None,
        help="also append each cell's record to FILE.jsonl in the benchmarks/results/ schema "
        "(benchmarks/_results.py); --out also reads such files",
    )
    ap.add_argument(
        "--max-iterations",
        type=int,
        default=None,
        help="iteration limit of every cell (and of Wapiti)",
    )
    ap.add_argument(
        "--cap",
        type=int,
        default=60,
        help="iteration limit of the cells that set none (default 60)",
    )
    ap.add_argument(
        "--dev-every", type=int, default=5, help="dev evaluations every N iterations (default 5)"
    )
    ap.add_argument(
        "--dev-stop",
        type=int,
        default=3,
        help="stop after N dev evaluations without improvement (default 3) and keep the best model",
    )
    ap.add_argument(
        "--wapiti-iterations",
        type=int,
        default=None,
        help="Wapiti's -i (default: its own stopping)",
    )
    ap.add_argument(
        "--t2-iterations",
        type=int,
        default=50,
        help="Table 2: iteration limit of every cell "
        "(the same for the sparse and standard runs of a set; default 50)",
    )
    ap.add_argument(
        "--sgd-passes", type=int, default=10, help="SGD-L1 cells: passes on both sides (default 10)"
    )
    ap.add_argument(
        "--sgd-eta0",
        type=float,
        default=0.8,
        help="SGD-L1 cells: eta0 on both sides (Wapiti's 0.8)",
    )
    ap.add_argument(
        "--sgd-monitor",
        choices=("on", "off"),
        default="on",
        help="SGD-L1 cells: crfkit's objective after every pass (on, default) or after the last only "
        "(off: -p monitor=false, as Wapiti, which computes none)",
    )
    ap.add_argument(
        "--sgd-alpha", type=float, default=0.85, help="SGD-L1 cells: alpha (Wapiti's 0.85)"
    )
    ap.add_argument(
        "--bcd-sweeps", type=int, default=5, help="BCD cells: sweeps on both sides (default 5)"
    )
    ap.add_argument(
        "--rescore",
        action="store_true",
        help="recompute the objective of the Wapiti SGD-L1 cells' "
        "saved models (wapiti_objective) in --out, without training again",
    )
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--warm", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--stop-value", type=float, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.work = args.work or os.path.dirname(os.path.abspath(args.out))
    os.makedirs(args.work, exist_ok=True)
    if args.warm:
        warm_kernels(args.threads)
        return 0
    if args.worker:
        fn = worker_wapiti if CELLS[args.worker].get("peer") else worker_crfkit
        print(json.dumps(fn(args)), flush=True)
        return 0
    results = read_results(args.out)
    if args.report:
        print(report(results))
        return 0
    if args.rescore:
        for name, r in results.items():
            if CELLS.get(name, {}).get("peer") and CELLS[name].get("algorithm") in (
                "sgd-l1",
                "bcd",
            ):
                model = os.path.join(args.work, name.replace(":", "_") + ".wapiti.model")
                r.update(
                    wapiti_objective(
                        model, os.path.join(args.work, "train.txt"), CELLS[name]["features"]
                    )
                )
                print(
                    f"{name}: objective {r['objective_sum']:.2f}, {r['wapiti_unmapped']} weights unmapped",
                    flush=True,
                )
        with open(args.out, "w") as f:
            for r in results.values():
                f.write(json.dumps(r) + "\n")
        return 0
    export(args.work)
    names = args.cells.split(",") if args.cells else list(CELLS)
    for n in names:
        if n not in CELLS:
            ap.error(f"unknown cell {n!r}; cells: {', '.join(CELLS)}")
    print(f"cells: {', '.join(names)}; threads {args.threads}; {load_average()}", flush=True)
    if any(not CELLS[n].get("peer") and (n not in results or args.redo) for n in names):
        # numba's cache, before any timed cell: after a kernel file changed, every kernel recompiles
        # on its first use (crfkit.kernels' digest stamp), which would land inside the first cell's
        # timing and RSS
        t = time.time()
        subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--warm", "--threads", str(args.threads)],
            check=True,
            capture_output=True,
        )
        print(f"kernels warm ({time.time() - t:.0f}s)", flush=True)
    for n in names:
        if n in results and not args.redo:
            print(f"{n}: done already ({args.out})", flush=True)
            continue
        rec = run_cell(n, args, results)
        if rec is not None:
            results[n] = rec
    print(report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
