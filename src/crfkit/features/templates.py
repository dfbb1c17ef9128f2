r"""Feature templates in CRF++ syntax, with Wapiti's pattern extensions.

A template file holds one template per line; blank lines and lines starting
with ``#`` are comments::

    # Unigram
    U00:%x[-2,0]
    U05:%x[-1,0]/%x[0,0]
    U10:%x[0,1]/%x[1,1]/%x[2,1]
    U99:bias

    # Bigram
    B

- A line starting with ``U`` is a unigram (state) template. At each token it
  expands to one attribute string: the line's text kept literally, each macro
  ``%x[row,col]`` replaced by column ``col`` (0-based, among the observation
  columns) of the token ``row`` positions away. At token "He" followed by
  "reckons", ``U05:%x[0,0]/%x[1,0]`` gives ``U05:He/reckons``. The identifier
  (``U05:``) is just text: ``U:%x[0,0]`` is legal and gives ``U:He``, and a line
  without a macro (``U99:bias``, plain ``U``) is a constant attribute present at
  every token.
- Rows outside the sentence read CRF++'s padding tokens: ``_B-1``, ``_B-2``, ...
  for 1, 2, ... positions before the first token and ``_B+1``, ``_B+2``, ... after
  the last one (``apply(pad=True)``, the default). With ``pad=False`` a template
  that reaches outside the sentence gives no attribute at that token (the
  CRFsuite examples' convention).
- A line starting with ``B`` declares label-bigram (transition) features. A
  ``B`` line with macros (``B01:%x[0,0]``) is a bigram-observation template:
  at each token it expands, as a ``U`` line does, to an attribute string that
  is tested together with the label pair (previous label, label) of the
  transition into that token (CRF++ / Wapiti bigram features; the first
  token of a sentence has no incoming transition, so they do not fire there).
  They are kept in :attr:`Templates.bigram_observation` and expanded by
  :meth:`Templates.apply_bigram`; any ``B`` line sets ``has_transitions``.
  Plain label-pair (transition) features are trained only when a ``B`` line
  without macros is there (``Templates.bigram``), as CRF++ and Wapiti: a set
  of bigram-observation lines alone has no label-pair features of their own.
- Wapiti's pattern prefixes: ``u`` is a unigram template (as ``U``), ``b`` a
  bigram template (as ``B``: with macros bigram-observation, without them the
  label-bigram switch), ``*`` both at once (a unigram and a bigram-observation
  template on the same attribute string; without macros: a constant unigram
  attribute and the label-bigram switch).

Macros (``row`` an integer offset in ``-MAX_ROW_OFFSET..MAX_ROW_OFFSET``, i.e.
-1000..1000 -- CRF++ allows -8..8 --, ``col`` a 0-based column below
``MAX_COLUMN``, 100,000; a template set read from a file, or stored in a model
file, beyond these is refused with an error naming the file and line):

- ``%x[row,col]``: the column's text;
- ``%X[row,col]``: the same, lower-cased (Wapiti's case-insensitive form);
- ``%t[row,col,"regex"]``: ``true`` or ``false``: whether the regular
  expression matches somewhere in the text (``re.search``);
- ``%m[row,col,"regex"]``: the text the regular expression matches (its first
  match; empty when none);
- ``%T`` / ``%M``: as ``%t`` / ``%m``, matching case-insensitively.

Regular expressions are RE2's (Google's linear-time engine, the ``google-re2`` package): matching
takes time linear in the token's length whatever the pattern, so a template file or a model from a
stranger cannot stall tagging (Python's ``re`` backtracks: ``^(a+)+$`` on 31 letters took over a
minute).  The syntax is Perl's and Python's without backreferences (``\1``) and lookaround
(``(?=...)``, ``(?<=...)``...): literals, ``.``, ``[...]`` classes, ``* + ? {m,n}`` (counts up to
:data:`MAX_REGEX_REPEAT`) and their lazy forms, ``|``, groups (``(...)``, ``(?:...)``,
``(?P<name>...)``), anchors ``^ $ \z \b \B`` (``\A`` is Wapiti's non-letter class),
``\d \w \s`` (ASCII, as RE2 reads them), POSIX classes (``[[:alpha:]]``) and flags such as
``(?i)``.  A pattern RE2 refuses, one longer than :data:`MAX_REGEX_CHARS` characters or nesting
groups deeper than :data:`MAX_REGEX_DEPTH`, is an error naming the template file and line (or the
model's stored templates).  On top of RE2's syntax come Wapiti's character classes
``\a`` (letter), ``\l`` (lower case), ``\u`` (upper case), ``\p``
(punctuation) and their negations ``\A \L \U \P`` translated (outside
brackets; inside ``[...]`` only the positive ones); ``\"`` is a quote inside
the pattern.  A macro reaching outside the sentence gives the padding token
(``_B-1``...) whatever its kind (no case folding or regex test on it).
``%`` followed by another letter is an error; ``%`` followed by anything else
is literal text.  Errors name the template file and line.

Sizes: a template set holds at most :data:`MAX_TEMPLATES` template lines and
:data:`MAX_MACROS` macros in all, and its text is at most :data:`MAX_TEMPLATE_BYTES` bytes (a
template file or a model's stored templates beyond these is refused, naming the line where the
limit is crossed): the set is compiled into Python code whose size and compile time grow with them
(2,048 lines of two macros compile in about 2 s).

Speed: a template set is compiled once, at parse time, into a Python function
(source generated here and passed to ``exec``) whose inner loop is one list
display of f-strings per token over pre-padded column tuples, so applying ~20
templates to CoNLL-2000's 211,727 tokens takes about a second.  The padding is
built per sentence and only as far as the templates reach (a template set
reaching more than ``INLINE_PAD`` tokens away reads each macro's values
through :func:`_window`, which makes only the padding tokens that macro reads).
"""

