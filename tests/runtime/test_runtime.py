"""crfkit._runtime: every hook into numba's, LLVM's or glibc's internals can be switched off, and
crfkit trains and tags the same without them.

The end-to-end check runs crfkit in a fresh process with its own numba cache (the kernels compile
there: about a minute of CPU), with every hook off; the same check with each switch alone is marked
slow.  The unit tests check, in this process, that each hook's switch (and the master switch) keeps
it from acting.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import crfkit
import crfkit.kernels  # noqa: F401  (installs the import-time hooks in this process)
from crfkit import _runtime
from crfkit._runtime import (
    aot,
    blas,
    code_pages,
    compile_notice,
    interrupt,
    libc,
    linkage,
    malloc,
    numba_cache,
)
from crfkit._runtime.switches import MASTER_SWITCH, SWITCHES, enabled

SRC = Path(crfkit.__file__).resolve().parent

_TAGS = {
    "the": "D",
    "a": "D",
    "cat": "N",
    "dog": "N",
    "bird": "N",
    "runs": "V",
    "sleeps": "V",
    "sings": "V",
}


def _corpus(seed: int, n: int):
    """``n`` sentences of one or two ``D N V`` clauses, each word's tag given by the word."""
    rng = np.random.default_rng(seed)
    X, Y = [], []
    for _ in range(n):
        words = []
        for _ in range(int(rng.integers(1, 3))):
            words += [
                str(rng.choice(["the", "a"])),
                str(rng.choice(["cat", "dog", "bird"])),
                str(rng.choice(["runs", "sleeps", "sings"])),
            ]
        X.append([["w=" + w, "p=" + (words[i - 1] if i else "^")] for i, w in enumerate(words)])
        Y.append([_TAGS[w] for w in words])
    return X, Y


def _train_and_tag():
    from crfkit import CRF

    X, Y = _corpus(0, 30)
    Xt, Yt = _corpus(1, 8)
    return CRF(max_iterations=30).fit(X, Y).predict(Xt), Yt


