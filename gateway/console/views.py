"""What the console's templates show, made from admin API answers: rates from transition totals,
the waiting-retries chart, a timeline in words, a body preview."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from gateway.preview import duration, iso_ms
from gateway.v1 import admin_pb2 as pb

RATE_WINDOW_S = 60.0
"""Rates are taken over (up to) this long: the oldest sample within it and the newest."""
MAX_RATE_GROUPS = 10_000


class Rates:
    """Per-second rates of a group's deliveries, retries and dead letters, from the totals the
    admin API gives at each look (the first look has none yet)."""

    def __init__(self) -> None:
        self._samples: dict[tuple[str, str], deque[tuple[float, int, int, int]]] = {}

    def sample(self, topic: str, group: str, totals: pb.GroupTotals,
               now: float | None = None) -> tuple[float, float, float] | None:
        """Record the totals; (delivered, retried, dead-lettered) per second, or None."""
        t = time.monotonic() if now is None else now
        key = (topic, group)
        samples = self._samples.get(key)
        if samples is None:
            if len(self._samples) >= MAX_RATE_GROUPS:
                self._samples.clear()
            samples = self._samples[key] = deque()
        samples.append((t, totals.delivered, totals.retried, totals.dead_lettered))
        while len(samples) > 2 and t - samples[1][0] >= RATE_WINDOW_S:
            samples.popleft()
        first = samples[0]
        span = t - first[0]
        if span < 1.0:
            return None
        last = samples[-1]
        return tuple(max(0, last[i] - first[i]) / span for i in (1, 2, 3))  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class Bar:
    attempt: int
    count: int
    next_due_ms: int
    width: float
    """0..1 of the chart's width."""
    y: int


def bars(buckets: Sequence[pb.AttemptRetries], row_px: int = 30) -> list[Bar]:
    top = max((b.count for b in buckets), default=0)
    return [Bar(b.attempt, b.count, b.next_due_ms, b.count / top if top else 0.0, i * row_px)
            for i, b in enumerate(buckets)]


@dataclass(frozen=True, slots=True)
class Step:
    ts_ms: int
    offset: str
    """Time since the first event shown (`+1.5 s`)."""
    state: str
    attempt: int
    title: str
    detail: str


def timeline(events: Sequence[pb.TimelineEvent]) -> list[Step]:
    """The events in words, oldest first."""
    if not events:
        return []
    start = events[0].ts_ms
    steps = []
    for e in events:
        offset = "" if e.ts_ms == start else "+" + duration(max(0, e.ts_ms - start))
        title, detail = _words(e)
        steps.append(Step(e.ts_ms, offset, e.to_state, e.attempt, title, detail))
    return steps


def _words(e: pb.TimelineEvent) -> tuple[str, str]:
    reason = e.reason
    to = e.to_state
    if to == "READY":
        if not e.from_state:
            return "Published", ""
        if e.from_state == "WAITING_RETRY":
            return "Retry due", "ready for delivery again"
        return "Ready again", reason
    if to == "INFLIGHT":
        if e.from_state == "INFLIGHT":
            return "Invisible duration changed", f"invisible for {duration(e.delay_ms)}"
        return f"Delivered (attempt {e.attempt})", ""
    if to == "WAITING_RETRY":
        parts = [f"retry in {duration(e.delay_ms)}" if e.delay_ms else "retry"]
        if e.destination:
            parts.append(f"via {e.destination}")
        return f"Failed: {reason}" if reason else "Failed", ", ".join(parts)
    if to == "COMMITTED":
        return "Acked", ""
    if to == "DEAD_LETTERED":
        where = f"moved to {e.destination}" if e.destination else ""
        return f"Dead-lettered: {reason}" if reason else "Dead-lettered", where
    if to == "DISCARDED":
        return f"Discarded: {reason}" if reason else "Discarded", ""
    return to, reason


def summary(events: Sequence[pb.TimelineEvent]) -> str:
    """`3 deliveries, 2 retries, dead-lettered 56 ms after the first event`."""
    deliveries = sum(1 for e in events if e.to_state == "INFLIGHT")
    retries = sum(1 for e in events if e.to_state == "WAITING_RETRY")
    text = f"{deliveries} deliver{'y' if deliveries == 1 else 'ies'}, " \
           f"{retries} retr{'y' if retries == 1 else 'ies'}"
    ends = [e for e in events if e.to_state in ("DEAD_LETTERED", "COMMITTED", "DISCARDED")]
    if ends and len(events) > 1:
        last = ends[-1]
        verb = {"DEAD_LETTERED": "dead-lettered", "COMMITTED": "acked",
                "DISCARDED": "discarded"}[last.to_state]
        text += f"; {verb} {duration(max(0, last.ts_ms - events[0].ts_ms))} after the first event"
    return text


def rate_text(value: float | None) -> str:
    if value is None:
        return "–"
    if value == 0:
        return "0"
    if value >= 10:
        return f"{value:.0f}"
    return f"{value:.1f}" if value >= 0.1 else f"{value:.2f}"


def plural(n: int, word: str) -> str:
    """`1 message`, `2 messages`, `1 dead letter`, `3 dead letters`."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def in_text(due_ms: int, now_ms: int | None = None) -> str:
    """`in 2 min 30 s`, `now`, or "" for none."""
    if not due_ms:
        return ""
    now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    return "due now" if due_ms <= now else "in " + duration(due_ms - now)


__all__ = ["Bar", "Rates", "Step", "bars", "in_text", "iso_ms", "plural", "rate_text",
           "summary", "timeline"]
