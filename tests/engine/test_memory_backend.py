"""What the in-memory back end does beyond the contract suite: a manual clock, restarts within
the process, `poke`, `trim` and refusals."""

from __future__ import annotations

import asyncio

import pytest

from gateway.backend.base import OutMessage, Release
from gateway.backend.memory import InMemoryBackend
from gateway.engine.clock import ManualClock
from gateway.engine.config import EngineConfig
from gateway.engine.engine import Engine
from gateway.errors import InvalidArgument, Unavailable

from .harness import T0, Harness, idle


@pytest.fixture
async def mem() -> tuple[InMemoryBackend, ManualClock]:
    clock = ManualClock(T0)
    backend = InMemoryBackend(clock)
    await backend.open()
    return backend, clock


async def test_time_is_the_given_clock(mem: tuple[InMemoryBackend, ManualClock]) -> None:
    backend, clock = mem
    (mid,) = await backend.publish("t", [OutMessage(b"x", deliver_at_ms=T0 + 500)])
    assert mid.startswith(f"{T0:012x}") and len(mid) == 32
    assert await backend.fetch("t", "g", 10, clock.now_ms()) == []
    stats = await backend.stats("t", "g", clock.now_ms())
    assert (stats.delayed, stats.next_visible_ms) == (1, T0 + 500)
    clock.advance(500)
    (got,) = await backend.fetch("t", "g", 10, clock.now_ms())
    assert (got.publish_ms, got.deliver_at_ms, got.lease.position) == (T0, T0 + 500, 1)


async def test_poke_wakes_a_wait_once_the_manual_clock_reaches_a_delayed_message(
    mem: tuple[InMemoryBackend, ManualClock],
) -> None:
    backend, clock = mem
    await backend.publish("t", [OutMessage(b"x", deliver_at_ms=T0 + 60_000)])
    assert await backend.fetch("t", "g", 10, clock.now_ms()) == []
    waiter = asyncio.ensure_future(backend.wait("t", "g", 30.0))
    await idle()
    backend.poke()  # nothing due yet
    await idle()
    assert not waiter.done()
    clock.advance(60_000)
    backend.poke()
    await idle()
    assert waiter.done()
    assert len(await backend.fetch("t", "g", 10, clock.now_ms())) == 1


async def test_a_restart_makes_leases_void_and_their_messages_visible_at_once(
    mem: tuple[InMemoryBackend, ManualClock],
) -> None:
    backend, clock = mem
    await backend.publish("t", [OutMessage(b"a"), OutMessage(b"b"), OutMessage(b"c")])
    a, b, c = await backend.fetch("t", "g", 10, clock.now_ms())
    await backend.ack([c.lease])
    await backend.release([Release(b.lease, T0 + 10_000, attempt=1, retries=1)])
    await backend.close()
    with pytest.raises(Unavailable):
        await backend.fetch("t", "g", 10, clock.now_ms())
    await backend.open()
    await backend.ack([a.lease])  # void after the restart: ignored
    (again,) = await backend.fetch("t", "g", 10, clock.now_ms())
    assert (again.body, again.attempt, again.retries) == (b"a", 0, 0)
    clock.advance(10_000)  # the released one kept its time and counters
    (later,) = await backend.fetch("t", "g", 10, clock.now_ms())
    assert (later.body, later.attempt, later.retries) == (b"b", 1, 1)


async def test_excluded_keys_wait_in_order_for_the_next_fetch(
    mem: tuple[InMemoryBackend, ManualClock],
) -> None:
    backend, clock = mem
    now = clock.now_ms()
    await backend.publish("t", [OutMessage(b"a1", key="a"), OutMessage(b"b1", key="b"),
                                OutMessage(b"a2", key="a"), OutMessage(b"b2", key="b")])
    (b1,) = await backend.fetch("t", "g", 1, now, exclude_keys=frozenset({"a"}))
    (b2,) = await backend.fetch("t", "g", 1, now, exclude_keys=frozenset({"a"}))
    assert (b1.body, b2.body) == (b"b1", b"b2")
    await backend.release([Release(b1.lease, now, 1, 1)])
    got = await backend.fetch("t", "g", 10, now, exclude_keys=frozenset({"b"}))
    assert [m.body for m in got] == [b"a1", b"a2"]
    assert [m.body for m in await backend.fetch("t", "g", 10, now)] == [b"b1"]


async def test_trim_forgets_what_every_group_acked(
    mem: tuple[InMemoryBackend, ManualClock],
) -> None:
    backend, clock = mem
    await backend.publish("t", [OutMessage(b"a"), OutMessage(b"b")])
    assert backend.trim() == 0  # nobody consumes: everything is kept
    got = await backend.fetch("t", "g1", 10, clock.now_ms())
    await backend.ack([got[0].lease])
    assert backend.trim() == 1
    late = await backend.fetch("t", "late", 10, clock.now_ms())
    assert [m.body for m in late] == [b"b"]  # a new group starts at the earliest kept


async def test_last_id_is_the_newest_published_even_once_trimmed(
    mem: tuple[InMemoryBackend, ManualClock],
) -> None:
    backend, clock = mem
    assert await backend.last_id("t") is None
    ids = await backend.publish("t", [OutMessage(b"a"), OutMessage(b"b")])
    got = await backend.fetch("t", "g", 10, clock.now_ms())
    await backend.ack([m.lease for m in got])
    assert backend.trim() == 2
    assert await backend.last_id("t") == ids[-1]


async def test_empty_names_are_refused(mem: tuple[InMemoryBackend, ManualClock]) -> None:
    backend, clock = mem
    with pytest.raises(InvalidArgument, match="topic"):
        await backend.publish("", [OutMessage(b"x")])
    with pytest.raises(InvalidArgument, match="group"):
        await backend.fetch("t", "", 1, clock.now_ms())


async def test_engine_restart_redelivers_what_was_in_flight_at_once() -> None:
    """A gateway restart (the back end outlives the engine): in-flight deliveries come again
    at once with their counters from before (leases are not durable, so the delivery cut short
    is not counted); waiting retries keep their time and counters."""
    h = Harness()
    await h.engine.start()
    spec = h.spec("rabbitmq", {"x_retry_interval_s": 10})
    await h.publish(b"in-flight", b"failed")
    _in_flight, failed = await h.receive(spec)
    assert (await h.fail(failed)).ok
    await h.engine.close()
    engine = Engine(h.backend, h.registry, h.clock, EngineConfig(backend_name="memory"))
    await engine.start()
    try:
        (again,) = await engine.receive(spec, 10, None, 0)
        assert (again.body, again.attempt, again.retries) == (b"in-flight", 1, 0)
        h.clock.advance(10_000)
        (retried,) = await engine.receive(spec, 10, None, 0)
        assert (retried.body, retried.attempt, retried.retries) == (b"failed", 2, 1)
    finally:
        await engine.close()
