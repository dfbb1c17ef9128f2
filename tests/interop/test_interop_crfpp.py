"""CRF++ 0.59 models (crfkit.interop.crfpp): written and read back, checked against a small
reference tagger written here from CRF++'s file layout and scoring (its own parser of the bytes,
its own double-array walk, its own template expansion, brute-force sums over label paths), so the
suite needs no CRF++; the real ``crf_test`` round trips are in
benchmarks/peers/interop_crfpp_wapiti.py."""

from __future__ import annotations

import itertools
import os
import struct
import time
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crfkit.errors import CrfkitError, ModelError
from crfkit.features.rows import row_inputs
from crfkit.features.space import FeatureSpace
from crfkit.interop import _crfpp_darts as darts
from crfkit.interop import crfpp
from crfkit.model import CRFModel

TEMPLATES = "U00:%x[0,0]\nU01:%x[-1,0]/%x[0,0]\nU02:%x[1,1]\n\nB01:%x[0,1]\nB\n"
LABELS = ["B-NP", "I-NP", "O"]
WORDS = ["the", "cat", "sat", "on", "mat", "é"]
TAGS = ["DT", "NN", "VB", "IN"]


def random_rows(rng, n_seq=6, max_len=4):
    return [
        [
            [str(rng.choice(WORDS)), str(rng.choice(TAGS))]
            for _ in range(int(rng.integers(1, max_len + 1)))
        ]
        for _ in range(n_seq)
    ]


def make_model(rng, templates=TEMPLATES, labels=LABELS, rows=None, sparse=False) -> CRFModel:
    """A crfkit model over every attribute the templates give on ``rows``, with random weights
    (``sparse``: state features for a random subset of the labels only)."""
    rows = rows or random_rows(rng, 12)
    meta = {"templates": templates, "template_pad": True, "columns": 2}
    X, B, _ = row_inputs(meta, rows)
    attrs = sorted({a for s in X for t in s for a in t})
    battrs = sorted({a for s in B for t in s[1:] for a in t}) if B else []
    L = len(labels)
    feat_label, attr_ptr = [], [0]
    for _ in attrs:
        ls = [j for j in range(L) if not sparse or rng.random() < 0.6]
        feat_label += ls
        attr_ptr.append(len(feat_label))
    has_b = any(line.strip() == "B" for line in templates.splitlines())
    ti = np.arange(L * L).reshape(L, L) if has_b else np.full((L, L), -1)
    space = FeatureSpace(
        labels=list(labels),
        attributes=attrs,
        attr_ptr=np.array(attr_ptr),
        feat_label=np.array(feat_label),
        trans_index=ti,
        battributes=battrs,
        battr_ptr=np.arange(len(battrs) + 1) * L * L,
        bfeat_pair=np.tile(np.arange(L * L), len(battrs)),
    )
    w = rng.normal(0, 1.0, space.n_features)
    return CRFModel(space, w, dict(meta))


