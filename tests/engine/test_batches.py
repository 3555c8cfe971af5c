"""The consume path as batches: a dispatch batch shares one deadline timer, and acks, fails and
settle batches are carried out as units when no observer takes whole transitions (structlog
at INFO, as `gateway serve` runs), with the same outcomes, answers and counts as one by one."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import structlog

from adapters import builtin_registry
from gateway.core import events as ev
from gateway.core.machine import decide, delivered, delivery_deadline
from gateway.core.record import Record
from gateway.core.states import READY
from gateway.engine.api import SettleAction, Settlement
from gateway.engine.base import COMPACT_AT
from gateway.engine.config import EngineConfig
from gateway.engine.observe import Transition

from .harness import GROUP, TOPIC, Harness, idle
from .semantics import (
    MINUTE,
    ROCKETMQ_BACKOFF_MS,
    ROCKETMQ_PUSH_TIMEOUT_MS,
    ROCKETMQ_SUSPEND_MS,
    SECOND,
)

STALE = (False, "FAILED_PRECONDITION")


@pytest.fixture(autouse=True)
def info_logs() -> Iterator[None]:
    """Debug lines off: nobody takes whole transitions, so the batch paths run."""
    old = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.INFO))
    try:
        yield
    finally:
        structlog.configure(**old)


class Counting:
    """A counting observer with settle timing (as the Prometheus one): no whole transitions."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str, str, str, int], int] = {}
        self.settles: list[tuple[str, str, float]] = []

    def on_transition(self, transition: Transition) -> None:  # pragma: no cover - not called
        raise AssertionError("a counting observer gets no whole transitions")

    def count_transition(
        self, to_state: str, topic: str, group: str, policy: str, attempt: int, n: int = 1
    ) -> None:
        key = (to_state, topic, group, policy, attempt)
        self.counts[key] = self.counts.get(key, 0) + n

    def observe_settle(self, policy: str, to_state: str, seconds: float) -> None:
        self.settles.append((policy, to_state, seconds))


@pytest.fixture
async def hc() -> AsyncIterator[tuple[Harness, Counting]]:
    counting = Counting()
    harness = Harness()
    harness.engine.observers.add(counting)
    await harness.engine.start()
    try:
        yield harness, counting
    finally:
        await harness.engine.close()


async def test_the_batch_paths_run_here(h: Harness) -> None:
    assert not h.engine.observers.full and not h.engine._trace_debug


async def test_a_dispatch_batch_shares_one_timer_entry(h: Harness) -> None:
    consumer = await h.open(h.spec("rocketmq"))
    await h.publish(*(b"m%d" % i for i in range(5)))
    got = h.pushed(consumer)
    assert [d.body for d in got] == [b"m%d" % i for i in range(5)]
    assert {d.deadline_ms for d in got} == {h.now() + ROCKETMQ_PUSH_TIMEOUT_MS}
    assert len(h.engine.timers) == 1 and h.engine.pending_timers() == 5
    assert await h.engine.ack([got[0].receipt, got[3].receipt]) == {}
    assert len(h.engine.timers) == 1 and h.engine.pending_timers() == 3
    assert await h.engine.ack([d.receipt for d in got[1:3]] + [got[4].receipt]) == {}
    assert len(h.engine.timers) == 0 and h.engine.pending_timers() == 0
    await h.advance(ROCKETMQ_PUSH_TIMEOUT_MS + ROCKETMQ_BACKOFF_MS[0])
    assert h.pushed(consumer) == []


async def test_the_unsettled_rest_of_a_batch_times_out_at_its_deadline(h: Harness) -> None:
    consumer = await h.open(h.spec("rocketmq"))
    ids = await h.publish(b"a", b"b", b"c", b"d")
    got = h.pushed(consumer)
    assert await h.engine.ack([got[1].receipt, got[2].receipt]) == {}
    await h.advance(ROCKETMQ_PUSH_TIMEOUT_MS - 1)
    assert h.engine.unsettled_count() == 2
    await h.advance(1)
    assert h.engine.unsettled_count() == 0 and len(h.engine.timers) == 0
    late = await h.engine.ack([got[0].receipt])  # timed out: its receipt is spent
    assert (late[0].ok, late[0].error_code) == STALE
    await h.advance(ROCKETMQ_BACKOFF_MS[0])
    again = h.pushed(consumer)
    assert sorted((d.message_id, d.attempt, d.retries) for d in again) == sorted(
        [(ids[0], 2, 1), (ids[3], 2, 1)])
    assert {d.topic for d in again} == {f"%RETRY%{GROUP}"}


