"""The RabbitMQ back end's busiest frames, encoded and decoded without pamqp's generic walk.

Every message the back end moves costs a publish, a content header and a body frame out, and a
deliver, a content header, a body and a confirm in. pamqp encodes and decodes each field through a
type lookup by name (about 70 µs a message on a 2-core machine); here the frames the back end
moves in bulk are handled field by field with the types fixed:

* out: `publish_payload` writes `basic.publish` (the bytes of each exchange and routing key
  marshalled once by pamqp and kept), the content header and the body frames of a batch;
* in: `unmarshal` decodes `basic.deliver`, `basic.ack`, `basic.nack`, content headers of class
  basic and body frames into the very pamqp objects pamqp builds.

pamqp stays the reference: a frame of any other kind, any value outside the common shapes (a
second property flag word, a header value of another type, a key longer than pamqp allows) and
anything malformed goes to pamqp itself, so its objects, bytes and exceptions are what callers
get. The tests compare both on generated frames.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from datetime import UTC, datetime
from functools import lru_cache

import pamqp.frame
from pamqp import commands as spec
from pamqp import encode
from pamqp.body import ContentBody
from pamqp.header import ContentHeader

METHOD, HEADER, BODY = 1, 2, 3
FRAME_END = 0xCE
_END = b"\xce"
_HEAD = struct.Struct(">BHI")
_HEADER_START = struct.Struct(">BHIHHQH")
"""A content header frame's start: frame type, channel, size; class id, weight, body size;
the (single) property flag word."""
_U8 = struct.Struct(">B")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_I64 = struct.Struct(">q")
"""pamqp reads a longlong (a delivery tag) signed."""
_DELIVER = struct.Struct(">HH")
BASIC = spec.Basic.frame_id
_DELIVER_ID = spec.Basic.Deliver.index
_ACK_ID = spec.Basic.Ack.index
_NACK_ID = spec.Basic.Nack.index

_PROPERTIES = [
    (name, spec.Basic.Properties.flags[name], getattr(spec.Basic.Properties, "_" + name))
    for name in spec.Basic.Properties.__slots__
]
"""(name, flag, AMQP type) of every basic property, in wire order."""
_ENTRIES: dict[tuple[object, type, object], bytes] = {}
"""Encoded table entries by (key, value type, value): most repeat from message to message."""
_ENTRIES_MAX = 8192
_INTEGERS = {
    ord(code): struct.Struct(form)
    for code, form in (("b", ">b"), ("B", ">B"), ("s", ">h"), ("u", ">H"), ("I", ">l"),
                       ("i", ">L"), ("l", ">q"), ("L", ">q"))
}
"""Table value types decoded here, with pamqp's formats."""

Received = tuple[int, int, pamqp.frame.FrameTypes]
Item = tuple[str, str, bytes, spec.Basic.Properties]
"""(exchange, routing key, body, properties) of one mandatory publish."""


class _Fallback(Exception):
    """The fast path does not take this frame: pamqp decodes or encodes it."""


# --------------------------------------------------------------------------------------- out
@lru_cache(maxsize=1024)
def _publish_frame(channel: int, exchange: str, route: str) -> bytes:
    return pamqp.frame.marshal(
        spec.Basic.Publish(exchange=exchange, routing_key=route, mandatory=True), channel
    )


def publish_payload(channel: int, items: Iterable[Item], max_content: int) -> bytes:
    """The frames of a mandatory publish of every item (body frames of at most `max_content`
    bytes), as `pamqp.frame.marshal` writes them."""
    parts: list[bytes] = []
    pack_head = _HEAD.pack
    for exchange, route, body, props in items:
        parts.append(_publish_frame(channel, exchange, route))
        header = _U64.pack(len(body)) + properties(props)
        parts.append(pack_head(HEADER, channel, len(header) + 4))
        parts.append(b"\x00\x3c\x00\x00")
        parts.append(header)
        parts.append(_END)
        for start in range(0, len(body), max_content):
            piece = body[start : start + max_content]
            parts.append(pack_head(BODY, channel, len(piece)))
            parts.append(piece)
            parts.append(_END)
    return b"".join(parts)


def properties(props: spec.Basic.Properties) -> bytes:
    """`props.marshal()`: the flag word and every property set, in order."""
    flags = 0
    parts = [b""]
    for name, flag, kind in _PROPERTIES:
        value = getattr(props, name)
        if value is None or value == "":
            continue
        flags |= flag
        if kind == "shortstr" and type(value) is str:
            raw = value.encode()
            if len(raw) > 255:
                return bytes(props.marshal())
            parts.append(_U8.pack(len(raw)) + raw)
        elif kind == "table":
            parts.append(table(value))
        elif kind == "octet" and type(value) is int and 0 <= value <= 255:
            parts.append(_U8.pack(value))
        else:
            parts.append(encode.by_type(value, kind))
    parts[0] = struct.pack(">H", flags)
    return b"".join(parts)


def table(value: object) -> bytes:
    """`pamqp.encode.field_table(value)` (text and integer values written here, each key and
    value pair once and then kept; others by pamqp; anything pamqp would refuse, warn about or
    change is left to pamqp)."""
    if not value or not isinstance(value, dict):
        return encode.field_table(value)  # type: ignore[arg-type]
    try:
        parts = [_entry(key, item) for key, item in sorted(value.items())]
    except (_Fallback, TypeError, ValueError, UnicodeError, struct.error):
        return encode.field_table(value)
    output = b"".join(parts)
    return _U32.pack(len(output)) + output


