"""What every back end must do, written only against `gateway.backend.base.Backend`.

Names are unique per test so a shared broker can run the suite. Where something becomes
visible later, the test polls with `wait` under a generous bound and measures the time.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from gateway.backend.base import Backend, Lease, OutMessage, Release, StoredMessage
from gateway.errors import NotFound
from tests.contract.conftest import capabilities_of

POLL_LIMIT_S = 10.0


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def names() -> tuple[str, str]:
    """A fresh (topic, group) pair."""
    suffix = uuid.uuid4().hex[:12]
    return f"contract-topic-{suffix}", f"contract-group-{suffix}"


def msg(body: str, **kwargs: object) -> OutMessage:
    return OutMessage(body=body.encode(), **kwargs)  # type: ignore[arg-type]


async def fetch_until(
    backend: Backend,
    topic: str,
    group: str,
    count: int,
    *,
    limit_s: float = POLL_LIMIT_S,
    exclude_keys: frozenset[str] = frozenset(),
    publish_delays: bool = True,
) -> list[StoredMessage]:
    """Fetch until `count` messages arrived or `limit_s` passed; return what arrived."""
    got: list[StoredMessage] = []
    end = time.monotonic() + limit_s
    while len(got) < count and time.monotonic() < end:
        got += await backend.fetch(
            topic, group, count - len(got), now_ms(), exclude_keys=exclude_keys,
            publish_delays=publish_delays,
        )
        if len(got) < count:
            await backend.wait(topic, group, min(0.5, max(0.0, end - time.monotonic())))
    return got


def bodies(messages: list[StoredMessage]) -> list[bytes]:
    return [m.body for m in messages]


async def test_publish_returns_durable_ids_in_order(backend: Backend) -> None:
    topic, group = names()
    given = uuid.uuid4().hex
    ids = await backend.publish(
        topic,
        [
            msg("a", key="k1", tag="t1", properties={"p": "1"}),
            msg("b", message_id=given, attempt=2, retries=1),
            msg("c"),
        ],
    )
    assert len(ids) == 3
    assert ids[1] == given
    assert len(set(ids)) == 3 and all(ids)
    got = await fetch_until(backend, topic, group, 3)
    assert [m.message_id for m in got] == ids
    assert bodies(got) == [b"a", b"b", b"c"]
    first, second, _ = got
    assert (first.key, first.tag, dict(first.properties)) == ("k1", "t1", {"p": "1"})
    assert (first.attempt, first.retries) == (0, 0)
    assert (second.attempt, second.retries) == (2, 1)
    assert all(m.topic == topic and m.lease.group == group for m in got)
    assert first.publish_ms > 0


async def test_publish_empty_batch_returns_no_ids(backend: Backend) -> None:
    topic, _ = names()
    assert await backend.publish(topic, []) == []


async def test_fetch_leases_until_ack(backend: Backend) -> None:
    topic, group = names()
    await backend.publish(topic, [msg("a"), msg("b"), msg("c")])
    got = await fetch_until(backend, topic, group, 2)
    assert bodies(got) == [b"a", b"b"]
    rest = await fetch_until(backend, topic, group, 1)
    assert bodies(rest) == [b"c"]
    assert await backend.fetch(topic, group, 10, now_ms()) == []
    stats = await backend.stats(topic, group, now_ms())
    assert (stats.ready, stats.leased) == (0, 3)
    await backend.ack([m.lease for m in got + rest])
    stats = await backend.stats(topic, group, now_ms())
    assert (stats.ready, stats.leased, stats.delayed) == (0, 0, 0)
    assert await backend.fetch(topic, group, 10, now_ms()) == []


async def test_release_in_the_future_with_new_counters(backend: Backend) -> None:
    topic, group = names()
    (mid,) = await backend.publish(topic, [msg("x")])
    (first,) = await fetch_until(backend, topic, group, 1)
    released_at = now_ms()
    await backend.release([Release(first.lease, released_at + 300, attempt=1, retries=1)])
    assert await backend.fetch(topic, group, 10, now_ms()) == []
    stats = await backend.stats(topic, group, now_ms())
    assert stats.delayed == 1 and stats.leased == 0
    assert stats.next_visible_ms is not None
    assert released_at + 250 <= stats.next_visible_ms <= released_at + 1500
    (again,) = await fetch_until(backend, topic, group, 1)
    assert now_ms() >= released_at + 300
    assert again.message_id == mid
    assert (again.attempt, again.retries) == (1, 1)
    await backend.ack([again.lease])


async def test_release_now_is_visible_again_at_once(backend: Backend) -> None:
    topic, group = names()
    await backend.publish(topic, [msg("x"), msg("y")])
    got = await fetch_until(backend, topic, group, 2)
    await backend.release([Release(got[0].lease, now_ms(), attempt=1, retries=0)])
    (again,) = await fetch_until(backend, topic, group, 1, limit_s=5.0)
    assert again.body == b"x" and again.attempt == 1


async def test_delayed_publish_not_fetched_early(backend: Backend) -> None:
    topic, group = names()
    far = now_ms() + 600_000
    await backend.publish(topic, [msg("later", deliver_at_ms=far)])
    await backend.publish(topic, [msg("now", deliver_at_ms=now_ms() - 5)])
    got = await fetch_until(backend, topic, group, 1)
    assert bodies(got) == [b"now"]
    assert await backend.fetch(topic, group, 10, now_ms()) == []
    stats = await backend.stats(topic, group, now_ms())
    assert stats.delayed == 1
    assert stats.next_visible_ms is not None and abs(stats.next_visible_ms - far) < 1000


async def test_delayed_publish_becomes_visible_at_its_time(backend: Backend) -> None:
    topic, group = names()
    due = now_ms() + 300
    await backend.publish(topic, [msg("soon", deliver_at_ms=due)])
    assert await backend.fetch(topic, group, 10, now_ms()) == [] or now_ms() >= due
    (got,) = await fetch_until(backend, topic, group, 1)
    assert got.body == b"soon"
    assert now_ms() >= due
    assert got.deliver_at_ms == due


async def test_groups_consume_independently(backend: Backend) -> None:
    topic, group = names()
    other = group + "-other"
    await backend.publish(topic, [msg("a"), msg("b")])
    mine = await fetch_until(backend, topic, group, 2)
    await backend.ack([m.lease for m in mine])
    theirs = await fetch_until(backend, topic, other, 2)
    assert bodies(theirs) == [b"a", b"b"]
    assert await backend.fetch(topic, group, 10, now_ms()) == []


async def test_new_group_starts_at_earliest_message(backend: Backend) -> None:
    topic, group = names()
    await backend.publish(topic, [msg("old-1"), msg("old-2")])
    first = await fetch_until(backend, topic, group, 2)
    await backend.ack([m.lease for m in first])
    await backend.publish(topic, [msg("new")])
    late = await fetch_until(backend, topic, group + "-late", 3)
    assert bodies(late) == [b"old-1", b"old-2", b"new"]


async def test_exclude_keys_keeps_per_key_order(backend: Backend) -> None:
    topic, group = names()
    await backend.publish(
        topic,
        [msg("k1-a", key="k1"), msg("k2-b", key="k2"), msg("k1-c", key="k1"), msg("d")],
    )
    got = await fetch_until(backend, topic, group, 2, exclude_keys=frozenset({"k1"}))
    assert bodies(got) == [b"k2-b", b"d"]
    assert await backend.fetch(topic, group, 10, now_ms(), exclude_keys=frozenset({"k1"})) == []
    held = await fetch_until(backend, topic, group, 2)
    assert bodies(held) == [b"k1-a", b"k1-c"]


async def test_stats_counts_ready_delayed_and_leased(backend: Backend) -> None:
    topic, group = names()
    before = now_ms()
    await backend.publish(topic, [msg("a"), msg("b"), msg("c")])
    await backend.publish(topic, [msg("d", deliver_at_ms=now_ms() + 600_000)])
    stats = await backend.stats(topic, group, now_ms())
    assert (stats.ready, stats.delayed, stats.leased) == (3, 1, 0)
    assert stats.oldest_ready_ms is not None and before - 1000 <= stats.oldest_ready_ms <= now_ms()
    await fetch_until(backend, topic, group, 1)
    stats = await backend.stats(topic, group, now_ms())
    assert (stats.ready, stats.delayed, stats.leased) == (2, 1, 1)
    empty = await backend.stats(*names(), now_ms())
    assert (empty.ready, empty.delayed, empty.leased) == (0, 0, 0)
    assert empty.oldest_ready_ms is None and empty.next_visible_ms is None


async def test_peek_reads_without_leasing(backend: Backend) -> None:
    topic, group = names()
    ids = await backend.publish(topic, [msg(str(i)) for i in range(5)])
    page = await backend.peek(topic, group, 3)
    assert [m.message_id for m in page] == ids[:3]
    rest = await backend.peek(topic, group, 10, after_position=page[-1].lease.position)
    assert [m.message_id for m in rest] == ids[3:]
    got = await fetch_until(backend, topic, group, 5)
    assert [m.message_id for m in got] == ids
    await backend.ack([got[0].lease])
    still = await backend.peek(topic, group, 10)
    assert [m.message_id for m in still] == ids[1:]


async def test_remove_leased_and_waiting_messages(backend: Backend) -> None:
    topic, group = names()
    await backend.publish(topic, [msg("a"), msg("b"), msg("c")])
    (leased,) = await fetch_until(backend, topic, group, 1)
    waiting = (await backend.peek(topic, group, 10))[-1]
    assert waiting.body == b"c"
    assert await backend.remove([leased.lease, waiting.lease]) == 2
    rest = await fetch_until(backend, topic, group, 1)
    assert bodies(rest) == [b"b"]
    await backend.ack([rest[0].lease])
    assert await backend.peek(topic, group, 10) == []
    assert await backend.fetch(topic, group, 10, now_ms()) == []


@pytest.mark.requires("backlog-view", "purge-keeps-inflight", "delayed-delivery")
async def test_purge_removes_waiting_messages_and_keeps_leased_ones(backend: Backend) -> None:
    """A purge takes what waits for the group (ready, delayed, released to come later) and
    leaves leased messages to their consumer, as RabbitMQ's queue.purge leaves unacknowledged
    ones: an ack of one commits it, a release brings it back. (It took the leased ones too, and
    counted them: their acks changed nothing and a release brought nothing back.)"""
    topic, group = names()
    await backend.publish(topic, [msg(str(i)) for i in range(6)])
    acked, released, failed = await fetch_until(backend, topic, group, 3)
    await backend.release([Release(failed.lease, now_ms() + 60_000, attempt=1, retries=1)])
    assert await backend.purge(topic, group) == 4  # 3 never leased, 1 waiting retry
    assert await backend.fetch(topic, group, 10, now_ms()) == []
    stats = await backend.stats(topic, group, now_ms())
    assert (stats.ready, stats.delayed, stats.leased) == (0, 0, 2)
    await backend.ack([acked.lease])
    await backend.release([Release(released.lease, now_ms(), attempt=1, retries=1)])
    (again,) = await fetch_until(backend, topic, group, 1)
    assert (again.message_id, again.body, again.retries) == (released.message_id, b"1", 1)
    await backend.ack([again.lease])
    await backend.publish(topic, [msg("after")])
    assert bodies(await fetch_until(backend, topic, group, 1)) == [b"after"]
    assert await backend.fetch(topic, group, 10, now_ms()) == []


@pytest.mark.requires("backlog-view")
async def test_remove_keep_leased_leaves_leased_messages(backend: Backend) -> None:
    """`remove(keep_leased=True)` (a purge of a group-wide retry topic) takes the others only."""
    topic, group = names()
    await backend.publish(topic, [msg("a"), msg("b")])
    (leased,) = await fetch_until(backend, topic, group, 1)
    assert await backend.remove([leased.lease], keep_leased=True) == 0
    peeked = await backend.peek(topic, group, 10)
    assert bodies(peeked) == [b"a", b"b"]
    assert await backend.remove([m.lease for m in peeked], keep_leased=True) == 1
    await backend.ack([leased.lease])
    stats = await backend.stats(topic, group, now_ms())
    assert (stats.ready, stats.delayed, stats.leased) == (0, 0, 0)


async def test_purge_with_leased_takes_leased_messages_too(backend: Backend) -> None:
    """`purge(leased=True)` (a deleted queue's) takes leased messages as well: their leases are
    void, so a release brings nothing back."""
    topic, group = names()
    await backend.publish(topic, [msg(str(i)) for i in range(5)])
    got = await fetch_until(backend, topic, group, 2)
    assert await backend.purge(topic, group, leased=True) == 5
    stats = await backend.stats(topic, group, now_ms())
    assert (stats.ready, stats.delayed, stats.leased) == (0, 0, 0)
    await backend.release([Release(m.lease, now_ms(), attempt=1, retries=1) for m in got])
    await backend.publish(topic, [msg("after")])
    assert bodies(await fetch_until(backend, topic, group, 1)) == [b"after"]
    assert await backend.fetch(topic, group, 10, now_ms()) == []


async def test_wait_wakes_on_publish(backend: Backend) -> None:
    topic, group = names()
    await backend.fetch(topic, group, 10, now_ms())
    started = time.monotonic()
    waiter = asyncio.create_task(backend.wait(topic, group, 30.0))
    await asyncio.sleep(0.05)
    await backend.publish(topic, [msg("ping")])
    await asyncio.wait_for(waiter, 10.0)
    assert time.monotonic() - started < 10.0
    assert bodies(await fetch_until(backend, topic, group, 1)) == [b"ping"]


async def test_wait_wakes_on_release_to_the_group(backend: Backend) -> None:
    topic, group = names()
    await backend.publish(topic, [msg("x")])
    (got,) = await fetch_until(backend, topic, group, 1)
    assert await backend.fetch(topic, group, 10, now_ms()) == []
    started = time.monotonic()
    waiter = asyncio.create_task(backend.wait(topic, group, 30.0))
    await asyncio.sleep(0.05)
    await backend.release([Release(got.lease, now_ms(), attempt=1, retries=1)])
    await asyncio.wait_for(waiter, 10.0)
    assert time.monotonic() - started < 10.0
    (again,) = await fetch_until(backend, topic, group, 1)
    assert again.message_id == got.message_id


async def test_wait_returns_after_timeout(backend: Backend) -> None:
    topic, group = names()
    await backend.fetch(topic, group, 10, now_ms())
    started = time.monotonic()
    await backend.wait(topic, group, 0.2)
    assert time.monotonic() - started < 5.0


async def test_unknown_lease_ack_is_ignored(backend: Backend) -> None:
    topic, group = names()
    await backend.publish(topic, [msg("a")])
    (got,) = await fetch_until(backend, topic, group, 1)
    bogus = Lease(topic, group, got.lease.position + 1000, "not-a-lease")
    await backend.ack([bogus, Lease(topic + "-nope", group, 1, "x")])
    stats = await backend.stats(topic, group, now_ms())
    assert stats.leased == 1
    await backend.ack([got.lease])
    await backend.ack([got.lease])
    stats = await backend.stats(topic, group, now_ms())
    assert (stats.ready, stats.leased) == (0, 0)


async def test_topics_lists_published_topics(backend: Backend) -> None:
    topic, _ = names()
    await backend.publish(topic, [msg("a")])
    assert topic in await backend.topics()
    assert backend.healthy()


async def test_drop_group_forgets_only_that_group(backend: Backend) -> None:
    topic, group = names()
    other = group + "-other"
    await backend.publish(topic, [msg("a"), msg("b")])
    (leased,) = await fetch_until(backend, topic, group, 1)
    got = await fetch_until(backend, topic, other, 2)
    await backend.ack([m.lease for m in got])
    assert await backend.drop_group(topic, group) is True
    assert await backend.drop_group(topic, group) is False
    assert await backend.drop_group(topic, group + "-never") is False
    await backend.ack([leased.lease])  # a lease of a dropped group is void, not an error
    await backend.publish(topic, [msg("c")])
    assert bodies(await fetch_until(backend, topic, other, 1)) == [b"c"]


@pytest.mark.requires("positions")
async def test_groups_start_where_created_and_move_by_seek(backend: Backend) -> None:
    topic, group = names()
    ids = await backend.publish(topic, [msg("m0"), msg("m1")])
    assert await backend.create_group(topic, group, at_end=True)
    assert await backend.create_group(topic, group + "-all", at_end=False)
    assert not await backend.create_group(topic, group, at_end=False)  # kept where it is
    await backend.publish(topic, [msg("m2")])
    assert bodies(await fetch_until(backend, topic, group, 1)) == [b"m2"]
    assert bodies(await fetch_until(backend, topic, group + "-all", 3)) == [b"m0", b"m1", b"m2"]
    await backend.seek(topic, group, message_id=ids[1])
    assert bodies(await fetch_until(backend, topic, group, 2)) == [b"m1", b"m2"]
    await backend.seek(topic, group, publish_ms=0)
    assert bodies(await fetch_until(backend, topic, group, 3)) == [b"m0", b"m1", b"m2"]
    with pytest.raises(NotFound):
        await backend.seek(topic, group, message_id="f" * 32)


@pytest.mark.requires("retry-reset")
async def test_reset_retries_counts_a_groups_failures_from_zero(backend: Backend) -> None:
    topic, group = names()
    other = group + "-other"
    await backend.publish(topic, [msg("a"), msg("b")])
    got = await fetch_until(backend, topic, group, 2)
    theirs = await fetch_until(backend, topic, other, 2)
    await backend.release([Release(m.lease, now_ms(), attempt=3, retries=2) for m in got])
    await backend.release([Release(m.lease, now_ms(), attempt=3, retries=2) for m in theirs])
    assert await backend.reset_retries(topic, group) == 2
    again = await fetch_until(backend, topic, group, 2)
    assert sorted((m.body, m.attempt, m.retries) for m in again) == [(b"a", 3, 0), (b"b", 3, 0)]
    assert {m.retries for m in await fetch_until(backend, topic, other, 2)} == {2}
    assert await backend.reset_retries(topic, group + "-never") == 0


@pytest.mark.requires("delay-skip", "independent-groups")
async def test_a_group_that_skips_publish_delays_gets_delayed_messages_at_once(
    backend: Backend,
) -> None:
    """`publish_delays=False` (Pulsar's Exclusive and Failover subscriptions): a message
    published with a future time is handed out at once, in topic order, to that group only; a
    message it releases still waits for its time."""
    topic, group = names()
    waits = group + "-waits"
    far = now_ms() + 600_000
    await backend.publish(topic, [msg("a"), msg("later-1", deliver_at_ms=far), msg("b"),
                                  msg("later-2", deliver_at_ms=far), msg("c")])
    got = await fetch_until(backend, topic, group, 5, publish_delays=False)
    assert bodies(got) == [b"a", b"later-1", b"b", b"later-2", b"c"]
    # Another group of the topic waits for the time.
    assert bodies(await fetch_until(backend, topic, waits, 3)) == [b"a", b"b", b"c"]
    assert await backend.fetch(topic, waits, 10, now_ms()) == []
    assert (await backend.stats(topic, waits, now_ms())).delayed == 2
    # What the skipping group releases to a later time waits for it.
    await backend.release([Release(got[1].lease, far, attempt=1, retries=1)])
    await backend.ack([m.lease for m in got if m is not got[1]])
    assert await backend.fetch(topic, group, 10, now_ms(), publish_delays=False) == []
    assert (await backend.stats(topic, group, now_ms())).delayed == 1


@pytest.mark.requires("delay-skip", "independent-groups")
async def test_a_group_that_skips_publish_delays_counts_delayed_messages_as_ready(
    backend: Backend,
) -> None:
    """`stats(..., publish_delays=False)` counts as `fetch(..., publish_delays=False)` hands
    out: a message published with a future time is ready for that group (it counted as
    delayed); one the group released to a later time is delayed; another group waits."""
    topic, group = names()
    far = now_ms() + 600_000
    await backend.publish(topic, [msg("a"), msg("later", deliver_at_ms=far)])
    skips = await backend.stats(topic, group, now_ms(), publish_delays=False)
    assert (skips.ready, skips.delayed, skips.next_visible_ms) == (2, 0, None)
    waits = await backend.stats(topic, group + "-waits", now_ms())
    assert (waits.ready, waits.delayed, waits.next_visible_ms) == (1, 1, far)
    got = await fetch_until(backend, topic, group, 2, publish_delays=False)
    assert bodies(got) == [b"a", b"later"]
    await backend.release([Release(got[1].lease, far, attempt=1, retries=1)])
    await backend.ack([got[0].lease])
    released = await backend.stats(topic, group, now_ms(), publish_delays=False)
    assert (released.ready, released.delayed, released.leased) == (0, 1, 0)


async def test_skipping_publish_delays_is_declared_as_a_capability(backend: Backend) -> None:
    """`Backend.skips_delays` and the contract capability `delay-skip` say the same: the engine
    reads the one, this suite the other."""
    assert backend.skips_delays is ("delay-skip" in capabilities_of(backend))


async def test_independent_groups_says_what_the_capability_says(backend: Backend) -> None:
    """The engine reads `independent_groups` to know whether a group may ack away another
    group's copy in a destination they share (`{topic}.retry`): only where each reads all."""
    assert backend.independent_groups == ("independent-groups" in capabilities_of(backend))


@pytest.mark.requires("backlog-view")
async def test_a_quiet_peek_leaves_the_messages_counts_as_they_were(backend: Backend) -> None:
    """Where `quiet_peeks` says so, a message looked at is delivered as if nobody had looked
    (the AMQP front end's expiry sweeper looks at queue heads that way)."""
    if not backend.quiet_peeks:
        pytest.skip("a peek marks what it reads on this back end")
    topic, group = names()
    await backend.publish(topic, [msg("a")])
    for _ in range(3):
        assert len(await backend.peek(topic, group, 10)) == 1
    (got,) = await fetch_until(backend, topic, group, 1)
    assert (got.attempt, got.retries) == (0, 0)


async def test_last_id_is_none_or_the_newest_message(backend: Backend) -> None:
    """`last_id` never names another message: the newest one, or None (a back end that
    cannot read a topic without consuming it); back ends with positions always know it."""
    topic, _ = names()
    assert await backend.last_id(topic) is None
    ids = await backend.publish(topic, [msg("a"), msg("b")])
    assert await backend.last_id(topic) in (None, ids[-1])
    if "positions" in capabilities_of(backend):
        assert await backend.last_id(topic) == ids[-1]


@pytest.mark.requires("positions")
async def test_last_id_stays_the_newest_message_when_every_group_acked_it(
    backend: Backend,
) -> None:
    topic, group = names()
    ids = await backend.publish(topic, [msg("a"), msg("b")])
    got = await fetch_until(backend, topic, group, 2)
    await backend.ack([m.lease for m in got])
    assert await backend.last_id(topic) == ids[-1]
    (later,) = await backend.publish(topic, [msg("c", deliver_at_ms=now_ms() + 60_000)])
    assert await backend.last_id(topic) == later  # delayed, and stored all the same
    assert await backend.last_id(names()[0]) is None
