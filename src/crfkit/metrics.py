"""Evaluation metrics: token accuracy, conlleval chunk scores, per-label tables.

The chunk scores reproduce ``conlleval.pl`` (the CoNLL-2000 shared-task
evaluation script, version 2004-01-26) exactly: the same tag splitting, the
same ``startOfChunk`` / ``endOfChunk`` rules, the same "a chunk is correct
when both chunks start on the same token, end on the same token and have the
same type" bookkeeping, the same counts and the same printed layout, so the
numbers can be compared with published ones.

Rules, as in conlleval.pl
-------------------------
* A tag is split at its first ``-``: ``B-NP`` -> (``B``, ``NP``), ``I-A-B`` ->
  (``I``, ``A-B``); a tag without ``-`` is its own prefix with type ``""``
  (``O`` -> (``O``, ``""``)).  Like Perl, a type ``"0"`` counts as false and
  becomes ``""``.
* A chunk ends between two tokens on B->B, B->O, I->B, I->O, E->E, E->I, E->O,
  on a type change when the previous prefix is neither ``O`` nor ``.``, and
  after ``[`` or ``]``.  A chunk starts on B->B, I->B, O->B, O->I, E->E, E->I,
  O->E, on a type change when the current prefix is neither ``O`` nor ``.``,
  and on ``[`` or ``]``.  These rules read IOB1, IOB2, IOE1 and IOE2 alike.
* The start and the end of a sentence act as an ``O`` tag.
* Accuracy counts the tokens whose guessed tag equals the gold tag, over all
  tokens (``O`` included); sentence boundaries are not tokens.

IOBES
-----
conlleval.pl has no rule for ``S`` and none for E->B, so it merges adjacent
chunks of one type written in IOBES (``S-X S-X`` or ``E-X B-X`` is one chunk for
it).  With ``iobes=True`` (the default) four extra rules are added: a chunk
ends after ``S``, before ``S`` and on E->B; a chunk starts on ``S``, on E->B
and on any B/I/E after ``S``.  Each extra rule involves an ``S`` prefix or an
E->B transition, neither of which occurs in IOB1/IOB2/IOE1/IOE2 data, so on
every input without them the results are those of conlleval.pl to the last
digit; on IOBES input they are those of conlleval.pl run on the same chunks
written in IOB2.  ``iobes=False`` gives conlleval.pl's rules verbatim.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from .errors import DataError

__all__ = [
    "TypeScore",
    "ChunkReport",
    "split_tag",
    "chunks",
    "conlleval",
    "conlleval_ids",
    "conlleval_lines",
    "token_accuracy",
    "label_table",
    "label_scores",
    "scores_of_counts",
    "LabelScores",
    "ConllCounter",
]


# ---------------------------------------------------------------------------
# tags and chunk boundaries
# ---------------------------------------------------------------------------


def split_tag(tag: str) -> tuple[str, str]:
    """Split a chunk tag into (prefix, type) the way conlleval.pl does.

    conlleval matches ``^([^-]*)-(.*)$``: the prefix is everything before the
    first ``-`` and the type everything after it; a tag without ``-`` is its
    own prefix with an empty type.  Perl then replaces a false type (``""`` or
    ``"0"``) by ``""``, which is kept here.
    """
    prefix, sep, ctype = tag.partition("-")
    if not sep:
        return tag, ""
    if ctype == "0":  # Perl truthiness: "0" is false, so conlleval makes it ""
        ctype = ""
    return prefix, ctype


# conlleval's rules depend on the types only through "prevType ne type", so
# each rule is a function of (prev prefix, prefix, type changed).
_END_PAIRS = frozenset(
    {
        ("B", "B"),
        ("B", "O"),
        ("I", "B"),
        ("I", "O"),
        ("E", "E"),
        ("E", "I"),
        ("E", "O"),
    }
)
_START_PAIRS = frozenset(
    {
        ("B", "B"),
        ("I", "B"),
        ("O", "B"),
        ("O", "I"),
        ("E", "E"),
        ("E", "I"),
        ("O", "E"),
    }
)


def _end_of_chunk(prev: str, cur: str, type_changed: bool, iobes: bool) -> bool:
    if (prev, cur) in _END_PAIRS:
        return True
    if type_changed and prev != "O" and prev != ".":
        return True
    if prev == "]" or prev == "[":
        return True
    if iobes:
        if prev == "S":
            return True
        if cur == "S" and prev in ("B", "I", "E"):
            return True
        if prev == "E" and cur == "B":
            return True
    return False


def _start_of_chunk(prev: str, cur: str, type_changed: bool, iobes: bool) -> bool:
    if (prev, cur) in _START_PAIRS:
        return True
    if type_changed and cur != "O" and cur != ".":
        return True
    if cur == "[" or cur == "]":
        return True
    if iobes:
        if cur == "S":
            return True
        if prev == "S" and cur in ("B", "I", "E"):
            return True
        if prev == "E" and cur == "B":
            return True
    return False


class _Rules:
    """Memoised start/end decisions: (prev, cur, type_changed) -> (end, start)."""

    __slots__ = ("iobes", "_memo")

    def __init__(self, iobes: bool):
        self.iobes = iobes
        self._memo: dict[tuple[str, str, bool], tuple[bool, bool]] = {}

    def __call__(self, prev: str, cur: str, prev_type: str, ctype: str) -> tuple[bool, bool]:
        key = (prev, cur, prev_type != ctype)
        res = self._memo.get(key)
        if res is None:
            res = (
                _end_of_chunk(prev, cur, key[2], self.iobes),
                _start_of_chunk(prev, cur, key[2], self.iobes),
            )
            self._memo[key] = res
        return res


_RULES = {True: _Rules(True), False: _Rules(False)}


def chunks(tags: Sequence[str], *, iobes: bool = True) -> list[tuple[str, int, int]]:
    """The chunks of one sentence as ``(type, start, end_exclusive)``.

    A chunk is opened wherever conlleval's ``startOfChunk`` fires (so there
    is one chunk per phrase conlleval counts) and closed at the next token
    where ``endOfChunk`` or ``startOfChunk`` fires, or at the end of the
    sentence.  Its type is the type of its first token.  Tokens outside any
    chunk (``O``) belong to none.
    """
    rules = _RULES[bool(iobes)]
    out: list[tuple[str, int, int]] = []
    prev_p, prev_t = "O", ""
    open_start = -1
    open_type = ""
    for i, tag in enumerate(tags):
        p, t = split_tag(tag)
        end, start = rules(prev_p, p, prev_t, t)
        if open_start >= 0 and (end or start):
            out.append((open_type, open_start, i))
            open_start = -1
        if start:
            open_start, open_type = i, t
        prev_p, prev_t = p, t
    if open_start >= 0:
        out.append((open_type, open_start, len(tags)))
    return out


# ---------------------------------------------------------------------------
# reports
# ---------------------------------------------------------------------------


@dataclass
class TypeScore:
    """Chunk scores of one chunk type (percentages, as conlleval prints them)."""

    type: str
    precision: float
    recall: float
    f1: float
    found: int  # guessed chunks of this type
    gold: int  # gold chunks of this type
    correct: int  # guessed chunks equal to a gold chunk (same start, end, type)


def _prf(correct: int, found: int, gold: int) -> tuple[float, float, float]:
    # The same expressions, in the same order, as conlleval.pl, so the
    # floating-point values (and their rounding when printed) are identical.
    precision = 100 * correct / found if found > 0 else 0.0
    recall = 100 * correct / gold if gold > 0 else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return precision, recall, f1


@dataclass
class ChunkReport:
    """conlleval's counts and scores; every score is a percentage."""

    tokens: int
    gold_chunks: int
    found_chunks: int
    correct_chunks: int
    correct_tags: int
    accuracy: float
    precision: float
    recall: float
    f1: float
    per_type: dict[str, TypeScore] = field(default_factory=dict)

    def format(self) -> str:
        """The text conlleval.pl prints (without ``-l``), byte for byte.

        Every line ends with a newline, the last one included.  The accuracy
        line is left out when there are no tokens, as conlleval does.  One
        conlleval quirk is kept on purpose: chunks with an empty type that
        occur both in the gold and in the guessed tags get their line twice
        (Perl's ``not($lastType)`` is true for the empty string).
        """
        lines = [
            f"processed {self.tokens} tokens with {self.gold_chunks} phrases; "
            f"found: {self.found_chunks} phrases; correct: {self.correct_chunks}.\n"
        ]
        if self.tokens > 0:
            lines.append(
                "accuracy: %6.2f%%; precision: %6.2f%%; recall: %6.2f%%; FB1: %6.2f\n"
                % (self.accuracy, self.precision, self.recall, self.f1)
            )
        for name in sorted(self.per_type):
            s = self.per_type[name]
            line = "%17s: precision: %6.2f%%; recall: %6.2f%%; FB1: %6.2f  %d\n" % (
                name,
                s.precision,
                s.recall,
                s.f1,
                s.found,
            )
            lines.append(line)
            if name == "" and s.found > 0 and s.gold > 0:
                lines.append(line)
        return "".join(lines)

    def __str__(self) -> str:
        return self.format()


