"""`x-delivery-limit` (a quorum queue's poison-message limit) with unmodified pika, against the
gateway's AMQP front end (on its embedded store and on the real RabbitMQ as its back end) and the
real RabbitMQ on 127.0.0.1:5672 itself, with the same calls: a message
nacked with requeue is delivered again until it has failed more than the limit, then
dead-lettered with reason `delivery_limit`. The gateway carries it out as the policy's retry
limit (each requeue waits the queue's `x-retry-interval`, document 001; here 10 s, 0.1 s at the
tests' time scale; RabbitMQ ignores that argument and requeues at once). (Before, declaring
`x-delivery-limit` was refused with 406.)"""

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


@pytest.fixture(params=[*SERVERS, "gateway-on-rabbitmq"])
async def url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    async with server(request.param, tmp_path) as found:
        yield found


@pytest.mark.parametrize("limit", [0, 2])
async def test_a_message_failed_past_the_limit_is_dead_lettered(url: str, limit: int) -> None:
    def run(connection: pika.BlockingConnection) -> tuple[int, str, bytes]:
        queue, dead = unique("dlq-work"), unique("dlq-dead")
        ch = connection.channel()
        ch.queue_declare(dead)
        ch.queue_declare(queue, durable=True, arguments={
            "x-queue-type": "quorum", "x-delivery-limit": limit, "x-retry-interval": 10,
            "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dead})
        ch.basic_publish("", queue, b"poison")
        deliveries = 0
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            method, _, _ = ch.basic_get(queue)
            if method is not None:
                deliveries += 1
                ch.basic_nack(method.delivery_tag, requeue=True)
                continue
            method, properties, body = ch.basic_get(dead, auto_ack=True)
            if method is not None:
                headers = properties.headers or {}
                reason = str(headers.get("x-first-death-reason")
                             or (headers.get("x-death") or [{}])[0].get("reason"))
                ch.queue_delete(queue)
                return deliveries, reason, body
            time.sleep(0.01)
        raise AssertionError(f"not dead-lettered after {deliveries} deliveries")

    deliveries, reason, body = await session(url, run)
    assert (deliveries, reason, body) == (limit + 1, "delivery_limit", b"poison")


@pytest.mark.parametrize("value", [-1, "three"])
async def test_a_bad_limit_is_refused_naming_the_argument(tmp_path: Path, value: Any) -> None:
    """Gateway only: RabbitMQ 3.10 takes these and ignores them."""
    def run(connection: pika.BlockingConnection) -> tuple[int, str]:
        ch = connection.channel()
        with pytest.raises(ChannelClosedByBroker) as closed:
            ch.queue_declare(unique("dlq-work"), durable=True, arguments={
                "x-queue-type": "quorum", "x-delivery-limit": value})
        return closed.value.reply_code, str(closed.value.reply_text)

    async with server("gateway", tmp_path) as url:
        code, text = await session(url, run)
    assert code == 406
    assert "x-delivery-limit" in text
