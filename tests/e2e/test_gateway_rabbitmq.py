"""The gateway API end to end on the RabbitMQ back end (shared broker on 127.0.0.1:5672).

Policy time is compressed with `time_scale`; RabbitMQ itself holds every retry wait (delay queues)
and routes dead letters through a real dead-letter exchange, which plain aio-pika clients see.
"""

from __future__ import annotations

import asyncio
import itertools
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aio_pika
import pytest
from aio_pika.abc import AbstractIncomingMessage, AbstractRobustConnection
from aio_pika.exceptions import ChannelNotFoundEntity

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from amqp_node import URL, delete_exchanges, delete_queues, plain_connection, ready_in, unique

from adapters.amqp.backend import RabbitMQBackend
from adapters.amqp.naming import RABBITMQ, dead_letter_exchange, rabbitmq_scheme
from adapters.amqp.queues import queue_name, topic_name
from gateway.client import GatewayClient, Message
from gateway.core.properties import DEAD_LETTER_ROUTE, ORIGINAL_QUEUE
from gateway.errors import InvalidArgument
from gateway.server.app import GatewayApp, running_gateway

SCALE = 0.01
"""Policy time runs 100x faster: RabbitMQ's 10 s retry interval is 100 ms."""
INTERVAL_S = 10 * SCALE


@pytest.fixture
async def plain() -> AsyncIterator[AbstractRobustConnection]:
    async with plain_connection() as connection:
        yield connection


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[GatewayApp]:
    async with running_gateway(
        tmp_path / "data", time_scale=SCALE, backend=RabbitMQBackend(URL)
    ) as running:
        yield running


@pytest.fixture
async def client(app: GatewayApp) -> AsyncIterator[GatewayClient]:
    async with GatewayClient(f"127.0.0.1:{app.grpc_port}") as connected:
        yield connected


@asynccontextmanager
async def gateway_client(data: Path, scale: float) -> AsyncIterator[GatewayClient]:
    """A gateway on the shared broker with a fresh back end, and a client of it."""
    async with (
        running_gateway(data, time_scale=scale, backend=RabbitMQBackend(URL)) as running,
        GatewayClient(f"127.0.0.1:{running.grpc_port}") as client,
    ):
        yield client


async def fail_every_time(
    client: GatewayClient,
    topic: str,
    group: str,
    policy: str,
    options: dict[str, str],
    expected: int,
    timeout_s: float = 30.0,
) -> list[tuple[Message, float]]:
    """Fail each delivery until `expected` came; return them with their arrival times."""
    got: list[tuple[Message, float]] = []
    async with client.consume(topic, group, policy=policy, options=options) as stream:
        deadline = time.monotonic() + timeout_s
        while len(got) < expected and time.monotonic() < deadline:
            message = await stream.next(max(0.1, deadline - time.monotonic()))
            if message is None:
                break
            got.append((message, time.monotonic()))
            result = await message.fail()
            assert result.ok, result
        extra = await stream.next(10 * INTERVAL_S)
        assert extra is None, f"unexpected delivery after the last one: {extra}"
    return got


async def first_message(
    connection: AbstractRobustConnection, queue: str, timeout_s: float = 10.0
) -> AbstractIncomingMessage:
    """Consume one message of `queue` with a plain aio-pika consumer and ack it."""
    channel = await connection.channel()
    try:
        declared = await channel.declare_queue(queue, durable=True)
        loop = asyncio.get_running_loop()
        arrived: asyncio.Future[AbstractIncomingMessage] = loop.create_future()

        async def on_message(message: AbstractIncomingMessage) -> None:
            if not arrived.done():
                arrived.set_result(message)
                await message.ack()

        await declared.consume(on_message)
        return await asyncio.wait_for(arrived, timeout_s)
    finally:
        await channel.close()


async def exchange_exists(connection: AbstractRobustConnection, name: str) -> bool:
    channel = await connection.channel()
    try:
        await channel.declare_exchange(name, passive=True)
        return True
    except ChannelNotFoundEntity:
        return False
    finally:
        if not channel.is_closed:
            await channel.close()


async def queue_exists(connection: AbstractRobustConnection, name: str) -> bool:
    try:
        await ready_in(connection, name)
        return True
    except ChannelNotFoundEntity:
        return False


