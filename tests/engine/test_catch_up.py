"""A pull receive that finds nothing asks the back end to catch up (`Backend.catch_up`) before it
waits and once more before it answers nothing: a back end whose fetch answers from a buffer a
broker consumer fills (RabbitMQ) can have a published, durable message the buffer has not
received yet. Here a back end whose buffer only `catch_up` fills. (Before, a receive with wait 0
answered nothing, and a long poll waited its whole wait, for a message the back end held.)"""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.backend.base import StoredMessage
from gateway.backend.memory import InMemoryBackend

from .harness import Harness

LONG_POLL_MS = 60_000


class Lagging:
    """Make `backend.fetch` answer only from what `catch_up` brought in."""

    def __init__(self, backend: InMemoryBackend) -> None:
        self.backend = backend
        self.fetch = backend.fetch
        self.brought = 0
        self.asked = 0
        backend.fetch = self.lagging_fetch  # type: ignore[method-assign]
        backend.catch_up = self.catch_up  # type: ignore[method-assign]

    async def lagging_fetch(self, topic: str, group: str, max_messages: int, now_ms: int,
                            **options: Any) -> list[StoredMessage]:
        if self.brought <= 0:
            return []
        got = await self.fetch(topic, group, min(max_messages, self.brought), now_ms, **options)
        self.brought -= len(got)
        return got

    async def catch_up(self, topic: str, group: str) -> bool:
        self.asked += 1
        ready = (await self.backend.stats(topic, group, 0)).ready
        self.brought = ready
        return ready > 0


async def test_a_receive_with_wait_0_finds_what_catch_up_brings_in(h: Harness) -> None:
    lag = Lagging(h.backend)
    spec = h.spec("rocketmq-simple")
    assert await h.receive(spec) == []
    assert lag.asked == 1  # once, not in a loop
    await h.publish(b"a", b"b")
    assert [d.body for d in await h.receive(spec)] == [b"a", b"b"]
    assert lag.asked == 2
    assert await h.receive(spec) == []


async def test_a_long_poll_is_answered_at_once_with_what_catch_up_brings_in(h: Harness) -> None:
    lag = Lagging(h.backend)
    spec = h.spec("rocketmq-simple")
    assert await h.receive(spec) == []  # the group exists: the publish waits for it
    await h.publish(b"a")
    task = asyncio.ensure_future(h.engine.receive(spec, 10, None, LONG_POLL_MS))
    for _ in range(50):
        await asyncio.sleep(0)
    assert task.done()
    assert [d.body for d in task.result()] == [b"a"]
    assert lag.asked == 2
