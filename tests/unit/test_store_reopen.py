"""The embedded store keeps what it promised across close and reopen (manual clock)."""

from __future__ import annotations

import pathlib

from gateway.backend.base import Lease, OutMessage, Release
from gateway.store import EmbeddedStore

T0 = 1_700_000_000_000


class ManualClock:
    """Wall-clock ms that only moves when the test says so."""

    def __init__(self, now_ms: int = T0) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


async def opened(path: pathlib.Path, clock: ManualClock) -> EmbeddedStore:
    store = EmbeddedStore(path, clock, fsync=False)
    await store.open()
    return store


async def test_reopen_keeps_unacked_released_and_gives_back_leases(tmp_path: pathlib.Path) -> None:
    """Released positions keep their time and counts; leased ones come back at once, counted
    as delivered once more (the lease was written with its delivery)."""
    clock = ManualClock()
    store = await opened(tmp_path, clock)
    ids = await store.publish("t", [OutMessage(body=f"m{i}".encode()) for i in range(4)])
    got = await store.fetch("t", "g", 10, T0)
    assert [m.message_id for m in got] == ids
    await store.ack([got[0].lease])
    await store.release(
        [
            Release(got[1].lease, T0 + 10_000, attempt=1, retries=1),
            Release(got[2].lease, T0, attempt=3, retries=2),
        ]
    )
    await store.close()
    assert not store.healthy()

    store = await opened(tmp_path, clock)
    try:
        now = await store.fetch("t", "g", 10, T0)
        # ids[3] was leased when the store closed: that delivery counts (attempt 1).
        assert [(m.message_id, m.attempt, m.retries) for m in now] == [
            (ids[3], 1, 0),
            (ids[2], 3, 2),
        ]
        assert await store.fetch("t", "g", 10, T0 + 9_999) == []
        stats = await store.stats("t", "g", T0 + 9_999)
        assert (stats.delayed, stats.leased, stats.next_visible_ms) == (1, 2, T0 + 10_000)
        (later,) = await store.fetch("t", "g", 10, T0 + 10_000)
        assert (later.message_id, later.attempt, later.retries) == (ids[1], 1, 1)
    finally:
        await store.close()


async def test_reopen_keeps_delayed_publishes_seen_and_unseen(tmp_path: pathlib.Path) -> None:
    clock = ManualClock()
    store = await opened(tmp_path, clock)
    seen, unseen = await store.publish(
        "t",
        [
            OutMessage(body=b"seen", deliver_at_ms=T0 + 5_000),
            OutMessage(body=b"unseen", deliver_at_ms=T0 + 6_000),
        ],
    )
    assert await store.fetch("t", "g1", 10, T0) == []
    await store.close()

    store = await opened(tmp_path, clock)
    try:
        for group in ("g1", "g2"):
            assert await store.fetch("t", group, 10, T0 + 4_999) == []
            (first,) = await store.fetch("t", group, 10, T0 + 5_000)
            (second,) = await store.fetch("t", group, 10, T0 + 6_000)
            assert (first.message_id, second.message_id) == (seen, unseen)
    finally:
        await store.close()


async def test_old_leases_are_unknown_after_reopen(tmp_path: pathlib.Path) -> None:
    clock = ManualClock()
    store = await opened(tmp_path, clock)
    await store.publish("t", [OutMessage(body=b"x")])
    (old,) = await store.fetch("t", "g", 1, T0)
    await store.close()

    store = await opened(tmp_path, clock)
    try:
        await store.ack([old.lease])
        await store.release([Release(old.lease, T0 + 60_000, attempt=9, retries=9)])
        (again,) = await store.fetch("t", "g", 1, T0)
        assert again.message_id == old.message_id
        assert again.lease.token != old.lease.token
        assert (again.attempt, again.retries) == (1, 0)  # the lost lease was a delivery
    finally:
        await store.close()


