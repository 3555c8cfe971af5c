"""The Pulsar front end at the frame level: handshake, lookups, keepalive, dedup, acks.

A small client built on the front end's own codec talks to the front end over a real socket, in
front of the real gateway engine; this reaches replies the official client hides.
"""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import tests.pulsar_raw as raw
from adapters.pulsar.frontend import PulsarFrontEnd
from adapters.pulsar.wire import wire_pb2 as pb
from adapters.pulsar.wire.frames import encode_payload_command
from gateway.engine.clock import SystemClock
from gateway.server.app import running_gateway
from tests.pulsar_raw import Cmd, RawClient


@pytest.fixture
async def front(tmp_path: Path) -> AsyncIterator[PulsarFrontEnd]:
    async with running_gateway(
        data_dir=tmp_path / "data", listen="127.0.0.1:0", clock=SystemClock()
    ) as app:
        instance = PulsarFrontEnd(app.engine, "127.0.0.1", 0, keepalive_s=0.3)
        await instance.start()
        yield instance
        await instance.stop()


async def test_handshake_lookup_and_ping(front: PulsarFrontEnd) -> None:
    client = await RawClient.open(front.port)
    ping = Cmd(type=Cmd.PING)
    ping.ping.SetInParent()
    client.send(ping)
    await client.expect(Cmd.PONG)
    lookup = Cmd(type=Cmd.LOOKUP)
    lookup.lookupTopic.topic = "persistent://public/default/raw"
    lookup.lookupTopic.request_id = 7
    client.send(lookup)
    answer = (await client.expect(Cmd.LOOKUP_RESPONSE)).command.lookupTopicResponse
    assert answer.request_id == 7
    assert answer.response == pb.CommandLookupTopicResponse.Connect
    assert answer.brokerServiceUrl == f"pulsar://127.0.0.1:{front.port}"
    meta = Cmd(type=Cmd.PARTITIONED_METADATA)
    meta.partitionMetadata.topic = "raw"
    meta.partitionMetadata.request_id = 8
    client.send(meta)
    parts = (await client.expect(Cmd.PARTITIONED_METADATA_RESPONSE)).command
    assert parts.partitionMetadataResponse.partitions == 0
    assert parts.partitionMetadataResponse.request_id == 8
    bad = Cmd(type=Cmd.LOOKUP)
    bad.lookupTopic.topic = "persistent://a//b"
    bad.lookupTopic.request_id = 9
    client.send(bad)
    failed = (await client.expect(Cmd.LOOKUP_RESPONSE)).command.lookupTopicResponse
    assert failed.response == pb.CommandLookupTopicResponse.Failed
    await client.close()


async def test_server_pings_and_drops_a_silent_client(front: PulsarFrontEnd) -> None:
    client = await RawClient.open(front.port)
    assert (await client.read()).command.type == Cmd.PING
    assert await client.closed()


async def test_connection_must_start_with_connect(front: PulsarFrontEnd) -> None:
    client = await RawClient.open(front.port, connect=False)
    ping = Cmd(type=Cmd.PING)
    ping.ping.SetInParent()
    client.send(ping)
    assert await client.closed()


async def test_oversized_frame_closes_the_connection(front: PulsarFrontEnd) -> None:
    client = await RawClient.open(front.port)
    client.writer.write(struct.pack(">I", 0x7FFFFFFF))
    assert await client.closed()


async def test_resends_are_deduplicated_by_producer_name(front: PulsarFrontEnd) -> None:
    first = await RawClient.open(front.port)
    first.send(raw.producer(1, 1, "orders-writer"))
    ok = (await first.expect(Cmd.PRODUCER_SUCCESS)).command.producer_success
    assert (ok.producer_name, ok.last_sequence_id) == ("orders-writer", -1)
    for seq in (0, 1):
        first.send(raw.send(1, seq), raw.meta("orders-writer", seq), f"m{seq}".encode())
        receipt = (await first.expect(Cmd.SEND_RECEIPT)).command.send_receipt
        assert (receipt.producer_id, receipt.sequence_id) == (1, seq)
    await first.close()

    second = await RawClient.open(front.port)
    second.send(raw.producer(4, 2, "orders-writer"))
    again = (await second.expect(Cmd.PRODUCER_SUCCESS)).command.producer_success
    assert again.last_sequence_id == 1
    for seq in (1, 2):
        second.send(raw.send(4, seq), raw.meta("orders-writer", seq), f"m{seq}".encode())
        assert (await second.expect(Cmd.SEND_RECEIPT)).command.send_receipt.sequence_id == seq

    second.send(raw.subscribe(9, 3, pb.CommandSubscribe.Shared))
    await second.expect(Cmd.SUCCESS)
    second.send(raw.flow(9, 10))
    bodies = [(await second.expect(Cmd.MESSAGE)).payload for _ in range(3)]
    assert bodies == [b"m0", b"m1", b"m2"]
    with pytest.raises(TimeoutError):
        await second.expect(Cmd.MESSAGE, timeout=0.8)
    await second.close()


