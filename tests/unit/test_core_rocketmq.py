"""RocketMQ rows of SEMANTICS.md (documents 000, 002, 003) through the pure decide()."""

from __future__ import annotations

import itertools

import pytest
from documented import DELAY_LEVELS_MS as LEVELS_MS
from documented import HOUR, MINUTE, SECOND
from documented import ROCKETMQ_TABLE_MS as TABLE_MS

from adapters.rocketmq import dialect as rocketmq
from gateway.core import Ack, Extend, Outcome, State
from gateway.errors import IllegalTransition, InvalidArgument, StaleReceipt


def _waits(d, **fail):
    """Fail every delivery at once; the waits between failure and READY."""
    now = 0
    waits = []
    while True:
        d.deliver(now)
        decision = d.fail(now, **fail)
        if decision.record.state.terminal:
            return waits, decision
        waits.append(decision.delay_ms)
        assert decision.visible_at_ms == now + decision.delay_ms
        now = decision.visible_at_ms
        d.due(now)


def test_unordered_backoff_is_the_16_step_table(driver):
    """Retry k = 1..16 waits 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h (000, 003)."""
    waits, last = _waits(driver("rocketmq"))
    assert waits == TABLE_MS
    assert last.outcome is Outcome.DEAD_LETTER
    assert last.destination == "%DLQ%G"
    assert last.record.attempt == 17


@pytest.mark.parametrize("version", ["4", "5"])
def test_every_retry_past_16_waits_2h(driver, version):
    """Every retry past 16 waits 2 h; max_retries 20 on 4.x and 5.x (000, 003)."""
    waits, last = _waits(driver("rocketmq", max_retries=20, version=version))
    assert waits == [*TABLE_MS, 2 * HOUR, 2 * HOUR, 2 * HOUR, 2 * HOUR]
    assert last.record.attempt == 21
    assert last.outcome is Outcome.DEAD_LETTER


def test_delay_levels_are_the_18_level_table():
    """Broker delay levels 1s 5s 10s … 1h 2h, 18 of them (002)."""
    assert list(rocketmq.DELAY_LEVELS_MS) == LEVELS_MS
    assert len(rocketmq.DELAY_LEVELS_MS) == 18


def test_level_3_plus_reconsume_times_gives_the_table(driver):
    """Client level 0 uses level 3 + reconsumeTimes, which yields the 16-step table (002)."""
    by_level = [LEVELS_MS[3 + reconsume - 1] for reconsume in range(16)]
    assert by_level == TABLE_MS
    # The same waits when the consumer asks for that level explicitly on every failure.
    d = driver("rocketmq")
    now = 0
    for k in range(1, 17):
        d.deliver(now)
        level = 3 + d.record.retries
        decision = d.fail(now, delay_level=level)
        assert decision.delay_ms == TABLE_MS[k - 1]
        now = decision.visible_at_ms
        d.due(now)


@pytest.mark.parametrize(("level", "wait"), [(1, 1 * SECOND), (5, 1 * MINUTE), (18, 2 * HOUR)])
def test_requested_delay_level(driver, level, wait):
    """delayLevelWhenNextConsume names a level of the 18-level table (002)."""
    d = driver("rocketmq", version=4)
    d.deliver(0)
    decision = d.fail(2 * SECOND, delay_level=level)
    assert decision.delay_ms == wait
    assert decision.visible_at_ms == 2 * SECOND + wait


@pytest.mark.parametrize("level", [0, 19])
def test_requested_delay_level_out_of_range(driver, level):
    """Levels outside 1..18 are refused with the range (002)."""
    d = driver("rocketmq")
    d.deliver(0)
    with pytest.raises(InvalidArgument) as info:
        d.fail(1, delay_level=level)
    assert info.value.field == "delay_level"
    assert "1..18" in info.value.message
    assert d.record.state is State.INFLIGHT


def test_retry_and_dead_letter_topic_names(driver):
    """Retries go to `%RETRY%` + group, dead letters to `%DLQ%` + group (002)."""
    d = driver("rocketmq", topic="orders", group="G", max_retries=1)
    d.deliver(0)
    retry = d.fail(0)
    assert retry.outcome is Outcome.RETRY
    assert retry.destination == "%RETRY%G"
    d.due(10 * SECOND)
    d.deliver(10 * SECOND)
    dead = d.fail(10 * SECOND)
    assert dead.destination == "%DLQ%G"
    assert d.record.topic == "orders"


