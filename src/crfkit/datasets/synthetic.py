"""A small synthetic chunking corpus, generated when CoNLL-2000 is not at hand.

The generator is a hidden Markov model over *chunks*: a Markov chain picks the
sequence of chunk types of a sentence (NP, VP, PP, ADJP, ADVP, SBAR and
outside tokens), each chunk picks a part-of-speech pattern (``DT JJ NN``,
``MD VB``, ...), and each part of speech draws a word from its own Zipf-shaped
vocabulary.  The result is column data ``word POS chunk`` with BIO chunk tags,
as in CoNLL-2000.

What keeps it from being trivial (so scores are informative, roughly 85-95
F1 with the default chunking templates):

* adjacent chunks of one type (``NP NP``, ``VP VP``) whose boundary is only
  visible through the parts of speech and words around it;
* ``IN`` words that head either a PP or an SBAR, decided by what follows;
* words shared between parts of speech (``NN``/``VB``, ``JJ``/``NN``, ...);
* a noisy part-of-speech column (a tagger's mistakes) and a little label noise
  (an annotator's);
* a long tail of rare words, many unseen in training.

Everything is a function of two seeds: ``language_seed`` fixes the
"language" (vocabularies, grammar), ``seed`` the sentences drawn from it; train
and test sets are drawn from one language with two seeds.  Python's
``random.Random`` is used, so the output is the same on every platform.
"""

from __future__ import annotations

import gzip
import io
import os
import random
from bisect import bisect
from functools import lru_cache
from itertools import accumulate

from ..io.atomic import atomic_file
from ..io.columns import Sentence, write_columns

__all__ = ["generate", "write", "CHUNK_TYPES"]

CHUNK_TYPES = ("NP", "VP", "PP", "ADJP", "ADVP", "SBAR")

# Part-of-speech patterns of each chunk type: (weight, pattern); "JJ*" is
# zero to two JJ, "X?" is optional.
_PATTERNS = {
    "NP": [
        (5, "DT JJ* NN"),
        (3, "DT NN NN"),
        (2, "NNP NNP?"),
        (3, "PRP"),
        (2, "CD NNS"),
        (2, "JJ* NNS"),
        (1, "DT JJ NNS"),
        (1, "NN"),
    ],
    "VP": [(4, "VBZ"), (3, "MD VB"), (3, "VBD"), (2, "TO VB"), (1, "VBZ RB VBD"), (1, "MD RB VB")],
    "PP": [(6, "IN"), (1, "TO")],
    "ADJP": [(3, "JJ"), (2, "RB JJ")],
    "ADVP": [(3, "RB"), (1, "RB RB")],
    "SBAR": [(3, "IN"), (1, "WDT")],
    "O": [(5, ","), (3, "CC")],
}

# chunk-type Markov chain; "." ends the sentence (written as an O token)
_NEXT = {
    "START": [("NP", 60), ("PP", 14), ("ADVP", 10), ("SBAR", 8), ("VP", 8)],
    "NP": [("VP", 42), ("PP", 22), ("O", 8), ("NP", 7), ("SBAR", 5), ("ADJP", 2), ("END", 14)],
    "VP": [("NP", 44), ("PP", 14), ("ADJP", 9), ("ADVP", 9), ("SBAR", 9), ("VP", 5), ("END", 10)],
    "PP": [("NP", 90), ("ADVP", 4), ("VP", 3), ("PP", 3)],
    "ADJP": [("PP", 30), ("O", 20), ("NP", 15), ("END", 35)],
    "ADVP": [("VP", 40), ("NP", 20), ("PP", 20), ("O", 10), ("ADJP", 10)],
    "SBAR": [("NP", 80), ("VP", 20)],
    "O": [("NP", 50), ("VP", 25), ("PP", 10), ("SBAR", 10), ("ADVP", 5)],
}

