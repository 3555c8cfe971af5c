"""Every policy's retry sequence, driven through the engine on a manual clock, against
`gateway plan`'s timeline for it and against the documented numbers (SEMANTICS.md)."""

from __future__ import annotations

import pytest

from gateway.engine.api import ConsumerType
from gateway.errors import InvalidArgument

from .harness import GROUP, T0, TOPIC, Harness
from .semantics import (
    DELAY_LEVELS_MS,
    HOUR,
    PULSAR_DELAY_RANGE_S,
    PULSAR_MAX_REDELIVER,
    PULSAR_NACK_DELAY_MS,
    RABBITMQ_MAX_RETRIES,
    RABBITMQ_RETRY_INTERVAL_RANGE_S,
    ROCKETMQ_BACKOFF_MS,
    ROCKETMQ_BEYOND_MS,
    ROCKETMQ_MAX_RETRIES,
    ROCKETMQ_MAX_RETRIES_5X,
    ROCKETMQ_SUSPEND_MS,
    SECOND,
)


def waits(deliveries: list, at_ms: list[int], processing_ms: int = 0) -> list[int]:
    """Each retry's wait as the engine set it: the copy's visible-at time (or the delivery's
    time for in-place retries) minus the failure it follows."""
    return [at_ms[k] - (at_ms[k - 1] + processing_ms) for k in range(1, len(deliveries))]


# ---------------------------------------------------------------------- RocketMQ push


async def test_rocketmq_sixteen_step_backoff_then_dlq_of_the_group(h: Harness) -> None:
    spec = h.spec("rocketmq")
    seen, expected = await h.pull_timeline(spec)
    at = [a.at_ms for a in expected.attempts]
    assert waits(seen, at) == ROCKETMQ_BACKOFF_MS
    # The retry copies wait on %RETRY%group, visible exactly at failure + back-off.
    assert [d.deliver_at_ms - T0 for d in seen[1:]] == at[1:]
    assert len(seen) == ROCKETMQ_MAX_RETRIES + 1
    assert [d.topic for d in seen] == [TOPIC] + [f"%RETRY%{GROUP}"] * 16
    assert [d.properties.get("RECONSUME_TIME") for d in seen[1:]] == [str(k) for k in
                                                                      range(1, 17)]
    # Message id unchanged across retries (document 000), kept as ORIGIN_MESSAGE_ID too.
    assert {d.message_id for d in seen} == {seen[0].message_id}
    assert seen[-1].properties["ORIGIN_MESSAGE_ID"] == seen[0].message_id
    assert (expected.disposition, expected.destination) == ("dlq", f"%DLQ%{GROUP}")
    (dead,) = await h.stored(f"%DLQ%{GROUP}")
    assert dead.message_id == seen[0].message_id and dead.body == b"payload"
    assert dead.properties["DLQ_ORIGIN_TOPIC"] == TOPIC
    assert "retries exhausted" in dead.properties["x-gateway-dead-letter-reason"]
    await h.nothing_more([spec])


async def test_rocketmq_retries_past_sixteen_wait_two_hours(h: Harness) -> None:
    spec = h.spec("rocketmq", {"max_retries": 18})
    seen, expected = await h.pull_timeline(spec)
    assert waits(seen, [a.at_ms for a in expected.attempts]) == [
        *ROCKETMQ_BACKOFF_MS, ROCKETMQ_BEYOND_MS, ROCKETMQ_BEYOND_MS]
    assert len(seen) == 19


@pytest.mark.parametrize("max_retries", [0, 3])
async def test_rocketmq_max_retries_n_means_n_plus_one_deliveries(
    h: Harness, max_retries: int
) -> None:
    spec = h.spec("rocketmq", {"max_retries": max_retries})
    seen, expected = await h.pull_timeline(spec)
    assert len(seen) == max_retries + 1 == expected.total_attempts
    assert len(await h.stored(f"%DLQ%{GROUP}")) == 1
    await h.nothing_more([spec])


async def test_rocketmq_max_retries_range_by_version(h: Harness) -> None:
    with pytest.raises(InvalidArgument) as bad:
        await h.receive(h.spec("rocketmq", {"max_retries": ROCKETMQ_MAX_RETRIES_5X + 1}))
    assert bad.value.field == "max_retries" and "0..1000" in bad.value.message
    await h.receive(h.spec("rocketmq", {"max_retries": ROCKETMQ_MAX_RETRIES_5X}))
    await h.receive(h.spec("rocketmq", {"max_retries": 5000, "version": 4}))  # 4.x: no bound