async def test_positions_and_topics_continue_after_reopen(tmp_path: pathlib.Path) -> None:
    clock = ManualClock()
    store = await opened(tmp_path, clock)
    await store.publish("a", [OutMessage(body=b"1"), OutMessage(body=b"2")])
    (first,) = await store.fetch("a", "g", 1, T0)
    await store.ack([first.lease])
    await store.close()

    store = await opened(tmp_path, clock)
    try:
        await store.publish("a", [OutMessage(body=b"3")])
        await store.publish("b", [OutMessage(body=b"b1")])
        got = await store.fetch("a", "g", 10, T0)
        assert [m.body for m in got] == [b"2", b"3"]
        assert got[0].lease.position < got[1].lease.position
        assert got[0].lease.position > first.lease.position
        assert await store.topics() == ["a", "b"]
    finally:
        await store.close()


async def test_purge_and_remove_survive_reopen(tmp_path: pathlib.Path) -> None:
    clock = ManualClock()
    store = await opened(tmp_path, clock)
    await store.publish("t", [OutMessage(body=str(i).encode()) for i in range(6)])
    assert await store.purge("t", "purged") == 6
    peeked = await store.peek("t", "picked", 10)
    assert await store.remove([peeked[1].lease, peeked[4].lease]) == 2
    await store.close()

    store = await opened(tmp_path, clock)
    try:
        assert await store.fetch("t", "purged", 10, T0) == []
        got = await store.fetch("t", "picked", 10, T0)
        assert [m.body for m in got] == [b"0", b"2", b"3", b"5"]
    finally:
        await store.close()


async def test_purge_keeps_leased_messages_across_reopen(tmp_path: pathlib.Path) -> None:
    """A purge takes the waiting messages and leaves leased ones, durably: after a restart one
    still leased (its lease void) is delivered again, one released after the purge comes at
    its time, the purged ones never."""
    clock = ManualClock()
    store = await opened(tmp_path, clock)
    await store.publish("t", [OutMessage(body=str(i).encode()) for i in range(6)])
    _, released, waiting = await store.fetch("t", "g", 3, T0)
    await store.release([Release(waiting.lease, T0 + 60_000, attempt=1, retries=1)])
    assert await store.purge("t", "g") == 4  # 3 never leased, 1 waiting retry
    await store.release([Release(released.lease, T0 + 60_000, attempt=1, retries=1)])
    assert await store.fetch("t", "g", 10, T0) == []
    await store.close()

    store = await opened(tmp_path, clock)
    try:
        assert [m.body for m in await store.fetch("t", "g", 10, T0)] == [b"0"]
        clock.now_ms = T0 + 60_000
        assert [(m.body, m.retries) for m in await store.fetch("t", "g", 10, clock.now_ms)] == [
            (b"1", 1)]
    finally:
        await store.close()


async def test_wait_wakes_when_earliest_delayed_message_is_due(tmp_path: pathlib.Path) -> None:
    clock = ManualClock()
    store = await opened(tmp_path, clock)
    try:
        await store.publish("t", [OutMessage(body=b"x", deliver_at_ms=T0 + 50)])
        assert await store.fetch("t", "g", 10, T0) == []
        clock.now_ms = T0 + 50
        await store.wait("t", "g", 30.0)
        (got,) = await store.fetch("t", "g", 10, clock.now_ms)
        assert got.body == b"x"
    finally:
        await store.close()


async def test_closed_store_refuses_requests(tmp_path: pathlib.Path) -> None:
    import pytest

    from gateway.errors import Unavailable

    store = await opened(tmp_path, ManualClock())
    await store.close()
    with pytest.raises(Unavailable):
        await store.publish("t", [OutMessage(body=b"x")])
    with pytest.raises(Unavailable):
        await store.ack([Lease("t", "g", 1, "x")])


async def test_a_position_leased_again_counts_that_delivery_after_reopen(
    tmp_path: pathlib.Path,
) -> None:
    """A released position leased a second time comes back after a reopen counted twice."""
    clock = ManualClock()
    store = await opened(tmp_path, clock)
    await store.publish("t", [OutMessage(body=b"x")])
    (first,) = await store.fetch("t", "g", 1, T0)
    await store.release([Release(first.lease, T0, attempt=1, retries=1)])
    (second,) = await store.fetch("t", "g", 1, T0)
    assert (second.attempt, second.retries) == (1, 1)
    await store.close()

    store = await opened(tmp_path, clock)
    try:
        (again,) = await store.fetch("t", "g", 1, T0)
        assert (again.message_id, again.attempt, again.retries) == (first.message_id, 2, 1)
    finally:
        await store.close()
