"""CRFsuite attribute files (the input of ``crfsuite learn`` and ``crfsuite tag``).

One item (token) per line: its label, then its attributes, all separated by
TAB characters; an empty line ends an item sequence::

    B-NP<TAB>w[0]=Confidence<TAB>pos[0]=NN<TAB>__BOS__
    B-PP<TAB>w[0]=in<TAB>pos[0]=IN<TAB>len:2.5
    ...
    <empty line>

What this module implements (checked against CRFsuite's manual and the
behaviour of its data reader; where crfkit is stricter it says so):

* **Fields** are separated by TAB only: spaces belong to names. Empty fields
  (two TABs in a row, a TAB at the end of the line) are skipped, as CRFsuite
  skips them.
* **First field = label.** It is always present, also in files to tag (where
  it may be a dummy; ``crfkit tag --eval`` scores against it). A line that
  starts with a TAB has no label and is an error (CRFsuite would silently take
  the first attribute as the label). A line with only a label is a token
  with no attributes.
* **Attribute** = ``name`` or ``name:weight``. The weight ("scaling value")
  multiplies the feature; without one it is 1. ``name:`` (empty weight) also
  means 1, as in CRFsuite. The weight must be a decimal number (``2``,
  ``-0.5``, ``1e-3``); anything else (``a:xyz``), a non-finite weight
  (``inf``, ``nan``, ``1e999``) or a second unescaped colon (``a:1:2``) is a
  :class:`~crfkit.errors.DataError` (CRFsuite's ``atof`` would silently read
  a bad weight as 0). An empty name (``:2``) is an error.
* **Escaping** (in names and labels): ``\\:`` is a literal colon, ``\\\\`` a
  literal backslash; the first *unescaped* colon separates the name from the
  weight. A backslash before any other character, or at the end of a field,
  is an ordinary character, exactly as CRFsuite reads it: files made by
  CRFsuite's own example scripts hold words like ``w[0]=1\\/2`` (from the Penn
  Treebank) unescaped, and they read as written. ``strict=True`` makes such
  a lone backslash a DataError instead (useful to check files that are meant
  to be fully escaped, as :func:`write_crfsuite` writes them).
* **Labels** are unescaped like names; an unescaped colon in a label is an
  error (CRFsuite would drop what follows it).
* **Declarations**: a line whose first field starts with ``@`` is a
  declaration, not an item. ``@weight:W`` (on a line of its own) sets the
  weight of the sequence it sits in (CRFsuite's instance weighting,
  :attr:`AttributeSequence.weight`); any other declaration is an error. So a
  label cannot start with ``@`` (CRFsuite has the same restriction).
* Blank lines: an empty line, or one holding only spaces and TABs, ends a
  sequence (CRFsuite itself takes only an empty line); several in a row are fine; a final sequence
  without a blank line after it is fine. ``\\r\\n`` line endings read as ``\\n``. ``#`` has no
  special meaning (it is a valid label: the Penn Treebank tag ``#``).
* Files are UTF-8 (strict); a name ending in ``.gz`` is decompressed; ``-`` is
  standard input. A leading byte-order mark is dropped.

Reading is streaming (one sequence at a time); every problem is a
:class:`~crfkit.errors.DataError` ``path:line: problem``.

The attribute lists read here are crfkit's attribute input everywhere
(:func:`crfkit.train.train`, :meth:`crfkit.model.CRFModel.tag`): a token is a
list whose entries are ``str`` (weight 1) or ``(str, float)`` pairs. An
attribute written with an explicit weight is read as a pair (also ``a:1``),
one without as a plain string, so that writing what was read gives the same
text back.
"""

from __future__ import annotations

import gzip
import math
import os
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TextIO

from crfkit.errors import DataError
from crfkit.io.columns import MAX_SENTENCE_TOKENS, source_lines

__all__ = [
    "AttributeSequence",
    "read_crfsuite",
    "read_crfsuite_list",
    "write_crfsuite",
    "escape",
    "unescape",
    "format_attribute",
    "parse_attribute",
    "looks_like_crfsuite",
]

# a decimal number as C's strtod reads it (no hex, no inf/nan words)
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
# an unescaped colon, in a field without escaped backslashes
_SEPARATOR = re.compile(r"(?<!\\):")
# pieces of a field holding a backslash: an escape pair, a lone backslash, a
# colon, or a run of other characters
_PIECES = re.compile(r"\\[\\:]|\\|:|[^\\:]+")


