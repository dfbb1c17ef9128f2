"""From column files to attributes and back: the glue the CLI and the demo use.

A column file (CoNLL / CRF++ / Wapiti: one token a line, observation columns
then, for training data, the label; a blank line after each sentence) is read
with :mod:`crfkit.io.columns`, expanded into attribute strings by CRF++
templates (:mod:`crfkit.features.templates`), and handed to
:func:`crfkit.train.train`.

A model trained here remembers its templates, the padding convention and the
number of observation columns in ``model.meta``, so that a saved model can tag
column files on its own (:func:`tag_columns`)::

    from crfkit.features.templates import default_chunking_templates
    from crfkit.pipeline import train_columns, tag_columns

    res = train_columns("train.txt", default_chunking_templates())
    res.model.save("chunker.crfkit")
    out = tag_columns(res.model, "test.txt", marginals=True)
    out.labels[0]        # predicted labels of the first sentence
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .errors import DataError, TemplateError
from .features.rows import attributes_of, bigram_attributes_of, dense_of, row_inputs, tagger_of
from .features.templates import Templates
from .io.columns import Sentence, read_columns, read_columns_list
from .model import CRFModel

__all__ = [
    "BATCH_TOKENS",
    "batches",
    "tag_column_batches",
    "load_columns",
    "train_columns",
    "tagger_from_model",
    "tag_columns",
    "TaggedColumns",
    "split_marginals",
    "attributes_of",
    "bigram_attributes_of",
    "inputs_of_rows",
    "dense_of",
    "name_of",
]


def name_of(source) -> str:
    """The name of a path or stream in messages (``"-"``: ``<stdin>``)."""
    if isinstance(source, (str, os.PathLike)):
        p = os.fspath(source)
        return "<stdin>" if p == "-" else p
    return str(getattr(source, "name", "<stream>"))


def load_columns(
    path,
    templates: Templates,
    *,
    pad: bool = True,
    has_labels: bool = True,
    docstart: str = "skip",
    name: str | None = None,
    progress=None,
    lazy: bool = False,
    once: bool = False,
):
    """Read a column file and apply the templates.

    ``path`` is a path (``.gz`` is decompressed, ``"-"`` is standard input) or
    an open file.  Returns ``(X, Y, sentences)``: the attribute sequences, the
    label sequences (``None`` when ``has_labels`` is false) and the
    :class:`~crfkit.io.columns.Sentence` objects.  Problems with the file raise
    :class:`~crfkit.errors.DataError` naming the file and line.

    ``progress``: ``None``, or a factory ``progress(desc, total)`` returning a
    context manager with ``update(n)`` (a :class:`crfkit.progress.Progress`):
    it is called once for reading (total unknown, one update per sentence)
    and once for the feature extraction (total: the number of sentences).

    ``lazy``: ``X`` is a :class:`crfkit.features.lazy.LazySequences` applying the templates a chunk
    of sentences at a time as it is read (training reads it once: the attribute strings of the whole
    file never exist at once); with ``progress``, the feature bar advances as it is read; ``once``:
    ``X`` drops the sentences after its first complete pass.
    """
    label = name if name is not None else name_of(path)
    if progress is None:
        sentences = read_columns_list(path, has_labels=has_labels, docstart=docstart, name=label)
        X = attributes_of(sentences, templates, pad=pad, name=label, lazy=lazy, once=once)
    else:
        sentences = []
        with progress(f"reading {label}", None) as bar:
            for s in read_columns(path, has_labels=has_labels, docstart=docstart, name=label):
                sentences.append(s)
                bar.update(1)
        if lazy:
            X = attributes_of(
                sentences, templates, pad=pad, name=label, lazy=True, progress=progress, once=once
            )
        else:
            X = []
            with progress("features", len(sentences)) as bar:
                for i in range(0, len(sentences), 256):
                    X += attributes_of(sentences[i : i + 256], templates, pad=pad, name=label)
                    bar.update(min(256, len(sentences) - i))
    Y = [s.labels for s in sentences] if has_labels else None
    return X, Y, sentences


def parse_columns_spec(spec) -> list[int]:
    """Column numbers (1-based, as ``cut -f``: ``"3-130,132"``, or a list of ints) -> 0-based
    indices."""
    if isinstance(spec, str):
        cols: list[int] = []
        for part in spec.split(","):
            part = part.strip()
            lo, sep, hi = part.partition("-")
            try:
                a = int(lo)
                b = int(hi) if sep else a
            except ValueError:
                raise ValueError(
                    f"bad column list {spec!r}: expected numbers and ranges like 3-130,132"
                ) from None
            if a < 1 or b < a:
                raise ValueError(f"bad column range {part!r} in {spec!r} (columns count from 1)")
            cols.extend(range(a, b + 1))
    else:
        cols = [int(c) for c in spec]
        if any(c < 1 for c in cols):
            raise ValueError("columns count from 1")
    if not cols:
        raise ValueError("empty column list")
    if len(set(cols)) != len(cols):
        raise ValueError(f"column list {spec!r} names a column twice")
    return [c - 1 for c in cols]


def parse_weight_column(spec) -> int:
    """``--weight-column N`` (1-based, as ``cut -f``) -> the 0-based observation column."""
    try:
        c = int(spec)
    except (TypeError, ValueError):
        raise ValueError(f"the weight column is one column number (from 1), got {spec!r}") from None
    if c < 1:
        raise ValueError(f"the weight column counts from 1, got {c}")
    return c - 1


def take_weight_column(
    sentences: Sequence[Sentence], column: int, *, name: str = "<data>"
) -> tuple[np.ndarray, list[Sentence]]:
    """The sample weight of every sentence, read from the (0-based) observation column ``column``,
    and the sentences with that column taken out of every token (so that no template and no dense
    column can read it; the columns after it move one place left).

    Every token of a sentence repeats the sentence's weight (a sentence has one weight); a weight
    that is not a number, not finite or negative, a token without the column, or a token whose
    weight differs from its sentence's first token is a :class:`DataError` naming the file and
    line."""
    weights = np.empty(len(sentences))
    out = []
    for i, s in enumerate(sentences):
        w0 = None
        cols = []
        for t, tok in enumerate(s.columns):
            line = s.line + t
            if column >= len(tok):
                raise DataError(
                    f"weight column {column + 1} is missing: the token has {len(tok)} observation "
                    "columns",
                    name,
                    line,
                )
            raw = tok[column]
            try:
                v = float(raw)
            except ValueError:
                raise DataError(
                    f"weight column {column + 1} holds {raw!r}, not a number", name, line
                ) from None
            if not np.isfinite(v):
                raise DataError(
                    f"weight column {column + 1} holds {raw!r}: a sample weight must be finite",
                    name,
                    line,
                )
            if v < 0:
                raise DataError(
                    f"weight column {column + 1} holds {raw!r}: a sample weight must be >= 0",
                    name,
                    line,
                )
            if w0 is None:
                w0 = v
            elif v != w0:
                raise DataError(
                    f"weight column {column + 1} holds {raw!r} but {w0:g} on the first token of "
                    f"its sentence (line {s.line}): every token of a sentence repeats the "
                    "sentence's one weight",
                    name,
                    line,
                )
            cols.append(tok[:column] + tok[column + 1 :])
        weights[i] = 1.0 if w0 is None else w0
        out.append(Sentence(cols, s.labels, s.line))
    return weights, out


def _check_supported(templates: Templates, dense: bool = False) -> None:
    if not templates.unigram and not dense:
        raise TemplateError(
            "no unigram (U) template: the model would have no state features", templates.name
        )


def train_columns(
    train_path,
    templates: Templates,
    *,
    dev_path=None,
    pad: bool = True,
    docstart: str = "skip",
    progress=None,
    dense_columns=None,
    weight_column=None,
    **train_kwargs,
):
    """Train on a labelled column file; returns :class:`crfkit.train.TrainResult`.

    ``train_kwargs`` go to :func:`crfkit.train.train` (regularisation,
    stopping rules, ``threads``, ``trace``, ``verbose``, ``log``...).  The
    model's ``meta`` gets ``templates`` (the template text), ``template_pad``
    and ``columns`` (the number of observation columns), which is what
    :func:`tag_columns` needs.  ``progress`` goes to :func:`load_columns`
    for the training file (reading and feature extraction).

    CRF++ semantics for the ``B`` line: a template set without one trains no
    transition features (the labels are then predicted independently).
    ``B`` lines with macros (Wapiti ``b``/``*`` patterns) give
    bigram-observation features (see :mod:`crfkit.features.encode`); they are
    trained by the full-batch optimizers (``lbfgs``/``owlqn``).

    ``dense_columns`` (``"3-130"`` or 1-based ints): observation columns read
    as real numbers into a dense feature block (a weight per (column, label));
    they stay visible to the templates too.  The model records them
    (``meta["dense_columns"]``) so that :func:`tag_columns` reads them back.

    ``weight_column`` (1-based): the observation column holding each sentence's
    sample weight (repeated on every token; see :func:`crfkit.train.train` for
    the weighted objective).  It is taken out of the tokens before anything
    else reads them: the templates and ``dense_columns`` count the columns that
    remain (with the weight column last, the numbering is that of the file
    without it, which is also what tagging reads).  The dev file, when given,
    has the same layout: its weight column is dropped (dev scores are unweighted).
    """
    from .memtrim import release_code_pages
    from .train import train

    # LLVM's pages that importing numba touched: not held while the file is read
    release_code_pages()

    dcols = parse_columns_spec(dense_columns) if dense_columns is not None else None
    wcol = parse_weight_column(weight_column) if weight_column is not None else None
    _check_supported(templates, dense=dcols is not None)
    if wcol is None:
        X, Y, sentences = load_columns(
            train_path,
            templates,
            pad=pad,
            docstart=docstart,
            progress=progress,
            lazy=True,
            once=True,
        )
        if not templates.bigram_observation:
            # X's pass is the only reader of the sentences (deleted below): each chunk goes once
            # it is converted (with bigram-observation lines, B reads them after X)
            X.consume()
        Y = _own_labels(Y)
    else:
        label = name_of(train_path)
        sentences = read_columns_list(train_path, has_labels=True, docstart=docstart, name=label)
        Y = [s.labels for s in sentences]
        train_kwargs["weights"], sentences = take_weight_column(sentences, wcol, name=label)
        X = attributes_of(sentences, templates, pad=pad, name=label)
    if train_kwargs.pop(
        "partial_labels", False
    ):  # label cells ? (any) and A|B (a set): crfkit.training.partial
        from .training.partial import parse_cells

        Y = parse_cells(Y)
    n_columns = len(sentences[0].columns[0])
    X_dev = Y_dev = None
    if dev_path is not None:
        if wcol is None:
            X_dev, Y_dev, dev_sents = load_columns(dev_path, templates, pad=pad, docstart=docstart)
        else:
            dev_sents = read_columns_list(
                dev_path, has_labels=True, docstart=docstart, name=name_of(dev_path)
            )
            Y_dev = [s.labels for s in dev_sents]
            _, dev_sents = take_weight_column(dev_sents, wcol, name=name_of(dev_path))
            X_dev = attributes_of(dev_sents, templates, pad=pad, name=name_of(dev_path))
        nd = len(dev_sents[0].columns[0])
        if nd != n_columns:
            raise DataError(
                f"the dev data has {nd} observation columns but the training data has {n_columns}",
                name_of(dev_path),
                dev_sents[0].line,
            )
    if templates.bigram_observation:
        # lazy, as X: the label-pair x observation strings of the whole file never exist at once
        train_kwargs["B"] = bigram_attributes_of(
            sentences, templates, pad=pad, lazy=True, once=True
        )
        if dev_path is not None:
            train_kwargs["B_dev"] = bigram_attributes_of(dev_sents, templates, pad=pad)
    meta = dict(train_kwargs.pop("meta", None) or {})
    meta.update(
        {
            "templates": templates.source,
            "template_pad": bool(pad),
            "columns": n_columns,
            "train_file": name_of(train_path),
        }
    )
    if wcol is not None:
        meta["weight_column"] = wcol + 1  # (taken out of the tokens: "columns" counts the others)
    if not templates.bigram:
        # no plain label-pair line (B / b / * without macros): no label-pair features of their own,
        # as CRF++ and Wapiti; bigram-observation lines alone test label pairs only with an
        # observation
        train_kwargs["transitions"] = "none"
    if dcols is not None:
        train_kwargs["dense"] = dense_of(sentences, dcols, name=name_of(train_path))
        train_kwargs["dense_names"] = [f"column {c + 1}" for c in dcols]
        if dev_path is not None:
            train_kwargs["dense_dev"] = dense_of(dev_sents, dcols, name=name_of(dev_path))
        meta["dense_columns"] = [c + 1 for c in dcols]
    # The sentences go as the features are built (X, lazy and consumed, lets each chunk's sentences
    # go once it is converted, or all of them after its one pass; Y holds its own lists): on
    # CoNLL-2000 they are 66 MB, a third of the training's peak RSS.
    del sentences
    return train(X, Y, X_dev=X_dev, Y_dev=Y_dev, meta=meta, **train_kwargs)


def _own_labels(Y: list) -> list:
    """The label sequences as new lists of one shared string per label: they no longer point into
    the reader's sentences (whose memory is then freed whole when the sentences go, instead of being
    pinned by a label string per token)."""
    one = {}
    get = one.setdefault
    return [[get(lab, lab) for lab in ys] for ys in Y]


def tagger_from_model(model: CRFModel) -> tuple[Templates, bool]:
    """The templates and the padding flag a model was trained with:
    :func:`crfkit.features.rows.tagger_of` of ``model.meta`` (a :class:`~crfkit.errors.CrfkitError`
    when the model carries no templates)."""
    return tagger_of(model.meta)


@dataclass
class TaggedColumns:
    """What :func:`tag_columns` returns.

    ``sentences``: the input (``Sentence.labels`` holds the gold labels when
    the input had them, else ``None``); ``labels``: the predicted labels, one
    list per sentence; ``marginals``: per token, the marginal probability of
    its predicted label (``None`` unless asked for); ``probabilities``: per
    sentence, p(predicted labels | x) (``None`` unless asked for);
    ``has_labels``: whether the input carried gold labels;
    ``all_marginals``: per sentence, the marginals of every label, an array
    of tokens x labels with columns in ``label_names`` order (``None``
    unless asked for with ``all_marginals=True``).
    """

    sentences: list[Sentence]
    labels: list[list[str]]
    marginals: list[list[float]] | None
    probabilities: np.ndarray | None
    has_labels: bool
    all_marginals: list[np.ndarray] | None = None
    label_names: list[str] | None = None

    @property
    def gold(self) -> list[list[str]] | None:
        return [s.labels for s in self.sentences] if self.has_labels else None


#: tokens per batch of :func:`tag_column_batches` (and ``crfkit tag``): a batch's attribute strings
#: take about 2-3 KB a token with the chunking templates, so about 25 MB at this size
BATCH_TOKENS = 10_000


def batches(items, batch_tokens: int | None):
    """Group an iterable of sequences (anything with ``len``) into lists of
    at least ``batch_tokens`` tokens (the last one may hold fewer; a longer
    sequence is a batch of its own); ``None``: one list of everything."""
    if batch_tokens is None:
        yield list(items)
        return
    if batch_tokens < 1:
        raise ValueError(f"batch_tokens must be >= 1, not {batch_tokens!r}")
    batch, n = [], 0
    for item in items:
        batch.append(item)
        n += len(item)
        if n >= batch_tokens:
            yield batch
            batch, n = [], 0
    if batch:
        yield batch


#: ``engine="adaptive"``: the tokens tagged in numpy before the kernels take over (loading them
#: costs about a second of CPU; numpy's Viterbi is about as fast as one kernel thread, per token)
NUMPY_FIRST_TOKENS = 1 << 18


def tag_column_batches(
    model: CRFModel,
    path_or_stream,
    *,
    has_labels: bool | None = None,
    marginals: bool = False,
    threads: int | None = None,
    docstart: str = "skip",
    name: str | None = None,
    all_marginals: bool = False,
    batch_tokens: int | None = BATCH_TOKENS,
    engine: str = "auto",
):
    """Tag a column file batch by batch, as it is read: yields one
    :class:`TaggedColumns` per batch of about ``batch_tokens`` tokens (whole
    sentences, in input order; ``None``: the whole input in one batch), so
    that memory stays bounded whatever the input's size. Each batch is
    decoded with the model's multi-threaded kernels. Arguments and the
    detection of gold labels (on the first sentence) as for :func:`tag_columns`.
    An error in the input is raised when the reader reaches it, after the
    batches before it were yielded.  ``engine="numpy"``: plain Viterbi in numpy, no numba kernel
    loaded (:meth:`CRFModel.decode`); ``engine="adaptive"`` (a one-shot process's choice, ``crfkit
    tag``): numpy for the first :data:`NUMPY_FIRST_TOKENS` tokens, where loading the kernels would
    cost more than it saves, then the kernels (``"auto"``: multi-threaded) for a long input.
    """
    templates, pad = tagger_from_model(model)
    label = name if name is not None else name_of(path_or_stream)
    trained = model.meta.get("columns")
    dcols = model.meta.get("dense_columns")
    names = list(model.space.labels) if all_marginals else None
    # read every column as an observation, then split the label off: the
    # file is read once, so this works on standard input and pipes too
    reader = read_columns(path_or_stream, has_labels=False, docstart=docstart, name=label)
    tokens_done = 0
    for sentences in batches(reader, batch_tokens):
        eng = engine
        if engine == "adaptive":
            eng = "numpy" if tokens_done < NUMPY_FIRST_TOKENS else "auto"
        tokens_done += sum(len(s.columns) for s in sentences)
        if has_labels is None:
            has_labels = _detect_labels(sentences[0], trained, label)
        if has_labels:
            ncols = len(sentences[0].columns[0])
            if ncols < 2:
                raise DataError(
                    f"{ncols} column: no room for observation columns before the gold label",
                    label,
                    sentences[0].line,
                )
            sentences = [
                Sentence([c[:-1] for c in s.columns], [c[-1] for c in s.columns], s.line)
                for s in sentences
            ]
        nobs = len(sentences[0].columns[0])
        if trained is not None and nobs != trained:
            raise DataError(
                f"{nobs} observation columns, but the model was trained on {trained}",
                label,
                sentences[0].line,
            )
        templates.check_columns(nobs, label, sentences[0].line)
        X = model.encode_rows([s.columns for s in sentences])  # attribute ids without the strings
        B = dense = None
        if X is None:
            X = attributes_of(sentences, templates, pad=pad, name=label)
            B = bigram_attributes_of(sentences, templates, pad=pad)
            dense = dense_of(sentences, [c - 1 for c in dcols], name=label) if dcols else None
        if not (marginals or all_marginals):
            pred = model.tag(X, threads=threads, dense=dense, B=B, engine=eng)
            del X, B, dense
            yield TaggedColumns(sentences, pred, None, None, bool(has_labels))
            continue
        pred, probs, marg, corpus = model.tag_with_probability(X, threads=threads, dense=dense, B=B)
        del X, B, dense
        per_tok, full = split_marginals(model, pred, marg, corpus)
        yield TaggedColumns(
            sentences,
            pred,
            per_tok,
            np.asarray(probs, dtype=np.float64),
            bool(has_labels),
            full if all_marginals else None,
            names,
        )


def _detect_labels(first: Sentence, trained: int | None, label: str) -> bool:
    """Whether the input's last column is a gold label, from its column count."""
    ncols = len(first.columns[0])
    if trained is None:
        return False
    if ncols == trained + 1:
        return True
    if ncols == trained:
        return False
    raise DataError(
        f"{ncols} columns, but the model was trained on {trained} observation columns "
        f"(expected {trained}, or {trained + 1} with a gold label last)",
        label,
        first.line,
    )


