"""RocketMQ retry policies (push, orderly, simple, HTTP) and retry-copy properties.

Numbers from SEMANTICS.md (documents 000, 002, 003): the 16-step back-off, 2 h past 16, the
18-level delay table (a retry at client level 0 uses level 3 + reconsumeTimes, which is the same
table), `suspendTimeMillis` 10..30000 ms, InvisibleDuration 10 s..12 h, HTTP 1 min / 5 min × 288.
"""

from __future__ import annotations

from collections.abc import Mapping

from adapters.rocketmq.naming import ROCKETMQ
from gateway.core.backoff import DELAY_LEVELS_MS, FixedBackoff, TableBackoff, UntilDeadline
from gateway.core.naming import NamingScheme
from gateway.core.options import OptionReader
from gateway.core.policy import HOUR_MS, MINUTE_MS, SECOND_MS, Placement, RetryMode, RetryPolicy
from gateway.core.registry import Registry
from gateway.core.traits import (
    CountName,
    DeadLetterOption,
    IntervalOption,
    LevelRequest,
    PolicyTraits,
    RetriesOption,
)

DIALECT = "rocketmq"
FIRST_RETRY_LEVEL = 3
"""A retry at client delay level 0 uses level 3 + reconsumeTimes (broker side, 4.x)."""
BACKOFF_MS = DELAY_LEVELS_MS[FIRST_RETRY_LEVEL - 1 :]
"""10s 30s 1m 2m … 1h 2h: retry k waits BACKOFF_MS[k-1]; 16 entries (the shared delay table,
`gateway.core.backoff.DELAY_LEVELS_MS`, from level 3)."""
BEYOND_MS = 2 * HOUR_MS
DEFAULT_MAX_RETRIES = 16
PULL_BATCH = 32
"""A push consumer pulls up to this many messages of a queue at a time (`pullBatchSize`, default
32): the gateway deals a group's messages to its consumers in runs of up to this many."""
MAX_RETRIES_5X = 1000
INT_MAX = 2_147_483_647
PUSH_TIMEOUT_MS = MINUTE_MS
"""Push consumer: a delivery not answered within 1 minute counts as a failure."""
SUSPEND_RANGE_MS = (10, 30_000)
DEFAULT_SUSPEND_MS = 1_000
INVISIBLE_RANGE_MS = (10 * SECOND_MS, 12 * HOUR_MS)
HTTP_ORDERED_MS = MINUTE_MS
HTTP_UNORDERED_MS = 5 * MINUTE_MS
HTTP_MAX_RETRIES = 288

PROP_RECONSUME_TIMES = "RECONSUME_TIME"
PROP_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
PROP_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROP_RETRY_TOPIC = "RETRY_TOPIC"
PROP_DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
PROP_DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"


def _max_retries(reader: OptionReader, default: int) -> int:
    version = reader.choice("version", "5", ("4", "5"))
    high = MAX_RETRIES_5X if version == "5" else INT_MAX
    return reader.integer("max_retries", default, 0, high)


def push(options: Mapping[str, str], naming: NamingScheme | None) -> RetryPolicy:
    """Push consumer, unordered, clustering or broadcasting."""
    reader = OptionReader("rocketmq", options)
    max_retries = _max_retries(reader, DEFAULT_MAX_RETRIES)
    broadcast = reader.boolean("broadcast", False)
    dead_letter = reader.boolean("dead_letter", True)
    return RetryPolicy(
        name="rocketmq",
        dialect=DIALECT,
        backoff=TableBackoff(BACKOFF_MS, BEYOND_MS, DELAY_LEVELS_MS),
        naming=naming or ROCKETMQ,
        max_retries=max_retries,
        placement=Placement.COPY,
        delivery_timeout_ms=PUSH_TIMEOUT_MS,
        retries_enabled=not broadcast,
        dispatch_run=PULL_BATCH,
        dead_letter=dead_letter,
        settings=reader.finish(),
    )


def orderly(options: Mapping[str, str], naming: NamingScheme | None) -> RetryPolicy:
    """Ordered push consumer: fixed suspendTimeMillis; the failing message blocks its queue."""
    reader = OptionReader("rocketmq-orderly", options)
    low, high = SUSPEND_RANGE_MS
    suspend = reader.integer("suspend_ms", DEFAULT_SUSPEND_MS, low, high, "ms")
    max_retries = reader.integer("max_retries", INT_MAX, 0, INT_MAX)
    dead_letter = reader.boolean("dead_letter", True)
    return RetryPolicy(
        name="rocketmq-orderly",
        dialect=DIALECT,
        backoff=FixedBackoff(suspend, SUSPEND_RANGE_MS),
        naming=naming or ROCKETMQ,
        max_retries=max_retries,
        placement=Placement.IN_PLACE,
        delivery_timeout_ms=PUSH_TIMEOUT_MS,
        blocks_queue=True,
        dead_letter=dead_letter,
        settings=reader.finish(),
    )


def simple(options: Mapping[str, str], naming: NamingScheme | None) -> RetryPolicy:
    """Simple consumer: InvisibleDuration per receive; retry interval = invisible − processing.
    `ordered` (a FIFO group): a message group's next message waits until the one before it is
    acked or dead-lettered."""
    reader = OptionReader("rocketmq-simple", options)
    max_retries = reader.integer("max_retries", DEFAULT_MAX_RETRIES, 0, MAX_RETRIES_5X)
    dead_letter = reader.boolean("dead_letter", True)
    ordered = reader.boolean("ordered", False)
    return RetryPolicy(
        name="rocketmq-simple",
        dialect=DIALECT,
        backoff=UntilDeadline(),
        naming=naming or ROCKETMQ,
        max_retries=max_retries,
        mode=RetryMode.INVISIBLE,
        placement=Placement.IN_PLACE,
        invisible_range_ms=INVISIBLE_RANGE_MS,
        extend_range_ms=INVISIBLE_RANGE_MS,
        dead_letter=dead_letter,
        blocks_queue=ordered,
        settings=reader.finish(),
    )


