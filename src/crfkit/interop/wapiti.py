"""Wapiti 1.5.0 models: the text model of ``wapiti train`` / ``wapiti label``, read into and written
from :class:`crfkit.model.CRFModel`.

Layout (text; strings are netstrings ``LEN:BYTES,`` each followed by one byte, a newline):
``#mdl#TYPE#NACT`` (TYPE 2 = CRF; NACT non-zero weights), ``#rdr#NPATS/NTOKS/AUTOUNI``, the NPATS
patterns, ``#qrk#Y`` and the Y labels, ``#qrk#O`` and the O observations, then NACT lines
``INDEX=HEXFLOAT`` (C's ``%la``).  Weights: observation ``o`` (in order) whose string starts with
``u`` owns Y weights (``off + label``), ``b`` Y*Y (``off + previous*Y + label``), ``*`` both (the Y
first); no bigram weight scores the first token.  crfkit's templates take Wapiti's patterns as they
are (``u``/``b``/``*`` lines): an unigram observation is a state attribute, a bigram one a
label-pair x observation attribute, and the one of a ``b`` (or ``*``) pattern without macros is the
transition block.

Padding: Wapiti reads ``_x-1`` .. ``_x-4`` (``_x+1``...) outside a sequence and ``_x-#`` beyond
four tokens; crfkit (as CRF++) reads ``_B-1``, ``_B-2``....  Observations are translated at the
macros of their pattern (a pattern reaching more than 4 tokens away cannot be translated and is
refused).  Regex macros (``%t``, ``%m``) are refused both ways: Wapiti tests its own regex engine on
``_x-1`` outside the sequence where crfkit gives the padding token.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from itertools import repeat
from operator import itemgetter

import numpy as np

from ..errors import CrfkitError, ModelError, TemplateError
from ..features.space import FeatureSpace, unpack_strings
from ._template_peers import check_template_model, reader_limits

__all__ = ["read", "sniff", "write"]

MAX_PAD = 4  # Wapiti names padding tokens up to 4 away (_x-1.._x-4), then _x-#
TYPE_CRF = 2
DEFAULT_LIMITS = {
    "max_bytes": 8 << 30,
    "max_labels": 10_000,
    "max_string": 1 << 20,  # one pattern, label or observation
}
_RE_MDL = re.compile(rb"#mdl#(\d{1,10})(?:#(\d{1,20}))?\n")
_RE_RDR = re.compile(rb"#rdr#(\d{1,10})/(\d{1,10})(?:/(-?\d{1,10}))?\n")
_RE_QRK = re.compile(rb"#qrk#(\d{1,20})\n")
_PADTOK = re.compile(r"_x([-+])([1-9])$")


def sniff(head: bytes) -> bool:
    """Whether ``head`` (a file's first bytes) starts a Wapiti model (``#mdl#``)."""
    return head.startswith(b"#mdl#")


class _Text:
    """A cursor over the file's bytes that names the line of an error."""

    def __init__(self, path, data: bytes):
        self.path, self.data, self.pos = path, data, 0

    def error(self, problem, pos=None) -> ModelError:
        p = self.pos if pos is None else pos
        line = self.data.count(b"\n", 0, p) + 1
        return ModelError(f"{self.path}:{line}: {problem}")

    def match(self, rx, what):
        m = rx.match(self.data, self.pos)
        if m is None:
            got = self.data[self.pos : self.pos + 30]
            raise self.error(f"expected {what}, found {got!r}")
        self.pos = m.end()
        return m

    def netstrings(self, count: int, what: str, lim) -> list[bytes]:
        """``count`` netstrings; bounded by what is left (each takes at least 4 bytes)."""
        left = len(self.data) - self.pos
        if count > left // 4:
            raise self.error(f"{count} {what}s cannot fit in the {left} bytes left")
        out = []
        # fast path: one netstring per line, checked in bulk
        if count:
            lines = self.data[self.pos :].split(b"\n", count)[:count]
            if len(lines) == count:
                colon = np.fromiter(map(bytes.find, lines, repeat(b":")), np.int64, count=count)
                size = np.fromiter(map(len, lines), np.int64, count=count)
                ok = bool(np.all((colon > 0) & (colon < 10)))
                if ok:
                    heads = [ln[:c] for ln, c in zip(lines, colon.tolist())]
                    ok = all(map(bytes.isdigit, heads)) and all(ln[-1:] == b"," for ln in lines)
                if ok:
                    declared = np.array(heads, dtype="S").astype(np.int64)
                    ok = bool(np.all(size == colon + declared + 2))
                if ok:
                    out = [ln[c + 1 : -1] for ln, c in zip(lines, colon.tolist())]
                    self.pos += int(size.sum()) + count
        if len(out) != count:
            out = []
            d, n = self.data, len(self.data)
            for _ in range(count):
                p = self.pos
                while p < n and d[p : p + 1].isspace():
                    p += 1
                q = d.find(b":", p, p + 12)
                if q < 0 or not d[p:q].isdigit():
                    raise self.error(f"expected a {what} (a netstring LEN:BYTES,)", p)
                ln = int(d[p:q])
                if ln > lim["max_string"] or q + 1 + ln + 1 > n:
                    raise self.error(f"a {what} of {ln} bytes runs past the file or the limit", p)
                if d[q + 1 + ln : q + 2 + ln] != b",":
                    raise self.error(f"the {what} does not end with ','", q + 1 + ln)
                out.append(d[q + 1 : q + 1 + ln])
                self.pos = min(q + 3 + ln, n)
        if any(len(s) > lim["max_string"] for s in out):
            raise self.error(f"a {what} is over {lim['max_string']} bytes")
        return out


def _decode(t: _Text, items: list[bytes], what: str) -> list[str]:
    try:
        return [s.decode("utf-8") for s in items]
    except UnicodeDecodeError:
        raise t.error(f"a {what} is not UTF-8") from None


def read(path, *, limits=None):
    """The Wapiti model at ``path`` as a crfkit model (patterns as crfkit templates, padding tokens
    translated).  Untrusted input: the header is checked first, every count is bounded by what is
    left of the file before anything is allocated, and the weight vector is built from the listed
    non-zero weights only.  Raises :class:`~crfkit.errors.ModelError` naming the file, line and
    problem."""
    lim = reader_limits(DEFAULT_LIMITS, limits, "Wapiti")
    p = os.fspath(path)
    try:
        size = os.path.getsize(p)
        if size > lim["max_bytes"]:
            raise ModelError(f"{p}: {size} bytes, over the limit of {lim['max_bytes']} bytes")
        with open(p, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ModelError(f"{p}: cannot read model file: {e.strerror or e}") from None
    t = _Text(p, data)
    if not data.startswith(b"#mdl#"):
        raise t.error("not a Wapiti model (no #mdl# header)")
    m = t.match(_RE_MDL, "#mdl#TYPE#COUNT")
    if m.group(2) is None:
        typ, nact = 0, int(m.group(1))
    else:
        typ, nact = int(m.group(1)), int(m.group(2))
    if typ != TYPE_CRF:
        kind = {0: "maxent", 1: "memm"}.get(typ, f"type {typ}")
        raise t.error(f"a Wapiti {kind} model, not a CRF: crfkit reads CRF models", 0)
    r = t.match(_RE_RDR, "#rdr#NPATS/NTOKS/AUTOUNI")
    npats = int(r.group(1))
    autouni = int(r.group(3) or 0)
    if autouni:
        raise t.error("the model reads features directly (autouni), not through patterns")
    pats = _decode(t, t.netstrings(npats, "pattern", lim), "pattern")
    q = t.match(_RE_QRK, "#qrk#COUNT (labels)")
    ny = int(q.group(1))
    if ny > lim["max_labels"]:
        raise t.error(f"{ny} labels, over the limit of {lim['max_labels']}")
    labels = _decode(t, t.netstrings(ny, "label", lim), "label")
    q = t.match(_RE_QRK, "#qrk#COUNT (observations)")
    no = int(q.group(1))
    obs_b = t.netstrings(no, "observation", lim)
    wpos = t.pos
    left = len(data) - wpos
    if nact > left // 4:
        raise t.error(f"{nact} weights cannot fit in the {left} bytes left")
    lines = data[wpos:].split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    if len(lines) != nact:
        raise t.error(f"the header announces {nact} weights, {len(lines)} lines follow")
    idx, val = _weights(t, lines, wpos)
    return _assemble(t, pats, labels, obs_b, idx, val)


def _weights(t: _Text, lines: list[bytes], wpos: int):
    """The ``INDEX=HEXFLOAT`` lines as arrays: in bulk, or line by line to name a bad one."""
    n = len(lines)
    try:
        text = b"\n".join(lines).decode("ascii")
        parts = text.replace("=", "\n").split("\n") if n else []
        if len(parts) == 2 * n:
            a = parts[0::2]
            if all(map(str.isdigit, a)) and max(map(len, a), default=0) <= 19:
                idx = np.array(a, dtype="U").astype(np.int64) if n else np.zeros(0, np.int64)
                val = np.fromiter(map(float.fromhex, parts[1::2]), np.float64, count=n)
                return idx, val
    except (ValueError, UnicodeDecodeError, OverflowError):
        pass
    for k, ln in enumerate(lines):
        a, sep, b = ln.partition(b"=")
        try:
            if not sep or not a.isdigit() or len(a) > 19:
                raise ValueError
            float.fromhex(b.decode("ascii"))
        except (ValueError, UnicodeDecodeError, OverflowError):
            raise t.error(
                f"weight line {k + 1}: expected INDEX=HEXFLOAT, found {ln[:40]!r}", wpos
            ) from None
    raise t.error("the weight lines cannot be read", wpos)


def _pattern_info(t: _Text, pats: list[str]):
    """The crfkit templates of Wapiti's patterns and, per pattern, a regex over its observations
    with a group per macro (for the padding translation)."""
    from ..features.templates import Templates

    if not pats:
        return None, []
    for s in pats:
        if s[:1].lower() not in ("u", "b", "*"):
            raise t.error(f"pattern {s[:60]!r} starts with neither u, b nor *")
        if "\n" in s or "\0" in s:
            raise t.error(f"pattern {s[:60]!r} holds a line break or NUL")
    text = "\n".join(pats) + "\n"
    try:
        tpl = Templates.parse(text, name=f"{t.path} (stored patterns)")
    except TemplateError as e:
        raise ModelError(f"{t.path}: a stored pattern cannot be read by crfkit: {e}") from None
    return tpl, _pad_regexes(tpl, t.path, "read")


def _pad_regexes(tpl, path, mode):
    out = []
    seen = set()
    for tm in tpl.unigram + tpl.bigram_observation:
        if id(tm) in seen:
            continue
        seen.add(id(tm))
        for mc in tm.macros:
            if mc.kind not in "xX":
                raise CrfkitError(
                    f"{path}: pattern {tm.text!r} uses %{mc.kind}: regex macros are not translated "
                    "(Wapiti runs them on its padding token outside the sequence)"
                )
            if abs(mc.row) > MAX_PAD:
                raise CrfkitError(
                    f"{path}: pattern {tm.text!r} reaches {mc.row} tokens away: Wapiti names every "
                    f"padding token beyond {MAX_PAD} '_x-#', which crfkit's padding cannot match"
                )
        if not any(mc.row for mc in tm.macros):
            continue
        parts, rows = [], []
        for pc in tm.pieces:
            if isinstance(pc, str):
                parts.append(re.escape(pc))
            else:
                parts.append("(.*?)")
                rows.append(pc.row)
        out.append((re.compile("".join(parts), re.S), rows, tm.text[:1]))
    return out


def _translate(s: str, regexes, src: str, dst: str) -> str:
    """``s`` with its padding tokens ``{src}±k`` at macro positions renamed ``{dst}±k``."""
    for rx, rows, _ in regexes:
        m = rx.fullmatch(s)
        if m is None:
            continue
        out, last, changed = [], 0, False
        for g, row in enumerate(rows, 1):
            v = m.group(g)
            if v.startswith(src) and len(v) == len(src) + 2 and v[-1].isdigit():
                sign, k = v[len(src)], int(v[-1])
                if 1 <= k <= abs(row) and (sign == "-") == (row < 0):
                    out.append(s[last : m.start(g)])
                    out.append(f"{dst}{sign}{k}")
                    last = m.end(g)
                    changed = True
        if changed:
            out.append(s[last:])
            return "".join(out)
        return s
    return s


def _is_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _assemble(t: _Text, pats, labels, obs_b, idx, val):
    from ..model import CRFModel

    L = len(labels)
    if L == 0:
        raise t.error("the model has no labels")
    if L * L > max(4 * len(t.data), 1 << 20):
        raise t.error(f"{L} labels: {L * L} label pairs, out of proportion to the file")
    if "" in labels or len(set(labels)) != L:
        raise t.error("a label is empty or occurs twice")
    tpl, regexes = _pattern_info(t, pats)
    if obs_b and min(map(len, obs_b)) == 0:
        raise t.error("an observation is empty")
    kind_byte = np.frombuffer(b"".join(map(itemgetter(slice(0, 1)), obs_b)), dtype=np.uint8)
    kind = np.zeros(len(obs_b), np.int64)
    kind[kind_byte == ord("u")] = 1
    kind[kind_byte == ord("b")] = 2
    kind[kind_byte == ord("*")] = 3
    if np.any(kind == 0):
        k = int(np.flatnonzero(kind == 0)[0])
        raise t.error(f"observation {k + 1} ({obs_b[k][:40]!r}) starts with neither u, b nor *")
    lens = np.fromiter(map(len, obs_b), np.int64, count=len(obs_b))
    try:
        obs = unpack_strings(np.frombuffer(b"".join(obs_b), dtype=np.uint8), lens)
    except (ValueError, UnicodeDecodeError):
        bad = next(s for s in obs_b if not _is_utf8(s))
        raise t.error(f"observation {bad[:40]!r} is not UTF-8") from None
    if len(set(obs)) != len(obs):
        raise t.error("an observation occurs twice")
    if regexes:
        obs = [_translate(s, regexes, "_x", "_B") if "_x" in s else s for s in obs]
        if any(("_x-#" in s or "_x+#" in s) for s in obs):
            raise t.error("an observation holds Wapiti's far padding token _x-# / _x+#")
    width = np.where(kind & 1, L, 0) + np.where(kind & 2, L * L, 0)
    start = np.zeros(len(obs) + 1, np.int64)
    np.cumsum(width, out=start[1:])
    nftr = int(start[-1])
    if len(idx):
        if idx.min() < 0 or idx.max() >= nftr:
            k = int(np.flatnonzero((idx < 0) | (idx >= nftr))[0])
            raise t.error(f"weight index {int(idx[k])} is beyond the model's {nftr} weights")
        if not np.all(np.isfinite(val)):
            raise t.error("a weight is not finite")
    order = np.argsort(idx, kind="stable")
    idx, val = idx[order], val[order]
    if len(idx) > 1 and np.any(idx[1:] == idx[:-1]):
        raise t.error(
            f"weight index {int(idx[np.flatnonzero(idx[1:] == idx[:-1])[0]])} occurs twice"
        )
    o = np.searchsorted(start, idx, side="right") - 1
    rel = idx - start[o]
    is_u = (kind[o] & 1).astype(bool) & (rel < L)
    brel = np.where(kind[o] & 1, rel - L, rel)
    const = set()
    if tpl is not None:
        const = {tm.text for tm in tpl.bigram}
    obs_arr = np.array(obs, dtype=object)
    is_const = np.fromiter((s in const for s in obs), dtype=bool, count=len(obs))
    # state features: every unigram observation with a non-zero weight, in observation order
    uo, ul, uv = o[is_u], rel[is_u], val[is_u]
    ua, u_inv = np.unique(uo, return_inverse=True)
    counts = np.bincount(u_inv, minlength=len(ua))
    attr_ptr = np.zeros(len(ua) + 1, np.int64)
    np.cumsum(counts, out=attr_ptr[1:])
    bsel = ~is_u
    bo, bp, bv = o[bsel], brel[bsel], val[bsel]
    tmask = is_const[bo] if len(bo) else np.zeros(0, bool)
    trans = np.zeros(L * L)
    np.add.at(trans, bp[tmask], bv[tmask])
    has_trans = bool(is_const.any())
    ob_o, ob_p, ob_v = bo[~tmask], bp[~tmask], bv[~tmask]
    ba, b_inv = np.unique(ob_o, return_inverse=True)
    bcounts = np.bincount(b_inv, minlength=len(ba))
    battr_ptr = np.zeros(len(ba) + 1, np.int64)
    np.cumsum(bcounts, out=battr_ptr[1:])
    if has_trans:
        trans_index = np.arange(L * L, dtype=np.int32).reshape(L, L)
    else:
        trans_index = np.full((L, L), -1, np.int32)
        trans = np.zeros(0)
    space = FeatureSpace(
        labels=list(labels),
        attributes=list(obs_arr[ua]) if len(ua) else [],
        attr_ptr=attr_ptr,
        feat_label=ul.astype(np.int32),
        trans_index=trans_index,
        battributes=list(obs_arr[ba]) if len(ba) else [],
        battr_ptr=battr_ptr,
        bfeat_pair=ob_p,
    )
    meta = {"source_format": "wapiti", "source_file": os.path.basename(t.path)}
    if tpl is not None:
        meta.update({"templates": "\n".join(pats) + "\n", "template_pad": True})
    return CRFModel(space, np.concatenate([uv, trans, ob_v]), meta)


# --------------------------------------------------------------------------- writing


def _cannot(what: str) -> CrfkitError:
    return CrfkitError(f"cannot write a Wapiti model: {what}")


def write(model, path, **options) -> None:
    """Write ``model`` as a Wapiti 1.5.0 CRF model at ``path`` (what ``wapiti label -m`` reads),
    to a temporary file renamed into place.  Templates become patterns (``U``/``B`` lines as
    ``u``/``b``), attributes observations (padding tokens renamed ``_x-1``...), the weights go in
    Wapiti's layout (non-zero ones, as ``%a`` hex floats).  What Wapiti cannot hold (dense features,
    no templates, regex macros, macros more than 4 tokens away, stored constraints, labels with
    white space) raises :class:`~crfkit.errors.CrfkitError` naming it."""
    if options:
        raise CrfkitError(f"unknown Wapiti writer options: {', '.join(sorted(options))}")
    from ..features.templates import Templates
    from ..io.atomic import atomic_file

    sp, w = model.space, model.weights
    L = sp.n_labels
    src = check_template_model(model, "Wapiti", "patterns", _cannot)
    tpl = Templates.parse(src, name="<model templates>")
    try:
        regexes = _pad_regexes(tpl, "<model templates>", "write")
    except CrfkitError as e:
        raise _cannot(str(e).split(": ", 1)[1]) from None
    pats = []
    for tm in sorted(
        {id(x): x for x in tpl.unigram + tpl.bigram + tpl.bigram_observation}.values(),
        key=lambda x: x.line,
    ):
        if any("%" in pc for pc in tm.pieces if isinstance(pc, str)):
            raise _cannot(f"template {tm.text!r} has a literal '%'; Wapiti reads % as a command")
        if "\0" in tm.text or "\n" in tm.text:
            raise _cannot(f"template {tm.text!r} holds a NUL or line break")
        pats.append(tm.text[:1].lower() + tm.text[1:])
    for y in sp.labels:
        if not y or any(c.isspace() or c == "\0" for c in y):
            raise _cannot(
                f"label {y!r} is empty or holds white space or NUL, which Wapiti cannot read"
            )

    def wnames(attrs: list, want: str) -> list:
        if not all(a[:1].lower() in want and a[:1] for a in attrs):
            a = next(a for a in attrs if not (a[:1] and a[0].lower() in want))
            raise _cannot(
                f"attribute {a!r} does not start with a pattern type Wapiti reads ({want})"
            )
        if "\0" in "".join(attrs):
            a = next(a for a in attrs if "\0" in a)
            raise _cannot(f"attribute {a!r} holds a NUL byte")
        out = [_translate(a, regexes, "_B", "_x") if "_B" in a else a for a in attrs]
        return [a[0].lower() + a[1:] for a in out]

    # observations: the unigram attributes (in order), then the bigram ones that are not the
    # bigram half of a '*' unigram observation, then the transitions' observation
    names = wnames(list(sp.attributes), "u*")
    index = dict(zip(names, range(len(names))))
    if len(index) != len(names):
        dup = next(x for x, c in Counter(names).items() if c > 1)
        raise _cannot(f"two attributes become the observation {dup!r}")
    nA = len(names)
    kinds = [1 if x[0] == "u" else 3 for x in names]
    bpos = np.full(sp.n_battributes, -1, np.int64)
    taken = set()
    for i, x in enumerate(wnames(list(sp.battributes), "b*")):
        j = index.get(x)
        if j is not None and (j in taken or not x.startswith("*")):
            raise _cannot(f"two attributes become the observation {x!r}")
        if j is None:
            j = index[x] = len(names)
            names.append(x)
            kinds.append(2 if x[0] == "b" else 3)
        taken.add(j)
        bpos[i] = j
    tpos = -1
    if sp.n_trans:
        if not tpl.bigram:
            raise _cannot("the model has transition weights but no plain B template to hold them")
        tname = tpl.bigram[0].text[:1].lower() + tpl.bigram[0].text[1:]
        j = index.get(tname)
        if j is not None and (j in taken or kinds[j] == 1):
            raise _cannot(f"the transition observation {tname!r} is also a label-pair attribute")
        if j is None:
            j = len(names)
            names.append(tname)
            kinds.append(2 if tname[0] == "b" else 3)
        tpos = j
    kind = np.array(kinds, dtype=np.int64)
    width = np.where(kind & 1, L, 0) + np.where(kind & 2, L * L, 0)
    start = np.zeros(len(names) + 1, np.int64)
    np.cumsum(width, out=start[1:])
    uoff = start[:nA]
    boff = start[bpos] + np.where(kind[bpos] & 1, L, 0) if len(bpos) else np.zeros(0, np.int64)
    toff = int(start[tpos] + (L if kind[tpos] & 1 else 0)) if tpos >= 0 else -1
    nftr = int(start[-1])
    theta_i, theta_v = [], []
    ns = sp.n_state
    if ns:
        theta_i.append(uoff[sp.feature_attr()] + sp.feat_label)
        theta_v.append(w[:ns])
    if sp.n_trans:
        ii, jj = np.nonzero(sp.trans_index >= 0)
        theta_i.append(toff + ii * L + jj)
        theta_v.append(w[ns + sp.trans_index[ii, jj]])
    if sp.n_bigram:
        bo = sp.bigram_offset
        theta_i.append(boff[sp.bfeature_attr()] + sp.bfeat_pair.astype(np.int64))
        theta_v.append(w[bo : bo + sp.n_bigram])
    ti = np.concatenate(theta_i) if theta_i else np.zeros(0, np.int64)
    tv = np.concatenate(theta_v) if theta_v else np.zeros(0)
    nzm = tv != 0
    ti, tv = ti[nzm], tv[nzm]
    order = np.argsort(ti, kind="stable")
    ti, tv = ti[order], tv[order]
    assert len(ti) == 0 or (ti.min() >= 0 and ti.max() < nftr)
    ntoks = max(
        (mc.col for tm in tpl.unigram + tpl.bigram_observation for mc in tm.macros), default=0
    )

    def netstrings(items: list) -> bytes:
        text = "".join(items)
        if text.isascii():
            return "".join(map("{}:{},\n".format, map(len, items), items)).encode("ascii")
        enc = [x.encode("utf-8") for x in items]
        return b"".join(b"%d:%s,\n" % (len(x), x) for x in enc)

    with atomic_file(path, what="the Wapiti model") as f:
        f.write(b"#mdl#%d#%d\n" % (TYPE_CRF, len(ti)))
        f.write(b"#rdr#%d/%d/0\n" % (len(pats), ntoks))
        f.write(netstrings(pats))
        f.write(b"#qrk#%d\n" % L)
        f.write(netstrings(list(sp.labels)))
        f.write(b"#qrk#%d\n" % len(names))
        f.write(netstrings(names))
        lines = map("{}={}\n".format, ti.tolist(), map(float.hex, tv.tolist()))
        f.write("".join(lines).encode("ascii"))
