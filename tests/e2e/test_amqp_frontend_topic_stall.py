"""A topic exchange of many long wildcard bindings does not stall the gateway.

Before, every publish through a topic exchange matched each binding with a table of its words
times the routing key's words: 2,000 bindings such as `#.a.#.a...` (120 words, about 1 KiB of
topology each, far inside a connection's budget) and a routing key of 120 words held the event
loop 1.2 s per publish, every other client waiting (a victim's passive declare took seconds).
Matching now costs a few integer operations per binding word: the event loop never stops
for long, and what matches is unchanged (tests/unit/test_amqp_topic_routing.py)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import aio_pika

from tests.amqp_front import amqp_gateway, unique

BINDINGS = 2000
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
