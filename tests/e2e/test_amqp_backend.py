"""The RabbitMQ back end against the real broker on 127.0.0.1:5672 (or $GATEWAY_AMQP_URL)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aio_pika
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from amqp_node import (
    URL,
    collect,
    delete_queues,
    plain_connection,
    ready_in,
    unique,
)

from adapters.amqp.backend import RabbitMQBackend
from adapters.amqp.delays import delay_queue
from gateway.backend.base import OutMessage, Release
from gateway.engine.clock import ManualClock, SystemClock
from gateway.errors import InvalidArgument, Unavailable

wall_clock_ms = SystemClock().now_ms
"""The engine's clock in production: what `fetch` and `stats` get as now."""

GROUP = "g1"


@pytest.fixture
async def topic() -> AsyncIterator[str]:
    name = unique()
    yield name
    delays = [delay_queue("{queue}.delay.{ms}", name, ms).name for ms in (700, 1500, 120_000)]
    async with plain_connection() as connection:
        await delete_queues(connection, name, *delays)


@pytest.fixture
async def backend() -> AsyncIterator[RabbitMQBackend]:
    instance = RabbitMQBackend(URL, prefetch=100)
    await instance.open()
    yield instance
    await instance.close()


async def round_trip(backend: RabbitMQBackend, topic: str, body: bytes) -> None:
    """Publish one message, fetch it and ack it."""
    await backend.publish(topic, [OutMessage(body=body)])
    [got] = await collect(backend, topic, GROUP, 1)
    assert got.body == body
    await backend.ack([got.lease])


async def test_publish_fetch_ack(backend: RabbitMQBackend, topic: str) -> None:
    assert backend.healthy()
    messages = [
        OutMessage(body=b"one", properties={"color": "red"}, key="k1", tag="t1"),
        OutMessage(body=b"two", message_id="fixed-id"),
        OutMessage(body=b"three", tag="t3"),
    ]
    ids = await backend.publish(topic, messages)
    assert ids[1] == "fixed-id" and len(set(ids)) == 3 and all(ids)
    got = await collect(backend, topic, GROUP, 3)
    assert [m.body for m in got] == [b"one", b"two", b"three"]
    assert [m.message_id for m in got] == ids
    first = got[0]
    assert (first.key, first.tag, dict(first.properties)) == ("k1", "t1", {"color": "red"})
    assert all(m.attempt == 0 and m.retries == 0 for m in got)
    assert all(m.topic == topic and m.lease.group == GROUP for m in got)
    stats = await backend.stats(topic, GROUP, wall_clock_ms())
    assert (stats.ready, stats.leased) == (0, 3)
    await backend.ack([m.lease for m in got])
    await backend.ack([got[0].lease])  # unknown now: ignored
    stats = await backend.stats(topic, GROUP, wall_clock_ms())
    assert (stats.ready, stats.leased) == (0, 0)
    assert topic in await backend.topics()
    await backend.close()
    async with plain_connection() as connection:
        assert await ready_in(connection, topic) == 0


async def test_confirmed_publish_is_in_the_queue_and_persistent(
    backend: RabbitMQBackend, topic: str
) -> None:
    await backend.publish(topic, [OutMessage(body=bytes([i]) * 1024) for i in range(50)])
    async with plain_connection() as connection:
        assert await ready_in(connection, topic) == 50
        channel = await connection.channel()
        queue = await channel.declare_queue(topic, passive=True)
        message = await queue.get(no_ack=True)
        assert message.delivery_mode == aio_pika.DeliveryMode.PERSISTENT
        await channel.close()


async def test_unacked_leases_come_back_counted_after_close(topic: str) -> None:
    first = RabbitMQBackend(URL)
    await first.open()
    [mid] = await first.publish(topic, [OutMessage(body=b"x", attempt=2)])
    [got] = await collect(first, topic, GROUP, 1)
    assert got.attempt == 2
    await first.close()  # lease dropped: RabbitMQ requeues and marks it redelivered
    second = RabbitMQBackend(URL)
    await second.open()
    try:
        [again] = await collect(second, topic, GROUP, 1)
        assert again.message_id == mid
        assert again.attempt == 3
        await second.ack([again.lease])
    finally:
        await second.close()


