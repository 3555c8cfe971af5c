"""The store's in-memory tail: fresh fetches read it, lagging groups and evicted positions read
SQLite, and both give the same messages."""

from __future__ import annotations

import asyncio
import pathlib

from gateway.backend.base import OutMessage
from gateway.store import EmbeddedStore

T0 = 1_700_000_000_000


def batch(start: int, count: int, size: int = 1000) -> list[OutMessage]:
    return [
        OutMessage(
            body=bytes([i % 251]) * size,
            properties={"n": str(i), "quote": 'a"b\\c\u00e9'},
            key=f"k{i % 3}",
            tag="t",
        )
        for i in range(start, start + count)
    ]


async def drain(
    store: EmbeddedStore, group: str, want: int, now_ms: int = T0
) -> list[tuple[str, bytes, dict]]:
    got: list[tuple[str, bytes, dict]] = []
    while len(got) < want:
        fetched = await store.fetch("t", group, 37, now_ms)
        assert fetched, f"{group}: only {len(got)} of {want}"
        got.extend((m.properties["n"], m.body, dict(m.properties)) for m in fetched)
        await store.ack([m.lease for m in fetched])
    return got


async def test_groups_behind_the_tail_read_the_database(tmp_path: pathlib.Path) -> None:
    # About 25 messages of 1,000 bytes fit in the budget: most of 200 are evicted.
    store = EmbeddedStore(tmp_path, lambda: T0, fsync=False, tail_bytes=30_000)
    await store.open()
    try:
        await store.fetch("t", "early", 1, T0)  # the group exists before anything is published
        for start in range(0, 200, 20):
            await store.publish("t", batch(start, 20))
            assert store._tail.used <= 30_000
        early = await drain(store, "early", 200)
        late = await drain(store, "late", 200)  # a group created afterwards starts at 1
        expected = [(str(i), bytes([i % 251]) * 1000) for i in range(200)]
        assert [(n, body) for n, body, _ in early] == expected
        assert [(n, body) for n, body, _ in late] == expected
        assert early[5][2] == {"n": "5", "quote": 'a"b\\c\u00e9'} == late[5][2]
        assert await store.fetch("t", "early", 10, T0) == []
        # Fresh messages for a caught-up group come from the tail again.
        await store.publish("t", batch(200, 5))
        fresh = await drain(store, "early", 5)
        assert [n for n, _, _ in fresh] == ["200", "201", "202", "203", "204"]
    finally:
        await store.close()


async def test_tail_serves_only_committed_positions(tmp_path: pathlib.Path) -> None:
    store = EmbeddedStore(tmp_path, lambda: T0, fsync=False)
    await store.open()
    try:
        await store.fetch("t", "g", 1, T0)
        pending = store.publish("t", batch(0, 3))
        # Not awaited yet: positions are in the tail but not committed, so nothing is fetched.
        task = asyncio.ensure_future(pending)
        await asyncio.sleep(0)
        assert store._catalog.topics["t"].tail  # added before the commit
        assert store._catalog.topics["t"].committed == 1 or task.done()
        await task
        got = await store.fetch("t", "g", 10, T0)
        assert [m.properties["n"] for m in got] == ["0", "1", "2"]
    finally:
        await store.close()


async def test_reopen_after_tail_fetches_redelivers_unacked(tmp_path: pathlib.Path) -> None:
    store = EmbeddedStore(tmp_path, lambda: T0, fsync=False)
    await store.open()
    await store.publish("t", batch(0, 10))
    got = await store.fetch("t", "g", 10, T0)
    await store.ack([m.lease for m in got[:4]])
    await store.close()
    again = EmbeddedStore(tmp_path, lambda: T0, fsync=False)
    await again.open()
    try:
        redelivered = await again.fetch("t", "g", 100, T0)
        assert [m.properties["n"] for m in redelivered] == [str(i) for i in range(4, 10)]
    finally:
        await again.close()


async def test_the_tail_counts_key_tag_and_properties_against_its_budget(
    tmp_path: pathlib.Path,
) -> None:
    """Issue 16, defect 7: a tail that counts only bodies holds any amount of keys, tags and
    properties (8 MiB keys grew the process without bound)."""
    budget = 1 << 20
    store = EmbeddedStore(tmp_path, lambda: T0, fsync=False, tail_bytes=budget)
    await store.open()
    try:
        await store.fetch("t", "g", 1, T0)
        one = OutMessage(body=b"", key="k" * 100_000, tag="t" * 50_000,
                         properties={f"p{i}": "v" * 1000 for i in range(50)})
        await store.publish("t", [one])
        assert store._tail.used >= 100_000 + 50_000 + 50 * 1000
        for _ in range(30):  # 30 such messages: far over the budget if only bodies counted
            await store.publish("t", [one])
            assert store._tail.used <= budget
        held = sum(len(e[1]) + len(e[2]) for e in store._catalog.topics["t"].tail.values())
        assert held <= budget
        tiny = OutMessage(body=b"", properties={str(i): "" for i in range(10_000)})
        await store.publish("t", [tiny])  # many small properties cost memory too
        assert store._tail.used <= budget
        assert len(store._catalog.topics["t"].tail) <= 5
    finally:
        await store.close()


async def test_delayed_messages_leave_the_tail_to_the_messages_read_next(
    tmp_path: pathlib.Path,
) -> None:
    """Issue 23: retry copies (delayed when published) took the tail's budget with their bodies,
    which a timer's fetch reads from SQLite anyway; so a backlog being failed was pushed out of
    the tail by its own retry copies and read from disk. Now a delayed message is kept without
    its body, costs only its key and tag, and still comes back whole when due."""
    now = [T0]
    store = EmbeddedStore(tmp_path, lambda: now[0], fsync=False, tail_bytes=200_000)
    await store.open()
    try:
        await store.fetch("t", "g", 1, T0)
        await store.publish("t", batch(0, 20))  # about 30 kB of the 200 kB budget
        used = store._tail.used
        delayed = [
            OutMessage(body=b"x" * 1000, properties={"n": str(100 + i)}, key="k", tag="t",
                       deliver_at_ms=T0 + 10_000)
            for i in range(200)  # 200 kB of bodies: with them, over the budget
        ]
        await store.publish("t", delayed)
        assert store._tail.used <= used + 200 * 600  # the overhead and key and tag only
        tail = store._catalog.topics["t"].tail
        assert sum(entry[3] is not None for entry in tail.values()) == 20  # the backlog stays
        assert sum(entry[3] is None for entry in tail.values()) == 200
        first = await drain(store, "g", 20)
        assert [n for n, _, _ in first] == [str(i) for i in range(20)]
        assert await store.fetch("t", "g", 10, T0) == []  # the delayed ones are not due yet
        now[0] = T0 + 10_000
        later = await drain(store, "g", 200, now[0])
        assert sorted(int(n) for n, _, _ in later) == list(range(100, 300))
        assert all(body == b"x" * 1000 for _, body, _ in later)
        # A group that comes after they fell due takes them from the tail's scan, read whole.
        late = await drain(store, "late", 220, now[0])
        assert sorted(int(n) for n, _, _ in late) == list(range(20)) + list(range(100, 300))
        assert all(len(body) == 1000 for _, body, _ in late)
    finally:
        await store.close()
