"""Published messages not yet stored are bounded over every AMQP connection together
(`[amqp] max_pending_publish_mb`), not only per connection.

Before, each connection could hold 64 MiB of them and nothing bounded their sum: N publishers
made the gateway hold N x 64 MiB. Here the bound is 1 MiB and the store is held shut while
six connections publish 300 KiB messages (14 MiB in all, far below each connection's own
limit): the messages read and not yet stored, summed over the connections at every turn of the
event loop, stay within the bound, connections wait (no error), and once the store opens every
message, a 1.5 MiB one larger than the bound included, is confirmed and stored."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aio_pika
import pytest
from pamqp import commands

from adapters.amqp.frontend import publishing
from tests.amqp_front import AmqpGateway, RawAmqp, amqp_gateway, stored, unique

BOUND = 1 << 20
CONNECTIONS = 6
MESSAGES = 8
BODY = 300 << 10


@pytest.fixture
async def gw(tmp_path: Path) -> AsyncIterator[AmqpGateway]:
    async with amqp_gateway(tmp_path / "data", amqp_max_pending_publish_mb=1) as gateway:
        yield gateway


class Held:
    """The connections' published bytes not yet stored, summed at every turn of the event
    loop: the most seen."""

    def __init__(self, front: Any) -> None:
        self.front = front
        self.most = 0
        self._stopped = False

    def now(self) -> int:
        return sum(conn.pending_publish_bytes for conn in self.front.connections)

    def start(self) -> None:
        asyncio.get_running_loop().call_soon(self._tick)

    def _tick(self) -> None:
        self.most = max(self.most, self.now())
        if not self._stopped:
            asyncio.get_running_loop().call_soon(self._tick)

    def stop(self) -> None:
        self._stopped = True


async def publisher(url: str, queue: str, bodies: list[bytes]) -> int:
    connection = await aio_pika.connect(url)
    try:
        channel = await connection.channel(publisher_confirms=True)
        confirms = [channel.default_exchange.publish(aio_pika.Message(body), routing_key=queue)
                    for body in bodies]
        return len(await asyncio.gather(*confirms))
    finally:
        await connection.close()


async def test_connections_together_hold_no_more_than_the_bound(
    gw: AmqpGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert gw.app is not None
    front = gw.app.front_ends["amqp"].front  # type: ignore[attr-defined]
    opened = asyncio.Event()
    store = publishing._store

    async def held_shut(*args: Any) -> Any:
        await opened.wait()
        return await store(*args)

    monkeypatch.setattr(publishing, "_store", held_shut)
    raw = await RawAmqp.connect(gw.port)
    queue = unique("room")
    raw.send(1, commands.Queue.Declare(queue=queue))
    await raw.expect(commands.Queue.DeclareOk)
    held = Held(front)
    held.start()
    batches = [[bytes([i]) * BODY for _ in range(MESSAGES)] for i in range(CONNECTIONS)]
    batches[0].append(b"L" * (3 * BOUND // 2))  # larger than the bound: still goes, alone
    total = sum(len(batch) for batch in batches)
    tasks = [asyncio.ensure_future(publisher(gw.url, queue, batch)) for batch in batches]
    try:
        # Until the bound is reached: the connections stop being read (before, they were read
        # on past it, up to their own 64 MiB each).
        for _ in range(600):
            if held.now() >= BOUND - BODY or held.most > BOUND:
                break
            await asyncio.sleep(0.01)
        for _ in range(20):  # a while more with the store shut: nothing more is taken in
            await asyncio.sleep(0.01)
        assert BOUND - BODY <= held.now() <= BOUND
        assert front.ctx.room.waiting > 0  # connections wait: no error
        opened.set()
        assert await asyncio.wait_for(asyncio.gather(*tasks), 60) == [
            len(batch) for batch in batches]
        assert await stored(raw, queue, total) == total
    finally:
        held.stop()
        opened.set()
        for task in tasks:
            task.cancel()
        raw.close()
    assert held.most <= 3 * BOUND // 2 + 4096  # the large one alone (and its properties)
    assert front.ctx.room.most == held.most
    assert front.ctx.room.held == 0
