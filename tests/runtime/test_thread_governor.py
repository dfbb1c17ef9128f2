"""The thread governor (:class:`crfkit.parallel.ThreadGovernor`): the full-batch kernels run on the
thread count that is fastest now.  Its choices are checked on a simulated clock (each call's time is
what the simulated host gives the count), its effect on the results on a real objective."""

from __future__ import annotations

import numba
import numpy as np
import pytest

from conftest import random_sequences
from crfkit.features.encode import build
from crfkit.objective import Objective, Regularization
from crfkit.parallel import ThreadGovernor, set_threads


class Host:
    """A simulated host: ``speed[n]`` seconds per call on ``n`` threads (changed by the test), a
    clock that advances by that time during each call, and the thread count the governor sets."""

    def __init__(self, speed: dict[int, float], noise: float = 0.0, seed: int = 0):
        self.speed = dict(speed)
        self.now = 0.0
        self.threads = 2
        self.noise = noise
        self.rng = np.random.default_rng(seed)
        self.ran: list[int] = []

    def clock(self) -> float:
        return self.now

    def set(self, n: int) -> None:
        self.threads = n

    def get(self) -> int:
        return self.threads

    def governor(self, most: int = 2) -> ThreadGovernor:
        return ThreadGovernor(most, clock=self.clock, set_threads=self.set, get_threads=self.get)

    def calls(self, gov: ThreadGovernor, k: int, kind: str = "grad") -> list[int]:
        out = []
        for _ in range(k):
            with gov.run(kind) as n:
                assert self.threads == n
                # a busy host's noise only ever adds time
                self.now += self.speed[n] * (1.0 + self.noise * self.rng.random())
            out.append(n)
        self.ran += out
        return out


def cost(host: Host, ran: list[int]) -> float:
    return sum(host.speed[n] for n in ran)


def test_quiet_host_keeps_all_threads_with_few_trials():
    host = Host({2: 0.6, 1: 1.0}, noise=0.1)
    gov = host.governor()
    ran = host.calls(gov, 200)
    assert gov.current() == 2
    assert ran.count(1) <= 10  # a few trials of one thread, fewer as the choice holds
    assert cost(host, ran) <= 1.03 * 200 * 0.6


def test_busy_host_runs_on_one_thread_within_a_few_calls():
    host = Host({2: 1.5, 1: 1.0}, noise=0.1)
    gov = host.governor()
    ran = host.calls(gov, 100)
    assert gov.current() == 1
    assert 1 not in ran[:1] and all(n == 1 for n in ran[2:4])  # the second timed call tries one
    # never slower than one thread by more than the trials of two
    assert cost(host, ran) <= 1.05 * 100 * 1.0
    assert gov.summary() == f"2 threads for {ran.count(2)} calls, 1 for {ran.count(1)}"


def test_follows_the_load_when_it_changes():
    host = Host({2: 0.6, 1: 1.0})
    gov = host.governor()
    host.calls(gov, 60)
    assert gov.current() == 2
    host.speed = {2: 2.0, 1: 1.05}  # another process takes a core
    ran = host.calls(gov, 10)
    # the slowed call starts a trial at once; a trial of 2 threads again after FIRST_INTERVAL
    assert ran[1 : 2 + ThreadGovernor.FIRST_INTERVAL] == [1] * (1 + ThreadGovernor.FIRST_INTERVAL)
    assert ran.count(2) <= 3
    host.speed = {2: 0.6, 1: 1.0}  # the core is free again
    ran = host.calls(gov, 3 * ThreadGovernor.MAX_INTERVAL)
    assert gov.current() == 2
    back = ran.index(2)
    assert back <= ThreadGovernor.MAX_INTERVAL + 2
    assert all(n == 2 for n in ran[back + 1 : back + 5])


def test_more_cores_try_half_of_them_too():
    host = Host({8: 1.0, 4: 0.7, 1: 3.0})
    gov = host.governor(8)
    assert gov.candidates == [8, 4, 1]
    host.calls(gov, 40)
    assert gov.current() == 4


def test_one_thread_has_nothing_to_try():
    host = Host({1: 1.0})
    gov = host.governor(1)
    assert host.calls(gov, 3 * ThreadGovernor.MAX_INTERVAL) == [1] * (
        3 * ThreadGovernor.MAX_INTERVAL
    )