from __future__ import annotations

import os
import re
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from crfkit.errors import DataError, TemplateError

__all__ = [
    "Macro",
    "Template",
    "UnigramTemplate",
    "Templates",
    "default_chunking_templates",
    "pad_token",
    "MAX_ROW_OFFSET",
    "MAX_COLUMN",
    "MAX_TEMPLATES",
    "MAX_MACROS",
    "MAX_TEMPLATE_BYTES",
    "MAX_REGEX_CHARS",
    "MAX_REGEX_DEPTH",
    "MAX_REGEX_REPEAT",
    "compile_regex",
]

MAX_ROW_OFFSET = 1000  # |row| of a macro (CRF++: 8)
MAX_COLUMN = 100_000  # col of a macro must be below this
INLINE_PAD = 32  # template sets reaching at most this far pad each column tuple whole
MAX_TEMPLATES = 2048  # template lines (U, B, u, b, *) in one set
MAX_MACROS = 4096  # macros in one set, all lines together
MAX_TEMPLATE_BYTES = 1 << 20  # the text of a template set (a file, a model's stored templates)
MAX_REGEX_CHARS = 1024  # characters of one %t/%m regular expression
MAX_REGEX_DEPTH = 32  # nested groups (...) in one regular expression
MAX_REGEX_REPEAT = 1000  # a counted repetition {m,n}: m, n at most this (RE2's own limit)
RE2_MAX_MEM = 8 << 20  # RE2's memory budget for one compiled pattern (RE2's default)
_RX_CACHE = 1 << 16  # answers a regex macro remembers (texts of at most _RX_CACHE_CHARS)
_RX_CACHE_CHARS = 64

_MACRO = re.compile(r"%([xX])\[\s*([+-]?\d+)\s*,\s*([+-]?\d+)\s*\]")
_MACRO_RX = re.compile(r'%([tTmM])\[\s*([+-]?\d+)\s*,\s*([+-]?\d+)\s*,\s*"((?:[^"\\]|\\.)*)"\s*\]')
_KINDS = "xXtTmM"

_PUNCT = re.escape(string.punctuation)
_CLASS_OUT = {
    "a": "[A-Za-z]",
    "A": "[^A-Za-z]",
    "l": "[a-z]",
    "L": "[^a-z]",
    "u": "[A-Z]",
    "U": "[^A-Z]",
    "p": f"[{_PUNCT}]",
    "P": f"[^{_PUNCT}]",
}
_CLASS_IN = {"a": "A-Za-z", "l": "a-z", "u": "A-Z", "p": _PUNCT}


def _wapiti_regex(rx: str) -> str:
    """Translate Wapiti's character classes (\\a \\l \\u \\p and negations) into Python syntax."""
    out = []
    i, n, inside = 0, len(rx), False
    while i < n:
        ch = rx[i]
        if ch == "\\" and i + 1 < n:
            nx = rx[i + 1]
            table = _CLASS_IN if inside else _CLASS_OUT
            if nx == '"':
                out.append('"')
            elif nx in table:
                out.append(table[nx])
            else:
                out.append(rx[i : i + 2])
            i += 2
            continue
        if ch == "[" and not inside:
            inside = True
            out.append(ch)
            # a ']' right after '[' or '[^' is literal
            if rx.startswith("^", i + 1):
                out.append("^")
                i += 1
            if rx.startswith("]", i + 1):
                out.append("\\]")
                i += 1
        elif ch == "]" and inside:
            inside = False
            out.append(ch)
        else:
            out.append(ch)
        i += 1
    return "".join(out)