async def test_poison_message_retries_16_times_then_goes_through_the_dlx(
    client: GatewayClient, plain: AbstractRobustConnection
) -> None:
    topic, group = unique("gw.orders"), "billing"
    dlx, dlq, tap = f"{topic}.dlx", f"{topic}.dlq", f"{topic}.audit"
    # A plain client binds its own queue to the dead-letter exchange: only messages really routed
    # through the exchange by routing key reach it.
    channel = await plain.channel()
    exchange = await channel.declare_exchange(dlx, aio_pika.ExchangeType.DIRECT, durable=True)
    audit = await channel.declare_queue(tap, durable=True)
    await audit.bind(exchange, routing_key=topic)
    await channel.close()
    try:
        ids = await client.publish(topic, [b"poison"], properties={"order": "42"})
        options = {"x_retry_interval_s": "10", "x_dead_letter_exchange": dlx}
        got = await fail_every_time(client, topic, group, "rabbitmq", options, 17)

        assert [m.attempt for m, _ in got] == list(range(1, 18))
        assert {m.message_id for m, _ in got} == set(ids)
        assert {m.delivery.topic for m, _ in got} == {topic}  # redelivered in place
        gaps = [later - earlier for (_, earlier), (_, later) in itertools.pairwise(got)]
        assert min(gaps) >= INTERVAL_S * 0.9, gaps
        assert sorted(gaps)[len(gaps) // 2] < INTERVAL_S * 5, gaps

        dead = await first_message(plain, dlq)
        assert dead.body == b"poison" and dead.message_id == ids[0]
        headers = dead.headers or {}
        assert headers["order"] == "42"
        assert headers[ORIGINAL_QUEUE] == topic
        assert DEAD_LETTER_ROUTE not in headers
        assert dead.exchange == dlx and dead.routing_key == topic
        copied = await first_message(plain, tap)
        assert copied.message_id == ids[0]
        assert await ready_in(plain, topic) == 0
        view = await client.describe(topic, group)
        assert view.dead_letter_topic == dlq
    finally:
        await delete_queues(plain, topic, dlq, tap)
        await delete_exchanges(plain, dlx)


async def test_without_dead_letter_exchange_the_message_is_discarded(
    client: GatewayClient, plain: AbstractRobustConnection
) -> None:
    topic, group = unique("gw.discard"), "billing"
    try:
        ids = await client.publish(topic, [b"poison"])
        got = await fail_every_time(
            client, topic, group, "rabbitmq", {"x_retry_interval_s": "10"}, 17
        )
        assert [m.attempt for m, _ in got] == list(range(1, 18))
        assert {m.message_id for m, _ in got} == set(ids)
        assert await ready_in(plain, topic) == 0
        assert not await queue_exists(plain, f"{topic}.dlq")
        assert not await exchange_exists(plain, f"{topic}.dlx")
    finally:
        await delete_queues(plain, topic)


async def test_ack_during_retries_stops_them(
    client: GatewayClient, plain: AbstractRobustConnection
) -> None:
    topic, group = unique("gw.ack"), "billing"
    try:
        await client.publish(topic, [b"flaky"])
        options = {"x_retry_interval_s": "10", "x_dead_letter_exchange": "on"}
        async with client.consume(topic, group, policy="rabbitmq", options=options) as stream:
            for expected in (1, 2, 3):
                message = await stream.next(10)
                assert message is not None and message.attempt == expected
                if expected < 3:
                    assert (await message.fail()).ok
            assert (await message.ack()).ok
            assert await stream.next(10 * INTERVAL_S) is None
        assert await ready_in(plain, topic) == 0
        assert not await queue_exists(plain, f"{topic}.dlq")
    finally:
        await delete_queues(plain, topic)


@pytest.mark.parametrize(
    ("policy", "options", "retry_topic", "dead_letter_topic"),
    [
        ("rocketmq", {"max_retries": "3"}, "%RETRY%{group}", "%DLQ%{group}"),
        ("pulsar", {"max_retries": "2"}, "{topic}-{group}-RETRY", "{topic}-{group}-DLQ"),
    ],
)
async def test_other_dialects_on_rabbitmq(
    client: GatewayClient,
    plain: AbstractRobustConnection,
    policy: str,
    options: dict[str, str],
    retry_topic: str,
    dead_letter_topic: str,
) -> None:
    topic, group = unique("gw.other"), unique("grp")
    retry = retry_topic.format(topic=topic, group=group)
    dead = dead_letter_topic.format(topic=topic, group=group)
    deliveries = int(options["max_retries"]) + 1
    try:
        ids = await client.publish(topic, [b"poison"])
        got = await fail_every_time(client, topic, group, policy, options, deliveries)
        assert [m.attempt for m, _ in got] == list(range(1, deliveries + 1))
        assert {m.message_id for m, _ in got} == set(ids)
        assert got[0][0].delivery.topic == topic
        assert {m.delivery.topic for m, _ in got[1:]} == {retry}
        assert {m.delivery.original_topic for m, _ in got} == {topic}
        # the dead letter sits in a plain queue of that name (escaped for AMQP where needed)
        stored = await first_message(plain, queue_name(dead))
        assert stored.body == b"poison" and stored.message_id == ids[0]
        assert stored.exchange == ""  # no dead-letter exchange outside the rabbitmq dialect
        for name in (topic, retry):
            assert await ready_in(plain, queue_name(name)) == 0
    finally:
        await delete_queues(plain, *(queue_name(n) for n in (topic, retry, dead)))


async def test_retries_pending_at_restart_still_fire(
    tmp_path: Path, plain: AbstractRobustConnection
) -> None:
    scale = 0.2  # 10 s interval = 2 s: long enough to restart the gateway in between
    topic, group = unique("gw.restart"), "billing"
    options = {"x_retry_interval_s": "10", "x_dead_letter_exchange": "on"}
    data = tmp_path / "data"
    try:
        async with gateway_client(data, scale) as client:
            ids = await client.publish(topic, [b"a", b"b"])
            async with client.consume(topic, group, policy="rabbitmq", options=options) as s:
                failed: list[Message] = []
                for _ in ids:
                    message = await s.next(10)
                    assert message is not None and message.attempt == 1
                    failed.append(message)
                for message in failed:
                    assert (await message.fail()).ok
                failed_at = time.monotonic()
        # No gateway runs now: RabbitMQ alone holds both retries, in a delay queue.
        assert await ready_in(plain, topic) == 0
        delay_queues = [f"{topic}.delay.{ms}" for ms in range(1800, 2010, 10)]
        waiting = [await ready_in(plain, q) for q in delay_queues if await queue_exists(plain, q)]
        assert sum(waiting) == 2
        async with (
            gateway_client(data, scale) as client,
            client.consume(topic, group, policy="rabbitmq", options=options) as s,
        ):
            back = [await s.next(10) for _ in ids]
            retried_at = time.monotonic()
            assert all(m is not None for m in back)
            messages = [m for m in back if m is not None]
            assert {m.message_id for m in messages} == set(ids)
            assert [(m.attempt, m.retries) for m in messages] == [(2, 1), (2, 1)]
            for message in messages:
                assert (await message.ack()).ok
            assert await s.next(0.5) is None
        assert retried_at - failed_at >= 10 * scale * 0.9
        assert await ready_in(plain, topic) == 0
    finally:
        await delete_queues(plain, topic)


@pytest.mark.parametrize(
    ("topic", "queue"),
    [
        ("orders", "orders"),
        ("orders.dlq", "orders.dlq"),
        ("persistent://t/ns/in-sub-RETRY", "persistent://t/ns/in-sub-RETRY"),
        ("%RETRY%billing", "+25RETRY+25billing"),
        ("a+b%ü", "a+2Bb+25+C3+BC"),
        # RabbitMQ refuses names in its reserved prefix `amq.` (a server-named queue's)
        ("amq.gen-Xy_1", "amq+2Egen-Xy_1"),
        ("amq.gen-Xy_1.retry", "amq+2Egen-Xy_1.retry"),
        ("amq+2Ex", "amq+2B2Ex"),
        ("Amq.x", "Amq.x"),
    ],
)
def test_topic_names_map_to_amqp_names_reversibly(topic: str, queue: str) -> None:
    assert queue_name(topic) == queue
    assert topic_name(queue) == topic


async def test_dead_letter_declares_the_exchange_and_its_binding(
    client: GatewayClient, plain: AbstractRobustConnection
) -> None:
    topic, group = unique("gw.dlnow"), "billing"
    dlx, dlq = f"{topic}.dlx", f"{topic}.dlq"
    try:
        assert not await exchange_exists(plain, dlx)
        ids = await client.publish(topic, [b"bad"])
        options = {"x_retry_interval_s": "10", "x_dead_letter_exchange": dlx}
        async with client.consume(topic, group, policy="rabbitmq", options=options) as stream:
            message = await stream.next(10)
            assert message is not None and message.message_id == ids[0]
            assert (await message.dead_letter("unparseable")).ok
            assert await stream.next(10 * INTERVAL_S) is None
        dead = await first_message(plain, dlq)
        assert dead.message_id == ids[0] and dead.body == b"bad"
        assert dead.exchange == dlx and dead.routing_key == topic
        # The binding is RabbitMQ's: a plain publisher to the exchange with that key reaches it.
        channel = await plain.channel(publisher_confirms=True)
        exchange = await channel.get_exchange(dlx)
        await exchange.publish(aio_pika.Message(b"plain", message_id="p1"), routing_key=topic)
        await channel.close()
        assert (await first_message(plain, dlq)).message_id == "p1"
    finally:
        await delete_queues(plain, topic, dlq)
        await delete_exchanges(plain, dlx)


def test_dead_letter_exchange_template_takes_the_queue_only() -> None:
    scheme = rabbitmq_scheme(dead_letter_exchange="dlx.{topic}")
    assert dead_letter_exchange(scheme, "orders") == "dlx.orders"
    assert dead_letter_exchange(RABBITMQ, "orders") == "orders.dlx"
    with pytest.raises(InvalidArgument):
        rabbitmq_scheme(dead_letter_exchange="{topic}.{group}.dlx")
