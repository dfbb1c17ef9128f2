"""What ``crfkit tag`` and the CLI's other commands read and write: input format detection,
re-encoding to UTF-8, the atomic output (:class:`Output`), a CRFsuite sequence's tagged layout and the
``--eval`` report (:class:`EvalReport`)."""

from __future__ import annotations

import gzip
import io
import os
import sys
from typing import TextIO

from ..errors import CrfkitError, DataError

#: the exit status of an error crfkit reports (``crfkit: error: ...``): a refused input or option
EXIT_ERROR = 2


def print_error(msg: str) -> None:
    print(f"crfkit: error: {msg}", file=sys.stderr, flush=True)


def print_stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


FORMATS = ("columns", "crfsuite", "auto")


def detect_format(fmt: str, path: str):
    """(``"columns"`` or ``"crfsuite"``, the source to read).

    ``auto`` opens the input once (:func:`crfkit.io.columns.open_source`) and
    applies :func:`crfkit.io.crfsuite.looks_like_crfsuite` to its first lines,
    which the reader then gets again from the same stream: a pipe, a FIFO,
    ``/dev/fd/N`` or standard input is never reopened nor read twice, and
    never read whole into memory. The caller closes the returned source.
    """
    if isinstance(path, io.BufferedReader):  # re-encoded as it is read (--encoding): a stream
        if fmt != "auto":
            return fmt, path
        from ..io.columns import LineSource
        from ..io.crfsuite import DETECT_LINES, looks_like_crfsuite

        src = LineSource(path, source_name(path), owned=True)
        head = src.sniff(4 * DETECT_LINES)
        return ("crfsuite" if looks_like_crfsuite(head) else "columns"), src
    if not isinstance(path, str):  # already read and re-encoded (crfkit serve): bytes in memory
        if fmt != "auto":
            return fmt, path
        from ..io.crfsuite import DETECT_LINES, looks_like_crfsuite

        head = (
            path.getvalue()[: 1 << 20]
            .decode("utf-8", errors="replace")
            .splitlines()[: 4 * DETECT_LINES]
        )
        return ("crfsuite" if looks_like_crfsuite(head) else "columns"), path
    if fmt != "auto":
        return fmt, path
    from ..io.columns import open_source
    from ..io.crfsuite import DETECT_LINES, looks_like_crfsuite

    src = open_source(path)
    head = src.sniff(4 * DETECT_LINES)
    return ("crfsuite" if looks_like_crfsuite(head) else "columns"), src


def close_source(src) -> None:
    close = getattr(src, "close", None)
    if close is not None and not isinstance(src, str):
        close()


#: codecs that ``--encoding`` refuses although Python calls them text encodings: they do not
#: decode a file's text chunk by chunk (punycode, idna) or decode nothing (undefined)
_NOT_FILE_ENCODINGS = frozenset({"punycode", "idna", "undefined"})
_RECODE_CHUNK = 1 << 16


def text_codec(encoding: str):
    """The :class:`codecs.CodecInfo` of ``--encoding ENC``: a :class:`CrfkitError` for an unknown
    name and for a codec that is not a text encoding (``rot13``, ``hex``, ``base64``, ``zlib``,
    ``bz2``, ``uu``: bytes-to-bytes or str-to-str transforms; ``punycode``, ``idna``: not file
    encodings)."""
    import codecs

    try:
        info = codecs.lookup(encoding)
    except LookupError:
        raise CrfkitError(f"--encoding {encoding}: unknown encoding") from None
    if not getattr(info, "_is_text_encoding", True) or info.name in _NOT_FILE_ENCODINGS:
        raise CrfkitError(
            f"--encoding {encoding}: {info.name} is not a text encoding; give the encoding the "
            "file's text is written in (e.g. latin-1, cp1252, utf-16)"
        )
    return info


