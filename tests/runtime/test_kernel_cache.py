"""The numba cache of a kernel follows the other kernel files it calls
(crfkit.kernels.stamp_directory)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import crfkit.kernels as kernels
from crfkit._runtime import numba_cache
from crfkit.kernels import chain, sag

INIT = """\
from pathlib import Path
from crfkit.kernels import stamp_directory
STAMPED = stamp_directory(Path(__file__).parent)
"""
CALLEE = """\
from numba import njit

@njit(cache=True)
def value():
    return {}
"""
CALLER = """\
from numba import njit
from .callee import value

@njit(cache=True)
def twice():
    return 2 * value()
"""


def _run(root: Path, env) -> str:
    code = "import kpkg, kpkg.caller as c; print(kpkg.STAMPED, c.twice(), sum(c.twice.stats.cache_hits.values()))"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_a_cached_caller_is_recompiled_when_the_file_it_calls_changes(tmp_path):
    pkg = tmp_path / "kpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(INIT)
    (pkg / "callee.py").write_text(CALLEE.format(1))
    (pkg / "caller.py").write_text(CALLER)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path)] + sys.path))
    env.pop("NUMBA_CACHE_DIR", None)
    env.pop("NUMBA_DISABLE_JIT", None)
    env.pop("NUMBA_CACHE_LOCATOR_CLASSES", None)
    assert _run(tmp_path, env) == ["True", "2", "0"]  # compiled, written to kpkg/__pycache__
    assert _run(tmp_path, env) == ["True", "2", "1"]  # loaded from the cache
    assert any(pkg.joinpath("__pycache__").glob("caller.twice-*.nbi"))
    # only the callee's file changes: numba alone would load twice() with the old value() inlined
    # (4, a hit)
    (pkg / "callee.py").write_text(CALLEE.format(5))
    assert _run(tmp_path, env) == ["True", "10", "0"]
    assert _run(tmp_path, env) == ["True", "10", "1"]


def test_the_kernels_carry_the_digest_of_the_whole_package():
    here = Path(kernels.__file__).resolve().parent
    digest = numba_cache.stamp_digest(here)
    for f in (chain.max_min, sag.sag_run):
        stamp = f._cache._impl.locator.get_source_stamp()
        assert stamp[1] == digest


def test_the_digest_covers_every_file_and_its_name(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "b.py").write_text("y = 2\n")
    d0 = kernels.sources_digest(tmp_path)
    (tmp_path / "b.py").write_text("y = 3\n")
    d1 = kernels.sources_digest(tmp_path)
    (tmp_path / "b.py").rename(tmp_path / "c.py")
    d2 = kernels.sources_digest(tmp_path)
    (tmp_path / "notes.txt").write_text("not a source")
    assert len({d0, d1, d2}) == 3 and kernels.sources_digest(tmp_path) == d2


PROBE = """\
import hashlib, sys
import numpy as np
from crfkit.kernels import chain, sdca
rng = np.random.default_rng(3)
T, L = 9, 26
score = rng.standard_normal((T, L)) * 3
trans = rng.standard_normal((L, L))
work = lambda: (np.empty((T, L)), np.empty((T, L)), np.empty((T, L)), np.empty(T))
if sys.argv[1] == "callee-first":
    # the callee's own library loaded before the caller's
    es, al, be, sc = work()
    tmax = trans.max()
    chain.forward_backward(score.copy(), T, trans, np.exp(trans - tmax), tmax, es, al, be, sc)
node, pair = np.zeros((T, L)), np.zeros((T - 1, L, L))
sdca.chain_marginals(score.copy(), T, trans, *work(), node, pair)
print(hashlib.sha256(node.tobytes() + pair.tobytes()).hexdigest(),
      sum(sdca.chain_marginals.stats.cache_hits.values()))
"""


def test_a_kernel_gives_the_same_bits_compiled_or_loaded_from_the_cache(tmp_path):
    """crfkit.kernels.self_contained_libraries: a caller runs its own copy of each callee, so the
    process that compiles it, a process that loads it from the cache, and one that loaded the
    callee's own library first get the same bits (before, the first and the others differed in the
    last bits of the pairwise marginals).
    """
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"), CRFKIT_QUIET_COMPILE="1")
    env.pop("NUMBA_DISABLE_JIT", None)

    def run(order):
        out = subprocess.run(
            [sys.executable, "-c", PROBE, order],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert out.returncode == 0, out.stderr
        return out.stdout.split()

    fresh, hits0 = run("caller-only")
    cached, hits1 = run("caller-only")
    callee_first, hits2 = run("callee-first")
    assert (hits0, hits1, hits2) == ("0", "1", "1")
    assert fresh == cached == callee_first


def test_self_contained_libraries_is_installed():
    assert kernels.self_contained_libraries() is True
