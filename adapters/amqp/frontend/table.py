"""Message headers (the content header's field table) decoded and encoded without losing what a
client sent: pamqp's own table codec gives a double and a float the same Python type and writes
every float back as a float (a double of 1e300 cannot be written at all, 0.1 comes back as
0.10000000149011612), gives a long string that is not UTF-8 back as a byte array, and cuts
field names longer than 128 bytes. Here a double decodes to `Double` and a non-UTF-8 long string
to `LongBytes`, both written back with their own type octets, and names of up to 255 bytes (what
a short string holds, and what a broker passes on) stay whole. Every other value goes through
pamqp's codecs, so integers, decimals, timestamps, booleans and byte arrays are what they were.

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


# ---------------------------------------------------------------------------------- decode
def decode_table(data: bytes) -> tuple[int, dict[str, Any]]:
    """(bytes consumed, the table) of a length-prefixed field table at the start of `data`."""
    (length,) = _U32.unpack_from(data, 0)
    end = 4 + length
    if end > len(data):
        raise ValueError("field table length exceeds available data")
    out: dict[str, Any] = {}
    pos = 4
    while pos < end:
        size = data[pos]
        pos += 1
        if pos + size > end:
            raise ValueError("field table key length exceeds data")
        key = data[pos:pos + size].decode("utf-8")
        pos += size
        pos, out[key] = _value(data, pos)
    return end, out


def _array(data: bytes, pos: int) -> tuple[int, list[Any]]:
    (length,) = _U32.unpack_from(data, pos)
    end = pos + 4 + length
    if end > len(data):
        raise ValueError("field array length exceeds available data")
    items: list[Any] = []
    pos += 4
    while pos < end:
        pos, item = _value(data, pos)
        items.append(item)
    return end, items


def _value(data: bytes, pos: int) -> tuple[int, Any]:
    """(position after it, the value) of the typed value at `pos`."""
    kind = data[pos:pos + 1]
    pos += 1
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
        used, table = decode_table(data[pos:])
        return pos + used, table
    if kind == b"A":
        return _array(data, pos)
    try:
        decoder = decode.TABLE_MAPPING[kind]
    except KeyError:
        raise ValueError(f"unknown field type {kind!r}") from None
    used, value = decoder(data[pos:])
    return pos + used, value


# ---------------------------------------------------------------------------------- encode
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
