"""A linear pre-scan of the frames pamqp will decode, bounding their field tables.

pamqp decodes (`gateway` never encodes or decodes AMQP by hand), but its table decoder copies the
rest of the frame for every table entry and array element, and recurses into nested tables: a
130 KB content header holding one array of 130,000 void values takes seconds of CPU, and a
deeply nested table raises RecursionError. Before a method or content-header frame goes to
pamqp, this walks it once, with the field types pamqp itself declares for each method, checks
every length against the frame, and refuses tables with too many entries, too deep a nesting,
or a decoding cost (bytes pamqp would copy) above the budget. It builds no values.
"""

from __future__ import annotations

import struct

from pamqp import commands
from pamqp.base import Frame

from adapters.amqp.frontend.errors import (
    FRAME_ERROR,
    INTERNAL_ERROR,
    NOT_IMPLEMENTED,
    RESOURCE_ERROR,
    AMQPError,
)

MAX_ENTRIES = 4096
"""Table entries and array elements in one frame, at every depth together."""
MAX_DEPTH = 16
"""Tables and arrays nested in one another."""
MAX_COST = 32 << 20
"""Bytes pamqp may copy while decoding one frame's tables (about 10 ms of CPU)."""

_FIXED = {
    "octet": 1, "short": 2, "long": 4, "longlong": 8, "timestamp": 8,
}
_VALUE_SIZES = {
    b"t": 1, b"b": 1, b"B": 1, b"s": 2, b"u": 2, b"I": 4, b"i": 4, b"l": 8, b"L": 8,
    b"f": 4, b"d": 8, b"D": 5, b"T": 8, b"V": 0, b"\x00": 0,
}
_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")
_PROPERTY_TYPES = [
    commands.Basic.Properties.amqp_type(name) for name in commands.Basic.Properties.__slots__
]
_PROPERTY_FLAGS = [commands.Basic.Properties.flags[name]
                   for name in commands.Basic.Properties.__slots__]


class _Scan:
    def __init__(self, data: bytes, where: str) -> None:
        self.data = data
        self.end = len(data)
        self.where = where
        self.entries = 0
        self.cost = 0

    def fail(self, why: str) -> AMQPError:
        return AMQPError(FRAME_ERROR, f"cannot decode {self.where}: {why}")

    def need(self, pos: int, size: int) -> int:
        if size < 0 or pos + size > self.end:
            raise self.fail("a field runs past the end of the frame")
        return pos + size

    def field(self, pos: int, kind: str) -> int:
        if kind in _FIXED:
            return self.need(pos, _FIXED[kind])
        if kind == "shortstr":
            self.need(pos, 1)
            return self.need(pos + 1, self.data[pos])
        if kind == "longstr":
            self.need(pos, 4)
            return self.need(pos + 4, _U32.unpack_from(self.data, pos)[0])
        if kind == "table":
            return self.table(pos, 1)
        raise self.fail(f"unknown field type {kind}")

    def table(self, pos: int, depth: int) -> int:
        self.need(pos, 4)
        length = _U32.unpack_from(self.data, pos)[0]
        stop = self.need(pos + 4, length)
        pos += 4
        while pos < stop:
            self.need(pos, 1)
            key = self.data[pos]
            pos = self.need(pos + 1, key)
            if pos > stop:
                raise self.fail("a table key runs past its table")
            pos = self.value(pos, depth, stop)
        return stop

    def array(self, pos: int, depth: int) -> int:
        self.need(pos, 4)
        length = _U32.unpack_from(self.data, pos)[0]
        stop = self.need(pos + 4, length)
        pos += 4
        while pos < stop:
            pos = self.value(pos, depth, stop)
        return stop

    def value(self, pos: int, depth: int, stop: int) -> int:
        self.entries += 1
        # pamqp slices the rest of the frame twice per value.
        self.cost += 2 * (self.end - pos)
        if self.entries > MAX_ENTRIES or self.cost > MAX_COST:
            raise AMQPError(RESOURCE_ERROR, f"{self.where}: field tables too large (more than "
                                            f"{MAX_ENTRIES} entries or too costly to decode)")
        tag = self.data[pos:pos + 1]
        if not tag:
            raise self.fail("a table value has no type")
        pos += 1
        if tag in _VALUE_SIZES:
            end = self.need(pos, _VALUE_SIZES[tag])
        elif tag in (b"S", b"x"):
            self.need(pos, 4)
            end = self.need(pos + 4, _U32.unpack_from(self.data, pos)[0])
        elif tag in (b"F", b"A"):
            if depth >= MAX_DEPTH:
                raise AMQPError(RESOURCE_ERROR, f"{self.where}: field tables nested more than "
                                                f"{MAX_DEPTH} deep")
            end = self.table(pos, depth + 1) if tag == b"F" else self.array(pos, depth + 1)
        else:
            raise self.fail(f"unknown field value type {tag!r}")
        if end > stop:
            raise self.fail("a table value runs past its table")
        return end