async def test_a_timer_entry_keeps_few_settled_receipts(h: Harness) -> None:
    count = 4 * COMPACT_AT
    consumer = await h.open(h.spec("rocketmq"), credit=count)
    await h.publish(*(b"%d" % i for i in range(count)))
    got = h.pushed(consumer)
    assert len(got) == count and len(h.engine.timers) == 1
    keep = got[::8]
    assert await h.engine.ack([d.receipt for d in got if d not in keep]) == {}
    (due,) = h.engine._timer_receipts.values()
    assert due.live == len(keep) and len(due.receipts) <= 4 * len(keep)
    await h.advance(ROCKETMQ_PUSH_TIMEOUT_MS)  # the rest time out: retried after the backoff
    assert h.engine.unsettled_count() == 0 and len(h.engine.timers) == 0
    await h.advance(ROCKETMQ_BACKOFF_MS[0])
    assert sorted(d.message_id for d in h.pushed(consumer)) == sorted(
        d.message_id for d in keep)


async def test_a_batch_of_fails_with_different_delays(h: Harness) -> None:
    consumer = await h.open(h.spec("pulsar"))
    ids = await h.publish(b"one", b"five", b"three")
    got = h.pushed(consumer)
    results = await h.engine.settle([
        Settlement(got[0].receipt, SettleAction.FAIL, delay_ms=1 * SECOND),
        Settlement(got[1].receipt, SettleAction.FAIL, delay_ms=5 * SECOND),
        Settlement(got[2].receipt, SettleAction.FAIL, delay_ms=3 * SECOND),
    ])
    assert [r.ok for r in results] == [True, True, True]
    assert [r.receipt for r in results] == [d.receipt for d in got]
    seen: list[tuple[int, str]] = []
    start = h.now()
    for step in range(1, 6):
        await h.at(start + step * SECOND - 1)
        assert h.pushed(consumer) == []
        await h.at(start + step * SECOND)
        seen += [(step, d.message_id) for d in h.pushed(consumer)]
    assert seen == [(1, ids[0]), (3, ids[2]), (5, ids[1])]


async def test_a_mixed_settle_batch_is_answered_by_position(hc: tuple[Harness, Counting]) -> None:
    h, counting = hc
    consumer = await h.open(h.spec("rocketmq"))
    ids = await h.publish(b"ack", b"fail", b"dead", b"bad-delay")
    d = h.pushed(consumer)
    results = await h.engine.settle([
        Settlement(d[0].receipt, SettleAction.ACK),
        Settlement(d[1].receipt, SettleAction.FAIL),
        Settlement("no-such-receipt", SettleAction.FAIL),
        Settlement(d[0].receipt, SettleAction.ACK),  # settled a moment ago: stale
        Settlement(d[2].receipt, SettleAction.DEAD_LETTER, reason="poison"),
        Settlement(d[3].receipt, SettleAction.FAIL, delay_level=99),
        Settlement(d[1].receipt, SettleAction.FAIL),  # failed a moment ago: stale
    ])
    answers = [(r.receipt, r.ok, r.error_code) for r in results]
    assert answers == [
        (d[0].receipt, True, ""), (d[1].receipt, True, ""),
        ("no-such-receipt", *STALE), (d[0].receipt, *STALE), (d[2].receipt, True, ""),
        (d[3].receipt, False, "INVALID_ARGUMENT"), (d[1].receipt, *STALE),
    ]
    (dead,) = await h.stored(f"%DLQ%{GROUP}")
    assert dead.message_id == ids[2]
    (retry,) = await h.stored(f"%RETRY%{GROUP}")
    assert (retry.message_id, retry.retries) == (ids[1], 1)
    # The refused one is still in flight, settleable.
    assert h.engine.unsettled_count() == 1
    assert await h.engine.ack([d[3].receipt]) == {}
    assert counting.counts == {
        ("INFLIGHT", TOPIC, GROUP, "rocketmq", 1): 4,
        ("COMMITTED", TOPIC, GROUP, "rocketmq", 1): 2,
        ("WAITING_RETRY", TOPIC, GROUP, "rocketmq", 1): 1,
        ("DEAD_LETTERED", TOPIC, GROUP, "rocketmq", 1): 1,
    }
    assert sorted(state for _, state, _ in counting.settles) == [
        "COMMITTED", "COMMITTED", "DEAD_LETTERED", "WAITING_RETRY"]


