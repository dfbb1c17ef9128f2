"""CRFModel: file round trip, pruning to non-zero weights, atomic writes, corrupted files, no
pickle."""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import pickle
import re
import struct
import zlib

import numpy as np
import pytest

import crfkit.model as model_mod
from conftest import random_sequences
from crfkit.errors import DataError, ModelError
from crfkit.features.encode import build
from crfkit.model import FORMAT_VERSION, MAGIC, CRFModel


def _model(seed=0, n_seq=15, support="observed", transitions=None, real=True, zero_frac=0.0):
    rng = np.random.default_rng(seed)
    X, Y = random_sequences(rng, n_seq, n_labels=4, real=real, n_attr=25, max_len=7)
    space, _ = build(X, Y, support=support, transitions=transitions)
    w = rng.normal(0, 2.0, space.n_features)
    if zero_frac:
        w[rng.random(len(w)) < zero_frac] = 0.0
    Xt, _ = random_sequences(
        rng, 20, n_labels=4, real=real, n_attr=30, max_len=7
    )  # a5..a29 partly unseen
    return CRFModel(space, w, meta={"note": "test", "n": 3}), X, Y, Xt


# The file layout (model.py docstring): MAGIC, uint32 header length, JSON header,
# payload, then the SHA-256 of every byte before it.  These helpers take a file
# apart and put a (possibly edited) one back together *validly*, so that a test
# reaches the check it is about instead of stopping at the checksum;
# test_file_helpers_match_the_format guards them against format changes.
DIGEST = 32


def _split(data):
    (hl,) = struct.unpack_from("<I", data, len(MAGIC))
    h0 = len(MAGIC) + 4
    return json.loads(data[h0 : h0 + hl].decode()), data[h0 + hl : -DIGEST], h0, hl


def _assemble(header, payload):
    hb = json.dumps(header, sort_keys=True).encode()
    head = MAGIC + struct.pack("<I", len(hb)) + hb
    return head + payload + hashlib.sha256(head + payload).digest()


def _no_temp_files(d):
    return [p for p in os.listdir(d) if p.startswith(".tmp-") or p.endswith(".tmp")] == []


def load_without_pickle(monkeypatch, path):
    """CRFModel.load with every unpickling entry point made to fail loudly.

    (Only around the load itself: numba's own kernel cache uses pickle.)
    """

    def boom(*a, **k):
        raise AssertionError("pickle used while loading a model")

    with monkeypatch.context() as mp:
        mp.setattr(pickle, "loads", boom)
        mp.setattr(pickle, "load", boom)
        mp.setattr(pickle, "Unpickler", boom)
        return CRFModel.load(path)


@pytest.mark.parametrize(
    "support,transitions", [("observed", "observed"), ("all", "all"), ("all", "observed")]
)
def test_save_load_round_trip(tmp_path, monkeypatch, support, transitions):
    m, X, Y, Xt = _model(1, support=support, transitions=transitions)
    path = tmp_path / "m.crfkit"
    size = m.save(path)
    assert size == os.path.getsize(path)
    assert sorted(os.listdir(tmp_path)) == ["m.crfkit"]
    m2 = load_without_pickle(monkeypatch, path)
    assert m2.labels == m.labels
    assert m2.space.attributes == m.space.attributes
    np.testing.assert_array_equal(m2.weights, m.weights)
    np.testing.assert_array_equal(m2.space.attr_ptr, m.space.attr_ptr)
    np.testing.assert_array_equal(m2.space.feat_label, m.space.feat_label)
    np.testing.assert_array_equal(m2.space.trans_index, m.space.trans_index)
    assert m2.meta == m.meta
    assert m2.state_features() == m.state_features()
    assert m2.transition_features() == m.transition_features()
    assert m2.tag(X + Xt) == m.tag(X + Xt)
    c1, c2 = m.encode(Xt), m2.encode(Xt)
    # (not bitwise: with fastmath re-association the summation order may depend on array alignment)
    np.testing.assert_allclose(m.marginals(c1)[0], m2.marginals(c2)[0], rtol=1e-13, atol=1e-15)
    # str paths work too, and a second save replaces the file
    m.weights[0] += 1.0
    m.save(str(path))
    assert CRFModel.load(str(path)).weights[0] == m.weights[0]
    assert _no_temp_files(tmp_path)


def test_unicode_labels_and_attributes(tmp_path):
    X = [[["w=Zürich", "s=日本"], ["w=ñ"]], [["w=\u00e9t\u00e9"]]]
    Y = [["B-LOC", "Ö"], ["日"]]
    space, _ = build(X, Y, support="all")
    m = CRFModel(space, np.arange(1, space.n_features + 1, dtype=float))
    m.save(tmp_path / "u.crfkit")
    m2 = CRFModel.load(tmp_path / "u.crfkit")
    assert m2.labels == ["B-LOC", "Ö", "日"]
    assert m2.space.attributes == m.space.attributes
    assert m2.tag(X) == m.tag(X)


