"""Where the engine gets the time: the wall clock in production, a manual one in tests."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """A source of the current wall-clock time in whole milliseconds."""

    def now_ms(self) -> int:
        """The current time in ms since the Unix epoch (or since the clock's own origin)."""
        ...


class SystemClock:
    """The real wall clock (`time.time`), in ms; deadlines are stored in this time base."""

    def now_ms(self) -> int:
        """Milliseconds since the Unix epoch, rounded down."""
        return time.time_ns() // 1_000_000


class ManualClock:
    """A clock that moves only when a test moves it."""

    def __init__(self, start_ms: int = 0) -> None:
        self._now_ms = start_ms

    def now_ms(self) -> int:
        """The time the test last set."""
        return self._now_ms

    def advance(self, ms: int) -> int:
        """Move forward by `ms` (>= 0); returns the new time."""
        if ms < 0:
            raise ValueError(f"ms={ms!r} must be >= 0")
        self._now_ms += ms
        return self._now_ms

    def set(self, ms: int) -> None:
        """Jump to `ms` (may go backwards, to test how callers cope with a clock step)."""
        self._now_ms = ms
