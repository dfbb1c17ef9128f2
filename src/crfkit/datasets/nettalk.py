"""NETtalk (Sejnowski & Rosenberg 1987): English word phonetization, the benchmark of
Lavergne, Cappé & Yvon (2010), section 5.1.1.

File: ``nettalk/nettalk.data.gz`` under the data directory (see
:mod:`crfkit.datasets.loaders` for where it is looked for). One word per line,
tab-separated ``word``, ``phonemes``, ``stress``, ``class``; the three strings
are letter-aligned (``-`` in the phoneme string is the null sound of a silent
letter). 20,007 words, 146,934 letters, 26 letters, 51 phonemes, 5 stress marks.

A word is a sequence: the tokens are its letters (one observation column), the
labels its phonemes (``labels="phoneme"``, 51 labels), its stress/syllable marks
(``"stress"``, 5 labels: ``0 1 2 < >``), or the composite of both
(``"joint"``: phoneme followed by stress mark, e.g. ``x0``; the Nettalk+prosody
condition of the paper's Table 5).  The paper counts 114 composite labels after
re-assigning the prosodic marks to phonemes rather than letters, a change to the
database it does not publish; this file, letter-aligned, has 163 distinct
composites over all 20,007 words (:func:`joint_label_count` counts them on any
subset).  :func:`phoneme_of` recovers the phoneme from a joint label.

The 10-fold split (:func:`nettalk_fold`): word ``i`` (0-based line number in the
file) is in fold ``i mod 10``.  :func:`nettalk_split` with the default
``test_fold=9`` trains on folds 0-7, uses fold 8 as the development set and fold
9 as the test set (8 / 1 / 1 folds, the paper's protocol); another
``test_fold=k`` rotates it: test fold ``k``, dev fold ``(k - 1) mod 10``, the
other eight train.  The split depends on the file's line order only (no random
numbers), so it is the same on every machine and run; the folds are disjoint and
cover every word.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import DataError
from ..io.columns import Sentence, open_text

__all__ = [
    "NETTALK_FILE",
    "NETTALK_FOLDS",
    "LABEL_KINDS",
    "NettalkWord",
    "read_nettalk",
    "load_nettalk",
    "nettalk_fold",
    "nettalk_split_folds",
    "nettalk_split",
    "joint_label",
    "phoneme_of",
    "joint_label_count",
    "write_columns",
]

NETTALK_FILE = "nettalk/nettalk.data.gz"
NETTALK_FOLDS = 10
LABEL_KINDS = ("phoneme", "stress", "joint")
_STRESS = frozenset("012<>")


@dataclass(frozen=True)
class NettalkWord:
    """One line of ``nettalk.data``: the word, its letter-aligned phoneme and stress strings, its
    class (0 regular, 1 irregular, 2 foreign), its 0-based index in the file and the file line
    (1-based)."""

    word: str
    phonemes: str
    stress: str
    word_class: int
    index: int
    line: int

    @property
    def fold(self) -> int:
        return nettalk_fold(self.index)

    def labels(self, kind: str = "phoneme") -> list[str]:
        if kind == "phoneme":
            return list(self.phonemes)
        if kind == "stress":
            return list(self.stress)
        if kind == "joint":
            return [joint_label(p, s) for p, s in zip(self.phonemes, self.stress)]
        raise ValueError(f"labels must be one of {', '.join(map(repr, LABEL_KINDS))}, not {kind!r}")

    def sentence(self, kind: str = "phoneme") -> Sentence:
        """The word as a :class:`~crfkit.io.columns.Sentence`: one column (the letter) per token."""
        return Sentence([[c] for c in self.word], self.labels(kind), self.line)


def joint_label(phoneme: str, stress: str) -> str:
    """The composite label of a letter: its phoneme followed by its stress/syllable mark."""
    return phoneme + stress


def phoneme_of(label: str) -> str:
    """The phoneme of a joint label (its first character); a phoneme label is returned as is."""
    return label[:1]


def nettalk_fold(index: int) -> int:
    """The fold (0..9) of the word at 0-based line ``index`` of the file: ``index mod 10``."""
    return int(index) % NETTALK_FOLDS


def nettalk_split_folds(test_fold: int = 9) -> tuple[tuple[int, ...], int, int]:
    """``(train folds, dev fold, test fold)`` of the split whose test fold is ``test_fold``: the dev
    fold is ``(test_fold - 1) mod 10``, the other eight train (the default 9 gives folds 0-7, 8,
    9)."""
    if (
        isinstance(test_fold, bool)
        or not isinstance(test_fold, int)
        or not 0 <= test_fold < NETTALK_FOLDS
    ):
        raise ValueError(f"test_fold must be an integer 0..{NETTALK_FOLDS - 1}, got {test_fold!r}")
    dev = (test_fold - 1) % NETTALK_FOLDS
    train = tuple(f for f in range(NETTALK_FOLDS) if f not in (dev, test_fold))
    return train, dev, test_fold


def read_nettalk(path) -> list[NettalkWord]:
    """Every word of a ``nettalk.data`` file (``.gz`` or plain), checked: four tab-separated fields,
    the three strings of equal length, lower-case letters, known stress marks, an integer class.  A
    bad line raises :class:`~crfkit.errors.DataError` naming the file and line."""
    name = str(path)
    out: list[NettalkWord] = []
    f = open_text(path)
    try:
        for lineno, raw in enumerate(f, 1):
            text = raw.rstrip("\r\n")
            if not text.strip():
                continue
            parts = text.split("\t")
            if len(parts) != 4:
                raise DataError(
                    f"{len(parts)} tab-separated fields, expected 4 (word, phonemes, stress, class)",
                    name,
                    lineno,
                )
            word, ph, st, cl = parts
            if not word:
                raise DataError("empty word", name, lineno)
            if not (len(word) == len(ph) == len(st)):
                raise DataError(
                    f"the word {word!r} has {len(word)} letters but the phoneme string {ph!r} has "
                    f"{len(ph)} symbols and the stress string {st!r} {len(st)}: they must be "
                    "letter-aligned (equal length)",
                    name,
                    lineno,
                )
            bad = sorted(set(st) - _STRESS)
            if bad:
                raise DataError(
                    f"unknown stress mark(s) {''.join(bad)!r} in {st!r} (expected 0 1 2 < >)",
                    name,
                    lineno,
                )
            if any(c.isspace() for c in word + ph):
                raise DataError("white space inside the word or the phoneme string", name, lineno)
            try:
                wclass = int(cl.strip())
            except ValueError:
                raise DataError(f"class {cl!r} is not an integer", name, lineno) from None
            out.append(NettalkWord(word, ph, st, wclass, len(out), lineno))
    except UnicodeDecodeError:
        raise DataError("invalid UTF-8", name) from None
    except (OSError, EOFError) as e:
        raise DataError(f"cannot read: {e}", name) from None
    finally:
        f.close()
    if not out:
        raise DataError("no words", name)
    return out


def _folds_arg(folds) -> set[int]:
    if folds is None:
        return set(range(NETTALK_FOLDS))
    if isinstance(folds, int) and not isinstance(folds, bool):
        folds = [folds]
    out = set()
    for f in folds:
        if isinstance(f, bool) or not isinstance(f, int) or not 0 <= f < NETTALK_FOLDS:
            raise ValueError(f"folds must be integers 0..{NETTALK_FOLDS - 1}, got {f!r}")
        out.add(f)
    return out


def load_nettalk(
    folds=None, data_dir=None, *, labels: str = "phoneme", path=None
) -> list[Sentence]:
    """The words of the given ``folds`` (an int, an iterable of ints 0..9, or None for all), in file
    order, as :class:`~crfkit.io.columns.Sentence` (column 0: the letter; labels:
    ``labels`` = ``"phoneme"``, ``"stress"`` or ``"joint"``). ``path`` reads that file instead of
    the data directory's."""
    if labels not in LABEL_KINDS:
        raise ValueError(
            f"labels must be one of {', '.join(map(repr, LABEL_KINDS))}, not {labels!r}"
        )
    keep = _folds_arg(folds)
    if path is None:
        from .loaders import find_file

        path = find_file(NETTALK_FILE, data_dir)
    return [w.sentence(labels) for w in read_nettalk(Path(path)) if w.fold in keep]


