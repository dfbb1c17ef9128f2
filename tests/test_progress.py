"""crfkit.progress: silent off a terminal, counts and ETA on one, rate-limited redraws."""

from __future__ import annotations

import io

import pytest

from crfkit.progress import Progress, format_seconds, stream_is_interactive


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


class TTY(io.StringIO):
    def isatty(self):
        return True


def test_disabled_on_a_non_terminal_stream_prints_nothing():
    s = io.StringIO()
    with Progress(total=10, desc="x", stream=s) as bar:
        assert not bar.enabled
        for _ in range(10):
            bar.update()
        bar.set_postfix("obj 1")
    assert s.getvalue() == ""


def test_enabled_on_a_terminal_unless_ci_or_dumb(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert stream_is_interactive(TTY())
    assert Progress(stream=TTY()).enabled
    monkeypatch.setenv("TERM", "dumb")
    assert not Progress(stream=TTY()).enabled
    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.setenv("CI", "true")
    assert not Progress(stream=TTY()).enabled
    assert not stream_is_interactive(object())


def test_enabled_explicitly_shows_counts_rate_elapsed_eta():
    s, clock = io.StringIO(), FakeClock()
    bar = Progress(total=4, desc="training", stream=s, enabled=True, clock=clock, unit="iter")
    clock.t = 1.0
    bar.update()
    bar.set_postfix("obj 0.5")
    clock.t = 2.0
    bar.update()
    text = s.getvalue()
    assert "training: 1/4" in text and "\r" in text
    assert "training: 2/4 ( 50%)" in text and "1.0 iter/s" in text
    assert "elapsed 0:02" in text and "eta 0:02" in text and "obj 0.5" in text
    bar.close()
    assert s.getvalue().endswith("\n")
    n = len(s.getvalue())
    bar.close()  # idempotent
    assert len(s.getvalue()) == n


def test_counter_without_total():
    s, clock = io.StringIO(), FakeClock()
    with Progress(desc="reading", stream=s, enabled=True, clock=clock) as bar:
        clock.t = 0.5
        bar.update(3)
    assert "reading: 3 " in s.getvalue() and "eta" not in s.getvalue()


def test_redraws_are_rate_limited():
    s, clock = io.StringIO(), FakeClock()
    bar = Progress(total=1000, stream=s, enabled=True, clock=clock)
    for i in range(1000):
        clock.t = i * 0.001  # 1000 updates in one second
        bar.update()
    assert 9 <= bar.draws <= 11
    assert s.getvalue().count("\r") == bar.draws


def test_write_puts_a_line_above_the_bar():
    s, clock = io.StringIO(), FakeClock()
    bar = Progress(total=2, stream=s, enabled=True, clock=clock)
    bar.update()
    bar.write("hello")
    assert "hello\n" in s.getvalue()
    assert s.getvalue().rstrip(" ").endswith("1/2 ( 50%) ? it/s elapsed 0:00 eta ?")
    quiet = io.StringIO()
    Progress(stream=quiet).write("plain")
    assert quiet.getvalue() == "plain\n"


@pytest.mark.parametrize(
    "s,txt", [(0, "0:00"), (61, "1:01"), (3725, "1:02:05"), (float("nan"), "?")]
)
def test_format_seconds(s, txt):
    assert format_seconds(s) == txt