async def test_delayed_publish_is_held_by_rabbitmq(backend: RabbitMQBackend, topic: str) -> None:
    assert await backend.fetch(topic, GROUP, 10, wall_clock_ms()) == []
    deliver_at = wall_clock_ms() + 700
    [mid] = await backend.publish(topic, [OutMessage(body=b"later", deliver_at_ms=deliver_at)])
    held_in = delay_queue("{queue}.delay.{ms}", topic, 700).name
    async with plain_connection() as connection:
        if wall_clock_ms() < deliver_at:
            assert await ready_in(connection, held_in) + await ready_in(connection, topic) == 1
            assert await ready_in(connection, topic) == 0
    early = await backend.fetch(topic, GROUP, 10, wall_clock_ms())
    assert early == [] or wall_clock_ms() >= deliver_at
    got = early or await collect(backend, topic, GROUP, 1, timeout_s=15)
    arrived = wall_clock_ms()
    assert [m.message_id for m in got] == [mid]
    assert got[0].deliver_at_ms == deliver_at
    assert arrived >= deliver_at
    assert arrived - deliver_at < 5000
    stats = await backend.stats(topic, GROUP, wall_clock_ms())
    assert stats.delayed == 0
    await backend.ack([got[0].lease])


async def test_plain_publisher_message_is_fetched(backend: RabbitMQBackend, topic: str) -> None:
    await backend.fetch(topic, GROUP, 1, wall_clock_ms())  # declares and starts consuming
    async with plain_connection() as connection:
        channel = await connection.channel()
        message = aio_pika.Message(
            body=b"plain",
            message_id="plain-1",
            headers={"x-key": "pk", "x-tag": "pt", "region": "eu", "n": 7},
            delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
        )
        await channel.default_exchange.publish(message, routing_key=topic)
        await channel.close()
    [got] = await collect(backend, topic, GROUP, 1)
    assert (got.message_id, got.body, got.key, got.tag) == ("plain-1", b"plain", "pk", "pt")
    assert dict(got.properties) == {"region": "eu", "n": "7"}
    assert (got.attempt, got.retries) == (0, 0)
    await backend.ack([got.lease])


async def test_backend_message_is_read_by_plain_consumer(
    backend: RabbitMQBackend, topic: str
) -> None:
    out = OutMessage(
        body=b"hello", properties={"trace": "abc"}, key="k", tag="t", attempt=4, retries=3
    )
    [mid] = await backend.publish(topic, [out])
    async with plain_connection() as connection:
        channel = await connection.channel()
        queue = await channel.declare_queue(topic, passive=True)
        message = await queue.get(no_ack=False)
        assert message.body == b"hello"
        assert message.message_id == mid
        assert message.delivery_mode == aio_pika.DeliveryMode.PERSISTENT
        headers = message.headers
        assert headers["x-key"] == "k" and headers["x-tag"] == "t"
        assert headers["x-gateway-attempt"] == 4 and headers["x-gateway-retries"] == 3
        assert headers["trace"] == "abc"
        await message.ack()
        await channel.close()


async def test_release_with_delay_survives_reopen(topic: str) -> None:
    first = RabbitMQBackend(URL)
    await first.open()
    [mid] = await first.publish(topic, [OutMessage(body=b"retry me", key="k", tag="t")])
    [got] = await collect(first, topic, GROUP, 1)
    visible_at = wall_clock_ms() + 1500
    await first.release([Release(got.lease, visible_at, attempt=1, retries=1)])
    await first.close()
    async with plain_connection() as connection:
        if wall_clock_ms() < visible_at:
            assert await ready_in(connection, topic) == 0
    second = RabbitMQBackend(URL)
    await second.open()
    try:
        [again] = await collect(second, topic, GROUP, 1, timeout_s=15)
        arrived = wall_clock_ms()
        assert arrived >= visible_at
        assert (again.message_id, again.body, again.key, again.tag) == (mid, b"retry me", "k", "t")
        assert (again.attempt, again.retries) == (1, 1)
        assert again.deliver_at_ms == visible_at
        assert again.publish_ms == got.publish_ms
        await second.ack([again.lease])
    finally:
        await second.close()
    async with plain_connection() as connection:
        assert await ready_in(connection, topic) == 0


