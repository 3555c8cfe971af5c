"""A receipt handle settles only a delivery of the group and topic the request names, as on a
RocketMQ broker: an ack, a changed invisible duration or a forward to the dead-letter queue
that names another group or topic is refused with INVALID_RECEIPT_HANDLE and leaves the
delivery to the group that received it."""

from __future__ import annotations

from typing import Any

import pytest
from rocketmq.grpc_protocol import definition_pb2, service_pb2
from test_rocketmq_frontend_bad_input import (  # noqa: F401  (fixtures)
    _name,
    _receive_all,
    _send_request,
    channel,
    gateway,
    stub,
)

Code = definition_pb2.Code


def _ack(client: Any, topic: str, group: str, message_id: str, handle: str) -> Any:
    request = service_pb2.AckMessageRequest()
    request.group.name, request.topic.name = group, topic
    request.entries.add(message_id=message_id, receipt_handle=handle)
    return client.AckMessage(request, timeout=5)


def _change(client: Any, topic: str, group: str, message_id: str, handle: str) -> Any:
    request = service_pb2.ChangeInvisibleDurationRequest(receipt_handle=handle,
                                                         message_id=message_id)
    request.group.name, request.topic.name = group, topic
    request.invisible_duration.seconds = 30
    return client.ChangeInvisibleDuration(request, timeout=5)


def _forward(client: Any, topic: str, group: str, message_id: str, handle: str) -> Any:
    request = service_pb2.ForwardMessageToDeadLetterQueueRequest(
        receipt_handle=handle, message_id=message_id, delivery_attempt=1, max_delivery_attempts=2
    )
    request.group.name, request.topic.name = group, topic
    return client.ForwardMessageToDeadLetterQueue(request, timeout=5)


@pytest.mark.parametrize("call", [_ack, _change, _forward])
@pytest.mark.parametrize("wrong", ["group", "topic"])
def test_a_receipt_handle_under_another_group_or_topic_settles_nothing(
    stub: Any, call: Any, wrong: str,  # noqa: F811
) -> None:
    topic, group, other = _name("t"), _name("g"), _name("o")
    assert stub.SendMessage(_send_request(topic), timeout=5).status.code == Code.OK
    code, received = _receive_all(stub, topic, group)
    assert code == Code.OK and len(received) == 1
    sp = received[0].system_properties
    names = (topic, other) if wrong == "group" else (other, group)
    reply = call(stub, *names, sp.message_id, sp.receipt_handle)
    status = reply.status if call is not _ack else reply.entries[0].status
    assert status.code == Code.INVALID_RECEIPT_HANDLE, status
    assert "receipt handle" in status.message and repr(names[1]) in status.message
    # The delivery is still the receiving group's to settle.
    reply = _ack(stub, topic, group, sp.message_id, sp.receipt_handle)
    assert reply.status.code == Code.OK, reply.status