def test_broadcast_drops_at_first_failure(driver):
    """Broadcasting: no retry; the failure is logged and the message dropped (000, 002)."""
    d = driver("rocketmq", broadcast="true")
    d.deliver(0)
    decision = d.fail(1)
    assert decision.outcome is Outcome.DISCARD
    assert d.record.state is State.DISCARDED
    assert d.record.attempt == 1
    assert "broadcast" in decision.reason


def test_broadcast_timeout_also_drops(driver):
    """Broadcasting: a push timeout is a failure and is dropped too (000, 003)."""
    d = driver("rocketmq", broadcast="true")
    d.deliver(0)
    decision = d.deadline(60 * SECOND)
    assert decision.outcome is Outcome.DISCARD


def test_dlq_off_on_5x_discards(driver):
    """5.x with dead-lettering disabled: exhausted messages are discarded (003)."""
    d = driver("rocketmq", version=5, dead_letter="false", max_retries=2)
    waits, last = _waits(d)
    assert waits == TABLE_MS[:2]
    assert last.outcome is Outcome.DISCARD
    assert last.record.state is State.DISCARDED


def test_5x_max_retries_at_most_1000(make_policy):
    """5.x: max retries at most 1000; 1001 is refused naming field and range (003)."""
    assert make_policy("rocketmq", version=5, max_retries=1000).max_retries == 1000
    with pytest.raises(InvalidArgument) as info:
        make_policy("rocketmq", version=5, max_retries=1001)
    assert info.value.field == "max_retries"
    assert "0..1000" in info.value.message


def test_5x_is_the_default_version(make_policy):
    """Without a version the 5.x bound applies (003)."""
    with pytest.raises(InvalidArgument):
        make_policy("rocketmq", max_retries=1001)


@pytest.mark.parametrize("value", [1001, 100_000, 2_147_483_647])
def test_4x_has_no_upper_bound(make_policy, value):
    """4.x TCP: no upper bound on max retries (000)."""
    assert make_policy("rocketmq", version=4, max_retries=value).max_retries == value


def test_default_max_retries_is_16(make_policy):
    """Unordered default: 16 retries (000, 003)."""
    assert make_policy("rocketmq").max_retries == 16
    assert make_policy("rocketmq", version=4).max_retries == 16


def test_push_timeout_60s_counts_as_failure(driver):
    """Push consume timeout 1 minute counts as a failure (003 FAQ)."""
    d = driver("rocketmq")
    d.deliver(5 * SECOND)
    assert d.record.deadline_ms == 65 * SECOND
    with pytest.raises(IllegalTransition):
        d.deadline(65 * SECOND - 1)
    decision = d.deadline(65 * SECOND)
    assert decision.outcome is Outcome.RETRY
    assert decision.destination == "%RETRY%G"
    assert d.record.retries == 1
    assert decision.visible_at_ms == 75 * SECOND
    with pytest.raises(StaleReceipt):
        d.ack(66 * SECOND)


# ---- ordered ------------------------------------------------------------------------------


def test_orderly_defaults(driver):
    """Ordered: suspendTimeMillis 1000 ms, max retries Integer.MAX_VALUE, blocks its queue
    (000)."""
    d = driver("rocketmq-orderly")
    assert d.policy.max_retries == 2_147_483_647
    assert d.policy.blocks_queue is True
    d.deliver(0)
    assert d.fail(4_000).visible_at_ms == 5_000


@pytest.mark.parametrize("suspend", [10, 1_000, 30_000])
def test_orderly_fixed_suspend_interval(driver, suspend):
    """Ordered: every retry waits suspendTimeMillis, 10..30000 ms (000)."""
    d = driver("rocketmq-orderly", suspend_ms=suspend)
    times = d.fail_every_delivery(processing_ms=3, limit=6)
    assert [b - a for a, b in itertools.pairwise(times)] == [3 + suspend] * 5
    assert d.record.state is State.WAITING_RETRY
    assert d.record.retries == 6


@pytest.mark.parametrize("suspend", [9, 5, 30_001])
def test_orderly_suspend_out_of_range(make_policy, suspend):
    """suspendTimeMillis outside 10..30000 ms is refused with field and range (000)."""
    with pytest.raises(InvalidArgument) as info:
        make_policy("rocketmq-orderly", suspend_ms=suspend)
    assert info.value.field == "suspend_ms"
    assert "10..30000 ms" in info.value.message


