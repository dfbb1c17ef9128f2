"""Tagged text out of a model: the engine behind ``crfkit tag`` and ``crfkit serve``.

:func:`run_tag` tags a column file or a CRFsuite attribute file with a loaded model and writes what
``crfkit tag`` writes (``crf_test`` / ``crfsuite tag`` layouts, marginals, probabilities, the
``--eval`` report), reading and writing batch by batch; its options are a :class:`TagOptions`.  The
command line (:mod:`crfkit.cli.tag`) fills them from its arguments, the HTTP service
(:mod:`crfkit.serving`) from a request's query.  With n-best lists, constraints, forced labels or
posterior decoding (:func:`wants_decoding`) the work goes to :func:`run_decoding`.

Column files: the output is ``crf_test``'s.  With ``-n K`` every sentence is written K times (fewer
when it has fewer label sequences), each preceded by ``# k p`` (rank from 0, probability of that
sequence) and followed by a blank line, as ``crf_test -n K``.  ``--allowed-column N`` names an input
column (1-based) holding each token's allowed labels (``B-NP|I-NP``; ``*``, ``?``, ``_`` or an empty
cell: any label); the column is not an observation (the templates do not see it) but is written
back.  ``--force`` reads the input's last column so (``wapiti label --force``): a token with a label
keeps it, ``?`` leaves it free, the others are decoded consistently with them.

CRFsuite attribute files: one label per line, a blank line after each sequence; with ``-n K`` each
candidate is preceded by ``@nbest<TAB>k<TAB>p`` (and followed by a blank line).  ``--force`` reads
the first field (the label) as above.

Also here, because the tagging needs them and the CLI's other commands share them (through
:mod:`crfkit.cli.common`): input format detection (:func:`detect_format`), re-encoding to UTF-8
(:func:`recode`), the atomic output (:class:`Output`, :func:`open_out`) and the ``--eval`` report
(:class:`EvalReport`, :func:`report_eval`).  Nothing here imports numpy at import time.
"""

from __future__ import annotations

import gzip
import os
import sys
from dataclasses import dataclass, fields
from typing import Any, TextIO

from .errors import CrfkitError, DataError

#: the exit status of an error crfkit reports (``crfkit: error: ...``): a refused input or option
EXIT_ERROR = 2


def print_error(msg: str) -> None:
    print(f"crfkit: error: {msg}", file=sys.stderr, flush=True)


def print_stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


FORMATS = ("columns", "crfsuite", "auto")


def detect_format(fmt: str, path: str):
    """(``"columns"`` or ``"crfsuite"``, the source to read).

    ``auto`` opens the input once (:func:`crfkit.io.columns.open_source`) and
    applies :func:`crfkit.io.crfsuite.looks_like_crfsuite` to its first lines,
    which the reader then gets again from the same stream: a pipe, a FIFO,
    ``/dev/fd/N`` or standard input is never reopened nor read twice, and
    never read whole into memory. The caller closes the returned source.
    """
    if not isinstance(path, str):  # already read and re-encoded (--encoding): bytes in memory
        if fmt != "auto":
            return fmt, path
        from .io.crfsuite import DETECT_LINES, looks_like_crfsuite

        head = (
            path.getvalue()[: 1 << 20]
            .decode("utf-8", errors="replace")
            .splitlines()[: 4 * DETECT_LINES]
        )
        return ("crfsuite" if looks_like_crfsuite(head) else "columns"), path
    if fmt != "auto":
        return fmt, path
    from .io.columns import open_source
    from .io.crfsuite import DETECT_LINES, looks_like_crfsuite

    src = open_source(path)
    head = src.sniff(4 * DETECT_LINES)
    return ("crfsuite" if looks_like_crfsuite(head) else "columns"), src


def close_source(src) -> None:
    close = getattr(src, "close", None)
    if close is not None and not isinstance(src, str):
        close()


