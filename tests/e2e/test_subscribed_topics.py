"""`Subscribed` names the retry and dead-letter topics the policy really uses (gateway.proto):
"" for retries kept in place or not made at all (broadcasting), "" for the dead letter when
exhausted messages are discarded. The admin view of a group the gateway runs says the same.
Over real gRPC, embedded store."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.client import GatewayClient
from gateway.server.app import running_gateway

CASES = [
    # policy, options, broadcast, retry topic, dead-letter topic ({t}: topic, {g}: group)
    ("rocketmq", {}, False, "%RETRY%{g}", "%DLQ%{g}"),
    ("rocketmq", {"dead_letter": "false"}, False, "%RETRY%{g}", ""),
    ("rocketmq", {}, True, "", "%DLQ%{g}#{c}"),
    ("rocketmq-simple", {}, False, "", "%DLQ%{g}"),
    ("rocketmq-orderly", {}, False, "", "%DLQ%{g}"),
    ("pulsar", {}, False, "{t}-{g}-RETRY", "{t}-{g}-DLQ"),
    ("pulsar-nack", {}, False, "", ""),
    ("pulsar-nack", {"max_retries": "3"}, False, "", "{t}-{g}-DLQ"),
    ("rabbitmq", {}, False, "", ""),
    ("rabbitmq", {"x_dead_letter_exchange": "dlx"}, False, "", "{t}.dlq"),
]


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[GatewayClient]:
    async with (
        running_gateway(tmp_path / "data", time_scale=0.01) as app,
        GatewayClient(f"127.0.0.1:{app.grpc_port}") as c,
    ):
        yield c


async def test_subscribed_names_the_topics_each_policy_uses(client: GatewayClient) -> None:
    for policy, options, broadcast, retry, dead in CASES:
        topic, group = f"t-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
        await client.publish(topic, [b"x"])
        consumer = "c1" if broadcast else ""
        async with client.consume(topic, group, policy=policy, options=options,
                                  broadcast=broadcast, consumer_id=consumer) as stream:
            got = stream.subscribed
            assert got is not None
            want = (retry.format(t=topic, g=group, c=consumer),
                    dead.format(t=topic, g=group, c=consumer))
            assert (got.retry_topic, got.dead_letter_topic) == want, (policy, options, broadcast)
            assert got.policy == policy
            if not broadcast:  # the admin view of the group says the same
                view = await client.describe(topic, group)
                assert (view.retry_topic, view.dead_letter_topic) == want, (policy, options)