def test_only_nonzero_weights_are_stored(tmp_path):
    m, X, Y, Xt = _model(2, support="all", transitions="all", zero_frac=0.5)
    nz_state = int(np.count_nonzero(m.weights[: m.space.n_state]))
    nz_trans = int(np.count_nonzero(m.weights[m.space.n_state :]))
    assert 0 < nz_state < m.space.n_state and 0 < nz_trans < m.space.n_trans
    m.save(tmp_path / "half.crfkit")
    m2 = CRFModel.load(tmp_path / "half.crfkit")
    assert m2.space.n_state == nz_state and m2.space.n_trans == nz_trans
    assert m2.space.n_features < m.space.n_features
    assert np.all(m2.weights != 0)
    # attributes whose every weight is zero are gone; the others are kept
    fa = m.space.feature_attr()
    live = {m.space.attributes[a] for a in np.unique(fa[m.weights[: m.space.n_state] != 0])}
    assert set(m2.space.attributes) == live
    # the non-zero features keep their weights, by name
    sf = {k: v for k, v in m.state_features().items() if v != 0}
    tf = {k: v for k, v in m.transition_features().items() if v != 0}
    assert m2.state_features() == sf and m2.transition_features() == tf
    # tagging, marginals and probabilities unchanged
    data = X + Xt
    assert m2.tag(data) == m.tag(data)
    np.testing.assert_allclose(
        m2.marginals(m2.encode(data))[0], m.marginals(m.encode(data))[0], rtol=1e-12, atol=1e-14
    )
    np.testing.assert_allclose(
        m2.sequence_probability(X, Y), m.sequence_probability(X, Y), rtol=1e-12
    )
    # pruning in memory does the same
    space, w = m.space.prune(m.weights)
    assert space.n_features == m2.space.n_features
    np.testing.assert_array_equal(w, m2.weights)
    # a smaller file than the dense model's
    full = CRFModel(m.space, np.where(m.weights == 0, 1.0, m.weights))
    assert m.save(tmp_path / "a") < full.save(tmp_path / "b")


def test_all_zero_model_round_trips(tmp_path):
    m, X, _, _ = _model(3)
    m0 = CRFModel(m.space, np.zeros_like(m.weights))
    m0.save(tmp_path / "z")
    m2 = CRFModel.load(tmp_path / "z")
    assert m2.space.n_features == 0 and m2.labels == m.labels
    assert m2.tag(X) == m0.tag(X)


# --------------------------------------------------------------------------- atomicity
def test_failed_replace_leaves_old_file_intact(tmp_path, monkeypatch):
    m, *_ = _model(4)
    path = tmp_path / "m.crfkit"
    m.save(path)
    old = path.read_bytes()

    def boom(*a, **k):
        raise OSError("disk on fire")

    monkeypatch.setattr(os, "replace", boom)
    m.weights[:] = 1.0
    with pytest.raises(OSError, match="disk on fire"):
        m.save(path)
    assert path.read_bytes() == old
    assert sorted(os.listdir(tmp_path)) == ["m.crfkit"]


def test_failure_while_writing_leaves_old_file_intact(tmp_path, monkeypatch):
    m, *_ = _model(5)
    path = tmp_path / "m.crfkit"
    m.save(path)
    old = path.read_bytes()

    def boom(fd):
        raise OSError("fsync failed")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(OSError):
        m.save(path)
    assert path.read_bytes() == old
    assert sorted(os.listdir(tmp_path)) == ["m.crfkit"]
    # a failure before anything exists leaves nothing behind
    with pytest.raises(OSError):
        m.save(tmp_path / "new.crfkit")
    assert sorted(os.listdir(tmp_path)) == ["m.crfkit"]


def test_interrupt_while_writing_cleans_up(tmp_path, monkeypatch):
    m, *_ = _model(6)
    path = tmp_path / "m.crfkit"

    def boom(fd):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(KeyboardInterrupt):
        m.save(path)
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------------- bad model files
@pytest.fixture
def saved(tmp_path):
    m, X, _, _ = _model(7, n_seq=6)
    path = tmp_path / "good.crfkit"
    m.save(path)
    return m, X, path.read_bytes(), tmp_path


def _expect_model_error(path, match=None):
    with pytest.raises(ModelError) as ei:
        CRFModel.load(path)
    assert str(path) in str(ei.value)
    if match:
        assert re.search(match, str(ei.value))
    return ei.value


