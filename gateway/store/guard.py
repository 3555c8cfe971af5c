"""The values the embedded store keeps, checked before anything is queued to its writer.

Defence in depth: front ends check what crosses them, but a value SQLite cannot bind (an int
outside its 64-bit INTEGER, None in a NOT NULL column, a string that is not valid UTF-8) would
fail the writer's whole group-commit transaction, with every other caller's writes in it. So the
store refuses such a value itself, with `InvalidArgument` for its own caller only.

The publish path checks each message with one bit test of its three numbers and O(1)
`str.isascii` calls on its key, tag and id; only a message that does not pass that is looked at
field by field (`check_message`), which either raises or finds it fine (a non-ASCII key, say).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gateway.backend.base import OutMessage, Release
from gateway.errors import InvalidArgument

INT64_MAX = (1 << 63) - 1
"""The largest value of SQLite's INTEGER (and of every count or time the store keeps)."""
ECHO_CHARS = 200
"""Echoed values are cut to this many characters."""

_COUNT = f"an integer from 0 to {INT64_MAX}"
_TEXT = "valid UTF-8 text"


def shown(value: object) -> object:
    """`value` as an error message may echo it: cut to about ECHO_CHARS characters."""
    if isinstance(value, int) and value.bit_length() > 3 * ECHO_CHARS:
        return f"<an integer of {value.bit_length()} bits>"
    if isinstance(value, str):
        return value if len(value) <= ECHO_CHARS else value[:ECHO_CHARS] + "..."
    text = repr(value)
    return value if len(text) <= ECHO_CHARS else text[:ECHO_CHARS] + "..."


def refuse(field: str, value: object, allowed: str) -> InvalidArgument:
    """An `InvalidArgument` for `field` that echoes `value` cut short."""
    return InvalidArgument(field, shown(value), allowed)


def check_message(message: OutMessage) -> None:
    """Raise `InvalidArgument` naming the first field of `message` the store cannot keep."""
    count("deliver_at_ms", message.deliver_at_ms)
    count("attempt", message.attempt)
    count("retries", message.retries)
    text("key", message.key)
    text("tag", message.tag)
    text("message_id", message.message_id)


def body(value: object) -> bytes:
    """A body that is not `bytes` as bytes, if it is bytes-like."""
    if not isinstance(value, bytearray | memoryview):
        raise refuse("body", value, "bytes")
    return bytes(value)


def check_properties(properties: Mapping[Any, object]) -> None:
    """Raise `InvalidArgument` unless every key and value of `properties` is text."""
    for key, value in properties.items():
        for one in (key, value):
            if not isinstance(one, str):
                raise refuse("properties", one, "string keys and string values")


def check_releases(releases: Sequence[Release]) -> None:
    """Refuse a release with a value the store cannot keep (0..2**63-1)."""
    for item in releases:
        if (item.visible_at_ms | item.attempt | item.retries) >> 63:
            count("visible_at_ms", item.visible_at_ms)
            count("attempt", item.attempt)
            count("retries", item.retries)


def count(field: str, value: object) -> int:
    """`value` if it is an int the store can keep as a count or a time (0..2**63-1)."""
    if type(value) is not int or not 0 <= value <= INT64_MAX:
        raise refuse(field, value, _COUNT)
    return value


def position(field: str, value: object) -> int:
    """`value` if it is a position bound: -1 ("before the first") up to 2**63-1."""
    if type(value) is not int or not -1 <= value <= INT64_MAX:
        raise refuse(field, value, f"an integer from -1 to {INT64_MAX}")
    return value


def text(field: str, value: object) -> str:
    """`value` if it is a string SQLite can keep (valid UTF-8: no lone surrogates)."""
    if not isinstance(value, str):
        raise refuse(field, value, _TEXT)
    if not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError:
            raise refuse(field, value, _TEXT) from None
    return value
