"""The classic delay queue, with unmodified pika against the gateway's AMQP front end and against
the real RabbitMQ on 127.0.0.1:5672: a queue with a time to live (the queue's `x-message-ttl`, or
each message's `expiration`) and a dead-letter exchange, which nobody consumes, passes each
message on to the work queue once its time is up, with `x-death` reason `expired`. Before, the
gateway expired messages only on their way to a consumer, so they stayed in the delay queue for
good."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pika
import pytest

from tests.amqp_front import amqp_gateway, unique
from tests.e2e.test_amqp_frontend_client_parity import server, session

SERVERS = ["gateway", "rabbitmq"]


@pytest.fixture(params=SERVERS)
async def url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """The gateway on its embedded store (real time: TTLs are wall-clock) or RabbitMQ."""
    async with server(request.param, tmp_path, time_scale=1.0) as found:
        yield found


def _wait_for(ch: pika.adapters.blocking_connection.BlockingChannel, queue: str, n: int,
              timeout_s: float = 10.0) -> list[tuple[bytes, dict[str, object], float]]:
    got: list[tuple[bytes, dict[str, object], float]] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < n and time.monotonic() < deadline:
        method, props, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            time.sleep(0.02)
            continue
        got.append((body, dict(props.headers or {}), time.monotonic()))
    return got


@pytest.mark.parametrize("how", ["queue-ttl", "message-expiration"])
async def test_a_delay_queue_passes_messages_on_when_their_time_is_up(url: str, how: str) -> None:
    work, delay = unique("work"), unique("delay")

    def run(connection: pika.BlockingConnection) -> tuple[list[tuple[bytes, str]], float, int]:
        ch = connection.channel()
        ch.queue_declare(work)
        arguments: dict[str, object] = {"x-dead-letter-exchange": "",
                                        "x-dead-letter-routing-key": work}
        if how == "queue-ttl":
            arguments["x-message-ttl"] = 300
        ch.queue_declare(delay, arguments=arguments)
        props = pika.BasicProperties(expiration="300") if how == "message-expiration" else None
        start = time.monotonic()
        for body in (b"one", b"two"):
            ch.basic_publish("", delay, body, props)
        got = _wait_for(ch, work, 2)
        left = ch.queue_declare(delay, passive=True).method.message_count
        ch.queue_delete(delay)
        ch.queue_delete(work)
        deaths = [(body, headers["x-death"][0]["reason"].decode()  # type: ignore[index]
                   if isinstance(headers["x-death"][0]["reason"], bytes)  # type: ignore[index]
                   else headers["x-death"][0]["reason"])  # type: ignore[index]
                  for body, headers, _ in got]
        late = max((at - start for _, _, at in got), default=-1.0)
        return deaths, late, left

    deaths, late, left = await session(url, run)
    assert deaths == [(b"one", "expired"), (b"two", "expired")]
    assert 0.25 <= late < 5.0, late  # not before its time, and soon after it
    assert left == 0


async def test_an_unexpired_message_at_the_head_holds_back_the_expired_behind_it(
    url: str,
) -> None:
    """Per-message TTLs expire at the head only (RabbitMQ): a long one first keeps a short
    one behind it in the queue."""
    work, delay = unique("work"), unique("delay")

    def run(connection: pika.BlockingConnection) -> tuple[int, int]:
        ch = connection.channel()
        ch.queue_declare(work)
        ch.queue_declare(delay, arguments={"x-dead-letter-exchange": "",
                                           "x-dead-letter-routing-key": work})
        ch.basic_publish("", delay, b"long", pika.BasicProperties(expiration="60000"))
        ch.basic_publish("", delay, b"short", pika.BasicProperties(expiration="100"))
        time.sleep(1.0)
        passed_on = ch.queue_declare(work, passive=True).method.message_count
        waiting = ch.queue_declare(delay, passive=True).method.message_count
        ch.queue_delete(delay)
        ch.queue_delete(work)
        return passed_on, waiting

    assert await session(url, run) == (0, 2)


@pytest.mark.parametrize("how", ["queue-ttl", "message-expiration"])
async def test_messages_that_expired_while_the_gateway_was_down_are_passed_on(
    tmp_path: Path, how: str,
) -> None:
    work, delay = unique("work"), unique("delay")
    async with amqp_gateway(tmp_path / "data", time_scale=1.0) as gateway:

        def before(connection: pika.BlockingConnection) -> None:
            ch = connection.channel()
            ch.queue_declare(work, durable=True)
            arguments: dict[str, object] = {"x-dead-letter-exchange": "",
                                            "x-dead-letter-routing-key": work}
            if how == "queue-ttl":
                arguments["x-message-ttl"] = 1000
            ch.queue_declare(delay, durable=True, arguments=arguments)
            ch.basic_publish("", delay, b"late", pika.BasicProperties(
                delivery_mode=2, expiration="1000" if how == "message-expiration" else None))

        await session(gateway.url, before)
        await gateway.stop()
        await asyncio.sleep(1.2)  # its time is up while nobody serves it
        await gateway.start()

        def after(connection: pika.BlockingConnection) -> list[bytes]:
            return [body for body, _, _ in _wait_for(connection.channel(), work, 1)]

        assert await session(gateway.url, after) == [b"late"]