async def test_compact_acks_are_answered_by_position(hc: tuple[Harness, Counting]) -> None:
    h, counting = hc
    consumer = await h.open(h.spec("rocketmq"))
    await h.publish(b"a", b"b")
    a, b = h.pushed(consumer)
    failed = await h.engine.ack([a.receipt, "nope", a.receipt, "", b.receipt])
    assert sorted(failed) == [1, 2, 3]
    assert all((r.ok, r.error_code) == STALE for r in failed.values())
    assert failed[1].receipt == "nope" and failed[2].receipt == a.receipt
    assert counting.counts[("COMMITTED", TOPIC, GROUP, "rocketmq", 1)] == 2
    await h.advance(ROCKETMQ_PUSH_TIMEOUT_MS + ROCKETMQ_BACKOFF_MS[0])
    assert h.pushed(consumer) == [] and h.engine.pending_timers() == 0


async def test_batch_paths_count_as_one_by_one() -> None:
    """The same moves with debug lines on (one by one, each told) and off (batches)."""

    async def run(level: int) -> tuple[dict[Any, int], list[tuple[str, str]]]:
        structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(level))
        counting = Counting()
        h = Harness()
        h.engine.observers.add(counting)
        await h.engine.start()
        try:
            consumer = await h.open(h.spec("rocketmq"))
            await h.publish(*(b"%d" % i for i in range(6)))
            d = h.pushed(consumer)
            await h.engine.ack([d[0].receipt, d[1].receipt])
            await h.engine.settle([Settlement(d[2].receipt, SettleAction.FAIL),
                                   Settlement(d[3].receipt, SettleAction.DEAD_LETTER),
                                   Settlement(d[4].receipt, SettleAction.RELEASE)])
            await idle()
            h.pushed(consumer)
            await h.advance(ROCKETMQ_PUSH_TIMEOUT_MS)
            await h.advance(10 * MINUTE)
            for again in h.pushed(consumer):
                await h.engine.ack([again.receipt])
        finally:
            await h.engine.close()
        return counting.counts, sorted((p, s) for p, s, _ in counting.settles)

    one_by_one = await run(logging.DEBUG)
    batches = await run(logging.INFO)
    assert batches == one_by_one
    assert one_by_one[0][("COMMITTED", TOPIC, GROUP, "rocketmq", 2)] >= 1


async def test_the_unacked_cap_holds_for_batches() -> None:
    h = Harness(EngineConfig(backend_name="memory", max_unacked=3))
    await h.engine.start()
    try:
        consumer = await h.open(h.spec("rocketmq"), credit=10)
        await h.publish(*(b"m%d" % i for i in range(6)))
        assert [d.body for d in consumer.outbox] == [b"m0", b"m1", b"m2"]
        first = consumer.outbox[0]
        assert await h.engine.ack([first.receipt]) == {}
        await idle()
        assert [d.body for d in consumer.outbox][3:] == [b"m3"]
    finally:
        await h.engine.close()


