"""A topic exchange of many long wildcard bindings does not stall the gateway.

Before, every publish through a topic exchange matched each binding with a table of its words
times the routing key's words: 2,000 bindings such as `#.a.#.a...` (120 words, about 1 KiB of
topology each, far inside a connection's budget) and a routing key of 120 words held the event
loop 1.2 s per publish, every other client waiting (a victim's passive declare took seconds).
Matching now costs a few integer operations per binding word: the event loop never stops
for long, and what matches is unchanged (tests/unit/test_amqp_topic_routing.py). Nor does a
batch of messages published together, nor one message through an exchange of more bindings than
a turn's share: it is routed a share at a time."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import aio_pika
import pytest
from pamqp import commands

from adapters.amqp.frontend import routeturns
from adapters.amqp.frontend.framing import method_frame
from adapters.amqp.frontend.routing import ROUTE_TURN
from tests.amqp_front import PerTurn, RawAmqp, amqp_gateway, stored, unique

BINDINGS = 2000
FLOOD_BINDINGS = 1000
WORDS = 60


class LoopLag:
    """The longest the event loop went without a turn while it runs."""

    def __init__(self) -> None:
        self.worst = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            self.worst = max(self.worst, now - last)
            last = now

    def __enter__(self) -> LoopLag:
        self._task = asyncio.ensure_future(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()


async def test_long_wildcard_bindings_do_not_stall_other_clients(tmp_path: Path) -> None:
    async with amqp_gateway(tmp_path / "data") as gw:
        attacker = await aio_pika.connect(gw.url)
        victim = await aio_pika.connect(gw.url)
        try:
            channel = await attacker.channel()
            exchange = await channel.declare_exchange(unique("t"), aio_pika.ExchangeType.TOPIC,
                                                      auto_delete=True)
            sink = await channel.declare_queue(unique("sink"), auto_delete=True)
            stem = ".".join(["#", "a"] * WORDS)
            await asyncio.gather(*(sink.bind(exchange, f"{stem}.z{i}")
                                   for i in range(BINDINGS)))
            victim_channel = await victim.channel()
            mine = await victim_channel.declare_queue(unique("mine"), auto_delete=True)
            key = ".".join(["a"] * (2 * WORDS))
            with LoopLag() as lag:
                for i in range(3):  # a new routing key each time: nothing cached helps
                    await exchange.publish(aio_pika.Message(b"x"), routing_key=f"{key}.z{i}")
                    started = time.perf_counter()
                    await victim_channel.declare_queue(mine.name, passive=True)
                    answered = time.perf_counter() - started
                    assert answered < 0.5, f"the victim waited {answered:.2f} s"
            assert lag.worst < 0.5, f"the event loop stalled {lag.worst:.2f} s"
            assert (await sink.declare()).message_count == 3  # every publish matched (z{i})
        finally:
            await attacker.close()
            await victim.close()


async def test_a_flood_through_many_bindings_is_routed_a_turn_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Messages published together are stored as one batch: before, the whole batch was routed
    in one turn of the event loop (300 messages through an exchange of 1,000 bindings: 300,000
    bindings tested while every other client waited; with long topic wildcards, seconds).
    Counted: between two turns, at most `ROUTE_TURN` bindings and one message's more."""
    turns = PerTurn()
    matches = routeturns.binding_matches

    def counting(*args: Any) -> bool:
        turns.total += 1
        return matches(*args)

    monkeypatch.setattr(routeturns, "binding_matches", counting)
    async with amqp_gateway(tmp_path / "data") as gw:
        raw = await RawAmqp.connect(gw.port)
        try:
            exchange, sink = unique("t"), unique("sink")
            raw.send(1, commands.Exchange.Declare(exchange=exchange, exchange_type="topic",
                                                  auto_delete=True))
            await raw.expect(commands.Exchange.DeclareOk)
            raw.send(1, commands.Queue.Declare(queue=sink, auto_delete=True))
            await raw.expect(commands.Queue.DeclareOk)
            raw.send_raw(b"".join(method_frame(1, commands.Queue.Bind(
                queue=sink, exchange=exchange, routing_key=f"k{i}.#"))
                for i in range(FLOOD_BINDINGS)))
            for _ in range(FLOOD_BINDINGS):
                await raw.expect(commands.Queue.BindOk)
            turns.start()
            for _ in range(300):
                raw.publish(1, b"x", "k0.a", exchange=exchange)
            assert await stored(raw, sink, 300) == 300
            turns.stop()
        finally:
            raw.close()
    assert turns.total >= 300 * FLOOD_BINDINGS
    assert turns.most <= ROUTE_TURN + FLOOD_BINDINGS, f"{turns.most} bindings tested in one turn"


