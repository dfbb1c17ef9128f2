"""``kernels.compress.list_above``: both forms (AVX-512's compress, 8 entries at a time, and the one-at-a-time
listing) list exactly the entries with ``|p x| > split``, in order, with their values, whatever the length (the
compress form's tail), the mix, the signs and the special values; on an AVX-512 machine the compress form is
the one compiled, and it is the instruction."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from numba import njit

from crfkit.kernels import compress as C


def _reference(buf, p, split):
    with np.errstate(invalid="ignore", over="ignore"):
        keep = np.abs(p * buf) > split
    pos = np.nonzero(keep)[0]
    return pos, buf[pos]


def _check(buf, p, split):
    want_pos, want_val = _reference(buf, p, split)
    for compress in (False, True):
        pos, val = C.list_above_array(buf, p, split, compress)
        np.testing.assert_array_equal(pos, want_pos)
        np.testing.assert_array_equal(val.view(np.int64), want_val.view(np.int64))   # the bits, -0.0 and NaN too


@settings(max_examples=80, deadline=None)
@given(n=st.integers(0, 70), seed=st.integers(0, 2 ** 32 - 1), share=st.floats(0.0, 1.0),
       p=st.sampled_from([1.0, 5.0 * math.sqrt(math.pi), 10.0, -3.0]))
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
    _check(np.full(n, 3.0), 1.0, 1.25)        # every entry listed
    _check(np.full(n, 0.5), 1.0, 1.25)        # none


def test_compress_form_writes_nothing_past_the_count():
    buf = np.array([0.0, 9.0, 0.0, 0.0, 9.0, 0.0, 0.0, 0.0, 9.0, 0.0, 0.0], dtype=np.float64)
    idx = np.full(12, -7, np.int64)
    sv = np.full(12, -7.0)

    @njit(cache=False)
    def run(buf, idx, sv):
        return C.list_above_compress(buf, 8, 1.0, 1.25, idx, sv)     # the first vector only

    assert run(buf, idx, sv) == 2
    assert idx.tolist() == [1, 4] + [-7] * 10
    assert sv.tolist() == [9.0, 9.0] + [-7.0] * 10


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


def test_without_avx512_the_serial_form_is_chosen_and_both_still_list_right(tmp_path):
    """Compiled for a CPU without AVX-512 (``NUMBA_CPU_NAME=generic``, in a subprocess with its own cache): the
    kernels choose the one-at-a-time listing, and the compress form, which LLVM then expands lane by lane,
    still lists the same entries."""
    import os
    import subprocess
    import sys
    code = (
        "import numpy as np\n"
        "from crfkit.kernels import compress as C\n"
        "assert not C.HAVE_COMPRESS\n"
        "buf = np.array([0.1, -2.0, 0.0, np.nan, 3.0, -0.5, 1.3, -1.3, 9.0, 0.2, -7.0])\n"
        "for compress in (False, True):\n"
        "    pos, val = C.list_above_array(buf, 1.0, 1.25, compress)\n"
        "    assert pos.tolist() == [1, 4, 6, 7, 8, 10], pos\n"
        "    assert val.tolist() == [-2.0, 3.0, 1.3, -1.3, 9.0, -7.0], val\n"
        "print('ok')\n")
    env = dict(os.environ, NUMBA_CPU_NAME="generic", NUMBA_CACHE_DIR=str(tmp_path))
    env.pop("NUMBA_CPU_FEATURES", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]
