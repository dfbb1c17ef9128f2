"""The tagging kernels compiled ahead of time into a Python extension module (numba's ``pycc``), so
that a process tags without importing numba.

A process whose first call is a tagging call (``crfkit tag``, a script that loads a model and
predicts once, a web worker's first request) paid numba's start before its first label: 0.41 s to
import numba alone, then the cached kernels loaded, against CRFsuite's whole 0.33 s ``Tagger``
run on CoNLL-2000's test set.  The numpy decoder (:mod:`crfkit.npdecode`) avoids numba but runs a
numpy call per position and looks names up one Python ``dict.get`` at a time (0.50 s in all).

This module builds, from the same ``@njit`` functions the JIT path runs (no second copy of any
kernel), an extension module that exports them with fixed signatures (:data:`EXPORTS`): the hash
table over a model's attribute names and its lookups (:mod:`crfkit.kernels.strtable`) and the
fused emissions + Viterbi over a batch (:func:`crfkit.kernels.tag_names.tag_names_seqs`,
:func:`crfkit.kernels.chain_viterbi.tag_codes_seqs`).  The module needs numpy only; importing it
takes about a millisecond.  It is built by ``crfkit warmup`` (the ``tag`` step, which ``make``'s
install step runs) next to numba's own cache and loaded by :mod:`crfkit._runtime.aot`, which keys
it on every kernel source file, numpy's, numba's and Python's versions: a change to any of them
makes the old module invisible until the next warmup, and the callers take the numpy decoder
meanwhile.

The code is compiled for the generic CPU of the architecture (``pycc``'s default), so a module
built on one machine runs on any other of the same architecture: measured on CoNLL-2000's test set,
the host CPU's instructions did not make it faster (these loops wait on memory, not arithmetic).
``pycc`` needs a C compiler and setuptools at build time; where either is missing, or where a
later numba drops ``pycc`` (it is marked for deprecation), :func:`build` raises and crfkit tags
through the numpy decoder as before.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings
from pathlib import Path

from .._runtime import aot as _aot
from .chain_viterbi import tag_codes_seqs
from .strtable import build_table, probe_range, split_starts
from .tag_names import tag_names_seqs

__all__ = ["EXPORTS", "build", "ensure_built"]

_C1 = "[::1]"
_I8, _I64, _I32, _F64 = "uint8" + _C1, "int64" + _C1, "int32" + _C1, "float64" + _C1
_SLOTS = "int64[:, ::1]"
_TRANS = "float64[:, ::1]"

#: (exported name, kernel, signature).  The arrays are C-contiguous of exactly these dtypes: the
#: callers (:mod:`crfkit._runtime.aot`'s users) convert theirs first (``np.ascontiguousarray``).
EXPORTS = (
    ("build_table", build_table, f"{_SLOTS}({_I8}, {_I64}, int64)"),
    ("split_starts", split_starts, f"int64({_I8}, int64, {_I64})"),
    ("probe_range", probe_range, f"void({_I8}, {_I64}, int64, int64, {_SLOTS}, {_I8}, {_I64})"),
    (
        "tag_names_seqs",
        tag_names_seqs,
        f"void({_I8}, {_I64}, {_SLOTS}, {_I8}, {_I64}, {_F64}, {_I64}, {_I64}, int64, int64, "
        f"{_I64}, {_I32}, {_F64}, {_TRANS}, {_I64}, {_I32}, {_F64})",
    ),
    (
        "tag_codes_seqs",
        tag_codes_seqs,
        f"void({_I64}, {_I64}, {_F64}, {_I64}, {_I64}, int64, int64, {_I64}, {_I32}, {_F64}, "
        f"{_TRANS}, {_I32}, {_F64})",
    ),
)


def build(directory: str | os.PathLike | None = None) -> Path:
    """Compile :data:`EXPORTS` into the extension module :func:`crfkit._runtime.aot.path` names (in
    ``directory``, default :func:`crfkit._runtime.aot.directory`) and return its path.  The module
    is compiled in a temporary folder beside it and renamed into place, so a process never loads a
    half-written file and two builds at once leave one whole module; modules of other keys in the
    folder beyond the newest few are removed (:func:`crfkit._runtime.aot.prune`).  Raises whatever
    ``pycc`` raises (no C compiler, no setuptools)."""
    target = _aot.path(directory)
    target.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pycc's pending-deprecation notice
        from numba.pycc import CC

    cc = CC(_aot.module_name())
    cc.verbose = False
    for name, kernel, sig in EXPORTS:
        cc.export(name, sig)(kernel.py_func)
    tmp = tempfile.mkdtemp(prefix=".aot-build-", dir=target.parent)
    try:
        cc.output_dir = tmp
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cc.compile()
        built = [p for p in Path(tmp).iterdir() if p.name.startswith(_aot.module_name())]
        if len(built) != 1:
            raise RuntimeError(f"pycc left {[p.name for p in Path(tmp).iterdir()]} in {tmp}")
        os.replace(built[0], target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _aot.prune(target)
    _aot.forget()
    return target


def ensure_built(directory: str | os.PathLike | None = None) -> tuple[Path, bool]:
    """``(path, built)``: the module of the current key, built unless it is there already."""
    target = _aot.path(directory)
    if target.is_file():
        return target, False
    return build(directory), True