def test_kinds_are_timed_apart():
    host = Host({2: 0.6, 1: 1.0})
    gov = host.governor()
    host.calls(gov, 20, "grad")
    host.speed = {2: 0.2, 1: 0.1}  # a different call's own times (e.g. the loss alone)
    host.calls(gov, 20, "loss")
    assert gov.current("grad") == 2 and gov.current("loss") == 1


def test_thread_count_is_restored_after_a_call_that_raises():
    host = Host({2: 1.0, 1: 0.5})
    gov = host.governor()
    host.threads = 2
    host.calls(gov, 3)  # the third call tries one thread
    with pytest.raises(KeyError):
        with gov.run() as n:
            assert n == 1 and host.threads == 1
            raise KeyError("the kernel failed")
    assert host.threads == 2


def test_a_chosen_count_is_not_governed(restore_threads, monkeypatch):
    set_threads(2)
    if numba.get_num_threads() < 2:
        pytest.skip("one numba thread")
    monkeypatch.delenv("CRFKIT_THREADS", raising=False)
    assert ThreadGovernor.for_threads(None) is not None
    assert ThreadGovernor.for_threads(0) is not None
    assert ThreadGovernor.for_threads(2) is None
    assert ThreadGovernor.for_threads(1) is None
    monkeypatch.setenv("CRFKIT_THREADS", "2")
    assert ThreadGovernor.for_threads(None) is None
    monkeypatch.delenv("CRFKIT_THREADS")
    set_threads(1)
    assert ThreadGovernor.for_threads(None) is None  # nothing to choose from


def test_governed_objective_gives_the_bits_of_all_threads(restore_threads, monkeypatch):
    """Whatever counts the governor picks, the value and gradient are those of the plan cut for all
    threads: the same bits as a fixed ``threads=2`` objective, call after call."""
    monkeypatch.delenv("CRFKIT_THREADS", raising=False)
    set_threads(2)
    if numba.get_num_threads() < 2:
        pytest.skip("one numba thread")
    rng = np.random.default_rng(3)
    X, Y = random_sequences(rng, 200, n_labels=4, real=True, n_attr=30, max_len=12)
    space, corpus = build(X, Y)
    w = rng.normal(0, 1, space.n_features)
    reg = Regularization(l2=0.05)
    fixed = Objective(corpus, space, reg, threads=2)
    f2, g2 = fixed.value_and_grad(w)
    v2 = fixed.value(w)
    gov = Objective(corpus, space, reg)
    assert gov.governor is not None
    for _ in range(8):  # the third call tries one thread, whatever the times
        f, g = gov.value_and_grad(w)
        assert f == f2
        np.testing.assert_array_equal(g, g2)
        assert gov.value(w) == v2
    assert set(gov.governor.calls) == {1, 2}
    assert sum(gov.governor.calls.values()) == 16
    assert numba.get_num_threads() == 2  # the count set before is back after every call


@pytest.mark.parametrize("n_attr", [12, 6000])  # 6000 x 4 labels: more than one SUM_BLOCK
def test_value_and_gradient_are_the_same_bits_on_any_thread_count(restore_threads, n_attr):
    """The governor changes the count between the evaluations of one run, so nothing the full-batch
    kernels return may follow it: ``w . emp`` and ``||w||^2`` were ``prange`` reductions (their
    rounding followed the thread count: a resumed run left the first one's path)."""
    from crfkit.kernels.batch_common import SUM_BLOCK

    set_threads(2)
    if numba.get_num_threads() < 2:
        pytest.skip("one numba thread")
    rng = np.random.default_rng(11)
    n_seq = 120 if n_attr < 1000 else 1500
    X, Y = random_sequences(rng, n_seq, n_labels=4, n_attr=n_attr, max_len=9, max_attrs=4)
    space, corpus = build(X, Y, support="all")
    assert (space.n_features > SUM_BLOCK) == (n_attr > 1000)
    obj = Objective(corpus, space, Regularization(l2=0.05), threads=2)
    for _ in range(6):
        w = rng.normal(0, 0.3, space.n_features)
        got = []
        for n in (2, 1):
            numba.set_num_threads(n)
            f, g = obj.value_and_grad(w)
            got.append((f.hex(), g.tobytes(), obj.nll_sum(w).hex()))
        assert got[0] == got[1]
