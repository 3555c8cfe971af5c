"""The message properties the gateway reserves for itself: every `x-gateway-*` name, in one place.

The engine, the dialects and the back ends write and read these on the messages they move; a
consumer never sees them (`visible_properties`), and a client cannot set them through a front
end that hides them. A back end whose broker cannot carry a name as it is maps it on the way out
and back (by `RESERVED_PREFIX`), so the names here are the ones every layer speaks.
"""

from __future__ import annotations

from collections.abc import Mapping

RESERVED_PREFIX = "x-gateway-"
"""Every property whose name starts with this belongs to the gateway."""

# Written by the engine on the copies it makes.
ORIGIN_TOPIC = "x-gateway-origin-topic"
"""The topic a message was first published to, kept on its retry and dead-letter copies."""
ORIGIN_GROUP = "x-gateway-origin-group"
"""The group whose failure made a retry or dead-letter copy: a destination whose name holds no
group is shared by the topic's groups, and each group takes back or manages its own copies."""
DEAD_REASON = "x-gateway-dead-letter-reason"
"""Why a dead letter was dead-lettered (the decision's reason)."""
DEAD_AT = "x-gateway-dead-lettered-ms"
"""When a dead letter was dead-lettered, in wall-clock ms."""
BORN_MS = "x-gateway-born-ms"
"""The message's first publish time, in wall-clock ms, kept on its retry and dead-letter copies
(each copy is stored anew, with a publish time of its own)."""

# Written by back ends that keep the gateway's counters and times as message headers.
ATTEMPT = "x-gateway-attempt"
"""Deliveries the message had before this copy was published."""
RETRIES = "x-gateway-retries"
"""Failures counted against the policy's max retries before this copy was published."""
PUBLISH_MS = "x-gateway-publish-ms"
"""The message's first publish time, in wall-clock ms."""
DELIVER_AT_MS = "x-gateway-deliver-at-ms"
"""The time before which the copy is not delivered, in wall-clock ms."""

# Written by a dialect on dead-letter copies routed through a broker's dead-letter route.
DEATH_REASON = "x-gateway-death-reason"
"""The reason on a dead-letter copy, for consumers of the dead-letter destination."""
ORIGINAL_QUEUE = "x-gateway-original-queue"
"""The topic (queue) a dead-letter copy came from."""
DEAD_LETTER_ROUTE = "x-gateway-dlx-routing-key"
"""On a dead-letter copy: publish it through the destination's dead-letter route with this
routing key. A back end with such routes honours it and does not store it; other back ends keep
it as a reserved property."""

# Written by back ends whose broker writes headers of the same names itself.
CARRIED_PREFIX = "x-gateway-carried-"
"""A message property that collides with a header the broker itself writes is carried under
this prefix and restored on the way back."""

# The W3C trace context (https://www.w3.org/TR/trace-context/), kept under its own names.
TRACEPARENT = "traceparent"
"""A message's W3C `traceparent` (`00-<trace id>-<parent id>-<flags>`). Not reserved: it keeps
its W3C name so that every broker and native client carries it as it is (as a message property
or a header). Each front end maps its own carrier into it (call metadata, a protocol's own
trace field) and back out on delivery; retry and dead-letter copies keep it."""
TRACESTATE = "tracestate"
"""A message's W3C `tracestate`, beside its `traceparent`."""

COUNT_MAX = 1_000_000
"""Largest attempt or retry count a back end reads from a message: any client of the broker may
write these properties, and a count near 2**32 would overflow a delivery's attempt (uint32)."""
TIME_MAX_MS = 253_402_300_799_999
"""Latest time a back end reads from a message (the end of year 9999); far beyond it an int64
overflows."""


def read_count(text: str | None, limit: int = COUNT_MAX) -> int | None:
    """A non-negative int read from a property's text, in ASCII digits (surrounding blanks
    allowed); None when absent, unreadable, negative or above `limit`. `str.isdigit` alone also
    takes '²' or '٣', which `int()` refuses or reads as another number."""
    if text is None:
        return None
    value = text.strip()
    if not value.isascii() or not value.isdigit():
        return None
    number = int(value)
    return number if number <= limit else None


def born_ms(properties: Mapping[str, str]) -> int:
    """The first publish time a copy keeps (`BORN_MS`); 0 when it keeps none or an unreadable
    one (then its own publish time is the first). Callers look for `BORN_MS` first: most
    messages are first copies."""
    return read_count(properties.get(BORN_MS), TIME_MAX_MS) or 0


RESERVED = frozenset({
    ORIGIN_TOPIC, ORIGIN_GROUP, DEAD_REASON, DEAD_AT, BORN_MS, ATTEMPT, RETRIES, PUBLISH_MS,
    DELIVER_AT_MS, DEATH_REASON, ORIGINAL_QUEUE, DEAD_LETTER_ROUTE,
})
"""The reserved names the gateway writes today (any `x-gateway-` name is reserved)."""


def is_reserved(name: str) -> bool:
    """True for a name the gateway keeps to itself."""
    return name.startswith(RESERVED_PREFIX)


def visible_properties(properties: Mapping[str, str]) -> Mapping[str, str]:
    """The properties a consumer sees: the reserved ones left out (the same mapping when it has
    none of them; only copies made by the engine do)."""
    for k in properties:
        if k.startswith(RESERVED_PREFIX):
            return {k: v for k, v in properties.items() if not k.startswith(RESERVED_PREFIX)}
    return properties


def made_by(properties: Mapping[str, str], topic: str, group: str) -> bool:
    """Whether a retry or dead-letter copy with `properties` is `group`'s of `topic`: a
    destination named without `{topic}` or without `{group}` holds copies of several, each
    recording its origin (one that records none counts for any topic or group)."""
    return (properties.get(ORIGIN_TOPIC, topic) == topic
            and properties.get(ORIGIN_GROUP, group) == group)
