"""RocketMQ destination names: `%RETRY%{group}` and `%DLQ%{group}` (one queue each)."""

from __future__ import annotations

from gateway.core.naming import NamingScheme

RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"

ROCKETMQ = NamingScheme("rocketmq", RETRY_PREFIX + "{group}", DLQ_PREFIX + "{group}")

NAMESPACE_SEPARATOR = "%"


def with_namespace(namespace: str, name: str) -> str:
    """The name a topic or group of a namespace has in the store, as a RocketMQ proxy wraps it
    (`namespace%name`; `%RETRY%` and `%DLQ%` stay in front: `%DLQ%ns%group`), so that namespaces
    do not share topics and groups. A name already in the namespace stays as it is."""
    if not namespace or not name:
        return name
    prefix = ""
    for system in (RETRY_PREFIX, DLQ_PREFIX):
        if name.startswith(system):
            prefix, name = system, name[len(system):]
            break
    if name.startswith(namespace + NAMESPACE_SEPARATOR):
        return prefix + name
    return f"{prefix}{namespace}{NAMESPACE_SEPARATOR}{name}"
