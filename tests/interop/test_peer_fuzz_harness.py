"""The fuzz harness (peer_fuzz.fuzz_reader) on crfkit's own loader, and on readers that break its
rules: it must pass the hardened loader and catch a reader that raises something else, allocates
from a count in the file, or hangs."""

from __future__ import annotations

import numpy as np
import pytest
from peer_fuzz import fuzz_reader

from crfkit.errors import CrfkitError
from crfkit.model import CRFModel


@pytest.fixture(scope="module")
def small_model_bytes(tmp_path_factory):
    from conftest import random_sequences
    from crfkit.train import train

    X, Y = random_sequences(np.random.default_rng(3), 20, n_labels=3)
    model = train(X, Y, max_iterations=10).model
    p = tmp_path_factory.mktemp("m") / "small.crfkit"
    model.save(p)
    return p.read_bytes()


def test_harness_passes_the_hardened_loader(small_model_bytes, tmp_path):
    stats = fuzz_reader(CRFModel.load, small_model_bytes, tmp_path, n_random=60)
    assert stats.cases > 100 and stats.errors > 0
    assert stats.cases == stats.errors + stats.models


def test_harness_catches_a_foreign_exception(small_model_bytes, tmp_path):
    def read(path):
        with open(path, "rb") as f:
            data = f.read()
        if len(data) < 10:
            raise IndexError("short")
        return CRFModel.load(path)

    with pytest.raises(AssertionError, match="IndexError"):
        fuzz_reader(read, small_model_bytes, tmp_path, n_random=5)


def test_harness_catches_an_unbounded_allocation(small_model_bytes, tmp_path):
    def read(path):
        with open(path, "rb") as f:
            data = f.read()
        n = int.from_bytes(data[8:12].ljust(4, b"\0"), "little")
        np.ones(min(n, 1 << 28), np.uint8)  # allocates what the file says
        raise CrfkitError(f"{path}: no")

    with pytest.raises(AssertionError, match="peak allocation"):
        fuzz_reader(read, small_model_bytes, tmp_path, n_random=5, memory_allowance=1 << 20)


def test_harness_catches_a_message_without_the_file(small_model_bytes, tmp_path):
    def read(path):
        raise CrfkitError("bad file")

    with pytest.raises(AssertionError, match="names no file"):
        fuzz_reader(read, small_model_bytes, tmp_path, n_random=5)
