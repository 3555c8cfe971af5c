"""queue.declare, bind, unbind, purge and delete; and removing queues when their owner or last
consumer goes (exclusive, auto-delete)."""

from __future__ import annotations

import asyncio

import structlog
from pamqp import commands

from adapters.amqp.frontend import access, edge, framing, maxlength, replyto
from adapters.amqp.frontend.context import Context
from adapters.amqp.frontend.errors import (
    NOT_FOUND,
    PRECONDITION_FAILED,
    RESOURCE_ERROR,
    AMQPError,
    from_gateway,
    short,
)
from adapters.amqp.frontend.state import ChannelState, principal_of
from adapters.amqp.frontend.topology import Binding, Change, Queue, transient
from gateway.errors import GatewayError, NotFound

log = structlog.get_logger(__name__)

DECLARE, BIND, PURGE, DELETE, UNBIND = (50, 10), (50, 20), (50, 30), (50, 40), (50, 50)


async def find(channel: ChannelState, name: str, method: tuple[int, int]) -> Queue:
    """The queue a method names ("" is the channel's last declared queue): a declared queue, or
    a gateway topic no AMQP client declared (consumed by the group of its name)."""
    name = name or channel.last_queue
    if not name:
        raise AMQPError(NOT_FOUND, "no queue named and none declared on this channel", method)
    edge.check_name("queue", name)
    ctx = channel.ctx
    await ctx.settled(name)  # a declaration under way: its queue is kept or undone
    queue = ctx.topology.queues.get(name)
    if queue is None:
        if not await ctx.is_topic(name):
            raise AMQPError(NOT_FOUND, f"no queue {short(name)} in vhost '/'", method)
        return ctx.implicit_queue(name)
    ctx.topology.check_owner(queue, channel.conn.id)
    return queue


async def ready_count(ctx: Context, queue: Queue) -> int:
    """Messages ready for the queue's group (0 when the back end cannot tell now)."""
    try:
        view = await ctx.queries.admin.describe(queue.name, queue.settings.group)
    except GatewayError:
        return 0
    return max(view.ready, 0)


async def declare(channel: ChannelState, m: commands.Queue.Declare) -> commands.Queue.DeclareOk:
    ctx = channel.ctx
    conn = channel.conn
    if m.passive and m.queue == replyto.PSEUDO_QUEUE:  # RabbitMQ's answer: it is there
        return commands.Queue.DeclareOk(queue=m.queue, message_count=0, consumer_count=0)
    if m.passive:
        queue = await find(channel, m.queue, DECLARE)
        access.consume(channel, queue, DECLARE)
    else:
        name = m.queue
        if not name:
            name = ctx.topology.server_name()
        else:
            edge.check_name("queue", name)
            await ctx.settled(name)  # not told DeclareOk for a queue the back end may refuse
            edge.check_declarable("queue", name)  # also its owner's: only `passive` (RabbitMQ)
        settings = edge.queue_settings(name, m.arguments or {})
        if name not in ctx.topology.queues:
            edge.check_quorum(name, m.arguments or {}, server_named=not m.queue,
                              durable=m.durable, exclusive=m.exclusive,
                              auto_delete=m.auto_delete)
        access.consume(channel, Queue(name, m.durable, m.auto_delete, {}, settings), DECLARE)
        known = name in ctx.topology.queues
        queue, change = ctx.topology.declare_queue(
            name, connection=conn.id, durable=m.durable, exclusive=m.exclusive,
            auto_delete=m.auto_delete, arguments=m.arguments or {},
            principal=principal_of(channel))
        if not known:
            if change is None:
                change = transient(queue)  # its group is dropped at the next start
            pending = ctx.declaring[name] = asyncio.get_running_loop().create_future()
            try:
                await keep(ctx, queue, change)
            finally:
                del ctx.declaring[name]
                pending.set_result(None)
        if ctx.router is not None:
            ctx.router.ensure(queue)
    channel.last_queue = queue.name
    ctx.used(queue.name)
    await maxlength.trim(ctx, maxlength.limited_of(ctx, [queue.name]))  # a backlog past it
    return framing.reply(commands.Queue.DeclareOk, queue=queue.name,
                                    message_count=await ready_count(ctx, queue),
                                    consumer_count=ctx.consumer_count(queue.name))


