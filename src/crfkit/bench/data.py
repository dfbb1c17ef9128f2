"""The benchmark data sets by name, each with its train/test split and attribute set.

=================  =====================================================  ==============================
name               split                                                  attributes (feature set id)
=================  =====================================================  ==============================
``conll2000``      CoNLL-2000 train (8,936) / test (2,012)                CRFsuite's chunking example
                                                                          (``crfsuite-chunking``)
``ocr``            OCR letters, train fold 0 (626 words) / folds 1-9      pixels + bias (``pixels``)
                   (Taskar et al.; the data README's "ocr")
``ocr-large``      OCR letters, train folds 1-9 / fold 0 (README "ocr2")  pixels + bias (``pixels``)
``conll2002-nl``   CoNLL-2002 Dutch ``ned.train`` / ``ned.testb``         CRFsuite NER style
                   (``-DOCSTART-`` lines dropped)                         (``crfsuite-ner``)
``ptb``            PTB WSJ sample, first 3,000 sentences / other 914      Ratnaparkhi-style POS
                   (the NLTK-book split)                                  (``ratnaparkhi-pos``)
``synthetic``      crfkit's synthetic chunking corpus, 200 / 50           CRFsuite's chunking example
                   sentences (seeds 0 / 1): for tests and smoke runs
=================  =====================================================  ==============================

Every set gives attribute sequences (``X_train``, ``X_test``, in the format
:func:`crfkit.train.train` takes) and label sequences.  The benchmark's
regularisation is the paper's ``lambda = 1/n``: ``l2 = 1/n`` with ``n`` the
number of training sequences (:attr:`BenchData.default_l2`).

The CoNLL-2000 attributes are those of ``benchmarks/conll2000_vs_crfsuite.py``
(CRFsuite's ``example/chunking.py``): crfkit's built-in chunking templates
applied without padding, plus ``__BOS__``/``__EOS__``; the names differ
(``U00:...`` instead of ``w[-2]=...``) but the features are the same.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import CrfkitError

__all__ = [
    "BenchData",
    "DATASETS",
    "load",
    "dataset_names",
    "chunking_attributes",
    "ner_attributes",
    "pos_attributes",
]


@dataclass
class BenchData:
    """A benchmark data set: training and test attribute/label sequences."""

    name: str
    features: str  # id of the attribute set (part of the f* cache key)
    X_train: list
    Y_train: list
    X_test: list
    Y_test: list
    chunks: bool = False  # labels are BIO chunks: dev F1 (conlleval) is recorded too
    description: str = ""
    support: str = (
        "observed"  # feature support: "observed" (CRFsuite) or "all" (every attribute x label)
    )
    _encoded: tuple | None = field(default=None, repr=False)

    @property
    def feature_set(self) -> str:
        """The attribute set and the feature support, e.g. ``crfsuite-chunking/observed``."""
        return f"{self.features}/{self.support}"

    @property
    def n_train(self) -> int:
        return len(self.X_train)

    @property
    def default_l2(self) -> float:
        """The paper's lambda = 1/n."""
        return 1.0 / self.n_train

    def encoded(self):
        """``(space, train_corpus, test_corpus)``: the feature space built on the
        training data (with :attr:`support`) and both sets encoded in it; built
        once per object."""
        if self._encoded is None:
            from ..features.encode import build, encode

            space, corpus = build(
                self.X_train, self.Y_train, support=self.support, name=f"<{self.name} train>"
            )
            test = encode(self.X_test, space, self.Y_test, name=f"<{self.name} test>")
            self._encoded = (space, corpus, test)
        return self._encoded


# --------------------------------------------------------------------------- attribute sets


def chunking_attributes(sentences) -> list:
    """CRFsuite's chunking example attributes of ``sentences`` (columns word, POS):
    crfkit's default chunking templates without padding, plus ``__BOS__`` on the
    first token and ``__EOS__`` on the last (as ``benchmarks/conll2000_vs_crfsuite.py``)."""
    from ..features.templates import default_chunking_templates

    tpl = default_chunking_templates()
    out = []
    for s in sentences:
        seq = tpl.apply(s.columns, pad=False)
        if seq:
            seq[0].append("__BOS__")
            seq[-1].append("__EOS__")
        out.append(seq)
    return out