def recode(path, encoding: str | None):
    """``path`` itself when ``encoding`` is None or UTF-8; else the file read and decoded from
    ``encoding`` (a byte-order mark dropped) into UTF-8 bytes in memory, named as the file."""
    if (
        path is None
        or not encoding
        or encoding.lower().replace("-", "").replace("_", "") in ("utf8", "utf8sig")
    ):
        return path
    import codecs

    try:
        codecs.lookup(encoding)
    except LookupError:
        raise CrfkitError(f"--encoding {encoding}: unknown encoding") from None
    if not isinstance(path, str):  # already in memory (crfkit serve: a request's body)
        raw, name = path.getvalue(), getattr(path, "name", "<input>")
        return _recoded(raw, encoding, name)
    name = "<stdin>" if path == "-" else path
    try:
        if path == "-":
            raw = sys.stdin.buffer.read()
        elif path.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                raw = f.read()
        else:
            with open(path, "rb") as f:
                raw = f.read()
    except OSError as e:
        raise DataError(f"cannot read: {e.strerror or e}", name) from None
    return _recoded(raw, encoding, name)


def _recoded(raw: bytes, encoding: str, name: str):
    import io

    try:
        text = raw.decode(encoding)
    except UnicodeDecodeError as e:
        raise DataError(f"not valid {encoding} (byte {e.start + 1} of the file)", name) from None
    src = io.BytesIO(text.lstrip("\ufeff").encode("utf-8"))
    src.name = name
    return src


def source_name(src) -> str:
    if isinstance(src, str):
        return "<stdin>" if src == "-" else src
    return str(getattr(src, "name", "<stream>"))


def read_attribute_file(src, progress=None):
    """(X, Y, sequences) of a CRFsuite attribute file; ``progress``: a bar
    factory ``progress(desc, total)`` (``crfkit train``'s progress bars) or ``None``."""
    from .io.crfsuite import read_crfsuite, read_crfsuite_list

    name = source_name(src)
    if progress is None:
        seqs = read_crfsuite_list(src, name=name)
    else:
        seqs = []
        with progress(f"reading {name}", None) as bar:
            for s in read_crfsuite(src, name=name):
                seqs.append(s)
                bar.update(1)
    return [s.attributes for s in seqs], [s.labels for s in seqs], seqs


def open_out(path) -> tuple[TextIO, bool]:
    """(the stream ``crfkit tag`` writes to, whether the caller closes it): standard output for
    None or ``-``, a stream given instead of a path as it is (``crfkit serve``), else the file."""
    if path is None or path == "-":
        return sys.stdout, False
    if hasattr(path, "write"):
        return path, False
    try:
        if path.endswith(".gz"):
            return gzip.open(path, "wt", encoding="utf-8", newline="\n"), True
        return open(path, "w", encoding="utf-8", newline="\n"), True
    except OSError as e:
        raise DataError(f"cannot open for writing: {e.strerror or e}", path) from None


