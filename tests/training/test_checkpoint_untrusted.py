"""Checkpoints as files from strangers (issue 45, part 1): every field of a checkpoint passed to
``resume`` is checked before it is used (header type, size and nesting; each member's npy header,
dtype and shape against the optimizer's ``STATE_SCHEMA`` for the run's dimensions, before it is
read; values finite and in range), and a fuzz test (byte flips, truncations, member mutations with
the zip CRCs recomputed) in a child under an address-space limit: every case ends in a
``CrfkitError`` (or a valid resume), in bounded time and memory.

The helpers below take a checkpoint (a zip of ``.npy`` members) apart and write an edited one back,
so that an edit reaches the check it is about instead of stopping at a CRC.
"""

from __future__ import annotations

import io
import json
import os
import re
import tracemalloc
import zipfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import LimitedLoader
from crfkit import cli
from crfkit.errors import CrfkitError
from crfkit.optim import stochastic
from crfkit.train import train
from crfkit.training import checkpoint as ckpt
from crfkit.training.checkpoint import CheckpointError

LABELS = ["A", "B", "C"]


def data(seed=0, n_seq=30):
    rng = np.random.default_rng(seed)
    X, Y = [], []
    for _ in range(n_seq):
        T = int(rng.integers(2, 9))
        y = rng.integers(3, size=T)
        X.append(
            [
                [f"sig={LABELS[lab if rng.random() < 0.8 else int(rng.integers(3))]}", f"n={k % 7}"]
                for k, lab in enumerate(y)
            ]
        )
        Y.append([LABELS[k] for k in y])
    return X, Y


KW = dict(threads=1, c2=0.5, m=4, period=5)


# ------------------------------------------------------------------------------ archive helpers
def members(path) -> dict:
    with zipfile.ZipFile(path) as z:
        return {i.filename: z.read(i) for i in z.infolist()}


def npy(a) -> bytes:
    b = io.BytesIO()
    np.lib.format.write_array(b, np.asarray(a), allow_pickle=False)
    return b.getvalue()


def npy_forged(dtype, shape, data: bytes = b"") -> bytes:
    """An npy header declaring ``shape`` of ``dtype``, followed by ``data`` (however short)."""
    b = io.BytesIO()
    d = {"descr": np.dtype(dtype).str, "fortran_order": False, "shape": tuple(shape)}
    np.lib.format.write_array_header_1_0(b, d)
    return b.getvalue() + data


def header(ms) -> dict:
    return json.loads(np.load(io.BytesIO(ms["header.npy"])).tobytes())


def with_header(ms, h=None, raw: bytes | None = None) -> dict:
    body = raw if raw is not None else json.dumps(h).encode()
    return {**ms, "header.npy": npy(np.frombuffer(body, np.uint8))}


def member_array(ms, name):
    return np.load(io.BytesIO(ms[name + ".npy"]))


def write(path, ms, deflate=()) -> None:
    """The members ``ms`` (bytes, or a function writing a streamed member) as a zip; those named
    in ``deflate`` compressed.  zipfile computes every CRC."""
    with zipfile.ZipFile(path, "w") as z:
        for k, v in ms.items():
            zi = zipfile.ZipInfo(k)
            zi.compress_type = zipfile.ZIP_DEFLATED if k in deflate else zipfile.ZIP_STORED
            if callable(v):
                with z.open(zi, "w", force_zip64=True) as f:
                    v(f)
            else:
                z.writestr(zi, v)


def filled(prefix: bytes, n: int, fill: bytes = b"\0"):
    """A streamed member: ``prefix`` then ``n`` bytes of ``fill`` (deflated: about n/1000 bytes)."""

    def put(f):
        f.write(prefix)
        block, left = fill * (1 << 20), n
        while left > 0:
            f.write(block[: min(left, len(block))])
            left -= len(block)

    return put


