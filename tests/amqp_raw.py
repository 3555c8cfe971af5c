"""A blocking AMQP 0-9-1 connection over a plain socket for attack tests: it sends exactly the
bytes a test gives (valid frames are encoded by pamqp) and reads what the server answers, frame
by frame, until the server closes the channel or the connection, or the socket."""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from dataclasses import dataclass
from typing import Any

from pamqp import commands, frame, header
from pamqp.heartbeat import Heartbeat

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
FRAME_END = 0xCE


def raw_frame(kind: int, channel: int, payload: bytes, end: int = FRAME_END) -> bytes:
    """A frame of any type with any payload (and any end octet)."""
    return struct.pack(">BHI", kind, channel, len(payload)) + payload + bytes([end])


def method_bytes(channel: int, method: Any) -> bytes:
    return frame.marshal(method, channel)


def method_payload(method: Any) -> bytes:
    """A method frame's payload: class id, method id and the arguments."""
    return method_bytes(0, method)[7:-1]


def content_header_bytes(channel: int, size: int,
                         properties: commands.Basic.Properties | None = None) -> bytes:
    return frame.marshal(header.ContentHeader(0, size, properties or commands.Basic.Properties()),
                         channel)


def publish_bytes(channel: int, body: bytes, routing_key: str, exchange: str = "",
                  properties: commands.Basic.Properties | None = None) -> bytes:
    out = method_bytes(channel, commands.Basic.Publish(exchange=exchange, routing_key=routing_key))
    out += content_header_bytes(channel, len(body), properties)
    return out + (raw_frame(3, channel, body) if body else b"")


@dataclass
class Closed:
    """How a conversation ended: the close the server sent (channel, method), or an EOF."""

    channel: int = -1
    close: Any = None
    eof: bool = False

    @property
    def code(self) -> int | None:
        return None if self.close is None else int(self.close.reply_code)


class RawConnection:
    """One AMQP connection: `handshake` negotiates it; `send` writes bytes as they are."""

    def __init__(self, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buffer = b""
        self.frames: list[tuple[int, Any]] = []
        """Every frame read so far (channel, decoded)."""
        self.frame_max = 0

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_method(self, channel: int, method: Any) -> None:
        self.send(method_bytes(channel, method))

    def handshake(self, *, user: str = "guest", password: str = "guest", heartbeat: int = 0,
                  channel: int | None = 1, frame_max: int | None = None) -> None:
        self.send(PROTOCOL_HEADER)
        self.expect(commands.Connection.Start)
        self.send_method(0, commands.Connection.StartOk(
            client_properties={"capabilities": {"consumer_cancel_notify": True}},
            mechanism="PLAIN", response=f"\x00{user}\x00{password}", locale="en_US"))
        tune = self.expect(commands.Connection.Tune)
        self.frame_max = frame_max or tune.frame_max
        self.send_method(0, commands.Connection.TuneOk(channel_max=tune.channel_max,
                                                       frame_max=self.frame_max,
                                                       heartbeat=heartbeat))
        self.send_method(0, commands.Connection.Open(virtual_host="/"))
        self.expect(commands.Connection.OpenOk)
        if channel is not None:
            self.open_channel(channel)

    def open_channel(self, channel: int) -> None:
        self.send_method(channel, commands.Channel.Open())
        self.expect(commands.Channel.OpenOk, channel)

    def read(self, timeout: float = 10.0) -> tuple[int, Any]:
        """The next frame; EOFError when the server closed the socket."""
        deadline = time.monotonic() + timeout
        while True:
            if len(self.buffer) >= 7:
                size = struct.unpack_from(">I", self.buffer, 3)[0]
                if len(self.buffer) >= size + 8:
                    used, channel, decoded = frame.unmarshal(self.buffer)
                    self.buffer = self.buffer[used:]
                    self.frames.append((channel, decoded))
                    return channel, decoded
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no complete frame from the server")
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except ConnectionResetError:
                data = b""
            if not data:
                raise EOFError("the server closed the connection")
            self.buffer += data

    def expect(self, kind: type, channel: int | None = None, timeout: float = 10.0) -> Any:
        """The next frame that is not a heartbeat, which must be a `kind`."""
        while True:
            got_channel, got = self.read(timeout)
            if isinstance(got, Heartbeat):
                continue
            assert isinstance(got, kind), f"expected {kind.__name__}, got {got!r}"
            assert channel is None or got_channel == channel, (got_channel, got)
            return got

    def until_closed(self, timeout: float = 10.0, *, answer: bool = True) -> Closed:
        """Read until the server closes a channel or the connection (answering with close-ok
        when `answer`), or the socket."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                channel, got = self.read(max(deadline - time.monotonic(), 0.001))
            except EOFError:
                return Closed(eof=True)
            if isinstance(got, commands.Channel.Close | commands.Connection.Close):
                if answer:
                    ok = (commands.Channel.CloseOk() if isinstance(got, commands.Channel.Close)
                          else commands.Connection.CloseOk())
                    with contextlib.suppress(OSError):
                        self.send_method(channel, ok)
                return Closed(channel, got)

    def eof(self, timeout: float = 10.0) -> bool:
        """Whether the server closes the socket within `timeout` (discarding what comes)."""
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                self.sock.settimeout(max(deadline - time.monotonic(), 0.001))
                if not self.sock.recv(65536):
                    return True
        except TimeoutError:
            return False
        except OSError:
            return True
        return False

