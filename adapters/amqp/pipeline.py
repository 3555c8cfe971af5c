"""Publish a batch as one socket write, then wait for all its confirms at once.

aiormq's `basic_publish` takes the channel lock, writes and drains once per message, which costs
about 4x the CPU of the work itself. Here the whole batch is marshalled first (by `wire`), then,
under the same channel lock and with the same bookkeeping aiormq keeps (publish sequence numbers,
an entry per message in `channel.confirmations`, message id -> sequence number for
`basic.return`), it is queued as one write. Nacks, returns of mandatory messages and channel
closes fail a batch exactly as they fail `basic_publish`, so callers see aiormq's exceptions (a
returned message raises `PublishError` whether or not the channel was opened with
`on_return_raises`). Any other channel type falls back to `basic_publish` per message.

A big batch is written CHUNK publishes at a time, each chunk marshalled in a turn of the event
loop of its own, and a channel has at most WINDOW publishes awaiting their confirms: a chunk waits
for room, in arrival order (`Window`). Before, a batch of 10,000 tiny messages was marshalled
and queued in one go; every publish of every other client queued behind all of it on the
channel, and aiormq looked through every outstanding confirmation for each multiple ack (a
victim's confirm took 0.9-2.5 s through such a flood).
"""

from __future__ import annotations

import asyncio
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any

import aiormq
from aiormq.abc import AbstractChannel, ChannelFrame, DeliveredMessage
from pamqp import commands as spec

from adapters.amqp import wire
from adapters.amqp.wire import Item

__all__ = ["Item", "Written", "publish_batch", "write_batch", "write_mandatory"]

CHUNK = 256
"""Publishes marshalled and queued in one turn of the event loop."""
WINDOW = 1024
"""Publishes of `publish_batch` on one channel awaiting their confirms, at most (a chunk bigger
than the room left waits, unless nothing is outstanding)."""


def forget(channel: aiormq.Channel, message_id: str, tag: int, _: object = None) -> None:
    if channel.message_id_delivery_tag.get(message_id) == tag:
        del channel.message_id_delivery_tag[message_id]


Written = list[tuple[int, asyncio.Future[object]]]
"""Publishes written: (publish sequence number, future) per item."""


async def write_mandatory(channel: aiormq.Channel, items: Sequence[Item]) -> Written:
    """Queue mandatory publishes of every item as one write, with aiormq's own bookkeeping: a
    publish sequence number and a future per item (settled by a confirm, a nack or a
    `basic.return`), message id -> sequence number. If the write cannot be queued, the
    bookkeeping is undone and the error raised."""

    def track(_: int, tag: int, message_id: str | None) -> asyncio.Future[object]:
        future = channel.create_future()
        if message_id:
            future.add_done_callback(partial(forget, channel, message_id, tag))
        return future

    return await _write(channel, items, track)


class Window:
    """Room for publishes awaiting their confirms on one channel (WINDOW), handed out in
    arrival order: a chunk that finds others waiting waits behind them. A wait is a future in
    the channel's store, so a channel that closes fails its waiters."""

    def __init__(self, channel: aiormq.Channel) -> None:
        self.channel = channel
        self.used = 0
        self.waiting: deque[tuple[int, asyncio.Future[None]]] = deque()

    async def take(self, n: int) -> None:
        if not self.waiting and (self.used == 0 or self.used + n <= WINDOW):
            self.used += n
            return
        entry = (n, self.channel.create_future())
        self.waiting.append(entry)
        try:
            await entry[1]
        except BaseException:
            granted = entry[1].done() and not entry[1].cancelled() and not entry[1].exception()
            if entry in self.waiting:
                self.waiting.remove(entry)
            elif granted:  # room given just as the caller stopped waiting
                self.give(n)
            raise

    def give(self, n: int) -> None:
        self.used -= n
        waiting = self.waiting
        while waiting:
            size, future = waiting[0]
            if future.done():  # failed by the channel's close
                waiting.popleft()
                continue
            if self.used and self.used + size > WINDOW:
                return
            waiting.popleft()
            self.used += size
            future.set_result(None)


_WINDOWS: weakref.WeakKeyDictionary[aiormq.Channel, Window] = weakref.WeakKeyDictionary()


def window(channel: aiormq.Channel) -> Window:
    """The publish window of `channel` (one per channel, gone with it)."""
    found = _WINDOWS.get(channel)
    if found is None:
        found = _WINDOWS[channel] = Window(channel)
    return found


class Batch:
    """The confirmations of one batch of publishes, settled as a whole: one future (in the
    channel's store, so that aiormq fails it when the channel closes) done once every publish
    was confirmed, nacked or returned. Each settled publish gives its room in the window back."""

    def __init__(self, channel: aiormq.Channel, count: int) -> None:
        self.channel = channel
        self.window = window(channel)
        self.left = count
        self.outcomes: list[object] = [None] * count
        """Per publish: the confirm frame, a returned message, or the exception."""
        self.future: asyncio.Future[list[object]] = channel.create_future()


