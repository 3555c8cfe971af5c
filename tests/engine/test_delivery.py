"""Delivery rules: delayed publish, tag filters, the unacked cap, ack during retries, and a
broadcast consumer's own group outliving it for the idle period only."""

from __future__ import annotations

from gateway.backend.base import OutMessage
from gateway.engine.api import ConsumerType, SettleAction
from gateway.engine.config import EngineConfig

from .harness import T0, TOPIC, Harness, idle
from .semantics import HOUR, SECOND


async def test_delayed_publish_is_delivered_at_its_time(h: Harness) -> None:
    spec = h.spec("rocketmq")
    pushed = await h.open(h.spec("rocketmq", group="push"))
    await h.engine.publish(TOPIC, [OutMessage(b"later", deliver_at_ms=T0 + 800)])
    await idle()
    assert await h.receive(spec) == [] and h.pushed(pushed) == []
    await h.advance(799)
    assert await h.receive(spec) == [] and h.pushed(pushed) == []
    await h.advance(1)
    (pulled,) = await h.receive(spec)
    (got,) = h.pushed(pushed)
    assert pulled.deliver_at_ms == got.deliver_at_ms == T0 + 800


async def test_a_policy_that_does_not_honour_delays_delivers_them_at_once(h: Harness) -> None:
    """Pulsar delays delivery on Shared and Key_Shared subscriptions only: an Exclusive or
    Failover group of the same topic gets a delayed message at once, the others at its time."""
    exclusive = await h.open(h.spec("pulsar-nack", group="exclusive",
                                    consumer_type=ConsumerType.EXCLUSIVE))
    failover = await h.open(h.spec("pulsar-nack", group="failover",
                                   consumer_type=ConsumerType.FAILOVER))
    shared = await h.open(h.spec("pulsar-nack", group="shared"))
    keyed = await h.open(h.spec("pulsar-nack", group="keyed",
                                consumer_type=ConsumerType.KEY_SHARED))
    await h.engine.publish(TOPIC, [OutMessage(b"later", deliver_at_ms=T0 + HOUR)])
    await idle()
    for consumer in (exclusive, failover):
        assert [d.body for d in h.pushed(consumer)] == [b"later"]
    assert h.pushed(shared) == h.pushed(keyed) == []
    await h.advance(HOUR)
    assert [d.body for d in h.pushed(shared)] == [d.body for d in h.pushed(keyed)] == [b"later"]


async def test_a_tag_filter_passes_only_its_tags(h: Harness) -> None:
    everything = h.spec("rocketmq", group="all")
    filtered = h.spec("rocketmq", tag_filter="TagB || TagC")
    await h.engine.publish(TOPIC, [OutMessage(b"a", tag="TagA"), OutMessage(b"b", tag="TagB"),
                                   OutMessage(b"c", tag="TagC")])
    assert [d.body for d in await h.receive(filtered)] == [b"b", b"c"]
    assert [d.body for d in await h.receive(everything)] == [b"a", b"b", b"c"]
    await h.advance(3 * HOUR)  # the filtered-out one is gone for the group, not retried
    assert await h.receive(filtered) == []


async def test_ack_during_retries_stops_them(h: Harness) -> None:
    spec = h.spec("rabbitmq", {"x_retry_interval_s": 10})
    await h.publish(b"flaky")
    for _ in range(2):
        assert (await h.fail(await h.one(spec))).ok
        await h.advance(10 * SECOND)
    third = await h.one(spec)
    assert third.attempt == 3 and (await h.ack(third)).ok
    await h.nothing_more([spec])


async def test_credit_beyond_max_unacked_waits_until_the_consumer_settles() -> None:
    h = Harness(EngineConfig(backend_name="memory", max_unacked=3))
    await h.engine.start()
    try:
        consumer = await h.open(h.spec("rocketmq"), credit=100)
        await h.publish(*(b"m%d" % i for i in range(6)))
        held = list(consumer.outbox)
        assert [d.body for d in held] == [b"m0", b"m1", b"m2"]
        assert (await h.ack(held[0])).ok
        assert [d.body for d in consumer.outbox][3:] == [b"m3"]
        assert len(consumer.receipts) == 3
    finally:
        await h.engine.close()


async def test_a_consumer_holds_at_most_max_unacked_bytes_of_bodies() -> None:
    """Large messages: the count limit alone would let one consumer hold 50,000 of 4 MiB. The
    delivery that passes the byte limit is the last until settling brings it under again;
    a message larger than the whole limit still goes out, alone."""
    mib = 1 << 20
    h = Harness(EngineConfig(backend_name="memory", max_unacked_bytes=3 * mib))
    await h.engine.start()
    try:
        consumer = await h.open(h.spec("rocketmq"), credit=100)
        await h.publish(*(bytes([i]) * mib for i in range(6)), b"small", b"x" * (4 * mib - 64))
        held = list(consumer.outbox)
        assert [d.body[0] for d in held] == [0, 1, 2]
        assert consumer.unacked_bytes == 3 * mib
        assert (await h.ack(held[0])).ok
        assert (await h.ack(held[1])).ok
        assert [d.body[0] for d in consumer.outbox][3:] == [3, 4]  # 2 MiB under: two fit
        for d in list(consumer.outbox)[2:]:
            assert (await h.ack(d)).ok
        assert [d.body[0] for d in consumer.outbox][5:] == [5, ord("s"), ord("x")]
        assert consumer.unacked_bytes == mib + 5 + 4 * mib - 64
        for d in list(consumer.outbox)[5:]:
            assert (await h.ack(d)).ok
        assert consumer.unacked_bytes == 0 and consumer.receipts == {}
    finally:
        await h.engine.close()


async def test_settled_deliveries_leave_no_timers(h: Harness) -> None:
    spec = h.spec("rocketmq-simple")
    await h.publish(b"x")
    d = await h.one(spec, invisible_ms=60 * SECOND)
    assert len(h.engine.timers) == 1
    changed = await h.settle(d.receipt, SettleAction.EXTEND, invisible_ms=120 * SECOND)
    assert changed.ok and len(h.engine.timers) == 1
    assert (await h.settle(changed.new_receipt, SettleAction.ACK)).ok
    assert len(h.engine.timers) == 0


async def test_a_named_broadcast_consumer_resumes_until_its_group_expires() -> None:
    idle_ms = 60 * SECOND
    h = Harness(EngineConfig(backend_name="memory", broadcast_idle_ms=idle_ms))
    await h.engine.start()
    try:
        await h.publish(b"1", b"2", b"3")
        spec = h.spec("rocketmq", broadcast=True, consumer_id="lobby")
        lobby = await h.open(spec, credit=1)
        (first,) = h.pushed(lobby)
        await h.ack(first)
        await lobby.close()
        await h.advance(idle_ms - 1)
        lobby = await h.open(spec, credit=1)  # back within the idle period: resumes
        (second,) = h.pushed(lobby)
        assert second.body == b"2"
        await h.ack(second)
        await lobby.close()
        await h.advance(idle_ms - 1)  # the period starts again from the last leave
        assert (TOPIC, "G#lobby") in h.engine.subscriptions
        await h.advance(1)
        assert (TOPIC, "G#lobby") not in h.engine.subscriptions
        assert (await h.backend.stats(TOPIC, "G#lobby", h.now())).ready == 3  # a new group
    finally:
        await h.engine.close()