# vocabulary sizes per part of speech (open classes)
_OPEN = {"NN": 500, "NNS": 250, "NNP": 300, "JJ": 250, "VB": 200, "RB": 60}
_CLOSED = {
    "DT": ["the", "a", "an", "this", "these", "some", "every"],
    "PRP": ["he", "she", "it", "they", "we", "you", "i"],
    "MD": ["will", "can", "would", "could", "may", "must"],
    "TO": ["to"],
    "CC": ["and", "but", "or"],
    "WDT": ["which", "that", "whom"],
    ",": [","],
    ".": [".", "!", "?"],
}
# prepositions; the first few also introduce clauses (SBAR), as "that", "because"
_IN_WORDS = [
    "of",
    "in",
    "for",
    "on",
    "with",
    "at",
    "by",
    "from",
    "about",
    "into",
    "over",
    "after",
    "because",
    "if",
    "that",
    "while",
    "as",
    "since",
    "before",
]
_SBAR_IN = ["because", "if", "that", "while", "as", "since", "before", "after"]
# the parts of speech a noisy tagger confuses
_CONFUSE = {
    "NN": ["JJ", "VB", "NNP"],
    "JJ": ["NN", "RB"],
    "VB": ["NN", "VBZ"],
    "VBD": ["VB", "JJ"],
    "VBZ": ["NNS"],
    "NNS": ["VBZ"],
    "RB": ["JJ", "IN"],
    "IN": ["RB", "WDT"],
    "NNP": ["NN"],
    "WDT": ["IN", "DT"],
    "DT": ["WDT"],
    "CD": ["JJ"],
}
POS_NOISE = 0.04
LABEL_NOISE = 0.01
MAX_CHUNKS = 14


def _cum(weights):
    return list(accumulate(weights))


def _pick(rng: random.Random, items, cum):
    return items[bisect(cum, rng.random() * cum[-1])]


class _Language:
    """Vocabularies and grammar of one synthetic language."""

    def __init__(self, language_seed: int):
        rng = random.Random(f"crfkit-synthetic-language-{language_seed}")
        onsets = [
            "b",
            "c",
            "d",
            "f",
            "g",
            "h",
            "k",
            "l",
            "m",
            "n",
            "p",
            "r",
            "s",
            "t",
            "v",
            "w",
            "z",
            "br",
            "st",
            "tr",
            "pl",
            "gr",
            "sh",
            "ch",
        ]
        vowels = ["a", "e", "i", "o", "u", "ai", "ou", "ea"]
        codas = ["", "", "n", "r", "s", "t", "l", "m", "nd", "ck"]
        seen: set[str] = set()

        def word(nsyl: int) -> str:
            while True:
                w = "".join(
                    rng.choice(onsets) + rng.choice(vowels) for _ in range(nsyl)
                ) + rng.choice(codas)
                if w not in seen:
                    seen.add(w)
                    return w

        stems = {
            pos: [word(rng.choice((1, 2, 2, 3))) for _ in range(n)] for pos, n in _OPEN.items()
        }
        # ambiguity: some verbs are also nouns, some adjectives also nouns
        share = len(stems["VB"]) // 4
        stems["VB"][:share] = stems["NN"][50 : 50 + share]
        stems["JJ"][:20] = stems["NN"][200:220]
        vocab = {
            "NN": stems["NN"],
            "NNS": [w + "s" for w in stems["NN"][: _OPEN["NNS"]]],
            "NNP": [w.capitalize() for w in stems["NNP"]],
            "JJ": stems["JJ"],
            "VB": stems["VB"],
            "VBZ": [w + "s" for w in stems["VB"]],
            "VBD": [w + "ed" for w in stems["VB"]],
            "RB": [w + "ly" for w in stems["RB"][:50]]
            + ["not", "also", "very", "so", "then", "now", "still", "just", "only", "even"],
            "CD": [str(k) for k in range(1, 40)]
            + ["hundred", "thousand", "million", "two", "three"],
            "IN": list(_IN_WORDS),
        }
        for pos, ws in _CLOSED.items():
            vocab[pos] = list(ws)
        # the words of each part of speech in a random order, Zipf weights on rank
        self.vocab = {}
        for pos, ws in vocab.items():
            ws = list(ws)
            rng.shuffle(ws)
            self.vocab[pos] = (ws, _cum([1.0 / (r + 1) ** 1.05 for r in range(len(ws))]))
        sbar = [w for w in vocab["IN"] if w in _SBAR_IN]
        self.sbar_in = (sbar, _cum([1.0] * len(sbar)))
        self.patterns = {
            k: ([p.split() for _, p in v], _cum([w for w, _ in v])) for k, v in _PATTERNS.items()
        }
        self.next = {k: ([t for t, _ in v], _cum([w for _, w in v])) for k, v in _NEXT.items()}
        self.all_labels = [f"{p}-{t}" for t in CHUNK_TYPES for p in "BI"] + ["O"]

    def _expand(self, rng: random.Random, pattern: list[str]) -> list[str]:
        out = []
        for sym in pattern:
            if sym.endswith("*"):
                out += [sym[:-1]] * rng.choice((0, 0, 1, 1, 2))
            elif sym.endswith("?"):
                if rng.random() < 0.5:
                    out.append(sym[:-1])
            else:
                out.append(sym)
        return out

    def _word(self, rng: random.Random, pos: str, chunk: str) -> str:
        if pos == "IN" and chunk == "SBAR":
            ws, cum = self.sbar_in
        else:
            ws, cum = self.vocab[pos]
        return _pick(rng, ws, cum)

    def sentence(self, rng: random.Random) -> tuple[list[list[str]], list[str]]:
        rows: list[list[str]] = []
        labels: list[str] = []
        state = "START"
        n = 0
        while True:
            nxt, cum = self.next[state]
            state = _pick(rng, nxt, cum)
            n += 1
            if state == "END" or n > MAX_CHUNKS:
                break
            pats, pcum = self.patterns[state]
            tags = self._expand(
                rng, _pick(rng, pats, pcum)
            )  # never empty: every pattern has a plain tag
            for k, pos in enumerate(tags):
                w = self._word(rng, pos, state)
                if state == "O":
                    lab = "O"
                else:
                    lab = ("B-" if k == 0 else "I-") + state
                shown = pos
                if rng.random() < POS_NOISE and pos in _CONFUSE:
                    shown = rng.choice(_CONFUSE[pos])
                if rng.random() < LABEL_NOISE:
                    lab = rng.choice(self.all_labels)
                rows.append([w, shown])
                labels.append(lab)
        ws, cum = self.vocab["."]
        rows.append([_pick(rng, ws, cum), "."])
        labels.append("O")
        rows[0][0] = rows[0][0].capitalize()
        return rows, labels


