"""Output of the admin commands: aligned tables for people, JSON for scripts."""

from __future__ import annotations

import base64
import json
import shutil
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from gateway.preview import one_line

CELL_CHARS = 60
"""A table cell on a terminal is cut to this many characters."""


def table(rows: Sequence[Sequence[object]], header: Sequence[str], out: TextIO) -> None:
    """Columns aligned under `header`; control characters escaped; cells cut on a terminal."""
    width = CELL_CHARS if out.isatty() else 10_000
    cells = [[one_line(str(c), width) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(header)]
    lines = [header, *cells]
    for line in lines:
        out.write("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())
        out.write("\n")


def pairs(items: Sequence[tuple[str, object]], out: TextIO) -> None:
    """`name  value` lines, names aligned."""
    width = max((len(k) for k, _ in items), default=0)
    for key, value in items:
        out.write(f"{key.ljust(width)}  {one_line(str(value), 10_000)}\n")


def emit_json(value: object, out: TextIO) -> None:
    json.dump(value, out, indent=2, ensure_ascii=False)
    out.write("\n")


def to_dict(message: Message) -> dict[str, Any]:
    """A message as JSON values: every field (defaults too), 64-bit integers as numbers, bytes
    as base64 (and, for a field named `body`, `body_text` when it is UTF-8)."""
    out: dict[str, Any] = {}
    fields: Any = message.DESCRIPTOR.fields
    for field in fields:
        value = getattr(message, field.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            out[field.name] = dict(value)
        elif field.is_repeated:
            out[field.name] = [_value(field, v) for v in value]
        else:
            out[field.name] = _value(field, value)
        if field.type == FieldDescriptor.TYPE_BYTES and field.name == "body":
            try:
                out["body_text"] = value.decode("utf-8")
            except UnicodeDecodeError:
                out["body_text"] = None
    return out


def _value(field: Any, value: Any) -> Any:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return to_dict(value)
    if field.type == FieldDescriptor.TYPE_BYTES:
        return base64.b64encode(value).decode()
    return value


def stderr(text: str) -> None:
    sys.stderr.write(text + "\n")


def terminal_width() -> int:
    return shutil.get_terminal_size((100, 24)).columns
