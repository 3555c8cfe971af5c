"""Giving deliveries back: a RELEASE settlement (a protocol's requeue without a failure) and a
push consumer that cancels, keeps what it took settleable and gives back only what it did not
take."""

from __future__ import annotations

from gateway.engine.api import ConsumerType, SettleAction

from .harness import Harness, idle
from .semantics import SECOND


async def test_release_makes_a_pull_delivery_visible_at_once_without_counting(h: Harness) -> None:
    spec = h.spec("rabbitmq", {"x_retry_interval_s": 10})
    await h.publish(b"x")
    first = await h.one(spec)
    assert (await h.settle(first.receipt, SettleAction.RELEASE)).ok
    again = await h.one(spec)  # no retry interval: visible again at once
    assert (again.message_id, again.attempt, again.retries) == (first.message_id, 2, 0)
    stale = await h.settle(first.receipt, SettleAction.RELEASE)
    assert not stale.ok and stale.error_code == "FAILED_PRECONDITION"


async def test_release_is_not_a_failure_towards_the_limit(h: Harness) -> None:
    spec = h.spec("rabbitmq", {"x_retry_interval_s": 10})
    await h.publish(b"x")
    for _ in range(20):  # more than the 16 retries of the policy
        assert (await h.settle((await h.one(spec)).receipt, SettleAction.RELEASE)).ok
    last = await h.one(spec)
    assert last.retries == 0 and (await h.ack(last)).ok
    await h.nothing_more([spec])


async def test_a_cancelled_consumer_keeps_what_it_took_and_gives_back_the_rest(
    h: Harness,
) -> None:
    spec = h.spec("rabbitmq", {"x_retry_interval_s": 10})
    first = await h.open(spec, credit=4)
    await h.publish(b"a", b"b", b"c", b"d")
    taken = await first.next_batch(2)
    assert [d.body for d in taken] == [b"a", b"b"]
    await first.cancel()
    await idle()
    second = await h.open(spec, credit=10)
    # The two it never took went to the other consumer at once; the taken two did not.
    assert sorted(d.body for d in h.pushed(second)) == [b"c", b"d"]
    first.add_credit(5)  # no credit after a cancel
    await h.publish(b"e")
    assert [d.body for d in h.pushed(second)] == [b"e"]
    assert list(first.outbox) == []
    # What it took is still its to settle, and is not delivered again.
    assert (await h.ack(taken[0])).ok
    await first.close()  # closing gives back what is still unsettled
    await idle()
    (back,) = h.pushed(second)
    assert back.body == b"b" and back.attempt == 2 and back.retries == 0


async def test_a_cancelled_consumers_deliveries_still_time_out(h: Harness) -> None:
    spec = h.spec("rabbitmq", {"x_retry_interval_s": 10})
    consumer = await h.open(spec, credit=1)
    await h.publish(b"slow")
    (taken,) = await consumer.next_batch(1)
    await consumer.cancel()
    await h.advance(60 * SECOND)  # the 1-minute ack timeout is a failure
    await h.advance(10 * SECOND)
    again = await h.one(spec)
    assert (again.body, again.retries) == (b"slow", 1)
    late = await h.ack(taken)
    assert not late.ok and late.error_code == "FAILED_PRECONDITION"


async def test_a_cancelled_failover_consumer_hands_over_once_it_settled_what_it_took(
    h: Harness,
) -> None:
    """One consumer at a time: the next consumer of a failover subscription gets nothing while
    the cancelled one still holds deliveries (an earlier message could still come back), and
    everything, in order, once those are settled. Before, it got the later messages at once,
    while the first consumer was still working on the earlier ones."""
    spec = h.spec("rabbitmq", {"x_retry_interval_s": 10},
                  consumer_type=ConsumerType.FAILOVER)
    first = await h.open(spec, credit=2)
    second = await h.open(spec, credit=10)
    await h.publish(b"a", b"b", b"c", b"d")
    taken = await first.next_batch(2)
    assert [d.body for d in taken] == [b"a", b"b"]
    await first.cancel()
    await idle()
    assert h.pushed(second) == []
    assert (await h.ack(taken[0])).ok
    await idle()
    assert h.pushed(second) == []
    assert (await h.ack(taken[1])).ok
    await idle()
    assert [d.body for d in h.pushed(second)] == [b"c", b"d"]


async def test_a_cancelled_failover_consumer_that_closes_gives_back_first(h: Harness) -> None:
    """What the cancelled consumer held comes back before the messages after it."""
    spec = h.spec("rabbitmq", {"x_retry_interval_s": 10},
                  consumer_type=ConsumerType.FAILOVER)
    first = await h.open(spec, credit=2)
    second = await h.open(spec, credit=10)
    await h.publish(b"a", b"b", b"c")
    taken = await first.next_batch(2)
    await first.cancel()
    await idle()
    assert h.pushed(second) == []
    assert (await h.ack(taken[0])).ok
    await first.close()
    await idle()
    got = h.pushed(second)
    assert [(d.body, d.attempt) for d in got] == [(b"b", 2), (b"c", 1)]


async def test_a_seek_voids_a_cancelled_failover_consumers_deliveries_and_hands_over(
    h: Harness,
) -> None:
    """A seek voids what the cancelled consumer held: nothing is left for it to settle, so the
    next consumer takes over at once (it kept the subscription to itself before)."""
    spec = h.spec("pulsar", consumer_type=ConsumerType.FAILOVER)
    first = await h.open(spec, credit=1)
    second = await h.open(spec, credit=10)
    ids = await h.publish(b"a", b"b")
    (taken,) = await first.next_batch(1)
    assert taken.body == b"a"
    await first.cancel()
    await idle()
    await h.engine.seek(spec.topic, spec.group, message_id=ids[0])
    await idle()
    assert [d.body for d in h.pushed(second)] == [b"a", b"b"]