_REPEAT = re.compile(r"\{\s*(\d+)\s*(?:,\s*(\d*)\s*)?\}")


def _regex_problem(rx: str) -> str | None:
    """Why the regular expression ``rx`` (as written in the template) is refused before it is
    compiled (too long, groups nested too deep, a repetition count over the limit), or None."""
    if len(rx) > MAX_REGEX_CHARS:
        return f"it is {len(rx)} characters long; the limit is {MAX_REGEX_CHARS}"
    depth = top = 0
    i, n, inside = 0, len(rx), False
    while i < n:
        ch = rx[i]
        if ch == "\\":
            i += 2
            continue
        if inside:
            inside = ch != "]"
        elif ch == "[":
            inside = True
            if rx.startswith("^", i + 1):
                i += 1
            if rx.startswith("]", i + 1):
                i += 1
        elif ch == "(":
            depth += 1
            top = max(top, depth)
        elif ch == ")":
            depth -= 1
        i += 1
    if top > MAX_REGEX_DEPTH:
        return f"its groups nest {top} deep; the limit is {MAX_REGEX_DEPTH}"
    for m in _REPEAT.finditer(rx):
        for g in m.groups():
            if g and (len(g) > 6 or int(g) > MAX_REGEX_REPEAT):
                return (
                    f"the repetition {_short(m.group(0))} is over the limit of {MAX_REGEX_REPEAT}"
                )
    return None


def compile_regex(rx: str, ignore_case: bool = False):
    """The RE2 program of a template's regular expression ``rx`` (Wapiti's classes translated):
    an object whose ``Match(anchor, data, start, end)`` gives byte spans.  Raises ``ValueError``
    (why) for a pattern refused by the limits (:data:`MAX_REGEX_CHARS`, :data:`MAX_REGEX_DEPTH`,
    :data:`MAX_REGEX_REPEAT`) or by RE2 (a syntax it lacks: backreferences, lookaround)."""
    why = _regex_problem(rx)
    if why is not None:
        raise ValueError(why)
    import re2

    opts = re2.Options()
    opts.log_errors = False
    opts.max_mem = RE2_MAX_MEM
    opts.case_sensitive = not ignore_case
    try:
        prog = re2._re2.RE2(_wapiti_regex(rx).encode("utf-8", "surrogatepass"), opts)
    except (TypeError, ValueError, UnicodeError) as e:  # pragma: no cover (the checks come first)
        raise ValueError(str(e)) from None
    if not prog.ok():
        err = prog.error()
        err = err.decode("utf-8", "replace") if isinstance(err, bytes) else str(err)
        hint = ""
        if "invalid perl operator: (?<" in err or "(?=" in err or "(?!" in err:
            hint = " (RE2 has no lookaround)"
        elif "invalid escape sequence: \\" in err and err[-1:].isdigit():
            hint = " (RE2 has no backreferences)"
        raise ValueError(f"RE2 refuses it: {err}{hint}")
    return prog


def _regex_transform(rx: str, ignore_case: bool, test: bool) -> Callable[[str], str]:
    """``%t``/``%T`` (``test``: ``true``/``false``) or ``%m``/``%M`` (the first match's text) of a
    checked regular expression, run by RE2 (linear time in the text's length)."""
    import re2

    match = compile_regex(rx, ignore_case).Match
    anchor = re2._re2.RE2.Anchor.UNANCHORED
    none = (-1, -1)
    if test:

        def run(s: str) -> str:
            b = s.encode("utf-8", "surrogatepass")
            return "false" if match(anchor, b, 0, len(b))[0] == none else "true"

    else:

        def run(s: str) -> str:
            b = s.encode("utf-8", "surrogatepass")
            a, e = match(anchor, b, 0, len(b))[0]
            return "" if a < 0 else b[a:e].decode("utf-8", "surrogatepass")

    # words repeat (CoNLL-2000: 211,727 tokens, 19,122 distinct words): the answers for short texts
    # are remembered, at most _RX_CACHE of them (emptied when full), so that a call through the
    # RE2 binding (a few microseconds) is made about once per distinct word
    cache: dict[str, str] = {}
    get = cache.get

    def cached(s: str) -> str:
        v = get(s)
        if v is None:
            v = run(s)
            if len(s) <= _RX_CACHE_CHARS:
                if len(cache) >= _RX_CACHE:
                    cache.clear()
                cache[s] = v
        return v

    return cached


