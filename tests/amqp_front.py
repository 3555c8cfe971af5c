"""Test support for the AMQP 0-9-1 front end: a gateway serving AMQP (in this process, on a free
port), and a raw AMQP connection that sends exactly the frames a test writes (pamqp encodes)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import struct
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from pamqp import commands, frame, header

from adapters.amqp.backend import RabbitMQBackend
from adapters.amqp.frontend.framing import method_frame, reply
from gateway.engine.clock import SystemClock
from gateway.server.app import GatewayApp, running_gateway

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
RABBITMQ_URL = os.environ.get("GATEWAY_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")


def unique(prefix: str = "q") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class AmqpGateway:
    """A gateway with the AMQP front end; restartable on the same data dir and port."""

    def __init__(self, data_dir: Path, **settings: Any) -> None:
        self.data_dir = data_dir
        self.settings = settings
        self.port = free_port()
        self.app: GatewayApp | None = None
        self._exit: contextlib.AsyncExitStack | None = None

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"

    def url_for(self, user: str, password: str) -> str:
        return f"amqp://{user}:{password}@127.0.0.1:{self.port}/"

    async def start(self) -> GatewayApp:
        self._exit = contextlib.AsyncExitStack()
        settings = {"time_scale": 0.01, **self.settings}
        self.app = await self._exit.enter_async_context(running_gateway(
            self.data_dir, amqp_listen=f"127.0.0.1:{self.port}", **settings))
        return self.app

    async def stop(self) -> None:
        if self._exit is not None:
            await self._exit.aclose()
            self._exit = None
            self.app = None

    async def restart(self) -> GatewayApp:
        await self.stop()
        return await self.start()


@contextlib.asynccontextmanager
async def amqp_gateway(data_dir: Path, **settings: Any) -> AsyncIterator[AmqpGateway]:
    gw = AmqpGateway(data_dir, **settings)
    await gw.start()
    try:
        yield gw
    finally:
        await gw.stop()


@contextlib.asynccontextmanager
async def amqp_gateway_on(store: str, data_dir: Path,
                          **settings: Any) -> AsyncIterator[AmqpGateway]:
    """`amqp_gateway` on its embedded store (`store` "embedded") or on the real RabbitMQ at
    RABBITMQ_URL behind the gateway ("rabbitmq")."""
    if store == "rabbitmq":
        settings["backend"] = RabbitMQBackend(RABBITMQ_URL, clock=SystemClock())
    async with amqp_gateway(data_dir, **settings) as gw:
        yield gw


def raw_frame(kind: int, channel: int, payload: bytes, end: int = 0xCE) -> bytes:
    return struct.pack(">BHI", kind, channel, len(payload)) + payload + bytes([end])


class RawAmqp:
    """One AMQP connection over a plain socket: the frames the test sends, exactly."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.buffer = b""

    @classmethod
    async def connect(cls, port: int, *, user: str = "guest", password: str = "guest",
                      open_channel: int | None = 1, frame_max: int | None = None,
                      vhost: str = "/") -> RawAmqp:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        conn = cls(reader, writer)
        writer.write(PROTOCOL_HEADER)
        start = await conn.expect(commands.Connection.Start)
        assert b"PLAIN" in str(start.mechanisms).encode()
        conn.send(0, commands.Connection.StartOk(
            client_properties={"capabilities": {"consumer_cancel_notify": True}},
            mechanism="PLAIN", response=f"\x00{user}\x00{password}", locale="en_US"))
        tune = await conn.expect(commands.Connection.Tune)
        conn.send(0, commands.Connection.TuneOk(channel_max=tune.channel_max,
                                                frame_max=frame_max or tune.frame_max,
                                                heartbeat=0))
        conn.send(0, commands.Connection.Open(virtual_host=vhost))
        await conn.expect(commands.Connection.OpenOk)
        if open_channel is not None:
            conn.send(open_channel, commands.Channel.Open())
            await conn.expect(commands.Channel.OpenOk)
        return conn

    @classmethod
    async def login(cls, port: int, user: str, password: str) -> tuple[RawAmqp | None, Any]:
        """A connection with channel 1 open, or None and the server's Connection.Close when
        the login was refused."""
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        conn = cls(reader, writer)
        writer.write(PROTOCOL_HEADER)
        await conn.expect(commands.Connection.Start)
        conn.send(0, commands.Connection.StartOk(
            client_properties={}, mechanism="PLAIN", response=f"\x00{user}\x00{password}",
            locale="en_US"))
        _, answer = await conn.read()
        if not isinstance(answer, commands.Connection.Tune):
            conn.close()
            return None, answer
        conn.send(0, commands.Connection.TuneOk(channel_max=answer.channel_max,
                                                frame_max=answer.frame_max, heartbeat=0))
        conn.send(0, commands.Connection.Open(virtual_host="/"))
        await conn.expect(commands.Connection.OpenOk)
        conn.send(1, commands.Channel.Open())
        await conn.expect(commands.Channel.OpenOk)
        return conn, answer

    async def answer(self, timeout: float = 5.0) -> tuple[int, Any]:
        """The next frame that is a method (content and heartbeats skipped)."""
        while True:
            channel, got = await self.read(timeout)
            if isinstance(got, commands.Basic.Properties | bytes) or type(got).__name__ in (
                "ContentHeader", "ContentBody", "Heartbeat"
            ):
                continue
            return channel, got

    def send(self, channel: int, method: Any) -> None:
        """A method frame (pamqp's encoders, without its name pattern: names such as `%DLQ%g`
        are the specification's)."""
        self.writer.write(method_frame(channel, method))

    def send_raw(self, data: bytes) -> None:
        self.writer.write(data)

    def publish(self, channel: int, body: bytes, routing_key: str, exchange: str = "",
                properties: commands.Basic.Properties | None = None) -> None:
        self.send(channel, reply(commands.Basic.Publish, exchange=exchange,
                                 routing_key=routing_key))
        self.writer.write(frame.marshal(header.ContentHeader(
            0, len(body), properties or commands.Basic.Properties()), channel))
        if body:
            self.writer.write(raw_frame(3, channel, body))

    async def read(self, timeout: float = 5.0) -> tuple[int, Any]:
        """The next frame (channel, decoded frame); EOFError when the server closed."""
        while True:
            if len(self.buffer) >= 7:
                size = struct.unpack_from(">I", self.buffer, 3)[0]
                if len(self.buffer) >= size + 8:
                    used, channel, decoded = frame.unmarshal(self.buffer)
                    self.buffer = self.buffer[used:]
                    return channel, decoded
            data = await asyncio.wait_for(self.reader.read(65536), timeout)
            if not data:
                raise EOFError("the server closed the connection")
            self.buffer += data

    async def expect(self, kind: type, timeout: float = 5.0) -> Any:
        channel, got = await self.read(timeout)
        assert isinstance(got, kind), f"expected {kind.__name__}, got {got!r} on {channel}"
        return got

    async def closed_with(self, timeout: float = 5.0) -> tuple[int, Any]:
        """Read until a Channel.Close or Connection.Close; returns (channel, the close)."""
        while True:
            channel, got = await self.read(timeout)
            if isinstance(got, commands.Channel.Close | commands.Connection.Close):
                return channel, got

    async def eof(self, timeout: float = 5.0) -> bool:
        """Whether the server closes the socket within `timeout` (reading what comes first)."""
        try:
            while True:
                data = await asyncio.wait_for(self.reader.read(65536), timeout)
                if not data:
                    return True
        except (TimeoutError, ConnectionError):
            return False

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