# --------------------------------------------------------------------------- reference tagger
class RefCrfpp:
    """CRF++'s tagger from its file layout, independent of crfkit.interop: parses the binary bytes,
    walks the double array as crf_test does, expands the templates with CRF++'s padding and sums
    the scores of every label path."""

    def __init__(self, data: bytes):
        version, typ, cost, maxid, xsize, dsize, ysize = struct.unpack_from("<IidIIII", data)
        assert version == 100 and typ == 0
        off = 32
        self.labels = data[off : off + ysize].decode().split("\0")[:-1]
        off += ysize
        (tsize,) = struct.unpack_from("<I", data, off)
        off += 4
        self.templates = [t.decode() for t in data[off : off + tsize].split(b"\0") if t]
        off += tsize
        self.da = np.frombuffer(data, dtype="<i4", count=dsize // 4, offset=off).reshape(-1, 2)
        off += dsize
        self.alpha = np.frombuffer(data, dtype="<f4", count=maxid, offset=off).astype(np.float64)
        assert off + 4 * maxid == len(data)

    def find(self, key: str) -> int:
        base, check = self.da[:, 0], self.da[:, 1].view(np.uint32)
        b = int(base[0])
        for ch in key.encode():
            p = b + ch + 1
            if int(check[p]) != b:
                return -1
            b = int(base[p])
        return -int(base[b]) - 1 if int(check[b]) == b and base[b] < 0 else -1

    @staticmethod
    def expand(t: str, rows, i: int) -> str:
        out, k = [], 0
        while k < len(t):
            if t.startswith("%x[", k):
                end = t.index("]", k)
                r, c = map(int, t[k + 3 : end].split(","))
                j = i + r
                out.append(
                    f"_B{j}"
                    if j < 0
                    else f"_B+{j - len(rows) + 1}"
                    if j >= len(rows)
                    else rows[j][c]
                )
                k = end + 1
            else:
                out.append(t[k])
                k += 1
        return "".join(out)

    def scores(self, rows):
        L, T = len(self.labels), len(rows)
        node = np.zeros((T, L))
        edge = np.zeros((T, L, L))
        for i in range(T):
            for t in self.templates:
                f = self.find(self.expand(t, rows, i))
                if f < 0:
                    continue
                if t[0] == "U":
                    node[i] += self.alpha[f : f + L]
                elif i > 0:
                    edge[i] += self.alpha[f : f + L * L].reshape(L, L)
        return node, edge

    def marginals(self, rows):
        node, edge = self.scores(rows)
        T, L = node.shape
        paths = list(itertools.product(range(L), repeat=T))
        s = np.array(
            [
                sum(node[t, y[t]] for t in range(T))
                + sum(edge[t, y[t - 1], y[t]] for t in range(1, T))
                for y in paths
            ]
        )
        p = np.exp(s - s.max())
        p /= p.sum()
        m = np.zeros((T, L))
        for y, pr in zip(paths, p):
            m[np.arange(T), list(y)] += pr
        return list(paths[int(np.argmax(s))]), m


def crfkit_decode(model, rows):
    X, B, _ = row_inputs(model.meta, [rows])
    c = model.encode(X, B=B)
    ids, _ = model.viterbi(c)
    marg, _ = model.marginals(c)
    return ids.tolist(), marg


# --------------------------------------------------------------------------- tests
@pytest.mark.parametrize("sparse", [False, True])
def test_binary_export_scores_as_crf_test_would(tmp_path, sparse):
    rng = np.random.default_rng(1 + sparse)
    model = make_model(rng, sparse=sparse)
    path = tmp_path / "m.crfpp"
    crfpp.write(model, path)
    ref = RefCrfpp(path.read_bytes())
    assert ref.labels == LABELS
    assert ref.templates == [t for t in TEMPLATES.splitlines() if t]
    # the original model with its weights rounded as the file holds them
    rounded = CRFModel(model.space, model.weights.astype(np.float32).astype(np.float64), model.meta)
    for rows in random_rows(rng, 8, 4):
        ids, marg = crfkit_decode(rounded, rows)
        rids, rmarg = ref.marginals(rows)
        assert ids == rids
        np.testing.assert_allclose(marg, rmarg, atol=1e-9)


def test_binary_import_matches_reference_and_keeps_weights(tmp_path):
    rng = np.random.default_rng(3)
    model = make_model(rng)
    path = tmp_path / "m.crfpp"
    crfpp.write(model, path)
    back = crfpp.read(path)
    ref = RefCrfpp(path.read_bytes())
    assert back.labels == LABELS
    assert back.meta["templates"].splitlines() == [t for t in TEMPLATES.splitlines() if t]
    assert back.meta["columns"] == 2 and back.meta["template_pad"] is True
    assert back.state_features() == {
        k: float(np.float32(v)) for k, v in model.state_features().items()
    }
    for rows in random_rows(rng, 8, 4):
        ids, marg = crfkit_decode(back, rows)
        rids, rmarg = ref.marginals(rows)
        assert ids == rids
        np.testing.assert_allclose(marg, rmarg, atol=1e-9)


def test_text_model_round_trip_keeps_16_decimals(tmp_path):
    rng = np.random.default_rng(4)
    model = make_model(rng)
    path = tmp_path / "m.txt"
    crfpp.write(model, path, text=True)
    head = path.read_bytes()[:64]
    assert head.startswith(b"version: 100\ncost-factor: 1\n") and crfpp.sniff(head)
    back = crfpp.read(path)
    assert back.meta["source_format"] == "crfpp-text"
    a = model.state_features()
    b = back.state_features()
    assert set(a) <= set(b)
    assert max(abs(a[k] - b[k]) for k in a) < 1e-15
    for rows in random_rows(rng, 5, 4):
        np.testing.assert_allclose(
            crfkit_decode(back, rows)[1], crfkit_decode(model, rows)[1], atol=1e-12
        )
    # binary and text of the same model read back as the same model (up to float32)
    crfpp.write(model, tmp_path / "m.bin")
    binm = crfpp.read(tmp_path / "m.bin")
    fb, ft = binm.state_features(), back.state_features()
    assert set(fb) == set(ft)
    assert max(abs(fb[k] - ft[k]) for k in fb) < 1e-6
    assert binm.transition_features() == pytest.approx(back.transition_features(), abs=1e-6)


def test_sniff():
    assert crfpp.sniff(struct.pack("<IidIIII", 100, 0, 1.0, 3, 2, 8, 4))
    assert crfpp.sniff(b"version: 100\n")
    assert not crfpp.sniff(struct.pack("<IidIIII", 58, 0, 1.0, 3, 2, 8, 4))
    assert not crfpp.sniff(b"#mdl#2#10\n")
    assert not crfpp.sniff(b"CRFKIT\0M")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sets(st.binary(min_size=0, max_size=8).filter(lambda b: b"\0" not in b), max_size=60))
