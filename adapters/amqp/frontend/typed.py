"""A message's typed headers (`amqp.typed-headers`) read back entry by entry.

The AMQP front end writes the property itself, but any publisher of another protocol can set it
too, to anything. Each entry is checked on its own: one that is not what `values.to_json` makes
(a wrong shape, invalid base64, a boolean that is not one), that nests deeper or holds more than
the front end takes from a client (`guard.MAX_DEPTH`, `guard.MAX_ENTRIES`), or that the AMQP
encoder cannot write (an integer past 64 bits, a time out of range, a decimal NaN, a name past
255 bytes) is left out; its text copy, a plain property, still reaches an AMQP consumer as a
string. The others keep their types.
"""

from __future__ import annotations

import base64
import binascii
import decimal
import json
import struct
from typing import Any

from adapters.amqp.frontend.guard import MAX_DEPTH, MAX_ENTRIES
from adapters.amqp.frontend.table import encode_table
from adapters.amqp.frontend.values import FieldValue, from_json

_FAILURES = (ValueError, TypeError, KeyError, OverflowError, OSError, struct.error,
             decimal.InvalidOperation, RecursionError, binascii.Error)


class _Budget:
    def __init__(self) -> None:
        self.entries = 0


def decode(text: str | None) -> dict[str, FieldValue]:
    """The typed headers in `text` that an AMQP consumer can be given, each with its type."""
    if not text:
        return {}
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return {}
    if not isinstance(data, dict):
        return {}
    budget = _Budget()
    out: dict[str, FieldValue] = {}
    for key, raw in data.items():
        used = budget.entries
        try:
            if not _valid(raw, 1, budget):
                budget.entries = used
                continue
            value = from_json(raw)
            encode_table({key: value})  # what the content header will hold; raises if it cannot
        except _FAILURES:
            budget.entries = used
            continue
        out[key] = value
    return out


def _valid(data: Any, depth: int, budget: _Budget) -> bool:
    """Whether `data`, a value in a table or array nested `depth` deep (the headers table is 1),
    is a field value as `values.to_json` writes it, within the limits `guard` sets a client."""
    budget.entries += 1
    if budget.entries > MAX_ENTRIES:
        return False
    if data is None or isinstance(data, str):
        return True
    if isinstance(data, list):
        return depth < MAX_DEPTH and all(_valid(v, depth + 1, budget) for v in data)
    if not isinstance(data, dict) or len(data) != 1:
        return False
    ((kind, raw),) = data.items()
    if kind == "table":
        return depth < MAX_DEPTH and isinstance(raw, dict) and all(
            _valid(v, depth + 1, budget) for v in raw.values())
    if kind == "bool":
        return isinstance(raw, bool)
    if kind in ("bytes", "longstr"):
        if not isinstance(raw, str):
            return False
        try:
            base64.b64decode(raw, validate=True)
        except (ValueError, binascii.Error):
            return False
        return True
    # Any other kind is a scalar: `from_json` says whether it knows it, the encoder whether
    # AMQP can carry it.
    return isinstance(raw, str | int | float) and not isinstance(raw, bool)