@dataclass(frozen=True)
class Macro:
    """``%x[row,col]``: column ``col`` of the token ``row`` positions away.

    ``kind``: ``x`` (the text), ``X`` (lower-cased), ``t``/``T`` (``true`` or
    ``false``: the regex ``regex`` matches, case-insensitively for ``T``),
    ``m``/``M`` (the text the regex matches, empty when none).
    """

    row: int
    col: int
    kind: str = "x"
    regex: str | None = None

    def transform(self) -> Callable[[str], str] | None:
        """The function applied to the column's text (None for ``%x``)."""
        k = self.kind
        if k == "x":
            return None
        if k == "X":
            return str.lower
        return _regex_transform(self.regex or "", k in "TM", k in "tT")

    def source(self) -> tuple:
        """What the macro reads, regardless of the row: (column, kind, regex)."""
        return (self.col, self.kind, self.regex)


Piece = str | Macro


@dataclass(frozen=True)
class Template:
    """One parsed template line.

    ``kind`` is ``"U"``, ``"B"`` or a Wapiti prefix ``"u"``, ``"b"``, ``"*"``;
    ``text`` the line as written (stripped),
    ``pieces`` the literal strings and macros in order (their concatenation,
    macros replaced by values, is the attribute string), ``line`` the 1-based
    line in the template source.
    """

    kind: str
    text: str
    pieces: tuple[Piece, ...]
    line: int

    @property
    def macros(self) -> tuple[Macro, ...]:
        return tuple(p for p in self.pieces if isinstance(p, Macro))

    @property
    def min_row(self) -> int:
        """Smallest row offset used (0 for a constant template)."""
        return min((m.row for m in self.macros), default=0)

    @property
    def max_row(self) -> int:
        """Largest row offset used (0 for a constant template)."""
        return max((m.row for m in self.macros), default=0)

    def expand(self, columns: Sequence[Sequence[str]], i: int) -> str:
        """The attribute string at token ``i`` with CRF++ padding: a slow,
        plain reference implementation (``Templates.apply`` is the fast one)."""
        out = []
        n = len(columns)
        for p in self.pieces:
            if isinstance(p, Macro):
                j = i + p.row
                if 0 <= j < n:
                    f = p.transform()
                    v = columns[j][p.col]
                    out.append(v if f is None else f(v))
                else:
                    out.append(pad_token(j, n))
            else:
                out.append(p)
        return "".join(out)


UnigramTemplate = Template


def pad_token(j: int, n: int) -> str:
    """CRF++'s value for position ``j`` of a sentence of ``n`` tokens when
    ``j`` is outside it: ``_B-1`` just before the start, ``_B+1`` just after
    the end."""
    if j < 0:
        return f"_B{j}"
    return f"_B+{j - n + 1}"


def _bounded_int(digits: str, limit: int) -> int | None:
    """``int(digits)`` when its magnitude is at most ``limit``, else None (without converting a long
    digit string: Python refuses more than 4,300 digits, and they mean an offset far out anyway)."""
    d = digits.strip().lstrip("+-").lstrip("0")
    if len(d) > len(str(limit)):
        return None
    v = int(digits)
    return v if abs(v) <= limit else None


def _short(text: str, n: int = 40, quote: bool = True) -> str:
    """``text`` (its ``repr`` when ``quote``), cut in the middle when long (a 5,000-digit
    offset)."""
    r = repr(text) if quote else text
    return r if len(r) <= n else f"{r[: n // 2]}...{r[-(n // 2) :]} ({len(text)} characters)"