def test_double_array_holds_every_key_and_no_other(keys):
    keys = sorted(keys)
    vals = np.arange(len(keys), dtype=np.int64) * 3 + 1
    units = darts.build(keys, vals)
    for k, v in zip(keys, vals.tolist()):
        assert darts.lookup(units, k) == v
    for probe in (b"\xff\xff", b"zz", b"a" * 9):
        if probe not in keys:
            assert darts.lookup(units, probe) == -1
    blob, lens, values = darts.decode(units, max_key_length=100, max_total_bytes=1 << 20)
    ends = np.cumsum(lens)
    got = {bytes(blob[e - n : e]): int(v) for e, n, v in zip(ends.tolist(), lens.tolist(), values)}
    assert got == dict(zip(keys, vals.tolist()))
    # crf_test reads p = base + byte + 1 without bounds checks: the array ends 257 units past
    # its largest base
    assert len(units) > int(units["base"].max()) + 256


def test_double_array_cycle_and_shared_base_are_refused():
    u = np.zeros(300, darts.UNIT)
    u["base"][0] = 1
    u["base"][2], u["check"][2] = 1, 1  # child of the root whose children name the root's base
    with pytest.raises(darts.DartsError, match="share the base"):
        darts.decode(u, max_key_length=50, max_total_bytes=1000)
    u = np.zeros(300, darts.UNIT)
    u["base"][0] = 1
    u["base"][2], u["check"][2] = 5, 1  # 'a'
    u["base"][5 + 1 + 1], u["check"][7] = 9, 5  # "a\x01" ... its base 9 owns unit 9 as a terminal
    u["base"][9], u["check"][9] = -1, 9
    assert darts.decode(u, max_key_length=50, max_total_bytes=1000)[1].tolist() == [2]
    # a unit that is its own parent (base 35, check 35, at 35 + 5) above a key's end: a cycle
    u["base"][40], u["check"][40] = 35, 35
    u["base"][35], u["check"][35] = -1, 35
    with pytest.raises(darts.DartsError, match="cycle"):
        darts.decode(u, max_key_length=50, max_total_bytes=1000)
    u["check"][40] = 36  # its parent base 36: no unit has it
    with pytest.raises(darts.DartsError, match="no node has"):
        darts.decode(u, max_key_length=50, max_total_bytes=1000)


