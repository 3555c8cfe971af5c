"""Queue length limits (`x-max-length`, `x-overflow`) with unmodified pika, each case against
the gateway's AMQP front end (on its embedded store and on the real RabbitMQ as its back end) and
against the real RabbitMQ on 127.0.0.1:5672 itself, with the same calls: past
the limit the oldest ready messages are dead-lettered with reason `maxlen` (drop-head), or a
publish is refused and nacked (reject-publish; reject-publish-dlx dead-letters it too, with
reason `maxlen`); deliveries not yet acknowledged do not count.
(Before, declaring either argument was refused with 406.)"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aio_pika
import pika
import pytest
from pika.exceptions import ChannelClosedByBroker, NackError

from gateway.client import GatewayClient
from tests.amqp_front import free_port, unique
from tests.e2e.test_amqp_frontend_client_parity import server, session
from tests.e2e.test_amqp_frontend_restart import connect
from tests.e2e.test_amqp_frontend_transactions import SERVERS, _get_all


@pytest.fixture(params=[*SERVERS, "gateway-on-rabbitmq"])
async def url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """The time not scaled: a delivery held unacknowledged does not time out in the test."""
    async with server(request.param, tmp_path, time_scale=1.0) as found:
        yield found


def _outcomes(ch: Any, queue: str, count: int) -> list[str]:
    """Publish m0.. m{count-1} (header n: its number) with confirms: each one's ack or nack."""
    outcomes = []
    for i in range(count):
        try:
            ch.basic_publish("", queue, b"m%d" % i, pika.BasicProperties(headers={"n": i}))
            outcomes.append("ack")
        except NackError:
            outcomes.append("nack")
    return outcomes


def dead_letters(ch: Any, dead: str, count: int) -> list[tuple[bytes, Any]]:
    """The first `count` messages of queue `dead` (bodies and properties), 10 s at most."""
    found: list[tuple[bytes, Any]] = []
    deadline = time.monotonic() + 10
    while len(found) < count and time.monotonic() < deadline:
        method, properties, body = ch.basic_get(dead, auto_ack=True)
        if method is None:
            time.sleep(0.05)
            continue
        found.append((body, properties))
    return found


def _death(properties: Any) -> str:
    deaths = (properties.headers or {}).get("x-death") or [{}]
    return str(deaths[0].get("reason"))


async def test_drop_head_keeps_the_newest_and_dead_letters_the_rest_as_maxlen(url: str) -> None:
    def run(connection: pika.BlockingConnection) -> tuple[int, list[bytes], list[tuple[bytes,
                                                                                        str]]]:
        queue, dead = unique("mlq"), unique("mld")
        ch = connection.channel()
        ch.confirm_delivery()
        ch.queue_declare(dead)
        ch.queue_declare(queue, arguments={"x-max-length": 3, "x-dead-letter-exchange": "",
                                           "x-dead-letter-routing-key": dead})
        for i in range(6):
            ch.basic_publish("", queue, b"m%d" % i)
        count = ch.queue_declare(queue, passive=True).method.message_count
        kept = _get_all(ch, queue, 1.0)
        deaths = [(body, _death(props)) for body, props in dead_letters(ch, dead, 3)]
        return count, kept, deaths

    count, kept, deaths = await session(url, run)
    assert count == 3
    assert kept == [b"m3", b"m4", b"m5"]
    assert deaths == [(b"m0", "maxlen"), (b"m1", "maxlen"), (b"m2", "maxlen")]


async def test_unacknowledged_deliveries_do_not_count(url: str) -> None:
    def run(connection: pika.BlockingConnection) -> tuple[bytes, list[bytes]]:
        queue = unique("mlq")
        ch = connection.channel()
        ch.confirm_delivery()
        ch.queue_declare(queue, arguments={"x-max-length": 2})
        ch.basic_publish("", queue, b"m0")
        held = None
        deadline = time.monotonic() + 10
        while held is None and time.monotonic() < deadline:
            held, _, body = ch.basic_get(queue)  # not acked: in flight
        assert held is not None
        for i in range(1, 5):
            ch.basic_publish("", queue, b"m%d" % i)
        other = connection.channel()
        kept = _get_all(other, queue, 1.0)
        ch.basic_ack(held.delivery_tag)
        return body, kept

    held, kept = await session(url, run)
    assert held == b"m0"
    assert kept == [b"m3", b"m4"]


