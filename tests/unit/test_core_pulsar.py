"""Pulsar rows of SEMANTICS.md (document 004) through the pure decide()."""

from __future__ import annotations

import pytest
from documented import DELAY_LEVELS_MS as LEVELS_MS
from documented import HOUR, SECOND

from gateway.core import Outcome, State
from gateway.errors import InvalidArgument


def _first_failure(d, **fail):
    d.deliver(0)
    return d.fail(2 * SECOND, **fail)


@pytest.mark.parametrize("delay_s", [1, 2, 3600, 864_000])
def test_reconsume_later_any_delay_in_range(driver, delay_s):
    """reconsumeLater(msg, delay, unit): any delay 1..864000 s (004)."""
    decision = _first_failure(driver("pulsar"), delay_ms=delay_s * SECOND)
    assert decision.outcome is Outcome.RETRY
    assert decision.delay_ms == delay_s * SECOND
    assert decision.visible_at_ms == 2 * SECOND + delay_s * SECOND


@pytest.mark.parametrize("delay_s", [0, 864_001])
def test_reconsume_later_delay_out_of_range(driver, delay_s):
    """Delays of 0 s and 864001 s are refused, naming field and range (004)."""
    d = driver("pulsar")
    with pytest.raises(InvalidArgument) as info:
        _first_failure(d, delay_ms=delay_s * SECOND)
    assert info.value.field == "delay_ms"
    assert "1000..864000000 ms" in info.value.message
    assert d.record.state is State.INFLIGHT


@pytest.mark.parametrize(("level", "wait"), [(1, 1 * SECOND), (3, 10 * SECOND), (18, 2 * HOUR)])
def test_reconsume_later_level(driver, level, wait):
    """reconsumeLater(msg, level): level 1 = 1 s, 3 = 10 s, 18 = 2 h (004)."""
    decision = _first_failure(driver("pulsar"), delay_level=level)
    assert decision.delay_ms == wait


@pytest.mark.parametrize("level", [0, 19])
def test_reconsume_later_level_out_of_range(driver, level):
    """Levels outside 1..18 are refused, naming field and range (004)."""
    with pytest.raises(InvalidArgument) as info:
        _first_failure(driver("pulsar"), delay_level=level)
    assert info.value.field == "delay_level"
    assert "1..18" in info.value.message


def test_incremental_levels_16_retries_then_dlq(driver):
    """reconsumeLater(msg): 1 s, 5 s, 10 s, 30 s, … ; 16 retries, the 17th failure -> DLQ (004)."""
    d = driver("pulsar", topic="orders", group="sub")
    now = 0
    waits = []
    for _ in range(16):
        d.deliver(now)
        decision = d.fail(now)
        assert decision.outcome is Outcome.RETRY
        assert decision.destination == "orders-sub-RETRY"
        waits.append(decision.delay_ms)
        now = decision.visible_at_ms
        d.due(now)
    assert waits == LEVELS_MS[:16]
    d.deliver(now)
    assert d.record.retries == 16
    last = d.fail(now)
    assert last.outcome is Outcome.DEAD_LETTER
    assert last.destination == "orders-sub-DLQ"
    assert d.record.attempt == 17


def test_incremental_levels_stay_at_2h_past_the_table(driver):
    """Past level 18 the incremental wait stays at the last level, 2 h (004)."""
    d = driver("pulsar", max_retries=20)
    d.fail_every_delivery()
    waits = [x.delay_ms for x in d.decisions if x.outcome is Outcome.RETRY]
    assert waits == [*LEVELS_MS, 2 * HOUR, 2 * HOUR]
    assert d.record.state is State.DEAD_LETTERED


QUALIFIED = "persistent://t/ns/orders"


