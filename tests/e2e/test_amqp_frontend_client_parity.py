"""Unmodified pika against the gateway's AMQP front end and against the real RabbitMQ on
127.0.0.1:5672, the same steps on both: what the client observes must be the same (where the
gateway once answered otherwise). pika blocks, so each client session runs in a worker thread
while the gateway serves on the event loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TypeVar

import pika
import pytest

from tests.amqp_front import amqp_gateway_on, unique

T = TypeVar("T")
RABBITMQ_URL = "amqp://guest:guest@127.0.0.1:5672/"


@pytest.fixture(params=["gateway", "gateway-on-rabbitmq", "rabbitmq"])
async def url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """The gateway on its embedded store, the gateway with the real RabbitMQ as its back end,
    or the real RabbitMQ itself."""
    if request.param == "rabbitmq":
        yield RABBITMQ_URL
        return
    store = "rabbitmq" if request.param == "gateway-on-rabbitmq" else "embedded"
    async with amqp_gateway_on(store, tmp_path / "data") as gateway:
        yield gateway.url


async def session(url: str, fn: Callable[[pika.BlockingConnection], T]) -> T:
    """Run `fn` with a fresh blocking connection, in a thread."""
    def run() -> T:
        connection = pika.BlockingConnection(pika.URLParameters(url))
        try:
            return fn(connection)
        finally:
            if connection.is_open:
                connection.close()
    return await asyncio.to_thread(run)


def count_when(ch: pika.adapters.blocking_connection.BlockingChannel, queue: str,
               ready: int, consumers: int) -> tuple[int, int]:
    """The queue's (message count, consumer count) once they are as expected (or the last
    seen after 5 s)."""
    deadline = time.monotonic() + 5
    while True:
        ok = ch.queue_declare(queue, passive=True).method
        seen = (ok.message_count, ok.consumer_count)
        if seen == (ready, consumers) or time.monotonic() > deadline:
            return seen
        time.sleep(0.05)


# ---------------------------------------------------------------------- topic exchange
async def test_a_star_does_not_match_the_empty_routing_key(url: str) -> None:
    """The empty routing key has no words: `*` (exactly one word) does not match it, `#` and
    the empty binding key do. Before, the gateway took it for one empty word and routed it to
    a `*` binding."""
    exchange = unique("topic")

    def client(connection: pika.BlockingConnection) -> dict[str, list[bytes]]:
        ch = connection.channel()
        ch.exchange_declare(exchange, "topic", auto_delete=True)
        queues = {}
        for key in ("*", "#", "", "*.*", "#.*"):
            queue = ch.queue_declare("", exclusive=True).method.queue
            ch.queue_bind(queue, exchange, key)
            queues[key] = queue
        ch.confirm_delivery()
        for routing_key in ("", ".", "a"):
            ch.basic_publish(exchange, routing_key, routing_key.encode() or b"<empty>")
        got: dict[str, list[bytes]] = {}
        for key, queue in queues.items():
            got[key] = []
            while True:
                method, _, body = ch.basic_get(queue, auto_ack=True)
                if method is None:
                    break
                got[key].append(body)
        ch.exchange_delete(exchange)
        return got

    assert await session(url, client) == {
        "*": [b"a"], "#": [b"<empty>", b".", b"a"], "": [b"<empty>"], "*.*": [b"."],
        "#.*": [b".", b"a"]}


# ---------------------------------------------------------------------- queue.delete
async def test_delete_ok_leaves_out_what_a_consumer_holds_unacknowledged(url: str) -> None:
    """A consumer (prefetch 1) holds one message unacknowledged, one is ready: delete-ok
    counts the ready one only. Before, the gateway cancelled the consumer first, which gave
    its delivery back to the queue, and counted it too (2)."""
    name = unique("delete")

    def client(connection: pika.BlockingConnection) -> tuple[tuple[int, int], int, bool]:
        ch = connection.channel()
        ch.queue_declare(name)
        ch.confirm_delivery()
        for body in (b"m0", b"m1"):
            ch.basic_publish("", name, body)
        ch.basic_qos(prefetch_count=1)
        ch.basic_consume(name, lambda *_: None)
        admin = connection.channel()
        before = count_when(admin, name, 1, 1)
        deleted = admin.queue_delete(name).method.message_count
        again = admin.queue_declare(name).method.message_count == 0
        admin.queue_delete(name)
        return before, deleted, again

    assert await session(url, client) == ((1, 1), 1, True)


# ---------------------------------------------------------------------- server-named queues
async def test_a_server_named_queue_takes_messages_and_retries(url: str) -> None:
    """The queue an RPC client declares with an empty name (`amq.gen-...`) takes what is
    published to it, directly and through an exchange, and a nacked delivery comes again.
    Before, with the gateway on a RabbitMQ back end every such publish was nacked: the back
    end declared the broker queue of the same name, which RabbitMQ refuses (403, the reserved
    prefix `amq.`)."""
    def client(connection: pika.BlockingConnection) -> tuple[str, list[bytes], bool]:
        ch = connection.channel()
        queue = ch.queue_declare("", exclusive=True,
                                 arguments={"x-retry-interval": 10}).method.queue
        ch.queue_bind(queue, "amq.direct", "k")
        ch.confirm_delivery()
        ch.basic_publish("", queue, b"direct", mandatory=True)
        ch.basic_publish("amq.direct", "k", b"exchange", mandatory=True)
        bodies = []
        redelivered = False
        deadline = time.monotonic() + 10
        while len(bodies) < 3 and time.monotonic() < deadline:
            method, _, body = ch.basic_get(queue)
            if method is None:
                time.sleep(0.05)
                continue
            bodies.append(body)
            if len(bodies) == 1:
                ch.basic_nack(method.delivery_tag, requeue=True)
            else:
                redelivered = redelivered or method.redelivered
                ch.basic_ack(method.delivery_tag)
        return queue[:8], sorted(bodies), redelivered

    assert await session(url, client) == ("amq.gen-", [b"direct", b"direct", b"exchange"],
                                          True)
