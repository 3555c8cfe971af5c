"""A reader's (non-durable) subscription goes when its reader goes, as the README promises:
after `reader.close()`, after `client.close()` and after the connection drops, the official
`pulsar-client`'s reader leaves no group behind: the Admin API's `ListGroups` (what the console
shows) no longer lists it, and later publishes do not bring it back. A durable subscription
stays when its consumer closes."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Callable

import grpc
import pulsar
import pytest

from gateway.v1 import admin_pb2, admin_pb2_grpc, gateway_pb2, gateway_pb2_grpc
from tests.e2e.pulsar_stack import Stack, client_for, run, stack_fixture  # noqa: F401  (fixture `stack`)

TOPIC = "reader-close"


async def publish(stack: Stack, *bodies: bytes) -> None:
    assert stack.app is not None
    async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.app.grpc_port}") as channel:
        await gateway_pb2_grpc.GatewayStub(channel).Publish(gateway_pb2.PublishRequest(
            topic=TOPIC, messages=[gateway_pb2.Message(body=b) for b in bodies]))


async def listed(stack: Stack) -> dict[str, int]:
    """The topic's groups as `Admin.ListGroups` lists them, with their ready counts."""
    assert stack.app is not None
    async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.app.grpc_port}") as channel:
        answer = await admin_pb2_grpc.AdminStub(channel).ListGroups(
            admin_pb2.ListGroupsRequest())
    return {g.group: g.view.ready for g in answer.groups if g.topic == TOPIC}


async def engine_groups(stack: Stack) -> list[str]:
    assert stack.app is not None
    return [g.group for g in stack.app.engine.groups() if g.topic == TOPIC]


async def gone(stack: Stack, group: str) -> bool:
    """Whether `group` is no longer listed (waiting up to 5 s for the gateway to notice)."""
    for _ in range(50):
        if group not in await listed(stack) and group not in await engine_groups(stack):
            return True
        await asyncio.sleep(0.1)
    return False


def reader_close(client: pulsar.Client, reader: pulsar.Reader) -> None:
    reader.close()


def client_close(client: pulsar.Client, reader: pulsar.Reader) -> None:
    client.close()


READER_PROCESS = """
import sys, pulsar
client = pulsar.Client(sys.argv[1], logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
reader = client.create_reader(sys.argv[2], pulsar.MessageId.earliest)
print(reader.read_next(10000).data().decode(), flush=True)
sys.stdin.read()
"""


@pytest.mark.parametrize("ending", [reader_close, client_close], ids=["reader", "client"])
async def test_a_closed_readers_subscription_is_no_longer_listed(
    stack: Stack, ending: Callable[[pulsar.Client, pulsar.Reader], None]
) -> None:
    await publish(stack, b"m1")
    client = client_for(stack.url)
    try:
        reader = await run(client.create_reader, f"persistent://public/default/{TOPIC}",
                           pulsar.MessageId.earliest)
        assert (await run(reader.read_next, 5000)).data() == b"m1"
        [group] = await engine_groups(stack)
        assert group.startswith("reader-")
        assert group in await listed(stack)
        await run(ending, client, reader)
        assert await gone(stack, group), await listed(stack)
        await publish(stack, b"later", b"later", b"later")
        await asyncio.sleep(0.3)
        assert await listed(stack) == {}
        assert await engine_groups(stack) == []
    finally:
        with contextlib.suppress(pulsar.AlreadyClosed):
            await run(client.close)


async def test_a_readers_subscription_goes_when_its_connection_drops(stack: Stack) -> None:
    """The client's process is killed: its connection just ends, with no CLOSE_CONSUMER."""
    await publish(stack, b"m1")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", READER_PROCESS, stack.url, TOPIC,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), 30)
        assert line == b"m1\n"
        [group] = await engine_groups(stack)
        assert group in await listed(stack)
        process.kill()
        await process.wait()
        assert await gone(stack, group), await listed(stack)
        await publish(stack, b"later")
        await asyncio.sleep(0.3)
        assert await listed(stack) == {}
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_a_durable_subscription_stays_listed_after_its_consumer_closes(
    stack: Stack,
) -> None:
    client = client_for(stack.url)
    try:
        consumer = await run(client.subscribe, TOPIC, "durable",
                             initial_position=pulsar.InitialPosition.Earliest)
        await publish(stack, b"m1")
        msg = await run(consumer.receive, 5000)
        await run(consumer.acknowledge, msg)
        await run(consumer.close)
        await publish(stack, b"m2", b"m3")
        await asyncio.sleep(0.3)
        assert (await listed(stack)).get("durable") == 2
        consumer = await run(client.subscribe, TOPIC, "durable")
        assert (await run(consumer.receive, 5000)).data() == b"m2"
    finally:
        await run(client.close)
