"""CRF++ 0.59 models: the binary model of ``crf_learn`` / ``crf_test`` and the text model of
``crf_learn -t``, read into and written from :class:`crfkit.model.CRFModel`.

Binary layout (little-endian, no padding between fields): ``uint32 version`` (100), ``int32 type``
(0), ``float64 cost factor``, ``uint32 maxid`` (number of weights), ``uint32 xsize`` (observation
columns), ``uint32 dsize`` (bytes of the double array), ``uint32`` + the labels (each ending in NUL),
``uint32`` + the templates (each ending in NUL, then NULs so that labels + templates fill whole
4-byte words), the double array (:mod:`crfkit.interop._crfpp_darts`: feature string -> first weight
id), then ``maxid`` float32 weights.  The text model holds the same in lines: ``version:``,
``cost-factor:``, ``maxid:``, ``xsize:`` lines, a blank line, the labels, a blank line, the
templates, a blank line, ``id feature-string`` lines, a blank line, then one weight per line.

Weights: the features a ``U`` template gives own ``L`` weights (one per label: ``id + label``); a
``B`` template's own ``L*L`` (``id + previous*L + label``).  crfkit's state features are the former;
a ``B`` line without macros (its one feature string is the line itself, ``B``) is the transition
block; ``B`` lines with macros are crfkit's label-pair x observation features.  Neither tool scores
the first token's incoming transition.  ``crf_test`` multiplies every score by its own ``-c``
(default 1), not by the cost factor stored in the model, so the weights are taken as they are; the
stored factor is kept in ``meta["crfpp_cost_factor"]``.  Binary weights are float32: a crfkit model
written as a binary model is rounded to float32 (the text model keeps 16 decimals).
"""

from __future__ import annotations

import math
import os
import struct
from operator import methodcaller

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..errors import CrfkitError, ModelError, TemplateError
from ..features.space import ALL_PAIRS, FeatureSpace, StringTable
from ._template_peers import check_template_model, reader_limits

__all__ = ["MODEL_VERSION", "read", "sniff", "write"]

MODEL_VERSION = 100
_HEAD = struct.Struct("<IidIIII")  # version, type, cost factor, maxid, xsize, dsize, labels size
MAX_CONTEXT = 8  # CRF++ pads 8 tokens each side: a macro's row is within -8..8

DEFAULT_LIMITS = {
    "max_bytes": 8 << 30,  # the file
    "max_labels": 10_000,
    "max_key_length": 1 << 16,  # one feature string
    "key_bytes_factor": 64,  # all feature strings: this x the file size + 64 MiB
}


def sniff(head: bytes) -> bool:
    """Whether ``head`` (a file's first bytes) starts a CRF++ 0.59 model: a text model's
    ``version: 1xx`` line, or a binary header with version 1xx, type 0 and a finite cost factor."""
    if head.startswith(b"version: 1"):
        return True
    if len(head) < _HEAD.size:
        return False
    version, typ, cost, *_ = _HEAD.unpack_from(head)
    return version // 100 == MODEL_VERSION // 100 and typ == 0 and math.isfinite(cost)


# --------------------------------------------------------------------------- reading


def _read_bytes(path, lim) -> bytes:
    p = os.fspath(path)
    try:
        size = os.path.getsize(p)
        if size > lim["max_bytes"]:
            raise ModelError(f"{p}: {size} bytes, over the limit of {lim['max_bytes']} bytes")
        with open(p, "rb") as f:
            return f.read()
    except OSError as e:
        raise ModelError(f"{p}: cannot read model file: {e.strerror or e}") from None


def read(path, *, limits=None):
    """The CRF++ model at ``path`` (binary or text, told by its first bytes) as a crfkit model.

    The model's templates become crfkit's (``meta["templates"]``, CRF++'s padding), so it tags
    column files as ``crf_test`` does.  Untrusted input: the header is checked first and every size
    bounded by what is left of the file before anything is allocated; the double array is decoded
    with every unit bounded (:func:`crfkit.interop._crfpp_darts.decode`).  ``limits`` overrides
    :data:`DEFAULT_LIMITS`.  Raises :class:`~crfkit.errors.ModelError` naming the file, the offset
    (binary) or line (text) and the problem."""
    lim = reader_limits(DEFAULT_LIMITS, limits, "CRF++")
    p = os.fspath(path)
    data = _read_bytes(p, lim)
    if data.startswith(b"version:"):
        return _read_text(p, data, lim)
    return _read_binary(p, data, lim)


