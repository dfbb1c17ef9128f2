"""Column files as CRF++, Wapiti and the CoNLL shared tasks use them.

One token per line, its columns separated by whitespace (or by ``sep``), a
blank (empty or whitespace-only) line after each sentence::

    Confidence NN B-NP
    in IN B-PP
    the DT B-NP

    Rockwell NNP B-NP
    ...

With ``has_labels=True`` the last column is the label and the others are the
observation columns that templates refer to as ``%x[row,col]``.

Reading is streaming (line by line, never the whole file) and every problem
with the input is raised as :class:`~crfkit.errors.DataError` whose message is
``path:line: problem`` (lines are 1-based), never as an ``IndexError`` or a
``UnicodeDecodeError`` from deep inside.
"""

from __future__ import annotations

import collections
import gzip
import io
import os
import re
import sys
import warnings
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import IO, TextIO

from crfkit.errors import DataError, DataWarning

__all__ = [
    "MAX_SENTENCE_TOKENS",
    "LineSource",
    "Sentence",
    "open_source",
    "open_text",
    "read_columns",
    "read_columns_list",
    "write_columns",
]

DOCSTART = "-DOCSTART-"
#: most tokens in one sentence (a blank line ends a sentence): every reader refuses a longer one,
#: naming its first line, before training or tagging allocates per-token tables for it (a
#: 10-million-token sentence took 3.5 GB and then failed)
MAX_SENTENCE_TOKENS = 1_000_000
_DOCSTART_MODES = ("skip", "keep")
# errors a damaged or truncated gzip member can raise while it is read
_READ_ERRORS = (OSError, EOFError, zlib.error)


@dataclass
class Sentence:
    """One sentence of a column file.

    ``columns[i]`` holds the observation columns of token ``i`` (the label
    column removed when the file has labels), ``labels[i]`` its label (``None``
    when read with ``has_labels=False``), ``line`` the 1-based line number of
    the sentence's first token in the file.
    """

    columns: list[list[str]]
    labels: list[str] | None
    line: int

    def __len__(self) -> int:
        return len(self.columns)


# ---------------------------------------------------------------------------
# opening files


def _is_gz(path: str) -> bool:
    return path.endswith(".gz")


def open_text(path) -> TextIO:
    """Open ``path`` for reading text in UTF-8 (strict).

    A name ending in ``.gz`` is decompressed transparently; ``"-"`` is standard
    input (which is then not closed when the returned object is). Universal
    newlines: ``\\r\\n`` reads as ``\\n``. A file that cannot be opened raises
    :class:`DataError` naming it.
    """
    path = os.fspath(path)
    if path == "-":
        try:
            fd = sys.stdin.fileno()
        except (AttributeError, OSError, ValueError):
            return sys.stdin  # already a text stream (e.g. replaced in tests)
        return open(fd, encoding="utf-8", closefd=False)
    try:
        if _is_gz(path):
            return gzip.open(path, "rt", encoding="utf-8")
        return open(path, encoding="utf-8")
    except OSError as e:
        raise DataError(f"cannot open: {e.strerror or e}", path) from None


def _open_binary(path: str) -> tuple[IO[bytes], bool]:
    """(binary file object, whether we own it and must close it)."""
    if path == "-":
        buf = getattr(sys.stdin, "buffer", None)
        if buf is not None:
            return buf, False
        return sys.stdin, False  # a text stream: handled by _lines
    try:
        if _is_gz(path):
            return gzip.open(path, "rb"), True
        return open(path, "rb"), True
    except OSError as e:
        raise DataError(f"cannot open: {e.strerror or e}", path) from None


def _other_bom(raw: bytes) -> str | None:
    """The name of a UTF-16 / UTF-32 byte-order mark at the start of ``raw``, or None."""
    for mark, what in (
        (b"\xff\xfe\x00\x00", "UTF-32 little-endian"),
        (b"\x00\x00\xfe\xff", "UTF-32 big-endian"),
        (b"\xff\xfe", "UTF-16 little-endian"),
        (b"\xfe\xff", "UTF-16 big-endian"),
    ):
        if raw.startswith(mark):
            return what
    return None


# ---------------------------------------------------------------------------
# one input, opened once, looked at before it is read


#: how far :class:`LineSource` looks for the first line ending (bytes or characters)
LOOKAHEAD = 1 << 16
_GZIP_MAGIC = b"\x1f\x8b"
_EOL_BYTES = re.compile(rb"\r\n?|\n")
_EOL_TEXT = re.compile(r"\r\n?|\n")