def test_orderly_retries_in_place(driver):
    """Ordered retries stay on the queue (no retry topic), keeping the order (000)."""
    d = driver("rocketmq-orderly")
    d.deliver(0)
    decision = d.fail(0)
    assert decision.outcome is Outcome.REDELIVER
    assert decision.destination is None


# ---- simple consumer ----------------------------------------------------------------------


@pytest.mark.parametrize("invisible", [10 * SECOND, 12 * HOUR])
def test_simple_invisible_duration_range_accepted(driver, invisible):
    """InvisibleDuration 10 s..12 h is chosen per receive (003)."""
    d = driver("rocketmq-simple")
    d.deliver(1 * SECOND, invisible_ms=invisible)
    assert d.record.deadline_ms == 1 * SECOND + invisible


@pytest.mark.parametrize("invisible", [5 * SECOND, 10 * SECOND - 1, 12 * HOUR + 1])
def test_simple_invisible_duration_out_of_range(driver, invisible):
    """An InvisibleDuration outside 10 s..12 h is refused with field and range (003)."""
    d = driver("rocketmq-simple")
    with pytest.raises(InvalidArgument) as info:
        d.deliver(0, invisible_ms=invisible)
    assert info.value.field == "invisible_ms"
    assert "10000..43200000 ms" in info.value.message
    assert d.record.state is State.READY


def test_simple_invisible_duration_is_per_receive(driver):
    """Each receive chooses its own InvisibleDuration (003)."""
    d = driver("rocketmq-simple")
    d.deliver(0, invisible_ms=20 * SECOND)
    d.fail(20 * SECOND)
    d.deadline(20 * SECOND)
    d.deliver(20 * SECOND, invisible_ms=45 * SECOND)
    assert d.record.deadline_ms == 65 * SECOND


def test_simple_retry_interval_is_invisible_minus_processing(driver):
    """Retry interval = InvisibleDuration - processing time (003)."""
    d = driver("rocketmq-simple")
    d.deliver(2 * SECOND, invisible_ms=30 * SECOND)
    decision = d.fail(8 * SECOND)
    assert decision.delay_ms == 24 * SECOND
    assert d.record.deadline_ms == 32 * SECOND
    with pytest.raises(IllegalTransition):
        d.deadline(32 * SECOND - 1)
    d.deadline(32 * SECOND)
    assert d.record.state is State.READY
    assert d.record.visible_at_ms == 32 * SECOND
    assert d.record.retries == 1


def test_simple_timeout_makes_interval_zero(driver):
    """A timeout makes the retry interval 0 and counts as a failure (003)."""
    d = driver("rocketmq-simple")
    d.deliver(0, invisible_ms=10 * SECOND)
    decision = d.deadline(10 * SECOND)
    assert decision.outcome is Outcome.REDELIVER
    assert decision.delay_ms == 0
    assert d.record.state is State.READY
    assert d.record.visible_at_ms == 10 * SECOND
    assert d.record.retries == 1
    with pytest.raises(StaleReceipt):
        d.ack(10 * SECOND)


def test_simple_timeouts_exhaust_to_dlq(driver):
    """Timeouts count against max retries; exhausted -> `%DLQ%` + group (003, 002)."""
    d = driver("rocketmq-simple", max_retries=1)
    d.deliver(0, invisible_ms=10 * SECOND)
    d.deadline(10 * SECOND)
    d.deliver(10 * SECOND, invisible_ms=10 * SECOND)
    decision = d.deadline(20 * SECOND)
    assert decision.outcome is Outcome.DEAD_LETTER
    assert decision.destination == "%DLQ%G"


def test_simple_change_invisible_restarts_from_the_call(driver):
    """ChangeInvisibleDuration restarts the invisible period from the call (003)."""
    d = driver("rocketmq-simple")
    d.deliver(0, invisible_ms=30 * SECOND)
    old = d.receipt
    decision = d.extend(25 * SECOND, 20 * SECOND)
    assert decision.outcome is Outcome.EXTEND
    assert d.record.deadline_ms == 45 * SECOND
    assert d.record.receipt == d.receipt != old
    with pytest.raises(IllegalTransition):
        d.deadline(30 * SECOND)
    d.deadline(45 * SECOND)
    assert d.record.state is State.READY


