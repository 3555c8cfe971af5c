"""Embedded fetch order: released entries first, per-key order under exclusion, no starvation."""

from __future__ import annotations

import pathlib
import time
from collections.abc import AsyncIterator

import pytest

from gateway.backend.base import OutMessage, Release
from gateway.store import EmbeddedStore
from gateway.store.fetch import SCAN_CAP

T0 = 1_700_000_000_000


@pytest.fixture
async def store(tmp_path: pathlib.Path) -> AsyncIterator[EmbeddedStore]:
    opened = EmbeddedStore(tmp_path, lambda: T0, fsync=False)
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()


def keyed(key: str, body: str) -> OutMessage:
    return OutMessage(body=body.encode(), key=key)


async def test_released_entries_come_before_new_messages(store: EmbeddedStore) -> None:
    await store.publish("t", [keyed("", "a"), keyed("", "b")])
    (first,) = await store.fetch("t", "g", 1, T0)
    await store.release([Release(first.lease, T0, attempt=1, retries=1)])
    await store.publish("t", [keyed("", "c")])
    got = await store.fetch("t", "g", 3, T0)
    assert [m.body for m in got] == [b"a", b"b", b"c"]
    assert got[0].attempt == 1


async def test_held_key_keeps_its_order_behind_new_messages(store: EmbeddedStore) -> None:
    await store.publish("t", [keyed("x", "x1"), keyed("k", "k1"), keyed("x", "x2")])
    got = await store.fetch("t", "g", 10, T0, exclude_keys=frozenset({"k"}))
    assert [m.body for m in got] == [b"x1", b"x2"]
    await store.publish("t", [keyed("k", "k2")])
    assert await store.fetch("t", "g", 10, T0, exclude_keys=frozenset({"k"})) == []
    (head,) = await store.fetch("t", "g", 1, T0)
    assert head.body == b"k1"
    (tail,) = await store.fetch("t", "g", 1, T0)
    assert tail.body == b"k2"


async def test_large_excluded_backlog_does_not_starve_other_keys(store: EmbeddedStore) -> None:
    count = SCAN_CAP + 1000
    await store.publish("t", [keyed("blocked", str(i)) for i in range(count)])
    await store.publish("t", [keyed("free", "f1")])
    got = []
    for _ in range(4):
        got += await store.fetch("t", "g", 10, T0, exclude_keys=frozenset({"blocked"}))
        if got:
            break
    assert [m.body for m in got] == [b"f1"]
    await store.publish("t", [keyed("free", "f2")])
    (again,) = await store.fetch("t", "g", 10, T0, exclude_keys=frozenset({"blocked"}))
    assert again.body == b"f2"
    stats = await store.stats("t", "g", T0)
    assert (stats.ready, stats.leased) == (count, 2)
    first = await store.fetch("t", "g", 3, T0)
    assert [m.body for m in first] == [b"0", b"1", b"2"]


async def test_wait_blocks_when_only_excluded_keys_are_left(store: EmbeddedStore) -> None:
    await store.publish("t", [keyed("k", "k1")])
    assert await store.fetch("t", "g", 10, T0, exclude_keys=frozenset({"k"})) == []
    started = time.monotonic()
    await store.wait("t", "g", 0.3)
    assert time.monotonic() - started >= 0.25


async def test_remove_and_purge_cover_held_entries(store: EmbeddedStore) -> None:
    await store.publish("t", [keyed("k", "k1"), keyed("k", "k2"), keyed("", "z")])
    (free,) = await store.fetch("t", "g", 10, T0, exclude_keys=frozenset({"k"}))
    assert free.body == b"z"
    peeked = await store.peek("t", "g", 10)
    assert [m.body for m in peeked] == [b"k1", b"k2", b"z"]
    assert await store.remove([peeked[0].lease]) == 1
    (left,) = await store.fetch("t", "g", 10, T0)
    assert left.body == b"k2"
    await store.release([Release(left.lease, T0, attempt=1, retries=0)])
    assert await store.purge("t", "g") == 1  # k2; z is leased and stays leased
    assert await store.fetch("t", "g", 10, T0) == []
    await store.ack([free.lease])
    assert (await store.stats("t", "g", T0)).leased == 0


async def test_fetch_time_decides_visibility_whatever_the_store_clock(
    tmp_path: pathlib.Path,
) -> None:
    early = 5_000
    opened = EmbeddedStore(tmp_path, fsync=False)
    await opened.open()
    try:
        await opened.publish("t", [OutMessage(body=b"d", deliver_at_ms=early + 500)])
        assert await opened.fetch("t", "g", 10, early) == []
        assert await opened.fetch("t", "g", 10, early + 499) == []
        (got,) = await opened.fetch("t", "g", 10, early + 500)
        await opened.release([Release(got.lease, early + 900, attempt=1, retries=1)])
        assert await opened.fetch("t", "g", 10, early + 899) == []
        (again,) = await opened.fetch("t", "g", 10, early + 900)
        assert again.attempt == 1
    finally:
        await opened.close()
