"""The embedded store deletes messages every group of their topic has acked, and only those."""

from __future__ import annotations

import asyncio
import pathlib
import sqlite3

from gateway.backend.base import OutMessage, Release
from gateway.store import EmbeddedStore
from gateway.store.schema import DB_NAME

T0 = 1_700_000_000_000


def rows(path: pathlib.Path) -> int:
    conn = sqlite3.connect(path / DB_NAME)
    try:
        return int(conn.execute("SELECT count(*) FROM messages").fetchone()[0])
    finally:
        conn.close()


def messages(start: int, count: int) -> list[OutMessage]:
    return [OutMessage(body=f"m{i}".encode()) for i in range(start, start + count)]


async def open_store(path: pathlib.Path) -> EmbeddedStore:
    store = EmbeddedStore(path, lambda: T0, fsync=False, trim_interval_s=0)
    await store.open()
    return store


async def test_trim_keeps_what_any_group_still_needs(tmp_path: pathlib.Path) -> None:
    store = await open_store(tmp_path)
    try:
        await store.fetch("t", "a", 1, T0)
        await store.fetch("t", "b", 1, T0)
        await store.publish("t", messages(0, 10))
        assert await store.trim() == 0
        got_a = await store.fetch("t", "a", 10, T0)
        await store.ack([m.lease for m in got_a])
        assert await store.trim() == 0  # b has not read anything
        got_b = await store.fetch("t", "b", 10, T0)
        await store.ack([m.lease for m in got_b[:3]])
        await store.ack([m.lease for m in got_b[4:]])  # position 4 (m3) is still leased to b
        assert await store.trim() == 3
        assert rows(tmp_path) == 7
        # b's lease gives m3 back: it is still there to deliver.
        await store.release([Release(got_b[3].lease, T0, 1, 1)])
        (again,) = await store.fetch("t", "b", 10, T0)
        assert again.body == b"m3"
        await store.ack([again.lease])
        # Everything acked by both: all but the newest row (it keeps the next position) go.
        assert await store.trim() == 6
        assert rows(tmp_path) == 1
        assert await store.fetch("t", "a", 10, T0) == []
    finally:
        await store.close()


async def test_topics_without_groups_keep_everything(tmp_path: pathlib.Path) -> None:
    store = await open_store(tmp_path)
    try:
        await store.publish("dlq", messages(0, 5))
        assert await store.trim() == 0
        assert rows(tmp_path) == 5
    finally:
        await store.close()


async def test_positions_continue_after_trim_and_reopen(tmp_path: pathlib.Path) -> None:
    store = await open_store(tmp_path)
    await store.fetch("t", "g", 1, T0)
    await store.publish("t", messages(0, 5))
    got = await store.fetch("t", "g", 10, T0)
    await store.ack([m.lease for m in got])
    assert await store.trim() == 4
    await store.close()

    store = await open_store(tmp_path)
    try:
        assert await store.fetch("t", "g", 10, T0) == []  # nothing comes back after reopen
        await store.publish("t", messages(5, 2))
        fresh = await store.fetch("t", "g", 10, T0)
        assert [m.body for m in fresh] == [b"m5", b"m6"]
        assert fresh[0].lease.position == 6
        # A group created now starts at the earliest message kept.
        late = await store.fetch("t", "late", 10, T0)
        assert [m.body for m in late] == [b"m4", b"m5", b"m6"]
    finally:
        await store.close()


async def test_delayed_messages_hold_the_trim_back(tmp_path: pathlib.Path) -> None:
    store = await open_store(tmp_path)
    try:
        await store.fetch("t", "g", 1, T0)
        await store.publish("t", [OutMessage(body=b"later", deliver_at_ms=T0 + 60_000)])
        await store.publish("t", messages(1, 3))
        got = await store.fetch("t", "g", 10, T0)
        assert [m.body for m in got] == [b"m1", b"m2", b"m3"]
        await store.ack([m.lease for m in got])
        assert await store.trim() == 0
        (later,) = await store.fetch("t", "g", 10, T0 + 60_000)
        assert later.body == b"later"
    finally:
        await store.close()


