"""RocketMQ destination names: `%RETRY%{group}` and `%DLQ%{group}` (one queue each)."""

from __future__ import annotations

from gateway.core.naming import NamingScheme

RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"

ROCKETMQ = NamingScheme("rocketmq", RETRY_PREFIX + "{group}", DLQ_PREFIX + "{group}")
