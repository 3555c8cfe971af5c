"""Compact fails on a consume stream (`SettleBatch.fails`): failures with the policy's own wait
by receipt alone, answered like acks (a count and the failures), end to end over gRPC."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from gateway.client import GatewayClient
from gateway.server.app import running_gateway
from gateway.v1 import gateway_pb2


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[GatewayClient]:
    """100x faster than real time: RocketMQ's first retry (10 s) comes after 0.1 s."""
    async with (
        running_gateway(tmp_path / "data", time_scale=0.01) as running,
        GatewayClient(f"127.0.0.1:{running.grpc_port}") as c,
    ):
        yield c


async def test_fail_later_goes_compact_and_the_retry_comes(client: GatewayClient) -> None:
    topic, group = name("t"), name("g")
    ids = await client.publish(topic, [b"a", b"b", b"c"])
    async with client.consume(topic, group, policy="rocketmq", prefetch=10) as stream:
        first = [await stream.next(10.0) for _ in range(3)]
        assert all(m is not None and m.attempt == 1 for m in first)
        futures = [m.fail_later() for m in first[:2] if m is not None]
        assert first[2] is not None
        first[2].ack_quietly()
        results = await asyncio.wait_for(asyncio.gather(*futures), 10)
        assert all(r.ok for r in results)
        again = [await stream.next(10.0) for _ in range(2)]
        assert sorted((m.message_id, m.attempt, m.retries) for m in again if m is not None) == \
            sorted([(ids[0], 2, 1), (ids[1], 2, 1)])
        for m in again:
            assert m is not None
            m.ack_quietly()
        await asyncio.wait_for(stream.drain(), 10)
        assert stream.failures == []
    view = await client.describe(topic, group)
    assert (view.inflight, view.ready, view.waiting_retry) == (0, 0, 0)


async def test_compact_fails_are_answered_by_count_and_failures(
    client: GatewayClient,
) -> None:
    """On the wire: applied fails are counted in `fails_applied`; a stale and an empty receipt
    each get a result after the acks' ones, in order."""
    topic, group = name("t"), name("g")
    await client.publish(topic, [b"x", b"y"])
    requests: asyncio.Queue[gateway_pb2.ConsumeRequest | None] = asyncio.Queue()

    async def feed() -> AsyncIterator[gateway_pb2.ConsumeRequest]:
        while (item := await requests.get()) is not None:
            yield item

    requests.put_nowait(gateway_pb2.ConsumeRequest(subscribe=gateway_pb2.Subscribe(
        topic=topic, group=group, policy="rocketmq", prefetch=2)))
    call = client.stub.Consume(feed())
    try:
        got: list[gateway_pb2.Delivery] = []
        while len(got) < 2:
            response = await asyncio.wait_for(call.read(), 10)
            assert response is not grpc.aio.EOF
            if response.WhichOneof("kind") == "deliveries":
                got.extend(response.deliveries.deliveries)
        x, y = got
        requests.put_nowait(gateway_pb2.ConsumeRequest(settle=gateway_pb2.SettleBatch(
            acks=[y.receipt, "stale-ack"], fails=[x.receipt, "stale-fail", ""])))
        while True:
            response = await asyncio.wait_for(call.read(), 10)
            assert response is not grpc.aio.EOF
            if response.WhichOneof("kind") == "results":
                break
        answer = response.results
        assert (answer.acked, answer.fails_applied) == (1, 1)
        assert [(r.receipt, r.error_code) for r in answer.results] == [
            ("stale-ack", "FAILED_PRECONDITION"), ("stale-fail", "FAILED_PRECONDITION"),
            ("", "INVALID_ARGUMENT")]
        assert "fails[2]" in answer.results[2].error
    finally:
        requests.put_nowait(None)
        call.cancel()
    view = await client.describe(topic, group)
    assert view.inflight == 0