async def test_trim_runs_by_itself(tmp_path: pathlib.Path) -> None:
    store = EmbeddedStore(tmp_path, lambda: T0, fsync=False, trim_interval_s=0.01)
    await store.open()
    try:
        await store.fetch("t", "g", 1, T0)
        await store.publish("t", messages(0, 20))
        got = await store.fetch("t", "g", 20, T0)
        await store.ack([m.lease for m in got])
        for _ in range(500):
            if rows(tmp_path) == 1:
                break
            await asyncio.sleep(0.01)
        assert rows(tmp_path) == 1
    finally:
        await store.close()


async def test_a_dropped_group_holds_nothing_back(tmp_path: pathlib.Path) -> None:
    store = await open_store(tmp_path)
    await store.fetch("t", "a", 1, T0)
    await store.fetch("t", "gone", 1, T0)
    await store.publish("t", messages(0, 6))
    got_a = await store.fetch("t", "a", 10, T0)
    await store.ack([m.lease for m in got_a])
    leased = await store.fetch("t", "gone", 2, T0)  # scanned and leased, never acked
    assert await store.trim() == 0
    assert await store.drop_group("t", "gone") is True
    assert await store.drop_group("t", "gone") is False
    assert await store.drop_group("t", "never") is False
    await store.ack([m.lease for m in leased])  # leases of a dropped group are void: no error
    assert await store.trim() == 5
    assert rows(tmp_path) == 1
    await store.close()
    conn = sqlite3.connect(tmp_path / DB_NAME)
    try:
        assert [g for (g,) in conn.execute("SELECT grp FROM cursors")] == ["a"]
        assert conn.execute("SELECT count(*) FROM unacked").fetchone()[0] == 0
    finally:
        conn.close()
    # Gone for good: after reopen a group of that name is new and starts at the first kept
    # message, and it holds nothing back that "a" has acked.
    store = await open_store(tmp_path)
    try:
        again = await store.fetch("t", "gone", 10, T0)
        assert [m.body for m in again] == [b"m5"]
        assert await store.fetch("t", "a", 10, T0) == []
    finally:
        await store.close()


async def test_a_blocked_topic_is_tried_again_only_after_something_moved(
    tmp_path: pathlib.Path,
) -> None:
    """Topics whose oldest message is still leased are not sent to the writer on every trim
    pass; an ack (or new messages) makes them eligible again."""
    store = await open_store(tmp_path)
    try:
        leased = {}
        for i in range(40):
            await store.publish(f"t{i}", messages(0, 3))
            first, second, third = await store.fetch(f"t{i}", "g", 10, T0)
            await store.ack([second.lease, third.lease])
            leased[i] = first
        assert await store.trim() == 0
        before = store.writes
        assert await store.trim() == 0
        assert store.writes == before  # nothing changed: nothing tried
        await store.ack([leased[7].lease])
        assert await store.trim() == 2  # t7: the first two go, the newest stays
        assert store.writes == before + 2  # one try (and the ack)
        assert rows(tmp_path) == 40 * 3 - 2
    finally:
        await store.close()


async def test_a_trim_does_not_write_the_acked_messages_again(tmp_path: pathlib.Path) -> None:
    """Deleting acked messages frees their pages without overwriting them with zeros (what
    SQLite's secure_delete does, on by default in Debian's build): a trim of 4 MiB of messages
    writes a few pages to the WAL, not 4 MiB more."""
    store = await open_store(tmp_path)
    wal = tmp_path / (DB_NAME + "-wal")
    try:
        await store.publish("t", [OutMessage(body=bytes([i % 251]) * 4096) for i in range(1000)])
        got = await store.fetch("t", "g", 1000, T0)
        await store.ack([m.lease for m in got])
        await store.fetch("t", "g", 1, T0)  # the group's cursor is written past them
        outside = sqlite3.connect(tmp_path / DB_NAME)
        try:
            busy, _, _ = outside.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        finally:
            outside.close()
        assert busy == 0 and wal.stat().st_size == 0
        assert await store.trim() == 999
        assert wal.stat().st_size < 1 << 20  # 4 MiB of 4 KiB messages were deleted
        assert rows(tmp_path) == 1
    finally:
        await store.close()
