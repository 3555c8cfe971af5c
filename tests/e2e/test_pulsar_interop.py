"""pulsar-client and the gateway's own gRPC API on the same topics, with the `pulsar` dialect."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pulsar
import pytest

from gateway.client import GatewayClient
from gateway.server.app import GatewayApp, running_gateway

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[GatewayApp]:
    async with running_gateway(tmp_path / "data", pulsar_listen="127.0.0.1:0",
                               time_scale=0.001) as running:
        yield running


async def test_pulsar_client_to_gateway_api_with_retry_letter_topic(app: GatewayApp) -> None:
    short = f"in-{uuid.uuid4().hex[:8]}"
    topic = f"persistent://public/default/{short}"
    client = pulsar.Client(f"pulsar://127.0.0.1:{app.front_ends['pulsar'].port}", logger=QUIET)
    try:
        producer = await asyncio.to_thread(client.create_producer, topic, batching_enabled=False)
        await asyncio.to_thread(producer.send, b"from-pulsar", properties={"k": "v"})
        async with GatewayClient(f"127.0.0.1:{app.grpc_port}") as gw, \
                gw.consume(short, "sub", policy="pulsar", options={"max_retries": "2"}) as stream:
            got = []
            for _ in range(3):
                msg = await stream.next(10)
                assert msg is not None
                got.append(msg)
                assert (await msg.fail()).ok
            assert await stream.next(0.5) is None
        assert [m.body for m in got] == [b"from-pulsar"] * 3
        assert got[0].properties["k"] == "v"
        # The front end names Pulsar's default namespace by the short name, as the engine does.
        assert [m.delivery.topic for m in got[1:]] == [f"{short}-sub-RETRY"] * 2
        assert [m.properties.get("RECONSUMETIMES") for m in got] == [None, "1", "2"]
        assert got[1].properties["REAL_TOPIC"] == short
        # The dead letter is readable by a plain Pulsar consumer.
        dlq = await asyncio.to_thread(client.subscribe, f"{topic}-sub-DLQ", "sub",
                                      consumer_type=pulsar.ConsumerType.Shared,
                                      initial_position=pulsar.InitialPosition.Earliest)
        dead = await asyncio.to_thread(dlq.receive, 10_000)
        assert dead.data() == b"from-pulsar"
        assert dead.properties()["REAL_TOPIC"] == short
        await asyncio.to_thread(dlq.acknowledge, dead)
    finally:
        await asyncio.to_thread(client.close)


async def test_gateway_api_to_pulsar_client(app: GatewayApp) -> None:
    topic = f"out-{uuid.uuid4().hex[:8]}"
    async with GatewayClient(f"127.0.0.1:{app.grpc_port}") as gw:
        ids = await gw.publish(topic, [b"from-grpc"], properties={"origin": "api"}, key="k1")
    assert len(ids) == 1
    client = pulsar.Client(f"pulsar://127.0.0.1:{app.front_ends['pulsar'].port}", logger=QUIET)
    try:
        consumer = await asyncio.to_thread(client.subscribe, topic, "native",
                                           consumer_type=pulsar.ConsumerType.Shared,
                                           initial_position=pulsar.InitialPosition.Earliest)
        msg = await asyncio.to_thread(consumer.receive, 10_000)
        assert msg.data() == b"from-grpc"
        assert msg.properties()["origin"] == "api"
        assert msg.partition_key() == "k1"
        await asyncio.to_thread(consumer.acknowledge, msg)
    finally:
        await asyncio.to_thread(client.close)