def test_refusals_name_what_cannot_cross(tmp_path):
    rng = np.random.default_rng(5)
    m = make_model(rng)
    p = tmp_path / "x.crfpp"
    cases = []
    cases.append((CRFModel(m.space, m.weights, {}), "no feature templates"))
    cases.append((CRFModel(m.space, m.weights, dict(m.meta, template_pad=False)), "padding"))
    cases.append((CRFModel(m.space, m.weights, dict(m.meta, constraints="bio")), "constraints"))
    wap = make_model(rng, templates="u00:%x[0,0]\nb\n")
    cases.append((wap, "Wapiti pattern"))
    cases.append((make_model(rng, templates="U00:%X[0,0]\nB\n"), "%X"))
    cases.append((make_model(rng, templates="U00:%x[-9,0]\nB\n"), "reaches -9"))
    cases.append((make_model(rng, labels=["A B", "C"]), "white space"))
    sp = m.space
    dense = FeatureSpace(
        labels=sp.labels,
        attributes=list(sp.attributes),
        attr_ptr=sp.attr_ptr,
        feat_label=sp.feat_label,
        trans_index=sp.trans_index,
        n_dense=2,
        battributes=list(sp.battributes),
        battr_ptr=sp.battr_ptr,
        bfeat_pair=sp.bfeat_pair,
    )
    cases.append((CRFModel(dense, np.zeros(dense.n_features), m.meta), "dense features"))
    for model, words in cases:
        with pytest.raises(CrfkitError, match=words):
            crfpp.write(model, p)
        assert not p.exists()
    with pytest.raises(CrfkitError, match="unknown CRF"):
        crfpp.write(m, p, binary=True)


def _valid_bytes(tmp_path) -> bytes:
    m = make_model(np.random.default_rng(6), rows=random_rows(np.random.default_rng(7), 4, 3))
    p = tmp_path / "valid.crfpp"
    crfpp.write(m, p)
    return p.read_bytes()


def test_header_errors_name_file_and_offset(tmp_path):
    good = _valid_bytes(tmp_path)
    p = tmp_path / "bad.crfpp"
    for data, words in [
        (good[:20], "too short"),
        (struct.pack("<I", 58) + good[4:], "version 58"),
        (good[:4] + struct.pack("<i", 3) + good[8:], "model type 3"),
        (good[:16] + struct.pack("<I", 0xFFFFFFFF) + good[20:], "offset 16: .*weights need"),
        (good[:24] + struct.pack("<I", 0x7FFFFFF8) + good[28:], "offset 24: a double array of"),
        (good[:28] + struct.pack("<I", 0xFFFFFFFF) + good[32:], "offset 28: labels of"),
        (good[:8] + struct.pack("<d", float("nan")) + good[16:], "cost factor is nan"),
        (good + b"\0\0\0\0", "weights need"),
    ]:
        p.write_bytes(data)
        with pytest.raises(ModelError, match=words) as e:
            crfpp.read(p)
        assert str(p) in str(e.value) and "offset" in str(e.value)


def test_text_errors_name_the_line(tmp_path):
    p = tmp_path / "bad.txt"
    p.write_bytes(
        b"version: 100\ncost-factor: 1\nmaxid: 3\nxsize: 1\n\nA\n\nU00:%x[0,0]\n\n0 U00:a\n\n0.1\n0.2\n"
    )
    with pytest.raises(ModelError, match="maxid is 3 but 2"):
        crfpp.read(p)
    p.write_bytes(b"version: 100\nmaxid: 1\nxsize: 1\n\nA\n\nU00:%x[0,0]\n\nx U00:a\n\n0.1\n")
    with pytest.raises(ModelError, match=r"line 9: expected 'id feature'"):
        crfpp.read(p)
    p.write_bytes(b"version: 100\nmaxid: 1\nxsize: 1\n\nA\n\nU00:%x[0,0]\n\n0 U00:a\n\nnope\n")
    with pytest.raises(ModelError, match="line 11"):
        crfpp.read(p)
    p.write_bytes(b"version: 100\nmaxid: 1\nxsize: 1\n\nA\n\nU00:%x[0,0]\n\n5 U00:a\n\n0.1\n")
    with pytest.raises(ModelError, match="beyond the 1 weights"):
        crfpp.read(p)


