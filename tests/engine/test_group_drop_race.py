"""A consumer that opens while its group is being dropped ends up on the group's live
subscription, never on the one the drop took away (found by the third attack round)."""

from __future__ import annotations

import asyncio

from tests.engine.harness import GROUP, TOPIC, Harness, idle


def _gate_create_group(h: Harness) -> asyncio.Event:
    """Make the back end's `create_group` wait for the returned event."""
    gate = asyncio.Event()
    original = h.backend.create_group

    async def slow(topic: str, group: str, *, at_end: bool = False) -> bool:
        await gate.wait()
        return await original(topic, group, at_end=at_end)

    h.backend.create_group = slow  # type: ignore[method-assign]
    return gate


async def test_a_consumer_opening_during_a_drop_gets_the_live_subscription(h: Harness) -> None:
    gate = _gate_create_group(h)
    opening = asyncio.ensure_future(h.engine.open_consumer(h.spec("rocketmq"), 10))
    await idle()
    assert await h.engine.drop_group(TOPIC, GROUP) is False  # the back end never had it
    gate.set()
    consumer = await opening
    assert h.engine.subscriptions[(TOPIC, GROUP)] is consumer.sub
    await h.publish(b"a")
    assert [d.body for d in h.pushed(consumer)] == [b"a"]
    other = await h.open(h.spec("rocketmq"))
    assert other.sub is consumer.sub  # one subscription, one dispatcher


async def test_a_pull_during_a_drop_reads_the_live_subscription(h: Harness) -> None:
    await h.publish(b"a")
    gate = _gate_create_group(h)
    spec = h.spec("rocketmq-simple")
    pulling = asyncio.ensure_future(h.engine.receive(spec, 10, 30_000, 0))
    await idle()
    await h.engine.drop_group(TOPIC, GROUP)
    gate.set()
    (got,) = await pulling
    assert got.body == b"a"
    sub = h.engine.subscriptions[(TOPIC, GROUP)]
    assert all(inf.sub is sub for inf in h.engine.inflight.values())
    assert (await h.ack(got)).ok
