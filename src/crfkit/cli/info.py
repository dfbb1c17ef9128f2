"""``crfkit info`` (describe a model), ``crfkit dump`` (a model as text or JSON), ``crfkit prune``
(a smaller model) and ``crfkit patterns`` (the template lines of a window feature set).

``crfkit info -m MODEL`` prints the labels, the feature counts, the training metadata, the
transition weights and the strongest state features.

``crfkit dump -m MODEL`` writes, like ``crfsuite dump`` / ``wapiti dump``, every part of a model,
one feature a line, tab-separated, under a header line per section::

    # crfkit model chunker.crfkit: 22 labels, 75123 attributes, ...
    [labels]
    0<TAB>B-NP
    [transitions]               previous label, label, weight
    B-NP<TAB>I-NP<TAB>3.213546
    [state]                     attribute, label, weight
    w[0]=the<TAB>B-NP<TAB>1.234567
    [bigram]                    attribute, previous label, label, weight (label-pair x observation)
    [dense]                     dimension, label, weight

so that ``sort -t$'\\t' -k3 -g`` and ``grep`` work on it.  ``--attribute REGEX`` / ``--label REGEX``
keep the features whose attribute / label (either label of a pair) matches (``re.search``);
``--sort weight|abs|name`` orders the features of each section (descending weight, descending
|weight|, by name; default: as stored); ``--top N`` keeps the first N of each feature section
(sorted by |weight| unless ``--sort`` says otherwise); ``--section`` picks sections; ``--json``
writes one JSON object instead (``labels``, ``transitions``, ``state``, ``bigram``, ``dense``: lists
of ``{"attribute", "label", "weight"}``-style records, and ``meta``).

``crfkit prune -m MODEL -o OUT`` drops state (and label-pair x observation) features with
``|w| < --threshold`` or keeps the ``--top K`` by |w| (ties: the first stored), keeps the
transitions and the dense block, and writes the smaller model (atomically); it tags as the original
with those weights set to 0.
"""

from __future__ import annotations

import json
import os
import re
import sys

from ..errors import CrfkitError
from .common import human_bytes, nonneg_float, nonneg_int, open_out

SECTIONS = ("labels", "transitions", "state", "bigram", "dense")