def test_simple_change_invisible_spends_old_receipt(driver):
    """After ChangeInvisibleDuration only the new receipt settles the delivery (003)."""
    d = driver("rocketmq-simple")
    d.deliver(0, invisible_ms=30 * SECOND)
    old = d.receipt
    d.extend(1 * SECOND, 30 * SECOND)
    with pytest.raises(StaleReceipt):
        d.apply(Ack(old), 2 * SECOND)
    with pytest.raises(StaleReceipt):
        d.apply(Extend(old, 30 * SECOND, "again"), 2 * SECOND)
    d.ack(2 * SECOND)
    assert d.record.state is State.COMMITTED


def test_simple_change_invisible_only_before_deadline(driver):
    """ChangeInvisibleDuration is refused once timed out, even before the timeout event (003)."""
    d = driver("rocketmq-simple")
    d.deliver(0, invisible_ms=10 * SECOND)
    with pytest.raises(IllegalTransition):
        d.extend(10 * SECOND, 30 * SECOND)
    d.extend(10 * SECOND - 1, 10 * SECOND)
    assert d.record.deadline_ms == 20 * SECOND - 1


@pytest.mark.parametrize("invisible", [5 * SECOND, 12 * HOUR + 1])
def test_simple_change_invisible_range(driver, invisible):
    """ChangeInvisibleDuration takes the same 10 s..12 h range (003)."""
    d = driver("rocketmq-simple")
    d.deliver(0, invisible_ms=30 * SECOND)
    with pytest.raises(InvalidArgument) as info:
        d.extend(1, invisible)
    assert info.value.field == "invisible_ms"
    assert "10000..43200000 ms" in info.value.message


def test_simple_max_retries_bounded_by_5x(make_policy):
    """The simple consumer is 5.x: at most 1000 retries (003)."""
    assert make_policy("rocketmq-simple", max_retries=1000).max_retries == 1000
    with pytest.raises(InvalidArgument) as info:
        make_policy("rocketmq-simple", max_retries=1001)
    assert "0..1000" in info.value.message


def test_simple_dlq_off_discards(driver):
    """5.x with dead-lettering disabled discards exhausted messages (003)."""
    d = driver("rocketmq-simple", max_retries=0, dead_letter="false")
    d.deliver(0, invisible_ms=10 * SECOND)
    assert d.fail(1).outcome is Outcome.DISCARD


# ---- HTTP ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("ordered", "interval"), [("false", 5 * MINUTE), ("true", 1 * MINUTE)])
def test_http_intervals_and_288_retries(driver, ordered, interval):
    """HTTP: ordered 1 min, unordered 5 min; 288 retries, so 289 deliveries (000)."""
    d = driver("rocketmq-http", ordered=ordered)
    times = d.fail_every_delivery(limit=400)
    assert len(times) == 289
    assert {b - a for a, b in itertools.pairwise(times)} == {interval}
    assert d.record.state is State.DEAD_LETTERED
    assert d.policy.max_retries == 288


@pytest.mark.parametrize("key", ["max_retries", "suspend_ms", "interval_ms"])
def test_http_retries_not_configurable(make_policy, key):
    """HTTP max retries and intervals are not configurable (000)."""
    with pytest.raises(InvalidArgument) as info:
        make_policy("rocketmq-http", **{key: 3})
    assert info.value.field == key
    assert "not configurable" in info.value.message


# ---- properties ---------------------------------------------------------------------------


def test_retry_copy_keeps_original_id_as_property(registry):
    """4.x writes a new copy to the retry topic: the original ID is kept as a property (002)."""
    props = registry.dialect("rocketmq").retry_properties(
        {"k": "v"}, topic="orders", retry_topic="%RETRY%G", message_id="MID", retries=2
    )
    assert props["ORIGIN_MESSAGE_ID"] == "MID"
    assert props["RETRY_TOPIC"] == "orders"
    assert props["RECONSUME_TIME"] == "2"
    assert props["k"] == "v"
    again = registry.dialect("rocketmq").retry_properties(
        props, topic="%RETRY%G", retry_topic="%RETRY%G", message_id="MID2", retries=3
    )
    assert again["ORIGIN_MESSAGE_ID"] == "MID"
    assert again["RETRY_TOPIC"] == "orders"
    assert again["RECONSUME_TIME"] == "3"
