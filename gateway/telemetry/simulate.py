"""Synthetic message lifecycles as transition events, for benchmarks, demos and tests.

Each message is published (READY), delivered (INFLIGHT) and then either committed or failed; a
failure waits along its profile's retry table (WAITING_RETRY -> READY) until the message commits
or runs out of retries and is dead-lettered or discarded. Deterministic for a given seed. The
default profiles are three made-up dialects: a 16-step back-off table, the 18 delay levels, and a
fixed interval.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from gateway.core.backoff import DELAY_LEVELS_MS
from gateway.telemetry.analysis import expected_delay_ms
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
    table_ms: tuple[int, ...] = (10_000,)
    """Retry k waits entry k; past the end, the last entry."""


DEFAULT_PROFILES: tuple[Profile, ...] = (
    Profile("backoff-table", "orders", "orders", 16, 0.35, True, DELAY_LEVELS_MS[2:]),
    Profile("delay-levels", "billing", "invoices", 4, 0.5, False, DELAY_LEVELS_MS),
    Profile("fixed-interval", "audit", "audit", 3, 0.6, True, (10_000,)),
)


def tables(profiles: Sequence[Profile] = DEFAULT_PROFILES) -> dict[str, tuple[int, ...]]:
    """The profiles' retry tables by dialect, as a report takes them."""
    return {p.dialect: p.table_ms for p in profiles}


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
            delay = expected_delay_ms(p.table_ms, msg.attempt)
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
