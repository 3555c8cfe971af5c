"""Synthetic message lifecycles as transition events, for benchmarks, demos and tests.

Each message is published (READY), delivered (INFLIGHT) and then either committed or failed; a
failure waits along the policy's retry table (WAITING_RETRY -> READY) until the message commits
or runs out of retries and is dead-lettered or discarded. Deterministic for a given seed.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from gateway.telemetry.analysis import EXPECTED_DELAYS, expected_delay_ms, parse_duration_ms
from gateway.telemetry.events import TransitionEvent


@dataclass(frozen=True, slots=True)
class Profile:
    """How one simulated subscription behaves."""

    dialect: str
    group: str
    topic: str
    max_retries: int
    fail_rate: float
    """Chance that one delivery fails."""
    dead_letter: bool
    """Exhausted messages go to a dead-letter topic (else they are discarded)."""


DEFAULT_PROFILES: tuple[Profile, ...] = (
    Profile("rocketmq", "orders", "orders", 16, 0.35, True),
    Profile("pulsar", "billing", "invoices", 4, 0.5, False),
    Profile("rabbitmq", "audit", "audit", 3, 0.6, True),
)


def lifecycles(
    count: int,
    *,
    start_ms: int = 1_767_225_600_000,
    gateway_id: str = "gw-sim",
    profiles: Sequence[Profile] = DEFAULT_PROFILES,
    seed: int = 7,
) -> Iterator[TransitionEvent]:
    """Yield every transition of `count` messages, message by message (times interleave)."""
    rng = random.Random(seed)
    tables = {
        name: [parse_duration_ms(d) for d in delays] for name, delays in EXPECTED_DELAYS.items()
    }
    for n in range(count):
        p = profiles[n % len(profiles)]
        msg = _Message(p, f"{p.dialect[:2]}-{n:08d}", gateway_id, start_ms + n * 250)
        yield msg.move("READY")
        while True:
            msg.now_ms += rng.randint(1, 400)
            msg.attempt += 1
            yield msg.move("INFLIGHT")
            msg.now_ms += rng.randint(5, 2_000)
            if rng.random() >= p.fail_rate:
                yield msg.move("COMMITTED")
                break
            if msg.attempt > p.max_retries:
                if p.dead_letter:
                    yield msg.move("DEAD_LETTERED", dest=f"{p.group}-DLQ", why="max retries")
                else:
                    yield msg.move("DISCARDED", why="max retries")
                break
            delay = expected_delay_ms(tables.get(p.dialect, [10_000]), msg.attempt)
            yield msg.move("WAITING_RETRY", delay_ms=delay, why="consumer failure")
            msg.now_ms += delay + rng.randint(0, 50)
            yield msg.move("READY")


@dataclass(slots=True)
class _Message:
    profile: Profile
    message_id: str
    gateway_id: str
    now_ms: int
    attempt: int = 0
    state: str = ""

    def move(self, to: str, *, delay_ms: int = 0, dest: str = "", why: str = "") -> TransitionEvent:
        p = self.profile
        event = TransitionEvent.new(
            ts_ms=self.now_ms,
            gateway_id=self.gateway_id,
            dialect=p.dialect,
            backend="embedded",
            topic=p.topic,
            group=p.group,
            message_id=self.message_id,
            attempt=self.attempt,
            from_state=self.state,
            to_state=to,
            delay_ms=delay_ms,
            reason=why,
            destination=dest,
        )
        self.state = to
        return event
