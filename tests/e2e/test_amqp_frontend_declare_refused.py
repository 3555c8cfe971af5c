"""`queue.declare` makes the queue's group in the back end; refused there, the declaration is
undone (`adapters.amqp.frontend.queues.keep_group`). Through aio-pika against a gateway whose
back end refuses the groups of some topics: the declare fails with the channel closed as the
refusal maps (the back end away: 506 RESOURCE_ERROR, a bad argument: 406), no half-made queue
is left (a passive declare says 404, also after a restart; the name can be declared again with
other settings; nothing stays counted against the topology budget), and other clients go on.

Declared queues take no room under `--max-groups` (see test_amqp_frontend_declared_groups): the
limit is met at `basic.consume`, so a back end that refuses the group stands in for the refusal
here (its store away, a broker error)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aio_pika
import aiormq
import pytest

from adapters.amqp.frontend.context import Context
from gateway.backend.memory import InMemoryBackend
from gateway.errors import GatewayError, InvalidArgument, TooManyGroups, Unavailable
from tests.amqp_front import AmqpGateway, unique

REFUSALS: dict[str, GatewayError] = {
    "away": Unavailable("the store is not answering"),
    "bad": InvalidArgument("group", "x", "a group the back end takes"),
    "full": TooManyGroups(2),
}
"""A topic's first part (before "-"): how its group is refused."""


class Refusing(InMemoryBackend):
    """Refuses the groups of topics named in REFUSALS while `refusing`; `hold`, when set, keeps
    a group's creation waiting until it is set (a declare under way)."""

    def __init__(self) -> None:
        super().__init__()
        self.refusing = True
        self.hold: asyncio.Event | None = None
        self.asked: list[str] = []

    async def create_group(self, topic: str, group: str, *, at_end: bool = False) -> bool:
        self.asked.append(topic)
        if self.hold is not None:
            await self.hold.wait()
        refused = REFUSALS.get(topic.split("-")[0])
        if self.refusing and refused is not None:
            raise refused
        return await super().create_group(topic, group, at_end=at_end)


@pytest.fixture
async def gw(tmp_path: Path) -> AsyncIterator[AmqpGateway]:
    gateway = AmqpGateway(tmp_path / "data", backend=Refusing(), max_groups=2)
    await gateway.start()
    try:
        yield gateway
    finally:
        await gateway.stop()


def context(gw: AmqpGateway) -> Context:
    assert gw.app is not None
    ctx: Context = gw.app.front_ends["amqp"].front.ctx  # type: ignore[attr-defined]
    return ctx


def backend(gw: AmqpGateway) -> Refusing:
    assert gw.app is not None and isinstance(gw.app.backend, Refusing)
    return gw.app.backend


def code_of(closed: aiormq.exceptions.ChannelClosed) -> int:
    """The reply code of a channel close (aiormq raises a class of its own for some codes)."""
    if isinstance(closed, aiormq.exceptions.ChannelPreconditionFailed):
        return 406
    if isinstance(closed, aiormq.exceptions.ChannelNotFoundEntity):
        return 404
    code = closed.args[0]
    assert isinstance(code, int), closed.args
    return code


async def refused(connection: aio_pika.abc.AbstractConnection, name: str,
                  **declare: Any) -> int:
    """The reply code of the channel close a declare of `name` gets."""
    channel = await connection.channel()
    with pytest.raises(aiormq.exceptions.ChannelClosed) as caught:
        await channel.declare_queue(name, **declare)
    return code_of(caught.value)


async def exists(connection: aio_pika.abc.AbstractConnection, name: str) -> bool:
    channel = await connection.channel()
    try:
        await channel.declare_queue(name, passive=True)
    except aiormq.exceptions.ChannelNotFoundEntity:
        return False
    await channel.close()
    return True


async def round_trip(connection: aio_pika.abc.AbstractConnection, name: str) -> bytes:
    channel = await connection.channel()
    queue = await channel.declare_queue(name, durable=True)
    await channel.default_exchange.publish(aio_pika.Message(b"still here"), routing_key=name)
    async with asyncio.timeout(10):
        while (got := await queue.get(no_ack=True, fail=False)) is None:
            await asyncio.sleep(0.02)
    await channel.close()
    return got.body


