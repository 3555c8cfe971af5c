"""The RocketMQ front end's range checks: each field, its limit, its status code, short echoes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from rocketmq.grpc_protocol import definition_pb2, service_pb2

from adapters.rocketmq.frontend import sending, validation
from adapters.rocketmq.frontend.codec import Rejected
from gateway.errors import InvalidArgument, Unimplemented
from gateway.limits import MAX_BATCH, MAX_DELAY_MS, message_size

Code = definition_pb2.Code
MT = definition_pb2.MessageType
NOW_MS = 1_800_000_000_000
CHECKS = validation.RequestChecks(validation.Limits(1000), lambda: NOW_MS)


def _send(change: Callable[[Any], None] | None = None) -> Any:
    request = service_pb2.SendMessageRequest()
    message = request.messages.add(body=b"x")
    message.topic.name = "t"
    message.system_properties.message_id = "MID1"
    if change is not None:
        change(message)
    return request


def _refused(request: Any) -> Rejected:
    with pytest.raises(Rejected) as caught:
        CHECKS.check(request)
    assert len(caught.value.message) < 600
    return caught.value


def _set(path: str, value: Any) -> Callable[[Any], None]:
    def change(message: Any) -> None:
        *parents, name = path.split(".")
        target = message
        for parent in parents:
            target = getattr(target, parent)
        setattr(target, name, value)

    return change


def _delay(seconds: int, nanos: int = 0) -> Callable[[Any], None]:
    def change(message: Any) -> None:
        message.system_properties.message_type = MT.DELAY
        message.system_properties.delivery_timestamp.seconds = seconds
        message.system_properties.delivery_timestamp.nanos = nanos

    return change


def test_a_plain_sdk_message_passes() -> None:
    def full(message: Any) -> None:
        props = message.system_properties
        props.tag, props.message_group, props.message_type = "TagA", "order-1", MT.FIFO
        props.keys.extend(["k1", "k2"])
        message.user_properties["p"] = "v"
        message.topic.resource_namespace = "ns_1"

    CHECKS.check(_send(full))


@pytest.mark.parametrize(
    ("change", "code", "field"),
    [
        (_set("system_properties.message_type", MT.FIFO), Code.BAD_REQUEST, "message_group"),
        (_set("system_properties.message_type", MT.DELAY), Code.ILLEGAL_DELIVERY_TIME,
         "delivery_timestamp"),
        (_set("body", b""), Code.MESSAGE_BODY_EMPTY, "body"),
        (_set("body", b"x" * 1001), Code.MESSAGE_BODY_TOO_LARGE, "body"),
        (_set("system_properties.message_type", 99), Code.BAD_REQUEST, "message_type"),
        (_set("system_properties.message_id", " "), Code.ILLEGAL_MESSAGE_ID, "message_id"),
        (_set("system_properties.message_id", "m" * 129), Code.ILLEGAL_MESSAGE_ID, "message_id"),
        (_set("system_properties.tag", "a\nb"), Code.ILLEGAL_MESSAGE_TAG, "tag"),
        (_set("system_properties.message_group", "é" * 32), Code.ILLEGAL_MESSAGE_GROUP,
         "message_group"),
        (_set("topic.name", ""), Code.ILLEGAL_TOPIC, "topic.name"),
        (_set("topic.name", "t" * 128), Code.ILLEGAL_TOPIC, "topic.name"),
        (_set("topic.name", "a/b"), Code.ILLEGAL_TOPIC, "topic.name"),
        (_set("topic.resource_namespace", "n" * 65), Code.ILLEGAL_TOPIC, "resource_namespace"),
        (_delay(NOW_MS // 1000 + MAX_DELAY_MS // 1000 + 1), Code.ILLEGAL_DELIVERY_TIME,
         "delivery_timestamp"),
        (_delay(2**62), Code.ILLEGAL_DELIVERY_TIME, "delivery_timestamp"),
        (_delay(0, -1), Code.ILLEGAL_DELIVERY_TIME, "delivery_timestamp.nanos"),
        (_delay(0, 10**9), Code.ILLEGAL_DELIVERY_TIME, "delivery_timestamp.nanos"),
    ],
)
def test_bad_message_fields(change: Callable[[Any], None], code: int, field: str) -> None:
    error = _refused(_send(change))
    assert error.status_code == code, error.message
    assert field in error.field
    assert isinstance(error, InvalidArgument)


@pytest.mark.parametrize("seconds", [NOW_MS // 1000 + MAX_DELAY_MS // 1000, NOW_MS // 1000 - 1,
                                     -(2**62)])
def test_delivery_times_up_to_the_limit_and_in_the_past_pass(seconds: int) -> None:
    CHECKS.check(_send(_delay(seconds)))


def test_unsupported_message_kinds_are_unimplemented() -> None:
    for kind in (MT.LITE,):
        with pytest.raises(Unimplemented, match="messages are not supported"):
            CHECKS.check(_send(_set("system_properties.message_type", kind)))
    gzip = _set("system_properties.body_encoding", definition_pb2.Encoding.GZIP)
    with pytest.raises(Unimplemented, match="IDENTITY"):
        CHECKS.check(_send(gzip))


def test_message_size_is_the_engines_size_of_the_message_it_gets() -> None:
    """Body, tag, message group, user properties, the KEYS property and the trace context:
    what `gateway.limits.message_size` counts on the engine's message."""
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

    def big(message: Any) -> None:
        message.body = b"x" * 1000
        message.system_properties.tag = "t" * 300
        message.system_properties.keys.extend(["k" * 100, "j" * 99])  # KEYS: 4 + 200
        message.system_properties.message_group = "g" * 60
        message.system_properties.trace_context = traceparent  # traceparent: 11 + 55
        message.user_properties["p"] = "v" * 370

    request = _send(big)
    CHECKS.check(request)
    with pytest.raises(Rejected) as caught:
        sending.out_messages(request, NOW_MS, 2000)
    error = caught.value
    assert error.status_code == Code.PAYLOAD_TOO_LARGE
    assert error.field == "messages[0]: " + sending.SIZE_FIELDS
    assert "2001 bytes" in error.message and "at most 2000 bytes" in error.message

    request.messages[0].user_properties["p"] = "v" * 369
    (out,) = sending.out_messages(request, NOW_MS, 2000)
    assert message_size(out) == 2000


