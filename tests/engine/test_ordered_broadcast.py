"""Ordered consumption (a failing message blocks its key) and broadcasting (no retries)."""

from __future__ import annotations

import pytest

from gateway.errors import InvalidArgument

from .harness import GROUP, TOPIC, Harness
from .semantics import HOUR, ROCKETMQ_PUSH_TIMEOUT_MS, ROCKETMQ_SUSPEND_RANGE_MS


def bodies(deliveries: list) -> list[bytes]:
    return [d.body for d in deliveries]


async def test_ordered_failure_blocks_later_messages_of_its_key(h: Harness) -> None:
    consumer = await h.open(h.spec("rocketmq-orderly", {"suspend_ms": 2000}))
    await h.publish_keyed(("k1", b"k1-a"), ("k1", b"k1-b"), ("k2", b"k2-c"))
    a, c = h.pushed(consumer)
    assert bodies([a, c]) == [b"k1-a", b"k2-c"]  # k1-b waits behind k1-a
    assert (await h.fail(a)).ok
    assert (await h.ack(c)).ok
    await h.advance(2000 - 1)  # suspendTimeMillis
    assert h.pushed(consumer) == []  # k1-b still waits for its head's retry
    await h.advance(1)
    (again,) = h.pushed(consumer)
    assert (again.body, again.retries, again.topic) == (b"k1-a", 1, TOPIC)
    assert (await h.ack(again)).ok
    (b,) = h.pushed(consumer)
    assert b.body == b"k1-b"


async def test_ordered_head_dead_lettered_then_the_key_goes_on(h: Harness) -> None:
    consumer = await h.open(h.spec("rocketmq-orderly", {"suspend_ms": 10, "max_retries": 1}))
    await h.publish_keyed(("k1", b"head"), ("k1", b"next"))
    (head,) = h.pushed(consumer)
    await h.fail(head)
    await h.advance(10)
    (head,) = h.pushed(consumer)
    assert head.retries == 1
    await h.fail(head)  # exhausted
    (nxt,) = h.pushed(consumer)
    assert nxt.body == b"next"
    assert bodies(await h.stored(f"%DLQ%{GROUP}")) == [b"head"]  # type: ignore[arg-type]


async def test_ordered_blocking_holds_for_pull_receives_too(h: Harness) -> None:
    """The RocketMQ front end serves FIFO groups through receive."""
    spec = h.spec("rocketmq-orderly", {"suspend_ms": 2000})
    await h.publish_keyed(("k1", b"k1-a"), ("k1", b"k1-b"), ("k2", b"k2-a"))
    a, other = await h.receive(spec)
    assert bodies([a, other]) == [b"k1-a", b"k2-a"]
    assert (await h.fail(a)).ok
    assert await h.receive(spec) == []  # k1-b must wait for k1-a's retry
    assert (await h.ack(other)).ok
    await h.advance(1999)
    assert await h.receive(spec) == []
    await h.advance(1)
    (again,) = await h.receive(spec)
    assert (bodies([again]), again.attempt, again.retries) == ([b"k1-a"], 2, 1)
    assert await h.receive(spec) == []  # k1-b still waits for k1-a
    assert (await h.ack(again)).ok
    assert bodies(await h.receive(spec)) == [b"k1-b"]


@pytest.mark.parametrize("suspend_ms", [ROCKETMQ_SUSPEND_RANGE_MS[0] - 1,
                                        ROCKETMQ_SUSPEND_RANGE_MS[1] + 1])
async def test_ordered_suspend_range(h: Harness, suspend_ms: int) -> None:
    with pytest.raises(InvalidArgument) as bad:
        await h.open(h.spec("rocketmq-orderly", {"suspend_ms": suspend_ms}))
    assert bad.value.field == "suspend_ms" and "10..30000" in bad.value.message


async def test_broadcast_every_consumer_gets_every_message_and_failures_are_dropped(
    h: Harness,
) -> None:
    one = await h.open(h.spec("rocketmq", broadcast=True, consumer_id="c1"))
    two = await h.open(h.spec("rocketmq", broadcast=True, consumer_id="c2"))
    await h.publish(b"m1", b"m2")
    got_one, got_two = h.pushed(one), h.pushed(two)
    assert bodies(got_one) == bodies(got_two) == [b"m1", b"m2"]
    assert (await h.fail(got_one[0])).ok  # dropped, logged: no retry
    assert (await h.ack(got_one[1])).ok
    assert (await h.ack(got_two[0])).ok  # got_two[1] is never answered: times out, dropped
    await h.advance(ROCKETMQ_PUSH_TIMEOUT_MS)
    await h.advance(3 * HOUR)
    assert h.pushed(one) == h.pushed(two) == []
    assert await h.backend.topics() == [TOPIC]  # no retry copy, no dead letter
    late = await h.ack(got_two[1])
    assert (late.ok, late.error_code) == (False, "FAILED_PRECONDITION")


async def test_broadcast_drops_failures_whatever_the_retry_settings(h: Harness) -> None:
    spec = h.spec("rocketmq", {"max_retries": 5}, broadcast=True, consumer_id="c1")
    await h.publish(b"m")
    d = await h.one(spec)
    assert (await h.fail(d)).ok
    # Within the broadcast group's idle time (1 h: a pull consumer's own group is dropped after
    # it, and a group made anew starts at the earliest message kept).
    await h.nothing_more([spec], ms=HOUR - 1)
    assert await h.backend.topics() == [TOPIC]


async def test_an_ordered_simple_consumer_waits_for_the_head_of_each_message_group(
    h: Harness,
) -> None:
    """A RocketMQ simple consumer on a FIFO group: a message group's next message is not
    received while the one before it is invisible (being processed or waiting to come again)."""
    spec = h.spec("rocketmq-simple", {"ordered": "true"})
    await h.publish_keyed(("k1", b"k1-a"), ("k1", b"k1-b"), ("k2", b"k2-a"))
    got = await h.receive(spec, invisible_ms=10_000)
    assert bodies(got) == [b"k1-a", b"k2-a"]
    _head, other = got
    assert (await h.ack(other)).ok
    assert await h.receive(spec, invisible_ms=10_000) == []  # k1-b waits for k1-a
    await h.advance(10_000)  # k1-a's invisible time is over: it comes again, first
    (again,) = await h.receive(spec, invisible_ms=10_000)
    assert (bodies([again]), again.attempt) == ([b"k1-a"], 2)
    assert await h.receive(spec, invisible_ms=10_000) == []
    assert (await h.ack(again)).ok
    assert bodies(await h.receive(spec, invisible_ms=10_000)) == [b"k1-b"]


async def test_a_broadcast_consumers_own_group_name_stays_within_255_bytes(h: Harness) -> None:
    # group#consumer_id names the consumer's own group: past 255 bytes, no admin verb could
    # name it (its dead letters could not be listed, resent or deleted).
    room = 255 - len(GROUP) - 1
    with pytest.raises(InvalidArgument) as refused:
        await h.open(h.spec("rocketmq", broadcast=True, consumer_id="c" * (room + 1)))
    assert refused.value.field == "consumer_id"
    assert f"at most {room} bytes" in refused.value.message
    await h.open(h.spec("rocketmq", broadcast=True, consumer_id="c" * room))
    await h.open(h.spec("rocketmq", broadcast=True, consumer_id="é" * (room // 2)))  # bytes
    with pytest.raises(InvalidArgument):
        await h.open(h.spec("rocketmq", broadcast=True, consumer_id="é" * (room // 2 + 1)))
