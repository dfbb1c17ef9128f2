"""crfkit.memtrim's code-page release (LLVM's pages handed back after kernels load)."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from conftest import random_sequences
from crfkit import memtrim

linux_proc = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc (Linux)")


def test_code_mappings_lists_read_only_mappings_of_the_named_libraries(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text(
        "7f0000000000-7f0000010000 r--p 00000000 08:01 11 /venv/llvmlite/binding/libllvmlite.so\n"
        "7f0000010000-7f0000050000 r-xp 00010000 08:01 11 /venv/llvmlite/binding/libllvmlite.so\n"
        "7f0000050000-7f0000060000 rw-p 00050000 08:01 11 /venv/llvmlite/binding/libllvmlite.so\n"
        "7f0000060000-7f0000070000 r-xp 00000000 08:01 12 /usr/lib/libc.so.6\n"
        "7f0000070000-7f0000080000 rw-p 00000000 00:00 0 \n"
        "7f0000080000-7f0000090000 r-xp 00000000 08:01 13 /path with space/libllvmlite.so\n")
    got = memtrim.code_mappings(str(maps))
    assert got == [(0x7f0000000000, 0x7f0000010000), (0x7f0000010000, 0x7f0000050000),
                   (0x7f0000080000, 0x7f0000090000)]
    assert memtrim.code_mappings(str(maps), libraries=("libc.so",)) == [(0x7f0000060000, 0x7f0000070000)]
    assert memtrim.code_mappings(str(tmp_path / "missing")) == []


def _llvm_rss_kb() -> int:
    tot, cur = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            if "-" in line.split(" ", 1)[0] and ":" not in line.split(" ", 1)[0]:
                cur = "libllvmlite" in line
            elif cur and line.startswith("Rss:"):
                tot += int(line.split()[1])
    return tot


@linux_proc
def test_release_code_pages_keeps_numba_working():
    """The release hands back pages of LLVM's code; compiling and running kernels afterwards reads them
    back from the file (nothing it holds changes)."""
    import numba
    from crfkit.kernels.vec import all_finite
    assert all_finite(np.ones(3))
    done = memtrim.release_code_pages()
    assert done >= 0
    if done:
        assert done == sum(b - a for a, b in memtrim.code_mappings())
    before = _llvm_rss_kb()

    @numba.njit
    def fresh(x):       # a new compilation: LLVM's optimiser and code generator run again
        return np.sqrt(x).sum() + 1.0
    assert fresh(np.full(4, 4.0)) == 9.0
    assert all_finite(np.array([1.0, np.inf])) is False
    assert memtrim.release_code_pages() == done
    assert _llvm_rss_kb() <= max(before, _llvm_rss_kb())      # (pages shared with another process stay)


def test_release_code_pages_without_madvise(monkeypatch):
    monkeypatch.setattr(memtrim, "_madvise", False)
    assert memtrim.release_code_pages() == 0


def test_warm_compiler_loads_a_kernel_then_releases(monkeypatch):
    calls = []
    monkeypatch.setattr(memtrim, "release_code_pages", lambda: calls.append(1) or 0)
    memtrim.warm_compiler()
    from crfkit.kernels.vec import all_finite
    assert len(all_finite.signatures) >= 1 and calls == [1]


def test_training_releases_code_pages_and_warms_the_compiler(monkeypatch):
    import crfkit.train as train_mod
    calls = []
    monkeypatch.setattr(memtrim, "release_code_pages", lambda: calls.append("pages") or 0)
    monkeypatch.setattr(memtrim, "warm_compiler", lambda: calls.append("warm"))
    X, Y = random_sequences(np.random.default_rng(3), 10)
    res = train_mod.train(X, Y, max_iterations=3)
    # before the data is encoded, before the objective allocates, after every iteration
    assert calls[:2] == ["pages", "warm"] and calls.count("pages") == 1 + res.model.meta["iterations"]
