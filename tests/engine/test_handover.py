"""Group handover (issue 19): a group's consumers leave one policy or client kind and come back
on another without losing the group's position, its in-flight deliveries or its pending
retries. The attempt count carries over; waiting retries keep their schedule; new failures
follow the new consumer's policy; with consumers of both kinds at once, each delivery is settled
under the policy of the consumer that took it. Manual clock, in-memory back end.
"""

from __future__ import annotations

from dataclasses import replace

from adapters import builtin_registry
from gateway.engine.api import SettleAction
from gateway.engine.config import EngineConfig
from gateway.engine.engine import Engine

from .harness import GROUP, TOPIC, Harness, idle
from .semantics import MINUTE, SECOND

ROCKETMQ_RETRY = f"%RETRY%{GROUP}"
ROCKETMQ_DLQ = f"%DLQ%{GROUP}"


async def _fail_twice_under_rocketmq(h: Harness) -> str:
    """Publish `first` and `second`; a RocketMQ push-style consumer takes `first` only and
    fails it twice (10 s, then 30 s back-off). Returns the id of `first`; its third delivery is
    due 30 s from now."""
    rocket = h.spec("rocketmq")
    (first_id,) = await h.publish(b"first")
    (d1,) = await h.receive(rocket, 1)
    assert (await h.fail(d1)).ok
    await h.advance(10 * SECOND)
    (d2,) = await h.receive(rocket, 1)
    assert (d2.body, d2.attempt, d2.retries, d2.topic) == (b"first", 2, 1, ROCKETMQ_RETRY)
    assert (await h.fail(d2)).ok
    await h.publish(b"second")
    return first_id


async def test_rocketmq_to_pulsar_keeps_position_and_the_pending_retry(h: Harness) -> None:
    first_id = await _fail_twice_under_rocketmq(h)
    # The group comes back as a Pulsar Shared subscription (the Pulsar front end's policy).
    pulsar = await h.open(h.spec("pulsar-nack", {"nack_delay_ms": 0}))
    (second,) = h.pushed(pulsar)  # the group's position: the message nobody consumed yet
    assert (second.body, second.attempt, second.retries) == (b"second", 1, 0)
    assert (await h.ack(second)).ok
    await h.advance(30 * SECOND - 1)
    assert h.pushed(pulsar) == []  # the retry keeps the schedule RocketMQ gave it
    await h.advance(1)
    (third,) = h.pushed(pulsar)
    assert (third.message_id, third.body) == (first_id, b"first")
    assert (third.attempt, third.retries) == (3, 2)  # the count carried over
    assert third.original_topic == TOPIC
    assert (await h.ack(third)).ok
    await h.advance(3 * 3_600_000)
    assert h.pushed(pulsar) == []


async def test_new_failures_follow_the_new_policy(h: Harness) -> None:
    await _fail_twice_under_rocketmq(h)
    pulsar = await h.open(h.spec("pulsar-nack", {"nack_delay_ms": 2_000}))
    assert (await h.ack(h.pushed(pulsar)[0])).ok
    await h.advance(30 * SECOND)
    (third,) = h.pushed(pulsar)
    assert (await h.fail(third)).ok
    # pulsar-nack: the same stored message again (the copy it already was), after its own 2 s
    # rather than RocketMQ's third step of 1 min, and no new copy.
    await h.advance(2 * SECOND - 1)
    assert h.pushed(pulsar) == []
    await h.advance(1)
    (fourth,) = h.pushed(pulsar)
    assert (fourth.attempt, fourth.retries, fourth.topic) == (4, 3, ROCKETMQ_RETRY)
    assert fourth.message_id == third.message_id
    assert (await h.ack(fourth)).ok
    await h.advance(3 * 3_600_000)
    assert h.pushed(pulsar) == []


async def test_pulsar_to_rocketmq_keeps_the_pending_retry_and_its_count(h: Harness) -> None:
    nack = h.spec("pulsar-nack", {"nack_delay_ms": 60_000})
    pulsar = await h.open(nack)
    (first_id,) = await h.publish(b"first")
    (d1,) = h.pushed(pulsar)
    assert (await h.fail(d1)).ok
    await h.advance(MINUTE)
    (d2,) = h.pushed(pulsar)
    assert d2.retries == 1
    assert (await h.fail(d2)).ok  # the second failure: back in a minute, in place
    await pulsar.close()
    await h.publish(b"second")
    rocket = h.spec("rocketmq")
    (second,) = await h.receive(rocket)
    assert (second.body, second.attempt) == (b"second", 1)
    assert (await h.ack(second)).ok
    await h.advance(MINUTE - 1)
    assert await h.receive(rocket) == []
    await h.advance(1)
    third = await h.one(rocket)
    assert (third.message_id, third.attempt, third.retries) == (first_id, 3, 2)
    # A new failure follows RocketMQ: retry 3 waits the table's third step (1 min) on %RETRY%G
    # and carries RocketMQ's properties.
    assert (await h.fail(third)).ok
    (copy,) = await h.stored(ROCKETMQ_RETRY)
    assert copy.properties["RECONSUME_TIME"] == "3"
    assert copy.deliver_at_ms == h.now() + MINUTE
    await h.advance(MINUTE)
    fourth = await h.one(rocket)
    assert (fourth.attempt, fourth.retries, fourth.topic) == (4, 3, ROCKETMQ_RETRY)
    assert (await h.ack(fourth)).ok
    await h.nothing_more([rocket])


