"""Delivery deadlines on a manual clock: push ack timeouts, the simple consumer's invisible
duration and ChangeInvisibleDuration."""

from __future__ import annotations

import pytest

from gateway.engine.api import SettleAction
from gateway.errors import InvalidArgument

from .harness import GROUP, T0, TOPIC, Harness
from .semantics import (
    HOUR,
    RABBITMQ_ACK_TIMEOUT_MS,
    RABBITMQ_MAX_RETRIES,
    ROCKETMQ_BACKOFF_MS,
    ROCKETMQ_INVISIBLE_RANGE_MS,
    ROCKETMQ_PUSH_TIMEOUT_MS,
    SECOND,
)


async def test_rabbitmq_unacked_for_one_minute_counts_as_a_failure(h: Harness) -> None:
    consumer = await h.open(h.spec("rabbitmq", {"x_retry_interval_s": 10}))
    await h.publish(b"x")
    (first,) = h.pushed(consumer)
    assert first.deadline_ms == T0 + RABBITMQ_ACK_TIMEOUT_MS
    await h.advance(RABBITMQ_ACK_TIMEOUT_MS - 1)
    assert h.pushed(consumer) == []
    await h.advance(1)  # timed out: a failure, retried after the queue's interval
    await h.advance(10 * SECOND - 1)
    assert h.pushed(consumer) == []
    await h.advance(1)
    (again,) = h.pushed(consumer)
    assert (again.message_id, again.attempt, again.retries) == (first.message_id, 2, 1)
    late = await h.ack(first)  # the timed-out delivery cannot be settled any more
    assert (late.ok, late.error_code) == (False, "FAILED_PRECONDITION")
    assert (await h.ack(again)).ok


async def test_rabbitmq_timeouts_exhaust_the_sixteen_retries(h: Harness) -> None:
    spec = h.spec("rabbitmq", {"x_retry_interval_s": 10, "x_dead_letter_exchange": "dlx"})
    await h.publish(b"x")
    for attempt in range(1, RABBITMQ_MAX_RETRIES + 2):
        d = await h.one(spec)
        assert (d.attempt, d.retries) == (attempt, attempt - 1)
        await h.advance(RABBITMQ_ACK_TIMEOUT_MS)
        await h.advance(10 * SECOND)
    assert await h.receive(spec) == []
    (dead,) = await h.stored(f"{TOPIC}.dlq")
    assert "timeout" in dead.properties["x-gateway-dead-letter-reason"]


async def test_rocketmq_push_consume_timeout_is_a_failure(h: Harness) -> None:
    consumer = await h.open(h.spec("rocketmq"))
    await h.publish(b"x")
    (first,) = h.pushed(consumer)
    assert first.deadline_ms == T0 + ROCKETMQ_PUSH_TIMEOUT_MS
    await h.advance(ROCKETMQ_PUSH_TIMEOUT_MS - 1)
    assert h.pushed(consumer) == []
    await h.advance(1)
    await h.advance(ROCKETMQ_BACKOFF_MS[0] - 1)
    assert h.pushed(consumer) == []
    await h.advance(1)
    (again,) = h.pushed(consumer)
    assert (again.topic, again.retries, again.message_id) == (
        f"%RETRY%{GROUP}", 1, first.message_id)
    assert again.deadline_ms == h.now() + ROCKETMQ_PUSH_TIMEOUT_MS


async def test_acked_delivery_does_not_time_out(h: Harness) -> None:
    consumer = await h.open(h.spec("rocketmq"))
    await h.publish(b"x")
    (d,) = h.pushed(consumer)
    assert (await h.ack(d)).ok
    await h.advance(3 * HOUR)
    assert h.pushed(consumer) == []
    assert len(h.engine.timers) == 0


async def test_rocketmq_simple_timeout_makes_the_interval_zero(h: Harness) -> None:
    spec = h.spec("rocketmq-simple")
    await h.publish(b"x")
    first = await h.one(spec, invisible_ms=10 * SECOND)
    assert first.deadline_ms == T0 + 10 * SECOND
    await h.advance(10 * SECOND - 1)
    assert await h.receive(spec, invisible_ms=10 * SECOND) == []
    await h.advance(1)
    again = await h.one(spec, invisible_ms=10 * SECOND)  # at once: interval 0
    assert (again.attempt, again.retries) == (2, 1)
    stale = await h.ack(first)
    assert (stale.ok, stale.error_code) == (False, "FAILED_PRECONDITION")


