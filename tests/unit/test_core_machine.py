"""The shared state machine: every transition of the state table and every illegal event.

Document numbers refer to the sources cited in SEMANTICS.md ("One state machine": 003, 000).
"""

from __future__ import annotations

import pytest

from gateway.core import (
    Ack,
    ConsumerLost,
    DeadLetterNow,
    DeadlinePassed,
    Deliver,
    Event,
    Extend,
    Fail,
    Outcome,
    Record,
    RetryDue,
    State,
    decide,
)
from gateway.errors import IllegalTransition, StaleReceipt

SECOND = 1_000


def test_deliver_moves_ready_to_inflight_with_deadline(driver):
    """READY -> INFLIGHT on deliver; the delivery gets the push ack deadline (003, 000)."""
    d = driver("rocketmq")
    decision = d.deliver(2 * SECOND)
    assert decision.outcome is Outcome.DELIVER
    assert d.record.state is State.INFLIGHT
    assert d.record.attempt == 1
    assert d.record.retries == 0
    assert d.record.delivered_at_ms == 2 * SECOND
    assert d.record.deadline_ms == 2 * SECOND + 60 * SECOND
    assert d.record.receipt == "rh-1"


def test_ack_moves_inflight_to_committed(driver):
    """INFLIGHT -> COMMITTED on ack; terminal, receipt spent (003)."""
    d = driver("rocketmq")
    d.deliver(0)
    decision = d.ack(500)
    assert decision.outcome is Outcome.COMMIT
    assert d.record.state is State.COMMITTED
    assert d.record.state.terminal
    assert d.record.receipt == ""


def test_failure_with_attempts_left_waits_for_retry(driver):
    """INFLIGHT -> WAITING_RETRY on failure with attempts left; interval from the failure (003)."""
    d = driver("rocketmq")
    d.deliver(0)
    decision = d.fail(3 * SECOND)
    assert decision.outcome is Outcome.RETRY
    assert decision.destination == "%RETRY%G"
    assert decision.delay_ms == 10 * SECOND
    assert d.record.state is State.WAITING_RETRY
    assert d.record.visible_at_ms == 13 * SECOND
    assert d.record.retries == 1
    assert d.record.receipt == ""


def test_deadline_passed_with_attempts_left_waits_for_retry(driver):
    """INFLIGHT -> WAITING_RETRY when the deadline passes with attempts left (003, 000)."""
    d = driver("rabbitmq", x_retry_interval_s=10)
    d.deliver(0)
    decision = d.deadline(60 * SECOND)
    assert decision.outcome is Outcome.REDELIVER
    assert d.record.state is State.WAITING_RETRY
    assert d.record.retries == 1
    assert d.record.visible_at_ms == 70 * SECOND


def test_waiting_retry_becomes_ready_when_interval_elapsed(driver):
    """WAITING_RETRY -> READY when the interval has passed, not before (003)."""
    d = driver("rocketmq")
    d.deliver(0)
    d.fail(0)
    with pytest.raises(IllegalTransition):
        d.due(10 * SECOND - 1)
    assert d.record.state is State.WAITING_RETRY
    decision = d.due(10 * SECOND)
    assert decision.outcome is Outcome.NONE
    assert d.record.state is State.READY
    d.deliver(10 * SECOND)
    assert d.record.attempt == 2
    assert d.record.retries == 1


def test_failure_without_attempts_left_dead_letters(driver):
    """INFLIGHT -> DEAD_LETTERED when exhausted and a dead-letter destination exists (003)."""
    d = driver("rocketmq", max_retries=0)
    d.deliver(0)
    decision = d.fail(1)
    assert decision.outcome is Outcome.DEAD_LETTER
    assert decision.destination == "%DLQ%G"
    assert d.record.state is State.DEAD_LETTERED


def test_failure_without_attempts_left_discards_without_destination(driver):
    """INFLIGHT -> DISCARDED when exhausted and dead-lettering is off (003)."""
    d = driver("rocketmq", max_retries=0, dead_letter="false")
    d.deliver(0)
    decision = d.fail(1)
    assert decision.outcome is Outcome.DISCARD
    assert decision.destination is None
    assert d.record.state is State.DISCARDED


