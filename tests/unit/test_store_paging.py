"""A group's delayed positions beyond what memory keeps wait on disk and are paged in by due time:
each fires once, in time, across reopens, acks, releases and removes racing a page-in."""

from __future__ import annotations

import asyncio
import pathlib
import random
import sqlite3
import time
from collections.abc import Iterator

import pytest

from gateway.backend.base import Lease, OutMessage, Release, StoredMessage
from gateway.store import EmbeddedStore, index, paging
from gateway.store import reader as rd

T0 = 1_700_000_000_000
COUNT = 3_000


@pytest.fixture(autouse=True)
def small_pages(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Memory for 200 delayed positions per group, pages of 64: COUNT is far beyond it."""
    monkeypatch.setattr(index, "MEMORY_HIGH", 200)
    monkeypatch.setattr(index, "MEMORY_KEEP", 100)
    monkeypatch.setattr(index, "PAGE", 64)
    monkeypatch.setattr(index, "PAGE_LOW", 32)
    yield


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


async def opened(path: pathlib.Path, clock: Clock) -> EmbeddedStore:
    store = EmbeddedStore(path, clock, fsync=False)
    await store.open()
    return store


def group_of(store: EmbeddedStore, topic: str = "t", group: str = "g") -> index.GroupIndex:
    found = store._catalog.known_group(topic, group)
    assert found is not None
    return found


async def publish_delayed(store: EmbeddedStore, dues: list[int]) -> list[str]:
    ids: list[str] = []
    for start in range(0, len(dues), 500):
        ids += await store.publish(
            "t", [OutMessage(body=f"m{i}".encode(), deliver_at_ms=dues[i])
                  for i in range(start, min(len(dues), start + 500))])
    return ids


async def drain_until(store: EmbeddedStore, clock: Clock, end_ms: int, step_ms: int,
                      seen: dict[str, int]) -> None:
    """Step the clock to `end_ms`, fetching and acking everything visible at each step; record
    each message's delivery time and fail on a second delivery or an early one."""
    while True:
        while True:
            got = await store.fetch("t", "g", 500, clock.now)
            if not got:
                break
            for message in got:
                assert message.message_id not in seen, "delivered twice"
                assert message.deliver_at_ms <= clock.now, "delivered early"
                seen[message.message_id] = clock.now
            await store.ack([m.lease for m in got])
        state = group_of(store)
        assert len(state.timers) <= index.MEMORY_HIGH + index.PAGE
        if clock.now >= end_ms:
            return
        clock.now = min(end_ms, clock.now + step_ms)


async def test_delayed_publishes_beyond_memory_fire_once_in_time(tmp_path: pathlib.Path) -> None:
    clock = Clock()
    store = await opened(tmp_path, clock)
    rng = random.Random(7)
    dues = [T0 + 1_000 + rng.randrange(60_000) for _ in range(COUNT)]
    try:
        ids = await publish_delayed(store, dues)
        for _ in range(5):  # scans every delayed message (4096 per fetch)
            assert await store.fetch("t", "g", 10, T0) == []
        state = group_of(store)
        assert state.spill_at is not None
        assert len(state.timers) <= index.MEMORY_HIGH
        stats = await store.stats("t", "g", T0)
        assert (stats.delayed, stats.ready) == (COUNT, 0)
        assert stats.next_visible_ms == min(dues)
        seen: dict[str, int] = {}
        await drain_until(store, clock, T0 + 62_000, 250, seen)
        assert set(seen) == set(ids)
        due_of = dict(zip(ids, dues, strict=True))
        late = [seen[i] - due_of[i] for i in ids]
        assert max(late) < 250  # fired at the first step at or after its due time
        assert state.spill_at is None
    finally:
        await store.close()


async def test_released_beyond_memory_survive_reopen(tmp_path: pathlib.Path) -> None:
    clock = Clock()
    store = await opened(tmp_path, clock)
    rng = random.Random(11)
    ids = await store.publish("t", [OutMessage(body=f"m{i}".encode()) for i in range(COUNT)])
    due: dict[str, int] = {}
    got: list[StoredMessage] = []
    while len(got) < COUNT:
        got += await store.fetch("t", "g", 1000, T0)
    releases = []
    for message in got:
        due[message.message_id] = T0 + 1 + rng.randrange(30_000)
        releases.append(Release(message.lease, due[message.message_id], attempt=1, retries=1))
    await store.release(releases)
    assert group_of(store).spill_at is not None
    assert len(group_of(store).timers) <= index.MEMORY_HIGH
    await store.close()

    store = await opened(tmp_path, clock)
    try:
        state = group_of(store)
        assert len(state.timers) == index.MEMORY_KEEP  # only the earliest were loaded
        assert state.spill_at is not None
        assert (await store.stats("t", "g", T0)).delayed == COUNT
        seen: dict[str, int] = {}
        await drain_until(store, clock, T0 + 31_000, 100, seen)
        assert set(seen) == set(ids)
        assert all(0 <= seen[i] - due[i] < 100 for i in ids)
    finally:
        await store.close()


async def test_acks_and_releases_racing_a_page_in(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Leased positions whose rows sort above `spill_at` are acked or released while a page-in
    reads them: no acked one comes back, every released one comes back once."""
    monkeypatch.setattr(index, "PAGE", 1000)
    clock = Clock()
    store = await opened(tmp_path, clock)
    try:
        # 250 released far ahead: the latest 150 go to disk only.
        ids = await store.publish("t", [OutMessage(body=b"x") for _ in range(250)])
        first = await store.fetch("t", "g", 1000, T0)
        await store.release([Release(m.lease, T0 + 100_000 + i, 1, 1)
                             for i, m in enumerate(first)])
        state = group_of(store)
        assert state.spill_at is not None and len(state.timers) == 100
        # 100 published to be delivered at T0 + 200_000: scanned and leased then, their rows
        # (with that time) sort above the spill key.
        late = set(await store.publish(
            "t", [OutMessage(body=b"late", deliver_at_ms=T0 + 200_000) for _ in range(100)]))
        clock.now = T0 + 200_000
        got = await store.fetch("t", "g", 1000, clock.now)
        taken = [m for m in got if m.message_id in late]
        assert len(taken) == 100 and len(got) == 200  # no page-in yet: 100 were in memory
        seen = [m.message_id for m in got]
        await store.ack([m.lease for m in got if m.message_id not in late])

        reading = asyncio.Event()
        loop = asyncio.get_running_loop()
        original = rd.due_page

        def slow_page(conn: sqlite3.Connection, gid: int, start: tuple[int, int],
                      limit: int) -> list[tuple[int, int]]:
            rows = original(conn, gid, start, limit)
            loop.call_soon_threadsafe(reading.set)
            time.sleep(0.3)  # the event loop goes on meanwhile: acks and releases land
            return rows

        monkeypatch.setattr(rd, "due_page", slow_page)
        fetching = asyncio.ensure_future(store.fetch("t", "g", 5000, clock.now))
        await asyncio.wait_for(reading.wait(), 10)
        assert state.paging is not None
        acked, released = taken[:50], taken[50:]
        await store.ack([m.lease for m in acked])
        await store.release([Release(m.lease, clock.now + 10, 2, 2) for m in released])
        after_page = await fetching
        monkeypatch.setattr(rd, "due_page", original)
        assert len(after_page) == 150  # the released ones that were on disk only
        seen += [m.message_id for m in after_page]
        for _ in range(5):
            clock.now += 10
            seen += [m.message_id for m in await store.fetch("t", "g", 5000, clock.now)]
        assert not {m.message_id for m in acked} & set(seen[200:])
        again = [i for i in seen[200:] if i in late]
        assert sorted(again) == sorted(m.message_id for m in released)
        assert len(seen) == len(set(seen)) + 50
        assert set(ids) <= set(seen)
    finally:
        await store.close()


async def publish_delayed_to(store: EmbeddedStore, at_ms: int, count: int) -> set[str]:
    return set(await store.publish("t", [OutMessage(body=b"late", deliver_at_ms=at_ms)
                                         for _ in range(count)]))


async def test_remove_and_purge_reach_positions_on_disk(tmp_path: pathlib.Path) -> None:
    clock = Clock()
    store = await opened(tmp_path, clock)
    try:
        dues = [T0 + 1_000 + i for i in range(COUNT)]
        await publish_delayed(store, dues)
        for _ in range(5):
            await store.fetch("t", "g", 10, T0)
        state = group_of(store)
        assert state.spill_at is not None
        peeked = await store.peek("t", "g", COUNT)
        last = [m.lease for m in peeked[-10:]]  # on disk only
        assert all(m.lease.position not in state.timers for m in peeked[-10:])
        assert await store.remove([Lease("t", "g", lease.position, "") for lease in last]) == 10
        assert (await store.stats("t", "g", T0)).delayed == COUNT - 10
        assert await store.purge("t", "g") == COUNT - 10
        assert state.spill_at is None
        clock.now = T0 + 10_000
        assert await store.fetch("t", "g", 10, clock.now) == []
    finally:
        await store.close()


async def test_page_in_keeps_positions_handed_out(tmp_path: pathlib.Path) -> None:
    """`paging.page_in` skips rows of leased positions (a lease's row keeps its old key)."""
    clock = Clock()
    store = await opened(tmp_path, clock)
    try:
        ids = await store.publish("t", [OutMessage(body=b"x", deliver_at_ms=T0 + 5)
                                        for _ in range(10)])
        got = await store.fetch("t", "g", 10, T0 + 5)
        assert [m.message_id for m in got] == ids
        state = group_of(store)
        state.spill_at = (1, 0)  # everything at or above: all ten rows
        await paging.page_in(store._catalog, store._supervisor, state)
        assert len(state.timers) == 0 and state.spill_at is None
        assert await store.fetch("t", "g", 10, T0 + 10) == []
    finally:
        await store.close()
