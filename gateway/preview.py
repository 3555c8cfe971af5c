"""How admin tools show a message body: JSON pretty-printed, text as it is, binary as a hex dump;
and times as people read them."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime

PREVIEW_BYTES = 64 * 1024
"""Bytes of a body shown (the rest is counted, not shown)."""
HEX_BYTES = 4096
"""Bytes of a binary body shown as a hex dump."""


@dataclass(frozen=True, slots=True)
class Preview:
    kind: str
    """"json", "text", "binary" or "empty"."""
    text: str
    shown: int
    """Bytes of the body the text shows."""
    size: int
    """Bytes in the body."""

    @property
    def truncated(self) -> bool:
        return self.shown < self.size


def preview(body: bytes) -> Preview:
    """The body as a person should see it."""
    size = len(body)
    if not body:
        return Preview("empty", "", 0, 0)
    head = body[:PREVIEW_BYTES]
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if size > PREVIEW_BYTES and exc.start >= PREVIEW_BYTES - 3:
            text = head[:exc.start].decode("utf-8")  # a character cut at the end
        else:
            return Preview("binary", hex_dump(body[:HEX_BYTES]), min(size, HEX_BYTES), size)
    if not _printable(text):
        return Preview("binary", hex_dump(body[:HEX_BYTES]), min(size, HEX_BYTES), size)
    if size <= PREVIEW_BYTES and text.lstrip()[:1] in ("{", "["):
        try:
            return Preview("json", json.dumps(json.loads(text), indent=2, ensure_ascii=False),
                           size, size)
        except ValueError:
            pass
    return Preview("text", text, len(text.encode()), size)


def _printable(text: str) -> bool:
    return all(c.isprintable() or c in "\t\n\r" for c in text)


def hex_dump(data: bytes) -> str:
    """16 bytes a line: offset, hex, and the printable ASCII characters."""
    lines = []
    for offset in range(0, len(data), 16):
        chunk = data[offset:offset + 16]
        hexes = " ".join(f"{b:02x}" for b in chunk)
        chars = "".join(chr(b) if 0x20 <= b < 0x7F else "." for b in chunk)
        lines.append(f"{offset:08x}  {hexes:<47}  {chars}")
    return "\n".join(lines)


def one_line(text: str, width: int) -> str:
    """`text` on one line of at most `width` characters, control characters escaped."""
    out = "".join(c if c.isprintable() else _escape(c) for c in text)
    return out if len(out) <= width else out[:max(0, width - 1)] + "…"


def escaped(text: str) -> str:
    """`text` as Python's repr spells it, without the quotes: a backslash doubled, control
    characters escaped. Unlike `one_line` two texts never look alike: an id with a line break
    shows as `a\\nb`, one with a backslash and an n as `a\\\\nb`."""
    return "".join("\\\\" if c == "\\" else c if c.isprintable() else _escape(c) for c in text)


_UNESCAPE = re.compile(r"\\(?:([\\nrt])|x([0-9a-f]{2})|u([0-9a-f]{4})|U([0-9a-f]{8}))")
_SIMPLE = {"\\": "\\", "n": "\n", "r": "\r", "t": "\t"}


def unescaped(shown: str) -> str | None:
    """The text `escaped` prints as `shown`; None when `shown` has no backslash or is not
    something `escaped` prints (an unknown escape, `\\x41` for a printable `A`, a lone
    surrogate that UTF-8 cannot carry)."""
    if "\\" not in shown:
        return None

    def one(m: re.Match[str]) -> str:
        simple, *codes = m.groups()
        if simple:
            return _SIMPLE[simple]
        code = int(next(c for c in codes if c), 16)
        return chr(code) if code <= 0x10FFFF else "\\"  # "\\" alone: no round trip below

    text = _UNESCAPE.sub(one, shown)
    if escaped(text) != shown:
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return text


def _escape(c: str) -> str:
    code = ord(c)
    if c in "\n\r\t":
        return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}[c]
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def iso_ms(ms: int) -> str:
    """Wall-clock ms as `2024-05-01 10:00:00.123Z` ("" for 0)."""
    if ms <= 0:
        return ""
    try:
        moment = datetime.fromtimestamp(ms / 1000, UTC)
    except (OverflowError, OSError, ValueError):
        return str(ms)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d}Z"


def duration(ms: int) -> str:
    """A duration as `250 ms`, `10 s`, `2 min 30 s`, `2 h`, `3 d 4 h`."""
    if ms < 1000:
        return f"{ms} ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.3g} s"
    minutes, sec = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min" + (f" {sec} s" if sec else "")
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h" + (f" {minutes} min" if minutes else "")
    days, hours = divmod(hours, 24)
    return f"{days} d" + (f" {hours} h" if hours else "")