class _Prefixed(io.RawIOBase):
    """``head`` then the rest of ``f``: what was read ahead, given back to a
    reader that needs the stream from its first byte (the gzip decoder)."""

    def __init__(self, head: bytes, f):
        self._head = head
        self._f = f

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        if self._head:
            n = min(len(b), len(self._head))
            b[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        read = getattr(self._f, "read1", None) or self._f.read
        data = read(len(b))
        b[: len(data)] = data
        return len(data)


class LineSource:
    """An input (file, ``.gz``, FIFO, pipe, standard input) opened once and
    read as lines, that can be looked at before it is read.

    Iterating gives its lines (``bytes``, or ``str`` for a text stream) with
    their line endings; :meth:`sniff` returns the first lines without
    consuming them, so a format can be detected on a pipe or a FIFO, which
    cannot be opened twice. Nothing is ever re-read from the path.

    - A stream whose first bytes are the gzip magic is decompressed whatever
      its name (``zcat``-free ``crfkit tag < x.gz``, a FIFO fed a ``.gz``).
    - **CR-only line endings** (classic Mac OS): when the first line ending
      of the input is a lone CR (``\\r`` not followed by ``\\n``), the input
      is read with universal newlines (CR, LF and CRLF each end a line) and a
      :class:`~crfkit.errors.DataWarning` naming the input says so. Without
      this the whole file reads as one line (one token). CRLF files and LF
      files are read as they are.
    """

    def __init__(self, f, name: str, owned: bool = False):
        self._f = f
        self.name = name
        self._closers = [f] if owned else []
        self._text = isinstance(f, io.TextIOBase)
        self._pending: collections.deque = collections.deque()
        self._error: BaseException | None = None
        self._gen = self._raw_lines() if hasattr(f, "read") else iter(f)
        #: ``"cr"`` once the input was found to end its lines with lone CRs, else ``"lf"``
        self.line_endings = "lf"

    # -- reading ahead
    def _read(self, n: int):
        read1 = getattr(self._f, "read1", None)
        return read1(n) if read1 is not None else self._f.read(n)

    def _prime(self):
        """Read until the first line ending is known (or LOOKAHEAD, or the
        end): returns what was read. Decides gzip and CR-only."""
        head = self._read(LOOKAHEAD)
        if not self._text:
            while len(head) == 1:  # a pipe may give one byte first
                more = self._read(LOOKAHEAD)
                if not more:
                    break
                head += more
            if head[:2] == _GZIP_MAGIC:
                self._f = gzip.GzipFile(
                    fileobj=io.BufferedReader(_Prefixed(head, self._f)), mode="rb"
                )
                self._closers.insert(0, self._f)
                head = self._read(LOOKAHEAD)
        nl, cr = ("\n", "\r") if self._text else (b"\n", b"\r")
        while head:
            i = head.find(nl)
            j = head.find(cr)
            if 0 <= j < len(head) - 1 and (i < 0 or j < i):
                if head[j + 1 : j + 2] != nl:
                    self.line_endings = "cr"
                break
            if i >= 0 or len(head) >= LOOKAHEAD:
                break
            more = self._read(LOOKAHEAD)
            if not more:
                break
            head += more
        return head

    def _raw_lines(self):
        head = self._prime()
        f = self._f
        if self.line_endings == "cr":
            warnings.warn(
                DataWarning(
                    f"{self.name}: the line endings are CR only (classic Mac OS): reading "
                    "each CR, LF or CRLF as the end of a line"
                ),
                stacklevel=2,
            )
            yield from self._universal(head)
            return
        nl = "\n" if self._text else b"\n"
        start = 0
        while True:
            i = head.find(nl, start)
            if i < 0:
                break
            yield head[start : i + 1]
            start = i + 1
        rest = head[start:]
        if rest:
            rest += f.readline()
            yield rest
        yield from f

    def _universal(self, head):
        eol = _EOL_TEXT if self._text else _EOL_BYTES
        nl, cr = ("\n", "\r") if self._text else (b"\n", b"\r")
        buf = head
        eof = False
        while True:
            pos = 0
            for m in eol.finditer(buf):
                if not eof and m.end() == len(buf) and m.group() == cr:
                    break  # a CR ending the buffer may be the first half of a CRLF
                yield buf[pos : m.start()] + nl
                pos = m.end()
            buf = buf[pos:]
            if eof:
                if buf:
                    yield buf
                return
            block = self._read(LOOKAHEAD)
            if block:
                buf += block
            else:
                eof = True

    def sniff(self, max_lines: int, max_bytes: int = 1 << 20) -> list[str]:
        """The first ``max_lines`` lines (at most about ``max_bytes``), decoded
        leniently, without consuming them: iterating afterwards gives them
        again. A read error stops the look and is raised again, in its place,
        by the iteration."""
        out = []
        size = 0
        for raw in self._pending:
            out.append(raw if isinstance(raw, str) else raw.decode("utf-8", errors="replace"))
            size += len(raw)
        while len(out) < max_lines and size < max_bytes and self._error is None:
            try:
                raw = next(self._gen)
            except StopIteration:
                break
            except Exception as e:  # noqa: BLE001 (kept and raised where the reader meets it)
                self._error = e
                break
            self._pending.append(raw)
            out.append(raw if isinstance(raw, str) else raw.decode("utf-8", errors="replace"))
            size += len(raw)
        return out

    def __iter__(self):
        while self._pending:
            yield self._pending.popleft()
        if self._error is not None:
            e, self._error = self._error, None
            raise e
        yield from self._gen

    def close(self) -> None:
        closers, self._closers = self._closers, []
        for f in closers:
            f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def open_source(source, name: str | None = None) -> LineSource:
    """A :class:`LineSource` over ``source``: a path (``.gz`` decompressed,
    ``"-"`` standard input; a FIFO or ``/dev/fd/N`` is opened once) or an open
    file object (binary or text; not closed by :meth:`LineSource.close`).
    ``name`` is what messages call it (default: the path, ``<stdin>``, or the
    object's ``.name``). A path that cannot be opened raises :class:`DataError`."""
    if isinstance(source, LineSource):
        return source
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        label = name if name is not None else ("<stdin>" if path == "-" else path)
        f, owned = _open_binary(path)
        return LineSource(f, label, owned)
    label = name if name is not None else str(getattr(source, "name", "<stream>"))
    return LineSource(source, label, False)


def _lines(f, name: str) -> Iterator[str]:
    """Decoded lines of ``f`` (binary or text), UTF-8 errors and read errors
    turned into DataError naming the line. A leading byte-order mark is
    dropped."""
    lineno = 0
    it = iter(f)
    while True:
        try:
            raw = next(it)
        except StopIteration:
            return
        except UnicodeDecodeError:
            # a text stream decodes by blocks: the bad byte is on this line or
            # a little after it
            raise DataError(
                "invalid UTF-8 (at or shortly after this line)", name, lineno + 1
            ) from None
        except _READ_ERRORS as e:
            raise DataError(f"cannot read: {e}", name, lineno + 1) from None
        lineno += 1
        if isinstance(raw, bytes):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                bom = _other_bom(raw) if lineno == 1 else None
                if bom:
                    raise DataError(
                        f"the file starts with a {bom} byte-order mark: it is {bom.split()[0]}, not "
                        "UTF-8; convert it (iconv -f " + bom.split()[0] + " -t UTF-8) or pass "
                        f"--encoding {bom.split()[0].lower()}",
                        name,
                        lineno,
                    ) from None
                raise DataError(
                    f"invalid UTF-8: byte {raw[e.start]:#04x} at byte {e.start + 1} of the line",
                    name,
                    lineno,
                ) from None
        else:
            text = raw
        if lineno == 1 and text.startswith("\ufeff"):
            text = text[1:]
        yield text


# ---------------------------------------------------------------------------
# reading


def read_columns(
    source,
    *,
    has_labels: bool = True,
    docstart: str = "skip",
    sep: str | None = None,
    name: str | None = None,
) -> Iterator[Sentence]:
    """Iterate over the sentences of a column file, streaming.

    ``source`` is a path (``str`` or ``os.PathLike``; ``.gz`` is decompressed,
    ``"-"`` is standard input) or an open file object (text, or binary which is
    decoded as UTF-8); ``name`` (default: its ``.name`` or ``"<stream>"``) is
    what messages call it. A file object is not closed; a file opened here is
    closed when the iterator is exhausted or closed.

    - columns are split by ``line.split()`` when ``sep`` is None, else by
      ``line.split(sep)`` (after removing the line ending);
    - an empty or whitespace-only line ends a sentence (several in a row are
      fine); ``\\r\\n`` line endings and a missing final newline are fine; a
      line starting with ``#`` is an ordinary token (CoNLL uses ``#`` as a word);
    - ``has_labels``: the last column is the label (a token line needs at least
      2 columns);
    - every token line of the file must have the same number of columns as the
      first token line (as CRF++ requires);
    - ``docstart="skip"``: a token line whose first column is ``-DOCSTART-`` is
      a document boundary: it is dropped and ends the current sentence (no
      empty sentence is produced, its column count is not checked);
      ``docstart="keep"``: it is an ordinary token.

    Argument errors (``docstart``, ``sep``) raise ``ValueError`` at once. The
    file is opened lazily, on the first ``next()``. Input errors raise
    :class:`DataError` (``path:line: problem``) while iterating; an input
    without a single token line raises ``DataError("empty input: no sentences
    found")`` when the iterator reaches the end, so a caller that consumes it
    fully never silently gets nothing.
    """
    if docstart not in _DOCSTART_MODES:
        raise ValueError(f"docstart must be one of {_DOCSTART_MODES}, not {docstart!r}")
    if sep is not None and (not isinstance(sep, str) or sep == ""):
        raise ValueError(f"sep must be None or a non-empty string, not {sep!r}")
    return _read(source, has_labels, docstart == "skip", sep, name)


def _memory_lines(buf: io.BytesIO) -> list[str] | None:
    """The lines of an in-memory input (``crfkit serve``'s request bodies) from its position on,
    split at once: what :func:`_lines` yields, without a generator step per line.  None (the caller
    goes through :func:`_lines`, which makes the error messages and the warnings) for input that is
    not valid UTF-8 or holds a CR (CRLF and CR-only line endings)."""
    raw = buf.getvalue()[buf.tell() :]
    if b"\r" in raw:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    buf.seek(0, io.SEEK_END)
    if text.startswith("\ufeff"):
        text = text[1:]
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def source_lines(source, name: str | None) -> Iterator[tuple[str, Iterator[str]]]:
    """Yield once ``(label, lines)`` for a path (``.gz``, ``-`` = stdin) or an open
    file, closing what it opened afterwards; the readers of crfkit.io share it.
    ``label`` names the source in error messages."""
    if isinstance(source, io.BytesIO):
        lines = _memory_lines(source)
        if lines is not None:
            yield (
                (name if name is not None else str(getattr(source, "name", "<stream>"))),
                iter(lines),
            )
            return
    src = open_source(source, name)
    label = name if name is not None else src.name
    try:
        yield label, _lines(src, label)
    finally:
        if src is not source:
            src.close()


def _read(source, has_labels: bool, skip_docstart: bool, sep: str | None, name: str | None):
    for label, lines in source_lines(source, name):
        yield from _parse(lines, label, has_labels, skip_docstart, sep)


def _parse(lines: Iterable[str], name: str, has_labels: bool, skip_docstart: bool, sep: str | None):
    expected = None  # column count fixed by the first token line
    expected_line = 0
    columns: list[list[str]] = []
    labels: list[str] = []
    first = 0
    produced = 0
    lineno = 0
    for text in lines:
        lineno += 1
        if sep is None:
            fields = text.split()
        elif text.isspace() or not text:
            fields = []
        else:
            fields = text.rstrip("\r\n").split(sep)
        if not fields:
            if columns:
                produced += 1
                yield Sentence(columns, labels if has_labels else None, first)
                columns, labels = [], []
            continue
        if skip_docstart and fields[0] == DOCSTART:
            if columns:
                produced += 1
                yield Sentence(columns, labels if has_labels else None, first)
                columns, labels = [], []
            continue
        n = len(fields)
        if n != expected:
            if expected is None:
                if has_labels and n < 2:
                    raise DataError(
                        f"missing label: {n} column, expected at least 2 "
                        "(observation columns then the label)",
                        name,
                        lineno,
                    )
                expected, expected_line = n, lineno
            else:
                raise DataError(
                    f"ragged columns: {n} column{'s' if n != 1 else ''}, expected {expected} "
                    f"(the count set by the first token line, line {expected_line}); "
                    "every token line must have the same number of columns",
                    name,
                    lineno,
                )
        if not columns:
            first = lineno
        elif len(columns) >= MAX_SENTENCE_TOKENS:
            raise _too_long(name, first)
        if has_labels:
            labels.append(fields.pop())
        columns.append(fields)
    if columns:
        produced += 1
        yield Sentence(columns, labels if has_labels else None, first)
    if not produced:
        raise DataError("empty input: no sentences found", name)


def _too_long(name: str, first: int) -> DataError:
    return DataError(
        f"the sentence starting here has more than {MAX_SENTENCE_TOKENS} tokens "
        "(MAX_SENTENCE_TOKENS); a blank line ends a sentence: is the input missing them?",
        name,
        first,
    )


def read_columns_list(
    source,
    *,
    has_labels: bool = True,
    docstart: str = "skip",
    sep: str | None = None,
    name: str | None = None,
) -> list[Sentence]:
    """All sentences of a column file as a list (same arguments as
    :func:`read_columns`); raises :class:`DataError` on an empty input."""
    return list(read_columns(source, has_labels=has_labels, docstart=docstart, sep=sep, name=name))


# ---------------------------------------------------------------------------
# writing


def _rows_of(item) -> list[list[str]]:
    if isinstance(item, Sentence):
        if item.labels is None:
            return [list(c) for c in item.columns]
        if len(item.labels) != len(item.columns):
            raise DataError(
                f"sentence at line {item.line} has {len(item.columns)} tokens but {len(item.labels)} labels"
            )
        return [list(c) + [lab] for c, lab in zip(item.columns, item.labels)]
    return [list(r) for r in item]


def write_columns(
    sentences: Iterable[Sentence | Sequence[Sequence[str]]],
    out,
    *,
    extra: Iterable[Sequence[str | Sequence[str]]] | None = None,
    sep: str = "\t",
    labels: bool = True,
) -> int:
    """Write sentences as a column file; returns the number of sentences.

    ``sentences`` holds :class:`Sentence` objects (written as their
    observation columns then, when ``labels`` is true and it has them, the
    label) or plain lists of rows (one list of strings per token, written as
    is). ``extra``, when given, runs parallel to ``sentences``: for each
    sentence one entry per token, a string (one more column) or a sequence of
    strings (several), appended after the token's columns (e.g. the predicted
    label, as ``crf_test`` prints it). Fields are joined by ``sep`` (tab by
    default; ``" "`` gives CoNLL style); every sentence is followed by a blank
    line.

    ``out`` is a path (``.gz`` compressed, ``"-"`` standard output) or a text
    file object (not closed). A field that would not read back as one column
    (it contains a line break, or ``sep``, or whitespace when ``sep`` is
    whitespace, or is empty then) raises :class:`DataError`, as does an
    ``extra`` entry whose length differs from its sentence's.
    """
    if not isinstance(sep, str) or sep == "":
        raise ValueError(f"sep must be a non-empty string, not {sep!r}")
    if isinstance(out, (str, os.PathLike)):
        path = os.fspath(out)
        if path == "-":
            return _write(sentences, sys.stdout, extra, sep, labels)
        try:
            f = (
                gzip.open(path, "wt", encoding="utf-8", newline="\n")
                if _is_gz(path)
                else open(path, "w", encoding="utf-8", newline="\n")
            )
        except OSError as e:
            raise DataError(f"cannot open for writing: {e.strerror or e}", path) from None
        with f:
            return _write(sentences, f, extra, sep, labels)
    return _write(sentences, out, extra, sep, labels)


def _write(sentences, f, extra, sep: str, with_labels: bool) -> int:
    ws_sep = sep.isspace()
    extra_it = iter(extra) if extra is not None else None
    count = 0
    for item in sentences:
        count += 1
        if isinstance(item, Sentence) and not with_labels:
            rows = [list(c) for c in item.columns]
        else:
            rows = _rows_of(item)
        if extra_it is not None:
            try:
                more = next(extra_it)
            except StopIteration:
                raise DataError(
                    f"extra columns given for {count - 1} sentences, but there are more"
                ) from None
            more = list(more)
            if len(more) != len(rows):
                raise DataError(
                    f"sentence {count}: {len(rows)} tokens but {len(more)} entries of extra columns"
                )
            for r, m in zip(rows, more):
                if isinstance(m, str):
                    r.append(m)
                else:
                    r.extend(m)
        buf = []
        for i, r in enumerate(rows):
            line = sep.join(r)
            bad = "\n" in line or "\r" in line or not line or line.isspace()
            if not bad:
                if ws_sep:
                    bad = len(line.split()) != len(r)
                else:
                    bad = line.count(sep) != len(r) - 1
            if bad or not r:
                raise DataError(
                    f"sentence {count}, token {i + 1}: fields {r!r} would not read back "
                    f"as {len(r)} columns (a field is empty, or holds a line break or the separator)"
                )
            buf.append(line)
        buf.append("")
        f.write("\n".join(buf))
        f.write("\n")
    if extra_it is not None and next(extra_it, None) is not None:
        raise DataError(f"extra columns given for more than the {count} sentences")
    return count
