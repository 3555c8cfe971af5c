"""An `expiration` the AMQP front end did not check (stored through another front end): a value
of digits that are not decimal ("²") is no time to live, and harms no consumer or queue."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aio_pika
import pytest

from gateway.client import GatewayClient
from tests.amqp_front import AmqpGateway, amqp_gateway, unique


@pytest.fixture
async def gw(tmp_path: Path) -> AsyncIterator[AmqpGateway]:
    async with amqp_gateway(tmp_path / "data") as gateway:
        yield gateway


async def test_a_foreign_expiration_of_odd_digits_harms_nobody(gw: AmqpGateway) -> None:
    assert gw.app is not None
    odd, delay, dead = unique("odd"), unique("delay"), unique("dead")
    connection = await aio_pika.connect_robust(gw.url)
    try:
        ch = await connection.channel()
        await ch.declare_queue(odd, durable=True, arguments={"x-message-ttl": 60_000})
        await ch.declare_queue(dead, durable=True)
        await ch.declare_queue(delay, durable=True, arguments={
            "x-message-ttl": 50, "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": dead})
        async with GatewayClient(f"127.0.0.1:{gw.app.grpc_port}") as client:
            await client.publish(odd, [b"odd"], properties={"amqp.expiration": "\u00b2"})
        await ch.default_exchange.publish(aio_pika.Message(b"later"), routing_key=delay)
        # The sweeper still passes the delay queue's message on.
        queue = await ch.declare_queue(dead, passive=True)
        deadline = time.monotonic() + 10
        got = None
        while got is None and time.monotonic() < deadline:
            got = await queue.get(fail=False)
            await asyncio.sleep(0.05)
        assert got is not None and got.body == b"later"
        await got.ack()
        # A consumer of the odd queue gets the message (no time to live).
        odd_queue = await ch.declare_queue(odd, passive=True)
        async with odd_queue.iterator() as it:
            message = await asyncio.wait_for(it.__anext__(), 5)
            assert message.body == b"odd"
            await message.ack()
    finally:
        await connection.close()