async def keep(ctx: Context, queue: Queue, change: Change) -> None:
    """Keep a new queue: its record, then its group (`keep_group`); undone if either fails,
    or if the declaration is cancelled on the way (its connection gone)."""
    try:
        await ctx.record(change)
    except OSError as exc:
        ctx.topology.drop_queue(queue.name)
        raise AMQPError(RESOURCE_ERROR, f"cannot keep queue {short(queue.name)}: "
                                        f"{exc.strerror}", DECLARE, hard=False) from None
    except BaseException:
        await undo(ctx, queue)
        raise
    try:
        await keep_group(ctx, queue)
    except asyncio.CancelledError:
        await undo(ctx, queue)
        raise


async def undo(ctx: Context, queue: Queue) -> None:
    """Forget a new queue whose declaration failed after its record was kept."""
    if ctx.topology.queues.get(queue.name) is queue:
        ctx.topology.drop_queue(queue.name)
    try:
        await ctx.record({"op": "forget", "name": queue.name})
    except OSError as err:
        log.error("amqp queue declare not undone", queue=queue.name, error=err.strerror)


async def keep_group(ctx: Context, queue: Queue) -> None:
    """Make a new queue's group in the back end now, where it starts when a consumer comes
    (the earliest message kept): until then the topic's messages are kept for it, though
    other groups settle them. No engine subscription is made: the queue takes no room under
    `--max-groups` until it is consumed. Refused by the back end, the declaration is undone."""
    try:
        await ctx.engine.create_group(queue.name, queue.settings.group,
                                      owner=queue.declared_by)
    except NotFound:
        return  # the topic does not exist and is not created on demand: nothing to keep
    except GatewayError as exc:
        await undo(ctx, queue)
        raise from_gateway(exc, DECLARE) from None


async def drop_group(ctx: Context, topic: str, group: str) -> None:
    """Drop a queue's group. Where the back end places groups, it is made again at the
    topic's end (dropped, a group starts at its first message): a queue declared again by the
    name starts empty."""
    try:
        if await ctx.engine.drop_group(topic, group):
            await ctx.engine.create_group(topic, group, at_end=True, owner=None)
    except GatewayError as exc:
        log.warning("amqp queue group not dropped", queue=topic, error=exc.message)


async def restore(ctx: Context) -> None:
    """At start, after the journal is loaded: the durable queues' groups exist (made again if
    lost, at the earliest message kept), and the non-durable queues of the last run are
    deleted (their groups dropped)."""
    for queue in list(ctx.topology.queues.values()):
        try:
            await ctx.engine.create_group(queue.name, queue.settings.group, owner=None)
        except NotFound:
            continue
        except GatewayError as exc:
            log.warning("amqp queue group not made", queue=queue.name, error=exc.message)
    for name, group in list(ctx.topology.stale.items()):
        # Gone with the last run, as if deleted: no queue to AMQP clients (a passive declare
        # finds none), though its group made its topic.
        await drop_group(ctx, name, group)
        gone = {"op": "unqueue", "name": name}
        ctx.topology.apply(gone)
        try:
            await ctx.record(gone)
        except OSError as exc:
            log.warning("amqp stale queue group not recorded", queue=name, error=exc.strerror)