@lru_cache(maxsize=4)
def _language(language_seed: int) -> _Language:
    return _Language(language_seed)


def generate(n_sentences: int, seed: int = 0, *, language_seed: int = 0) -> list[Sentence]:
    """``n_sentences`` sentences of the synthetic corpus, as :class:`~crfkit.io.columns.Sentence`
    objects (columns ``[word, POS]``, labels the BIO chunk tags, ``line`` the line
    the sentence starts on when written by :func:`write`).  Deterministic given
    ``seed`` and ``language_seed``."""
    if n_sentences < 0:
        raise ValueError("n_sentences must be >= 0")
    lang = _language(int(language_seed))
    rng = random.Random(f"crfkit-synthetic-sentences-{language_seed}-{seed}")
    out = []
    line = 1
    for _ in range(n_sentences):
        rows, labels = lang.sentence(rng)
        out.append(Sentence(rows, labels, line))
        line += len(rows) + 1
    return out


def write(
    path: str | os.PathLike, n_sentences: int, seed: int = 0, *, language_seed: int = 0
) -> int:
    """Write the corpus as a column file ``word POS chunk`` (space-separated, a
    blank line after each sentence, CoNLL-2000's layout); a name ending in
    ``.gz`` is gzip-compressed (with no timestamp, so the bytes depend on the
    seeds only).  The file appears atomically.  Returns the number of tokens."""
    path = os.fspath(path)
    sents = generate(n_sentences, seed, language_seed=language_seed)
    with atomic_file(path, fsync=False) as raw:
        if path.endswith(".gz"):
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
                with io.TextIOWrapper(gz, encoding="utf-8", newline="\n") as f:
                    write_columns(sents, f, sep=" ")
        else:
            f = io.TextIOWrapper(raw, encoding="utf-8", newline="\n")
            write_columns(sents, f, sep=" ")
            f.flush()
            f.detach()
    return sum(len(s) for s in sents)