def nettalk_split(test_fold: int = 9, data_dir=None, *, labels: str = "phoneme", path=None):
    """``(train, dev, test)`` sentence lists of the split of :func:`nettalk_split_folds` (default:
    folds 0-7 train, 8 dev, 9 test)."""
    if labels not in LABEL_KINDS:
        raise ValueError(
            f"labels must be one of {', '.join(map(repr, LABEL_KINDS))}, not {labels!r}"
        )
    train_f, dev_f, test_f = nettalk_split_folds(test_fold)
    if path is None:
        from .loaders import find_file

        path = find_file(NETTALK_FILE, data_dir)
    words = read_nettalk(Path(path))
    tr = [w.sentence(labels) for w in words if w.fold in train_f]
    dv = [w.sentence(labels) for w in words if w.fold == dev_f]
    te = [w.sentence(labels) for w in words if w.fold == test_f]
    return tr, dv, te


def joint_label_count(sentences) -> int:
    """Distinct labels in ``sentences`` (e.g. the composite labels of a ``labels="joint"`` load)."""
    return len({y for s in sentences for y in s.labels})


def write_columns(sentences, path) -> None:
    """Write sentences as a column file (``letter<TAB>label`` per token, a blank line after each
    word), the input ``crfkit train``/``tag``, ``wapiti`` and ``crf_learn`` read; written to a
    temporary file and renamed into place."""
    from ..io.atomic import atomic_file

    lines = []
    for s in sentences:
        for cols, y in zip(s.columns, s.labels):
            lines.append("\t".join(cols) + "\t" + y + "\n")
        lines.append("\n")
    with atomic_file(path, what="the column file") as f:
        f.write("".join(lines).encode("utf-8"))
