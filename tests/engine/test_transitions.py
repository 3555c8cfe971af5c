"""The transitions the engine reports to its observers, per policy, on the manual clock: every
state change of a message is one transition with the state it left, in order, at the time it
happened; replayed, they give exactly `gateway plan`'s timeline of the policy."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from gateway.core.plan import Plan
from gateway.engine.api import SettleAction
from gateway.engine.observe import Transition
from gateway.telemetry.analysis import replay
from gateway.telemetry.events import row_of

from .harness import GROUP, T0, TOPIC, Harness
from .semantics import SECOND


class Recorder:
    """An observer that takes whole transitions (as the telemetry spool does)."""

    def __init__(self) -> None:
        self.seen: list[Transition] = []

    def on_transition(self, transition: Transition) -> None:
        self.seen.append(transition)

    def rows(self) -> list[dict[str, Any]]:
        return [row_of(t, seq, "gw") for seq, t in enumerate(self.seen, start=1)]

    def steps(self) -> list[tuple[int, str, str, int, int]]:
        """(ms since T0, from, to, attempt, delay) of every transition."""
        return [(t.ts_ms - T0, t.from_state, t.to_state, t.attempt, t.delay_ms)
                for t in self.seen]


@pytest.fixture
def rec(h: Harness) -> Recorder:
    recorder = Recorder()
    h.engine.observers.add(recorder)
    return recorder


def assert_replays_to(rec: Recorder, expected: Plan) -> None:
    """The transitions replay to the plan: same deliveries, waits, times, sources, end."""
    got = replay(rec.rows())
    assert got.complete
    plan_view = [(a.attempt, a.delay_ms, a.at_ms, a.ready_ms, a.topic) for a in expected.attempts]
    assert [(a.attempt, a.delay_ms, a.at_ms, a.ready_ms, a.topic) for a in got.attempts] == \
        plan_view
    assert (got.disposition, got.destination) == (expected.disposition,
                                                  expected.destination or "")
    waits = [a.delay_ms for a in expected.attempts[1:]]
    assert list(got.waits_ms) == waits


PUBLISHED = ("", "READY")
DELIVERED = ("READY", "INFLIGHT")
FAILED = ("INFLIGHT", "WAITING_RETRY")
DUE = ("WAITING_RETRY", "READY")


def moves(rec: Recorder) -> list[tuple[str, str]]:
    return [(t.from_state, t.to_state) for t in rec.seen]


async def test_rocketmq_copies_every_transition_with_its_previous_state(
    h: Harness, rec: Recorder
) -> None:
    _, expected = await h.pull_timeline(h.spec("rocketmq", {"max_retries": 2}))
    assert moves(rec) == [PUBLISHED, DELIVERED, FAILED, DUE, DELIVERED, FAILED, DUE, DELIVERED,
                          ("INFLIGHT", "DEAD_LETTERED")]
    assert rec.steps() == [
        (0, "", "READY", 0, 0),
        (0, "READY", "INFLIGHT", 1, 0),
        (0, "INFLIGHT", "WAITING_RETRY", 1, 10 * SECOND),
        (10 * SECOND, "WAITING_RETRY", "READY", 1, 0),
        (10 * SECOND, "READY", "INFLIGHT", 2, 0),
        (10 * SECOND, "INFLIGHT", "WAITING_RETRY", 2, 30 * SECOND),
        (40 * SECOND, "WAITING_RETRY", "READY", 2, 0),
        (40 * SECOND, "READY", "INFLIGHT", 3, 0),
        (40 * SECOND, "INFLIGHT", "DEAD_LETTERED", 3, 0),
    ]
    assert [t.destination for t in rec.seen if t.to_state == "WAITING_RETRY"] == \
        [f"%RETRY%{GROUP}"] * 2
    assert rec.seen[-1].destination == f"%DLQ%{GROUP}"
    assert {t.message_id for t in rec.seen} == {rec.seen[0].message_id}
    assert_replays_to(rec, expected)


@pytest.mark.parametrize(("policy", "options", "invisible_ms", "processing_ms", "end"), [
    ("pulsar", {"max_retries": 3}, None, 0, "DEAD_LETTERED"),
    ("pulsar-nack", {"max_retries": 2, "nack_delay_ms": 5000}, None, 700, "DEAD_LETTERED"),
    ("rabbitmq", {"x_retry_interval_s": 10}, None, 1500, "DISCARDED"),
    ("rabbitmq", {"x_dead_letter_exchange": "dlx"}, None, 0, "DEAD_LETTERED"),
    ("rocketmq-orderly", {"suspend_ms": 2500, "max_retries": 3}, None, 100, "DEAD_LETTERED"),
    ("rocketmq-simple", {"max_retries": 2}, 30 * SECOND, 6 * SECOND, "DEAD_LETTERED"),
    ("rocketmq", {"max_retries": 1, "dead_letter": "false"}, None, 0, "DISCARDED"),
])
async def test_each_policy_replays_to_its_plan(
    h: Harness, rec: Recorder, policy: str, options: Mapping[str, object],
    invisible_ms: int | None, processing_ms: int, end: str,
) -> None:
    spec = h.spec(policy, options)
    _, expected = await h.pull_timeline(spec, invisible_ms=invisible_ms,
                                        processing_ms=processing_ms)
    retries = len(expected.attempts) - 1
    assert moves(rec) == [PUBLISHED, DELIVERED, *[FAILED, DUE, DELIVERED] * retries,
                          ("INFLIGHT", end)]
    failures = [t for t in rec.seen if t.to_state == "WAITING_RETRY"]
    dues = [t for t in rec.seen if t.from_state == "WAITING_RETRY"]
    # Each retry falls due exactly its policy wait after the failure.
    assert [d.ts_ms - f.ts_ms for f, d in zip(failures, dues, strict=True)] == \
        [f.delay_ms for f in failures]
    assert_replays_to(rec, expected)


async def test_a_lost_consumer_and_a_timeout_are_told_as_they_happen(
    h: Harness, rec: Recorder
) -> None:
    """Push consumer closed with a delivery in hand: INFLIGHT -> READY at once; then the ack
    timeout (an expiry) is a failure like any other."""
    spec = h.spec("rocketmq", {"max_retries": 1})
    consumer = await h.open(spec)
    await h.publish(b"x")
    (_first,) = h.pushed(consumer)
    await consumer.close()
    await h.advance(5)
    again = await h.open(spec)
    (second,) = h.pushed(again)
    await h.advance(60 * SECOND)  # the push consume timeout (1 minute) passes
    assert moves(rec) == [PUBLISHED, DELIVERED, ("INFLIGHT", "READY"), DELIVERED, FAILED]
    lost, timeout = rec.seen[2], rec.seen[4]
    assert (lost.reason, lost.attempt, second.attempt) == ("consumer lost", 1, 2)
    assert (timeout.reason, timeout.ts_ms - T0) == ("timeout", 60 * SECOND + 5)
    await h.advance(30 * SECOND)
    (third,) = h.pushed(again)
    assert third.attempt == 3
    assert moves(rec)[5:] == [DUE, DELIVERED]
    assert rec.seen[5].ts_ms - rec.seen[4].ts_ms == timeout.delay_ms == 10 * SECOND
    await again.close()


async def test_a_changed_invisible_duration_is_one_transition(h: Harness, rec: Recorder) -> None:
    spec = h.spec("rocketmq-simple")
    await h.publish(b"x")
    d = await h.one(spec, invisible_ms=20 * SECOND)
    await h.advance(5 * SECOND)
    changed = await h.settle(d.receipt, SettleAction.EXTEND, invisible_ms=40 * SECOND)
    assert changed.ok
    await h.advance(40 * SECOND)  # the new period ends: READY again at once (a timeout)
    again = await h.one(spec, invisible_ms=20 * SECOND)
    assert (await h.ack(again)).ok
    assert rec.steps() == [
        (0, "", "READY", 0, 0),
        (0, "READY", "INFLIGHT", 1, 0),
        (5 * SECOND, "INFLIGHT", "INFLIGHT", 1, 40 * SECOND),
        (45 * SECOND, "INFLIGHT", "READY", 1, 0),
        (45 * SECOND, "READY", "INFLIGHT", 2, 0),
        (45 * SECOND, "INFLIGHT", "COMMITTED", 2, 0),
    ]
    assert rec.seen[2].reason == "invisible duration changed"
    assert replay(rec.rows()).disposition == "commit"


async def test_counting_observers_see_deliveries_and_ends_only(h: Harness, rec: Recorder) -> None:
    """Metrics and totals count as before: no count for READY or a changed duration."""
    counted: list[str] = []

    class Counter:
        def on_transition(self, t: Transition) -> None:  # pragma: no cover - not called
            raise AssertionError("counting observers get count_transition")

        def count_transition(self, to_state: str, topic: str, group: str, policy: str,
                             attempt: int, n: int = 1) -> None:
            counted.extend([to_state] * n)

    h.engine.observers.add(Counter())
    await h.pull_timeline(h.spec("rocketmq", {"max_retries": 1}))
    assert counted == ["INFLIGHT", "WAITING_RETRY", "INFLIGHT", "DEAD_LETTERED"]
    assert len(rec.seen) == 6


async def test_a_delayed_publish_is_ready_at_its_deliver_time(h: Harness, rec: Recorder) -> None:
    from gateway.backend.base import OutMessage

    await h.engine.publish(TOPIC, [OutMessage(b"x", deliver_at_ms=T0 + 7 * SECOND)])
    await h.at(T0 + 9 * SECOND)
    d = await h.one(h.spec("rabbitmq"))
    assert (await h.ack(d)).ok
    assert rec.steps()[:2] == [(7 * SECOND, "", "READY", 0, 0),
                               (9 * SECOND, "READY", "INFLIGHT", 1, 0)]
    assert rec.seen[0].reason == "published"