async def bind(channel: ChannelState, m: commands.Queue.Bind | commands.Queue.Unbind,
               method: tuple[int, int]) -> None:
    ctx = channel.ctx
    queue = await find(channel, m.queue, method)
    if queue.name not in ctx.topology.queues:
        raise AMQPError(NOT_FOUND, f"no queue {short(queue.name)} in vhost '/' (a topic no "
                                   "AMQP client declared: declare it to bind it)", method)
    edge.check_name("exchange", m.exchange, allow_empty=True)
    access.consume(channel, queue, method)
    access.read_exchange(channel, m.exchange, queue, method)
    binding = Binding(m.exchange, queue.name, True, m.routing_key, dict(m.arguments or {}))
    try:
        if isinstance(m, commands.Queue.Bind):
            await ctx.record(ctx.topology.bind(binding, channel.conn.id,
                                               principal_of(channel)))
        else:
            await ctx.record(ctx.topology.unbind(binding))
    except AMQPError as exc:
        raise exc.at(method) from None
    except OSError as exc:
        raise AMQPError(RESOURCE_ERROR, f"cannot keep the binding: {exc.strerror}", method,
                        hard=False) from None


async def purge(channel: ChannelState, m: commands.Queue.Purge) -> commands.Queue.PurgeOk:
    queue = await find(channel, m.queue, PURGE)
    access.consume(channel, queue, PURGE)
    count = await channel.ctx.queries.admin.purge(queue.name, queue.settings.group)
    return commands.Queue.PurgeOk(message_count=count)


async def delete(channel: ChannelState, m: commands.Queue.Delete) -> commands.Queue.DeleteOk:
    ctx = channel.ctx
    name = m.queue or channel.last_queue
    edge.check_name("queue", name)
    await ctx.settled(name)
    queue = ctx.topology.queues.get(name)
    if queue is None:
        return commands.Queue.DeleteOk(message_count=0)  # as RabbitMQ: nothing to delete
    ctx.topology.check_owner(queue, channel.conn.id)
    access.consume(channel, queue, DELETE)
    if m.if_unused and ctx.consumer_count(name):
        raise AMQPError(PRECONDITION_FAILED, f"queue {short(name)} in vhost '/' in use", DELETE)
    if m.if_empty and await ready_count(ctx, queue):
        raise AMQPError(PRECONDITION_FAILED, f"queue {short(name)} in vhost '/' not empty",
                        DELETE)
    count = await remove(ctx, queue)
    return commands.Queue.DeleteOk(message_count=count)


async def remove(ctx: Context, queue: Queue) -> int:
    """Delete a queue: its consumers are cancelled (with notice to clients that asked for it),
    its messages purged (those delivered and unacknowledged too), its engine group dropped,
    its bindings and record removed. The messages purged that were not delivered (RabbitMQ's
    delete-ok count: cancelling a consumer gives back what it held unacknowledged, which is
    then purged but not counted)."""
    held = 0
    for session in list(ctx.consumers.pop(queue.name, set())):
        held += session.held
        await session.server_cancel()
    changes = ctx.topology.delete_queue(queue.name)
    if ctx.router is not None:
        ctx.router.forget(queue.name)
    try:
        count = await ctx.queries.admin.purge(queue.name, queue.settings.group)
        await ctx.queries.admin.purge(queue.name, queue.settings.group, in_flight=True)
    except GatewayError as exc:
        log.warning("amqp queue delete: purge failed", queue=queue.name, error=exc.message)
        count = 0
    # The queue's engine group goes too: deleted queues (exclusive and auto-delete ones every
    # RPC client makes) would otherwise fill `--max-groups` with dead groups.
    await drop_group(ctx, queue.name, queue.settings.group)
    try:
        await ctx.record(changes)
    except OSError as exc:
        log.error("amqp queue delete not kept", queue=queue.name, error=exc.strerror)
    return max(count - held, 0)


async def drop_exclusive(ctx: Context, connection: int) -> None:
    """A closed connection's exclusive queues go with it."""
    for queue in [q for q in ctx.topology.queues.values() if q.owner == connection]:
        await remove(ctx, queue)


async def consumer_gone(ctx: Context, queue: Queue) -> None:
    """An auto-delete queue goes when its last consumer does (an `x-expires` one starts its
    unused time then)."""
    ctx.used(queue.name)
    if queue.auto_delete and queue.had_consumers and not ctx.consumer_count(queue.name) and (
        ctx.topology.queues.get(queue.name) is queue
    ):
        await remove(ctx, queue)