class ConllCounter:
    """A line-by-line port of conlleval.pl's main loop.

    ``feed(gold_tag, guessed_tag)`` processes one token; ``boundary()`` one
    sentence break (conlleval's ``-X-`` / empty line: both tags ``O``, not a
    token).
    """

    def __init__(self, iobes: bool = True):
        self.rules = _RULES[bool(iobes)]
        self.tokens = 0
        self.correct_tags = 0
        self.correct_chunks = 0
        self.found_gold = 0
        self.found_guessed = 0
        self.correct_by_type: Counter[str] = Counter()
        self.gold_by_type: Counter[str] = Counter()
        self.guessed_by_type: Counter[str] = Counter()
        self.in_correct = False
        self.last_correct, self.last_correct_type = "O", ""
        self.last_guessed, self.last_guessed_type = "O", ""

    def _step(self, correct: str, correct_type: str, guessed: str, guessed_type: str) -> None:
        rules = self.rules
        end_c, start_c = rules(self.last_correct, correct, self.last_correct_type, correct_type)
        end_g, start_g = rules(self.last_guessed, guessed, self.last_guessed_type, guessed_type)
        if self.in_correct:
            if end_c and end_g and self.last_guessed_type == self.last_correct_type:
                self.in_correct = False
                self.correct_chunks += 1
                self.correct_by_type[self.last_correct_type] += 1
            elif end_c != end_g or guessed_type != correct_type:
                self.in_correct = False
        if start_c and start_g and guessed_type == correct_type:
            self.in_correct = True
        if start_c:
            self.found_gold += 1
            self.gold_by_type[correct_type] += 1
        if start_g:
            self.found_guessed += 1
            self.guessed_by_type[guessed_type] += 1
        self.last_correct, self.last_correct_type = correct, correct_type
        self.last_guessed, self.last_guessed_type = guessed, guessed_type

    def feed(self, gold_tag: str, guessed_tag: str) -> None:
        correct, correct_type = split_tag(gold_tag)
        guessed, guessed_type = split_tag(guessed_tag)
        self._step(correct, correct_type, guessed, guessed_type)
        if correct == guessed and guessed_type == correct_type:
            self.correct_tags += 1
        self.tokens += 1

    def boundary(self) -> None:
        self._step("O", "", "O", "")

    def report(self) -> ChunkReport:
        if self.in_correct:
            self.in_correct = False
            self.correct_chunks += 1
            self.correct_by_type[self.last_correct_type] += 1
        precision, recall, f1 = _prf(self.correct_chunks, self.found_guessed, self.found_gold)
        accuracy = 100 * self.correct_tags / self.tokens if self.tokens > 0 else 0.0
        per_type = {}
        for name in sorted(set(self.gold_by_type) | set(self.guessed_by_type)):
            c, f, g = (
                self.correct_by_type[name],
                self.guessed_by_type[name],
                self.gold_by_type[name],
            )
            p, r, fb = _prf(c, f, g)
            per_type[name] = TypeScore(name, p, r, fb, found=f, gold=g, correct=c)
        return ChunkReport(
            tokens=self.tokens,
            gold_chunks=self.found_gold,
            found_chunks=self.found_guessed,
            correct_chunks=self.correct_chunks,
            correct_tags=self.correct_tags,
            accuracy=accuracy,
            precision=precision,
            recall=recall,
            f1=f1,
            per_type=per_type,
        )


