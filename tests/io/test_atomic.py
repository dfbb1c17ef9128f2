"""``crfkit.io.atomic.atomic_file``: a failed write is an ``OutputError`` (an ``OSError`` with its
errno) naming the file; a destination that is not a regular file is refused."""

from __future__ import annotations

import errno
import os
import stat

import pytest

from conftest import no_temp_files as _no_temp_files
from crfkit.errors import OutputError
from crfkit.io.atomic import atomic_file


def test_output_error_is_an_oserror_with_errno(tmp_path, monkeypatch):
    p = tmp_path / "x.bin"

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError) as ei:
        with atomic_file(p) as f:
            f.write(b"data")
    assert isinstance(ei.value, OutputError) and ei.value.errno == errno.ENOSPC
    assert ei.value.filename == str(p) and str(p) in str(ei.value) and not p.exists()
    # an OSError about another file raised by the caller's own code passes unchanged
    with pytest.raises(FileNotFoundError) as ei:
        with atomic_file(p) as f:
            open(tmp_path / "nope", "rb")
    assert not isinstance(ei.value, OutputError)


def test_non_regular_destination_is_refused(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OutputError, match="not a regular file"):
        with atomic_file(fifo) as f:
            f.write(b"x")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and _no_temp_files(tmp_path)
