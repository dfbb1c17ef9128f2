"""crfkit.memtrim's code-page release (LLVM's pages handed back after kernels load) and the packed
attribute table training now keeps (StringTable.of, and the checkpoint fingerprint over it)."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import mapping_rss_kb, random_sequences
from crfkit import memtrim
from crfkit._runtime import blas, code_pages, libc, malloc
from crfkit.features.space import StringTable, pack_strings

linux_proc = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc (Linux)")


def test_code_mappings_lists_read_only_mappings_of_the_named_libraries(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text(
        "7f0000000000-7f0000010000 r--p 00000000 08:01 11 /venv/llvmlite/binding/libllvmlite.so\n"
        "7f0000010000-7f0000050000 r-xp 00010000 08:01 11 /venv/llvmlite/binding/libllvmlite.so\n"
        "7f0000050000-7f0000060000 rw-p 00050000 08:01 11 /venv/llvmlite/binding/libllvmlite.so\n"
        "7f0000060000-7f0000070000 r-xp 00000000 08:01 12 /usr/lib/libc.so.6\n"
        "7f0000070000-7f0000080000 rw-p 00000000 00:00 0 \n"
        "7f0000080000-7f0000090000 r-xp 00000000 08:01 13 /path with space/libllvmlite.so\n"
    )
    got = memtrim.code_mappings(str(maps))
    assert got == [
        (0x7F0000000000, 0x7F0000010000),
        (0x7F0000010000, 0x7F0000050000),
        (0x7F0000080000, 0x7F0000090000),
    ]
    assert memtrim.code_mappings(str(maps), libraries=("libc.so",)) == [
        (0x7F0000060000, 0x7F0000070000)
    ]
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
    """The release hands back pages of LLVM's code; compiling and running kernels afterwards reads
    them back from the file (nothing it holds changes)."""
    import numba

    from crfkit.kernels.vec import all_finite

    assert all_finite(np.ones(3))
    done = memtrim.release_code_pages()
    assert done >= 0
    if done:
        assert done == sum(b - a for a, b in memtrim.code_mappings())
    before = _llvm_rss_kb()

    @numba.njit
    def fresh(x):  # a new compilation: LLVM's optimiser and code generator run again
        return np.sqrt(x).sum() + 1.0

    assert fresh(np.full(4, 4.0)) == 9.0
    assert all_finite(np.array([1.0, np.inf])) is False
    assert memtrim.release_code_pages() == done
    assert _llvm_rss_kb() <= max(before, _llvm_rss_kb())  # (pages shared with another process stay)


def test_release_code_pages_without_madvise(monkeypatch):
    monkeypatch.setitem(libc.LIBC_FUNCTIONS, "madvise", False)
    assert memtrim.release_code_pages() == 0


def test_warm_compiler_loads_a_kernel_then_releases(monkeypatch):
    calls = []
    monkeypatch.setattr(memtrim, "release_code_pages", lambda: calls.append(1) or 0)
    memtrim.warm_compiler()
    from crfkit.kernels.vec import all_finite

    assert len(all_finite.signatures) >= 1 and calls == [1]


def test_pages_released_after_each_outermost_compilation(monkeypatch):
    import numba

    memtrim.release_after_compiles()
    assert memtrim.release_after_compiles() is False  # registered once per process
    calls = []
    monkeypatch.setattr(
        code_pages, "release_code_pages", lambda: calls.append(1) or 0
    )  # (what the hook calls)

    @numba.njit
    def inner(x):
        return x + 1

    @numba.njit
    def outer(x):
        return inner(x) * 2

    assert outer(3) == 8 and calls == [1]  # inner compiled inside outer's hold: one release
    assert outer(4) == 10 and calls == [1]  # a known signature: no compilation, no release
    assert outer(0.5) == 3.0 and calls == [1, 1]


def test_training_releases_code_pages_and_warms_the_compiler(monkeypatch):
    import crfkit.train as train_mod

    calls = []
    monkeypatch.setattr(memtrim, "release_code_pages", lambda: calls.append("pages") or 0)
    monkeypatch.setattr(memtrim, "warm_compiler", lambda: calls.append("warm"))
    X, Y = random_sequences(np.random.default_rng(3), 10)
    res = train_mod.train(X, Y, max_iterations=3)
    # before the data is encoded, then before the objective allocates (warm_compiler registers the
    # hook that releases after each kernel load, so no iteration has to)
    assert calls[:2] == ["pages", "warm"] and res.model.meta["iterations"] == 3


_DEFER_SCRIPT = r"""
import sys
import numpy as np
from crfkit.kernels.vec import all_finite            # crfkit.kernels registers crfkit.memtrim.defer_blas
assert "numba.np.arraymath" not in sys.modules       # numba's target is not initialised at import
assert all_finite(np.ones(3))                        # the first kernel load initialises it
assert "scipy.linalg" not in sys.modules, "numba's target or the first kernel load imported scipy.linalg"
import numba
from numba.np import arraymath
assert arraymath._HAVE_BLAS is True                  # what numba's own check would have found
assert "scipy.linalg.cython_blas" not in sys.modules  # the blocking entry is gone

