"""AMQP 0-9-1 framing: bytes from the socket into frames, frames out into bytes.

Method and content-header fields are decoded and encoded by pamqp's field codecs, in the field
order and with the types pamqp declares for each method (looked up once per class), every length
checked against the frame, and tables bounded by `guard` before pamqp decodes them; pamqp's own
name pattern (narrower than the specification's) is not applied. A message's headers and its
timestamp go through `table`, which keeps every value as it was sent. A
body frame's payload is the message's bytes as they are. The reader enforces the negotiated
frame size before it buffers a frame and checks every frame-end octet.
"""

from __future__ import annotations

import struct
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar

from pamqp import commands, encode
from pamqp import decode as decode_field
from pamqp.base import Frame

from adapters.amqp.frontend import guard, table
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
    size: int = 0
    """The frame's payload in bytes (what its properties cost to hold)."""
    weight: int = 0
    """Unused by 0-9-1: must be 0."""


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

    def feed(self, data: bytes) -> Generator[Incoming, None, None]:
        """The complete frames in what arrived so far; raises AMQPError for a malformed one
        (what came before it is yielded first)."""
        if self.broken:
            return
        if self._buffer:  # the start of a frame arrived before
            buffer = self._buffer
            buffer += data
            if len(buffer) < HEADER_SIZE:
                return
            kind, _, size = _HEAD.unpack_from(buffer, 0)
            if size + OVERHEAD > self.frame_max:
                raise self._oversize(kind, size)
            if len(buffer) <= HEADER_SIZE + size:
                return  # still incomplete (nothing copied while a frame trickles in)
            data = bytes(buffer)
            buffer.clear()
        pos, length = 0, len(data)
        try:
            while length - pos >= HEADER_SIZE:
                kind, channel, size = _HEAD.unpack_from(data, pos)
                if size + OVERHEAD > self.frame_max:
                    raise self._oversize(kind, size)
                end = pos + HEADER_SIZE + size
                if length <= end:
                    break
                if data[end] != FRAME_END:
                    self._break()
                    raise AMQPError(FRAME_ERROR, f"type {kind}: invalid frame end octet "
                                                 f"{data[end]:#04x}")
                payload = data[pos + HEADER_SIZE:end]
                pos = end + 1
                yield decode(kind, channel, payload)
        finally:
            if pos < length and not self.broken:
                self._buffer += data[pos:]

    def keep(self, data: bytes) -> None:
        """Buffer what arrived without reading frames from it yet (frames buffered before it
        are still to be read: `feed(b"")` reads on, in order)."""
        if not self.broken:
            self._buffer += data

    def _oversize(self, kind: int, size: int) -> AMQPError:
        self._break()
        return AMQPError(FRAME_ERROR, f"type {kind}, frame of {size + OVERHEAD} bytes; "
                                      f"frame_max is {self.frame_max}")

    def _break(self) -> None:
        self.broken = True
        self._buffer.clear()


FRAME_WORK = 10
VALUE_WORK = 2
"""What reading a frame costs, in units of about a microsecond of one core: a frame decoded and
handled, and each header value in a content header (at every depth) decoded and checked; a
frame's bytes count one unit per 64 (tables in method frames, bodies copied)."""


def work(incoming: Incoming) -> int:
    """The units reading `incoming` took: what one turn of reading a connection is charged."""
    if isinstance(incoming, ContentHeader):
        headers = incoming.properties.headers
        values = int(getattr(headers, "entries", len(headers))) if headers else 0
        return FRAME_WORK + VALUE_WORK * values + (incoming.size >> 6)
    if isinstance(incoming, Body):
        return FRAME_WORK + (len(incoming.payload) >> 6)
    return FRAME_WORK


def _undecodable(what: str, exc: Exception, ids: tuple[int, int] = (0, 0)) -> AMQPError:
    """What pamqp could not decode in a frame `guard` found well formed: text that is not UTF-8
    (FRAME_ERROR, as RabbitMQ answers) or a value out of its range, such as a timestamp beyond
    the year 9999 (SYNTAX_ERROR: a field holds an illegal value)."""
    code = FRAME_ERROR if isinstance(exc, UnicodeDecodeError) else SYNTAX_ERROR
    reason = exc.reason if isinstance(exc, UnicodeDecodeError) else str(exc)
    return AMQPError(code, f"cannot decode {what}: {type(exc).__name__}"
                           + (f" ({reason})" if reason else ""), ids)


def decode(kind: int, channel: int, payload: bytes) -> Incoming:
    """One frame's payload, decoded."""
    if kind == METHOD:
        cls = guard.method_class(payload)
        fields, tables = guard.layout(cls)
        if tables:
            guard.check_method(payload)  # every length, and the tables bounded
        try:
            return Method(channel, _unmarshal(cls, fields, payload))
        except AMQPError:
            raise
        except Exception as exc:  # pamqp raises ValueError, struct.error, UnicodeDecodeError
            ids: tuple[int, int] = struct.unpack_from(">HH", payload, 0)
            raise _undecodable(cls.name, exc, ids) from None
    if kind == HEADER:
        flags, pos = guard.check_content_header(payload)
        try:
            return _unmarshal_header(channel, payload, flags, pos)
        except Exception as exc:
            raise _undecodable("a content header", exc) from None
    if kind == BODY:
        return Body(channel, payload)
    if kind == HEARTBEAT:
        if payload:  # RabbitMQ: FRAME_ERROR for a heartbeat with a payload
            raise AMQPError(FRAME_ERROR, "a heartbeat frame must be empty")
        if channel:
            raise AMQPError(UNEXPECTED_FRAME, "a heartbeat frame must be on channel 0")
        return Heartbeat(channel)
    raise AMQPError(FRAME_ERROR, f"unknown frame type {kind}")


