"""A gateway whose message limit is above Pulsar's 5 MiB default serves pulsar-client up to its
own limit (it used to refuse to start with `--pulsar-listen`)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pulsar

from gateway.server.app import running_gateway

LIMIT = 8 << 20


def _round_trip(url: str, body: bytes) -> bytes:
    client = pulsar.Client(url, operation_timeout_seconds=10)
    try:
        consumer = client.subscribe("big", "g", consumer_type=pulsar.ConsumerType.Shared,
                                    initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer("big", batching_enabled=False)
        producer.send(body)
        msg = consumer.receive(timeout_millis=10_000)
        consumer.acknowledge(msg)
        data: bytes = msg.data()
        return data
    finally:
        client.close()


async def test_a_message_above_five_mib_goes_through(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "data", pulsar_listen="127.0.0.1:0",
                               max_message_bytes=LIMIT) as app:
        port = app.front_ends["pulsar"].port
        body = bytes(range(256)) * (6 * 4096)  # 6 MiB
        got = await asyncio.to_thread(_round_trip, f"pulsar://127.0.0.1:{port}", body)
        assert got == body
