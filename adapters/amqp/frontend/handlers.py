"""The channel methods that run on a channel's worker, in order: exchanges, queues, consumers,
`basic.get`, `basic.recover`, `basic.qos` and `confirm.select`. Each returns its reply (None
when it sent its own)."""

from __future__ import annotations

import secrets
from typing import Any

from pamqp import commands

from adapters.amqp.dialect import EXPIRED
from adapters.amqp.frontend import access, edge, framing, queues, replyto
from adapters.amqp.frontend.consumers import ConsumerSession, expired, frames_for, route_of
from adapters.amqp.frontend.context import queue_spec
from adapters.amqp.frontend.errors import (
    ACCESS_REFUSED,
    NOT_ALLOWED,
    NOT_IMPLEMENTED,
    PRECONDITION_FAILED,
    RESOURCE_ERROR,
    AMQPError,
    from_gateway,
    short,
)
from adapters.amqp.frontend.state import ChannelState, Unacked, principal_of, top_up_queue
from adapters.amqp.frontend.topology import Binding
from gateway.engine.api import SettleAction, Settlement
from gateway.errors import GatewayError

QOS, CONSUME, CANCEL, GET, RECOVER = (60, 10), (60, 20), (60, 30), (60, 70), (60, 110)
EXCHANGE_DECLARE, EXCHANGE_DELETE, EXCHANGE_BIND, EXCHANGE_UNBIND = (
    (40, 10), (40, 20), (40, 30), (40, 40))
MAX_EXPIRED_SKIPS = 100
"""Expired messages a `basic.get` passes over before it answers get-empty."""


async def handle(channel: ChannelState, method: Any) -> Any:
    match method:
        case commands.Queue.Declare():
            return await queues.declare(channel, method)
        case commands.Queue.Bind():
            await queues.bind(channel, method, queues.BIND)
            return commands.Queue.BindOk()
        case commands.Queue.Unbind():
            await queues.bind(channel, method, queues.UNBIND)
            return commands.Queue.UnbindOk()
        case commands.Queue.Purge():
            return await queues.purge(channel, method)
        case commands.Queue.Delete():
            return await queues.delete(channel, method)
        case commands.Exchange.Declare():
            return await declare_exchange(channel, method)
        case commands.Exchange.Delete():
            return await delete_exchange(channel, method)
        case commands.Exchange.Bind() | commands.Exchange.Unbind():
            return await bind_exchange(channel, method)
        case commands.Basic.Qos():
            return qos(channel, method)
        case commands.Basic.Consume():
            await consume(channel, method)
            return None
        case commands.Basic.Cancel():
            return await cancel(channel, method)
        case commands.Basic.Get():
            await get(channel, method)
            return None
        case commands.Basic.Recover():
            return recover(channel, method)
        case commands.Confirm.Select():
            if channel.tx is not None:
                raise AMQPError(PRECONDITION_FAILED, "cannot switch from tx to confirm mode")
            channel.confirming = True
            return commands.Confirm.SelectOk()
    raise AMQPError(NOT_IMPLEMENTED, f"{method.name}", hard=True)


# ---------------------------------------------------------------------- exchanges
async def declare_exchange(channel: ChannelState, m: commands.Exchange.Declare) -> Any:
    ctx = channel.ctx
    if not m.passive:
        access.exchange(channel, m.exchange, EXCHANGE_DECLARE)
    try:
        change = ctx.topology.declare_exchange(
            m.exchange, m.exchange_type, passive=m.passive, durable=m.durable,
            auto_delete=m.auto_delete, internal=m.internal, arguments=m.arguments or {},
            connection=channel.conn.id, principal=principal_of(channel))
    except AMQPError as exc:
        raise exc.at(EXCHANGE_DECLARE) from None
    try:
        await ctx.record(change)
    except OSError as exc:
        ctx.topology.drop_exchange(m.exchange)
        raise AMQPError(RESOURCE_ERROR, f"cannot keep exchange {short(m.exchange)}: "
                                        f"{exc.strerror}", EXCHANGE_DECLARE, hard=False) from None
    return commands.Exchange.DeclareOk()