def _parse_line(text: str, kind: str, name: str, lineno: int) -> tuple[Piece, ...]:
    pieces: list[Piece] = []
    lit: list[str] = []
    pos = 0
    n = len(text)
    while pos < n:
        k = text.find("%", pos)
        if k < 0:
            lit.append(text[pos:])
            break
        lit.append(text[pos:k])
        nxt = text[k + 1] if k + 1 < n else ""
        if nxt and nxt in _KINDS:
            rx_kind = nxt in "tTmM"
            m = (_MACRO_RX if rx_kind else _MACRO).match(text, k)
            if m is None:
                end = text.find("]", k)
                snippet = text[k:] if end < 0 else text[k : end + 1]
                why = "unterminated macro" if end < 0 else "malformed macro"
                want = (
                    f'%{nxt}[row,col,"regex"] with integer row and column and a quoted regex'
                    if rx_kind
                    else f"%{nxt}[row,col] with integer row and column"
                )
                raise TemplateError(
                    f"{why} {snippet!r} at character {k + 1} of {text!r}: expected {want}",
                    name,
                    lineno,
                )
            row = _bounded_int(m.group(2), MAX_ROW_OFFSET)
            col = _bounded_int(m.group(3), MAX_COLUMN - 1)
            if row is None:
                raise TemplateError(
                    f"row offset {_short(m.group(2), quote=False)} in {_short(m.group(0))} is outside "
                    f"-{MAX_ROW_OFFSET}..{MAX_ROW_OFFSET} (CRF++ allows -8..8)",
                    name,
                    lineno,
                )
            if col is None and not m.group(3).lstrip().startswith("-"):
                raise TemplateError(
                    f"column index {_short(m.group(3), quote=False)} in {_short(m.group(0))} is over the limit "
                    f"of {MAX_COLUMN - 1}",
                    name,
                    lineno,
                )
            regex = m.group(4) if rx_kind else None
            if rx_kind:
                try:
                    compile_regex(regex)
                except ValueError as e:
                    raise TemplateError(
                        f"bad regular expression {_short(regex, 60)} in {_short(m.group(0), 60)}: "
                        f"{e}",
                        name,
                        lineno,
                    ) from None
            if col is None or col < 0:
                raise TemplateError(
                    f"column index {_short(m.group(3), quote=False)} in {_short(m.group(0))} must be >= 0 "
                    "(columns are 0-based)",
                    name,
                    lineno,
                )
            if lit:
                s = "".join(lit)
                if s:
                    pieces.append(s)
                lit = []
            pieces.append(Macro(row, col, nxt, regex))
            pos = m.end()
        elif nxt.isalpha():
            raise TemplateError(
                f"unsupported macro '%{nxt}' at character {k + 1} of {text!r}: "
                "the macros are %x, %X (case-folded), %t, %T (regex test), %m, %M (regex match)",
                name,
                lineno,
            )
        else:  # a literal '%'
            lit.append("%")
            pos = k + 1
    s = "".join(lit)
    if s:
        pieces.append(s)
    return tuple(pieces)


