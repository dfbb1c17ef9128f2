"""Round trips through the real peers, when they are built (``CRFKIT_PEERS_BIN``: the bin dir of
``crf_test`` and ``wapiti``; skipped otherwise): small crfkit models written as CRF++ and Wapiti
models must tag in ``crf_test`` / ``wapiti label`` with crfkit's labels and marginals, and read back
the same.  The CoNLL-2000 run is benchmarks/peers/interop_crfpp_wapiti.py."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from test_interop_crfpp import crfkit_decode, make_model, random_rows

from crfkit.interop import crfpp, wapiti
from crfkit.model import CRFModel

BIN = Path(os.environ.get("CRFKIT_PEERS_BIN", "/work/wt/peers/bin"))
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (BIN / "crf_test").exists() or not (BIN / "wapiti").exists(),
        reason="CRF++ / Wapiti not built (set CRFKIT_PEERS_BIN)",
    ),
]


def _column_file(path: Path, sents) -> None:
    path.write_text("".join("".join(" ".join(t) + "\n" for t in s) + "\n" for s in sents))


def _tokens(text: str, sep="\t"):
    return [
        ln.split(sep)
        for ln in text.splitlines()
        if ln and not (ln.startswith("# ") and sep not in ln)
    ]


def test_crf_test_tags_an_exported_model_as_crfkit(tmp_path):
    rng = np.random.default_rng(21)
    model = make_model(rng)
    model = CRFModel(model.space, model.weights.astype(np.float32).astype(np.float64), model.meta)
    sents = random_rows(rng, 20, 6)
    data = tmp_path / "test.txt"
    _column_file(data, sents)
    crfpp.write(model, tmp_path / "m.crfpp")
    out = subprocess.run(
        [BIN / "crf_test", "-v2", "-m", tmp_path / "m.crfpp", data],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    toks = _tokens(out)
    k = 0
    for s in sents:
        ids, marg = crfkit_decode(model, s)
        for t, i in enumerate(ids):
            f = toks[k]
            assert f[2].rsplit("/", 1)[0] == model.labels[i]
            got = {lab: float(p) for lab, p in (x.rsplit("/", 1) for x in f[3:])}
            assert max(abs(got[lab] - marg[t, j]) for j, lab in enumerate(model.labels)) < 2e-6
            k += 1
    assert k == len(toks)


def test_wapiti_label_tags_an_exported_model_as_crfkit(tmp_path):
    rng = np.random.default_rng(22)
    model = make_model(
        rng, templates="u00:%x[0,0]\nU01:%x[-1,0]/%x[0,0]\n*02:%x[1,1]\nb01:%x[-1,1]\nb\n"
    )
    sents = random_rows(rng, 20, 6)
    data = tmp_path / "test.txt"
    _column_file(data, sents)
    wapiti.write(model, tmp_path / "m.wapiti")
    out = subprocess.run(
        [BIN / "wapiti", "label", "-m", tmp_path / "m.wapiti", data],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    got = [f[-1] for f in _tokens(out)]
    want = [model.labels[i] for s in sents for i in crfkit_decode(model, s)[0]]
    assert got == want
    back = wapiti.read(tmp_path / "m.wapiti")
    assert [back.labels[i] for s in sents for i in crfkit_decode(back, s)[0]] == want
