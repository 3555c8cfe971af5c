"""Unmodified pika (the synchronous `BlockingConnection`) against the AMQP front end: declares,
confirmed publishes, consumers with prefetch, basic.get, ack / nack / reject, and every exchange
type with bindings. pika blocks, so each client session runs in a worker thread while the
gateway serves on the event loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypeVar

import pika
import pika.exceptions
import pytest

from tests.amqp_front import AmqpGateway, amqp_gateway, unique

T = TypeVar("T")


@pytest.fixture
async def gw(tmp_path: Path) -> AsyncIterator[AmqpGateway]:
    async with amqp_gateway(tmp_path / "data") as gateway:
        yield gateway


def blocking(gw: AmqpGateway) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(gw.url))


async def session(gw: AmqpGateway, fn: Callable[[pika.BlockingConnection], T]) -> T:
    """Run `fn` with a fresh blocking connection, in a thread."""
    def run() -> T:
        connection = blocking(gw)
        try:
            return fn(connection)
        finally:
            if connection.is_open:
                connection.close()
    return await asyncio.to_thread(run)


async def test_declare_confirmed_publish_get_and_settle(gw: AmqpGateway) -> None:
    name = unique()

    def client(connection: pika.BlockingConnection) -> dict[str, Any]:
        ch = connection.channel()
        ch.confirm_delivery()
        ch.queue_declare(name, durable=True, arguments={"x-retry-interval": 10})
        for i in range(4):
            ch.basic_publish("", name, b"m%d" % i, pika.BasicProperties(
                content_type="application/json", headers={"i": i}, delivery_mode=2),
                mandatory=True)
        declared = ch.queue_declare(name, passive=True)
        out: dict[str, Any] = {"count": declared.method.message_count}
        method, props, body = ch.basic_get(name)
        out["first"] = (body, props.content_type, props.headers, method.redelivered)
        ch.basic_ack(method.delivery_tag)
        method, _, body = ch.basic_get(name)
        ch.basic_reject(method.delivery_tag, requeue=False)  # gone: no dead-letter exchange
        method, _, body = ch.basic_get(name)
        ch.basic_nack(method.delivery_tag, requeue=True)  # back after the interval
        out["third"] = body
        time.sleep(0.3)  # 10 s at time scale 0.01, with room
        bodies = []
        while True:
            method, props, body = ch.basic_get(name, auto_ack=True)
            if method is None:
                break
            bodies.append((body, method.redelivered, (props.headers or {}).get(
                "x-delivery-count", 0)))
        out["rest"] = sorted(bodies)
        return out

    got = await session(gw, client)
    assert got["count"] == 4
    assert got["first"] == (b"m0", "application/json", {"i": 0}, False)
    assert got["third"] == b"m2"
    assert got["rest"] == [(b"m2", True, 1), (b"m3", False, 0)]


async def test_consume_with_prefetch(gw: AmqpGateway) -> None:
    name = unique()

    def client(connection: pika.BlockingConnection) -> list[tuple[bytes, int]]:
        ch = connection.channel()
        ch.queue_declare(name)
        for i in range(5):
            ch.basic_publish("", name, b"%d" % i)
        ch.basic_qos(prefetch_count=2)
        seen: list[tuple[bytes, int]] = []
        held: list[int] = []

        def on_message(channel: Any, method: Any, props: Any, body: bytes) -> None:
            held.append(method.delivery_tag)
            seen.append((body, len(held)))
            if len(held) == 2:  # never more than two unacknowledged
                channel.basic_ack(held.pop(0))
            if len(seen) == 5:
                while held:
                    channel.basic_ack(held.pop(0))
                channel.stop_consuming()

        ch.basic_consume(name, on_message)
        connection.call_later(10, ch.stop_consuming)
        ch.start_consuming()
        return seen

    seen = await session(gw, client)
    assert [body for body, _ in seen] == [b"%d" % i for i in range(5)]
    assert max(unacked for _, unacked in seen) <= 2


async def test_exchanges_of_every_type(gw: AmqpGateway) -> None:
    def client(connection: pika.BlockingConnection) -> dict[str, list[bytes]]:
        ch = connection.channel()
        names = {k: unique(k) for k in ("direct", "fanout", "topic", "headers")}
        queues = {k: unique(k + "-q") for k in names}
        for kind, exchange in names.items():
            ch.exchange_declare(exchange, kind, durable=True)
            ch.queue_declare(queues[kind])
        ch.queue_bind(queues["direct"], names["direct"], "k1")
        ch.queue_bind(queues["fanout"], names["fanout"])
        ch.queue_bind(queues["topic"], names["topic"], "*.error")
        ch.queue_bind(queues["headers"], names["headers"],
                      arguments={"x-match": "any", "a": "1", "b": "2"})
        ch.basic_publish(names["direct"], "k1", b"d-yes")
        ch.basic_publish(names["direct"], "k2", b"d-no")
        ch.basic_publish(names["fanout"], "ignored", b"f")
        ch.basic_publish(names["topic"], "app.error", b"t-yes")
        ch.basic_publish(names["topic"], "app.sub.error", b"t-no")
        ch.basic_publish(names["headers"], "", b"h-yes", pika.BasicProperties(headers={"b": "2"}))
        ch.basic_publish(names["headers"], "", b"h-no", pika.BasicProperties(headers={"c": "3"}))
        out: dict[str, list[bytes]] = {}
        for kind, queue in queues.items():
            out[kind] = []
            while True:
                method, _, body = ch.basic_get(queue, auto_ack=True)
                if method is None:
                    break
                out[kind].append(body)
        return out

    got = await session(gw, client)
    assert got == {"direct": [b"d-yes"], "fanout": [b"f"], "topic": [b"t-yes"],
                   "headers": [b"h-yes"]}


async def test_errors_reach_pika_as_its_own_exceptions(gw: AmqpGateway) -> None:
    def client(connection: pika.BlockingConnection) -> list[tuple[str, int]]:
        errors: list[tuple[str, int]] = []
        for attempt in (
            lambda ch: ch.queue_declare(unique("missing"), passive=True),
            lambda ch: ch.queue_declare(unique(), arguments={"x-retry-interval": 1801}),
            lambda ch: ch.basic_ack(999),
            lambda ch: ch.queue_declare("amq.mine"),
        ):
            ch = connection.channel()
            try:
                attempt(ch)
                ch.queue_declare(unique())  # the ack has no reply: flush it with a method
            except pika.exceptions.ChannelClosedByBroker as exc:
                errors.append((type(exc).__name__, exc.reply_code))
        ch = connection.channel()
        ch.queue_declare(unique())  # the connection is fine
        return errors

    assert await session(gw, client) == [
        ("ChannelClosedByBroker", 404), ("ChannelClosedByBroker", 406),
        ("ChannelClosedByBroker", 406), ("ChannelClosedByBroker", 403),
    ]
