"""``crfkit tag`` with n-best lists, transition constraints, allowed labels per token, forced labels
or posterior decoding (:func:`run_decoding`): read, decoded and written batch by batch
(``--batch-tokens``), as plain tagging, so memory stays bounded whatever the input's size, and
written through :class:`~crfkit.tagging.files.Output` (``-o FILE`` is replaced only when the run
succeeds)."""

from __future__ import annotations

from ..errors import CrfkitError, DataError
from .files import EvalReport, Output, crfsuite_sequence, source_name

#: the most sequences ``crfkit tag -n`` lists per sentence (:data:`crfkit.decode.MAX_NBEST`,
#: repeated here so that building the parser imports no numpy; a test keeps the two equal)
MAX_NBEST = 1000

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
    from ..decode import make_constraints
    from ..io.columns import read_columns
    from ..pipeline import batches

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
    name = source_name(src)
    parts = batches(read_columns(src, has_labels=False, name=name), args.batch_tokens)
    first = next(parts)  # read the first batch before any output is opened
    res = _read(args, model, first, name)
    if args.eval and res[4] is None:
        raise DataError("--eval needs gold labels, but the input has none", name)
    ev = EvalReport(model, getattr(args, "raw", False)) if args.eval else None
    with Output(args.output) as f:
        while res is not None:
            sentences, X, B, dense, gold, allowed, _ = res
            kw = dict(threads=args.threads, dense=dense, B=B, allowed=allowed, constraints=cons)
            if args.nbest:
                pred = _write_nbest_columns(f, model, sentences, X, args, kw, res)
            else:
                pred = _write_columns(f, model, sentences, X, args, kw, res)
            f.flush()
            if ev is not None:
                ev.add(gold, pred)
            res = sentences = X = B = dense = gold = allowed = pred = None
            batch = next(parts, None)
            res = None if batch is None else _read(args, model, batch, name)
    if ev is not None:
        ev.report()
    return 0


def _read(args, model, sentences, name):
    """Of one batch of sentences: (sentences to write back, X, B, dense, gold labels or None,
    allowed or None, name)."""
    from ..io.columns import Sentence
    from ..pipeline import attributes_of, bigram_attributes_of, dense_of, tagger_from_model

    templates, pad = tagger_from_model(model)
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
    from ..io.columns import write_columns

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

    from ..io.columns import write_columns

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
    from ..io.crfsuite import read_crfsuite
    from ..pipeline import batches

    if args.allowed_column is not None:
        raise CrfkitError(
            "--allowed-column is for column files; with --format crfsuite use --force (the "
            "first field of each item as its allowed labels)"
        )
    name = source_name(src)
    ev = EvalReport(model, getattr(args, "raw", False)) if args.eval else None
    parts = batches(read_crfsuite(src, name=name), args.batch_tokens)
    seqs = next(parts)  # read the first batch before any output is opened
    with Output(args.output) as f:
        while seqs is not None:
            X = [s.attributes for s in seqs]
            gold = [s.labels for s in seqs]
            pred = _crfsuite_batch(f, args, model, cons, X, gold, seqs, name)
            f.flush()
            if ev is not None:
                ev.add(gold, pred)
            seqs = X = gold = pred = None
            seqs = next(parts, None)
    if ev is not None:
        ev.report()
    return 0


def _crfsuite_batch(f, args, model, cons, X, gold, seqs, name):
    """Decode and write one batch of CRFsuite sequences; returns the predicted labels."""
    allowed = None
    if args.force:
        allowed = [[label_cell(y) for y in ys] for ys in gold]
        _check_labels(model, allowed, name, [s.line for s in seqs])
    kw = dict(threads=args.threads, allowed=allowed, constraints=cons)
    if args.nbest:
        lists = model.nbest(X, args.nbest, **kw) if X else []
        for i, nb in enumerate(lists):
            buf = []
            for k, (ys, p) in enumerate(nb):
                buf.append(f"@nbest\t{k}\t{p:.6f}")
                buf += [f"{gold[i][t]}\t{y}" if args.reference else y for t, y in enumerate(ys)]
                buf.append("")
            f.write("\n".join(buf) + "\n")
        return [nb.labels[0] if len(nb) else [] for nb in lists]
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
    return pred
