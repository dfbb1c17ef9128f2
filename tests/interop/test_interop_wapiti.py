"""Wapiti 1.5.0 models (crfkit.interop.wapiti): written and read back, checked against a reference
tagger written here from Wapiti's file layout and scoring (its own netstring parser, pattern
expansion with Wapiti's ``_x-1`` padding, observation layout u / b / *, brute-force sums over label
paths), so the suite needs no Wapiti; the real ``wapiti label`` round trips are in
benchmarks/peers/interop_crfpp_wapiti.py."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest
from test_interop_crfpp import crfkit_decode, make_model, random_rows, run_fuzz

from crfkit.errors import CrfkitError, ModelError
from crfkit.interop import wapiti

PATTERNS = "u00:%x[0,0]\nu01:%x[-1,0]/%x[0,0]\nU02:%x[2,1]\n*03:%x[-1,1]\nb01:%x[0,1]\nb\n"
LABELS = ["B-NP", "I-NP", "O"]


class RefWapiti:
    """Wapiti's tagger from its text model, independent of crfkit.interop."""

    def __init__(self, data: bytes):
        self.d, self.p = data, 0
        m = self.take(rb"#mdl#(\d+)#(\d+)\n")
        assert m.group(1) == b"2"
        nact = int(m.group(2))
        npats = int(self.take(rb"#rdr#(\d+)/(\d+)/(\d+)\n").group(1))
        self.pats = [self.ns().decode() for _ in range(npats)]
        self.labels = [self.ns().decode() for _ in range(int(self.take(rb"#qrk#(\d+)\n").group(1)))]
        self.obs = [self.ns().decode() for _ in range(int(self.take(rb"#qrk#(\d+)\n").group(1)))]
        L = len(self.labels)
        self.off, n = {}, 0
        for o in self.obs:
            u = n if o[0] in "u*" else None
            n += L if o[0] in "u*" else 0
            b = n if o[0] in "b*" else None
            n += L * L if o[0] in "b*" else 0
            self.off[o] = (u, b)
        self.theta = np.zeros(n)
        lines = self.d[self.p :].decode().split()
        assert len(lines) == nact
        for ln in lines:
            i, v = ln.split("=")
            self.theta[int(i)] = float.fromhex(v)

    def take(self, rx):
        m = re.compile(rx).match(self.d, self.p)
        self.p = m.end()
        return m

    def ns(self) -> bytes:
        m = self.take(rb"(\d+):")
        n = int(m.group(1))
        s = self.d[self.p : self.p + n]
        assert self.d[self.p + n : self.p + n + 1] == b","
        self.p += n + 2
        return s

    @staticmethod
    def expand(pat: str, rows, i: int) -> str:
        def val(m):
            j = i + int(m.group(1))
            if j < 0:
                return f"_x-{min(-j, 5)}".replace("-5", "-#")
            if j >= len(rows):
                return f"_x+{min(j - len(rows) + 1, 5)}".replace("+5", "+#")
            return rows[j][int(m.group(2))]

        return re.sub(r"%x\[(-?\d+),(\d+)\]", val, pat)

    def marginals(self, rows):
        L, T = len(self.labels), len(rows)
        node = np.zeros((T, L))
        edge = np.zeros((T, L, L))
        for i in range(T):
            for p in self.pats:
                o = self.expand(p, rows, i)
                if o not in self.off:
                    continue
                u, b = self.off[o]
                if u is not None:
                    node[i] += self.theta[u : u + L]
                if b is not None and i > 0:
                    edge[i] += self.theta[b : b + L * L].reshape(L, L)
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


def test_export_scores_as_wapiti_label_would(tmp_path):
    rng = np.random.default_rng(11)
    model = make_model(rng, templates=PATTERNS, sparse=True)
    path = tmp_path / "m.wapiti"
    wapiti.write(model, path)
    text = path.read_bytes()
    assert wapiti.sniff(text[:64])
    ref = RefWapiti(text)
    assert ref.labels == LABELS
    # CRF++-style U lines become Wapiti's lower-case u; padding tokens are Wapiti's
    assert "u02:%x[2,1]" in ref.pats
    assert any("_x-1" in o for o in ref.obs) and not any("_B-" in o for o in ref.obs)
    assert (
        "*03:_x-1" in ref.obs
        and ref.off["*03:_x-1"][0] is not None
        and ref.off["*03:_x-1"][1] is not None
    )
    for rows in random_rows(rng, 10, 4):
        ids, marg = crfkit_decode(model, rows)
        rids, rmarg = ref.marginals(rows)
        assert ids == rids
        np.testing.assert_allclose(marg, rmarg, atol=1e-12)


