"""The gateway on a private RabbitMQ node that stops and comes back during the test.

While the broker is down, publishes fail with UNAVAILABLE over gRPC and health says NOT_SERVING;
nothing the gateway confirmed is lost, and it recovers by itself once the broker is back.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from amqp_node import AmqpNode

from adapters.amqp.backend import RabbitMQBackend
from gateway.client import GatewayClient, Message
from gateway.server.app import running_gateway

pytestmark = pytest.mark.slow

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AmqpNode]:
    private = AmqpNode(tmp_path_factory.mktemp("rabbit-gateway"))
    private.start()
    try:
        yield private
    finally:
        private.stop()


async def until(condition: Callable[[], Awaitable[bool]], timeout_s: float) -> bool:
    """Poll an outside condition (broker or health state) until it holds or `timeout_s` passed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not await condition():
        if loop.time() > deadline:
            return False
        await asyncio.sleep(0.1)
    return True


async def test_outage_unavailable_not_serving_then_recovers_without_loss(
    tmp_path: Path, node: AmqpNode
) -> None:
    backend = RabbitMQBackend(node.url, confirm_timeout_s=5)
    async with running_gateway(tmp_path / "data", backend=backend) as app:
        target = f"127.0.0.1:{app.grpc_port}"
        channel = grpc.aio.insecure_channel(target)
        health = health_pb2_grpc.HealthStub(channel)

        async def serving() -> bool:
            reply = await health.Check(health_pb2.HealthCheckRequest(service=""))
            return bool(reply.status == SERVING)

        async def not_serving() -> bool:
            reply = await health.Check(health_pb2.HealthCheckRequest(service=""))
            return bool(reply.status == NOT_SERVING)

        try:
            async with GatewayClient(target) as client:
                await check_outage(client, node, serving, not_serving)
        finally:
            await channel.close()


async def check_outage(
    client: GatewayClient,
    node: AmqpNode,
    serving: Callable[[], Awaitable[bool]],
    not_serving: Callable[[], Awaitable[bool]],
) -> None:
    topic, group = "outage.gateway.orders", "billing"
    assert await serving()
    before: list[str] = []
    for start in range(0, 40, 10):
        before += await client.publish(topic, [f"b{i}".encode() for i in range(start, start + 10)])
    async with client.consume(topic, group, policy="rabbitmq", prefetch=5) as stream:
        leased: list[Message] = []
        for _ in range(5):
            message = await stream.next(10)
            assert message is not None
            leased.append(message)

        await asyncio.to_thread(node.stop)
        assert await until(not_serving, 15)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await client.publish(topic, [b"refused"])
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE

        await asyncio.to_thread(node.start)
        assert await until(serving, 30)
        after = await client.publish(topic, [f"a{i}".encode() for i in range(10)])
        # The client finished the five it held; their acks cannot reach the old channel, so
        # RabbitMQ delivers them again (at least once, never lost).
        for message in leased:
            assert (await message.ack()).ok

        seen: dict[str, Message] = {}
        while len(seen) < len(before) + len(after):
            message = await stream.next(30)
            assert message is not None, f"missing after {len(seen)} distinct messages"
            assert message.body != b"refused"
            seen[message.message_id] = message
            assert (await message.ack()).ok
        assert set(seen) == set(before) | set(after)
        assert all(seen[m.message_id].attempt >= 2 for m in leased)
        assert await stream.next(1.0) is None
