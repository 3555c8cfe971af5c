"""Transactional messages with the official RocketMQ 5 Python SDK, changing only the endpoint.

A half message is invisible until its producer commits it; a rollback drops it; a transaction
left open is asked about (RecoverOrphanedTransactionCommand on the producer's telemetry stream)
and the producer's checker decides it; after `max_checks` checks the half is dead-lettered.
"""

from __future__ import annotations

import queue
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from rocketmq import Producer, TransactionChecker
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc

from adapters.rocketmq.frontend.settings import CheckTimes
from adapters.rocketmq.frontend.transactions import HALF_TOPIC
from tests.e2e.test_rocketmq_frontend import (  # noqa: F401  (fixtures)
    WAIT_S,
    Gateway,
    _config,
    _message,
    _name,
    _receive,
    _settings,
    _simple,
    clients,
    start,
)

pytestmark = pytest.mark.slow
Resolution = definition_pb2.TransactionResolution
Code = definition_pb2.Code
NEVER = CheckTimes(first_ms=43_200_000, interval_ms=43_200_000)
"""No check comes during a test (12 h of policy time, 7 min scaled)."""


class Checker(TransactionChecker):  # type: ignore[misc]
    """Answers every check with `answer`; records what it was asked about."""

    def __init__(self, answer: int = Resolution.COMMIT) -> None:
        self.answer = answer
        self.asked: queue.Queue[Any] = queue.Queue()

    def check(self, message: Any) -> Any:
        self.asked.put(message)
        return self.answer


def _producer(started: list[Any], gateway: Gateway, topic: str, checker: Checker) -> Producer:
    producer = Producer(_config(gateway), (topic,), checker)
    producer.startup()
    started.append(producer)
    return producer


@dataclass
class Rig:
    """A gateway, a topic, a transactional producer of it and the producer's checker."""

    gateway: Gateway
    topic: str
    producer: Producer
    checker: Checker
    started: list[Any]

    def consumer(self, topic: str = "") -> Any:
        """A new simple consumer group of `topic` (the rig's by default)."""
        return _simple(self.started, _config(self.gateway), _name("g"), topic or self.topic)


def _rig(starts: Callable[..., Gateway], started: list[Any], times: CheckTimes = NEVER,
         answer: int = Resolution.COMMIT) -> Rig:
    gateway = starts(_settings(transaction_check=times))
    topic = _name("t")
    checker = Checker(answer)
    return Rig(gateway, topic, _producer(started, gateway, topic, checker), checker, started)


def _send_raw(gateway: Gateway, request: Any) -> Any:
    with grpc.insecure_channel(gateway.endpoint) as channel:
        return service_pb2_grpc.MessagingServiceStub(channel).SendMessage(request, timeout=10)


def _send_half(producer: Producer, topic: str, body: bytes) -> tuple[Any, Any]:
    transaction = producer.begin_transaction()
    message = _message(topic, body, tag="tx", keys="k1",
                       properties={"order": "42"})
    receipt = producer.send(message, transaction)
    return transaction, receipt


def test_a_committed_half_message_reaches_consumers_with_its_own_id(
    start: Callable[..., Gateway], clients: list[Any],  # noqa: F811
) -> None:
    rig = _rig(start, clients)
    consumer = rig.consumer()
    transaction, receipt = _send_half(rig.producer, rig.topic, b"paid")
    assert receipt.transaction_id
    assert consumer.receive(1, 30) == []  # invisible until committed (2 s long poll)
    transaction.commit()
    (got,) = _receive(consumer, 1)
    assert got.body == b"paid"
    assert got.message_id == receipt.message_id
    assert got.tag == "tx" and set(got.keys) == {"k1"}
    assert got.properties == {"order": "42"}
    consumer.ack(got)
    assert rig.checker.asked.empty()


