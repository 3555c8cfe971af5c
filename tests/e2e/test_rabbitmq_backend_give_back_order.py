"""On the RabbitMQ back end a delivery leased and given back untouched (handed to no client, its
counters unchanged: the engine fetched more than its consumers had room for, or held it back
behind its key) comes again before the messages after it, as RabbitMQ puts a requeued message
back at its place, without the broker being asked for anything. (It was acked and published
again as a copy, at the end of the queue: behind every message published meanwhile.)"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import aio_pika
import pytest

from adapters.amqp.backend import RabbitMQBackend
from adapters.amqp.queues import queue_name
from gateway.backend.base import OutMessage, Release, StoredMessage
from tests.amqp_front import RABBITMQ_URL


@pytest.fixture
async def backend() -> AsyncIterator[RabbitMQBackend]:
    opened = RabbitMQBackend(RABBITMQ_URL)
    await opened.open()
    try:
        yield opened
    finally:
        topics = await opened.topics()
        await opened.close()
        connection = await aio_pika.connect(RABBITMQ_URL)
        channel = await connection.channel()
        for topic in topics:
            await channel.queue_delete(queue_name(topic))
        await connection.close()


def bodies(got: list[StoredMessage]) -> list[bytes]:
    return [m.body for m in got]


async def test_untouched_give_back_keeps_its_place(backend: RabbitMQBackend) -> None:
    topic = f"give-back-{uuid.uuid4().hex[:8]}"
    assert await backend.fetch(topic, "g", 10, 0) == []  # consuming it now
    await backend.publish(topic, [OutMessage(b) for b in (b"a", b"b", b"c", b"d")])
    assert await backend.catch_up(topic, "g")  # every delivery dealt so far is buffered
    first = await backend.fetch(topic, "g", 3, 0)
    assert bodies(first) == [b"a", b"b", b"c"]
    await backend.release([Release(m.lease, 0, m.attempt, m.retries) for m in first[1:]])
    again = await backend.fetch(topic, "g", 10, 0)
    assert bodies(again) == [b"b", b"c", b"d"]
    assert [(m.attempt, m.retries) for m in again] == [(0, 0)] * 3
    assert [m.message_id for m in again[:2]] == [m.message_id for m in first[1:]]
    await backend.ack([first[1].lease])  # the lease given back is void: nothing happens
    assert await backend.fetch(topic, "g", 10, 0) == []
    await backend.ack([first[0].lease, *[m.lease for m in again]])
    stats = await backend.stats(topic, "g", 0)
    assert (stats.ready, stats.leased) == (0, 0)


async def test_requeued_delivery_comes_back_at_its_place(backend: RabbitMQBackend) -> None:
    """A delivery given back after it was handed out (one attempt more: a requeue at the
    broker, which puts it back at its place in the queue) comes again before the deliveries the
    back end had buffered after it, as from RabbitMQ itself, as soon as the release returned.
    (It came after them.)"""
    topic = f"requeue-{uuid.uuid4().hex[:8]}"
    assert await backend.fetch(topic, "g", 10, 0) == []
    await backend.publish(topic, [OutMessage(b) for b in (b"a", b"b", b"c")])
    assert await backend.catch_up(topic, "g")
    (first,) = await backend.fetch(topic, "g", 1, 0)
    assert first.body == b"a"
    await backend.release([Release(first.lease, 0, first.attempt + 1, first.retries)])
    again = await backend.fetch(topic, "g", 10, 0)
    assert bodies(again) == [b"a", b"b", b"c"]
    assert [m.attempt for m in again] == [1, 0, 0]
    await backend.ack([m.lease for m in again])