# ---------------------------------------------------------------------------
# public entry points
# ---------------------------------------------------------------------------


def _as_sentences(seqs) -> list:
    """A list of sentences; a flat sequence of tag strings is one sentence."""
    seqs = list(seqs)
    if seqs and isinstance(seqs[0], str):
        return [seqs]
    return seqs


def _paired(gold, pred) -> list[tuple[Sequence[str], Sequence[str]]]:
    gold = _as_sentences(gold)
    pred = _as_sentences(pred)
    if len(gold) != len(pred):
        raise DataError(f"gold has {len(gold)} sentences but the prediction has {len(pred)}")
    pairs = []
    for i, (g, p) in enumerate(zip(gold, pred)):
        if isinstance(g, str) or isinstance(p, str):
            raise DataError(f"sentence {i}: expected a sequence of tags, got a string")
        if len(g) != len(p):
            raise DataError(
                f"sentence {i}: gold has {len(g)} tokens but the prediction has {len(p)}"
            )
        pairs.append((g, p))
    return pairs


def conlleval(
    gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]], *, iobes: bool = True
) -> ChunkReport:
    """conlleval's chunk scores for gold and guessed tags, one list per sentence.

    Equivalent to writing the sentences as conlleval input (one token per
    line, a blank line after each sentence) and running conlleval.pl on it.
    Raises :class:`~crfkit.errors.DataError` when the sentence counts or the
    lengths of a sentence differ.
    """
    counter = ConllCounter(iobes=iobes)
    feed = counter.feed
    for g, p in _paired(gold, pred):
        for gt, pt in zip(g, p):
            feed(gt, pt)
        counter.boundary()
    return counter.report()