async def test_seek_voids_a_batch_and_its_timer(h: Harness) -> None:
    consumer = await h.open(h.spec("rocketmq"))
    await h.publish(b"a", b"b", b"c")
    got = h.pushed(consumer)
    assert len(h.engine.timers) == 1
    await h.engine.seek(TOPIC, GROUP, publish_ms=0)
    assert h.engine.pending_timers() == 0 and len(h.engine.timers) == 0
    assert all(r.error_code == "FAILED_PRECONDITION"
               for r in (await h.engine.ack([d.receipt for d in got])).values())
    await idle()
    assert [d.body for d in h.pushed(consumer)] == [b"a", b"b", b"c"]


@pytest.mark.parametrize("policy", sorted(builtin_registry().policies))
def test_a_batch_delivery_record_is_what_decide_makes(policy: str) -> None:
    registry = builtin_registry()
    spec_policy = registry.policy(policy, {}, "", "shared")
    now = 1_700_000_000_000
    for attempt, retries in ((0, 0), (3, 2)):
        ready = Record("id", TOPIC, GROUP, READY, attempt, retries, now)
        expected = decide(ready, ev.Deliver("r-1"), spec_policy, now).record
        made = delivered("id", TOPIC, GROUP, attempt, retries, "r-1",
                         delivery_deadline(spec_policy, None, now), now)
        assert made == expected


async def test_a_batch_is_dealt_round_robin_within_each_consumers_room(h: Harness) -> None:
    spec = h.spec("rabbitmq")  # RabbitMQ deals message by message
    a = await h.open(spec, credit=3)
    b = await h.open(spec, credit=1)
    await h.publish(*(b"m%d" % i for i in range(6)))
    assert [d.body for d in a.outbox] == [b"m0", b"m2", b"m3"]
    assert [d.body for d in b.outbox] == [b"m1"]
    assert len(h.engine.timers) == 2 and h.engine.pending_timers() == 4
    b.add_credit(2)  # what had no room was given back, and comes now
    await idle()
    assert [d.body for d in b.outbox] == [b"m1", b"m4", b"m5"]
    taken = list(a.outbox) + list(b.outbox)
    assert await h.engine.ack([d.receipt for d in taken]) == {}
    assert h.engine.pending_timers() == 0 and len(h.engine.timers) == 0


@pytest.mark.parametrize(("policy", "run"), [("rocketmq", 32), ("pulsar", 20)])
async def test_a_batch_is_dealt_in_runs_where_the_product_deals_runs(
    h: Harness, policy: str, run: int
) -> None:
    """RocketMQ push consumers pull up to 32 messages of a queue at a time, a Pulsar shared
    subscription's broker deals runs of up to 20: each consumer in turn takes a run (its room
    permitting), and the next batch starts with the next consumer."""
    spec = h.spec(policy)
    a = await h.open(spec, credit=1000)
    b = await h.open(spec, credit=1000)
    c = await h.open(spec, credit=5)
    await h.publish(*(b"m%d" % i for i in range(2 * run + 10)))
    bodies = [b"m%d" % i for i in range(2 * run + 10)]
    assert [d.body for d in a.outbox] == bodies[:run] + bodies[2 * run + 5:]
    assert [d.body for d in b.outbox] == bodies[run:2 * run]
    assert [d.body for d in c.outbox] == bodies[2 * run:2 * run + 5]
    await h.publish(b"next")
    assert b.outbox[-1].body == b"next"
    taken = list(a.outbox) + list(b.outbox) + list(c.outbox)
    assert await h.engine.ack([d.receipt for d in taken]) == {}