@pytest.mark.parametrize(("kind", "code"), [("away", 506), ("full", 506), ("bad", 406)])
async def test_a_declare_the_back_end_refuses_is_undone(gw: AmqpGateway, kind: str,
                                                        code: int) -> None:
    ctx = context(gw)
    other = await aio_pika.connect(gw.url)  # a client that was there before, and goes on
    connection = await aio_pika.connect(gw.url)
    async with other, connection:
        queues, budget = len(ctx.topology.queues), ctx.topology.budget.total
        for durable in (True, False):
            name = unique(kind)
            assert await refused(connection, name, durable=durable) == code
            assert backend(gw).asked[-1] == name
            assert not await exists(connection, name)
            assert not await exists(other, name)
        assert (len(ctx.topology.queues), ctx.topology.budget.total) == (queues, budget)
        # the connection was not closed (a soft error), and both clients go on
        assert await round_trip(connection, unique("ok")) == b"still here"
        assert await round_trip(other, unique("ok")) == b"still here"
        # once the back end takes it, the name is free for other settings
        name = unique(kind)
        await refused(connection, name, durable=True)
        backend(gw).refusing = False
        channel = await connection.channel()
        await channel.declare_queue(name, durable=False, auto_delete=True)
        assert await exists(other, name)


async def test_a_refused_durable_declare_does_not_come_back_after_a_restart(
        gw: AmqpGateway) -> None:
    name = unique("away")
    connection = await aio_pika.connect(gw.url)
    async with connection:
        await refused(connection, name, durable=True)
    await gw.stop()
    gw.settings["backend"] = Refusing()
    await gw.start()
    connection = await aio_pika.connect(gw.url)
    async with connection:
        assert not await exists(connection, name)
    assert name not in context(gw).topology.queues


async def test_a_declare_of_the_same_name_while_one_is_under_way_is_not_told_ok_for_it(
        gw: AmqpGateway) -> None:
    """A second client declares the name while the first declaration waits for the back end,
    which then refuses it: the second must not be told DeclareOk for a queue that is undone,
    nor bind to it in between."""
    name = unique("away")
    hold = backend(gw).hold = asyncio.Event()
    first = await aio_pika.connect(gw.url)
    second = await aio_pika.connect(gw.url)
    async with first, second:
        one = asyncio.ensure_future(refused(first, name, durable=True))
        async with asyncio.timeout(10):
            while name not in backend(gw).asked:
                await asyncio.sleep(0.01)
        channel = await second.channel()
        two = asyncio.ensure_future(channel.declare_queue(name, durable=True))
        binding = asyncio.ensure_future(bind(gw, name))
        await asyncio.sleep(0.2)  # the second declare and the bind reach the gateway
        hold.set()
        assert await one == 506
        with pytest.raises(aiormq.exceptions.ChannelClosed) as caught:
            await two
        assert code_of(caught.value) == 506, caught.value.args
        with pytest.raises(aiormq.exceptions.ChannelNotFoundEntity):
            await binding
        assert not await exists(second, name)
        assert not any(b.destination == name for exchange in context(gw).topology.exchanges.values()
                       for b in exchange.bindings)
        backend(gw).hold = None
        assert await round_trip(second, unique("ok")) == b"still here"


async def bind(gw: AmqpGateway, name: str) -> None:
    """queue.bind of `name` from a client of its own (aiormq: aio-pika binds Queue objects)."""
    connection = await aiormq.connect(gw.url)
    try:
        channel = await connection.channel()
        await channel.queue_bind(name, "amq.direct", routing_key=name)
    finally:
        await connection.close()


@pytest.mark.parametrize("exclusive", [True, False])
async def test_a_connection_gone_while_its_declare_waits_leaves_no_half_made_queue(
        gw: AmqpGateway, exclusive: bool) -> None:
    """The client goes while the back end makes the group, which it then refuses: no queue is
    left behind, whatever became of the declaration's task."""
    name = unique("away")
    hold = backend(gw).hold = asyncio.Event()
    gone = await aiormq.connect(gw.url)
    channel = await gone.channel()
    declaring = asyncio.ensure_future(channel.queue_declare(name, durable=True,
                                                            exclusive=exclusive))
    async with asyncio.timeout(10):
        while name not in backend(gw).asked:
            await asyncio.sleep(0.01)
    await gone.close()
    declaring.cancel()
    hold.set()
    backend(gw).hold = None
    connection = await aio_pika.connect(gw.url)
    async with connection:
        async with asyncio.timeout(10):
            while name in context(gw).topology.queues or name in context(gw).declaring:
                await asyncio.sleep(0.01)
        assert not await exists(connection, name)
        assert await round_trip(connection, unique("ok")) == b"still here"
