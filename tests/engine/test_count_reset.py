"""Pulsar's redelivery count starts from 0 again when every consumer of the subscription has
left (SEMANTICS.md, document 004): the engine resets the group's counts in the back end when
its last push consumer leaves, under a policy that says so (`count_resets_unattended`)."""

from __future__ import annotations

import pytest

from tests.engine.harness import Harness

NACK = {"nack_delay_ms": 1_000}


async def test_nacked_messages_waiting_for_redelivery_count_from_zero_after_all_left(
    h: Harness,
) -> None:
    spec = h.spec("pulsar-nack", NACK)
    consumer = await h.open(spec)
    await h.publish(b"a", b"b")
    for _ in range(2):  # two nacks each: redelivery count 2
        for d in h.pushed(consumer):
            assert (await h.fail(d)).ok
        await h.advance(1_000)
    got = h.pushed(consumer)
    assert sorted(d.retries for d in got) == [2, 2]
    for d in got:  # nacked a third time: waiting, counted 3
        assert (await h.fail(d)).ok
    await consumer.close()
    await h.advance(1_000)
    again = h.pushed(await h.open(spec))
    assert sorted(d.body for d in again) == [b"a", b"b"]
    assert [d.retries for d in again] == [0, 0]
    assert all(d.attempt == 4 for d in again)  # deliveries are still counted


async def test_the_count_stays_while_another_consumer_is_there(h: Harness) -> None:
    spec = h.spec("pulsar-nack", NACK)
    stays = await h.open(spec, credit=1)
    leaves = await h.open(spec, credit=1)
    await h.publish(b"a", b"b")
    for consumer in (stays, leaves):
        for d in h.pushed(consumer):
            assert (await h.fail(d)).ok
    await leaves.close()
    await h.advance(1_000)
    got = h.pushed(stays) + h.pushed(stays)
    assert len(got) == 1
    assert got[0].retries == 1
    await h.advance(0)
    assert (await h.ack(got[0])).ok
    (last,) = h.pushed(stays)
    assert last.retries == 1


async def test_the_dead_letter_limit_counts_again_from_zero(h: Harness) -> None:
    spec = h.spec("pulsar-nack", {"nack_delay_ms": 0, "max_retries": 1})
    consumer = await h.open(spec)
    await h.publish(b"a")
    (first,) = h.pushed(consumer)
    assert (await h.fail(first)).ok
    (second,) = h.pushed(consumer)
    assert second.retries == 1
    await consumer.close()  # the last consumer: its delivery comes back uncounted, count 0
    consumer = await h.open(spec)
    (third,) = h.pushed(consumer)
    assert third.retries == 0
    assert (await h.fail(third)).ok
    (fourth,) = h.pushed(consumer)  # one failure again: not exhausted yet
    assert (fourth.body, fourth.retries) == (b"a", 1)


async def test_a_pull_consumers_delivery_keeps_the_group_attended(h: Harness) -> None:
    spec = h.spec("pulsar-nack", {"nack_delay_ms": 0})
    consumer = await h.open(spec, credit=1)
    await h.publish(b"a", b"b")
    (pushed,) = h.pushed(consumer)
    assert (await h.fail(pushed)).ok
    (again,) = h.pushed(consumer)
    assert again.retries == 1
    pulled = await h.receive(spec, 1)
    assert len(pulled) == 1
    await consumer.close()
    await h.advance(0)
    back = h.pushed(await h.open(spec))
    assert [d.retries for d in back] == [2]  # not the last consumer: lost and counted


@pytest.mark.parametrize("policy", ["rocketmq", "pulsar", "rabbitmq"])
async def test_other_policies_keep_counting(h: Harness, policy: str) -> None:
    """Their counts travel with the message (a property, a header): they survive the
    consumers."""
    spec = h.spec(policy)
    consumer = await h.open(spec)
    await h.publish(b"a")
    (d,) = h.pushed(consumer)
    assert (await h.fail(d)).ok
    await consumer.close()
    consumer = await h.open(spec)
    await h.advance(3_600_000)
    (again,) = h.pushed(consumer)
    assert (again.body, again.retries) == (b"a", 1)
