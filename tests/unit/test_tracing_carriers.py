"""Each front end's trace carrier mapped into the message's `traceparent` / `tracestate` and
back out in its own form: RocketMQ's `trace_context` system property here (the gRPC metadata,
Pulsar properties and AMQP headers are tested end to end in tests/e2e/test_tracing.py)."""

from __future__ import annotations

import pytest
from rocketmq.grpc_protocol import definition_pb2

from adapters.rocketmq.frontend.codec import out_message, sdk_message
from gateway.engine.api import Delivery

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def sdk(trace_context: str | None = None, **user: str) -> definition_pb2.Message:
    message = definition_pb2.Message(body=b"x")
    message.topic.name = "t"
    message.system_properties.message_id = "M1"
    if trace_context is not None:
        message.system_properties.trace_context = trace_context
    message.user_properties.update(user)
    return message


def test_trace_context_becomes_the_message_traceparent() -> None:
    assert out_message(sdk(PARENT), 0).properties == {"traceparent": PARENT}
    got = out_message(sdk(PARENT, tracestate="v=1", k="v"), 0).properties
    assert got == {"traceparent": PARENT, "tracestate": "v=1", "k": "v"}


@pytest.mark.parametrize("junk", ["", "garbage", "00-" + "0" * 32 + "-" + "1" * 16 + "-01",
                                  "x" * 10_000])
def test_an_invalid_trace_context_is_no_context(junk: str) -> None:
    assert "traceparent" not in out_message(sdk(junk), 0).properties


def test_the_message_own_traceparent_comes_first() -> None:
    own = "00-" + "1" * 32 + "-" + "2" * 16 + "-01"
    assert out_message(sdk(PARENT, traceparent=own), 0).properties["traceparent"] == own


def delivery(**properties: str) -> Delivery:
    return Delivery("r", "M1", "t", "t", b"x", properties, "", "", 1, 0, 0, 0, 0, "g")


def test_delivered_to_a_rocketmq_consumer_as_trace_context() -> None:
    topic = definition_pb2.Resource(name="t")
    msg = sdk_message(delivery(traceparent=PARENT, tracestate="v=1", k="v"), topic, "s", 30_000,
                      "host")
    assert msg.system_properties.trace_context == PARENT
    assert dict(msg.user_properties) == {"tracestate": "v=1", "k": "v"}
    plain = sdk_message(delivery(k="v"), topic, "s", 30_000, "host")
    assert not plain.system_properties.HasField("trace_context")
