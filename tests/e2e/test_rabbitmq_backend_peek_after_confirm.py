"""A peek on the RabbitMQ back end right after a publish the broker confirmed lists the message
while its delivery to the back end's consumer is still on its way: the message is then neither
held by the consumer nor ready in the queue (it was dealt to the consumer), so a peek listing
the held deliveries before asking the queue missed it. Deterministic: the back end's link from
the broker is held (`GateProxy`) while a plain client publishes and the peek starts."""

from __future__ import annotations

import asyncio
import uuid
from contextlib import AsyncExitStack

import aio_pika

from adapters.amqp.backend import RabbitMQBackend
from adapters.amqp.queues import queue_name
from tests.amqp_front import RABBITMQ_URL
from tests.gate_proxy import GateProxy


async def test_peek_lists_a_delivery_on_its_way() -> None:
    topic = f"peek-race-{uuid.uuid4().hex[:8]}"
    async with AsyncExitStack() as stack:
        proxy = await stack.enter_async_context(GateProxy())
        backend = RabbitMQBackend(proxy.url())
        await backend.open()
        stack.push_async_callback(backend.close)
        assert await backend.fetch(topic, "g", 10, 0) == []  # consuming the queue now
        connection = await aio_pika.connect(RABBITMQ_URL)
        stack.push_async_callback(connection.close)
        broker = await connection.channel()
        stack.push_async_callback(broker.queue_delete, queue_name(topic))
        proxy.hold()
        await broker.default_exchange.publish(aio_pika.Message(b"m"),
                                              routing_key=queue_name(topic))  # confirmed
        peek = asyncio.ensure_future(backend.peek(topic, "g", 10))
        spoke = asyncio.ensure_future(proxy.sent.wait())
        await asyncio.wait({peek, spoke}, return_when=asyncio.FIRST_COMPLETED)
        spoke.cancel()
        proxy.release()
        assert [m.body for m in await peek] == [b"m"]
        got = await backend.fetch(topic, "g", 10, 0)  # still there, not leased by the peek
        assert [m.body for m in got] == [b"m"]
        await backend.ack([m.lease for m in got])