class _Recoded(io.RawIOBase):
    """A binary stream read in chunks, decoded from ``encoding`` and given back as UTF-8 bytes:
    ``--encoding`` in bounded memory whatever the input's size.  A byte the encoding cannot
    decode is a :class:`DataError` naming the input and (about) its byte offset."""

    def __init__(self, f, info, name: str, owned: bool):
        self._f = f
        self._owned = owned
        self._enc = info.name
        self._dec = info.incrementaldecoder("strict")
        self._buf = memoryview(b"")
        self._eof = False
        self._consumed = 0
        self.name = name

    def readable(self) -> bool:
        return True

    def _fill(self) -> None:
        while not self._buf and not self._eof:
            try:
                raw = self._f.read(_RECODE_CHUNK)
            except (OSError, EOFError) as e:
                raise DataError(
                    f"cannot read: {getattr(e, 'strerror', None) or e}", self.name
                ) from None
            if not self._consumed and self._enc in ("utf-16", "utf-32"):
                # as bytes.decode: without a byte-order mark, the machine's byte order (the
                # incremental decoder would refuse the stream)
                import codecs

                boms = (
                    (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)
                    if self._enc == "utf-16"
                    else (codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)
                )
                if not raw.startswith(boms):
                    order = "le" if sys.byteorder == "little" else "be"
                    self._dec = codecs.getincrementaldecoder(f"{self._enc}-{order}")("strict")
            try:
                pending = len(self._dec.getstate()[0])
            except (AttributeError, TypeError, IndexError):  # pragma: no cover
                pending = 0
            try:
                text = self._dec.decode(raw, final=not raw)
            except UnicodeError as e:
                at = self._consumed - pending + getattr(e, "start", 0) + 1
                raise DataError(
                    f"not valid {self._enc} (byte {max(at, 1)} of the file)", self.name
                ) from None
            self._consumed += len(raw)
            self._eof = not raw
            self._buf = memoryview(text.encode("utf-8", "surrogatepass"))

    def readinto(self, b) -> int:
        self._fill()
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n

    def close(self) -> None:
        if not self.closed and self._owned:
            self._f.close()
        super().close()


def recode(path, encoding: str | None):
    """``path`` itself when ``encoding`` is None or UTF-8; else a stream that reads the file (or
    standard input) in chunks, decodes it from ``encoding`` (a text encoding only:
    :func:`text_codec`) and gives UTF-8 bytes, named as the file: memory stays bounded whatever the
    input's size.  An input already in memory (``crfkit serve``'s request body) is decoded
    whole."""
    if (
        path is None
        or not encoding
        or encoding.lower().replace("-", "").replace("_", "") in ("utf8", "utf8sig")
    ):
        return path
    info = text_codec(encoding)
    if not isinstance(path, str):  # already in memory (crfkit serve: a request's body)
        raw, name = path.getvalue(), getattr(path, "name", "<input>")
        return _recoded(raw, encoding, name)
    name = "<stdin>" if path == "-" else path
    try:
        if path == "-":
            f, owned = sys.stdin.buffer, False
        elif path.endswith(".gz"):
            f, owned = gzip.open(path, "rb"), True
        else:
            f, owned = open(path, "rb"), True
    except OSError as e:
        raise DataError(f"cannot read: {e.strerror or e}", name) from None
    return io.BufferedReader(_Recoded(f, info, name, owned), _RECODE_CHUNK)


def _recoded(raw: bytes, encoding: str, name: str):
    try:
        text = raw.decode(encoding)
    except UnicodeError as e:
        at = getattr(e, "start", 0) + 1
        raise DataError(f"not valid {encoding} (byte {at} of the file)", name) from None
    src = io.BytesIO(text.lstrip("\ufeff").encode("utf-8"))
    src.name = name
    return src


def source_name(src) -> str:
    if isinstance(src, str):
        return "<stdin>" if src == "-" else src
    return str(getattr(src, "name", "<stream>"))


