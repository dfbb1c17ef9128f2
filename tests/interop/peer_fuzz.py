"""The fuzz harness of the peer model readers (CRFsuite, CRF++, Wapiti), generic over the format.

:func:`fuzz_reader` takes a reader (``read(path) -> CRFModel``) and the bytes of a valid file, and
feeds the reader damaged copies: truncations, single-byte flips, 32-bit words overwritten with huge
or negative counts, runs of bytes zeroed or set, garbage appended.  Each case must end in a model
(a flip inside a weight or a name can leave a valid file) or a :class:`crfkit.errors.CrfkitError`;
any other exception fails.  A case is also held to a memory ceiling (the peak of Python and numpy
allocations that :mod:`tracemalloc` sees, against the file size) and to a hang guard (a case
running past ``hang_seconds`` fails: a loop that a count in the file drives, not a speed target).

Import it from a test in this folder: ``from peer_fuzz import fuzz_reader``.
"""

from __future__ import annotations

import os
import signal
import struct
import time
import tracemalloc
from dataclasses import dataclass, field

import numpy as np

from crfkit.errors import CrfkitError
from crfkit.model import CRFModel


@dataclass
class FuzzStats:
    """What a run of :func:`fuzz_reader` saw: cases, how they ended, time and memory."""

    cases: int = 0
    errors: int = 0  # ended in a CrfkitError
    models: int = 0  # ended in a model (the damage left a readable file)
    seconds: float = 0.0
    max_case_seconds: float = 0.0
    peak_bytes: int = 0  # the largest peak of one case (tracemalloc)
    messages: dict = field(default_factory=dict)  # first words of the error messages -> count

    def summary(self) -> str:
        return (
            f"{self.cases} cases ({self.errors} CrfkitError, {self.models} still readable) in "
            f"{self.seconds:.2f} s (slowest {self.max_case_seconds * 1e3:.1f} ms), "
            f"peak {self.peak_bytes / 2**20:.2f} MiB"
        )


class _Hang(Exception):
    pass


def _alarm(signum, frame):
    raise _Hang


def mutations(valid: bytes, rng: np.random.Generator, n_random: int = 300):
    """``(name, bytes)`` of the damaged copies of ``valid``: every truncation of the first 128
    bytes and a sample after; byte flips (random values, 0x00, 0xFF, single bits); 32-bit words set
    to 0xFFFFFFFF, 0x7FFFFFFF, 0x80000000, the file size and small values, at every aligned offset
    of the first 256 bytes and a sample after; runs zeroed or set to 0xFF; garbage appended."""
    n = len(valid)
    cuts = sorted(set(range(min(n, 128))) | set(rng.integers(0, n, size=min(n, 64)).tolist()))
    for k in cuts:
        yield f"truncate@{k}", valid[:k]
    for _ in range(n_random):
        i = int(rng.integers(0, n))
        b = bytearray(valid)
        kind = int(rng.integers(0, 4))
        b[i] = (
            int(rng.integers(0, 256)),
            0x00,
            0xFF,
            b[i] ^ (1 << int(rng.integers(0, 8))),
        )[kind]
        yield f"flip@{i}", bytes(b)
    big = (0xFFFFFFFF, 0x7FFFFFFF, 0x80000000, n, n + 1, 1 << 24, 0, 1, 3)
    offs = sorted(
        set(range(0, min(n - 3, 256), 1)) | set(rng.integers(0, max(n - 3, 1), 64).tolist())
    )
    for off in offs:
        if off + 4 > n:
            continue
        v = big[int(rng.integers(0, len(big)))]
        for fmt in ("<I", ">I"):
            b = bytearray(valid)
            b[off : off + 4] = struct.pack(fmt, v)
            yield f"word{fmt}{v:#x}@{off}", bytes(b)
    for _ in range(max(8, n_random // 10)):
        i = int(rng.integers(0, n))
        k = int(rng.integers(1, 64))
        b = bytearray(valid)
        b[i : i + k] = bytes([0xFF if rng.random() < 0.5 else 0x00]) * len(b[i : i + k])
        yield f"run@{i}+{k}", bytes(b)
    yield "garbage-appended", valid + bytes(rng.integers(0, 256, 257, dtype=np.uint8))
    yield "doubled", valid + valid
    yield "empty", b""


def fuzz_reader(
    read,
    valid: bytes,
    tmp_path,
    *,
    seed: int = 0,
    n_random: int = 300,
    suffix: str = ".model",
    memory_factor: float = 64.0,
    memory_allowance: int = 32 << 20,
    hang_seconds: int = 60,
    check_model=None,
) -> FuzzStats:
    """Feed ``read`` (``read(path) -> CRFModel``) the damaged copies of ``valid`` (the bytes of a
    valid file; :func:`mutations`) written under ``tmp_path``; each must give a model or raise a
    :class:`CrfkitError` within ``memory_allowance + memory_factor x len(valid)`` bytes of peak
    allocation and ``hang_seconds``.  ``check_model(model)`` (optional) is called on every model a
    damaged file still gives.  Returns the :class:`FuzzStats`; an assertion error names the case
    that broke the rules."""
    rng = np.random.default_rng(seed)
    path = os.path.join(os.fspath(tmp_path), "fuzz" + suffix)
    ceiling = memory_allowance + memory_factor * len(valid)
    stats = FuzzStats()
    use_alarm = hasattr(signal, "SIGALRM")
    old = signal.signal(signal.SIGALRM, _alarm) if use_alarm else None
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    try:
        for name, data in mutations(valid, rng, n_random):
            with open(path, "wb") as f:
                f.write(data)
            tracemalloc.reset_peak()
            base = tracemalloc.get_traced_memory()[0]
            t0 = time.perf_counter()
            if use_alarm:
                signal.alarm(hang_seconds)
            try:
                model = read(path)
            except CrfkitError as e:
                stats.errors += 1
                msg = str(e)
                assert os.path.basename(path) in msg, f"{name}: the message names no file: {msg}"
                key = " ".join(msg.split(":", 1)[-1].split()[:4])
                stats.messages[key] = stats.messages.get(key, 0) + 1
            except _Hang:
                raise AssertionError(f"{name}: the reader ran past {hang_seconds} s") from None
            except Exception as e:  # noqa: BLE001 -- the point: anything else is a bug
                raise AssertionError(f"{name}: {type(e).__name__}: {e}") from e
            else:
                assert isinstance(model, CRFModel), f"{name}: the reader returned {model!r}"
                stats.models += 1
                if check_model is not None:
                    check_model(model)
            finally:
                if use_alarm:
                    signal.alarm(0)
            dt = time.perf_counter() - t0
            peak = tracemalloc.get_traced_memory()[1] - base
            stats.cases += 1
            stats.seconds += dt
            stats.max_case_seconds = max(stats.max_case_seconds, dt)
            stats.peak_bytes = max(stats.peak_bytes, peak)
            assert peak <= ceiling, (
                f"{name}: peak allocation {peak} bytes over the {ceiling:.0f}-byte ceiling "
                f"for a {len(valid)}-byte file"
            )
    finally:
        if use_alarm:
            signal.signal(signal.SIGALRM, old)
        if not was_tracing:
            tracemalloc.stop()
    return stats