def test_dead_letter_now_moves_to_dead_letter(driver):
    """DeadLetterNow on a live delivery -> DEAD_LETTERED on the group's DLQ (002)."""
    d = driver("rocketmq")
    d.deliver(0)
    decision = d.dead_letter(1)
    assert decision.outcome is Outcome.DEAD_LETTER
    assert decision.destination == "%DLQ%G"
    assert d.record.state is State.DEAD_LETTERED


def test_simple_style_skips_waiting_retry(driver):
    """Simple consumer: a failure stays invisible until its deadline, then READY (003)."""
    d = driver("rocketmq-simple")
    d.deliver(0, invisible_ms=30 * SECOND)
    decision = d.fail(6 * SECOND)
    assert decision.outcome is Outcome.REDELIVER
    assert d.record.state is State.INFLIGHT
    assert d.record.receipt == ""
    with pytest.raises(IllegalTransition):
        d.deliver(29 * SECOND, invisible_ms=30 * SECOND)
    d.deadline(30 * SECOND)
    assert d.record.state is State.READY
    d.fail_every_delivery(invisible_ms=30 * SECOND)
    states = {decision.record.state for decision in d.decisions}
    assert State.WAITING_RETRY not in states
    assert d.record.state is State.DEAD_LETTERED


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("rocketmq", {}),
        ("rocketmq-orderly", {"suspend_ms": 10_000}),
        ("rabbitmq", {"x_retry_interval_s": 10}),
    ],
)
def test_worked_example_ready_again_at_21s(driver, name, options):
    """Ready 0 s, pulled 5 s, fails 11 s, 10 s interval -> READY at 21 s (003, 000)."""
    d = driver(name, **options)
    assert d.record.visible_at_ms == 0
    d.deliver(5 * SECOND)
    decision = d.fail(11 * SECOND)
    assert decision.delay_ms == 10 * SECOND
    assert decision.visible_at_ms == 21 * SECOND
    with pytest.raises(IllegalTransition):
        d.deliver(21 * SECOND - 1)
    d.due(21 * SECOND)
    assert d.record.state is State.READY
    assert d.record.visible_at_ms == 21 * SECOND


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("rocketmq", {"max_retries": 3}),
        ("rocketmq", {"max_retries": 3, "version": 4}),
        ("rocketmq-orderly", {"max_retries": 3}),
        ("rocketmq-simple", {"max_retries": 3}),
        ("pulsar", {"max_retries": 3}),
        ("pulsar-nack", {"max_retries": 3}),
    ],
)
def test_max_retries_3_means_4_deliveries(driver, name, options):
    """ "max retries N" means N+1 deliveries: the first plus N retries (003)."""
    d = driver(name, **options)
    invisible = 30 * SECOND if name == "rocketmq-simple" else None
    times = d.fail_every_delivery(invisible_ms=invisible)
    assert len(times) == 4
    assert d.record.attempt == 4
    assert d.record.state is State.DEAD_LETTERED


def test_retry_count_is_zero_on_first_delivery_and_counts_retries(driver):
    """reconsumeTimes / RECONSUMETIMES is 0 on the first delivery, k on retry k (002, 004)."""
    d = driver("rocketmq")
    seen = []
    now = 0
    for _ in range(4):
        d.deliver(now)
        seen.append(d.record.retries)
        now = d.fail(now).visible_at_ms
        d.due(now)
    assert seen == [0, 1, 2, 3]


@pytest.mark.parametrize(
    ("name", "options", "invisible"),
    [
        ("rocketmq", {}, None),
        ("rocketmq-orderly", {}, None),
        ("rocketmq-simple", {}, 30 * SECOND),
        ("rocketmq-http", {}, None),
        ("rabbitmq", {}, None),
        ("pulsar", {}, None),
        ("pulsar-nack", {}, None),
        ("pulsar-nack", {"subscription_type": "exclusive"}, None),
    ],
)
def test_consumer_lost_makes_message_ready_at_once(driver, name, options, invisible):
    """A lost consumer's delivery is READY again at once, with no retry wait (004, 003)."""
    d = driver(name, **options)
    d.deliver(1 * SECOND, invisible_ms=invisible)
    decision = d.lost(7 * SECOND)
    assert decision.outcome is Outcome.REDELIVER
    assert decision.delay_ms == 0
    assert d.record.state is State.READY
    assert d.record.visible_at_ms == 7 * SECOND
    assert d.record.receipt == ""
    d.deliver(7 * SECOND, invisible_ms=invisible)
    assert d.record.state is State.INFLIGHT
    assert d.record.attempt == 2


