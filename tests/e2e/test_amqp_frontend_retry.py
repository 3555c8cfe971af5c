"""Document 001's retry semantics for AMQP clients (aio-pika), against `gateway plan`.

A queue declared with `x-retry-interval` (10 s, run 100 times faster: time scale 0.01) and a
dead-letter exchange: a consumer that nacks every time gets 17 deliveries at the interval (the
first and 16 retries), then the message sits in the queue bound to the dead-letter exchange
with the routing key; without one it is gone. requeue=false dead-letters at once; a delivery not
acknowledged within 1 minute is a failure; a consumer that disconnects gives its deliveries
back at once, without a failure counted.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aio_pika
import pytest
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage, AbstractRobustConnection

from adapters import builtin_registry
from adapters.amqp.backend import RabbitMQBackend
from gateway.core.plan import plan
from gateway.engine.clock import SystemClock
from tests.amqp_front import AmqpGateway, amqp_gateway, unique

SCALE = 0.01
INTERVAL_S = 10
RABBITMQ_URL = os.environ.get("GATEWAY_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")


@pytest.fixture(params=["embedded", "rabbitmq"])
async def gw(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[AmqpGateway]:
    """The same rules on the embedded store and on a real RabbitMQ behind the gateway."""
    settings: dict[str, object] = {}
    if request.param == "rabbitmq":
        settings["backend"] = RabbitMQBackend(RABBITMQ_URL, clock=SystemClock())
    async with amqp_gateway(tmp_path / "data", time_scale=SCALE, **settings) as gateway:
        yield gateway


@pytest.fixture
async def conn(gw: AmqpGateway) -> AsyncIterator[AbstractRobustConnection]:
    connection = await aio_pika.connect_robust(gw.url)
    try:
        yield connection
    finally:
        await connection.close()


async def dead_letter_setup(ch: AbstractChannel, *, dlx: bool = True,
                            routing_key: str | None = None) -> tuple[str, str]:
    """A work queue (its dead letters through `dlx`, direct) and the queue bound there."""
    work, dead, exchange = unique("work"), unique("dead"), unique("dlx")
    arguments: dict[str, object] = {"x-retry-interval": INTERVAL_S}
    if dlx:
        arguments["x-dead-letter-exchange"] = exchange
        if routing_key is not None:
            arguments["x-dead-letter-routing-key"] = routing_key
        x = await ch.declare_exchange(exchange, aio_pika.ExchangeType.DIRECT, durable=True)
        dead_queue = await ch.declare_queue(dead, durable=True)
        await dead_queue.bind(x, routing_key=routing_key or work)
    await ch.declare_queue(work, durable=True, arguments=arguments)
    return work, dead


async def nack_every_time(ch: AbstractChannel, name: str, count: int,
                          requeue: bool = True) -> list[tuple[float, AbstractIncomingMessage]]:
    queue = await ch.declare_queue(name, passive=True)
    seen: list[tuple[float, AbstractIncomingMessage]] = []
    done = asyncio.Event()

    async def on_message(message: AbstractIncomingMessage) -> None:
        seen.append((time.monotonic(), message))
        await message.nack(requeue=requeue)
        if len(seen) >= count:
            done.set()

    tag = await queue.consume(on_message)
    await asyncio.wait_for(done.wait(), 30)
    await asyncio.sleep(3 * INTERVAL_S * SCALE)  # nothing more comes
    await queue.cancel(tag)
    return seen


async def wait_for_message(ch: AbstractChannel, name: str, timeout: float = 5.0
                           ) -> AbstractIncomingMessage:
    queue = await ch.declare_queue(name, passive=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        message = await queue.get(fail=False)
        if message is not None:
            return message
        await asyncio.sleep(0.05)
    raise AssertionError(f"nothing arrived on {name}")


async def test_nacks_follow_the_plan_then_the_dead_letter_exchange(
    conn: AbstractRobustConnection,
) -> None:
    ch = await conn.channel()
    work, dead = await dead_letter_setup(ch)
    registry = builtin_registry()
    policy = registry.policy("rabbitmq", {"x_retry_interval_s": str(INTERVAL_S),
                                          "x_dead_letter_exchange": "dlx"})
    expected = plan(policy, topic=work, group=work)
    assert expected.total_attempts == 17
    await ch.default_exchange.publish(
        aio_pika.Message(b"poison", headers={"order": "42"}, message_id="m-1"),
        routing_key=work)
    seen = await nack_every_time(ch, work, expected.total_attempts)
    assert len(seen) == 17
    start = seen[0][0]
    for (at, message), step in zip(seen, expected.attempts, strict=True):
        assert message.redelivered == (step.attempt > 1)
        assert message.headers.get("x-delivery-count", 0) == step.retries
        # Never before the plan's time; late only by the scheduling slack of a loaded machine.
        assert at - start >= step.at_ms * SCALE / 1000 - 0.02, (step.attempt, at - start)
        assert at - start <= step.at_ms * SCALE / 1000 + 1.5, (step.attempt, at - start)
    letter = await wait_for_message(ch, dead)
    assert letter.body == b"poison" and letter.message_id == "m-1"
    assert letter.routing_key == work and letter.headers["order"] == "42"
    assert letter.headers["x-first-death-reason"] == "delivery_limit"
    assert letter.headers["x-first-death-queue"] == work
    (death,) = letter.headers["x-death"]
    assert death["queue"] == work and death["reason"] == "delivery_limit"
    await letter.ack()
    assert await (await ch.declare_queue(work, passive=True)).get(fail=False) is None


async def test_without_a_dead_letter_exchange_the_message_is_discarded(
    conn: AbstractRobustConnection,
) -> None:
    ch = await conn.channel()
    work, _ = await dead_letter_setup(ch, dlx=False)
    await ch.default_exchange.publish(aio_pika.Message(b"poison"), routing_key=work)
    seen = await nack_every_time(ch, work, 17)
    assert len(seen) == 17
    assert (await ch.declare_queue(work, passive=True)).declaration_result.message_count == 0


async def test_reject_without_requeue_dead_letters_at_once_with_the_given_routing_key(
    conn: AbstractRobustConnection,
) -> None:
    ch = await conn.channel()
    work, dead = await dead_letter_setup(ch, routing_key="parked")
    await ch.default_exchange.publish(aio_pika.Message(b"bad"), routing_key=work)
    seen = await nack_every_time(ch, work, 1, requeue=False)
    assert len(seen) == 1
    letter = await wait_for_message(ch, dead)
    assert letter.body == b"bad" and letter.routing_key == "parked"
    assert letter.headers["x-first-death-reason"] == "rejected"
    await letter.ack()


async def test_the_default_exchange_as_dead_letter_exchange(
    conn: AbstractRobustConnection,
) -> None:
    ch = await conn.channel()
    work, dead = unique("work"), unique("dead")
    await ch.declare_queue(dead)
    await ch.declare_queue(work, arguments={"x-dead-letter-exchange": "",
                                            "x-dead-letter-routing-key": dead})
    await ch.default_exchange.publish(aio_pika.Message(b"x"), routing_key=work)
    await nack_every_time(ch, work, 1, requeue=False)
    assert (await wait_for_message(ch, dead)).body == b"x"


async def test_a_delivery_not_acknowledged_within_a_minute_is_a_failure(
    conn: AbstractRobustConnection,
) -> None:
    ch = await conn.channel()
    work, _ = await dead_letter_setup(ch, dlx=False)
    await ch.default_exchange.publish(aio_pika.Message(b"slow"), routing_key=work)
    queue = await ch.declare_queue(work, passive=True)
    seen: list[tuple[float, AbstractIncomingMessage]] = []

    async def on_message(message: AbstractIncomingMessage) -> None:
        seen.append((time.monotonic(), message))
        if len(seen) == 2:
            await message.ack()

    await queue.consume(on_message)
    for _ in range(100):
        if len(seen) >= 2:
            break
        await asyncio.sleep(0.05)
    (t1, first), (t2, second) = seen
    # 1 minute ack timeout + 10 s interval, at time scale 0.01: 0.7 s.
    assert t2 - t1 >= (60 + INTERVAL_S) * SCALE - 0.02
    assert second.redelivered and second.headers["x-delivery-count"] == 1
    await asyncio.sleep(0.8)
    assert len(seen) == 2  # the ack stopped it
    await first.ack()  # a late ack of the timed-out delivery harms nothing


async def test_a_consumer_that_disconnects_gives_its_deliveries_back_at_once(
    gw: AmqpGateway,
) -> None:
    name = unique()
    first = await aio_pika.connect(gw.url)
    ch = await first.channel()
    await ch.set_qos(prefetch_count=10)
    queue = await ch.declare_queue(name, durable=True,
                                   arguments={"x-retry-interval": 1800})
    for i in range(3):
        await ch.default_exchange.publish(aio_pika.Message(b"%d" % i), routing_key=name)
    got: list[AbstractIncomingMessage] = []

    async def hold(message: AbstractIncomingMessage) -> None:
        got.append(message)

    await queue.consume(hold)
    for _ in range(100):
        if len(got) == 3:
            break
        await asyncio.sleep(0.02)
    assert len(got) == 3
    await first.close()  # unacknowledged: all three go back to the queue, not counted
    second = await aio_pika.connect(gw.url)
    try:
        ch2 = await second.channel()
        again = await ch2.declare_queue(name, passive=True)
        bodies = []
        for _ in range(3):
            message = await again.get(timeout=5)
            assert message.redelivered and "x-delivery-count" not in (message.headers or {})
            bodies.append(message.body)
            await message.ack()
        assert sorted(bodies) == [b"0", b"1", b"2"]
    finally:
        await second.close()


async def test_message_ttl_dead_letters_expired_messages(
    conn: AbstractRobustConnection,
) -> None:
    ch = await conn.channel()
    work, dead = await dead_letter_setup(ch)
    await ch.default_exchange.publish(aio_pika.Message(b"old", expiration=0.05),
                                      routing_key=work)
    await ch.default_exchange.publish(aio_pika.Message(b"fresh"), routing_key=work)
    await asyncio.sleep(0.2)
    fresh = await wait_for_message(ch, work)
    assert fresh.body == b"fresh"
    await fresh.ack()
    letter = await wait_for_message(ch, dead)
    assert letter.body == b"old" and letter.headers["x-first-death-reason"] == "expired"


def test_the_plan_followed_is_gateway_plans() -> None:
    """`gateway plan --policy rabbitmq --retry-interval-s 10 --dlx X` prints the timeline the
    tests above observe over AMQP: 17 deliveries, 10 s apart, then the dead-letter exchange."""
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "plan", "--policy", "rabbitmq",
         "--retry-interval-s", str(INTERVAL_S), "--dlx", "dlx", "--json"],
        capture_output=True, text=True, timeout=60, check=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    printed = json.loads(done.stdout)
    policy = builtin_registry().policy("rabbitmq", {"x_retry_interval_s": str(INTERVAL_S),
                                                    "x_dead_letter_exchange": "dlx"})
    expected = plan(policy, topic="topic", group="group")
    assert [(a["attempt"], a["at_ms"], a["retries"]) for a in printed["attempts"]] == [
        (step.attempt, step.at_ms, step.retries) for step in expected.attempts]
    assert len(printed["attempts"]) == 17 and printed["max_retries"] == 16
    assert [a["at_ms"] for a in printed["attempts"]] == [i * INTERVAL_S * 1000 for i in range(17)]