async def test_release_now_requeues_or_republishes(backend: RabbitMQBackend, topic: str) -> None:
    [mid] = await backend.publish(topic, [OutMessage(body=b"m")])
    [got] = await collect(backend, topic, GROUP, 1)
    # same retries, one more delivery: requeued in place
    await backend.release([Release(got.lease, wall_clock_ms(), attempt=1, retries=0)])
    [second] = await collect(backend, topic, GROUP, 1)
    assert (second.message_id, second.attempt, second.retries) == (mid, 1, 0)
    # new retries count: a copy with new headers replaces the original
    await backend.release([Release(second.lease, wall_clock_ms(), attempt=2, retries=1)])
    await backend.ack([second.lease])  # settled by the release: ignored
    [third] = await collect(backend, topic, GROUP, 1)
    assert (third.message_id, third.attempt, third.retries) == (mid, 2, 1)
    await backend.ack([third.lease])
    stats = await backend.stats(topic, GROUP, wall_clock_ms())
    assert (stats.ready, stats.leased, stats.delayed) == (0, 0, 0)


async def test_exclude_keys_leaves_messages_buffered_in_order(
    backend: RabbitMQBackend, topic: str
) -> None:
    await backend.publish(
        topic,
        [
            OutMessage(body=b"a", key="k1"),
            OutMessage(body=b"b", key="k2"),
            OutMessage(body=b"c", key="k1"),
            OutMessage(body=b"d"),
        ],
    )
    blocked = frozenset({"k1"})
    first = await collect(backend, topic, GROUP, 2, exclude_keys=blocked)
    assert [m.body for m in first] == [b"b", b"d"]
    assert await backend.fetch(topic, GROUP, 10, wall_clock_ms(), exclude_keys=blocked) == []
    rest = await backend.fetch(topic, GROUP, 10, wall_clock_ms())
    assert [m.body for m in rest] == [b"a", b"c"]
    await backend.ack([m.lease for m in first + rest])


async def test_stats_peek_remove_purge(backend: RabbitMQBackend, topic: str) -> None:
    await backend.publish(topic, [OutMessage(body=bytes([65 + i])) for i in range(4)])
    await backend.publish(
        topic, [OutMessage(body=b"later", deliver_at_ms=wall_clock_ms() + 120_000)]
    )
    stats = await backend.stats(topic, GROUP, wall_clock_ms())
    assert (stats.ready, stats.delayed, stats.leased) == (4, 1, 0)
    page = await backend.peek(topic, GROUP, 2)
    assert [m.body for m in page] == [b"A", b"B"]
    assert [m.lease.position for m in page] == [0, 1]
    rest = await backend.peek(topic, GROUP, 10, after_position=1)
    assert [m.body for m in rest] == [b"C", b"D"]
    assert await backend.remove([page[1].lease]) == 1
    assert [m.body for m in await backend.peek(topic, GROUP, 10)] == [b"A", b"C", b"D"]
    assert (await backend.stats(topic, GROUP, wall_clock_ms())).ready == 3
    assert await backend.purge(topic, GROUP) == 4
    stats = await backend.stats(topic, GROUP, wall_clock_ms())
    assert (stats.ready, stats.delayed, stats.leased) == (0, 0, 0)


async def test_purge_and_remove_cover_held_deliveries(backend: RabbitMQBackend, topic: str) -> None:
    """remove takes a leased delivery; purge takes buffered ones and leaves leased ones, as
    RabbitMQ's queue.purge leaves unacked messages (it took them too, and their acks were
    ignored): their acks settle them."""
    await backend.publish(topic, [OutMessage(body=bytes([65 + i])) for i in range(5)])
    [leased] = await collect(backend, topic, GROUP, 1)
    assert await backend.remove([leased.lease]) == 1
    held = await collect(backend, topic, GROUP, 2)
    assert await backend.purge(topic, GROUP) == 2
    assert (await backend.stats(topic, GROUP, wall_clock_ms())).leased == 2
    await backend.ack([m.lease for m in held])
    assert (await backend.stats(topic, GROUP, wall_clock_ms())).leased == 0
    await backend.close()  # nothing unacked left for the broker to requeue
    async with plain_connection() as connection:
        assert await ready_in(connection, topic) == 0


