"""A fetch with `max_bytes` reads no more bodies from SQLite than that (the message that passes
it is the last, at least one), whatever the sizes of the messages before: the rest, new or given
back, comes in the next fetch, in order."""

from __future__ import annotations

import pathlib

from gateway.backend.base import OutMessage, Release
from gateway.store import EmbeddedStore

T0 = 1_700_000_000_000
MIB = 1 << 20


async def open_store(path: pathlib.Path) -> EmbeddedStore:
    store = EmbeddedStore(path, lambda: T0, fsync=False, tail_bytes=0, trim_interval_s=0)
    await store.open()
    return store


async def test_new_messages_are_read_within_max_bytes(tmp_path: pathlib.Path) -> None:
    store = await open_store(tmp_path)
    try:
        await store.publish("t", [OutMessage(body=b"s")] * 3)
        await store.publish("t", [OutMessage(body=bytes([i]) * MIB) for i in range(6)])
        first = await store.fetch("t", "g", 1000, T0, max_bytes=2 * MIB)
        assert [len(m.body) for m in first] == [1, 1, 1, MIB, MIB]  # the second passes 2 MiB
        second = await store.fetch("t", "g", 1000, T0, max_bytes=1)
        assert [m.body[:1] for m in second] == [b"\x02"]  # at least one
        rest = await store.fetch("t", "g", 1000, T0)
        assert [m.body[:1] for m in rest] == [b"\x03", b"\x04", b"\x05"]
    finally:
        await store.close()


async def test_released_messages_left_unread_stay_ready_in_order(tmp_path: pathlib.Path) -> None:
    store = await open_store(tmp_path)
    try:
        await store.publish("t", [OutMessage(body=bytes([i]) * MIB) for i in range(4)])
        leased = await store.fetch("t", "g", 10, T0)
        assert len(leased) == 4
        await store.release([Release(m.lease, T0, 1, 0) for m in leased])
        again = await store.fetch("t", "g", 10, T0, max_bytes=MIB + 1)
        assert [m.body[:1] for m in again] == [b"\x00", b"\x01"]
        rest = await store.fetch("t", "g", 10, T0, max_bytes=10 * MIB)
        assert [m.body[:1] for m in rest] == [b"\x02", b"\x03"]
        assert await store.fetch("t", "g", 10, T0) == []
    finally:
        await store.close()
