"""What a schema definition must be before a topic keeps it, as a broker checks it.

A Json, Avro or Protobuf schema's definition is an Avro schema in JSON (that is what the clients
send for all three): a primitive type's name, a union (a list of schemas), or an object whose
`type` names a primitive or a complex type (`record` with its `name` and `fields`, `enum` with
its `symbols`, `array` with its `items`, `map` with its `values`, `fixed` with its `size`).
Inside, a field's type may also name a type defined earlier. A definition that is not one is
refused with `IncompatibleSchema` ("invalid schema data" on a broker), naming the field (by
`schemas`, which asks `problem`): kept,
it would fix the topic's schema type for every later producer and be handed to every consumer
that asks for the topic's schema.
"""

from __future__ import annotations

import json
from typing import Any

from adapters.pulsar.wire import wire_pb2 as pb

CHECKED = frozenset({pb.Schema.Json, pb.Schema.Avro, pb.Schema.Protobuf})
PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
MAX_DEPTH = 64
"""Nesting a definition may have (a deeper one is refused, not followed)."""


class _Invalid(ValueError):
    pass


def problem(kind: int, data: bytes) -> str | None:
    """Why `data` is no definition of a schema of type `kind`; None when it is one (or the
    type's definitions are not checked)."""
    if kind not in CHECKED:
        return None
    try:
        _schema(json.loads(data.decode("utf-8")), 0, top=True)
    except _Invalid as exc:
        return str(exc)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return "not JSON"
    return None


def _name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise _Invalid(f"{what} must be a non-empty name")
    return value


def _schema(value: Any, depth: int, *, top: bool = False) -> None:
    if depth > MAX_DEPTH:
        raise _Invalid(f"nested more than {MAX_DEPTH} deep")
    if isinstance(value, str):
        if top and value not in PRIMITIVES:
            raise _Invalid(f"{value[:40]!r} is no type")
        return  # inside: a primitive or a type defined earlier, by name
    if isinstance(value, list):
        for branch in value:
            _schema(branch, depth + 1)
        return
    if not isinstance(value, dict):
        raise _Invalid("a schema is a type name, a list or an object")
    kind = value.get("type")
    if isinstance(kind, dict | list):  # {"type": {...}}: the type given inline
        _schema(kind, depth + 1)
        return
    if not isinstance(kind, str):
        raise _Invalid("an object schema needs a 'type'")
    if kind in PRIMITIVES:
        return
    if kind in ("record", "error"):
        _name(value.get("name"), "a record's 'name'")
        fields = value.get("fields")
        if not isinstance(fields, list):
            raise _Invalid("a record needs a list of 'fields'")
        for item in fields:
            if not isinstance(item, dict) or "type" not in item:
                raise _Invalid("each field is an object with a 'name' and a 'type'")
            _name(item.get("name"), "a field's 'name'")
            _schema(item["type"], depth + 1)
    elif kind == "enum":
        _name(value.get("name"), "an enum's 'name'")
        symbols = value.get("symbols")
        if not isinstance(symbols, list) or not all(isinstance(s, str) for s in symbols):
            raise _Invalid("an enum needs a list of 'symbols'")
    elif kind == "array":
        if "items" not in value:
            raise _Invalid("an array needs its 'items'")
        _schema(value["items"], depth + 1)
    elif kind == "map":
        if "values" not in value:
            raise _Invalid("a map needs its 'values'")
        _schema(value["values"], depth + 1)
    elif kind == "fixed":
        _name(value.get("name"), "a fixed's 'name'")
        size = value.get("size")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise _Invalid("a fixed needs a 'size' of 0 or more")
    elif top:
        raise _Invalid(f"type {kind[:40]!r} is no Avro type")