async def test_a_push_consumers_unacknowledged_delivery_stays_while_the_head_is_dropped(
    url: str,
) -> None:
    def run(connection: pika.BlockingConnection) -> tuple[list[bytes], list[bytes]]:
        queue = unique("mlq")
        ch = connection.channel()
        ch.confirm_delivery()
        ch.queue_declare(queue, arguments={"x-max-length": 3})
        consumer = connection.channel()
        consumer.basic_qos(prefetch_count=1)
        held: list[bytes] = []
        consumer.basic_consume(queue, lambda c, m, p, body: held.append(body))
        ch.basic_publish("", queue, b"m0")
        deadline = time.monotonic() + 10
        while not held and time.monotonic() < deadline:
            connection.process_data_events(time_limit=0.05)
        for i in range(1, 10):
            ch.basic_publish("", queue, b"m%d" % i)
        connection.process_data_events(time_limit=0.3)  # prefetch 1: nothing more comes
        left = _get_all(ch, queue, 1.0)
        consumer.close()
        return held, left

    held, left = await session(url, run)
    assert held == [b"m0"]
    assert left == [b"m7", b"m8", b"m9"]


async def test_reject_publish_nacks_what_does_not_fit(url: str) -> None:
    def run(connection: pika.BlockingConnection) -> tuple[list[str], list[bytes]]:
        queue = unique("mlq")
        ch = connection.channel()
        ch.confirm_delivery()
        ch.queue_declare(queue, arguments={"x-max-length": 2, "x-overflow": "reject-publish"})
        return _outcomes(ch, queue, 4), _get_all(ch, queue, 1.0)

    outcomes, kept = await session(url, run)
    assert outcomes == ["ack", "ack", "nack", "nack"]
    assert kept == [b"m0", b"m1"]


async def test_reject_publish_dlx_nacks_and_dead_letters_what_does_not_fit(url: str) -> None:
    def run(connection: pika.BlockingConnection) -> tuple[list[str], list[bytes],
                                                          list[tuple[bytes, dict[str, Any]]]]:
        queue, dead = unique("mlq"), unique("mld")
        ch = connection.channel()
        ch.confirm_delivery()
        ch.queue_declare(dead)
        ch.queue_declare(queue, arguments={"x-max-length": 2, "x-overflow": "reject-publish-dlx",
                                           "x-dead-letter-exchange": "",
                                           "x-dead-letter-routing-key": dead})
        outcomes = _outcomes(ch, queue, 4)
        deaths = [(body, dict(props.headers or {})) for body, props in dead_letters(ch, dead, 2)]
        return outcomes, _get_all(ch, queue, 1.0), deaths

    outcomes, kept, deaths = await session(url, run)
    assert outcomes == ["ack", "ack", "nack", "nack"]
    assert kept == [b"m0", b"m1"]
    assert [body for body, _ in deaths] == [b"m2", b"m3"]
    for i, (_, headers) in enumerate(deaths, start=2):
        death = headers["x-death"][0]
        assert (death["reason"], death["count"], death["exchange"]) == ("maxlen", 1, "")
        assert death["routing-keys"] == [death["queue"]]
        assert headers["x-first-death-reason"] == "maxlen"
        assert headers["n"] == i  # the publisher's own headers, with their types


