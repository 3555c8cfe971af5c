"""Every value an AMQP client sends, checked in one place before the topology, the engine or the
store sees it: names, queue and exchange arguments, binding arguments, message properties.

Errors are `AMQPError`s with the reply code the specification gives, naming the field and the
allowed range.
"""

from __future__ import annotations

import datetime
import decimal
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from adapters.amqp.dialect import MAX_DELIVERY_LIMIT, RETRY_INTERVAL_RANGE_S
from adapters.amqp.frontend.errors import (
    ACCESS_REFUSED,
    INTERNAL_ERROR,
    PRECONDITION_FAILED,
    AMQPError,
    short,
)
from adapters.amqp.frontend.routing import MATCH_MODES, X_MATCH
from adapters.amqp.frontend.values import FieldValue, as_int, as_str
from gateway.limits import MAX_NAME_BYTES, too_long

RESERVED_PREFIX = "amq."
"""Queue and exchange names clients may not declare (the server's own)."""
GROUP_ARGUMENT = "x-consumer-group"
"""Queue argument: the gateway group the queue consumes its topic in (default: its name)."""
RETRY_INTERVAL = "x-retry-interval"
DLX = "x-dead-letter-exchange"
DLRK = "x-dead-letter-routing-key"
MESSAGE_TTL = "x-message-ttl"
QUEUE_TYPE = "x-queue-type"
SINGLE_ACTIVE = "x-single-active-consumer"
PRIORITY = "x-priority"
"""Consume argument: the consumer's priority (higher first while it has prefetch room)."""
QUEUE_TYPES = ("classic", "quorum")
UNSUPPORTED_QUEUE_ARGUMENTS = {
    "x-max-length-bytes": "queues have no limit in bytes; x-max-length limits their messages",
    "x-max-priority": "messages are not reordered by priority",
    "x-dead-letter-strategy": "dead letters are routed at least once",
    "x-max-age": "streams are not served",
    "x-stream-max-segment-size-bytes": "streams are not served",
    "x-initial-cluster-size": "streams are not served",
}
"""RabbitMQ queue arguments the gateway does not carry out: declaring one is refused rather
than silently ignored. Other arguments are kept and ignored, as RabbitMQ does with those it
does not know."""
MAX_TTL_MS = 2**32 - 1
MAX_LENGTH = "x-max-length"
OVERFLOW = "x-overflow"
DROP_HEAD = "drop-head"
REJECT_PUBLISH = "reject-publish"
REJECT_PUBLISH_DLX = "reject-publish-dlx"
"""As reject-publish, and the refused copy is dead-lettered with reason `maxlen`."""
OVERFLOWS = (DROP_HEAD, REJECT_PUBLISH, REJECT_PUBLISH_DLX)
REJECTING = (REJECT_PUBLISH, REJECT_PUBLISH_DLX)
MAX_LENGTH_LIMIT = 2**63 - 1
EXPIRES = "x-expires"
MAX_EXPIRES_MS = 315_360_000_000
"""Ten years of 365 days: the longest `x-expires` RabbitMQ takes (past it, value_too_large)."""
DELIVERY_LIMIT = "x-delivery-limit"
ALTERNATE_EXCHANGE = "alternate-exchange"


def check_name(field: str, name: str, *, allow_empty: bool = False) -> str:
    """A queue, exchange or consumer name (a shortstr: at most 255 bytes), printable."""
    if not name:
        if allow_empty:
            return name
        raise AMQPError(PRECONDITION_FAILED, f"{field} must not be empty")
    if too_long(name, MAX_NAME_BYTES) or not name.isprintable():
        raise AMQPError(PRECONDITION_FAILED, f"{field}={short(name)}: at most {MAX_NAME_BYTES} "
                                             "bytes of printable characters")
    return name


