"""Queue length limits (`x-max-length`, `x-overflow`), as RabbitMQ has them.

Only ready messages count; deliveries not yet acknowledged do not. Past the limit:

* `drop-head` (the default): the oldest ready messages are dead-lettered with reason `maxlen`
  (dropped, without a dead-letter exchange) until the queue holds its limit. A publish through
  this front end trims the queues it stored into before it is confirmed, and so does a declare.
* `reject-publish`: a publish that would go past the limit is not stored in that queue: with
  publisher confirms it is nacked, without them it is dropped.
* `reject-publish-dlx`: as `reject-publish`, and the refused copy is dead-lettered with reason
  `maxlen` through the queue's dead-letter exchange (dropped without one). The copy is stored on
  the queue's dead-letter topic before the publish is answered; one that cannot be stored there
  is logged and dropped (the publisher was told the message was not taken).

The limit is looked at on AMQP publishes and declares: messages that reach the queue's topic
through another front end are counted at the next AMQP publish to it, not trimmed when they come.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator, Iterable, Sequence

import structlog

from adapters.amqp.dialect import (
    FIRST_DEATH_QUEUE,
    FIRST_DEATH_REASON,
    LAST_DEATH_QUEUE,
    LAST_DEATH_REASON,
    MAXLEN,
)
from adapters.amqp.frontend.context import Context, queue_spec
from adapters.amqp.frontend.edge import REJECT_PUBLISH_DLX, REJECTING
from adapters.amqp.frontend.topology import Queue
from adapters.amqp.naming import AMQP_FRONT_END
from gateway.backend.base import OutMessage
from gateway.engine.api import SettleAction, Settlement
from gateway.errors import GatewayError
from gateway.limits import MAX_BATCH, properties_size

log = structlog.get_logger(__name__)

_locks: weakref.WeakValueDictionary[tuple[int, str], asyncio.Lock] = weakref.WeakValueDictionary()
"""One trim or admission at a time per queue (two at once would both count the same excess);
a lock lives while someone holds or waits for it."""


def limited_of(ctx: Context, topics: Iterable[str]) -> list[Queue]:
    """The queues of `topics` that have a length limit."""
    queues = ctx.topology.queues
    return [q for t in topics if (q := queues.get(t)) is not None
            and q.settings.max_length is not None]


async def ready(ctx: Context, queue: Queue) -> int:
    """Messages ready for the queue's group."""
    view = await ctx.queries.admin.describe(queue.name, queue.settings.group)
    return max(view.ready, 0)


def _lock(ctx: Context, name: str) -> asyncio.Lock:
    key = (id(ctx), name)
    lock = _locks.get(key)
    if lock is None:
        lock = _locks[key] = asyncio.Lock()
    return lock


def rejecting(limited: Sequence[Queue]) -> list[Queue]:
    """The `reject-publish` and `reject-publish-dlx` queues of `limited`, by name."""
    return sorted((q for q in limited if q.settings.overflow in REJECTING),
                  key=lambda q: q.name)


@contextlib.asynccontextmanager
async def admitting(ctx: Context, queues: Sequence[Queue]) -> AsyncIterator[None]:
    """Hold the queues (in name order) while their room is counted and the publish stored."""
    async with contextlib.AsyncExitStack() as stack:
        for queue in queues:
            await stack.enter_async_context(_lock(ctx, queue.name))
        yield


async def room(ctx: Context, queue: Queue) -> int:
    """How many more messages a `reject-publish(-dlx)` queue takes now."""
    limit = queue.settings.max_length
    assert limit is not None
    return max(limit - await ready(ctx, queue), 0)


async def trim(ctx: Context, limited: Sequence[Queue]) -> None:
    """Dead-letter the oldest ready messages of each `drop-head` queue of `limited` past its
    limit. A failure is logged, not raised: the messages stay, the next publish trims again."""
    for queue in limited:
        if queue.settings.overflow in REJECTING:
            continue
        try:
            async with _lock(ctx, queue.name):
                await _trim(ctx, queue)
        except GatewayError as exc:
            log.info("amqp queue not trimmed to its x-max-length", queue=queue.name,
                     error=exc.message)


async def _trim(ctx: Context, queue: Queue) -> None:
    limit = queue.settings.max_length
    assert limit is not None
    excess = await ready(ctx, queue) - limit
    spec = queue_spec(queue, queue.declared_by)
    while excess > 0 and ctx.topology.queues.get(queue.name) is queue:
        got = await ctx.engine.receive(spec, min(excess, MAX_BATCH), None, 0,
                                        counted=False)
        if not got:
            return
        await ctx.engine.settle([Settlement(d.receipt, SettleAction.DEAD_LETTER, reason=MAXLEN)
                                 for d in got])
        excess -= len(got)


async def dead_letter_refused(ctx: Context, queue: Queue, refused: Sequence[OutMessage]) -> None:
    """Dead-letter the copies a `reject-publish-dlx` queue refused, with reason `maxlen`, onto
    its dead-letter topic (its dead-letter exchange's router takes them from there), as the
    engine dead-letters one of its messages. Without a dead-letter exchange they are dropped,
    as RabbitMQ drops them. A failure is logged, not raised: the publish was refused anyway."""
    settings = queue.settings
    if not refused or settings.overflow != REJECT_PUBLISH_DLX \
            or settings.dead_letter_exchange is None:
        return
    topic = AMQP_FRONT_END.dead_letter_topic(queue.name, settings.group)
    # What the dead-letter router reads of why and where the message died (the engine's own
    # x-gateway-* properties are not a front end's to write); the first death's are kept when
    # the message has them, as on the engine's dead letters.
    first = {FIRST_DEATH_REASON: MAXLEN, FIRST_DEATH_QUEUE: queue.name}
    last = {LAST_DEATH_REASON: MAXLEN, LAST_DEATH_QUEUE: queue.name}
    copies = [OutMessage(m.body, {**first, **m.properties, **last}, m.key, m.tag)
              for m in refused]
    # The headers written here do not count against the size limit (a message taken at the
    # limit is still dead-lettered, as the engine's own dead letters are).
    grown = [properties_size(c.properties) - properties_size(m.properties)
             for c, m in zip(copies, refused, strict=True)]
    try:
        for i in range(0, len(copies), MAX_BATCH):
            await ctx.engine.publish(topic, copies[i:i + MAX_BATCH],
                                     grown=grown[i:i + MAX_BATCH], owner=None)
    except GatewayError as exc:
        log.warning("amqp refused publishes not dead-lettered", queue=queue.name,
                    count=len(copies), error=exc.message)