def word_shape(w: str) -> str:
    """Collapsed shape of a word: runs of upper case ``X``, lower case ``x``,
    digits ``d`` and anything else kept as is (``Van-Dijk`` -> ``Xx-Xx``)."""
    out = []
    for ch in w:
        if ch.isdigit():
            c = "d"
        elif ch.isalpha():
            c = "X" if ch.isupper() else "x"
        else:
            c = ch
        if not out or out[-1] != c:
            out.append(c)
    return "".join(out)


def _flags(w: str) -> list[str]:
    f = []
    if w[:1].isupper():
        f.append("title")
    if w.isupper():
        f.append("upper")
    if w.isdigit():
        f.append("digit")
    elif any(c.isdigit() for c in w):
        f.append("hasdigit")
    if "-" in w:
        f.append("hyphen")
    return f


def ner_attributes(sentences) -> list:
    """A CRFsuite-style NER attribute set (columns word, POS): lower-cased words
    at -2..2, word bigrams -1/0 and 0/1, POS at -1..1 and the POS bigrams around
    0, word shapes at -1..1, prefixes and suffixes of 1-3 characters of the word,
    its case/digit/hyphen flags (and the title flag of its neighbours), and
    ``__BOS__``/``__EOS__``; only inside the sentence (no padding)."""
    out = []
    for s in sentences:
        words = [c[0] for c in s.columns]
        pos = [c[1] if len(c) > 1 else "_" for c in s.columns]
        low = [w.lower() for w in words]
        shp = [word_shape(w) for w in words]
        T = len(words)
        seq = []
        for t in range(T):
            w = words[t]
            a = [f"w[0]={low[t]}", f"pos[0]={pos[t]}", f"shape[0]={shp[t]}"]
            for k in (1, 2, 3):
                if len(w) >= k:
                    a.append(f"pre{k}={w[:k].lower()}")
                    a.append(f"suf{k}={w[-k:].lower()}")
            a += ["flag=" + x for x in _flags(w)]
            for o in (-2, -1, 1, 2):
                p = t + o
                if 0 <= p < T:
                    a.append(f"w[{o}]={low[p]}")
                    if abs(o) == 1:
                        a.append(f"pos[{o}]={pos[p]}")
                        a.append(f"shape[{o}]={shp[p]}")
                        if words[p][:1].isupper():
                            a.append(f"title[{o}]")
            if t > 0:
                a.append(f"w[-1]|w[0]={low[t - 1]}|{low[t]}")
                a.append(f"pos[-1]|pos[0]={pos[t - 1]}|{pos[t]}")
            if t + 1 < T:
                a.append(f"w[0]|w[1]={low[t]}|{low[t + 1]}")
                a.append(f"pos[0]|pos[1]={pos[t]}|{pos[t + 1]}")
            if t == 0:
                a.append("__BOS__")
            if t == T - 1:
                a.append("__EOS__")
            seq.append(a)
        out.append(seq)
    return out


def pos_attributes(sentences) -> list:
    """Ratnaparkhi/Collins-style POS attributes (column word): the word and its
    lower-cased form, lower-cased words at -2..2, prefixes and suffixes of 1-4
    characters, the word shape and case/digit/hyphen flags, and
    ``__BOS__``/``__EOS__``; only inside the sentence."""
    out = []
    for s in sentences:
        words = [c[0] for c in s.columns]
        low = [w.lower() for w in words]
        T = len(words)
        seq = []
        for t in range(T):
            w = words[t]
            a = [f"w={w}", f"w[0]={low[t]}", f"shape={word_shape(w)}"]
            for k in (1, 2, 3, 4):
                if len(w) >= k:
                    a.append(f"pre{k}={w[:k]}")
                    a.append(f"suf{k}={w[-k:]}")
            a += ["flag=" + x for x in _flags(w)]
            for o in (-2, -1, 1, 2):
                p = t + o
                if 0 <= p < T:
                    a.append(f"w[{o}]={low[p]}")
            if t == 0:
                a.append("__BOS__")
            if t == T - 1:
                a.append("__EOS__")
            seq.append(a)
        out.append(seq)
    return out


# --------------------------------------------------------------------------- loaders


def _labels(sents) -> list:
    return [list(s.labels) for s in sents]