@dataclass
class AttributeSequence:
    """One item sequence of a CRFsuite file.

    ``attributes[t]``: the attributes of item ``t`` (``str``, or ``(str,
    float)`` when a weight was written); ``labels[t]``: its label (the first
    field); ``line``: the 1-based line of the first item; ``weight``: the
    sequence weight set by an ``@weight`` declaration (1.0 without one).
    """

    attributes: list[list]
    labels: list[str]
    line: int = 0
    weight: float = 1.0

    def __len__(self) -> int:
        return len(self.attributes)


# ---------------------------------------------------------------------------
# escaping


def escape(name: str) -> str:
    """``name`` with ``\\`` written as ``\\\\`` and ``:`` as ``\\:`` (CRFsuite's escapes)."""
    if "\\" in name:
        name = name.replace("\\", "\\\\")
    if ":" in name:
        name = name.replace(":", "\\:")
    return name


def _split_escaped(text: str, strict: bool, name: str, lineno: int) -> tuple[str, str | None]:
    """(unescaped name, raw weight text or None) of one field holding a backslash."""
    out: list[str] = []
    weight = None
    for m in _PIECES.finditer(text):
        piece = m.group()
        if piece == ":":
            weight = text[m.end() :]
            break
        if piece[0] == "\\":
            if len(piece) == 2:
                out.append(piece[1])
            else:
                if strict:
                    where = "at the end of" if m.end() == len(text) else "inside"
                    raise DataError(
                        f"lone backslash {where} field {text!r}: write '\\\\' for a backslash, "
                        "'\\:' for a colon",
                        name,
                        lineno,
                    )
                out.append("\\")
        else:
            out.append(piece)
    return "".join(out), weight


def unescape(text: str, *, strict: bool = False) -> str:
    """The name written as ``text`` (``\\:`` -> ``:``, ``\\\\`` -> ``\\``); an
    unescaped colon is an error here (use :func:`parse_attribute` for
    ``name:weight``)."""
    if "\\" not in text:
        if ":" in text:
            raise DataError(f"unescaped ':' in {text!r}")
        return text
    s, w = _split_escaped(text, strict, None, None)
    if w is not None:
        raise DataError(f"unescaped ':' in {text!r}")
    return s


def _weight(raw: str, field_text: str, name: str, lineno: int) -> float:
    if not _NUMBER.fullmatch(raw):
        if ":" in raw and "\\" not in raw:
            problem = (
                f"attribute {field_text!r} has more than one unescaped ':' "
                "(write '\\:' for a colon in a name)"
            )
        else:
            problem = f"attribute {field_text!r}: weight {raw!r} is not a number"
        raise DataError(problem, name, lineno)
    v = float(raw)
    if not math.isfinite(v):
        raise DataError(f"attribute {field_text!r}: weight {raw!r} is not finite", name, lineno)
    return v


def parse_attribute(
    text: str, *, strict: bool = False, name: str | None = None, line: int | None = None
):
    """One attribute field -> ``str`` (no weight written) or ``(str, float)``."""
    if "\\" not in text:
        if ":" not in text:
            if not text:
                raise DataError("empty attribute name", name, line)
            return text
        n, _, raw = text.partition(":")
    else:
        n, raw = _split_escaped(text, strict, name, line)
        if raw is None:
            if not n:
                raise DataError("empty attribute name", name, line)
            return n
    if not n:
        raise DataError(f"attribute {text!r} has an empty name", name, line)
    if raw == "":
        return (n, 1.0)  # CRFsuite: an empty value means 1
    return (n, _weight(raw, text, name, line))


def format_attribute(attr) -> str:
    """One attribute (``str`` or ``(str, number)``) as written in a file."""
    if isinstance(attr, str):
        if not attr:
            raise DataError("empty attribute name: it cannot be written")
        _check_field(attr, "attribute name")
        return escape(attr)
    try:
        n, v = attr
    except (TypeError, ValueError):
        raise DataError(
            f"an attribute must be a string or a (string, number) pair, got {attr!r}"
        ) from None
    if not isinstance(n, str) or not n:
        raise DataError(f"an attribute name must be a non-empty string, got {n!r}")
    _check_field(n, "attribute name")
    try:
        v = float(v)
    except (TypeError, ValueError):
        raise DataError(f"attribute {n!r} has a weight that is not a number: {v!r}") from None
    if not math.isfinite(v):
        raise DataError(f"attribute {n!r} has a non-finite weight {v!r}")
    return f"{escape(n)}:{v!r}"