def read_attribute_file(src, progress=None):
    """(X, Y, sequences) of a CRFsuite attribute file; ``progress``: a bar
    factory ``progress(desc, total)`` (``crfkit train``'s progress bars) or ``None``."""
    from ..io.crfsuite import read_crfsuite, read_crfsuite_list

    name = source_name(src)
    if progress is None:
        seqs = read_crfsuite_list(src, name=name)
    else:
        seqs = []
        with progress(f"reading {name}", None) as bar:
            for s in read_crfsuite(src, name=name):
                seqs.append(s)
                bar.update(1)
    return [s.attributes for s in seqs], [s.labels for s in seqs], seqs


def open_out(path) -> tuple[TextIO, bool]:
    """(the stream ``crfkit tag`` writes to, whether the caller closes it): standard output for
    None or ``-``, a stream given instead of a path as it is (``crfkit serve``), else the file."""
    if path is None or path == "-":
        return sys.stdout, False
    if hasattr(path, "write"):
        return path, False
    try:
        if path.endswith(".gz"):
            return gzip.open(path, "wt", encoding="utf-8", newline="\n"), True
        return open(path, "w", encoding="utf-8", newline="\n"), True
    except OSError as e:
        raise DataError(f"cannot open for writing: {e.strerror or e}", path) from None


class Output:
    """Where ``crfkit tag`` writes: standard output, or ``-o PATH`` written to a
    temporary file beside it and renamed onto it at the end, so that an error
    in the input met half-way (tagging streams) leaves no partial output and an
    existing file untouched. A symbolic link is written through (its target is
    replaced, as ``open`` would write it); an existing file keeps its
    permissions. A path that is not a regular file (a FIFO, ``/dev/stdout``) is
    written directly."""

    def __init__(self, path: str | None):
        self.path = path
        self.tmp = None
        self.raw = None
        if path is None or path == "-":
            self.f = sys.stdout
            return
        if hasattr(path, "write"):  # a stream (crfkit serve): written as it is, not closed
            self.f = path
            return
        if os.path.exists(path) and not os.path.isfile(path):
            self.f, _ = open_out(path)
            return
        import tempfile

        target = os.path.realpath(path)  # through a symbolic link, to what it names
        self.target = target
        d = os.path.dirname(target)
        base = os.path.basename(path)
        try:
            mode = os.stat(target).st_mode & 0o7777
        except OSError:
            mode = 0o666 & ~_umask()  # as an ordinary open would create it
        try:
            fd, self.tmp = tempfile.mkstemp(
                prefix=f".{os.path.basename(target)}.", suffix=".part", dir=d
            )
            os.close(fd)
            os.chmod(self.tmp, mode)
        except OSError as e:
            raise DataError(f"cannot open for writing: {e.strerror or e}", path) from None
        try:
            if path.endswith(".gz"):  # the gzip header names the file, not the temporary one
                import io

                self.raw = open(self.tmp, "wb")
                gz = gzip.GzipFile(filename=base, mode="wb", fileobj=self.raw)
                self.f = io.TextIOWrapper(gz, encoding="utf-8", newline="\n")
            else:
                self.f = open(self.tmp, "w", encoding="utf-8", newline="\n")
        except OSError as e:
            self._drop()
            raise DataError(f"cannot open for writing: {e.strerror or e}", path) from None

    def _drop(self) -> None:
        if self.tmp is not None:
            try:
                os.unlink(self.tmp)
            except OSError:
                pass
            self.tmp = None

    def __enter__(self):
        return self.f

    def __exit__(self, exc_type, exc, tb):
        if self.f is sys.stdout or self.f is self.path:
            if exc_type is None:
                self.f.flush()
            return False
        try:
            self.f.close()
            if self.raw is not None:
                self.raw.close()
        except BaseException:
            self._drop()
            raise
        if exc_type is not None:
            self._drop()
        elif self.tmp is not None:
            try:
                os.replace(self.tmp, self.target)
            except OSError as e:
                self._drop()
                raise DataError(f"cannot write: {e.strerror or e}", self.path) from None
            self.tmp = None
        return False


