"""Token rows to attributes: the templates applied to column values, through a model's metadata.

What tagging a column file or token rows needs below the model: the attribute (and
bigram-observation attribute) sequences of sentences through CRF++ templates (:func:`attributes_of`,
:func:`bigram_attributes_of`), the dense columns read as numbers (:func:`dense_of`), and, from a
model's ``meta`` and feature space, its templates and padding (:func:`tagger_of`), the inputs of
:meth:`crfkit.model.CRFModel.tag` (:func:`row_inputs`) and the attribute ids of token rows without
the attribute strings (:func:`template_ids`, :func:`encode_template_rows`).  Nothing here takes a
model: :mod:`crfkit.pipeline` (files in, tagged files out) keeps the model-taking conveniences.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from ..corpus import MAX_FEATURE_VALUE
from ..errors import CrfkitError, DataError
from ..io.columns import Sentence
from .templates import Templates

__all__ = [
    "attributes_of",
    "bigram_attributes_of",
    "dense_of",
    "encode_template_rows",
    "row_inputs",
    "tagger_of",
    "template_ids",
]


def attributes_of(
    sentences: Sequence[Sentence],
    templates: Templates,
    *,
    pad: bool = True,
    name: str = "<data>",
    lazy: bool = False,
    progress=None,
    once: bool = False,
) -> list[list[list[str]]]:
    """Attribute sequences of ``sentences`` (one list of strings per token).

    The column count is checked against the templates once, on the first
    sentence, so that a template reaching past the data's columns is reported
    as ``file:line`` of the data.  ``lazy``: a
    :class:`crfkit.features.lazy.LazySequences` applying the templates as it is
    read, a chunk of sentences at a time (``progress``: a factory as
    :func:`crfkit.pipeline.load_columns` takes, whose "features" bar advances per chunk read;
    ``once``: the lazy sequence drops ``sentences`` after one complete pass).
    """
    if sentences:
        first = sentences[0]
        templates.check_columns(len(first.columns[0]), name, first.line)
    n = len(sentences)
    return _applied(
        sentences,
        templates.apply,
        pad,
        lazy,
        once,
        None if progress is None else (lambda: progress("features", n)),
    )


def _applied(sentences, apply, pad: bool, lazy: bool, once: bool, progress=None):
    """``apply(s.columns, pad=pad)`` for every sentence: a list, or with ``lazy`` a
    :class:`crfkit.features.lazy.LazySequences` applying it a chunk of sentences at a time."""
    if not lazy:
        return [apply(s.columns, pad=pad) for s in sentences]
    from .lazy import LazySequences

    def convert(chunk, start):
        return [apply(s.columns, pad=pad) for s in chunk]

    return LazySequences(sentences, convert, once=once, progress=progress)


def bigram_attributes_of(
    sentences: Sequence[Sentence],
    templates: Templates,
    *,
    pad: bool = True,
    lazy: bool = False,
    once: bool = False,
) -> list[list[list[str]]] | None:
    """Bigram-observation attribute sequences of ``sentences`` (CRF++ ``B`` lines with
    macros, Wapiti ``b``/``*`` patterns), or ``None`` when the templates have none.
    Call :func:`attributes_of` first: it checks the column count.  ``lazy``, ``once``: as
    :func:`attributes_of` (training encodes a lazy ``B`` a chunk of sentences at a time)."""
    if not templates.bigram_observation:
        return None
    return _applied(sentences, templates.apply_bigram, pad, lazy, once)


def dense_of(
    sentences: Sequence[Sentence], columns: Sequence[int], *, name: str = "<data>"
) -> list[np.ndarray]:
    """The dense feature matrices (tokens x len(columns)) of ``sentences``: the given
    (0-based) observation columns read as real numbers; a value that is not a finite
    number is a :class:`DataError` naming its file and line."""
    cols = list(columns)
    out = []
    for s in sentences:
        m = np.empty((len(s.columns), len(cols)))
        for t, tok in enumerate(s.columns):
            for j, c in enumerate(cols):
                if c >= len(tok):
                    raise DataError(
                        f"dense column {c + 1} is missing: the token has {len(tok)} observation "
                        "columns",
                        name,
                        s.line + t,
                    )
                try:
                    v = float(tok[c])
                except ValueError:
                    raise DataError(
                        f"dense column {c + 1} holds {tok[c]!r}, not a number", name, s.line + t
                    ) from None
                if not np.isfinite(v):
                    raise DataError(
                        f"dense column {c + 1} holds {tok[c]!r}: values must be finite",
                        name,
                        s.line + t,
                    )
                if abs(v) > MAX_FEATURE_VALUE:
                    raise DataError(
                        f"dense column {c + 1} holds {tok[c]}, beyond crfkit's bound on feature "
                        f"values, |value| <= {MAX_FEATURE_VALUE:g}; scale the values to about "
                        "[-1, 1] or take their logarithm",
                        name,
                        s.line + t,
                    )
                m[t, j] = v
        out.append(m)
    return out


def tagger_of(meta) -> tuple[Templates, bool]:
    """The templates and the padding flag a model was trained with (from its metadata ``meta``).

    Raises :class:`~crfkit.errors.CrfkitError` when the model carries no
    templates (it was trained from attribute lists, not from a column file).
    """
    src = meta.get("templates") if isinstance(meta, dict) else None
    if not src:
        raise CrfkitError(
            "this model has no feature templates (it was trained from attribute lists, "
            "not from a column file), so it cannot tag column files; "
            "use CRFModel.tag() with attribute lists instead"
        )
    if not isinstance(src, str):  # not a model's metadata: parsed (and refused) as it is
        return Templates.parse(src, name="<model templates>"), bool(meta.get("template_pad", True))
    return _parsed(src), bool(meta.get("template_pad", True))


@functools.lru_cache(maxsize=16)
def _parsed(src: str) -> Templates:
    """A model's templates parsed once per process (``crfkit serve`` tags every request through
    them; parsing was half of a one-sentence request's CPU).  A :class:`Templates` is not changed
    after parsing, so callers share it."""
    return Templates.parse(src, name="<model templates>")


def row_inputs(meta, sentences, *, name: str = "<rows>"):
    """``(X, B, dense)`` for :meth:`crfkit.model.CRFModel.tag` & co. from token rows: per sentence a
    list of tokens, each the list of its observation column values (a column file's lines split,
    without the label), through the templates the model was trained with (``meta``: the metadata of
    a model from :func:`crfkit.pipeline.train_columns` / ``crfkit train``)."""
    templates, pad = tagger_of(meta)
    sents = []
    for i, rows in enumerate(sentences):
        rows = [list(map(str, r)) if not isinstance(r, str) else r.split() for r in rows]
        if rows and any(len(r) != len(rows[0]) for r in rows):
            raise DataError(f"sentence {i + 1}: tokens with different numbers of columns", name)
        sents.append(Sentence(rows, None, i + 1))
    trained = meta.get("columns")
    if trained is not None:
        for s in sents:
            if s.columns and len(s.columns[0]) != trained:
                raise DataError(
                    f"sentence {s.line}: {len(s.columns[0])} columns per token, but the model was "
                    f"trained on {trained} observation columns",
                    name,
                )
    X = attributes_of(sents, templates, pad=pad, name=name) if sents else []
    B = bigram_attributes_of(sents, templates, pad=pad)
    dcols = meta.get("dense_columns")
    dense = dense_of(sents, [c - 1 for c in dcols], name=name) if dcols else None
    return X, B, dense


def template_ids(meta, space, lookup=None):
    """A :class:`crfkit.features.tplenc.TemplateIds` of the model with metadata ``meta`` and feature
    space ``space`` (the ids of token rows through its templates without the attribute strings), or
    None when its features need more than the unigram templates (no templates, bigram-observation
    templates, dense columns).  ``lookup``: names -> ids (default: the space's
    :meth:`~crfkit.features.space.FeatureSpace.attribute_ids`)."""
    tids = None
    meta = meta if isinstance(meta, dict) else {}
    if (
        meta.get("templates")
        and not space.n_bigram
        and not space.n_dense
        and not meta.get("dense_columns")
    ):
        from .tplenc import TemplateIds

        templates, pad = tagger_of(meta)
        if not templates.bigram_observation:
            tids = TemplateIds(
                templates, space.attribute_ids if lookup is None else lookup, pad=pad
            )
    return tids


def encode_template_rows(tids, sentences):
    """The corpus of token rows through ``tids`` (:func:`template_ids`), or None when a row is wider
    than its compiled templates take (:class:`crfkit.features.tplenc.TooWide`)."""
    from .encode import assemble, offsets
    from .tplenc import TooWide

    try:
        lens, counts, ids = tids.ids(sentences)
    except TooWide:
        return None
    return assemble(offsets(lens), counts, ids, None, np.full(int(lens.sum()), -1, dtype=np.int32))
