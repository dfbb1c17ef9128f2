"""Training must not destroy good work: a diverged run, a model path that fails late (a directory,
no permission, a full disk), checkpoints that cannot be written, the permissions of new and replaced
files, symbolic links, and the temporary files of killed writers (``crfkit.io.atomic`` under
``crfkit train`` and ``CRFModel.save``)."""

from __future__ import annotations

import errno
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import no_temp_files as _no_temp_files
from conftest import run_cli as run
from crfkit import cli
from crfkit.datasets import synthetic
from crfkit.errors import OutputError
from crfkit.io import atomic
from crfkit.io.atomic import check_writable
from crfkit.model import CRFModel
from crfkit.training import checkpoint as ckpt

ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("hardening")
    synthetic.write(d / "train.txt", 40, seed=1)
    good = d / "good.crfkit"
    assert (
        cli.main(["train", str(d / "train.txt"), "-m", str(good), "--max-iterations", "10", "-q"])
        == 0
    )
    return {"dir": d, "train": d / "train.txt", "good": good}


@pytest.fixture
def good(data, tmp_path) -> Path:
    """A private copy of a good model (bytes and a mode of 0644)."""
    p = tmp_path / "good.crfkit"
    p.write_bytes(data["good"].read_bytes())
    os.chmod(p, 0o644)
    return p


@pytest.fixture
def umask():
    """Set the process umask for one test (restored after)."""
    saved = []

    def set_(mask: int) -> None:
        saved.append(os.umask(mask))

    yield set_
    if saved:
        os.umask(saved[0])


# ============================================================== diverged training


def test_cli_diverged_run_keeps_the_previous_model_and_fails(data, good, capsys):
    before = good.read_bytes()
    rc, out, err = run(
        capsys,
        "train",
        data["train"],
        "-m",
        good,
        "-a",
        "sg",
        "-p",
        "eta=1e300",
        "--l2",
        "0",
        "--max-iterations",
        "3",
    )
    assert rc == cli.EXIT_ERROR
    assert "diverged" in err and "eta=1e+300 is too large" in err and "try eta=0.1" in err
    assert "left as it was" in err and "model:" not in out
    assert good.read_bytes() == before
    CRFModel.load(good)  # still the good, loadable model
    assert _no_temp_files(good.parent)


def test_diverged_run_writes_no_checkpoint_and_traces_the_step(data, tmp_path, capsys):
    ck, tr, m = tmp_path / "c.ckpt", tmp_path / "t.jsonl", tmp_path / "m.crfkit"
    rc, out, err = run(
        capsys,
        "train",
        data["train"],
        "-m",
        m,
        "-a",
        "sg",
        "-p",
        "eta=1e300",
        "--l2",
        "0",
        "--max-iterations",
        "3",
        "--checkpoint",
        ck,
        "--checkpoint-every",
        "1",
        "--trace",
        tr,
        "-q",
    )
    assert rc == cli.EXIT_ERROR and "diverged" in err
    assert not ck.exists() and not m.exists()
    import json

    recs = [json.loads(x) for x in tr.read_text().splitlines()]
    assert recs[-1]["status"] == "diverged" and recs[-1]["iteration"] == 1


# ============================================================== late failures


def test_model_path_that_is_a_directory_is_refused_before_training(
    data, tmp_path, capsys, monkeypatch
):
    d = tmp_path / "out"
    d.mkdir()
    called = []
    monkeypatch.setattr("crfkit.pipeline.train_columns", lambda *a, **k: called.append(1))
    rc, out, err = run(capsys, "train", data["train"], "-m", d, "-q")
    assert rc == cli.EXIT_ERROR and not called
    assert f"cannot write the model {d}: it is a directory" in err and ".tmp-" not in err


def test_unwritable_directory_is_refused_before_training(data, tmp_path, capsys, monkeypatch):
    called = []
    monkeypatch.setattr("crfkit.pipeline.train_columns", lambda *a, **k: called.append(1))

    def denied(d, base):
        raise PermissionError(errno.EACCES, "Permission denied", os.path.join(d, ".tmp-x"))

    monkeypatch.setattr(atomic, "_create_tmp", denied)
    m = tmp_path / "m.crfkit"
    rc, out, err = run(capsys, "train", data["train"], "-m", m, "-q")
    assert rc == cli.EXIT_ERROR and not called
    assert (
        f"cannot write the model {m}: cannot create files in {tmp_path} (Permission denied)" in err
    )


