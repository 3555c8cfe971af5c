"""Shared helpers for the telemetry tests: a manual clock and an event builder."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from gateway.telemetry.events import TransitionEvent


@dataclass
class ManualClock:
    """A wall clock that only moves when a test advances it."""

    now: int = 1_767_225_600_000

    def now_ms(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def make_event(n: int, *, ts_ms: int = 1_767_225_600_000, reason: str = "") -> TransitionEvent:
    """Event number `n` of a simple stream (message n // 3, alternating dialects)."""
    return TransitionEvent.new(
        ts_ms=ts_ms + n,
        gateway_id="gw-test",
        dialect="rocketmq" if n % 2 else "pulsar",
        backend="embedded",
        topic="orders",
        group="g1",
        message_id=f"m{n // 3}",
        attempt=1 + n % 3,
        from_state="READY",
        to_state="INFLIGHT",
        reason=reason,
    )


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local SparkSession for every telemetry test that needs one (slow to start)."""
    from gateway.telemetry import export

    session = export.build_spark("local[2]")
    yield session
    session.stop()