async def test_rocketmq_dead_letter_off_discards(h: Harness) -> None:
    spec = h.spec("rocketmq", {"max_retries": 1, "dead_letter": "false"})
    seen, expected = await h.pull_timeline(spec)
    assert (len(seen), expected.disposition) == (2, "discard")
    assert f"%DLQ%{GROUP}" not in await h.backend.topics()
    await h.nothing_more([spec])


async def test_rocketmq_delay_levels_chosen_by_the_consumer(h: Harness) -> None:
    """4.x `delayLevelWhenNextConsume`: level k waits the k-th of the 18 levels."""
    spec = h.spec("rocketmq", {"max_retries": 30})
    await h.publish(b"x")
    d = await h.one(spec)
    for level, wait in enumerate(DELAY_LEVELS_MS, start=1):
        assert (await h.fail(d, delay_level=level)).ok
        failed = h.now()
        await h.at(failed + wait - 1)
        assert await h.receive(spec) == []
        await h.at(failed + wait)
        d = await h.one(spec)
        assert d.retries == level
    bad = await h.fail(d, delay_level=19)
    assert (bad.ok, bad.error_code) == (False, "INVALID_ARGUMENT") and "1..18" in bad.error


# ---------------------------------------------------------------------- RocketMQ orderly, simple


async def test_rocketmq_orderly_fixed_suspend_in_place(h: Harness) -> None:
    spec = h.spec("rocketmq-orderly", {"suspend_ms": 2500, "max_retries": 3})
    seen, expected = await h.pull_timeline(spec)
    assert waits(seen, [a.at_ms for a in expected.attempts]) == [2500] * 3
    assert [d.topic for d in seen] == [TOPIC] * 4  # in place: no retry topic
    assert len(await h.stored(f"%DLQ%{GROUP}")) == 1


async def test_rocketmq_orderly_defaults(h: Harness) -> None:
    policy = h.engine.policy_for(h.spec("rocketmq-orderly"))
    assert policy.max_retries == 2**31 - 1  # Integer.MAX_VALUE
    spec = h.spec("rocketmq-orderly")
    await h.publish(b"x")
    d = await h.one(spec)
    await h.fail(d)
    await h.advance(ROCKETMQ_SUSPEND_MS - 1)
    assert await h.receive(spec) == []
    await h.advance(1)
    assert (await h.one(spec)).retries == 1


async def test_rocketmq_simple_retry_interval_is_invisible_minus_processing(h: Harness) -> None:
    spec = h.spec("rocketmq-simple", {"max_retries": 3})
    seen, expected = await h.pull_timeline(spec, invisible_ms=30 * SECOND,
                                           processing_ms=6 * SECOND)
    # Ready at 0, fails 6 s in, invisible 30 s: ready again 24 s after the failure.
    assert waits(seen, [a.at_ms for a in expected.attempts], 6 * SECOND) == [24 * SECOND] * 3
    assert [d.topic for d in seen] == [TOPIC] * 4
    assert len(await h.stored(f"%DLQ%{GROUP}")) == 1


# ---------------------------------------------------------------------- RabbitMQ


@pytest.mark.parametrize("interval_s", RABBITMQ_RETRY_INTERVAL_RANGE_S)
async def test_rabbitmq_fixed_interval_sixteen_retries_then_discard(
    h: Harness, interval_s: int
) -> None:
    spec = h.spec("rabbitmq", {"x_retry_interval_s": interval_s})
    seen, expected = await h.pull_timeline(spec)
    assert waits(seen, [a.at_ms for a in expected.attempts]) == [interval_s * SECOND] * 16
    assert len(seen) == RABBITMQ_MAX_RETRIES + 1
    assert expected.disposition == "discard"
    assert await h.backend.topics() == [TOPIC]  # nothing dead-lettered anywhere
    await h.nothing_more([spec])


async def test_rabbitmq_exhausted_goes_to_the_dead_letter_exchange(h: Harness) -> None:
    spec = h.spec("rabbitmq", {"x_retry_interval_s": 10, "x_dead_letter_exchange": "dlx"})
    seen, expected = await h.pull_timeline(spec)
    assert len(seen) == 17 and expected.destination == f"{TOPIC}.dlq"
    (dead,) = await h.stored(f"{TOPIC}.dlq")
    assert dead.properties["x-gateway-dlx-routing-key"] == TOPIC  # routed by routing key
    await h.nothing_more([spec])


@pytest.mark.parametrize("interval_s", [9, 1801])
async def test_rabbitmq_interval_outside_range_is_refused(h: Harness, interval_s: int) -> None:
    with pytest.raises(InvalidArgument) as bad:
        await h.receive(h.spec("rabbitmq", {"x_retry_interval_s": interval_s}))
    assert bad.value.field == "x_retry_interval_s" and "10..1800" in bad.value.message


