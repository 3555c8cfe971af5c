"""The RabbitMQ back end's admin verbs: stats, peek, remove and purge.

They combine what the back end holds (buffered and leased deliveries, `Consumer`) with what the
broker holds, read through short-lived channels of their own (`admin`). None is on the hot path.
"""

from __future__ import annotations

from collections.abc import Sequence

from aio_pika.abc import AbstractRobustConnection

from adapters.amqp import admin
from adapters.amqp.backend_consume import Consumer, Held
from adapters.amqp.backend_link import guard
from adapters.amqp.backend_send import Publisher
from adapters.amqp.codec import decode
from adapters.amqp.counters import reconcile_attempt, stated_retries
from adapters.amqp.queues import queue_name
from gateway.backend.base import Lease, StoredMessage, TopicStats
from gateway.engine.clock import Clock

PEEK_TOKEN = "peek:"
"""Lease tokens of messages `peek` read from the queue (not held): the message id follows."""


async def stats(
    connection: AbstractRobustConnection,
    consumer: Consumer,
    publisher: Publisher,
    clock: Clock,
    topic: str,
) -> TopicStats:
    """Counts from passive declares plus what the back end holds.

    ready = the queue's ready count plus deliveries buffered here; delayed = messages in the
    delay queues the back end declared for `topic` since it opened; next visible = the earliest
    deliver-at among the heads of those delay queues (a head read there changes nothing: a
    requeued message keeps its expiry, and dead-lettering starts a fresh delivery count). The
    oldest ready time is known only for deliveries buffered here: reading the head of the topic
    queue would count as a delivery of that message.
    """
    state = consumer.topics.get(topic)
    next_visible: int | None = None
    async with guard("stats"):
        ready = await admin.ready_count(connection, queue_name(topic)) or 0
        delayed = 0
        for name in publisher.delay_queues(topic):
            waiting = await admin.ready_count(connection, name) or 0
            delayed += waiting
            if waiting:
                due = await _head_due_ms(connection, publisher, clock, name)
                if due is not None and (next_visible is None or due < next_visible):
                    next_visible = due
    buffered = [h for h in state.buffer if h.alive()] if state else []
    leased = sum(1 for h, _ in state.leased.values() if h.alive()) if state else 0
    oldest = min((h.envelope.publish_ms for h in buffered), default=None)
    return TopicStats(
        ready=ready + len(buffered),
        delayed=delayed,
        leased=leased,
        oldest_ready_ms=oldest,
        next_visible_ms=next_visible,
    )


async def _head_due_ms(
    connection: AbstractRobustConnection, publisher: Publisher, clock: Clock, queue: str
) -> int | None:
    """Deliver-at time of the head of a delay queue (its earliest message), if any."""
    head = await admin.scan(connection, queue, 1)
    if not head:
        return None
    message = head[0]
    env = decode(message.headers, message.message_id, message.timestamp, clock.now_ms())
    if env.deliver_at_ms:
        return env.deliver_at_ms
    entry = publisher.delay_declared.get(queue)
    return env.publish_ms + entry[0].delay_ms if entry else None


async def peek(
    connection: AbstractRobustConnection,
    consumer: Consumer,
    clock: Clock,
    topic: str,
    group: str,
    limit: int,
    after_position: int,
) -> list[StoredMessage]:
    """Held deliveries first, then the queue's ready messages (`basic.get`, then requeued by
    closing the channel). Positions number that listing from 0: stable for paging only while
    the queue does not change. On a classic queue a peeked message comes back marked
    redelivered, so its next delivery may count one attempt more."""
    start = after_position + 1
    listing: list[StoredMessage] = []
    await consumer.sync(topic)  # a message dealt to the consumer is in `held`, not on its way
    for held in consumer.held(topic):
        listing.append(held.stored(topic, group))
    wanted = start + limit - len(listing)
    if wanted > 0:
        async with guard("peek"):
            scanned = await admin.scan(connection, queue_name(topic), wanted)
        now_ms = clock.now_ms()
        for message in scanned:
            headers = dict(message.headers or {})
            env = decode(headers, message.message_id, message.timestamp, now_ms)
            listing.append(
                StoredMessage(
                    lease=Lease(topic, group, 0, PEEK_TOKEN + env.message_id),
                    message_id=env.message_id,
                    topic=topic,
                    body=message.body,
                    properties=env.properties,
                    key=env.key,
                    tag=env.tag,
                    publish_ms=env.publish_ms,
                    deliver_at_ms=env.deliver_at_ms,
                    attempt=reconcile_attempt(headers, False, queue_name(topic)),
                    retries=stated_retries(headers),
                )
            )
    return [
        StoredMessage(
            lease=Lease(m.lease.topic, m.lease.group, index, m.lease.token),
            message_id=m.message_id,
            topic=m.topic,
            body=m.body,
            properties=m.properties,
            key=m.key,
            tag=m.tag,
            publish_ms=m.publish_ms,
            deliver_at_ms=m.deliver_at_ms,
            attempt=m.attempt,
            retries=m.retries,
        )
        for index, m in enumerate(listing)
        if start <= index < start + limit
    ]


async def remove(
    connection: AbstractRobustConnection,
    consumer: Consumer,
    leases: Sequence[Lease],
    keep_leased: bool = False,
) -> int:
    """Ack held deliveries by token; for leases from `peek` of ready messages, scan the queue
    and ack every ready message with that message id. With `keep_leased`, leased deliveries
    are left alone."""
    removed = 0
    by_id: dict[str, set[str]] = {}
    helds: list[Held] = []
    for lease in leases:
        if lease.token.startswith(PEEK_TOKEN):
            by_id.setdefault(lease.topic, set()).add(lease.token[len(PEEK_TOKEN) :])
            continue
        state = consumer.topics.get(lease.topic)
        held = None if keep_leased else consumer.take(lease)
        if held is None and state is not None:
            held = next((h for h in state.buffer if h.token == lease.token), None)
            if held is not None:
                state.buffer.remove(held)
        if held is not None and held.alive():
            helds.append(held)
    await consumer.ack_all(helds)
    removed += len(helds)
    for topic, ids in by_id.items():
        async with guard("remove"):
            removed += await admin.remove_matching(
                connection, queue_name(topic), ids, lambda m: m.message_id or ""
            )
    return removed


async def purge(
    connection: AbstractRobustConnection,
    consumer: Consumer,
    publisher: Publisher,
    topic: str,
    leased: bool = False,
) -> int:
    """Ack every buffered delivery and purge the queue and its known delay queues, with the
    queue unconsumed meanwhile (`Consumer.paused`: no delivery on its way is missed, and none
    is taken from the queue behind the purge's back). Leased deliveries stay unacked and leased,
    as RabbitMQ's queue.purge leaves unacknowledged messages to their consumer (with `leased`,
    they are acked too). A released one comes back: a requeue puts it in the queue again, a
    later retry goes through a delay queue it enters after the purge."""
    removed = 0
    async with consumer.paused(topic) as state:
        held = list(state.buffer)
        state.buffer.clear()
        if leased:
            held += [h for h, _ in state.leased.values()]
            state.leased.clear()
        alive = [h for h in held if h.alive()]
        await consumer.ack_all(alive)
        removed += len(alive)
        async with guard("purge"):
            removed += await admin.purge_queue(connection, queue_name(topic))
            for name in publisher.delay_queues(topic):
                removed += await admin.purge_queue(connection, name)
    return removed