class PerTurn:
    """A count (`total`, raised by the test's hook) and the most it grew in one turn of the
    event loop (`most`): a callback that schedules itself again each turn looks at it."""

    def __init__(self) -> None:
        self.total = 0
        self.most = 0
        self._at_tick = 0
        self._stopped = False

    def start(self) -> None:
        asyncio.get_running_loop().call_soon(self._tick)

    def _tick(self) -> None:
        self.most = max(self.most, self.total - self._at_tick)
        self._at_tick = self.total
        if not self._stopped:
            asyncio.get_running_loop().call_soon(self._tick)

    def stop(self) -> None:
        self._stopped = True


async def flood_and_victim(port: int) -> tuple[RawAmqp, str, RawAmqp, str]:
    """Two connections to the gateway on `port`, each with a queue of its own declared: an
    attacker and a victim whose channel confirms its publishes."""
    flood_queue, victim_queue = unique("flood"), unique("victim")
    attacker = await RawAmqp.connect(port)
    victim = await RawAmqp.connect(port)
    for raw, queue in ((attacker, flood_queue), (victim, victim_queue)):
        raw.send(1, commands.Queue.Declare(queue=queue))
        await raw.expect(commands.Queue.DeclareOk)
    victim.send(1, commands.Confirm.Select())
    await victim.expect(commands.Confirm.SelectOk)
    return attacker, flood_queue, victim, victim_queue


async def stored(raw: RawAmqp, queue: str, count: int, tries: int = 1200) -> int:
    """The queue's message count once it reached `count` (asked every 50 ms), or the last one
    asked."""
    for _ in range(tries):
        raw.send(1, commands.Queue.Declare(queue=queue, passive=True))
        ok = await raw.expect(commands.Queue.DeclareOk, timeout=30)
        if ok.message_count >= count:
            break
        await asyncio.sleep(0.05)
    return int(ok.message_count)
