"""The documented numbers the engine tests assert, written out from /work/shared/SEMANTICS.md
(documents 000-004), independently of the dialects that implement them."""

SECOND = 1_000
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE

DELAY_LEVELS_MS = [
    1 * SECOND, 5 * SECOND, 10 * SECOND, 30 * SECOND, 1 * MINUTE, 2 * MINUTE, 3 * MINUTE,
    4 * MINUTE, 5 * MINUTE, 6 * MINUTE, 7 * MINUTE, 8 * MINUTE, 9 * MINUTE, 10 * MINUTE,
    20 * MINUTE, 30 * MINUTE, 1 * HOUR, 2 * HOUR,
]
"""The 18 delay levels `1s 5s 10s 30s 1m … 2h` (RocketMQ 4.x broker, Pulsar reconsumeLater)."""

ROCKETMQ_BACKOFF_MS = DELAY_LEVELS_MS[2:]
"""RocketMQ unordered back-off, retry k = 1..16 waits level k + 2: 10s 30s 1m … 1h 2h."""
ROCKETMQ_BEYOND_MS = 2 * HOUR
"""Every RocketMQ retry past the 16th waits 2 h."""
ROCKETMQ_MAX_RETRIES = 16
ROCKETMQ_MAX_RETRIES_5X = 1000
ROCKETMQ_PUSH_TIMEOUT_MS = 1 * MINUTE
"""A push delivery not answered within 1 minute counts as a failure (003 FAQ)."""
ROCKETMQ_SUSPEND_MS = 1_000
"""Ordered consumption: `suspendTimeMillis` default."""
ROCKETMQ_SUSPEND_RANGE_MS = (10, 30_000)
ROCKETMQ_INVISIBLE_RANGE_MS = (10 * SECOND, 12 * HOUR)
"""Simple consumer: `InvisibleDuration` chosen per receive."""

RABBITMQ_ACK_TIMEOUT_MS = 1 * MINUTE
RABBITMQ_RETRY_INTERVAL_RANGE_S = (10, 1800)
RABBITMQ_MAX_RETRIES = 16

PULSAR_MAX_REDELIVER = 16
"""16 failures are retried; the 17th goes to the DLQ."""
PULSAR_DELAY_RANGE_S = (1, 864_000)
PULSAR_NACK_DELAY_MS = 1 * MINUTE
"""`negativeAckRedeliveryDelay` default."""