def conlleval_ids(
    gold_ids, pred_ids, seq_ptr, labels: Sequence[str], *, iobes: bool = True
) -> ChunkReport:
    """:func:`conlleval` on label ids: ``gold_ids`` and ``pred_ids`` (one id per token, indices into
    ``labels``) of the sentences ``seq_ptr`` delimits (``seq_ptr[i]:seq_ptr[i+1]``, as in an encoded
    corpus).  The same report, counts and scores as ``conlleval(gold, pred)`` on the label strings,
    computed with numpy (no Python loop over tokens): the rules are tabulated once per label pair,
    and conlleval's one bit of state ("inside a chunk that is correct so far") is recovered from the
    last token that sets or clears it.  For scoring a whole training set at every epoch."""
    import numpy as np

    g = np.asarray(gold_ids, dtype=np.int64).ravel()
    p = np.asarray(pred_ids, dtype=np.int64).ravel()
    ptr = np.asarray(seq_ptr, dtype=np.int64).ravel()
    L = len(labels)
    if g.shape != p.shape:
        raise DataError(f"gold has {g.size} tokens but the prediction has {p.size}")
    if ptr.size == 0 or ptr[0] != 0 or ptr[-1] != g.size or np.any(np.diff(ptr) < 0):
        raise DataError(f"seq_ptr must rise from 0 to the number of tokens ({g.size})")
    if g.size and (min(g.min(), p.min()) < 0 or max(g.max(), p.max()) >= L):
        raise DataError(f"label ids must lie in [0, {L})")
    rules = _RULES[bool(iobes)]
    # symbol L: a sentence boundary (and the start), which conlleval reads as the tag O
    split = [split_tag(t) for t in labels] + [("O", "")]
    prefixes = [x[0] for x in split]
    type_names = sorted({x[1] for x in split})
    type_id = np.array([type_names.index(x[1]) for x in split], dtype=np.int64)
    end = np.zeros((L + 1, L + 1), dtype=bool)
    start = np.zeros((L + 1, L + 1), dtype=bool)
    for a in range(L + 1):
        for b in range(L + 1):
            end[a, b], start[a, b] = rules(prefixes[a], prefixes[b], split[a][1], split[b][1])
    # the stream conlleval reads: each sentence's tokens, then a boundary step
    n_seq = ptr.size - 1
    pos = np.arange(g.size) + np.repeat(
        np.arange(n_seq), np.diff(ptr)
    )  # token k's place in the stream
    M = g.size + n_seq
    gs = np.full(M, L, dtype=np.int64)
    ps = np.full(M, L, dtype=np.int64)
    gs[pos], ps[pos] = g, p
    gprev = np.concatenate(([L], gs[:-1]))
    pprev = np.concatenate(([L], ps[:-1]))
    end_c, start_c = end[gprev, gs], start[gprev, gs]
    end_g, start_g = end[pprev, ps], start[pprev, ps]
    same_type = type_id[gs] == type_id[ps]
    same_last_type = type_id[gprev] == type_id[pprev]
    close = end_c & end_g & same_last_type  # a correct chunk ends before this step ...
    clear = ~close & ((end_c != end_g) | ~same_type)  # ... or the chunk so far is not correct
    opened = start_c & start_g & same_type
    # inside-a-correct-chunk after step k: set by `opened`, cleared by `close` or `clear`, kept
    # otherwise
    event = opened | close | clear
    last = np.maximum.accumulate(np.where(event, np.arange(M), -1))
    inside = np.where(last >= 0, opened[np.maximum(last, 0)], False)
    inside_before = np.concatenate(([False], inside[:-1]))
    counted = inside_before & close
    n_types = len(type_names)
    correct_by = np.bincount(type_id[gprev[counted]], minlength=n_types)
    if M and inside[-1]:
        correct_by[type_id[gs[-1]]] += 1  # still inside at the end: conlleval counts it
    gold_by = np.bincount(type_id[gs[start_c]], minlength=n_types)
    guessed_by = np.bincount(type_id[ps[start_g]], minlength=n_types)
    correct_chunks, found_gold, found_guessed = (
        int(correct_by.sum()),
        int(gold_by.sum()),
        int(guessed_by.sum()),
    )
    pre_id = np.array([sorted(set(prefixes)).index(x) for x in prefixes], dtype=np.int64)
    correct_tags = int(np.count_nonzero((pre_id[g] == pre_id[p]) & (type_id[g] == type_id[p])))
    precision, recall, f1 = _prf(correct_chunks, found_guessed, found_gold)
    accuracy = 100 * correct_tags / g.size if g.size > 0 else 0.0
    per_type = {}
    for k, name in enumerate(type_names):
        c, f_, gg = int(correct_by[k]), int(guessed_by[k]), int(gold_by[k])
        if f_ or gg:
            pr, rc, fb = _prf(c, f_, gg)
            per_type[name] = TypeScore(name, pr, rc, fb, found=f_, gold=gg, correct=c)
    return ChunkReport(
        tokens=int(g.size),
        gold_chunks=found_gold,
        found_chunks=found_guessed,
        correct_chunks=correct_chunks,
        correct_tags=correct_tags,
        accuracy=accuracy,
        precision=precision,
        recall=recall,
        f1=f1,
        per_type=per_type,
    )