# ----------------------------------------------------------------------------------- the runs
@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """Checkpoints of lbfgs and sg after 3 iterations, and the data they were made on."""
    d = tmp_path_factory.mktemp("ck")
    X, Y = data()
    out = {"dir": d, "X": X, "Y": Y}
    for alg in ("lbfgs", "sg"):
        p = d / f"{alg}.ckpt"
        train(X, Y, algorithm=alg, max_iterations=3, checkpoint=p, **KW)
        out[alg] = members(p)
    return out


def edit_header(base, alg, fn):
    h = header(base[alg])
    fn(h)
    return with_header(base[alg], h)


def raw_header(base, alg, fn):
    text = bytes(member_array(base[alg], "header")).decode()
    return with_header(base[alg], raw=fn(text).encode())


def edit_array(base, alg, name, a):
    return {**base[alg], f"s.{name}.npy": npy(a)}


# name: (algorithm, make(base) -> members, deflated members, what the error says); the findings of
# issue 45 part 1 and their neighbours
CASES = {
    # memory safety: a wrong-sized array that reached sgd_run
    "sg_w_len1": ("sg", lambda b: edit_array(b, "sg", "w", np.zeros(1)), (), "'w' has shape"),
    # tracebacks
    "header_list": ("lbfgs", lambda b: with_header(b["lbfgs"], raw=b"[1, 2]"), (), "not a crfkit"),
    "header_string": ("lbfgs", lambda b: with_header(b["lbfgs"], raw=b'"x"'), (), "not a crfkit"),
    "settings_string": (
        "lbfgs",
        lambda b: edit_header(b, "lbfgs", lambda h: h.update(settings="x")),
        (),
        "'settings' is not a dict",
    ),
    "extra_string": (
        "lbfgs",
        lambda b: edit_header(b, "lbfgs", lambda h: h.update(extra="x")),
        (),
        "'extra' is not a dict",
    ),
    "iteration_1e999": (
        "lbfgs",
        lambda b: raw_header(
            b, "lbfgs", lambda t: re.sub(r'"iteration": \d+', '"iteration": 1e999', t)
        ),
        (),
        "'iteration' is not an integer",
    ),
    "iteration_string": (
        "lbfgs",
        lambda b: edit_header(b, "lbfgs", lambda h: h.update(iteration="abc")),
        (),
        "'iteration' is not an integer",
    ),
    "nested_json": (
        "lbfgs",
        lambda b: with_header(b["lbfgs"], raw=b"[" * 100000 + b"]" * 100000),
        (),
        "nests deeper",
    ),
    "state_scalars_list": (
        "lbfgs",
        lambda b: edit_header(b, "lbfgs", lambda h: h.update(state_scalars=[1])),
        (),
        "'state_scalars' is not a dict",
    ),
    "history_string": (
        "lbfgs",
        lambda b: edit_header(b, "lbfgs", lambda h: h.update(history="x")),
        (),
        "'history' is not a list",
    ),
    "history_record_without_iteration": (
        "lbfgs",
        lambda b: edit_header(b, "lbfgs", lambda h: h.update(history=[{"objective": 1.0}])),
        (),
        "'history' record 0",
    ),
    "sparse_arrays_list": (
        "lbfgs",
        lambda b: edit_header(b, "lbfgs", lambda h: h.update(version=3, sparse_arrays=[1])),
        (),
        "'sparse_arrays' is not a dict",
    ),
    "f_string": (
        "lbfgs",
        lambda b: edit_header(b, "lbfgs", lambda h: h["state_scalars"].update(f="x")),
        (),
        "'f' is 'x', not a number",
    ),
    "f_nan": (
        "lbfgs",
        lambda b: raw_header(b, "lbfgs", lambda t: re.sub(r'"f": [-0-9.e]+', '"f": NaN', t)),
        (),
        "'f' is nan, not finite",
    ),
    "S_wrong_shape": (
        "lbfgs",
        lambda b: edit_array(b, "lbfgs", "S", np.zeros((3, 5))),
        (),
        "'S' has shape (3, 5)",
    ),
    "Y_wrong_shape": (
        "lbfgs",
        lambda b: edit_array(b, "lbfgs", "Y", np.zeros((3, 5))),
        (),
        "'Y' has shape (3, 5)",
    ),
    "rho_wrong_shape": (
        "lbfgs",
        lambda b: edit_array(b, "lbfgs", "rho", np.zeros(7)),
        (),
        "'rho' has shape (7,)",
    ),
    "rho_fewer_pairs": (
        "lbfgs",
        lambda b: edit_array(b, "lbfgs", "rho", np.ones(1)),
        (),
        "S, Y and rho hold different numbers",
    ),
    "x_2d": ("lbfgs", lambda b: edit_array(b, "lbfgs", "x", np.zeros((3, 2))), (), "'x' has shape"),
    "past_2d": (
        "lbfgs",
        lambda b: edit_array(b, "lbfgs", "past", np.zeros((2, 2))),
        (),
        "'past' has shape",
    ),
    "x_nan": (
        "lbfgs",
        lambda b: edit_array(
            b,
            "lbfgs",
            "x",
            np.where(np.arange(len(member_array(b["lbfgs"], "s.x"))) == 0, np.nan, 0),
        ),
        (),
        "'x' holds NaN",
    ),
    "x_float32": (
        "lbfgs",
        lambda b: edit_array(b, "lbfgs", "x", member_array(b["lbfgs"], "s.x").astype(np.float32)),
        (),
        "'x' is float32",
    ),
    "unknown_state_key": (
        "lbfgs",
        lambda b: {**b["lbfgs"], "s.extra_thing.npy": npy(np.zeros(2))},
        (),
        "unexpected array 'extra_thing'",
    ),
    "missing_g": (
        "lbfgs",
        lambda b: {k: v for k, v in b["lbfgs"].items() if k != "s.g.npy"},
        (),
        "lacks 'g'",
    ),
    "sg_rng_negative": (
        "sg",
        lambda b: edit_header(b, "sg", lambda h: h["state_scalars"].update(rng=-1)),
        (),
        "'rng' is -1",
    ),
    # memory: bombs and declared sizes
    "member_bomb_declared_256MiB": (
        "lbfgs",
        lambda b: {**b["lbfgs"], "s.x.npy": filled(npy_forged("<f8", (1 << 25,)), 256 << 20)},
        ("s.x.npy",),
        "member 's.x' inflates to",
    ),
    "member_bomb_undeclared_256MiB": (
        "lbfgs",
        lambda b: {
            **b["lbfgs"],
            "s.x.npy": filled(npy(member_array(b["lbfgs"], "s.x")), 256 << 20),
        },
        ("s.x.npy",),
        "member 's.x' inflates to",
    ),
    "header_bomb_256MiB": (
        "lbfgs",
        lambda b: {
            **b["lbfgs"],
            "header.npy": filled(npy_forged("|u1", (256 << 20,)), 256 << 20, b" "),
        },
        ("header.npy",),
        "member 'header' inflates to",
    ),
    "npy_declares_6GB": (
        "lbfgs",
        lambda b: {**b["lbfgs"], "s.x.npy": npy_forged("<f8", (750_000_000,), b"\0" * 8)},
        (),
        "'x' has shape (750000000,)",
    ),
    "npy_declares_1TB": (
        "lbfgs",
        lambda b: {**b["lbfgs"], "s.x.npy": npy_forged("<f8", (125_000_000_000,), b"\0" * 8)},
        (),
        "'x' has shape (125000000000,)",
    ),
    "npy_header_declares_1GiB": (
        "lbfgs",
        lambda b: {
            **b["lbfgs"],
            "s.x.npy": b"\x93NUMPY\x02\x00" + (1 << 30).to_bytes(4, "little") + b" " * 100,
        },
        (),
        "not an npy array",
    ),
    "npy_object_dtype": (
        "lbfgs",
        lambda b: {**b["lbfgs"], "s.x.npy": npy_forged("|O", (3,), b"\0" * 24)},
        (),
        "unsupported array type",
    ),
    # wrong results, exit 0 before
    "iteration_-100": (
        "lbfgs",
        lambda b: edit_header(b, "lbfgs", lambda h: h.update(iteration=-100)),
        (),
        "'iteration' is not an integer in [0, 2^53] (-100)",
    ),
    "iteration_1e30": (
        "lbfgs",
        lambda b: edit_header(b, "lbfgs", lambda h: h.update(iteration=1e30)),
        (),
        "'iteration' is not an integer in [0, 2^53] (1e+30)",
    ),
    "g_len3": (
        "lbfgs",
        lambda b: edit_array(b, "lbfgs", "g", np.zeros(3)),
        (),
        "'g' has shape (3,)",
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_crafted_checkpoint_is_refused_before_use(base, name):
    """Each finding of issue 45 part 1 (and neighbours): a CheckpointError naming the file and the
    problem, before any array of the state reaches the optimizer; the bombs and large declared
    sizes refused before they are read (traced allocations stay under 32 MiB)."""
    alg, make, deflate, why = CASES[name]
    ms = make(base)
    p = base["dir"] / "crafted.ckpt"
    write(p, ms, deflate)
    tracemalloc.start()
    try:
        with pytest.raises(CheckpointError) as e:
            train(base["X"], base["Y"], algorithm=alg, resume=p, max_iterations=6, **KW)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(p) in str(e.value) and why in str(e.value), str(e.value)
    assert peak < 32 << 20, peak


def test_the_cli_prints_the_refusal_without_a_traceback(base, tmp_path, capsys):
    """``crfkit train --resume`` of a crafted checkpoint: exit 2 and ``crfkit: error: ...``."""
    X, Y = base["X"], base["Y"]
    f = tmp_path / "train.txt"
    f.write_text(
        "".join(
            "".join(f"{y}\t" + "\t".join(x) + "\n" for x, y in zip(xs, ys, strict=True)) + "\n"
            for xs, ys in zip(X, Y, strict=True)
        )
    )
    ck = tmp_path / "c.ckpt"
    args = ["train", "-f", "crfsuite", str(f), "-m", str(tmp_path / "m.crfkit"), "-q"]
    assert cli.main([*args, "--max-iterations", "3", "--checkpoint", str(ck)]) == 0
    ms = members(ck)
    write(ck, {**ms, "s.g.npy": npy(np.zeros(3))})
    capsys.readouterr()
    assert cli.main([*args, "--max-iterations", "6", "--resume", str(ck)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("crfkit: error: ") and "'g' has shape (3,)" in err
    assert "Traceback" not in err


ALGORITHMS = ("lbfgs", "owlqn", *stochastic.available())


def test_every_checkpointing_optimizer_declares_a_schema():
    from crfkit.optim.schema import Field

    for alg in ALGORITHMS:
        schema, rules = ckpt.schema_for(alg)
        assert schema and all(isinstance(f, Field) for f in schema.values()), alg
        assert "iteration" in schema and "x" in schema, alg


@pytest.mark.parametrize("alg", ALGORITHMS)
def test_every_optimizers_own_checkpoint_passes_its_schema_and_resumes(tmp_path, alg):
    """A checkpoint each optimizer writes is read back through its schema (validate_state) and the
    run resumes; the schema is not looser than needed: the state's weights cut by one entry is
    refused."""
    X, Y = data(1, 20)
    kw = dict(KW, c1=0.05) if alg in ("owlqn", "sgd-l1", "bcd") else KW
    p = tmp_path / "c.ckpt"
    train(X, Y, algorithm=alg, max_iterations=2, checkpoint=p, checkpoint_every=1, **kw)
    res = train(X, Y, algorithm=alg, max_iterations=3, resume=p, **kw)
    assert res.iterations >= 2
    ms = members(p)
    x = member_array(ms, "s.x")
    write(p, {**ms, "s.x.npy": npy(x[:-1])})
    with pytest.raises(CheckpointError, match="'x' has shape"):
        train(X, Y, algorithm=alg, max_iterations=3, resume=p, **kw)


def test_validate_state_checks_ranges_and_types():
    """validate_state alone: the permutation of a SAG state must index the examples."""
    from crfkit.optim.sag import STATE_SCHEMA
    from crfkit.optim.schema import Dims

    d = Dims(p=4, n=3, T=5, L=2, A=2, n_trans=4, E=2, m=4, period=5)
    st_ = {
        "algorithm": "sag",
        "iteration": 1,
        "l2": 0.1,
        "x": np.zeros(4),
        "d": np.zeros(4),
        "node": np.zeros((5, 2), np.float32),
        "trans": np.zeros((3, 4), np.float32),
        "perm": np.arange(3),
        "kperm": np.arange(3),
        "Li": np.ones(3),
        "m": 3,
        "mk": 0,
        "evals": 3,
        "steps": 3,
        "L": 1.0,
        "Lmax": 1.0,
        "step": 0.5,
        "rng": 2**64 - 1,
    }
    ckpt.validate_state(st_, STATE_SCHEMA, d)
    for key, bad, why in [
        ("perm", np.array([0, 1, 3]), "'perm' holds 3"),
        ("kperm", np.array([0, -1, 2]), "'kperm' holds -1"),
        ("node", np.zeros((5, 3), np.float32), "'node' has shape"),
        ("Li", np.array([1.0, np.inf, 1.0]), "'Li' holds NaN or infinite"),
        ("m", 4, "'m' is 4"),
        ("rng", 2**64, "'rng' is"),
        ("step", True, "'step' is True"),
        ("extra", 1, "'extra' is not part"),
    ]:
        with pytest.raises(CheckpointError, match=re.escape(why)):
            ckpt.validate_state({**st_, key: bad}, STATE_SCHEMA, d)


# ------------------------------------------------------------------------------------ the fuzz
HEADER_KEYS = [
    "format",
    "version",
    "settings",
    "fingerprint",
    "iteration",
    "n_evals",
    "state_scalars",
    "history",
    "extra",
    "sparse_arrays",
]
JSON_VALUE = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.integers(-3, 300),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=8),
        st.sampled_from(["<f8", "|O", "<i8", "lbfgs", "sg"]),
    ),
    lambda c: st.one_of(
        st.lists(c, max_size=3), st.dictionaries(st.text(max_size=6), c, max_size=3)
    ),
    max_leaves=6,
)
ARRAY_SHAPES = st.lists(st.sampled_from([0, 1, 2, 3, 7, 61, 1 << 20, 1 << 31, 1 << 40]), max_size=3)


@st.composite
def mutated_checkpoint(draw, bases: dict) -> tuple[str, bytes]:
    """(the algorithm, the bytes of a mutated checkpoint of it)."""
    alg = draw(st.sampled_from(sorted(bases)))
    raw, ms = bases[alg]
    kind = draw(
        st.sampled_from(
            [
                "flip",
                "truncate",
                "member_flip",
                "member_truncate",
                "header_field",
                "header_delete",
                "state_scalar",
                "array_values",
                "array_shape",
                "array_forged",
                "array_bomb",
                "member_delete",
                "member_add",
            ]
        )
    )
    if kind == "flip":
        b = bytearray(raw)
        for _ in range(draw(st.integers(1, 4))):
            b[draw(st.integers(0, len(b) - 1))] ^= draw(st.integers(1, 255))
        return alg, bytes(b)
    if kind == "truncate":
        return alg, raw[: draw(st.integers(0, len(raw) - 1))]
    ms = dict(ms)
    names = sorted(ms)
    deflate = set(draw(st.lists(st.sampled_from(names), max_size=2)))
    if kind in ("member_flip", "member_truncate"):  # reaches the npy reader (CRC recomputed)
        name = draw(st.sampled_from(names))
        b = bytearray(ms[name])
        if kind == "member_flip":
            for _ in range(draw(st.integers(1, 4))):
                b[draw(st.integers(0, len(b) - 1))] ^= draw(st.integers(1, 255))
        else:
            b = b[: draw(st.integers(0, len(b)))]
        ms[name] = bytes(b)
    elif kind in ("header_field", "header_delete", "state_scalar"):
        h = header(ms)
        if kind == "header_field":
            h[draw(st.sampled_from(HEADER_KEYS))] = draw(JSON_VALUE)
        elif kind == "header_delete":
            h.pop(draw(st.sampled_from(HEADER_KEYS)), None)
        else:
            keys = sorted(h["state_scalars"]) + ["iteration", "other"]
            k = draw(st.sampled_from(keys))
            if draw(st.booleans()):
                h["state_scalars"][k] = draw(JSON_VALUE)
            else:
                h["state_scalars"].pop(k, None)
        ms = with_header(ms, h)
    elif kind in ("array_values", "array_shape"):
        name = draw(st.sampled_from([n for n in names if n != "header.npy"]))
        a = np.load(io.BytesIO(ms[name]))
        if kind == "array_values" and a.size:
            flat = a.reshape(-1).copy()
            for _ in range(draw(st.integers(1, 3))):
                i = draw(st.integers(0, a.size - 1))
                if a.dtype.kind == "f":
                    flat[i] = draw(st.floats(allow_nan=True, allow_infinity=True, width=64))
                else:
                    info = np.iinfo(a.dtype)
                    flat[i] = draw(st.integers(int(info.min), int(info.max)))
            a = flat.reshape(a.shape)
        elif kind == "array_shape":
            shape = tuple(draw(st.lists(st.integers(0, 70), max_size=3)))
            a = np.zeros(shape, dtype=a.dtype)
        new_dtype = draw(st.sampled_from([None, None, "<i8", "<f4", "<f8", "|u1", ">f8"]))
        if new_dtype is not None:
            with np.errstate(invalid="ignore", over="ignore"):
                a = a.astype(new_dtype)
        ms[name] = npy(a)
    elif kind == "array_forged":  # a header that declares what it does not hold
        name = draw(st.sampled_from(names))
        dt = draw(st.sampled_from(["<f8", "<i8", "|u1", "<f4", "|O", "<U4", "V8"]))
        ms[name] = npy_forged(dt, draw(ARRAY_SHAPES), b"\0" * draw(st.sampled_from([0, 8, 488])))
    elif kind == "array_bomb":  # zeros behind a header, declared or not, up to 64 MiB deflated
        name = draw(st.sampled_from(names))
        n = draw(st.sampled_from([0, 8, 1 << 16, 1 << 24, 64 << 20]))
        declared = draw(st.sampled_from([n // 8, n // 8 + 1, 61]))
        dt = "|u1" if name == "header.npy" else "<f8"
        ms[name] = filled(npy_forged(dt, (declared,)), n)
        deflate.add(name)
    elif kind == "member_delete":
        ms.pop(draw(st.sampled_from(names)))
    elif kind == "member_add":
        ms[draw(st.sampled_from(["s.zz.npy", "z.x.idx.npy", "junk", "s.x.npy/../a.npy"]))] = npy(
            np.zeros(draw(st.integers(0, 70)))
        )
    b = io.BytesIO()
    write(b, ms, deflate)
    return alg, b.getvalue()


@pytest.fixture(scope="module")
def fuzz_env(tmp_path_factory):
    """Checkpoints of lbfgs, sg and sag, the child that resumes them (under a 1.5 GiB address-space
    limit over its size after imports and set-up), and the tally of outcomes."""
    d = tmp_path_factory.mktemp("ckfuzz")
    X, Y = data(2, 20)
    bases = {}
    for alg in ("lbfgs", "sg", "sag"):
        p = d / f"{alg}.ckpt"
        train(X, Y, algorithm=alg, max_iterations=2, checkpoint=p, checkpoint_every=1, **KW)
        bases[alg] = (p.read_bytes(), members(p))
    ld = LimitedLoader()
    setup = (
        "import warnings\nwarnings.simplefilter('ignore')\n"
        "from crfkit.train import train\n"
        f"X, Y = {json.dumps([X, Y])}\n"
        f"KW = {KW!r}\n"
        f"train(X, Y, max_iterations=1, **KW)\n"  # (compiles the kernels before the limit bites)
    )
    r = ld.ask(code=setup)
    assert r["outcome"] == "ok", r
    tally = {"cases": 0, "CrfkitError": 0, "ok": 0, "failures": 0, "peak_grew": 0, "seconds": 0.0}
    yield {"dir": d, "bases": bases, "loader": ld, "tally": tally}
    ld.close()
    out = os.environ.get("CRFKIT_CKPT_FUZZ_STATS")
    if out:
        with open(out, "a") as f:
            f.write(json.dumps(tally) + "\n")


def _fuzz_one(env, alg: str, blob: bytes) -> None:
    p = env["dir"] / "fuzz.ckpt"
    p.write_bytes(blob)
    code = (
        f"train(X, Y, algorithm={alg!r}, resume={str(p)!r}, max_iterations=3, **KW)\n"
        if alg != "lbfgs"
        else f"train(X, Y, resume={str(p)!r}, max_iterations=3, **KW)\n"
    )
    r = env["loader"].ask(code=code)
    t = env["tally"]
    t["cases"] += 1
    t["seconds"] = max(t["seconds"], r["seconds"])
    t["peak_grew"] = max(t["peak_grew"], r["grew"])
    if r["outcome"] in ("ok", "CrfkitError"):
        t[r["outcome"]] += 1
    else:
        t["failures"] += 1
    assert r["outcome"] in ("ok", "CrfkitError"), r
    if r["outcome"] == "CrfkitError" and r["type"] == "CheckpointError":
        assert str(p) in r["message"], r
    assert r["seconds"] < 60, r


FUZZ = dict(
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)


@settings(max_examples=200, **FUZZ)
@given(data=st.data())
def test_fuzz_checkpoint_resume(fuzz_env, data):
    """Byte flips and truncations of the file; flips and truncations of one member, header field
    changes and deletions, state scalar changes, array values/dtypes/shapes changed, npy headers
    declaring what the member does not hold, zeros bombs, members deleted or added, each with the
    zip CRCs recomputed: resuming ends in a CrfkitError or a valid run, never another exception, in
    a child under a 1.5 GiB address-space limit, each case in bounded time."""
    _fuzz_one(fuzz_env, *data.draw(mutated_checkpoint(fuzz_env["bases"])))


@pytest.mark.slow
@settings(max_examples=3000, **FUZZ)
@given(data=st.data())
def test_fuzz_checkpoint_resume_long(fuzz_env, data):
    _fuzz_one(fuzz_env, *data.draw(mutated_checkpoint(fuzz_env["bases"])))


def test_fuzz_mutations_reach_past_the_crc(base, tmp_path):
    """The fuzz's rewritten archives pass the zip layer (an unchanged one reassembled resumes, a
    changed array value reaches the state checks): a sanity check of the harness."""
    p = tmp_path / "same.ckpt"
    write(p, base["lbfgs"])
    train(base["X"], base["Y"], resume=p, max_iterations=4, **KW)
    x = member_array(base["lbfgs"], "s.x").copy()
    x[0] = np.inf
    write(p, {**base["lbfgs"], "s.x.npy": npy(x)})
    with pytest.raises(CrfkitError, match="'x' holds NaN or infinite"):
        train(base["X"], base["Y"], resume=p, max_iterations=4, **KW)
