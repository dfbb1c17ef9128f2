"""Write a file so that it appears whole or not at all.

:func:`atomic_file` writes into a temporary file next to the destination and
renames it onto the destination once it is whole (flushed and synced).  What a
careful user expects of an ordinary ``open(path, "wb")`` / ``cp`` still holds:

* **Permissions**: a new file gets ``0666 & ~umask``, as ``open`` gives (the
  temporary file is created with ``os.open(..., 0o666)``, so the kernel applies
  the umask and any default ACL; ``mkstemp``'s 0600 is not used).  A file that
  is *replaced* keeps its permission bits (``rwx`` for user, group, other) and,
  where the caller may set them, its owner and group, as ``cp`` onto an
  existing file keeps them: ``chmod 640 model.crfkit`` survives retraining.
* **Symbolic links**: a destination that is a symlink is written *through*: the
  temporary file goes into the directory of the link's (fully resolved) target
  and is renamed onto the target, so the link stays a link and now shows the
  new content (as ``cp new link`` does).  A dangling link, or a loop of links,
  is refused (GNU ``cp`` also refuses to write through a dangling link).
* **Refusals before anything is written**: a destination that is a directory
  or some other non-regular file (a device, a FIFO: renaming onto ``/dev/null``
  as root would replace the device node), an existing file that is read-only
  to the caller (``chmod a-w`` protects a model from being overwritten, as it
  does from ``cp``), or a directory the caller cannot create files in.
  :func:`check_writable` runs these checks (and creates and removes a probe
  file) so that a long computation can refuse a bad output path *before* it
  starts rather than lose its result at the end.
* **Errors name the real path**: every failure is an :class:`OutputError`
  (a :class:`~crfkit.errors.CrfkitError` and an :class:`OSError`, whose
  ``errno`` is kept) whose message names the destination the caller gave
  (and the link target where there is one), never the temporary file.
* **No orphans**: on any failure (exception, Ctrl-C) the temporary file is
  removed and an existing destination is left untouched.  A writer killed
  outright (``kill -9``, power loss) cannot clean up: its temporary file's name
  holds the writer's host, process id and destination name
  (``.tmp-<host hash>-<pid>-<random>-<name>``), and the next save of the same
  destination removes such orphans whose writer is gone: made on this host by
  a process that no longer exists, or (whatever the host: a directory shared
  over NFS) older than :data:`STALE_SECONDS`.  Temporary files of other
  destinations, and those of older crfkit versions (``.tmp-`` and eight random
  characters: they do not say whose they are), are left alone.
"""

from __future__ import annotations

import contextlib
import errno as _errno
import hashlib
import os
import re
import secrets
import socket
import stat
import time
from collections.abc import Iterator
from typing import BinaryIO

from ..errors import OutputError

TMP_PREFIX = ".tmp-"
# an orphan whose writer cannot be checked (another host) is removed once this old: one write of one
# file (not a training run) never takes an hour
STALE_SECONDS = 3600.0
_NAME_KEEP = 80  # characters of the destination's name kept in the temporary name (NAME_MAX is 255)
_TMP_RE = re.compile(r"^\.tmp-([0-9a-f]{8})-(\d+)-([0-9a-z]{8})-(.*)$")


def _host_tag() -> str:
    return hashlib.sha256(socket.gethostname().encode("utf-8", "surrogateescape")).hexdigest()[:8]


def _tmp_name(base: str) -> str:
    rnd = "".join(secrets.choice("0123456789abcdefghijklmnopqrstuvwxyz") for _ in range(8))
    return f"{TMP_PREFIX}{_host_tag()}-{os.getpid()}-{rnd}-{base[:_NAME_KEEP]}"


def _pid_alive(pid: int) -> bool:
    if pid <= 0 or os.name == "nt":
        return True  # not a pid we can judge (on Windows os.kill terminates): keep the file
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # exists (another user's), or cannot tell
    return True


def clean_stale(directory: str, base: str, *, now: float | None = None) -> list[str]:
    """Remove orphaned temporary files of destination ``base`` in ``directory`` (left by a writer
    killed during a save): those made on this host by a process that no longer exists, and those
    older than :data:`STALE_SECONDS`.  Returns the names removed; problems are ignored (this is
    housekeeping)."""
    removed = []
    host = _host_tag()
    want = base[:_NAME_KEEP]
    now = time.time() if now is None else now
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        m = _TMP_RE.match(name)
        if m is None or m.group(4) != want:
            continue
        p = os.path.join(directory, name)
        try:
            st = os.lstat(p)
            if not stat.S_ISREG(st.st_mode):
                continue
            pid = int(m.group(2))
            gone = (
                m.group(1) == host and pid != os.getpid() and not _pid_alive(pid)
            ) or now - st.st_mtime > STALE_SECONDS
            if gone:
                os.unlink(p)
                removed.append(name)
        except (OSError, ValueError):
            continue
    return removed


def _error(what: str, path: str, target: str, e: OSError) -> OutputError:
    where = path if target == path else f"{path} (a link to {target})"
    reason = e.strerror or str(e) or type(e).__name__
    return OutputError(f"cannot write {what} {where}: {reason}", path=path, errno=e.errno)


