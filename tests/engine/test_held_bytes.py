"""`max_held_bytes`: the bodies one principal's deliveries hold unsettled are bounded, its
consumers and its pulls together.

A receive made the engine hold every body it handed out until it was settled or timed out, with
nothing but the backlog to bound them, and each consumer a principal opened held its own window.
Now a principal at its limit gets nothing more (a waiting receive waits for room, consumers get
no deliveries) while others go on; room comes back on every way a delivery leaves: ack,
failure, time-out, a consumer closing; a changed invisible time and an ordered retry held keep
it.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from gateway.engine.api import SettleAction, Settlement, SubscriptionSpec
from gateway.engine.config import EngineConfig
from gateway.engine.dispatch import Consumer
from tests.engine.harness import Harness, idle

KIB = 1024
BODY = b"x" * (256 * KIB)
LIMIT = 1 << 20
"""Four bodies: a principal's pulls hold at most that (the one that reaches it is the last)."""
INVISIBLE_MS = 60_000


@pytest.fixture
async def h() -> AsyncIterator[Harness]:
    harness = Harness(EngineConfig(backend_name="memory", max_held_bytes=LIMIT))
    await harness.engine.start()
    try:
        yield harness
    finally:
        await harness.engine.close()


def of(h: Harness, owner: str | None, group: str = "G", policy: str = "rocketmq-simple",
       topic: str = "orders") -> SubscriptionSpec:
    return replace(h.spec(policy, group=group, topic=topic), owner=owner)


async def pull_one_by_one(h: Harness, spec: SubscriptionSpec, most: int = 20) -> list[str]:
    """Receive one at a time until a receive gets nothing; the receipts."""
    out: list[str] = []
    for _ in range(most):
        got = await h.engine.receive(spec, 1, INVISIBLE_MS, 0)
        if not got:
            return out
        out.extend(d.receipt for d in got)
    return out


def held_matches_table(h: Harness) -> None:
    """The count is what the pulled deliveries in the table hold, principal by principal."""
    want: dict[str, int] = {}
    for inf in h.engine.inflight.values():
        if inf.owner is not None:
            want[inf.owner] = want.get(inf.owner, 0) + len(inf.stored.body)
    assert h.engine.holdings.used == want


async def test_a_principal_at_its_limit_gets_nothing_more_and_others_go_on(h: Harness) -> None:
    await h.publish(*[BODY] * 8)
    alice = await pull_one_by_one(h, of(h, "alice"))
    assert len(alice) == 4  # 1 MiB: the fourth reaches the limit and is the last
    assert await h.engine.receive(of(h, "alice"), 10, INVISIBLE_MS, 0) == []
    # Another principal, another group of the same topic: its own room.
    assert len(await pull_one_by_one(h, of(h, "bob", group="B"))) == 4
    # The same principal in another group shares its room.
    assert await h.engine.receive(of(h, "alice", group="A2"), 1, INVISIBLE_MS, 0) == []
    held_matches_table(h)
    # Acking one gives its room back.
    await h.settle(alice[0], SettleAction.ACK)
    assert len(await pull_one_by_one(h, of(h, "alice"))) == 1
    held_matches_table(h)


async def test_a_waiting_receive_at_the_limit_gets_messages_once_one_is_settled(h: Harness) -> None:
    await h.publish(*[BODY] * 6)
    alice = await pull_one_by_one(h, of(h, "alice"))
    waiting = asyncio.ensure_future(h.engine.receive(of(h, "alice"), 10, INVISIBLE_MS, 30_000))
    await idle()
    assert not waiting.done()
    await h.settle(alice[0], SettleAction.ACK)
    got = await asyncio.wait_for(waiting, 5)
    assert len(got) >= 1
    held_matches_table(h)


async def test_a_receive_waiting_at_the_limit_answers_none_when_the_gateway_stops(
        h: Harness) -> None:
    """A shutdown does not wait out a receive held at its principal's limit (up to `wait_ms`):
    it answers at once, with nothing, and the deliveries held stay counted until settled."""
    await h.publish(*[BODY] * 6)
    alice = await pull_one_by_one(h, of(h, "alice"))
    waiting = asyncio.ensure_future(h.engine.receive(of(h, "alice"), 10, INVISIBLE_MS, 30_000))
    await idle()
    assert not waiting.done()
    await h.engine.stop_dispatch()
    assert await asyncio.wait_for(waiting, 1) == []  # no time passed on the manual clock
    held_matches_table(h)
    await h.settle(alice[0], SettleAction.ACK)  # settles are still taken
    held_matches_table(h)


