"""The numba cache stamp of a package: a cached function is recompiled when any file of its folder
changes.

Numba's on-disk cache (``cache=True``) keys a compiled function on the source of its own file only:
a kernel in ``sag.py`` keeps the ``chain.py`` code it was compiled with after ``chain.py`` changes,
until ``sag.py`` itself changes (numba/numba#8396, open).  After a ``git pull`` or an edit that
touches one kernel file, the others would run stale code.  So :func:`stamp_directory` (called by
:mod:`crfkit.kernels` for its own folder) adds a digest of all the ``.py`` files of a directory to
the cache stamp of every function defined there: changing any kernel file recompiles them all on
their next use.  It wraps numba's cache locators (the private ``CacheImpl._locator_classes``); where
that hook is missing (another numba), or with ``CRFKIT_NO_CACHE_STAMP=1`` (or
``CRFKIT_NO_RUNTIME_HOOKS=1``), the caches behave as numba's own.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from .switches import enabled

__all__ = ["STAMPED", "sources_digest", "stamp_digest", "stamp_directory"]

#: resolved directory -> the digest of its ``.py`` files, for every directory stamped in this
#: process
STAMPED: dict[Path, bytes] = {}


def sources_digest(directory) -> bytes:
    """SHA-256 over the names and contents of the ``.py`` files in ``directory`` (sorted by
    name)."""
    h = hashlib.sha256()
    for p in sorted(Path(directory).glob("*.py")):
        h.update(p.name.encode())
        h.update(b"\0")
        h.update(p.read_bytes())
        h.update(b"\0")
    return h.digest()


def stamp_digest(directory) -> bytes:
    """The digest a directory's kernels carry in their cache stamp: :func:`sources_digest` of the
    directory, then the SHA-256 of ``linkage.py``, whose hooks change how the kernels are compiled
    (another linkage or pipeline compiles other code from the same kernel sources)."""
    return (
        sources_digest(directory)
        + hashlib.sha256((Path(__file__).parent / "linkage.py").read_bytes()).digest()
    )


def _stamped(cls):
    class Stamped(cls):
        _crfkit_stamped = True

        def get_source_stamp(self):
            stamp = super().get_source_stamp()
            f = getattr(self, "_py_file", None)
            digest = STAMPED.get(Path(f).resolve().parent) if f else None
            return stamp if digest is None else (stamp, digest)

    Stamped.__name__ = Stamped.__qualname__ = "Stamped" + cls.__name__
    return Stamped


def stamp_directory(directory) -> bool:
    """Make the numba cache of the functions defined in ``directory`` depend on all of its ``.py``
    files.

    Must run before those functions are decorated (module import).  Returns
    False when this numba has no locator hook, or when the hook is switched off (nothing is changed
    then).
    """
    if not enabled("cache_stamp"):
        return False
    try:
        from numba.core import caching
    except ImportError:  # pragma: no cover - another numba
        return False
    impl = getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl", None)
    classes = getattr(impl, "_locator_classes", None)
    if not isinstance(classes, list):
        return False
    STAMPED[Path(directory).resolve()] = stamp_digest(directory)
    if not all(getattr(c, "_crfkit_stamped", False) for c in classes):
        impl._locator_classes = [
            c if getattr(c, "_crfkit_stamped", False) else _stamped(c) for c in classes
        ]
    return True