def test_a_rolled_back_half_message_never_reaches_consumers(
    start: Callable[..., Gateway], clients: list[Any],  # noqa: F811
) -> None:
    rig = _rig(start, clients)
    consumer = rig.consumer()
    transaction, _ = _send_half(rig.producer, rig.topic, b"cancelled")
    transaction.rollback()
    rig.producer.send(_message(rig.topic, b"after"))
    (got,) = _receive(consumer, 1)
    assert got.body == b"after"
    consumer.ack(got)
    assert consumer.receive(1, 30) == []


def test_an_open_transaction_is_checked_and_the_checkers_commit_delivers_it(
    start: Callable[..., Gateway], clients: list[Any],  # noqa: F811
) -> None:
    # First check after 10 s of policy time (100 ms scaled).
    rig = _rig(start, clients, CheckTimes(first_ms=10_000))
    consumer = rig.consumer()
    _, receipt = _send_half(rig.producer, rig.topic, b"orphan")  # never committed by the sender
    asked = rig.checker.asked.get(timeout=WAIT_S)
    assert asked.message_id == receipt.message_id
    assert asked.topic == rig.topic and asked.body == b"orphan"
    assert asked.properties == {"order": "42"}
    (got,) = _receive(consumer, 1)
    assert (got.body, got.message_id) == (b"orphan", receipt.message_id)


def test_an_undecided_transaction_is_checked_max_checks_times_then_dead_lettered(
    start: Callable[..., Gateway], clients: list[Any],  # noqa: F811
) -> None:
    times = CheckTimes(first_ms=10_000, interval_ms=10_000, max_checks=3)
    rig = _rig(start, clients, times, Resolution.TRANSACTION_RESOLUTION_UNSPECIFIED)
    _send_half(rig.producer, rig.topic, b"undecided")
    for _ in range(3):
        rig.checker.asked.get(timeout=WAIT_S)
    dead = rig.consumer("%DLQ%CID_RMQ_SYS_TRANS")
    (letter,) = _receive(dead, 1)
    assert letter.body == b"undecided"
    assert rig.checker.asked.empty()
    assert rig.consumer().receive(1, 30) == []


def test_a_dead_lettered_transaction_is_over_and_frees_the_checker(
    start: Callable[..., Gateway], clients: list[Any],  # noqa: F811
) -> None:
    """After its last check the half is dead-lettered and its transaction is over: a commit
    then is refused and delivers nothing (it was committed, and the message delivered, though
    it sat in the dead-letter queue too), and the checker no longer holds it (it held every
    dead-lettered half for good: once they filled `held_bytes`, here 1 byte, no transaction
    of anyone's could end any more)."""
    times = CheckTimes(first_ms=10_000, interval_ms=10_000, max_checks=1, held_bytes=1)
    rig = _rig(start, clients, times, Resolution.TRANSACTION_RESOLUTION_UNSPECIFIED)
    consumer = rig.consumer()
    transaction, _ = _send_half(rig.producer, rig.topic, b"undecided")
    rig.checker.asked.get(timeout=WAIT_S)
    (letter,) = _receive(rig.consumer("%DLQ%CID_RMQ_SYS_TRANS"), 1)
    assert letter.body == b"undecided"
    with pytest.raises(Exception, match="transaction_id"):
        transaction.commit()
    assert consumer.receive(1, 30) == []
    second, _ = _send_half(rig.producer, rig.topic, b"next")
    second.commit()
    (got,) = _receive(consumer, 1)
    assert got.body == b"next"


