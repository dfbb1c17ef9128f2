"""CRFsuite's binary model (crfkit.interop.crfsuite): lookup3, the writer against python-crfsuite's
Tagger (load, dump, tags, marginals), the reader against python-crfsuite's own models, refusals of
what cannot cross, and the fuzz harness on the reader."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from peer_fuzz import fuzz_reader

from crfkit.errors import CrfkitError, ModelError
from crfkit.features.space import FeatureSpace
from crfkit.interop import crfsuite as cs
from crfkit.model import CRFModel

pycrfsuite = pytest.importorskip("pycrfsuite")


# ------------------------------------------------------------------------------------- lookup3
def test_hashlittle_published_vectors():
    # lookup3.c's own self-test values
    assert cs.hashlittle(b"") == 0xDEADBEEF
    assert cs.hashlittle(b"Four score and seven years ago") == 0x17770551
    assert cs.hashlittle(b"Four score and seven years ago", 1) == 0xCD628161


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(min_size=0, max_size=40), min_size=0, max_size=30))
def test_hashlittle_many_equals_one_at_a_time(keys):
    blob = np.frombuffer(b"".join(keys), dtype=np.uint8)
    got = cs.hashlittle_many(blob, [len(k) for k in keys])
    assert got.tolist() == [cs.hashlittle(k) for k in keys]


# ------------------------------------------------------------------------ hand-made models
def hand_model(seed: int, L: int = 4, A: int = 30, density: float = 0.4, trans_share=0.8):
    """A model built from first principles: named labels and attributes (non-ASCII, spaces,
    colons), a random sparse set of (attribute, label) features and label pairs, random weights."""
    rng = np.random.default_rng(seed)
    labels = [f"L{i}" for i in range(L - 1)] + ["É-x y"]
    attributes = [f"w[{i}]=é{i}:x" if i % 3 == 0 else f"a{i}" for i in range(A)]
    ptr, fl = [0], []
    for _ in range(A):
        labs = np.flatnonzero(rng.random(L) < density)
        fl.extend(labs.tolist())
        ptr.append(len(fl))
    ti = np.full((L, L), -1, np.int32)
    on = np.flatnonzero(rng.random(L * L) < trans_share)
    ti.ravel()[on] = np.arange(len(on))
    space = FeatureSpace(labels, attributes, np.array(ptr), np.array(fl, np.int32), ti)
    w = rng.normal(size=space.n_features)
    return CRFModel(space, w, {"input_format": "crfsuite"})


def random_inputs(rng, attributes, n=25, max_len=7, unknown=True):
    """Sequences of tokens as lists of (name, value) pairs (distinct names in a token: a
    python-crfsuite dict cannot repeat one), some names unknown to the model."""
    X = []
    for _ in range(n):
        T = int(rng.integers(1, max_len + 1))
        seq = []
        for _t in range(T):
            k = int(rng.integers(0, 4))
            tok = []
            for _ in range(k):
                name = (
                    "unknown"
                    if unknown and rng.random() < 0.1
                    else attributes[rng.integers(len(attributes))]
                )
                tok.append((name, float(np.round(rng.normal(), 3)) if rng.random() < 0.5 else 1.0))
            seq.append(list(dict(tok).items()))
        X.append(seq)
    return X


def peer_view(tagger, X):
    """python-crfsuite's labels and marginals (tokens x labels, in the tagger's label order)."""
    labels = tagger.labels()
    tags, margs = [], []
    for x in X:
        xs = pycrfsuite.ItemSequence([dict(tok) for tok in x])
        tags.append(tagger.tag(xs))
        margs.append(np.array([[tagger.marginal(lab, t) for lab in labels] for t in range(len(x))]))
    return labels, tags, margs


def crfkit_view(model, X, labels):
    corpus = model.encode(X)
    m, _ = model.marginals(corpus)
    order = [model.labels.index(lab) for lab in labels]
    p = corpus.seq_ptr
    return model.tag(X), [m[p[i] : p[i + 1]][:, order] for i in range(len(X))]


def open_tagger(path):
    t = pycrfsuite.Tagger()
    t.open(str(path))
    return t


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_written_model_tags_in_python_crfsuite_as_in_crfkit(seed, tmp_path):
    model = hand_model(seed)
    path = tmp_path / "m.crfsuite"
    cs.write(model, path)
    tagger = open_tagger(path)
    tagger.dump(str(tmp_path / "dump.txt"))  # CRFsuite walks every record: must not fail
    assert "FILEHEADER" in (tmp_path / "dump.txt").read_text(encoding="utf-8")
    info = tagger.info()
    want_state = {k: v for k, v in model.state_features().items() if v != 0}
    # (python-crfsuite's info() parses the dump, whose weights have 6 decimals)
    assert dict(info.state_features) == pytest.approx(want_state, abs=1e-6)
    assert dict(info.transitions) == pytest.approx(
        {k: v for k, v in model.transition_features().items() if v != 0}, abs=1e-6
    )
    X = random_inputs(np.random.default_rng(seed + 10), model.space.attributes)
    labels, tags, margs = peer_view(tagger, X)
    ours, our_m = crfkit_view(model, X, labels)
    assert ours == tags
    assert max(float(np.abs(a - b).max()) for a, b in zip(margs, our_m)) < 1e-6


def test_every_attribute_is_found_by_crfsuite_hash_lookup(tmp_path):
    # one token per attribute, with a feature for one label only: CRFsuite finds the attribute
    # through the CQDB hash tables or tags by the transitions alone
    A, L = 400, 3
    labels = ["a", "b", "c"]
    attributes = [f"attr-{i}-{'x' * (i % 29)}" for i in range(A)]
    fl = np.arange(A) % L
    ti = np.full((L, L), -1, np.int32)
    space = FeatureSpace(labels, attributes, np.arange(A + 1), fl.astype(np.int32), ti)
    model = CRFModel(space, np.full(A, 5.0))
    path = tmp_path / "h.crfsuite"
    cs.write(model, path)
    tagger = open_tagger(path)
    got = [tagger.tag(pycrfsuite.ItemSequence([[a]]))[0] for a in attributes]
    assert got == [labels[k] for k in fl]


def test_read_back_is_the_same_model(tmp_path):
    model = hand_model(5, L=6, A=80)
    path = tmp_path / "m.crfsuite"
    cs.write(model, path)
    back = cs.read(path)
    assert back.labels == model.labels
    assert back.state_features() == {k: v for k, v in model.state_features().items() if v != 0}
    assert back.transition_features() == model.transition_features()
    assert back.meta["input_format"] == "crfsuite"
    # and written again, byte for byte the same file
    cs.write(back, tmp_path / "again.crfsuite")
    assert (tmp_path / "again.crfsuite").read_bytes() == path.read_bytes()


def test_empty_and_tiny_models_cross(tmp_path):
    space = FeatureSpace(["only"], [], np.zeros(1), np.zeros(0, np.int32), np.full((1, 1), -1))
    model = CRFModel(space, np.zeros(0))
    cs.write(model, tmp_path / "e.crfsuite")
    t = open_tagger(tmp_path / "e.crfsuite")
    assert t.tag(pycrfsuite.ItemSequence([["x"], ["y"]])) == ["only", "only"]
    back = cs.read(tmp_path / "e.crfsuite")
    assert back.labels == ["only"] and back.space.n_features == 0


# ---------------------------------------------------------------- python-crfsuite's own models
@pytest.fixture(scope="module")
def peer_model(tmp_path_factory):
    """A model trained by python-crfsuite on random data with weighted attributes."""
    rng = np.random.default_rng(7)
    names = [f"f{i}" for i in range(25)] + ["ü:1", "x y"]
    X = random_inputs(rng, names, n=60, unknown=False)
    Y = [[["B-NP", "I-NP", "O", "B-VP"][int(rng.integers(4))] for _ in x] for x in X]
    tr = pycrfsuite.Trainer(verbose=False)
    for x, y in zip(X, Y):
        tr.append(pycrfsuite.ItemSequence([dict(tok) for tok in x]), y)
    tr.set_params({"c1": 0.05, "c2": 0.01, "max_iterations": 60})
    path = tmp_path_factory.mktemp("peer") / "peer.crfsuite"
    tr.train(str(path))
    return path, X


def test_imported_model_tags_as_python_crfsuite(peer_model):
    path, X = peer_model
    model = cs.read(path)
    tagger = open_tagger(path)
    info = tagger.info()
    assert model.state_features() == pytest.approx(dict(info.state_features), abs=1e-6)
    assert model.transition_features() == pytest.approx(dict(info.transitions), abs=1e-6)
    Xt = random_inputs(np.random.default_rng(99), model.space.attributes, n=40) + X[:10]
    labels, tags, margs = peer_view(tagger, Xt)
    ours, our_m = crfkit_view(model, Xt, labels)
    assert ours == tags
    assert max(float(np.abs(a - b).max()) for a, b in zip(margs, our_m)) < 1e-6


def test_imported_model_tags_feature_dicts(peer_model):
    path, _ = peer_model
    model = cs.read(path)
    tagger = open_tagger(path)
    X = [[{"f1": 1.0, "f3": 2.5}, {"f2": 1.0}, {"x y": -1.0, "f4": 1.0}]]
    assert model.tag_dicts(X) == [tagger.tag(pycrfsuite.ItemSequence(X[0]))]


# -------------------------------------------------------------------------------- refusals
def test_dense_features_are_refused(tmp_path):
    m = hand_model(1)
    s = m.space
    space = FeatureSpace(s.labels, s.attributes, s.attr_ptr, s.feat_label, s.trans_index, n_dense=2)
    dm = CRFModel(space, np.concatenate([m.weights, np.ones(2 * s.n_labels)]))
    with pytest.raises(CrfkitError, match="dense"):
        cs.write(dm, tmp_path / "d.crfsuite")
    assert not (tmp_path / "d.crfsuite").exists()


def test_label_pair_observation_features_are_refused(tmp_path):
    m = hand_model(1)
    s = m.space
    space = FeatureSpace(
        s.labels,
        s.attributes,
        s.attr_ptr,
        s.feat_label,
        s.trans_index,
        battributes=["b"],
        battr_ptr=np.array([0, 1]),
        bfeat_pair=np.array([1]),
    )
    bm = CRFModel(space, np.concatenate([m.weights, [0.5]]))
    with pytest.raises(CrfkitError, match="position-dependent transitions"):
        cs.write(bm, tmp_path / "b.crfsuite")


def test_templates_are_refused_unless_dropped(tmp_path):
    m = hand_model(2)
    m.meta["templates"] = "U00:%x[0,0]\n"
    with pytest.raises(CrfkitError, match="templates"):
        cs.write(m, tmp_path / "t.crfsuite")
    cs.write(m, tmp_path / "t.crfsuite", drop_templates=True)
    assert cs.read(tmp_path / "t.crfsuite").labels == m.labels


def test_nul_in_a_label_is_refused(tmp_path):
    m = hand_model(3)
    m.space.labels[0] = "a\0b"
    with pytest.raises(CrfkitError, match="NUL"):
        cs.write(m, tmp_path / "n.crfsuite")


def test_unknown_writer_option_is_refused(tmp_path):
    with pytest.raises(CrfkitError, match="text"):
        cs.write(hand_model(0), tmp_path / "x.crfsuite", text=True)


# ---------------------------------------------------------------------------- untrusted input
def test_not_a_crfsuite_file(tmp_path):
    p = tmp_path / "x.model"
    p.write_bytes(b"hello world, this is not a model at all" * 3)
    with pytest.raises(ModelError, match=r"x\.model: not a CRFsuite model file"):
        cs.read(p)
    assert not cs.sniff(p.read_bytes()[:64])


def test_sniff_python_crfsuite_model(peer_model):
    assert cs.sniff(peer_model[0].read_bytes()[:64])


def test_missing_file(tmp_path):
    with pytest.raises(ModelError, match="cannot read"):
        cs.read(tmp_path / "nope.crfsuite")


def test_huge_label_count_is_refused_before_allocating(peer_model, tmp_path):
    import struct

    data = bytearray(peer_model[0].read_bytes())
    data[20:24] = struct.pack("<I", 40000)  # num_labels: a 6.4 GB label-pair table
    p = tmp_path / "big.crfsuite"
    p.write_bytes(bytes(data))
    with pytest.raises(ModelError, match="40000 labels is over"):
        cs.read(p)


def test_fuzz_python_crfsuite_model(peer_model, tmp_path):
    stats = fuzz_reader(cs.read, peer_model[0].read_bytes(), tmp_path, n_random=300)
    print(stats.summary())
    assert stats.errors > stats.cases // 3


def test_fuzz_written_model(tmp_path):
    src = tmp_path / "src.crfsuite"
    cs.write(hand_model(4, L=5, A=40), src)
    stats = fuzz_reader(cs.read, src.read_bytes(), tmp_path, seed=1, n_random=200)
    print(stats.summary())
    assert stats.errors > 0


def test_a_name_that_is_not_utf8_is_refused(tmp_path):
    p = tmp_path / "latin1.crfsuite"
    cs.write(hand_model(0), p)
    data = p.read_bytes()
    assert b"\xc3\xa9" in data
    p.write_bytes(data.replace(b"\xc3\xa9", b"\xe9 "))  # Latin-1 'é' and a space: not UTF-8
    with pytest.raises(ModelError, match=r"latin1\.crfsuite: .*an attribute string is not UTF-8"):
        cs.read(p)
