"""The embedded store reads the time from the engine's `Clock` (one clock for every back end)."""

from __future__ import annotations

import asyncio
import pathlib

from gateway.backend.base import OutMessage
from gateway.engine.clock import ManualClock
from gateway.store import EmbeddedStore

T0 = 1_700_000_000_000


async def test_publish_times_come_from_the_clock(tmp_path: pathlib.Path) -> None:
    clock = ManualClock(T0)
    store = EmbeddedStore(tmp_path, clock, fsync=False)
    await store.open()
    try:
        await store.publish("t", [OutMessage(body=b"a")])
        clock.advance(1234)
        await store.publish("t", [OutMessage(body=b"b")])
        got = await store.fetch("t", "g", 10, T0 + 1234)
        assert [m.publish_ms for m in got] == [T0, T0 + 1234]
    finally:
        await store.close()


async def test_wait_ends_when_a_delayed_message_is_due_by_the_clock(
    tmp_path: pathlib.Path,
) -> None:
    clock = ManualClock(T0)
    store = EmbeddedStore(tmp_path, clock, fsync=False)
    await store.open()
    try:
        await store.publish("t", [OutMessage(body=b"d", deliver_at_ms=T0 + 100)])
        assert await store.fetch("t", "g", 10, T0) == []
        clock.advance(100)
        # Due by the clock: no waiting, whatever the timeout (a wall clock would say 2023).
        await asyncio.wait_for(store.wait("t", "g", 600.0), 30)
        (got,) = await store.fetch("t", "g", 10, clock.now_ms())
        assert got.body == b"d"
    finally:
        await store.close()


async def test_a_now_ms_function_is_still_taken(tmp_path: pathlib.Path) -> None:
    """The older form: the clock's `now_ms` function (what `make_backend` passed)."""
    clock = ManualClock(T0)
    store = EmbeddedStore(tmp_path, clock.now_ms, fsync=False)
    await store.open()
    try:
        await store.publish("t", [OutMessage(body=b"a")])
        (got,) = await store.fetch("t", "g", 10, T0)
        assert got.publish_ms == T0
    finally:
        await store.close()