def _entry(key: object, item: object) -> bytes:
    """One table entry: the key as a short string, the value with its type octet."""
    kind = type(item)
    if kind is not str and kind is not int:
        return _key(key) + encode.encode_table_value(item)  # type: ignore[arg-type]
    known = _ENTRIES.get((key, kind, item))
    if known is not None:
        return known
    entry: bytes
    if kind is str:
        raw: bytes = item.encode()  # type: ignore[attr-defined]
        entry = _key(key) + b"S" + _U32.pack(len(raw)) + raw
    else:
        entry = _key(key) + encode.table_integer(item)  # type: ignore[arg-type]
    if len(_ENTRIES) >= _ENTRIES_MAX:
        _ENTRIES.clear()
    _ENTRIES[(key, kind, item)] = entry
    return entry


def _key(key: object) -> bytes:
    if type(key) is not str:
        raise _Fallback
    raw = key.encode()
    if len(raw) > 128:
        raise _Fallback  # pamqp cuts it (with a warning)
    return _U8.pack(len(raw)) + raw


# ---------------------------------------------------------------------------------------- in
def unmarshal(data: bytes) -> Received:
    """`pamqp.frame.unmarshal(data)` of exactly one whole frame."""
    try:
        return _fast(data)
    except (_Fallback, IndexError, ValueError, UnicodeError, struct.error, OverflowError):
        return pamqp.frame.unmarshal(data)


def _fast(data: bytes) -> Received:
    kind, channel, size = _HEAD.unpack_from(data)
    end = 7 + size
    if size == 0 or len(data) != end + 1 or data[end] != FRAME_END:
        raise _Fallback  # a protocol header ("AMQP": type 0x41) falls through to pamqp below
    if kind == BODY:
        return end + 1, channel, ContentBody(data[7:end])
    if kind == METHOD:
        return end + 1, channel, _method(data, end)
    if kind == HEADER:
        return end + 1, channel, _header(data, end)
    raise _Fallback


def _method(data: bytes, end: int) -> spec.Basic.Deliver | spec.Basic.Ack | spec.Basic.Nack:
    index = _U32.unpack_from(data, 7)[0]
    pos = 11
    if index == _DELIVER_ID:
        deliver = spec.Basic.Deliver.__new__(spec.Basic.Deliver)
        deliver.consumer_tag, pos = _shortstr(data, pos, end)
        deliver.delivery_tag = _I64.unpack_from(data, pos)[0]
        deliver.redelivered = bool(data[pos + 8] & 1)
        deliver.exchange, pos = _shortstr(data, pos + 9, end)
        deliver.routing_key, pos = _shortstr(data, pos, end)
        if pos != end:
            raise _Fallback
        return deliver
    if index in (_ACK_ID, _NACK_ID):
        if end - pos != 9:
            raise _Fallback
        bits = data[pos + 8]
        if index == _ACK_ID:
            ack = spec.Basic.Ack.__new__(spec.Basic.Ack)
            ack.delivery_tag = _I64.unpack_from(data, pos)[0]
            ack.multiple = bool(bits & 1)
            return ack
        nack = spec.Basic.Nack.__new__(spec.Basic.Nack)
        nack.delivery_tag = _I64.unpack_from(data, pos)[0]
        nack.multiple = bool(bits & 1)
        nack.requeue = bool(bits & 2)
        return nack
    raise _Fallback


def _header(data: bytes, end: int) -> ContentHeader:
    _, _, _, class_id, weight, body_size, flags = _HEADER_START.unpack_from(data)
    if class_id != BASIC or flags & 1:
        raise _Fallback
    props = spec.Basic.Properties()
    pos = 21
    for name, flag, kind in _PROPERTIES:
        if not flags & flag:
            continue
        value: object
        if kind == "shortstr":
            value, pos = _shortstr(data, pos, end)
        elif kind == "octet":
            value, pos = data[pos], pos + 1
        elif kind == "table":
            value, pos = _table(data, pos, end)
        elif kind == "timestamp":
            stamp = _U64.unpack_from(data, pos)[0]
            value = datetime.fromtimestamp(stamp / 1000.0 if stamp > 0xFFFFFFFF else stamp, tz=UTC)
            pos += 8
        else:
            raise _Fallback
        if pos > end:
            raise _Fallback
        setattr(props, name, value)
    if pos != end:
        raise _Fallback
    header = ContentHeader(weight=weight, body_size=body_size, properties=props)
    header.class_id = class_id
    return header


def _table(data: bytes, pos: int, end: int) -> tuple[dict[str, object], int]:
    """A field table of text, integer and boolean values (any other type: `_Fallback`)."""
    stop = pos + 4 + _U32.unpack_from(data, pos)[0]
    if stop > end:
        raise _Fallback
    pos += 4
    table: dict[str, object] = {}
    while pos < stop:
        key, pos = _shortstr(data, pos, stop)
        code = data[pos]
        value: object
        if code == 0x53:  # S
            start = pos + 5
            pos = start + _U32.unpack_from(data, pos + 1)[0]
            raw = data[start:pos]
            try:
                value = raw.decode()
            except UnicodeDecodeError:
                value = raw
        elif code == 0x74:  # t
            value, pos = bool(data[pos + 1]), pos + 2
        else:
            form = _INTEGERS.get(code)
            if form is None:
                raise _Fallback
            value = form.unpack_from(data, pos + 1)[0]
            pos += 1 + form.size
        if pos > stop:
            raise _Fallback
        table[key] = value
    return table, stop


def _shortstr(data: bytes, pos: int, end: int) -> tuple[str, int]:
    length = data[pos]
    stop = pos + 1 + length
    if stop > end:
        raise _Fallback
    return data[pos + 1 : stop].decode(), stop
