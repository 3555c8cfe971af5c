"""A time to live of 0 (or a few ms) with unmodified pika, on the gateway's AMQP front end (on its
embedded store and on the real RabbitMQ as its back end) and on the real RabbitMQ itself: a
message published while a consumer waits for it is handed to that consumer, however long storing
it took; one nobody waits for expires (dead-lettered with reason `expired`). Before, the gateway
expired every such message, a waiting consumer or not: storing and handing on takes a few ms."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pika
import pytest

from tests.amqp_front import unique
from tests.e2e.test_amqp_frontend_client_parity import SERVERS, server, session
from tests.e2e.test_amqp_frontend_max_length import dead_letters


@pytest.fixture(params=SERVERS)
async def url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    async with server(request.param, tmp_path, time_scale=1.0) as found:
        yield found


@pytest.mark.parametrize("how", ["x-message-ttl", "expiration"])
async def test_a_consumer_waiting_gets_messages_of_ttl_zero(url: str, how: str) -> None:
    def run(connection: pika.BlockingConnection) -> tuple[list[bytes], int]:
        queue, dead = unique("ttl0"), unique("ttl0d")
        ch = connection.channel()
        ch.queue_declare(dead)
        arguments: dict[str, Any] = {"x-dead-letter-exchange": "",
                                     "x-dead-letter-routing-key": dead}
        if how == "x-message-ttl":
            arguments["x-message-ttl"] = 0
        ch.queue_declare(queue, arguments=arguments)
        got: list[bytes] = []
        ch.basic_qos(prefetch_count=100)
        ch.basic_consume(queue, lambda c, m, p, body: (got.append(body),
                                                       c.basic_ack(m.delivery_tag)))
        connection.process_data_events(0.5)  # the consumer is there, waiting
        publisher = pika.BlockingConnection(pika.URLParameters(url))
        try:
            pch = publisher.channel()
            pch.confirm_delivery()
            props = pika.BasicProperties(expiration="0") if how == "expiration" else None
            for i in range(5):
                pch.basic_publish("", queue, b"m%d" % i, props)
                connection.process_data_events(0.05)
            deadline = time.monotonic() + 10
            while len(got) < 5 and time.monotonic() < deadline:
                connection.process_data_events(0.05)
            connection.process_data_events(0.3)  # time for a dead letter to show, if any
            return got, pch.queue_declare(dead, passive=True).method.message_count
        finally:
            publisher.close()

    got, dead = await session(url, run)
    assert got == [b"m%d" % i for i in range(5)]
    assert dead == 0


@pytest.fixture(params=["gateway", "rabbitmq"])
async def swept_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """Not the gateway on RabbitMQ: there a queue is looked at only by consuming it (README)."""
    async with server(request.param, tmp_path, time_scale=1.0) as found:
        yield found


async def test_messages_of_ttl_zero_nobody_waits_for_expire(swept_url: str) -> None:
    url = swept_url

    def run(connection: pika.BlockingConnection) -> tuple[list[tuple[bytes, str]], int]:
        queue, dead = unique("ttl0"), unique("ttl0d")
        ch = connection.channel()
        ch.confirm_delivery()
        ch.queue_declare(dead)
        ch.queue_declare(queue, arguments={"x-message-ttl": 0, "x-dead-letter-exchange": "",
                                           "x-dead-letter-routing-key": dead})
        for i in range(3):
            ch.basic_publish("", queue, b"m%d" % i)
        deaths = [(body, str((props.headers or {}).get("x-first-death-reason")))
                  for body, props in dead_letters(ch, dead, 3)]
        return deaths, ch.queue_declare(queue, passive=True).method.message_count

    deaths, left = await session(url, run)
    assert sorted(deaths) == [(b"m%d" % i, "expired") for i in range(3)]
    assert left == 0
