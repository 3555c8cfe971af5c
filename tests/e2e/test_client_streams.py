"""A consume loop of the Python client when its gateway process dies: it raises StreamFailed
instead of ending silently; with `reconnect=` it resubscribes once the gateway is back and gets
the remaining messages (those in flight at the kill come again)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from client_gateway import GatewayProcess

from gateway.client import TRANSIENT, GatewayClient, Reconnect, StreamFailed

WAIT_S = 60.0
FAST = Reconnect(initial_backoff_s=0.05, max_backoff_s=0.5)


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[GatewayProcess]:
    # RocketMQ push deliveries time out after 15 min of policy time: 0.9 s here.
    process = GatewayProcess(tmp_path / "data", time_scale=0.001).start()
    try:
        yield process
    finally:
        process.close()


def _names() -> tuple[str, str]:
    suffix = uuid.uuid4().hex[:8]
    return f"loop-{suffix}", f"g-{suffix}"


async def test_a_consume_loop_whose_gateway_is_killed_raises(gateway: GatewayProcess) -> None:
    topic, group = _names()
    async with GatewayClient(gateway.target) as client:
        await client.publish(topic, [str(i).encode() for i in range(5)])
        held = []

        async def loop() -> None:
            async with client.consume(topic, group, policy="rocketmq", prefetch=5) as stream:
                async for msg in stream:
                    held.append(msg)
                    if len(held) == 2:
                        gateway.kill()

        with pytest.raises(StreamFailed) as failed:
            await asyncio.wait_for(loop(), WAIT_S)
    assert failed.value.code in TRANSIENT - {grpc.StatusCode.OK}, failed.value
    assert str(failed.value).startswith("consume stream ended: ")
    # The held deliveries' receipts died with the stream: answered at once, not applied.
    result = await asyncio.wait_for(held[0].ack(), 5)
    assert (result.ok, result.error_code) == (False, "UNAVAILABLE")


async def test_a_loop_raises_again_if_iterated_after_the_failure(gateway: GatewayProcess) -> None:
    topic, group = _names()
    async with GatewayClient(gateway.target) as client, \
            client.consume(topic, group, policy="rocketmq") as stream:
        gateway.kill()
        for _ in range(2):
            with pytest.raises(StreamFailed):
                await asyncio.wait_for(stream.next(WAIT_S), WAIT_S)


async def test_a_drained_gateway_ends_the_loop_with_a_typed_error(
    gateway: GatewayProcess,
) -> None:
    topic, group = _names()
    async with GatewayClient(gateway.target) as client, \
            client.consume(topic, group, policy="rocketmq") as stream:
        stopping = asyncio.ensure_future(asyncio.to_thread(gateway.stop))
        with pytest.raises(StreamFailed) as failed:
            await asyncio.wait_for(stream.next(WAIT_S), WAIT_S)
        assert await stopping == 0
    assert failed.value.code in TRANSIENT


async def test_reconnect_resumes_after_the_gateway_restarts(gateway: GatewayProcess) -> None:
    topic, group = _names()
    total = 40
    acked: set[str] = set()
    deliveries: dict[str, int] = {}
    stale = []
    async with GatewayClient(gateway.target) as client:
        published = set(await client.publish(topic, [f"m{i}".encode() for i in range(total)]))
        restart: asyncio.Future[GatewayProcess] | None = None
        async with client.consume(topic, group, policy="rocketmq", prefetch=4,
                                  reconnect=FAST) as stream:
            deadline = time.monotonic() + WAIT_S
            while acked != published:
                assert time.monotonic() < deadline, f"{len(published - acked)} never came"
                msg = await stream.next(1.0)
                if msg is None:
                    continue
                deliveries[msg.message_id] = deliveries.get(msg.message_id, 0) + 1
                if len(acked) == 10 and restart is None:
                    # This one and those behind it are in flight when the gateway dies.
                    stale.append(msg)
                    gateway.kill()
                    restart = asyncio.ensure_future(asyncio.to_thread(gateway.start))
                    continue
                async with msg.process():
                    pass
                if msg.result is not None and msg.result.ok:
                    acked.add(msg.message_id)
            assert stream.resubscribed >= 1
            assert stream.generation == 1 + stream.resubscribed
        assert restart is not None
        await restart
    # In flight at the kill, so delivered again by the restarted gateway.
    assert deliveries[stale[0].message_id] >= 2
    assert stale[0].message_id in acked
    result = await asyncio.wait_for(stale[0].ack(), 5)
    assert (result.ok, result.error_code) == (False, "UNAVAILABLE")
    assert "resubscribed" in result.error or "ended" in result.error


async def test_reconnect_gives_up_after_max_attempts(gateway: GatewayProcess) -> None:
    topic, group = _names()
    policy = Reconnect(initial_backoff_s=0.05, max_backoff_s=0.1, max_attempts=3)
    async with GatewayClient(gateway.target) as client, \
            client.consume(topic, group, policy="rocketmq", reconnect=policy) as stream:
        gateway.kill()  # and never restarted
        started = time.monotonic()
        with pytest.raises(StreamFailed) as failed:
            await asyncio.wait_for(stream.next(WAIT_S), WAIT_S)
        assert failed.value.code in TRANSIENT
        assert stream.resubscribed == 0
        assert time.monotonic() - started < WAIT_S / 2
        with pytest.raises(StreamFailed):  # it stays failed
            await stream.next(1)


async def test_reconnect_waits_for_a_gateway_not_up_yet(tmp_path: Path) -> None:
    """With `reconnect`, a subscription made while the gateway is down waits for it."""
    gateway = GatewayProcess(tmp_path / "data", time_scale=0.001).start()
    gateway.kill()
    topic, group = _names()
    try:
        async with GatewayClient(gateway.target) as client:
            starting = asyncio.ensure_future(asyncio.to_thread(gateway.start))
            async with client.consume(topic, group, policy="rocketmq",
                                      reconnect=FAST) as stream:
                await starting
                await client.publish(topic, [b"late"])
                msg = await stream.next(WAIT_S)
                assert msg is not None and msg.body == b"late"
    finally:
        gateway.close()
