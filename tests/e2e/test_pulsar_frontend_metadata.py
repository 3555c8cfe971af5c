"""Message metadata a Pulsar producer sets and a consumer reads back (third attack round).

The ordering key (`send(..., ordering_key=)`) and the flag saying a partition key is the base64
of a binary key (Java's `keyBytes`) were dropped on the way: consumers read no ordering key,
and a binary key as its base64 text. User properties named `x-pulsar-*` were dropped without a
word (the front end keeps its own metadata under that prefix); such a send is refused now, as
`x-gateway-*` ones are."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

import tests.pulsar_raw as raw
from adapters.pulsar.frontend import PulsarFrontEnd
from adapters.pulsar.wire import wire_pb2 as pb
from gateway.engine.engine import Engine
from tests.e2e.test_pulsar_frontend import QUIET
from tests.e2e.test_pulsar_frontend_attacks_consumers import SHARED, subscribed
from tests.pulsar_raw import Cmd, RawClient


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[tuple[PulsarFrontEnd, Engine]]:
    async with raw.front_end(tmp_path) as made:
        yield made


def round_trip(url: str, batching: bool) -> list[tuple[bytes, str, str]]:
    client = pulsar.Client(url, operation_timeout_seconds=5, logger=QUIET)
    try:
        consumer = client.subscribe("keys", "s", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer("keys", batching_enabled=batching,
                                          batching_max_publish_delay_ms=10)
        producer.send_async(b"a", None, ordering_key="order-1")
        producer.send_async(b"b", None, ordering_key="order-2", partition_key="pk")
        producer.send_async(b"c", None, partition_key="only-pk")
        producer.flush()
        out = []
        for _ in range(3):
            msg = consumer.receive(5000)
            out.append((msg.data(), msg.ordering_key(), msg.partition_key()))
        return out
    finally:
        client.close()


@pytest.mark.parametrize("batching", [False, True], ids=["single", "batched"])
async def test_the_ordering_key_reaches_the_consumer(
    stack: tuple[PulsarFrontEnd, Engine], batching: bool,
) -> None:
    front, _ = stack
    got = await asyncio.to_thread(round_trip, f"pulsar://127.0.0.1:{front.port}", batching)
    assert sorted(got) == [(b"a", "order-1", ""), (b"b", "order-2", "pk"), (b"c", "", "only-pk")]


def single(payload: bytes, **fields: Any) -> bytes:
    meta = pb.SingleMessageMetadata(payload_size=len(payload), **fields).SerializeToString()
    return struct.pack(">I", len(meta)) + meta + payload


async def test_a_binary_key_stays_marked_as_base64(stack: tuple[PulsarFrontEnd, Engine]) -> None:
    front, _ = stack
    consumer = await subscribed(front.port, 1, SHARED)
    producer = await RawClient.open(front.port)
    producer.send(raw.producer(1, 1, "p"))
    await producer.expect(Cmd.PRODUCER_SUCCESS)
    meta = raw.meta("p", 0)
    meta.partition_key, meta.partition_key_b64_encoded = "AAEC/w==", True
    producer.send(raw.send(1, 0), meta, b"single")
    meta = raw.meta("p", 1)
    meta.num_messages_in_batch = 2
    batch = (single(b"one", partition_key="AAE=", partition_key_b64_encoded=True)
             + single(b"two", partition_key="text"))
    producer.send(raw.send(1, 1), meta, batch)
    for _ in range(2):
        await producer.expect(Cmd.SEND_RECEIPT)
    consumer.send(raw.flow(1, 10))
    got = {}
    for _ in range(3):
        frame = await consumer.expect(Cmd.MESSAGE)
        assert frame.metadata is not None
        got[frame.payload] = (frame.metadata.partition_key,
                              frame.metadata.partition_key_b64_encoded)
    assert got == {b"single": ("AAEC/w==", True), b"one": ("AAE=", True),
                   b"two": ("text", False)}
    await producer.close()
    await consumer.close()


def reserved_property(url: str) -> str:
    client = pulsar.Client(url, operation_timeout_seconds=5, logger=QUIET)
    try:
        producer = client.create_producer("keys", batching_enabled=False)
        try:
            producer.send(b"x", properties={"x-pulsar-mine": "v"})
            outcome = "sent"
        except pulsar.PulsarException as exc:
            outcome = type(exc).__name__
        producer.send(b"y", properties={"mine": "v"})  # the producer goes on
        return outcome
    finally:
        client.close()


async def test_a_property_of_the_reserved_prefix_is_refused(
    stack: tuple[PulsarFrontEnd, Engine],
) -> None:
    front, _ = stack
    # pulsar-client (C++) fails a single send only on ChecksumError (`replies.send_failure`).
    assert await asyncio.to_thread(
        reserved_property, f"pulsar://127.0.0.1:{front.port}") == "ChecksumError"
    client = await RawClient.open(front.port)
    client.send(raw.producer(1, 1, "p"))
    await client.expect(Cmd.PRODUCER_SUCCESS)
    meta = raw.meta("p", 0)
    meta.properties.add(key="x-pulsar-producer", value="someone-else")
    client.send(raw.send(1, 0), meta, b"x")
    error = (await client.expect(Cmd.SEND_ERROR)).command.send_error
    assert error.error == pb.NotAllowedError
    assert "messages[0].properties" in error.message and "x-pulsar-producer" in error.message
    await client.close()


def read_nulls(url: str) -> list[tuple[bytes, bool]]:
    client = pulsar.Client(url, operation_timeout_seconds=5, logger=QUIET)
    try:
        consumer = client.subscribe("nulls", "s",
                                    initial_position=pulsar.InitialPosition.Earliest)
        out = []
        for _ in range(4):
            msg = consumer.receive(5000)
            out.append((msg.data(), msg.has_null_value()))
        return out
    finally:
        client.close()


async def test_a_null_value_stays_null(stack: tuple[PulsarFrontEnd, Engine]) -> None:
    """A tombstone (null_value) arrived as an empty value, a null key as an empty one."""
    front, _ = stack
    producer = await RawClient.open(front.port)
    cmd = raw.producer(1, 1, "p")
    cmd.producer.topic = "nulls"
    producer.send(cmd)
    await producer.expect(Cmd.PRODUCER_SUCCESS)
    meta = raw.meta("p", 0)
    meta.null_value = meta.null_partition_key = True
    producer.send(raw.send(1, 0), meta, b"")
    producer.send(raw.send(1, 1), raw.meta("p", 1), b"")
    meta = raw.meta("p", 2)
    meta.num_messages_in_batch = 2
    producer.send(raw.send(1, 2), meta, single(b"", null_value=True) + single(b""))
    for _ in range(3):
        await producer.expect(Cmd.SEND_RECEIPT)
    await producer.close()
    got = await asyncio.to_thread(read_nulls, f"pulsar://127.0.0.1:{front.port}")
    assert got == [(b"", True), (b"", False), (b"", True), (b"", False)]
