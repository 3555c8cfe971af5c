"""The documented tables, written out once from SEMANTICS.md for the tests to compare against."""

SECOND = 1_000
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE

ROCKETMQ_TABLE_MS = [
    10 * SECOND, 30 * SECOND, 1 * MINUTE, 2 * MINUTE, 3 * MINUTE, 4 * MINUTE, 5 * MINUTE,
    6 * MINUTE, 7 * MINUTE, 8 * MINUTE, 9 * MINUTE, 10 * MINUTE, 20 * MINUTE, 30 * MINUTE,
    1 * HOUR, 2 * HOUR,
]
"""RocketMQ unordered back-off, retry 1..16 (documents 000, 003)."""

DELAY_LEVELS_MS = [1 * SECOND, 5 * SECOND, *ROCKETMQ_TABLE_MS]
"""The 18 delay levels `1s 5s 10s 30s 1m … 2h` (documents 002, 004)."""