def test_property_limits() -> None:
    many = _send(lambda m: m.user_properties.update({f"k{i}": "" for i in range(129)}))
    assert _refused(many).status_code == Code.MESSAGE_PROPERTIES_TOO_LARGE
    checks = validation.RequestChecks(validation.Limits(10**6), lambda: NOW_MS)
    large = _send(lambda m: m.user_properties.update({"k": "v" * 16_384}))
    with pytest.raises(Rejected) as caught:
        checks.check(large)
    assert caught.value.status_code == Code.MESSAGE_PROPERTIES_TOO_LARGE
    checks.check(_send(lambda m: m.user_properties.update({"k": "v" * 16_383})))
    for key in ("", "a\x00b", "KEYS"):
        error = _refused(_send(lambda m, key=key: m.user_properties.update({key: "v"})))
        assert error.status_code == Code.ILLEGAL_MESSAGE_PROPERTY_KEY


def test_message_count_per_send() -> None:
    assert _refused(service_pb2.SendMessageRequest()).status_code == Code.BAD_REQUEST
    request = _send()
    for _ in range(MAX_BATCH):
        request.messages.append(request.messages[0])
    error = _refused(request)
    assert (error.status_code, error.field) == (Code.BAD_REQUEST, "messages")


def test_long_values_are_echoed_cut_short() -> None:
    error = _refused(_send(_set("topic.name", "t" * 100_000)))
    assert "100000 characters" in error.message
    assert len(error.message) < 400


def _receive(**fields: Any) -> Any:
    request = service_pb2.ReceiveMessageRequest(batch_size=fields.pop("batch_size", 1))
    request.group.name = fields.pop("group", "g")
    request.message_queue.topic.name = "t"
    if "invisible_ms" in fields:
        ms = fields.pop("invisible_ms")
        request.invisible_duration.seconds, request.invisible_duration.nanos = divmod(ms, 1000)
        request.invisible_duration.nanos *= 1_000_000
    for name, value in fields.items():
        target = getattr(request, name)
        if isinstance(value, tuple):
            target.seconds, target.nanos = value
        else:
            setattr(request, name, value)
    return request


def test_receive_ranges() -> None:
    CHECKS.check(_receive(invisible_ms=10_000))
    CHECKS.check(_receive(invisible_ms=43_200_000, batch_size=1024))
    CHECKS.check(_receive(auto_renew=True, batch_size=0))
    cases: list[tuple[Any, int, str]] = [
        (_receive(invisible_ms=9_999), Code.ILLEGAL_INVISIBLE_TIME, "invisible_duration"),
        (_receive(invisible_ms=43_200_001), Code.ILLEGAL_INVISIBLE_TIME, "invisible_duration"),
        (_receive(), Code.ILLEGAL_INVISIBLE_TIME, "invisible_duration"),
        (_receive(invisible_duration=(30, -1)), Code.ILLEGAL_INVISIBLE_TIME, "invisible_duration"),
        (_receive(invisible_ms=30_000, batch_size=1025), Code.BAD_REQUEST, "batch_size"),
        (_receive(invisible_ms=30_000, long_polling_timeout=(-1, 0)), Code.ILLEGAL_POLLING_TIME,
         "long_polling_timeout"),
        (_receive(invisible_ms=30_000, long_polling_timeout=(3601, 0)),
         Code.ILLEGAL_POLLING_TIME, "long_polling_timeout"),
        (_receive(invisible_ms=30_000, group="a b"), Code.ILLEGAL_CONSUMER_GROUP, "group.name"),
        (_receive(invisible_ms=30_000, group="g" * 256), Code.ILLEGAL_CONSUMER_GROUP,
         "group.name"),
    ]
    for request, code, field in cases:
        error = _refused(request)
        assert (error.status_code, error.field) == (code, field), error.message
    for text in ("", "a >", "a > 5 b", "(" * 100 + "a = 1" + ")" * 100, "a = 1" * 1000):
        sql = _receive(invisible_ms=30_000)
        sql.filter_expression.type = definition_pb2.FilterType.SQL
        sql.filter_expression.expression = text
        error = _refused(sql)
        assert (error.status_code, error.field) == (Code.ILLEGAL_FILTER_EXPRESSION,
                                                    "filter_expression.expression"), text
    sql.filter_expression.expression = "a > 5 AND TAGS IN ('x', 'y')"
    CHECKS.check(sql)  # taken
    long = _receive(invisible_ms=30_000)
    long.filter_expression.expression = "a||" * 10_000
    assert _refused(long).status_code == Code.ILLEGAL_FILTER_EXPRESSION


