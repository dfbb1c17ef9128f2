"""Decoding beyond the Viterbi path: n-best lists, constrained, forced and posterior decoding.

One entry point, :func:`decode`, runs the kernel :func:`crfkit.kernels.decode.decode_constrained`
over an encoded corpus; :class:`crfkit.model.CRFModel` (``nbest``, and the ``allowed`` /
``constraints`` / ``method`` keywords of ``tag``, ``tag_with_probability``, ``marginals`` and
``sequence_probability``), the estimator (``CRF.predict_nbest``) and ``crfkit tag`` (``-n``,
``--constraints``, ``--forbid``, ``--allowed-column``, ``--force``, ``--decode posterior``) call it.

Constraints restrict the label sequences a sentence may take:

* per token, the labels it may take (``allowed``: per sequence, per token ``None`` for any label, a
  label name to force it, or a collection of names);
* per label pair, whether it may follow another (:class:`Constraints`: ``Constraints.scheme(labels,
  "bio")`` forbids ``O -> I-X``, ``B-X -> I-Y`` and an ``I-X`` first; ``"iobes"`` (``"bilou"``) the
  IOBES ones; ``forbid([("A", "B")])`` any pair).

Under constraints every result is that of the model's distribution restricted to the allowed
sequences and renormalised, p(y | x, y allowed): the best allowed path, its probability among the
allowed ones, the marginals, log Z and the n-best list of the allowed paths.  A sentence that no
label sequence satisfies raises :class:`~crfkit.errors.DataError`.

n-best order: by score (probability), paths of equal score by their label ids read from the last
token to the first (so the first of an n-best list is the Viterbi path).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .errors import CrfkitError, DataError
from .metrics import label_scheme

__all__ = [
    "Constraints",
    "NBest",
    "decode",
    "allowed_mask",
    "nbest",
    "tag",
    "marginals",
    "sequence_probability",
    "label_scheme",
    "parse_label",
    "SCHEMES",
    "MAX_NBEST",
    "NBEST_MAX_BYTES",
    "invalid_sequences",
]

#: the most sequences an n-best list may hold (``crfkit tag -n``, :meth:`CRFModel.nbest`)
MAX_NBEST = 1000
#: n-best decoding refuses a batch whose K-best tables (``T x K x L`` per sentence, ``K`` ids per
#: token) would take more than this
NBEST_MAX_BYTES = 2 << 30

SCHEMES = ("bio", "iob2", "iobes", "bilou")
_PREFIXES = {"bio": "BI", "iob2": "BI", "iobes": "BIES", "bilou": "BILU"}
_LABEL_RE = re.compile(r"^([A-Z])-(.+)$")


def parse_label(label: str) -> tuple[str, str]:
    """``"B-NP"`` -> ``("B", "NP")``; ``"O"`` -> ``("O", "")``; ``"B"`` -> ``("B", "")`` (an untyped
    chunk tag); anything else -> ``("", label)``."""
    if label == "O":
        return "O", ""
    m = _LABEL_RE.match(label)
    if m:
        return m.group(1), m.group(2)
    if len(label) == 1 and label.isupper():
        return label, ""
    return "", label


@dataclass
class Constraints:
    """Label-pair constraints: ``forbid[i, j]`` (pair i -> j may not occur),
    ``start[l]`` / ``end[l]`` (label l may come first / last), over the label list ``labels``."""

    labels: list[str]
    forbid: np.ndarray = None
    start: np.ndarray = None
    end: np.ndarray = None
    name: str = "custom"

    def __post_init__(self):
        L = len(self.labels)
        self.labels = list(self.labels)
        self.forbid = (
            np.zeros((L, L), bool) if self.forbid is None else np.asarray(self.forbid, bool)
        ).copy()
        self.start = (
            np.ones(L, bool) if self.start is None else np.asarray(self.start, bool)
        ).copy()
        self.end = (np.ones(L, bool) if self.end is None else np.asarray(self.end, bool)).copy()
        if self.forbid.shape != (L, L) or self.start.shape != (L,) or self.end.shape != (L,):
            raise ValueError("constraint arrays do not match the label list")

    @classmethod
    def scheme(cls, labels: Sequence[str], scheme: str) -> Constraints:
        """The transitions a chunk scheme forbids: ``bio`` (= ``iob2``: a chunk starts with ``B-``;
        ``I-X`` only after ``B-X`` or ``I-X``, never first) or ``iobes`` / ``bilou`` (``B-X`` and
        ``I-X`` go on with ``I-X`` or ``E-X``; ``E-X``, ``S-X`` and ``O`` are followed by ``O``,
        ``B-Y`` or ``S-Y``; the first label is ``O``, ``B-`` or ``S-``, the last ``O``, ``E-`` or
        ``S-``).  Labels outside the scheme raise CrfkitError."""
        scheme = scheme.lower()
        if scheme not in _PREFIXES:
            raise CrfkitError(f"unknown constraint scheme {scheme!r}; known: {', '.join(SCHEMES)}")
        allowed_prefixes = _PREFIXES[scheme]
        parsed = [parse_label(lab) for lab in labels]
        bad = [
            lab
            for lab, (p, _) in zip(labels, parsed)
            if not (p == "O" or (p and p in allowed_prefixes))
        ]
        if bad:
            raise CrfkitError(
                f"--constraints {scheme}: the labels {', '.join(map(repr, bad[:8]))}"
                f"{' ...' if len(bad) > 8 else ''} are not O or {'/'.join(allowed_prefixes)}-TYPE"
            )
        if scheme == "bilou":  # the same rules under other letters
            parsed = [({"L": "E", "U": "S"}.get(p, p), t) for p, t in parsed]
        L = len(labels)
        forbid = np.zeros((L, L), bool)
        start = np.ones(L, bool)
        end = np.ones(L, bool)
        for j, (pj, tj) in enumerate(parsed):
            inside = pj in ("I", "E")  # continues a chunk
            if inside:
                start[j] = False
            if scheme in ("iobes", "bilou") and pj in ("B", "I"):
                end[j] = False
            for i, (pi, ti) in enumerate(parsed):
                if scheme in ("bio", "iob2"):
                    ok = not inside or (pi in ("B", "I") and ti == tj)
                else:
                    opened = pi in ("B", "I")  # a chunk is open after i
                    ok = (inside and ti == tj) if opened else not inside
                forbid[i, j] = not ok
        return cls(list(labels), forbid, start, end, name=scheme)

    def forbid_pairs(self, pairs: Iterable[tuple[str, str]]) -> Constraints:
        """A copy that also forbids the given (previous label, label) pairs."""
        index = {lab: i for i, lab in enumerate(self.labels)}
        out = Constraints(self.labels, self.forbid, self.start, self.end, name=self.name)
        for a, b in pairs:
            for x in (a, b):
                if x not in index:
                    raise CrfkitError(
                        f"forbidden pair {a} {b}: {x!r} is not a label of the model "
                        f"({' '.join(self.labels[:20])}{' ...' if len(self.labels) > 20 else ''})"
                    )
            out.forbid[index[a], index[b]] = True
        return out

    def valid(self, seq: Sequence[str]) -> bool:
        """Whether a label sequence satisfies the constraints (labels outside the list: invalid)."""
        index = {lab: i for i, lab in enumerate(self.labels)}
        try:
            ids = [index[lab] for lab in seq]
        except KeyError:
            return False
        if not ids:
            return True
        if not self.start[ids[0]] or not self.end[ids[-1]]:
            return False
        return not any(self.forbid[a, b] for a, b in zip(ids, ids[1:]))

    def for_labels(self, labels: Sequence[str]) -> Constraints:
        """The same constraints over another label order (a model's); labels unknown here are
        free."""
        if list(labels) == self.labels:
            return self
        index = {lab: i for i, lab in enumerate(self.labels)}
        L = len(labels)
        pos = [index.get(lab, -1) for lab in labels]
        forbid = np.zeros((L, L), bool)
        start = np.ones(L, bool)
        end = np.ones(L, bool)
        for a, pa in enumerate(pos):
            if pa < 0:
                continue
            start[a] = self.start[pa]
            end[a] = self.end[pa]
            for b, pb in enumerate(pos):
                if pb >= 0:
                    forbid[a, b] = self.forbid[pa, pb]
        return Constraints(list(labels), forbid, start, end, name=self.name)


def make_constraints(labels: Sequence[str], constraints=None, forbid=None) -> Constraints | None:
    """A :class:`Constraints` from a scheme name (``"bio"``...), a Constraints, or None; plus
    forbidden pairs.  None when nothing is constrained."""
    if isinstance(constraints, str):
        c = None if constraints.lower() in ("none", "") else Constraints.scheme(labels, constraints)
    elif constraints is None:
        c = None
    elif isinstance(constraints, Constraints):
        c = constraints.for_labels(labels)
    else:
        raise TypeError(
            f"constraints must be a scheme name or a Constraints, not {type(constraints).__name__}"
        )
    if forbid:
        c = (c or Constraints(list(labels))).forbid_pairs(forbid)
    return c


def invalid_sequences(seqs: Iterable[Sequence[str]], scheme: str = "bio") -> int:
    """How many label sequences break a chunk scheme's rules (labels outside the scheme count as
    breaking them)."""
    seqs = list(seqs)
    labels = sorted({lab for s in seqs for lab in s})
    parsed_ok = [
        lab
        for lab in labels
        if parse_label(lab)[0] == "O" or parse_label(lab)[0] in _PREFIXES[scheme]
    ]
    c = Constraints.scheme(parsed_ok, scheme) if parsed_ok else Constraints([])
    return sum(1 for s in seqs if not c.valid(s))


def allowed_mask(
    allowed, labels: Sequence[str], lengths: Sequence[int], *, name: str = "<data>"
) -> np.ndarray:
    """The (n_tokens x L) uint8 mask of per-token label sets.

    ``allowed``: per sequence, per token: ``None`` (any label), a label name (forced), or a
    collection of label names; a whole sequence may be ``None``.  A name that is not a label of the
    model is a DataError."""
    index = {lab: i for i, lab in enumerate(labels)}
    L = len(labels)
    n = int(sum(lengths))
    mask = np.ones((n, L), np.uint8)
    if len(allowed) != len(lengths):
        raise DataError(
            f"allowed labels given for {len(allowed)} sequences, but there are {len(lengths)}", name
        )
    t0 = 0
    for s, (seq, T) in enumerate(zip(allowed, lengths)):
        if seq is not None:
            seq = list(seq)
            if len(seq) != T:
                raise DataError(
                    f"sequence {s + 1}: allowed labels for {len(seq)} tokens, but it has {T}", name
                )
            for t, cell in enumerate(seq):
                if cell is None:
                    continue
                names = [cell] if isinstance(cell, str) else list(cell)
                row = mask[t0 + t]
                row[:] = 0
                for lab in names:
                    k = index.get(lab)
                    if k is None:
                        raise DataError(
                            f"sequence {s + 1}, token {t + 1}: {lab!r} is not a label of the model",
                            name,
                        )
                    row[k] = 1
        t0 += T
    return mask


def decode(
    model,
    corpus,
    *,
    allowed: np.ndarray | None = None,
    constraints: Constraints | None = None,
    path: bool = True,
    marginals: bool = False,
    logz: bool = False,
    labels: np.ndarray | None = None,
    posterior: bool = False,
    nbest: int = 0,
    threads: int | None = None,
    name: str = "<data>",
    check: bool = True,
) -> dict:
    """One constrained pass over an encoded corpus (see
    :func:`crfkit.kernels.decode.decode_constrained`).

    Returns a dict with ``ids``/``path_score`` (``path``; with ``posterior`` the posterior path),
    ``marginals`` and ``logz`` (``marginals``; ``logz`` alone with ``logz``), ``label_score`` (given
    ``labels``), ``nbest_ids`` (n_tokens x K), ``nbest_score`` (n_seq x K) and ``nbest_count``
    (``nbest`` = K > 0).  ``check``: raise DataError when a sequence has no allowed label path.
    """
    from .kernels.batch import chunk_bounds
    from .kernels.decode import decode_constrained
    from .parallel import n_chunks

    sp = model.space
    L = sp.n_labels
    nt, ns = corpus.n_tokens, corpus.n_sequences
    if corpus.n_dense != sp.n_dense:
        raise DataError(
            f"the model has {sp.n_dense} dense dimensions but the data {corpus.n_dense}"
        )
    c = constraints if constraints is not None else Constraints(list(sp.labels))
    c = c.for_labels(sp.labels)
    al = (
        np.zeros((0, L), np.uint8)
        if allowed is None
        else np.ascontiguousarray(allowed, dtype=np.uint8)
    )
    if al.shape[0] and al.shape != (nt, L):
        raise ValueError(f"allowed mask of shape {al.shape}; expected ({nt}, {L})")
    K = int(nbest)
    want_path = path or posterior
    want_marg = marginals
    want_logz = marginals or logz or K > 0 or posterior
    ids = np.zeros(nt if want_path else 0, np.int32)
    ps = np.zeros(ns if want_path else 0)
    marg = np.zeros((nt, L) if want_marg else (0, L))
    lz = np.zeros(ns if want_logz else 0)
    want_labels = labels is not None
    lab = np.ascontiguousarray(labels if want_labels else np.zeros(0), dtype=np.int32)
    lsc = np.zeros(ns if want_labels else 0)
    nb_ids = np.zeros((nt, K) if K else (0, 1), np.int32)
    nb_score = np.zeros((ns, K) if K else (0, 1))
    nb_count = np.zeros(ns if K else 0, np.int32)
    if sp.n_bigram and corpus.has_bigram:
        btok_ptr, battr, bval = corpus.btok_ptr, corpus.battr, corpus.bval
    else:
        btok_ptr, battr, bval = np.zeros(nt + 1, np.int64), np.zeros(0, np.int32), np.zeros(0)
    xs = corpus.dense @ sp.dense_weights(model.weights) if sp.n_dense else np.zeros((0, L))
    if nt:
        full = sp.full_rows
        b = chunk_bounds(corpus.seq_ptr, n_chunks(threads, ns, per_thread=4))
        decode_constrained(
            corpus.seq_ptr,
            corpus.tok_ptr,
            corpus.attr,
            corpus.val,
            btok_ptr,
            battr,
            bval,
            sp.attr_ptr,
            sp.feat_label,
            sp.trans_index,
            sp.battr_ptr,
            sp.pairs_for_full_rows,
            model.weights,
            sp.n_state,
            sp.bigram_offset,
            b,
            xs,
            full if full.any() else full[:0],
            al,
            c.forbid.astype(np.uint8),
            c.start.astype(np.uint8),
            c.end.astype(np.uint8),
            bool(posterior),
            ids,
            ps,
            marg,
            lz,
            lab,
            lsc,
            max(K, 1) if K else 1,
            nb_ids,
            nb_score,
            nb_count,
        )
    elif K:
        nb_count[:] = 1
        nb_score[:, 1:] = -np.inf
    if check:
        bad = None
        if want_logz and len(lz):
            bad = np.flatnonzero(~(lz > -np.inf))
        elif want_path and len(ps):
            bad = np.flatnonzero(~(ps > -np.inf))
        if bad is not None and len(bad):
            raise DataError(
                f"sequence {int(bad[0]) + 1}{f' (and {len(bad) - 1} more)' if len(bad) > 1 else ''}: "
                "no label sequence satisfies the constraints (allowed labels per token and "
                "forbidden transitions)",
                name,
            )
    out = {}
    if want_path:
        out.update(ids=ids, path_score=ps)
    if want_marg:
        out["marginals"] = marg
    if want_logz:
        out["logz"] = lz
    if want_labels:
        out["label_score"] = lsc
    if K:
        out.update(nbest_ids=nb_ids, nbest_score=nb_score, nbest_count=nb_count)
    return out


@dataclass
class NBest:
    """The n-best list of one sequence: ``labels[k]`` (label names), ``probabilities[k]``
    (p(labels | x), under constraints renormalised over the allowed sequences) and ``scores[k]``
    (unnormalised log scores), best first."""

    labels: list[list[str]] = field(default_factory=list)
    probabilities: list[float] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.labels)

    def __iter__(self):
        return iter(zip(self.labels, self.probabilities))


def _encode(model, X, dense=None, B=None, name="<data>"):
    return model.encode(X, dense=dense, B=B, name=name)


def _prepare(model, corpus, allowed, constraints, forbid=None, name="<data>"):
    mask = None
    if allowed is not None:
        mask = allowed_mask(allowed, model.space.labels, corpus.lengths().tolist(), name=name)
    return mask, make_constraints(model.space.labels, constraints, forbid)


def nbest_from(model, corpus, r: dict) -> list[NBest]:
    """:class:`NBest` lists out of a :func:`decode` result (with ``nbest``)."""
    ptr = corpus.seq_ptr.tolist()
    ids, sc, cnt, lz = r["nbest_ids"], r["nbest_score"], r["nbest_count"], r["logz"]
    # label names by one object-array take, each sequence's K lists by one transpose (not a Python
    # loop per token); a rank past a sequence's count has ids -1 and is cut off below
    names = np.empty(len(model.space.labels) + 1, dtype=object)
    names[:-1] = model.space.labels
    names[-1] = None
    lab = names[ids].T
    prob = np.exp(sc - lz[:, None]).tolist() if len(lz) else []
    scores = sc.tolist()
    counts = cnt.tolist()
    out = []
    for s in range(len(ptr) - 1):
        n = int(counts[s])
        out.append(NBest(lab[:n, ptr[s] : ptr[s + 1]].tolist(), prob[s][:n], scores[s][:n]))
    return out


def nbest(
    model,
    X,
    k: int,
    *,
    allowed=None,
    constraints=None,
    forbid=None,
    threads: int | None = None,
    dense=None,
    B=None,
) -> list[NBest]:
    """The ``k`` most probable label sequences of every sequence of ``X`` (attribute sequences),
    with their probabilities (see the module docstring for constraints and the order of ties)."""
    k = int(k)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if k > MAX_NBEST:
        raise CrfkitError(f"n-best lists of {k} sequences: at most {MAX_NBEST} (MAX_NBEST)")
    corpus = _encode(model, X, dense, B)
    lens = np.diff(corpus.seq_ptr)
    if len(lens):
        L = len(model.space.labels)
        T = int(lens.max())
        need = T * k * L * 16 + corpus.n_tokens * k * 4 + len(lens) * k * 8
        if need > NBEST_MAX_BYTES:
            raise CrfkitError(
                f"n-best lists of {k} sequences over a {T}-token sentence with {L} labels need "
                f"about {need / 2**30:.1f} GiB (the limit is {NBEST_MAX_BYTES / 2**30:g} GiB, "
                "NBEST_MAX_BYTES): ask for fewer, or split the sentence"
            )
    mask, c = _prepare(model, corpus, allowed, constraints, forbid)
    r = decode(model, corpus, allowed=mask, constraints=c, path=False, nbest=k, threads=threads)
    return nbest_from(model, corpus, r)


def _split(model, corpus, ids):
    labels = model.space.labels
    names = [labels[i] for i in ids.tolist()]
    p = corpus.seq_ptr.tolist()
    return [names[p[i] : p[i + 1]] for i in range(len(p) - 1)]


def tag(
    model,
    X,
    *,
    allowed=None,
    constraints=None,
    forbid=None,
    method: str = "viterbi",
    probability: bool = False,
    threads: int | None = None,
    dense=None,
    B=None,
):
    """Labels of every sequence of ``X`` under the constraints; ``method``: ``"viterbi"`` (the most
    probable allowed sequence) or ``"posterior"`` (per token the label of highest marginal, among
    the allowed sequences the one with the largest sum of marginals when pairs are forbidden).  With
    ``probability``: ``(labels, p(labels | x), node marginals (n_tokens x L), corpus)``."""
    if method not in ("viterbi", "posterior"):
        raise CrfkitError(f"unknown decoding method {method!r}; use viterbi or posterior")
    corpus = _encode(model, X, dense, B)
    mask, c = _prepare(model, corpus, allowed, constraints, forbid)
    r = decode(
        model,
        corpus,
        allowed=mask,
        constraints=c,
        marginals=probability,
        posterior=method == "posterior",
        threads=threads,
    )
    pred = _split(model, corpus, r["ids"])
    if not probability:
        return pred
    return pred, np.exp(r["path_score"] - r["logz"]), r["marginals"], corpus


def marginals(model, corpus, *, allowed=None, constraints=None, forbid=None, threads=None):
    """Node marginals (n_tokens x L) and log Z per sequence of an encoded corpus under the
    constraints (``allowed``: the per-token label sets, see :func:`allowed_mask`)."""
    mask, c = _prepare(model, corpus, allowed, constraints, forbid)
    r = decode(
        model, corpus, allowed=mask, constraints=c, path=False, marginals=True, threads=threads
    )
    return r["marginals"], r["logz"]


def sequence_probability(
    model, X, Y, *, allowed=None, constraints=None, forbid=None, threads=None, dense=None, B=None
) -> np.ndarray:
    """p(Y | X, constraints): 0 for a sequence that breaks them."""
    corpus = model.encode(X, Y, dense=dense, B=B)
    if (corpus.y < 0).any():
        bad = int(np.flatnonzero(corpus.y < 0)[0])
        lab = [lab for ys in Y for lab in ys][bad]
        raise DataError(f"label {lab!r} is not a label of this model ({len(model.labels)} labels)")
    mask, c = _prepare(model, corpus, allowed, constraints, forbid)
    r = decode(
        model,
        corpus,
        allowed=mask,
        constraints=c,
        path=False,
        logz=True,
        labels=corpus.y,
        threads=threads,
    )
    return np.exp(r["label_score"] - r["logz"])
