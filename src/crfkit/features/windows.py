"""Letter-window feature sets of Lavergne, Cappé & Yvon (2010), section 5.1.1, generated from a
small description instead of hand-written template lines.

A *window* ``[a, b]`` (offsets ``a <= b`` relative to the current token) tests the sequence of
column ``col`` values at positions ``a..b``; ``[0, 0]`` is the current letter, ``[-1, 1]`` the
centred trigram.  Each window becomes one template line; with label-pair features (the default) it
is a Wapiti ``*`` pattern: a label-unigram feature ``f(y, w)`` *and* a label-bigram x observation
feature ``f(y', y, w)`` per value ``w``; without them (``pairs=False``) a ``u`` pattern (label
unigram only).  The empty window (``k = 0``) is the bare ``*`` line: the label bias ``f(y)`` and the
label-bigram (transition) features ``f(y', y)``.

The feature sets (``n`` odd: 1, 3, 5, 7), with ``r = n // 2``:

``n-grm``
    the centred windows of every odd size ``k = 1, 3, ..., n`` (``[-j, j]`` for ``j = 0..r``) and
    the empty window (``k = 0``).  At ``m`` in ``lemma``, 3-grm has ``f(y',y)``, ``f(y',y,m)``,
    ``f(y',y,emm)`` (and the label-unigram features of the same windows).
``n-grm-``
    only the window of length ``n`` (``[-r, r]``): no empty window, no shorter window.
``n-grm+``
    ``n-grm`` plus the two most centred windows of every even size ``k = 2, 4, ..., n - 1``
    (``[-k/2, k/2 - 1]`` and ``[-(k/2 - 1), k/2]``): at ``e`` in ``lemma``, 3-grm+ adds ``le``,
    ``em``.
``n-grm++``
    every contiguous letter sequence inside the n-window, ``[a, b]`` for ``-r <= a <= b <= r``, and
    the empty window (3-grm++ adds ``f(y',y,l)`` and ``f(y',y,m)`` at the ``e`` above).

A preset string names one: ``nettalk:5-grm+``; a ``:u`` suffix (``nettalk:3-grm:u``) drops the
label-pair x observation features (every window as a ``u`` pattern, the empty window still a bare
``*``): the "without" column of the paper's Table 1.  :func:`preset_templates` parses one into
:class:`~crfkit.features.templates.Templates`; :func:`pattern_text` writes the lines in Wapiti's
pattern syntax (``*``/``u``/``b``) or CRF++'s (``U``/``B`` pairs), for ``wapiti train -p`` and
``crf_learn``.

Windows reaching outside the word read the padding tokens (``_B-1``, ``_B+1``...: CRF++ style), so
every template fires at every letter.

Structured (incremental) feature sets, section 5.4: :func:`stages` splits a feature set by *radius*
``max(|a|, |b|)``: stage 0 holds the windows of radius 0 (the letter and the empty window), stage
``s`` those of radius ``s``.  Each window of radius ``s >= 1`` has a *parent*, the window embedded
in it with radius ``s - 1`` (:func:`parent_window`: ``[a, b]`` clipped to ``[-(s-1), s-1]``;
``[-2, 2]`` -> ``[-1, 1]``, ``[-1, 0]`` -> ``[0, 0]``); a value of a stage-``s`` window joins the
model only where its parent's value is active (has a non-zero weight) after stage ``s - 1``
(:mod:`crfkit.training.incremental`).  A ``++`` window that clips to nothing (``[-2, -2]``) has no
parent and is always added.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import TemplateError
from .templates import Templates

__all__ = [
    "Window",
    "FeatureSetSpec",
    "parse_preset",
    "windows_of",
    "pattern_text",
    "preset_templates",
    "parent_window",
    "stages",
    "window_value",
    "candidate_counts",
    "KINDS",
    "SIZES",
    "PRESET_PREFIX",
]

PRESET_PREFIX = "nettalk:"
KINDS = ("", "-", "+", "++")
SIZES = (1, 3, 5, 7)
_PRESET = re.compile(r"^(?:nettalk:)?(\d+)-grm(\+\+|\+|-)?(:u)?$")


@dataclass(frozen=True, order=True)
class Window:
    """Offsets ``lo..hi`` (inclusive) of the tokens a feature tests; ``lo > hi`` is the empty
    window."""

    lo: int
    hi: int

    @property
    def size(self) -> int:
        return max(0, self.hi - self.lo + 1)

    @property
    def empty(self) -> bool:
        return self.hi < self.lo

    @property
    def radius(self) -> int:
        return 0 if self.empty else max(abs(self.lo), abs(self.hi))

    @property
    def name(self) -> str:
        """The template identifier: ``w-1+1`` for ``[-1, 1]``, ``w+0+0`` for the letter."""
        return f"w{self.lo:+d}{self.hi:+d}"

    def template_body(self, col: int = 0) -> str:
        """``name:%x[lo,col]/.../%x[hi,col]`` (empty for the empty window)."""
        if self.empty:
            return ""
        return self.name + ":" + "/".join(f"%x[{r},{col}]" for r in range(self.lo, self.hi + 1))


EMPTY = Window(0, -1)


@dataclass(frozen=True)
class FeatureSetSpec:
    """A parsed preset: window size ``n``, ``kind`` (``""``, ``"-"``, ``"+"``, ``"++"``), ``pairs``
    (label-pair x observation features or not), the observation column ``col``."""

    n: int
    kind: str = ""
    pairs: bool = True
    col: int = 0

    @property
    def name(self) -> str:
        return f"{PRESET_PREFIX}{self.n}-grm{self.kind}" + ("" if self.pairs else ":u")


def parse_preset(text: str) -> FeatureSetSpec:
    """``nettalk:5-grm+`` (the ``nettalk:`` prefix optional; ``:u`` suffix: no label-pair
    features) -> :class:`FeatureSetSpec`; ``ValueError`` naming the accepted forms otherwise."""
    m = _PRESET.match(text.strip())
    n = int(m.group(1)) if m else 0
    if m is None or n < 1 or n % 2 == 0 or n > 41:
        raise ValueError(
            f"unknown feature set {text!r}: expected nettalk:N-grm, nettalk:N-grm-, nettalk:N-grm+ "
            "or nettalk:N-grm++ with N odd (1, 3, 5, 7 in the paper), optionally followed by :u "
            "(no label-pair x observation features)"
        )
    return FeatureSetSpec(n, m.group(2) or "", m.group(3) is None)


def windows_of(spec: FeatureSetSpec) -> list[Window]:
    """The windows of a feature set (the empty window first when it has one), in a fixed order:
    by radius, then by size, then by start."""
    r = spec.n // 2
    if spec.kind == "-":
        return [Window(-r, r)]
    out = {EMPTY}
    for j in range(r + 1):
        out.add(Window(-j, j))
    if spec.kind == "+":
        for k in range(2, spec.n, 2):
            h = k // 2
            out.add(Window(-h, h - 1))
            out.add(Window(-(h - 1), h))
    elif spec.kind == "++":
        for a in range(-r, r + 1):
            for b in range(a, r + 1):
                out.add(Window(a, b))
    return sorted(out, key=lambda w: (w.radius, w.size, w.lo))


def parent_window(w: Window) -> Window | None:
    """The window of radius ``radius - 1`` embedded in ``w`` (``w`` clipped to it); None for a
    window of radius 0 or one that clips to nothing."""
    s = w.radius
    if s == 0:
        return None
    lo, hi = max(w.lo, -(s - 1)), min(w.hi, s - 1)
    if lo > hi:
        return None
    return Window(lo, hi)


def stages(spec: FeatureSetSpec) -> list[list[Window]]:
    """The feature set split by window radius: ``stages(spec)[s]`` holds its windows of radius
    ``s``."""
    ws = windows_of(spec)
    top = max(w.radius for w in ws)
    return [[w for w in ws if w.radius == s] for s in range(top + 1)]


def window_value(w: Window, letters: Sequence[str], t: int, prefix: str = "*") -> str:
    """The attribute string of window ``w`` at token ``t`` of a word (CRF++ padding outside it), as
    the generated template line (``prefix`` ``*`` or ``u``) gives it: a plain reference
    implementation."""
    from .templates import pad_token

    if w.empty:
        return prefix
    n = len(letters)
    vals = [letters[j] if 0 <= j < n else pad_token(j, n) for j in range(t + w.lo, t + w.hi + 1)]
    return prefix + w.name + ":" + "/".join(vals)


def candidate_counts(
    spec: FeatureSetSpec | str, words: Sequence[Sequence[str]], n_labels: int
) -> dict:
    """Candidate features of a feature set on ``words`` (letter sequences) with ``n_labels`` labels.

    ``total``: as Wapiti counts them: every distinct value of a window times every label
    (label-unigram features) and, with label pairs, times every label pair; the empty window gives
    the ``L`` label biases and the ``L^2`` transitions.  ``total_crfkit``: the size of crfkit's
    ``support="all"`` space, which leaves out the label-pair features of values seen only at the
    first letter of a word (no transition enters it, so they can never fire).  Also the per-kind
    totals (``unigram``, ``pair``, ``pair_crfkit``) and the distinct ``values`` per window."""
    if isinstance(spec, str):
        spec = parse_preset(spec)
    L = int(n_labels)
    uni = pair = pair_ck = 0
    values: dict[Window, int] = {}
    for w in windows_of(spec):
        if w.empty:
            uni += L
            pair += L * L
            pair_ck += L * L
            continue
        seen = set()
        inner = set()
        for word in words:
            for t in range(len(word)):
                v = window_value(w, word, t, "")
                seen.add(v)
                if t:
                    inner.add(v)
        values[w] = len(seen)
        uni += len(seen) * L
        if spec.pairs:
            pair += len(seen) * L * L
            pair_ck += len(inner) * L * L
    return {
        "unigram": uni,
        "pair": pair,
        "total": uni + pair,
        "pair_crfkit": pair_ck,
        "total_crfkit": uni + pair_ck,
        "values": {w.name: v for w, v in values.items()},
    }


def pattern_text(spec: FeatureSetSpec | str, fmt: str = "wapiti") -> str:
    """The template lines of a feature set: ``fmt="wapiti"`` (``*`` / ``u`` patterns, what crfkit
    and ``wapiti train -p`` read) or ``"crfpp"`` (a ``U`` and, with label pairs, a ``B`` line per
    window; ``U``/``B`` alone for the empty window: what ``crf_learn`` reads)."""
    if isinstance(spec, str):
        spec = parse_preset(spec)
    if fmt not in ("wapiti", "crfpp"):
        raise ValueError(f"fmt must be 'wapiti' or 'crfpp', not {fmt!r}")
    lines = [
        f"# {spec.name}: Lavergne et al. (2010) section 5.1.1 feature set over column {spec.col}",
        f"# generated by crfkit (crfkit patterns {spec.name})",
    ]
    for w in windows_of(spec):
        body = w.template_body(spec.col)
        if fmt == "wapiti":
            if w.empty:
                lines.append("*")
            else:
                lines.append(("*" if spec.pairs else "u") + body)
        else:
            if w.empty:
                lines += ["U", "B"]
            else:
                lines.append("U" + body)
                if spec.pairs:
                    lines.append("B" + body)
    return "\n".join(lines) + "\n"


def preset_templates(spec: FeatureSetSpec | str) -> Templates:
    """The parsed :class:`Templates` of a preset (Wapiti syntax)."""
    if isinstance(spec, str):
        try:
            spec = parse_preset(spec)
        except ValueError as e:
            raise TemplateError(str(e)) from None
    return Templates.parse(pattern_text(spec, "wapiti"), name=f"<{spec.name}>")