def test_consumer_lost_does_not_count_for_rocketmq(driver):
    """reconsumeTimes counts consumer failures; a lost consumer is none, so it stays 0 (002)."""
    d = driver("rocketmq")
    d.deliver(0)
    d.lost(1)
    assert d.record.retries == 0


def test_consumer_lost_counts_pulsar_redelivery_on_shared(driver):
    """Pulsar Shared: a redelivery after a lost consumer raises the redelivery count (004)."""
    d = driver("pulsar-nack", max_retries=1)
    d.deliver(0)
    d.lost(1)
    assert d.record.retries == 1
    d.deliver(1)
    decision = d.lost(2)
    assert decision.outcome is Outcome.DEAD_LETTER
    assert decision.destination == "orders-G-DLQ"


def test_consumer_lost_after_invisible_failure_changes_nothing(driver):
    """A failed invisible delivery keeps its redelivery time when the consumer goes (003)."""
    d = driver("rocketmq-simple")
    d.deliver(0, invisible_ms=30 * SECOND)
    d.fail(5 * SECOND)
    before = d.record
    decision = d.lost(6 * SECOND)
    assert decision.outcome is Outcome.NONE
    assert d.record == before


# ---- illegal events -------------------------------------------------------------------------


def test_ack_after_commit_is_stale_receipt(driver):
    """Settle once: acking a committed delivery again is refused (003)."""
    d = driver("rocketmq")
    d.deliver(0)
    d.ack(1)
    with pytest.raises(StaleReceipt) as info:
        d.ack(2)
    assert info.value.receipt == "rh-1"
    assert d.record.state is State.COMMITTED


@pytest.mark.parametrize("name", ["rocketmq", "rabbitmq", "pulsar", "rocketmq-http"])
@pytest.mark.parametrize("second", ["ack", "fail", "dead_letter"])
def test_second_settle_of_same_delivery_is_stale_receipt(driver, name, second):
    """A failed delivery's receipt is spent: a second settle raises StaleReceipt (003)."""
    d = driver(name)
    d.deliver(0)
    d.fail(1)
    with pytest.raises(StaleReceipt):
        getattr(d, second)(2)
    assert d.record.state is State.WAITING_RETRY


@pytest.mark.parametrize("name", ["rocketmq-simple", "pulsar-nack"])
def test_second_settle_after_invisible_failure_is_stale_receipt(driver, name):
    """Simple style: after a failure the receipt is spent though the message stays invisible
    (003, 004)."""
    d = driver(name)
    invisible = 30 * SECOND if name == "rocketmq-simple" else None
    d.deliver(0, invisible_ms=invisible)
    d.fail(1)
    with pytest.raises(StaleReceipt):
        d.ack(2)
    with pytest.raises(StaleReceipt):
        d.fail(2)


def test_receipt_of_an_earlier_delivery_is_stale(driver):
    """The receipt of delivery 1 cannot settle delivery 2 (003)."""
    d = driver("rocketmq")
    d.deliver(0)
    d.fail(0)
    d.due(10 * SECOND)
    d.deliver(10 * SECOND)
    with pytest.raises(StaleReceipt):
        d.apply(Ack("rh-1"), 11 * SECOND)
    assert d.record.state is State.INFLIGHT
    d.ack(11 * SECOND)
    assert d.record.state is State.COMMITTED


@pytest.mark.parametrize("receipt", ["", "never-issued"])
def test_unknown_receipt_is_stale(driver, receipt):
    """A receipt that was never handed out settles nothing (003)."""
    d = driver("rocketmq")
    d.deliver(0)
    with pytest.raises(StaleReceipt):
        d.apply(Ack(receipt), 1)
    with pytest.raises(StaleReceipt):
        d.apply(Fail(receipt), 1)


def test_settle_before_any_delivery_is_stale(driver):
    """A READY message has no live receipt (003)."""
    d = driver("rocketmq")
    with pytest.raises(StaleReceipt):
        d.apply(Ack("rh-1"), 0)