def check_table(data: bytes, where: str) -> None:
    """Walk a field table (with its length prefix) that is decoded on its own."""
    _Scan(data, where).table(0, 1)


def method_class(payload: bytes) -> type[Frame]:
    """The pamqp class of a method frame's payload, checked; unknown ones are refused."""
    if len(payload) < 4:
        raise AMQPError(FRAME_ERROR, "a method frame shorter than its class and method ids")
    class_id, method_id = struct.unpack_from(">HH", payload, 0)
    found = commands.INDEX_MAPPING.get((class_id << 16) | method_id)
    if found is None:
        raise AMQPError(NOT_IMPLEMENTED, f"unknown method {class_id}/{method_id}",
                        (class_id, method_id))
    cls: type[Frame] = found
    return cls


Layout = tuple[tuple[str, str], ...]
_LAYOUTS: dict[int, tuple[Layout, bool]] = {}


def layout(cls: type[Frame]) -> tuple[Layout, bool]:
    """A method's fields in wire order with their AMQP types (pamqp's declarations), and
    whether one is a field table (a frame that must be walked before pamqp decodes it)."""
    index: int = getattr(cls, "index", 0)
    found = _LAYOUTS.get(index)
    if found is None:
        fields = tuple((name, cls.amqp_type(name)) for name in cls.__slots__)
        found = _LAYOUTS[index] = (fields, any(kind == "table" for _, kind in fields))
    return found


def check_method(payload: bytes) -> type[Frame]:
    """Walk a method frame's fields; returns its pamqp class."""
    cls = method_class(payload)
    scan = _Scan(payload, cls.name)
    pos, bits = 4, 0
    for _, kind in layout(cls)[0]:
        if kind == "bit":
            if bits % 8 == 0:
                pos = scan.need(pos, 1)
            bits += 1
            continue
        bits = 0
        pos = scan.field(pos, kind)
    return cls


def check_content_header(payload: bytes) -> tuple[int, int]:
    """Walk a content header frame: class, weight, size, property flags and properties. Its
    property flags, and where the properties start."""
    scan = _Scan(payload, "content header")
    pos = scan.need(0, 12)
    flags = 0
    shift = 0
    while True:
        scan.need(pos, 2)
        word = _U16.unpack_from(payload, pos)[0]
        pos += 2
        flags |= (word & 0xFFFE) << shift
        if not word & 1:
            break
        shift += 16
        if shift > 32:
            raise scan.fail("too many property flag words")
    start = pos
    for kind, flag in zip(_PROPERTY_TYPES, _PROPERTY_FLAGS, strict=True):
        if flags & flag:
            pos = scan.field(pos, kind)
    if pos < scan.end:
        # RabbitMQ closes the connection with INTERNAL_ERROR (its property decoder fails on
        # them); a message must not be stored from a header that does not decode as sent.
        raise AMQPError(INTERNAL_ERROR, f"cannot decode content header: {scan.end - pos} "
                                        "bytes after its last property")
    return flags, start
