"""RocketMQ namespaces (`ClientConfiguration(namespace=...)`) keep topics and groups apart, as on
a RocketMQ 5 proxy, which stores `orders` of namespace `prod` as `prod%orders`: a client of
another namespace (or of none) does not see its messages, and a group's dead letters are
`%DLQ%prod%group`, read in the namespace as `%DLQ%group`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rocketmq import ClientConfiguration, Credentials

from tests.e2e.test_rocketmq_frontend import (  # noqa: F401  (fixtures)
    Gateway,
    _message,
    _name,
    _producer,
    _push,
    _receive,
    _settings,
    _simple,
    clients,
    start,
)


def _in(gateway: Gateway, namespace: str) -> ClientConfiguration:
    return ClientConfiguration(gateway.endpoint, Credentials("", ""), namespace=namespace)


def test_namespaces_do_not_share_topics_groups_or_dead_letters(
    start: Callable[..., Gateway], clients: list[Any],  # noqa: F811
) -> None:
    gateway = start(_settings(max_delivery_attempts=1))
    topic, group = _name("t"), _name("g")
    prod, dev = _in(gateway, "prod"), _in(gateway, "dev")
    sent = _producer(clients, prod, topic).send(_message(topic, b"prod-only"))

    # Same topic and group names in another namespace, and without one: nothing there.
    for config in (dev, _in(gateway, "")):
        assert _simple(clients, config, group, topic).receive(10, 30) == []
    (got,) = _receive(_simple(clients, prod, group, topic), 1)
    assert (got.body, got.message_id, got.topic, got.namespace) == (
        b"prod-only", sent.message_id, topic, "prod")

    # A failing push consumer's dead letter stays in its namespace.
    other, push_group = _name("t"), _name("p")
    _producer(clients, prod, other).send(_message(other, b"bad"))
    (failed,) = _push(clients, prod, push_group, other).take(1)
    dead_letters = f"%DLQ%{push_group}"
    assert _simple(clients, dev, _name("r"), dead_letters).receive(10, 30) == []
    (dead,) = _receive(_simple(clients, prod, _name("r"), dead_letters), 1)
    assert (dead.body, dead.message_id) == (b"bad", failed.message_id)
