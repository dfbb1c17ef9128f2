"""Loaders of the benchmark data sets, in the layout of ``shared/data``.

=================  ==========================================  =============================
name               files (under the data directory)            loader
=================  ==========================================  =============================
``conll2000``      ``conll2000/{train,test}.txt.gz``           :func:`load_conll2000`
``conll2002``      ``conll2002/{esp,ned}.{train,testa,testb}.gz`` :func:`load_conll2002`
``ocr_letters``    ``ocr_letters/letter.data.gz``              :func:`load_ocr_letters`
``ptb_wsj_sample`` ``ptb_wsj_sample/treebank_wsj_sample.txt.gz`` :func:`load_ptb_sample`
``nettalk``        ``nettalk/nettalk.data.gz``                 :func:`crfkit.datasets.nettalk.load_nettalk`
=================  ==========================================  =============================

Where the files are looked for: the ``data_dir`` argument when given (and only
there); otherwise :func:`crfkit.datasets.data_dir` (``$CRFKIT_DATA``, else
``../shared/data``) and then the download cache that
:func:`crfkit.datasets.fetch` fills (``$CRFKIT_CACHE``, else
``~/.cache/crfkit``). Each file may also be there uncompressed (the name
without ``.gz``). A missing file raises :class:`~crfkit.errors.DataError`
naming the places looked at and the ``crfkit data fetch`` command that gets it.

The text corpora come back as :class:`~crfkit.io.columns.Sentence` lists
(``columns``: the observation columns, ``labels``: the last column), ready for
:func:`crfkit.pipeline.attributes_of` and CRF++ templates.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np

from ..errors import DataError
from ..io.columns import Sentence, open_text, read_columns_list

__all__ = [
    "find_file",
    "load_conll2000",
    "load_conll2002",
    "load_ocr_letters",
    "ocr_letters_split",
    "pixel_attributes",
    "load_ptb_sample",
    "CONLL2002_LANGS",
    "CONLL2002_SPLITS",
    "OCR_FOLDS",
    "OCR_PIXELS",
    "PTB_TRAIN_SENTENCES",
]

CONLL2002_LANGS = {"es": "esp", "esp": "esp", "nl": "ned", "ned": "ned"}
CONLL2002_SPLITS = ("train", "testa", "testb")
OCR_FOLDS = 10
OCR_PIXELS = 128  # 16 rows x 8 columns, row-major
OCR_FIELDS = 6 + OCR_PIXELS
#: the NLTK-book split of the Penn Treebank sample: the first 3,000 sentences train, the other 914
#: test
PTB_TRAIN_SENTENCES = 3000


def _search_dirs(data_dir) -> list[Path]:
    if data_dir is not None:
        return [Path(data_dir)]
    from . import data_dir as default_data_dir
    from .download import cache_dir

    out = [default_data_dir()]
    c = cache_dir()
    if c not in out:
        out.append(c)
    return out


def find_file(relpath: str, data_dir=None) -> Path:
    """The path of ``relpath`` (e.g. ``"conll2000/train.txt.gz"``), compressed or
    not, in ``data_dir`` or, when that is None, in the default data directory
    and then the download cache. Raises :class:`DataError` when missing."""
    dirs = _search_dirs(data_dir)
    names = [relpath]
    if relpath.endswith(".gz"):
        names.append(relpath[:-3])
    for d in dirs:
        for n in names:
            p = d / n
            if p.is_file():
                return p
    dataset = relpath.split("/", 1)[0]
    where = " or ".join(str(d) for d in dirs)
    raise DataError(
        f"{relpath} not found in {where}; get it with `crfkit data fetch {dataset}` "
        "(or point CRFKIT_DATA / data_dir at a directory in the shared/data layout)"
    )


def _check_choice(value, choices, what: str):
    if value not in choices:
        raise ValueError(f"{what} must be one of {', '.join(map(repr, choices))}, not {value!r}")


# --------------------------------------------------------------------------- CoNLL


def load_conll2000(split: str = "train", data_dir=None) -> list[Sentence]:
    """CoNLL-2000 chunking: ``split`` is ``"train"`` (8,936 sentences) or
    ``"test"`` (2,012). Columns ``[word, POS]``, labels the B-/I-/O chunk tags."""
    _check_choice(split, ("train", "test"), "split")
    return read_columns_list(find_file(f"conll2000/{split}.txt.gz", data_dir))


def load_conll2002(
    lang: str, split: str = "train", data_dir=None, *, docstart: str = "skip"
) -> list[Sentence]:
    """CoNLL-2002 NER: ``lang`` ``"es"`` or ``"nl"`` (``"esp"``/``"ned"`` too),
    ``split`` ``"train"``, ``"testa"`` (development) or ``"testb"`` (test).
    Columns ``[word, POS]``, labels IOB2 entity tags. ``docstart="skip"``
    drops the Dutch ``-DOCSTART-`` lines (document boundaries; each also ends
    the sentence before it), ``"keep"`` keeps them as ordinary tokens (in the
    file each is directly followed by the first sentence of its document, with
    no blank line between)."""
    _check_choice(lang, tuple(CONLL2002_LANGS), "lang")
    _check_choice(split, CONLL2002_SPLITS, "split")
    return read_columns_list(
        find_file(f"conll2002/{CONLL2002_LANGS[lang]}.{split}.gz", data_dir), docstart=docstart
    )


# --------------------------------------------------------------------------- Penn Treebank sample


def load_ptb_sample(split: str = "all", data_dir=None) -> list[Sentence]:
    """NLTK's 10% Penn Treebank sample for POS tagging (3,914 sentences).

    ``split``: ``"all"``; ``"train"``, the first :data:`PTB_TRAIN_SENTENCES`
    (3,000) sentences; ``"test"``, the other 914 (the NLTK-book convention).
    Columns ``[word]``, labels the 45 PTB tags."""
    _check_choice(split, ("all", "train", "test"), "split")
    sents = read_columns_list(find_file("ptb_wsj_sample/treebank_wsj_sample.txt.gz", data_dir))
    if split == "train":
        return sents[:PTB_TRAIN_SENTENCES]
    if split == "test":
        return sents[PTB_TRAIN_SENTENCES:]
    return sents


# --------------------------------------------------------------------------- OCR letters


def _folds_arg(folds) -> set[int]:
    if folds is None:
        return set(range(OCR_FOLDS))
    if isinstance(folds, (int, np.integer)):
        folds = [folds]
    out = set()
    for f in folds:
        if not isinstance(f, (int, np.integer)) or isinstance(f, bool) or not 0 <= f < OCR_FOLDS:
            raise ValueError(f"folds must be integers 0..{OCR_FOLDS - 1}, got {f!r}")
        out.add(int(f))
    return out


def _parse_letters(path: Path, keep: set[int]):
    """Words of the selected folds: (pixel arrays, label lists, folds)."""
    name = str(path)
    X: list[np.ndarray] = []
    Y: list[list[str]] = []
    F: list[int] = []
    rows: list = []  # pixel rows of the current word: b"0101..." when binary, else float arrays
    labels: list[str] = []
    word_fold = word_line = word_id = None
    expect_pos = 1
    f = open_text(path)
    try:
        for lineno, text in enumerate(f, 1):
            text = text.rstrip("\r\n")
            if not text or text.isspace():
                continue
            head = text.split("\t", 6)
            if len(head) < 7:
                raise DataError(
                    f"{len(head)} fields, expected {OCR_FIELDS} (id, letter, next_id, "
                    f"word_id, position, fold, {OCR_PIXELS} pixels)",
                    name,
                    lineno,
                )
            try:
                next_id, wid, pos, fold = int(head[2]), int(head[3]), int(head[4]), int(head[5])
            except ValueError:
                raise DataError(
                    "next_id, word_id, position and fold must be integers", name, lineno
                ) from None
            letter = head[1]
            if not letter:
                raise DataError("empty letter label", name, lineno)
            if not 0 <= fold < OCR_FOLDS:
                raise DataError(f"fold {fold} outside 0..{OCR_FOLDS - 1}", name, lineno)
            if word_fold is None:
                word_fold, word_line, word_id, expect_pos = fold, lineno, wid, 1
            elif fold != word_fold or wid != word_id:
                raise DataError(
                    f"word {word_id} (from line {word_line}) changes word_id or fold "
                    "before its last letter (next_id = -1)",
                    name,
                    lineno,
                )
            if pos != expect_pos:
                raise DataError(f"position {pos}, expected {expect_pos}", name, lineno)
            expect_pos += 1
            rest = head[6]
            if rest.endswith("\t"):
                rest = rest[:-1]  # a trailing TAB
            # binary pixels: one character each, TABs between (checked by the count)
            pix = rest[::2]
            if (
                len(rest) == 2 * OCR_PIXELS - 1
                and rest.count("\t") == OCR_PIXELS - 1
                and not pix.strip("01")
            ):
                if fold in keep:
                    rows.append(pix.encode("ascii"))
            else:
                vals = rest.split("\t")
                if len(vals) != OCR_PIXELS:
                    raise DataError(
                        f"{6 + len(vals)} fields, expected {OCR_FIELDS} (id, letter, next_id, "
                        f"word_id, position, fold, {OCR_PIXELS} pixels)",
                        name,
                        lineno,
                    )
                try:
                    arr = np.array([float(v) for v in vals], dtype=np.float64)
                except ValueError:
                    raise DataError("a pixel value is not a number", name, lineno) from None
                if not np.all(np.isfinite(arr)):
                    raise DataError("a pixel value is not finite", name, lineno)
                if fold in keep:
                    rows.append(arr)
            if fold in keep:
                labels.append(letter)
            if next_id == -1:
                if fold in keep:
                    X.append(_pixels(rows))
                    Y.append(labels)
                    F.append(fold)
                rows, labels = [], []
                word_fold = None
        if word_fold is not None:
            raise DataError(
                f"the file ends inside word {word_id} (from line {word_line}): "
                "its last letter needs next_id = -1",
                name,
            )
    except UnicodeDecodeError:
        raise DataError("invalid UTF-8", name) from None
    except (OSError, EOFError) as e:
        raise DataError(f"cannot read: {e}", name) from None
    finally:
        f.close()
    return X, Y, F


def _pixels(rows) -> np.ndarray:
    if all(isinstance(r, bytes) for r in rows):
        flat = np.frombuffer(b"".join(rows), dtype=np.uint8).reshape(len(rows), OCR_PIXELS)
        return (flat - 48).astype(np.float64)
    out = np.empty((len(rows), OCR_PIXELS), dtype=np.float64)
    for i, r in enumerate(rows):
        out[i] = (np.frombuffer(r, dtype=np.uint8) - 48) if isinstance(r, bytes) else r
    return out


def load_ocr_letters(folds=None, data_dir=None, *, with_folds: bool = False):
    """Taskar's OCR letters: the words of the given ``folds`` (an int, an
    iterable of ints in 0..9, or None for all ten), in file order.

    Returns ``(X, Y)``: ``X[i]`` is a float64 array ``(n_letters, 128)`` with
    the binary 16x8 images of word ``i``'s letters (row-major), ``Y[i]`` the
    list of its letters (``"a"``..``"z"``). ``with_folds=True`` adds a third
    list, the fold of each word. Common splits: :func:`ocr_letters_split`.
    To train a CRF on them, turn the pixels into attributes with
    :func:`pixel_attributes`.
    """
    keep = _folds_arg(folds)
    X, Y, F = _parse_letters(find_file("ocr_letters/letter.data.gz", data_dir), keep)
    return (X, Y, F) if with_folds else (X, Y)


def ocr_letters_split(setting: str = "ocr", data_dir=None):
    """``(X_train, Y_train, X_test, Y_test)`` of a common OCR split:
    ``"ocr"`` (Taskar et al. / BCFW: train on fold 0, test on folds 1-9) or
    ``"ocr2"`` (train on folds 1-9, test on fold 0)."""
    _check_choice(setting, ("ocr", "ocr2"), "setting")
    X, Y, F = load_ocr_letters(None, data_dir, with_folds=True)
    in_train = [(f == 0) == (setting == "ocr") for f in F]
    Xtr = [x for x, t in zip(X, in_train) if t]
    Ytr = [y for y, t in zip(Y, in_train) if t]
    Xte = [x for x, t in zip(X, in_train) if not t]
    Yte = [y for y, t in zip(Y, in_train) if not t]
    return Xtr, Ytr, Xte, Yte


def pixel_attributes(X: Iterable[np.ndarray], *, bias: bool = True) -> list[list[list]]:
    """Attribute sequences (crfkit's training input) of pixel arrays: per
    letter, ``"p<k>"`` for every pixel ``k`` equal to 1, ``("p<k>", v)`` for
    any other non-zero value, and ``"bias"`` (unless ``bias=False``)."""
    out = []
    names = [f"p{k}" for k in range(OCR_PIXELS)]
    for word in X:
        word = np.asarray(word, dtype=np.float64)
        if word.ndim != 2 or word.shape[1] != OCR_PIXELS:
            raise ValueError(
                f"each word must be an array (n_letters, {OCR_PIXELS}), got shape {word.shape}"
            )
        seq = []
        for row in word:
            nz = np.flatnonzero(row)
            tok = ["bias"] if bias else []
            for k in nz.tolist():
                v = float(row[k])
                tok.append(names[k] if v == 1.0 else (names[k], v))
            seq.append(tok)
        out.append(seq)
    return out
