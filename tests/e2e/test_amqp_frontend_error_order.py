"""A channel error found as its frame arrives (an acknowledgement of an unknown delivery tag)
closes the channel only after the methods sent before it are done, as RabbitMQ does them in
order: the messages published before it are stored. With unmodified pika against the gateway's
AMQP front end and against the real RabbitMQ on 127.0.0.1:5672. Before, the gateway closed the
channel at once and dropped the publishes still waiting to be stored."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pika
import pytest

from tests.amqp_front import unique
from tests.e2e.test_amqp_frontend_client_parity import count_when, server, session


@pytest.fixture(params=["gateway", "rabbitmq"])
async def url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    async with server(request.param, tmp_path) as found:
        yield found


@pytest.mark.parametrize("settle", ["ack", "nack", "reject"])
async def test_messages_published_before_a_channel_error_are_stored(url: str,
                                                                   settle: str) -> None:
    queue = unique("order")

    def run(connection: pika.BlockingConnection) -> tuple[int, int]:
        setup = connection.channel()
        setup.queue_declare(queue)
        ch = connection.channel()
        for i in range(200):
            ch.basic_publish("", queue, f"m{i}".encode())
        getattr(ch, f"basic_{settle}")(999)
        code = 0
        try:
            ch.queue_declare(queue, passive=True)
        except pika.exceptions.ChannelClosedByBroker as exc:
            code = exc.reply_code
        stored = count_when(setup, queue, 200, 0)[0]
        setup.queue_delete(queue)
        return code, stored

    assert await session(url, run) == (406, 200)


async def test_messages_published_before_a_refused_commit_are_stored(
    tmp_path: Path,
) -> None:
    """A `tx.commit` on a channel that is not transactional is refused (406, the channel
    closes): the messages published before it on the channel are stored all the same."""
    queue = unique("order")
    async with server("gateway", tmp_path) as url:

        def publish(connection: pika.BlockingConnection) -> int:
            connection.channel().queue_declare(queue)
            ch = connection.channel()
            for i in range(200):
                ch.basic_publish("", queue, f"m{i}".encode())
            try:
                ch.tx_commit()
            except pika.exceptions.ChannelClosedByBroker as exc:
                return int(exc.reply_code)
            return 0

        def count(connection: pika.BlockingConnection) -> int:
            ch = connection.channel()
            stored = count_when(ch, queue, 200, 0)[0]
            ch.queue_delete(queue)
            return stored

        assert await session(url, publish) == 406
        assert await session(url, count) == 200