def _conll2000(data_dir) -> BenchData:
    from ..datasets import load_conll2000

    tr, te = load_conll2000("train", data_dir), load_conll2000("test", data_dir)
    return BenchData(
        "conll2000",
        "crfsuite-chunking",
        chunking_attributes(tr),
        _labels(tr),
        chunking_attributes(te),
        _labels(te),
        chunks=True,
        description="CoNLL-2000 chunking, train / test, CRFsuite chunking attributes",
    )


def _ocr(setting: str, name: str):
    def load(data_dir) -> BenchData:
        from ..datasets import ocr_letters_split, pixel_attributes

        Xtr, Ytr, Xte, Yte = ocr_letters_split(setting, data_dir)
        split = "fold 0 / folds 1-9" if setting == "ocr" else "folds 1-9 / fold 0"
        return BenchData(
            name,
            "pixels",
            pixel_attributes(Xtr),
            [list(y) for y in Ytr],
            pixel_attributes(Xte),
            [list(y) for y in Yte],
            description=f"OCR letters ({split}), pixel attributes + bias",
        )

    return load


def _conll2002_nl(data_dir) -> BenchData:
    from ..datasets import load_conll2002

    tr, te = load_conll2002("nl", "train", data_dir), load_conll2002("nl", "testb", data_dir)
    return BenchData(
        "conll2002-nl",
        "crfsuite-ner",
        ner_attributes(tr),
        _labels(tr),
        ner_attributes(te),
        _labels(te),
        chunks=True,
        description="CoNLL-2002 Dutch NER, ned.train / ned.testb, CRFsuite-style NER attributes",
    )


def _ptb(data_dir) -> BenchData:
    from ..datasets import load_ptb_sample

    tr, te = load_ptb_sample("train", data_dir), load_ptb_sample("test", data_dir)
    return BenchData(
        "ptb",
        "ratnaparkhi-pos",
        pos_attributes(tr),
        _labels(tr),
        pos_attributes(te),
        _labels(te),
        description="PTB WSJ sample POS, first 3,000 / other 914 sentences, Ratnaparkhi-style "
        "attributes",
    )


def _synthetic(data_dir) -> BenchData:
    from ..datasets.synthetic import generate

    tr, te = generate(200, seed=0), generate(50, seed=1)
    return BenchData(
        "synthetic",
        "crfsuite-chunking",
        chunking_attributes(tr),
        _labels(tr),
        chunking_attributes(te),
        _labels(te),
        chunks=True,
        description="synthetic chunking corpus (200 / 50 sentences), CRFsuite chunking attributes",
    )


DATASETS: dict[str, Callable] = {
    "conll2000": _conll2000,
    "ocr": _ocr("ocr", "ocr"),
    "ocr-large": _ocr("ocr2", "ocr-large"),
    "conll2002-nl": _conll2002_nl,
    "ptb": _ptb,
    "synthetic": _synthetic,
}


def dataset_names() -> tuple[str, ...]:
    return tuple(DATASETS)


def load(
    name: str, data_dir=None, *, limit: int | None = None, support: str = "observed"
) -> BenchData:
    """The benchmark data set ``name`` (see the module docstring); ``limit``
    keeps the first ``limit`` training sequences (the test set is unchanged, and
    ``l2 = 1/n`` follows the smaller ``n``).  ``support``: ``observed`` (the
    (attribute, label) pairs seen in training, CRFsuite's default and the core
    benchmark's) or ``all`` (every attribute with every label and every label
    pair: the layout of the paper's experiments, whose §6 memory table it
    reproduces).  Missing files raise :class:`~crfkit.errors.DataError` naming
    where they were looked for."""
    if name not in DATASETS:
        raise CrfkitError(f"unknown benchmark data set {name!r}; known: {', '.join(DATASETS)}")
    if support not in ("observed", "all"):
        raise CrfkitError(f"feature support must be 'observed' or 'all', not {support!r}")
    data = DATASETS[name](data_dir)
    data.support = support
    if limit is not None:
        if limit < 1:
            raise CrfkitError(f"limit must be at least 1, got {limit}")
        if limit < data.n_train:
            data.X_train, data.Y_train = data.X_train[:limit], data.Y_train[:limit]
            data.name = f"{name}[:{limit}]"
    return data
