"""Topic names through the Pulsar front end, with the unmodified pulsar-client: the 255-byte
limit counts the name the gateway keeps (what a gRPC client names the topic by), not
`persistent://public/default/` before it. Before, names of 228 bytes or more were refused, so a
topic a gRPC client published to could not be consumed by a Pulsar client; and DEL or a C1
control character passed as printable."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pulsar
import pytest

from gateway.client import GatewayClient
from gateway.engine.clock import SystemClock
from gateway.server.app import running_gateway

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


def _round_trip(port: int, topic: str) -> bytes:
    client = pulsar.Client(f"pulsar://127.0.0.1:{port}", logger=QUIET,
                           operation_timeout_seconds=5)
    try:
        consumer = client.subscribe(topic, "names",
                                    initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic)
        producer.send(b"by pulsar")
        got = consumer.receive(5000)
        consumer.acknowledge(got)
        data: bytes = got.data()
        return data
    finally:
        client.close()


def _refused(port: int, topic: str) -> str:
    client = pulsar.Client(f"pulsar://127.0.0.1:{port}", logger=QUIET,
                           operation_timeout_seconds=5)
    try:
        with pytest.raises(Exception) as refused:
            client.create_producer(topic)
        return type(refused.value).__name__
    finally:
        client.close()


async def test_a_topic_name_counts_its_255_bytes_without_the_pulsar_prefix(
    tmp_path: Path,
) -> None:
    async with running_gateway(tmp_path / "data", clock=SystemClock(),
                               pulsar_listen="127.0.0.1:0") as app:
        port = app.front_ends["pulsar"].port
        longest = "t" * 255
        async with GatewayClient(f"127.0.0.1:{app.grpc_port}") as grpc_client:
            await grpc_client.publish(longest, [b"by grpc"])
        assert await asyncio.to_thread(_round_trip, port, longest) == b"by grpc"
        full = f"persistent://public/default/{'u' * 255}"
        assert await asyncio.to_thread(_round_trip, port, full) == b"by pulsar"
        for bad in ("v" * 256, f"persistent://public/default/{'v' * 256}", "del\x7fete",
                    "c1\x85name"):
            assert await asyncio.to_thread(_refused, port, bad) in (
                "InvalidTopicName", "NotAllowedError", "InvalidConfiguration"), bad
