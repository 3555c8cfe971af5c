"""AMQP messages to gateway messages and back.

A message's headers become message properties of the same names, so a Pulsar or RocketMQ
consumer reads them as its own properties (string headers as they are; other values as text).
The basic properties travel as `amqp.*` properties (`amqp.content-type`, `amqp.correlation-id`,
…), the exchange and routing key it was published with as `amqp.exchange` and
`amqp.routing-key`. Headers that are not strings are also kept with their AMQP types
(`amqp.typed-headers`), so an AMQP consumer gets them back as they were sent. Any message,
whoever published it, reaches an AMQP consumer with its properties as headers.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from pamqp import commands

from adapters.amqp.frontend import edge, typed
from adapters.amqp.frontend.errors import PRECONDITION_FAILED, AMQPError, short
from adapters.amqp.frontend.table import Stamp
from adapters.amqp.frontend.values import as_text, table_to_text
from gateway.backend.base import OutMessage
from gateway.core.properties import RESERVED_PREFIX
from gateway.engine.api import Delivery

PREFIX = "amqp."
EXCHANGE = PREFIX + "exchange"
ROUTING_KEY = PREFIX + "routing-key"
TYPED = PREFIX + "typed-headers"
TAG_HEADER = "TAGS"
"""The header an AMQP consumer reads a message's tag from (a RocketMQ producer's tag; RocketMQ's
own property name for it)."""
DELIVERY_COUNT = "x-delivery-count"
"""The header an AMQP consumer reads the message's failed deliveries from (0 on the first
delivery, then 1, 2, … as the gateway's one attempt counter says; RabbitMQ quorum queues' name)."""
TEXT_PROPERTIES = {
    "content_type": PREFIX + "content-type",
    "content_encoding": PREFIX + "content-encoding",
    "correlation_id": PREFIX + "correlation-id",
    "reply_to": PREFIX + "reply-to",
    "expiration": PREFIX + "expiration",
    "message_id": PREFIX + "message-id",
    "message_type": PREFIX + "type",
    "user_id": PREFIX + "user-id",
    "app_id": PREFIX + "app-id",
}
NUMBER_PROPERTIES = {
    "delivery_mode": PREFIX + "delivery-mode",
    "priority": PREFIX + "priority",
    "timestamp": PREFIX + "timestamp",
}
MAPPED = frozenset({EXCHANGE, ROUTING_KEY, TYPED, *TEXT_PROPERTIES.values(),
                    *NUMBER_PROPERTIES.values()})


def out_message(properties: commands.Basic.Properties, body: bytes, exchange: str,
                routing_key: str) -> OutMessage:
    """The gateway message for a published AMQP message (properties checked)."""
    props: dict[str, str] = {EXCHANGE: exchange, ROUTING_KEY: routing_key}
    for attr, name in TEXT_PROPERTIES.items():
        value = getattr(properties, attr, None)
        if value:
            props[name] = value if isinstance(value, str) else as_text(value)
    if properties.expiration is not None:  # present but empty is invalid too (as RabbitMQ)
        expiration = properties.expiration
        edge.check_expiration(expiration if isinstance(expiration, str) else as_text(expiration))
    edge.check_delivery_mode(properties.delivery_mode)
    for attr, name in NUMBER_PROPERTIES.items():
        value = getattr(properties, attr, None)
        if value is None:
            continue
        if isinstance(value, datetime.datetime):
            props[name] = str(int(value.timestamp()))
        else:
            props[name] = str(value)
    headers = properties.headers or {}
    duplicates = getattr(headers, "duplicates", None)
    if duplicates:
        raise AMQPError(PRECONDITION_FAILED, f"header {short(duplicates[0])} comes more than "
                                             "once in a table: each name must come once")
    typed = {}
    for key, value in headers.items():
        if not key:
            raise AMQPError(PRECONDITION_FAILED, "a header name must not be empty")
        if key.startswith(PREFIX) and key in MAPPED:
            raise AMQPError(PRECONDITION_FAILED, f"header {short(key)} is the gateway's name "
                                                 "for a basic property; set the property")
        if key.startswith(RESERVED_PREFIX):  # what the gateway writes on its own copies
            raise AMQPError(PRECONDITION_FAILED, f"header {short(key)}: headers must not start "
                                                 f"with {RESERVED_PREFIX} (reserved for the "
                                                 "gateway)")
        props[key] = as_text(value)
        if not isinstance(value, str):
            typed[key] = value
    if typed:
        props[TYPED] = table_to_text(typed)
    return OutMessage(body=body, properties=props)


def expiration_ms(properties: Mapping[str, str]) -> int | None:
    """A message's per-message TTL, if it was published with one (one stored through another
    front end unchecked counts only as ASCII decimal digits: `int` refuses some that
    `isdigit` takes, "²")."""
    text = properties.get(TEXT_PROPERTIES["expiration"])
    if text is None or not text.isascii() or not text.isdigit():
        return None
    return int(text)


def delivery_properties(delivery: Delivery) -> dict[str, Any]:
    """The basic properties an AMQP consumer gets a delivery with (pamqp's attribute names and
    values)."""
    props = delivery.properties
    values: dict[str, Any] = {}
    for attr, name in TEXT_PROPERTIES.items():
        text = props.get(name)
        if text and len(text.encode("utf-8", "replace")) <= 255:
            if attr == "expiration" and expiration_ms(props) is None:
                continue  # not milliseconds (stored unchecked): no time to live, none sent
            values[attr] = text
    for attr, name in NUMBER_PROPERTIES.items():
        number = _int(props.get(name))
        if number is None:
            continue
        if attr == "timestamp":
            if 0 <= number < 2**64:
                values[attr] = Stamp(number)  # seconds as sent, written back as they are
        elif (attr == "delivery_mode" and number in (1, 2)) or (
            attr == "priority" and 0 <= number <= 255
        ):
            values[attr] = number
    headers: dict[str, object] = {}
    for key, value in props.items():
        if key in MAPPED or not key or len(key.encode("utf-8", "replace")) > 255:
            continue
        headers[key] = value
    headers.update(typed.decode(props.get(TYPED)))  # what cannot go out typed goes as text
    if delivery.tag and TAG_HEADER not in headers:
        headers[TAG_HEADER] = delivery.tag
    if delivery.retries > 0:
        headers[DELIVERY_COUNT] = delivery.retries
    elif DELIVERY_COUNT in headers:
        del headers[DELIVERY_COUNT]
    if headers:
        values["headers"] = headers
    return values


def shortstr(text: str) -> str:
    """`text` cut to what a short string holds (255 bytes of UTF-8)."""
    data = text.encode("utf-8", "replace")
    return text if len(data) <= 255 else data[:255].decode("utf-8", "ignore")


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None