@pytest.mark.skipif(ROOT, reason="root writes into read-only directories")
def test_read_only_directory_really_refused(data, tmp_path, capsys):
    ro = tmp_path / "ro"
    ro.mkdir()
    os.chmod(ro, 0o555)
    try:
        rc, out, err = run(capsys, "train", data["train"], "-m", ro / "m.crfkit", "-q")
    finally:
        os.chmod(ro, 0o755)
    assert rc == cli.EXIT_ERROR and "Permission denied" in err and "iter" not in err


@pytest.mark.skipif(ROOT, reason="root may write read-only files")
def test_read_only_model_file_is_not_replaced(good, data, capsys):
    os.chmod(good, 0o444)
    before = good.read_bytes()
    rc, out, err = run(capsys, "train", data["train"], "-m", good, "-q")
    assert rc == cli.EXIT_ERROR and "read-only" in err and good.read_bytes() == before


def test_full_disk_names_the_model_and_keeps_the_previous_one(data, good, capsys, monkeypatch):
    before = good.read_bytes()

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    rc, out, err = run(capsys, "train", data["train"], "-m", good, "-q", "--max-iterations", "2")
    assert rc == cli.EXIT_ERROR
    assert f"cannot write the model {good}: No space left on device" in err and ".tmp-" not in err
    assert good.read_bytes() == before and _no_temp_files(good.parent)


def test_failed_checkpoint_write_is_a_warning(data, tmp_path, capsys, monkeypatch):
    real_save = ckpt.save
    calls = []

    def flaky(path, *a, **k):
        calls.append(1)
        if len(calls) == 1:  # the first checkpoint hits a full disk, the next ones work
            raise OutputError(
                f"cannot write the checkpoint {path}: No space left on device",
                path=str(path),
                errno=errno.ENOSPC,
            )
        return real_save(path, *a, **k)

    monkeypatch.setattr(ckpt, "save", flaky)
    m, ck = tmp_path / "m.crfkit", tmp_path / "c.ckpt"
    rc, out, err = run(
        capsys,
        "train",
        data["train"],
        "-m",
        m,
        "--max-iterations",
        "4",
        "--checkpoint",
        ck,
        "--checkpoint-every",
        "2",
    )
    assert rc == 0, err
    assert "warning: checkpoint at iteration 2 not written (cannot write the checkpoint" in err
    assert "training goes on" in err
    CRFModel.load(m)
    assert ckpt.load(ck).iteration == 4


def test_checkpoint_path_is_checked_before_training(data, tmp_path, capsys):
    d = tmp_path / "ckdir"
    d.mkdir()
    rc, out, err = run(
        capsys, "train", data["train"], "-m", tmp_path / "m.crfkit", "--checkpoint", d, "-q"
    )
    assert rc == cli.EXIT_ERROR and "cannot write the checkpoint" in err and "directory" in err
    assert not (tmp_path / "m.crfkit").exists()


def test_the_model_saved_after_a_failure_can_be_written_from_the_checkpoint(
    data, tmp_path, capsys, monkeypatch
):
    # the advice the CLI gives after a failed save: resume the final checkpoint, nothing is
    # retrained
    m, ck = tmp_path / "m.crfkit", tmp_path / "c.ckpt"
    real = CRFModel.save

    def fail(self, path):
        raise OutputError(
            f"cannot write the file {path}: No space left on device",
            path=str(path),
            errno=errno.ENOSPC,
        )

    monkeypatch.setattr(CRFModel, "save", fail)
    rc, out, err = run(
        capsys, "train", data["train"], "-m", m, "--max-iterations", "3", "--checkpoint", ck, "-q"
    )
    assert rc == cli.EXIT_ERROR and "--resume it" in err and str(ck) in err
    monkeypatch.setattr(CRFModel, "save", real)
    rc, out, err = run(
        capsys, "train", data["train"], "-m", m, "--max-iterations", "3", "--resume", ck, "-q"
    )
    assert rc == 0 and "3 iterations" in out
    ref = tmp_path / "ref.crfkit"
    assert (
        cli.main(["train", str(data["train"]), "-m", str(ref), "--max-iterations", "3", "-q"]) == 0
    )
    assert np.array_equal(CRFModel.load(m).weights, CRFModel.load(ref).weights)


# ============================================================== permissions