def _check_field(s: str, what: str) -> None:
    if "\t" in s or "\n" in s or "\r" in s:
        raise DataError(
            f"{what} {s!r} holds a TAB or a line break: it cannot be written in a CRFsuite file"
        )


# ---------------------------------------------------------------------------
# reading


def read_crfsuite(
    source, *, name: str | None = None, strict: bool = False
) -> Iterator[AttributeSequence]:
    """Iterate over the item sequences of a CRFsuite attribute file, streaming.

    ``source``: a path (``.gz`` decompressed, ``"-"`` standard input) or an
    open file object (text, or binary decoded as UTF-8; not closed here);
    ``name``: what messages call it. The file is opened on the first
    ``next()``. Problems raise :class:`DataError` (``path:line: problem``); an
    input without a single item raises ``DataError("empty input: ...")`` at
    the end, so a caller that consumes it never silently gets nothing.
    ``strict``: a backslash that does not start ``\\:`` or ``\\\\`` is an error.
    """
    return _read(source, name, bool(strict))


def _read(source, name: str | None, strict: bool):
    for label, lines in source_lines(source, name):
        yield from _parse(lines, label, strict)


def _parse(lines: Iterable[str], name: str, strict: bool):
    attrs: list[list] = []
    labels: list[str] = []
    weight = 1.0
    weight_line = 0
    first = 0
    produced = 0
    lineno = 0
    for text in lines:
        lineno += 1
        if text.endswith("\n"):
            text = text[:-2] if text.endswith("\r\n") else text[:-1]
        elif text.endswith("\r"):
            text = text[:-1]
        if not text.strip(" \t"):
            if attrs:
                produced += 1
                yield AttributeSequence(attrs, labels, first, weight)
                attrs, labels = [], []
            elif weight_line:
                raise DataError(
                    "@weight declaration with no items after it in its sequence", name, weight_line
                )
            weight, weight_line = 1.0, 0
            continue
        if text[0] == "\t":
            raise DataError(
                "the line starts with a TAB: its first field must be the label "
                "(write a dummy label when tagging)",
                name,
                lineno,
            )
        if text[0] == "@":
            weight = _declaration(text.split("\t"), name, lineno, weight_line)
            weight_line = lineno
            continue
        if len(attrs) >= MAX_SENTENCE_TOKENS:
            raise DataError(
                f"the sequence starting here has more than {MAX_SENTENCE_TOKENS} items "
                "(MAX_SENTENCE_TOKENS); a blank line ends a sequence: is the input missing them?",
                name,
                first,
            )
        # Fast paths for whole lines (this loop sees every attribute of the file):
        # no backslash and no colon: nothing to unescape, no weights;
        # no escaped backslash and every colon escaped ('\:'): the names are the
        # line with '\:' made ':' (a lone backslash stays as it is), no weights.
        if "\\" not in text:
            if ":" not in text:
                fields = text.split("\t")
                labels.append(fields[0])
                tok = [f for f in fields[1:] if f]  # empty fields (TAB TAB, final TAB) are skipped
                if not attrs:
                    first = lineno
                attrs.append(tok)
                continue
        elif not strict and "\\\\" not in text and text.count(":") == text.count("\\:"):
            fields = text.replace("\\:", ":").split("\t")
            labels.append(fields[0])
            tok = [f for f in fields[1:] if f]
            if not attrs:
                first = lineno
            attrs.append(tok)
            continue
        fields = text.split("\t")
        head = fields[0]
        # the label
        if "\\" in head:
            lab, raw = _split_escaped(head, strict, name, lineno)
        else:
            lab, raw = head, (None if ":" not in head else "")
        if raw is not None:
            raise DataError(
                f"label {head!r} holds an unescaped ':' (write '\\:' for a colon in a label; "
                "a label takes no weight)",
                name,
                lineno,
            )
        # the attributes, field by field
        tok = []
        app = tok.append
        for f in fields[1:]:
            if not f:
                continue  # empty field: consecutive TABs / trailing TAB, skipped as CRFsuite does
            if "\\" in f:
                if strict or "\\\\" in f:
                    app(parse_attribute(f, strict=strict, name=name, line=lineno))
                    continue
                # no escaped backslash: every '\:' is an escaped colon, any other colon separates
                m = _SEPARATOR.search(f)
                if m is None:
                    app(f.replace("\\:", ":"))
                    continue
                n, raw = f[: m.start()].replace("\\:", ":"), f[m.end() :]
            elif ":" in f:
                n, _, raw = f.partition(":")
            else:
                app(f)
                continue
            if not n:
                raise DataError(f"attribute {f!r} has an empty name", name, lineno)
            app((n, 1.0) if raw == "" else (n, _weight(raw, f, name, lineno)))
        labels.append(lab)
        if not attrs:
            first = lineno
        attrs.append(tok)
    if attrs:
        produced += 1
        yield AttributeSequence(attrs, labels, first, weight)
    elif weight_line:
        raise DataError(
            "@weight declaration with no items after it in its sequence", name, weight_line
        )
    if not produced:
        raise DataError("empty input: no item sequences found", name)


