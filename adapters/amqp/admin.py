"""Admin reads and removals on a RabbitMQ queue through a short-lived channel of its own.

Passive declares fail by closing their channel when a queue is missing, and `basic.get` without
ack holds messages until the channel closes (which requeues them in their place), so each admin
operation opens a channel, works, and closes it, leaving the consuming and publishing channels
alone. Nothing here is on the hot path.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Collection
from contextlib import asynccontextmanager, suppress

from aio_pika.abc import AbstractIncomingMessage, AbstractRobustChannel, AbstractRobustConnection
from aio_pika.exceptions import ChannelNotFoundEntity


@asynccontextmanager
async def admin_channel(
    connection: AbstractRobustConnection,
) -> AsyncIterator[AbstractRobustChannel]:
    """A plain channel closed on exit (requeueing whatever it got and did not ack)."""
    channel = await connection.channel(publisher_confirms=False)
    try:
        yield channel
    finally:
        with suppress(Exception):
            await channel.close()


async def ready_count(connection: AbstractRobustConnection, queue: str) -> int | None:
    """Messages ready in `queue` by passive declare; None when the queue does not exist."""
    async with admin_channel(connection) as channel:
        try:
            declared = await channel.declare_queue(queue, passive=True, robust=False)
        except ChannelNotFoundEntity:
            return None
        result = declared.declaration_result
        return int(result.message_count or 0)


async def scan(
    connection: AbstractRobustConnection, queue: str, limit: int
) -> list[AbstractIncomingMessage]:
    """Up to `limit` ready messages of `queue` in queue order, left in the queue."""
    found: list[AbstractIncomingMessage] = []
    async with admin_channel(connection) as channel:
        try:
            target = await channel.declare_queue(queue, passive=True, robust=False)
        except ChannelNotFoundEntity:
            return found
        while len(found) < limit:
            message = await target.get(no_ack=False, fail=False)
            if message is None:
                break
            found.append(message)
    return found


async def remove_matching(
    connection: AbstractRobustConnection,
    queue: str,
    wanted: Collection[str],
    match: Callable[[AbstractIncomingMessage], str],
) -> int:
    """Ack (remove) every ready message of `queue` whose `match` value is in `wanted`."""
    removed = 0
    if not wanted:
        return removed
    async with admin_channel(connection) as channel:
        try:
            target = await channel.declare_queue(queue, passive=True, robust=False)
        except ChannelNotFoundEntity:
            return removed
        while True:
            message = await target.get(no_ack=False, fail=False)
            if message is None:
                break
            if match(message) in wanted:
                await message.ack()
                removed += 1
    return removed


async def purge_queue(connection: AbstractRobustConnection, queue: str) -> int:
    """Drop the ready messages of `queue`; 0 when it does not exist."""
    async with admin_channel(connection) as channel:
        try:
            target = await channel.declare_queue(queue, passive=True, robust=False)
        except ChannelNotFoundEntity:
            return 0
        result = await target.purge()
        return int(result.message_count or 0)