@pytest.mark.parametrize(
    ("scheme", "topic", "retry", "dlq"),
    [
        ("pulsar-2.9", "orders", "orders-sub-RETRY", "orders-sub-DLQ"),
        ("pulsar-2.7", "orders", "sub-RETRY", "sub-DLQ"),
        ("pulsar-2.6", "orders", "sub-retry", "sub-dlq"),
        ("pulsar-2.9", QUALIFIED, QUALIFIED + "-sub-RETRY", QUALIFIED + "-sub-DLQ"),
        ("pulsar-2.7", QUALIFIED, "persistent://t/ns/sub-RETRY", "persistent://t/ns/sub-DLQ"),
        ("pulsar-2.6", QUALIFIED, "persistent://t/ns/sub-retry", "persistent://t/ns/sub-dlq"),
    ],
)
def test_topic_names_per_cluster_version(driver, scheme, topic, retry, dlq):
    """Retry / DLQ names: 2.9.2 `{topic}-{sub}-RETRY`, 2.7.2 `{sub}-RETRY`, 2.6.1 `{sub}-retry`
    (004)."""
    d = driver("pulsar", topic=topic, group="sub", naming=scheme, max_retries=1)
    d.fail_every_delivery()
    outcomes = [(x.outcome, x.destination) for x in d.decisions if x.outcome is not Outcome.DELIVER]
    assert outcomes == [
        (Outcome.RETRY, retry),
        (Outcome.NONE, None),
        (Outcome.DEAD_LETTER, dlq),
    ]


def test_default_scheme_is_2_9(make_policy):
    """Without a scheme the 2.9.2 names apply (004)."""
    assert make_policy("pulsar").naming.name == "pulsar-2.9"
    assert make_policy("pulsar-nack").naming.name == "pulsar-2.9"


@pytest.mark.parametrize("kind", ["shared", "key_shared"])
def test_shared_types_wait_the_requested_delay(driver, kind):
    """Shared and Key_Shared retry with the requested delay (004)."""
    decision = _first_failure(driver("pulsar", subscription_type=kind), delay_ms=30 * SECOND)
    assert decision.delay_ms == 30 * SECOND


@pytest.mark.parametrize("kind", ["exclusive", "failover"])
@pytest.mark.parametrize("request_", [{}, {"delay_ms": 30 * SECOND}, {"delay_level": 18}])
def test_exclusive_and_failover_retry_at_once(driver, kind, request_):
    """Exclusive and Failover ignore the requested interval: the retry is immediate (004)."""
    d = driver("pulsar", subscription_type=kind)
    decision = _first_failure(d, **request_)
    assert decision.delay_ms == 0
    assert decision.visible_at_ms == 2 * SECOND
    d.due(2 * SECOND)
    d.deliver(2 * SECOND)
    assert d.record.retries == 1


@pytest.mark.parametrize("kind", ["exclusive", "failover"])
def test_exclusive_still_validates_the_request(driver, kind):
    """An out-of-range delay is refused even where it would be ignored (004)."""
    with pytest.raises(InvalidArgument):
        _first_failure(driver("pulsar", subscription_type=kind), delay_ms=0)


def test_unknown_subscription_type(make_policy):
    """Only Shared, Key_Shared, Exclusive and Failover exist (004)."""
    with pytest.raises(InvalidArgument) as info:
        make_policy("pulsar", subscription_type="broadcast")
    assert info.value.field == "subscription_type"
    assert "shared, key_shared, exclusive, failover" in info.value.message