@pytest.mark.parametrize(("policy", "run"), [("rocketmq", 32), ("pulsar", 20)])
async def test_one_by_one_dispatch_deals_the_same_runs(policy: str, run: int) -> None:
    """With debug lines on each message is picked on its own, in the same runs."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG))
    h = Harness()
    await h.engine.start()
    try:
        spec = h.spec(policy)
        a = await h.open(spec, credit=1000)
        b = await h.open(spec, credit=1000)
        c = await h.open(spec, credit=5)
        bodies = [b"m%d" % i for i in range(2 * run + 10)]
        await h.publish(*bodies)
        got = [[d.body for d in x.outbox] for x in (a, b, c)]
        assert sorted(body for share in got for body in share) == sorted(bodies)
        assert got[0][:run] == bodies[:run] and got[1][:run] == bodies[run:2 * run]
        assert got[2] == bodies[2 * run:2 * run + 5]
    finally:
        await h.engine.close()


async def test_compact_fails_are_answered_by_position(hc: tuple[Harness, Counting]) -> None:
    h, counting = hc
    consumer = await h.open(h.spec("rocketmq"))
    ids = await h.publish(b"a", b"b")
    a, b = h.pushed(consumer)
    failed = await h.engine.fail([a.receipt, "nope", a.receipt, b.receipt])
    assert sorted(failed) == [1, 2]
    assert all((r.ok, r.error_code) == STALE for r in failed.values())
    assert counting.counts[("WAITING_RETRY", TOPIC, GROUP, "rocketmq", 1)] == 2
    assert sorted(state for _, state, _ in counting.settles) == ["WAITING_RETRY"] * 2
    assert h.engine.pending_timers() == 0
    await h.advance(ROCKETMQ_BACKOFF_MS[0])
    assert sorted((d.message_id, d.attempt, d.retries) for d in h.pushed(consumer)) == sorted(
        [(ids[0], 2, 1), (ids[1], 2, 1)])


async def test_compact_fails_one_by_one_with_debug_lines_on() -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG))
    h = Harness()
    await h.engine.start()
    try:
        consumer = await h.open(h.spec("rocketmq"))
        ids = await h.publish(b"a")
        (a,) = h.pushed(consumer)
        assert await h.engine.fail([a.receipt, a.receipt]) == {
            1: (await h.engine.fail([a.receipt]))[0]}
        await h.advance(ROCKETMQ_BACKOFF_MS[0])
        (again,) = h.pushed(consumer)
        assert (again.message_id, again.retries) == (ids[0], 1)
    finally:
        await h.engine.close()


async def test_a_pull_receive_is_leased_as_a_batch(h: Harness) -> None:
    spec = h.spec("rocketmq-simple")
    await h.publish(b"a", b"b", b"c")
    got = await h.receive(spec, 3, invisible_ms=30 * SECOND)
    assert [d.body for d in got] == [b"a", b"b", b"c"]
    assert {d.deadline_ms for d in got} == {h.now() + 30 * SECOND}
    assert len(h.engine.timers) == 1 and h.engine.pending_timers() == 3
    changed = await h.settle(got[0].receipt, SettleAction.EXTEND, invisible_ms=60 * SECOND)
    assert changed.ok and len(h.engine.timers) == 2 and h.engine.pending_timers() == 3
    assert await h.engine.ack([got[1].receipt]) == {}
    await h.advance(30 * SECOND)  # c times out: visible again at once (simple consumer)
    (again,) = await h.receive(spec, 3, invisible_ms=30 * SECOND)
    assert (again.body, again.attempt) == (b"c", 2)
    await h.advance(30 * SECOND)  # a's extended period ran out too
    assert sorted((d.body, d.attempt) for d in await h.receive(spec, 3)) == [
        (b"a", 2), (b"c", 3)]


async def test_ordered_retries_failed_together_share_one_timer_entry(h: Harness) -> None:
    consumer = await h.open(h.spec("rocketmq-orderly"))
    ids = await h.publish_keyed(("k1", b"a"), ("k2", b"b"), ("k3", b"c"), ("k1", b"a2"))
    got = h.pushed(consumer)
    assert [d.body for d in got] == [b"a", b"b", b"c"]  # a2 waits behind a (same key)
    results = await h.engine.settle([Settlement(d.receipt, SettleAction.FAIL) for d in got])
    assert all(r.ok for r in results)
    assert len(h.engine.timers) == 1 and h.engine.pending_timers() == 3
    await h.advance(ROCKETMQ_SUSPEND_MS - 1)
    assert h.pushed(consumer) == []
    await h.advance(1)
    again = h.pushed(consumer)
    assert [(d.message_id, d.attempt) for d in again] == [(i, 2) for i in ids[:3]]