def tag_columns(
    model: CRFModel,
    path_or_stream,
    *,
    has_labels: bool | None = None,
    marginals: bool = False,
    threads: int | None = None,
    docstart: str = "skip",
    name: str | None = None,
    all_marginals: bool = False,
) -> TaggedColumns:
    """Tag a column file with a model trained by :func:`train_columns`.

    ``has_labels``: whether the last column is a gold label; ``None`` detects
    it: a file with one column more than the training data's observation
    columns has labels, one with as many has none (anything else is an error).
    ``marginals=True`` also computes the marginal of each predicted label and
    the probability of each predicted sequence (``CRFModel.tag_with_probability``);
    ``all_marginals=True`` all that and, per sentence, the marginal of every
    label (tokens x labels, columns in the model's label order, also given as
    ``label_names``).  Both come from the same single decoding pass.

    The whole input is held in memory: for a large input use
    :func:`tag_column_batches` (what ``crfkit tag`` does).
    """
    (out,) = tag_column_batches(
        model,
        path_or_stream,
        has_labels=has_labels,
        marginals=marginals,
        threads=threads,
        docstart=docstart,
        name=name,
        all_marginals=all_marginals,
        batch_tokens=None,
    )
    return out


def split_marginals(model: CRFModel, pred: list[list[str]], marg: np.ndarray, corpus):
    """Per sentence: the marginals of the predicted labels (lists of floats) and
    the full marginal matrices (tokens x labels views of ``marg``), from the
    outputs of :meth:`CRFModel.tag_with_probability`."""
    index = model.space.label_index
    ids = np.fromiter(
        (index[lab] for ys in pred for lab in ys), dtype=np.int64, count=corpus.n_tokens
    )
    mp = marg[np.arange(corpus.n_tokens), ids].tolist() if corpus.n_tokens else []
    ptr = corpus.seq_ptr.tolist()
    per_tok = [mp[ptr[i] : ptr[i + 1]] for i in range(len(ptr) - 1)]
    full = [marg[ptr[i] : ptr[i + 1]] for i in range(len(ptr) - 1)]
    return per_tok, full


def inputs_of_rows(model: CRFModel, sentences, *, name: str = "<rows>"):
    """``(X, B, dense)`` for :meth:`CRFModel.tag` & co. from token rows, through the templates the
    model was trained with: :func:`crfkit.features.rows.row_inputs` of ``model.meta``."""
    return row_inputs(model.meta, sentences, name=name)
