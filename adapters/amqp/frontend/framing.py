"""AMQP 0-9-1 framing: bytes from the socket into frames, frames out into bytes.

Method and content-header frames are decoded and encoded by pamqp (after `guard` bounded their
tables); a body frame's payload is the message's bytes as they are. The reader enforces the
negotiated frame size before it buffers a frame and checks every frame-end octet.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypeVar

from pamqp import commands, encode, frame, header
from pamqp.base import Frame

from adapters.amqp.frontend import guard
from adapters.amqp.frontend.errors import FRAME_ERROR, SYNTAX_ERROR, UNEXPECTED_FRAME, AMQPError

METHOD = 1
HEADER = 2
BODY = 3
HEARTBEAT = 8
FRAME_END = 0xCE
HEADER_SIZE = 7
OVERHEAD = HEADER_SIZE + 1
PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
HEARTBEAT_FRAME = struct.pack(">BHI", HEARTBEAT, 0, 0) + bytes([FRAME_END])
_HEAD = struct.Struct(">BHI")
_INDEX = struct.Struct(">I")


@dataclass(slots=True)
class Method:
    channel: int
    method: Frame


@dataclass(slots=True)
class ContentHeader:
    channel: int
    body_size: int
    properties: commands.Basic.Properties
    class_id: int


@dataclass(slots=True)
class Body:
    channel: int
    payload: bytes


@dataclass(slots=True)
class Heartbeat:
    channel: int


Incoming = Method | ContentHeader | Body | Heartbeat


class FrameReader:
    """Splits the byte stream into frames. `frame_max` (the whole frame, header and end octet
    included) is checked as soon as a frame's size is known, before its payload is buffered."""

    def __init__(self, frame_max: int) -> None:
        self.frame_max = frame_max
        self._buffer = bytearray()
        self.broken = False
        """A frame's size or end octet was wrong: the stream has no frame boundaries any more,
        and everything that arrives after is discarded (never buffered)."""

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def feed(self, data: bytes) -> Iterator[Incoming]:
        """The complete frames in what arrived so far; raises AMQPError for a malformed one
        (what came before it is yielded first)."""
        if self.broken:
            return
        buffer = self._buffer
        buffer += data
        pos = 0
        try:
            while len(buffer) - pos >= HEADER_SIZE:
                kind, channel, size = _HEAD.unpack_from(buffer, pos)
                if size + OVERHEAD > self.frame_max:
                    self._break()
                    raise AMQPError(FRAME_ERROR, f"type {kind}, frame of {size + OVERHEAD} "
                                                 f"bytes; frame_max is {self.frame_max}")
                end = pos + HEADER_SIZE + size
                if len(buffer) <= end:
                    break
                if buffer[end] != FRAME_END:
                    error = AMQPError(FRAME_ERROR, f"type {kind}: invalid frame end octet "
                                                   f"{buffer[end]:#04x}")
                    self._break()
                    raise error
                payload = bytes(buffer[pos + HEADER_SIZE:end])
                pos = end + 1
                yield decode(kind, channel, payload)
        finally:
            del buffer[:pos]

    def _break(self) -> None:
        self.broken = True
        self._buffer.clear()


def _undecodable(what: str, exc: Exception, ids: tuple[int, int] = (0, 0)) -> AMQPError:
    """What pamqp could not decode in a frame `guard` found well formed: text that is not UTF-8
    (FRAME_ERROR, as RabbitMQ answers) or a value out of its range, such as a timestamp beyond
    the year 9999 (SYNTAX_ERROR: a field holds an illegal value)."""
    code = FRAME_ERROR if isinstance(exc, UnicodeDecodeError) else SYNTAX_ERROR
    return AMQPError(code, f"cannot decode {what}: {type(exc).__name__}", ids)


def decode(kind: int, channel: int, payload: bytes) -> Incoming:
    """One frame's payload, decoded."""
    if kind == METHOD:
        cls = guard.check_method(payload)
        method = cls()
        try:
            method.unmarshal(payload[4:])
        except Exception as exc:  # pamqp raises ValueError, struct.error, UnicodeDecodeError
            ids: tuple[int, int] = struct.unpack_from(">HH", payload, 0)
            raise _undecodable(cls.name, exc, ids) from None
        return Method(channel, method)
    if kind == HEADER:
        guard.check_content_header(payload)
        content = header.ContentHeader()
        try:
            content.unmarshal(payload)
        except Exception as exc:
            raise _undecodable("a content header", exc) from None
        return ContentHeader(channel, content.body_size, content.properties,
                             content.class_id or 0)
    if kind == BODY:
        return Body(channel, payload)
    if kind == HEARTBEAT:
        if payload or channel:
            raise AMQPError(UNEXPECTED_FRAME, "a heartbeat frame must be empty, on channel 0")
        return Heartbeat(channel)
    raise AMQPError(FRAME_ERROR, f"unknown frame type {kind}")


M = TypeVar("M", bound=Frame)


def reply(cls: type[M], **values: object) -> M:
    """A method to send, built without pamqp's name check: names the gateway serves (checked at
    its edge) may hold characters pamqp's pattern leaves out, such as RocketMQ's `%DLQ%g`."""
    method = cls()
    for name, value in values.items():
        setattr(method, name, value)
    return method


def method_frame(channel: int, method: Frame) -> bytes:
    """A method frame, its fields encoded by pamqp's encoders without pamqp's check of names
    (`Frame.marshal` checks them against a narrower pattern than the specification's: a queue
    named `orders!` or an exchange name of 200 bytes, both served, would not encode)."""
    payload = _INDEX.pack(method.index) + _fields(method)
    return b"".join((_HEAD.pack(METHOD, channel, len(payload)), payload, b"\xce"))


def _fields(method: Frame) -> bytes:
    out: list[bytes] = []
    bits = count = 0
    for name, kind in _layout(type(method)):
        value = getattr(method, name)
        if kind == "bit":
            bits |= bool(value) << count
            count += 1
            if count == 8:
                out.append(bytes((bits,)))
                bits = count = 0
            continue
        if count:
            out.append(bytes((bits,)))
            bits = count = 0
        out.append(encode.by_type(value, kind))
    if count:
        out.append(bytes((bits,)))
    return b"".join(out)


_LAYOUTS: dict[int, tuple[tuple[str, str], ...]] = {}


def _layout(cls: type[Frame]) -> tuple[tuple[str, str], ...]:
    """A method's fields in wire order, with their AMQP types."""
    index: int = getattr(cls, "index", 0)
    found = _LAYOUTS.get(index)
    if found is None:
        found = _LAYOUTS[index] = tuple((name, cls.amqp_type(name)) for name in cls.__slots__)
    return found


def content_frames(channel: int, properties: commands.Basic.Properties, body: bytes,
                   frame_max: int) -> list[bytes]:
    """A content header and the body frames a message needs under `frame_max`."""
    out = [frame.marshal(header.ContentHeader(0, len(body), properties), channel)]
    step = frame_max - OVERHEAD
    view = memoryview(body)
    for start in range(0, len(body), step):
        chunk = view[start:start + step]
        out.append(_HEAD.pack(BODY, channel, len(chunk)))
        out.append(bytes(chunk))
        out.append(b"\xce")
    return out
