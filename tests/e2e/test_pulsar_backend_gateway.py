"""A gateway running on the Pulsar back end, driven through the gateway API.

The broker is `$PULSAR_SERVICE_URL` when set (a real cluster); otherwise a second gateway on the
embedded store serving the Pulsar binary protocol. Native Pulsar consumers subscribed to the retry
and dead-letter topics before the run check what the gateway left there. Policy waits are
compressed with `time_scale`. The outage test always runs its own gateway broker, which it can
stop and start.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pulsar
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from adapters.pulsar.backend import PulsarBackend
from gateway.client import GatewayClient, Message
from gateway.server.app import running_gateway


@pytest.fixture
async def url(tmp_path: Path) -> AsyncIterator[str]:
    """A Pulsar service URL: the real cluster if configured, else a gateway's Pulsar port."""
    configured = os.environ.get("PULSAR_SERVICE_URL", "")
    if configured:
        yield configured
        return
    async with running_gateway(tmp_path / "broker", pulsar_listen="127.0.0.1:0") as upstream:
        yield f"pulsar://127.0.0.1:{upstream.front_ends['pulsar'].port}"


@pytest.fixture
async def native(url: str) -> AsyncIterator[Any]:
    client = pulsar.Client(url, operation_timeout_seconds=10)
    yield client
    await asyncio.to_thread(client.close)


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def audit(client: Any, topic: str) -> Any:
    """A native Shared subscription from the earliest message, made before anything is sent."""
    return await asyncio.to_thread(
        client.subscribe,
        topic,
        "audit",
        consumer_type=pulsar.ConsumerType.Shared,
        initial_position=pulsar.InitialPosition.Earliest,
    )


async def drain(consumer: Any, quiet_s: float = 1.0, limit_s: float = 15.0) -> list[Any]:
    """Receive and ack until nothing came for `quiet_s` (or `limit_s` passed)."""

    def run() -> list[Any]:
        out: list[Any] = []
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            try:
                message = consumer.receive(timeout_millis=int(quiet_s * 1000))
            except pulsar.Timeout:
                break
            consumer.acknowledge(message)
            out.append(message)
        return out

    return await asyncio.to_thread(run)


async def fail_all(
    client: GatewayClient,
    topic: str,
    group: str,
    policy: str,
    expected: int,
    *,
    options: dict[str, str] | None = None,
    naming: str = "",
    timeout_s: float = 40.0,
) -> list[tuple[Message, float]]:
    """Consume and fail every delivery until `expected` arrived; return them with arrival times."""
    got: list[tuple[Message, float]] = []
    async with client.consume(
        topic, group, policy=policy, options=options or {}, naming=naming
    ) as stream:
        deadline = time.monotonic() + timeout_s
        while len(got) < expected and time.monotonic() < deadline:
            msg = await stream.next(max(0.1, deadline - time.monotonic()))
            if msg is None:
                break
            got.append((msg, time.monotonic()))
            result = await msg.fail()
            assert result.ok, result
        extra = await stream.next(0.5)
        assert extra is None, f"unexpected delivery {extra}"
    return got


@contextlib.asynccontextmanager
async def gateway_on(url: str, data: Path, time_scale: float) -> AsyncIterator[GatewayClient]:
    backend = PulsarBackend(url, send_timeout_ms=2000)
    async with running_gateway(data, time_scale=time_scale, backend=backend) as app:
        assert app.backend is backend
        async with GatewayClient(f"127.0.0.1:{app.grpc_port}") as client:
            yield client


async def test_pulsar_policy_retry_topic_then_dead_letter_topic(
    url: str, native: Any, tmp_path: Path
) -> None:
    topic, sub = name("orders"), name("billing")
    retry_topic, dlq_topic = f"{topic}-{sub}-RETRY", f"{topic}-{sub}-DLQ"
    retry_audit = await audit(native, retry_topic)
    dlq_audit = await audit(native, dlq_topic)
    async with gateway_on(url, tmp_path / "gw", time_scale=0.0002) as client:
        [mid] = await client.publish(topic, [b"poison"])
        got = await fail_all(client, topic, sub, "pulsar", 17)
    assert [m.retries for m, _ in got] == list(range(17))
    assert {m.message_id for m, _ in got} == {mid}
    assert got[0][0].delivery.topic == topic
    assert {m.delivery.topic for m, _ in got[1:]} == {retry_topic}
    assert [m.properties.get("RECONSUMETIMES") for m, _ in got[1:]] == [
        str(n) for n in range(1, 17)
    ]

    copies = await drain(retry_audit)
    assert [m.properties()["RECONSUMETIMES"] for m in copies] == [str(n) for n in range(1, 17)]
    assert {m.properties()["REAL_TOPIC"] for m in copies} == {topic}
    assert {m.properties()["RETRY_TOPIC"] for m in copies} == {retry_topic}
    assert {m.properties()["ORIGIN_MESSAGE_ID"] for m in copies} == {mid}
    assert all(m.data() == b"poison" for m in copies)
    [dead] = await drain(dlq_audit)
    assert dead.data() == b"poison"
    assert dead.properties()["REAL_TOPIC"] == topic
    assert dead.properties()["ORIGIN_MESSAGE_ID"] == mid