def check_declarable(kind: str, name: str) -> None:
    """Names starting with `amq.` belong to the server."""
    if name.startswith(RESERVED_PREFIX):
        raise AMQPError(ACCESS_REFUSED, f"{kind} name {short(name)} contains reserved prefix "
                                        f"'{RESERVED_PREFIX}*'")


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """What a queue's arguments ask of the gateway."""

    group: str
    retry_interval_s: int | None = None
    """`x-retry-interval` (document 001), seconds; None: the policy's default."""
    dead_letter_exchange: str | None = None
    """`x-dead-letter-exchange`; "" is the default exchange; None: exhausted messages are
    discarded."""
    dead_letter_routing_key: str | None = None
    message_ttl_ms: int | None = None
    single_active: bool = False
    max_length: int | None = None
    """`x-max-length`: ready messages the queue keeps at most (None: no limit)."""
    overflow: str = DROP_HEAD
    """`x-overflow`: what a publish past `max_length` does (`maxlength`)."""
    expires_ms: int | None = None
    """`x-expires`: the queue is deleted once unused this long (`leases`); None: never."""
    delivery_limit: int | None = None
    """`x-delivery-limit`: failed deliveries before the message is dead-lettered (the policy's
    `max_retries`); None: the policy's 16."""

    def shown(self) -> dict[str, object]:
        """The arguments as a redeclare is compared against them (inequivalent if they differ)."""
        return {k: v for k, v in (
            (GROUP_ARGUMENT, self.group), (RETRY_INTERVAL, self.retry_interval_s),
            (DLX, self.dead_letter_exchange), (DLRK, self.dead_letter_routing_key),
            (MESSAGE_TTL, self.message_ttl_ms), (SINGLE_ACTIVE, self.single_active),
            (MAX_LENGTH, self.max_length), (EXPIRES, self.expires_ms),
            (OVERFLOW, None if self.overflow == DROP_HEAD else self.overflow),
            (DELIVERY_LIMIT, self.delivery_limit),
        ) if v is not None and v is not False}


def queue_settings(name: str, arguments: Mapping[str, FieldValue]) -> QueueSettings:
    """Check a queue's arguments (PRECONDITION_FAILED naming the argument and the range)."""
    for key, why in UNSUPPORTED_QUEUE_ARGUMENTS.items():
        if key in arguments:
            raise AMQPError(PRECONDITION_FAILED, f"queue argument {key} is not supported by the "
                                                 f"gateway ({why})")
    group = name
    if GROUP_ARGUMENT in arguments:
        raw = as_str(arguments[GROUP_ARGUMENT])
        if raw is None:
            raise AMQPError(PRECONDITION_FAILED, f"{GROUP_ARGUMENT} must be a string")
        group = check_name(GROUP_ARGUMENT, raw)
    interval = None
    if RETRY_INTERVAL in arguments:
        interval = as_int(arguments[RETRY_INTERVAL])
        low, high = RETRY_INTERVAL_RANGE_S
        if interval is None or not low <= interval <= high:
            raise AMQPError(PRECONDITION_FAILED,
                            f"invalid arg '{RETRY_INTERVAL}' for queue {short(name)}: "
                            f"{short(arguments[RETRY_INTERVAL])}; allowed: an integer number of "
                            f"seconds, {low}..{high}")
    dlx = None
    if DLX in arguments:
        dlx = as_str(arguments[DLX])
        if dlx is None:
            raise AMQPError(PRECONDITION_FAILED, f"invalid arg '{DLX}': an exchange name")
        check_name(DLX, dlx, allow_empty=True)
    dlrk = None
    if DLRK in arguments:
        dlrk = as_str(arguments[DLRK])
        if dlrk is None:
            raise AMQPError(PRECONDITION_FAILED, f"invalid arg '{DLRK}': a routing key")
        check_name(DLRK, dlrk, allow_empty=True)
        if dlx is None:
            raise AMQPError(PRECONDITION_FAILED, f"{DLRK} defined, but {DLX} is not defined")
    ttl = _integer(arguments, MESSAGE_TTL, 0, MAX_TTL_MS, "ms")
    if QUEUE_TYPE in arguments and as_str(arguments[QUEUE_TYPE]) not in QUEUE_TYPES:
        raise AMQPError(PRECONDITION_FAILED, f"invalid arg '{QUEUE_TYPE}': "
                                             f"{short(arguments[QUEUE_TYPE])}; allowed: "
                                             f"{', '.join(QUEUE_TYPES)}")
    single = False
    if SINGLE_ACTIVE in arguments:
        value = arguments[SINGLE_ACTIVE]
        if not isinstance(value, bool):
            raise AMQPError(PRECONDITION_FAILED, f"invalid arg '{SINGLE_ACTIVE}': a boolean")
        single = value
    return QueueSettings(
        group, interval, dlx, dlrk, ttl, single,
        _integer(arguments, MAX_LENGTH, 0, MAX_LENGTH_LIMIT, "messages"), _overflow(arguments),
        _integer(arguments, EXPIRES, 1, MAX_EXPIRES_MS, "ms"),
        _integer(arguments, DELIVERY_LIMIT, 0, MAX_DELIVERY_LIMIT, "failed deliveries"))