def test_every_truncation_is_a_model_error(saved):
    m, X, data, d = saved
    p = d / "cut.crfkit"
    for n in range(len(data)):
        p.write_bytes(data[:n])
        _expect_model_error(p)


def test_every_flipped_payload_byte_is_a_model_error(saved):
    m, X, data, d = saved
    _, body, h0, hl = _split(data)
    p = d / "flip.crfkit"
    for pos in range(h0 + hl, len(data)):
        b = bytearray(data)
        b[pos] ^= 0x5A
        p.write_bytes(bytes(b))
        _expect_model_error(p, "corrupt|truncat|checksum")


def test_bad_magic(saved):
    m, X, data, d = saved
    p = d / "magic.crfkit"
    p.write_bytes(b"X" + data[1:])
    _expect_model_error(p, "magic")
    p.write_bytes(b"")
    _expect_model_error(p)
    p.write_bytes(b"some text file\n" * 10)
    _expect_model_error(p)


def test_missing_file(tmp_path):
    _expect_model_error(tmp_path / "nope.crfkit")


@pytest.mark.parametrize("version", [FORMAT_VERSION + 1, 99, "1", None])
def test_newer_or_invalid_format_version(saved, version):
    m, X, data, d = saved
    header, body, _, _ = _split(data)
    header["format_version"] = version
    p = d / "v.crfkit"
    p.write_bytes(_assemble(header, body))
    err = _expect_model_error(p)
    if version in (FORMAT_VERSION + 1, 99):
        assert str(version) in str(err) and "version" in str(err)


def test_rewritten_header_same_version_still_loads(saved):
    """The test's header rewriting itself is sound: an unchanged header re-serialised loads."""
    m, X, data, d = saved
    header, body, _, _ = _split(data)
    p = d / "same.crfkit"
    p.write_bytes(_assemble(header, body))
    assert CRFModel.load(p).tag(X) == m.tag(X)


class _Evil:
    """Unpickling this would create a directory (a visible side effect)."""

    def __init__(self, target):
        self.target = target

    def __reduce__(self):
        return (os.mkdir, (self.target,))


def test_pickle_payload_is_never_unpickled(saved, monkeypatch):
    m, X, data, d = saved
    target = str(d / "pwned")
    blob = zlib.compress(pickle.dumps(_Evil(target)))
    header, body, _, _ = _split(data)
    # replace the weights array by an object array holding the pickle, checksum made consistent
    header["arrays"]["weights"] = {
        "dtype": "|O",
        "shape": [1],
        "offset": len(body),
        "nbytes": len(blob),
    }
    body2 = body + blob
    header["payload_sha256"] = hashlib.sha256(body2).hexdigest()
    p = d / "evil.crfkit"
    p.write_bytes(_assemble(header, body2))
    with pytest.raises(ModelError, match=re.escape(str(p))):
        load_without_pickle(monkeypatch, p)
    assert not os.path.exists(target)
    # a plain pickle of a model is not a model file either
    p2 = d / "pickled.crfkit"
    p2.write_bytes(pickle.dumps(_Evil(target)))
    with pytest.raises(ModelError, match="magic"):
        load_without_pickle(monkeypatch, p2)
    assert not os.path.exists(target)


def test_model_module_has_no_pickle():
    src = inspect.getsource(model_mod)
    assert not re.search(r"import\s+pickle|pickle\.load|allow_pickle\s*=\s*True|np\.load\(", src)


def test_file_helpers_match_the_format(saved):
    m, X, data, d = saved
    header, payload, _, _ = _split(data)
    # a model without dense features is written as version 1, readable by every crfkit so far
    assert header["format_version"] == 1 and header["n_dense"] == 0
    assert hashlib.sha256(payload).hexdigest() == header["payload_sha256"]
    assert _assemble(header, payload) == data


def test_every_single_bit_flip_is_a_model_error(saved):
    """Header, payload, checksum: any flipped bit anywhere is detected (never KeyError, never
    garbage)."""
    m, X, data, d = saved
    p = d / "flip.crfkit"
    for pos in range(len(data)):
        b = bytearray(data)
        b[pos] ^= 1 << (pos % 8)  # every bit position occurs, every byte is hit
        p.write_bytes(bytes(b))
        _expect_model_error(p)


def test_flipped_weights_dtype_bit_is_detected(saved):
    """'<f8' -> '>f8' (one bit) would load byte-swapped weights if the header were not
    checksummed."""
    m, X, data, d = saved
    header, _, h0, hl = _split(data)
    assert header["arrays"]["weights"]["dtype"] == "<f8"
    hb = data[h0 : h0 + hl]
    pos = h0 + hb.index(b'"weights": {"dtype": "<f8"') + len(b'"weights": {"dtype": "')
    b = bytearray(data)
    b[pos] ^= 0x02  # '<' (0x3c) -> '>' (0x3e)
    p = d / "swapped.crfkit"
    p.write_bytes(bytes(b))
    _expect_model_error(p, "corrupt|checksum")


