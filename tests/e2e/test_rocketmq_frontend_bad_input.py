"""Bad RocketMQ requests get a clear status naming the field and range; nobody else is harmed.

Raw `apache.rocketmq.v2.MessagingService` calls against the real gateway (embedded store), as an
outsider would send them: out-of-range values, undecodable bytes, very long names.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import message_factory
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc
from test_rocketmq_frontend import Gateway, _settings

from gateway.limits import MAX_BATCH, MAX_DELAY_MS, MAX_PUBLISH_PROPERTIES

pytestmark = pytest.mark.slow

Code = definition_pb2.Code
MT = definition_pb2.MessageType
SERVICE = "/apache.rocketmq.v2.MessagingService/"
METHODS = service_pb2.DESCRIPTOR.services_by_name["MessagingService"].methods


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    running = Gateway(tmp_path_factory.mktemp("rocketmq-bad-input"), _settings())
    yield running
    running.stop()


@pytest.fixture(scope="module")
def channel(gateway: Gateway) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(gateway.endpoint) as opened:
        yield opened


@pytest.fixture(scope="module")
def stub(channel: grpc.Channel) -> Any:
    return service_pb2_grpc.MessagingServiceStub(channel)


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _send_request(topic: str, body: bytes = b"x", **system: Any) -> Any:
    request = service_pb2.SendMessageRequest()
    message = request.messages.add(body=body)
    message.topic.name = topic
    message.system_properties.message_id = f"M-{uuid.uuid4().hex}"
    for name, value in system.items():
        if name == "delivery_timestamp":
            message.system_properties.delivery_timestamp.CopyFrom(value)
        else:
            setattr(message.system_properties, name, value)
    return request


def _stamp(seconds: int, nanos: int = 0) -> Any:
    from google.protobuf.timestamp_pb2 import Timestamp

    return Timestamp(seconds=seconds, nanos=nanos)


def _receive_request(topic: str, group: str, invisible_s: int = 30, **fields: Any) -> Any:
    request = service_pb2.ReceiveMessageRequest(batch_size=fields.pop("batch_size", 16))
    request.group.name = group
    request.message_queue.topic.name = topic
    request.invisible_duration.seconds = invisible_s
    request.long_polling_timeout.seconds = fields.pop("long_polling_s", 0)
    for name, value in fields.items():
        setattr(request, name, value)
    return request


def _receive_all(stub: Any, topic: str, group: str) -> tuple[int, list[Any]]:
    """(status code, messages) of one receive."""
    replies = list(stub.ReceiveMessage(_receive_request(topic, group), timeout=10))
    status = next(r.status for r in replies if r.HasField("status"))
    return status.code, [r.message for r in replies if r.HasField("message")]


def test_a_far_future_delivery_time_is_refused_and_harms_nobody(stub: Any) -> None:
    poisoned, other = _name("t"), _name("t")
    far = _send_request(poisoned, message_type=MT.DELAY, delivery_timestamp=_stamp(2**62))
    reply = stub.SendMessage(far, timeout=5)
    assert reply.status.code == Code.ILLEGAL_DELIVERY_TIME, reply.status
    assert "delivery_timestamp" in reply.status.message
    assert f"{MAX_DELAY_MS // 86_400_000} days" in reply.status.message

    # Everybody else goes on: another topic publishes and is consumed.
    reply = stub.SendMessage(_send_request(other, b"fine"), timeout=5)
    assert reply.status.code == Code.OK, reply.status
    code, got = _receive_all(stub, other, _name("g"))
    assert code == Code.OK
    assert [m.body for m in got] == [b"fine"]
    # Nothing of the refused message was stored.
    assert _receive_all(stub, poisoned, _name("g")) == (Code.MESSAGE_NOT_FOUND, [])


@pytest.mark.parametrize(
    ("seconds", "nanos"),
    [(0, -1), (0, 1_000_000_000), (2**40, 0), (-(2**62), -5)],
)
def test_delivery_timestamps_out_of_range_are_refused(stub: Any, seconds: int, nanos: int) -> None:
    topic = _name("t")
    request = _send_request(topic, message_type=MT.DELAY,
                            delivery_timestamp=_stamp(seconds, nanos))
    reply = stub.SendMessage(request, timeout=5)
    assert reply.status.code == Code.ILLEGAL_DELIVERY_TIME, reply.status
    assert "delivery_timestamp" in reply.status.message
    assert _receive_all(stub, topic, _name("g")) == (Code.MESSAGE_NOT_FOUND, [])


@pytest.mark.parametrize("seconds", [int(time.time()) - 3600, -(2**62)])
def test_a_delivery_time_in_the_past_means_now(stub: Any, seconds: int) -> None:
    topic = _name("t")
    past = _send_request(topic, b"late", message_type=MT.DELAY,
                         delivery_timestamp=_stamp(seconds))
    assert stub.SendMessage(past, timeout=5).status.code == Code.OK
    code, got = _receive_all(stub, topic, _name("g"))
    assert (code, [m.body for m in got]) == (Code.OK, [b"late"])


def test_a_delivery_time_at_the_limit_is_accepted(stub: Any) -> None:
    topic = _name("t")
    limit_s = (int(time.time() * 1000) + MAX_DELAY_MS) // 1000 - 60
    request = _send_request(topic, message_type=MT.DELAY, delivery_timestamp=_stamp(limit_s))
    assert stub.SendMessage(request, timeout=5).status.code == Code.OK


def test_too_many_messages_in_one_send_are_refused(stub: Any) -> None:
    topic = _name("t")
    request = service_pb2.SendMessageRequest()
    for i in range(MAX_BATCH + 1):
        message = request.messages.add(body=b"x")
        message.topic.name = topic
        message.system_properties.message_id = f"M{i}"
    reply = stub.SendMessage(request, timeout=30)
    assert reply.status.code == Code.BAD_REQUEST, reply.status
    assert "messages" in reply.status.message and str(MAX_BATCH) in reply.status.message
    assert _receive_all(stub, topic, _name("g")) == (Code.MESSAGE_NOT_FOUND, [])


def test_too_many_user_properties_in_one_send_are_refused(stub: Any) -> None:
    """128 per message (RocketMQ's limit), and MAX_PUBLISH_PROPERTIES in one send, user
    properties and keys together."""
    topic = _name("t")
    request = service_pb2.SendMessageRequest()
    count = MAX_PUBLISH_PROPERTIES // 128 + 1
    for i in range(count):
        message = request.messages.add(body=b"x")
        message.topic.name = topic
        message.system_properties.message_id = f"M{i}"
        message.user_properties.update({f"p{j}": "" for j in range(128)})
    reply = stub.SendMessage(request, timeout=30)
    assert reply.status.code == Code.BAD_REQUEST, reply.status
    assert str(MAX_PUBLISH_PROPERTIES) in reply.status.message
    assert _receive_all(stub, topic, _name("g")) == (Code.MESSAGE_NOT_FOUND, [])
    for message in request.messages:  # keys count the same
        message.ClearField("user_properties")
        message.system_properties.keys.extend(f"k{j}" for j in range(128))
    reply = stub.SendMessage(request, timeout=30)
    assert reply.status.code == Code.BAD_REQUEST, reply.status
    assert "keys" in reply.status.message


def _with(request: Any, change: Callable[[Any], None]) -> Any:
    change(request.messages[0])
    return request


def _props(message: Any, items: dict[str, str]) -> None:
    message.user_properties.update(items)


@pytest.mark.parametrize(
    ("change", "code", "words"),
    [
        (lambda m: _props(m, {"": "v"}), Code.ILLEGAL_MESSAGE_PROPERTY_KEY, ("user_properties",)),
        (lambda m: _props(m, {"KEYS": "v"}), Code.ILLEGAL_MESSAGE_PROPERTY_KEY, ("KEYS",)),
        # RocketMQ's own property names, as its proxy refuses them ("used by system").
        (lambda m: _props(m, {"TAGS": "v"}), Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
         ("TAGS", "system property")),
        (lambda m: _props(m, {"RECONSUME_TIME": "3"}), Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
         ("RECONSUME_TIME",)),
        (lambda m: _props(m, {"DLQ_ORIGIN_TOPIC": "x"}), Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
         ("DLQ_ORIGIN_TOPIC",)),
        (lambda m: _props(m, {"k": "v" * 20_000}), Code.MESSAGE_PROPERTIES_TOO_LARGE,
         ("16384",)),
        (lambda m: _props(m, {f"k{i}": "v" for i in range(129)}),
         Code.MESSAGE_PROPERTIES_TOO_LARGE, ("128",)),
        (lambda m: m.system_properties.keys.extend(["k"] * 129), Code.ILLEGAL_MESSAGE_KEY,
         ("keys", "128")),
        (lambda m: m.system_properties.keys.append("a b"), Code.ILLEGAL_MESSAGE_KEY, ("keys",)),
        (lambda m: m.system_properties.keys.append(" "), Code.ILLEGAL_MESSAGE_KEY, ("keys",)),
        (lambda m: setattr(m.system_properties, "tag", "a|b"), Code.ILLEGAL_MESSAGE_TAG,
         ("tag", "|")),
        (lambda m: setattr(m.system_properties, "tag", "  "), Code.ILLEGAL_MESSAGE_TAG, ("tag",)),
        (lambda m: setattr(m.system_properties, "message_group", "g" * 64),
         Code.ILLEGAL_MESSAGE_GROUP, ("message_group", "63")),
        (lambda m: setattr(m.system_properties, "message_id", ""), Code.ILLEGAL_MESSAGE_ID,
         ("message_id",)),
        (lambda m: setattr(m, "body", b""), Code.MESSAGE_BODY_EMPTY, ("body",)),
        (lambda m: setattr(m, "body", b"x" * (4 * 1024 * 1024 + 1)), Code.MESSAGE_BODY_TOO_LARGE,
         ("body", "4194304")),
        (lambda m: setattr(m.topic, "name", "a.b"), Code.ILLEGAL_TOPIC, ("topic", "127")),
        (lambda m: setattr(m.topic, "resource_namespace", "n%s"), Code.ILLEGAL_TOPIC,
         ("resource_namespace",)),
        (lambda m: setattr(m.system_properties, "message_type", 77), Code.BAD_REQUEST,
         ("message_type",)),
    ],
)
def test_bad_message_values_get_their_rocketmq_codes(
    stub: Any, change: Callable[[Any], None], code: int, words: tuple[str, ...]
) -> None:
    topic = _name("t")
    reply = stub.SendMessage(_with(_send_request(topic), change), timeout=30)
    assert reply.status.code == code, reply.status
    for word in words:
        assert word in reply.status.message, reply.status.message
    assert len(reply.status.message) < 600
    assert _receive_all(stub, topic, _name("g")) == (Code.MESSAGE_NOT_FOUND, [])


def test_keys_tag_and_properties_count_against_the_message_size(stub: Any) -> None:
    topic = _name("t")
    body = b"x" * (4 * 1024 * 1024 - 100)
    request = _send_request(topic, body, tag="T" * 60)
    request.messages[0].system_properties.keys.extend(["k" * 30, "j" * 30])
    reply = stub.SendMessage(request, timeout=30)
    assert reply.status.code == Code.PAYLOAD_TOO_LARGE, reply.status
    assert "4194304" in reply.status.message


def test_a_huge_topic_name_is_refused_with_a_short_message(stub: Any) -> None:
    reply = stub.SendMessage(_send_request("t" * 100_000), timeout=5)
    assert reply.status.code == Code.ILLEGAL_TOPIC
    assert len(reply.status.message) < 400, len(reply.status.message)
    route = service_pb2.QueryRouteRequest()
    route.topic.name = "t" * 100_000
    reply = stub.QueryRoute(route, timeout=5)
    assert reply.status.code == Code.ILLEGAL_TOPIC
    assert len(reply.status.message) < 400


@pytest.mark.parametrize(
    ("fields", "code", "words"),
    [
        ({"invisible_s": 9}, Code.ILLEGAL_INVISIBLE_TIME, ("invisible_duration", "10000")),
        ({"invisible_s": 12 * 3600 + 1}, Code.ILLEGAL_INVISIBLE_TIME, ("43200000",)),
        ({"invisible_s": -5}, Code.ILLEGAL_INVISIBLE_TIME, ("invisible_duration",)),
        ({"batch_size": -1}, Code.BAD_REQUEST, ("batch_size", "1024")),
        ({"batch_size": 1025}, Code.BAD_REQUEST, ("batch_size", "1024")),
        ({"long_polling_s": -1}, Code.ILLEGAL_POLLING_TIME, ("long_polling_timeout",)),
        ({"long_polling_s": 10**9}, Code.ILLEGAL_POLLING_TIME, ("long_polling_timeout",)),
    ],
)
def test_bad_receive_values_get_their_rocketmq_codes(
    stub: Any, fields: dict[str, Any], code: int, words: tuple[str, ...]
) -> None:
    replies = list(stub.ReceiveMessage(_receive_request(_name("t"), _name("g"), **fields),
                                       timeout=10))
    (only,) = replies
    assert only.status.code == code, only.status
    for word in words:
        assert word in only.status.message, only.status.message


def test_bad_group_names_are_refused(stub: Any) -> None:
    for group in ("", "g g", "g" * 256):
        (only,) = list(stub.ReceiveMessage(_receive_request(_name("t"), group), timeout=10))
        assert only.status.code == Code.ILLEGAL_CONSUMER_GROUP, only.status
        assert "group" in only.status.message


def test_bad_settle_values_get_their_rocketmq_codes(stub: Any) -> None:
    topic, group = _name("t"), _name("g")
    ack = service_pb2.AckMessageRequest()
    ack.group.name, ack.topic.name = group, topic
    reply = stub.AckMessage(ack, timeout=5)
    assert reply.status.code == Code.BAD_REQUEST and "entries" in reply.status.message
    ack.entries.add(message_id="M1", receipt_handle="s." + "r" * 10_000)
    reply = stub.AckMessage(ack, timeout=5)
    assert reply.status.code == Code.INVALID_RECEIPT_HANDLE, reply.status
    assert "receipt_handle" in reply.status.message and len(reply.status.message) < 400

    change = service_pb2.ChangeInvisibleDurationRequest(receipt_handle="s.x", message_id="M1")
    change.group.name, change.topic.name = group, topic
    change.invisible_duration.seconds = 13 * 3600
    reply = stub.ChangeInvisibleDuration(change, timeout=5)
    assert reply.status.code == Code.ILLEGAL_INVISIBLE_TIME, reply.status
    assert "invisible_duration" in reply.status.message
    change.invisible_duration.seconds, change.invisible_duration.nanos = 30, -1
    reply = stub.ChangeInvisibleDuration(change, timeout=5)
    assert reply.status.code == Code.ILLEGAL_INVISIBLE_TIME, reply.status

    forward = service_pb2.ForwardMessageToDeadLetterQueueRequest(
        receipt_handle="", message_id="M1", delivery_attempt=1, max_delivery_attempts=2
    )
    forward.group.name, forward.topic.name = group, topic
    reply = stub.ForwardMessageToDeadLetterQueue(forward, timeout=5)
    assert reply.status.code == Code.INVALID_RECEIPT_HANDLE, reply.status


GARBAGE = (
    b"\xff\xff\xff\xff",  # a truncated tag
    b"\x0a\x04\x12\x02\xc3\x28",  # field 1 > field 2: invalid UTF-8 where it is a string
    b"\x12\x7f",  # a length beyond the end
    b"\x08" + b"\xff" * 11,  # a varint too long
)


def _decodes(method: Any, data: bytes) -> bool:
    try:
        message_factory.GetMessageClass(method.input_type).FromString(data)
    except Exception:
        return False
    return True


@pytest.mark.parametrize("garbage", GARBAGE)
def test_undecodable_requests_get_invalid_argument(channel: grpc.Channel, garbage: bytes) -> None:
    refused = 0
    for method in METHODS:
        if _decodes(method, garbage):
            continue
        refused += 1
        path = SERVICE + method.name
        with pytest.raises(grpc.RpcError) as caught:
            if method.client_streaming:
                call = channel.stream_stream(path)
                list(call(iter([garbage]), timeout=5))
            elif method.server_streaming:
                list(channel.unary_stream(path)(garbage, timeout=5))
            else:
                channel.unary_unary(path)(garbage, timeout=5)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (method.name, caught.value)
        details = caught.value.details() or ""
        assert method.input_type.full_name in details, details
        assert len(details) < 300
    assert refused >= 5


def test_telemetry_refuses_bad_settings_and_garbage_after_good_commands(
    channel: grpc.Channel,
) -> None:
    telemetry = channel.stream_stream(
        SERVICE + "Telemetry",
        request_serializer=service_pb2.TelemetryCommand.SerializeToString,
        response_deserializer=service_pb2.TelemetryCommand.FromString,
    )
    good = service_pb2.TelemetryCommand()
    good.settings.client_type = definition_pb2.ClientType.SIMPLE_CONSUMER
    good.settings.subscription.group.name = _name("g")
    bad = service_pb2.TelemetryCommand()
    bad.settings.CopyFrom(good.settings)
    bad.settings.subscription.group.name = "g" * 1000
    replies = list(telemetry(iter([good, bad]), timeout=5))
    assert [r.status.code for r in replies] == [Code.OK, Code.ILLEGAL_CONSUMER_GROUP]
    assert len(replies[1].status.message) < 400

    raw = channel.stream_stream(SERVICE + "Telemetry")
    with pytest.raises(grpc.RpcError) as caught:
        list(raw(iter([good.SerializeToString(), b"\xff\xff"]), timeout=5))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_a_huge_unknown_access_key_is_refused_with_a_short_message(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    signed = Gateway(tmp_path_factory.mktemp("rocketmq-signed"),
                     _settings(credentials={"app": "s3cret"}))
    try:
        header = f"MQv2-HMAC-SHA1 Credential={'k' * 3000}, SignedHeaders=x-mq-date-time, " \
                 "Signature=00"
        request = service_pb2.QueryRouteRequest()
        request.topic.name = "t"
        with grpc.insecure_channel(signed.endpoint) as opened:
            stub = service_pb2_grpc.MessagingServiceStub(opened)
            with pytest.raises(grpc.RpcError) as caught:
                stub.QueryRoute(request, metadata=[("authorization", header)], timeout=5)
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED, caught.value
        details = caught.value.details() or ""
        assert "unknown access key" in details
        assert len(details) < 1100, len(details)
    finally:
        signed.stop()


def test_without_credentials_undecodable_bytes_get_invalid_argument_first(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Signature checks on and no credentials: bytes of the Telemetry stream's first frame
    that do not decode get INVALID_ARGUMENT before the credentials are looked at; a frame that
    decodes gets UNAUTHENTICATED, as does a stream that sends none. A unary request is not
    read without credentials (tests/e2e/test_tokenless_streams.py): UNAUTHENTICATED, whatever
    its bytes."""
    signed = Gateway(tmp_path_factory.mktemp("rocketmq-signed-garbage"),
                     _settings(credentials={"app": "s3cret"}))
    garbage = GARBAGE[0]
    try:
        with grpc.insecure_channel(signed.endpoint) as opened:
            codes = {}
            for method in METHODS:
                assert not _decodes(method, garbage)
                path = SERVICE + method.name
                with pytest.raises(grpc.RpcError) as caught:
                    if method.client_streaming:
                        list(opened.stream_stream(path)(iter([garbage]), timeout=5))
                    elif method.server_streaming:
                        list(opened.unary_stream(path)(garbage, timeout=5))
                    else:
                        opened.unary_unary(path)(garbage, timeout=5)
                codes[method.name] = caught.value.code()
            assert codes == {m.name: grpc.StatusCode.INVALID_ARGUMENT if m.client_streaming
                             else grpc.StatusCode.UNAUTHENTICATED for m in METHODS}

            telemetry = opened.stream_stream(SERVICE + "Telemetry")
            with pytest.raises(grpc.RpcError) as caught:
                list(telemetry(iter([service_pb2.TelemetryCommand().SerializeToString()]),
                               timeout=5))
            assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED, caught.value

            ended = threading.Event()

            def silent() -> Iterator[bytes]:  # sends nothing until the call has ended
                ended.wait(10)
                yield from ()

            with pytest.raises(grpc.RpcError) as caught:
                list(telemetry(silent(), timeout=5))
            ended.set()
            assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED, caught.value
    finally:
        signed.stop()
