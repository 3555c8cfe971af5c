"""SASL for AMQP 0-9-1: PLAIN and AMQPLAIN, the mechanisms AMQP clients use.

The user is the gateway principal's name and the password its token (with a tokens file);
without one the gateway takes any credentials (and listens on loopback only).
"""

from __future__ import annotations

import struct

from pamqp import decode

from adapters.amqp.frontend import guard
from adapters.amqp.frontend.errors import ACCESS_REFUSED, AMQPError, short

MECHANISMS = ("PLAIN", "AMQPLAIN")
_START_OK = (10, 11)


def credentials(mechanism: str, response: str | bytes) -> tuple[str, str]:
    """(user, password) from a connection.start-ok."""
    raw = response.encode("utf-8") if isinstance(response, str) else bytes(response)
    if mechanism == "PLAIN":
        parts = raw.split(b"\x00")
        if len(parts) != 3:
            raise AMQPError(ACCESS_REFUSED, "PLAIN response: expected authzid NUL user NUL "
                                            "password", _START_OK)
        user, password = parts[1], parts[2]
    elif mechanism == "AMQPLAIN":
        table = _amqplain(raw)
        user, password = _text(table.get("LOGIN")), _text(table.get("PASSWORD"))
    else:
        raise AMQPError(ACCESS_REFUSED, f"unknown authentication mechanism {short(mechanism)}; "
                                        f"allowed: {', '.join(MECHANISMS)}", _START_OK)
    try:
        return user.decode("utf-8"), password.decode("utf-8")
    except UnicodeDecodeError:
        raise AMQPError(ACCESS_REFUSED, "user and password must be UTF-8", _START_OK) from None


def _amqplain(raw: bytes) -> dict[str, object]:
    """AMQPLAIN's response: the entries of a field table without its length prefix."""
    data = struct.pack(">I", len(raw)) + raw
    try:
        guard.check_table(data, "AMQPLAIN response")
        _, table = decode.field_table(data)
    except Exception:  # AMQPError from the guard; ValueError, UnicodeDecodeError from pamqp
        raise AMQPError(ACCESS_REFUSED, "AMQPLAIN response is not a field table",
                        _START_OK) from None
    return dict(table)


def _text(value: object) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    raise AMQPError(ACCESS_REFUSED, "AMQPLAIN response needs LOGIN and PASSWORD strings",
                    _START_OK)
