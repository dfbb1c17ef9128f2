"""Model files (and the templates they carry) as untrusted input: issue 13, items 1-5, and a fuzz
test.

Every crafted file is made here, small: the decompression bombs are zlib members of
zeros (1 MB of file for 1 GiB of zeros).  What could take the machine's memory runs
in a child process under an address-space limit (``RLIMIT_AS``, the child's size
after its imports plus a margin), so that a regression fails the test (a
``MemoryError`` in the child) instead of killing the machine.

The file layout (``crfkit.model`` docstring): MAGIC, a uint32 header length, the
JSON header, the payload (zlib members placed by the header's ``arrays`` table),
the SHA-256 of every byte before it.  ``_split`` / ``_assemble`` take a file apart
and put an edited one back together with both checksums recomputed, so that an
edit reaches the check it is about instead of stopping at the checksum.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import struct
import textwrap
import threading
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import crfkit
from conftest import LimitedLoader
from crfkit import CRF, cli
from crfkit.errors import ModelError, TemplateError
from crfkit.features.encode import build
from crfkit.features.templates import MAX_ROW_OFFSET, Templates
from crfkit.model import MAGIC, MAX_HEADER_BYTES, CRFModel, FeatureSpace

SRC = os.path.dirname(os.path.dirname(os.path.abspath(crfkit.__file__)))
GIB = 1 << 30


# ------------------------------------------------------------------------------------------- file
# helpers
def _split(data: bytes) -> tuple[dict, bytes]:
    (hl,) = struct.unpack_from("<I", data, len(MAGIC))
    h0 = len(MAGIC) + 4
    return json.loads(data[h0 : h0 + hl].decode()), data[h0 + hl : -32]


def _assemble(header: dict, payload: bytes, payload_sha: bool = True) -> bytes:
    """A file with both checksums right (the header's payload SHA-256 too when ``payload_sha``)."""
    if payload_sha:
        header = dict(header, payload_sha256=hashlib.sha256(payload).hexdigest())
    hb = json.dumps(header, sort_keys=True).encode()
    head = MAGIC + struct.pack("<I", len(hb)) + hb
    return head + payload + hashlib.sha256(head + payload).digest()


def _zeros_member(n: int) -> bytes:
    """A zlib member of n zero bytes (1 MB for 1 GiB), made in milliseconds: the deflate blocks of 1
    MiB of zeros after a full flush (no back-references across it) are the same every time, so they
    are repeated; the Adler-32 of n zeros is ((n mod 65521) << 16) | 1."""
    chunk = 1 << 20
    if n <= 2 * chunk:
        return zlib.compress(bytes(n), 9)
    k, rem = divmod(n, chunk)
    c = zlib.compressobj(9)
    first = c.compress(bytes(chunk)) + c.flush(zlib.Z_FULL_FLUSH)
    again = c.compress(bytes(chunk)) + c.flush(zlib.Z_FULL_FLUSH)
    tail = c.compress(bytes(rem)) + c.flush(zlib.Z_FINISH)
    return first + again * (k - 1) + tail[:-4] + struct.pack(">I", ((n % 65521) << 16) | 1)


def test_zeros_member_helper():
    for n in (0, 5, 3 << 20, (3 << 20) + 17):
        assert zlib.decompress(_zeros_member(n)) == bytes(n)


def _put(header: dict, payload: bytes, name: str, blob: bytes, dtype=None, shape=None) -> bytes:
    """Append ``blob`` as array ``name`` (dtype, shape as given or unchanged) and point the table at
    it."""
    spec = dict(header["arrays"][name], offset=len(payload), nbytes=len(blob))
    if dtype is not None:
        spec["dtype"] = dtype
    if shape is not None:
        spec["shape"] = list(shape)
    header["arrays"][name] = spec
    return payload + blob


def _get(header: dict, payload: bytes, name: str) -> np.ndarray:
    s = header["arrays"][name]
    raw = zlib.decompress(payload[s["offset"] : s["offset"] + s["nbytes"]])
    return np.frombuffer(raw, dtype=s["dtype"]).reshape(s["shape"]).copy()


# ------------------------------------------------------------------------------------------ a real
# model
TEMPLATES = "U00:%x[0,0]\nU01:%x[0,1]\nU02:%x[-1,0]/%x[1,1]\nB01:%x[0,1]\nB\n"
SENTENCES = [
    [("the", "DT", "0.5", "B-NP"), ("cat", "NN", "1.0", "I-NP"), ("sat", "VBD", "-0.5", "B-VP")],
    [
        ("a", "DT", "0.25", "B-NP"),
        ("dog", "NN", "0.75", "I-NP"),
        ("ran", "VBD", "-1.0", "B-VP"),
        ("home", "NN", "0.1", "B-NP"),
    ],
    [("dogs", "NNS", "0.3", "B-NP"), ("bark", "VBP", "-0.2", "B-VP")],
]


def _column_text(with_labels: bool = True) -> str:
    return "".join(
        "".join(" ".join(tok if with_labels else tok[:-1]) + "\n" for tok in s) + "\n"
        for s in SENTENCES * 3
    )


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """A model with every block (state, transition, label-pair x observation, dense) and the
    metadata a column-file model carries (templates, padding, columns, dense columns, training
    settings)."""
    from crfkit.pipeline import train_columns

    d = tmp_path_factory.mktemp("hardening")
    data = d / "train.txt"
    data.write_text(_column_text())
    res = train_columns(
        str(data),
        Templates.parse(TEMPLATES, name="t"),
        dense_columns="3",
        max_iterations=30,
        l2=0.01,
    )
    model = res.model
    path = d / "model.crfkit"
    model.save(path)
    s = CRFModel.load(path).space
    assert s.n_state and s.n_trans and s.n_bigram and s.n_dense == 1
    return {"dir": d, "data": data, "model": model, "path": path, "bytes": path.read_bytes()}


def _write(work, name: str, data: bytes):
    p = work["dir"] / name
    p.write_bytes(data)
    return p


@pytest.fixture(scope="module")
def loader():
    ld = LimitedLoader()
    yield ld
    ld.close()


def _refused(r: dict, path, match: str | None = None) -> None:
    """``r`` (a LimitedLoader answer) is a ModelError naming ``path`` (and matching ``match``)."""
    assert r["outcome"] == "CrfkitError", r
    assert r["type"] == "ModelError" and str(path) in r["message"], r
    if match:
        assert any(m in r["message"] for m in match.split("|")), r


# ------------------------------------------------------------------ 1. decompression bombs
def test_zlib_bomb_in_an_array_is_refused_in_bounded_memory(work, loader):
    """1 GiB of zeros in place of the weights (1 MB of file, checksums right): refused after the
    declared size, under a limit of 1.5 GB over the child's size (before the fix: the whole GiB,
    then another copy for the reshape, so a MemoryError here; 4.1 GB RSS and 21 s for a 2 GiB member
    when unlimited)."""
    header, payload = _split(work["bytes"])
    payload = _put(header, payload, "weights", _zeros_member(GIB))
    p = _write(work, "bomb.crfkit", _assemble(header, payload))
    assert p.stat().st_size < 2 << 20
    r = loader.ask(p)
    _refused(r, p, "more than")
    assert r["grew"] < (256 << 20), r


def test_bomb_with_counts_to_match_is_refused_before_allocating(work, loader):
    """A file whose counts and shapes all agree with 1 GiB of declared arrays (2 MB of zeros
    members): refused by the ceiling on declared size against payload size, before any array is
    allocated."""
    header, payload = _split(work["bytes"])
    n = GIB // 8
    L = header["n_labels"]
    header.update(n_state=n - header["n_trans"] - header.get("n_bigram", 0) - header["n_dense"] * L)
    payload = _put(header, payload, "weights", _zeros_member(8 * n), shape=[n])
    payload = _put(
        header,
        payload,
        "feat_label",
        _zeros_member(header["n_state"]),
        dtype="|u1",
        shape=[header["n_state"]],
    )
    p = _write(work, "bomb2.crfkit", _assemble(header, payload))
    r = loader.ask(p)
    _refused(r, p, "ceiling")
    assert r["grew"] < (64 << 20), r


@pytest.mark.parametrize("entry", ["info", "tag", "estimator"])
def test_bomb_reaches_no_entry_point(work, capsys, entry):
    header, payload = _split(work["bytes"])
    payload = _put(header, payload, "weights", _zeros_member(64 << 20))
    p = _write(work, f"bomb-{entry}.crfkit", _assemble(header, payload))
    if entry == "estimator":
        with pytest.raises(ModelError, match="more than"):
            CRF(model_filename=str(p)).predict([[{"w": "the"}]])
        return
    argv = ["info", "-m", str(p)] if entry == "info" else ["tag", "-m", str(p), str(work["data"])]
    assert cli.main(argv) != 0
    err = capsys.readouterr().err
    assert str(p) in err and "more than" in err and "Traceback" not in err


def test_member_shorter_than_declared_or_with_trailing_bytes(work):
    header, payload = _split(work["bytes"])
    w = _get(header, payload, "weights")
    for blob, why in (
        (zlib.compress(w[:-1].tobytes()), "declares"),
        (zlib.compress(w.tobytes()) + b"junk", "after the end"),
        (zlib.compress(w.tobytes())[:-6], "cut short"),
    ):
        h = json.loads(json.dumps(header))
        p = _write(work, "short.crfkit", _assemble(h, _put(h, payload, "weights", blob)))
        with pytest.raises(ModelError, match=why):
            CRFModel.load(p)


def test_two_lane_load_reports_errors_as_a_serial_load_would(work):
    """The checksums and the arrays are read in two lanes at once (modelfile._checked_arrays: a
    thread hashes and inflates every array but the largest, the caller inflates the largest): a
    checksum mismatch is reported whatever else is wrong, and of several broken arrays the first in
    file order, in whichever lane it broke."""
    header, payload = _split(work["bytes"])
    specs = header["arrays"]
    largest = max(specs, key=lambda n: specs[n]["nbytes"])
    other = next(n for n in specs if n != largest and specs[n]["nbytes"] > 8)
    # the broken members are appended to the payload in this order: the first is first in the file
    for broken in ([largest], [other], [largest, other], [other, largest]):
        expect = broken[0]
        h = json.loads(json.dumps(header))
        pl = payload
        for name in broken:  # a member cut short: inflating it fails
            s0 = h["arrays"][name]
            pl = _put(h, pl, name, pl[s0["offset"] : s0["offset"] + s0["nbytes"] - 6])
        data = _assemble(h, pl)
        with pytest.raises(ModelError, match=f"array {expect}"):
            CRFModel.load(_write(work, "lanes.crfkit", data))
        # the same file with its last checksum byte flipped: the checksum comes first
        bad = data[:-1] + bytes([data[-1] ^ 1])
        with pytest.raises(ModelError, match="checksum mismatch"):
            CRFModel.load(_write(work, "lanes.crfkit", bad))


@pytest.mark.parametrize(
    "dtype, bad", [("<i8", (1 << 32) + 1), ("<u8", (1 << 32) + 1), ("<i8", -1), ("<u4", 1 << 31)]
)
def test_state_feature_labels_are_checked_before_narrowing(work, dtype, bad):
    """feat_label is checked on the stored values, then narrowed to int32: a wide value whose int32
    cast would land inside the label table (2**32 + 1 -> 1) is refused, not loaded as label 1."""
    header, payload = _split(work["bytes"])
    fl = _get(header, payload, "feat_label").astype(dtype)
    ok = json.loads(json.dumps(header))
    m = CRFModel.load(
        _write(
            work,
            "wide_ok.crfkit",
            _assemble(
                ok, _put(ok, payload, "feat_label", zlib.compress(fl.tobytes()), dtype=dtype)
            ),
        )
    )
    np.testing.assert_array_equal(m.space.feat_label, fl)  # wider types load when the values fit
    fl[len(fl) // 2] = bad
    h = json.loads(json.dumps(header))
    p = _write(
        work,
        "wide.crfkit",
        _assemble(h, _put(h, payload, "feat_label", zlib.compress(fl.tobytes()), dtype=dtype)),
    )
    with pytest.raises(ModelError, match="label outside the label table"):
        CRFModel.load(p)


# ------------------------------------------------------------------ 2. read the header first,
# stream the rest
def test_dev_zero_and_large_wrong_files_are_refused_at_the_magic(work, loader, tmp_path):
    """Before the fix the whole file was read before the magic check: /dev/zero ended in MemoryError
    (7.5 GB under an 8 GiB limit), and so does a 4 GiB sparse file under this 1.5 GB limit."""
    sparse = tmp_path / "sparse.bin"
    with open(sparse, "wb") as f:
        f.truncate(4 * GIB)
    for path in ("/dev/zero", sparse):
        r = loader.ask(path)
        _refused(r, path, "magic")
        assert r["grew"] < (64 << 20), r


def test_header_length_and_table_are_checked_before_reading_on(work, loader, tmp_path):
    """A valid magic followed by a 4 GiB header length, or by a header whose array table points past
    the end of the file: refused from the header, before the payload is read."""
    sparse = tmp_path / "hl.crfkit"
    with open(sparse, "wb") as f:
        f.write(MAGIC + struct.pack("<I", 0xFFFFFFFF))
        f.truncate(5 * GIB)
    _refused(loader.ask(sparse), sparse, f"over the {MAX_HEADER_BYTES}-byte limit")
    header, payload = _split(work["bytes"])
    header["arrays"]["weights"]["offset"] = len(payload) + 10
    p = _write(work, "offset.crfkit", _assemble(header, payload))
    _refused(loader.ask(p), p, "array table needs")
    # a good model followed by 4 GiB (sparse) of something: refused from the table, not hashed
    # through
    p = _write(work, "tail.crfkit", work["bytes"])
    with open(p, "r+b") as f:
        f.truncate(4 * GIB)
    r = loader.ask(p)
    _refused(r, p, "bytes after the last array")
    assert r["grew"] < (64 << 20), r


def test_model_loads_from_a_pipe(work, tmp_path):
    """A non-seekable file (a FIFO, `<(cat model)`) is copied to a temporary file as it is read."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)

    def feed():
        with open(fifo, "wb") as f:
            f.write(work["bytes"])

    t = threading.Thread(target=feed)
    t.start()
    try:
        m = CRFModel.load(fifo)
    finally:
        t.join(10)
    assert np.array_equal(m.weights, CRFModel.load(work["path"]).weights)


# ------------------------------------------------------------------ 3. template offsets
@pytest.mark.parametrize(
    "offset", ["30000000", "99999999999999999999", "-1001", "1001", "1" * 5000]
)
def test_template_offset_beyond_the_limit_is_a_file_line_error(tmp_path, offset, loader):
    """Before the fix: 30000000 built padding tuples of that size (5.1 GB, 26 s), 20 digits did not
    finish (MemoryError at 8 GiB after 55 s), 5,000 digits raised a raw ValueError."""
    p = tmp_path / "t.txt"
    p.write_text(f"# comment\nU00:%x[0,0]\nU01:%x[{offset},0]\nB\n")
    r = loader.ask(
        code=textwrap.dedent(f"""
        from crfkit.features.templates import Templates
        Templates.from_file({str(p)!r}).apply([["a"], ["b"]])
    """)
    )
    assert r["outcome"] == "CrfkitError" and r["type"] == "TemplateError", r
    assert (
        r["message"].startswith(f"{p}:3: row offset ")
        and f"-{MAX_ROW_OFFSET}..{MAX_ROW_OFFSET}" in r["message"]
    )
    assert len(r["message"]) < 300
    assert r["grew"] < (64 << 20), r


@pytest.mark.parametrize(
    "col, why",
    [
        ("100000", "over the limit"),
        ("99999999999999999999999", "over the limit"),
        ("-5", ">= 0"),
        ("-" + "9" * 5000, ">= 0"),
    ],
)
def test_template_column_limits(col, why):
    with pytest.raises(TemplateError, match=why) as e:
        Templates.parse(f"U00:%x[0,{col}]\n", name="t.txt")
    assert str(e.value).startswith("t.txt:1: ") and len(str(e.value)) < 300


row_st = st.one_of(
    st.integers(-3, 3),
    st.integers(-MAX_ROW_OFFSET, MAX_ROW_OFFSET),
    st.sampled_from([-MAX_ROW_OFFSET, MAX_ROW_OFFSET, -33, 33, -32, 32]),
)
macro_st = st.tuples(st.sampled_from("xXtTmM"), row_st, st.integers(0, 1)).map(
    lambda k: f"%{k[0]}[{k[1]},{k[2]}]" if k[0] in "xX" else f'%{k[0]}[{k[1]},{k[2]},"[ab]"]'
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.lists(st.one_of(macro_st, st.sampled_from(["/", ":", "u"])), min_size=1, max_size=4).map(
            lambda ps: "U" + "".join(ps)
        ),
        min_size=1,
        max_size=4,
    ),
    st.lists(st.lists(st.sampled_from(["a", "B", "ab", "c"]), min_size=2, max_size=2), max_size=6),
)
def test_far_offsets_match_the_reference(lines, sent):
    """Offsets anywhere in the allowed range (the padding made lazily past INLINE_PAD tokens) give
    what the plain reference expansion gives, padded and not."""
    t = Templates.parse("\n".join(lines))
    n = len(sent)
    assert t.apply(sent) == [[u.expand(sent, i) for u in t.unigram] for i in range(n)]
    assert t.apply(sent, pad=False) == [
        [u.expand(sent, i) for u in t.unigram if all(0 <= i + m.row < n for m in u.macros)]
        for i in range(n)
    ]


def test_offset_bomb_stored_in_a_model(work, loader, capsys):
    """A model whose stored templates hold %x[30000000,0]: `info` and `tag` compiled them (4.2 GB,
    34 s for `crfkit info` before the fix); now the load refuses it, naming the model file and the
    template."""
    header, payload = _split(work["bytes"])
    header["meta"]["templates"] = "U00:%x[0,0]\nU01:%x[30000000,0]\nB\n"
    p = _write(work, "tbomb.crfkit", _assemble(header, payload))
    r = loader.ask(p)
    _refused(r, p, "(stored templates):2: row offset 30000000")
    for argv in (["info", "-m", str(p)], ["tag", "-m", str(p), str(work["data"])]):
        assert cli.main(argv) != 0
        err = capsys.readouterr().err
        assert f"{p} (stored templates):2:" in err and "%x[30000000,0]" in err


# ------------------------------------------------------------------ 4. metadata
META_CASES = [
    ("columns", "two", "whole number"),
    ("columns", -1, "whole number"),
    ("columns", True, "whole number"),
    ("columns", 1, "column 1"),  # the templates read column 1
    ("template_pad", "yes", "true or false"),
    ("templates", 5, "string"),
    ("templates", "X00:%x[0,0]\n", "(stored templates):1: unknown template type"),
    ("templates", "U00:%x[0,\n", "(stored templates):1: unterminated macro"),
    ("dense_columns", "3", "list"),
    ("dense_columns", [0], "list"),
    ("dense_columns", [3, 3], "2 columns for 1 dense"),
    ("dense_columns", [4], "beyond the 3 observation columns"),
    ("l2", "x", "finite number"),
    ("l2", -1.0, "finite number"),
    ("n_train", 1.5, "whole number"),
    ("iterations", None, "whole number"),
    ("algorithm", 3, "string"),
    ("input_format", ["crfsuite"], "string"),
]


@pytest.mark.parametrize("key, value, why", META_CASES)
def test_metadata_fields_are_validated_on_load(work, key, value, why):
    header, payload = _split(work["bytes"])
    header["meta"][key] = value
    p = _write(work, f"meta-{key}.crfkit", _assemble(header, payload))
    with pytest.raises(ModelError) as e:
        CRFModel.load(p)
    assert str(p) in str(e.value) and why in str(e.value)
    if not key.startswith("template"):
        assert repr(key) in str(e.value)


def test_meta_columns_two_in_crfkit_tag(work, capsys):
    """The issue's case: a TypeError traceback from `crfkit tag` before the fix."""
    header, payload = _split(work["bytes"])
    header["meta"]["columns"] = "two"
    p = _write(work, "two.crfkit", _assemble(header, payload))
    assert cli.main(["tag", "-m", str(p), str(work["data"])]) != 0
    err = capsys.readouterr().err
    assert f"{p}: metadata field 'columns' is 'two'" in err


def test_string_l2_with_a_huge_n_train_is_refused(work, loader):
    """`crfkit info` printed l2 * n_train / 2: with l2 a string that is a string repeated n_train
    times."""
    header, payload = _split(work["bytes"])
    header["meta"].update(l2="xx", n_train=10**12 - 1)
    p = _write(work, "l2.crfkit", _assemble(header, payload))
    _refused(loader.ask(p, cli_data=work["data"]), p, "'l2'")


def test_unknown_metadata_is_kept(work):
    header, payload = _split(work["bytes"])
    header["meta"]["user"] = {"anything": [1, "two", None]}
    p = _write(work, "user.crfkit", _assemble(header, payload))
    assert CRFModel.load(p).meta["user"] == {"anything": [1, "two", None]}


# ------------------------------------------------------------------ 5. pickling keeps every block
def _all_blocks_model() -> CRFModel:
    rng = np.random.default_rng(3)
    X = [[["a", "b"], ["c"], ["a"]], [["b"], ["c", "d"]], [["d"], ["a"], ["b"], ["c"]]]
    B = [[[f"B:{x}" for x in tok] for tok in s] for s in X]
    Y = [["P", "Q", "R"], ["Q", "P"], ["R", "R", "P", "Q"]]
    dense = [rng.normal(size=(len(s), 2)) for s in X]
    space, _ = build(X, Y, B=B, dense=dense, dense_names=["e0", "e1"])
    assert space.n_state and space.n_trans and space.n_bigram and space.n_dense == 2
    return CRFModel(space, rng.normal(size=space.n_features), {"note": "blocks"})


def _same_model(a: CRFModel, b: CRFModel) -> None:
    assert np.array_equal(a.weights, b.weights) and a.meta == b.meta
    assert a.state_features() == b.state_features()
    assert a.transition_features() == b.transition_features()
    assert a.bigram_features() == b.bigram_features() and a.bigram_features()
    assert a.dense_features() == b.dense_features() and a.dense_features()


def test_feature_space_pickles_every_block_and_no_lookup_table():
    m = _all_blocks_model()
    m.space.attr_index, m.space.battr_index, m.space.label_index  # noqa: B018 - lookup tables built
    back = pickle.loads(pickle.dumps(m))
    assert not {"attr_index", "battr_index", "label_index", "n_trans"} & set(back.space.__dict__)
    _same_model(m, back)


def test_estimator_with_model_filename_pickles_bigram_models(tmp_path, work):
    """Before the fix: "ValueError: 10 weights for 8 features" (CRF.__getstate__ rebuilt the space
    without its label-pair x observation block)."""
    for m, name in ((_all_blocks_model(), "blocks.crfkit"), (work["model"], "trained.crfkit")):
        p = tmp_path / name
        m.save(p)
        crf = CRF(model_filename=str(p))
        crf.classes_  # noqa: B018 - loads the model
        back = pickle.loads(pickle.dumps(crf))
        _same_model(crf.model_, back.model_)
        assert back.model_filename == str(p)


def test_unpickling_checks_the_space():
    m = _all_blocks_model()
    state = m.space.__getstate__()
    state["bfeat_pair"] = state["bfeat_pair"] + 1000
    with pytest.raises(ValueError, match="label pair"):
        FeatureSpace.__new__(FeatureSpace).__setstate__(state)


# ------------------------------------------------------------------ 6. fuzz: every case ends in a
# CrfkitError
def _extend(children):
    return st.one_of(
        st.lists(children, max_size=3), st.dictionaries(st.text(max_size=6), children, max_size=3)
    )


JSON_VALUE = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.integers(-3, 300),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=8),
        st.sampled_from(
            [
                "<f8",
                ">f8",
                "|u1",
                "<i4",
                "<u2",
                "|O",
                "<U4",
                "V8",
                "<c16",
                "S3",
                "|b1",
                "<M8[s]",
                "f8,i4",
                "<f2",
                "[0]",
                "U00:%x[0,0]\n",
                "U00:%x[9,0]\n",
            ]
        ),
    ),
    _extend,
    max_leaves=6,
)


