"""Publishing: route each message of a run of publishes, check it, store the run as one batch
per topic, then answer (returns for unroutable mandatory messages, then publisher confirms).

A message is stored in every queue's topic its exchange routes it to. Through the default
exchange that is the topic its routing key names, when that is a declared queue or a topic the
gateway holds; a message that reaches no queue is dropped, or returned (`basic.return`, 312
NO_ROUTE) when published `mandatory`. Through a delayed-message exchange its `x-delay` header
makes it wait (`delayed`). A confirm (`basic.ack`) means the message is durable in
every topic it was routed to; `basic.nack` means it may not be (the back end failed).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from pamqp import commands

from adapters.amqp.frontend import delayed, edge, framing, maxlength, messages, replyto
from adapters.amqp.frontend.consumers import expires_at
from adapters.amqp.frontend.errors import (
    ACCESS_REFUSED,
    NO_ROUTE,
    RESOURCE_ERROR,
    AMQPError,
    from_gateway,
    short,
)
from adapters.amqp.frontend.routeturns import route
from adapters.amqp.frontend.routing import ROUTE_TURN
from adapters.amqp.frontend.state import ChannelState, principal_of
from adapters.amqp.frontend.topology import Queue
from gateway.backend.base import OutMessage
from gateway.errors import GatewayError
from gateway.limits import (
    MAX_BATCH,
    MAX_NAME_BYTES,
    MAX_PUBLISH_PROPERTIES,
    check_message,
    too_long,
)

PUBLISH = (60, 40)


@dataclass(slots=True)
class Publish:
    method: commands.Basic.Publish
    properties: commands.Basic.Properties
    body: bytes
    cost: int = 0
    """What it counts against the connection's pending publish bytes: body and headers."""
    header_bytes: int = 0
    """Its content header's size on the wire."""
    route: tuple[list[str], OutMessage] | None = None
    """In a transaction: its queues and message, routed and checked when it came (`held`)."""


BATCH_HEADERS = MAX_PUBLISH_PROPERTIES // 10
BATCH_HEADER_BYTES = 1 << 20
"""Headers, and bytes of content headers, of the publishes stored as one batch, past the first
message."""


def header_values(properties: commands.Basic.Properties) -> int:
    """The values of a message's headers at every depth (an array of a thousand is a thousand);
    its headers when they were not decoded by `table`."""
    headers = properties.headers
    if not headers:
        return 0
    return int(getattr(headers, "entries", len(headers)))


def next_batch(work: deque[Any]) -> list[Publish]:
    """The publishes at the head of `work` to store as one batch: at most MAX_BATCH messages
    and, past the first, at most BATCH_HEADERS header values (at every depth) and
    BATCH_HEADER_BYTES of content headers in all, so that a flood of
    header-heavy messages does not hold the event loop (and every other client) for seconds in
    one turn."""
    batch: list[Publish] = []
    headers = size = 0
    while work and isinstance(work[0], Publish) and len(batch) < MAX_BATCH:
        headers += header_values(work[0].properties)
        size += work[0].header_bytes
        if batch and (headers > BATCH_HEADERS or size > BATCH_HEADER_BYTES):
            break
        batch.append(work.popleft())
    return batch


@dataclass(slots=True)
class _Routed:
    item: Publish
    seq: int
    topics: list[str]
    rejected: bool = False
    """A queue it was routed to was full (`x-overflow` reject-publish): not stored there."""


async def publish_batch(channel: ChannelState, batch: list[Publish]) -> None:
    size = sum(item.cost for item in batch)
    try:
        await _publish(channel, batch)
    finally:
        channel.conn.published(size)