class Output:
    """Where ``crfkit tag`` writes: standard output, or ``-o PATH`` written to a
    temporary file beside it and renamed onto it at the end, so that an error
    in the input met half-way (tagging streams) leaves no partial output and an
    existing file untouched. A symbolic link is written through (its target is
    replaced, as ``open`` would write it); an existing file keeps its
    permissions. A path that is not a regular file (a FIFO, ``/dev/stdout``) is
    written directly."""

    def __init__(self, path: str | None):
        self.path = path
        self.tmp = None
        self.raw = None
        if path is None or path == "-":
            self.f = sys.stdout
            return
        if hasattr(path, "write"):  # a stream (crfkit serve): written as it is, not closed
            self.f = path
            return
        if os.path.exists(path) and not os.path.isfile(path):
            self.f, _ = open_out(path)
            return
        import tempfile

        target = os.path.realpath(path)  # through a symbolic link, to what it names
        self.target = target
        d = os.path.dirname(target)
        base = os.path.basename(path)
        try:
            mode = os.stat(target).st_mode & 0o7777
        except OSError:
            mode = 0o666 & ~_umask()  # as an ordinary open would create it
        try:
            fd, self.tmp = tempfile.mkstemp(
                prefix=f".{os.path.basename(target)}.", suffix=".part", dir=d
            )
            os.close(fd)
            os.chmod(self.tmp, mode)
        except OSError as e:
            raise DataError(f"cannot open for writing: {e.strerror or e}", path) from None
        try:
            if path.endswith(".gz"):  # the gzip header names the file, not the temporary one
                import io

                self.raw = open(self.tmp, "wb")
                gz = gzip.GzipFile(filename=base, mode="wb", fileobj=self.raw)
                self.f = io.TextIOWrapper(gz, encoding="utf-8", newline="\n")
            else:
                self.f = open(self.tmp, "w", encoding="utf-8", newline="\n")
        except OSError as e:
            self._drop()
            raise DataError(f"cannot open for writing: {e.strerror or e}", path) from None

    def _drop(self) -> None:
        if self.tmp is not None:
            try:
                os.unlink(self.tmp)
            except OSError:
                pass
            self.tmp = None

    def __enter__(self):
        return self.f

    def __exit__(self, exc_type, exc, tb):
        if self.f is sys.stdout or self.f is self.path:
            if exc_type is None:
                self.f.flush()
            return False
        try:
            self.f.close()
            if self.raw is not None:
                self.raw.close()
        except BaseException:
            self._drop()
            raise
        if exc_type is not None:
            self._drop()
        elif self.tmp is not None:
            try:
                os.replace(self.tmp, self.target)
            except OSError as e:
                self._drop()
                raise DataError(f"cannot write: {e.strerror or e}", self.path) from None
            self.tmp = None
        return False


def _umask() -> int:
    m = os.umask(0o022)
    os.umask(m)
    return m


class EvalReport:
    """What ``crfkit tag --eval`` reports, accumulated batch by batch: the
    conlleval counts (not the sentences), the token accuracy, the labels seen and
    the gold labels the model never saw. ``raw``: every tag but O is a chunk of
    its own (conlleval -r)."""

    def __init__(self, model, raw: bool = False):
        from collections import Counter

        from .metrics import ConllCounter

        self.known = set(model.labels)
        self.raw = bool(raw)
        self.unseen: Counter = Counter()
        self.gold_labels: set = set()
        self.counter = ConllCounter()
        self.n_tokens = 0
        self.n_correct = 0
        self.n_sequences = 0

    def add(self, gold, pred) -> None:
        feed = self.counter.feed
        known = self.known
        raw = self.raw
        for i, (g, p) in enumerate(zip(gold, pred)):
            if len(g) != len(p):  # pragma: no cover (the tagger gives one label per token)
                raise DataError(
                    f"sentence {i}: gold has {len(g)} tokens but the prediction has {len(p)}"
                )
            self.n_sequences += 1
            for gt, pt in zip(g, p):
                if raw:
                    feed(gt if gt == "O" else f"B-{gt}", pt if pt == "O" else f"B-{pt}")
                else:
                    feed(gt, pt)
                self.n_tokens += 1
                self.n_correct += gt == pt
                self.gold_labels.add(gt)
                if gt not in known:
                    self.unseen[gt] += 1
            self.counter.boundary()

    def report(self) -> None:
        """On stderr: the conlleval report when the labels are chunk tags (or ``raw``), else token
        accuracy; and a line about gold labels the model never saw (their tokens were tagged
        anyway; they can only count as errors)."""
        from .metrics import label_scheme

        unseen = self.unseen
        if not self.raw and label_scheme(sorted(self.known | self.gold_labels)) is None:
            n = self.n_tokens
            acc = 100.0 * self.n_correct / n if n else 0.0
            sys.stderr.write(
                f"accuracy: {acc:.2f}% of {n} tokens ({self.n_sequences} sequences); the labels are "
                "not chunk tags, so no chunk F1 (--raw scores every tag as a chunk, as conlleval -r)\n"
            )
        else:
            sys.stderr.write(self.counter.report().format())
        if unseen:
            listed = ", ".join(f"{lab} ({n})" for lab, n in unseen.most_common(10))
            more = f" and {len(unseen) - 10} more" if len(unseen) > 10 else ""
            sys.stderr.write(
                f"gold labels the model never saw in training, {sum(unseen.values())} tokens: "
                f"{listed}{more}\n"
            )
        sys.stderr.flush()


