"""The RabbitMQ retry policy (document 001).

`x-retry-interval` per queue, 10..1800 s; a message not acknowledged within 1 minute counts as a
failure; 16 retries; then the queue's dead-letter exchange if one is configured, else discard.
The document gives no default interval; the gateway uses 60 s, the Professional Edition default
in the product's later documentation, and prints it in every plan.
"""

from __future__ import annotations

from collections.abc import Mapping

from adapters.amqp.counters import DELIVERY_COUNT_HEADER
from adapters.amqp.naming import AMQP_FRONT_END, RABBITMQ
from gateway.core.backoff import FixedBackoff
from gateway.core.naming import NamingScheme
from gateway.core.options import OptionReader
from gateway.core.policy import MINUTE_MS, SECOND_MS, Placement, RetryPolicy
from gateway.core.properties import DEAD_LETTER_ROUTE, DEATH_REASON, ORIGINAL_QUEUE, RETRIES
from gateway.core.registry import Registry
from gateway.core.traits import CountName, DeadLetterOption, IntervalOption, PolicyTraits
from gateway.errors import InvalidArgument

DIALECT = "rabbitmq"
RETRY_INTERVAL_RANGE_S = (10, 1800)
DEFAULT_RETRY_INTERVAL_S = 60
ACK_TIMEOUT_MS = MINUTE_MS
MAX_RETRIES = 16
MAX_DELIVERY_LIMIT = 2**31 - 1
FIRST_DEATH_REASON = "x-first-death-reason"
FIRST_DEATH_QUEUE = "x-first-death-queue"
LAST_DEATH_REASON = "x-last-death-reason"
LAST_DEATH_QUEUE = "x-last-death-queue"
"""Why and where the message died last (RabbitMQ 3.13's headers): written on every death, where
the first-death ones are kept from the first."""
REJECTED = "rejected"
EXPIRED = "expired"
MAXLEN = "maxlen"
"""Dropped from the head of a queue past its `x-max-length`."""
MAX_EXCHANGE_BYTES = 255
"""An AMQP short string: the longest exchange name."""



def policy(options: Mapping[str, str], naming: NamingScheme | None) -> RetryPolicy:
    reader = OptionReader("rabbitmq", options)
    low, high = RETRY_INTERVAL_RANGE_S
    interval_s = reader.integer(
        "x_retry_interval_s", DEFAULT_RETRY_INTERVAL_S, low, high, "s"
    )
    dlx = reader.text("x_dead_letter_exchange")
    if dlx and (len(dlx.encode()) > MAX_EXCHANGE_BYTES or not dlx.isprintable()):
        # Taken as it was: a name no exchange can have, or one a line break splits in logs.
        raise InvalidArgument("x_dead_letter_exchange", dlx,
                              f"an exchange name of 1..{MAX_EXCHANGE_BYTES} bytes of printable "
                              "text (or none)")
    reader.forbid("max_retries", "not configurable for RabbitMQ (16 retries; a quorum queue's "
                                 "x_delivery_limit sets it)")
    # A quorum queue's `x-delivery-limit` (AMQP front end): failed deliveries before the
    # message is dead-lettered, in place of document 001's 16.
    limit = reader.optional_integer("x_delivery_limit", 0, MAX_DELIVERY_LIMIT)
    return RetryPolicy(
        name="rabbitmq",
        dialect=DIALECT,
        backoff=FixedBackoff(interval_s * SECOND_MS),
        naming=naming or RABBITMQ,
        max_retries=MAX_RETRIES if limit is None else limit,
        placement=Placement.IN_PLACE,
        delivery_timeout_ms=ACK_TIMEOUT_MS,
        dead_letter=bool(dlx),
        settings=reader.finish(),
    )


class RabbitMQDialect:
    name = DIALECT

    def retry_properties(
        self,
        properties: Mapping[str, str],
        *,
        topic: str,
        retry_topic: str,
        message_id: str,
        retries: int,
    ) -> dict[str, str]:
        out = dict(properties)
        out[RETRIES] = str(retries)
        return out

    def dead_letter_properties(
        self,
        properties: Mapping[str, str],
        *,
        topic: str,
        dead_letter_topic: str,
        message_id: str,
        retries: int,
        reason: str,
    ) -> dict[str, str]:
        out = dict(properties)
        out[ORIGINAL_QUEUE] = topic
        # Published through the queue's dead-letter exchange with the original queue as routing
        # key, as RabbitMQ keeps a dead-lettered message's routing key.
        out[DEAD_LETTER_ROUTE] = topic
        out[DEATH_REASON] = reason
        out[RETRIES] = str(retries)
        # What RabbitMQ writes on a message it dead-letters, for consumers of the dead letters.
        out.setdefault(FIRST_DEATH_REASON, death_reason(reason))
        out.setdefault(FIRST_DEATH_QUEUE, topic)
        out[LAST_DEATH_REASON] = death_reason(reason)
        out[LAST_DEATH_QUEUE] = topic
        return out


def death_reason(reason: str) -> str:
    """RabbitMQ's name for why a message died: `rejected` (nack or reject without requeue),
    `expired` (its TTL passed), `maxlen` (dropped from a full queue's head), `delivery_limit` (its
    retries ran out)."""
    if "exhausted" in reason:
        return "delivery_limit"
    if reason in (EXPIRED, MAXLEN):
        return reason
    return REJECTED


def traits() -> PolicyTraits:
    """How AMQP clients see the policy and what tunes it (`gateway migrate plan`)."""
    low, high = RETRY_INTERVAL_RANGE_S
    return PolicyTraits(
        count=(
            CountName(DELIVERY_COUNT_HEADER, "header", 0, "failed deliveries so far; absent on the "
                      "first delivery"),
            CountName("redelivered", "flag", 0, "true on every retried delivery"),
            CountName("x-death", "header", 0, "on dead letters: a count per queue and reason"),
        ),
        dead_letter_properties=("x-death", FIRST_DEATH_REASON, FIRST_DEATH_QUEUE),
        knobs=(
            IntervalOption("x_retry_interval_s", low, high, SECOND_MS, "x-retry-interval"),
            DeadLetterOption("x_dead_letter_exchange", "{topic}.dlx", "x-dead-letter-exchange"),
        ),
        delivery_timeout="1 min acknowledgement timeout (fixed)",
    )


def register(registry: Registry) -> None:
    registry.add_scheme(RABBITMQ)
    registry.add_scheme(AMQP_FRONT_END)
    registry.add_dialect(RabbitMQDialect())
    registry.add_policy("rabbitmq", policy)
    registry.add_traits("rabbitmq", traits())
