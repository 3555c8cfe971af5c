"""A declared AMQP queue keeps its messages before its first consumer comes: its group is made
in the embedded store at `queue.declare`, so messages another group of the same topic settled
are not trimmed away from it (also across a restart). Deleting the queue, or a restart for a
non-durable one, drops the group again; declared queues take no room under `--max-groups`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aio_pika
import pytest

from gateway.client import GatewayClient
from gateway.store import EmbeddedStore
from tests.amqp_front import AmqpGateway, unique

OTHER = "other"
"""A gRPC consumer's group reading the queue's topic too."""


@pytest.fixture
async def gw(tmp_path: Path) -> AsyncIterator[AmqpGateway]:
    gateway = AmqpGateway(tmp_path / "data", max_groups=2)
    await gateway.start()
    try:
        yield gateway
    finally:
        await gateway.stop()


def store(gw: AmqpGateway) -> EmbeddedStore:
    assert gw.app is not None and isinstance(gw.app.backend, EmbeddedStore)
    return gw.app.backend


async def publish(gw: AmqpGateway, queue: str, bodies: list[bytes]) -> None:
    connection = await aio_pika.connect(gw.url)
    async with connection:
        ch = await connection.channel()  # publisher confirms: stored when this returns
        for body in bodies:
            await ch.default_exchange.publish(aio_pika.Message(body), routing_key=queue)


async def settled_by_other_group(gw: AmqpGateway, topic: str, n: int) -> None:
    assert gw.app is not None
    async with GatewayClient(f"127.0.0.1:{gw.app.grpc_port}") as client, client.consume(
        topic, OTHER, policy="rocketmq", prefetch=n
    ) as stream:
        for _ in range(n):
            msg = await stream.next(5)
            assert msg is not None
            assert (await msg.ack()).ok


async def consume_all(gw: AmqpGateway, queue: str, n: int, **declare: object) -> list[bytes]:
    connection = await aio_pika.connect(gw.url)
    async with connection:
        ch = await connection.channel()
        q = await ch.declare_queue(queue, **declare)  # type: ignore[arg-type]
        got: list[bytes] = []
        async with q.iterator(timeout=5) as it:
            async for message in it:
                got.append(message.body)
                await message.ack()
                if len(got) == n:
                    break
        return got


async def declare(gw: AmqpGateway, queue: str, **kw: object) -> aio_pika.abc.AbstractConnection:
    connection = await aio_pika.connect(gw.url)
    ch = await connection.channel()
    await ch.declare_queue(queue, **kw)  # type: ignore[arg-type]
    return connection


async def test_a_declared_queue_keeps_what_another_group_settled(gw: AmqpGateway) -> None:
    queue = unique("kept")
    await (await declare(gw, queue, durable=True)).close()
    await publish(gw, queue, [b"1", b"2", b"3"])
    await settled_by_other_group(gw, queue, 3)
    assert await store(gw).trim() == 0  # before: 2 (all but the newest), lost to the queue
    assert await consume_all(gw, queue, 3, durable=True) == [b"1", b"2", b"3"]
    # Deleting the queue drops its group: what only it kept goes at the next trim.
    await publish(gw, queue, [b"4", b"5"])
    await settled_by_other_group(gw, queue, 2)
    connection = await aio_pika.connect(gw.url)
    async with connection:
        ch = await connection.channel()
        await ch.queue_delete(queue)
    assert await store(gw).trim() == 4  # 1..4: 5, the newest, always stays


async def test_a_durable_queue_keeps_its_messages_across_a_restart(gw: AmqpGateway) -> None:
    queue = unique("kept")
    await (await declare(gw, queue, durable=True)).close()
    await gw.restart()
    await publish(gw, queue, [b"1", b"2"])
    await gw.restart()
    await publish(gw, queue, [b"3"])
    await settled_by_other_group(gw, queue, 3)
    assert await store(gw).trim() == 0
    await gw.restart()
    assert await consume_all(gw, queue, 3, durable=True) == [b"1", b"2", b"3"]


async def test_a_non_durable_queue_keeps_its_messages_while_it_exists(gw: AmqpGateway) -> None:
    queue = unique("temp")
    holder = await declare(gw, queue, durable=False, exclusive=True)
    try:
        await publish(gw, queue, [b"1", b"2", b"3"])
        await settled_by_other_group(gw, queue, 3)
        assert await store(gw).trim() == 0
        ch = await holder.channel()
        q = await ch.declare_queue(queue, durable=False, exclusive=True)
        got = [await q.get(timeout=5) for _ in range(3)]
        assert [m.body for m in got] == [b"1", b"2", b"3"]
        await publish(gw, queue, [b"4", b"5"])
        await settled_by_other_group(gw, queue, 2)
    finally:
        await holder.close()  # its exclusive queue goes, with its group
    assert await store(gw).trim() == 4


async def test_a_non_durable_queue_does_not_hold_messages_after_a_restart(
    gw: AmqpGateway,
) -> None:
    queue = unique("temp")
    holder = await declare(gw, queue, durable=False)
    await publish(gw, queue, [b"1", b"2", b"3"])
    await holder.close()
    await gw.restart()  # the queue is gone: its group goes at start
    await settled_by_other_group(gw, queue, 3)
    assert await store(gw).trim() == 2
    await gw.restart()  # and stays gone (the journal's record was settled)
    assert await store(gw).trim() == 0


async def test_declared_queues_take_no_room_under_max_groups(gw: AmqpGateway) -> None:
    names = [unique("idle") for _ in range(5)]  # max_groups is 2
    connection = await aio_pika.connect(gw.url)
    async with connection:
        ch = await connection.channel()
        for name in names:
            await ch.declare_queue(name, durable=True)
    await publish(gw, names[-1], [b"x"])
    assert await consume_all(gw, names[-1], 1, durable=True) == [b"x"]
