"""Fixtures for the retry-core tests: the built-in registry and a driver with a manual clock.

The driver calls the pure `decide()` with the `now_ms` each step names; nothing reads real time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pytest

from adapters import builtin_registry
from gateway.core import (
    Ack,
    ConsumerLost,
    DeadLetterNow,
    DeadlinePassed,
    Decision,
    Deliver,
    Event,
    Extend,
    Fail,
    Record,
    Registry,
    RetryDue,
    RetryPolicy,
    State,
    decide,
)


class Driver:
    """One message for one group under one policy; every step names its time in ms."""

    def __init__(self, policy: RetryPolicy, topic: str = "orders", group: str = "G") -> None:
        self.policy = policy
        self.record = Record(message_id="m1", topic=topic, group=group)
        self.receipt = ""
        self.decisions: list[Decision] = []
        self._issued = 0

    def apply(self, event: Event, now_ms: int) -> Decision:
        decision = decide(self.record, event, self.policy, now_ms)
        self.record = decision.record
        self.decisions.append(decision)
        return decision

    def deliver(self, now_ms: int, invisible_ms: int | None = None) -> Decision:
        self._issued += 1
        receipt = f"rh-{self._issued}"
        decision = self.apply(Deliver(receipt, invisible_ms), now_ms)
        self.receipt = receipt
        return decision

    def fail(
        self, now_ms: int, delay_ms: int | None = None, delay_level: int | None = None
    ) -> Decision:
        return self.apply(Fail(self.receipt, delay_ms, delay_level), now_ms)

    def ack(self, now_ms: int) -> Decision:
        return self.apply(Ack(self.receipt), now_ms)

    def dead_letter(self, now_ms: int) -> Decision:
        return self.apply(DeadLetterNow(self.receipt), now_ms)

    def deadline(self, now_ms: int) -> Decision:
        return self.apply(DeadlinePassed(), now_ms)

    def due(self, now_ms: int) -> Decision:
        return self.apply(RetryDue(), now_ms)

    def lost(self, now_ms: int) -> Decision:
        return self.apply(ConsumerLost(), now_ms)

    def extend(self, now_ms: int, invisible_ms: int) -> Decision:
        self._issued += 1
        new = f"rh-{self._issued}"
        decision = self.apply(Extend(self.receipt, invisible_ms, new), now_ms)
        self.receipt = new
        return decision

    def fail_every_delivery(
        self, processing_ms: int = 0, invisible_ms: int | None = None, limit: int = 100
    ) -> list[int]:
        """Deliver as soon as visible and fail each delivery after `processing_ms`.

        Returns the delivery times; stops at a terminal state or after `limit` deliveries."""
        now = self.record.visible_at_ms
        times: list[int] = []
        while not self.record.state.terminal and len(times) < limit:
            if self.record.state is State.WAITING_RETRY:
                now = self.record.visible_at_ms
                self.due(now)
            elif self.record.state is State.INFLIGHT:
                now = self.record.deadline_ms
                self.deadline(now)
            self.deliver(now, invisible_ms)
            times.append(now)
            now += processing_ms
            self.fail(now)
        return times


PolicyMaker = Callable[..., RetryPolicy]
DriverMaker = Callable[..., Driver]


@pytest.fixture
def registry() -> Registry:
    return builtin_registry()


@pytest.fixture
def make_policy(registry: Registry) -> PolicyMaker:
    """`make_policy("rocketmq", max_retries=3)`: option values may be given as ints."""

    def make(name: str, naming: str = "", **options: object) -> RetryPolicy:
        opts: Mapping[str, str] = {key: str(value) for key, value in options.items()}
        return registry.policy(name, opts, naming)

    return make


@pytest.fixture
def driver(make_policy: PolicyMaker) -> DriverMaker:
    """`driver("rocketmq", topic="orders", max_retries=3)` -> a Driver at READY, time 0."""

    def make(name: str, topic: str = "orders", group: str = "G", **options: object) -> Driver:
        return Driver(make_policy(name, **options), topic, group)

    return make