def _integer(arguments: Mapping[str, FieldValue], key: str, low: int, high: int,
             unit: str) -> int | None:
    """An integer argument in `low..high` (None: not given)."""
    if key not in arguments:
        return None
    value = as_int(arguments[key])
    if value is None or not low <= value <= high:
        raise AMQPError(PRECONDITION_FAILED, f"invalid arg '{key}': {short(arguments[key])}; "
                                             f"allowed: {low}..{high} {unit}")
    return value


def _overflow(arguments: Mapping[str, FieldValue]) -> str:
    """`x-overflow`: drop-head (the default), reject-publish or reject-publish-dlx."""
    overflow = DROP_HEAD
    if OVERFLOW in arguments:
        raw = as_str(arguments[OVERFLOW])
        if raw not in OVERFLOWS:
            raise AMQPError(PRECONDITION_FAILED, f"invalid arg '{OVERFLOW}': "
                                                 f"{short(arguments[OVERFLOW])}; allowed: "
                                                 f"{', '.join(OVERFLOWS)}")
        overflow = raw
    return overflow


def check_quorum(name: str, arguments: Mapping[str, FieldValue], *, server_named: bool,
                 durable: bool, exclusive: bool, auto_delete: bool) -> None:
    """A new quorum queue (`x-queue-type` quorum) is named by its client, durable, neither
    exclusive nor auto-delete: RabbitMQ refuses it otherwise, in this order, with these
    texts (it was declared as a classic queue of those properties)."""
    if QUEUE_TYPE not in arguments or as_str(arguments[QUEUE_TYPE]) != "quorum":
        return
    if server_named:
        raise AMQPError(PRECONDITION_FAILED, "Cannot declare a server-named queue for type "
                                             "rabbit_quorum_queue")
    for wrong, what in ((auto_delete, "auto-delete"), (exclusive, "exclusive-owner"),
                        (not durable, "non-durable")):
        if wrong:
            raise AMQPError(PRECONDITION_FAILED, f"invalid property '{what}' for queue "
                                                 f"{short(name)} in vhost '/'")


def exchange_alternate(arguments: Mapping[str, FieldValue]) -> str | None:
    """An exchange's `alternate-exchange` argument, checked."""
    if ALTERNATE_EXCHANGE not in arguments:
        return None
    name = as_str(arguments[ALTERNATE_EXCHANGE])
    if name is None:
        raise AMQPError(PRECONDITION_FAILED, f"invalid arg '{ALTERNATE_EXCHANGE}': an exchange "
                                             "name")
    return check_name(ALTERNATE_EXCHANGE, name)


def queue_type(arguments: Mapping[str, FieldValue]) -> str:
    """A declared queue's type: "quorum", or "classic" (without `x-queue-type`)."""
    return "quorum" if as_str(arguments.get(QUEUE_TYPE)) == "quorum" else "classic"


CANCEL_ON_FAILOVER = "x-cancel-on-ha-failover"
CREDIT = "x-credit"
CONSUMER_ARGUMENTS = {
    "classic": (PRIORITY, CANCEL_ON_FAILOVER, CREDIT),
    "quorum": (PRIORITY, CREDIT),
    "stream": ("x-stream-offset", CREDIT),
}
"""The consume arguments RabbitMQ (3.10) knows, by the queue type that takes each: one another
type takes is refused on a queue of this type (406); one no type takes is ignored."""
_KNOWN_CONSUMER_ARGUMENTS = frozenset(a for names in CONSUMER_ARGUMENTS.values() for a in names)


