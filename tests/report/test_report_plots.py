"""crfkit.report.plots: the training curves, the transition heat map and the confusion matrix
(matplotlib figures: their axes, labels and scales), and that matplotlib is imported only there."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("matplotlib")

import crfkit  # noqa: E402
from crfkit.errors import CrfkitError  # noqa: E402
from crfkit.report import plot_confusion, plot_training, plot_transitions, png_bytes  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _records(n=12, dev=True):
    out = []
    for i in range(1, n + 1):
        r = {
            "algorithm": "lbfgs",
            "iteration": i,
            "effective_passes": i + 0.5,
            "wall_s": 0.3 * i,
            "objective": 1.0 + 10.0 / i,
            "grad_inf_norm": 1.0 / i,
            "grad_norm": 2.0 / i,
            "nnz": 100,
        }
        if dev and i % 3 == 0:
            r["dev_accuracy"] = 90.0 + i / 2
            r["dev_f1"] = 85.0 + i / 2
        out.append(r)
    return out


def _labels(fig):
    return [(ax.get_xlabel(), ax.get_ylabel(), ax.get_yscale()) for ax in fig.axes]


def test_training_curves_rows_and_axes():
    fig = plot_training(_records())
    axes = fig.axes
    assert len(axes) == 6  # objective, gradient, scores; against iterations and seconds
    xl = [ax.get_xlabel() for ax in axes]
    assert xl == ["iteration", "seconds"] * 3
    yl = [ax.get_ylabel() for ax in axes]
    assert yl == ["objective f(w)"] * 2 + ["gradient norm"] * 2 + ["score (%)"] * 2
    assert [ax.get_yscale() for ax in axes] == ["log"] * 4 + ["linear"] * 2
    # the gradient rows carry both norms; the dev rows the 4 scored iterations of each score
    assert sorted(ln.get_label() for ln in axes[2].get_lines()) == ["grad_inf_norm", "grad_norm"]
    dev = {ln.get_label(): ln for ln in axes[4].get_lines()}
    assert set(dev) == {"dev_accuracy", "dev_f1"}
    assert list(dev["dev_f1"].get_xdata()) == [3.0, 6.0, 9.0, 12.0]
    secs = axes[1].get_lines()[0].get_xdata()
    assert np.allclose(secs, [0.3 * i for i in range(1, 13)])


def test_training_curves_with_fstar_and_duality_gap():
    recs = _records(dev=False)
    for r in recs:
        r["duality_gap"] = r["objective"] - 1.0
    fig = plot_training(recs, fstar=1.0, title="run")
    axes = fig.axes
    assert len(axes) == 6  # f - f*, gradient, duality gap
    assert "f* = 1" in axes[0].get_ylabel()
    assert axes[0].get_yscale() == "log"
    y = axes[0].get_lines()[0].get_ydata()
    assert np.allclose(y, [10.0 / i for i in range(1, 13)])
    assert axes[4].get_ylabel() == "duality gap"
    assert fig._suptitle.get_text() == "run"


def test_training_curves_from_a_trace_file_an_estimator_and_stage_records(tmp_path):
    p = tmp_path / "t.jsonl"
    recs = _records(dev=False)
    lines = [json.dumps(r) for r in recs]
    lines.insert(
        5, json.dumps({"record": "stage", "stage": 1, "objective": 0, "effective_passes": 0})
    )
    p.write_text("\n".join(lines) + "\n")
    fig = plot_training(p)
    assert len(fig.axes[0].get_lines()[0].get_xdata()) == len(recs)
    X = [[{"w": "a"}, {"w": "b"}], [{"w": "b"}]] * 3
    y = [["A", "B"], ["B"]] * 3
    crf = crfkit.CRF(max_iterations=8).fit(X, y)
    fig = plot_training(crf)  # history_: "seconds" instead of "wall_s"
    n = len(crf.history_)
    assert len(fig.axes[1].get_lines()[0].get_xdata()) == n
    assert fig.axes[1].get_xlabel() == "seconds"
    with pytest.raises(CrfkitError, match="no iteration records"):
        plot_training([])
    with pytest.raises(CrfkitError, match="no such trace file"):
        plot_training(tmp_path / "missing.jsonl")


def test_objective_not_positive_gets_a_linear_axis():
    recs = _records(dev=False)
    for r in recs:
        r["objective"] -= 5.0
    assert plot_training(recs).axes[0].get_yscale() == "linear"


def test_transition_heat_map():
    X = [[{"w": "a"}, {"w": "b"}, {"w": "c"}]] * 5
    y = [["O", "B-NP", "I-NP"]] * 5
    crf = crfkit.CRF(max_iterations=10).fit(X, y)
    ex = crf.explain_weights()
    fig = plot_transitions(ex)
    ax = fig.axes[0]
    assert ax.get_xlabel() == "label" and ax.get_ylabel() == "previous label"
    assert [t.get_text() for t in ax.get_xticklabels()] == ex.labels
    assert [t.get_text() for t in ax.get_yticklabels()] == ex.labels
    data = ax.images[0].get_array()
    m = ex.transition_matrix()
    assert np.array_equal(np.ma.getmaskarray(data), np.isnan(m))
    assert np.allclose(data.filled(0)[~np.isnan(m)], m[~np.isnan(m)])
    assert len(fig.axes) == 2  # the colour bar
    # a model works too, and the cells are annotated
    assert len(plot_transitions(crf.model_).axes[0].texts) == np.count_nonzero(m[~np.isnan(m)])


def test_confusion_matrix_and_png(tmp_path):
    counts = np.array([[5, 1, 0], [0, 3, 2], [0, 0, 0]])
    fig = plot_confusion(["O", "B-NP", "I-NP"], ["O", "B-NP", "I-NP"], counts)
    ax = fig.axes[0]
    assert ax.get_xlabel() == "predicted label" and ax.get_ylabel() == "gold label"
    share = ax.images[0].get_array()
    assert math.isclose(share[0, 0], 5 / 6) and math.isclose(share[1, 2], 0.4)
    assert (np.asarray(share[2]) == 0).all()  # a label without gold tokens: no division by zero
    assert sorted(t.get_text() for t in ax.texts) == ["1", "2", "3", "5"]
    data = png_bytes(fig)
    assert data.startswith(PNG_MAGIC)
    assert fig._repr_png_().startswith(PNG_MAGIC)  # what Jupyter shows without pyplot
    (tmp_path / "c.png").write_bytes(data)
    assert (tmp_path / "c.png").stat().st_size == len(data)


def test_matplotlib_is_imported_only_when_drawing():
    code = (
        "import sys, crfkit, crfkit.report, crfkit.cli; "
        "from crfkit.cli import build_parser; build_parser(); "
        "assert 'matplotlib' not in sys.modules, 'imported'"
    )
    env_path = str(ROOT / "src")
    r = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
