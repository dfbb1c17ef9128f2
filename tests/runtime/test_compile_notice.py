"""The once-per-process notice that the numba kernels are compiling
(crfkit.kernels.install_compile_notice, from crfkit._runtime.compile_notice)."""

from __future__ import annotations

import numba

import crfkit.kernels as K
from crfkit._runtime import compile_notice as N


def _fresh_kernel(module: str, name: str):
    """A new, uncached njit function whose module is ``module`` (its first call compiles)."""
    ns = {"__name__": module}
    exec(f"def {name}(x):\n    return x * 2 + 1\n", ns)
    return numba.njit(cache=False)(ns[name])


def test_notice_printed_once_for_crfkit_kernels(capsys, monkeypatch):
    monkeypatch.setitem(N._NOTICE, "shown", False)
    monkeypatch.delenv("CRFKIT_QUIET_COMPILE", raising=False)
    assert K.install_compile_notice()
    # a function of another module compiling says nothing
    assert _fresh_kernel("somebody.else", "f")(3) == 7
    assert capsys.readouterr().err == ""
    assert _fresh_kernel("crfkit.kernels._probe", "g")(3) == 7
    err = capsys.readouterr().err
    assert err.count("compiling the numba kernels") == 1
    assert "__pycache__" in err and err.startswith("crfkit: ")
    # a second compilation in the same process: silent
    assert _fresh_kernel("crfkit.kernels._probe", "h")(1) == 3
    assert capsys.readouterr().err == ""
    # a call of an already compiled kernel: silent as well
    assert K.install_compile_notice()  # installing twice registers one listener
    monkeypatch.setitem(N._NOTICE, "shown", False)
    f = _fresh_kernel("crfkit.kernels._probe", "k")
    f(1)
    assert capsys.readouterr().err.count("compiling") == 1
    f(2)
    assert capsys.readouterr().err == ""


def test_notice_can_be_silenced(capsys, monkeypatch):
    monkeypatch.setitem(N._NOTICE, "shown", False)
    monkeypatch.setenv("CRFKIT_QUIET_COMPILE", "1")
    assert _fresh_kernel("crfkit.kernels._probe", "q")(0) == 1
    assert capsys.readouterr().err == ""