def resolve(path: str | os.PathLike, what: str = "the file") -> str:
    """The file that writing ``path`` replaces: ``path`` itself, or the fully resolved target of a
    symlink.  Refuses (OutputError) a dangling link, a loop of links, a directory and any other
    non-regular file."""
    path = os.fspath(path)
    target = path
    if os.path.islink(path):
        try:
            target = os.path.realpath(path, strict=True)
        except FileNotFoundError:
            dest = os.path.realpath(path)
            raise OutputError(
                f"cannot write {what} {path}: it is a symbolic link to {dest}, which does not "
                "exist (a dangling link is not written through; remove the link, or create "
                "its target)",
                path=path,
                errno=_errno.ENOENT,
            ) from None
        except OSError as e:
            raise OutputError(
                f"cannot write {what} {path}: the symbolic link cannot be resolved "
                f"({e.strerror or e})",
                path=path,
                errno=e.errno,
            ) from None
    try:
        st = os.stat(target)
    except FileNotFoundError:
        return target
    except OSError as e:
        raise _error(what, path, target, e) from None
    where = path if target == path else f"{path} (a link to {target})"
    if stat.S_ISDIR(st.st_mode):
        raise OutputError(
            f"cannot write {what} {where}: it is a directory (give a file name, e.g. "
            f"{os.path.join(path, 'model.crfkit')})",
            path=path,
            errno=_errno.EISDIR,
        )
    if not stat.S_ISREG(st.st_mode):
        raise OutputError(
            f"cannot write {what} {where}: it exists and is not a regular file",
            path=path,
            errno=_errno.EINVAL,
        )
    return target


def _check_replaceable(what: str, path: str, target: str) -> os.stat_result | None:
    """The stat of an existing destination (None when there is none); refuses one the caller may not
    write."""
    try:
        st = os.stat(target)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise _error(what, path, target, e) from None
    if not os.access(target, os.W_OK):
        where = path if target == path else f"{path} (a link to {target})"
        raise OutputError(
            f"cannot write {what} {where}: the file is read-only (it is left as it is; "
            "make it writable or choose another name)",
            path=path,
            errno=_errno.EACCES,
        )
    return st


def _create_tmp(d: str, base: str) -> tuple[int, str]:
    for _ in range(100):
        tmp = os.path.join(d, _tmp_name(base))
        try:
            return os.open(
                tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666
            ), tmp
        except FileExistsError:
            continue
    raise FileExistsError(
        _errno.EEXIST, "could not create a unique temporary file"
    )  # pragma: no cover


def check_writable(path: str | os.PathLike, what: str = "the file") -> str:
    """Refuse (OutputError) a destination that :func:`atomic_file` could not write: its directory is
    missing or does not take new files, or the destination is a directory, not a regular file, a
    dangling link, or a read-only file.  A probe file is created and removed in the directory.
    Returns the file that would be replaced (the link target for a symlink).  Nothing else
    changes."""
    path = os.fspath(path)
    target = resolve(path, what)
    d = os.path.dirname(os.path.abspath(target))
    if not os.path.isdir(d):
        raise OutputError(
            f"cannot write {what} {path}: directory {d} does not exist",
            path=path,
            errno=_errno.ENOENT,
        )
    _check_replaceable(what, path, target)
    try:
        fd, tmp = _create_tmp(d, os.path.basename(target))
    except OSError as e:
        where = path if target == path else f"{path} (a link to {target})"
        raise OutputError(
            f"cannot write {what} {where}: cannot create files in {d} ({e.strerror or e})",
            path=path,
            errno=e.errno,
        ) from None
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(tmp)
    return target


@contextlib.contextmanager
def atomic_file(
    path: str | os.PathLike, *, fsync: bool = True, what: str = "the file"
) -> Iterator[BinaryIO]:
    """Open a temporary file next to ``path`` (next to its target when ``path`` is a symlink) for
    binary writing; on success it is flushed, synced and renamed onto ``path``; on any failure
    (exception, Ctrl-C) it is removed and an existing ``path`` is left untouched.  See the module
    docstring for permissions, links, refusals and orphan clean-up.  I/O errors are raised as
    :class:`OutputError` naming ``path`` (``what`` says what it is in the message, e.g.
    ``"the model"``)."""
    path = os.fspath(path)
    target = resolve(path, what)
    d = os.path.dirname(os.path.abspath(target))
    base = os.path.basename(target)
    try:
        os.makedirs(d, exist_ok=True)
    except OSError as e:
        raise _error(what, path, target, e) from None
    old = _check_replaceable(what, path, target)
    clean_stale(d, base)
    try:
        fd, tmp = _create_tmp(d, base)
    except OSError as e:
        raise _error(what, path, target, e) from None
    try:
        try:
            if old is not None:
                # a replaced file keeps its permission bits (as with cp); owner and group where
                # allowed
                if hasattr(os, "fchmod"):
                    os.fchmod(fd, stat.S_IMODE(old.st_mode) & 0o777)
                else:  # pragma: no cover (Windows before Python 3.13)
                    os.chmod(tmp, stat.S_IMODE(old.st_mode) & 0o777)
                if hasattr(os, "fchown"):
                    st = os.fstat(fd)
                    if (st.st_uid, st.st_gid) != (old.st_uid, old.st_gid):
                        with contextlib.suppress(OSError):
                            os.fchown(fd, old.st_uid, old.st_gid)
            f = os.fdopen(fd, "wb")
        except BaseException:
            os.close(fd)
            raise
        with f:
            yield f
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if (
            isinstance(e, OSError)
            and not isinstance(e, OutputError)
            and e.filename in (None, tmp, target)
        ):
            # a failure of this write (an OSError about another file, raised by the caller's code,
            # passes as it is)
            raise _error(what, path, target, e) from e
        raise