def test_extend_after_deadline_is_illegal(driver):
    """ChangeInvisibleDuration only while not timed out (003)."""
    d = driver("rocketmq-simple")
    d.deliver(0, invisible_ms=30 * SECOND)
    with pytest.raises(IllegalTransition):
        d.apply(Extend(d.receipt, 30 * SECOND, "rh-new"), 30 * SECOND)
    assert d.record.receipt == "rh-1"
    assert d.record.deadline_ms == 30 * SECOND


def test_extend_after_commit_is_stale(driver):
    """ChangeInvisibleDuration only while not committed (003)."""
    d = driver("rocketmq-simple")
    d.deliver(0, invisible_ms=30 * SECOND)
    d.ack(1)
    with pytest.raises(StaleReceipt):
        d.apply(Extend("rh-1", 30 * SECOND, "rh-new"), 2)


def test_deliver_before_visible_is_illegal(driver):
    """A waiting retry cannot be delivered before its interval has passed (003)."""
    d = driver("rocketmq")
    d.deliver(0)
    d.fail(0)
    with pytest.raises(IllegalTransition):
        d.deliver(9_999)
    ready = Record("m", "t", "g", visible_at_ms=5 * SECOND)
    with pytest.raises(IllegalTransition):
        decide(ready, Deliver("x"), d.policy, 4_999)


def test_deliver_while_in_flight_is_illegal(driver):
    """A message in flight is not visible (003)."""
    d = driver("rocketmq")
    d.deliver(0)
    with pytest.raises(IllegalTransition):
        d.deliver(1)
    assert d.record.receipt == "rh-1"


def test_deadline_event_before_deadline_is_illegal(driver):
    """DeadlinePassed is refused while the deadline lies ahead or there is none (003)."""
    d = driver("rocketmq")
    with pytest.raises(IllegalTransition):
        d.deadline(0)
    d.deliver(0)
    with pytest.raises(IllegalTransition):
        d.deadline(60 * SECOND - 1)
    assert d.record.state is State.INFLIGHT


def test_retry_due_outside_waiting_retry_is_illegal(driver):
    """RetryDue only for a waiting retry (003)."""
    d = driver("rocketmq")
    with pytest.raises(IllegalTransition):
        d.due(0)
    d.deliver(0)
    with pytest.raises(IllegalTransition):
        d.due(10**9)


def test_consumer_lost_outside_inflight_is_illegal(driver):
    """Only a message in flight has a consumer to lose (003)."""
    d = driver("rocketmq")
    with pytest.raises(IllegalTransition):
        d.lost(0)


TERMINAL = [State.COMMITTED, State.DEAD_LETTERED, State.DISCARDED]
NO_RECEIPT_EVENTS: list[Event] = [Deliver("rh-9"), RetryDue(), DeadlinePassed(), ConsumerLost()]
SETTLE_EVENTS: list[Event] = [
    Ack("rh-1"),
    Fail("rh-1"),
    Extend("rh-1", 30 * SECOND, "rh-2"),
    DeadLetterNow("rh-1"),
]


@pytest.mark.parametrize("state", TERMINAL)
@pytest.mark.parametrize("event", NO_RECEIPT_EVENTS, ids=lambda e: type(e).__name__)
def test_events_on_terminal_states_are_illegal(make_policy, state, event):
    """COMMITTED, DEAD_LETTERED and DISCARDED are terminal (003)."""
    record = Record("m", "t", "g", state=state, attempt=1)
    with pytest.raises(IllegalTransition) as info:
        decide(record, event, make_policy("rocketmq"), 10**9)
    assert info.value.state == state.value
    assert info.value.event == type(event).__name__


@pytest.mark.parametrize("state", TERMINAL)
@pytest.mark.parametrize("event", SETTLE_EVENTS, ids=lambda e: type(e).__name__)
def test_settles_on_terminal_states_are_stale(make_policy, state, event):
    """Settle once: a settle on a terminal message names the spent receipt (003)."""
    record = Record("m", "t", "g", state=state, attempt=1)
    with pytest.raises(StaleReceipt) as info:
        decide(record, event, make_policy("rocketmq-simple"), 0)
    assert info.value.receipt == "rh-1"


def test_decide_is_pure(make_policy):
    """The same inputs give the same decision, and the input record is left as it was (003)."""
    policy = make_policy("rocketmq")
    record = Record("m", "t", "g")
    first = decide(record, Deliver("a"), policy, 5)
    second = decide(record, Deliver("a"), policy, 5)
    assert first == second
    assert record == Record("m", "t", "g")
