"""`max_groups_per_principal`: one principal (`SubscriptionSpec.owner`, the caller that makes a
group) runs at most that many groups, so a client that keeps all its groups in use (unsettled
deliveries in each) cannot lock every other client out of new groups, as it could with the one
pool of `max_groups`. At its share a principal first makes room among its own idle groups only
(at most once a second for it); then it is refused (TOO_MANY_GROUPS, naming the per-principal
setting), and the others go on."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

import pytest
import pytest_asyncio

from gateway.engine.api import SubscriptionSpec
from gateway.engine.config import EngineConfig
from gateway.errors import InvalidArgument, TooManyGroups, TooManyOwnGroups
from tests.engine.harness import TOPIC, Harness


@pytest_asyncio.fixture
async def shared() -> AsyncIterator[Harness]:
    harness = Harness(EngineConfig(backend_name="memory", max_groups=6,
                                   max_groups_per_principal=3))
    await harness.engine.start()
    try:
        yield harness
    finally:
        await harness.engine.close()


def of(h: Harness, owner: str | None, group: str) -> SubscriptionSpec:
    return replace(h.spec("rocketmq-simple", group=group), owner=owner)


async def test_a_principal_at_its_share_is_refused_and_the_others_go_on(shared: Harness) -> None:
    h = shared
    await h.publish(b"a", b"b")
    held = {g: await h.receive(of(h, "greedy", g)) for g in ("g1", "g2", "g3")}  # in use
    assert all(len(got) == 2 for got in held.values())
    with pytest.raises(TooManyOwnGroups) as refused:
        await h.receive(of(h, "greedy", "g4"))
    assert isinstance(refused.value, TooManyGroups)
    assert refused.value.reason == "TOO_MANY_GROUPS" and refused.value.code == (
        "RESOURCE_EXHAUSTED")
    assert "principal 'greedy'" in refused.value.message
    assert "max_groups_per_principal" in refused.value.message and "3" in refused.value.message
    # Another principal is not affected: it gets its share of the pool.
    for group in ("o1", "o2", "o3"):
        assert [d.body for d in await h.receive(of(h, "other", group))] == [b"a", b"b"]
    # Joining a group another principal made does not count against the one that joins.
    assert await h.receive(of(h, "other", "g1")) == []
    assert len(h.engine.subscriptions) == 6


async def test_room_is_made_among_the_principals_own_idle_groups_only(shared: Harness) -> None:
    h = shared
    await h.publish(b"a")
    for group in ("o1", "o2"):
        for d in await h.receive(of(h, "other", group)):
            assert (await h.ack(d)).ok  # the other's groups: idle
    first = await h.receive(of(h, "greedy", "g1"))
    await h.receive(of(h, "greedy", "g2"))
    await h.receive(of(h, "greedy", "g3"))
    with pytest.raises(TooManyOwnGroups):
        await h.receive(of(h, "greedy", "g4"))
    assert (await h.ack(first[0])).ok  # g1 is idle now
    with pytest.raises(TooManyOwnGroups):  # its last look was less than a second ago
        await h.receive(of(h, "greedy", "g4"))
    await h.advance(1000)
    assert [d.body for d in await h.receive(of(h, "greedy", "g4"))] == [b"a"]
    assert set(h.engine.subscriptions) == {(TOPIC, g) for g in ("o1", "o2", "g2", "g3", "g4")}
    # Its looks are its own: the other principal's next new group is not held back by them.
    assert [d.body for d in await h.receive(of(h, "other", "o3"))] == [b"a"]


async def test_the_pool_still_caps_every_principal_together(shared: Harness) -> None:
    h = shared
    await h.publish(b"a")
    for owner in ("p", "q"):
        for n in range(3):
            assert await h.receive(of(h, owner, f"{owner}{n}")) != []
    with pytest.raises(TooManyGroups, match="max_groups, --max-groups") as refused:
        await h.receive(of(h, "", "anonymous"))
    assert not isinstance(refused.value, TooManyOwnGroups)


async def test_without_a_share_of_its_own_one_principal_may_take_the_whole_pool() -> None:
    h = Harness(EngineConfig(backend_name="memory", max_groups=4))
    await h.engine.start()
    try:
        await h.publish(b"a")
        for n in range(4):
            assert await h.receive(of(h, "", f"g{n}")) != []
        with pytest.raises(TooManyGroups, match="max_groups, --max-groups"):
            await h.receive(of(h, "", "g4"))
    finally:
        await h.engine.close()


def test_a_share_out_of_range_is_refused_naming_it() -> None:
    for bad in (-1, 7):
        with pytest.raises(InvalidArgument, match=r"max_groups_per_principal=.* 0\.\.max_groups "
                                                  r"\(6\)"):
            EngineConfig(max_groups=6, max_groups_per_principal=bad)
    assert EngineConfig(max_groups=6).groups_per_principal == 6
    assert EngineConfig(max_groups=6, max_groups_per_principal=2).groups_per_principal == 2


async def test_the_gateways_own_groups_take_no_share_but_count_in_the_pool(
    shared: Harness,
) -> None:
    """Owner None (a front end's internal routing, e.g. AMQP dead-letter exchanges): with a
    tokens file the anonymous share is half the pool, and internal groups counted there refused
    dead-letter routing beyond it; they count in `max_groups` only."""
    h = shared
    await h.publish(b"a")
    for group in ("i1", "i2", "i3", "i4"):  # more than a principal's share of 3
        assert [d.body for d in await h.receive(of(h, None, group))] == [b"a"]  # in use
    assert [d.body for d in await h.receive(of(h, "", "anon"))] == [b"a"]
    assert [d.body for d in await h.receive(of(h, "p", "p1"))] == [b"a"]
    with pytest.raises(TooManyGroups) as refused:  # the pool is full, all of it in use
        await h.receive(of(h, None, "i5"))
    assert not isinstance(refused.value, TooManyOwnGroups)
