"""basic.get through the gateway right after publishes the broker confirmed finds them, as
RabbitMQ's own basic.get does, on the RabbitMQ back end: whether the publishes went through the
gateway or to the broker itself (a plain client, or another gateway on the same broker). The
gateway's consumer of the broker queue may not have received a message the broker already
confirmed (its delivery on the way), or may never be dealt it (its prefetch full of unacknowledged
gets, or other consumers of the queue dealt it): a get must not answer get-empty for it. A held
link from the broker makes the first case deterministic; many rounds of publish then get run it
as it comes. (A get answered from the gateway's buffer alone: get-empty in both cases.)
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import aio_pika
import pytest
from aio_pika.abc import AbstractChannel, AbstractQueue, AbstractRobustConnection

from adapters.amqp.backend import RabbitMQBackend
from adapters.amqp.queues import queue_name
from gateway.engine.clock import SystemClock
from tests.amqp_front import RABBITMQ_URL, AmqpGateway, amqp_gateway, amqp_gateway_on, unique
from tests.gate_proxy import GateProxy

ROUNDS = 100


@pytest.fixture
async def gw(tmp_path: Path) -> AsyncIterator[AmqpGateway]:
    async with amqp_gateway_on("rabbitmq", tmp_path / "data") as gateway:
        yield gateway


async def connect(url: str, stack: AsyncExitStack) -> AbstractRobustConnection:
    connection = await aio_pika.connect_robust(url)
    stack.push_async_callback(connection.close)
    return connection


async def rounds(publisher: AbstractChannel, routing_key: str, queue: AbstractQueue) -> list[int]:
    """Publish then get, ROUNDS times: the rounds whose get found nothing."""
    empty = []
    for n in range(ROUNDS):
        await publisher.default_exchange.publish(aio_pika.Message(b"m%d" % n),
                                                 routing_key=routing_key)  # confirmed
        got = await queue.get(fail=False, timeout=5)
        if got is None:
            empty.append(n)
            got = await queue.get(fail=True, timeout=5)  # came meanwhile: keep in step
        assert got.body == b"m%d" % n
        await got.ack()
    assert await queue.get(fail=False, timeout=5) is None
    return empty


async def test_get_after_publish_confirmed_by_the_gateway(gw: AmqpGateway) -> None:
    async with AsyncExitStack() as stack:
        ch = await (await connect(gw.url, stack)).channel()
        name = unique("own")
        queue = await ch.declare_queue(name)
        assert await rounds(ch, name, queue) == []


async def test_get_after_publish_confirmed_by_the_broker(gw: AmqpGateway) -> None:
    async with AsyncExitStack() as stack:
        ch = await (await connect(gw.url, stack)).channel()
        name = unique("direct")
        queue = await ch.declare_queue(name)
        assert await queue.get(fail=False, timeout=5) is None  # the gateway consumes it now
        broker = await (await connect(RABBITMQ_URL, stack)).channel()
        assert await rounds(broker, queue_name(name), queue) == []


async def test_get_waits_for_the_broker_not_for_deliveries_on_their_way(tmp_path: Path) -> None:
    """Deterministic: the gateway's link from the broker is held while a plain client publishes
    to the broker (confirmed) and asks the gateway for a message. The delivery to the gateway's
    consumer is held in the proxy: a gateway answering from its buffer alone answers get-empty
    at once, without a word to the broker; one that asks the broker first is released (it spoke)
    and gets the message."""
    async with AsyncExitStack() as stack:
        proxy = await stack.enter_async_context(GateProxy())
        backend = RabbitMQBackend(proxy.url(), clock=SystemClock())
        gateway = await stack.enter_async_context(amqp_gateway(tmp_path / "data",
                                                               backend=backend))
        ch = await (await connect(gateway.url, stack)).channel()
        name = unique("held")
        queue = await ch.declare_queue(name)
        assert await queue.get(fail=False, timeout=5) is None  # the gateway consumes it now
        broker = await (await connect(RABBITMQ_URL, stack)).channel()
        for n in range(3):
            proxy.hold()
            await broker.default_exchange.publish(aio_pika.Message(b"m%d" % n),
                                                  routing_key=queue_name(name))
            get = asyncio.ensure_future(queue.get(fail=False, timeout=10))
            spoke = asyncio.ensure_future(proxy.sent.wait())
            await asyncio.wait({get, spoke}, return_when=asyncio.FIRST_COMPLETED)
            spoke.cancel()
            proxy.release()
            got = await get
            assert got is not None, f"round {n}: get-empty while the delivery was on its way"
            assert got.body == b"m%d" % n
            await got.ack()
        await queue.delete()


async def test_get_past_a_full_prefetch(tmp_path: Path) -> None:
    """The gateway's consumer takes 2 deliveries at a time; two gets hold them unacknowledged:
    the broker deals it nothing more, and a third get still finds the third message."""
    backend = RabbitMQBackend(RABBITMQ_URL, prefetch=2, clock=SystemClock())
    async with AsyncExitStack() as stack:
        gateway = await stack.enter_async_context(amqp_gateway(tmp_path / "data",
                                                               backend=backend))
        ch = await (await connect(gateway.url, stack)).channel()
        name = unique("full")
        queue = await ch.declare_queue(name)
        for n in range(4):
            await ch.default_exchange.publish(aio_pika.Message(b"m%d" % n), routing_key=name)
        got = [await queue.get(fail=False, timeout=5) for _ in range(4)]
        assert [m.body if m is not None else None for m in got] == [b"m0", b"m1", b"m2", b"m3"]
        assert await queue.get(fail=False, timeout=5) is None
        for message in got:
            assert message is not None
            await message.ack()
        await queue.delete()
