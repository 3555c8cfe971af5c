"""`adapters.amqp.direct` on the shared broker: a `Direct` consumer is called as aiormq reads each
delivery (no task of its own), in order; other consumers on the channel keep aiormq's way; a
failing callback costs its delivery only."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aio_pika.abc import AbstractRobustConnection
from aiormq.abc import DeliveredMessage

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from amqp_node import delete_queues, plain_connection, unique

from adapters.amqp import direct


@pytest.fixture
async def plain() -> AsyncIterator[AbstractRobustConnection]:
    async with plain_connection() as connection:
        yield connection


async def fill(connection: AbstractRobustConnection, queue: str, count: int) -> None:
    channel = await connection.channel(publisher_confirms=True)
    await channel.declare_queue(queue, durable=False, auto_delete=False)
    raw = await channel.get_underlay_channel()
    for i in range(count):
        await raw.basic_publish(str(i).encode(), routing_key=queue)
    await channel.close()


async def until(condition: object, timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():  # type: ignore[operator]
            await asyncio.sleep(0.01)


async def test_direct_consumers_are_called_in_order_without_a_task_each(
    plain: AbstractRobustConnection,
) -> None:
    direct_queue, plain_queue = unique("direct.a"), unique("direct.b")
    try:
        await fill(plain, direct_queue, 50)
        await fill(plain, plain_queue, 5)
        channel = await plain.channel()
        raw = await channel.get_underlay_channel()
        assert direct.install(raw)  # the aiormq this gateway pins: installed, not a fallback
        assert direct.install(raw)  # twice is once

        got: list[bytes] = []
        tasks: set[asyncio.Task[object] | None] = set()

        def on_direct(message: DeliveredMessage) -> None:
            got.append(message.body)
            tasks.add(asyncio.current_task())

        awaited: list[bytes] = []

        async def on_plain(message: DeliveredMessage) -> None:
            await asyncio.sleep(0)
            awaited.append(message.body)

        await raw.basic_consume(direct_queue, direct.Direct(on_direct), no_ack=True)  # type: ignore[arg-type]
        await raw.basic_consume(plain_queue, on_plain, no_ack=True)
        await until(lambda: len(got) == 50 and len(awaited) == 5)
        assert got == [str(i).encode() for i in range(50)]
        assert sorted(awaited) == [str(i).encode() for i in range(5)]
        assert len(tasks) == 1  # every call on the channel's own reader, none in a task of its own
        await channel.close()
    finally:
        await delete_queues(plain, direct_queue, plain_queue)


async def test_a_failing_callback_costs_its_delivery_only(plain: AbstractRobustConnection) -> None:
    queue = unique("direct.fail")
    try:
        await fill(plain, queue, 10)
        channel = await plain.channel()
        raw = await channel.get_underlay_channel()
        direct.install(raw)
        got: list[bytes] = []

        def on_message(message: DeliveredMessage) -> None:
            if message.body == b"3":
                raise RuntimeError("boom")
            got.append(message.body)

        await raw.basic_consume(queue, direct.Direct(on_message), no_ack=True)  # type: ignore[arg-type]
        await until(lambda: len(got) == 9)
        assert b"3" not in got and not raw.is_closed
        await channel.close()
    finally:
        await delete_queues(plain, queue)


async def test_a_direct_callback_on_a_plain_channel_runs_as_aiormq_runs_any(
    plain: AbstractRobustConnection,
) -> None:
    queue = unique("direct.plain")
    try:
        await fill(plain, queue, 5)
        channel = await plain.channel()
        raw = await channel.get_underlay_channel()
        got: list[bytes] = []
        await raw.basic_consume(queue, direct.Direct(lambda m: got.append(m.body)), no_ack=True)  # type: ignore[arg-type]
        await until(lambda: len(got) == 5)
        await channel.close()
    finally:
        await delete_queues(plain, queue)


def test_install_refuses_what_is_not_an_aiormq_channel() -> None:
    assert direct.install(object()) is False