def _replace_array(header, payload, name, arr):
    """Append a new version of array ``name`` to the payload and point the header at it."""
    arr = np.ascontiguousarray(arr)
    blob = zlib.compress(arr.tobytes())
    header["arrays"][name] = {
        "dtype": arr.dtype.str,
        "shape": list(arr.shape),
        "offset": len(payload),
        "nbytes": len(blob),
    }
    return payload + blob


def _read_array(header, payload, name):
    spec = header["arrays"][name]
    raw = zlib.decompress(payload[spec["offset"] : spec["offset"] + spec["nbytes"]])
    return np.frombuffer(raw, dtype=np.dtype(spec["dtype"])).reshape(spec["shape"]).copy()


@pytest.mark.parametrize(
    "edit",
    [
        "bad_dtype",
        "header_list",
        "bad_offset",
        # regression tests: these escaped as KeyError/ValueError or loaded unchecked indices
        "drop_weights",
        "short_weights",
        "attr_nfeat_sum",
        "feat_label_range",
        "trans_index_range",
    ],
)
def test_consistent_checksums_but_inconsistent_content(saved, edit):
    """A file whose checksums are right but whose content is not a valid model: a ModelError naming
    it.

    (Such files come from a buggy or foreign writer, not from disk corruption;
    they must not load, and must not reach the kernels.)
    """
    m, X, data, d = saved
    header, payload, _, _ = _split(data)
    if edit == "drop_weights":
        del header["arrays"]["weights"]
    elif edit == "short_weights":
        payload = _replace_array(
            header, payload, "weights", _read_array(header, payload, "weights")[:-1]
        )
    elif edit == "attr_nfeat_sum":
        a = _read_array(header, payload, "attr_nfeat")
        a[0] += 1
        payload = _replace_array(header, payload, "attr_nfeat", a)
    elif edit == "feat_label_range":
        a = _read_array(header, payload, "feat_label").astype(np.int32)
        a[0] = len(m.labels) + 100
        payload = _replace_array(header, payload, "feat_label", a)
    elif edit == "trans_index_range":
        a = _read_array(header, payload, "trans_index")
        a[a == a.max()] = 1_000_000
        payload = _replace_array(header, payload, "trans_index", a)
    elif edit == "bad_dtype":
        header["arrays"]["feat_label"]["dtype"] = "no-such-type"
    elif edit == "bad_offset":
        header["arrays"]["attr_nfeat"]["offset"] += 1
    if edit == "header_list":
        hb = json.dumps([header]).encode()
        head = MAGIC + struct.pack("<I", len(hb)) + hb
        raw = head + payload + hashlib.sha256(head + payload).digest()
    else:
        header["payload_sha256"] = hashlib.sha256(payload).hexdigest()
        raw = _assemble(header, payload)
    p = d / f"{edit}.crfkit"
    p.write_bytes(raw)
    _expect_model_error(p)


# ------------------------------------------------------------------------ introspection
def test_sequence_probability_unknown_label_is_data_error():
    m, X, Y, _ = _model(8)
    bad = [list(y) for y in Y]
    bad[1][0] = "NOT-A-LABEL"
    with pytest.raises(DataError, match="NOT-A-LABEL"):
        m.sequence_probability(X, bad)


def test_top_features_and_counts():
    m, *_ = _model(9, zero_frac=0.3)
    top = m.top_features(5)
    mags = [abs(w) for _, _, w in top]
    assert mags == sorted(mags, reverse=True)
    assert mags[0] == np.abs(m.weights[: m.space.n_state]).max()
    sf = m.state_features()
    for a, lab, w in top:
        assert sf[(a, lab)] == w
    assert m.n_active == np.count_nonzero(m.weights)


def test_tag_rows_with_a_template_model(chunker):
    from crfkit.io.columns import read_columns_list
    from crfkit.pipeline import tag_columns

    model = CRFModel.load(chunker["model"])
    sents = read_columns_list(str(chunker["test"]), has_labels=True)
    rows = [s.columns for s in sents]
    assert model.tag_rows(rows) == tag_columns(model, str(chunker["test"])).labels
    # a token may be given as one whitespace-separated string
    assert model.tag_rows([[" ".join(tok) for tok in rows[0]]]) == model.tag_rows(rows[:1])
    assert all(s[0] != "I-NP" for s in model.tag_rows(rows, constraints="bio"))
    from crfkit.errors import DataError

    with pytest.raises(DataError, match="observation columns"):
        model.tag_rows([[["a", "b", "c"]]])
