"""Every bad value is refused loudly, naming the field and the allowed range or choices.

Ranges from SEMANTICS.md: RocketMQ (000, 002, 003), RabbitMQ (001), Pulsar (004).
"""

from __future__ import annotations

import pytest

from adapters import builtin_registry
from gateway.core import Deliver, Fail, Record, decide
from gateway.core.backoff import format_ms, parse_levels
from gateway.core.naming import custom_scheme
from gateway.errors import InvalidArgument

CASES = [
    # (policy, options, field, text the message must contain)
    ("rocketmq", {"max_retries": "1001"}, "max_retries", "0..1000"),
    ("rocketmq", {"max_retries": "1001", "version": "5"}, "max_retries", "0..1000"),
    ("rocketmq", {"max_retries": "-1", "version": "4"}, "max_retries", "0..2147483647"),
    ("rocketmq", {"max_retries": "many"}, "max_retries", "an integer in 0..1000"),
    # int() reads these too; an option is written in ASCII digits only.
    ("rocketmq", {"max_retries": "1_000"}, "max_retries", "an integer in 0..1000"),
    ("rocketmq", {"max_retries": "\u0663"}, "max_retries", "an integer in 0..1000"),
    ("rocketmq", {"max_retries": "\uff13"}, "max_retries", "an integer in 0..1000"),
    ("rocketmq", {"version": "3"}, "version", "one of 4, 5"),
    ("rocketmq", {"broadcast": "maybe"}, "broadcast", "true or false"),
    ("rocketmq", {"dead_letter": "2"}, "dead_letter", "true or false"),
    ("rocketmq", {"colour": "red"}, "policy_options", "options of policy rocketmq"),
    ("rocketmq-orderly", {"suspend_ms": "5"}, "suspend_ms", "10..30000 ms"),
    ("rocketmq-orderly", {"suspend_ms": "30001"}, "suspend_ms", "10..30000 ms"),
    ("rocketmq-orderly", {"max_retries": "-1"}, "max_retries", "0..2147483647"),
    ("rocketmq-simple", {"max_retries": "1001"}, "max_retries", "0..1000"),
    ("rocketmq-simple", {"suspend_ms": "100"}, "policy_options", "options of policy"),
    ("rocketmq-http", {"max_retries": "3"}, "max_retries", "not configurable"),
    ("rocketmq-http", {"ordered": "sometimes"}, "ordered", "true or false"),
    ("rabbitmq", {"x_retry_interval_s": "5"}, "x_retry_interval_s", "10..1800 s"),
    ("rabbitmq", {"x_retry_interval_s": "1801"}, "x_retry_interval_s", "10..1800 s"),
    ("rabbitmq", {"max_retries": "3"}, "max_retries", "not configurable"),
    ("rabbitmq", {"x_retry_interval": "30"}, "policy_options", "x_retry_interval_s"),
    ("pulsar", {"subscription_type": "topic"}, "subscription_type", "shared, key_shared"),
    ("pulsar", {"max_retries": "-1"}, "max_retries", "0..2147483647"),
    ("pulsar", {"ack_timeout_ms": "999"}, "ack_timeout_ms", "1000..2147483647 ms"),
    ("pulsar-nack", {"nack_delay_ms": "-1"}, "nack_delay_ms", "0..2147483647 ms"),
    ("pulsar-nack", {"dead_letter": "true"}, "policy_options", "options of policy pulsar-nack"),
]


@pytest.mark.parametrize(("name", "options", "field", "text"), CASES)
def test_bad_option_names_field_and_range(name, options, field, text):
    """Bad policy options are refused with the field and the allowed values (000-004)."""
    with pytest.raises(InvalidArgument) as info:
        builtin_registry().policy(name, options)
    assert info.value.field == field
    assert text in info.value.message
    assert info.value.code == "INVALID_ARGUMENT"


def test_unknown_policy_lists_the_known_ones():
    """An unknown policy name lists every policy there is (000-004)."""
    with pytest.raises(InvalidArgument) as info:
        builtin_registry().policy("kafka")
    assert info.value.field == "policy"
    for known in (
        "pulsar",
        "pulsar-nack",
        "rabbitmq",
        "rocketmq",
        "rocketmq-http",
        "rocketmq-orderly",
        "rocketmq-simple",
    ):
        assert known in info.value.message


def test_unknown_scheme_lists_the_known_ones():
    """An unknown naming scheme lists the schemes there are (002, 004)."""
    with pytest.raises(InvalidArgument) as info:
        builtin_registry().policy("pulsar", {}, "pulsar-3.0")
    assert info.value.field == "naming"
    for known in ("pulsar-2.6", "pulsar-2.7", "pulsar-2.9", "rabbitmq", "rocketmq"):
        assert known in info.value.message


