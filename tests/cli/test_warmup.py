"""``crfkit warmup`` and the compile bookkeeping (issue 46, parts 1 and 3): the steps run, report
their compile time, leave nothing to compile for the commands they cover; timings exclude
compilation; ``CRFKIT_THREADS`` sets the default thread count; idle OpenMP threads sleep."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest

from conftest import crfkit_env, run_cli


def test_warmup_runs_a_step_in_process_and_reports(capsys):
    from crfkit.cli import warmup

    buf = io.StringIO()
    res = warmup.warmup(jobs=1, steps=["estimator"], out=buf)
    assert set(res["steps"]) == {"estimator"} and res["steps"]["estimator"]["error"] is None
    assert "1/1 estimator" in buf.getvalue()
    # a second run compiles nothing: everything it needs is cached now
    again = warmup.warmup(jobs=1, steps=["estimator"], out=io.StringIO())
    assert again["steps"]["estimator"]["kernels"] == 0 and again["compile_s"] == 0.0


def test_warmup_command_line_table(capsys):
    rc, out, err = run_cli(capsys, "warmup", "-j", "1", "--step", "bigram", "--table")
    assert rc == 0, err
    assert "kernel module" in out and "crfkit warmup: done in" in err
    assert "[########################] 1/1 bigram" in err


def test_warmup_is_registered_for_python_dash_m():
    from crfkit.cli import COMMANDS, build_parser

    assert "warmup" in COMMANDS
    args = build_parser("warmup").parse_args(["warmup", "-j", "2", "--step", "sdca"])
    assert args.jobs == 2 and args.step == ["sdca"]


def test_every_training_algorithm_is_in_a_warmup_step():
    from crfkit.cli.warmup import ALGORITHM_STEPS
    from crfkit.training.config import ALGORITHMS

    covered = {a for names in ALGORITHM_STEPS.values() for a in names} | {"lbfgs", "owlqn", "bcd"}
    assert set(ALGORITHMS) <= covered


# ----------------------------------------------------------------------------- timing without compiling
def test_work_clock_leaves_out_compile_time(monkeypatch):
    from crfkit._runtime import compile_notice as cn

    t0 = cn.work_clock()
    monkeypatch.setitem(cn._TIMES, "seconds", cn._TIMES["seconds"] + 100.0)  # "compiled 100 s"
    assert cn.work_clock() - t0 < 0  # the 100 s are not counted
    assert cn.compile_stats()["seconds"] == pytest.approx(cn.compile_seconds())


# ----------------------------------------------------------------------------- threads
def test_default_threads_all_cores_or_crfkit_threads(monkeypatch):
    from crfkit import parallel

    monkeypatch.setattr(parallel, "max_threads", lambda: 2)
    monkeypatch.delenv("CRFKIT_THREADS", raising=False)
    assert parallel.default_threads() == 2
    for value, want in (("1", 1), ("5", 2), ("0", 2), ("x", 2)):
        monkeypatch.setenv("CRFKIT_THREADS", value)
        assert parallel.default_threads() == want


def test_set_threads_default_uses_default_threads(monkeypatch, restore_threads):
    import numba

    from crfkit import parallel

    monkeypatch.setattr(parallel, "default_threads", lambda: 1)
    assert parallel.set_threads(None) == 1 and numba.get_num_threads() == 1
    assert parallel.set_threads(0) == 1


def _env_with(preset: str | None, *unset: str) -> dict:
    """crfkit's test environment without the variables ``unset``, then ``preset`` ("NAME=VALUE")."""
    env = crfkit_env()
    for k in unset:
        env.pop(k, None)
    if preset:
        k, v = preset.split("=")
        env[k] = v
    return env