_DECODERS = decode_field.METHODS
_LEAST = {"octet": 1, "short": 2, "long": 4, "longlong": 8, "timestamp": 8, "shortstr": 1,
          "longstr": 4, "table": 4}
"""The bytes a field of each type takes at least (a string's or a table's length)."""


def _unmarshal(cls: type[Frame], fields: guard.Layout, payload: bytes) -> Frame:
    """A method's fields decoded one by one by pamqp's decoders (what `Frame.unmarshal` does,
    with the field types looked up once per class, and each length checked against the frame:
    pamqp decodes a string cut short by the frame's end without a word)."""
    method = cls.__new__(cls)
    end = len(payload)
    pos, octet, bit = 4, b"", 8
    for name, kind in fields:
        if kind == "bit":
            if bit == 8:
                if pos >= end:
                    raise _cut(cls)
                octet, pos, bit = payload[pos:pos + 1], pos + 1, 0
            setattr(method, name, decode_field.bit(octet, bit)[1])
            bit += 1
            continue
        bit = 8
        if pos + _LEAST[kind] > end:
            raise _cut(cls)
        consumed, value = _DECODERS[kind](payload[pos:])
        pos += consumed
        if pos > end:
            raise _cut(cls)
        setattr(method, name, value)
    if pos < end:  # RabbitMQ: FRAME_ERROR, a method frame that does not decode
        raise AMQPError(FRAME_ERROR, f"cannot decode {cls.name}: {end - pos} bytes after its "
                                     "last field", _ids_of(cls))
    return method


def _unmarshal_header(channel: int, payload: bytes, flags: int, pos: int) -> ContentHeader:
    """A content header `guard` walked (its property flags, and where the properties start),
    its properties decoded one by one by pamqp's decoders (what `ContentHeader.unmarshal`
    does)."""
    class_id, weight, body_size = _CONTENT_START.unpack_from(payload, 0)
    properties = commands.Basic.Properties.__new__(commands.Basic.Properties)
    for name, kind, flag in _PROPERTIES:
        value: Any = None
        if flags & flag:
            decoder = _HEADER_DECODERS.get(name) or _DECODERS[kind]
            consumed, value = decoder(payload[pos:])
            pos += consumed
        setattr(properties, name, value)
    return ContentHeader(channel, body_size, properties, class_id, len(payload), weight)


def _ids_of(cls: type[Frame]) -> tuple[int, int]:
    ids: tuple[int, int] = divmod(int(getattr(cls, "index", 0)), 0x10000)
    return ids


def _cut(cls: type[Frame]) -> AMQPError:
    return AMQPError(FRAME_ERROR, f"cannot decode {cls.name}: a field runs past the end of the "
                                  "frame", _ids_of(cls))


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
    for name, kind in guard.layout(type(method))[0]:
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
        out.append(_ENCODERS[kind](value))
    if count:
        out.append(bytes((bits,)))
    return b"".join(out)


_ENCODERS = encode.METHODS
_PROPERTIES = tuple((name, commands.Basic.Properties.amqp_type(name),
                     commands.Basic.Properties.flags[name])
                    for name in commands.Basic.Properties.__slots__)
_HEADER_DECODERS: dict[str, Any] = {"headers": table.decode_table,
                                     "timestamp": table.decode_stamp}
_HEADER_ENCODERS: dict[str, Any] = {"headers": table.encode_table,
                                     "timestamp": table.encode_stamp}
"""The properties `table` decodes and encodes (as sent), not pamqp."""
_CONTENT = struct.Struct(">HHQH")
_CONTENT_START = struct.Struct(">HHQ")
PropertyValues: TypeAlias = "commands.Basic.Properties | Mapping[str, Any]"
"""Basic properties: pamqp's object, or its attribute names and values."""


def content_header(channel: int, properties: PropertyValues, size: int) -> bytes:
    """A content header frame (class 60) for a body of `size` bytes, its properties encoded by
    pamqp's encoders (what `ContentHeader.marshal` gives; the 14 flags fit one flag word)."""
    values = properties if isinstance(properties, Mapping) else {
        name: getattr(properties, name) for name, _, _ in _PROPERTIES}
    flags = 0
    parts = []
    for name, kind, flag in _PROPERTIES:
        value = values.get(name)
        if value is None or value == "":
            continue
        flags |= flag
        parts.append((_HEADER_ENCODERS.get(name) or _ENCODERS[kind])(value))
    payload = _CONTENT.pack(60, 0, size, flags) + b"".join(parts)
    return b"".join((_HEAD.pack(HEADER, channel, len(payload)), payload, b"\xce"))


def content_frames(channel: int, properties: PropertyValues, body: bytes,
                   frame_max: int) -> list[bytes]:
    """A content header and the body frames a message needs under `frame_max`."""
    out = [content_header(channel, properties, len(body))]
    step = frame_max - OVERHEAD
    if 0 < len(body) <= step:
        out += (_HEAD.pack(BODY, channel, len(body)), body, b"\xce")
        return out
    view = memoryview(body)
    for start in range(0, len(body), step):
        chunk = view[start:start + step]
        out.append(_HEAD.pack(BODY, channel, len(chunk)))
        out.append(bytes(chunk))
        out.append(b"\xce")
    return out