def _records(model):
    """Per section: (names as a list of tuples, weights array)."""
    import numpy as np

    s = model.space
    w = model.weights
    L = s.n_labels
    labels = s.labels
    out = {}
    ii, jj = np.nonzero(s.trans_index >= 0)
    out["transitions"] = (
        [(labels[i], labels[j]) for i, j in zip(ii.tolist(), jj.tolist())],
        w[s.n_state + s.trans_index[ii, jj]] if len(ii) else np.zeros(0),
    )
    fa = s.feature_attr()
    out["state"] = (
        list(
            zip((s.attributes[a] for a in fa.tolist()), (labels[l] for l in s.feat_label.tolist()))
        ),
        w[: s.n_state],
    )
    if s.n_bigram:
        ba = s.bfeature_attr()
        out["bigram"] = (
            [
                (s.battributes[b], labels[p // L], labels[p % L])
                for b, p in zip(ba.tolist(), s.bfeat_pair.tolist())
            ],
            w[s.bigram_offset : s.dense_offset],
        )
    else:
        out["bigram"] = ([], np.zeros(0))
    W = s.dense_weights(w)
    out["dense"] = (
        [(s.dense_names[j], labels[l]) for j in range(s.n_dense) for l in range(L)],
        W.ravel(),
    )
    return out


def select(
    model,
    *,
    attribute: str | None = None,
    label: str | None = None,
    sort: str | None = None,
    top: int | None = None,
    sections=SECTIONS,
) -> dict:
    """The dump's content: {"labels": [...], section: [(names..., weight), ...]} after filtering,
    sorting and --top (see the module docstring)."""
    import numpy as np

    try:
        a_re = re.compile(attribute) if attribute else None
        l_re = re.compile(label) if label else None
    except re.error as e:
        raise CrfkitError(f"bad regular expression: {e}") from None
    out = {"labels": list(model.space.labels) if "labels" in sections else []}
    for name, (keys, w) in _records(model).items():
        if name not in sections:
            out[name] = []
            continue
        idx = np.arange(len(keys))
        if a_re is not None and name in ("state", "bigram", "dense"):
            idx = np.array([i for i in idx.tolist() if a_re.search(keys[i][0])], dtype=np.int64)
        if l_re is not None:
            first = 1 if name in ("state", "bigram", "dense") else 0
            idx = np.array(
                [i for i in idx.tolist() if any(l_re.search(x) for x in keys[i][first:])],
                dtype=np.int64,
            )
        order = sort or ("abs" if top is not None else None)
        if order == "weight":
            idx = idx[np.argsort(-w[idx], kind="stable")]
        elif order == "abs":
            idx = idx[np.argsort(-np.abs(w[idx]), kind="stable")]
        elif order == "name":
            idx = np.array(sorted(idx.tolist(), key=lambda i: keys[i]), dtype=np.int64)
        elif order is not None:
            raise CrfkitError(f"unknown sort order {order!r}: weight, abs or name")
        if top is not None:
            idx = idx[:top]
        wl = w[idx].tolist()
        out[name] = [(*keys[i], x) for i, x in zip(idx.tolist(), wl)]
    return out


_FIELDS = {
    "transitions": ("from", "to"),
    "state": ("attribute", "label"),
    "bigram": ("attribute", "from", "to"),
    "dense": ("dimension", "label"),
}
_HEADS = {
    "transitions": "previous label, label, weight",
    "state": "attribute, label, weight",
    "bigram": "attribute, previous label, label, weight",
    "dense": "dimension, label, weight",
}


def write_text(model, content: dict, f, name: str = "") -> None:
    s = model.space
    f.write(
        f"# crfkit model {name}: {s.n_labels} labels, {s.n_attributes} attributes, {s.n_state} state, "
        f"{s.n_trans} transition, {s.n_bigram} label-pair x observation, {s.n_dense * s.n_labels} dense "
        f"features; {model.n_active} non-zero weights\n"
    )
    if content["labels"]:
        f.write("[labels]\n")
        f.write("".join(f"{i}\t{lab}\n" for i, lab in enumerate(content["labels"])))
    for sec in ("transitions", "state", "bigram", "dense"):
        rows = content.get(sec)
        if not rows:
            continue
        f.write(f"[{sec}]\t# {_HEADS[sec]}\n")
        f.write("".join("\t".join(r[:-1]) + f"\t{r[-1]:.6f}\n" for r in rows))


def to_json(model, content: dict, name: str = "") -> dict:
    s = model.space
    out = {
        "model": name,
        "labels": content["labels"],
        "counts": {
            "labels": s.n_labels,
            "attributes": s.n_attributes,
            "state": s.n_state,
            "transitions": s.n_trans,
            "bigram": s.n_bigram,
            "dense": s.n_dense * s.n_labels,
            "nonzero": model.n_active,
        },
        "meta": model.meta,
    }
    for sec, fields in _FIELDS.items():
        out[sec] = [dict(zip(fields + ("weight",), r)) for r in content.get(sec, [])]
    return out


def prune(model, *, threshold: float | None = None, top: int | None = None):
    """A model with the state and label-pair x observation features dropped whose |weight| is below
    ``threshold``, or all but the ``top`` largest |weight| (ties: the first stored); transitions and
    dense weights kept.  Returns (new model, number of features dropped)."""
    import numpy as np

    from ..model import CRFModel

    if (threshold is None) == (top is None):
        raise CrfkitError("prune: give one of --threshold or --top")
    s = model.space
    w = model.weights.copy()
    cand = np.concatenate([np.arange(s.n_state), np.arange(s.bigram_offset, s.dense_offset)])
    before = int(np.count_nonzero(w[cand]))
    if threshold is not None:
        if not threshold >= 0:
            raise CrfkitError(f"--threshold must be >= 0, got {threshold}")
        drop = cand[np.abs(w[cand]) < threshold]
    else:
        if top < 0:
            raise CrfkitError(f"--top must be >= 0, got {top}")
        order = cand[np.argsort(-np.abs(w[cand]), kind="stable")]
        drop = order[top:]
    w[drop] = 0.0
    space, wp = s.prune(w)
    meta = dict(model.meta) if isinstance(model.meta, dict) else {}
    meta["pruned"] = {
        "threshold": threshold,
        "top": top,
        "dropped": before - int(np.count_nonzero(w[cand])),
    }
    return CRFModel(space, wp, meta), meta["pruned"]["dropped"]


def cmd_dump(args) -> int:
    from ..interop import load_any

    model = load_any(args.model)
    sections = tuple(args.section.split(",")) if args.section else SECTIONS
    bad = [x for x in sections if x not in SECTIONS]
    if bad:
        raise CrfkitError(f"unknown section {bad[0]!r}; sections: {', '.join(SECTIONS)}")
    content = select(
        model,
        attribute=args.attribute,
        label=args.label,
        sort=args.sort,
        top=args.top,
        sections=sections,
    )
    f, owned = open_out(args.output)
    try:
        if args.json:
            json.dump(to_json(model, content, args.model), f, ensure_ascii=False)
            f.write("\n")
        else:
            write_text(model, content, f, args.model)
        f.flush()
    finally:
        if owned:
            f.close()
    return 0


def cmd_prune(args) -> int:
    import os

    from ..interop import load_any

    model = load_any(args.model)
    new, dropped = prune(model, threshold=args.threshold, top=args.top)
    size = new.save(args.output)
    old = os.path.getsize(args.model)
    print(
        f"{args.output}: dropped {dropped} features; {new.space.n_features} features "
        f"({new.space.n_attributes} attributes) left of {model.space.n_features}; "
        f"{size} bytes (was {old})",
        file=sys.stdout,
    )
    return 0


# --------------------------------------------------------------------------- info


def _ranges(cols) -> str:
    """[3, 4, 5, 9] -> '3-5,9'."""
    parts = []
    for c in cols:
        if parts and parts[-1][1] == c - 1:
            parts[-1][1] = c
        else:
            parts.append([c, c])
    return ",".join(f"{a}-{b}" if b > a else f"{a}" for a, b in parts)


def cmd_info(args) -> int:
    from ..explain import TRAINING_META_KEYS, transition_table
    from ..interop import load_any

    model = load_any(args.model)
    s = model.space
    meta = model.meta if isinstance(model.meta, dict) else {}
    out = []
    size = os.path.getsize(args.model)
    out.append(f"model: {args.model} ({human_bytes(size)}, {size} bytes)")
    out.append(f"labels ({s.n_labels}): {' '.join(s.labels)}")
    out.append(f"attributes: {s.n_attributes}")
    out.append(f"state features: {s.n_state}")
    out.append(f"transition features: {s.n_trans}")
    if s.n_bigram:
        out.append(
            f"label-pair x observation features: {s.n_bigram} ({s.n_battributes} observations)"
        )
    if s.n_dense:
        cols = meta.get("dense_columns")
        where = f" (columns {_ranges(cols)})" if cols else ""
        out.append(
            f"dense features: {s.n_dense} dimensions{where} x {s.n_labels} labels = "
            f"{s.n_dense * s.n_labels} weights"
        )
    out.append(f"non-zero weights: {model.n_active}")
    cand = meta.get("n_candidates")
    if isinstance(cand, int) and cand > 0:
        out.append(
            f"features: {model.n_active} active of {cand} candidates in training "
            f"({100.0 * model.n_active / cand:.3g}%; the file holds the active ones only)"
        )
    if meta.get("templates"):
        from ..features.templates import Templates

        try:
            t = Templates.parse(meta["templates"], name="<model templates>")
            out.append(
                f"templates: {len(t.unigram)} unigram, {'B' if t.has_transitions else 'no B'} "
                f"(padding {'on' if meta.get('template_pad', True) else 'off'}); "
                f"observation columns: {meta.get('columns', '?')}"
            )
        except CrfkitError:
            out.append("templates: (unreadable)")
    else:
        src = (
            f"a {meta['imported_from']} model: attributes"
            if isinstance(meta.get("imported_from"), str)
            else "a CRFsuite attribute file"
            if meta.get("input_format") == "crfsuite"
            else "attribute lists"
        )
        out.append(
            f"templates: none (trained from {src}; `crfkit tag --format crfsuite` tags attribute files)"
        )
    tr = []
    for key in TRAINING_META_KEYS:
        if key in meta:
            v = meta[key]
            tr.append(f"{key}={v:.6g}" if isinstance(v, float) else f"{key}={v}")
    if "l2" in meta and "n_train" in meta:
        tr.append(f"(CRFsuite c2={meta['l2'] * meta.get('train_weight', meta['n_train']) / 2:.6g})")
    out.append("training: " + (" ".join(tr) if tr else "(no metadata)"))
    trans = model.transition_features()
    out.append("")
    out.append("transition weights (row: from, column: to; '.' = no feature):")
    out += transition_table(list(s.labels), trans)
    out.append("")
    top = model.top_features(args.top)
    out.append(f"top {len(top)} state features by |weight|:")
    for attr, lab, w in top:
        out.append(f"  {w:+10.4f}  {lab:<10} {attr}")
    sys.stdout.write("\n".join(out) + "\n")
    return 0


# --------------------------------------------------------------------------- patterns


def cmd_patterns(args) -> int:
    """`crfkit patterns nettalk:5-grm+`: write the template/pattern lines of a window feature
    set."""
    from ..features.windows import candidate_counts, parse_preset, pattern_text

    try:
        spec = parse_preset(args.preset)
    except ValueError as e:
        raise CrfkitError(str(e)) from None
    text = pattern_text(spec, args.format)
    if args.output and args.output != "-":
        from ..io.atomic import atomic_file

        with atomic_file(args.output, what="the pattern file") as f:
            f.write(text.encode("utf-8"))
    else:
        sys.stdout.write(text)
    if args.count is not None:
        from ..io.columns import read_columns_list

        sents = read_columns_list(args.count)
        words = [[tok[spec.col] for tok in snt.columns] for snt in sents]
        L = len({y for snt in sents for y in snt.labels})
        c = candidate_counts(spec, words, L)
        print(
            f"{spec.name} on {args.count}: {len(sents)} sequences, {L} labels: {c['total']} candidate features "
            f"as Wapiti counts them ({c['unigram']} label-unigram, {c['pair']} label-pair); crfkit --support all: "
            f"{c['total_crfkit']} (no label-pair features for values seen only at a first letter); distinct "
            "values per window: " + ", ".join(f"{k} {v}" for k, v in c["values"].items()),
            file=sys.stderr,
        )
    return 0


# --------------------------------------------------------------------------- parsers


def add_info_parser(sub) -> None:
    """Add ``info`` to the ``crfkit`` subparsers ``sub``."""
    i = sub.add_parser(
        "info",
        help="describe a model (crfkit's, or a CRFsuite, CRF++ or Wapiti model)",
        description="Labels, feature counts, training "
        "metadata, transition weights and the strongest state features of a model.",
    )
    i.add_argument("-m", "--model", required=True, help="model file")
    i.add_argument(
        "--top",
        type=nonneg_int,
        default=20,
        metavar="N",
        help="state features to list (default 20)",
    )
    i.set_defaults(func=cmd_info)


def add_patterns_parser(sub) -> None:
    """Add ``patterns`` to the ``crfkit`` subparsers ``sub``."""
    pt = sub.add_parser(
        "patterns",
        help="write the template lines of a window feature set (nettalk:5-grm+)",
        description="Write the Wapiti pattern file (or CRF++ template file) of a generated "
        "window feature set of Lavergne et al. (2010), 5.1.1: nettalk:N-grm (centred "
        "windows of size 1, 3, ..., N and the label bias/transitions), N-grm- (the "
        "N-window only), N-grm+ (plus the most centred even windows), N-grm++ (every "
        "letter sequence in the N-window); a :u suffix: no label-pair x observation "
        "features.",
    )
    pt.add_argument("preset", metavar="PRESET", help="e.g. nettalk:5-grm+")
    pt.add_argument(
        "--format",
        choices=("wapiti", "crfpp"),
        default="wapiti",
        help="wapiti (* and u patterns; crfkit reads it too) or crfpp (U and B lines) (default wapiti)",
    )
    pt.add_argument("-o", "--output", metavar="PATH", help="write there (default: standard output)")
    pt.add_argument(
        "--count",
        metavar="TRAIN_FILE",
        help="also print (to stderr) the candidate feature count on this labelled column file, as "
        "Wapiti and crfkit --support all count them",
    )
    pt.set_defaults(func=cmd_patterns)


def add_dump_parsers(sub) -> None:
    """Add ``dump`` and ``prune`` to the ``crfkit`` subparsers ``sub``."""
    d = sub.add_parser(
        "dump",
        help="write a model as text or JSON (labels, transitions, features)",
        description="Every part of a model, one feature a line, tab-separated, under a "
        "[section] line (labels, transitions, state, bigram, dense), like crfsuite "
        "dump / wapiti dump; or --json.",
    )
    d.add_argument("-m", "--model", required=True, help="model file")
    d.add_argument(
        "--attribute", metavar="REGEX", help="only features whose attribute matches (re.search)"
    )
    d.add_argument("--label", metavar="REGEX", help="only features with a label that matches")
    d.add_argument(
        "--sort",
        choices=("weight", "abs", "name"),
        help="order within a section: descending weight, descending |weight|, or by name "
        "(default: as stored; with --top: abs)",
    )
    d.add_argument(
        "--top", type=nonneg_int, metavar="N", help="the first N features of each section"
    )
    d.add_argument(
        "--section",
        metavar="LIST",
        help=f"comma-separated sections to write ({','.join(SECTIONS)})",
    )
    d.add_argument("--json", action="store_true", help="one JSON object instead of text")
    d.add_argument("-o", "--output", metavar="OUT", help="output file (default stdout; .gz ok)")
    d.set_defaults(func=cmd_dump)
    p = sub.add_parser(
        "prune",
        help="drop small features and write a smaller model",
        description="Drop the state (and label-pair x observation) features whose |weight| is "
        "below --threshold, or keep the --top K by |weight|; transitions and dense "
        "weights are kept. The result tags as the original with those weights at 0.",
    )
    p.add_argument("-m", "--model", required=True, help="model file")
    p.add_argument(
        "-o", "--output", required=True, metavar="OUT", help="where to write the pruned model"
    )
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--threshold", type=nonneg_float, metavar="T", help="drop features with |w| < T")
    g.add_argument("--top", type=nonneg_int, metavar="K", help="keep the K features of largest |w|")
    p.set_defaults(func=cmd_prune)