@pytest.mark.parametrize("invisible_ms", [ROCKETMQ_INVISIBLE_RANGE_MS[0] - 1,
                                          ROCKETMQ_INVISIBLE_RANGE_MS[1] + 1])
async def test_rocketmq_simple_invisible_duration_range(h: Harness, invisible_ms: int) -> None:
    await h.publish(b"x")
    with pytest.raises(InvalidArgument) as bad:
        await h.receive(h.spec("rocketmq-simple"), invisible_ms=invisible_ms)
    assert bad.value.field == "invisible_ms" and "10000..43200000" in bad.value.message
    for ok_ms in ROCKETMQ_INVISIBLE_RANGE_MS:  # the bounds themselves are allowed; nothing leased
        d = await h.one(h.spec("rocketmq-simple"), invisible_ms=ok_ms)
        assert d.deadline_ms == h.now() + ok_ms
        await h.fail(d)
        await h.advance(ok_ms)


async def test_change_invisible_restarts_the_period_from_the_call(h: Harness) -> None:
    spec = h.spec("rocketmq-simple")
    await h.publish(b"x")
    d = await h.one(spec, invisible_ms=20 * SECOND)
    await h.advance(15 * SECOND)
    changed = await h.settle(d.receipt, SettleAction.EXTEND, invisible_ms=30 * SECOND)
    assert changed.ok and changed.deadline_ms == T0 + 45 * SECOND
    await h.advance(30 * SECOND - 1)  # the old deadline (+20 s) passed long ago
    assert await h.receive(spec) == []
    await h.advance(1)
    again = await h.one(spec)
    assert (again.attempt, again.retries) == (2, 1)  # timed out: counted, interval 0
    # The receipt from before the change is spent; so is the changed one (timed out).
    for receipt in (d.receipt, changed.new_receipt):
        stale = await h.settle(receipt, SettleAction.ACK)
        assert (stale.ok, stale.error_code) == (False, "FAILED_PRECONDITION")


async def test_fail_after_change_invisible_waits_the_rest_of_the_new_period(h: Harness) -> None:
    spec = h.spec("rocketmq-simple")
    await h.publish(b"x")
    d = await h.one(spec, invisible_ms=20 * SECOND)
    await h.advance(5 * SECOND)
    changed = await h.settle(d.receipt, SettleAction.EXTEND, invisible_ms=60 * SECOND)
    await h.advance(10 * SECOND)  # processing: 15 s in all
    assert (await h.settle(changed.new_receipt, SettleAction.FAIL)).ok
    # Retry interval = invisible (from the change, 60 s) - processing since it (10 s) = 50 s.
    await h.advance(50 * SECOND - 1)
    assert await h.receive(spec) == []
    await h.advance(1)
    assert (await h.one(spec)).retries == 1


async def test_change_invisible_refused_after_timeout_commit_or_out_of_range(h: Harness) -> None:
    spec = h.spec("rocketmq-simple")
    await h.publish(b"a", b"b", b"c")
    a, b, c = await h.receive(spec, invisible_ms=10 * SECOND)
    bad = await h.settle(a.receipt, SettleAction.EXTEND, invisible_ms=9_999)
    assert (bad.ok, bad.error_code) == (False, "INVALID_ARGUMENT") and "invisible_ms" in bad.error
    assert (await h.ack(b)).ok
    done = await h.settle(b.receipt, SettleAction.EXTEND, invisible_ms=20 * SECOND)
    assert (done.ok, done.error_code) == (False, "FAILED_PRECONDITION")
    await h.advance(10 * SECOND)
    late = await h.settle(c.receipt, SettleAction.EXTEND, invisible_ms=20 * SECOND)
    assert (late.ok, late.error_code) == (False, "FAILED_PRECONDITION")