# run in a fresh process: train, tag, and report which hooks numba carries
_SCRIPT = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import test_runtime
labels, gold = test_runtime._train_and_tag()
from numba.core import caching, codegen, event
from crfkit import memtrim
from crfkit._runtime import blas, code_pages, compile_notice, linkage, numba_cache
impl = getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl", None)
listeners = [type(x).__module__ for xs in getattr(event, "_registered", {}).values() for x in xs]
print(json.dumps({
    "labels": labels, "gold": gold,
    "stamped": [c.__name__ for c in impl._locator_classes if getattr(c, "_crfkit_stamped", False)],
    "optimize_final_module": codegen.CPUCodeLibrary._optimize_final_module.__module__,
    "crfkit_listeners": [m for m in listeners if m.startswith("crfkit")],
    "flags": [bool(numba_cache.STAMPED), linkage._SELF_CONTAINED["installed"], compile_notice._NOTICE["installed"],
              blas._deferring is not None, code_pages._hook is not None, linkage._LINK_ONLY["installed"]],
    "link_only_skipped": linkage._LINK_ONLY["skipped"],
    "calls": [memtrim.release_memory(), memtrim.fixed_mmap_threshold(), memtrim.release_code_pages(),
              memtrim.release_after_compiles(), memtrim.defer_blas(), memtrim.init_target_without_blas()],
    "scipy_linalg": "scipy.linalg" in sys.modules,
    "aot": __import__("crfkit._runtime.aot", fromlist=["load"]).load() is not None,
}))
"""


def _run_without(tmp_path, **switches):
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("CRFKIT_NO_") and k not in ("CRFKIT_QUIET_COMPILE", "NUMBA_DISABLE_JIT")
    }
    from conftest import built_aot_dir

    env.update(
        switches,
        NUMBA_CACHE_DIR=str(tmp_path / "numba-cache"),
        CRFKIT_AOT_DIR=built_aot_dir()["dir"],
        PYTHONPATH=os.pathsep.join([str(SRC.parent)] + [p for p in sys.path if p]),
    )
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(Path(__file__).resolve().parent)],
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


def test_crfkit_trains_and_tags_the_same_with_every_hook_off(tmp_path):
    """CRFKIT_NO_RUNTIME_HOOKS=1 in a fresh process (its own numba cache): none of the hooks is in
    numba, glibc is not called, and a model trained there tags as the one trained here, with the
    hooks on."""
    labels, gold = _train_and_tag()
    assert labels == gold
    got, err = _run_without(tmp_path, CRFKIT_NO_RUNTIME_HOOKS="1")
    assert got["labels"] == labels and got["gold"] == gold
    assert got["stamped"] == []  # numba's own cache locators
    assert got["optimize_final_module"] == "numba.core.codegen"  # numba's own optimisation step
    assert got["crfkit_listeners"] == []  # no listener of numba's events
    assert got["flags"] == [False] * 6
    assert got["link_only_skipped"] == 0
    assert got["calls"] == [False, False, 0, False, False, False]
    assert got["aot"] is False  # built, and left alone
    assert "compiling the numba kernels" not in err  # it compiled, without the notice
    if blas.blas_installed():
        assert got["scipy_linalg"]  # numba's target imported it, as numba does


_EXPECTED_OFF = {  # what each switch alone leaves out of the subprocess's report
    "cache_stamp": lambda g: g["stamped"] == [] and g["flags"][0] is False,
    "self_contained": lambda g: g["flags"][1] is False,
    # with it on, every prange loop's two wrapper libraries (CRF.fit's gradient has two loops) stay IR
    "link_only": lambda g: g["flags"][5] is False and g["link_only_skipped"] == 0,
    "compile_notice": lambda g: "crfkit._runtime.compile_notice" not in g["crfkit_listeners"],
    "blas_defer": lambda g: (
        "crfkit._runtime.blas" not in g["crfkit_listeners"] and g["calls"][4:] == [False] * 2
    ),
    "malloc_trim": lambda g: g["calls"][0] is False,
    "mmap_threshold": lambda g: g["calls"][1] is False,
    "aot": lambda g: g["aot"] is False,
    "code_pages": lambda g: (
        "crfkit._runtime.code_pages" not in g["crfkit_listeners"] and g["calls"][2:4] == [0, False]
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("hook", sorted(SWITCHES))
def test_crfkit_trains_and_tags_the_same_with_one_hook_off(tmp_path, hook):
    labels, gold = _train_and_tag()
    got, _ = _run_without(tmp_path, **{SWITCHES[hook]: "1"})
    assert got["labels"] == labels == gold
    assert _EXPECTED_OFF[hook](got)
    if hook != "cache_stamp":
        assert got["stamped"]  # the other hooks stay in place
    if hook != "aot":
        assert got["aot"] is True
    if hook not in ("self_contained", "link_only"):
        assert got["optimize_final_module"] != "numba.core.codegen"
        assert got["flags"][1] and got["flags"][5] and got["link_only_skipped"] >= 4


# ----------------------------------------------------------------------------- each switch, in this
# process
def _recorder(calls, value=1):
    def fn(*args):
        calls.append(args)
        return value

    return fn


def _acts_cache_stamp(monkeypatch, tmp_path):
    from numba.core import caching

    monkeypatch.setattr(numba_cache, "STAMPED", dict(numba_cache.STAMPED))
    impl = getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl", None)
    before = impl._locator_classes
    done = numba_cache.stamp_directory(tmp_path)
    assert done == (tmp_path.resolve() in numba_cache.STAMPED)
    assert impl._locator_classes is before or done
    return done


def _acts_self_contained(monkeypatch, tmp_path):
    from numba.core import codegen

    before = codegen.CPUCodeLibrary._optimize_final_module
    monkeypatch.setattr(
        codegen.CPUCodeLibrary, "_optimize_final_module", before
    )  # restored after the test
    monkeypatch.setitem(linkage._SELF_CONTAINED, "installed", False)
    done = linkage.self_contained_libraries()
    assert done == (codegen.CPUCodeLibrary._optimize_final_module is not before)
    return done


def _acts_link_only(monkeypatch, tmp_path):
    from numba.core import codegen

    for cls, name in (
        (codegen.CPUCodeLibrary, "_optimize_final_module"),
        (codegen.JITCodeLibrary, "_finalize_final_module"),
        (codegen.JITCodeLibrary, "get_pointer_to_function"),
    ):
        monkeypatch.setattr(cls, name, getattr(cls, name))  # restored after the test
    before = codegen.JITCodeLibrary._finalize_final_module
    monkeypatch.setitem(linkage._LINK_ONLY, "installed", False)
    done = linkage.link_only_wrappers()
    assert done == (codegen.JITCodeLibrary._finalize_final_module is not before)
    return done


def _register_recorded(monkeypatch):
    from numba.core import event

    calls = []
    monkeypatch.setattr(event, "register", _recorder(calls, None))
    return calls


def _acts_compile_notice(monkeypatch, tmp_path):
    calls = _register_recorded(monkeypatch)
    monkeypatch.setitem(compile_notice._NOTICE, "installed", False)
    done = compile_notice.install_compile_notice()
    assert done == bool(calls)
    return done


def _acts_blas_defer(monkeypatch, tmp_path):
    from numba.core.registry import cpu_target

    from crfkit.kernels.vec import all_finite

    assert all_finite(np.ones(2))  # numba's target initialised (by the hook, in this process)
    calls = _register_recorded(monkeypatch)
    monkeypatch.setattr(blas, "_deferring", None)
    done = blas.defer_blas()
    assert done == bool(calls) == (blas._deferring is not None)
    refreshed = []
    monkeypatch.setattr(cpu_target.target_context, "refresh", _recorder(refreshed, None))
    monkeypatch.delitem(sys.modules, "numba.np.arraymath")
    monkeypatch.delitem(sys.modules, blas.BLAS_MODULE, raising=False)
    assert blas.init_target_without_blas() == done == bool(refreshed)
    return done


def _acts_malloc_trim(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setitem(libc.LIBC_FUNCTIONS, "malloc_trim", _recorder(calls))
    monkeypatch.setitem(libc.LIBC_FUNCTIONS, "mallopt", _recorder(calls))
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    done = malloc.release_memory()
    assert malloc.fixed_trim_threshold(1 << 16) == done == bool(calls)
    return done


def _acts_mmap_threshold(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setitem(libc.LIBC_FUNCTIONS, "mallopt", _recorder(calls))
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    monkeypatch.setattr(malloc, "_mmap_opt_in", False)
    done = malloc.opt_in_mmap_threshold()
    assert done == bool(calls) and malloc.full_batch_vectors(malloc.MMAP_THRESHOLD_MAX + 8) == done
    return done


def _acts_code_pages(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setitem(libc.LIBC_FUNCTIONS, "madvise", _recorder(calls, 0))
    monkeypatch.setattr(code_pages, "_ranges", [(0x1000, 0x3000)])
    done = code_pages.release_code_pages() == 0x2000
    assert done == bool(calls)
    registered = _register_recorded(monkeypatch)
    monkeypatch.setattr(code_pages, "_hook", None)
    assert code_pages.release_after_compiles() == done == bool(registered)
    return done


def _acts_interrupt_flag(monkeypatch, tmp_path):
    import ctypes

    flag = ctypes.c_int.in_dll(ctypes.pythonapi, "_Py_UnhandledKeyboardInterrupt")
    flag.value = 1
    try:
        done = interrupt.forget_handled_interrupt()
        assert done == (flag.value == 0)
        return done
    finally:
        flag.value = 0


def _acts_aot(monkeypatch, tmp_path):
    from conftest import built_aot_dir

    monkeypatch.setenv("CRFKIT_AOT_DIR", built_aot_dir()["dir"])
    aot.forget()
    try:
        return aot.load() is not None
    finally:
        aot.forget()


_ACTS = {
    "cache_stamp": _acts_cache_stamp,
    "self_contained": _acts_self_contained,
    "link_only": _acts_link_only,
    "compile_notice": _acts_compile_notice,
    "blas_defer": _acts_blas_defer,
    "malloc_trim": _acts_malloc_trim,
    "mmap_threshold": _acts_mmap_threshold,
    "code_pages": _acts_code_pages,
    "interrupt_flag": _acts_interrupt_flag,
    "aot": _acts_aot,
}


@pytest.fixture
def no_switches(monkeypatch):
    for var in [MASTER_SWITCH, *SWITCHES.values()]:
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def test_every_hook_has_a_probe():
    assert sorted(_ACTS) == sorted(SWITCHES)


@pytest.mark.parametrize("hook", sorted(SWITCHES))
def test_each_hook_acts_when_no_switch_is_set(no_switches, tmp_path, hook):
    if hook in ("malloc_trim", "mmap_threshold", "code_pages") and not sys.platform.startswith(
        "linux"
    ):
        pytest.skip("glibc")
    assert _ACTS[hook](no_switches, tmp_path) is True


@pytest.mark.parametrize("which", ["own", "master"])
@pytest.mark.parametrize("hook", sorted(SWITCHES))
def test_each_switch_keeps_its_hook_from_acting(no_switches, tmp_path, hook, which):
    no_switches.setenv(SWITCHES[hook] if which == "own" else MASTER_SWITCH, "1")
    assert enabled(hook) is False
    assert _ACTS[hook](no_switches, tmp_path) is False


def test_a_switch_reads_as_crfkit_quiet_compile(no_switches):
    for value, on in (("", False), ("0", False), (" 0 ", False), ("1", True), ("yes", True)):
        no_switches.setenv("CRFKIT_NO_CACHE_STAMP", value)
        assert enabled("cache_stamp") is not on
    assert all(enabled(h) for h in SWITCHES if h != "cache_stamp")


def test_the_hooks_are_in_place_in_a_default_process():
    """(This suite's own process, where no switch is set.)"""
    from numba.core import caching, codegen

    if any(
        os.environ.get(v, "").strip() not in ("", "0") for v in [MASTER_SWITCH, *SWITCHES.values()]
    ):
        pytest.skip("a switch is set for this run")
    impl = getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl", None)
    assert all(getattr(c, "_crfkit_stamped", False) for c in impl._locator_classes)
    assert codegen.CPUCodeLibrary._optimize_final_module.__module__ == "crfkit._runtime.linkage"
    assert SRC.joinpath("kernels") in numba_cache.STAMPED
    assert numba_cache.STAMPED[SRC.joinpath("kernels")] == numba_cache.stamp_digest(SRC / "kernels")


def test_the_switches_are_documented():
    for var in [MASTER_SWITCH, *SWITCHES.values()]:
        assert var in _runtime.__doc__
    for hook in SWITCHES:
        mod = {
            "malloc_trim": malloc,
            "mmap_threshold": malloc,
            "cache_stamp": numba_cache,
            "self_contained": linkage,
            "link_only": linkage,
            "compile_notice": compile_notice,
            "blas_defer": blas,
            "code_pages": code_pages,
            "interrupt_flag": interrupt,
            "aot": aot,
        }[hook]
        assert SWITCHES[hook] in mod.__doc__


# ----------------------------------------------------------------------------- only _runtime
# reaches inside
_INTERNALS = re.compile(r"^\s*(?:from|import)\s+(numba\.core|numba\.np|llvmlite|ctypes)\b", re.M)
# what may stay outside crfkit._runtime: the kernels' own @intrinsic code generation (llvmlite.ir,
# numba.core's cgutils, config and the host's CPU features) is how numba extensions are written
_ALLOWED = {"kernels": ("numba.core", "llvmlite")}


def test_only_runtime_imports_numba_llvm_or_libc_internals():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        if rel.parts[0] == "_runtime":
            continue
        for m in _INTERNALS.finditer(path.read_text(encoding="utf-8")):
            if m.group(1) not in _ALLOWED.get(rel.parts[0] if len(rel.parts) > 1 else "", ()):
                found.append(f"{rel}: {m.group(0).strip()}")
    assert found == []


# ----------------------------------------------------------------------------- another numba: no
# hook, no error
def test_each_hook_does_nothing_where_numbas_private_names_are_missing(no_switches, tmp_path):
    """A numba without the private names a hook uses: the hook reports False and changes nothing
    (crfkit then works as numba alone would)."""
    from numba.core import caching, codegen, event
    from numba.core.registry import cpu_target

    from crfkit.kernels.vec import all_finite

    assert all_finite(np.ones(2))
    mp = no_switches
    mp.setattr(numba_cache, "STAMPED", dict(numba_cache.STAMPED))
    mp.setattr(caching, "CacheImpl", type("CacheImpl", (), {}))
    mp.setattr(caching, "_CacheImpl", None, raising=False)
    assert (
        numba_cache.stamp_directory(tmp_path) is False
        and tmp_path.resolve() not in numba_cache.STAMPED
    )
    mp.setattr(codegen, "CPUCodeLibrary", None)
    mp.setitem(linkage._SELF_CONTAINED, "installed", False)
    assert linkage.self_contained_libraries() is False
    mp.setitem(linkage._LINK_ONLY, "installed", False)
    assert linkage.link_only_wrappers() is False
    mp.delattr(event, "register")
    mp.setitem(compile_notice._NOTICE, "installed", False)
    mp.setattr(blas, "_deferring", None)
    mp.setattr(code_pages, "_hook", None)
    assert compile_notice.install_compile_notice() is False
    assert blas.defer_blas() is False and code_pages.release_after_compiles() is False
    mp.setattr(cpu_target.target_context, "refresh", None)
    mp.delitem(sys.modules, "numba.np.arraymath")
    mp.delitem(sys.modules, blas.BLAS_MODULE, raising=False)
    assert blas.init_target_without_blas() is False
    mp.setitem(libc.LIBC_FUNCTIONS, "malloc_trim", False)  # (musl, or not Linux)
    mp.setitem(libc.LIBC_FUNCTIONS, "mallopt", False)
    mp.setitem(libc.LIBC_FUNCTIONS, "madvise", False)
    assert malloc.release_memory() is False and malloc.fixed_mmap_threshold() is False
    assert code_pages.release_code_pages() == 0