async def test_room_comes_back_when_pulled_deliveries_time_out(h: Harness) -> None:
    await h.publish(*[BODY] * 4)
    assert len(await pull_one_by_one(h, of(h, "alice"))) == 4
    assert h.engine.holdings.used == {"alice": LIMIT}
    await h.advance(INVISIBLE_MS + 1)
    assert h.engine.holdings.used == {}
    # The timed-out ones come back, within the same room.
    assert len(await pull_one_by_one(h, of(h, "alice"))) == 4


async def test_failure_change_of_invisible_time_and_acks_keep_the_count_exact(h: Harness) -> None:
    await h.publish(*[BODY] * 4)
    receipts = await pull_one_by_one(h, of(h, "alice"))
    (extended,) = await h.engine.settle(
        [Settlement(receipts[0], SettleAction.EXTEND, invisible_ms=120_000)])
    assert extended.ok
    held_matches_table(h)
    assert h.engine.holdings.used == {"alice": LIMIT}  # a new receipt, the same body held
    await h.settle(receipts[1], SettleAction.FAIL)
    held_matches_table(h)
    for receipt in [extended.new_receipt, receipts[2], receipts[3]]:
        await h.settle(receipt, SettleAction.ACK)
    assert h.engine.holdings.used == {}


async def test_an_ordered_retry_held_in_the_engine_stays_counted_until_it_goes_out(
    h: Harness,
) -> None:
    spec = of(h, "alice", policy="rocketmq-orderly", group="O")
    await h.publish_keyed(("k", BODY), ("k", BODY))
    (first,) = await h.engine.receive(spec, 1, None, 0)
    await h.settle(first.receipt, SettleAction.FAIL)
    held_matches_table(h)
    assert h.engine.holdings.used == {"alice": len(BODY)}  # held for its in-place retry
    await h.advance(60_000)
    again = await h.engine.receive(spec, 1, None, 0)
    assert [d.message_id for d in again] == [first.message_id]
    held_matches_table(h)
    await h.settle(again[0].receipt, SettleAction.ACK)
    assert h.engine.holdings.used == {}


async def test_receives_at_once_do_not_each_take_the_same_room(h: Harness) -> None:
    await h.publish(*[BODY] * 12)
    spec = of(h, "alice")
    got = await asyncio.gather(*[h.engine.receive(spec, 1, INVISIBLE_MS, 0) for _ in range(8)])
    assert sum(len(g) for g in got) == 4
    held_matches_table(h)


async def test_one_receive_gets_what_fits_and_the_rest_stays_for_later(h: Harness) -> None:
    """The in-memory back end hands out what is asked whatever the bytes: the engine gives
    back what passes the room, with its counts as they were."""
    await h.publish(*[BODY] * 10)
    first = await h.engine.receive(of(h, "alice"), 10, INVISIBLE_MS, 0)
    assert len(first) == 4
    assert [d.attempt for d in first] == [1] * 4
    assert len(await h.engine.receive(of(h, "bob", group="B"), 10, INVISIBLE_MS, 0)) == 4
    for d in first:
        await h.settle(d.receipt, SettleAction.ACK)
    rest = await h.engine.receive(of(h, "alice"), 10, INVISIBLE_MS, 0)
    assert len(rest) == 4 and [d.attempt for d in rest] == [1] * 4
    assert not {d.message_id for d in rest} & {d.message_id for d in first}
    held_matches_table(h)


async def test_the_gateways_own_receives_and_internal_specs_are_not_counted(h: Harness) -> None:
    await h.publish(*[BODY] * 6)
    own = await h.engine.receive(of(h, "alice"), 6, INVISIBLE_MS, 0, counted=False)
    assert len(own) == 6
    assert h.engine.holdings.used == {}
    for d in own:
        await h.settle(d.receipt, SettleAction.RELEASE)
    internal = await pull_one_by_one(h, of(h, None), most=6)
    assert len(internal) == 6
    assert h.engine.holdings.used == {}


