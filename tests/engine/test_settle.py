"""Settling: dead-letter now, stale and duplicate settles, and deliveries of a lost consumer."""

from __future__ import annotations

import pytest

from gateway.engine.api import ConsumerType, SettleAction, Settlement
from gateway.errors import StaleReceipt

from .harness import GROUP, TOPIC, Harness

STALE = (False, "FAILED_PRECONDITION")


@pytest.mark.parametrize(
    ("policy", "options", "destination"),
    [
        ("rocketmq", {}, f"%DLQ%{GROUP}"),
        ("rocketmq-orderly", {}, f"%DLQ%{GROUP}"),
        ("pulsar", {}, f"{TOPIC}-{GROUP}-DLQ"),
        ("rabbitmq", {"x_dead_letter_exchange": "dlx"}, f"{TOPIC}.dlq"),
    ],
)
async def test_dead_letter_now_goes_to_the_destination_at_once(
    h: Harness, policy: str, options: dict[str, str], destination: str
) -> None:
    spec = h.spec(policy, options)
    (message_id,) = await h.publish(b"poison")
    d = await h.one(spec)
    result = await h.settle(d.receipt, SettleAction.DEAD_LETTER, reason="cannot parse")
    assert result.ok
    (dead,) = await h.stored(destination)
    assert (dead.message_id, dead.body) == (message_id, b"poison")
    assert dead.properties["x-gateway-dead-letter-reason"] == "cannot parse"
    await h.nothing_more([spec])


async def test_dead_letter_now_without_a_destination_discards(h: Harness) -> None:
    spec = h.spec("rabbitmq")  # no x-dead-letter-exchange
    await h.publish(b"poison")
    d = await h.one(spec)
    assert (await h.settle(d.receipt, SettleAction.DEAD_LETTER)).ok
    assert await h.backend.topics() == [TOPIC]
    await h.nothing_more([spec])


async def test_a_second_settle_of_one_delivery_is_stale(h: Harness) -> None:
    spec = h.spec("rocketmq")
    await h.publish(b"x")
    d = await h.one(spec)
    assert (await h.ack(d)).ok
    for action in SettleAction:
        again = await h.settle(d.receipt, action, invisible_ms=20_000)
        assert (again.ok, again.error_code) == STALE
        assert d.receipt in again.error
    assert (await h.engine.ack([d.receipt]))[0].error_code == "FAILED_PRECONDITION"


async def test_duplicates_in_one_batch(h: Harness) -> None:
    spec = h.spec("rocketmq")
    await h.publish(b"x")
    d = await h.one(spec)
    twice = [Settlement(d.receipt, SettleAction.ACK), Settlement(d.receipt, SettleAction.FAIL)]
    with pytest.raises(StaleReceipt):
        await h.engine.settle(twice, atomic=True)  # nothing applied
    first, second = await h.engine.settle(twice)  # one by one: the first wins
    assert first.ok and (second.ok, second.error_code) == STALE
    await h.nothing_more([spec])  # acked, not failed


async def test_unknown_and_earlier_receipts_are_stale(h: Harness) -> None:
    spec = h.spec("rabbitmq", {"x_retry_interval_s": 10})
    await h.publish(b"x")
    first = await h.one(spec)
    assert (await h.fail(first)).ok
    await h.advance(10_000)
    second = await h.one(spec)
    for receipt in (first.receipt, "no-such-receipt"):
        result = await h.settle(receipt, SettleAction.ACK)
        assert (result.ok, result.error_code) == STALE
    assert (await h.ack(second)).ok  # the live delivery is untouched by the stale settles


@pytest.mark.parametrize(
    ("policy", "kind", "retries"),
    [
        ("rocketmq", ConsumerType.SHARED, 0),
        ("rabbitmq", ConsumerType.SHARED, 0),
        ("pulsar", ConsumerType.SHARED, 0),
        ("pulsar-nack", ConsumerType.SHARED, 1),  # the redelivery count counts it
        ("pulsar-nack", ConsumerType.FAILOVER, 0),  # an exclusive one takes no heir
    ],
)
async def test_a_lost_consumer_gives_its_deliveries_back_at_once(
    h: Harness, policy: str, kind: ConsumerType, retries: int
) -> None:
    spec = h.spec(policy, consumer_type=kind)
    lost = await h.open(spec)
    heir = await h.open(spec, credit=0)  # stays connected, takes nothing yet
    await h.publish(b"a", b"b", b"c")
    taken = h.pushed(lost)
    assert len(taken) == 3
    await lost.close()
    heir.add_credit(10)
    await h.advance(0)  # no time passes: no retry interval
    again = h.pushed(heir)
    assert sorted(d.body for d in again) == [b"a", b"b", b"c"]
    assert {(d.attempt, d.retries, d.topic) for d in again} == {(2, retries, TOPIC)}
    for d in taken:  # the lost consumer's receipts are void
        result = await h.ack(d)
        assert (result.ok, result.error_code) == STALE
    for d in again:
        assert (await h.ack(d)).ok


async def test_pulsar_redelivery_count_resets_when_every_consumer_left(h: Harness) -> None:
    """SEMANTICS.md, document 004: the redelivery count is reset to 0 when every consumer of
    the subscription goes offline."""
    spec = h.spec("pulsar-nack")
    only = await h.open(spec)
    await h.publish(b"a")
    assert len(h.pushed(only)) == 1
    await only.close()
    (again,) = h.pushed(await h.open(spec))
    assert again.retries == 0


async def test_a_lost_consumers_deliveries_go_to_the_other_consumer(h: Harness) -> None:
    spec = h.spec("rocketmq")
    stays = await h.open(spec, credit=1)
    leaves = await h.open(spec, credit=1)
    await h.publish(b"a", b"b")
    got_stays, got_leaves = h.pushed(stays), h.pushed(leaves)
    assert len(got_stays) == len(got_leaves) == 1
    await h.ack(got_stays[0])
    await leaves.close()
    await h.advance(0)
    (moved,) = h.pushed(stays)
    assert (moved.body, moved.attempt) == (got_leaves[0].body, 2)