def crfsuite_sequence(args, names, ys, gold, prob, marg, full) -> str:
    """One tagged sequence in ``crfkit tag --format crfsuite``'s layout (see :func:`_tag_crfsuite`):
    ``prob`` the sequence's probability, ``marg[t]`` the predicted label's marginal, ``full[t]`` the
    marginals of every label (in ``names``' order); each None when not asked for."""
    buf = []
    if prob is not None:
        buf.append(f"@probability\t{float(prob):.6f}")
    for t, lab in enumerate(ys):
        line = f"{gold[t]}\t{lab}" if args.reference else lab
        if marg is not None:
            line += f":{marg[t]:.6f}"
        if full is not None:
            line += "\t" + "\t".join(f"{n}:{p:.6f}" for n, p in zip(names, full[t].tolist()))
        buf.append(line)
    buf.append("")
    return "\n".join(buf) + "\n"


def _tag_crfsuite(args, model, src) -> int:
    """``crfkit tag --format crfsuite``: one predicted label per line, a blank line
    after each sequence (as ``crfsuite tag``); ``--reference`` puts the file's
    label and a TAB before it, ``--marginals`` appends ``:p`` (the label's
    marginal), ``--probability`` writes ``@probability<TAB>p`` before each
    sequence (CRFsuite's ``-r``, ``-i``, ``-p``); ``--all-marginals`` appends
    ``<TAB>label:p`` for every label of the model, in the model's order.
    Sequences are read, tagged and written batch by batch (``--batch-tokens``)."""
    from .io.crfsuite import read_crfsuite
    from .pipeline import batches, split_marginals

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


def report_eval(model, gold, pred, raw: bool = False) -> None:
    """The ``--eval`` report of whole lists of gold and predicted label sequences (see
    :class:`EvalReport`)."""
    ev = EvalReport(model, raw)
    ev.add(gold, pred)
    ev.report()


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


def run_tag(args: TagOptions, model) -> int:
    """``crfkit tag`` with ``model`` already loaded, its options ``args`` (a :class:`TagOptions`;
    ``crfkit serve`` runs every request through it: ``args.file`` may then be a named ``BytesIO``
    and ``args.output`` a text stream).  An empty input gives an empty output and exit status 0 (as
    crf_test), with a warning on standard error."""
    try:
        return _cmd_tag(args, model)
    except DataError as e:
        if "empty input" not in str(e):
            raise
        print_stderr(f"crfkit tag: warning: {e}; nothing to tag")
        f, owned = open_out(args.output)
        if owned:
            f.close()
        return 0


def _cmd_tag(args, model) -> int:
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
        return _tag_columns(args, model, src, has_templates)
    finally:
        close_source(src)


def _tag_columns(args, model, src, has_templates: bool) -> int:
    """``crfkit tag`` on a column file: read, tag and write batch by batch
    (``--batch-tokens``), so memory stays bounded whatever the input's size;
    the output is the same as tagging the whole input at once."""
    from .io.columns import write_columns
    from .pipeline import tag_column_batches

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
    )
    first = next(parts)  # read and tag the first batch before any output is opened
    if args.eval and not first.has_labels:
        raise DataError(
            "--eval needs gold labels, but the input has none (it has as many columns as the "
            "training data's observation columns; pass --labels if the last column is a label)",
            source_name(src),
        )
    ev = EvalReport(model, getattr(args, "raw", False)) if args.eval else None
    with Output(args.output) as f:
        res = first
        while res is not None:
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
            f.flush()
            if ev is not None:
                ev.add(res.gold, res.labels)
            res = first = None
            res = next(parts, None)
    if ev is not None:
        ev.report()
    return 0


