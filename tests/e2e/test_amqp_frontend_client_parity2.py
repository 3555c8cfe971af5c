"""More of unmodified pika against the gateway's AMQP front end and against the real RabbitMQ on
127.0.0.1:5672, the same steps on both (see test_amqp_frontend_client_parity.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from tests.amqp_front import unique
from tests.e2e.test_amqp_frontend_client_parity import SERVERS, count_when, server, session


@pytest.fixture(params=SERVERS)
async def url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A server: the gateway on its embedded store, on RabbitMQ, or RabbitMQ itself."""
    async with server(request.param, tmp_path) as found:
        yield found


async def test_an_empty_expiration_is_refused(url: str) -> None:
    """RabbitMQ closes the channel with 406 on `expiration=''` (it is no integer); the gateway
    took an empty expiration for none."""
    queue = unique("empty-expiration")

    def steps(connection: pika.BlockingConnection) -> tuple[int, str]:
        ch = connection.channel()
        ch.queue_declare(queue, auto_delete=True)
        try:
            ch.basic_publish("", queue, b"x", pika.BasicProperties(expiration=""))
            ch.queue_declare(queue, passive=True)  # a round trip: the close arrives first
        except pika.exceptions.ChannelClosedByBroker as exc:
            return exc.reply_code, exc.reply_text
        return 200, "published"

    code, text = await session(url, steps)
    assert code == 406
    assert "invalid expiration ''" in text


def closed_by(connection: pika.BlockingConnection,
              step: Callable[[BlockingChannel], object]) -> tuple[int, str]:
    """The (reply code, reply text) the broker closes a fresh channel with on `step`."""
    try:
        step(connection.channel())
    except pika.exceptions.ChannelClosedByBroker as exc:
        return exc.reply_code, exc.reply_text
    return 200, "done"


async def test_a_server_named_queue_is_redeclared_only_passively(url: str) -> None:
    """RabbitMQ refuses an `amq.gen-` name without `passive` even to the queue's owner (403);
    the gateway let the owner redeclare it."""
    def steps(connection: pika.BlockingConnection) -> tuple[tuple[int, str], int]:
        ch = connection.channel()
        queue = ch.queue_declare("", exclusive=True).method.queue
        refused = closed_by(connection, lambda c: c.queue_declare(queue, exclusive=True))
        ok = ch.queue_declare(queue, passive=True).method  # the queue is still there
        return refused, ok.consumer_count

    (code, text), consumers = await session(url, steps)
    assert code == 403
    assert "contains reserved prefix 'amq.*'" in text
    assert consumers == 0


async def test_refusals_name_what_rabbitmq_names(url: str) -> None:
    """The reply texts of deleting the default or a built-in exchange, of `if-unused` on an
    exchange with a binding, of `if-empty` on a queue with a message: RabbitMQ's words."""
    queue, exchange = unique("if-empty"), unique("if-unused")

    def steps(connection: pika.BlockingConnection) -> list[tuple[int, str]]:
        ch = connection.channel()
        ch.queue_declare(queue)
        ch.exchange_declare(exchange, "direct")
        ch.queue_bind(queue, exchange, "k")
        ch.basic_publish("", queue, b"x")
        try:
            count_when(ch, queue, 1, 0)
            return [closed_by(connection, lambda c: c.exchange_delete("")),
                    closed_by(connection, lambda c: c.exchange_delete("amq.direct")),
                    closed_by(connection, lambda c: c.exchange_delete(exchange, if_unused=True)),
                    closed_by(connection, lambda c: c.queue_delete(queue, if_empty=True))]
        finally:
            ch.queue_delete(queue)
            ch.exchange_delete(exchange)

    assert await session(url, steps) == [
        (403, "ACCESS_REFUSED - operation not permitted on the default exchange"),
        (403, "ACCESS_REFUSED - deletion of system exchange 'amq.direct' in vhost '/' not "
              "allowed"),
        (406, f"PRECONDITION_FAILED - exchange '{exchange}' in vhost '/' in use"),
        (406, f"PRECONDITION_FAILED - queue '{queue}' in vhost '/' not empty")]
