"""Consumer priorities (`basic.consume` argument `x-priority`), with unmodified pika against the
gateway's AMQP front end and against the real RabbitMQ on 127.0.0.1:5672: a queue's messages go
to its highest-priority consumer that has prefetch room; a lower one gets messages only while
every higher one is full. The argument is an integer (any width); another type closes the
channel with 406 PRECONDITION_FAILED; consume arguments the server does not know are ignored.
Before, the gateway ignored every consume argument: its consumers shared the messages."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from tests.amqp_front import unique
from tests.e2e.test_amqp_frontend_client_parity import server, session


@pytest.fixture(params=["gateway", "rabbitmq"])
async def url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """The gateway on its embedded store (its time not scaled: deliveries held unacked are not
    failed within the test) or RabbitMQ."""
    async with server(request.param, tmp_path, time_scale=1.0) as found:
        yield found


def _pump(connection: pika.BlockingConnection, got: dict[str, list[tuple[int, bytes]]],
          total: int, timeout_s: float = 10.0, quiet_s: float = 0.5) -> None:
    """Take deliveries until `total` arrived, then `quiet_s` more (nothing else may come)."""
    deadline = time.monotonic() + timeout_s
    while sum(map(len, got.values())) < total and time.monotonic() < deadline:
        connection.process_data_events(time_limit=0.05)
    end = time.monotonic() + quiet_s
    while time.monotonic() < end:
        connection.process_data_events(time_limit=0.05)


def _high_and_low(connection: pika.BlockingConnection, queue: str
                  ) -> tuple[dict[str, list[tuple[int, bytes]]], dict[str, BlockingChannel]]:
    """Consumers "high" (x-priority 10) and "low" (0), prefetch 5 each, on channels of their
    own; what each gets (delivery tag, body) and their channels."""
    got: dict[str, list[tuple[int, bytes]]] = {"high": [], "low": []}
    channels: dict[str, BlockingChannel] = {}
    for name, priority in (("high", 10), ("low", 0)):
        ch = connection.channel()
        ch.basic_qos(prefetch_count=5)

        def on_message(_ch: Any, method: Any, _props: Any, body: bytes,
                       name: str = name) -> None:
            got[name].append((method.delivery_tag, body))
        ch.basic_consume(queue, on_message, arguments={"x-priority": priority})
        channels[name] = ch
    return got, channels


async def test_the_highest_priority_consumer_with_room_gets_the_messages(url: str) -> None:
    queue = unique("prio")

    def run(connection: pika.BlockingConnection) -> list[dict[str, list[bytes]]]:
        setup = connection.channel()
        setup.queue_declare(queue)
        got, channels = _high_and_low(connection, queue)
        for i in range(20):
            setup.basic_publish("", queue, f"m{i:02d}".encode())
        steps = []
        for total in (10, 15, 20):
            _pump(connection, got, total)
            steps.append({k: [body for _, body in v] for k, v in got.items()})
            if got["high"]:
                channels["high"].basic_ack(got["high"][-1][0], multiple=True)
        setup.queue_delete(queue)
        return steps

    steps = await session(url, run)
    first = [f"m{i:02d}".encode() for i in range(20)]
    assert steps == [
        {"high": first[:5], "low": first[5:10]},
        {"high": first[:5] + first[10:15], "low": first[5:10]},
        {"high": first[:5] + first[10:20], "low": first[5:10]},
    ]


@pytest.mark.parametrize("arguments", [{"x-priority": -5}, {"x-priority": 2**40},
                                       {"x-unknown-argument": "ignored"}])
async def test_an_integer_priority_and_unknown_arguments_are_taken(
    url: str, arguments: dict[str, object],
) -> None:
    queue = unique("prio")

    def run(connection: pika.BlockingConnection) -> bool:
        ch = connection.channel()
        ch.queue_declare(queue)
        ch.basic_consume(queue, lambda *_: None, arguments=arguments)
        ch.queue_delete(queue)
        return ch.is_open

    assert await session(url, run)


@pytest.mark.parametrize(("value", "kind"), [("10", "longstr"), (True, "bool"),
                                             (None, "void"), ({"a": 1}, "table")])
async def test_a_priority_that_is_not_an_integer_closes_the_channel(
    url: str, value: object, kind: str,
) -> None:
    queue = unique("prio")

    def run(connection: pika.BlockingConnection) -> tuple[int, str]:
        ch = connection.channel()
        ch.queue_declare(queue, auto_delete=True)
        try:
            ch.basic_consume(queue, lambda *_: None, arguments={"x-priority": value})
        except pika.exceptions.ChannelClosedByBroker as exc:
            return exc.reply_code, exc.reply_text
        finally:
            connection.channel().queue_delete(queue)
        return 0, ""

    code, text = await session(url, run)
    assert code == 406
    assert "x-priority" in text and f"expected integer, got {kind}" in text


async def test_a_lower_consumer_given_room_while_the_higher_was_full_does_not_take_later_messages(
    url: str,
) -> None:
    """The lower consumer had room offered while the higher one was full and the queue empty;
    once the higher one has room again, what is published next still goes to it."""
    queue = unique("prio")

    def run(connection: pika.BlockingConnection) -> list[dict[str, list[bytes]]]:
        setup = connection.channel()
        setup.queue_declare(queue)
        got, channels = _high_and_low(connection, queue)
        steps = []
        for round_ in range(3):
            for i in range(5):
                setup.basic_publish("", queue, f"r{round_}m{i}".encode())
            _pump(connection, got, 5 * (round_ + 1))
            steps.append({k: [body for _, body in v] for k, v in got.items()})
            channels["high"].basic_ack(got["high"][-1][0], multiple=True)
            # A round trip on its channel: the ack is taken before the next publishes (the
            # broker's channels run apart; without it a publish could overtake the ack).
            channels["high"].basic_qos(prefetch_count=5)
        setup.queue_delete(queue)
        return steps

    steps = await session(url, run)
    sent = [[f"r{r}m{i}".encode() for i in range(5)] for r in range(3)]
    assert steps == [
        {"high": sent[0], "low": []},
        {"high": sent[0] + sent[1], "low": []},
        {"high": sent[0] + sent[1] + sent[2], "low": []},
    ]


async def test_priorities_hold_across_connections(url: str) -> None:
    """The consumers are on two connections: the lower one still gets messages only while the
    higher one is full."""
    queue = unique("prio")

    def run(connection: pika.BlockingConnection) -> dict[str, list[bytes]]:
        other = pika.BlockingConnection(pika.URLParameters(url))
        try:
            setup = connection.channel()
            setup.queue_declare(queue)
            got: dict[str, list[bytes]] = {"high": [], "low": []}
            for name, priority, conn in (("low", 0, other), ("high", 10, connection)):
                ch = conn.channel()
                ch.basic_qos(prefetch_count=3)

                def on_message(_ch: Any, _method: Any, _props: Any, body: bytes,
                               name: str = name) -> None:
                    got[name].append(body)
                ch.basic_consume(queue, on_message, arguments={"x-priority": priority})
            for i in range(8):
                setup.basic_publish("", queue, f"m{i}".encode())
            deadline = time.monotonic() + 10
            while sum(map(len, got.values())) < 6 and time.monotonic() < deadline:
                connection.process_data_events(time_limit=0.02)
                other.process_data_events(time_limit=0.02)
            end = time.monotonic() + 0.5
            while time.monotonic() < end:
                connection.process_data_events(time_limit=0.02)
                other.process_data_events(time_limit=0.02)
            setup.queue_delete(queue)
            return got
        finally:
            other.close()

    sent = [f"m{i}".encode() for i in range(8)]
    assert await session(url, run) == {"high": sent[:3], "low": sent[3:6]}