async def test_a_lost_back_end_state_voids_the_count_with_the_deliveries(h: Harness) -> None:
    await h.publish(*[BODY] * 4)
    await pull_one_by_one(h, of(h, "alice"))
    h.engine._leases_lost()
    assert h.engine.holdings.used == {}


async def test_a_principals_consumers_together_hold_at_most_its_limit(h: Harness) -> None:
    await h.publish(*[BODY] * 12)
    first = await h.open(of(h, "alice", policy="rocketmq", group="A1"))
    second = await h.open(of(h, "alice", policy="rocketmq", group="A2"))
    got = h.pushed(first) + h.pushed(second)
    assert 4 <= len(got) <= 5  # each window is 64 MiB: the principal's 1 MiB holds them
    assert sum(len(d.body) for d in got) <= LIMIT + len(BODY)
    # Another principal's consumer is not held up; nor are alice's pulls counted elsewhere.
    other = await h.open(of(h, "bob", policy="rocketmq", group="B"))
    assert len(h.pushed(other)) == 4
    held_matches_table(h)
    # Settling one of alice's lets her consumers have more.
    await h.settle(got[0].receipt, SettleAction.ACK)
    assert len(h.pushed(first) + h.pushed(second)) == 1
    held_matches_table(h)


async def test_a_consumer_that_closes_gives_its_principals_room_back(h: Harness) -> None:
    await h.publish(*[BODY] * 6)
    greedy = await h.open(of(h, "alice", policy="rocketmq", group="A1"))
    assert len(h.pushed(greedy)) == 4
    assert await h.engine.receive(of(h, "alice"), 1, INVISIBLE_MS, 0) == []
    await greedy.close()
    await idle()
    assert h.engine.holdings.used == {}
    assert len(await h.engine.receive(of(h, "alice"), 1, INVISIBLE_MS, 0)) == 1
    held_matches_table(h)


async def test_the_gateways_own_consumers_are_not_counted(h: Harness) -> None:
    await h.publish(*[BODY] * 6)
    own = await h.open(of(h, None, policy="rocketmq", group="internal"))
    assert len(h.pushed(own)) == 6
    assert h.engine.holdings.used == {}


@pytest.mark.parametrize("seed", range(6))
async def test_random_work_keeps_the_count_equal_to_what_is_held(h: Harness, seed: int) -> None:
    """Receives, consumers opening and closing, acks, failures, changed invisible times and
    time passing, in a random order: after every step each principal's count is what its
    deliveries in the table hold, and none is over its limit by more than one body."""
    rng = random.Random(seed)
    owners = ["alice", "bob"]
    consumers: list[tuple[str, Consumer]] = []
    out: list[str] = []
    await h.publish(*[b"y" * rng.randrange(1, 300 * KIB) for _ in range(40)])
    for _ in range(150):
        step = rng.randrange(7)
        owner = rng.choice(owners)
        if step == 0:
            got = await h.engine.receive(of(h, owner, group=f"{owner}-pull"),
                                         rng.randrange(1, 8), INVISIBLE_MS, 0)
            out.extend(d.receipt for d in got)
        elif step == 1 and len(consumers) < 4:
            group = f"{owner}-push-{rng.randrange(2)}"
            consumers.append((owner, await h.open(of(h, owner, policy="rocketmq", group=group))))
        elif step == 2 and consumers:
            _, consumer = consumers.pop(rng.randrange(len(consumers)))
            await consumer.close()
            await idle()
        elif step == 3 and consumers:
            _, consumer = rng.choice(consumers)
            out.extend(d.receipt for d in h.pushed(consumer))
        elif step in (4, 5) and out:
            receipt = out.pop(rng.randrange(len(out)))
            action = rng.choice([SettleAction.ACK, SettleAction.FAIL, SettleAction.EXTEND])
            (result,) = await h.engine.settle([Settlement(
                receipt, action, invisible_ms=90_000 if action is SettleAction.EXTEND else None)])
            if result.new_receipt:
                out.append(result.new_receipt)
            await idle()
        elif step == 6:
            await h.advance(rng.choice([1_000, 20_000, 70_000]))
        held_matches_table(h)
        assert all(used <= LIMIT + 300 * KIB for used in h.engine.holdings.used.values())
    for _, consumer in consumers:
        await consumer.close()
    await h.advance(10 * 60_000)
    await h.advance(10 * 60_000)
    held_matches_table(h)
