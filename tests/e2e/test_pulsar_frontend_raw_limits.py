"""Values at the Pulsar front end's edge, frame by frame: compressed sizes, batch counts, message
sizes counting key and properties, names, UTF-8 and delays. Each bad value gets the protocol's
error reply, nothing is stored, and the connection goes on serving.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import tests.pulsar_raw as raw
from adapters.pulsar.frontend import PulsarFrontEnd
from adapters.pulsar.wire import wire_pb2 as pb
from gateway.engine.clock import SystemClock
from gateway.limits import MAX_PUBLISH_PROPERTIES
from gateway.server.app import running_gateway
from tests.pulsar_raw import Cmd, RawClient

LIMIT = 2 * 1024 * 1024
"""The front end's message limit in these tests (the gateway's max_message_bytes)."""


@pytest.fixture
async def front(tmp_path: Path) -> AsyncIterator[PulsarFrontEnd]:
    async with running_gateway(
        data_dir=tmp_path / "data", listen="127.0.0.1:0", clock=SystemClock()
    ) as app:
        instance = PulsarFrontEnd(app.engine, "127.0.0.1", 0, max_message_size=LIMIT)
        await instance.start()
        yield instance
        await instance.stop()


async def producing(port: int, name: str = "edge") -> RawClient:
    client = await RawClient.open(port)
    client.send(raw.producer(1, 1, name))
    await client.expect(Cmd.PRODUCER_SUCCESS)
    return client


async def refused_send(client: RawClient, sequence_id: int) -> pb.CommandSendError:
    reply = (await client.expect(Cmd.SEND_ERROR)).command.send_error
    assert (reply.producer_id, reply.sequence_id) == (1, sequence_id)
    assert reply.error == pb.NotAllowedError
    assert len(reply.message) < 400
    return reply


async def only_sentinel_stored(client: RawClient, sequence_id: int) -> None:
    """Store a sentinel after the refused sends; it must be the first message of the topic."""
    client.send(raw.send(1, sequence_id), raw.meta("edge", sequence_id), b"sentinel")
    assert (await client.expect(Cmd.SEND_RECEIPT)).command.send_receipt.sequence_id == sequence_id
    client.send(raw.subscribe(2, 2, pb.CommandSubscribe.Exclusive))
    await client.expect(Cmd.SUCCESS)
    client.send(raw.flow(2, 1))
    assert (await client.expect(Cmd.MESSAGE)).payload == b"sentinel"


def hwm_reset() -> bool:
    """Reset this process's peak RSS (VmHWM); False where the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


def hwm_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


def zlib_bomb(size: int) -> bytes:
    """`size` zero bytes ZLIB-compressed, without holding them in memory (about 1 KiB per MiB)."""
    packer = zlib.compressobj(9)
    chunk = bytes(1 << 20)
    parts = [packer.compress(chunk) for _ in range(size >> 20)]
    return b"".join([*parts, packer.flush()])


def zlib_meta(sequence_id: int, uncompressed_size: int) -> pb.MessageMetadata:
    meta = raw.meta("edge", sequence_id)
    meta.compression = pb.ZLIB
    meta.uncompressed_size = uncompressed_size
    return meta


@pytest.mark.parametrize("declared", [10, 256 << 20, 2 * LIMIT], ids=["small", "true", "over"])
async def test_a_zlib_bomb_is_refused_without_inflating_it(
    front: PulsarFrontEnd, declared: int
) -> None:
    bomb = zlib_bomb(256 << 20)
    assert len(bomb) < 300 * 1024
    client = await producing(front.port)
    measured = hwm_reset()
    before = hwm_kib()
    client.send(raw.send(1, 0), zlib_meta(0, declared), bomb)
    reply = await refused_send(client, 0)
    assert "uncompressed_size" in reply.message
    if measured:
        assert hwm_kib() - before < 64 * 1024, "the payload was inflated"
    await only_sentinel_stored(client, 1)


