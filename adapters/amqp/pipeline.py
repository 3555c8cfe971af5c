"""Publish a batch as one socket write, then wait for all its confirms at once.

aiormq's `basic_publish` takes the channel lock, writes and drains once per message, which costs
about 4x the CPU of the work itself. Here the whole batch is marshalled first (by `wire`), then,
under the same channel lock and with the same bookkeeping aiormq keeps (publish sequence numbers,
an entry per message in `channel.confirmations`, message id -> sequence number for
`basic.return`), it is queued as one write. Nacks, returns of mandatory messages and channel
closes fail a batch exactly as they fail `basic_publish`, so callers see aiormq's exceptions (a
returned message raises `PublishError` whether or not the channel was opened with
`on_return_raises`). Any other channel type falls back to `basic_publish` per message.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import aiormq
from aiormq.abc import AbstractChannel, ChannelFrame, DeliveredMessage
from pamqp import commands as spec

from adapters.amqp import wire
from adapters.amqp.wire import Item

__all__ = ["Item", "Written", "publish_batch", "write_mandatory"]


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


class Batch:
    """The confirmations of one batch of publishes, settled as a whole: one future (in the
    channel's store, so that aiormq fails it when the channel closes) done once every publish
    was confirmed, nacked or returned."""

    def __init__(self, channel: aiormq.Channel, count: int) -> None:
        self.channel = channel
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
    if not items:
        return
    if not isinstance(channel, aiormq.Channel) or not channel.publisher_confirms:
        fallback = await asyncio.gather(
            *(
                channel.basic_publish(
                    body, exchange=exchange, routing_key=route, properties=props, mandatory=True
                )
                for exchange, route, body, props in items
            )
        )
        _raise_returned(fallback)
        return
    if channel.is_closed:
        raise aiormq.exceptions.ChannelInvalidStateError("channel is closed")
    batch = Batch(channel, len(items))
    try:
        await _write(
            channel, items,
            lambda position, tag, message_id: Confirmation(batch, position, tag, message_id),
        )
    except BaseException:
        batch.future.cancel()
        raise
    outcomes = await batch.future
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
    _raise_returned(outcomes)


def _raise_returned(results: Sequence[object]) -> None:
    """A channel opened without `on_return_raises` hands returned messages back as results."""
    for result in results:
        if isinstance(result, DeliveredMessage) and isinstance(result.delivery, spec.Basic.Return):
            raise aiormq.exceptions.PublishError(result, result.delivery)
