"""Producer names with the official `pulsar-client`: deduplication per (topic, producer name),
and a name already in use on a topic refused with ProducerBusy, so every receipt means stored."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypeVar

import pulsar
import pytest

from adapters.pulsar.frontend import PulsarFrontEnd
from gateway.engine.clock import SystemClock
from gateway.server.app import running_gateway

T = TypeVar("T")
QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


async def run(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    return await asyncio.to_thread(fn, *args, **kwargs)


@pytest.fixture
async def url(tmp_path: Path) -> AsyncIterator[str]:
    async with running_gateway(
        data_dir=tmp_path / "data", listen="127.0.0.1:0", clock=SystemClock()
    ) as app:
        front = PulsarFrontEnd(app.engine, "127.0.0.1", 0)
        await front.start()
        yield f"pulsar://127.0.0.1:{front.port}"
        await front.stop()


def client_for(url: str) -> pulsar.Client:
    return pulsar.Client(url, operation_timeout_seconds=5, logger=QUIET)


async def stored(client: pulsar.Client, topic: str) -> list[bytes]:
    """Every message of `topic`, read by a fresh subscription from the earliest."""
    consumer = await run(
        client.subscribe, topic, "audit", initial_position=pulsar.InitialPosition.Earliest
    )
    out: list[bytes] = []
    while True:
        try:
            msg = await run(consumer.receive, 700)
        except pulsar.Timeout:
            break
        out.append(msg.data())
        await run(consumer.acknowledge, msg)
    await run(consumer.close)
    return out


async def test_one_producer_name_on_two_topics_stores_both(url: str) -> None:
    client = client_for(url)
    try:
        for topic in ("dupA", "dupB"):
            producer = await run(
                client.create_producer, topic, producer_name="shared-name",
                batching_enabled=False,
            )
            assert producer.last_sequence_id() == -1  # a sequence of its own on each topic
            for i in range(5):
                await run(producer.send, f"{topic}-{i}".encode())
            await run(producer.close)
        assert sorted(await stored(client, "dupA")) == [f"dupA-{i}".encode() for i in range(5)]
        assert sorted(await stored(client, "dupB")) == [f"dupB-{i}".encode() for i in range(5)]
    finally:
        await run(client.close)


async def test_two_live_producers_with_one_name_on_two_topics(url: str) -> None:
    client = client_for(url)
    try:
        a = await run(client.create_producer, "dupA", producer_name="twin", batching_enabled=False)
        b = await run(client.create_producer, "dupB", producer_name="twin", batching_enabled=False)
        for i in range(5):
            await run(a.send, f"a{i}".encode())
            await run(b.send, f"b{i}".encode())
        assert sorted(await stored(client, "dupA")) == [f"a{i}".encode() for i in range(5)]
        assert sorted(await stored(client, "dupB")) == [f"b{i}".encode() for i in range(5)]
    finally:
        await run(client.close)


async def test_a_name_in_use_on_a_topic_is_refused_with_producer_busy(url: str) -> None:
    first, second = client_for(url), client_for(url)
    try:
        owner = await run(
            first.create_producer, "dupC", producer_name="taken", batching_enabled=False
        )
        with pytest.raises(pulsar.ProducerBusy):
            await run(second.create_producer, "dupC", producer_name="taken")
        for i in range(5):
            await run(owner.send, f"c{i}".encode())
        await run(owner.close)
        # Once the owner has gone, the name is free again and continues its sequence.
        heir = await run(
            second.create_producer, "dupC", producer_name="taken", batching_enabled=False
        )
        assert heir.last_sequence_id() == 4
        await run(heir.send, b"c5")
        assert sorted(await stored(second, "dupC")) == [f"c{i}".encode() for i in range(6)]
    finally:
        await run(first.close)
        await run(second.close)


@pytest.mark.parametrize("batching", [False, True], ids=["single", "batched"])
async def test_zlib_compressed_sends_are_stored(url: str, batching: bool) -> None:
    client = client_for(url)
    try:
        producer = await run(
            client.create_producer,
            f"zipped-{batching}",
            compression_type=pulsar.CompressionType.ZLib,
            batching_enabled=batching,
            batching_max_publish_delay_ms=5,
        )
        bodies = [f"zipped {i} ".encode() * 50 for i in range(20)]
        results: list[Any] = []
        for body in bodies:
            producer.send_async(body, lambda res, _mid: results.append(res))
        await run(producer.flush)
        assert results == [pulsar.Result.Ok] * 20
        assert sorted(await stored(client, f"zipped-{batching}")) == sorted(bodies)
    finally:
        await run(client.close)