def _settle(kind: type[Any], **fields: Any) -> Any:
    request = kind(**fields)
    request.group.name, request.topic.name = "g", "t"
    return request


def test_settle_ranges() -> None:
    ack = _settle(service_pb2.AckMessageRequest)
    assert _refused(ack).field == "entries"
    ack.entries.add(receipt_handle="s.r", message_id="M")
    CHECKS.check(ack)
    ack.entries.add(receipt_handle="s.r", message_id="M", lite_topic="lt")
    assert _refused(ack).status_code == Code.ILLEGAL_LITE_TOPIC
    bad = _settle(service_pb2.AckMessageRequest)
    bad.entries.add(receipt_handle="s.\x00")
    assert _refused(bad).status_code == Code.INVALID_RECEIPT_HANDLE

    change = _settle(service_pb2.ChangeInvisibleDurationRequest, receipt_handle="s.r")
    assert _refused(change).status_code == Code.ILLEGAL_INVISIBLE_TIME  # 0 s for a simple one
    change.invisible_duration.seconds = 10
    CHECKS.check(change)
    push = _settle(service_pb2.ChangeInvisibleDurationRequest, receipt_handle="p.r")
    CHECKS.check(push)  # a push consumer's back-off step may be 0
    push.invisible_duration.seconds = 86_401
    assert _refused(push).status_code == Code.ILLEGAL_INVISIBLE_TIME

    forward = _settle(service_pb2.ForwardMessageToDeadLetterQueueRequest, receipt_handle="p.r",
                      delivery_attempt=-1)
    assert _refused(forward).field == "delivery_attempt"
    no_group = service_pb2.ForwardMessageToDeadLetterQueueRequest(receipt_handle="p.r")
    no_group.topic.name = "t"
    assert _refused(no_group).status_code == Code.ILLEGAL_CONSUMER_GROUP


def test_routes_heartbeats_and_telemetry_settings() -> None:
    route = service_pb2.QueryRouteRequest()
    route.topic.name = "t"
    route.endpoints.addresses.add(host="127.0.0.1", port=8081)
    CHECKS.check(route)
    route.endpoints.addresses.add(host="h", port=70_000)
    assert _refused(route).status_code == Code.ILLEGAL_ACCESS_POINT
    del route.endpoints.addresses[1]
    for _ in range(16):
        route.endpoints.addresses.add(host="h", port=1)
    assert _refused(route).field == "endpoints.addresses"

    heartbeat = service_pb2.HeartbeatRequest(client_type=42)
    assert _refused(heartbeat).status_code == Code.UNRECOGNIZED_CLIENT_TYPE
    CHECKS.check(service_pb2.HeartbeatRequest(client_type=definition_pb2.ClientType.PRODUCER))
    CHECKS.check(service_pb2.NotifyClientTerminationRequest())

    command = service_pb2.TelemetryCommand()
    CHECKS.check(command)
    settings = command.settings
    settings.client_type = definition_pb2.ClientType.PUSH_CONSUMER
    settings.subscription.group.name = "g"
    entry = settings.subscription.subscriptions.add()
    entry.topic.name = "t"
    entry.expression.expression = "TagA||TagB"
    CHECKS.check(command)
    entry.topic.name = "t t"
    assert _refused(command).field == "settings.subscription.subscriptions[0].topic.name"
    entry.topic.name = "t"
    settings.subscription.long_polling_timeout.seconds = -3
    assert _refused(command).status_code == Code.ILLEGAL_POLLING_TIME

    producer = service_pb2.TelemetryCommand()
    producer.settings.client_type = definition_pb2.ClientType.PRODUCER
    for _ in range(validation.MAX_SETTINGS_ENTRIES + 1):
        producer.settings.publishing.topics.add(name="t")
    assert _refused(producer).field == "settings.publishing.topics"
