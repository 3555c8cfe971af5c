"""Pulsar retry policies: the retry letter topic (`reconsumeLater`) and negative acks.

Numbers from SEMANTICS.md (document 004): delays 1..864000 s, levels 1s .. 2h (the shared
18-level table, `gateway.core.backoff.DELAY_LEVELS_MS`), incremental levels by default,
16 redeliveries (the 17th failure goes to the DLQ), Shared/Key_Shared retry with a delay while
Exclusive/Failover retry at once, negativeAckRedeliveryDelay 1 min by default and no limit unless
a dead-letter policy sets one. Delayed delivery (`deliverAfter` / `deliverAt`) applies to Shared
and Key_Shared subscriptions only: Exclusive and Failover ones get such messages at once.
"""

from __future__ import annotations

from collections.abc import Mapping

from adapters.pulsar.naming import DEFAULT, SCHEMES
from gateway.core.backoff import DELAY_LEVELS_MS, FixedBackoff, LevelBackoff
from gateway.core.naming import NamingScheme
from gateway.core.options import OptionReader
from gateway.core.policy import SECOND_MS, Placement, RetryMode, RetryPolicy
from gateway.core.registry import SUBSCRIPTION_TYPE, Registry
from gateway.core.traits import (
    CountName,
    DelayRequest,
    IntervalOption,
    LevelRequest,
    PolicyTraits,
    RetriesOption,
    TimeoutOption,
)

DIALECT = "pulsar"
DELAY_RANGE_MS = (1 * SECOND_MS, 864_000 * SECOND_MS)
DEFAULT_MAX_REDELIVER = 16
INT_MAX = 2_147_483_647
NACK_DELAY_MS = 60 * SECOND_MS
DISPATCH_RUN = 20
"""A shared subscription's broker deals messages to one consumer in runs of up to this many
(`dispatcherMaxRoundRobinBatchSize`, default 20), not one by one."""
SUBSCRIPTION_TYPES = ("shared", "key_shared", "exclusive", "failover")
"""The values of the `subscription_type` option: the engine's consumer types, by value."""
DELAYED_TYPES = frozenset({"shared", "key_shared"})

PROP_REAL_TOPIC = "REAL_TOPIC"
PROP_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROP_RETRY_TOPIC = "RETRY_TOPIC"
PROP_RECONSUMETIMES = "RECONSUMETIMES"


def _subscription(reader: OptionReader) -> str:
    return reader.choice(SUBSCRIPTION_TYPE, "shared", SUBSCRIPTION_TYPES)


def retry_letter(options: Mapping[str, str], naming: NamingScheme | None) -> RetryPolicy:
    """`reconsumeLater` onto the retry letter topic; the DLQ at maxRedeliverCount."""
    reader = OptionReader("pulsar", options)
    kind = _subscription(reader)
    max_retries = reader.integer("max_retries", DEFAULT_MAX_REDELIVER, 0, INT_MAX)
    ack_timeout = reader.optional_integer("ack_timeout_ms", 1_000, INT_MAX, "ms")
    return RetryPolicy(
        name="pulsar",
        dialect=DIALECT,
        backoff=LevelBackoff(DELAY_LEVELS_MS, DELAY_RANGE_MS, immediate=kind not in DELAYED_TYPES),
        naming=naming or DEFAULT,
        max_retries=max_retries,
        placement=Placement.COPY,
        delivery_timeout_ms=ack_timeout,
        honours_delays=kind in DELAYED_TYPES,
        dispatch_run=DISPATCH_RUN,
        settings=reader.finish(),
    )


