"""``crfkit dump`` and ``crfkit prune``: round trips against the model's own feature tables."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import run_cli as run
from crfkit import cli
from crfkit.cli.info import prune
from crfkit.datasets import synthetic
from crfkit.model import CRFModel


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("dump")
    synthetic.write(d / "train.txt", 50, seed=3)
    synthetic.write(d / "test.txt", 10, seed=4)
    m = d / "m.crfkit"
    assert (
        cli.main(
            [
                "train",
                str(d / "train.txt"),
                "-m",
                str(m),
                "--max-iterations",
                "15",
                "-q",
                "--c1",
                "0.05",
            ]
        )
        == 0
    )
    return {"dir": d, "model": m, "test": d / "test.txt"}


def parse_text(text):
    sec, out = None, {"labels": [], "transitions": {}, "state": {}}
    for line in text.splitlines():
        if line.startswith("# "):
            continue
        if line.startswith("["):
            sec = line[1 : line.index("]")]
            continue
        f = line.split("\t")
        if sec == "labels":
            out["labels"].append(f[1])
        else:
            out[sec][tuple(f[:-1])] = float(f[-1])
    return out


def test_dump_text_and_json_round_trip(data, capsys):
    model = CRFModel.load(data["model"])
    rc, out, err = run(capsys, "dump", "-m", data["model"])
    assert rc == 0, err
    got = parse_text(out)
    assert got["labels"] == model.labels
    tf = model.transition_features()
    assert got["transitions"].keys() == tf.keys()
    assert all(abs(got["transitions"][k] - v) < 5e-7 for k, v in tf.items())
    sf = model.state_features()
    assert got["state"].keys() == sf.keys()
    assert all(abs(got["state"][k] - v) < 5e-7 for k, v in sf.items())
    rc, out, err = run(capsys, "dump", "-m", data["model"], "--json")
    j = json.loads(out)
    assert j["labels"] == model.labels and j["counts"]["state"] == model.space.n_state
    assert {(r["attribute"], r["label"]): r["weight"] for r in j["state"]} == sf
    assert {(r["from"], r["to"]): r["weight"] for r in j["transitions"]} == tf


def test_dump_filters_sorts_and_top(data, capsys):
    model = CRFModel.load(data["model"])
    sf = model.state_features()
    rc, out, _ = run(capsys, "dump", "-m", data["model"], "--section", "state", "--top", "7")
    rows = parse_text(out)["state"]
    want = sorted(sf.items(), key=lambda kv: -abs(kv[1]))[:7]
    assert list(rows) == [k for k, _ in want]
    rc, out, _ = run(
        capsys,
        "dump",
        "-m",
        data["model"],
        "--attribute",
        "^U00:",
        "--sort",
        "weight",
        "--label",
        "^B-NP$",
        "--section",
        "state",
    )
    rows = parse_text(out)["state"]
    want = {k: v for k, v in sf.items() if k[0].startswith("U00:") and k[1] == "B-NP"}
    assert set(rows) == set(want) and len(rows) > 0
    assert list(rows.values()) == sorted(rows.values(), reverse=True)
    assert parse_text(out)["labels"] == []
    rc, _, err = run(capsys, "dump", "-m", data["model"], "--attribute", "(")
    assert rc == 2 and "regular expression" in err
    rc, _, err = run(capsys, "dump", "-m", data["model"], "--section", "nope")
    assert rc == 2 and "unknown section" in err


def test_prune_threshold_and_top(data, tmp_path, capsys):
    model = CRFModel.load(data["model"])
    ws = model.weights[: model.space.n_state]
    thr = float(np.quantile(np.abs(ws[ws != 0]), 0.5))
    out = tmp_path / "p.crfkit"
    rc, text, err = run(capsys, "prune", "-m", data["model"], "-o", out, "--threshold", thr)
    assert rc == 0, err
    assert "dropped" in text
    small = CRFModel.load(out)
    assert all(abs(v) >= thr for v in small.state_features().values())
    assert small.state_features() == {
        k: v for k, v in model.state_features().items() if abs(v) >= thr
    }
    assert small.transition_features() == {
        k: v for k, v in model.transition_features().items() if v != 0
    }
    # it tags as the original with the small weights set to 0
    ref = CRFModel(
        model.space,
        np.where(
            (np.arange(len(model.weights)) < model.space.n_state) & (np.abs(model.weights) < thr),
            0.0,
            model.weights,
        ),
    )
    X = [[[a for a in x] for x in seq] for seq in [[["U00:the", "U12:DT"], ["U00:cat", "U12:NN"]]]]
    assert small.tag(X) == ref.tag(X)
    rc, _, err = run(capsys, "tag", "-m", out, data["test"])
    assert rc == 0, err
    new, dropped = prune(model, top=5)
    assert np.count_nonzero(new.weights[: new.space.n_state]) == 5
    top5 = sorted(model.state_features().items(), key=lambda kv: -abs(kv[1]))[:5]
    assert new.state_features() == dict(top5)
    with pytest.raises(SystemExit):  # one of --threshold / --top is required (argparse)
        cli.main(["prune", "-m", str(data["model"]), "-o", str(out)])
    X2 = [[["U00:the", "U12:DT"]]]
    assert prune(model, threshold=0.0)[0].tag(X2) == model.tag(X2)