@pytest.mark.parametrize("preset", [None, "OMP_WAIT_POLICY=ACTIVE", "GOMP_SPINCOUNT=77"])
def test_import_crfkit_makes_idle_openmp_threads_spin_only_briefly(preset):
    """``import crfkit`` sets a short spin before idle OpenMP threads sleep, unless the user set
    either variable (kept as given)."""
    env = _env_with(preset, "OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
    code = (
        "import os, crfkit; "
        "print(os.environ.get('OMP_WAIT_POLICY', '-'), os.environ.get('GOMP_SPINCOUNT', '-'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    assert (
        out
        == {
            None: ["-", "2000"],
            "OMP_WAIT_POLICY=ACTIVE": ["ACTIVE", "-"],
            "GOMP_SPINCOUNT=77": ["-", "77"],
        }[preset]
    )


def test_the_demos_steps_come_first_in_the_install_step():
    # make's install step compiles the demo's kernels (DEMO_STEPS, in parallel), the demo runs, then
    # the full warmup: every step is a known one, and the Makefile names exactly those
    from pathlib import Path

    from crfkit.cli.warmup import DEMO_STEPS, STEPS

    names = [n for n, _ in STEPS]
    assert set(DEMO_STEPS) <= set(names) and len(set(names)) == len(names)
    make = (Path(__file__).resolve().parents[2] / "Makefile").read_text(encoding="utf-8")
    assert "crfkit warmup " + " ".join(f"--step {n}" for n in DEMO_STEPS) in make
    assert "$(BIN)/crfkit demo $(DEMO_ARGS)\n\t@$(MAKE) --no-print-directory $(VENV)/.warm" in make


def test_the_decoding_steps_run_from_a_perceptron_model():
    from crfkit.cli import warmup

    res = warmup.warmup(jobs=1, steps=["tag", "decode"], out=io.StringIO())
    assert all(s["error"] is None for s in res["steps"].values()), res["steps"]


def test_the_train_step_covers_the_demos_float32_lbfgs_pairs():
    # the demo's model (456k features) keeps its L-BFGS pairs in float32 ("auto"), the toy corpus's
    # in float64: the train step must load both two-loop recursions, or the demo compiles one
    # (0.8 s after the install step, seen on a fresh clone)
    from crfkit.cli import warmup
    from crfkit.kernels import vec

    res = warmup.warmup(jobs=1, steps=["train"], out=io.StringIO())
    assert res["steps"]["train"]["error"] is None, res["steps"]
    dtypes = {str(sig[1].dtype) for sig in vec.two_loop.signatures}
    assert {"float32", "float64"} <= dtypes, vec.two_loop.signatures


@pytest.mark.parametrize(
    "argv, preset, expect",
    [
        (["tag", "--help"], None, "1"),
        (["tag", "--help"], "OMP_NUM_THREADS=2", "-"),  # the user's count for OpenBLAS is kept
        (["tag", "--help"], "OPENBLAS_NUM_THREADS=2", "2"),
        (["info", "--help"], None, "-"),  # only the tagging process: training calls BLAS
    ],
)
def test_crfkit_tag_process_starts_no_openblas_threads(argv, preset, expect):
    """``python -m crfkit tag`` sets ``OPENBLAS_NUM_THREADS=1`` before numpy loads (its idle
    OpenBLAS threads spun for 0.1 s of CPU in a 0.5 s tagging process), unless a count was set;
    threadpoolctl then reports one OpenBLAS thread."""
    env = _env_with(preset, "OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")
    code = (
        "import os, sys, contextlib, io\n"
        "from crfkit.__main__ import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        f"    main({argv!r})\n"
        "import numpy, threadpoolctl\n"
        "blas = [p['num_threads'] for p in threadpoolctl.threadpool_info()\n"
        "        if p.get('internal_api') == 'openblas']\n"
        "print(os.environ.get('OPENBLAS_NUM_THREADS', '-'), blas)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.split(maxsplit=1)
    assert out[0] == expect, out
    if expect == "1":
        assert out[1].strip() in ("[1]", "[]"), out  # [] where numpy's BLAS is not OpenBLAS


def test_the_tag_step_builds_the_kernels_compiled_ahead_of_time(capsys, monkeypatch, tmp_path):
    """``crfkit warmup --step tag`` builds the module into the folder crfkit loads it from and
    says where; the tag step's JIT kernels still compile with it there (the steps run with
    CRFKIT_NO_AOT=1), and the variable is as it was afterwards."""
    from crfkit._runtime import aot

    monkeypatch.setenv("CRFKIT_AOT_DIR", str(tmp_path))
    monkeypatch.delenv("CRFKIT_NO_AOT", raising=False)
    aot.forget()
    try:
        rc, _, err = run_cli(capsys, "warmup", "-j", "1", "--step", "tag")
        assert rc == 0, err
        assert f"tagging kernels compiled ahead of time: {aot.path()}" in err
        assert aot.path().is_file() and aot.load() is not None
        import os

        assert "CRFKIT_NO_AOT" not in os.environ
    finally:
        aot.forget()


def test_a_failed_build_of_the_compiled_kernels_is_said_and_is_not_a_failed_step(
    capsys, monkeypatch, tmp_path
):
    from crfkit._runtime import aot
    from crfkit.kernels import aot as aot_build

    def no_compiler(directory=None):
        raise RuntimeError("no C compiler")

    monkeypatch.setattr(aot_build, "ensure_built", no_compiler)
    monkeypatch.setenv("CRFKIT_AOT_DIR", str(tmp_path))
    aot.forget()
    try:
        rc, _, err = run_cli(capsys, "warmup", "-j", "1", "--step", "tag")
        assert rc == 0, err
        assert "were not built (no C compiler)" in err and "FAILED" not in err
        assert "tagging kernels compiled ahead of time: not built" in err
    finally:
        aot.forget()
