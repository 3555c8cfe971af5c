"""Pulsar topic names as the engine sees them.

Pulsar clients send fully qualified names (`persistent://public/default/orders`). The engine keys
topics by plain names, so the default tenant and namespace are dropped (`orders`) and any other
`tenant/namespace/name` is kept as that path. Retry and dead-letter topics named by the client
(`{topic}-{sub}-DLQ`) map the same way, so `orders-sub-DLQ` is what other front ends see.

Non-persistent topics (`non-persistent://...`) are not served: in Pulsar they are other topics
than the persistent ones of the same name, and taking them as those mixed two topics' messages.
"""

from __future__ import annotations

from gateway.errors import InvalidArgument

DEFAULT_PREFIX = "public/default/"
PERSISTENT = "persistent://"
NON_PERSISTENT = "non-persistent://"


def engine_topic(pulsar_topic: str) -> str:
    """The engine topic for a Pulsar topic name (short or fully qualified)."""
    name = pulsar_topic
    if name.startswith(NON_PERSISTENT):
        raise InvalidArgument("topic", pulsar_topic,
                              "a persistent topic: non-persistent topics are not served")
    if name.startswith(PERSISTENT):
        name = name[len(PERSISTENT) :]
    if name.startswith(DEFAULT_PREFIX):
        name = name[len(DEFAULT_PREFIX) :]
    parts = name.split("/")
    if not name or any(not part for part in parts) or len(parts) not in (1, 3):
        raise InvalidArgument("topic", pulsar_topic, "a name or tenant/namespace/name")
    return name


def topic_or_none(pulsar_topic: str) -> str | None:
    """The engine topic of a name the edge passed, None when it names none."""
    try:
        return engine_topic(pulsar_topic)
    except InvalidArgument:
        return None