def _split_fields(line: str, delimiter: str | None) -> list[str]:
    if delimiter is None:
        return line.split()
    # Perl's split(/$delimiter/, ...) keeps leading empty fields and drops
    # trailing ones.
    fields = line.split(delimiter)
    while fields and fields[-1] == "":
        fields.pop()
    return fields


def conlleval_lines(
    lines: Iterable[str],
    delimiter: str | None = None,
    boundary: str = "-X-",
    *,
    raw: bool = False,
    otag: str = "O",
    name: str | None = None,
    docstart: str = "token",
    iobes: bool = True,
    labels: set | None = None,
) -> ChunkReport:
    """Score conlleval input: one token a line, gold and guessed tag last.

    ``lines`` is any iterable of lines (an open file works); line ends are
    stripped.  A blank line, or a line whose first column is ``boundary``,
    is a sentence break.  Options mirror conlleval.pl's:

    * ``delimiter`` -- ``None`` (the default) splits on runs of whitespace;
      a string splits on exactly that string, as ``conlleval -d`` does
      (so with ``" "`` two spaces make an empty column, as in conlleval).
    * ``raw`` -- ``conlleval -r``: tags have no prefix; every tag other than
      ``otag`` becomes ``B-tag`` (one token per chunk) and ``otag`` becomes ``O``.
    * ``otag`` -- ``conlleval -o``: the outside tag in raw mode.
    * ``docstart`` -- ``"token"`` (default, what conlleval.pl does): a
      ``-DOCSTART-`` line is an ordinary token (its ``O`` tags break chunks
      and it is counted among the tokens, as in the published CoNLL-2003
      figures); ``"boundary"``: it is a sentence break and not a token.
    * ``name`` -- the file name used in error messages.
    * ``labels`` -- a set that receives every gold and guessed tag as read (before ``raw``
      rewrites them), so that a caller can tell whether they are chunk tags
      (:func:`label_scheme`).

    Every non-blank line must have the number of columns of the first one and
    at least two, else :class:`~crfkit.errors.DataError` names the line
    (lines whose first column is ``boundary`` may have any number).
    """
    if docstart not in ("token", "boundary"):
        raise ValueError(f"docstart must be 'token' or 'boundary', not {docstart!r}")
    counter = ConllCounter(iobes=iobes)
    feed = counter.feed
    ncols = -1
    first_line = 0
    for lineno, line in enumerate(lines, 1):
        line = line.rstrip("\r\n")
        fields = _split_fields(line, delimiter)
        if not fields or fields[0] == boundary:
            counter.boundary()
            continue
        if docstart == "boundary" and fields[0] == "-DOCSTART-":
            counter.boundary()
            continue
        n = len(fields)
        if n < 2:
            raise DataError(
                f"expected at least 2 columns (... gold guessed), found {n}: {line!r}",
                path=name,
                line=lineno,
            )
        if ncols < 0:
            ncols, first_line = n, lineno
        elif n != ncols:
            raise DataError(
                f"expected {ncols} columns as on line {first_line}, found {n}",
                path=name,
                line=lineno,
            )
        gold_tag, guessed_tag = fields[-2], fields[-1]
        if labels is not None:
            labels.add(gold_tag)
            labels.add(guessed_tag)
        if raw:
            if guessed_tag == otag:
                guessed_tag = "O"
            if gold_tag == otag:
                gold_tag = "O"
            if guessed_tag != "O":
                guessed_tag = "B-" + guessed_tag
            if gold_tag != "O":
                gold_tag = "B-" + gold_tag
        feed(gold_tag, guessed_tag)
    return counter.report()


