"""Any AMQP client may publish into a queue the gateway consumes from RabbitMQ, with any value in
the headers the gateway keeps its counters in: a count int() refuses ('²'), one a delivery cannot
carry (2**32, 2**63-1), a time past year 9999. Such a message is delivered with the counter read
as absent; it never stalls the group's consumption or fails a Receive."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aio_pika
import pytest
from aio_pika.abc import AbstractRobustConnection

from adapters.amqp.backend import RabbitMQBackend
from adapters.amqp.queues import queue_name
from gateway.client import GatewayClient
from gateway.core.properties import COUNT_MAX
from gateway.server.app import running_gateway
from tests.amqp_node import URL, delete_queues, plain_connection, unique

ODD = ["²", "٣", 2**32, 2**63 - 1, "9" * 40, -5, 1e30, "junk"]


@pytest.fixture
async def plain() -> AsyncIterator[AbstractRobustConnection]:
    async with plain_connection() as connection:
        yield connection


async def test_odd_counter_headers_from_a_plain_publisher_are_delivered(
    tmp_path: Path, plain: AbstractRobustConnection
) -> None:
    topic, group = unique("gw.odd"), "g"
    # The policy's clock at a tenth: the test acks one delivery after the other, and a 1-minute
    # push timeout scaled to 60 ms (as it was at 0.001) ran out under a loaded CI.
    async with (
        running_gateway(tmp_path / "data", time_scale=0.1,
                        backend=RabbitMQBackend(URL)) as app,
        GatewayClient(f"127.0.0.1:{app.grpc_port}") as client,
    ):
        try:
            await client.publish(topic, [b"first"])  # the gateway declares the queue
            channel = await plain.channel(publisher_confirms=True)
            for n, value in enumerate(ODD):
                headers = {"x-gateway-attempt": value, "x-gateway-retries": value,
                           "x-gateway-publish-ms": value, "x-gateway-deliver-at-ms": value,
                           "x-delivery-count": value}
                await channel.default_exchange.publish(
                    aio_pika.Message(f"odd-{n}".encode(), message_id=f"odd-{n}", headers=headers),
                    routing_key=queue_name(topic))
            await channel.close()
            seen: dict[bytes, int] = {}
            async with client.consume(topic, group, policy="rocketmq",
                                      options={"max_retries": "1"}) as stream:
                while len(seen) < len(ODD) + 1:
                    message = await stream.next(20)
                    assert message is not None, f"stalled after {sorted(seen)}"
                    seen[message.body] = message.attempt
                    assert (await message.ack()).ok
            assert set(seen) == {b"first", *(f"odd-{n}".encode() for n in range(len(ODD)))}
            assert all(1 <= attempt <= COUNT_MAX + 1 for attempt in seen.values())
            # The group goes on: a message published after them is delivered too.
            await client.publish(topic, [b"after"])
            async with client.consume(topic, group, policy="rocketmq") as stream:
                message = await stream.next(20)
                assert message is not None and message.body == b"after"
                assert (await message.ack()).ok
        finally:
            await delete_queues(plain, topic)