async def test_zlib_payloads_of_the_declared_size_are_stored(front: PulsarFrontEnd) -> None:
    client = await producing(front.port)
    body = b"compressible " * 100
    client.send(raw.send(1, 0), zlib_meta(0, len(body) - 1), zlib.compress(body))
    await refused_send(client, 0)
    client.send(raw.send(1, 1), zlib_meta(1, len(body)), zlib.compress(body) + b"tail")
    await refused_send(client, 1)
    client.send(raw.send(1, 2), zlib_meta(2, len(body)), zlib.compress(body))
    assert (await client.expect(Cmd.SEND_RECEIPT)).command.send_receipt.sequence_id == 2
    client.send(raw.subscribe(2, 2, pb.CommandSubscribe.Exclusive))
    await client.expect(Cmd.SUCCESS)
    client.send(raw.flow(2, 1))
    assert (await client.expect(Cmd.MESSAGE)).payload == body


def batch_send(count: int | None = None) -> pb.BaseCommand:
    cmd = raw.send(1, 0)
    if count is not None:
        cmd.send.num_messages = count
    return cmd


def batch_meta(count: int) -> pb.MessageMetadata:
    meta = raw.meta("edge", 0)
    meta.num_messages_in_batch = count
    return meta


@pytest.mark.parametrize(
    ("command", "declared", "entries"),
    [
        (batch_send(300_000), 300_000, 300_000),
        (batch_send(10_001), 10_001, 10_001),
        (batch_send(), -5, 0),
        (batch_send(), 0, 0),
        (batch_send(4), 3, 4),
        (batch_send(4), 5, 4),
        (batch_send(7), 4, 4),
        (batch_send(0), 4, 4),
        (batch_send(-1), 4, 4),
    ],
    ids=["300k", "10001", "negative", "zero", "more", "fewer", "send-count", "send-zero", "neg"],
)
async def test_batch_counts_are_checked(
    front: PulsarFrontEnd, command: pb.BaseCommand, declared: int, entries: int
) -> None:
    client = await producing(front.port)
    client.send(command, batch_meta(declared), raw.tiny_batch(entries))
    await refused_send(client, 0)
    await only_sentinel_stored(client, 1)


async def test_a_batch_of_the_most_messages_is_stored(front: PulsarFrontEnd) -> None:
    client = await producing(front.port)
    client.send(batch_send(10_000), batch_meta(10_000), raw.tiny_batch(10_000))
    assert (await client.expect(Cmd.SEND_RECEIPT)).command.send_receipt.sequence_id == 0


def negative_entry_size() -> bytes:
    single = pb.SingleMessageMetadata(payload_size=-3)
    data = single.SerializeToString()
    return len(data).to_bytes(4, "big") + data + b"abc"