async def test_pulsar_2_6_naming(url: str, native: Any, tmp_path: Path) -> None:
    topic, sub = name("orders"), name("audit26")
    retry_audit = await audit(native, f"{sub}-retry")
    dlq_audit = await audit(native, f"{sub}-dlq")
    async with gateway_on(url, tmp_path / "gw", time_scale=0.001) as client:
        await client.publish(topic, [b"poison"])
        got = await fail_all(
            client, topic, sub, "pulsar", 3, options={"max_retries": "2"}, naming="pulsar-2.6"
        )
    assert [m.delivery.topic for m, _ in got] == [topic, f"{sub}-retry", f"{sub}-retry"]
    copies = await drain(retry_audit)
    assert [m.properties()["RECONSUMETIMES"] for m in copies] == ["1", "2"]
    [dead] = await drain(dlq_audit)
    assert dead.data() == b"poison" and dead.properties()["REAL_TOPIC"] == topic


async def test_rocketmq_policy_keeps_its_intervals(url: str, native: Any, tmp_path: Path) -> None:
    topic, group = name("orders"), name("GID")
    scale = 0.01
    retry_topic = f"%RETRY%{group}"
    retry_audit = await audit(native, retry_topic)
    async with gateway_on(url, tmp_path / "gw", time_scale=scale) as client:
        await client.publish(topic, [b"poison"])
        got = await fail_all(client, topic, group, "rocketmq", 4, options={"max_retries": "3"})
    assert [m.retries for m, _ in got] == [0, 1, 2, 3]
    assert [m.delivery.topic for m, _ in got] == [topic] + [retry_topic] * 3
    gaps = [b - a for (_, a), (_, b) in itertools.pairwise(got)]
    for gap, policy_s in zip(gaps, (10, 30, 60), strict=True):
        wait_s = policy_s * scale
        assert wait_s * 0.9 <= gap < wait_s + 1.0, (gaps, policy_s)
    copies = await drain(retry_audit)
    assert len(copies) == 3
    due = [int(m.properties()["gateway-deliver-at"]) for m in copies]
    for copy, at, policy_s in zip(copies, due, (10, 30, 60), strict=True):
        # A copy is published at the failure, due one wait later (on a loaded machine the
        # publish itself may end after that: the due time is what the policy decides).
        assert at <= copy.publish_timestamp() + policy_s * scale * 1000 + 200
    for (earlier, later), policy_s in zip(itertools.pairwise(due), (30, 60), strict=True):
        # Each failure comes after the previous retry fell due: due times lie a wait apart.
        assert later - earlier >= policy_s * scale * 1000 * 0.9, due


async def health(target: str) -> int:
    async with grpc.aio.insecure_channel(target) as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="gateway.v1.Gateway"), timeout=2
        )
        return int(reply.status)


async def health_becomes(target: str, status: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await health(target) == status:
            return True
        await asyncio.sleep(0.1)
    return False


async def test_broker_stop_makes_publish_unavailable_and_restart_recovers(
    tmp_path: Path,
) -> None:
    broker_data = tmp_path / "broker"
    topic, group = name("orders"), name("g")
    serving = health_pb2.HealthCheckResponse.SERVING
    not_serving = health_pb2.HealthCheckResponse.NOT_SERVING
    broker = contextlib.AsyncExitStack()
    upstream = await broker.enter_async_context(
        running_gateway(broker_data, pulsar_listen="127.0.0.1:0")
    )
    port = upstream.front_ends["pulsar"].port
    backend = PulsarBackend(f"pulsar://127.0.0.1:{port}", send_timeout_ms=2000)
    try:
        async with running_gateway(tmp_path / "gw", backend=backend) as app:
            target = f"127.0.0.1:{app.grpc_port}"
            async with GatewayClient(target) as client:
                before = await client.publish(topic, [b"before"])
                assert await health_becomes(target, serving, 5)

                await broker.aclose()
                assert await health_becomes(target, not_serving, 10)
                started = time.monotonic()
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await client.publish(topic, [b"refused"])
                assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
                assert time.monotonic() - started < 5.0

                await broker.enter_async_context(
                    running_gateway(broker_data, pulsar_listen=f"127.0.0.1:{port}")
                )
                assert await health_becomes(target, serving, 30)
                after = await client.publish(topic, [b"after"])
                async with client.consume(topic, group, policy="pulsar") as stream:
                    bodies: dict[str, bytes] = {}
                    for _ in range(2):
                        msg = await stream.next(15)
                        assert msg is not None
                        bodies[msg.message_id] = msg.body
                        assert (await msg.ack()).ok
                assert bodies == {before[0]: b"before", after[0]: b"after"}
    finally:
        await broker.aclose()