async def test_in_flight_deliveries_of_a_leaving_consumer_come_to_the_next(h: Harness) -> None:
    rocket = await h.open(h.spec("rocketmq"))
    await h.publish(b"a", b"b")
    taken = h.pushed(rocket)
    assert len(taken) == 2
    await rocket.close()  # leaves with both in flight: given back at once, not counted
    pulsar = await h.open(h.spec("pulsar-nack"))
    again = h.pushed(pulsar)
    assert sorted(d.body for d in again) == [b"a", b"b"]
    assert {(d.attempt, d.retries) for d in again} == {(2, 0)}


async def test_mixed_consumers_settle_under_their_own_policy(h: Harness) -> None:
    """During a cut-over both kinds consume the group at once: they compete for its messages,
    and each delivery's failure and timeout follow the policy of the consumer that took it,
    whichever subscribed last."""
    nack = h.spec("pulsar-nack", {"nack_delay_ms": 5_000})
    rocket = h.spec("rocketmq")
    await h.publish(b"p", b"r")
    (p,) = await h.receive(nack, 1)
    (r,) = await h.receive(rocket, 1)  # subscribes last: the group's settings are RocketMQ's
    assert (p.body, r.body) == (b"p", b"r")
    assert (await h.fail(p)).ok
    assert (await h.fail(r)).ok
    # The RocketMQ delivery's retry is a copy on %RETRY%G after 10 s; the Pulsar one comes
    # again in place after its 5 s.
    (copy,) = await h.stored(ROCKETMQ_RETRY)
    assert copy.body == b"r"
    await h.advance(5 * SECOND)
    (p2,) = await h.receive(nack, 1)
    assert (p2.body, p2.retries, p2.topic) == (b"p", 1, TOPIC)
    await h.advance(5 * SECOND)
    (r2,) = await h.receive(rocket, 1)
    assert (r2.body, r2.retries, r2.topic) == (b"r", 1, ROCKETMQ_RETRY)
    await h.advance(2 * MINUTE)
    # A Pulsar delivery has no ack timeout, though the group's last subscriber has 1 min...
    assert (await h.ack(p2)).ok
    # ...and the RocketMQ delivery timed out after its 1 min: a failure, retried after 30 s.
    assert (await h.ack(r2)).error_code == "FAILED_PRECONDITION"
    await h.advance(30 * SECOND)
    (r3,) = await h.receive(rocket, 1)
    assert (r3.body, r3.retries) == (b"r", 2)
    assert (await h.ack(r3)).ok


async def test_a_naming_scheme_change_keeps_the_waiting_retries(h: Harness) -> None:
    """Pulsar 2.7 names (`{sub}-RETRY`) to 2.9 names (`{topic}-{sub}-RETRY`): a retry waiting
    at the old name still comes; the next goes to the new one with its count (004)."""
    old = replace(h.spec("pulsar", {"max_retries": 5}), naming="pulsar-2.7")
    new = h.spec("pulsar", {"max_retries": 5})
    await h.publish(b"m")
    d1 = await h.one(old)
    assert (await h.fail(d1, delay_ms=20_000)).ok
    assert len(await h.stored(f"{GROUP}-RETRY")) == 1
    await h.advance(20 * SECOND)
    d2 = await h.one(new)
    assert (d2.retries, d2.topic, d2.properties["RECONSUMETIMES"]) == (1, f"{GROUP}-RETRY", "1")
    assert (await h.fail(d2, delay_ms=5_000)).ok
    (copy,) = await h.stored(f"{TOPIC}-{GROUP}-RETRY")
    assert copy.properties["RECONSUMETIMES"] == "2"
    await h.advance(5 * SECOND)
    d3 = await h.one(new)
    assert (d3.retries, d3.topic) == (2, f"{TOPIC}-{GROUP}-RETRY")
    assert (await h.ack(d3)).ok


