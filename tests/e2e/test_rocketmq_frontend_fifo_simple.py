"""The RocketMQ SDK's SimpleConsumer on a FIFO group (`[rocketmq] fifo_groups`) gets each message
group in order: the next message of a group is not received while the one before it is
invisible; the settings reply tells the SDK the group is FIFO."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.e2e.test_rocketmq_frontend import (  # noqa: F401  (fixtures)
    Gateway,
    _config,
    _message,
    _name,
    _producer,
    _receive,
    _settings,
    _simple,
    clients,
    start,
)


def test_a_fifo_simple_consumer_gets_a_message_groups_next_message_after_its_head(
    start: Callable[..., Gateway], clients: list[Any],  # noqa: F811
) -> None:
    group = _name("fifo")
    gateway = start(_settings(fifo_groups=frozenset({group})))
    topic = _name("t")
    config = _config(gateway)
    producer = _producer(clients, config, topic)
    for body, message_group in ((b"a1", "A"), (b"a2", "A"), (b"b1", "B")):
        producer.send(_message(topic, body, message_group=message_group))
    consumer = _simple(clients, config, group, topic)
    # 1,000 s invisible (10 s scaled): longer than the receives below.
    heads = _receive(consumer, 2, invisible_s=1000)
    assert sorted(m.body for m in heads) == [b"a1", b"b1"]
    assert consumer.receive(5, 1000) == []  # a2 waits while a1 is invisible (2 s long poll)
    for message in heads:
        consumer.ack(message)
    (after,) = _receive(consumer, 1, invisible_s=1000)
    assert (after.body, after.message_group) == (b"a2", "A")
    consumer.ack(after)