async def _publish(channel: ChannelState, batch: list[Publish]) -> None:
    routed: list[_Routed] = []
    by_topic: dict[str, list[OutMessage]] = {}
    error: AMQPError | None = None
    async for item in _in_turns(channel, batch):
        seq = 0
        if channel.confirming:
            channel.publish_seq += 1
            seq = channel.publish_seq
        try:
            if item.route is None:
                topics, message = await _route(channel, item)
            else:  # routed when it came (a transaction's): the queues deleted since are left out
                topics = [t for t in item.route[0] if await _exists(channel, t)]
                message = item.route[1]
        except AMQPError as exc:
            error = exc.at(PUBLISH)
            break
        except GatewayError as exc:
            error = from_gateway(exc, PUBLISH)
            break
        routed.append(_Routed(item, seq, topics))
        for topic in topics:
            by_topic.setdefault(topic, []).append(message)
    limited = maxlength.limited_of(channel.ctx, by_topic)
    if not limited:  # (the common case: no queue with a length limit)
        failed = await _store(channel, by_topic)
    else:
        full = maxlength.rejecting(limited)
        refused: dict[str, list[OutMessage]] = {}
        async with maxlength.admitting(channel.ctx, full):
            failed = await _admit(channel, full, by_topic, routed, refused)
            failed.update(await _store(channel, {t: m for t, m in by_topic.items() if m
                                                 and t not in failed}))
        for queue in full:
            await maxlength.dead_letter_refused(channel.ctx, queue, refused.get(queue.name, ()))
        await maxlength.trim(channel.ctx, [q for q in limited if q.name not in failed])
    _expiring(channel, by_topic, failed)
    if failed:
        channel.unstored = next(iter(failed.values()))
    _answer(channel, routed, failed)
    if failed and not channel.confirming:
        reason = next(iter(failed.values()))
        raise AMQPError(RESOURCE_ERROR, f"messages could not be stored: {reason}", PUBLISH,
                        hard=False)
    if error is not None:
        raise error


async def _in_turns(channel: ChannelState, batch: list[Publish]) -> AsyncIterator[Publish]:
    """The batch's publishes, the loop served between them once routing has tested more than
    ROUTE_TURN bindings (a stall for every other client otherwise)."""
    topology = channel.ctx.topology
    tested = topology.bindings_tested
    for item in batch:
        if topology.bindings_tested - tested > ROUTE_TURN:
            await asyncio.sleep(0)
            tested = topology.bindings_tested
        yield item


async def _route(channel: ChannelState, item: Publish) -> tuple[list[str], OutMessage]:
    ctx = channel.ctx
    method = item.method
    name = edge.check_name("exchange", method.exchange, allow_empty=True)
    exchange = ctx.topology.exchange(name)
    if exchange.internal:
        raise AMQPError(ACCESS_REFUSED, f"cannot publish to internal exchange {short(name)}")
    headers = item.properties.headers or {}
    routing_key = method.routing_key
    replyto.request(channel, item.properties)
    reply = replyto.is_reply(name, routing_key)
    topics: list[str] = []
    targets = set() if reply else await route(ctx.topology, exchange, routing_key, headers)
    for queue in sorted(targets):
        if await _exists(channel, queue):
            topics.append(queue)
    edge.check_user_id(item.properties.user_id, channel.conn.user)
    message = messages.out_message(item.properties, item.body, name, routing_key)
    now_ms = ctx.engine.now_ms()
    if exchange.kind == delayed.DELAYED and (wait_ms := delayed.delay_ms(headers)):
        message = dataclasses.replace(message, deliver_at_ms=now_ms + wait_ms)
    check_message(message, 0, now_ms, ctx.limits.max_message_bytes)
    authorizer = ctx.authorizer
    if authorizer is not None:
        for topic in topics:
            authorizer.check_publish(channel.conn.principal, topic)
    if reply:
        replyto.deliver(channel, routing_key, item.properties, item.body)
    return topics, message


async def _exists(channel: ChannelState, queue: str) -> bool:
    """Whether a message routed to `queue` has a topic to go to."""
    ctx = channel.ctx
    return queue in ctx.topology.queues or (
        queue.isprintable() and not too_long(queue, MAX_NAME_BYTES)
        and await ctx.is_topic(queue)
    )