# --------------------------------------------------------------------------- decoding

FREE = ("*", "?", "_", "")

#: :data:`crfkit.decode.SCHEMES`, repeated here so that building ``crfkit tag``'s parser imports no
#: numpy (``crfkit tag --server`` runs without it); a test keeps the two equal
SCHEMES = ("bio", "iob2", "iobes", "bilou")


def wants_decoding(args) -> bool:
    """Whether ``crfkit tag``'s arguments ask for more than the plain Viterbi path."""
    return bool(
        getattr(args, "nbest", 0)
        or getattr(args, "constraints", None) not in (None, "none")
        or getattr(args, "forbid", None)
        or getattr(args, "allowed_column", None) is not None
        or getattr(args, "force", False)
        or getattr(args, "decode", "viterbi") != "viterbi"
    )


def parse_pair(text: str) -> tuple[str, str]:
    """``A,B`` or ``A B`` -> (A, B): a forbidden (previous label, label) pair."""
    parts = text.replace(",", " ").split()
    if len(parts) != 2:
        raise CrfkitError(f"--forbid {text!r}: expected two labels, PREVIOUS,LABEL")
    return parts[0], parts[1]


def label_cell(cell: str, sep: str = "|"):
    """An allowed-labels cell -> None (any label), a label, or a set of labels."""
    if cell in FREE:
        return None
    parts = cell.split(sep)
    return parts[0] if len(parts) == 1 else set(parts)


def _check_labels(model, allowed, name, lines):
    index = model.space.label_index
    for s, seq in enumerate(allowed):
        for t, cell in enumerate(seq):
            if cell is None:
                continue
            for lab in [cell] if isinstance(cell, str) else cell:
                if lab not in index:
                    raise DataError(
                        f"{lab!r} is not a label of the model (allowed labels: any of "
                        f"{' '.join(model.labels[:20])}{' ...' if len(model.labels) > 20 else ''}; "
                        f"{' '.join(repr(f) for f in FREE[:3])} for any)",
                        name,
                        lines[s] + t if lines else None,
                    )


def run_decoding(args, model, fmt: str, src) -> int:
    """``crfkit tag`` with the decoding options (see the module docstring)."""
    from .decode import make_constraints

    if args.nbest and args.decode == "posterior":
        raise CrfkitError(
            "-n (n-best) lists the most probable sequences; it does not combine with "
            "--decode posterior"
        )
    forbid = [parse_pair(x) for x in (args.forbid or [])]
    cons = make_constraints(model.labels, args.constraints, forbid)
    if fmt == "crfsuite":
        return _run_crfsuite(args, model, src, cons)
    if args.reference:
        raise CrfkitError(
            "--reference is for --format crfsuite (column output already shows the gold label)"
        )
    res = _read(args, model, src)
    sentences, X, B, dense, gold, allowed, name = res
    kw = dict(threads=args.threads, dense=dense, B=B, allowed=allowed, constraints=cons)
    f, owned = open_out(args.output)
    try:
        if args.nbest:
            pred = _write_nbest_columns(f, model, sentences, X, args, kw, res)
        else:
            pred = _write_columns(f, model, sentences, X, args, kw, res)
        f.flush()
    finally:
        if owned:
            f.close()
    if args.eval:
        if gold is None:
            raise DataError("--eval needs gold labels, but the input has none", name)
        report_eval(model, gold, pred, getattr(args, "raw", False))
    return 0