class Confirmation:
    """What aiormq keeps in `channel.confirmations` for one publish of a `Batch`, in place of a
    future of its own: aiormq settles it as it settles a future (`set_result`, `set_exception`;
    a confirm for a settled one is ignored), without a callback through the event loop (a
    future per publish cost five of them)."""

    __slots__ = ("batch", "message_id", "position", "settled", "tag")

    def __init__(self, batch: Batch, position: int, tag: int, message_id: str | None) -> None:
        self.batch, self.position, self.tag, self.message_id = batch, position, tag, message_id
        self.settled = False

    def done(self) -> bool:
        return self.settled

    def cancelled(self) -> bool:
        return False

    def set_result(self, value: object) -> None:
        self._settle(value)

    def set_exception(self, exc: BaseException) -> None:
        self._settle(exc)

    def _settle(self, outcome: object) -> None:
        if self.settled:
            return
        self.settled = True
        batch = self.batch
        if self.message_id:
            forget(batch.channel, self.message_id, self.tag)
        batch.outcomes[self.position] = outcome
        batch.left -= 1
        batch.window.give(1)
        if batch.left == 0 and not batch.future.done():
            batch.future.set_result(batch.outcomes)


Track = Callable[[int, int, "str | None"], Any]
"""Makes the tracker of one publish: (position in the batch, sequence number, message id)."""


async def _write(
    channel: aiormq.Channel, items: Sequence[Item], track: Track
) -> list[tuple[int, Any]]:
    """Queue the publishes as one write under the channel lock: publish sequence numbers, one
    tracker per item in `channel.confirmations` (`track(position, tag, message_id)`), message id ->
    sequence number for `basic.return`. If the write cannot be queued, all of it is undone."""
    payload = ChannelFrame(
        payload=wire.publish_payload(channel.number, items, channel.max_content_size),
        should_close=False,
    )
    written: list[tuple[int, Any]] = []
    async with channel.lock:
        first = channel.delivery_tag + 1
        for offset, (_, _, _, props) in enumerate(items):
            tag = first + offset
            tracker = track(offset, tag, props.message_id)
            channel.confirmations[tag] = tracker
            if props.message_id:
                channel.message_id_delivery_tag[props.message_id] = tag
            written.append((tag, tracker))
        channel.delivery_tag = first + len(items) - 1
        try:
            await channel.write_queue.put(payload)
        except BaseException:
            channel.delivery_tag = first - 1
            for tag, tracker in written:
                channel.confirmations.pop(tag, None)
                if isinstance(tracker, asyncio.Future):
                    tracker.cancel()
            raise
    return written


async def publish_batch(channel: AbstractChannel, items: Sequence[Item]) -> None:
    """Publish every item (mandatory) and return once the broker confirmed all of them."""
    confirmed = await write_batch(channel, items)
    await confirmed()


async def write_batch(
    channel: AbstractChannel, items: Sequence[Item]
) -> Callable[[], Awaitable[None]]:
    """Queue mandatory publishes of every item, in order, CHUNK at a time within the channel's
    window; return what to await for their confirms (it raises as `publish_batch` does). If a
    chunk cannot be queued, the error is raised (the chunks before it stay queued)."""
    if not items:
        return _nothing
    if not isinstance(channel, aiormq.Channel) or not channel.publisher_confirms:
        fallback = asyncio.gather(
            *(
                channel.basic_publish(
                    body, exchange=exchange, routing_key=route, properties=props, mandatory=True
                )
                for exchange, route, body, props in items
            )
        )

        async def fallen_back() -> None:
            _raise_returned(await fallback)

        return fallen_back
    if channel.is_closed:
        raise aiormq.exceptions.ChannelInvalidStateError("channel is closed")
    batch = Batch(channel, len(items))
    room = batch.window
    for start in range(0, len(items), CHUNK):
        if start:
            await asyncio.sleep(0)  # others' work between two chunks
        chunk = items[start : start + CHUNK]
        try:
            await room.take(len(chunk))
        except BaseException:
            batch.future.cancel()
            raise
        try:
            await _write(channel, chunk, partial(_confirmation, batch, start))
        except BaseException:
            room.give(len(chunk))
            batch.future.cancel()
            raise

    async def confirmed() -> None:
        outcomes = await batch.future
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        _raise_returned(outcomes)

    return confirmed


def _confirmation(
    batch: Batch, offset: int, position: int, tag: int, message_id: str | None
) -> Confirmation:
    return Confirmation(batch, offset + position, tag, message_id)


async def _nothing() -> None:
    return None


def _raise_returned(results: Sequence[object]) -> None:
    """A channel opened without `on_return_raises` hands returned messages back as results."""
    for result in results:
        if isinstance(result, DeliveredMessage) and isinstance(result.delivery, spec.Basic.Return):
            raise aiormq.exceptions.PublishError(result, result.delivery)
