"""RabbitMQ rows of SEMANTICS.md (document 001) through the pure decide()."""

from __future__ import annotations

import itertools

import pytest

from adapters.amqp.naming import rabbitmq_scheme
from gateway.core import Outcome, Record, State
from gateway.errors import IllegalTransition, InvalidArgument, StaleReceipt

SECOND = 1_000


@pytest.mark.parametrize("interval_s", [10, 11, 600, 1800])
def test_retry_interval_in_range(driver, interval_s):
    """`x-retry-interval` is per queue, in seconds, 10..1800 (001)."""
    d = driver("rabbitmq", x_retry_interval_s=interval_s)
    d.deliver(0)
    decision = d.fail(3 * SECOND)
    assert decision.outcome is Outcome.REDELIVER
    assert decision.delay_ms == interval_s * SECOND
    assert d.record.visible_at_ms == 3 * SECOND + interval_s * SECOND


@pytest.mark.parametrize("interval_s", [5, 9, 1801, 0, -10])
def test_retry_interval_out_of_range(make_policy, interval_s):
    """Intervals outside 10..1800 s are refused, naming field and range (001)."""
    with pytest.raises(InvalidArgument) as info:
        make_policy("rabbitmq", x_retry_interval_s=interval_s)
    assert info.value.field == "x_retry_interval_s"
    assert "10..1800 s" in info.value.message


def test_retry_interval_not_a_number(make_policy):
    """A non-integer interval names field and range (001)."""
    with pytest.raises(InvalidArgument) as info:
        make_policy("rabbitmq", x_retry_interval_s="ten")
    assert info.value.field == "x_retry_interval_s"
    assert "10..1800" in info.value.message


@pytest.mark.parametrize("name", ["a\nb", "nul\x00", "x" * 256, "\u00e9" * 128])
def test_a_dead_letter_exchange_no_exchange_can_have_is_refused(make_policy, name):
    """`plan --dlx` and a Subscribe's options took any text as the exchange's name."""
    with pytest.raises(InvalidArgument) as info:
        make_policy("rabbitmq", x_dead_letter_exchange=name)
    assert info.value.field == "x_dead_letter_exchange"
    assert "1..255 bytes" in info.value.message


@pytest.mark.parametrize("name", ["dlx", "my dlx", "x" * 255, "\u00e9" * 127, "a/b:c"])
def test_a_dead_letter_exchange_name_is_taken(make_policy, name):
    assert make_policy("rabbitmq", x_dead_letter_exchange=name).dead_letter


def test_unacked_for_a_minute_counts_as_failure(driver):
    """A message not acknowledged within 1 minute counts as a failure (001)."""
    d = driver("rabbitmq", x_retry_interval_s=10)
    d.deliver(4 * SECOND)
    assert d.record.deadline_ms == 64 * SECOND
    with pytest.raises(IllegalTransition):
        d.deadline(64 * SECOND - 1)
    decision = d.deadline(64 * SECOND)
    assert decision.outcome is Outcome.REDELIVER
    assert d.record.state is State.WAITING_RETRY
    assert d.record.retries == 1
    assert d.record.visible_at_ms == 74 * SECOND
    with pytest.raises(StaleReceipt):
        d.ack(65 * SECOND)


def test_16_retries_then_discard_without_dead_letter_exchange(driver):
    """16 retries; exhausted with no dead-letter exchange -> discarded (001)."""
    d = driver("rabbitmq", x_retry_interval_s=10)
    times = d.fail_every_delivery(processing_ms=1)
    assert len(times) == 17
    assert [b - a for a, b in itertools.pairwise(times)] == [10 * SECOND + 1] * 16
    last = d.decisions[-1]
    assert last.outcome is Outcome.DISCARD
    assert last.destination is None
    assert d.record.state is State.DISCARDED
    assert d.record.retries == 17


def test_16_retries_then_dead_letter_when_exchange_set(driver):
    """Exhausted with a dead-letter exchange -> the rabbitmq template's dead-letter queue (001)."""
    d = driver("rabbitmq", topic="orders", x_dead_letter_exchange="dlx")
    times = d.fail_every_delivery()
    assert len(times) == 17
    last = d.decisions[-1]
    assert last.outcome is Outcome.DEAD_LETTER
    assert last.destination == "orders.dlq"
    assert d.record.state is State.DEAD_LETTERED


def test_dead_letter_follows_a_custom_naming_template(registry):
    """The dead-letter destination is the rabbitmq naming template's queue (001)."""
    registry.add_scheme(rabbitmq_scheme(dead_letter_queue="{topic}.{group}.dead"))
    policy = registry.policy("rabbitmq", {"x_dead_letter_exchange": "dlx"}, "rabbitmq")
    assert policy.dead_letter_destination(Record("m", "orders", "g1")) == "orders.g1.dead"


def test_ack_during_retry_stops_retries(driver):
    """An ack on a redelivery stops further retries at once (001)."""
    d = driver("rabbitmq", x_retry_interval_s=10)
    d.deliver(0)
    d.fail(0)
    d.due(10 * SECOND)
    d.deliver(10 * SECOND)
    decision = d.ack(11 * SECOND)
    assert decision.outcome is Outcome.COMMIT
    assert d.record.state is State.COMMITTED
    with pytest.raises(IllegalTransition):
        d.due(10**9)
    with pytest.raises(IllegalTransition):
        d.deliver(10**9)


def test_max_retries_not_configurable(make_policy):
    """RabbitMQ max retries is fixed at 16 (001)."""
    assert make_policy("rabbitmq").max_retries == 16
    with pytest.raises(InvalidArgument) as info:
        make_policy("rabbitmq", max_retries=3)
    assert info.value.field == "max_retries"
    assert "16" in info.value.message


def test_retries_only_when_consumed(driver):
    """No delivery, no failure: a READY message is not retried by itself (001)."""
    d = driver("rabbitmq")
    with pytest.raises(IllegalTransition):
        d.deadline(10**9)
    assert d.record.retries == 0
