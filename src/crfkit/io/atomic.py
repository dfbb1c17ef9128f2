"""Write a file so that it appears whole or not at all."""
from __future__ import annotations

import contextlib
import os
import tempfile
from typing import BinaryIO, Iterator


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, *, fsync: bool = True) -> Iterator[BinaryIO]:
    """Open a temporary file next to ``path`` for binary writing; on success it
    is flushed, synced and renamed onto ``path``; on any failure (exception,
    Ctrl-C) it is removed and an existing ``path`` is left untouched."""
    path = os.fspath(path)
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
