"""Finding and loading the tagging kernels compiled ahead of time (:mod:`crfkit.kernels.aot`
builds them), without importing numba.

The module's name carries a key (:func:`key`): a digest of every kernel source file (with
``linkage.py``, as numba's cache stamp: :func:`crfkit._runtime.numba_cache.stamp_digest`), numpy's
and numba's versions, and Python's.  A crfkit, numpy or numba upgrade, or an edit to any kernel,
changes the key, and the module built before is not found: the callers tag through the numpy decoder
until ``crfkit warmup`` builds the new one (it also removes old ones, :func:`prune`).  Computing the key reads the
kernel sources (about 2 ms); numba's version is read from its ``_version.py`` file, not by importing
numba (0.41 s) or through ``importlib.metadata`` (44 ms).

Where (:func:`directory`): ``CRFKIT_AOT_DIR`` when set; else ``$NUMBA_CACHE_DIR/crfkit-aot`` when
numba's cache is moved; else ``crfkit/kernels/__pycache__`` beside numba's own cache when that is
writable; else ``$XDG_CACHE_HOME/crfkit/aot`` (``~/.cache/crfkit/aot``).

``CRFKIT_NO_AOT=1`` (or ``CRFKIT_NO_RUNTIME_HOOKS=1``) keeps the module out: :func:`load` returns
None.  A module that is there but does not load (a file cut short, another numpy ABI) is reported
once, as a :class:`RuntimeWarning`, and left alone.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import threading
import warnings
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

from .numba_cache import stamp_digest
from .switches import enabled

__all__ = [
    "EXPORTED",
    "PREFIX",
    "directory",
    "forget",
    "key",
    "load",
    "module_name",
    "path",
    "prune",
    "status",
]

#: the file and module names of the built modules start with this
PREFIX = "_crfkit_tagcore_"

#: the functions a module must have to be used (:data:`crfkit.kernels.aot.EXPORTS`)
EXPORTED = ("build_table", "split_starts", "probe_range", "tag_names_seqs", "tag_codes_seqs")

_KERNELS = Path(__file__).resolve().parent.parent / "kernels"
_STATE: dict = {}
_LOCK = threading.Lock()  # one load at a time (a server's threads may ask at once)


def _numba_version() -> bytes:
    spec = importlib.util.find_spec("numba")
    if spec is None or not spec.origin:
        return b"no numba"
    pkg = Path(spec.origin).parent
    for name in ("_version.py", "__init__.py"):
        p = pkg / name
        try:
            return p.read_bytes() if name == "_version.py" else repr(p.stat()).encode()
        except OSError:
            continue
    return b"?"


def key() -> str:
    """The key of the module the current sources and versions need (computed once a process)."""
    k = _STATE.get("key")
    if k is None:
        import numpy

        h = hashlib.sha256(stamp_digest(_KERNELS))
        for part in (numpy.__version__, sys.version, EXTENSION_SUFFIXES[0]):
            h.update(part.encode())
            h.update(b"\0")
        h.update(_numba_version())
        k = _STATE["key"] = h.hexdigest()[:20]
    return k


def module_name() -> str:
    return PREFIX + key()


def _writable(d: Path) -> bool:
    while not d.exists():
        if d.parent == d:
            return False
        d = d.parent
    return os.access(d, os.W_OK)


def directory() -> Path:
    """The folder of the built module (see the module's notes)."""
    env = os.environ.get("CRFKIT_AOT_DIR", "").strip()
    if env:
        return Path(env)
    numba_dir = os.environ.get("NUMBA_CACHE_DIR", "").strip()
    if numba_dir:
        return Path(numba_dir) / "crfkit-aot"
    beside = _KERNELS / "__pycache__"
    if _writable(beside):
        return beside
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or os.path.join("~", ".cache")
    return Path(os.path.expanduser(base)) / "crfkit" / "aot"


def path(where: str | os.PathLike | None = None) -> Path:
    """The file of the module of the current key, in ``where`` (default :func:`directory`)."""
    return Path(where if where is not None else directory()) / (
        module_name() + EXTENSION_SUFFIXES[0]
    )


#: modules of other keys :func:`prune` leaves in a folder (the newest): another tree or venv that
#: shares the folder (``NUMBA_CACHE_DIR``) keeps its own
KEEP_OTHERS = 2


def prune(keep: Path, others: int = KEEP_OTHERS) -> list[Path]:
    """Remove the modules of other keys in ``keep``'s folder but the ``others`` most recently
    written (a crfkit, numpy or numba upgrade leaves its old module behind; a folder shared by two
    installs holds one for each); returns the removed paths.  A file that cannot be removed (gone
    already, held open on Windows) is left."""
    found = []
    for p in keep.parent.glob(PREFIX + "*"):
        if p != keep and p.is_file():
            try:
                found.append((p.stat().st_mtime, p))
            except OSError:
                continue
    found.sort(reverse=True)
    removed = []
    for _, p in found[others:]:
        try:
            p.unlink()
            removed.append(p)
        except OSError:
            pass
    return removed


def load():
    """The built module of the current key, or None (switched off, not built, or not loadable).
    Looked for once a process (:func:`forget` looks again)."""
    if "module" in _STATE:
        return _STATE["module"]
    with _LOCK:
        if "module" in _STATE:
            return _STATE["module"]
        mod = _load()
        _STATE["module"] = mod
    return mod


def _load():
    mod = None
    if enabled("aot"):
        p = path()
        if p.is_file():
            try:
                spec = importlib.util.spec_from_file_location(module_name(), p)
                mod = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(mod)
                missing = [n for n in EXPORTED if not callable(getattr(mod, n, None))]
                if missing:
                    raise ImportError(f"it lacks {', '.join(missing)}")
            except Exception as e:  # noqa: BLE001 - any failure: tag without it
                mod = None
                _STATE["error"] = f"{p}: {type(e).__name__}: {e}"
                warnings.warn(
                    f"crfkit: the ahead-of-time tagging kernels in {p} did not load ({e}); "
                    "tagging takes the numpy decoder (`crfkit warmup` builds them again)",
                    RuntimeWarning,
                    stacklevel=3,
                )
    return mod


def forget() -> None:
    """Look for the module again on the next :func:`load` (after a build, or a switch changed)."""
    for k in ("module", "error"):
        _STATE.pop(k, None)


def status() -> dict:
    """What :func:`load` found: ``{"path", "built", "loaded", "enabled", "error"}``."""
    p = path()
    mod = load()
    return {
        "path": str(p),
        "built": p.is_file(),
        "loaded": mod is not None,
        "enabled": enabled("aot"),
        "error": _STATE.get("error"),
    }
