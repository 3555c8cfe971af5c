"""queue.purge through unmodified aio-pika, as RabbitMQ does it: the ready messages go, messages
delivered and not yet acknowledged stay with their consumer. purge-ok's message-count counts only
the ready ones; a basic.ack of an unacked one settles it (the channel stays open); a basic.nack
with requeue=true is a failure (document 001): the message comes again after the queue's
x-retry-interval, marked redelivered. On the embedded store and on a real RabbitMQ behind the
gateway. (The purge took the unacked ones too and counted them; their acks changed nothing and
the nack brought nothing back.)

Time runs 10 times faster (time scale 0.1): the 10 s retry interval is 1 s, the 1 minute
acknowledgement timeout 6 s.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import aio_pika
import pytest
from aio_pika.abc import AbstractIncomingMessage, AbstractRobustConnection

from tests.amqp_front import AmqpGateway, amqp_gateway_on, unique
from tests.e2e import test_amqp_frontend_retry

SCALE = 0.1
INTERVAL_S = 10


@pytest.fixture(params=["embedded", "rabbitmq"])
async def gw(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[AmqpGateway]:
    async with amqp_gateway_on(request.param, tmp_path / "data", time_scale=SCALE) as gateway:
        yield gateway


# The aio-pika connection fixture of the retry tests, here on this module's `gw`.
conn = test_amqp_frontend_retry.conn


async def test_queue_purge_keeps_unacked_deliveries(conn: AbstractRobustConnection) -> None:
    name = unique("purge")
    ch = await conn.channel()
    await ch.set_qos(prefetch_count=2)
    queue = await ch.declare_queue(name, arguments={"x-retry-interval": INTERVAL_S})
    for i in range(5):
        await ch.default_exchange.publish(aio_pika.Message(b"m%d" % i), routing_key=name)
    got: asyncio.Queue[AbstractIncomingMessage] = asyncio.Queue()
    await queue.consume(got.put)  # manual acknowledgement
    first = await asyncio.wait_for(got.get(), 5)
    second = await asyncio.wait_for(got.get(), 5)
    assert (first.body, second.body) == (b"m0", b"m1")
    assert got.empty()

    admin = await conn.channel()
    purged = await (await admin.declare_queue(name, passive=True)).purge()
    assert purged.message_count == 3  # m2..m4; the two unacked ones stay

    await first.ack()
    await second.nack(requeue=True)  # a failure: again after the retry interval
    again = await asyncio.wait_for(got.get(), 10 * INTERVAL_S * SCALE)
    assert (again.body, again.redelivered) == (b"m1", True)
    await again.ack()
    assert not ch.is_closed and not admin.is_closed
    check = await conn.channel()
    assert (await check.declare_queue(name, passive=True)).declaration_result.message_count == 0


async def test_queue_delete_drops_unacked_deliveries_too(conn: AbstractRobustConnection) -> None:
    """queue.delete is not a purge: the queue goes with its unacknowledged messages, so one
    given back afterwards (its channel closed) is not in a queue declared again by the name.
    delete-ok counts the ready messages only, as RabbitMQ's does (it counted the unacked one)."""
    name = unique("delete")
    ch = await conn.channel()
    queue = await ch.declare_queue(name)
    for i in range(3):
        await ch.default_exchange.publish(aio_pika.Message(b"m%d" % i), routing_key=name)
    taken = await queue.get(timeout=5)  # basic.get, unacknowledged
    assert taken.body == b"m0"
    admin = await conn.channel()
    deleted = await (await admin.declare_queue(name, passive=True)).delete(
        if_unused=False, if_empty=False)
    assert deleted.message_count == 2
    await ch.close()  # m0 unacknowledged: given back, to nowhere
    again = await admin.declare_queue(name)
    assert again.declaration_result.message_count == 0
    assert await again.get(fail=False) is None
