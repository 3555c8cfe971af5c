"""A Pulsar client speaking raw frames over a socket, on the front end's own codec, for tests
that reach replies the official client hides (tests/e2e/test_pulsar_frontend_raw*.py)."""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import crc32c
from google.protobuf.message import Message

from adapters.pulsar.frontend import PulsarFrontEnd
from adapters.pulsar.wire import wire_pb2 as pb
from adapters.pulsar.wire.frames import (
    MAGIC_CRC32C,
    Frame,
    decode_frame,
    encode_command,
    encode_payload_command,
    frame_size,
)
from gateway.engine.clock import SystemClock
from gateway.engine.engine import Engine
from gateway.server.app import running_gateway

Cmd = pb.BaseCommand
WAIT_S = 5.0


@contextlib.asynccontextmanager
async def front_end(
    tmp_path: Path, **options: Any
) -> AsyncIterator[tuple[PulsarFrontEnd, Engine]]:
    """A gateway on its embedded store (`tmp_path / "data"`, the system clock) and a Pulsar front
    end of it on a free port, started with `options`; its engine beside it."""
    async with running_gateway(
        data_dir=tmp_path / "data", listen="127.0.0.1:0", clock=SystemClock()
    ) as app:
        options.setdefault("queries", app.engine)
        instance = PulsarFrontEnd(app.engine, "127.0.0.1", 0, **options)
        await instance.start()
        try:
            yield instance, app.engine
        finally:
            await instance.stop()


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


def producer(producer_id: int, request_id: int, name: str = "") -> pb.BaseCommand:
    cmd = Cmd(type=Cmd.PRODUCER)
    cmd.producer.topic = "persistent://public/default/raw"
    cmd.producer.producer_id = producer_id
    cmd.producer.request_id = request_id
    if name:
        cmd.producer.producer_name = name
    return cmd


def send(producer_id: int, sequence_id: int) -> pb.BaseCommand:
    cmd = Cmd(type=Cmd.SEND)
    cmd.send.producer_id = producer_id
    cmd.send.sequence_id = sequence_id
    return cmd


def meta(name: str, sequence_id: int) -> pb.MessageMetadata:
    return pb.MessageMetadata(producer_name=name, sequence_id=sequence_id, publish_time=1)


def subscribe(consumer_id: int, request_id: int, sub_type: int) -> pb.BaseCommand:
    cmd = Cmd(type=Cmd.SUBSCRIBE)
    sub = cmd.subscribe
    sub.topic = "persistent://public/default/raw"
    sub.subscription = "s"
    sub.subType = sub_type  # type: ignore[assignment]
    sub.consumer_id = consumer_id
    sub.request_id = request_id
    sub.initialPosition = pb.CommandSubscribe.Earliest  # these tests read what they sent before
    return cmd


def flow(consumer_id: int, permits: int) -> pb.BaseCommand:
    cmd = Cmd(type=Cmd.FLOW)
    cmd.flow.consumer_id = consumer_id
    cmd.flow.messagePermits = permits
    return cmd


def command_frame(body: bytes) -> bytes:
    """A simple frame around serialized command bytes (which may be invalid on purpose)."""
    return struct.pack(">II", len(body) + 4, len(body)) + body


def payload_frame(body: bytes, metadata: bytes, payload: bytes) -> bytes:
    """A checksummed payload frame around serialized command and metadata bytes."""
    checked = struct.pack(">I", len(metadata)) + metadata + payload
    rest = struct.pack(">HI", MAGIC_CRC32C, crc32c.crc32c(checked)) + checked
    return struct.pack(">II", 4 + len(body) + len(rest), len(body)) + body + rest


def poisoned(message: Message, placeholder: str, bad: bytes) -> bytes:
    """`message` serialized with the UTF-8 of `placeholder` replaced by `bad` (same length)."""
    good = placeholder.encode()
    assert len(good) == len(bad)
    data = message.SerializeToString()
    assert data.count(good) == 1
    return data.replace(good, bad)


def tiny_batch(count: int) -> bytes:
    """A batch payload of `count` empty entries: 6 bytes each."""
    return (struct.pack(">I", 2) + b"\x18\x00") * count