def consumer_priority(queue: str, arguments: Mapping[str, FieldValue],
                      queue_type: str = "classic") -> int:
    """A `basic.consume`'s arguments checked as RabbitMQ checks them, and its `x-priority` (0
    without it): an integer of any width. An `x-credit` that is not a table closes the
    connection (541, as RabbitMQ); an argument of another queue type (`x-stream-offset`;
    `x-cancel-on-ha-failover` on a quorum queue) is PRECONDITION_FAILED, and so is an
    `x-priority` that is not an integer or an `x-cancel-on-ha-failover` that is not a bool,
    naming the type (RabbitMQ's words). Consume arguments no queue type knows are ignored, as
    RabbitMQ ignores them."""
    if CREDIT in arguments and not isinstance(arguments[CREDIT], Mapping):
        raise AMQPError(INTERNAL_ERROR, f"invalid arg '{CREDIT}': a table (credit, drain), "
                                        f"got {_type_name(arguments[CREDIT])}", hard=True)
    taken = CONSUMER_ARGUMENTS[queue_type]
    for name in arguments:
        if name in _KNOWN_CONSUMER_ARGUMENTS and name not in taken:
            raise AMQPError(PRECONDITION_FAILED, f"invalid arg '{name}' for queue "
                                                 f"{short(queue)} in vhost '/' of queue type "
                                                 f"rabbit_{queue_type}_queue")
    if CANCEL_ON_FAILOVER in arguments and not isinstance(arguments[CANCEL_ON_FAILOVER], bool):
        raise AMQPError(PRECONDITION_FAILED, f"invalid arg '{CANCEL_ON_FAILOVER}' for queue "
                                             f"{short(queue)} in vhost '/': {{unacceptable_type,"
                                             f"{_type_name(arguments[CANCEL_ON_FAILOVER])}}}")
    if PRIORITY not in arguments:
        return 0
    value = arguments[PRIORITY]
    priority = as_int(value)
    if priority is None:
        raise AMQPError(PRECONDITION_FAILED, f"invalid arg '{PRIORITY}' for queue {short(queue)} "
                                             f"in vhost '/': \"expected integer, got "
                                             f"{_type_name(value)}\"")
    return priority


def _type_name(value: FieldValue) -> str:
    """A field value's type as RabbitMQ names it in errors."""
    names: tuple[tuple[Any, str], ...] = (
        (bool, "bool"), (str, "longstr"), ((bytes, bytearray), "binary"), (float, "double"),
        (decimal.Decimal, "decimal"), (datetime.datetime, "timestamp"), (Mapping, "table"),
        ((list, tuple), "array"))
    if value is None:
        return "void"
    if isinstance(value, int) and not isinstance(value, bool):
        # The width the common clients encode it in (its width on the wire is not kept).
        return next((name for bits, name in ((8, "byte"), (16, "short"), (32, "signedint"))
                     if -(1 << (bits - 1)) <= value < 1 << (bits - 1)), "long")
    for kind, name in names:
        if isinstance(value, kind):
            return name
    return type(value).__name__


def check_binding_arguments(kind: str, arguments: Mapping[str, FieldValue]) -> None:
    """A headers binding's `x-match` is one of the modes."""
    if kind == "headers" and X_MATCH in arguments:
        mode = as_str(arguments[X_MATCH])
        if mode not in MATCH_MODES:
            raise AMQPError(PRECONDITION_FAILED, f"invalid x-match field value "
                                                 f"{short(arguments[X_MATCH])}; allowed: "
                                                 f"{', '.join(MATCH_MODES)}")


def check_user_id(value: str | None, user: str) -> None:
    """A message's `user_id` property names the user who published it (RabbitMQ's rule): no
    client may publish in another's name."""
    if value and value != user:
        raise AMQPError(PRECONDITION_FAILED, f"user_id property set to {short(value)} but "
                                             f"authenticated user was {short(user)}")


def check_delivery_mode(value: object) -> None:
    """A message's `delivery_mode` property, when set: 1 (transient) or 2 (persistent); any
    other is refused as RabbitMQ refuses it (stored, it went out to consumers without one)."""
    if value is not None and value not in (1, 2):
        raise AMQPError(PRECONDITION_FAILED, f"invalid message: {{delivery_mode_unknown,{value}}}"
                                             ": delivery_mode must be 1 (transient) or 2 "
                                             "(persistent)")


def check_expiration(value: str) -> int:
    """A message's `expiration` property: milliseconds as decimal digits."""
    if not value.isdigit() or not value.isascii() or int(value) > MAX_TTL_MS:
        raise AMQPError(PRECONDITION_FAILED, f"invalid expiration {short(value)}: "
                                             f"milliseconds, 0..{MAX_TTL_MS}")
    return int(value)
