"""Pattern (regex) subscriptions of the official pulsar-client: `client.subscribe(re.compile(
'persistent://public/default/orders-.*'), ...)` lists the namespace's topics with
GET_TOPICS_OF_NAMESPACE, subscribes to those its pattern matches and asks again every
`pattern_auto_discovery_period` seconds. The front end answers with the persistent topics the
gateway holds in that namespace (the client filters them); it refused the command before, so a
pattern subscribe failed."""

from __future__ import annotations

import re
from pathlib import Path

import _pulsar
import pulsar
import pytest

from gateway.backend.base import OutMessage
from gateway.engine.clock import SystemClock
from gateway.server.app import running_gateway
from tests.e2e.pulsar_stack import QUIET, Stack, client_for, receive_all, run, stack_fixture

__all__ = ["stack_fixture"]

PATTERN = re.compile("persistent://public/default/orders-.*")
DISCOVERY_S = 1


@pytest.fixture(autouse=True)
def discovery_period(monkeypatch: pytest.MonkeyPatch) -> None:
    """pulsar-client 3.13's `subscribe` checks `pattern_auto_discovery_period` but does not pass
    it on (its C++ core keeps 60 s): give every consumer configuration DISCOVERY_S."""
    made = _pulsar.ConsumerConfiguration

    def configuration() -> _pulsar.ConsumerConfiguration:
        conf = made()
        conf.pattern_auto_discovery_period(DISCOVERY_S)
        return conf

    monkeypatch.setattr(_pulsar, "ConsumerConfiguration", configuration)


async def publish(stack: Stack, topic: str, *bodies: bytes) -> None:
    assert stack.app is not None
    await stack.app.engine.publish(topic, [OutMessage(body=b) for b in bodies])


def pattern_consumer(client: pulsar.Client, pattern: re.Pattern[str] = PATTERN,
                     **options: object) -> pulsar.Consumer:
    return client.subscribe(
        pattern, "sub", consumer_type=pulsar.ConsumerType.Shared,
        initial_position=pulsar.InitialPosition.Earliest,
        pattern_auto_discovery_period=DISCOVERY_S, **options)


async def test_a_pattern_subscribe_receives_the_matching_topics_only(stack: Stack) -> None:
    await publish(stack, "orders-eu", b"eu-1", b"eu-2")
    await publish(stack, "orders-us", b"us-1")
    await publish(stack, "payments", b"not-mine")
    await publish(stack, "tenant/ns/orders-x", b"other-namespace")
    client = client_for(stack.url)
    try:
        consumer = await run(pattern_consumer, client)
        got = await receive_all(consumer, 1500)
        assert sorted(m.data() for m in got) == [b"eu-1", b"eu-2", b"us-1"]
        assert {m.topic_name() for m in got} == {
            "persistent://public/default/orders-eu", "persistent://public/default/orders-us"}
        for message in got:
            await run(consumer.acknowledge, message)
        await run(consumer.close)
    finally:
        await run(client.close)


async def test_a_topic_made_after_subscribing_is_picked_up(stack: Stack) -> None:
    await publish(stack, "orders-old", b"old")
    client = client_for(stack.url)
    try:
        consumer = await run(pattern_consumer, client)
        first = await run(consumer.receive, 5000)
        assert first.data() == b"old"
        await run(consumer.acknowledge, first)
        producer = await run(client.create_producer, "orders-new")
        await run(producer.send, b"new")
        await run(producer.close)
        # Found at the next discovery (every DISCOVERY_S seconds), then delivered from the start.
        later = await run(consumer.receive, 10_000)
        assert (later.data(), later.topic_name()) == (
            b"new", "persistent://public/default/orders-new")
        await run(consumer.acknowledge, later)
    finally:
        await run(client.close)


async def test_ack_and_negative_ack_across_the_matched_topics(stack: Stack) -> None:
    await publish(stack, "orders-a", b"a")
    await publish(stack, "orders-b", b"b")
    client = client_for(stack.url)
    try:
        consumer = await run(pattern_consumer, client, negative_ack_redelivery_delay_ms=100)
        got = {}
        for _ in range(2):
            message = await run(consumer.receive, 5000)
            got[message.data()] = message
        assert set(got) == {b"a", b"b"}
        await run(consumer.acknowledge, got[b"a"])
        consumer.negative_acknowledge(got[b"b"])
        again = await run(consumer.receive, 5000)
        assert (again.data(), again.topic_name()) == (
            b"b", "persistent://public/default/orders-b")
        assert again.redelivery_count() >= 1
        await run(consumer.acknowledge, again)
        assert await receive_all(consumer, 1000) == []  # a's ack held, b settled
        assert stack.app is not None
        for topic in ("orders-a", "orders-b"):
            assert await stack.app.engine.backlog(topic, "sub") == 0
    finally:
        await run(client.close)


TOKENS = """
[[principal]]
name = "eu"
token = "eu-secret"
publish = ["*"]
consume = ["orders-eu*"]
groups = ["sub"]

[[principal]]
name = "nobody"
token = "nobody-secret"
publish = ["*"]
consume = []
groups = []
"""


async def test_a_principal_lists_only_the_topics_it_may_consume(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(TOKENS)
    async with running_gateway(tmp_path / "data", clock=SystemClock(), tokens_file=str(tokens),
                               pulsar_listen="127.0.0.1:0") as app:
        for topic in ("orders-eu", "orders-eu2", "orders-us"):
            await app.engine.publish(topic, [OutMessage(body=topic.encode())])
        url = f"pulsar://127.0.0.1:{app.front_ends['pulsar'].port}"
        eu = pulsar.Client(url, authentication=pulsar.AuthenticationToken("eu-secret"),
                           operation_timeout_seconds=5, logger=QUIET)
        nobody = pulsar.Client(url, authentication=pulsar.AuthenticationToken("nobody-secret"),
                               operation_timeout_seconds=5, logger=QUIET)
        try:
            consumer = await run(pattern_consumer, eu)
            got = await receive_all(consumer, 1500)
            assert sorted(m.data() for m in got) == [b"orders-eu", b"orders-eu2"]
            # Nothing listed: the subscribe succeeds on no topic, and receives nothing.
            empty = await run(pattern_consumer, nobody)
            assert await receive_all(empty, 1500) == []
        finally:
            await run(eu.close)
            await run(nobody.close)


@pytest.mark.parametrize("pattern", [
    "persistent://public/orders-.*",          # no namespace
    "persistent://tenant/" + "n" * 300 + "/orders-.*",  # too long
])
async def test_a_bad_namespace_fails_the_subscribe(stack: Stack, pattern: str) -> None:
    client = client_for(stack.url, timeout_s=5)
    try:
        with pytest.raises(Exception):  # noqa: B017 - the client's own error type
            await run(pattern_consumer, client, re.compile(pattern))
        # The connection still serves.
        producer = await run(client.create_producer, "orders-fine")
        await run(producer.send, b"ok")
    finally:
        await run(client.close)
