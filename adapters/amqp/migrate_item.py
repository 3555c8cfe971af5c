"""A RabbitMQ queue's message as a `gateway migrate copy` item (`adapters.amqp.migrate`).

A message written by a gateway's RabbitMQ back end (its `x-gateway-*` headers) keeps its key,
tag, due time, counters and, on a dead letter, its reason and time. Any other message comes
with its basic properties as `amqp.*` properties and its headers as properties; one RabbitMQ
dead-lettered (an `x-death` header) also keeps what the header says of its death: the reason
and time of its latest one as the gateway's dead-letter reason and time, and as its attempt
count the deliveries that `x-death` counts as refused (its `rejected` and `delivery_limit`
entries), so that a copy stored as a gateway dead letter (`part=dead-letter`) shows them as
the gateway's own dead letters do.
"""

from __future__ import annotations

import datetime
import hashlib
import time
from collections.abc import Mapping

from aiormq.abc import DeliveredMessage

from adapters.amqp.codec import decode
from adapters.amqp.frontend.errors import AMQPError as AMQPFrameError
from adapters.amqp.frontend.messages import out_message
from adapters.amqp.frontend.values import as_text
from gateway.backend.base import OutMessage
from gateway.core.properties import ATTEMPT, COUNT_MAX, DEAD_AT, DEAD_REASON, TIME_MAX_MS
from gateway.limits import message_size
from gateway.migrate.endpoint import READY, Item

REFUSED_DEATHS = ("rejected", "delivery_limit")
"""`x-death` reasons that stand for deliveries a consumer refused (not a TTL, not a full
queue)."""


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
        # The key as before the death was read: a run resumed after an upgrade finds it.
        key = properties.message_id or _digest(out)
        death = death_of(headers)
        if death is not None:
            reason, at_ms, attempt = death
            props[DEAD_REASON] = reason
            if at_ms:
                props[DEAD_AT] = str(at_ms)
            out = OutMessage(body, props, message_id=out.message_id, attempt=attempt)
    first = not getattr(message.delivery, "redelivered", True)
    return Item(key, READY, out, message.delivery, message_size(out), first)


def published_properties(properties: Mapping[str, str]) -> Mapping[str, str]:
    """The properties a copy is published into a RabbitMQ queue with: where its `x-death`
    travels as it was, the dead-letter reason and time read off it (`item_of`, for a gateway
    destination) left out, so that no `x-gateway-*` header is added to it."""
    if "x-death" not in properties:
        return properties
    return {k: v for k, v in properties.items() if k not in (DEAD_REASON, DEAD_AT)}


def death_of(headers: Mapping[str, object]) -> tuple[str, int, int] | None:
    """What a RabbitMQ dead letter's `x-death` header says (its entries newest first): the
    latest death's reason and time (wall-clock ms, 0 unknown), and the refused deliveries
    counted in all of them; None for a message without one."""
    deaths = headers.get("x-death")
    if not isinstance(deaths, list | tuple):
        return None
    entries = [e for e in deaths if isinstance(e, Mapping)]
    if not entries:
        return None
    latest = entries[0]
    reason = latest.get("reason") or headers.get("x-first-death-reason") or ""
    at = latest.get("time")
    at_ms = 0
    if isinstance(at, datetime.datetime):
        at_ms = min(max(int(at.timestamp() * 1000), 0), TIME_MAX_MS)
    refused = 0
    for entry in entries:
        count = entry.get("count")
        if entry.get("reason") in REFUSED_DEATHS and type(count) is int and count > 0:
            refused += count
    text = reason if isinstance(reason, str) else as_text(reason)
    return text, at_ms, min(refused, COUNT_MAX)


def _digest(message: OutMessage) -> str:
    """A key for a message without an id: its body and properties."""
    h = hashlib.sha256(message.body)
    for k in sorted(message.properties):
        h.update(b"\0" + k.encode("utf-8", "replace") + b"\0"
                 + message.properties[k].encode("utf-8", "replace"))
    return "sha256:" + h.hexdigest()
