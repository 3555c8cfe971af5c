"""What the RocketMQ SDK reads on retried and dead-lettered messages, as a RocketMQ 5 proxy shows
them: the user properties the producer set and nothing else (the names RocketMQ keeps for itself,
which the gateway writes on its copies, are not user properties), the message as it was sent (a
retry is not a delayed message), and a dead letter's origin in `dead_letter_queue`."""

from __future__ import annotations

import queue
from collections.abc import Callable
from typing import Any

import grpc
from rocketmq import ConsumeResult, FilterExpression, MessageListener, PushConsumer
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc

from tests.e2e.test_rocketmq_frontend import (  # noqa: F401  (fixtures)
    WAIT_S,
    Gateway,
    _config,
    _message,
    _name,
    _producer,
    _settings,
    clients,
    start,
)

MT = definition_pb2.MessageType


class Failing(MessageListener):  # type: ignore[misc]
    """Keeps every message it is given, and fails it."""

    def __init__(self) -> None:
        self.seen: queue.Queue[Any] = queue.Queue()

    def consume(self, message: Any) -> Any:
        self.seen.put(message)
        return ConsumeResult.FAILURE


def _receive_raw(endpoint: str, topic: str, group: str) -> list[Any]:
    request = service_pb2.ReceiveMessageRequest(batch_size=16)
    request.group.name = group
    request.message_queue.topic.name = topic
    request.invisible_duration.seconds = 30
    request.long_polling_timeout.seconds = 5
    with grpc.insecure_channel(endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        replies = list(stub.ReceiveMessage(request, timeout=20))
    return [r.message for r in replies if r.HasField("message")]


def test_retries_and_dead_letters_show_only_the_producers_properties(
    start: Callable[..., Gateway], clients: list[Any],  # noqa: F811
) -> None:
    gateway = start(_settings(max_delivery_attempts=2))
    topic, group = _name("t"), _name("g")
    config = _config(gateway)
    sent = _producer(clients, config, topic).send(
        _message(topic, b"bad", tag="T", keys="k1", properties={"u": "v"})
    )
    listener = Failing()
    consumer = PushConsumer(config, group, listener, {topic: FilterExpression("*")})
    consumer.startup()
    clients.append(consumer)
    first, retry = (listener.seen.get(timeout=WAIT_S) for _ in range(2))
    assert (first.delivery_attempt, retry.delivery_attempt) == (1, 2)
    assert retry.properties == first.properties == {"u": "v"}
    # A retried NORMAL message is still NORMAL, without a delivery time of its own.
    assert (retry.message_type, retry.delivery_timestamp) == (MT.NORMAL, 0)

    # The dead letter (after 2 deliveries), read as RocketMQ shows it.
    dead_letters = _receive_raw(gateway.endpoint, f"%DLQ%{group}", _name("reader"))
    assert len(dead_letters) == 1
    dead = dead_letters[0]
    assert dict(dead.user_properties) == {"u": "v"}
    assert (dead.system_properties.tag, list(dead.system_properties.keys)) == ("T", ["k1"])
    origin = dead.system_properties.dead_letter_queue
    assert (origin.topic, origin.message_id) == (topic, sent.message_id)
    assert dead.system_properties.message_type == MT.NORMAL


def test_born_timestamp_is_kept_across_retries_and_into_the_dead_letter_queue(
    start: Callable[..., Gateway], clients: list[Any],  # noqa: F811
) -> None:
    """RocketMQ keeps the producer's born time on every retry and on the dead letter; the
    gateway stores each copy anew, and used to show that copy's store time as its born time."""
    gateway = start(_settings(max_delivery_attempts=3))
    topic, group = _name("t"), _name("g")
    config = _config(gateway)
    _producer(clients, config, topic).send(_message(topic, b"bad", tag="T"))
    listener = Failing()
    consumer = PushConsumer(config, group, listener, {topic: FilterExpression("*")})
    consumer.startup()
    clients.append(consumer)
    seen = [listener.seen.get(timeout=WAIT_S) for _ in range(3)]
    assert [m.delivery_attempt for m in seen] == [1, 2, 3]
    born = seen[0].born_timestamp
    assert born > 0
    assert [m.born_timestamp for m in seen] == [born] * 3

    dead_letters = _receive_raw(gateway.endpoint, f"%DLQ%{group}", _name("reader"))
    assert len(dead_letters) == 1
    dead = dead_letters[0].system_properties
    assert dead.born_timestamp.ToMilliseconds() == born
    # The store time stays each copy's own.
    assert dead.store_timestamp.ToMilliseconds() > born