def _declaration(fields: list[str], name: str, lineno: int, previous: int) -> float:
    head = fields[0]
    decl, sep, raw = head.partition(":")
    if decl != "@weight":
        raise DataError(
            f"unrecognized declaration {decl!r} (a label cannot start with '@'; "
            "the only declaration is '@weight:W')",
            name,
            lineno,
        )
    if any(fields[1:]):
        raise DataError("an @weight declaration stands on a line of its own", name, lineno)
    if previous:
        raise DataError(
            f"a second @weight declaration in one sequence (the first is on line {previous})",
            name,
            lineno,
        )
    if not sep or not raw:
        raise DataError("@weight needs a value: '@weight:W'", name, lineno)
    w = _weight(raw, head, name, lineno)
    if w < 0:
        raise DataError(f"sequence weight {raw!r} is negative", name, lineno)
    return w


def read_crfsuite_list(
    source, *, name: str | None = None, strict: bool = False
) -> list[AttributeSequence]:
    """All sequences of a CRFsuite file as a list (see :func:`read_crfsuite`)."""
    return list(read_crfsuite(source, name=name, strict=strict))


# ---------------------------------------------------------------------------
# writing


def _label_text(label, count: int, i: int) -> str:
    if not isinstance(label, str):
        raise DataError(f"sequence {count}, item {i + 1}: label {label!r} is not a string")
    if not label.strip(" "):
        raise DataError(
            f"sequence {count}, item {i + 1}: a label that is empty or only spaces cannot be "
            "written (its line would read as a blank line)"
        )
    if label[0] == "@":
        raise DataError(
            f"sequence {count}, item {i + 1}: label {label!r} starts with '@', "
            "which CRFsuite reads as a declaration"
        )
    _check_field(label, "label")
    return escape(label)


def write_crfsuite(
    data, out, labels: Sequence[Sequence[str]] | None = None, *, dummy_label: str | None = None
) -> int:
    """Write item sequences as a CRFsuite attribute file; returns the number of sequences.

    ``data``: :class:`AttributeSequence` objects (written with their labels
    and, when it is not 1, an ``@weight`` line), or attribute sequences (one
    list of attributes per token, each a ``str`` or a ``(str, number)`` pair)
    with their label sequences in ``labels``; for a file to tag without
    labels, give ``dummy_label`` instead (it is written as every item's
    label). Names and labels are escaped (``\\`` -> ``\\\\``, ``:`` ->
    ``\\:``); weights are written with ``repr`` (exact round trip).

    ``out``: a path (``.gz`` compressed, ``"-"`` standard output) or a text
    file object (not closed). Something that cannot be written so as to read
    back the same (a TAB or line break in a name or label, an empty name, a
    blank label, a label starting with ``@``, a non-finite weight) raises
    :class:`DataError`.
    """
    if labels is not None and dummy_label is not None:
        raise ValueError("give labels or dummy_label, not both")
    if isinstance(out, (str, os.PathLike)):
        path = os.fspath(out)
        if path == "-":
            return _write(data, sys.stdout, labels, dummy_label)
        try:
            f = (
                gzip.open(path, "wt", encoding="utf-8", newline="\n", compresslevel=6)
                if path.endswith(".gz")
                else open(path, "w", encoding="utf-8", newline="\n")
            )
        except OSError as e:
            raise DataError(f"cannot open for writing: {e.strerror or e}", path) from None
        with f:
            return _write(data, f, labels, dummy_label)
    return _write(data, out, labels, dummy_label)