def negative_ack(options: Mapping[str, str], naming: NamingScheme | None) -> RetryPolicy:
    """`negativeAcknowledge`: the same message again after the redelivery delay."""
    reader = OptionReader("pulsar-nack", options)
    kind = _subscription(reader)
    delay = reader.integer("nack_delay_ms", NACK_DELAY_MS, 0, INT_MAX, "ms")
    max_retries = reader.optional_integer("max_retries", 0, INT_MAX)
    ack_timeout = reader.optional_integer("ack_timeout_ms", 1_000, INT_MAX, "ms")
    counted = kind in DELAYED_TYPES
    return RetryPolicy(
        name="pulsar-nack",
        dialect=DIALECT,
        backoff=FixedBackoff(delay, (0, INT_MAX)),
        naming=naming or DEFAULT,
        max_retries=max_retries,
        mode=RetryMode.INVISIBLE,
        placement=Placement.IN_PLACE,
        delivery_timeout_ms=ack_timeout,
        dead_letter=max_retries is not None,
        counts_failures=counted,
        lost_counts_as_failure=counted,
        # The broker's redelivery tracker is cleared when the last consumer leaves.
        count_resets_unattended=counted,
        honours_delays=kind in DELAYED_TYPES,
        dispatch_run=DISPATCH_RUN,
        settings=reader.finish(),
    )


class PulsarDialect:
    """Retry-copy properties exactly as a Java consumer with retry enabled writes them."""

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
        out.setdefault(PROP_REAL_TOPIC, topic)
        out.setdefault(PROP_ORIGIN_MESSAGE_ID, message_id)
        out[PROP_RETRY_TOPIC] = retry_topic
        out[PROP_RECONSUMETIMES] = str(retries)
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
        out.setdefault(PROP_REAL_TOPIC, topic)
        out.setdefault(PROP_ORIGIN_MESSAGE_ID, message_id)
        return out


REDELIVERY_COUNT = CountName("getRedeliveryCount()", "field", 0,
                             "rises for Shared and Key_Shared, stays 0 for Exclusive and Failover")
RETRIES = RetriesOption("max_retries", 0, INT_MAX, "deadLetterPolicy.maxRedeliverCount")
ACK_TIMEOUT = TimeoutOption("ack_timeout_ms", 1_000, INT_MAX, 1, "ackTimeout")
COUNT_RESETS = ("on a Pulsar cluster the redelivery count goes back to 0 when every consumer of "
                "the subscription goes offline, and stays 0 on Exclusive and Failover "
                "subscriptions")


def traits() -> dict[str, PolicyTraits]:
    """How Pulsar clients see each policy and what tunes it (`gateway migrate plan`)."""
    return {
        "pulsar": PolicyTraits(
            count=(CountName(PROP_RECONSUMETIMES, "property", 0, "on retry-letter copies"),),
            retry_properties=(PROP_REAL_TOPIC, PROP_ORIGIN_MESSAGE_ID, PROP_RETRY_TOPIC,
                              PROP_RECONSUMETIMES),
            dead_letter_properties=(PROP_REAL_TOPIC, PROP_ORIGIN_MESSAGE_ID),
            knobs=(
                LevelRequest(DELAY_LEVELS_MS, "consumer.reconsumeLater(msg, {level})"),
                DelayRequest(DELAY_RANGE_MS[0], DELAY_RANGE_MS[1], SECOND_MS,
                             "consumer.reconsumeLater(msg, {delay}, TimeUnit.SECONDS)"),
                RETRIES,
                ACK_TIMEOUT,
            ),
            delivery_timeout="ackTimeout (off unless set)",
        ),
        "pulsar-nack": PolicyTraits(
            count=(REDELIVERY_COUNT,),
            dead_letter_properties=(PROP_REAL_TOPIC, PROP_ORIGIN_MESSAGE_ID),
            knobs=(
                IntervalOption("nack_delay_ms", 0, INT_MAX, 1, "negativeAckRedeliveryDelay"),
                RETRIES,
                ACK_TIMEOUT,
            ),
            count_resets=COUNT_RESETS,
            delivery_timeout="ackTimeout (off unless set)",
        ),
    }


def register(registry: Registry) -> None:
    for scheme in SCHEMES:
        registry.add_scheme(scheme)
    registry.add_dialect(PulsarDialect())
    registry.add_retry_table(DIALECT, DELAY_LEVELS_MS)
    registry.add_policy("pulsar", retry_letter, takes_subscription_type=True)
    registry.add_policy("pulsar-nack", negative_ack, takes_subscription_type=True)
    for name, declared in traits().items():
        registry.add_traits(name, declared)
