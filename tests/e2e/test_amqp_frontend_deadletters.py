"""Dead-letter exchanges as an aio-pika client sees them: a message taken just under the size
limit is still dead-lettered (the `x-death` headers the gateway writes do not count against the
limit), a dead letter the engine refuses for good is dropped without holding back the ones after
it, `x-death` keeps one entry per queue and reason, and a headers exchange matches dead letters
on typed header values as it matches what clients publish."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aio_pika
import pytest
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage, AbstractRobustConnection

from adapters.amqp.frontend import deadletters
from gateway.errors import InvalidArgument
from tests.amqp_front import AmqpGateway, amqp_gateway, unique

LIMIT = 2048


@pytest.fixture
async def gw(tmp_path: Path) -> AsyncIterator[AmqpGateway]:
    async with amqp_gateway(tmp_path / "data", max_message_bytes=LIMIT) as gateway:
        yield gateway


@pytest.fixture
async def ch(gw: AmqpGateway) -> AsyncIterator[AbstractChannel]:
    connection: AbstractRobustConnection = await aio_pika.connect_robust(gw.url)
    try:
        yield await connection.channel()
    finally:
        await connection.close()


async def fanout_dlx(ch: AbstractChannel) -> tuple[str, str]:
    """A work queue dead-lettering into a fanout exchange, and the queue bound there."""
    work, dead, exchange = unique("work"), unique("dead"), unique("dlx")
    x = await ch.declare_exchange(exchange, aio_pika.ExchangeType.FANOUT, durable=True)
    queue = await ch.declare_queue(dead, durable=True)
    await queue.bind(x)
    await ch.declare_queue(work, durable=True, arguments={"x-dead-letter-exchange": exchange})
    return work, dead


async def reject_all(ch: AbstractChannel, name: str, count: int) -> None:
    queue = await ch.declare_queue(name, passive=True)
    for _ in range(count):
        message = await get(queue)
        await message.reject(requeue=False)


async def get(queue: aio_pika.abc.AbstractQueue, timeout: float = 5.0) -> AbstractIncomingMessage:
    deadline = time.monotonic() + timeout
    while True:
        message = await queue.get(fail=False)
        if message is not None:
            return message
        assert time.monotonic() < deadline, f"nothing in {queue.name}"
        await asyncio.sleep(0.05)


async def drain(ch: AbstractChannel, name: str, count: int) -> list[AbstractIncomingMessage]:
    queue = await ch.declare_queue(name, passive=True)
    out = [await get(queue) for _ in range(count)]
    for message in out:
        await message.ack()
    return out


async def test_a_message_taken_at_the_size_limit_is_dead_lettered(ch: AbstractChannel) -> None:
    work, dead = await fanout_dlx(ch)
    sizes = (1000, 1800, 1850)  # the last two with their x-death headers are past the limit
    for size in sizes:
        await ch.default_exchange.publish(aio_pika.Message(b"b" * size, headers={"n": size}),
                                          routing_key=work)
    await reject_all(ch, work, len(sizes))
    got = await drain(ch, dead, len(sizes))
    assert sorted(len(m.body) for m in got) == sorted(sizes)
    for message in got:
        assert message.headers["n"] == len(message.body)
        deaths = message.headers["x-death"]
        assert isinstance(deaths, list) and deaths[0]["queue"] == work
    # and the queue's dead letters keep flowing
    await ch.default_exchange.publish(aio_pika.Message(b"small"), routing_key=work)
    await reject_all(ch, work, 1)
    assert [m.body for m in await drain(ch, dead, 1)] == [b"small"]


async def test_a_dead_letter_refused_for_good_does_not_hold_back_the_others(
    ch: AbstractChannel, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Whatever the engine refuses a copy for (here: a body it takes as `bad`), that one copy
    is dropped and the others, in the same batch and after it, arrive."""
    work, dead = await fanout_dlx(ch)
    refuse = deadletters.DeadLetterRouter._dead_letter

    def spoiled(*args: object) -> tuple[object, int, list[object]]:
        message, grown, deaths = refuse(*args)  # type: ignore[arg-type]
        if message.body == b"bad":
            message.properties["x-gateway-forged"] = "1"  # the engine refuses reserved names
        return message, grown, deaths

    monkeypatch.setattr(deadletters.DeadLetterRouter, "_dead_letter", staticmethod(spoiled))
    for body in (b"one", b"bad", b"two"):
        await ch.default_exchange.publish(aio_pika.Message(body), routing_key=work)
    await reject_all(ch, work, 3)
    got = await drain(ch, dead, 2)
    assert sorted(m.body for m in got) == [b"one", b"two"]
    await ch.default_exchange.publish(aio_pika.Message(b"later"), routing_key=work)
    await reject_all(ch, work, 1)
    assert [m.body for m in await drain(ch, dead, 1)] == [b"later"]
    assert issubclass(InvalidArgument, deadletters.REFUSED)


