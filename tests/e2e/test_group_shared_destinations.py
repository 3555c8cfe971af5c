"""Two groups of one topic under the `rabbitmq` naming scheme share `{topic}.retry` and
`{topic}.dlq` (the names hold no group). Before, on the embedded store, the second group was
handed the first group's retries as well (a message it had already acked came to it again, once
per retry of the other group), and the admin verbs of each group listed, resent and deleted the
other's dead letters. Each copy now records the group that made it: a group's retries come back
to it alone and its admin verbs see its own copies only."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from gateway.client import GatewayClient
from gateway.server.app import running_gateway
from gateway.v1 import admin_pb2

SCALE = 0.01
"""Policy waits run 100x faster: RocketMQ's first retry (10 s) comes after 100 ms, and its
1-minute consume timeout passes after 600 ms (at 1000x, 60 ms: a fail sent later than that
under load found its delivery expired)."""


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[GatewayClient]:
    async with (
        running_gateway(tmp_path / "data", time_scale=SCALE) as app,
        GatewayClient(f"127.0.0.1:{app.grpc_port}") as c,
    ):
        yield c


async def test_each_group_gets_and_manages_its_own_retries_and_dead_letters(
    client: GatewayClient,
) -> None:
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    ids = await client.publish(topic, [b"m"])
    options = {"max_retries": "2"}
    async with (
        client.consume(topic, "a", policy="rocketmq", options=options, naming="rabbitmq") as a,
        client.consume(topic, "b", policy="rocketmq", options=options, naming="rabbitmq") as b,
    ):
        first_b = await b.next(10)
        assert first_b is not None and (await first_b.ack()).ok
        attempts = []
        for _ in range(3):  # the first delivery and two retries, then the dead letter
            msg = await a.next(10)
            assert msg is not None and msg.message_id == ids[0]
            assert msg.delivery.topic in (topic, f"{topic}.retry")
            attempts.append(msg.attempt)
            assert (await msg.fail()).ok
        assert attempts == [1, 2, 3]
        await asyncio.sleep(1.0)  # past every retry's time (10 s and 30 s: 0.4 s here)
        assert await b.next(0.5) is None  # b never sees a's retries

    admin = client.admin

    async def listed(group: str) -> list[str]:
        page = await admin.ListDeadLetters(admin_pb2.ListDeadLettersRequest(
            topic=topic, group=group, limit=10))
        return [d.message_id for d in page.dead_letters]

    assert await listed("a") == ids and await listed("b") == []
    assert (await client.describe(topic, "b")).dead_letters == 0
    assert (await client.describe(topic, "a")).dead_letters == 1
    gone = await admin.DeleteDeadLetters(admin_pb2.DeleteDeadLettersRequest(
        topic=topic, group="b", all=True))
    assert gone.deleted == 0
    again = await admin.ResendDeadLetters(admin_pb2.ResendDeadLettersRequest(
        topic=topic, group="b"))
    assert again.resent == 0
    assert await listed("a") == ids


TOKENS = """
[[principal]]
name = "ops"
token = "ops-token"
admin = true

[[principal]]
name = "alice"
token = "alice-token"
consume = ["orders"]
groups = ["ga"]

[[principal]]
name = "bob"
token = "bob-token"
consume = ["orders"]
groups = ["gb"]
"""


async def test_a_consumer_cannot_publish_into_another_groups_shared_destinations(
    tmp_path: Path,
) -> None:
    """`orders.retry` and `orders.dlq` are read by every group of orders. Alice, who may only
    consume orders with group ga, could publish into them: her message was delivered to Bob's
    group gb as a retry of orders (a topic she may not publish to), and listed among gb's dead
    letters, so that an admin's "resend all" of gb published it to orders."""
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(TOKENS)
    async with running_gateway(tmp_path / "data", time_scale=SCALE,
                               tokens_file=str(tokens)) as app:
        target = f"127.0.0.1:{app.grpc_port}"
        async with (
            GatewayClient(target, token="alice-token") as alice,
            GatewayClient(target, token="bob-token") as bob,
            GatewayClient(target, token="ops-token") as ops,
        ):
            async with bob.consume("orders", "gb", policy="rocketmq", naming="rabbitmq",
                                   options={"max_retries": "2"}) as b:
                for name in ("orders", "orders.retry", "orders.dlq"):
                    with pytest.raises(grpc.aio.AioRpcError) as refused:
                        await alice.publish(name, [b"from alice"])
                    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED, name
                    assert "alice may not publish" in (refused.value.details() or "")
                assert await b.next(0.5) is None
            page = await ops.admin.ListDeadLetters(admin_pb2.ListDeadLettersRequest(
                topic="orders", group="gb"), metadata=ops.metadata)
            assert list(page.dead_letters) == []
            # An admin still may (to repair a destination by hand).
            assert await ops.publish("orders.dlq", [b"by hand"])


async def test_a_rename_into_a_shared_name_keeps_the_dead_letters_the_groups(
    client: GatewayClient,
) -> None:
    """A Pulsar client's dead-letter policy produces to `{topic}-{sub}-DLQ` itself: such a dead
    letter records no group. `migrate rename` of group a from pulsar-2.9 to rabbitmq moved it
    as it was into `{topic}.dlq`, where a copy that records no group counts for every group:
    group b listed it as its own dead letter, and its resend-all published it to the topic
    again (so group a got the message once more)."""
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    admin = client.admin
    await client.publish(topic, [b"b's"])
    async with client.consume(topic, "b", policy="rocketmq", options={"max_retries": "0"},
                              naming="rabbitmq") as b:
        msg = await b.next(10)
        assert msg is not None and (await msg.fail()).ok
    await client.publish(f"{topic}-a-DLQ", [b"a's"])  # as pulsar-client's DLQ producer does
    moved = await admin.RenameDestinations(admin_pb2.RenameDestinationsRequest(
        topic=topic, group="a", from_naming="pulsar-2.9", to_naming="rabbitmq"))
    assert (moved.dead_letter_to, moved.dead_letters) == (f"{topic}.dlq", 1)

    async def bodies(group: str) -> list[bytes]:
        page = await admin.ListDeadLetters(admin_pb2.ListDeadLettersRequest(
            topic=topic, group=group, limit=10))
        return [d.body for d in page.dead_letters]

    assert await bodies("a") == [b"a's"]
    assert await bodies("b") == [b"b's"]
    assert (await client.describe(topic, "b")).dead_letters == 1
    resent = await admin.ResendDeadLetters(admin_pb2.ResendDeadLettersRequest(
        topic=topic, group="b"))
    assert resent.resent == 1
    assert await bodies("a") == [b"a's"]