@numba.njit
def dot(a, b):
    return np.dot(a, b)

assert dot(np.arange(6.0).reshape(2, 3), np.ones(3)).tolist() == [3.0, 12.0]     # BLAS: loaded when used
assert "scipy.linalg.cython_blas" in sys.modules
print("ok")
"""


def test_first_kernel_load_does_not_import_scipy_linalg():
    """A fresh process: numba's target initialises without scipy.linalg (13 MB), and a numba
    function that uses BLAS still compiles and runs (numba imports it then)."""
    import os
    import subprocess

    env = dict(os.environ, CRFKIT_QUIET_COMPILE="1")
    out = subprocess.run(
        [sys.executable, "-c", _DEFER_SCRIPT], env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


_FAILING_INIT_SCRIPT = r"""
import sys
from crfkit import memtrim
from crfkit._runtime import blas, code_pages, libc, malloc
from numba.core.registry import cpu_target
ctx = cpu_target.target_context
def broken():
    raise RuntimeError("refresh failed")
ctx.refresh = broken
try:
    memtrim.init_target_without_blas()
except RuntimeError:
    pass
else:
    raise AssertionError("the error was swallowed")
assert "scipy.linalg.cython_blas" not in sys.modules    # the blocking entry never outlives the call
import scipy.linalg.cython_blas
print("ok")
"""


def test_a_failing_target_init_leaves_scipy_importable():
    import subprocess

    out = subprocess.run(
        [sys.executable, "-c", _FAILING_INIT_SCRIPT], capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_target_init_is_a_no_op_once_done(monkeypatch):
    from crfkit.kernels.vec import all_finite

    all_finite(np.ones(2))
    assert memtrim.defer_blas() is False  # registered once per process (crfkit.kernels did)
    assert memtrim.init_target_without_blas() is False  # numba's registries are loaded already
    assert blas.blas_installed() is True
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert blas.blas_installed() is False


# ----------------------------------------------------------------------------- the packed attribute
# table
@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(max_size=6), max_size=40))
def test_string_table_of_is_the_packed_list(names):
    t = StringTable.of(names)
    try:
        want = pack_strings(names)
    except UnicodeEncodeError:
        assert t is None
        return
    blob, lens = t.packed()
    assert np.array_equal(blob, want[0]) and np.array_equal(lens, want[1])
    assert list(t) == names and len(t) == len(names)


def test_string_table_of_refuses_a_lone_surrogate():
    assert StringTable.of(["ok", "bad\udcff"]) is None
    assert list(StringTable.of([])) == []


def test_build_keeps_the_attributes_packed():
    from crfkit.features.encode import build

    X = [[["w=a", "s=é"], ["w=b"]], [["w=中", "w=a"]]]
    Y = [["x", "y"], ["y"]]
    space, _ = build(X, Y)
    assert isinstance(space.attributes, StringTable)
    assert list(space.attributes) == ["w=a", "s=é", "w=b", "w=中"]
    # names a model file cannot hold stay a list (the model cannot be saved, but it trains and tags)
    space2, _ = build([[["w=\udcff"]]], [["x"]])
    assert space2.attributes == ["w=\udcff"] and not isinstance(space2.attributes, StringTable)


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=5), max_size=30
    ),
    st.integers(1, 7),
)
def test_fingerprint_of_a_packed_table_is_the_lists(names, block):
    """The checkpoint fingerprint digests a packed table without making its strings, block by block;
    the digest is the one of the same names as a list (checkpoints written before still resume)."""
    import hashlib

    from crfkit.training import checkpoint

    def digest(attrs, block=1 << 16):
        h = hashlib.sha256()
        checkpoint.digest_strings(h, attrs, block=block)
        return h.hexdigest()

    assert digest(StringTable.of(names), block) == digest(list(names))
    assert digest(StringTable.of(names)) == digest(list(names))


_MMAP_SCRIPT = r"""
import ctypes, os, sys
import numpy as np
from crfkit import memtrim
from crfkit._runtime import blas, code_pages, libc, malloc

class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                 "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL("libc.so.6")
if not hasattr(libc, "mallinfo2"):
    print("skip"); sys.exit(0)
libc.mallinfo2.restype = Info
if sys.argv[1] == "fixed":
    assert memtrim.fixed_mmap_threshold() is True
