"""A push consumer holds at most `max_unacked` unsettled deliveries, whatever credit it grants
(issue 16: memory held for unacked deliveries is bounded); settling makes room again."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.client import GatewayClient
from gateway.errors import InvalidArgument
from gateway.server.app import running_gateway
from gateway.server.config import ServeConfig


async def test_credit_beyond_the_cap_waits_until_the_consumer_settles(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "data", max_unacked=3) as app:
        target = f"127.0.0.1:{app.grpc_port}"
        async with GatewayClient(target) as client:
            await client.publish("capped", [f"m{i}".encode() for i in range(6)])
            async with client.consume("capped", "g", policy="rocketmq", prefetch=100) as stream:
                held = [await stream.next(5.0) for _ in range(3)]
                assert all(m is not None for m in held)
                assert await stream.next(0.3) is None
                (consumer,) = app.engine.subscriptions[("capped", "g")].consumers
                assert len(consumer.receipts) == 3
                first = held[0]
                assert first is not None
                await first.ack()
                fourth = await stream.next(5.0)
                assert fourth is not None and fourth.body == b"m3"
                assert len(consumer.receipts) == 3


def test_the_cap_is_range_checked() -> None:
    with pytest.raises(InvalidArgument, match="max_unacked"):
        from gateway.engine.config import EngineConfig

        EngineConfig(max_unacked=0)
    assert ServeConfig(max_unacked=7).max_unacked == 7
