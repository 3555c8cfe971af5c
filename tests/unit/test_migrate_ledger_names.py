"""A copy's ledger is named after its source, spelled one way: a run again with the host
written otherwise (`localhost` or `127.0.0.1`, upper case, a trailing dot, the default port left
out or written, an IPv6 address in another form, the broker reached over TLS or not) or, on
Pulsar, the topic's short name, finds the first run's ledger instead of copying again. No name
is resolved: other hosts stay apart."""

from __future__ import annotations

import pytest

from adapters.amqp.migrate import QueueSource
from adapters.pulsar.migrate import TopicSource
from gateway.migrate.endpoint import canonical_host, parse_url, same_place
from gateway.migrate.gateway_side import GatewaySource


def _ledgers(kind: type, urls: list[str]) -> set[str]:
    return {kind(parse_url("from", url)).ledger for url in urls}


def test_spellings_of_one_rabbitmq_queue_share_a_ledger() -> None:
    assert _ledgers(QueueSource, [
        "amqp://guest:guest@localhost:5672/%2F?queue=q",
        "amqp://guest:guest@127.0.0.1?queue=q",
        "amqp://other:pw@LOCALHOST.:5672/?queue=q",
        "amqp://[::1]/?queue=q",
        "amqp://[0:0::1]:5672/%2F?queue=q",
    ]) == {"amqp://127.0.0.1:5672//?queue=q"}
    # Over TLS or not, one broker's queue: one ledger (a copy resumed over amqps continues).
    assert _ledgers(QueueSource, ["amqps://Rabbit.Example.:5671/?queue=q",
                                  "amqps://rabbit.example/?queue=q",
                                  "amqp://rabbit.example/?queue=q"]) == {
        "amqp://rabbit.example:5672//?queue=q"}
    assert _ledgers(QueueSource, ["amqp://[2001:DB8::0:1]/?queue=q"]) == {
        "amqp://[2001:db8::1]:5672//?queue=q"}


def test_spellings_of_one_gateway_group_share_a_ledger() -> None:
    assert _ledgers(GatewaySource, [
        "gateway://localhost:50051/orders?group=g",
        "gateway://127.0.0.1/orders?group=g",
        "gateways://LOCALHOST./orders?group=g",
        "gateway://[::ffff:127.0.0.1]:50051/orders?group=g",
    ]) == {"gateway://127.0.0.1:50051/orders?group=g"}


def test_spellings_of_one_pulsar_subscription_share_a_ledger() -> None:
    assert _ledgers(TopicSource, [
        "pulsar://localhost/orders?subscription=s",
        "pulsar://127.0.0.1:6650/public/default/orders?subscription=s",
        "pulsar://LOCALHOST:6650/persistent://public/default/orders?subscription=s",
    ]) == {"pulsar://127.0.0.1:6650/persistent://public/default/orders?subscription=s"}
    assert _ledgers(TopicSource, ["pulsar+ssl://h/orders?subscription=s",
                                  "pulsar+ssl://H:6651/orders?subscription=s",
                                  "pulsar://h/orders?subscription=s"]) == {
        "pulsar://h:6650/persistent://public/default/orders?subscription=s"}


@pytest.mark.parametrize("a, b", [
    ("amqp://rabbit-a/?queue=q", "amqp://rabbit-b/?queue=q"),
    ("amqp://127.0.0.2/?queue=q", "amqp://127.0.0.1/?queue=q"),
    ("amqp://h:5673/?queue=q", "amqp://h/?queue=q"),
    ("amqp://h/vh?queue=q", "amqp://h/?queue=q"),
    ("amqp://h/?queue=Q", "amqp://h/?queue=q"),
])
def test_other_places_keep_their_own_ledgers(a: str, b: str) -> None:
    assert len(_ledgers(QueueSource, [a, b])) == 2


def test_hosts_are_not_resolved() -> None:
    assert canonical_host("Example.COM.") == "example.com"
    assert canonical_host("db.internal") == "db.internal"
    # The loopback check that refuses a copy onto itself uses the same spelling.
    assert same_place(parse_url("from", "gateway://LOCALHOST.:1/t?group=g"),
                      parse_url("to", "gateway://[0::1]:1/t?group=g"))