async def test_bad_sends_get_send_errors(front: PulsarFrontEnd) -> None:
    client = await RawClient.open(front.port)
    client.send(raw.send(42, 0), raw.meta("x", 0), b"?")
    error = (await client.expect(Cmd.SEND_ERROR)).command.send_error
    assert (error.producer_id, error.error) == (42, pb.NotAllowedError)
    client.send(raw.producer(1, 1))
    name = (await client.expect(Cmd.PRODUCER_SUCCESS)).command.producer_success.producer_name
    assert name
    corrupt = bytearray(encode_payload_command(raw.send(1, 0), raw.meta(name, 0), b"payload"))
    corrupt[-1] ^= 0xFF
    client.writer.write(bytes(corrupt))
    error = (await client.expect(Cmd.SEND_ERROR)).command.send_error
    assert (error.sequence_id, error.error) == (0, pb.ChecksumError)
    await client.close()


async def test_acks_answer_when_asked_and_redeliver_gives_all_back(front: PulsarFrontEnd) -> None:
    client = await RawClient.open(front.port)
    client.send(raw.producer(1, 1, "w"))
    await client.expect(Cmd.PRODUCER_SUCCESS)
    for seq in range(3):
        client.send(raw.send(1, seq), raw.meta("w", seq), f"r{seq}".encode())
        await client.expect(Cmd.SEND_RECEIPT)
    client.send(raw.subscribe(5, 2, pb.CommandSubscribe.Exclusive))
    await client.expect(Cmd.SUCCESS)
    client.send(raw.flow(5, 3))
    delivered = [await client.expect(Cmd.MESSAGE) for _ in range(3)]
    assert all(f.command.message.redelivery_count == 0 for f in delivered)
    ack = Cmd(type=Cmd.ACK)
    ack.ack.consumer_id = 5
    ack.ack.ack_type = pb.CommandAck.Individual
    ack.ack.message_id.add().CopyFrom(delivered[0].command.message.message_id)
    ack.ack.request_id = 77
    client.send(ack)
    response = (await client.expect(Cmd.ACK_RESPONSE)).command.ackResponse
    assert (response.consumer_id, response.request_id, response.HasField("error")) == (5, 77, False)
    redeliver = Cmd(type=Cmd.REDELIVER_UNACKNOWLEDGED_MESSAGES)
    redeliver.redeliverUnacknowledgedMessages.consumer_id = 5
    redeliver.redeliverUnacknowledgedMessages.consumer_epoch = 1
    client.send(redeliver)
    client.send(raw.flow(5, 2))
    again = [await client.expect(Cmd.MESSAGE) for _ in range(2)]
    assert [f.payload for f in again] == [b"r1", b"r2"]
    assert all(f.command.message.redelivery_count == 0 for f in again)
    assert all(f.command.message.consumer_epoch == 1 for f in again)
    first_ids = [f.command.message.message_id.entryId for f in delivered[1:]]
    assert [f.command.message.message_id.entryId for f in again] == first_ids
    await client.close()


async def test_unknown_first_command_closes_the_connection(front: PulsarFrontEnd) -> None:
    client = await RawClient.open(front.port, connect=False)
    body = b"\x08\x63"  # type 99: not a command the front end knows
    client.writer.write(struct.pack(">II", len(body) + 4, len(body)) + body)
    assert await client.closed()


async def test_dropped_connection_gives_held_messages_back(front: PulsarFrontEnd) -> None:
    first = await RawClient.open(front.port)
    first.send(raw.producer(1, 1, "w"))
    await first.expect(Cmd.PRODUCER_SUCCESS)
    for seq in range(2):
        first.send(raw.send(1, seq), raw.meta("w", seq), f"d{seq}".encode())
        await first.expect(Cmd.SEND_RECEIPT)
    first.send(raw.subscribe(3, 2, pb.CommandSubscribe.Shared))
    await first.expect(Cmd.SUCCESS)
    first.send(raw.flow(3, 10))
    assert [(await first.expect(Cmd.MESSAGE)).payload for _ in range(2)] == [b"d0", b"d1"]
    first.writer.transport.abort()

    second = await RawClient.open(front.port)
    second.send(raw.subscribe(1, 1, pb.CommandSubscribe.Shared))
    await second.expect(Cmd.SUCCESS)
    second.send(raw.flow(1, 10))
    again = [await second.expect(Cmd.MESSAGE) for _ in range(2)]
    assert sorted(f.payload for f in again) == [b"d0", b"d1"]
    await second.close()
