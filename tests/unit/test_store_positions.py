"""The embedded store's group positions: a group created at the end or the earliest message,
kept across reopen, and seeking a group to a message or a publish time (manual clock)."""

from __future__ import annotations

import pathlib

import pytest

from gateway.backend.base import OutMessage
from gateway.errors import NotFound
from gateway.store import EmbeddedStore
from tests.unit.test_store_reopen import T0, ManualClock, opened


async def bodies(store: EmbeddedStore, group: str, now: int = T0 + 10_000) -> list[bytes]:
    got = await store.fetch("t", group, 100, now)
    await store.ack([m.lease for m in got])
    return [m.body for m in got]


async def test_created_groups_start_where_asked_and_keep_it_across_reopen(
    tmp_path: pathlib.Path,
) -> None:
    clock = ManualClock()
    store = await opened(tmp_path, clock)
    await store.publish("t", [OutMessage(b"old")])
    assert await store.create_group("t", "latest", at_end=True)
    assert await store.create_group("t", "earliest", at_end=False)
    assert await store.create_group("empty-topic", "g", at_end=True)
    assert not await store.create_group("t", "latest", at_end=False)  # exists: kept
    await store.close()
    store = await opened(tmp_path, clock)
    try:
        assert not await store.create_group("t", "latest", at_end=False)
        await store.publish("t", [OutMessage(b"new")])
        assert await bodies(store, "latest") == [b"new"]
        assert await bodies(store, "earliest") == [b"old", b"new"]
        await store.publish("empty-topic", [OutMessage(b"first")])
        got = await store.fetch("empty-topic", "g", 10, T0)
        assert [m.body for m in got] == [b"first"]
    finally:
        await store.close()


async def test_seek_by_id_and_time_and_across_reopen(tmp_path: pathlib.Path) -> None:
    clock = ManualClock()
    store = await opened(tmp_path, clock)
    ids = []
    for i in range(4):
        clock.now_ms = T0 + 1000 * i
        ids += await store.publish("t", [OutMessage(b"m%d" % i)])
    leased = await store.fetch("t", "g", 100, T0 + 10_000)
    assert len(leased) == 4
    await store.seek("t", "g", message_id=ids[2])
    await store.ack([m.lease for m in leased])  # void leases: nothing is acked
    assert await bodies(store, "g") == [b"m2", b"m3"]
    await store.seek("t", "g", publish_ms=T0 + 1000)
    await store.close()
    store = await opened(tmp_path, clock)
    try:
        assert await bodies(store, "g") == [b"m1", b"m2", b"m3"]
        with pytest.raises(NotFound):
            await store.seek("t", "g", message_id="0" * 32)
        await store.seek("t", "g", publish_ms=T0 + 60_000)
        assert await bodies(store, "g") == []
    finally:
        await store.close()


async def test_last_id_is_the_newest_message_after_a_trim_and_a_reopen(
    tmp_path: pathlib.Path,
) -> None:
    clock = ManualClock()
    store = await opened(tmp_path, clock)
    assert await store.last_id("t") is None
    ids = await store.publish("t", [OutMessage(b"a"), OutMessage(b"b"), OutMessage(b"c")])
    assert await store.last_id("t") == ids[-1]
    assert await bodies(store, "g") == [b"a", b"b", b"c"]
    assert await store.trim() == 2  # the newest stays
    assert await store.last_id("t") == ids[-1]
    await store.close()
    store = await opened(tmp_path, clock)
    try:
        assert await store.last_id("t") == ids[-1]  # read from the table
        (new,) = await store.publish("t", [OutMessage(b"d")])
        assert await store.last_id("t") == new
        assert await store.last_id("other") is None
    finally:
        await store.close()
