"""TimerService: runs the one TimerWheel of the engine on the asyncio loop.

Every deadline of the engine (retry delays, invisibility timeouts, delayed delivery) is a key in
one `TimerWheel`; the service keeps at most one `loop.call_at` handle, armed for the earliest
deadline, and hands due keys to `on_due` in batches. Time comes from an injected `Clock`, so tests
drive it with `ManualClock` and `poke()` and never sleep.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog

from gateway.engine.clock import Clock
from gateway.timewheel import TimerWheel

_log = structlog.get_logger(__name__)

MAX_SLEEP_MS = 1000
"""Longest the service sleeps without re-reading the clock, so a wall-clock step is noticed."""


class TimerService:
    """Fires scheduled keys through `on_due` when the clock reaches their deadlines.

    `on_due` receives lists of keys (at most `max_batch` per call), ordered by deadline; once
    handed over a key is no longer scheduled. An exception from `on_due` is logged and the
    service carries on with the next batch.
    """

    def __init__(
        self,
        clock: Clock,
        on_due: Callable[[list[int]], None],
        tick_ms: int = 1,
        *,
        max_batch: int = 4096,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch={max_batch!r} must be >= 1")
        self._clock = clock
        self._on_due = on_due
        self._max_batch = max_batch
        self._wheel = TimerWheel(clock.now_ms(), tick_ms)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._armed_for: int | None = None
        self._firing = False
        self._again = False

    def __len__(self) -> int:
        return len(self._wheel)

    def __contains__(self, key: object) -> bool:
        return key in self._wheel

    def deadline_of(self, key: int) -> int | None:
        """The deadline `key` is scheduled for, or None."""
        return self._wheel.deadline_of(key)

    def schedule(self, deadline_ms: int, key: int) -> None:
        """Fire `key` at `deadline_ms` (replacing an earlier schedule of the same key)."""
        self._wheel.schedule(deadline_ms, key)
        armed = self._armed_for
        if (armed is None or deadline_ms < armed) and self._loop is not None and not self._firing:
            self._arm()

    def cancel(self, key: int) -> bool:
        """Unschedule `key`; True if it was scheduled. The armed handle may wake up idle once."""
        return self._wheel.cancel(key)

    def start(self) -> None:
        """Begin firing on the running loop."""
        if self._loop is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._arm()

    async def stop(self) -> None:
        """Stop firing; scheduled keys stay scheduled (and fire if the service starts again)."""
        self._disarm()
        self._loop = None

    def poke(self) -> None:
        """Fire whatever is due by the clock's time now, then re-arm (ManualClock tests)."""
        if self._loop is not None:
            self._run()

    # ------------------------------------------------------------------ internals

    def _run(self) -> None:
        """Advance the wheel to the clock's time and deliver due keys; re-entry safe."""
        if self._firing:
            self._again = True
            return
        self._firing = True
        self._disarm()
        try:
            again = True
            while again:
                self._again = False
                self._deliver(self._wheel.advance(self._clock.now_ms()))
                again = self._again
        finally:
            self._firing = False
        if self._loop is not None:
            self._arm()

    def _deliver(self, due: list[int]) -> None:
        """Hand `due` to `on_due` in batches; a failing batch is logged, the rest still go."""
        size = self._max_batch
        for start in range(0, len(due), size):
            batch = due[start : start + size] if len(due) > size else due
            try:
                self._on_due(batch)
            except Exception:
                _log.exception("timer_on_due_failed", keys=len(batch), first_key=batch[0])

    def _arm(self) -> None:
        """Point the one loop handle at the earliest deadline (or at nothing)."""
        loop = self._loop
        if loop is None:
            return
        deadline = self._wheel.next_deadline_ms()
        if deadline is None:
            self._disarm()
            return
        if self._handle is not None and self._armed_for == deadline:
            return
        self._disarm()
        delay_ms = min(max(deadline - self._clock.now_ms(), 0), MAX_SLEEP_MS)
        self._handle = loop.call_at(loop.time() + delay_ms / 1000, self._run)
        self._armed_for = deadline

    def _disarm(self) -> None:
        """Cancel the loop handle, if one is armed."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._armed_for = None
