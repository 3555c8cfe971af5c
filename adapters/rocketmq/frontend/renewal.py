"""Server-side invisibility renewal for push deliveries while the SDK's listener runs.

The push consumer caches what it receives and runs the listener in threads; it never extends a
delivery itself. The gateway keeps each unsettled push delivery invisible, renewing it when half
of its current invisible time is gone, until it is settled or the consume bound has passed since
the delivery (then it times out and counts as a failure, like RocketMQ's push consume timeout).

Every renewal gives the delivery a new engine receipt while the client keeps the handle it got,
so the table also maps each handle to the delivery's current receipt. Durations asked of the
engine are in policy time, deadlines are in real time: the engine's time base converts (it may run
shortened time, `time_scale` in tests).
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.engine.clock import TimeBase


@dataclass(slots=True)
class _Entry:
    receipt: str
    """The engine receipt that settles the delivery now."""
    client_id: str
    delivered_ms: int
    deadline_ms: int
    span_ms: int
    """Invisible time last granted, in engine (real) time."""


class RenewalTable:
    """Which push deliveries need a renewal when; pure, the caller passes the time.

    `extend_ms` and `consume_bound_ms` are policy durations; times passed in are real times,
    converted by `time` (the engine's time base)."""

    def __init__(self, extend_ms: int, consume_bound_ms: int, time: TimeBase) -> None:
        self._extend_ms = extend_ms
        self._bound_ms = consume_bound_ms
        self._time = time
        self._entries: dict[str, _Entry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, handle: object) -> bool:
        return handle in self._entries

    def add(self, handle: str, client_id: str, delivered_ms: int, deadline_ms: int) -> None:
        """Track a delivery made at real `delivered_ms` whose deadline is real `deadline_ms`."""
        span = deadline_ms - delivered_ms
        if span > 0:
            self._entries[handle] = _Entry(handle, client_id, delivered_ms, deadline_ms, span)

    def current(self, handle: str) -> str:
        """Engine receipt for a handle (the handle itself when not tracked)."""
        entry = self._entries.get(handle)
        return entry.receipt if entry is not None else handle

    def pop(self, handle: str) -> str:
        """Stop tracking a handle being settled; return its current engine receipt."""
        entry = self._entries.pop(handle, None)
        return entry.receipt if entry is not None else handle

    def discard_client(self, client_id: str) -> None:
        """Stop renewing for a client that went away: its deliveries time out and return."""
        for handle in [h for h, e in self._entries.items() if e.client_id == client_id]:
            del self._entries[handle]

    def due(self, now_ms: int) -> list[tuple[str, str, int]]:
        """(handle, receipt, policy ms to ask for) to extend now; forgets finished entries."""
        result: list[tuple[str, str, int]] = []
        bound_ms = self._time.real_ms(self._bound_ms)
        for handle, entry in list(self._entries.items()):
            end_ms = entry.delivered_ms + bound_ms
            if entry.deadline_ms >= end_ms or now_ms >= entry.deadline_ms:
                del self._entries[handle]
                continue
            if entry.deadline_ms - now_ms <= entry.span_ms // 2:
                left = self._time.policy_ms(end_ms - now_ms)
                result.append((handle, entry.receipt, min(self._extend_ms, left)))
        return result

    def next_check_ms(self, now_ms: int) -> int | None:
        """How long until some entry is due (0: now); None when nothing is tracked."""
        if not self._entries:
            return None
        return max(0, min(e.deadline_ms - e.span_ms // 2 for e in self._entries.values()) - now_ms)

    def renewed(self, handle: str, receipt: str, deadline_ms: int, now_ms: int) -> None:
        entry = self._entries.get(handle)
        if entry is not None:
            entry.receipt = receipt
            entry.deadline_ms = deadline_ms
            entry.span_ms = max(1, deadline_ms - now_ms)

    def forget(self, handle: str) -> None:
        self._entries.pop(handle, None)