async def held(channel: ChannelState, batch: list[Publish]) -> None:
    """Route and check a transaction's publishes when they come, as RabbitMQ does: a bad one
    (no such exchange, an internal one, another user's id, no permission, too large) raises now,
    which closes the channel and drops the whole transaction; the commit stores the rest as
    routed here."""
    async for item in _in_turns(channel, batch):
        try:
            item.route = await _route(channel, item)
        except AMQPError as exc:
            raise exc.at(PUBLISH) from None
        except GatewayError as exc:
            raise from_gateway(exc, PUBLISH) from None


async def _admit(channel: ChannelState, full: list[Queue], by_topic: dict[str, list[OutMessage]],
                 routed: list[_Routed], refused: dict[str, list[OutMessage]]) -> dict[str, str]:
    """Cut each `reject-publish(-dlx)` queue's messages to the room it has; those left out are
    marked rejected, and kept in `refused` by queue. The queues whose room could not be
    counted, with why (as if failed)."""
    failed: dict[str, str] = {}
    for queue in full:
        try:
            room = await maxlength.room(channel.ctx, queue)
        except GatewayError as exc:
            failed[queue.name] = exc.message
            continue
        kept = by_topic[queue.name]
        if room >= len(kept):
            continue
        by_topic[queue.name] = kept[:room]
        refused[queue.name] = kept[room:]
        owners = [r for r in routed if queue.name in r.topics]
        for r in owners[room:]:
            r.rejected = True
    return failed


async def _store(channel: ChannelState, by_topic: dict[str, list[OutMessage]]) -> dict[str, str]:
    """Publish every topic's messages (in batches of at most MAX_BATCH); the topics that
    failed, with why."""
    engine = channel.ctx.engine
    calls = [(topic, msgs[i:i + MAX_BATCH]) for topic, msgs in by_topic.items()
             for i in range(0, len(msgs), MAX_BATCH)]
    if not calls:
        return {}
    owner = principal_of(channel)  # whose share a new topic takes
    results = await asyncio.gather(*(engine.publish(topic, msgs, owner=owner)
                                     for topic, msgs in calls), return_exceptions=True)
    failed: dict[str, str] = {}
    for (topic, _), result in zip(calls, results, strict=True):
        if isinstance(result, GatewayError):
            failed[topic] = result.message
        elif isinstance(result, BaseException):
            failed[topic] = type(result).__name__
    return failed


def _expiring(channel: ChannelState, by_topic: dict[str, list[OutMessage]],
              failed: dict[str, str]) -> None:
    """Tell the expiry sweeper (when it runs) when stored messages with a time to live may
    expire."""
    ctx = channel.ctx
    if ctx.sweeper is None:
        return
    now = ctx.engine.now_ms()
    for topic, stored in by_topic.items():
        if topic in failed:
            continue
        queue = ctx.topology.queues.get(topic)
        times = [at for m in stored if (at := expires_at(m.properties, now, queue)) is not None]
        if times:
            ctx.sweeper.touch(topic, min(times))


def _answer(channel: ChannelState, routed: list[_Routed], failed: dict[str, str]) -> None:
    conn = channel.conn
    frames: list[bytes] = []
    for r in routed:
        if not r.topics and r.item.method.mandatory:
            frames.append(framing.method_frame(channel.number, framing.reply(commands.Basic.Return,
                reply_code=NO_ROUTE, reply_text="NO_ROUTE", exchange=r.item.method.exchange,
                routing_key=r.item.method.routing_key)))
            frames.extend(framing.content_frames(channel.number, r.item.properties, r.item.body,
                                                 conn.frame_max))
    if channel.confirming:
        acked_upto = 0
        for r in routed:
            if r.rejected or (failed and any(t in failed for t in r.topics)):
                if acked_upto:
                    frames.append(_ack(channel.number, acked_upto))
                    acked_upto = 0
                frames.append(framing.method_frame(channel.number, commands.Basic.Nack(
                    delivery_tag=r.seq, multiple=False, requeue=False)))
            else:
                acked_upto = r.seq
        if acked_upto:
            frames.append(_ack(channel.number, acked_upto))
    if frames:
        conn.writelines(frames)


def _ack(channel: int, tag: int) -> bytes:
    return framing.method_frame(channel, commands.Basic.Ack(delivery_tag=tag, multiple=True))
