"""Delayed-message exchanges (exchange type `x-delayed-message`, as RabbitMQ's delayed message
exchange plugin declares them): the exchange routes as the type its `x-delayed-type` argument
names (direct, fanout, topic or headers), and a message published to it with an integer
`x-delay` header (ms) greater than 0 reaches its queues that much later (the store keeps it
until then, like any delayed message: durable across restarts). Without the header, or with one
that is not an integer or not above 0, the message goes at once, as from the plugin.

A dead letter routed through such an exchange waits for its own `x-delay` the same way.
Routing happens when the message is published (the plugin routes when the delay ends: a queue
bound meanwhile gets it there, here not). Delays past the gateway's longest (400 days) are
refused (406 PRECONDITION_FAILED) rather than shortened."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from adapters.amqp.frontend.errors import PRECONDITION_FAILED, AMQPError
from adapters.amqp.frontend.routing import TYPES
from adapters.amqp.frontend.values import FieldValue, as_str
from gateway.backend.base import OutMessage
from gateway.limits import MAX_DELAY_MS

DELAYED = "x-delayed-message"
DELAYED_TYPE = "x-delayed-type"
X_DELAY = "x-delay"


def check(arguments: Mapping[str, FieldValue]) -> None:
    """A delayed-message exchange's `x-delayed-type` names a type it can route as."""
    kind = as_str(arguments.get(DELAYED_TYPE))
    if kind not in TYPES:
        raise AMQPError(PRECONDITION_FAILED, f"Invalid argument, '{DELAYED_TYPE}' must be an "
                                             f"existing exchange type ({', '.join(TYPES)})")


def routing_kind(kind: str, arguments: Mapping[str, FieldValue]) -> str:
    """The type an exchange routes as: its own, or a delayed-message exchange's delayed type."""
    if kind != DELAYED:
        return kind
    return as_str(arguments.get(DELAYED_TYPE)) or ""


def delay_ms(headers: Mapping[str, FieldValue]) -> int:
    """How long a message published to a delayed-message exchange waits (0: not at all)."""
    value = headers.get(X_DELAY)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        return 0
    if value > MAX_DELAY_MS:
        raise AMQPError(PRECONDITION_FAILED, f"{X_DELAY} header of {value} ms: at most "
                                             f"{MAX_DELAY_MS} ms (400 days)")
    return value


def held(message: OutMessage, headers: Mapping[str, FieldValue], now_ms: int) -> OutMessage:
    """`message` (a dead letter) with the delivery time its `x-delay` header asks for; one
    past the longest delay goes at once (no client is there to be told)."""
    try:
        wait_ms = delay_ms(headers)
    except AMQPError:
        return message
    return dataclasses.replace(message, deliver_at_ms=now_ms + wait_ms) if wait_ms else message