async def test_a_dead_letter_cycle_counts_in_one_x_death_entry(ch: AbstractChannel) -> None:
    """As RabbitMQ: dead-lettered twice from the same queue for the same reason, one entry of
    count 2 (a cycle does not grow the message without end)."""
    work, dead = await fanout_dlx(ch)
    await ch.default_exchange.publish(aio_pika.Message(b"again"), routing_key=work)
    await reject_all(ch, work, 1)
    (first,) = await drain(ch, dead, 1)
    await ch.default_exchange.publish(
        aio_pika.Message(first.body, headers=dict(first.headers)), routing_key=work)
    await reject_all(ch, work, 1)
    (second,) = await drain(ch, dead, 1)
    deaths = second.headers["x-death"]
    assert isinstance(deaths, list) and len(deaths) == 1
    assert deaths[0]["count"] == 2 and deaths[0]["queue"] == work


async def test_a_headers_exchange_matches_dead_letters_on_typed_values(
    ch: AbstractChannel,
) -> None:
    hx = await ch.declare_exchange(unique("hx"), aio_pika.ExchangeType.HEADERS, durable=True)
    by_int = await ch.declare_queue(unique("int"), durable=True)
    await by_int.bind(hx, arguments={"x-match": "all", "n": 5})
    by_str = await ch.declare_queue(unique("str"), durable=True)
    await by_str.bind(hx, arguments={"x-match": "all", "s": "yes"})
    work = unique("work")
    await ch.declare_queue(work, durable=True, arguments={"x-dead-letter-exchange": hx.name})
    await hx.publish(aio_pika.Message(b"direct-int", headers={"n": 5}), routing_key="")
    await ch.default_exchange.publish(aio_pika.Message(b"dead-int", headers={"n": 5}),
                                      routing_key=work)
    await ch.default_exchange.publish(aio_pika.Message(b"dead-str", headers={"s": "yes"}),
                                      routing_key=work)
    await reject_all(ch, work, 2)
    assert sorted(m.body for m in await drain(ch, by_int.name, 2)) == [b"dead-int",
                                                                       b"direct-int"]
    assert [m.body for m in await drain(ch, by_str.name, 1)] == [b"dead-str"]