class Templates:
    """A parsed CRF++ template set.

    ``unigram``: the ``U`` (``u``, ``*``) templates in file order; ``bigram``:
    the plain ``B`` (``b``, ``*``) lines; ``bigram_observation``: ``B`` (``b``,
    ``*``) lines with macros (:meth:`apply_bigram`); ``has_transitions``: there
    is at least one ``B`` line; ``source``:
    the text it was parsed from (what a model file stores); ``name``: what
    messages call it.
    """

    def __init__(
        self,
        unigram: Sequence[Template],
        bigram: Sequence[Template] = (),
        bigram_observation: Sequence[Template] = (),
        *,
        source: str | None = None,
        name: str = "<template>",
    ):
        self.unigram: list[Template] = list(unigram)
        self.bigram: list[Template] = list(bigram)
        self.bigram_observation: list[Template] = list(bigram_observation)
        self.name = name
        self.source = (
            source
            if source is not None
            else "\n".join(
                t.text
                for t in sorted(
                    {
                        id(t): t for t in self.unigram + self.bigram + self.bigram_observation
                    }.values(),
                    key=lambda t: t.line,
                )
            )
            + "\n"
        )
        self._apply_pad, self._apply_nopad = _compile(self.unigram, name)
        self._bapply_pad, self._bapply_nopad = _compile(self.bigram_observation, name)

    # -- construction -----------------------------------------------------

    @classmethod
    def parse(cls, text: str, name: str = "<template>") -> Templates:
        """Parse template text; :class:`TemplateError` (``name:line: problem``)
        on a line that is not a comment, blank, ``U...``, ``B...``, ``u...``,
        ``b...`` or ``*...``, on a malformed macro or regular expression, or
        when there is no template at all."""
        unigram: list[Template] = []
        bigram: list[Template] = []
        bigram_obs: list[Template] = []
        if len(text) > MAX_TEMPLATE_BYTES:
            raise TemplateError(
                f"the template text is {len(text)} characters long; the limit is "
                f"{MAX_TEMPLATE_BYTES} bytes (MAX_TEMPLATE_BYTES)",
                name,
            )
        n_lines = n_macros = 0
        for lineno, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if lineno == 1 and line.startswith("\ufeff"):
                line = line[1:].strip()
            if not line or line.startswith("#"):
                continue
            kind = line[0]
            if kind not in "UBub*":
                raise TemplateError(
                    f"unknown template type {kind!r} in {line!r}: a template line starts "
                    "with U or u (unigram), B or b (bigram) or * (both); # starts a comment",
                    name,
                    lineno,
                )
            n_lines += 1
            if n_lines > MAX_TEMPLATES:
                raise TemplateError(
                    f"more than {MAX_TEMPLATES} template lines (MAX_TEMPLATES); each line is "
                    "compiled into the feature extractor",
                    name,
                    lineno,
                )
            t = Template(kind, line, _parse_line(line, kind, name, lineno), lineno)
            n_macros += len(t.macros)
            if n_macros > MAX_MACROS:
                raise TemplateError(
                    f"more than {MAX_MACROS} macros in the template set (MAX_MACROS; this line "
                    f"brings them to {n_macros}); each is compiled into the feature extractor",
                    name,
                    lineno,
                )
            if kind in "Uu*":
                unigram.append(t)
            if kind in "Bb*":
                if t.macros:
                    bigram_obs.append(t)
                else:
                    bigram.append(t)
        if not unigram and not bigram and not bigram_obs:
            raise TemplateError("no templates: no line starts with U or B", name)
        return cls(unigram, bigram, bigram_obs, source=text, name=name)

    @classmethod
    def from_file(cls, path) -> Templates:
        """Parse a template file (UTF-8)."""
        path = os.fspath(path)
        try:
            with open(path, "rb") as f:
                data = f.read(MAX_TEMPLATE_BYTES + 1)
        except OSError as e:
            raise TemplateError(f"cannot read template file: {e.strerror or e}", path) from None
        if len(data) > MAX_TEMPLATE_BYTES:
            raise TemplateError(
                f"the template file is over the limit of {MAX_TEMPLATE_BYTES} bytes "
                "(MAX_TEMPLATE_BYTES)",
                path,
            )
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            lineno = data.count(b"\n", 0, e.start) + 1
            raise TemplateError("invalid UTF-8", path, lineno) from None
        return cls.parse(text, name=path)

    # -- queries ------------------------------------------------------------

    @property
    def has_transitions(self) -> bool:
        return bool(self.bigram or self.bigram_observation)

    def max_column(self) -> int:
        """Largest column index any template uses; -1 when none uses one."""
        return max(
            (m.col for t in self.unigram + self.bigram_observation for m in t.macros),
            default=-1,
        )

    def check_columns(self, n_columns: int, path=None, line=None) -> None:
        """Raise :class:`DataError` if a template refers to a column
        ``>= n_columns`` (the number of observation columns of the data).

        The message names the template (source name, line and text); when the
        data's ``path`` (and ``line``) are given the error is located there,
        otherwise it is a :class:`TemplateError` located at the template line.
        """
        for t in sorted(self.unigram + self.bigram_observation, key=lambda t: t.line):
            for m in t.macros:
                if m.col >= n_columns:
                    problem = (
                        f"template {t.text!r} ({self.name} line {t.line}) uses column {m.col} "
                        f"but the data has {n_columns} observation column"
                        f"{'s' if n_columns != 1 else ''} (0..{n_columns - 1})"
                    )
                    if path is not None:
                        raise DataError(problem, os.fspath(path), line)
                    raise TemplateError(problem, self.name, t.line)

    def __len__(self) -> int:
        return len(self.unigram)

    def __repr__(self) -> str:
        return (
            f"Templates({self.name!r}: {len(self.unigram)} unigram, {len(self.bigram)} bigram, "
            f"{len(self.bigram_observation)} bigram-observation)"
        )

    # -- expansion ----------------------------------------------------------

    def apply(self, columns: Sequence[Sequence[str]], pad: bool = True) -> list[list[str]]:
        """Attribute strings of a sentence: one list per token, one string per
        unigram template in template order.

        ``columns[i]`` is the list of observation columns of token ``i``.
        ``pad=True``: rows outside the sentence read ``_B-1``/``_B+1``...
        (CRF++). ``pad=False``: a template reaching outside the sentence gives
        no attribute at that token. A token with too few columns for the
        templates raises :class:`DataError` (call :meth:`check_columns` once
        per file to report it against the data's line instead).
        """
        if pad:
            return self._apply_pad(columns)
        return self._apply_nopad(columns)

    def apply_bigram(self, columns: Sequence[Sequence[str]], pad: bool = True) -> list[list[str]]:
        """Bigram-observation attribute strings of a sentence: one list per token, one
        string per bigram-observation template (as :meth:`apply` for the unigram ones).
        The kernels ignore those of the first token (no incoming transition)."""
        if pad:
            return self._bapply_pad(columns)
        return self._bapply_nopad(columns)


# ---------------------------------------------------------------------------
# code generation


