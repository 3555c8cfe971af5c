"""`wait` returns when a group has news: a publish wakes the groups waiting now, and a group
that was not waiting sees the new messages at its next `wait` (a publish does not visit every
group of the topic)."""

from __future__ import annotations

import asyncio
import pathlib

from gateway.backend.base import OutMessage
from gateway.store import EmbeddedStore

T0 = 1_700_000_000_000


async def test_publish_wakes_waiting_groups_and_others_see_it_next_time(
    tmp_path: pathlib.Path,
) -> None:
    store = EmbeddedStore(tmp_path, lambda: T0, fsync=False)
    await store.open()
    try:
        for group in ("waiting", "idle"):
            assert await store.fetch("t", group, 10, T0) == []
        waiter = asyncio.ensure_future(store.wait("t", "waiting", 30.0))
        await asyncio.sleep(0.05)
        topic = store._catalog.topics["t"]
        assert {g.name for g in topic.waiting} == {"waiting"}
        await store.publish("t", [OutMessage(body=b"news")])
        await asyncio.wait_for(waiter, 5.0)  # woken, long before its 30 s
        assert topic.waiting == set()
        # "idle" was not waiting: its next wait returns at once all the same.
        await asyncio.wait_for(store.wait("t", "idle", 30.0), 5.0)
        (got,) = await store.fetch("t", "idle", 10, T0)
        assert got.body == b"news"
        # Having fetched everything, it waits again (here: until its short timeout).
        loop = asyncio.get_running_loop()
        started = loop.time()
        await store.wait("t", "idle", 0.3)
        assert loop.time() - started >= 0.25
        assert topic.waiting == set()
    finally:
        await store.close()