@pytest.mark.parametrize("part", ["key", "properties", "body+properties"])
async def test_key_and_properties_count_against_the_message_limit(
    front: PulsarFrontEnd, part: str
) -> None:
    client = await producing(front.port)
    meta = raw.meta("edge", 0)
    body = b"b"
    if part == "key":
        meta.partition_key = "k" * LIMIT
    elif part == "properties":
        for i in range(64):
            meta.properties.add(key=f"p{i}", value="v" * (LIMIT // 64))
    else:
        body = b"b" * (LIMIT - 100)
        meta.properties.add(key="p", value="v" * 200)
    client.send(raw.send(1, 0), meta, body)
    reply = await refused_send(client, 0)
    assert str(LIMIT) in reply.message
    await only_sentinel_stored(client, 1)


async def test_a_batch_entry_with_a_negative_size_is_refused(front: PulsarFrontEnd) -> None:
    client = await producing(front.port)
    client.send(batch_send(1), batch_meta(1), negative_entry_size())
    await refused_send(client, 0)
    await only_sentinel_stored(client, 1)


@pytest.mark.parametrize("deliver_at", [-1, 2**62], ids=["negative", "far"])
async def test_delivery_times_are_checked(front: PulsarFrontEnd, deliver_at: int) -> None:
    client = await producing(front.port)
    meta = raw.meta("edge", 0)
    meta.deliver_at_time = deliver_at
    client.send(raw.send(1, 0), meta, b"late")
    reply = await refused_send(client, 0)
    assert "deliver_at_time" in reply.message
    await only_sentinel_stored(client, 1)


async def test_invalid_utf8_in_message_metadata_is_refused(front: PulsarFrontEnd) -> None:
    client = await producing(front.port)
    meta = raw.meta("edge", 0)
    meta.properties.add(key="zz", value="v")
    body = raw.send(1, 0).SerializeToString()
    client.writer.write(raw.payload_frame(body, raw.poisoned(meta, "zz", b"\xff\xfe"), b"x"))
    await refused_send(client, 0)
    await only_sentinel_stored(client, 1)


async def test_chunked_and_transactional_sends_are_refused(front: PulsarFrontEnd) -> None:
    client = await producing(front.port)
    meta = raw.meta("edge", 0)
    meta.num_chunks_from_msg = 2
    meta.chunk_id = 0
    client.send(raw.send(1, 0), meta, b"half")
    await refused_send(client, 0)
    txn = raw.send(1, 1)
    txn.send.txnid_most_bits = 7
    client.send(txn, raw.meta("edge", 1), b"in a transaction")
    await refused_send(client, 1)
    await only_sentinel_stored(client, 2)


async def still_serving(client: RawClient) -> None:
    ping = Cmd(type=Cmd.PING)
    ping.ping.SetInParent()
    client.send(ping)
    await client.expect(Cmd.PONG)


def producer_with_topic(topic: str) -> pb.BaseCommand:
    cmd = raw.producer(1, 5)
    cmd.producer.topic = topic
    return cmd


async def test_names_are_checked_before_use(front: PulsarFrontEnd) -> None:
    client = await RawClient.open(front.port)
    client.send(producer_with_topic("t" * 100_000))
    error = (await client.expect(Cmd.ERROR)).command.error
    assert (error.request_id, error.error) == (5, pb.NotAllowedError)
    assert "255" in error.message and len(error.message) < 400
    client.writer.write(
        raw.command_frame(raw.poisoned(producer_with_topic("zz"), "zz", b"\xff\xfe"))
    )
    error = (await client.expect(Cmd.ERROR)).command.error
    assert (error.request_id, error.error) == (5, pb.NotAllowedError)
    assert "UTF-8" in error.message
    named = raw.producer(1, 6, "n" * 600)
    client.send(named)
    assert (await client.expect(Cmd.ERROR)).command.error.request_id == 6
    sub = raw.subscribe(3, 7, pb.CommandSubscribe.Shared)
    sub.subscribe.subscription = "s\x01"
    client.send(sub)
    assert (await client.expect(Cmd.ERROR)).command.error.request_id == 7
    lookup = Cmd(type=Cmd.LOOKUP)
    lookup.lookupTopic.topic = "zz"
    lookup.lookupTopic.request_id = 8
    client.writer.write(raw.command_frame(raw.poisoned(lookup, "zz", b"\xc3\x28")))
    answer = (await client.expect(Cmd.LOOKUP_RESPONSE)).command.lookupTopicResponse
    assert (answer.request_id, answer.response) == (8, pb.CommandLookupTopicResponse.Failed)
    await still_serving(client)


async def test_missing_required_fields_are_named(front: PulsarFrontEnd) -> None:
    client = await RawClient.open(front.port)
    cmd = Cmd(type=Cmd.PRODUCER)
    cmd.producer.request_id = 9
    client.writer.write(raw.command_frame(cmd.SerializePartialToString()))
    error = (await client.expect(Cmd.ERROR)).command.error
    assert error.request_id == 9 and "topic" in error.message
    await still_serving(client)


async def test_sequence_ids_beyond_uint64_are_refused(front: PulsarFrontEnd) -> None:
    client = await producing(front.port)
    last = 2**64 - 1
    client.send(raw.send(1, last), batch_meta(2), raw.tiny_batch(2))
    reply = (await client.expect(Cmd.SEND_ERROR)).command.send_error
    assert (reply.sequence_id, reply.error) == (last, pb.NotAllowedError)
    client.send(raw.subscribe(2, 2, pb.CommandSubscribe.Exclusive))
    await client.expect(Cmd.SUCCESS)
    await still_serving(client)


async def test_properties_of_one_send_are_capped(front: PulsarFrontEnd) -> None:
    """At most MAX_PUBLISH_PROPERTIES in one SEND, all batch entries together."""
    per_entry = 1024
    count = MAX_PUBLISH_PROPERTIES // per_entry + 1
    single = pb.SingleMessageMetadata(payload_size=0)
    for i in range(per_entry):
        single.properties.add(key=f"{i}", value="")
    data = single.SerializeToString()
    payload = (len(data).to_bytes(4, "big") + data) * count
    client = await producing(front.port)
    client.send(batch_send(count), batch_meta(count), payload)
    reply = await refused_send(client, 0)
    assert str(MAX_PUBLISH_PROPERTIES) in reply.message
    await only_sentinel_stored(client, 1)
