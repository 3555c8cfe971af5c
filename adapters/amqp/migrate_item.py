"""A RabbitMQ queue's message as a `gateway migrate copy` item (`adapters.amqp.migrate`).

A message written by a gateway's RabbitMQ back end (its `x-gateway-*` headers) keeps its key,
tag, due time, counters and, on a dead letter, its reason and time. Any other message comes
with its basic properties as `amqp.*` properties and its headers as properties.
"""

from __future__ import annotations

import hashlib
import time

from aiormq.abc import DeliveredMessage

from adapters.amqp.codec import decode
from adapters.amqp.frontend.errors import AMQPError as AMQPFrameError
from adapters.amqp.frontend.messages import out_message
from adapters.amqp.frontend.values import as_text
from gateway.backend.base import OutMessage
from gateway.core.properties import ATTEMPT
from gateway.limits import message_size
from gateway.migrate.endpoint import READY, Item


def item_of(message: DeliveredMessage) -> Item:
    """A queue message as a copy item (see the module docstring)."""
    properties = message.header.properties
    headers = properties.headers or {}
    body = message.body
    if ATTEMPT in headers:
        env = decode(headers, properties.message_id, properties.timestamp,
                     int(time.time() * 1000))
        out = OutMessage(body, env.properties, env.key, env.tag, env.deliver_at_ms,
                         env.message_id, env.stated_attempt, env.retries)
        key = properties.message_id or _digest(out)
    else:
        delivery = message.delivery
        exchange = getattr(delivery, "exchange", "") or ""
        routing_key = getattr(delivery, "routing_key", "") or ""
        try:
            props = dict(out_message(properties, body, exchange, routing_key).properties)
        except AMQPFrameError:
            # What the AMQP front end would refuse from a publisher (a header named like a
            # basic property's `amqp.*` name, an expiration that is no number): the headers
            # as they are, as text.
            props = {k: as_text(v) for k, v in headers.items() if k}
        out = OutMessage(body, props, message_id=properties.message_id or "")
        key = properties.message_id or _digest(out)
    first = not getattr(message.delivery, "redelivered", True)
    return Item(key, READY, out, message.delivery, message_size(out), first)


def _digest(message: OutMessage) -> str:
    """A key for a message without an id: its body and properties."""
    h = hashlib.sha256(message.body)
    for k in sorted(message.properties):
        h.update(b"\0" + k.encode("utf-8", "replace") + b"\0"
                 + message.properties[k].encode("utf-8", "replace"))
    return "sha256:" + h.hexdigest()
