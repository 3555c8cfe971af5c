"""More of unmodified pika against the gateway's AMQP front end and against the real RabbitMQ on
127.0.0.1:5672, the same steps on both (see test_amqp_frontend_client_parity.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pika
import pytest

from tests.amqp_front import unique
from tests.e2e.test_amqp_frontend_client_parity import SERVERS, server, session


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
