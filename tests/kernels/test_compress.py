"""``kernels.compress.list_above``: both forms (AVX-512's compress, 8 entries at a time, and the
one-at-a-time listing) list exactly the entries with ``|p x| > split``, in order, with their values,
whatever the length (the compress form's tail), the mix, the signs and the special values, and write
nothing at or past ``n``; on an AVX-512 machine the compress form is the one the kernels use, and it
is the instruction; compiled for a CPU without AVX-512, the kernels use the serial form and the
erf/gd transforms still give the scalar bits."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit

from crfkit.kernels import compress as C


def _reference(buf, p, split):
    with np.errstate(invalid="ignore", over="ignore"):
        keep = np.abs(p * buf) > split
    pos = np.nonzero(keep)[0]
    return pos, buf[pos]


FORMS = (False, True) if C.HAVE_COMPRESS else (False,)


def _check(buf, p, split):
    want_pos, want_val = _reference(buf, p, split)
    for compress in FORMS:
        pos, val = C.list_above_array(buf, p, split, compress)
        np.testing.assert_array_equal(pos, want_pos)
        np.testing.assert_array_equal(
            val.view(np.int64), want_val.view(np.int64)
        )  # the bits, -0.0 and NaN too


@settings(max_examples=80, deadline=None)
@given(
    n=st.integers(0, 70),
    seed=st.integers(0, 2**32 - 1),
    share=st.floats(0.0, 1.0),
    p=st.sampled_from([1.0, 5.0 * math.sqrt(math.pi), 10.0, -3.0]),
)
def test_both_forms_list_what_numpy_lists(n, seed, share, p):
    split = 1.25
    rng = np.random.default_rng(seed)
    mag = 10.0 ** rng.uniform(-8, 0, n) * (split / abs(p))
    mag[rng.random(n) < share] *= 30.0
    buf = np.where(rng.random(n) < 0.5, -mag, mag)
    if n >= 4:
        at = rng.integers(0, n, 4)
        edge = split / abs(p)
        buf[at] = [edge, -edge, np.nextafter(edge, 2 * edge), -np.nextafter(edge, 2 * edge)]
    _check(buf, p, split)


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 15, 16, 17, 64, 65])
def test_special_values_and_lengths_around_the_vector_width(n):
    specials = np.array([np.inf, -np.inf, np.nan, -0.0, 0.0, 1e308, -1e-308, 5e-324, 0.2, -0.2])
    buf = np.resize(specials, n).astype(np.float64)
    _check(buf, 8.0, 1.25)
    _check(np.full(n, 3.0), 1.0, 1.25)  # every entry listed
    _check(np.full(n, 0.5), 1.0, 1.25)  # none


@pytest.mark.parametrize("compress", FORMS)
def test_nothing_written_at_or_past_n(compress):
    if compress:  # its own function: the compress intrinsic compiles only for AVX-512

        @njit(cache=False)
        def run(buf, n, idx, sv):
            return C.list_above_compress(buf, n, 1.0, 1.25, idx, sv)
    else:

        @njit(cache=False)
        def run(buf, n, idx, sv):
            return C.list_above_serial(buf, n, 1.0, 1.25, idx, sv)

    rng = np.random.default_rng(3)
    for n in (0, 3, 8, 11, 16, 29):
        buf = rng.normal(0, 2, n + 9)
        idx = np.full(n + 9, -7, np.int64)
        sv = np.full(n + 9, -7.0)
        cnt = run(buf, n, idx, sv)
        want = np.nonzero(np.abs(buf[:n]) > 1.25)[0]
        assert (
            cnt == len(want)
            and idx[:cnt].tolist() == want.tolist()
            and sv[:cnt].tolist() == buf[want].tolist()
        )
        assert (idx[n:] == -7).all() and (sv[n:] == -7.0).all()


@pytest.mark.skipif(not C.HAVE_COMPRESS, reason="the CPU numba compiles for has no AVX-512")
def test_compress_rejects_other_types():
    @njit(cache=False)
    def bad(buf, idx, sv):
        return C.compress8_above(buf, 0, 1.0, 1.0, idx, sv, 0)

    with pytest.raises(Exception):
        bad(np.zeros(8, np.float32), np.zeros(8, np.int64), np.zeros(8))


@pytest.mark.skipif(not C.HAVE_COMPRESS, reason="the CPU numba compiles for has no AVX-512")
def test_avx512_compiles_the_compress_instructions():
    @njit(cache=False, error_model="numpy")
    def run(buf, idx, sv):
        return C.list_above(buf, buf.shape[0], 1.0, 1.25, idx, sv)

    buf = np.linspace(-3, 3, 40)
    run(buf, np.empty(40, np.int64), np.empty(40))
    asm = run.inspect_asm(run.signatures[0])
    assert re.search(r"vcompresspd", asm) and re.search(r"vpcompressq", asm)


def test_compress_form_refused_without_avx512(monkeypatch):
    monkeypatch.setattr(C, "HAVE_COMPRESS", False)
    with pytest.raises(RuntimeError, match="AVX-512"):
        C.list_above_array(np.zeros(8), 1.0, 1.0, True)


def test_without_avx512_the_serial_form_is_used_and_the_transforms_keep_their_bits(tmp_path):
    """Compiled for a CPU without AVX-512 (``NUMBA_CPU_NAME=generic``, in a subprocess with its own
    cache): the kernels use the one-at-a-time listing (the compress intrinsic exists only for
    AVX-512, so compiling it there would fail), it lists right, and erf's and gd's buffer transforms
    give the scalar transform's bits."""
    import os
    import subprocess
    import sys

    code = (
        "import numpy as np\n"
        "from crfkit.kernels import compress as C, ngd as K\n"
        "assert not C.HAVE_COMPRESS and C.list_above is C.list_above_serial\n"
        "buf = np.array([0.1, -2.0, 0.0, np.nan, 3.0, -0.5, 1.3, -1.3, 9.0, 0.2, -7.0])\n"
        "pos, val = C.list_above_array(buf, 1.0, 1.25, False)\n"
        "assert pos.tolist() == [1, 4, 6, 7, 8, 10], pos\n"
        "assert val.tolist() == [-2.0, 3.0, 1.3, -1.3, 9.0, -7.0], val\n"
        "g = np.random.default_rng(0).normal(0, 0.1, 300) * np.random.default_rng(1).choice([0.01, 1, 5], 300)\n"
        "for code, p in ((K.ERF, 8.86), (K.GD, 10.0)):\n"
        "    b = g.copy()\n"
        "    K.transform_into(code, b, b.size, p, np.empty(0), 1.0, np.empty((4, b.size)))\n"
        "    assert np.array_equal(b.view(np.int64), K.transform_array(code, g, p).view(np.int64))\n"
        "print('ok')\n"
    )
    env = dict(os.environ, NUMBA_CPU_NAME="generic", NUMBA_CACHE_DIR=str(tmp_path))
    env.pop("NUMBA_CPU_FEATURES", None)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]