def _read(args, model, src):
    """(sentences to write back, X, B, dense, gold labels or None, allowed or None, name)."""
    from .io.columns import Sentence, read_columns_list
    from .pipeline import attributes_of, bigram_attributes_of, dense_of, name_of, tagger_from_model

    templates, pad = tagger_from_model(model)
    name = name_of(src)
    sentences = read_columns_list(src, has_labels=False, name=name)
    if not sentences:
        return [], [], None, None, None, None, name
    ncols = len(sentences[0].columns[0])
    trained = model.meta.get("columns")
    rows = [s.columns for s in sentences]
    allowed = None
    obs_rows = rows
    if args.allowed_column is not None:
        c = args.allowed_column - 1
        if c >= ncols:
            raise DataError(
                f"--allowed-column {args.allowed_column}: the input has {ncols} columns",
                name,
                sentences[0].line,
            )
        allowed = [[label_cell(tok[c]) for tok in s] for s in rows]
        obs_rows = [[tok[:c] + tok[c + 1 :] for tok in s] for s in rows]
    n = len(obs_rows[0][0])
    gold = None
    # the rows keep their last column (label or forced label) until the string path needs them
    # without: the templates read only the first n columns (checked below)
    strip = False
    if args.force:
        if args.allowed_column is not None:
            raise CrfkitError(
                "--force reads the allowed labels from the last column; it does not combine "
                "with --allowed-column"
            )
        allowed = [[label_cell(tok[-1]) for tok in s] for s in obs_rows]
        strip = True
        n -= 1
    else:
        has_labels = args.labels
        if has_labels is None:
            has_labels = trained is not None and n == trained + 1
        if has_labels:
            gold = [[tok[-1] for tok in s] for s in obs_rows]
            strip = True
            n -= 1
    if trained is not None and n != trained:
        raise DataError(
            f"{n} observation columns (after the label and allowed-label columns), but the model "
            f"was trained on {trained}",
            name,
            sentences[0].line,
        )
    if allowed is not None:
        _check_labels(model, allowed, name, [s.line for s in sentences])
    templates.check_columns(n, name, sentences[0].line)
    corpus = model.encode_rows(obs_rows)  # straight to attribute ids, when the model allows it
    if corpus is not None:
        return sentences, corpus, None, None, gold, allowed, name
    if strip:
        obs_rows = [[tok[:-1] for tok in s] for s in obs_rows]
    obs = [Sentence(o, None, s.line) for o, s in zip(obs_rows, sentences)]
    X = attributes_of(obs, templates, pad=pad, name=name)
    B = bigram_attributes_of(obs, templates, pad=pad)
    dcols = model.meta.get("dense_columns")
    dense = dense_of(obs, [c - 1 for c in dcols], name=name) if dcols else None
    return sentences, X, B, dense, gold, allowed, name


def _token_marginals(model, labels_seqs, marg, ptr):
    index = model.space.label_index
    out = []
    for s, ys in enumerate(labels_seqs):
        m = marg[ptr[s] : ptr[s + 1]]
        out.append([float(m[t, index[y]]) for t, y in enumerate(ys)])
    return out


def _write_columns(f, model, sentences, X, args, kw, res):
    from .io.columns import write_columns

    if not X:
        return []
    need_p = args.marginals or args.probability or args.all_marginals
    method = args.decode
    if need_p:
        pred, probs, marg, corpus = model.tag_with_probability(X, method=method, **kw)
        ptr = corpus.seq_ptr.tolist()
        tokm = _token_marginals(model, pred, marg, ptr)
    else:
        pred = model.tag(X, method=method, **kw)
    names = list(model.labels)
    for i, (s, ys) in enumerate(zip(sentences, pred)):
        if args.probability:
            f.write(f"# {probs[i]:.6f}\n")
        extra = [f"{lab}/{p:.6f}" for lab, p in zip(ys, tokm[i])] if args.marginals else list(ys)
        if args.all_marginals:
            rows = marg[ptr[i] : ptr[i + 1]].tolist()
            extra = [
                [e] + [f"{n}/{p:.6f}" for n, p in zip(names, row)] for e, row in zip(extra, rows)
            ]
        write_columns([s.columns], f, extra=[extra], sep="\t")
    return pred


