"""Compressed producers of the official `pulsar-client` (LZ4, ZSTD, SNAPPY, ZLIB), batching on
and off: every body arrives intact, so the front end reads each codec's frame format as the
client writes it (LZ4's raw block, a zstd frame, raw snappy)."""

from __future__ import annotations

import os
from typing import Any

import pulsar
import pytest

from tests.e2e.pulsar_stack import Stack, client_for, receive_all, run, stack_fixture  # noqa: F401  (fixture `stack`)

CODECS = {
    "lz4": pulsar.CompressionType.LZ4,
    "zstd": pulsar.CompressionType.ZSTD,
    "snappy": pulsar.CompressionType.SNAPPY,
    "zlib": pulsar.CompressionType.ZLib,
}


def bodies(count: int) -> list[bytes]:
    """Compressible and incompressible bodies of several sizes."""
    out = []
    for i in range(count):
        text = f"order-{i} " * (1 + 40 * (i % 5))
        out.append(text.encode() + (os.urandom(64 * (i % 3)) if i % 2 else b""))
    return out


@pytest.mark.parametrize("batching", [False, True], ids=["single", "batched"])
@pytest.mark.parametrize("codec", sorted(CODECS))
async def test_compressed_producer_bodies_arrive_intact(
    stack: Stack, codec: str, batching: bool
) -> None:
    client = client_for(stack.url)
    topic = f"compressed-{codec}-{batching}"
    try:
        consumer = await run(client.subscribe, topic, "sub")
        producer = await run(
            client.create_producer,
            topic,
            compression_type=CODECS[codec],
            batching_enabled=batching,
            batching_max_publish_delay_ms=20,
            send_timeout_millis=10_000,
        )
        sent = bodies(40)
        results: list[Any] = []
        for i, body in enumerate(sent):
            producer.send_async(
                body, lambda res, _mid: results.append(res), properties={"i": str(i)},
                partition_key=f"k{i % 4}",
            )
        await run(producer.flush)
        assert results == [pulsar.Result.Ok] * len(sent)
        got = await receive_all(consumer)
        assert [m.data() for m in got] == sent
        assert [m.properties()["i"] for m in got] == [str(i) for i in range(len(sent))]
        assert [m.partition_key() for m in got] == [f"k{i % 4}" for i in range(len(sent))]
        for msg in got:
            await run(consumer.acknowledge, msg)
        # A large, very compressible body too (inflates far beyond its compressed size).
        big = b"A" * (1 << 20)
        await run(producer.send, big)
        (last,) = await receive_all(consumer)
        assert last.data() == big
    finally:
        await run(client.close)
