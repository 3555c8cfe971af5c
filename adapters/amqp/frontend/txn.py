"""Channel transactions (`tx.select`, `tx.commit`, `tx.rollback`), as RabbitMQ has them.

After `tx.select` a channel is transactional for its life. Its publishes and its acks, nacks
and rejects are held, not applied, until `tx.commit` applies them in the order they came
(publishes stored durably first, then the settlements) and answers `tx.commit-ok`;
`tx.rollback` drops them (the deliveries stay unacknowledged, as on RabbitMQ) and answers
`tx.rollback-ok`. A mandatory publish unroutable at commit is returned (`basic.return`).
`tx.select` on a channel in confirm mode, `confirm.select` on a transactional one, and a commit
or rollback on a channel that is not transactional are 406 PRECONDITION_FAILED (RabbitMQ's
texts).

What a transaction holds leaves the connection's room for messages not yet stored (a client
would otherwise stop being read while its commit waits behind its own publishes) and counts
instead against `MAX_CHANNEL_BYTES` per channel and, over every channel, the gateway's room for
messages not yet stored (`[amqp] max_pending_publish_mb`): past either, 506 RESOURCE_ERROR
closes the channel and its transaction is dropped.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from pamqp import commands

from adapters.amqp.frontend.errors import PRECONDITION_FAILED, RESOURCE_ERROR, AMQPError
from adapters.amqp.frontend.publishing import Publish, held, next_batch, publish_batch
from adapters.amqp.frontend.state import UNSIGNED_64, ChannelState

MAX_CHANNEL_BYTES = 64 << 20
"""Bytes of messages one channel's transaction may hold (bodies and decoded headers)."""
NOT_TRANSACTIONAL = "channel is not transactional"
SELECT = (90, 10)
COMMIT = (90, 20)
ROLLBACK = (90, 30)


@dataclass(slots=True)
class Settle:
    """An ack, nack or reject that came after `tx.select` (`ChannelState.settle_tags`)."""

    tag: int
    multiple: bool
    requeue: bool | None
    method: tuple[int, int]


@dataclass(slots=True)
class Transaction:
    """What a transactional channel holds until its next commit or rollback."""

    work: list[Publish | Settle] = field(default_factory=list)
    held_bytes: int = 0
    settled: set[int] = field(default_factory=set)
    """Delivery tags a held ack, nack or reject covers: acking one again is an unknown tag."""


def select(channel: ChannelState) -> Any:
    if channel.confirming:
        raise AMQPError(PRECONDITION_FAILED, "cannot switch from confirm to tx mode", SELECT)
    if channel.tx is None:
        channel.tx = Transaction()
    return commands.Tx.SelectOk()


async def hold_publishes(channel: ChannelState, batch: list[Publish]) -> None:
    """Keep `batch` for the commit, routed and checked now (`publishing.held`); their bytes
    leave the connection's room (module doc)."""
    tx = channel.tx
    assert tx is not None
    room = channel.ctx.room
    size = sum(item.cost for item in batch)
    channel.conn.published(size)  # no longer waiting to be stored: held by the transaction
    tx.work.extend(batch)
    tx.held_bytes += size
    room.in_transactions += size
    if tx.held_bytes > MAX_CHANNEL_BYTES:
        raise AMQPError(RESOURCE_ERROR, f"a transaction holds more than {MAX_CHANNEL_BYTES} "
                                        "bytes of messages: commit more often", (60, 40),
                        hard=False)
    if room.in_transactions > room.limit:
        raise AMQPError(RESOURCE_ERROR, f"transactions hold more than {room.limit} bytes of "
                                        "messages over every connection: commit more often",
                        (60, 40), hard=False)
    await held(channel, batch)


def hold_settle(channel: ChannelState, settle: Settle) -> None:
    """Keep an ack, nack or reject for the commit (applied at once outside a transaction)."""
    tx = channel.tx
    if tx is None:
        channel.settle_tags(settle.tag, settle.multiple, settle.requeue, settle.method)
        return
    # RabbitMQ checks the tag when the ack comes, not at the commit: a bad one closes the channel
    # now and the transaction is dropped with it (nothing held before it is stored).
    tag = settle.tag & UNSIGNED_64
    if settle.multiple and not tag:
        tx.settled.update(channel.unacked)
    elif tag not in channel.unacked or tag in tx.settled:
        raise AMQPError(PRECONDITION_FAILED, f"unknown delivery tag {tag}", settle.method)
    elif settle.multiple:  # (the unacked tags alone: one ack is not a walk over all of them)
        tx.settled.update(t for t in channel.unacked if t <= tag)
    else:
        tx.settled.add(tag)
    tx.work.append(settle)


async def commit(channel: ChannelState) -> Any:
    tx = _transaction(channel, COMMIT)
    work, tx.work = tx.work, []
    tx.settled.clear()
    _release(channel, tx)
    run: list[Publish] = []
    for item in work:
        if isinstance(item, Publish):
            run.append(item)
            continue
        await _publish(channel, run)
        run = []
        channel.settle_tags(item.tag, item.multiple, item.requeue, item.method)
    await _publish(channel, run)
    await channel.settled()  # the settlements applied before commit-ok
    return commands.Tx.CommitOk()


def rollback(channel: ChannelState) -> Any:
    tx = _transaction(channel, ROLLBACK)
    tx.work = []
    tx.settled.clear()
    _release(channel, tx)
    return commands.Tx.RollbackOk()


def discard(channel: ChannelState) -> None:
    """The channel closes: what its transaction holds is dropped."""
    tx = channel.tx
    if tx is not None:
        tx.work = []
        _release(channel, tx)


def _transaction(channel: ChannelState, method: tuple[int, int]) -> Transaction:
    tx: Transaction | None = channel.tx
    if tx is None:
        raise AMQPError(PRECONDITION_FAILED, NOT_TRANSACTIONAL, method)
    return tx


def _release(channel: ChannelState, tx: Transaction) -> None:
    room = channel.ctx.room
    room.in_transactions = max(room.in_transactions - tx.held_bytes, 0)
    tx.held_bytes = 0


async def _publish(channel: ChannelState, run: list[Publish]) -> None:
    """Store a run of held publishes as the publish path stores them (it gives their bytes back
    to the room: they are counted in it again first)."""
    queue = deque(run)
    while queue:
        batch = next_batch(queue)  # as a run of publishes is cut: the loop serves others
        size = sum(item.cost for item in batch)
        channel.conn.pending_publish_bytes += size
        channel.ctx.room.hold_now(size)
        await publish_batch(channel, batch)