def _write_nbest_columns(f, model, sentences, X, args, kw, res):
    from operator import add

    from .io.columns import write_columns

    if not X:
        return []
    lists = model.nbest(X, args.nbest, **kw)
    marg = None
    if args.marginals or args.all_marginals:
        corpus = model.encode(X, dense=kw["dense"], B=kw["B"])
        marg, _ = model.marginals(
            corpus, kw["threads"], allowed=kw["allowed"], constraints=kw["constraints"]
        )
        ptr = corpus.seq_ptr.tolist()
    names = list(model.labels)
    index = model.space.label_index
    for i, (s, nb) in enumerate(zip(sentences, lists)):
        if marg is None:
            # the fields were read as whitespace-separated columns: they join back as they are, so
            # each sentence's rows are formed once and each candidate only appends its labels
            prefix = ["\t".join(c) + "\t" for c in s.columns]
            buf = []
            for k, (ys, p) in enumerate(nb):
                buf.append(f"# {k} {p:.6f}\n")
                buf.append("\n".join(map(add, prefix, ys)))
                buf.append("\n\n" if ys else "\n")
            f.write("".join(buf))
            continue
        for k, (ys, p) in enumerate(nb):
            f.write(f"# {k} {p:.6f}\n")
            extra = list(ys)
            m = marg[ptr[i] : ptr[i + 1]]
            if args.marginals:
                extra = [f"{y}/{m[t, index[y]]:.6f}" for t, y in enumerate(ys)]
            if args.all_marginals:
                extra = [
                    [e] + [f"{n}/{q:.6f}" for n, q in zip(names, row)]
                    for e, row in zip(extra, m.tolist())
                ]
            write_columns([s.columns], f, extra=[extra], sep="\t")
    return [nb.labels[0] if len(nb) else [] for nb in lists]


def _run_crfsuite(args, model, src, cons) -> int:
    if args.allowed_column is not None:
        raise CrfkitError(
            "--allowed-column is for column files; with --format crfsuite use --force (the "
            "first field of each item as its allowed labels)"
        )
    X, gold, seqs = read_attribute_file(src)
    allowed = None
    if args.force:
        allowed = [[label_cell(y) for y in ys] for ys in gold]
        _check_labels(model, allowed, getattr(src, "name", src), [s.line for s in seqs])
    kw = dict(threads=args.threads, allowed=allowed, constraints=cons)
    f, owned = open_out(args.output)
    try:
        if args.nbest:
            lists = model.nbest(X, args.nbest, **kw) if X else []
            for i, nb in enumerate(lists):
                buf = []
                for k, (ys, p) in enumerate(nb):
                    buf.append(f"@nbest\t{k}\t{p:.6f}")
                    buf += [f"{gold[i][t]}\t{y}" if args.reference else y for t, y in enumerate(ys)]
                    buf.append("")
                f.write("\n".join(buf) + "\n")
            pred = [nb.labels[0] if len(nb) else [] for nb in lists]
        else:
            if args.marginals or args.probability or args.all_marginals:
                pred, probs, marg, corpus = model.tag_with_probability(X, method=args.decode, **kw)
                ptr = corpus.seq_ptr.tolist()
                tokm = _token_marginals(model, pred, marg, ptr)
            else:
                pred = model.tag(X, method=args.decode, **kw) if X else []
            names = list(model.labels)
            for i, ys in enumerate(pred):
                f.write(
                    crfsuite_sequence(
                        args,
                        names,
                        ys,
                        gold[i],
                        probs[i] if args.probability else None,
                        tokm[i] if args.marginals else None,
                        marg[ptr[i] : ptr[i] + len(ys)] if args.all_marginals else None,
                    )
                )
        f.flush()
    finally:
        if owned:
            f.close()
    if args.eval:
        report_eval(model, gold, pred, getattr(args, "raw", False))
    return 0
