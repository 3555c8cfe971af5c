"""Settling on the consuming channel in AMQP transactions: a retry or dead-letter copy and the ack
of the delivery it replaces are committed together.

Acks must go on the channel a delivery came on; the copies are published on that same channel,
inside the same transaction (`tx.select` once per channel, then `tx.commit` per group of units).
RabbitMQ carries out a commit it received as a whole whatever becomes of the client: a gateway
killed before its commit leaves neither the copies nor the acks (the deliveries are requeued and
come again, with their counts), one killed after leaves both. Without it, a gateway dying between
a copy's confirm and the original's ack leaves both, and the message lives twice: two retries, two
dead letters. (RabbitMQ documents no atomicity against its own failures across queues; this is
about the gateway's.)

Units from concurrent settle batches are gathered into one commit (group commit): each unit's
frames are written whole between two commits, so a commit never splits one. While a channel is
transactional every ack and requeue on it must be committed: all of them go through here.

A copy the broker cannot route (its queue was deleted behind the gateway's back) comes back as a
`basic.return` before `tx.commit-ok`; it is handed back to the caller, which publishes it again
(the ack it replaced is already committed).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from contextlib import suppress

import aiormq
from aiormq.abc import AbstractChannel, ChannelFrame, DeliveredMessage
from pamqp import commands as spec
from pamqp.base import Frame

from adapters.amqp.backend_link import BROKER_ERRORS
from adapters.amqp.pipeline import Item, Written, write_mandatory
from gateway.errors import Unavailable

Unit = Callable[[AbstractChannel], Awaitable[None]]
"""Writes one unit's frames (publishes, acks, nacks) on the channel; commits come after."""


class Committer:
    """Runs units of settle work on the consuming channel, committed in groups."""

    def __init__(self, timeout_s: float) -> None:
        self._timeout_s = timeout_s
        self._selected: AbstractChannel | None = None
        """The channel in transaction mode (channels change when the connection comes back)."""
        self._pending: list[tuple[AbstractChannel, Unit, asyncio.Future[None]]] = []
        self._task: asyncio.Task[None] | None = None
        self.commits = 0
        """Commits made (tests and benchmarks)."""

    async def run(self, channel: AbstractChannel, unit: Unit) -> None:
        """Write `unit` on `channel` and return once it is committed; `Unavailable` if it was
        not (nothing of it then took effect: an unfinished transaction dies with its
        channel)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append((channel, unit, future))
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._drain())
        # The unit goes on even if its caller is cancelled: a commit is all or nothing anyway.
        await asyncio.shield(future)

    async def _drain(self) -> None:
        while self._pending:
            taken, self._pending = self._pending, []
            by_channel: dict[int, list[tuple[AbstractChannel, Unit, asyncio.Future[None]]]] = {}
            for entry in taken:
                by_channel.setdefault(id(entry[0]), []).append(entry)
            for entries in by_channel.values():
                await self._commit(entries)

    async def _commit(self, entries: list[tuple[AbstractChannel, Unit, asyncio.Future[None]]]
                      ) -> None:
        channel = entries[0][0]
        error: BaseException | None = None
        try:
            async with asyncio.timeout(self._timeout_s):
                if self._selected is not channel:
                    await channel.tx_select()
                    self._selected = channel
                for _, unit, _ in entries:
                    await unit(channel)
                await channel.tx_commit()
                self.commits += 1
        except BROKER_ERRORS as exc:
            error = Unavailable(f"RabbitMQ commit failed: {exc!r}")
        except Exception as exc:  # a fault of ours: the callers see it
            error = exc
        if error is not None:
            await self._abandon(channel)
        for _, _, future in entries:
            if future.done():
                continue
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(error)

    async def _abandon(self, channel: AbstractChannel) -> None:
        """After a failed unit or commit: what was written and not committed must never ride on
        a later commit. Roll it back (a commit already sent is carried out first, frames being
        ordered); if even that fails, close the channel, which discards it and requeues the
        channel's deliveries."""
        try:
            async with asyncio.timeout(self._timeout_s):
                await channel.tx_rollback()
        except Exception:  # the channel is broken: close it
            self._selected = None
            with suppress(Exception):
                await channel.close()


async def write_frames(channel: AbstractChannel, frames: Sequence[Frame]) -> None:
    """Queue method frames (acks, nacks) on the channel as one write, in order after what was
    queued before; they take effect when the transaction commits."""
    if not frames:
        return
    if not isinstance(channel, aiormq.Channel):
        raise TypeError(f"not an aiormq channel: {channel!r}")
    if channel.is_closed:
        raise aiormq.exceptions.ChannelInvalidStateError("channel is closed")
    await channel.write_queue.put(
        ChannelFrame.marshall(channel_number=channel.number, frames=list(frames)))


async def write_publishes(channel: AbstractChannel, items: Sequence[Item]) -> Written:
    """Write mandatory publishes on a transactional channel (no confirms): one future per item,
    done if the broker returns the message. Read them with `returned` after the commit."""
    if not items:
        return []
    if not isinstance(channel, aiormq.Channel):
        raise TypeError(f"not an aiormq channel: {channel!r}")
    return await write_mandatory(channel, items)


def returned(channel: AbstractChannel, written: Written) -> list[int]:
    """After the commit (a `basic.return` comes before `tx.commit-ok`): the positions of the
    publishes the broker returned. Forgets them all."""
    out: list[int] = []
    for position, (tag, future) in enumerate(written):
        # aiormq swaps a returned publish's future for a marker; drop both.
        if isinstance(channel, aiormq.Channel):
            channel.confirmations.pop(tag, None)
        if not future.done():
            future.cancel()
            continue
        if future.cancelled():
            continue
        result = future.exception() or future.result()
        if isinstance(result, aiormq.exceptions.PublishError) or (
            isinstance(result, DeliveredMessage) and isinstance(result.delivery, spec.Basic.Return)
        ):
            out.append(position)
    return out