def _mutations(valid: bytes, rng):
    n = len(valid)
    for k in list(range(0, min(n, 64))) + sorted(
        rng.choice(n, size=min(n, 60), replace=False).tolist()
    ):
        yield f"truncate {k}", valid[:k]
    for k in rng.choice(n, size=min(n, 150), replace=False).tolist():
        b = bytearray(valid)
        b[k] ^= int(rng.integers(1, 256))
        yield f"flip {k}", bytes(b)
    offs = list(range(0, min(n - 4, 64), 4)) + sorted(
        rng.choice(n - 4, size=min(n - 4, 60), replace=False).tolist()
    )
    for off in offs:
        for word in (0xFFFFFFFF, 0x7FFFFFFF, n, 0):
            b = bytearray(valid)
            b[off : off + 4] = struct.pack("<I", word & 0xFFFFFFFF)
            yield f"word {off}={word:#x}", bytes(b)


def run_fuzz(read, valid: bytes, tmp_path, suffix):
    rng = np.random.default_rng(0)
    p = tmp_path / f"fuzz{suffix}"
    ceiling = (32 << 20) + 64 * len(valid)
    cases = errors = 0
    tracemalloc.start()
    try:
        for name, data in _mutations(valid, rng):
            p.write_bytes(data)
            tracemalloc.reset_peak()
            t0 = time.perf_counter()
            try:
                read(p)
            except CrfkitError as e:
                assert os.fspath(p) in str(e), (name, str(e))
                errors += 1
            except Exception as e:  # noqa: BLE001 - the point of the test
                raise AssertionError(f"{name}: {type(e).__name__}: {e}") from e
            assert time.perf_counter() - t0 < 30, name
            assert tracemalloc.get_traced_memory()[1] < ceiling, name
            cases += 1
    finally:
        tracemalloc.stop()
    return cases, errors


def test_fuzzed_binary_models_end_in_crfkit_errors(tmp_path):
    valid = _valid_bytes(tmp_path)
    cases, errors = run_fuzz(crfpp.read, valid, tmp_path, ".crfpp")
    assert cases > 400 and errors > cases // 2


def test_fuzzed_text_models_end_in_crfkit_errors(tmp_path):
    m = make_model(np.random.default_rng(8), rows=random_rows(np.random.default_rng(9), 3, 3))
    p = tmp_path / "v.txt"
    crfpp.write(m, p, text=True)
    cases, errors = run_fuzz(crfpp.read, p.read_bytes(), tmp_path, ".txt")
    assert cases > 300 and errors > 0


def test_shared_fuzz_harness_when_present(tmp_path):
    harness = pytest.importorskip("peer_fuzz")
    stats = harness.fuzz_reader(crfpp.read, _valid_bytes(tmp_path), tmp_path, suffix=".crfpp")
    assert stats.errors > 0


def test_label_pairs_are_bounded_by_the_weights(tmp_path):
    # 1,100 labels cost 6 kB of a file but would make 1.2M label pairs (transition block, index)
    labels = b"".join(b"L%d\0" % i for i in range(1100))
    tmpl = b"U00:%x[0,0]\0B\0"
    tmpl += b"\0" * (-(len(labels) + len(tmpl)) % 4)
    units = darts.build([], np.zeros(0))
    head = struct.pack("<IidIIII", 100, 0, 1.0, 4, 1, units.nbytes, len(labels))
    p = tmp_path / "many.crfpp"
    p.write_bytes(head + labels + struct.pack("<I", len(tmpl)) + tmpl + units.tobytes() + bytes(16))
    with pytest.raises(ModelError, match="1100 labels: 1210000 label pairs"):
        crfpp.read(p)
