"""Every value a console page or action takes from a request, checked in one place: names,
message ids, attempts, times, page tokens and selections. A bad one is `BadInput`, shown to the
person as a 400 page naming the field and what it may be; nothing reaches the gateway."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from gateway.v1 import admin_pb2 as pb

MAX_NAME_BYTES = 255
"""Topics, groups, message ids and filter texts (the admin API's limit)."""
MAX_ATTEMPT = 1_000_000
MAX_SELECTED = 500
"""Dead letters one action may name."""
_TOKEN = re.compile(r"[0-9]{1,16}")
_WHEN = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2})?")


class BadInput(Exception):
    def __init__(self, field: str, value: str, allowed: str) -> None:
        shown = value if len(value) <= 80 else value[:80] + "…"
        super().__init__(f"{field} {shown!r}: {allowed}")
        self.field = field


Values = Mapping[str, str]


def name(values: Values, field: str, required: bool = True) -> str:
    value = values.get(field, "")
    if not isinstance(value, str):
        raise BadInput(field, "", "text")
    if not value:
        if required:
            raise BadInput(field, value, "required")
        return ""
    if len(value.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES or not value.isprintable():
        raise BadInput(field, value, f"1..{MAX_NAME_BYTES} bytes of printable text")
    return value


def text(values: Values, field: str) -> str:
    """An optional filter text (any printable text up to the name limit)."""
    return name(values, field, required=False)


def number(values: Values, field: str, high: int = MAX_ATTEMPT) -> int:
    value = values.get(field, "").strip()
    if not value:
        return 0
    # ASCII digits only: str.isdigit() also takes "²" (which int() refuses: a 500 page) and
    # other scripts' digits.
    if not (value.isascii() and value.isdigit()) or len(value) > 7 or int(value) > high:
        raise BadInput(field, value, f"a whole number 0..{high} (empty: no bound)")
    return int(value)


def when(values: Values, field: str) -> int:
    """A `YYYY-MM-DDTHH:MM[:SS]` time (UTC), as the browser's datetime-local input sends it;
    wall-clock ms, 0 for none."""
    value = values.get(field, "").strip()
    if not value:
        return 0
    if not _WHEN.fullmatch(value):
        raise BadInput(field, value, "a time as YYYY-MM-DDTHH:MM (UTC)")
    try:
        moment = datetime.fromisoformat(value).replace(tzinfo=UTC)
    except ValueError:
        raise BadInput(field, value, "a real date and time (UTC)") from None
    if moment.year < 1970:  # the gateway refused it, naming its own field (filter.since_ms)
        raise BadInput(field, value, "a time from 1970-01-01T00:00 to 9999-12-31T23:59 (UTC)")
    # 0 is "no bound" in a filter: the epoch's first minute bounds it at its first ms instead
    # (as `gateway dlq --until` does), where a delete with it deleted every other match.
    return int(moment.timestamp() * 1000) or 1


def page_token(values: Values) -> str:
    value = values.get("page", "")
    if value and not _TOKEN.fullmatch(value):
        raise BadInput("page", value, "the page token a page gave")
    return value


@dataclass(frozen=True, slots=True)
class Scope:
    """A group's dead letters, and which of them a page or action means."""

    topic: str
    group: str
    where: pb.DeadLetterFilter
    reason: str
    text: str
    min_attempt: int
    max_attempt: int
    since: str
    until: str

    def query(self) -> dict[str, str]:
        """The scope as query parameters (for links and hidden form fields)."""
        out = {"topic": self.topic, "group": self.group, "reason": self.reason,
               "text": self.text, "min_attempt": str(self.min_attempt or ""),
               "max_attempt": str(self.max_attempt or ""), "since": self.since,
               "until": self.until}
        return {k: v for k, v in out.items() if v}

    @property
    def filtered(self) -> bool:
        return self.where != pb.DeadLetterFilter()


def scope(values: Values) -> Scope:
    topic, group = name(values, "topic"), name(values, "group")
    reason, body = text(values, "reason"), text(values, "text")
    low, high = number(values, "min_attempt"), number(values, "max_attempt")
    if high and high < low:
        raise BadInput("max_attempt", str(high), f"empty or at least min attempt ({low})")
    since_ms, until_ms = when(values, "since"), when(values, "until")
    if until_ms and until_ms <= since_ms:
        raise BadInput("until", values.get("until", ""), "later than since")
    where = pb.DeadLetterFilter(reason=reason, text=body, min_attempt=low, max_attempt=high,
                                since_ms=since_ms, until_ms=until_ms)
    return Scope(topic, group, where, reason, body, low, high,
                 values.get("since", "").strip(), values.get("until", "").strip())


def selected(ids: list[str]) -> list[str]:
    """Message ids ticked on a page."""
    if len(ids) > MAX_SELECTED:
        raise BadInput("id", f"{len(ids)} ids", f"at most {MAX_SELECTED} at once")
    for value in ids:
        name({"id": value}, "id")
    return list(dict.fromkeys(ids))
