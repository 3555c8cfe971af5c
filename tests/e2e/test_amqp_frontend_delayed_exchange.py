"""Delayed-message exchanges (`x-delayed-message`, as RabbitMQ's delayed message exchange plugin
declares them) with unmodified pika against the gateway's AMQP front end: a message published
with an integer `x-delay` header above 0 reaches its queues that much later; without it (or with
one that is not an integer) at once; the exchange routes as its `x-delayed-type` (direct,
topic, ...). Declaring one without a valid `x-delayed-type` is refused (406), as by the plugin;
so is a delay past the gateway's longest. (The RabbitMQ on this machine has no such plugin, so
these run against the gateway only.)"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

from tests.amqp_front import amqp_gateway, unique
from tests.e2e.test_amqp_frontend_client_parity import session
from tests.e2e.test_amqp_frontend_delay_queues import _wait_for

DELAY_MS = 1500


@pytest.fixture
async def url(tmp_path: Path) -> AsyncIterator[str]:
    async with amqp_gateway(tmp_path / "data", time_scale=1.0) as gateway:  # wall-clock delays
        yield gateway.url


def _declare(ch: pika.adapters.blocking_connection.BlockingChannel, kind: str,
             key: str) -> tuple[str, str]:
    exchange, queue = unique("delayed"), unique("work")
    ch.exchange_declare(exchange, "x-delayed-message", durable=True,
                        arguments={"x-delayed-type": kind})
    ch.queue_declare(queue)
    ch.queue_bind(queue, exchange, key)
    return exchange, queue


async def test_a_message_with_x_delay_waits_and_the_others_go_at_once(url: str) -> None:
    def run(connection: pika.BlockingConnection) -> tuple[list[tuple[bytes, float]], float]:
        ch = connection.channel()
        exchange, queue = _declare(ch, "direct", "k")
        start = time.monotonic()
        for body, delay in ((b"later", DELAY_MS), (b"now", None), (b"text", "1500"),
                            (b"negative", -5), (b"zero", 0)):
            headers = {} if delay is None else {"x-delay": delay}
            ch.basic_publish(exchange, "k", body, pika.BasicProperties(headers=headers))
        ch.basic_publish(exchange, "other-key", b"unrouted",
                         pika.BasicProperties(headers={"x-delay": 1}))
        got = _wait_for(ch, queue, 5)
        return [(body, at - start) for body, _, at in got], start

    got, _ = await session(url, run)
    bodies = [body for body, _ in got]
    assert set(bodies[:4]) == {b"now", b"text", b"negative", b"zero"}, bodies
    assert bodies[4] == b"later"
    assert got[4][1] >= DELAY_MS / 1000 * 0.9  # not before its time (never earlier)


async def test_a_delayed_exchange_routes_as_its_delayed_type(url: str) -> None:
    def run(connection: pika.BlockingConnection) -> list[bytes]:
        ch = connection.channel()
        exchange, queue = _declare(ch, "topic", "orders.*")
        for key in ("orders.eu", "billing.eu", "orders.us"):
            ch.basic_publish(exchange, key, key.encode(),
                             pika.BasicProperties(headers={"x-delay": 200}))
        return [body for body, _, _ in _wait_for(ch, queue, 2)]

    assert sorted(await session(url, run)) == [b"orders.eu", b"orders.us"]


@pytest.mark.parametrize("arguments", [{}, {"x-delayed-type": "x-delayed-message"},
                                       {"x-delayed-type": "fanoutt"}, {"x-delayed-type": 1}])
async def test_a_delayed_exchange_needs_an_exchange_type_to_route_as(
    url: str, arguments: dict[str, object]
) -> None:
    def run(connection: pika.BlockingConnection) -> str:
        ch = connection.channel()
        with pytest.raises(ChannelClosedByBroker) as closed:
            ch.exchange_declare(unique("delayed"), "x-delayed-message", arguments=arguments)
        assert closed.value.reply_code == 406
        return str(closed.value.reply_text)

    assert "x-delayed-type" in await session(url, run)


async def test_a_delay_past_the_longest_is_refused_not_shortened(url: str) -> None:
    def run(connection: pika.BlockingConnection) -> tuple[int, str, list[bytes]]:
        ch = connection.channel()
        exchange, queue = _declare(ch, "direct", "k")
        ch.confirm_delivery()
        with pytest.raises(ChannelClosedByBroker) as closed:
            ch.basic_publish(exchange, "k", b"far", pika.BasicProperties(
                headers={"x-delay": 401 * 86_400_000}))
        ch = connection.channel()
        ch.basic_publish(exchange, "k", b"fine", pika.BasicProperties(headers={"x-delay": 1}))
        return (closed.value.reply_code, str(closed.value.reply_text),
                [body for body, _, _ in _wait_for(ch, queue, 1)])

    code, text, got = await session(url, run)
    assert code == 406 and "x-delay" in text
    assert got == [b"fine"]  # the next publish still works


async def test_a_dead_letter_through_a_delayed_exchange_waits_for_its_x_delay(url: str) -> None:
    """The retry pattern of a dead-letter exchange that is a delayed-message exchange: a
    rejected message comes back to the work queue after its `x-delay`."""
    def run(connection: pika.BlockingConnection) -> tuple[list[tuple[bytes, float]], float]:
        ch = connection.channel()
        retry, work = unique("retry-x"), unique("work")
        ch.exchange_declare(retry, "x-delayed-message", arguments={"x-delayed-type": "direct"})
        ch.queue_declare(work, arguments={"x-dead-letter-exchange": retry,
                                          "x-dead-letter-routing-key": "again"})
        again = unique("again")
        ch.queue_declare(again)
        ch.queue_bind(again, retry, "again")
        ch.basic_publish("", work, b"failing", pika.BasicProperties(
            headers={"x-delay": DELAY_MS}))
        method = None
        deadline = time.monotonic() + 10
        while method is None and time.monotonic() < deadline:
            method, _, _ = ch.basic_get(work)
        assert method is not None
        start = time.monotonic()
        ch.basic_reject(method.delivery_tag, requeue=False)
        got = _wait_for(ch, again, 1)
        return [(body, at - start) for body, _, at in got], start

    got, _ = await session(url, run)
    assert [body for body, _ in got] == [b"failing"]
    assert got[0][1] >= DELAY_MS / 1000 * 0.9
