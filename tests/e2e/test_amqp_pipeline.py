"""Batched publishing (`adapters.amqp.pipeline`) on the shared broker.

Confirms in order, bodies over the frame size, unroutable messages (with and without
`on_return_raises`), a channel the broker closes under a batch, message ids forgotten once
confirmed.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aio_pika.abc import AbstractRobustConnection
from aiormq.exceptions import AMQPError, PublishError
from pamqp import commands as spec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from amqp_node import delete_queues, plain_connection, ready_in, unique

from adapters.amqp.pipeline import publish_batch


@pytest.fixture
async def plain() -> AsyncIterator[AbstractRobustConnection]:
    async with plain_connection() as connection:
        yield connection


def props(message_id: str) -> spec.Basic.Properties:
    return spec.Basic.Properties(delivery_mode=2, message_id=message_id, headers={"n": 1})


async def test_batch_is_confirmed_in_order_with_big_bodies(
    plain: AbstractRobustConnection,
) -> None:
    queue = unique("pipeline.ok")
    channel = await plain.channel(publisher_confirms=True)
    try:
        await channel.declare_queue(queue, durable=True)
        raw = await channel.get_underlay_channel()
        big = bytes(range(256)) * 2048  # 512 KiB: several body frames
        items = [("", queue, f"m{i}".encode(), props(f"m{i}")) for i in range(50)]
        items.append(("", queue, big, props("big")))
        await publish_batch(raw, items)
        assert await ready_in(plain, queue) == 51
        declared = await channel.declare_queue(queue, durable=True)
        bodies = []
        for _ in range(51):
            message = await declared.get(no_ack=True)
            assert message is not None
            bodies.append((message.message_id, message.body))
        assert bodies[:50] == [(f"m{i}", f"m{i}".encode()) for i in range(50)]
        assert bodies[50] == ("big", big)
    finally:
        await channel.close()
        await delete_queues(plain, queue)


@pytest.mark.parametrize("on_return_raises", [True, False])
async def test_unroutable_message_fails_the_batch_and_the_channel_goes_on(
    plain: AbstractRobustConnection, on_return_raises: bool
) -> None:
    queue = unique("pipeline.some")
    channel = await plain.channel(publisher_confirms=True, on_return_raises=on_return_raises)
    try:
        await channel.declare_queue(queue, durable=True)
        raw = await channel.get_underlay_channel()
        items = [
            ("", queue, b"a", props("a")),
            ("", unique("pipeline.nowhere"), b"lost", props("lost")),
            ("", queue, b"b", props("b")),
        ]
        with pytest.raises(PublishError):
            await publish_batch(raw, items)
        await publish_batch(raw, [("", queue, b"c", props("c"))])
        assert await ready_in(plain, queue) == 3
    finally:
        await channel.close()
        await delete_queues(plain, queue)


async def test_a_channel_closed_under_a_batch_fails_it(plain: AbstractRobustConnection) -> None:
    """Publishing to an exchange that does not exist: the broker closes the channel (404) and the
    batch fails with aiormq's error at once, however many confirms it waited for."""
    channel = await plain.channel(publisher_confirms=True)
    raw = await channel.get_underlay_channel()
    items = [(unique("pipeline.no-exchange"), "q", b"x", props(f"x{i}")) for i in range(20)]
    with pytest.raises(AMQPError):
        await asyncio.wait_for(publish_batch(raw, items), 10)


async def test_confirmed_batches_leave_no_bookkeeping(plain: AbstractRobustConnection) -> None:
    queue = unique("pipeline.tidy")
    channel = await plain.channel(publisher_confirms=True)
    try:
        await channel.declare_queue(queue, durable=True)
        raw = await channel.get_underlay_channel()
        for round_ in range(3):
            batch = [("", queue, b"x", props(f"{round_}.{i}")) for i in range(100)]
            await publish_batch(raw, batch)
        assert raw.message_id_delivery_tag == {}
        assert not any(not c.done() for c in raw.confirmations.values())
        assert await ready_in(plain, queue) == 300
    finally:
        await channel.close()
        await delete_queues(plain, queue)
