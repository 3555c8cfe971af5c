"""How a gateway message is carried in AMQP 0-9-1 properties and headers, both ways.

* message id: the AMQP `message_id` property;
* key, tag: headers `x-key`, `x-tag`;
* counters: headers `x-gateway-attempt`, `x-gateway-retries` (see `counters`);
* publish time and deliver-at time (ms): headers `x-gateway-publish-ms`, `x-gateway-deliver-at-ms`
  (the AMQP `timestamp` property, in seconds, is set too for plain clients);
* user properties: plain headers under their own names, so plain consumers read them as-is.

Reading accepts messages from plain publishers: missing headers take defaults, values of any
header type become text, broker bookkeeping headers (`x-death`, ...) are not user properties.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

from aio_pika.abc import FieldValue
from pamqp import commands as spec

from adapters.amqp.counters import header_int, header_text
from gateway.backend.base import OutMessage
from gateway.backend.envelope import Envelope
from gateway.core.properties import (
    ATTEMPT,
    CARRIED_PREFIX,
    DEAD_LETTER_ROUTE,
    DELIVER_AT_MS,
    PUBLISH_MS,
    RETRIES,
    TIME_MAX_MS,
)

KEY_HEADER = "x-key"
TAG_HEADER = "x-tag"

GATEWAY_HEADERS = frozenset(
    {
        KEY_HEADER,
        TAG_HEADER,
        ATTEMPT,
        RETRIES,
        PUBLISH_MS,
        DELIVER_AT_MS,
        DEAD_LETTER_ROUTE,
    }
)
"""Carried in dedicated fields or consumed by the back end: never copied as user properties."""
PERSISTENT = 2
"""AMQP delivery mode of messages written to disk."""
BROKER_HEADERS = frozenset(
    {
        "x-death",
        "x-delivery-count",
        "x-first-death-exchange",
        "x-first-death-queue",
        "x-first-death-reason",
        "x-last-death-exchange",
        "x-last-death-queue",
        "x-last-death-reason",
    }
)
"""Headers the broker writes (its delay queues dead-letter every waiting retry back): never
user properties. A message property of one of these names (the gateway's dialect writes
`x-first-death-*` on its own dead letters) travels as `CARRIED_PREFIX + name` instead."""
_NOT_PROPERTIES = GATEWAY_HEADERS | BROKER_HEADERS


def encode(message: OutMessage, message_id: str, publish_ms: int) -> spec.Basic.Properties:
    """The AMQP properties of a persistent message carrying `message` with the given id and
    publish time (built directly: the body travels beside them)."""
    headers: dict[str, FieldValue] = {
        name: value for name, value in message.properties.items() if name not in GATEWAY_HEADERS
    }
    for name in BROKER_HEADERS:
        if name in headers:
            headers[CARRIED_PREFIX + name] = headers.pop(name)
    headers[ATTEMPT] = message.attempt
    headers[RETRIES] = message.retries
    headers[PUBLISH_MS] = publish_ms
    if message.key:
        headers[KEY_HEADER] = message.key
    if message.tag:
        headers[TAG_HEADER] = message.tag
    if message.deliver_at_ms:
        headers[DELIVER_AT_MS] = message.deliver_at_ms
    return spec.Basic.Properties(
        headers=headers,
        delivery_mode=PERSISTENT,
        message_id=message_id,
        timestamp=datetime.fromtimestamp(publish_ms // 1000, tz=UTC),
    )


def decode(
    headers: Mapping[str, object] | None,
    message_id: str | None,
    timestamp: datetime | None,
    received_ms: int,
) -> Envelope:
    """Gateway fields of a received message; `received_ms` stands in for a missing publish time."""
    data: Mapping[str, object] = headers or {}
    publish_ms = header_int(data.get(PUBLISH_MS), TIME_MAX_MS)
    if publish_ms is None:
        publish_ms = int(timestamp.timestamp() * 1000) if timestamp is not None else received_ms
    deliver_at_ms = header_int(data.get(DELIVER_AT_MS), TIME_MAX_MS) or 0
    properties: dict[str, str] = {}
    carried: list[tuple[str, object]] = []
    for name, value in data.items():
        if name in _NOT_PROPERTIES:
            continue
        if name.startswith(CARRIED_PREFIX):
            carried.append((name[len(CARRIED_PREFIX):], value))
            continue
        properties[name] = value if type(value) is str else header_text(value)
    for name, value in carried:  # a carried name wins over a plain header of the same name
        properties[name] = header_text(value)
    return Envelope(
        message_id=message_id or "",
        properties=properties,
        key=header_text(data.get(KEY_HEADER, "")),
        tag=header_text(data.get(TAG_HEADER, "")),
        publish_ms=publish_ms,
        deliver_at_ms=deliver_at_ms,
        stated_attempt=header_int(data.get(ATTEMPT)) or 0,
        retries=header_int(data.get(RETRIES)) or 0,
    )
