"""A pull receive that waits (long polling, as the RocketMQ SDKs' push and simple consumers
receive) on an ordered group is answered as soon as the message it waits for may go: when the
one before it of its key is settled, or when an ordered retry falls due. Before, it waited for
a publish or its whole wait (20-30 s per message of a FIFO group)."""

from __future__ import annotations

import asyncio

from gateway.engine.api import Delivery, SubscriptionSpec

from .harness import Harness

LONG_POLL_MS = 60_000


def bodies(deliveries: list[Delivery]) -> list[bytes]:
    return [d.body for d in deliveries]


async def waiting(h: Harness, spec: SubscriptionSpec) -> asyncio.Task[list[Delivery]]:
    """A receive that finds nothing yet and waits (its wait is far longer than the test)."""
    task = asyncio.ensure_future(h.engine.receive(spec, 10, None, LONG_POLL_MS))
    await settle_loop()
    assert not task.done()
    return task


async def settle_loop() -> None:
    for _ in range(50):
        await asyncio.sleep(0)


async def test_an_ack_that_frees_a_key_answers_a_waiting_receive(h: Harness) -> None:
    spec = h.spec("rocketmq-orderly")
    await h.publish_keyed(("k1", b"k1-a"), ("k1", b"k1-b"))
    (first,) = await h.receive(spec)
    task = await waiting(h, spec)  # k1-b waits behind k1-a
    assert (await h.ack(first)).ok
    await settle_loop()
    assert task.done()
    assert bodies(task.result()) == [b"k1-b"]


async def test_an_ordered_retry_falling_due_answers_a_waiting_receive(h: Harness) -> None:
    spec = h.spec("rocketmq-orderly", {"suspend_ms": 2000})
    await h.publish_keyed(("k1", b"k1-a"), ("k1", b"k1-b"))
    (first,) = await h.receive(spec)
    assert (await h.fail(first)).ok
    task = await waiting(h, spec)
    await h.advance(2000)  # suspendTimeMillis: k1-a is due again
    await settle_loop()
    assert task.done()
    (again,) = task.result()
    assert (again.body, again.retries) == (b"k1-a", 1)


async def test_an_ordered_simple_consumer_is_answered_when_its_key_is_free(h: Harness) -> None:
    spec = h.spec("rocketmq-simple", {"ordered": "true"})
    await h.publish_keyed(("k1", b"k1-a"), ("k1", b"k1-b"))
    (first,) = await h.receive(spec)
    task = await waiting(h, spec)
    assert (await h.ack(first)).ok
    await settle_loop()
    assert task.done()
    assert bodies(task.result()) == [b"k1-b"]


async def test_waiting_receives_of_one_group_are_all_woken(h: Harness) -> None:
    spec = h.spec("rocketmq-orderly")
    await h.publish_keyed(("k1", b"k1-a"), ("k1", b"k1-b"))
    (first,) = await h.receive(spec)
    one = await waiting(h, spec)
    two = await waiting(h, spec)
    assert (await h.ack(first)).ok
    await settle_loop()
    assert one.done()  # the one that got k1-b; the other looked again and waits on
    got = one.result() + (two.result() if two.done() else [])
    assert bodies(got) == [b"k1-b"]
    two.cancel()
