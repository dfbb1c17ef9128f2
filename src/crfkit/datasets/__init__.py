"""Where crfkit finds benchmark data, and the synthetic corpus it falls back on.

The data directory is, in this order:

1. the environment variable ``CRFKIT_DATA`` (taken as given, even if missing);
2. ``../shared/data`` relative to the current directory;
3. ``../shared/data`` relative to the repository root (found from this file's
   location: ``<repo>/src/crfkit/datasets/__init__.py``).

The first of 2 and 3 that exists is used; when neither does, 2 is returned (so
messages name the place that was looked at).  CoNLL-2000 lives in
``<data dir>/conll2000/{train,test}.txt.gz``.

Loaders (:mod:`crfkit.datasets.loaders`, importable from here):
:func:`load_conll2000`, :func:`load_conll2002`, :func:`load_ocr_letters`
(and :func:`ocr_letters_split`, :func:`pixel_attributes`),
:func:`load_ptb_sample`, and NETtalk (:mod:`crfkit.datasets.nettalk`: :func:`load_nettalk`,
:func:`nettalk_split`, the documented 10-fold split and the joint phoneme+stress labels).  Downloads
into a user cache with SHA-256 verification (:mod:`crfkit.datasets.download`): :func:`fetch`,
:func:`verify`, :data:`REGISTRY`, :func:`cache_dir`.  These are imported on first use, so
``import crfkit.datasets`` stays light.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = [
    "data_dir",
    "data_dir_candidates",
    "conll2000_paths",
    # loaders
    "find_file",
    "load_conll2000",
    "load_conll2002",
    "load_ocr_letters",
    "ocr_letters_split",
    "pixel_attributes",
    "load_ptb_sample",
    "load_nettalk",
    "nettalk_split",
    "nettalk_split_folds",
    # downloads
    "fetch",
    "verify",
    "cache_dir",
    "REGISTRY",
    "FetchError",
]

_LAZY = {
    "find_file": "loaders",
    "load_conll2000": "loaders",
    "load_conll2002": "loaders",
    "load_ocr_letters": "loaders",
    "ocr_letters_split": "loaders",
    "pixel_attributes": "loaders",
    "load_ptb_sample": "loaders",
    "load_nettalk": "nettalk",
    "nettalk_split": "nettalk",
    "nettalk_split_folds": "nettalk",
    "fetch": "download",
    "verify": "download",
    "cache_dir": "download",
    "REGISTRY": "download",
    "FetchError": "download",
}


def __getattr__(name: str):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{mod}"), name)
    globals()[name] = value
    return value


ENV_VAR = "CRFKIT_DATA"


def data_dir_candidates() -> list[Path]:
    """The places :func:`data_dir` looks at, in order (the env var first when set)."""
    out = []
    env = os.environ.get(ENV_VAR)
    if env:
        out.append(Path(env))
    out.append(Path.cwd() / ".." / "shared" / "data")
    repo = Path(__file__).resolve().parents[3]
    out.append(repo / ".." / "shared" / "data")
    return out


def data_dir() -> Path:
    """The data directory (see the module docstring)."""
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env)
    cands = data_dir_candidates()
    for c in cands:
        if c.is_dir():
            return Path(os.path.normpath(c))
    return Path(os.path.normpath(cands[0]))


def conll2000_paths(base: str | os.PathLike | None = None) -> tuple[Path, Path] | None:
    """``(train, test)`` of CoNLL-2000 under ``base`` (default :func:`data_dir`),
    or ``None`` when either file is missing.  Plain ``train.txt`` / ``test.txt``
    are accepted when the ``.gz`` files are not there."""
    root = Path(base) if base is not None else data_dir()
    d = root / "conll2000"
    for ext in (".txt.gz", ".txt"):
        train, test = d / f"train{ext}", d / f"test{ext}"
        if train.is_file() and test.is_file():
            return train, test
    return None
