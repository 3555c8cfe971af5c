"""The limits every front end shares (gateway.v1 gRPC, RocketMQ, Pulsar), in one place.

Each front end checks its own protocol's values at its edge; the numbers and the checks that
are the same whatever the protocol live here, so the front ends cannot drift apart. The engine's
`publish` applies `check_message` to every message, whichever front end it came from.
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.backend import OutMessage
from gateway.core.properties import RESERVED_PREFIX
from gateway.errors import InvalidArgument, MessageTooLarge

DAY_MS = 86_400_000
MAX_DELAY_MS = 400 * DAY_MS
"""Longest delay of a message: a relative delay, or an absolute delivery time at most this far
after now (a time in the past means now). 400 days."""
MAX_BATCH = 10_000
"""Most messages in one publish (and settlements in one settle), on every front end."""
MAX_NAME_BYTES = 255
"""Longest topic, group, consumer, policy or naming-scheme name, in bytes of UTF-8: what an
AMQP queue name (RabbitMQ) and a RocketMQ group can hold."""
MAX_PROPERTIES = 1024
"""Most properties on one message."""
MAX_PUBLISH_PROPERTIES = 100_000
"""Most properties in one publish, all its messages together. Each costs the gateway some
microseconds and a few hundred bytes while it is converted: 7,000 messages of 1,024 properties
(61 MiB, within every other limit) held the event loop for 12 s and took 1.8 GB."""
MAX_TEXT_BYTES = 1024
"""Longest free text that is kept or matched (a failure reason, a tag filter, an option value),
in bytes of UTF-8."""
MAX_OPTIONS = 32
"""Most policy options in one subscription."""
MAX_WAIT_MS = 60_000
"""Longest long-polling wait of one receive."""
MAX_RECEIVE = 10_000
"""Most deliveries one receive returns."""
MAX_CREDIT = 100_000
"""Most unused credit (prefetch included) a push consumer may hold."""


def utf8_len(text: str) -> int:
    """The length of `text` in bytes of UTF-8 (without encoding ASCII text)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def check_name(field: str, value: str) -> None:
    """A topic, group or other name: non-empty, printable, at most MAX_NAME_BYTES."""
    if not value or not value.strip():
        raise InvalidArgument(field, value, "a non-empty name")
    if too_long(value, MAX_NAME_BYTES) or not value.isprintable():
        raise InvalidArgument(field, value, f"at most {MAX_NAME_BYTES} bytes (UTF-8) of "
                                            "printable characters")


def check_tag(field: str, tag: str) -> None:
    """A message's tag: none, or printable text (no tag_filter can name another)."""
    if tag and not tag.isprintable():
        raise InvalidArgument(field, tag, "printable text (or none)")


def too_long(text: str, limit: int) -> bool:
    """Whether `text` has more than `limit` bytes of UTF-8 (a huge one is not encoded)."""
    return len(text) > limit or utf8_len(text) > limit


def check_text(field: str, value: str, limit: int = MAX_TEXT_BYTES) -> None:
    if too_long(value, limit):
        raise InvalidArgument(field, value, f"at most {limit} bytes (UTF-8)")


def properties_size(properties: Mapping[str, str]) -> int:
    size = 0
    for k, v in properties.items():
        size += utf8_len(k) + utf8_len(v)
    return size


def message_size(message: OutMessage) -> int:
    """What a message counts against the maximum message size: body, key, tag and every
    property key and value, strings in bytes of UTF-8."""
    size = len(message.body)
    if message.key:
        size += utf8_len(message.key)
    if message.tag:
        size += utf8_len(message.tag)
    if message.properties:
        size += properties_size(message.properties)
    return size


def check_deliver_at(field: str, deliver_at_ms: int, now_ms: int) -> None:
    """An absolute delivery time: 0 (now), a time in the past (now), or at most MAX_DELAY_MS
    after now."""
    if deliver_at_ms < 0 or deliver_at_ms > now_ms + MAX_DELAY_MS:
        raise InvalidArgument(field, deliver_at_ms, f"0..{now_ms + MAX_DELAY_MS} (wall-clock ms, "
                                                    "at most 400 days from now)")


def check_properties(field: str, properties: Mapping[str, str]) -> None:
    """At most MAX_PROPERTIES, keys non-empty and not reserved for the gateway (their size
    counts in `message_size`). A client that could set `x-gateway-*` names could forge what the
    engine writes on its own copies: the origin topic that decides where a dead letter goes, the
    attempt count."""
    if len(properties) > MAX_PROPERTIES:
        raise InvalidArgument(field, f"{len(properties)} entries",
                              f"at most {MAX_PROPERTIES} properties")
    if "" in properties:
        raise InvalidArgument(field, "", "non-empty keys")
    for key in properties:
        if key.startswith(RESERVED_PREFIX):
            raise InvalidArgument(field, key,
                                  f"keys that do not start with {RESERVED_PREFIX} (reserved "
                                  "for the gateway)")


def check_message(message: OutMessage, index: int, now_ms: int, max_bytes: int) -> int:
    """Everything about one message to publish that does not depend on the protocol; returns
    its size (`message_size`)."""
    if message.properties:
        check_properties(f"messages[{index}].properties", message.properties)
    if message.deliver_at_ms:
        check_deliver_at(f"messages[{index}].deliver_at_ms", message.deliver_at_ms, now_ms)
    size = message_size(message)
    if size > max_bytes:
        raise MessageTooLarge(size, max_bytes)
    return size


def check_publish_properties(field: str, total: int) -> None:
    """The properties of one publish, all messages together (counted before any is read)."""
    if total > MAX_PUBLISH_PROPERTIES:
        raise InvalidArgument(field, f"{total} properties",
                              f"at most {MAX_PUBLISH_PROPERTIES} in one publish, all messages "
                              "together")


def check_batch(field: str, count: int) -> None:
    if not 1 <= count <= MAX_BATCH:
        raise InvalidArgument(field, count, f"1..{MAX_BATCH} per batch")


OPEN_STREAMS = 100
"""Streams that need no credentials open at once, on every service of the gRPC port together:
health `Watch` and reflection, and refused streams still waiting for their first frame."""


class StreamSlots:
    """A bound on streams open at once that no credentials admitted (`OPEN_STREAMS`, at most
    half of the server's `--max-rpcs`): without one, anyone who reaches the port could hold
    every call the server takes and each caller with credentials would be refused
    RESOURCE_EXHAUSTED. One per gRPC server, shared by its services."""

    __slots__ = ("limit", "used")

    def __init__(self, max_rpcs: int | None = None) -> None:
        self.limit = OPEN_STREAMS if max_rpcs is None else max(1, min(OPEN_STREAMS,
                                                                       max_rpcs // 2))
        self.used = 0

    def take(self) -> bool:
        """Take a slot; False when every one is taken."""
        if self.used >= self.limit:
            return False
        self.used += 1
        return True

    def give(self) -> None:
        self.used -= 1