async def test_dead_letters_through_many_bindings_are_routed_a_turn_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same for a batch of dead letters (messages expiring together in a delay queue whose
    dead-letter exchange has many bindings): before, routed all in one turn."""
    turns = PerTurn()
    matches = routeturns.binding_matches

    def counting(*args: Any) -> bool:
        turns.total += 1
        return matches(*args)

    monkeypatch.setattr(routeturns, "binding_matches", counting)
    async with amqp_gateway(tmp_path / "data") as gw:
        raw = await RawAmqp.connect(gw.port)
        try:
            exchange, sink, delay = unique("t"), unique("sink"), unique("delay")
            raw.send(1, commands.Exchange.Declare(exchange=exchange, exchange_type="topic",
                                                  auto_delete=True))
            await raw.expect(commands.Exchange.DeclareOk)
            raw.send(1, commands.Queue.Declare(queue=sink, auto_delete=True))
            await raw.expect(commands.Queue.DeclareOk)
            raw.send(1, commands.Queue.Declare(queue=delay, auto_delete=True, arguments={
                "x-message-ttl": 200, "x-dead-letter-exchange": exchange,
                "x-dead-letter-routing-key": "k0.a"}))
            await raw.expect(commands.Queue.DeclareOk)
            raw.send_raw(b"".join(method_frame(1, commands.Queue.Bind(
                queue=sink, exchange=exchange, routing_key=f"k{i}.#"))
                for i in range(FLOOD_BINDINGS)))
            for _ in range(FLOOD_BINDINGS):
                await raw.expect(commands.Queue.BindOk)
            turns.start()  # publishing through the default exchange tests no binding
            for _ in range(300):
                raw.publish(1, b"x", delay)
            assert await stored(raw, sink, 300) == 300
            turns.stop()
        finally:
            raw.close()
    assert turns.total >= 300 * FLOOD_BINDINGS
    assert turns.most <= ROUTE_TURN + FLOOD_BINDINGS, f"{turns.most} bindings tested in one turn"


async def test_one_message_through_more_bindings_than_a_turn_is_routed_a_share_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One message through an exchange of 6,000 bindings: before, all of them were tested in
    one turn of the event loop (at the topology budget, 100,000 long wildcard patterns: 1-3 s
    with every client waiting). Counted: at most `ROUTE_TURN` bindings in one turn, and what
    matches is the same (the bindings it should reach, and no other)."""
    turns = PerTurn()
    matches = routeturns.binding_matches

    def counting(*args: Any) -> bool:
        turns.total += 1
        return matches(*args)

    monkeypatch.setattr(routeturns, "binding_matches", counting)
    many = 3 * ROUTE_TURN
    async with amqp_gateway(tmp_path / "data") as gw:
        raw = await RawAmqp.connect(gw.port)
        try:
            exchange, sink, other = unique("t"), unique("sink"), unique("other")
            raw.send(1, commands.Exchange.Declare(exchange=exchange, exchange_type="topic",
                                                  auto_delete=True))
            await raw.expect(commands.Exchange.DeclareOk)
            for queue in (sink, other):
                raw.send(1, commands.Queue.Declare(queue=queue, auto_delete=True))
                await raw.expect(commands.Queue.DeclareOk)
            raw.send_raw(b"".join(method_frame(1, commands.Queue.Bind(
                queue=other if i % 2 else sink, exchange=exchange, routing_key=f"#.k{i}.#"))
                for i in range(many)))
            for _ in range(many):
                await raw.expect(commands.Queue.BindOk)
            turns.start()
            raw.publish(1, b"x", f"a.k{many - 2}.b", exchange=exchange)  # the last share's
            assert await stored(raw, sink, 1) == 1
            turns.stop()
            raw.send(1, commands.Queue.Declare(queue=other, passive=True))
            assert (await raw.expect(commands.Queue.DeclareOk)).message_count == 0
        finally:
            raw.close()
    assert turns.total >= many
    assert turns.most <= ROUTE_TURN, f"{turns.most} bindings tested in one turn"
