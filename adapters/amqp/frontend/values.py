"""AMQP field values (what pamqp decodes a field table into) as plain JSON and back, and as text.

Field tables are kept on disk (queue and exchange arguments) and on messages (typed headers) in
this form: every value tagged with its type, so that an integer stays an integer and bytes stay
bytes through a restart or another front end.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
from collections.abc import Mapping
from typing import Any

from adapters.amqp.frontend.table import BY_NAME, Double, LongBytes, Stamp, TypedInt

FieldValue = Any
"""A value pamqp decodes or encodes: str, bytes, int, bool, float, Decimal, datetime, None, and
lists and dicts of those."""


def to_json(value: FieldValue) -> Any:
    """A JSON-able form of a field value that `from_json` turns back into it."""
    if value is None:
        return None
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, TypedInt):
        return {value.NAME: int(value)}
    if isinstance(value, Stamp):
        return {"time": int(value)}
    if isinstance(value, int):
        return {"int": value}
    if isinstance(value, Double):
        return {"double": repr(float(value))}
    if isinstance(value, float):
        return {"float": repr(value)}
    if isinstance(value, decimal.Decimal):
        return {"decimal": str(value)}
    if isinstance(value, str):
        return value
    if isinstance(value, LongBytes):
        return {"longstr": base64.b64encode(value).decode("ascii")}
    if isinstance(value, bytes | bytearray):
        return {"bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, datetime.datetime):
        return {"time": int(value.timestamp())}
    if isinstance(value, list | tuple):
        return [to_json(item) for item in value]
    if isinstance(value, Mapping):
        return {"table": {str(k): to_json(v) for k, v in value.items()}}
    raise TypeError(f"not an AMQP field value: {type(value).__name__}")


def from_json(data: Any) -> FieldValue:
    """The field value `to_json` made (bytes come back as bytearray, which pamqp encodes; a double
    as `Double`, a non-UTF-8 long string as `LongBytes`, a typed integer and a timestamp as
    `table` decoded them, which it writes back as such; a plain stored int as an int)."""
    if data is None or isinstance(data, str):
        return data
    if isinstance(data, list):
        return [from_json(item) for item in data]
    if not isinstance(data, dict) or len(data) != 1:
        raise ValueError(f"not a stored field value: {data!r}")
    ((kind, raw),) = data.items()
    if kind == "bool":
        return bool(raw)
    if kind == "int":
        return int(raw)
    if kind in BY_NAME:
        return BY_NAME[kind](raw)
    if kind == "float":
        return float(raw)
    if kind == "double":
        return Double(float(raw))
    if kind == "longstr":
        return LongBytes(base64.b64decode(raw))
    if kind == "decimal":
        return decimal.Decimal(raw)
    if kind == "bytes":
        return bytearray(base64.b64decode(raw))
    if kind == "time":
        return Stamp(int(raw))
    if kind == "table":
        return {str(k): from_json(v) for k, v in raw.items()}
    raise ValueError(f"not a stored field value: {data!r}")


def table_to_text(table: Mapping[str, FieldValue]) -> str:
    return json.dumps({k: to_json(v) for k, v in table.items()}, separators=(",", ":"),
                      sort_keys=True)


def table_from_text(text: str) -> dict[str, FieldValue]:
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("a stored table is a JSON object")
    return {str(k): from_json(v) for k, v in data.items()}


def as_text(value: FieldValue) -> str:
    """How a header value reads to a client of another protocol (a message property)."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime.datetime):
        return str(int(value.timestamp()))
    if isinstance(value, list | tuple | Mapping):
        return json.dumps(to_json(value), separators=(",", ":"))
    return str(value)


def as_str(value: FieldValue) -> str | None:
    """A string argument (a longstr may arrive as bytes when it is not UTF-8); None otherwise."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return None
    return None


def as_int(value: FieldValue) -> int | None:
    """An integer argument (not a bool); None otherwise."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return None