async def test_retries_at_old_names_are_found_after_a_restart(h: Harness) -> None:
    """A gateway restarted between the two kinds of consumer still finds the old policy's
    retry destination (the back end lists it)."""
    first_id = await _fail_twice_under_rocketmq(h)
    await h.engine.close()
    h.engine = Engine(h.backend, builtin_registry(), h.clock, EngineConfig(backend_name="memory"))
    await h.engine.start()
    pulsar = await h.open(h.spec("pulsar-nack", {"nack_delay_ms": 0}))
    assert [d.body for d in h.pushed(pulsar)] == [b"second"]
    await h.advance(30 * SECOND)
    (third,) = h.pushed(pulsar)
    assert (third.message_id, third.retries) == (first_id, 2)


async def test_dead_letters_under_the_old_scheme_stay_readable(h: Harness) -> None:
    rocket = h.spec("rocketmq", {"max_retries": 0})
    (dead_id,) = await h.publish(b"dead")
    assert (await h.fail(await h.one(rocket))).ok
    # The group moves to Pulsar; its dead letter stays where RocketMQ put it.
    pulsar = await h.open(h.spec("pulsar-nack"))
    await idle()
    assert h.pushed(pulsar) == []
    (letter,) = await h.stored(ROCKETMQ_DLQ)
    assert (letter.message_id, letter.body) == (dead_id, b"dead")
    # Readable by any client of the dead-letter destination, and by the admin API.
    (read,) = await h.receive(h.spec("pulsar-nack", topic=ROCKETMQ_DLQ, group="reader"))
    assert read.message_id == dead_id
    page = await h.engine.admin.dead_letters(TOPIC, GROUP, 10, 0)
    assert [v.message.message_id for v in page.views] == [dead_id]


async def test_an_ordered_retry_held_for_one_consumer_goes_to_the_next(h: Harness) -> None:
    """An ordered group's failing message is held by the engine until its suspension ends; a
    consumer of another kind that takes the group over gets it then, with its count. The new
    policy does not keep order: the key's next message is not held back meanwhile."""
    orderly = await h.open(h.spec("rocketmq-orderly", {"suspend_ms": 3_000}))
    await h.publish_keyed(("k", b"1"), ("k", b"2"))
    (one,) = h.pushed(orderly)
    assert (await h.settle(one.receipt, SettleAction.FAIL)).ok
    await orderly.close()
    pulsar = await h.open(h.spec("pulsar-nack"))
    assert [d.body for d in h.pushed(pulsar)] == [b"2"]
    await h.advance(3_000 - 1)
    assert h.pushed(pulsar) == []
    await h.advance(1)
    (again,) = h.pushed(pulsar)
    assert (again.body, again.attempt, again.retries) == (b"1", 2, 1)


async def test_an_amqp_queue_to_rocketmq_keeps_the_queues_interval(h: Harness) -> None:
    """Document 001 -> RocketMQ: a retry waiting in place for the queue's x-retry-interval
    comes to the RocketMQ consumer of the group at that time; its next failure follows
    RocketMQ's table from the carried count (retry 2: 30 s on %RETRY%G)."""
    amqp = h.spec("rabbitmq", {"x_retry_interval_s": 60})
    await h.publish(b"m")
    assert (await h.fail(await h.one(amqp))).ok
    rocket = h.spec("rocketmq")
    await h.advance(MINUTE - 1)
    assert await h.receive(rocket) == []
    await h.advance(1)
    d2 = await h.one(rocket)
    assert (d2.attempt, d2.retries, d2.topic) == (2, 1, TOPIC)
    assert (await h.fail(d2)).ok
    await h.advance(30 * SECOND - 1)
    assert await h.receive(rocket) == []
    await h.advance(1)
    d3 = await h.one(rocket)
    assert (d3.attempt, d3.retries, d3.topic) == (3, 2, ROCKETMQ_RETRY)
    assert (await h.ack(d3)).ok
    await h.nothing_more([rocket, amqp])


async def test_a_key_blocked_under_an_ordered_setting_is_freed_under_another(h: Harness) -> None:
    """A message fetched while the group consumed in order blocks its key; settling it frees
    the key even when the group's setting changed meanwhile, so the key's next message comes
    once the group is ordered again."""
    nack = h.spec("pulsar-nack")
    orderly = h.spec("rocketmq-orderly")
    pushed = await h.open(nack, credit=0)
    assert await h.receive(orderly) == []  # subscribes last: the group consumes in order
    await h.publish_keyed(("k", b"1"))
    pushed.add_credit(1)
    await idle()
    (one,) = h.pushed(pushed)
    assert await h.receive(nack) == []  # the group's setting is unordered again
    assert (await h.ack(one)).ok
    await pushed.close()
    await h.publish_keyed(("k", b"2"))
    (two,) = await h.receive(orderly)
    assert two.body == b"2"