def _umask() -> int:
    m = os.umask(0o022)
    os.umask(m)
    return m


class EvalReport:
    """What ``crfkit tag --eval`` reports, accumulated batch by batch: the
    conlleval counts (not the sentences), the token accuracy, the labels seen and
    the gold labels the model never saw. ``raw``: every tag but O is a chunk of
    its own (conlleval -r)."""

    def __init__(self, model, raw: bool = False):
        from collections import Counter

        from ..metrics import ConllCounter

        self.known = set(model.labels)
        self.raw = bool(raw)
        self.unseen: Counter = Counter()
        self.gold_labels: set = set()
        self.counter = ConllCounter()
        self.n_tokens = 0
        self.n_correct = 0
        self.n_sequences = 0

    def add(self, gold, pred) -> None:
        feed = self.counter.feed
        known = self.known
        raw = self.raw
        for i, (g, p) in enumerate(zip(gold, pred)):
            if len(g) != len(p):  # pragma: no cover (the tagger gives one label per token)
                raise DataError(
                    f"sentence {i}: gold has {len(g)} tokens but the prediction has {len(p)}"
                )
            self.n_sequences += 1
            for gt, pt in zip(g, p):
                if raw:
                    feed(gt if gt == "O" else f"B-{gt}", pt if pt == "O" else f"B-{pt}")
                else:
                    feed(gt, pt)
                self.n_tokens += 1
                self.n_correct += gt == pt
                self.gold_labels.add(gt)
                if gt not in known:
                    self.unseen[gt] += 1
            self.counter.boundary()

    def report(self) -> None:
        """On stderr: the conlleval report when the labels are chunk tags (or ``raw``), else token
        accuracy; and a line about gold labels the model never saw (their tokens were tagged
        anyway; they can only count as errors)."""
        from ..metrics import label_scheme

        unseen = self.unseen
        if not self.raw and label_scheme(sorted(self.known | self.gold_labels)) is None:
            n = self.n_tokens
            acc = 100.0 * self.n_correct / n if n else 0.0
            sys.stderr.write(
                f"accuracy: {acc:.2f}% of {n} tokens ({self.n_sequences} sequences); the labels are "
                "not chunk tags, so no chunk F1 (--raw scores every tag as a chunk, as conlleval -r)\n"
            )
        else:
            sys.stderr.write(self.counter.report().format())
        if unseen:
            listed = ", ".join(f"{lab} ({n})" for lab, n in unseen.most_common(10))
            more = f" and {len(unseen) - 10} more" if len(unseen) > 10 else ""
            sys.stderr.write(
                f"gold labels the model never saw in training, {sum(unseen.values())} tokens: "
                f"{listed}{more}\n"
            )
        sys.stderr.flush()


def crfsuite_sequence(args, names, ys, gold, prob, marg, full) -> str:
    """One tagged sequence in ``crfkit tag --format crfsuite``'s layout (see :func:`_tag_crfsuite`):
    ``prob`` the sequence's probability, ``marg[t]`` the predicted label's marginal, ``full[t]`` the
    marginals of every label (in ``names``' order); each None when not asked for."""
    buf = []
    if prob is not None:
        buf.append(f"@probability\t{float(prob):.6f}")
    for t, lab in enumerate(ys):
        line = f"{gold[t]}\t{lab}" if args.reference else lab
        if marg is not None:
            line += f":{marg[t]:.6f}"
        if full is not None:
            line += "\t" + "\t".join(f"{n}:{p:.6f}" for n, p in zip(names, full[t].tolist()))
        buf.append(line)
    buf.append("")
    return "\n".join(buf) + "\n"


def report_eval(model, gold, pred, raw: bool = False) -> None:
    """The ``--eval`` report of whole lists of gold and predicted label sequences (see
    :class:`EvalReport`)."""
    ev = EvalReport(model, raw)
    ev.add(gold, pred)
    ev.report()