async def test_purge_takes_deliveries_still_in_flight(topic: str) -> None:
    """Deliveries the broker already sent but the back end did not buffer yet are unacked in the
    broker's eyes, so a queue purge misses them: purge pauses the consumer first. (The one
    leased stays leased.)"""
    backend = RabbitMQBackend(URL, prefetch=1000)
    await backend.open()
    try:
        for _ in range(3):
            await backend.publish(topic, [OutMessage(body=b"x" * 512) for _ in range(300)])
            got = await collect(backend, topic, GROUP, 1)
            assert len(got) == 1
            assert await backend.purge(topic, GROUP) == 299
            await backend.ack([got[0].lease])
            assert await backend.fetch(topic, GROUP, 1000, wall_clock_ms()) == []
            await backend.wait(topic, GROUP, 0.3)
            assert await backend.fetch(topic, GROUP, 1000, wall_clock_ms()) == []
        await round_trip(backend, topic, b"after")
    finally:
        await backend.close()


async def test_purge_holds_off_a_consuming_loop(topic: str) -> None:
    """The engine keeps fetching and waiting while an admin purges: the queue stays unconsumed
    until the purge is done, so nothing ready slips past it into the buffer."""
    backend = RabbitMQBackend(URL, prefetch=50)
    await backend.open()
    fetched: list[tuple[bool, bytes]] = []
    purged = False

    async def engine_loop() -> None:
        while True:
            for got in await backend.fetch(topic, GROUP, 10, wall_clock_ms()):
                fetched.append((purged, got.body))
            await backend.wait(topic, GROUP, 0.001)

    loop = asyncio.ensure_future(engine_loop())
    try:
        await backend.publish(topic, [OutMessage(body=b"%d" % i) for i in range(2000)])
        while not fetched:
            await asyncio.sleep(0.001)
        count = await backend.purge(topic, GROUP)
        assert count == 2000 - len(fetched)  # leased ones stay leased
        purged = True
        await asyncio.sleep(0.5)
        assert [body for after, body in fetched if after] == []
        await backend.publish(topic, [OutMessage(body=b"after")])
        for _ in range(500):
            if fetched[-1] == (True, b"after"):
                break
            await asyncio.sleep(0.01)
        assert [body for after, body in fetched if after] == [b"after"]
    finally:
        loop.cancel()
        await backend.close()


async def test_consuming_resumes_after_the_queue_is_deleted_behind_its_back(
    backend: RabbitMQBackend, topic: str
) -> None:
    """The broker cancels the consumer of a deleted queue; the next fetch consumes it anew."""
    await round_trip(backend, topic, b"before")
    async with plain_connection() as connection:
        await delete_queues(connection, topic)
    await backend.wait(topic, GROUP, 0.2)  # woken by the cancel: consumes the queue anew
    try:
        await backend.publish(topic, [OutMessage(body=b"again")])
    except Unavailable:  # published before the queue was declared again: unroutable
        await backend.publish(topic, [OutMessage(body=b"again")])
    [again] = await collect(backend, topic, GROUP, 1, timeout_s=5.0)
    assert again.body == b"again"
    await backend.ack([again.lease])


async def test_quorum_queue_counts_redeliveries(topic: str) -> None:
    first = RabbitMQBackend(URL, quorum=True)
    await first.open()
    [mid] = await first.publish(topic, [OutMessage(body=b"q", attempt=1)])
    [got] = await collect(first, topic, GROUP, 1)
    assert got.attempt == 1
    await first.close()
    second = RabbitMQBackend(URL, quorum=True)
    await second.open()
    try:
        [again] = await collect(second, topic, GROUP, 1)
        assert (again.message_id, again.attempt) == (mid, 2)
        await second.release([Release(again.lease, wall_clock_ms(), attempt=3, retries=0)])
        [third] = await collect(second, topic, GROUP, 1)
        assert (third.message_id, third.attempt) == (mid, 3)
        await second.ack([third.lease])
    finally:
        await second.close()


async def test_unreachable_broker_is_unavailable() -> None:
    backend = RabbitMQBackend("amqp://guest:guest@127.0.0.1:1/", connect_timeout_s=2)
    assert not backend.healthy()
    with pytest.raises(Unavailable):
        await backend.publish("anything", [OutMessage(body=b"x")])
    with pytest.raises(Unavailable):
        await backend.open()
    assert not backend.healthy()