def _write(data, f: TextIO, labels, dummy_label) -> int:
    lab_it = iter(labels) if labels is not None else None
    count = 0
    dummy = None
    if dummy_label is not None:
        dummy = _label_text(dummy_label, 1, 0)
    for item in data:
        count += 1
        weight = 1.0
        if isinstance(item, AttributeSequence):
            seq, labs, weight = item.attributes, item.labels, item.weight
            if lab_it is not None:
                raise ValueError(
                    "labels= is for plain attribute sequences; AttributeSequence objects carry theirs"
                )
        else:
            seq = item
            if lab_it is not None:
                try:
                    labs = next(lab_it)
                except StopIteration:
                    raise DataError(
                        f"labels given for {count - 1} sequences, but there are more"
                    ) from None
            elif dummy is not None:
                labs = None
            else:
                raise ValueError(
                    "plain attribute sequences need labels= (or dummy_label= for a file to tag)"
                )
        seq = list(seq)
        if not seq:
            raise DataError(f"sequence {count} is empty: an empty sequence cannot be written")
        if labs is not None:
            labs = list(labs)
            if len(labs) != len(seq):
                raise DataError(f"sequence {count}: {len(seq)} items but {len(labs)} labels")
        buf = []
        if weight != 1.0:
            w = float(weight)
            if not math.isfinite(w) or w < 0:
                raise DataError(f"sequence {count}: weight {weight!r} is not a finite number >= 0")
            buf.append(f"@weight:{w!r}")
        for i, tok in enumerate(seq):
            lab = dummy if labs is None else _label_text(labs[i], count, i)
            if isinstance(tok, (str, bytes)):
                raise DataError(
                    f"sequence {count}, item {i + 1}: the attributes of an item must be a list, "
                    f"got {tok!r}"
                )
            parts = [lab]
            app = parts.append
            try:
                for a in tok:
                    if type(a) is str and a:
                        if ":" in a or "\\" in a:
                            a = a.replace("\\", "\\\\").replace(":", "\\:")
                        app(a)
                    else:
                        app(format_attribute(a))
                line = "\t".join(parts)
                if line.count("\t") != len(parts) - 1 or "\n" in line or "\r" in line:
                    for a in tok:  # find the culprit, for the message
                        format_attribute(a)
            except DataError as e:
                raise DataError(f"sequence {count}, item {i + 1}: {e}") from None
            buf.append(line)
        buf.append("")
        f.write("\n".join(buf))
        f.write("\n")
    if lab_it is not None and next(lab_it, None) is not None:
        raise DataError(f"labels given for more than the {count} sequences")
    return count


# ---------------------------------------------------------------------------
# format detection

#: how many non-blank lines :func:`looks_like_crfsuite` looks at
DETECT_LINES = 200


def looks_like_crfsuite(lines: Iterable[str]) -> bool:
    """Whether text lines look like a CRFsuite attribute file rather than a column file.

    The rule (``crfkit train/tag --format auto``), on the first
    :data:`DETECT_LINES` non-blank lines: CRFsuite when *every* one of them
    holds a TAB and either

    * their numbers of TAB-separated fields differ (a column file has the same
      number of columns on every line), or
    * at least half of all fields after the first hold ``=`` or ``:``
      (attribute names such as ``w[0]=the``, or ``name:weight``);

    a column file otherwise (space-separated CoNLL files have no TAB at all).
    """
    counts = set()
    n_fields = 0
    n_marked = 0
    seen = 0
    for text in lines:
        text = text.rstrip("\r\n")
        if not text.strip(" \t"):
            continue
        seen += 1
        if "\t" not in text:
            return False
        fields = text.split("\t")
        counts.add(len(fields))
        for f in fields[1:]:
            n_fields += 1
            if "=" in f or ":" in f:
                n_marked += 1
        if seen >= DETECT_LINES:
            break
    if not seen:
        return False
    return len(counts) > 1 or (n_fields > 0 and 2 * n_marked >= n_fields)