def token_accuracy(gold, pred) -> float:
    """The fraction (in [0, 1]) of tokens whose predicted tag equals the gold tag.

    ``gold`` and ``pred`` are lists of sentences (a flat list of tags is one
    sentence); every token counts, ``O`` included.  0.0 when there are no
    tokens.
    """
    total = 0
    right = 0
    for g, p in _paired(gold, pred):
        total += len(g)
        right += sum(1 for a, b in zip(g, p) if a == b)
    return right / total if total else 0.0


@dataclass
class LabelScores:
    """Token-level scores per label (fractions in [0, 1]): ``rows`` holds ``(label, precision,
    recall, f1, support, predicted)`` per label (support: gold tokens of the label; predicted:
    tokens tagged with it); ``accuracy`` and ``tokens`` over every token."""

    rows: list[tuple[str, float, float, float, int, int]]
    accuracy: float
    tokens: int
    correct: int


def label_scores(gold, pred, *, labels: Sequence[str] | None = None) -> LabelScores:
    """Token-level precision, recall, F1, support and predicted count per label (sorted, or in the
    order of ``labels``); a ratio with a zero denominator is 0.  What :func:`label_table` prints."""
    tp: Counter[str] = Counter()
    n_pred: Counter[str] = Counter()
    n_gold: Counter[str] = Counter()
    total = 0
    for g, p in _paired(gold, pred):
        total += len(g)
        n_gold.update(g)
        n_pred.update(p)
        tp.update(a for a, b in zip(g, p) if a == b)
    if labels is None:
        labels = sorted(set(n_gold) | set(n_pred))
    return scores_of_counts(labels, tp, n_gold, n_pred, total)


