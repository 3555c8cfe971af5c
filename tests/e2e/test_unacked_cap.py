"""A push consumer holds at most `max_unacked` unsettled deliveries, whatever credit it grants
(issue 16: memory held for unacked deliveries is bounded); settling makes room again."""

from __future__ import annotations

import asyncio
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
                assert len(app.engine.unsettled("capped", "g")) == 3
                first = held[0]
                assert first is not None
                await first.ack()
                fourth = await stream.next(5.0)
                assert fourth is not None and fourth.body == b"m3"
                assert len(app.engine.unsettled("capped", "g")) == 3


def test_the_cap_is_range_checked() -> None:
    with pytest.raises(InvalidArgument, match="max_unacked"):
        from gateway.engine.config import EngineConfig

        EngineConfig(max_unacked=0)
    assert ServeConfig(max_unacked=7).max_unacked == 7


async def test_calls_beyond_max_rpcs_are_refused_and_others_go_on(tmp_path: Path) -> None:
    """The gRPC listener serves at most `max_rpcs` calls at once (streams included); one more
    gets RESOURCE_EXHAUSTED, and once a stream ends, calls are served again."""
    import grpc

    async with running_gateway(tmp_path / "data", max_rpcs=2) as app:
        target = f"127.0.0.1:{app.grpc_port}"
        async with GatewayClient(target) as client:
            async with (
                client.consume("busy", "g", policy="rocketmq") as first,
                client.consume("busy", "h", policy="rocketmq") as second,
            ):
                assert await first.next(0.1) is None and await second.next(0.1) is None
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await client.publish("busy", [b"x"])
                assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            # The server frees a stream's slot once it has seen the stream end.
            for _ in range(100):
                try:
                    await client.publish("busy", [b"after"])
                    break
                except grpc.aio.AioRpcError as exc:
                    assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                    await asyncio.sleep(0.05)
            else:
                raise AssertionError("calls were not served again after the streams ended")


def test_max_rpcs_is_range_checked() -> None:
    with pytest.raises(InvalidArgument, match="max_rpcs"):
        ServeConfig(max_rpcs=0)