async def test_an_expiry_cycle_is_broken_where_it_closes(ch: AbstractChannel) -> None:
    """As RabbitMQ: a queue whose expired messages are dead-lettered back to itself (here
    through a fanout exchange it is bound to, with a second queue watching) gets its own dead
    letter back never: the copy goes to the watcher once. Before, the message went round for
    ever (a thousand copies in the watcher within three seconds, the CPU busy)."""
    exchange = await ch.declare_exchange(unique("loop"), aio_pika.ExchangeType.FANOUT)
    work = await ch.declare_queue(unique("a-work"), arguments={
        "x-message-ttl": 0, "x-dead-letter-exchange": exchange.name})
    seen = await ch.declare_queue(unique("z-seen"))
    await work.bind(exchange)
    await seen.bind(exchange)
    # Nobody consumes `work`: its messages expire at its head (a consumer waiting for them
    # would get them, TTL 0 or not, as on RabbitMQ).
    await ch.default_exchange.publish(aio_pika.Message(b"first"), routing_key=work.name)
    (first,) = await drain(ch, seen.name, 1)
    # The second message comes behind every copy of the first still going round: once its
    # own dead letter is seen, nothing of the first can still be on its way.
    await ch.default_exchange.publish(aio_pika.Message(b"second"), routing_key=work.name)
    bodies = [first.body]
    while bodies[-1] != b"second":
        bodies += [m.body for m in await drain(ch, seen.name, 1)]
        assert len(bodies) < 10, "the first message went round again"
    assert bodies == [b"first", b"second"]
    deaths = first.headers["x-death"]
    assert isinstance(deaths, list) and len(deaths) == 1
    assert deaths[0]["reason"] == "expired" and deaths[0]["count"] == 1


async def test_each_death_has_its_own_reason(ch: AbstractChannel) -> None:
    """A message that expired in one queue and then was rejected in the next has two deaths:
    `expired` there and `rejected` here (as RabbitMQ writes them). Before, every later death
    took the first one's reason (`x-first-death-reason`): the rejection was written
    `expired`."""
    to_work = await ch.declare_exchange(unique("to-work"), aio_pika.ExchangeType.FANOUT)
    to_dead = await ch.declare_exchange(unique("to-dead"), aio_pika.ExchangeType.FANOUT)
    delay = await ch.declare_queue(unique("delay"), arguments={
        "x-message-ttl": 0, "x-dead-letter-exchange": to_work.name})
    work = await ch.declare_queue(unique("work"), arguments={
        "x-dead-letter-exchange": to_dead.name})
    dead = await ch.declare_queue(unique("dead"))
    await work.bind(to_work)
    await dead.bind(to_dead)

    # Nobody consumes the delay queue: its messages expire at its head.
    await ch.default_exchange.publish(aio_pika.Message(b"m"), routing_key=delay.name)
    await reject_all(ch, work.name, 1)
    (message,) = await drain(ch, dead.name, 1)
    deaths = message.headers["x-death"]
    assert isinstance(deaths, list)
    assert [(d["queue"], d["reason"]) for d in deaths] == [  # type: ignore[index]
        (work.name, "rejected"), (delay.name, "expired")]
    assert message.headers["x-first-death-reason"] == "expired"
    assert message.headers["x-first-death-queue"] == delay.name


async def test_a_delay_queue_retry_loop_with_rejections_goes_on(ch: AbstractChannel) -> None:
    """The common retry loop (work -> reject -> delay queue -> expire -> work) has a rejection
    in it: it is not a cycle to break, and the message comes back to work as often as it is
    rejected there."""
    to_work = await ch.declare_exchange(unique("to-work"), aio_pika.ExchangeType.FANOUT)
    to_delay = await ch.declare_exchange(unique("to-delay"), aio_pika.ExchangeType.FANOUT)
    work = await ch.declare_queue(unique("work"), arguments={
        "x-dead-letter-exchange": to_delay.name})
    delay = await ch.declare_queue(unique("delay"), arguments={
        "x-message-ttl": 0, "x-dead-letter-exchange": to_work.name})
    await work.bind(to_work)
    await delay.bind(to_delay)

    # Nobody consumes the delay queue: its messages expire at its head.
    await ch.default_exchange.publish(aio_pika.Message(b"m"), routing_key=work.name)
    for round_ in (1, 2, 3):
        message = await get(work)
        if round_ > 1:
            deaths = message.headers["x-death"]
            assert isinstance(deaths, list)
            assert [(d["queue"], d["reason"], d["count"]) for d in deaths] == [  # type: ignore[index]
                (delay.name, "expired", round_ - 1), (work.name, "rejected", round_ - 1)]
        await message.reject(requeue=False)
