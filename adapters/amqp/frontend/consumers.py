"""Consumers: `basic.consume` as an engine push consumer, `basic.get` as a pull receive, and
`basic.recover`.

A consumer's engine credit follows its prefetch: it holds at most `prefetch` unacknowledged
deliveries (the channel's global prefetch bounds them all together); without a prefetch, or with
no-ack, credit stays `WINDOW` ahead of what was sent, and sending waits while the socket's
buffer is full. A delivery counts as redelivered from its second attempt on; its failed
deliveries so far are in the `x-delivery-count` header. A delivery whose content header would
not fit the connection's frame_max goes out without its largest headers (`fit_headers`). A
message whose TTL (per message `expiration`, or the queue's `x-message-ttl`) passed before it
could be delivered is not delivered: it is dead-lettered with reason `expired` (or discarded
without a dead-letter exchange), as RabbitMQ does.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import Mapping
from typing import Any

import structlog
from pamqp import commands
from pamqp.base import Frame

from adapters.amqp.dialect import EXPIRED
from adapters.amqp.frontend import framing, messages, table
from adapters.amqp.frontend.errors import INTERNAL_ERROR, AMQPError, short
from adapters.amqp.frontend.state import ChannelState, Unacked, outranked, top_up_queue
from adapters.amqp.frontend.topology import Queue
from gateway.engine.api import Delivery, SettleAction, Settlement
from gateway.engine.port import ConsumerPort
from gateway.errors import GatewayError, Unavailable

log = structlog.get_logger(__name__)

WINDOW = 1000
"""Credit kept ahead of a consumer that has no prefetch limit."""
BATCH = 256
HEADERS_DROPPED = "x-headers-dropped"
"""The header that says how many headers a delivery was sent without (its content header did
not fit the connection's frame_max)."""


def expires_at(properties: Mapping[str, str], publish_ms: int, queue: Queue | None
               ) -> int | None:
    """When a message published at `publish_ms` expires in `queue`: its own `expiration` or
    the queue's `x-message-ttl`, the shorter (None: never)."""
    ttl = messages.expiration_ms(properties)
    queue_ttl = queue.settings.message_ttl_ms if queue is not None else None
    if queue_ttl is not None:
        ttl = queue_ttl if ttl is None else min(ttl, queue_ttl)
    return None if ttl is None else publish_ms + ttl


def expired(delivery: Delivery, queue: Queue, now_ms: int) -> bool:
    """Whether a message's time to live passed before it could be delivered."""
    at = expires_at(delivery.properties, delivery.publish_ms, queue)
    return at is not None and at <= now_ms


def fit_headers(properties: dict[str, Any], header_frame: int, frame_max: int,
                message_id: str) -> dict[str, Any]:
    """`properties` whose content header fits in a frame of `frame_max` bytes, given that its
    frame now takes `header_frame` bytes: when it does not, whole headers are left out, the
    largest first (the basic properties and `x-delivery-count` stay), and `x-headers-dropped`
    says how many; a warning names the message."""
    excess = header_frame - frame_max
    headers = properties.get("headers")
    if excess <= 0 or not headers:
        return properties
    need = excess + len(table.encode_table({HEADERS_DROPPED: len(headers)})) - 4
    sizes = sorted((-(len(table.encode_table({k: v})) - 4), k)
                   for k, v in headers.items() if k != messages.DELIVERY_COUNT)
    kept = dict(headers)
    for negative, key in sizes:
        if need <= 0:
            break
        del kept[key]
        need += negative
    dropped = len(headers) - len(kept)
    kept[HEADERS_DROPPED] = dropped
    log.warning("amqp delivery headers dropped: the content header exceeds frame_max",
                message_id=message_id, dropped=dropped, frame_max=frame_max)
    return {**properties, "headers": kept}


def frames_for(channel: ChannelState, method: Frame, delivery: Delivery) -> list[bytes]:
    """The method frame, content header and body frames of one delivery to this channel."""
    frame_max = channel.conn.frame_max
    try:
        properties = messages.delivery_properties(delivery)
        content = framing.content_frames(channel.number, properties, delivery.body, frame_max)
        if len(content[0]) > frame_max:  # encoded once; again only when headers must go
            properties = fit_headers(properties, len(content[0]), frame_max,
                                     delivery.message_id)
            content = framing.content_frames(channel.number, properties, delivery.body,
                                             frame_max)
    except (ValueError, TypeError, OverflowError, struct.error) as exc:
        # Properties another front end set that AMQP cannot carry: deliver the body.
        log.warning("amqp delivery properties dropped", error=str(exc))
        content = framing.content_frames(channel.number, {}, delivery.body, frame_max)
    return [framing.method_frame(channel.number, method), *content]


def route_of(delivery: Delivery) -> tuple[str, str]:
    """The exchange and routing key a delivery is shown with."""
    exchange = delivery.properties.get(messages.EXCHANGE, "")
    routing_key = delivery.properties.get(messages.ROUTING_KEY, delivery.original_topic)
    return messages.shortstr(exchange), messages.shortstr(routing_key)


class ConsumerSession:
    """One `basic.consume`: pumps the engine consumer's deliveries to the client."""

    def __init__(self, channel: ChannelState, tag: str, queue: Queue, consumer: ConsumerPort, *,
                 no_ack: bool, prefetch: int, exclusive: bool, priority: int = 0) -> None:
        self.channel = channel
        self.tag = tag
        self.queue = queue
        self.consumer = consumer
        self.no_ack = no_ack
        self.prefetch = prefetch
        self.exclusive = exclusive
        self.priority = priority
        self.held = 0
        """Deliveries sent and not yet acknowledged."""
        self.credit = 0
        """Engine credit given and not yet used."""
        self.waiting_since: int | None = None
        """Since when (engine time) it has had credit unused all along: a message published
        since then went to it at once (None: it has none)."""
        self.cancelled = False
        self._pending: list[Delivery] = []
        self._task = asyncio.ensure_future(self._pump())

    def want(self) -> int:
        if self.cancelled:
            return 0
        if self.no_ack or not self.prefetch:
            return WINDOW - self.credit
        return self.prefetch - self.held - self.credit

    def has_room(self) -> bool:
        channel = self.channel
        if self.cancelled or channel.closing or not channel.flow.is_set():
            return False
        if channel.channel_prefetch and len(channel.unacked) >= channel.channel_prefetch:
            return False
        return self.no_ack or not self.prefetch or self.held < self.prefetch

    def grant(self, n: int) -> None:
        if n > 0 and not self.credit:
            self.waiting_since = self.channel.ctx.engine.now_ms()
        self.credit += n
        self.consumer.add_credit(n)

    def withdraw(self) -> None:
        """Take back the credit not used yet (one of higher priority has room again)."""
        if self.credit:
            self.credit -= self.consumer.take_credit(self.credit)
        if not self.credit:
            self.waiting_since = None

    async def _pump(self) -> None:
        channel = self.channel
        conn = channel.conn
        try:
            while True:
                batch = await self.consumer.next_batch(BATCH)
                waiting = self.waiting_since
                self.credit = max(self.credit - len(batch), 0)
                if not self.credit:
                    self.waiting_since = None
                if outranked(channel.ctx, self):
                    # Credit given while those of higher priority were blocked; one has room
                    # again and would have had these (RabbitMQ): they go back for it.
                    channel.release_later([delivery.receipt for delivery in batch])
                    continue
                self._pending = batch
                if not channel.flow.is_set():  # stopped by the client: it took none at once
                    waiting = None
                    await channel.flow.wait()
                if not conn.writable.is_set():
                    await conn.writable.wait()
                self._send(batch, waiting)
                self._pending = []
                channel.top_up()
                if not self.has_room():  # those of lower priority may take deliveries now
                    top_up_queue(channel.ctx, self.queue.name)
        except (Unavailable, ConnectionError):
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug: the client hears of it, its deliveries go back
            log.error("amqp delivery pump stopped", error=str(exc), exc_info=True)
            channel.close_with(AMQPError(INTERNAL_ERROR, f"deliveries to consumer "
                                                         f"{short(self.tag)} failed: "
                                                         f"{type(exc).__name__}", hard=False))

    def _send(self, batch: list[Delivery], waiting: int | None = None) -> None:
        """Send `batch`; `waiting`: since when the consumer had been waiting for it with
        credit (None: it had not). A message published while it waited went to it at once, as
        RabbitMQ hands a message to a consumer waiting for it: its time to live is not held
        against it (one of 0 ms included), however long storing it took; a redelivery's is."""
        channel = self.channel
        now = channel.ctx.engine.now_ms()
        frames: list[bytes] = []
        acks: list[str] = []
        dead: list[Settlement] = []
        for delivery in batch:
            at_once = waiting is not None and delivery.attempt <= 1 \
                and waiting <= delivery.publish_ms
            if not at_once and expired(delivery, self.queue, now):
                dead.append(Settlement(delivery.receipt, SettleAction.DEAD_LETTER,
                                       reason=EXPIRED))
                continue
            tag = channel.next_tag()
            if self.no_ack:
                acks.append(delivery.receipt)
            else:
                channel.unacked[tag] = Unacked(delivery.receipt, self)
                self.held += 1
            exchange, routing_key = route_of(delivery)
            frames.extend(frames_for(channel, framing.reply(commands.Basic.Deliver,
                consumer_tag=self.tag, delivery_tag=tag, redelivered=delivery.attempt > 1,
                exchange=exchange, routing_key=routing_key), delivery))
        channel.conn.writelines(frames)
        channel.settle_later(acks, dead)

    async def cancel(self) -> None:
        """No more deliveries; what was sent stays the client's to acknowledge."""
        if self.cancelled:
            return
        self.cancelled = True
        await _stop(self._task)
        pending = [d.receipt for d in self._pending]
        self._pending = []
        try:
            await self.consumer.cancel()
        except GatewayError as exc:
            log.warning("amqp consumer cancel failed", error=exc.message)
        self.channel.release_later(pending)

    async def server_cancel(self) -> None:
        """The queue is gone: stop, and tell the client when it asked to be told."""
        channel = self.channel
        channel.consumers.pop(self.tag, None)
        await self.close()
        if channel.conn.cancel_notify and not channel.closing:
            channel.send(framing.reply(commands.Basic.Cancel, consumer_tag=self.tag,
                                       nowait=True))

    async def close(self) -> None:
        """Stop; everything unacknowledged goes back to the queue (its consumer is gone)."""
        self.cancelled = True
        await _stop(self._task)
        self._pending = []
        try:
            await self.consumer.close()
        except GatewayError as exc:
            log.warning("amqp consumer close failed", error=exc.message)


async def _stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