async def test_reject_publish_dlx_without_a_dead_letter_exchange_drops_the_refused(
    url: str,
) -> None:
    def run(connection: pika.BlockingConnection) -> tuple[list[str], list[bytes]]:
        queue = unique("mlq")
        ch = connection.channel()
        ch.confirm_delivery()
        ch.queue_declare(queue, arguments={"x-max-length": 1, "x-overflow": "reject-publish-dlx"})
        return _outcomes(ch, queue, 3), _get_all(ch, queue, 1.0)

    assert await session(url, run) == (["ack", "nack", "nack"], [b"m0"])


async def test_a_limit_of_zero_keeps_nothing(url: str) -> None:
    def run(connection: pika.BlockingConnection) -> list[bytes]:
        queue = unique("mlq")
        ch = connection.channel()
        ch.confirm_delivery()
        ch.queue_declare(queue, arguments={"x-max-length": 0})
        for i in range(3):
            ch.basic_publish("", queue, b"m%d" % i)
        return _get_all(ch, queue, 0.5)

    assert await session(url, run) == []


@pytest.mark.parametrize(("arguments", "field"), [
    ({"x-max-length": -1}, "x-max-length"),
    ({"x-max-length": "ten"}, "x-max-length"),
    ({"x-max-length": 5, "x-overflow": "sideways"}, "x-overflow"),
])
async def test_bad_limits_are_refused_naming_the_argument(
    url: str, arguments: dict[str, Any], field: str,
) -> None:
    def run(connection: pika.BlockingConnection) -> tuple[int, str]:
        ch = connection.channel()
        with pytest.raises(ChannelClosedByBroker) as closed:
            ch.queue_declare(unique("mlq"), arguments=arguments)
        return closed.value.reply_code, str(closed.value.reply_text)

    code, text = await session(url, run)
    assert code == 406
    assert field in text


async def test_a_different_limit_on_redeclare_is_inequivalent(url: str) -> None:
    def run(connection: pika.BlockingConnection) -> int:
        queue = unique("mlq")
        ch = connection.channel()
        ch.queue_declare(queue, arguments={"x-max-length": 3})
        ch.queue_declare(queue, arguments={"x-max-length": 3})  # the same: fine
        with pytest.raises(ChannelClosedByBroker) as closed:
            ch.queue_declare(queue, arguments={"x-max-length": 4})
        return closed.value.reply_code

    assert await session(url, run) == 406


async def test_the_limit_outlives_a_kill_9_and_trims_a_backlog_at_declare(tmp_path: Path) -> None:
    """Gateway only: a durable queue keeps its limit across kill -9; a queue declared with a
    limit over a topic that already holds more (published through the gRPC API) is trimmed."""
    data, port, grpc_port = tmp_path / "data", free_port(), free_port()
    queue, backlog = unique("mlq"), unique("mlb")

    def serve() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "serve", "--data-dir", str(data),
             "--listen", f"127.0.0.1:{grpc_port}", "--amqp-listen", f"127.0.0.1:{port}",
             "--log-level", "warning"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    proc = serve()
    try:
        connection = await connect(port)
        ch = await connection.channel()
        await ch.declare_queue(queue, durable=True, arguments={"x-max-length": 2})
        await connection.close()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    proc = serve()
    try:
        connection = await connect(port)
        ch = await connection.channel()
        for i in range(4):
            await ch.default_exchange.publish(aio_pika.Message(b"m%d" % i), routing_key=queue)
        assert await _drain(await ch.declare_queue(queue, passive=True)) == [b"m2", b"m3"]
        async with GatewayClient(f"127.0.0.1:{grpc_port}") as client:
            await client.publish(backlog, [b"b%d" % i for i in range(5)])
        limited = await ch.declare_queue(backlog, durable=True, arguments={"x-max-length": 2})
        assert limited.declaration_result.message_count == 2
        assert await _drain(limited) == [b"b3", b"b4"]
        await connection.close()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


async def _drain(queue: aio_pika.abc.AbstractQueue) -> list[bytes]:
    got = []
    while (message := await queue.get(fail=False, timeout=5)) is not None:
        got.append(message.body)
        await message.ack()
    return got