async def delete_exchange(channel: ChannelState, m: commands.Exchange.Delete) -> Any:
    access.exchange(channel, m.exchange, EXCHANGE_DELETE)
    try:
        changes = channel.ctx.topology.delete_exchange(m.exchange, if_unused=m.if_unused)
    except AMQPError as exc:
        raise exc.at(EXCHANGE_DELETE) from None
    await channel.ctx.record(changes)
    return commands.Exchange.DeleteOk()


async def bind_exchange(channel: ChannelState, m: commands.Exchange.Bind | commands.Exchange.Unbind
                        ) -> Any:
    ids = EXCHANGE_BIND if isinstance(m, commands.Exchange.Bind) else EXCHANGE_UNBIND
    for name in (m.source, m.destination):
        edge.check_name("exchange", name, allow_empty=True)
        access.exchange(channel, name, ids)
    topology = channel.ctx.topology
    binding = Binding(m.source, m.destination, False, m.routing_key, dict(m.arguments or {}))
    try:
        if isinstance(m, commands.Exchange.Bind):
            await channel.ctx.record(topology.bind(binding, channel.conn.id,
                                                  principal_of(channel)))
            return commands.Exchange.BindOk()
        await channel.ctx.record(topology.unbind(binding))
    except AMQPError as exc:
        raise exc.at(ids) from None
    return commands.Exchange.UnbindOk()


# ---------------------------------------------------------------------- consumers
def qos(channel: ChannelState, m: commands.Basic.Qos) -> Any:
    if m.prefetch_size:
        raise AMQPError(NOT_IMPLEMENTED, f"prefetch_size!=0 ({m.prefetch_size})", QOS, hard=True)
    if m.global_:
        channel.channel_prefetch = m.prefetch_count
    else:
        # For the consumers started after it, each on its own (RabbitMQ's reading of
        # global=false); the consumers already started keep theirs. As RabbitMQ does, it also
        # lifts a channel-wide limit set before (its `unlimit_prefetch`).
        channel.prefetch = m.prefetch_count
        channel.channel_prefetch = 0
    channel.top_up()
    return commands.Basic.QosOk()


def owner(channel: ChannelState) -> str:
    """The principal the channel's connection logged in as ("" without authentication)."""
    return str(getattr(channel.conn.principal, "name", ""))


async def consume(channel: ChannelState, m: commands.Basic.Consume) -> None:
    ctx = channel.ctx
    if m.queue == replyto.PSEUDO_QUEUE:
        replyto.consume(channel, m)
        return
    queue = await queues.find(channel, m.queue, CONSUME)
    access.consume(channel, queue, CONSUME)
    ctx.used(queue.name)
    tag = m.consumer_tag or "amq.ctag-" + secrets.token_urlsafe(16)
    edge.check_name("consumer_tag", tag)
    if tag in channel.consumers or replyto.tag_in_use(channel, tag):
        raise AMQPError(NOT_ALLOWED, f"attempt to reuse consumer tag {short(tag)}", CONSUME,
                        hard=True)
    if len(channel.consumers) >= ctx.limits.max_consumers_per_channel:
        raise AMQPError(RESOURCE_ERROR, f"at most {ctx.limits.max_consumers_per_channel} "
                                        "consumers per channel", CONSUME, hard=False)
    if channel.conn.consumer_count() >= ctx.limits.max_consumers_per_connection:
        raise AMQPError(RESOURCE_ERROR, f"at most {ctx.limits.max_consumers_per_connection} "
                                        "consumers per connection", CONSUME, hard=False)
    priority = edge.consumer_priority(queue.name, m.arguments or {},
                                      edge.queue_type(queue.arguments))
    ctx.prioritised = ctx.prioritised or priority != 0
    others = ctx.consumers.get(queue.name, set())
    if (m.exclusive and others) or any(s.exclusive for s in others):
        raise AMQPError(ACCESS_REFUSED, f"queue {short(queue.name)} in vhost '/' in exclusive "
                                        "use", CONSUME)
    try:
        consumer = await ctx.engine.open_consumer(queue_spec(queue, owner(channel)), 0)
    except GatewayError as exc:
        raise from_gateway(exc, CONSUME) from None
    session = ConsumerSession(channel, tag, queue, consumer, no_ack=m.no_ack,
                              prefetch=channel.prefetch, exclusive=m.exclusive,
                              priority=priority)
    channel.consumers[tag] = session
    ctx.consumers.setdefault(queue.name, set()).add(session)
    queue.had_consumers = True
    if not m.nowait:
        channel.send(framing.reply(commands.Basic.ConsumeOk, consumer_tag=tag))
    channel.top_up()
    top_up_queue(ctx, queue.name)  # those of lower priority give way to it


