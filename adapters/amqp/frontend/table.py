"""Message headers (the content header's field table) decoded and encoded without changing
what a client sent. pamqp's own table codec gives a double and a float the same Python type and
writes every float back as a float (a double of 1e300 cannot be written at all, 0.1 comes back
as 0.10000000149011612), writes every integer back in the smallest type that holds it (a long
5 comes back a byte), reads 'L' as signed (2**64-1 comes back -1), reads a timestamp of 2**32 or
more as milliseconds, gives a long string that is not UTF-8 back as a byte array, and cuts field
names longer than 128 bytes. Here each of those values decodes to a type of its own that
remembers its wire type (`Double`, the integer types of `INTEGERS`, `Stamp`, `LongBytes`) and is
written back with it; names of up to 255 bytes (what a short string holds, and what a broker
passes on) stay whole, and a name that comes twice is reported (`Headers.duplicates`), as a
dictionary cannot hold both. Booleans, decimals, voids and byte arrays go through pamqp's codecs.

Tables reach the decoder only after `guard` walked them (lengths, depth, types).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping
from typing import Any

from pamqp import decode, encode

_U8 = struct.Struct(">B")
_U32 = struct.Struct(">I")
_DOUBLE = struct.Struct(">d")
_FLOAT = struct.Struct(">f")


class Double(float):
    """A header value a client sent as a double ('d')."""

    __slots__ = ()


class LongBytes(bytes):
    """A long-string header value ('S') that is not UTF-8: its bytes, written back as 'S'."""

    __slots__ = ()


class Stamp(int):
    """A timestamp ('T' header, or the `timestamp` property): seconds as sent, any 64 bits."""

    __slots__ = ()


class TypedInt(int):
    """An integer header value that keeps its wire type (`TAG`, packed with `FORMAT`)."""

    __slots__ = ()
    TAG: bytes = b""
    FORMAT: struct.Struct = struct.Struct(">q")
    NAME: str = ""


def _integer(tag: bytes, fmt: str, name: str) -> type[TypedInt]:
    return type(name, (TypedInt,), {"__slots__": (), "TAG": tag, "FORMAT": struct.Struct(fmt),
                                    "NAME": name.lower()})


INTEGERS: dict[bytes, type[TypedInt]] = {
    tag: _integer(tag, fmt, name) for tag, fmt, name in (
        (b"b", ">b", "Int8"), (b"B", ">B", "UInt8"), (b"s", ">h", "Int16"),
        (b"u", ">H", "UInt16"), (b"I", ">i", "Int32"), (b"i", ">I", "UInt32"),
        (b"l", ">q", "Int64"), (b"L", ">Q", "UInt64"))
}
"""The integer types of a field table by type octet ('L': unsigned, as the specification has
it)."""
BY_NAME: dict[str, type[TypedInt]] = {cls.NAME: cls for cls in INTEGERS.values()}
_STAMP = struct.Struct(">Q")


class Headers(dict[str, Any]):
    """A decoded table; `duplicates`: names that came more than once (the last value kept);
    `entries`: how many values it holds at every depth (what it costs to keep)."""

    __slots__ = ("duplicates", "entries")

    def __init__(self) -> None:
        super().__init__()
        self.duplicates: list[str] = []
        self.entries = 0


# ---------------------------------------------------------------------------------- decode
def decode_table(data: bytes) -> tuple[int, Headers]:
    """(bytes consumed, the table) of a length-prefixed field table at the start of `data`;
    a name that comes twice, at any depth, is listed in the top table's `duplicates`, and every
    value at every depth is counted in its `entries`."""
    top = Headers()
    used, out = _table(data, top)
    out.duplicates, out.entries = top.duplicates, top.entries
    return used, out


def _table(data: bytes, top: Headers) -> tuple[int, Headers]:
    (length,) = _U32.unpack_from(data, 0)
    end = 4 + length
    if end > len(data):
        raise ValueError("field table length exceeds available data")
    out = Headers()
    duplicates = top.duplicates
    pos = 4
    while pos < end:
        size = data[pos]
        pos += 1
        if pos + size > end:
            raise ValueError("field table key length exceeds data")
        raw = bytes(data[pos:pos + size])
        try:
            key = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise UnicodeDecodeError("utf-8", raw, exc.start, exc.end,
                                     "a header name is not UTF-8") from None
        pos += size
        if key in out:
            duplicates.append(key)
        pos, out[key] = _value(data, pos, top)
    return end, out


def _array(data: bytes, pos: int, top: Headers) -> tuple[int, list[Any]]:
    (length,) = _U32.unpack_from(data, pos)
    end = pos + 4 + length
    if end > len(data):
        raise ValueError("field array length exceeds available data")
    items: list[Any] = []
    pos += 4
    while pos < end:
        pos, item = _value(data, pos, top)
        items.append(item)
    return end, items


def _value(data: bytes, pos: int, top: Headers) -> tuple[int, Any]:
    """(position after it, the value) of the typed value at `pos` (counted in `top`)."""
    top.entries += 1
    kind = data[pos:pos + 1]
    pos += 1
    integer = INTEGERS.get(kind)
    if integer is not None:
        return pos + integer.FORMAT.size, integer(integer.FORMAT.unpack_from(data, pos)[0])
    if kind == b"T":
        return pos + 8, Stamp(_STAMP.unpack_from(data, pos)[0])
    if kind == b"d":
        return pos + 8, Double(_DOUBLE.unpack_from(data, pos)[0])
    if kind == b"S":
        (size,) = _U32.unpack_from(data, pos)
        raw = bytes(data[pos + 4:pos + 4 + size])
        if len(raw) != size:
            raise ValueError("long string exceeds available data")
        try:
            return pos + 4 + size, raw.decode("utf-8")
        except UnicodeDecodeError:
            return pos + 4 + size, LongBytes(raw)
    if kind == b"F":
        used, table = _table(data[pos:], top)
        return pos + used, table
    if kind == b"A":
        return _array(data, pos, top)
    try:
        decoder = decode.TABLE_MAPPING[kind]
    except KeyError:
        raise ValueError(f"unknown field type {kind!r}") from None
    used, value = decoder(data[pos:])
    return pos + used, value


def decode_stamp(data: bytes) -> tuple[int, Stamp]:
    """The `timestamp` property: 64 bits of seconds, as sent (pamqp divides values of 2**32 and
    more by 1000, taking them for milliseconds)."""
    return 8, Stamp(_STAMP.unpack_from(data, 0)[0])


# ---------------------------------------------------------------------------------- encode
def encode_stamp(value: Any) -> bytes:
    """The `timestamp` property: an integer as it is (0..2**64-1), a datetime by pamqp."""
    if isinstance(value, int) and not isinstance(value, bool):
        return _STAMP.pack(value)
    return encode.timestamp(value)



def encode_table(table: Mapping[str, Any] | None) -> bytes:
    """The length-prefixed field table of `table` (an empty one for None)."""
    if not table:
        return _U32.pack(0)
    parts: list[bytes] = []
    for key, value in sorted(table.items()):  # in name order, as pamqp writes tables
        name = str(key).encode("utf-8")
        if len(name) > 255:
            raise TypeError(f"header name of {len(name)} bytes (a short string holds 255)")
        parts.append(_U8.pack(len(name)) + name + _encode_value(value))
    payload = b"".join(parts)
    return _U32.pack(len(payload)) + payload


def _encode_value(value: Any) -> bytes:
    if isinstance(value, TypedInt):
        return value.TAG + value.FORMAT.pack(value)
    if isinstance(value, Stamp):
        return b"T" + _STAMP.pack(value)
    if isinstance(value, Double):
        return b"d" + _DOUBLE.pack(value)
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, LongBytes):
        return b"S" + _U32.pack(len(value)) + value
    if isinstance(value, Mapping):
        return b"F" + encode_table(value)
    if isinstance(value, list | tuple):
        items = b"".join(_encode_value(item) for item in value)
        return b"A" + _U32.pack(len(items)) + items
    return encode.encode_table_value(value)


def _float(value: float) -> bytes:
    """A float as a float where that holds it exactly (as every float a client sent as 'f'
    does), else as a double: never an overflow, never a changed value."""
    try:
        packed = _FLOAT.pack(value)
    except (OverflowError, struct.error):
        return b"d" + _DOUBLE.pack(value)
    same = _FLOAT.unpack(packed)[0] == value or (math.isnan(value))
    return b"f" + packed if same else b"d" + _DOUBLE.pack(value)