# ---------------------------------------------------------------------- Pulsar retry letter


@pytest.mark.parametrize("kind", [ConsumerType.SHARED, ConsumerType.KEY_SHARED])
async def test_pulsar_reconsume_later_incremental_levels_then_dlq(
    h: Harness, kind: ConsumerType
) -> None:
    spec = h.spec("pulsar", consumer_type=kind)
    seen, expected = await h.pull_timeline(spec)
    assert waits(seen, [a.at_ms for a in expected.attempts]) == DELAY_LEVELS_MS[:16]
    # 16 retries; the 17th failure goes to the DLQ.
    assert len(seen) == PULSAR_MAX_REDELIVER + 1
    assert [d.topic for d in seen[1:]] == [f"{TOPIC}-{GROUP}-RETRY"] * 16
    last = seen[-1].properties
    assert (last["REAL_TOPIC"], last["RECONSUMETIMES"]) == (TOPIC, "16")
    assert last["RETRY_TOPIC"] == f"{TOPIC}-{GROUP}-RETRY"
    assert last["ORIGIN_MESSAGE_ID"] == seen[0].message_id
    (dead,) = await h.stored(f"{TOPIC}-{GROUP}-DLQ")
    assert dead.properties["REAL_TOPIC"] == TOPIC
    await h.nothing_more([spec])


async def test_pulsar_reconsume_later_any_level(h: Harness) -> None:
    spec = h.spec("pulsar", {"max_retries": 30})
    await h.publish(b"x")
    d = await h.one(spec)
    for level, wait in enumerate(DELAY_LEVELS_MS, start=1):
        assert (await h.fail(d, delay_level=level)).ok
        failed = h.now()
        await h.at(failed + wait - 1)
        assert await h.receive(spec) == []
        await h.at(failed + wait)
        d = await h.one(spec)
    assert d.retries == 18


async def test_pulsar_reconsume_later_with_a_delay(h: Harness) -> None:
    spec = h.spec("pulsar")
    low_s, high_s = PULSAR_DELAY_RANGE_S
    await h.publish(b"x")
    d = await h.one(spec)
    for delay_ms in (2500, low_s * SECOND, high_s * SECOND):
        assert (await h.fail(d, delay_ms=delay_ms)).ok
        failed = h.now()
        await h.at(failed + delay_ms - 1)
        assert await h.receive(spec) == []
        await h.at(failed + delay_ms)
        d = await h.one(spec)
    for bad_ms in (low_s * SECOND - 1, high_s * SECOND + 1):
        bad = await h.fail(d, delay_ms=bad_ms)
        assert (bad.ok, bad.error_code) == (False, "INVALID_ARGUMENT")
        assert "delay_ms" in bad.error and "1000..864000000" in bad.error


@pytest.mark.parametrize("kind", [ConsumerType.EXCLUSIVE, ConsumerType.FAILOVER])
async def test_pulsar_exclusive_and_failover_retry_at_once(
    h: Harness, kind: ConsumerType
) -> None:
    spec = h.spec("pulsar", consumer_type=kind)
    seen, expected = await h.pull_timeline(spec)
    assert [a.at_ms for a in expected.attempts] == [0] * 17
    assert len(seen) == 17 and len(await h.stored(f"{TOPIC}-{GROUP}-DLQ")) == 1
    # The requested interval is ignored.
    await h.publish(b"y")
    d = await h.one(spec)
    assert (await h.fail(d, delay_ms=HOUR)).ok
    assert (await h.one(spec)).retries == 1


# ---------------------------------------------------------------------- Pulsar negative ack


async def test_pulsar_nack_redelivery_delay_without_limit(h: Harness) -> None:
    spec = h.spec("pulsar-nack")
    await h.publish(b"x")
    d = await h.one(spec)
    for n in range(1, 21):  # no limit without a dead-letter policy
        assert (await h.fail(d)).ok
        await h.advance(PULSAR_NACK_DELAY_MS - 1)
        assert await h.receive(spec) == []
        await h.advance(1)
        d = await h.one(spec)
        assert (d.retries, d.topic) == (n, TOPIC)  # the same message, redelivery count
    assert await h.backend.topics() == [TOPIC]


async def test_pulsar_nack_with_dead_letter_policy(h: Harness) -> None:
    spec = h.spec("pulsar-nack", {"max_retries": 3, "nack_delay_ms": 5000})
    seen, expected = await h.pull_timeline(spec)
    assert waits(seen, [a.at_ms for a in expected.attempts]) == [5000] * 3
    assert len(seen) == 4 and len(await h.stored(f"{TOPIC}-{GROUP}-DLQ")) == 1
    await h.nothing_more([spec])