async def cancel(channel: ChannelState, m: commands.Basic.Cancel) -> Any:
    if replyto.cancel(channel, m.consumer_tag or ""):
        return framing.reply(commands.Basic.CancelOk, consumer_tag=m.consumer_tag)
    session = channel.consumers.pop(m.consumer_tag or "", None)
    if session is not None:
        ctx = channel.ctx
        ctx.consumers.get(session.queue.name, set()).discard(session)
        top_up_queue(ctx, session.queue.name)
        await session.cancel()
        if session.held:
            channel.retired.append(session)
        else:
            await session.close()
        await queues.consumer_gone(ctx, session.queue)
    return framing.reply(commands.Basic.CancelOk, consumer_tag=m.consumer_tag)


async def get(channel: ChannelState, m: commands.Basic.Get) -> None:
    ctx = channel.ctx
    queue = await queues.find(channel, m.queue, GET)
    access.consume(channel, queue, GET)
    ctx.used(queue.name)
    spec = queue_spec(queue, owner(channel))
    for _ in range(MAX_EXPIRED_SKIPS):
        try:
            got = await ctx.engine.receive(spec, 1, None, 0)
        except GatewayError as exc:
            raise from_gateway(exc, GET) from None
        if not got:
            break
        delivery = got[0]
        if expired(delivery, queue, ctx.engine.now_ms()):
            channel.settle_later([], [Settlement(delivery.receipt, SettleAction.DEAD_LETTER,
                                                 reason=EXPIRED)])
            continue
        tag = channel.next_tag()
        if m.no_ack:
            channel.settle_later([delivery.receipt], [])
        else:
            channel.unacked[tag] = Unacked(delivery.receipt, None)
        exchange, routing_key = route_of(delivery)
        count = await queues.ready_count(ctx, queue)
        channel.conn.writelines(frames_for(channel, framing.reply(commands.Basic.GetOk,
            delivery_tag=tag, redelivered=delivery.attempt > 1, exchange=exchange,
            routing_key=routing_key, message_count=count), delivery))
        return
    channel.send(commands.Basic.GetEmpty())


def recover(channel: ChannelState, m: commands.Basic.Recover) -> Any:
    """Every unacknowledged delivery of the channel fails, as `nack` with requeue would (not one
    a settlement held by the channel's transaction covers: as on RabbitMQ, the commit has it)."""
    if not m.requeue:
        raise AMQPError(NOT_IMPLEMENTED, "requeue=false", RECOVER, hard=True)
    failed = []
    held = channel.tx.settled if channel.tx is not None else set()  # the commit settles these
    for tag in [t for t in channel.unacked if t not in held]:
        unacked = channel.unacked.pop(tag)
        if unacked.session is not None:
            unacked.session.held -= 1
        if unacked.receipt:
            failed.append(Settlement(unacked.receipt, SettleAction.FAIL))
    channel.settle_later([], failed)
    channel.top_up()
    return commands.Basic.RecoverOk()
