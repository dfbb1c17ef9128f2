"""A small, dependency-free progress reporter for the command line.

::

    with Progress(total=len(items), desc="features") as bar:
        for item in items:
            ...
            bar.update()

It draws one line on ``stream`` (standard error by default), redrawn in place
with ``\\r`` at most every ``min_interval`` seconds (0.1 s: ten times a
second), showing ``count/total``, the percentage, the rate, the elapsed time
and the ETA; without a ``total`` it is a counter (count, rate, elapsed).
``set_postfix(text)`` appends a short status (the current objective, say).

``enabled=None`` (the default) draws only when ``stream`` is a terminal, and
never when the ``CI`` environment variable is set or ``TERM=dumb``: output
redirected to a file or a pipe gets nothing at all from a disabled bar.
:meth:`Progress.write` prints a whole line above the bar (or just the line
when disabled), so that log messages and the bar do not fight.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import TextIO

__all__ = ["Progress", "stream_is_interactive", "format_seconds"]


def stream_is_interactive(stream) -> bool:
    """Whether a progress bar should be drawn on ``stream``: a terminal, no ``CI``, ``TERM`` not
    dumb."""
    if os.environ.get("CI") or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if isatty is not None else False
    except (ValueError, OSError):  # closed stream
        return False


def format_seconds(s: float) -> str:
    """``m:ss`` (or ``h:mm:ss``) of a duration in seconds."""
    if s != s or s in (float("inf"), float("-inf")) or s < 0:
        return "?"
    s = int(round(s))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def _fmt_rate(rate: float, unit: str) -> str:
    if rate <= 0:
        return f"? {unit}/s"
    if rate >= 100:
        return f"{rate:.0f} {unit}/s"
    if rate >= 1:
        return f"{rate:.1f} {unit}/s"
    return f"{1 / rate:.1f} s/{unit}"


class Progress:
    """A progress line on ``stream``; see the module docstring.

    ``total``: the expected count (``None``: unknown, a counter is shown);
    ``desc``: a label before the counts; ``enabled``: ``True``/``False`` to
    force, ``None`` to draw only on an interactive terminal; ``unit``: what
    is counted (for the rate); ``min_interval``: seconds between redraws;
    ``clock``: a monotonic clock (tests pass a fake one); ``start``: when the
    work began on that clock (default: now), for a bar created late.
    """

    def __init__(
        self,
        total: int | None = None,
        desc: str = "",
        stream: TextIO | None = None,
        enabled: bool | None = None,
        *,
        unit: str = "it",
        min_interval: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
        start: float | None = None,
    ):
        self.stream = sys.stderr if stream is None else stream
        self.total = None if total is None else int(total)
        self.desc = desc
        self.unit = unit
        self.min_interval = float(min_interval)
        self.enabled = stream_is_interactive(self.stream) if enabled is None else bool(enabled)
        self.n = 0
        self.postfix = ""
        self._clock = clock
        self._t0 = clock() if start is None else float(start)
        self._last_draw: float | None = None
        self._width = 0  # length of the line on screen, to blank leftovers
        self.draws = 0
        self.closed = False

    # ------------------------------------------------------------------ api
    def update(self, n: int = 1) -> None:
        self.n += n
        self._maybe_draw()

    def set_postfix(self, text: str) -> None:
        self.postfix = str(text)
        self._maybe_draw()

    def set_total(self, total: int | None) -> None:
        self.total = None if total is None else int(total)

    def write(self, line: str) -> None:
        """Print ``line`` (plus a newline) above the bar; plain printing when disabled."""
        if not self.enabled or self.closed:
            print(line, file=self.stream, flush=True)
            return
        self._clear()
        self.stream.write(line + "\n")
        self._draw(self._clock())

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.enabled:
            self._draw(self._clock())
            self.stream.write("\n")
            self.stream.flush()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------- drawing
    def text(self, now: float | None = None) -> str:
        """The progress line as it would be drawn now."""
        now = self._clock() if now is None else now
        elapsed = max(now - self._t0, 0.0)
        rate = self.n / elapsed if elapsed > 0 else 0.0
        parts = [f"{self.desc}:"] if self.desc else []
        if self.total:
            pct = 100.0 * self.n / self.total
            parts.append(f"{self.n}/{self.total} ({pct:3.0f}%)")
        else:
            parts.append(f"{self.n}")
        parts.append(_fmt_rate(rate, self.unit))
        parts.append(f"elapsed {format_seconds(elapsed)}")
        if self.total:
            left = self.total - self.n
            eta = left / rate if rate > 0 and left >= 0 else float("nan")
            parts.append(f"eta {format_seconds(eta) if left > 0 else '0:00'}")
        if self.postfix:
            parts.append(self.postfix)
        return " ".join(parts)

    def _maybe_draw(self) -> None:
        if not self.enabled or self.closed:
            return
        now = self._clock()
        if self._last_draw is not None and now - self._last_draw < self.min_interval:
            return
        self._draw(now)

    def _clear(self) -> None:
        if self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self._width = 0

    def _draw(self, now: float) -> None:
        line = self.text(now)
        pad = max(self._width - len(line), 0)
        self.stream.write("\r" + line + " " * pad)
        self.stream.flush()
        self._width = len(line)
        self._last_draw = now
        self.draws += 1
