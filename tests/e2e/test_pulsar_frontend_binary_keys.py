"""A binary partition key (`partition_key_b64_encoded`: the key travels as its base64 text, as
Java's `keyBytes` sends it) routes Key_Shared consumers by its bytes, as the broker's
`Commands.peekStickyKey` does: a binary key and the text key of the same bytes go to one
consumer, in order. They were routed by the base64 text, so the two forms of one key landed on
different consumers. The consumer still gets the key exactly as it was sent, flag included.
A key flagged as base64 that is not base64 is refused, naming the field (the broker would fail to
route it)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import tests.pulsar_raw as raw
from adapters.pulsar.frontend import PulsarFrontEnd
from adapters.pulsar.wire import wire_pb2 as pb
from gateway.engine.engine import Engine
from tests.pulsar_raw import Cmd, RawClient

KEYS = [f"key-{k}" for k in range(16)]
ROUNDS = 4
"""Messages per key, alternately with the text key (even rounds) and the binary key (odd)."""
ODD = [bytes([0xFF, 0xFE, 0, k]) for k in range(4)]
"""Binary keys that are not UTF-8, sent twice each: padded, then without the padding (the
broker's decoder takes both)."""


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[tuple[PulsarFrontEnd, Engine]]:
    async with raw.front_end(tmp_path) as made:
        yield made


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def messages() -> list[tuple[bytes, str, bool]]:
    """(payload, partition key, flagged as base64) in send order."""
    out = []
    for n in range(ROUNDS):
        for key in KEYS:
            binary = n % 2 == 1
            out.append((f"{key}/{n}".encode(), b64(key.encode()) if binary else key, binary))
    for n in range(2):
        for key in ODD:
            text = b64(key) if n == 0 else b64(key).rstrip("=")
            out.append((f"{key.hex()}/{n}".encode(), text, True))
    return out


def single(payload: bytes, key: str, flagged: bool) -> bytes:
    meta = pb.SingleMessageMetadata(payload_size=len(payload), partition_key=key,
                                    partition_key_b64_encoded=flagged).SerializeToString()
    return struct.pack(">I", len(meta)) + meta + payload


async def publish(port: int, batched: bool) -> None:
    producer = await RawClient.open(port)
    producer.send(raw.producer(1, 1, "p"))
    await producer.expect(Cmd.PRODUCER_SUCCESS)
    sent = messages()
    if batched:  # one batch per round of keys
        frames = [sent[i:i + len(KEYS)] for i in range(0, len(sent), len(KEYS))]
    else:
        frames = [[one] for one in sent]
    sequence = 0
    for frame in frames:
        meta = raw.meta("p", sequence)
        if batched:
            meta.num_messages_in_batch = len(frame)
            payload = b"".join(single(*one) for one in frame)
        else:
            (payload, key, flagged), = frame
            meta.partition_key, meta.partition_key_b64_encoded = key, flagged
        producer.send(raw.send(1, sequence), meta, payload)
        sequence += len(frame)
    for _ in frames:
        await producer.expect(Cmd.SEND_RECEIPT)
    await producer.close()


async def key_shared(port: int, consumer_id: int) -> RawClient:
    client = await RawClient.open(port)
    client.send(raw.subscribe(consumer_id, 1, pb.CommandSubscribe.Key_Shared))
    await client.expect(Cmd.SUCCESS)
    client.send(raw.flow(consumer_id, 1000))
    return client


async def collect(consumers: list[RawClient], total: int) -> list[tuple[int, pb.MessageMetadata,
                                                                         bytes]]:
    """(consumer index, metadata, payload) of the first `total` messages the consumers get."""
    got: list[tuple[int, pb.MessageMetadata, bytes]] = []
    done = asyncio.Event()

    async def read(index: int, client: RawClient) -> None:
        while True:
            frame = await client.expect(Cmd.MESSAGE, timeout=60)
            assert frame.metadata is not None
            got.append((index, frame.metadata, frame.payload))
            if len(got) >= total:
                done.set()

    tasks = [asyncio.create_task(read(i, c)) for i, c in enumerate(consumers)]
    try:
        waiting = asyncio.create_task(done.wait())
        await asyncio.wait([waiting, *tasks], timeout=60, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        for task in tasks:
            if task.done():
                task.result()  # a reader's failure fails the test
        assert len(got) >= total, f"{len(got)} of {total}"
    finally:
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await task
    return got


@pytest.mark.parametrize("batched", [False, True], ids=["single", "batched"])
async def test_a_binary_key_routes_as_its_bytes(
    stack: tuple[PulsarFrontEnd, Engine], batched: bool,
) -> None:
    front, _ = stack
    consumers = [await key_shared(front.port, n) for n in (1, 2, 3)]
    try:
        await publish(front.port, batched)
        sent = {payload: (key, flagged) for payload, key, flagged in messages()}
        got = await collect(consumers, len(sent))
        who: dict[str, set[int]] = {}
        order: dict[str, list[int]] = {}
        for index, meta, payload in got:
            # The key comes back exactly as it was sent, flag included.
            assert (meta.partition_key, meta.partition_key_b64_encoded) == sent[payload], payload
            name, n = payload.decode().split("/")
            who.setdefault(name, set()).add(index)
            order.setdefault(name, []).append(int(n))
        assert sorted(payload for _, _, payload in got) == sorted(sent)
        # Both forms of a key go to one consumer, in the order sent.
        assert all(len(at) == 1 for at in who.values()), who
        assert all(n == list(range(len(n))) for n in order.values()), order
        assert len({i for at in who.values() for i in at}) > 1  # and keys spread out
    finally:
        for consumer in consumers:
            await consumer.close()


@pytest.mark.parametrize("key", ["not base64!", "AA=E", "AA=", "A"])
async def test_a_key_flagged_as_base64_that_is_not_is_refused(
    stack: tuple[PulsarFrontEnd, Engine], key: str,
) -> None:
    front, _ = stack
    client = await RawClient.open(front.port)
    client.send(raw.producer(1, 1, "p"))
    await client.expect(Cmd.PRODUCER_SUCCESS)
    meta = raw.meta("p", 0)
    meta.partition_key, meta.partition_key_b64_encoded = key, True
    client.send(raw.send(1, 0), meta, b"x")
    error = (await client.expect(Cmd.SEND_ERROR)).command.send_error
    assert "messages[0].partition_key" in error.message and "base64" in error.message, error
    # The producer goes on.
    client.send(raw.send(1, 1), raw.meta("p", 1), b"y")
    assert (await client.expect(Cmd.SEND_RECEIPT)).command.send_receipt.sequence_id == 1
    await client.close()
