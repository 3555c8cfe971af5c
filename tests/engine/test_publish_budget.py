"""The bytes of publishes the back end stores at once (`EngineConfig.max_publish_bytes`, every
front end together): a publish that does not fit waits its turn, in order; one larger than the
whole budget goes alone; a cancelled wait or a failed store gives its room back."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from gateway.backend import OutMessage
from gateway.backend.memory import InMemoryBackend
from gateway.engine.budget import PublishBudget
from gateway.engine.config import EngineConfig
from gateway.engine.engine import Engine
from gateway.errors import InvalidArgument, Unavailable

from .harness import TOPIC, Harness, idle

MiB = 1 << 20


class Gated(InMemoryBackend):
    """Stores a publish only when the test opens its gate; records what reached it."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.reached: list[bytes] = []
        self.gates: dict[bytes, asyncio.Future[None]] = {}

    async def publish(self, topic: str, messages: Sequence[OutMessage]) -> list[str]:
        first = messages[0].body[:1]
        self.reached.append(first)
        gate = self.gates[first] = asyncio.get_running_loop().create_future()
        await gate
        return await super().publish(topic, messages)

    def let_through(self, name: bytes, error: Exception | None = None) -> None:
        gate = self.gates.pop(name)
        if error is None:
            gate.set_result(None)
        else:
            gate.set_exception(error)


async def gated(budget_mb: int = 1) -> tuple[Harness, Gated]:
    h = Harness()
    backend = Gated(h.clock)
    h.backend = backend
    h.engine = Engine(backend, h.registry, h.clock,
                      EngineConfig(backend_name="memory", max_publish_bytes=budget_mb * MiB))
    await h.engine.start()
    return h, backend


def body(name: bytes, size: int) -> list[OutMessage]:
    return [OutMessage(name + b"." * (size - 1))]


async def test_publishes_over_the_budget_wait_their_turn_in_order() -> None:
    h, backend = await gated(1)
    a = asyncio.create_task(h.engine.publish(TOPIC, body(b"a", 600_000)))
    b = asyncio.create_task(h.engine.publish(TOPIC, body(b"b", 600_000)))
    c = asyncio.create_task(h.engine.publish(TOPIC, body(b"c", 100)))
    await idle()
    # b does not fit beside a; c would, but waits behind b (no overtaking).
    assert backend.reached == [b"a"]
    assert h.engine.publish_budget.waiting == 2
    backend.let_through(b"a")
    await idle()
    assert a.done() and backend.reached == [b"a", b"b", b"c"]
    backend.let_through(b"b")
    backend.let_through(b"c")
    await asyncio.gather(b, c)
    assert h.engine.publish_budget.used == 0
    assert [m.body[:1] for m in await h.stored(TOPIC)] == [b"a", b"b", b"c"]


async def test_a_publish_larger_than_the_budget_goes_alone() -> None:
    h, backend = await gated(1)
    big = asyncio.create_task(h.engine.publish(TOPIC, body(b"B", 3 * MiB)))
    small = asyncio.create_task(h.engine.publish(TOPIC, body(b"s", 10)))
    await idle()
    assert backend.reached == [b"B"]
    backend.let_through(b"B")
    await idle()
    assert backend.reached == [b"B", b"s"]
    backend.let_through(b"s")
    await asyncio.gather(big, small)


async def test_a_failed_store_or_a_cancelled_wait_gives_the_room_back() -> None:
    h, backend = await gated(1)
    a = asyncio.create_task(h.engine.publish(TOPIC, body(b"a", 900_000)))
    b = asyncio.create_task(h.engine.publish(TOPIC, body(b"b", 900_000)))
    c = asyncio.create_task(h.engine.publish(TOPIC, body(b"c", 900_000)))
    await idle()
    b.cancel()  # a caller gone (its deadline passed) while it waited
    await idle()
    backend.let_through(b"a", Unavailable("store down"))
    with pytest.raises(Unavailable):
        await a
    await idle()
    assert backend.reached == [b"a", b"c"]
    assert b.cancelled()
    backend.let_through(b"c")
    await c
    assert h.engine.publish_budget.used == 0
    assert h.engine.publish_budget.waiting == 0


async def test_a_refused_publish_takes_no_room() -> None:
    h, backend = await gated(1)
    with pytest.raises(InvalidArgument):
        await h.engine.publish(TOPIC, [OutMessage(b"x", {"": "empty key"})])
    assert h.engine.publish_budget.used == 0 and backend.reached == []


async def test_room_given_just_as_the_wait_is_cancelled_is_given_back() -> None:
    budget = PublishBudget(10)

    async def hold(size: int, release: asyncio.Event) -> None:
        await budget.take(size)
        try:
            await release.wait()
        finally:
            budget.give(size)

    first_done = asyncio.Event()
    first = asyncio.create_task(hold(10, first_done))
    await idle()
    second = asyncio.create_task(hold(5, asyncio.Event()))
    await idle()
    first_done.set()
    await first  # gives the room to `second`, whose task has not run yet
    second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second
    assert budget.used == 0 and budget.waiting == 0


def test_the_budget_is_checked() -> None:
    with pytest.raises(InvalidArgument, match="max_publish_bytes"):
        EngineConfig(max_publish_bytes=1000)