def http(options: Mapping[str, str], naming: NamingScheme | None) -> RetryPolicy:
    """HTTP protocol: ordered 1 min, unordered 5 min, 288 retries; not configurable."""
    reader = OptionReader("rocketmq-http", options)
    ordered = reader.boolean("ordered", False)
    for key in ("max_retries", "suspend_ms", "interval_ms"):
        reader.forbid(key, "not configurable for the HTTP protocol (288 retries, 1 min / 5 min)")
    interval = HTTP_ORDERED_MS if ordered else HTTP_UNORDERED_MS
    return RetryPolicy(
        name="rocketmq-http",
        dialect=DIALECT,
        backoff=FixedBackoff(interval),
        naming=naming or ROCKETMQ,
        max_retries=HTTP_MAX_RETRIES,
        mode=RetryMode.BACKOFF,
        placement=Placement.IN_PLACE,
        delivery_timeout_ms=interval,
        blocks_queue=ordered,
        settings=reader.finish(),
    )


class RocketMQDialect:
    """Properties RocketMQ puts on retry copies and dead letters; the message id never changes."""

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
        out.setdefault(PROP_RETRY_TOPIC, topic)
        out.setdefault(PROP_ORIGIN_MESSAGE_ID, message_id)
        out[PROP_RECONSUME_TIMES] = str(retries)
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
        out.setdefault(PROP_DLQ_ORIGIN_TOPIC, topic)
        out.setdefault(PROP_DLQ_ORIGIN_MESSAGE_ID, message_id)
        out[PROP_RECONSUME_TIMES] = str(retries)
        return out


RECONSUME_TIMES = CountName("reconsumeTimes", "field", 0, "MessageExt.getReconsumeTimes() (4.x)")
RECONSUME_PROPERTY = CountName(PROP_RECONSUME_TIMES, "property", 0,
                               "on retry copies and dead letters")
DELIVERY_ATTEMPT = CountName("delivery_attempt", "field", 1,
                             "5.x SDKs: MessageView.getDeliveryAttempt()")
DEAD_LETTER_ON = DeadLetterOption("dead_letter", "true", "dead-letter queue enabled", "false")
PUSH_TIMEOUT = "consume timeout (1 min, fixed for push consumers)"


def traits() -> dict[str, PolicyTraits]:
    """How RocketMQ clients see each policy and what tunes it (`gateway migrate plan`)."""
    push_retries = RetriesOption("max_retries", 0, MAX_RETRIES_5X, "maxReconsumeTimes")
    return {
        "rocketmq": PolicyTraits(
            count=(RECONSUME_TIMES, RECONSUME_PROPERTY, DELIVERY_ATTEMPT),
            retry_properties=(PROP_RETRY_TOPIC, PROP_ORIGIN_MESSAGE_ID, PROP_RECONSUME_TIMES),
            dead_letter_properties=(PROP_DLQ_ORIGIN_TOPIC, PROP_DLQ_ORIGIN_MESSAGE_ID,
                                    PROP_RECONSUME_TIMES),
            knobs=(
                LevelRequest(DELAY_LEVELS_MS, "context.setDelayLevelWhenNextConsume({level})"),
                push_retries,
                DEAD_LETTER_ON,
            ),
            broadcast=True,
            ordered_policy="rocketmq-orderly",
            delivery_timeout=PUSH_TIMEOUT,
        ),
        "rocketmq-orderly": PolicyTraits(
            count=(RECONSUME_TIMES, DELIVERY_ATTEMPT),
            dead_letter_properties=(PROP_DLQ_ORIGIN_TOPIC, PROP_DLQ_ORIGIN_MESSAGE_ID,
                                    PROP_RECONSUME_TIMES),
            knobs=(
                IntervalOption("suspend_ms", SUSPEND_RANGE_MS[0], SUSPEND_RANGE_MS[1], 1,
                               "suspendTimeMillis"),
                RetriesOption("max_retries", 0, INT_MAX, "maxReconsumeTimes"),
                DEAD_LETTER_ON,
            ),
            ordered_policy="rocketmq-orderly",
            delivery_timeout=PUSH_TIMEOUT,
        ),
        "rocketmq-simple": PolicyTraits(
            count=(DELIVERY_ATTEMPT,),
            dead_letter_properties=(PROP_DLQ_ORIGIN_TOPIC, PROP_DLQ_ORIGIN_MESSAGE_ID,
                                    PROP_RECONSUME_TIMES),
            knobs=(push_retries, DEAD_LETTER_ON),
            delivery_timeout="invisible duration, chosen per receive (10 s..12 h)",
        ),
        "rocketmq-http": PolicyTraits(
            count=(DELIVERY_ATTEMPT,),
            delivery_timeout="the retry interval (1 min ordered, 5 min unordered)",
        ),
    }


def register(registry: Registry) -> None:
    registry.add_scheme(ROCKETMQ)
    registry.add_dialect(RocketMQDialect())
    registry.add_retry_table(DIALECT, BACKOFF_MS)
    registry.add_policy("rocketmq", push)
    registry.add_policy("rocketmq-orderly", orderly)
    registry.add_policy("rocketmq-simple", simple)
    registry.add_policy("rocketmq-http", http)
    for name, declared in traits().items():
        registry.add_traits(name, declared)
