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


class TimeBase:
    """Policy time and real time, and the one conversion between them.

    Policies count in policy time (retry intervals, timeouts, invisible durations); every time
    the engine hands out or waits for (deadlines, deliver-at times, timers) is real time, read
    from the `Clock`. Policy time runs `1 / scale` times as fast as real time from the moment the
    time base was made: `scale` is 1.0 in production, and tests and demos shorten real time with
    e.g. 0.001 while the policies keep their numbers. Everything that converts between the two
    (the engine, a front end that renews deliveries) asks this object, never the scale.
    """

    __slots__ = ("anchor_ms", "clock", "now_ms", "scale")

    def __init__(self, clock: Clock, scale: float = 1.0) -> None:
        if not 0.0 < scale <= 1.0:
            raise ValueError(f"scale={scale!r} must be greater than 0 and at most 1")
        self.clock = clock
        self.scale = scale
        """Real ms per policy ms."""
        self.anchor_ms = clock.now_ms()
        """The real time at which policy time and real time were equal."""
        self.now_ms = clock.now_ms
        """The real time now (the clock's own method: no call in between)."""

    def policy_now(self) -> int:
        """The time the policies see now."""
        real = self.clock.now_ms()
        scale = self.scale
        if scale == 1.0:
            return real
        return self.anchor_ms + int((real - self.anchor_ms) / scale)

    def both(self) -> tuple[int, int]:
        """(policy time, real time) from one clock reading: taken once per batch."""
        real = self.clock.now_ms()
        scale = self.scale
        if scale == 1.0:
            return real, real
        return self.anchor_ms + int((real - self.anchor_ms) / scale), real

    def real_ms(self, policy_ms: int) -> int:
        """The real length of a policy duration."""
        return int(policy_ms * self.scale)

    def policy_ms(self, real_ms: int) -> int:
        """The policy length of a real duration."""
        return int(real_ms / self.scale)

    def real_after(self, policy_ms: int) -> int:
        """The real time a policy duration from now."""
        return self.clock.now_ms() + self.real_ms(policy_ms)
