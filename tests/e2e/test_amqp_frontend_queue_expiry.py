"""Queue expiry (`x-expires`) with unmodified pika, each case against the gateway's AMQP front
end and the real RabbitMQ on 127.0.0.1:5672 with the same calls: a queue unused for its time is
deleted with its messages; a consumer, a declare or a `basic.get` keeps it; its time starts again
when its last consumer leaves. (Before, declaring `x-expires` was refused with 406.)"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

from tests.amqp_front import unique
from tests.e2e.test_amqp_frontend_client_parity import server, session
from tests.e2e.test_amqp_frontend_transactions import SERVERS

EXPIRES_MS = 600


@pytest.fixture(params=SERVERS)
async def url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """The time not scaled: the queue's time is the one the test waits."""
    async with server(request.param, tmp_path, time_scale=1.0) as found:
        yield found


def _exists(connection: pika.BlockingConnection, queue: str) -> bool:
    ch = connection.channel()
    try:
        ch.queue_declare(queue, passive=True)
    except ChannelClosedByBroker as closed:
        assert closed.reply_code == 404
        return False
    ch.close()
    return True


def _wait(connection: pika.BlockingConnection, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        connection.process_data_events(time_limit=0.05)


async def test_an_unused_queue_goes_with_its_messages(url: str) -> None:
    def run(connection: pika.BlockingConnection) -> tuple[bool, bool, bool]:
        queue = unique("exq")
        ch = connection.channel()
        ch.confirm_delivery()
        ch.queue_declare(queue, arguments={"x-expires": EXPIRES_MS})
        ch.basic_publish("", queue, b"m")  # a publish is not a use
        _wait(connection, EXPIRES_MS / 2000)
        early = _exists(connection, queue)  # a passive declare is a use: its time starts again
        _wait(connection, EXPIRES_MS / 2000)
        still = _exists(connection, queue)
        _wait(connection, EXPIRES_MS * 3 / 1000)
        gone = not _exists(connection, queue)
        return early, still, gone

    assert await session(url, run) == (True, True, True)


async def test_a_consumer_keeps_it_and_its_time_starts_when_the_consumer_leaves(
    url: str,
) -> None:
    def run(connection: pika.BlockingConnection) -> tuple[bool, bool, bool]:
        queue = unique("exq")
        ch = connection.channel()
        ch.queue_declare(queue, arguments={"x-expires": EXPIRES_MS})
        consumer = connection.channel()
        tag = consumer.basic_consume(queue, lambda *a: None)
        _wait(connection, EXPIRES_MS * 3 / 1000)
        kept = _exists(connection, queue)
        consumer.basic_cancel(tag)
        _wait(connection, EXPIRES_MS / 2000)
        soon = _exists(connection, queue)  # (a use: its time starts again)
        _wait(connection, EXPIRES_MS * 3 / 1000)
        return kept, soon, not _exists(connection, queue)

    assert await session(url, run) == (True, True, True)


@pytest.mark.parametrize("value", [0, -5, "soon", 315_360_000_001, 2**62])  # past ten years
async def test_a_bad_time_is_refused_naming_the_argument(url: str, value: Any) -> None:
    def run(connection: pika.BlockingConnection) -> tuple[int, str]:
        ch = connection.channel()
        with pytest.raises(ChannelClosedByBroker) as closed:
            ch.queue_declare(unique("exq"), arguments={"x-expires": value})
        return closed.value.reply_code, str(closed.value.reply_text)

    code, text = await session(url, run)
    assert code == 406
    assert "x-expires" in text
