"""SQL92 filters (`FilterExpression(..., FilterType.SQL)`) with the official RocketMQ 5 Python
SDK: push and simple consumers get only the messages whose properties (and tag, `TAGS`) the
condition selects; the rest are not for their group. A filter that does not parse is refused
(`ILLEGAL_FILTER_EXPRESSION`) and the consumer cannot start."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from rocketmq import FilterExpression, PushConsumer, SimpleConsumer
from rocketmq.grpc_protocol import FilterType

from tests.e2e.test_rocketmq_frontend import (  # noqa: F401  (fixtures)
    Gateway,
    Recorder,
    _config,
    _message,
    _name,
    _producer,
    _receive,
    clients,
    start,
)

pytestmark = pytest.mark.slow
SENT = [  # body, tag, properties
    (b"m1", "x", {"a": "10", "b": "abc"}),
    (b"m2", "x", {"a": "1", "b": "abc"}),
    (b"m3", "y", {"a": "7", "b": "abc"}),
    (b"m4", "x", {"b": "abc"}),  # no a: unknown, not selected (nor by NOT)
    (b"m5", "x", {"a": "six", "b": "abc"}),  # no number
    (b"m6", "", {"a": "99", "b": "abd"}),
]
CONDITION = "a > 5 AND b = 'abc' AND TAGS IN ('x', 'y')"
SELECTED = {b"m1", b"m3"}


def _send_all(started: list[Any], gateway: Gateway, topic: str) -> None:
    producer = _producer(started, _config(gateway), topic)
    for body, tag, props in SENT:
        fields: dict[str, Any] = {"properties": props}
        if tag:
            fields["tag"] = tag
        producer.send(_message(topic, body, **fields))


def test_a_push_consumer_gets_what_its_sql92_filter_selects(
    start: Callable[..., Gateway], clients: list[Any],  # noqa: F811
) -> None:
    gateway = start()
    topic = _name("t")
    recorder = Recorder()
    consumer = PushConsumer(_config(gateway), _name("g"), recorder,
                            {topic: FilterExpression(CONDITION, FilterType.SQL)})
    consumer.startup()
    clients.append(consumer)
    _send_all(clients, gateway, topic)
    # A last selected one: the others came before it, so one let through would show here.
    _producer(clients, _config(gateway), topic).send(
        _message(topic, b"last", tag="y", properties={"a": "6.5", "b": "abc"}))
    assert {seen.body for seen in recorder.take(3)} == {*SELECTED, b"last"}
    assert recorder.seen.empty()


def test_a_simple_consumer_gets_what_its_sql92_filter_selects(
    start: Callable[..., Gateway], clients: list[Any],  # noqa: F811
) -> None:
    gateway = start()
    topic = _name("t")
    _send_all(clients, gateway, topic)
    consumer = SimpleConsumer(_config(gateway), _name("g"),
                              {topic: FilterExpression("NOT (a > 5) OR a IS NULL", FilterType.SQL)},
                              await_duration=2)
    consumer.startup()
    clients.append(consumer)
    got = _receive(consumer, 2)
    assert {m.body for m in got} == {b"m2", b"m4"}
    for message in got:
        consumer.ack(message)
    assert consumer.receive(16, 30) == []  # the rest were left out, not held


def test_an_sql92_filter_that_does_not_parse_is_refused(
    start: Callable[..., Gateway], clients: list[Any],  # noqa: F811
) -> None:
    gateway = start()
    consumer = SimpleConsumer(_config(gateway), _name("g"),
                              {_name("t"): FilterExpression("a > ", FilterType.SQL)},
                              await_duration=2)
    clients.append(consumer)
    with pytest.raises(Exception, match=r"ILLEGAL_FILTER_EXPRESSION|SQL92") as raised:
        consumer.startup()
        consumer.receive(1, 30)
    assert "filter_expression.expression" in str(raised.value)