def _err(path, where, problem) -> ModelError:
    return ModelError(f"{path}: {where}: {problem}")


def _split_nul(path, blob: bytes, off: int, what: str, lim) -> list[str]:
    out = []
    for k, part in enumerate(blob.split(b"\0")):
        if len(part) > lim["max_key_length"]:
            raise _err(
                path, f"offset {off}", f"{what} {k + 1} is over {lim['max_key_length']} bytes"
            )
        try:
            out.append(part.decode("utf-8"))
        except UnicodeDecodeError:
            raise _err(path, f"offset {off}", f"{what} {k + 1} is not UTF-8") from None
    return out


def _read_binary(path, data: bytes, lim):
    n = len(data)
    if n < _HEAD.size:
        raise _err(path, "offset 0", f"{n} bytes: too short for a CRF++ model header")
    version, typ, cost, maxid, xsize, dsize, ysize = _HEAD.unpack_from(data)
    if version // 100 != MODEL_VERSION // 100:
        raise _err(path, "offset 0", f"not a CRF++ 0.59 model (version {version}, expected 1xx)")
    if typ != 0:
        raise _err(path, "offset 4", f"unknown model type {typ} (CRF++ writes 0)")
    if not math.isfinite(cost):
        raise _err(path, "offset 8", f"the cost factor is {cost}")
    off = _HEAD.size
    if ysize > n - off or ysize == 0:
        raise _err(
            path, f"offset {off - 4}", f"labels of {ysize} bytes (the file has {n - off} left)"
        )
    yblob = data[off : off + ysize]
    if not yblob.endswith(b"\0"):
        raise _err(path, f"offset {off}", "the labels do not end with a NUL byte")
    labels = _split_nul(path, yblob[:-1], off, "label", lim)
    off += ysize
    if n - off < 4:
        raise _err(path, f"offset {off}", "the file ends before the templates")
    (tsize,) = struct.unpack_from("<I", data, off)
    off += 4
    if tsize > n - off:
        raise _err(
            path, f"offset {off - 4}", f"templates of {tsize} bytes (the file has {n - off} left)"
        )
    tblob = data[off : off + tsize]
    if tsize and not tblob.endswith(b"\0"):
        raise _err(path, f"offset {off}", "the templates do not end with a NUL byte")
    templates = [t for t in _split_nul(path, tblob.rstrip(b"\0"), off, "template", lim) if t]
    off += tsize
    if dsize % _UNIT_SIZE or dsize > n - off:
        raise _err(
            path,
            "offset 24",
            f"a double array of {dsize} bytes (the file has {n - off} left, units of 8)",
        )
    units = np.frombuffer(data, dtype=_UNIT, count=dsize // _UNIT_SIZE, offset=off)
    darts_off = off
    off += dsize
    if maxid * 4 != n - off:
        raise _err(
            path,
            "offset 16",
            f"{maxid} weights need {4 * maxid} bytes after the double array, the file has {n - off}",
        )
    with np.errstate(invalid="ignore"):  # a NaN's bits: refused below, with the file named
        weights = np.frombuffer(data, dtype="<f4", count=maxid, offset=off).astype(np.float64)
    from ._crfpp_darts import DartsError, decode

    try:
        blob, lens, values = decode(
            units,
            max_key_length=lim["max_key_length"],
            max_total_bytes=lim["key_bytes_factor"] * n + (64 << 20),
        )
    except DartsError as e:
        raise _err(path, f"double array at offset {darts_off}", str(e)) from None
    # (keys of a trie are distinct by construction)
    return _assemble(
        path,
        labels,
        templates,
        blob,
        lens,
        values,
        weights,
        xsize,
        cost,
        version,
        lim,
        "binary",
        check_unique=False,
    )


_UNIT = np.dtype([("base", "<i4"), ("check", "<u4")])
_UNIT_SIZE = _UNIT.itemsize


def _read_text(path, data: bytes, lim):
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    i = 0
    header = {}

    def need(k):
        if k >= len(lines):
            raise _err(path, f"line {k + 1}", "the file ends before the model does")

    while True:
        need(i)
        ln = lines[i].rstrip(b"\r")
        i += 1
        if not ln:
            break
        parts = ln.split(None, 1)
        if len(parts) != 2 or not parts[0].endswith(b":"):
            raise _err(
                path, f"line {i}", f"expected 'name: value' in the header, found {ln[:60]!r}"
            )
        header[parts[0][:-1].decode("latin-1")] = (parts[1].decode("latin-1"), i)

    def num(name, kind):
        if name not in header:
            raise _err(path, "line 1", f"the header has no {name!r}")
        text, ln = header[name]
        try:
            v = kind(text)
        except ValueError:
            raise _err(path, f"line {ln}", f"{name} is {text[:40]!r}, not a number") from None
        if kind is int and not 0 <= v < 2**32:
            raise _err(path, f"line {ln}", f"{name} {v} is out of range")
        return v

    version = num("version", int) if "version" in header else MODEL_VERSION
    if version // 100 != MODEL_VERSION // 100:
        raise _err(path, "line 1", f"not a CRF++ 0.59 model (version {version}, expected 1xx)")
    cost = num("cost-factor", float) if "cost-factor" in header else 1.0
    maxid = num("maxid", int)
    xsize = num("xsize", int)

    def block(what):
        nonlocal i
        start = i
        out = []
        while True:
            need(i)
            ln = lines[i].rstrip(b"\r")
            i += 1
            if not ln:
                return out, start
            out.append(ln)

    ylines, ystart = block("labels")
    labels = []
    for k, y in enumerate(ylines):
        try:
            labels.append(y.decode("utf-8"))
        except UnicodeDecodeError:
            raise _err(path, f"line {ystart + k + 1}", "the label is not UTF-8") from None
    tlines, tstart = block("templates")
    templates = []
    for k, t in enumerate(tlines):
        try:
            templates.append(t.decode("utf-8"))
        except UnicodeDecodeError:
            raise _err(path, f"line {tstart + k + 1}", "the template is not UTF-8") from None
    dlines, dstart = block("features")
    keys, vals = [], np.zeros(len(dlines), np.int64)
    for k, ln in enumerate(dlines):
        a, sep, key = ln.partition(b" ")
        if not sep or not a.isdigit() or len(a) > 10 or not key:
            raise _err(path, f"line {dstart + k + 1}", f"expected 'id feature', found {ln[:60]!r}")
        vals[k] = int(a)
        keys.append(key)
    if maxid != len(lines) - i:
        raise _err(
            path,
            f"line {i + 1}",
            f"maxid is {maxid} but {len(lines) - i} weight lines follow the features",
        )
    try:
        weights = np.fromiter(map(float, lines[i:]), np.float64, count=maxid)
    except ValueError:
        for k, ln in enumerate(lines[i:]):
            try:
                float(ln)
            except ValueError:
                raise _err(path, f"line {i + k + 1}", f"{ln[:40]!r} is not a number") from None
        raise
    lens = np.fromiter(map(len, keys), dtype=np.int64, count=len(keys))
    blob = np.frombuffer(b"".join(keys), dtype=np.uint8)
    return _assemble(
        path, labels, templates, blob, lens, vals, weights, xsize, cost, version, lim, "text"
    )


def _assemble(
    path,
    labels,
    templates,
    blob,
    lens,
    values,
    weights,
    xsize,
    cost,
    version,
    lim,
    kind,
    check_unique=True,
):
    """The crfkit model of a CRF++ model's parts (keys packed as ``blob``/``lens``)."""
    from ..features.templates import MAX_COLUMN, Templates
    from ..model import CRFModel

    L = len(labels)
    if L == 0:
        raise _err(path, "labels", "the model has no labels")
    if L > lim["max_labels"]:
        raise _err(path, "labels", f"{L} labels, over the limit of {lim['max_labels']}")
    if L * L > max(len(weights), 1 << 20):
        raise _err(path, "labels", f"{L} labels: {L * L} label pairs, more than the file's weights")
    if "" in labels:
        raise _err(path, "labels", f"label {labels.index('') + 1} is empty")
    if len(set(labels)) != L:
        raise _err(path, "labels", "a label occurs twice")
    if xsize > MAX_COLUMN:
        raise _err(path, "header", f"xsize {xsize} is over crfkit's limit of {MAX_COLUMN} columns")
    if not np.all(np.isfinite(weights)):
        k = int(np.flatnonzero(~np.isfinite(weights))[0])
        raise _err(path, "weights", f"weight {k} is {weights[k]}")
    bad = [t for t in templates if t[:1] not in ("U", "B")]
    if bad:
        raise _err(path, "templates", f"template {bad[0][:60]!r} starts with neither U nor B")
    text = "\n".join(templates) + "\n"
    try:
        tpl = Templates.parse(text, name=f"{path} (stored templates)") if templates else None
    except TemplateError as e:
        raise ModelError(f"{path}: a stored template cannot be read: {e}") from None
    try:
        table = StringTable(blob, lens)
    except (ValueError, UnicodeDecodeError):
        raise _err(path, "features", "a feature string is not UTF-8") from None
    first = np.zeros(len(lens), np.uint8)
    starts = np.cumsum(lens) - lens
    nz = lens > 0
    first[nz] = blob[starts[nz]]
    is_u = first == ord("U")
    is_b = first == ord("B")

    def name(k):
        return table.take([k])[0][:60]

    if not np.all(is_u | is_b):
        k = int(np.flatnonzero(~(is_u | is_b))[0])
        raise _err(path, "features", f"feature string {name(k)!r} starts with neither U nor B")
    values = np.asarray(values, dtype=np.int64)
    width = np.where(is_u, L, L * L)
    if len(values) and (values.min() < 0 or np.any(values + width > len(weights))):
        k = int(np.flatnonzero((values < 0) | (values + width > len(weights)))[0])
        raise _err(
            path,
            "features",
            f"feature {name(k)!r} has weights {values[k]}..{values[k] + width[k] - 1}, "
            f"beyond the {len(weights)} weights",
        )
    if check_unique and len(table.as_dict()) != len(table):
        raise _err(path, "features", "a feature string occurs twice")
    const_b = set()
    if tpl is not None:
        const_b = {t.text for t in tpl.bigram}
    ui = np.flatnonzero(is_u)  # in the file's order (crfkit's order of attributes is free)
    bi = np.flatnonzero(is_b)
    bnames = list(table.take(bi)) if len(bi) else []
    ti = [k for k, nm in zip(bi.tolist(), bnames) if nm in const_b]
    oi = np.array([k for k, nm in zip(bi.tolist(), bnames) if nm not in const_b], dtype=np.int64)
    ar = np.arange(L, dtype=np.int64)
    ar2 = np.arange(L * L, dtype=np.int64)
    # rows of L (L*L) weights from their first ids: a gather of whole rows of a window view
    w_state = sliding_window_view(weights, L)[values[ui]].ravel() if len(ui) else np.zeros(0)
    if const_b:
        trans = np.zeros(L * L)
        for k in ti:
            trans += weights[values[k] + ar2]
        trans_index = ar2.reshape(L, L).astype(np.int32)
    else:
        trans = np.zeros(0)
        trans_index = np.full((L, L), -1, np.int32)
    w_big = sliding_window_view(weights, L * L)[values[oi]].ravel() if len(oi) else np.zeros(0)
    attributes = table.take(ui) if len(ui) != len(table) else table
    space = FeatureSpace(
        labels=list(labels),
        attributes=attributes,
        attr_ptr=np.arange(len(ui) + 1, dtype=np.int64) * L,
        feat_label=np.tile(ar.astype(np.int32), len(ui)),
        trans_index=trans_index,
        battributes=list(table.take(oi)) if len(oi) else [],
        battr_ptr=np.arange(len(oi) + 1, dtype=np.int64) * (L * L),
        bfeat_pair=ALL_PAIRS,
    )
    meta = {
        "source_format": f"crfpp-{kind}",
        "source_file": os.path.basename(path),
        "crfpp_version": int(version),
        "crfpp_cost_factor": float(cost),
    }
    if tpl is not None:
        meta.update({"templates": text, "template_pad": True, "columns": int(xsize)})
    return CRFModel(space, np.concatenate([w_state, trans, w_big]), meta)


# --------------------------------------------------------------------------- writing


def _cannot(what: str) -> CrfkitError:
    return CrfkitError(f"cannot write a CRF++ model: {what}")


def crfpp_parts(model):
    """``(labels, templates, keys, values, weights, xsize)`` of a crfkit model in CRF++'s layout
    (keys sorted bytewise, ids in that order), or :class:`CrfkitError` naming what CRF++ cannot
    hold."""
    from ..features.templates import Templates

    sp, w = model.space, model.weights
    meta = model.meta if isinstance(model.meta, dict) else {}
    L = sp.n_labels
    src = check_template_model(model, "CRF++", "templates", _cannot)
    tpl = Templates.parse(src, name="<model templates>")
    lines = []
    for t in sorted(
        {id(t): t for t in tpl.unigram + tpl.bigram + tpl.bigram_observation}.values(),
        key=lambda t: t.line,
    ):
        if t.text[:1] not in ("U", "B"):
            raise _cannot(
                f"template {t.text!r} is a Wapiti pattern ({t.text[:1]!r}); CRF++ reads U and B"
            )
        for m in t.macros:
            if m.kind != "x":
                raise _cannot(f"template {t.text!r} uses %{m.kind}; CRF++ has only %x")
            if abs(m.row) > MAX_CONTEXT:
                raise _cannot(f"template {t.text!r} reaches {m.row} tokens away; CRF++ reaches 8")
        if any("%" in p for p in t.pieces if isinstance(p, str)):
            raise _cannot(f"template {t.text!r} has a literal '%'; CRF++ reads % as a macro")
        if "\0" in t.text or "\n" in t.text:
            raise _cannot(f"template {t.text!r} holds a NUL or newline")
        lines.append(t.text)
    for y in sp.labels:
        if not y or any(c.isspace() or c == "\0" for c in y):
            raise _cannot(
                f"label {y!r} is empty or holds white space or NUL, which CRF++ cannot read"
            )
    attrs = list(sp.attributes)
    battrs = list(sp.battributes)
    enc = [a.encode("utf-8") for a in attrs]
    benc = [a.encode("utf-8") for a in battrs]
    if not all(map(methodcaller("startswith", b"U"), enc)):
        a = next(a for a in attrs if not a.startswith("U"))
        raise _cannot(
            f"state feature attribute {a!r} does not start with U (no U template makes it)"
        )
    if not all(map(methodcaller("startswith", b"B"), benc)):
        a = next(a for a in battrs if not a.startswith("B"))
        raise _cannot(f"label-pair feature attribute {a!r} does not start with B")
    tkey = None
    if sp.n_trans:
        if not tpl.bigram:
            raise _cannot("the model has transition weights but no plain B template to hold them")
        tkey = tpl.bigram[0].text.encode("utf-8")
    allk = enc + benc + ([tkey] if tkey is not None else [])
    if b"\0" in b"".join(allk):
        raise _cannot("a feature string holds a NUL byte")
    kind = np.concatenate(
        [
            np.zeros(len(enc), np.int64),
            np.ones(len(benc), np.int64),
            np.full(len(allk) - len(enc) - len(benc), 2),
        ]
    )
    pos = np.concatenate(
        [
            np.arange(len(enc)),
            np.arange(len(benc)),
            np.zeros(len(allk) - len(enc) - len(benc), np.int64),
        ]
    )
    sarr = np.array(allk, dtype="S") if allk else np.zeros(0, "S1")
    order = np.argsort(sarr, kind="stable")
    sarr = sarr[order]
    if len(sarr) > 1 and np.any(sarr[1:] == sarr[:-1]):
        k = int(np.flatnonzero(sarr[1:] == sarr[:-1])[0])
        raise _cannot(f"feature string {sarr[k].decode()!r} occurs twice")
    keys = [allk[i] for i in order.tolist()]
    kind, pos = kind[order], pos[order]
    width = np.where(kind == 0, L, L * L)
    values = np.zeros(len(keys), np.int64)
    if len(keys):
        np.cumsum(width[:-1], out=values[1:])
    maxid = int(width.sum())
    if maxid >= 2**31:
        raise _cannot(f"{maxid} weights; CRF++ holds under 2**31")
    alpha = np.zeros(maxid)
    uid = np.empty(len(attrs), np.int64)
    uid[pos[kind == 0]] = values[kind == 0]
    bid = np.empty(len(battrs), np.int64)
    bid[pos[kind == 1]] = values[kind == 1]
    ns = sp.n_state
    if ns:
        alpha[uid[sp.feature_attr()] + sp.feat_label] = w[:ns]
    if tkey is not None:
        tid = int(values[kind == 2][0])
        ii, jj = np.nonzero(sp.trans_index >= 0)
        alpha[tid + ii * L + jj] = w[ns + sp.trans_index[ii, jj]]
    if sp.n_bigram:
        bo = sp.bigram_offset
        alpha[bid[sp.bfeature_attr()] + sp.bfeat_pair.astype(np.int64)] = w[bo : bo + sp.n_bigram]
    xsize = int(meta.get("columns") or (tpl.max_column() + 1))
    return list(sp.labels), lines, keys, values, alpha, xsize


def write(model, path, *, text: bool = False, **options) -> None:
    """Write ``model`` as a CRF++ 0.59 model at ``path``: the binary model ``crf_test -m`` reads
    (weights rounded to float32), or with ``text=True`` the text model of ``crf_learn -t``
    (``crf_learn -C`` turns it into a binary one).  Written to a temporary file and renamed.

    The model must have been trained from a column file with CRF++ templates (``U`` and ``B``
    lines, ``%x`` macros reaching at most 8 tokens, CRF++'s padding); what CRF++ cannot hold (dense
    features, Wapiti patterns, regex macros, stored constraints, labels with white space, NUL
    bytes) raises :class:`~crfkit.errors.CrfkitError` naming it."""
    if options:
        raise CrfkitError(f"unknown CRF++ writer options: {', '.join(sorted(options))}")
    from ..io.atomic import atomic_file

    labels, templates, keys, values, alpha, xsize = crfpp_parts(model)
    if text:
        parts = [
            f"version: {MODEL_VERSION}\ncost-factor: 1\nmaxid: {len(alpha)}\nxsize: {xsize}\n\n",
            "".join(y + "\n" for y in labels),
            "\n",
            "".join(t + "\n" for t in templates),
            "\n",
        ]
        for k in keys:
            if b"\n" in k or b"\r" in k:
                raise _cannot(f"feature string {k.decode()!r} holds a line break (text model)")
        body = b"".join(b"%d %s\n" % (v, k) for v, k in zip(values.tolist(), keys))
        weights = "\n".join(map("{:.16f}".format, alpha.tolist()))
        with atomic_file(path, what="the CRF++ model") as f:
            f.write("".join(parts).encode("utf-8"))
            f.write(body)
            f.write(b"\n")
            f.write(weights.encode("ascii"))
            if len(alpha):
                f.write(b"\n")
        return
    from ._crfpp_darts import build

    units = build(keys, values)
    ystr = b"".join(y.encode("utf-8") + b"\0" for y in labels)
    tstr = b"".join(t.encode("utf-8") + b"\0" for t in templates)
    tstr += b"\0" * (-(len(ystr) + len(tstr)) % 4)
    head = _HEAD.pack(MODEL_VERSION, 0, 1.0, len(alpha), xsize, units.nbytes, len(ystr))
    with atomic_file(path, what="the CRF++ model") as f:
        f.write(head)
        f.write(ystr)
        f.write(struct.pack("<I", len(tstr)))
        f.write(tstr)
        f.write(units.tobytes())
        f.write(alpha.astype("<f4").tobytes())