HEADER_KEYS = [
    "format_version",
    "n_labels",
    "n_attributes",
    "n_state",
    "n_trans",
    "n_dense",
    "n_bigram",
    "n_battributes",
    "arrays",
    "meta",
    "format",
]
ARRAY_NAMES = [
    "attr_blob",
    "attr_lens",
    "label_blob",
    "label_lens",
    "attr_nfeat",
    "feat_label",
    "trans_index",
    "weights",
    "dense_blob",
    "dense_lens",
    "battr_blob",
    "battr_lens",
    "battr_nfeat",
    "bfeat_pair",
]
META_KEYS = [
    "templates",
    "template_pad",
    "columns",
    "dense_columns",
    "l2",
    "l1",
    "n_train",
    "iterations",
    "algorithm",
    "status",
    "input_format",
    "train_file",
    "support",
    "transitions",
    "min_freq",
]


@st.composite
def mutated_file(draw, base: bytes) -> bytes:
    header, payload = _split(base)
    kind = draw(
        st.sampled_from(
            [
                "flip",
                "flip_rehashed",
                "truncate",
                "truncate_rehashed",
                "header_field",
                "array_field",
                "meta_field",
                "array_values",
                "array_bomb",
                "delete",
            ]
        )
    )
    if kind == "flip":
        b = bytearray(base)
        for _ in range(draw(st.integers(1, 4))):
            b[draw(st.integers(0, len(b) - 1))] ^= draw(st.integers(1, 255))
        return bytes(b)
    if kind == "flip_rehashed":  # the flips reach the decompressor and the content checks
        b = bytearray(payload)
        for _ in range(draw(st.integers(1, 4))):
            b[draw(st.integers(0, len(b) - 1))] ^= draw(st.integers(1, 255))
        return _assemble(header, bytes(b))
    if kind == "truncate":
        return base[: draw(st.integers(0, len(base) - 1))]
    if kind == "truncate_rehashed":
        return _assemble(header, payload[: draw(st.integers(0, len(payload)))])
    if kind == "header_field":
        header[draw(st.sampled_from(HEADER_KEYS))] = draw(JSON_VALUE)
    elif kind == "delete":
        where = draw(st.sampled_from(["header", "arrays", "spec"]))
        if where == "header":
            header.pop(draw(st.sampled_from(HEADER_KEYS)), None)
        elif where == "arrays":
            header["arrays"].pop(draw(st.sampled_from(ARRAY_NAMES)), None)
        else:
            spec = header["arrays"][draw(st.sampled_from(sorted(header["arrays"])))]
            spec.pop(draw(st.sampled_from(["dtype", "shape", "offset", "nbytes"])))
    elif kind == "array_field":
        name = draw(st.sampled_from(ARRAY_NAMES + ["extra"]))
        spec = header["arrays"].setdefault(name, dict(header["arrays"]["weights"]))
        field = draw(st.sampled_from(["dtype", "shape", "offset", "nbytes"]))
        spec[field] = draw(
            st.one_of(
                JSON_VALUE,
                st.integers(-5, 5 + len(payload)),
                st.lists(st.integers(-2, 2**40), max_size=3),
            )
        )
    elif kind == "meta_field":
        header["meta"][draw(st.sampled_from(META_KEYS + ["user"]))] = draw(JSON_VALUE)
    elif kind == "array_values":  # same dtype and shape, values changed: the content checks
        name = draw(st.sampled_from(sorted(header["arrays"])))
        a = _get(header, payload, name)
        if a.size:
            flat = a.reshape(-1)
            for _ in range(draw(st.integers(1, 3))):
                i = draw(st.integers(0, a.size - 1))
                if a.dtype.kind == "f":
                    flat[i] = draw(st.floats(allow_nan=True, allow_infinity=True, width=64))
                else:
                    info = np.iinfo(a.dtype)
                    flat[i] = draw(st.integers(int(info.min), int(info.max)))
        new_dtype = draw(st.sampled_from([None, None, "<i8", "<u4", "<f8", "|i1"]))
        if new_dtype is not None:
            with np.errstate(invalid="ignore", over="ignore"):
                a = a.astype(new_dtype)
        payload = _put(
            header, payload, name, zlib.compress(a.tobytes()), dtype=a.dtype.str, shape=a.shape
        )
    elif kind == "array_bomb":  # zeros, declared or not, up to 64 MiB
        name = draw(st.sampled_from(sorted(header["arrays"])))
        n = draw(st.sampled_from([0, 1, 7, 1 << 16, 1 << 24, 64 << 20]))
        itemsize = np.dtype(header["arrays"][name]["dtype"]).itemsize
        shape = draw(st.sampled_from([None, [n // itemsize], [n // itemsize + 1]]))
        payload = _put(header, payload, name, _zeros_member(n), shape=shape)
    return _assemble(header, payload, payload_sha=draw(st.booleans()) or kind != "header_field")


def _fuzz_one(work, loader, data: bytes) -> None:
    p = _write(work, "fuzz.crfkit", data)
    r = loader.ask(p, cli_data=work["data"])
    assert r["outcome"] in ("ok", "CrfkitError"), r
    if r["outcome"] == "CrfkitError":
        assert str(p) in r["message"] or r["type"] != "ModelError", r
    assert r["seconds"] < 30, r


FUZZ = dict(
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)


@settings(max_examples=300, **FUZZ)
@given(data=st.data())
def test_fuzz_model_loader(work, loader, data):
    """Random byte flips, truncations, header / array table / metadata mutations with the checksums
    recomputed, changed array values and dtypes, zeros bombs: loading (and, when that succeeds,
    `crfkit info` and `crfkit tag`) ends in a CrfkitError or a model, never another exception, in a
    child under a 1.5 GB address-space limit, each case in bounded time."""
    _fuzz_one(work, loader, data.draw(mutated_file(work["bytes"])))


@pytest.mark.slow
@settings(max_examples=5000, **FUZZ)
@given(data=st.data())
def test_fuzz_model_loader_long(work, loader, data):
    _fuzz_one(work, loader, data.draw(mutated_file(work["bytes"])))


def test_fuzz_reaches_past_the_checksum(work):
    """The mutations with recomputed checksums reach the array and metadata checks (a sanity check
    of the fuzz test's own helpers: an unchanged file reassembled loads; a changed count is refused
    by its check)."""
    header, payload = _split(work["bytes"])
    assert _assemble(header, payload) == work["bytes"]
    header["n_state"] += 1
    p = _write(work, "count.crfkit", _assemble(header, payload))
    with pytest.raises(ModelError, match="expected .* from the header's counts"):
        CRFModel.load(p)


# ------------------------------------------------------------------ the string tables (decoded
# once, then sliced)
@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=6), max_size=12))
def test_string_table_round_trip(strings):
    from crfkit.features.space import pack_strings as _pack_strings
    from crfkit.features.space import unpack_strings as _unpack_strings

    blob, lens = _pack_strings(strings)
    assert _unpack_strings(blob, lens) == strings


def test_string_cut_inside_a_character_is_refused(tmp_path):
    X, Y = [[["a"], ["b"]]], [["é", "中"]]
    space, _ = build(X, Y)
    p = tmp_path / "u.crfkit"
    CRFModel(space, np.ones(space.n_features)).save(p)
    header, payload = _split(p.read_bytes())
    lens = _get(header, payload, "label_lens")
    assert sorted(lens.tolist()) == [2, 3]
    lens[0] += 1
    lens[1] -= 1  # the second label now starts inside the first one's last character
    p.write_bytes(
        _assemble(header, _put(header, payload, "label_lens", zlib.compress(lens.tobytes())))
    )
    with pytest.raises(ModelError, match="inside a UTF-8 character|decode"):
        CRFModel.load(p)


def test_templates_built_in_code_obey_the_offset_limit():
    from crfkit.features.templates import Macro, Template

    far = Template("U", "U:far", ("U:", Macro(MAX_ROW_OFFSET + 1, 0)), 1)
    with pytest.raises(TemplateError, match="limit"):
        Templates([far], name="code")
    edge = Template("U", "U:edge", ("U:", Macro(-MAX_ROW_OFFSET, 0)), 1)
    assert Templates([edge]).apply([["a"], ["b"]]) == [
        [f"U:_B-{MAX_ROW_OFFSET}"],
        [f"U:_B-{MAX_ROW_OFFSET - 1}"],
    ]