def fstring(pieces: Sequence[Piece], var: Callable[[Macro], str]) -> str:
    """Source of an f-string expression concatenating ``pieces``; literal text
    is written through ``repr`` with braces doubled, so any text is safe."""
    if not pieces:
        return "''"
    parts = []
    for p in pieces:
        if isinstance(p, Macro):
            parts.append("f'{" + var(p) + "}'")
        else:
            parts.append("f" + repr(p.replace("{", "{{").replace("}", "}}")))
    return " ".join(parts)


_BEFORE = ("",) + tuple(
    f"_B-{k}" for k in range(1, MAX_ROW_OFFSET + 1)
)  # _BEFORE[k]: k tokens before
_AFTER = ("",) + tuple(f"_B+{k}" for k in range(1, MAX_ROW_OFFSET + 1))  # _AFTER[k]: k tokens after


def _window(seq: tuple, r: int, n: int) -> tuple:
    """What a macro of row ``r`` reads at tokens 0..n-1 of a sentence whose column is ``seq``
    (length n): positions r..r+n-1, those outside the sentence read as CRF++'s padding tokens; only
    the padding tokens that are read are made (whatever |r|, at most n of them)."""
    if r < 0:
        pad = _BEFORE[-r : max(0, -r - n) : -1]
        return pad + seq[: r + n] if r + n > 0 else pad
    if r > 0:
        return seq[r:] + _AFTER[max(1, r - n + 1) : r + 1]
    return seq


def _compile(unigram: Sequence[Template], name: str):
    """Build the two apply functions (padded, unpadded) of a template list."""
    macros = sorted(
        {m for t in unigram for m in t.macros}, key=lambda m: (m.col, m.kind, m.regex or "", m.row)
    )
    cols = sorted({m.col for m in macros})
    before = max([0] + [-m.row for m in macros])  # padding needed before / after
    after = max([0] + [m.row for m in macros])
    K = max(before, after)
    if K > MAX_ROW_OFFSET:  # templates built in code, not parsed
        raise TemplateError(f"a macro reaches {K} tokens away; the limit is {MAX_ROW_OFFSET}", name)
    # a template set reaching at most INLINE_PAD tokens away pads each column tuple whole (one tuple
    # per column and sentence, one slice per macro); one reaching further reads each macro through
    # _window
    inline = K <= INLINE_PAD
    maxcol = max(cols, default=-1)
    var_of = {m: f"v{i}" for i, m in enumerate(macros)}

    env: dict = {
        "_BOS": tuple(f"_B-{k}" for k in range(K, 0, -1)) if inline else (),
        "_EOS": tuple(f"_B+{k}" for k in range(1, K + 1)) if inline else (),
        "_window": _window,
        "_column_error": lambda columns: column_error(columns, unigram, name),
    }
    # what a macro reads: the column tuple c<col> for %x, a derived tuple d<i> (case-folded, regex
    # test or match of each token) otherwise; padded (P) or not (U)
    derived = sorted(
        {m.source() for m in macros if m.kind != "x"}, key=lambda k: (k[0], k[1], k[2] or "")
    )
    src_of = {k: f"d{i}" for i, k in enumerate(derived)}
    for k, var in src_of.items():
        env[f"_f{var}"] = Macro(0, k[0], k[1], k[2]).transform()

    def srcvar(m: Macro) -> str:
        return f"c{m.col}" if m.kind == "x" else src_of[m.source()]

    sources = [f"c{c}" for c in cols] + list(src_of.values())

    def prologue(padded: bool) -> list[str]:
        pro = ["    n = len(columns)", "    if not n:", "        return []"]
        if cols:
            pro += [
                "    t = list(zip(*columns))",
                f"    if len(t) <= {maxcol}:",
                "        raise _column_error(columns)",
            ]
            for c in cols:
                pro.append(
                    f"    c{c} = (*_BOS, *t[{c}], *_EOS)" if padded else f"    c{c} = t[{c}]"
                )
            for (c, _k, _r), var in src_of.items():
                pro.append(
                    f"    {var} = (*_BOS, *map(_f{var}, t[{c}]), *_EOS)"
                    if padded
                    else f"    {var} = tuple(map(_f{var}, t[{c}]))"
                )
        return pro

    row_all = "[" + ", ".join(fstring(t.pieces, lambda m: var_of[m]) for t in unigram) + "]"
    if macros:
        targets = ", ".join(var_of[m] for m in macros) + ("," if len(macros) == 1 else "")
        loop = f"for {targets} in zip({{}})"
    else:
        loop = "for _ in range({})"

    # padded: every template fires at every token
    src = ["def _apply_pad(columns):", *prologue(inline)]
    if not macros:
        src.append(f"    return [{row_all} for _ in range(n)]")
    elif inline:
        reads = ", ".join(f"{srcvar(m)}[{K + m.row}:{K + m.row} + n]" for m in macros)
        src.append(f"    return [{row_all} {loop.format(reads)}]")
    else:
        reads = ", ".join(f"_window({srcvar(m)}, {m.row}, n)" for m in macros)
        src.append(f"    return [{row_all} {loop.format(reads)}]")

    # unpadded: interior tokens (all templates fire) by the fast path; the `before` first and
    # `after` last tokens template by template; nothing outside the sentence is read, so no padding
    # is built
    src += ["", "def _apply_nopad(columns):", *prologue(False)]
    if not macros:
        src.append(f"    return [{row_all} for _ in range(n)]")
    else:
        # for lo <= i < hi every row stays inside 0..n-1; when lo == hi the slices are empty
        reads = ", ".join(f"{srcvar(m)}[{m.row} + lo:{m.row} + hi]" for m in macros)
        src += [
            f"    lo = {before} if n > {before} else n",
            f"    hi = n - {after} if n - {after} > lo else lo",
            f"    mid = [{row_all} {loop.format(reads)}]",
            "    if lo == 0 and hi == n:",
            "        return mid",
            "    return [_edge(i, n, " + ", ".join(sources) + ") for i in range(lo)] + mid + "
            "[_edge(i, n, " + ", ".join(sources) + ") for i in range(hi, n)]",
            "",
            "def _edge(i, n, " + ", ".join(sources) + "):",
            "    r = []",
        ]
        for t in unigram:
            expr = fstring(t.pieces, lambda m: f"{srcvar(m)}[i + {m.row}]")
            if t.macros:
                src.append(f"    if {-t.min_row} <= i < n - {t.max_row}:")
                src.append(f"        r.append({expr})")
            else:
                src.append(f"    r.append({expr})")
        src.append("    return r")

    code = compile("\n".join(src) + "\n", f"<templates {name}>", "exec")
    exec(code, env)
    return env["_apply_pad"], env["_apply_nopad"]


