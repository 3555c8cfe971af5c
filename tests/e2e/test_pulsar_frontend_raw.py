"""The Pulsar front end at the frame level: handshake, lookups, keepalive, dedup, acks.

A small client built on the front end's own codec talks to the front end over a real socket, in
front of the real gateway engine; this reaches replies the official client hides.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from adapters.pulsar.frontend import PulsarFrontEnd
from adapters.pulsar.wire import wire_pb2 as pb
from adapters.pulsar.wire.frames import (
    Frame,
    decode_frame,
    encode_command,
    encode_payload_command,
    frame_size,
)
from gateway.engine.clock import SystemClock
from gateway.server.app import running_gateway

Cmd = pb.BaseCommand
WAIT_S = 5.0


class RawClient:
    """One connection speaking frames."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, port: int, *, connect: bool = True) -> RawClient:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        client = cls(reader, writer)
        if connect:
            cmd = Cmd(type=Cmd.CONNECT)
            cmd.connect.client_version = "raw-test"
            cmd.connect.protocol_version = 21
            client.send(cmd)
            reply = await client.expect(Cmd.CONNECTED)
            assert reply.command.connected.protocol_version == 19
        return client

    def send(
        self, cmd: pb.BaseCommand, metadata: pb.MessageMetadata | None = None, payload: bytes = b""
    ) -> None:
        if metadata is None:
            self.writer.write(encode_command(cmd))
        else:
            self.writer.write(encode_payload_command(cmd, metadata, payload))

    async def read(self, timeout: float = WAIT_S) -> Frame:
        async def one() -> Frame:
            size = frame_size(await self.reader.readexactly(4))
            return decode_frame(await self.reader.readexactly(size))

        return await asyncio.wait_for(one(), timeout)

    async def expect(self, kind: int, timeout: float = WAIT_S) -> Frame:
        """The next frame of `kind` within `timeout`, answering server PINGs on the way."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + timeout
        while True:
            frame = await self.read(max(give_up - loop.time(), 0.0))
            if frame.command.type == Cmd.PING and kind != Cmd.PING:
                pong = Cmd(type=Cmd.PONG)
                pong.pong.SetInParent()
                self.send(pong)
                continue
            assert frame.command.type == kind, frame.command
            assert frame.command.IsInitialized()
            return frame

    async def closed(self, timeout: float = WAIT_S) -> bool:
        """True once the server has closed the connection."""
        try:
            data = await asyncio.wait_for(self.reader.read(), timeout)
        except ConnectionError:
            return True
        return self.reader.at_eof() and isinstance(data, bytes)

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()


@pytest.fixture
async def front(tmp_path: Path) -> AsyncIterator[PulsarFrontEnd]:
    async with running_gateway(
        data_dir=tmp_path / "data", listen="127.0.0.1:0", clock=SystemClock()
    ) as app:
        instance = PulsarFrontEnd(app.engine, "127.0.0.1", 0, keepalive_s=0.3)
        await instance.start()
        yield instance
        await instance.stop()


def _producer(producer_id: int, request_id: int, name: str = "") -> pb.BaseCommand:
    cmd = Cmd(type=Cmd.PRODUCER)
    cmd.producer.topic = "persistent://public/default/raw"
    cmd.producer.producer_id = producer_id
    cmd.producer.request_id = request_id
    if name:
        cmd.producer.producer_name = name
    return cmd


def _send(producer_id: int, sequence_id: int) -> pb.BaseCommand:
    cmd = Cmd(type=Cmd.SEND)
    cmd.send.producer_id = producer_id
    cmd.send.sequence_id = sequence_id
    return cmd


def _meta(name: str, sequence_id: int) -> pb.MessageMetadata:
    return pb.MessageMetadata(producer_name=name, sequence_id=sequence_id, publish_time=1)


def _subscribe(consumer_id: int, request_id: int, sub_type: int) -> pb.BaseCommand:
    cmd = Cmd(type=Cmd.SUBSCRIBE)
    sub = cmd.subscribe
    sub.topic = "persistent://public/default/raw"
    sub.subscription = "s"
    sub.subType = sub_type  # type: ignore[assignment]
    sub.consumer_id = consumer_id
    sub.request_id = request_id
    return cmd


def _flow(consumer_id: int, permits: int) -> pb.BaseCommand:
    cmd = Cmd(type=Cmd.FLOW)
    cmd.flow.consumer_id = consumer_id
    cmd.flow.messagePermits = permits
    return cmd


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
    first.send(_producer(1, 1, "orders-writer"))
    ok = (await first.expect(Cmd.PRODUCER_SUCCESS)).command.producer_success
    assert (ok.producer_name, ok.last_sequence_id) == ("orders-writer", -1)
    for seq in (0, 1):
        first.send(_send(1, seq), _meta("orders-writer", seq), f"m{seq}".encode())
        receipt = (await first.expect(Cmd.SEND_RECEIPT)).command.send_receipt
        assert (receipt.producer_id, receipt.sequence_id) == (1, seq)
    await first.close()

    second = await RawClient.open(front.port)
    second.send(_producer(4, 2, "orders-writer"))
    again = (await second.expect(Cmd.PRODUCER_SUCCESS)).command.producer_success
    assert again.last_sequence_id == 1
    for seq in (1, 2):
        second.send(_send(4, seq), _meta("orders-writer", seq), f"m{seq}".encode())
        assert (await second.expect(Cmd.SEND_RECEIPT)).command.send_receipt.sequence_id == seq

    second.send(_subscribe(9, 3, pb.CommandSubscribe.Shared))
    await second.expect(Cmd.SUCCESS)
    second.send(_flow(9, 10))
    bodies = [(await second.expect(Cmd.MESSAGE)).payload for _ in range(3)]
    assert bodies == [b"m0", b"m1", b"m2"]
    with pytest.raises(TimeoutError):
        await second.expect(Cmd.MESSAGE, timeout=0.8)
    await second.close()


async def test_bad_sends_get_send_errors(front: PulsarFrontEnd) -> None:
    client = await RawClient.open(front.port)
    client.send(_send(42, 0), _meta("x", 0), b"?")
    error = (await client.expect(Cmd.SEND_ERROR)).command.send_error
    assert (error.producer_id, error.error) == (42, pb.NotAllowedError)
    client.send(_producer(1, 1))
    name = (await client.expect(Cmd.PRODUCER_SUCCESS)).command.producer_success.producer_name
    assert name
    corrupt = bytearray(encode_payload_command(_send(1, 0), _meta(name, 0), b"payload"))
    corrupt[-1] ^= 0xFF
    client.writer.write(bytes(corrupt))
    error = (await client.expect(Cmd.SEND_ERROR)).command.send_error
    assert (error.sequence_id, error.error) == (0, pb.ChecksumError)
    await client.close()


async def test_acks_answer_when_asked_and_redeliver_gives_all_back(front: PulsarFrontEnd) -> None:
    client = await RawClient.open(front.port)
    client.send(_producer(1, 1, "w"))
    await client.expect(Cmd.PRODUCER_SUCCESS)
    for seq in range(3):
        client.send(_send(1, seq), _meta("w", seq), f"r{seq}".encode())
        await client.expect(Cmd.SEND_RECEIPT)
    client.send(_subscribe(5, 2, pb.CommandSubscribe.Exclusive))
    await client.expect(Cmd.SUCCESS)
    client.send(_flow(5, 3))
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
    client.send(_flow(5, 2))
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
    first.send(_producer(1, 1, "w"))
    await first.expect(Cmd.PRODUCER_SUCCESS)
    for seq in range(2):
        first.send(_send(1, seq), _meta("w", seq), f"d{seq}".encode())
        await first.expect(Cmd.SEND_RECEIPT)
    first.send(_subscribe(3, 2, pb.CommandSubscribe.Shared))
    await first.expect(Cmd.SUCCESS)
    first.send(_flow(3, 10))
    assert [(await first.expect(Cmd.MESSAGE)).payload for _ in range(2)] == [b"d0", b"d1"]
    first.writer.transport.abort()

    second = await RawClient.open(front.port)
    second.send(_subscribe(1, 1, pb.CommandSubscribe.Shared))
    await second.expect(Cmd.SUCCESS)
    second.send(_flow(1, 10))
    again = [await second.expect(Cmd.MESSAGE) for _ in range(2)]
    assert sorted(f.payload for f in again) == [b"d0", b"d1"]
    await second.close()