big = np.ones(8 << 20, np.uint8)          # 8 MB: a mapping of its own; freeing it raises a dynamic threshold
del big
before = libc.mallinfo2().hblks
a = np.ones(1 << 20, np.uint8)            # 1 MB: from the heap under the raised threshold, mapped if fixed
print(libc.mallinfo2().hblks - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_fixed_mmap_threshold_keeps_vectors_out_of_the_heap():
    """After an 8 MB block is freed, glibc's dynamic threshold serves a 1 MB request from the heap;
    with the threshold fixed at 128 KiB it gets a mapping of its own.  The environment variable
    wins."""
    import os
    import subprocess

    def mapped(mode, **env):
        e = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
        e.update(env)
        out = subprocess.run(
            [sys.executable, "-c", _MMAP_SCRIPT, mode],
            env=e,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()

    dynamic = mapped("dynamic")
    if dynamic == "skip":
        pytest.skip("no mallinfo2 (glibc < 2.33)")
    assert dynamic == "0" and mapped("fixed") == "1"
    assert memtrim.fixed_mmap_threshold.__defaults__ == (128 * 1024,)


def test_fixed_mmap_threshold_leaves_the_users_setting(monkeypatch):
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "1048576")
    assert memtrim.fixed_mmap_threshold() is False


@pytest.mark.parametrize(
    "algorithm,fixed", [("lbfgs", True), ("owlqn", True), ("sgd-l1", False), ("l2sgd", False)]
)
def test_crfkit_train_fixes_the_mmap_threshold_for_full_batch_runs(
    monkeypatch, tmp_path, algorithm, fixed
):
    """crfkit train fixes the threshold at 128 KiB for L-BFGS / OWL-QN, not for a per-sequence
    optimizer (whose scratch arrays would each get a mapping); a library call never touches it; a
    run whose vectors pass 32 MB (mapped anyway) raises it to glibc's maximum, where the dynamic
    threshold ends up."""
    from crfkit import cli
    from crfkit.train import train

    calls = []
    monkeypatch.setattr(malloc, "fixed_mmap_threshold", lambda *a: calls.append(a) or True)
    monkeypatch.setattr(malloc, "_mmap_opt_in", False)
    data = tmp_path / "train.txt"
    data.write_text("a x B\nb y I\n\nb y B\na x I\n\n")
    train([[["a"], ["b"]]], [["B", "I"]], algorithm=algorithm, max_iterations=2)
    assert calls == []  # the library alone: never
    assert (
        cli.main(
            [
                "train",
                str(data),
                "-m",
                str(tmp_path / "m.crfkit"),
                "--max-iterations",
                "2",
                "-a",
                algorithm,
                "--quiet",
            ]
        )
        == 0
    )
    assert calls == ([()] if fixed else [])  # (its vectors are small: nothing more)
    if fixed:
        assert memtrim.full_batch_vectors(memtrim.MMAP_THRESHOLD_MAX) is False
        assert memtrim.full_batch_vectors(memtrim.MMAP_THRESHOLD_MAX + 8) is True
        assert calls == [(), (memtrim.MMAP_THRESHOLD_MAX,)]
    else:
        assert memtrim.full_batch_vectors(memtrim.MMAP_THRESHOLD_MAX + 8) is False and calls == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/smaps")
def test_lazy_zeros_take_memory_only_where_written():
    n = 8 << 20  # 64 MB of float64
    z = memtrim.lazy_zeros(n)
    assert z.dtype == np.float64 and z.shape == (n,) and z.flags.writeable and z.flags.c_contiguous
    assert float(np.abs(z).max()) == 0.0  # read all of it: no page becomes resident
    assert mapping_rss_kb(z) <= 64
    z[:: 1 << 18] = 1.0  # 32 entries, 2 MB apart
    assert mapping_rss_kb(z) <= 32 * 4 + 64  # their 4 KB pages, not 2 MB huge pages
    assert z.sum() == 32.0
    assert memtrim.lazy_zeros(5, np.int32).tolist() == [0] * 5
    assert memtrim.lazy_zeros(0).shape == (0,)


def test_lazy_copy_keeps_every_bit_and_takes_the_pages_of_the_non_zeros():
    n = 2 << 20
    x = np.zeros(n)
    x[[1, 9, n - 1]] = [-0.0, np.nan, 2.5]
    c = memtrim.lazy_copy(x)
    assert c is not x and c.dtype == x.dtype and c.tobytes() == x.tobytes()
    c[0] = 1.0
    assert x[0] == 0.0  # a copy, not a view
    if sys.platform.startswith("linux"):
        from test_memtrim import mapping_rss_kb

        assert mapping_rss_kb(c) <= 3 * 4 + 16
    # plain copies: dense, small, not float, not 1-D, not contiguous
    for a in (
        np.ones(n),
        np.zeros(10),
        np.zeros(n, np.int64),
        np.zeros((2, n // 2)),
        np.zeros(2 * n)[::2],
    ):
        b = memtrim.lazy_copy(a)
        assert b is not a and b.dtype == a.dtype and b.shape == a.shape and np.array_equal(b, a)
        assert b.flags.owndata
    assert memtrim.lazy_copy(x, min_size=n + 1).flags.owndata
