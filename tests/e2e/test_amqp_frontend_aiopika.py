"""Unmodified aio-pika against the gateway's AMQP 0-9-1 front end: declares, confirmed publishes,
consumers with prefetch, basic.get, ack / nack / reject, and every exchange type."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import aio_pika
import aiormq
import pytest
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage, AbstractRobustConnection

from tests.amqp_front import AmqpGateway, amqp_gateway, unique


@pytest.fixture
async def gw(tmp_path: Path) -> AsyncIterator[AmqpGateway]:
    async with amqp_gateway(tmp_path / "data") as gateway:
        yield gateway


@pytest.fixture
async def conn(gw: AmqpGateway) -> AsyncIterator[AbstractRobustConnection]:
    connection = await aio_pika.connect_robust(gw.url)
    try:
        yield connection
    finally:
        await connection.close()


@pytest.fixture
async def ch(conn: AbstractRobustConnection) -> AbstractChannel:
    return await conn.channel()


async def take(queue: aio_pika.abc.AbstractQueue, n: int, timeout: float = 5.0
               ) -> list[AbstractIncomingMessage]:
    """`n` deliveries from a consumer on `queue` (not acknowledged)."""
    got: list[AbstractIncomingMessage] = []
    done = asyncio.Event()

    async def on_message(message: AbstractIncomingMessage) -> None:
        got.append(message)
        if len(got) >= n:
            done.set()

    tag = await queue.consume(on_message)
    try:
        await asyncio.wait_for(done.wait(), timeout)
    finally:
        await queue.cancel(tag)
    return got


async def test_declare_publish_with_confirms_and_get(ch: AbstractChannel) -> None:
    name = unique()
    queue = await ch.declare_queue(name, durable=True)
    for i in range(3):
        confirmation = await ch.default_exchange.publish(
            aio_pika.Message(f"m{i}".encode(), content_type="text/plain",
                             correlation_id=f"c{i}", headers={"n": i, "s": "x"},
                             delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
            routing_key=name)
        assert isinstance(confirmation, aiormq.spec.Basic.Ack)
    again = await ch.declare_queue(name, durable=True)
    assert again.declaration_result.message_count == 3
    first = await queue.get(timeout=5)
    assert first.body == b"m0" and first.content_type == "text/plain"
    assert first.correlation_id == "c0" and first.headers == {"n": 0, "s": "x"}
    assert first.delivery_mode == aio_pika.DeliveryMode.PERSISTENT
    assert first.routing_key == name and first.exchange == "" and not first.redelivered
    await first.ack()
    second = await queue.get(timeout=5)
    await second.reject(requeue=False)  # no dead-letter exchange: gone
    third = await queue.get(timeout=5)
    assert third.body == b"m2"
    await third.ack()
    assert await queue.get(fail=False) is None


async def test_prefetch_bounds_unacknowledged_deliveries(ch: AbstractChannel) -> None:
    await ch.set_qos(prefetch_count=2)
    name = unique()
    queue = await ch.declare_queue(name)
    for i in range(6):
        await ch.default_exchange.publish(aio_pika.Message(b"%d" % i), routing_key=name)
    got: list[AbstractIncomingMessage] = []
    arrived = asyncio.Event()

    async def on_message(message: AbstractIncomingMessage) -> None:
        got.append(message)
        arrived.set()

    await queue.consume(on_message)
    await asyncio.wait_for(arrived.wait(), 5)
    await asyncio.sleep(0.3)
    assert [m.body for m in got] == [b"0", b"1"]  # two unacknowledged at most
    await got[0].ack()
    await asyncio.sleep(0.3)
    assert [m.body for m in got] == [b"0", b"1", b"2"]
    for message in got[1:]:
        await message.ack()
    for _ in range(50):
        if len(got) == 6:
            break
        await asyncio.sleep(0.1)
        for message in got:
            if not message.processed:
                await message.ack()
    assert sorted(m.body for m in got) == [b"%d" % i for i in range(6)]


async def test_nack_with_requeue_is_retried_and_ack_stops_it(ch: AbstractChannel) -> None:
    name = unique()
    queue = await ch.declare_queue(name, arguments={"x-retry-interval": 10})
    await ch.default_exchange.publish(aio_pika.Message(b"flaky"), routing_key=name)
    (first,) = await take(queue, 1)
    await first.nack(requeue=True)
    (second,) = await take(queue, 1)
    assert second.redelivered and second.headers.get("x-delivery-count") == 1
    await second.ack()
    assert await queue.get(fail=False, timeout=5) is None
    await asyncio.sleep(0.5)  # past several intervals (10 s at time scale 0.01)
    assert await queue.get(fail=False) is None


async def test_multiple_acks_and_nacks(ch: AbstractChannel) -> None:
    name = unique()
    queue = await ch.declare_queue(name)
    for i in range(4):
        await ch.default_exchange.publish(aio_pika.Message(b"%d" % i), routing_key=name)
    got = await take(queue, 4)
    await got[1].ack(multiple=True)  # acks 0 and 1
    await got[3].nack(multiple=True, requeue=False)  # 2 and 3 dead: no DLX, discarded
    await asyncio.sleep(0.3)
    assert await queue.get(fail=False) is None


async def test_every_exchange_type_routes_by_its_rules(ch: AbstractChannel) -> None:
    q = {k: await ch.declare_queue(unique(k)) for k in ("d", "f1", "f2", "t", "h")}
    direct = await ch.declare_exchange(unique("direct"), aio_pika.ExchangeType.DIRECT)
    fanout = await ch.declare_exchange(unique("fanout"), aio_pika.ExchangeType.FANOUT)
    topic = await ch.declare_exchange(unique("topic"), aio_pika.ExchangeType.TOPIC)
    headers = await ch.declare_exchange(unique("headers"), aio_pika.ExchangeType.HEADERS)
    await q["d"].bind(direct, routing_key="red")
    await q["f1"].bind(fanout)
    await q["f2"].bind(fanout)
    await q["t"].bind(topic, routing_key="orders.*.eu")
    await q["t"].bind(topic, routing_key="audit.#")
    await q["h"].bind(headers, arguments={"x-match": "all", "kind": "invoice", "v": 2})
    await direct.publish(aio_pika.Message(b"red"), routing_key="red")
    await direct.publish(aio_pika.Message(b"blue"), routing_key="blue")
    await fanout.publish(aio_pika.Message(b"all"), routing_key="whatever")
    for key in ("orders.new.eu", "orders.new.us", "audit", "audit.a.b.c", "orders.eu"):
        await topic.publish(aio_pika.Message(key.encode()), routing_key=key)
    await headers.publish(aio_pika.Message(b"match", headers={"kind": "invoice", "v": 2}),
                          routing_key="")
    await headers.publish(aio_pika.Message(b"partial", headers={"kind": "invoice"}),
                          routing_key="")

    async def drain(queue: aio_pika.abc.AbstractQueue) -> list[bytes]:
        out = []
        while (m := await queue.get(fail=False, timeout=5)) is not None:
            out.append(m.body)
            await m.ack()
        return out

    assert await drain(q["d"]) == [b"red"]
    assert await drain(q["f1"]) == [b"all"]
    assert await drain(q["f2"]) == [b"all"]
    assert sorted(await drain(q["t"])) == sorted([b"orders.new.eu", b"audit", b"audit.a.b.c"])
    assert await drain(q["h"]) == [b"match"]
    # Unbinding stops the route.
    await q["d"].unbind(direct, routing_key="red")
    await direct.publish(aio_pika.Message(b"red again"), routing_key="red")
    assert await drain(q["d"]) == []


async def test_builtin_exchanges_and_exchange_to_exchange_bindings(ch: AbstractChannel) -> None:
    queue = await ch.declare_queue(unique())
    amq_topic = await ch.get_exchange("amq.topic")
    await queue.bind(amq_topic, routing_key="a.#")
    source = await ch.declare_exchange(unique("src"), aio_pika.ExchangeType.FANOUT)
    await amq_topic.bind(source)  # exchange-to-exchange: source -> amq.topic
    await source.publish(aio_pika.Message(b"via"), routing_key="a.b")
    got = await queue.get(timeout=5)
    assert got.body == b"via" and got.exchange == source.name and got.routing_key == "a.b"
    await got.ack()


async def test_mandatory_unroutable_message_is_returned(
    conn: AbstractRobustConnection,
) -> None:
    ch = await conn.channel()
    exchange = await ch.declare_exchange(unique("nowhere"), aio_pika.ExchangeType.DIRECT)
    returned: list[AbstractIncomingMessage] = []
    ch.return_callbacks.add(lambda _, message: returned.append(message))
    await exchange.publish(aio_pika.Message(b"lost"), routing_key="none", mandatory=True)
    await exchange.publish(aio_pika.Message(b"dropped"), routing_key="none", mandatory=False)
    await ch.default_exchange.publish(aio_pika.Message(b"nobody"), routing_key=unique("no-q"),
                                      mandatory=True)
    await asyncio.sleep(0.2)
    assert [m.body for m in returned] == [b"lost", b"nobody"]
    raising = await conn.channel(on_return_raises=True)
    with pytest.raises(aio_pika.exceptions.DeliveryError):
        await raising.default_exchange.publish(aio_pika.Message(b"x"), routing_key=unique(),
                                               mandatory=True)


async def test_passive_declares_and_missing_entities(conn: AbstractRobustConnection) -> None:
    ch = await conn.channel()
    with pytest.raises(aio_pika.exceptions.ChannelNotFoundEntity):
        await ch.declare_queue(unique("missing"), passive=True)
    ch = await conn.channel()
    with pytest.raises(aio_pika.exceptions.ChannelNotFoundEntity):
        await ch.get_exchange(unique("missing"))
    ch = await conn.channel()
    exchange = await ch.declare_exchange(unique("x"), aio_pika.ExchangeType.TOPIC)
    assert (await ch.get_exchange(exchange.name)).name == exchange.name
    with pytest.raises(aio_pika.exceptions.ChannelPreconditionFailed):
        await ch.declare_exchange(exchange.name, aio_pika.ExchangeType.FANOUT)


async def test_queue_purge_delete_and_server_cancel(conn: AbstractRobustConnection) -> None:
    ch = await conn.channel()
    name = unique()
    queue = await ch.declare_queue(name)
    for i in range(3):
        await ch.default_exchange.publish(aio_pika.Message(b"%d" % i), routing_key=name)
    assert await queue.purge() is not None
    assert await queue.get(fail=False) is None
    cancelled = asyncio.Event()
    consumer_ch = await conn.channel()
    consumer_queue = await consumer_ch.declare_queue(name, passive=True)
    await consumer_queue.consume(lambda m: None)  # type: ignore[arg-type,return-value]
    consumer_ch.close_callbacks.add(lambda *_: None)
    underlay = await consumer_ch.get_underlay_channel()
    underlay.on_consumer_cancel_callbacks.add(lambda _: cancelled.set())
    await queue.delete(if_unused=False)
    await asyncio.wait_for(cancelled.wait(), 5)  # basic.cancel from the server
    with pytest.raises(aio_pika.exceptions.ChannelNotFoundEntity):
        await ch.declare_queue(name, passive=True)


async def test_exclusive_and_auto_delete_queues(gw: AmqpGateway,
                                                conn: AbstractRobustConnection) -> None:
    ch = await conn.channel()
    exclusive = await ch.declare_queue(unique("excl"), exclusive=True)
    other = await aio_pika.connect(gw.url)
    try:
        other_ch = await other.channel()
        with pytest.raises(aiormq.exceptions.ChannelLockedResource):
            await other_ch.declare_queue(exclusive.name, passive=True)
    finally:
        await other.close()
    auto = await ch.declare_queue(unique("auto"), auto_delete=True)
    tag = await auto.consume(lambda m: None)  # type: ignore[arg-type,return-value]
    await auto.cancel(tag)
    await asyncio.sleep(0.1)
    ch2 = await conn.channel()
    with pytest.raises(aio_pika.exceptions.ChannelNotFoundEntity):
        await ch2.declare_queue(auto.name, passive=True)


async def test_bad_retry_interval_is_refused_naming_the_range(
    conn: AbstractRobustConnection,
) -> None:
    ch = await conn.channel()
    with pytest.raises(aio_pika.exceptions.ChannelPreconditionFailed) as err:
        await ch.declare_queue(unique(), arguments={"x-retry-interval": 5})
    assert "x-retry-interval" in str(err.value) and "10..1800" in str(err.value)
    ch = await conn.channel()
    with pytest.raises(aio_pika.exceptions.ChannelPreconditionFailed):
        await ch.declare_queue(unique(), arguments={"x-retry-interval": "30"})
    ch = await conn.channel()  # the connection serves on
    assert (await ch.declare_queue(unique(), arguments={"x-retry-interval": 1800})).name
