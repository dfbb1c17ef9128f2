"""Models of the peer tools: read and write CRFsuite, CRF++ and Wapiti model files.

One module per format (``crfkit.interop.crfsuite``, ``.crfpp``, ``.wapiti``), each with

* ``sniff(head: bytes) -> bool``: whether the first 64 bytes of a file look like that format;
* ``read(path, *, limits=None) -> CRFModel``: the peer's model as a crfkit model (untrusted input:
  the magic is checked first and every count and offset is bounded before anything is allocated;
  a bad file raises :class:`~crfkit.errors.CrfkitError` naming the file and the problem);
* ``write(model, path, **options)``: the crfkit model in the peer's format, written atomically
  (a temporary file renamed); what the format cannot hold (dense features, position-dependent
  transitions, a label the format cannot spell...) is refused with a
  :class:`~crfkit.errors.CrfkitError` naming it, never dropped.

The format modules are imported only when used.  This package gives them one front:
:data:`FORMATS`, :func:`detect` (by the magic bytes), :func:`read_model` / :func:`write_model`, and
one read and one write function per format.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING

from ..errors import CrfkitError, ModelError

if TYPE_CHECKING:
    from ..model import CRFModel

__all__ = [
    "FORMATS",
    "FormatUnavailable",
    "HEAD_BYTES",
    "detect",
    "load_any",
    "read_crfpp",
    "read_crfsuite",
    "read_model",
    "read_wapiti",
    "sniff_head",
    "write_crfpp",
    "write_crfsuite",
    "write_model",
    "write_wapiti",
]

FORMATS = ("crfsuite", "crfpp", "wapiti")
HEAD_BYTES = 64  # what detect() reads of a file and hands to each format's sniff()


class FormatUnavailable(CrfkitError):
    """A peer format whose module is not part of this crfkit."""


def _module(fmt: str):
    if fmt not in FORMATS:
        raise CrfkitError(f"unknown model format {fmt!r} (one of {', '.join(FORMATS)})")
    name = f"{__name__}.{fmt}"
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name != name:
            raise
        raise FormatUnavailable(f"the {fmt} model format is not available in this crfkit") from None


def sniff_head(head: bytes) -> str | None:
    """The format whose ``sniff`` accepts ``head`` (the first :data:`HEAD_BYTES` bytes of a file),
    or None.  A format whose module is not there is skipped."""
    for fmt in FORMATS:
        try:
            mod = _module(fmt)
        except FormatUnavailable:
            continue
        if mod.sniff(head):
            return fmt
    return None


def detect(path: str | os.PathLike) -> str | None:
    """The peer format of the model file at ``path`` by its first bytes (``"crfsuite"``,
    ``"crfpp"`` or ``"wapiti"``), or None when none of them recognises it (a crfkit model, say).
    A file that cannot be read raises :class:`~crfkit.errors.ModelError`."""
    try:
        with open(path, "rb") as f:
            head = f.read(HEAD_BYTES)
    except OSError as e:
        raise ModelError(f"{os.fspath(path)}: cannot read model file: {e.strerror or e}") from None
    from ..modelfile import MAGIC

    if head.startswith(MAGIC):
        return None
    return sniff_head(head)


def load_any(path: str | os.PathLike) -> CRFModel:
    """The model at ``path``, whichever file it is: a crfkit model file, or a CRFsuite, CRF++ or
    Wapiti model recognised by its first bytes and converted in memory.  This is how
    ``crfkit tag -m``, ``crfkit info -m``, ``--init-model`` and ``crfkit.CRF(model_filename=...)``
    open a model.  A file that is none of them raises :class:`~crfkit.errors.ModelError`."""
    from ..model import CRFModel

    fmt = detect(path)
    if fmt is not None:
        return _module(fmt).read(path)
    try:
        return CRFModel.load(path)
    except ModelError as e:
        if "bad magic bytes" in str(e):
            raise ModelError(
                f"{os.fspath(path)}: not a crfkit model file (bad magic bytes), nor a CRFsuite, "
                "CRF++ or Wapiti model (its first bytes match none of them)"
            ) from None
        raise


def read_model(path: str | os.PathLike, fmt: str | None = None, **options) -> CRFModel:
    """The peer model at ``path`` as a :class:`~crfkit.model.CRFModel`; ``fmt`` None detects the
    format (:func:`detect`) and raises :class:`~crfkit.errors.ModelError` when no format fits."""
    if fmt is None:
        fmt = detect(path)
        if fmt is None:
            raise ModelError(
                f"{os.fspath(path)}: not a CRFsuite, CRF++ or Wapiti model file "
                "(its first bytes match none of them)"
            )
    return _module(fmt).read(path, **options)


def write_model(model: CRFModel, path: str | os.PathLike, fmt: str, **options) -> None:
    """Write ``model`` to ``path`` in the peer format ``fmt`` (one of :data:`FORMATS`); the
    options are the format's writer's (e.g. ``text=True`` for CRF++'s text model)."""
    _module(fmt).write(model, path, **options)


def read_crfsuite(path: str | os.PathLike, **options) -> CRFModel:
    """A CRFsuite binary model (what ``crfsuite learn`` and python-crfsuite write) as a crfkit
    model: :func:`crfkit.interop.crfsuite.read`."""
    return _module("crfsuite").read(path, **options)


def write_crfsuite(model: CRFModel, path: str | os.PathLike, **options) -> None:
    """Write ``model`` as a CRFsuite binary model: :func:`crfkit.interop.crfsuite.write`."""
    _module("crfsuite").write(model, path, **options)


def read_crfpp(path: str | os.PathLike, **options) -> CRFModel:
    """A CRF++ model (binary or text) as a crfkit model: ``crfkit.interop.crfpp.read``."""
    return _module("crfpp").read(path, **options)


def write_crfpp(model: CRFModel, path: str | os.PathLike, **options) -> None:
    """Write ``model`` as a CRF++ model (``text=True``: the text model):
    ``crfkit.interop.crfpp.write``."""
    _module("crfpp").write(model, path, **options)


def read_wapiti(path: str | os.PathLike, **options) -> CRFModel:
    """A Wapiti model as a crfkit model: ``crfkit.interop.wapiti.read``."""
    return _module("wapiti").read(path, **options)


def write_wapiti(model: CRFModel, path: str | os.PathLike, **options) -> None:
    """Write ``model`` as a Wapiti model: ``crfkit.interop.wapiti.write``."""
    _module("wapiti").write(model, path, **options)