def test_retry_copy_properties(registry):
    """Retry copies carry REAL_TOPIC, ORIGIN_MESSAGE_ID, RETRY_TOPIC, RECONSUMETIMES (004)."""
    dialect = registry.dialect("pulsar")
    first = dialect.retry_properties(
        {"app": "x"},
        topic="persistent://t/ns/orders",
        retry_topic="persistent://t/ns/orders-sub-RETRY",
        message_id="1:2:0",
        retries=1,
    )
    assert first == {
        "app": "x",
        "REAL_TOPIC": "persistent://t/ns/orders",
        "ORIGIN_MESSAGE_ID": "1:2:0",
        "RETRY_TOPIC": "persistent://t/ns/orders-sub-RETRY",
        "RECONSUMETIMES": "1",
    }
    # A retry of a retry copy keeps the original topic and id; the count moves on.
    second = dialect.retry_properties(
        first,
        topic="persistent://t/ns/orders-sub-RETRY",
        retry_topic="persistent://t/ns/orders-sub-RETRY",
        message_id="7:8:0",
        retries=2,
    )
    assert second["REAL_TOPIC"] == "persistent://t/ns/orders"
    assert second["ORIGIN_MESSAGE_ID"] == "1:2:0"
    assert second["RECONSUMETIMES"] == "2"


def test_dead_letter_copy_keeps_origin(registry):
    """The DLQ copy keeps the original topic and message id (004)."""
    props = registry.dialect("pulsar").dead_letter_properties(
        {},
        topic="orders",
        dead_letter_topic="orders-sub-DLQ",
        message_id="1:2:0",
        retries=17,
        reason="exhausted",
    )
    assert props["REAL_TOPIC"] == "orders"
    assert props["ORIGIN_MESSAGE_ID"] == "1:2:0"


def test_max_redeliver_count_is_configurable(driver):
    """deadLetterPolicy.maxRedeliverCount sets the limit (004)."""
    d = driver("pulsar", max_retries=2)
    assert len(d.fail_every_delivery()) == 3
    assert d.record.state is State.DEAD_LETTERED


# ---- negativeAcknowledge ------------------------------------------------------------------


def test_nack_redelivers_after_60s_by_default(driver):
    """negativeAcknowledge: the same message again after 1 min by default, no new copy (004)."""
    d = driver("pulsar-nack")
    d.deliver(0)
    decision = d.fail(3 * SECOND)
    assert decision.outcome is Outcome.REDELIVER
    assert decision.destination is None
    assert decision.delay_ms == 60 * SECOND
    assert d.record.state is State.INFLIGHT
    d.deadline(63 * SECOND)
    assert d.record.state is State.READY
    d.deliver(63 * SECOND)
    assert d.record.retries == 1
    assert d.record.message_id == "m1"


def test_nack_delay_is_configurable(driver):
    """negativeAckRedeliveryDelay sets the wait (004)."""
    d = driver("pulsar-nack", nack_delay_ms=5_000)
    d.deliver(0)
    assert d.fail(0).delay_ms == 5_000


def test_nack_has_no_limit_without_max_retries(driver):
    """No limit unless a deadLetterPolicy sets one (004)."""
    d = driver("pulsar-nack")
    assert d.policy.max_retries is None
    times = d.fail_every_delivery(limit=300)
    assert len(times) == 300
    assert not d.record.state.terminal
    assert d.record.retries == 300


def test_nack_with_max_retries_goes_to_dlq(driver):
    """With a deadLetterPolicy the (N+1)th failure goes to `{topic}-{sub}-DLQ` (004)."""
    d = driver("pulsar-nack", topic="orders", group="sub", max_retries=16)
    assert len(d.fail_every_delivery()) == 17
    last = d.decisions[-1]
    assert last.outcome is Outcome.DEAD_LETTER
    assert last.destination == "orders-sub-DLQ"


@pytest.mark.parametrize("kind", ["exclusive", "failover"])
def test_nack_exclusive_count_stays_zero(driver, kind):
    """Exclusive/Failover keep no redelivery count, so they are never exhausted (004)."""
    d = driver("pulsar-nack", subscription_type=kind, max_retries=1)
    times = d.fail_every_delivery(limit=50)
    assert len(times) == 50
    assert d.record.retries == 0
    assert not d.record.state.terminal
    assert {x.delay_ms for x in d.decisions if x.outcome is Outcome.REDELIVER} == {60 * SECOND}