def column_error(columns, unigram: Sequence[Template], name: str) -> DataError:
    """The DataError for a sentence with a token that has too few columns."""
    need = {}
    for t in unigram:
        for m in t.macros:
            if m.col not in need:
                need[m.col] = t
    for i, tok in enumerate(columns):
        for col in sorted(need, reverse=True):
            if col >= len(tok):
                t = need[col]
                return DataError(
                    f"token {i + 1} of the sentence has {len(tok)} observation column"
                    f"{'s' if len(tok) != 1 else ''} but template {t.text!r} "
                    f"({name} line {t.line}) uses column {col}"
                )
    return DataError("a token has too few columns for the templates")  # not reached


# ---------------------------------------------------------------------------
# built-in template sets

_CHUNKING = """\
# CRFsuite's chunking example features (example/chunking.py) as CRF++ templates
# over columns word=0, POS=1. Use apply(pad=False) to match CRFsuite exactly
# (its features fire only inside the sentence); CRF++ pads with _B-1/_B+1.
# words
U00:%x[-2,0]
U01:%x[-1,0]
U02:%x[0,0]
U03:%x[1,0]
U04:%x[2,0]
U05:%x[-1,0]/%x[0,0]
U06:%x[0,0]/%x[1,0]
# part-of-speech tags
U10:%x[-2,1]
U11:%x[-1,1]
U12:%x[0,1]
U13:%x[1,1]
U14:%x[2,1]
U15:%x[-2,1]/%x[-1,1]
U16:%x[-1,1]/%x[0,1]
U17:%x[0,1]/%x[1,1]
U18:%x[1,1]/%x[2,1]
U19:%x[-2,1]/%x[-1,1]/%x[0,1]
U20:%x[-1,1]/%x[0,1]/%x[1,1]
U21:%x[0,1]/%x[1,1]/%x[2,1]

# label bigrams
B
"""


def default_chunking_templates() -> Templates:
    """CRF++ templates equivalent to CRFsuite's chunking example features on
    columns word=0, POS=1: words at -2..2, word bigrams -1/0 and 0/1, POS at
    -2..2, POS bigrams -2/-1, -1/0, 0/1, 1/2, POS trigrams -2/-1/0, -1/0/1,
    0/1/2 (19 unigram templates), and ``B``."""
    return Templates.parse(_CHUNKING, name="<default chunking templates>")
