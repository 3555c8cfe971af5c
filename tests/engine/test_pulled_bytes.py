"""`max_pulled_bytes`: the bodies one principal's pulls hold unsettled are bounded.

A receive made the engine hold every body it handed out until it was settled or timed out, with
nothing but the backlog to bound them. Now a principal at its limit gets nothing more (a waiting
receive waits for room) while others go on; room comes back on every way a delivery leaves:
ack, failure, time-out, a changed invisible time keeps it, an ordered retry held keeps it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from gateway.engine.api import SettleAction, Settlement, SubscriptionSpec
from gateway.engine.config import EngineConfig
from tests.engine.harness import Harness, idle

KIB = 1024
BODY = b"x" * (256 * KIB)
LIMIT = 1 << 20
"""Four bodies: a principal's pulls hold at most that (the one that reaches it is the last)."""
INVISIBLE_MS = 60_000


@pytest.fixture
async def h() -> AsyncIterator[Harness]:
    harness = Harness(EngineConfig(backend_name="memory", max_pulled_bytes=LIMIT))
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
        if inf.pulled is not None:
            want[inf.pulled] = want.get(inf.pulled, 0) + len(inf.stored.body)
    assert h.engine.inflight.held == want


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


async def test_room_comes_back_when_pulled_deliveries_time_out(h: Harness) -> None:
    await h.publish(*[BODY] * 4)
    assert len(await pull_one_by_one(h, of(h, "alice"))) == 4
    assert h.engine.inflight.held == {"alice": LIMIT}
    await h.advance(INVISIBLE_MS + 1)
    assert h.engine.inflight.held == {}
    # The timed-out ones come back, within the same room.
    assert len(await pull_one_by_one(h, of(h, "alice"))) == 4


async def test_failure_change_of_invisible_time_and_acks_keep_the_count_exact(h: Harness) -> None:
    await h.publish(*[BODY] * 4)
    receipts = await pull_one_by_one(h, of(h, "alice"))
    (extended,) = await h.engine.settle(
        [Settlement(receipts[0], SettleAction.EXTEND, invisible_ms=120_000)])
    assert extended.ok
    held_matches_table(h)
    assert h.engine.inflight.held == {"alice": LIMIT}  # a new receipt, the same body held
    await h.settle(receipts[1], SettleAction.FAIL)
    held_matches_table(h)
    for receipt in [extended.new_receipt, receipts[2], receipts[3]]:
        await h.settle(receipt, SettleAction.ACK)
    assert h.engine.inflight.held == {}


async def test_an_ordered_retry_held_in_the_engine_stays_counted_until_it_goes_out(
    h: Harness,
) -> None:
    spec = of(h, "alice", policy="rocketmq-orderly", group="O")
    await h.publish_keyed(("k", BODY), ("k", BODY))
    (first,) = await h.engine.receive(spec, 1, None, 0)
    await h.settle(first.receipt, SettleAction.FAIL)
    held_matches_table(h)
    assert h.engine.inflight.held == {"alice": len(BODY)}  # held for its in-place retry
    await h.advance(60_000)
    again = await h.engine.receive(spec, 1, None, 0)
    assert [d.message_id for d in again] == [first.message_id]
    held_matches_table(h)
    await h.settle(again[0].receipt, SettleAction.ACK)
    assert h.engine.inflight.held == {}


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
    assert h.engine.inflight.held == {}
    for d in own:
        await h.settle(d.receipt, SettleAction.RELEASE)
    internal = await pull_one_by_one(h, of(h, None), most=6)
    assert len(internal) == 6
    assert h.engine.inflight.held == {}


async def test_a_lost_back_end_state_voids_the_count_with_the_deliveries(h: Harness) -> None:
    await h.publish(*[BODY] * 4)
    await pull_one_by_one(h, of(h, "alice"))
    h.engine._leases_lost()
    assert h.engine.inflight.held == {}