async def test_queue_with_other_arguments_is_invalid_argument(
    backend: RabbitMQBackend, topic: str
) -> None:
    async with plain_connection() as connection:
        channel = await connection.channel()
        await channel.declare_queue(topic, durable=True, arguments={"x-queue-type": "quorum"})
        await channel.close()
    classic = RabbitMQBackend(URL, quorum=False)
    await classic.open()
    try:
        with pytest.raises(InvalidArgument) as caught:
            await classic.publish(topic, [OutMessage(body=b"x")])
        assert caught.value.field == "topic" and caught.value.value == topic
    finally:
        await classic.close()
    quorum = RabbitMQBackend(URL, quorum=True)
    await quorum.open()
    try:
        await round_trip(quorum, topic, b"y")
    finally:
        await quorum.close()


async def test_publish_recovers_after_queue_deleted_behind_its_back(
    backend: RabbitMQBackend, topic: str
) -> None:
    await backend.publish(topic, [OutMessage(body=b"first")])
    async with plain_connection() as connection:
        await delete_queues(connection, topic)
    with pytest.raises(Unavailable):
        await backend.publish(topic, [OutMessage(body=b"unroutable")])
    await backend.publish(topic, [OutMessage(body=b"second")])
    async with plain_connection() as connection:
        assert await ready_in(connection, topic) == 1


async def test_batched_acks_never_settle_other_deliveries(topic: str) -> None:
    other = unique()
    first = RabbitMQBackend(URL)
    await first.open()
    try:
        await first.fetch(topic, GROUP, 0, wall_clock_ms())
        await first.fetch(other, GROUP, 0, wall_clock_ms())
        for i in range(3):  # interleave deliveries of both queues on the consuming channel
            await first.publish(topic, [OutMessage(body=b"a%d" % i)])
            await first.publish(other, [OutMessage(body=b"b%d" % i)])
        mine = await collect(first, topic, GROUP, 3)
        theirs = await collect(first, other, GROUP, 3)
        assert len(mine) == 3 and len(theirs) == 3
        await first.ack([mine[2].lease, mine[0].lease])  # out of order, with a gap
        await first.ack([mine[1].lease, theirs[0].lease])
        await first.close()  # the two unacked deliveries of `other` go back to their queue
        async with plain_connection() as connection:
            assert await ready_in(connection, topic) == 0
            assert await ready_in(connection, other) == 2
    finally:
        await first.close()
        async with plain_connection() as connection:
            await delete_queues(connection, other)


async def test_stats_reads_next_visible_without_counting_a_delivery(
    backend: RabbitMQBackend, topic: str
) -> None:
    due = wall_clock_ms() + 700
    [mid] = await backend.publish(topic, [OutMessage(body=b"d", deliver_at_ms=due, attempt=1)])
    stats = await backend.stats(topic, GROUP, wall_clock_ms())
    if wall_clock_ms() < due:
        assert (stats.delayed, stats.next_visible_ms) == (1, due)
    [got] = await collect(backend, topic, GROUP, 1, timeout_s=15)
    assert got.message_id == mid
    assert wall_clock_ms() >= due
    assert got.attempt == 1  # the head read in the delay queue did not count
    await backend.ack([got.lease])


async def test_delays_are_counted_on_the_engines_clock(topic: str) -> None:
    """Delays are deliver-at times minus the engine's now (its `Clock`), not the wall clock's:
    on a clock far behind the wall, a message due in 120 s waits in the 120 s delay queue."""
    clock = ManualClock(1_000_000)
    backend = RabbitMQBackend(URL, clock=clock)
    await backend.open()
    try:
        await backend.publish(topic, [OutMessage(body=b"later", deliver_at_ms=1_120_000)])
        stats = await backend.stats(topic, GROUP, clock.now_ms())
        assert (stats.ready, stats.delayed) == (0, 1)
        assert stats.next_visible_ms == 1_120_000
    finally:
        await backend.close()
    async with plain_connection() as connection:
        waiting = delay_queue("{queue}.delay.{ms}", topic, 120_000).name
        assert await ready_in(connection, waiting) == 1