def scores_of_counts(labels: Sequence[str], tp, n_gold, n_pred, total: int) -> LabelScores:
    """:class:`LabelScores` from per-label counts (mappings label -> count; a missing label
    counts 0) of right tokens (``tp``), gold tokens and predicted tokens, over ``total`` tokens
    (``sum(tp)`` of them right)."""
    rows = []
    for lab in labels:
        t, ng, npred = tp.get(lab, 0), n_gold.get(lab, 0), n_pred.get(lab, 0)
        p = t / npred if npred else 0.0
        r = t / ng if ng else 0.0
        f = 2 * p * r / (p + r) if p + r > 0 else 0.0
        rows.append((lab, p, r, f, ng, npred))
    correct = sum(tp.values())
    return LabelScores(rows, correct / total if total else 0.0, total, correct)


def label_table(gold, pred, *, labels: Sequence[str] | None = None, digits: int = 4) -> str:
    """Token-level precision, recall, F1 and support per label, as a text table.

    Laid out like scikit-learn's ``classification_report``: one row per label
    (sorted, or in the order of ``labels``), then accuracy, macro average and
    support-weighted average.  Support is the number of gold tokens of the
    label; a ratio with a zero denominator is 0.
    """
    sc = label_scores(gold, pred, labels=labels)
    labels = [row[0] for row in sc.rows]
    rows = [row[:5] for row in sc.rows]
    total = sc.tokens

    width = max([len(lab) for lab in labels] + [len("weighted avg"), digits])
    head = f"{'':>{width}s} " + "".join(
        f" {h:>9}" for h in ("precision", "recall", "f1-score", "support")
    )
    out = [head, ""]
    for lab, p, r, f, s in rows:
        out.append(
            f"{lab:>{width}s} " + "".join(f" {v:>9.{digits}f}" for v in (p, r, f)) + f" {s:>9}"
        )
    out.append("")
    acc = sc.accuracy
    out.append(
        f"{'accuracy':>{width}s} " + f" {'':>9} {'':>9}" + f" {acc:>9.{digits}f}" + f" {total:>9}"
    )
    support = sum(s for *_, s in rows)
    if rows:
        macro = [math.fsum(row[k] for row in rows) / len(rows) for k in (1, 2, 3)]
        weighted = [
            math.fsum(row[k] * row[4] for row in rows) / support if support else 0.0
            for k in (1, 2, 3)
        ]
    else:
        macro = weighted = [0.0, 0.0, 0.0]
    for title, vals in (("macro avg", macro), ("weighted avg", weighted)):
        out.append(
            f"{title:>{width}s} " + "".join(f" {v:>9.{digits}f}" for v in vals) + f" {support:>9}"
        )
    return "\n".join(out) + "\n"


_CHUNK_LABEL = re.compile(r"^([A-Z])-(.+)$")


def label_scheme(labels: Sequence[str]) -> str | None:
    """The chunk scheme the labels follow, or None: ``"iobes"`` when every label is ``O`` or a
    prefix of B/I/E/S then ``-`` and a type and some use E- or S-, ``"bilou"`` likewise with L/U,
    ``"bio"`` when every label is ``O``, ``B-X`` or ``I-X``.  Single letters without a type
    (NETtalk's phoneme classes ``I``, ``E``, ``O``, ``S``...) are not chunk tags, nor is a set of
    ``O`` alone."""
    prefixes = set()
    for lab in labels:
        if lab == "O":
            continue
        m = _CHUNK_LABEL.match(lab)
        if not m:
            return None
        prefixes.add(m.group(1))
    if not prefixes:
        return None
    if prefixes <= set("BI"):
        return "bio"
    if prefixes <= set("BIES"):
        return "iobes"
    if prefixes <= set("BILU"):
        return "bilou"
    return None