def test_custom_scheme_by_name():
    """Custom schemes are registered by name and used for destinations (002)."""
    registry = builtin_registry({"mine": ("{topic}.{group}.retry", "{topic}.{group}.dead")})
    policy = registry.policy("rocketmq", {}, "mine")
    record = Record("m", "orders", "G")
    assert policy.retry_destination(record) == "orders.G.retry"
    assert policy.dead_letter_destination(record) == "orders.G.dead"


@pytest.mark.parametrize("template", ["", "{queue}-retry", "{topic"])
def test_bad_custom_template(template):
    """Templates take {topic}, {group} and {ns} only (002)."""
    with pytest.raises(InvalidArgument) as info:
        custom_scheme(template, "{topic}.dlq")
    assert info.value.field == "naming.retry"


def test_invisible_5s_names_field_and_range():
    """InvisibleDuration 5 s is below the 10 s..12 h range (003)."""
    policy = builtin_registry().policy("rocketmq-simple")
    with pytest.raises(InvalidArgument) as info:
        decide(Record("m", "t", "g"), Deliver("r", 5_000), policy, 0)
    assert info.value.field == "invisible_ms"
    assert "10000..43200000 ms" in info.value.message


@pytest.mark.parametrize("name", ["rocketmq", "rabbitmq", "pulsar"])
def test_invisible_duration_refused_where_timeout_is_fixed(name):
    """Only the simple consumer chooses an invisible duration per receive (003, 001, 004)."""
    policy = builtin_registry().policy(name)
    with pytest.raises(InvalidArgument) as info:
        decide(Record("m", "t", "g"), Deliver("r", 30_000), policy, 0)
    assert info.value.field == "invisible_ms"
    assert name in info.value.message


@pytest.mark.parametrize(
    ("name", "request_", "field", "text"),
    [
        ("rocketmq", {"delay_ms": 5_000}, "delay_ms", "delay_level 1..18"),
        ("rocketmq-http", {"delay_ms": 5_000}, "delay_ms", "not accepted"),
        ("rocketmq-http", {"delay_level": 3}, "delay_level", "not accepted"),
        ("rocketmq-simple", {"delay_ms": 5_000}, "delay_ms", "invisible duration"),
        ("rabbitmq", {"delay_ms": 5_000}, "delay_ms", "not accepted"),
        ("rocketmq-orderly", {"delay_ms": 5}, "delay_ms", "10..30000 ms"),
        ("pulsar", {"delay_ms": 1_000, "delay_level": 1}, "delay_level", "not together"),
    ],
)
def test_bad_failure_request_names_field(name, request_, field, text):
    """A failure asking for a wait the policy does not take is refused (000, 001, 003, 004)."""
    policy = builtin_registry().policy(name)
    invisible = 30_000 if name == "rocketmq-simple" else None
    record = decide(Record("m", "t", "g"), Deliver("r", invisible), policy, 0).record
    with pytest.raises(InvalidArgument) as info:
        decide(record, Fail("r", **request_), policy, 1)
    assert info.value.field == field
    assert text in info.value.message


def test_bad_request_refused_even_when_exhausted():
    """A bad delay level is refused on the last failure too, not silently dead-lettered (002)."""
    policy = builtin_registry().policy("rocketmq", {"max_retries": "0"})
    record = decide(Record("m", "t", "g"), Deliver("r"), policy, 0).record
    with pytest.raises(InvalidArgument):
        decide(record, Fail("r", delay_level=19), policy, 1)


def test_settings_record_the_validated_options():
    """A policy shows the values it was built from, defaults included (000)."""
    policy = builtin_registry().policy("rocketmq", {"max_retries": " 3 ", "version": "4"})
    assert dict(policy.settings) == {
        "broadcast": "false",
        "dead_letter": "true",
        "max_retries": "3",
        "version": "4",
    }


def test_level_tables_parse_and_print():
    """Level tables read and print in the documents' notation, `1s 5s … 2h` (002, 004)."""
    spec = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    levels = parse_levels(spec)
    assert levels[0] == 1_000
    assert levels[-1] == 7_200_000
    assert " ".join(format_ms(ms) for ms in levels) == spec
    assert format_ms(1_500) == "1500ms"


@pytest.mark.parametrize("spec", ["1s 5x", "s", "1.5s"])
def test_bad_level_table(spec):
    """A level table that is not durations is refused naming the field (002)."""
    with pytest.raises(InvalidArgument) as info:
        parse_levels(spec)
    assert info.value.field == "levels"