def test_import_is_exact(tmp_path):
    rng = np.random.default_rng(12)
    model = make_model(rng, templates=PATTERNS)
    path = tmp_path / "m.wapiti"
    wapiti.write(model, path)
    back = wapiti.read(path)
    ref = RefWapiti(path.read_bytes())
    assert back.labels == LABELS and back.meta["source_format"] == "wapiti"
    # hex floats: bit for bit
    a, b = model.state_features(), back.state_features()
    assert sorted(b.values()) == sorted(v for v in a.values() if v)
    for rows in random_rows(rng, 10, 4):
        ids, marg = crfkit_decode(back, rows)
        rids, rmarg = ref.marginals(rows)
        assert ids == rids
        np.testing.assert_allclose(marg, rmarg, atol=1e-12)
    # and written again, the same bytes
    wapiti.write(back, tmp_path / "again.wapiti")
    assert RefWapiti((tmp_path / "again.wapiti").read_bytes()).obs == ref.obs


def test_padding_is_translated_only_at_macros(tmp_path):
    # an observation whose literal text holds _x-1 keeps it; a token _x-1 inside the sequence is
    # indistinguishable from padding (for Wapiti too) and reads as crfkit's _B-1
    p = tmp_path / "m.wapiti"
    body = [b"u_x-1:%x[-1,0]", b"b"]
    obs = [b"u_x-1:_x-1", b"u_x-1:a", b"b"]
    data = b"#mdl#2#2\n#rdr#2/0/0\n" + b"".join(b"%d:%s,\n" % (len(x), x) for x in body)
    data += b"#qrk#2\n1:A,\n1:B,\n#qrk#3\n" + b"".join(b"%d:%s,\n" % (len(x), x) for x in obs)
    data += b"0=0x1p+0\n5=-0x1.8p+1\n"  # obs b owns 4..7: 5 is (A, B)
    p.write_bytes(data)
    m = wapiti.read(p)
    assert list(m.space.attributes) == ["u_x-1:_B-1"]
    assert m.state_features() == {("u_x-1:_B-1", "A"): 1.0}
    assert {k: v for k, v in m.transition_features().items() if v} == {("A", "B"): -3.0}


def test_refusals(tmp_path):
    rng = np.random.default_rng(13)
    p = tmp_path / "x.wapiti"
    for templates, words in [
        ("u00:%x[-5,0]\nb\n", "reaches -5"),
        ('u00:%t[-1,0,"^a"]\nb\n', "regex macros"),
        ("u00:%x[0,0]%%\nb\n", "literal '%'"),
    ]:
        with pytest.raises(CrfkitError, match=words):
            wapiti.write(make_model(rng, templates=templates), p)
        assert not p.exists()
    m = make_model(rng, templates="u00:%x[0,0]\nb\n")
    with pytest.raises(CrfkitError, match="no feature templates"):
        wapiti.write(type(m)(m.space, m.weights, {}), p)
    with pytest.raises(CrfkitError, match="white space"):
        wapiti.write(make_model(rng, templates="u00:%x[0,0]\nb\n", labels=["A\tB", "C"]), p)


def test_bad_files_name_the_line(tmp_path):
    p = tmp_path / "bad.wapiti"
    head = b"#mdl#2#1\n#rdr#1/0/0\n11:u00:%x[0,0],\n#qrk#1\n1:A,\n#qrk#1\n5:u00:a,\n"
    for data, words in [
        (b"#mdl#0#1\n", "maxent model"),
        (b"#mdl#2#1\n#rdr#1/0/1\n", "autouni"),
        (head + b"7=0x1p+0\n", "index 7 is beyond"),
        (head + b"0=zz\n", ":8: weight line 1"),
        (head.replace(b"5:u00:a", b"9:u00:a"), "observation"),
        (head.replace(b"#qrk#1\n5", b"#qrk#99999\n5"), "cannot fit"),
        (head.replace(b"5:u00:a", b"5:x00:a") + b"0=0x1p+0\n", "starts with neither"),
        (head + b"0=0x1p+0\n0=0x1p+0\n", "announces 1 weights, 2 lines"),
    ]:
        p.write_bytes(data)
        with pytest.raises(ModelError, match=words) as e:
            wapiti.read(p)
        assert str(p) in str(e.value)


def test_fuzzed_models_end_in_crfkit_errors(tmp_path):
    m = make_model(
        np.random.default_rng(14),
        templates=PATTERNS,
        rows=random_rows(np.random.default_rng(15), 3, 3),
    )
    p = tmp_path / "v.wapiti"
    wapiti.write(m, p)
    cases, errors = run_fuzz(wapiti.read, p.read_bytes(), tmp_path, ".wapiti")
    assert cases > 300 and errors > cases // 3


def test_shared_fuzz_harness_when_present(tmp_path):
    harness = pytest.importorskip("peer_fuzz")
    m = make_model(
        np.random.default_rng(16),
        templates=PATTERNS,
        rows=random_rows(np.random.default_rng(17), 3, 3),
    )
    p = tmp_path / "v.wapiti"
    wapiti.write(m, p)
    stats = harness.fuzz_reader(wapiti.read, p.read_bytes(), tmp_path, suffix=".wapiti")
    assert stats.errors > 0