def test_end_transaction_refuses_ids_it_does_not_hold(
    start: Callable[..., Gateway], clients: list[Any],  # noqa: F811
) -> None:
    rig = _rig(start, clients)
    consumer = rig.consumer()
    transaction, receipt = _send_half(rig.producer, rig.topic, b"kept")

    def end(**fields: Any) -> Any:
        request = service_pb2.EndTransactionRequest(
            message_id=receipt.message_id, transaction_id=receipt.transaction_id,
            resolution=Resolution.COMMIT)
        request.topic.name = rig.topic
        for name, value in fields.items():
            if name == "topic":
                request.topic.name = value
            else:
                setattr(request, name, value)
        with grpc.insecure_channel(rig.gateway.endpoint) as channel:
            return service_pb2_grpc.MessagingServiceStub(channel).EndTransaction(
                request, timeout=10)

    assert end(transaction_id="nope").status.code == Code.INVALID_TRANSACTION_ID
    assert end(message_id="0123").status.code == Code.INVALID_TRANSACTION_ID
    assert end(topic=_name("other")).status.code == Code.INVALID_TRANSACTION_ID
    bad = end(resolution=Resolution.TRANSACTION_RESOLUTION_UNSPECIFIED).status
    assert bad.code == Code.BAD_REQUEST and "resolution" in bad.message
    assert end(transaction_id="").status.code == Code.ILLEGAL_MESSAGE_ID
    assert consumer.receive(1, 30) == []  # none of those ended it
    transaction.commit()
    (got,) = _receive(consumer, 1)
    assert got.body == b"kept"
    again = end()  # the transaction has ended
    assert again.status.code == Code.INVALID_TRANSACTION_ID


def test_half_messages_stay_on_the_half_topic_until_ended(
    start: Callable[..., Gateway], clients: list[Any],  # noqa: F811
) -> None:
    rig = _rig(start, clients)
    _send_half(rig.producer, rig.topic, b"hidden")
    # The half topic is an ordinary topic another group can read (an operator, say): it holds
    # the half, under RocketMQ's own name.
    reader = rig.consumer(HALF_TOPIC)
    (half,) = _receive(reader, 1)
    assert half.body == b"hidden"


def test_a_transactional_message_with_a_message_group_is_refused(
    start: Callable[..., Gateway],  # noqa: F811
) -> None:
    gateway = start()
    request = service_pb2.SendMessageRequest()
    message = request.messages.add(body=b"x")
    message.topic.name = _name("t")
    props = message.system_properties
    props.message_id = "01ABC"
    props.message_type = definition_pb2.MessageType.TRANSACTION
    props.message_group = "g"
    response = _send_raw(gateway, request)
    assert response.status.code == Code.BAD_REQUEST
    assert "message_group" in response.status.message
    props.ClearField("message_group")
    props.orphaned_transaction_recovery_duration.seconds = -1
    response = _send_raw(gateway, request)
    assert response.status.code == Code.BAD_REQUEST
    assert "orphaned_transaction_recovery_duration" in response.status.message


def test_an_open_transaction_outlives_a_gateway_restart(
    start: Callable[..., Gateway], clients: list[Any],  # noqa: F811
) -> None:
    times = CheckTimes(first_ms=10_000, interval_ms=10_000)
    settings = _settings(transaction_check=times)
    gateway = start(settings)
    topic = _name("t")
    checker = Checker(Resolution.TRANSACTION_RESOLUTION_UNSPECIFIED)  # undecided for now
    producer = _producer(clients, gateway, topic, checker)
    _, receipt = _send_half(producer, topic, b"survives")
    checker.asked.get(timeout=WAIT_S)  # the half was stored and is being checked
    port = gateway.port
    gateway.stop()
    checker.answer = Resolution.COMMIT
    gateway = start(settings, port=port)
    # This SDK does not rebuild its telemetry stream after the server went away ("no current
    # event loop" in its settings thread), so no check could reach the first producer: the
    # check goes to any producer of the topic, here one started after the restart.
    _producer(clients, gateway, topic, checker)
    consumer = _simple(clients, _config(gateway), _name("g"), topic)
    (got,) = _receive(consumer, 1)
    assert (got.body, got.message_id) == (b"survives", receipt.message_id)
    consumer.ack(got)
    assert consumer.receive(1, 30) == []


def test_a_transactional_message_of_the_largest_size_is_taken_and_committed(
    start: Callable[..., Gateway], clients: list[Any],  # noqa: F811
) -> None:
    """The half message's own headers do not count against the size limit."""
    rig = _rig(start, clients)
    consumer = rig.consumer()
    body = b"x" * (4 * 1024 * 1024)
    transaction = rig.producer.begin_transaction()
    rig.producer.send(_message(rig.topic, body), transaction)
    transaction.commit()
    (got,) = _receive(consumer, 1)
    assert got.body == body