@pytest.mark.parametrize("mask,mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_new_model_and_checkpoint_follow_the_umask(data, tmp_path, capsys, umask, mask, mode):
    umask(mask)
    m, ck = tmp_path / "m.crfkit", tmp_path / "c.ckpt"
    rc, out, err = run(
        capsys, "train", data["train"], "-m", m, "--max-iterations", "2", "--checkpoint", ck, "-q"
    )
    assert rc == 0, err
    assert stat.S_IMODE(m.stat().st_mode) == mode
    assert stat.S_IMODE(ck.stat().st_mode) == mode


def test_replaced_model_keeps_its_mode(good, umask):
    umask(0o022)
    os.chmod(good, 0o640)
    CRFModel.load(good).save(good)
    assert stat.S_IMODE(good.stat().st_mode) == 0o640
    os.chmod(good, 0o604)
    CRFModel.load(good).save(good)
    assert stat.S_IMODE(good.stat().st_mode) == 0o604


# ============================================================== symlinks


def test_symlink_is_written_through(good, tmp_path):
    other = tmp_path / "store"
    other.mkdir()
    target = other / "real.crfkit"
    target.write_bytes(good.read_bytes())
    os.chmod(target, 0o640)
    link = tmp_path / "link.crfkit"
    link.symlink_to(os.path.relpath(target, tmp_path))
    m = CRFModel.load(good)
    m.weights[:] = 0.25
    m.save(link)
    assert link.is_symlink() and os.readlink(link) == os.path.relpath(target, tmp_path)
    assert np.allclose(CRFModel.load(target).weights, 0.25)
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert _no_temp_files(tmp_path, other)


def test_chain_of_links_and_cli(data, good, tmp_path, capsys):
    l1, l2 = tmp_path / "l1", tmp_path / "l2"
    l2.symlink_to(good)
    l1.symlink_to(l2)
    rc, out, err = run(capsys, "train", data["train"], "-m", l1, "-q", "--max-iterations", "2")
    assert rc == 0, err
    assert l1.is_symlink() and l2.is_symlink() and not good.is_symlink()
    assert CRFModel.load(good).meta["iterations"] == 2


def test_dangling_and_looping_links_are_refused(good, tmp_path, capsys, data):
    dangling = tmp_path / "dangling.crfkit"
    dangling.symlink_to(tmp_path / "missing" / "x.crfkit")
    with pytest.raises(OutputError, match="symbolic link to .*which does not exist"):
        CRFModel.load(good).save(dangling)
    assert dangling.is_symlink() and not (tmp_path / "missing").exists()
    rc, out, err = run(capsys, "train", data["train"], "-m", dangling, "-q")
    assert rc == cli.EXIT_ERROR and "dangling" in err
    a, b = tmp_path / "a", tmp_path / "b"
    a.symlink_to(b)
    b.symlink_to(a)
    with pytest.raises(OutputError, match="cannot be resolved"):
        check_writable(a)
    assert a.is_symlink() and b.is_symlink()


# ============================================================== orphans of kill -9

_KILLED_WRITER = r"""
import os, signal, sys
from crfkit.io.atomic import atomic_file
with atomic_file(sys.argv[1]) as f:
    f.write(b"half a model")
    f.flush()
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_orphan_of_a_killed_writer_is_removed_on_the_next_save(good, tmp_path):
    before = good.read_bytes()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    p = subprocess.run([sys.executable, "-c", _KILLED_WRITER, str(good)], env=env)
    assert p.returncode == -signal.SIGKILL
    orphans = [n for n in os.listdir(tmp_path) if n.startswith(".tmp-")]
    assert len(orphans) == 1 and good.read_bytes() == before
    CRFModel.load(good).save(good)
    assert _no_temp_files(tmp_path)


def test_only_dead_or_stale_orphans_of_that_path_are_removed(good, tmp_path):
    host = atomic._host_tag()
    live = os.getppid()  # alive: our parent
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    ).stdout.strip()
    names = {
        "dead": f".tmp-{host}-{dead}-abcdefgh-good.crfkit",
        "live": f".tmp-{host}-{live}-abcdefgh-good.crfkit",
        "other_host_fresh": f".tmp-00000000-{dead}-abcdefgh-good.crfkit",
        "other_host_old": f".tmp-00000000-{live}-ijklmnop-good.crfkit",
        "other_path": f".tmp-{host}-{dead}-abcdefgh-other.crfkit",
        "legacy": ".tmp-k2j4h5g6",
    }
    for key, n in names.items():
        (tmp_path / n).write_bytes(b"x")
    old = time.time() - 2 * atomic.STALE_SECONDS
    os.utime(tmp_path / names["other_host_old"], (old, old))
    CRFModel.load(good).save(good)
    left = {k for k, n in names.items() if (tmp_path / n).exists()}
    assert left == {"live", "other_host_fresh", "other_path", "legacy"}
