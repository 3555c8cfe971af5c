"""Group handover between an AMQP client (aio-pika, document 001's retries) and the gateway's
gRPC API (RocketMQ's back-off), and back, on one gateway: waiting retries keep their schedule
wherever they wait, the count carries over in each client's terms, and nothing comes twice.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aio_pika
import pytest
from aio_pika.abc import AbstractIncomingMessage

from adapters.amqp.backend import RabbitMQBackend
from gateway.client import GatewayClient
from gateway.engine.clock import SystemClock
from tests.amqp_front import AmqpGateway, amqp_gateway, unique

pytestmark = pytest.mark.slow

SCALE = 0.1
"""Policy time runs 10 times faster: the queue's 10 s interval takes 1 s."""
INTERVAL_S = 10
WAIT_S = 30.0
RABBITMQ_URL = os.environ.get("GATEWAY_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")


@pytest.fixture(params=["embedded", "rabbitmq"])
async def gw(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[AmqpGateway]:
    """The same handover on the embedded store and on a real RabbitMQ behind the gateway
    (retry waits held by the broker's delay queues)."""
    settings: dict[str, object] = {}
    if request.param == "rabbitmq":
        settings["backend"] = RabbitMQBackend(RABBITMQ_URL, clock=SystemClock())
    async with amqp_gateway(tmp_path / "data", time_scale=SCALE, **settings) as gateway:
        yield gateway


async def _deliveries(queue: aio_pika.abc.AbstractQueue) -> asyncio.Queue[
        tuple[float, AbstractIncomingMessage]]:
    got: asyncio.Queue[tuple[float, AbstractIncomingMessage]] = asyncio.Queue()

    async def on_message(message: AbstractIncomingMessage) -> None:
        await got.put((time.monotonic(), message))

    await queue.consume(on_message)
    return got


async def test_amqp_to_grpc_and_back(gw: AmqpGateway) -> None:
    assert gw.app is not None
    name = unique("work")
    # An AMQP consumer of the queue (group = the queue's name) fails a message twice, then goes.
    connection = await aio_pika.connect_robust(gw.url)
    channel = await connection.channel()
    queue = await channel.declare_queue(name, durable=True,
                                        arguments={"x-retry-interval": INTERVAL_S})
    await channel.default_exchange.publish(aio_pika.Message(b"first"), routing_key=name)
    got = await _deliveries(queue)
    _, one = await asyncio.wait_for(got.get(), WAIT_S)
    await one.nack(requeue=True)
    _, two = await asyncio.wait_for(got.get(), WAIT_S)
    assert (two.body, two.redelivered, two.headers.get("x-delivery-count")) == (b"first", True, 1)
    await two.nack(requeue=True)
    failed_at = time.monotonic()
    await connection.close()

    async with GatewayClient(f"127.0.0.1:{gw.app.grpc_port}") as client:
        await client.publish(name, [b"second"])
        async with client.consume(name, name, policy="rocketmq") as stream:
            second = await stream.next(WAIT_S)
            assert second is not None and (second.body, second.attempt) == (b"second", 1)
            assert (await second.ack()).ok
            third = await stream.next(WAIT_S)
            assert third is not None and third.body == b"first"
            # The retry the queue scheduled (10 s after the second failure) and the count.
            assert time.monotonic() - failed_at >= 0.8 * INTERVAL_S * SCALE
            assert (third.attempt, third.retries) == (3, 2)
            # A new failure follows RocketMQ: retry 3 waits the table's third step, 1 min.
            assert (await third.fail()).ok
            retried_at = time.monotonic()

    # The queue's AMQP consumers come back and get it from RocketMQ's retry destination.
    connection = await aio_pika.connect_robust(gw.url)
    try:
        channel = await connection.channel()
        queue = await channel.declare_queue(name, passive=True)
        got = await _deliveries(queue)
        at, four = await asyncio.wait_for(got.get(), WAIT_S)
        assert four.body == b"first"
        assert at - retried_at >= 0.8 * 60 * SCALE
        assert (four.redelivered, four.headers.get("x-delivery-count")) == (True, 3)
        await four.ack()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(got.get(), 3.0)
    finally:
        await connection.close()
    view = await gw.app.engine.admin.describe(name, name)
    assert (view.ready, view.delayed, view.inflight, view.waiting_retry) == (0, 0, 0, 0)
