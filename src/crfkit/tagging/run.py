"""One tagging run: :class:`TagOptions` (``crfkit tag``'s options, typed) and :func:`run_tag` over a
column file or a CRFsuite attribute file, batch by batch."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from ..errors import CrfkitError, DataError
from .decoding import run_decoding, wants_decoding
from .files import (
    EvalReport,
    Output,
    close_source,
    crfsuite_sequence,
    detect_format,
    open_out,
    print_stderr,
    recode,
    source_name,
)


def _tag_crfsuite(args, model, src) -> int:
    """``crfkit tag --format crfsuite``: one predicted label per line, a blank line
    after each sequence (as ``crfsuite tag``); ``--reference`` puts the file's
    label and a TAB before it, ``--marginals`` appends ``:p`` (the label's
    marginal), ``--probability`` writes ``@probability<TAB>p`` before each
    sequence (CRFsuite's ``-r``, ``-i``, ``-p``); ``--all-marginals`` appends
    ``<TAB>label:p`` for every label of the model, in the model's order.
    Sequences are read, tagged and written batch by batch (``--batch-tokens``)."""
    from ..io.crfsuite import read_crfsuite
    from ..pipeline import batches, split_marginals

    if args.labels is False and (args.eval or args.reference):
        raise CrfkitError(
            "--eval/--reference use the labels of the attribute file (its first field); "
            "they cannot go with --no-labels"
        )
    names = list(model.space.labels)
    want_marg = args.marginals or args.probability or args.all_marginals
    ev = EvalReport(model, getattr(args, "raw", False)) if args.eval else None
    with Output(args.output) as f:
        for seqs in batches(read_crfsuite(src, name=source_name(src)), args.batch_tokens):
            X = [s.attributes for s in seqs]
            gold = [s.labels for s in seqs]
            del seqs
            marg = probs = full = None
            if want_marg:
                pred, probs, node, corpus = model.tag_with_probability(X, threads=args.threads)
                marg, full = split_marginals(model, pred, node, corpus)
            else:
                pred = model.tag(X, threads=args.threads)
            del X
            for i, ys in enumerate(pred):
                f.write(
                    crfsuite_sequence(
                        args,
                        names,
                        ys,
                        gold[i],
                        probs[i] if args.probability else None,
                        marg[i] if args.marginals else None,
                        full[i] if args.all_marginals else None,
                    )
                )
            f.flush()
            if ev is not None:
                ev.add(gold, pred)
    if ev is not None:
        ev.report()
    return 0


@dataclass
class TagOptions:
    """The options of one tagging run (:func:`run_tag`): ``crfkit tag``'s, named as its long
    options.

    ``file``: a path (``.gz`` ok), ``-`` (standard input) or a named binary stream (a request's
    body); ``output``: a path (written atomically, see :class:`Output`), None or ``-`` (standard
    output) or a text stream; ``model``: the model's path, named in messages (the model itself is
    given to :func:`run_tag` loaded)."""

    file: Any = "-"
    model: str | None = None
    output: Any = None
    format: str = "columns"
    reference: bool = False
    marginals: bool = False
    all_marginals: bool = False
    probability: bool = False
    labels: bool | None = None
    eval: bool = False
    raw: bool = False
    threads: int | None = None
    batch_tokens: int = 10_000
    encoding: str | None = None
    nbest: int = 0
    constraints: str | None = None
    forbid: list[str] | None = None
    allowed_column: int | None = None
    force: bool = False
    decode: str = "viterbi"

    @classmethod
    def of(cls, ns) -> TagOptions:
        """The options an ``argparse`` namespace (``crfkit tag``'s) holds; the fields it lacks keep
        their defaults."""
        return cls(**{f.name: getattr(ns, f.name) for f in fields(cls) if hasattr(ns, f.name)})


def run_tag(args: TagOptions, model, *, engine: str = "auto") -> int:
    """``crfkit tag`` with ``model`` already loaded, its options ``args`` (a :class:`TagOptions`;
    ``crfkit serve`` runs every request through it: ``args.file`` may then be a named ``BytesIO``
    and ``args.output`` a text stream).  An empty input gives an empty output and exit status 0 (as
    crf_test), with a warning on standard error.  ``engine``: how plain Viterbi tagging of column
    files decodes: ``"numpy"`` loads no numba kernel, ``"adaptive"`` (a one-shot ``crfkit tag``
    process, where loading the kernels costs more than decoding a short file) numpy for the first
    :data:`crfkit.pipeline.NUMPY_FIRST_TOKENS` tokens and the kernels after, ``"auto"`` the model's
    choice (a server, which keeps its kernels warm); see :meth:`crfkit.model.CRFModel.decode`."""
    try:
        return _cmd_tag(args, model, engine)
    except DataError as e:
        if "empty input" not in str(e):
            raise
        print_stderr(f"crfkit tag: warning: {e}; nothing to tag")
        f, owned = open_out(args.output)
        if owned:
            f.close()
        return 0


def _cmd_tag(args, model, engine: str = "auto") -> int:
    has_templates = bool(isinstance(model.meta, dict) and model.meta.get("templates"))
    fmt = args.format
    if fmt == "auto" and not has_templates:
        fmt = "crfsuite"  # a model without templates can only tag attribute files
    fmt, src = detect_format(fmt, recode(args.file, getattr(args, "encoding", None)))
    try:
        if wants_decoding(args):  # n-best, constraints, forced labels, posterior decoding
            return run_decoding(args, model, fmt, src)
        if fmt == "crfsuite":
            return _tag_crfsuite(args, model, src)
        return _tag_columns(args, model, src, has_templates, engine)
    finally:
        close_source(src)


def _tag_columns(args, model, src, has_templates: bool, engine: str = "auto") -> int:
    """``crfkit tag`` on a column file: read, tag and write batch by batch
    (``--batch-tokens``), so memory stays bounded whatever the input's size;
    the output is the same as tagging the whole input at once."""
    from ..pipeline import tag_column_batches

    if args.reference:
        raise CrfkitError(
            "--reference is for --format crfsuite (column output already shows the gold label)"
        )
    if not has_templates:
        raise CrfkitError(
            f"the model {args.model} has no feature templates (it was trained from a CRFsuite "
            "attribute file or from attribute lists), so it cannot tag column files; tag "
            "CRFsuite attribute files with --format crfsuite"
        )
    parts = tag_column_batches(
        model,
        src,
        has_labels=args.labels,
        marginals=args.marginals or args.probability,
        all_marginals=args.all_marginals,
        threads=args.threads,
        batch_tokens=args.batch_tokens,
        engine=engine,
    )
    first = next(parts)  # read and tag the first batch before any output is opened
    if args.eval and not first.has_labels:
        raise DataError(
            "--eval needs gold labels, but the input has none (it has as many columns as the "
            "training data's observation columns; pass --labels if the last column is a label)",
            source_name(src),
        )
    ev = EvalReport(model, getattr(args, "raw", False)) if args.eval else None
    plain = not (args.probability or args.marginals or args.all_marginals) and _plain_labels(model)
    with Output(args.output) as f:
        res = first
        while res is not None:
            if plain:  # the whole batch as one string (what write_columns writes, line for line)
                f.write(_plain_block(res))
            else:
                _write_batch(args, res, f)
            f.flush()
            if ev is not None:
                ev.add(res.gold, res.labels)
            res = first = None
            res = next(parts, None)
    if ev is not None:
        ev.report()
    return 0


def _write_batch(args, res, f) -> None:
    """A batch of tagging output with ``--probability``, ``--marginals`` or ``--all-marginals``
    (or labels that need :func:`~crfkit.io.columns.write_columns`'s check)."""
    from ..io.columns import write_columns

    for i, (s, pred) in enumerate(zip(res.sentences, res.labels)):
        if args.probability:
            f.write(f"# {res.probabilities[i]:.6f}\n")
        if args.marginals:
            extra = [f"{lab}/{p:.6f}" for lab, p in zip(pred, res.marginals[i])]
        else:
            extra = pred
        if args.all_marginals:
            names = res.label_names
            extra = [
                [e] + [f"{n}/{p:.6f}" for n, p in zip(names, row)]
                for e, row in zip(extra, res.all_marginals[i].tolist())
            ]
        write_columns([s], f, extra=[extra], sep="\t")


def _plain_labels(model) -> bool:
    """Whether every label of ``model`` writes as one tab-separated field as it is (what
    :func:`crfkit.io.columns.write_columns` checks per line): then :func:`_plain_block` may write
    a batch without that check (the observation and gold fields come from ``str.split()``: no
    whitespace, never empty)."""
    return all(isinstance(lab, str) and not any(c in lab for c in "\t\n\r") for lab in model.labels)


def _plain_block(res) -> str:
    """A batch of plain tagging output: per token its columns (then its gold label), then the
    predicted label, tab-separated; a blank line after each sentence."""
    fmt = "{}\t{}".format
    tab = "\t".join
    parts = []
    for s, pred in zip(res.sentences, res.labels):
        rows = map(tab, s.columns)
        if res.has_labels:
            rows = map(fmt, rows, s.labels)
        parts.append("\n".join(map(fmt, rows, pred)))
        parts.append("\n\n")
    return "".join(parts)


# --------------------------------------------------------------------------- decoding
