"""The RocketMQ front end's edge: call metadata, and what one SendMessage stores and answers.

Raw `apache.rocketmq.v2.MessagingService` calls against the real gateway (embedded store), as an
outsider would send them.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc
from structlog.testing import capture_logs
from test_rocketmq_frontend import Gateway, _settings

from adapters.rocketmq.frontend.auth import sign
from adapters.rocketmq.frontend.sending import SIZE_FIELDS
from gateway.server.app import GatewayApp
from gateway.server.config import ServeConfig

pytestmark = pytest.mark.slow

Code = definition_pb2.Code
AK, SK = "app", "s3cret"


TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


class Configured(Gateway):
    """The test gateway with some of its `ServeConfig` changed."""

    def __init__(self, data_dir: Path, **config: Any) -> None:
        self._config = config
        super().__init__(data_dir, _settings())

    async def _serve(self) -> None:
        import asyncio

        self._stop = asyncio.Event()
        config = ServeConfig(listen="127.0.0.1:0", data_dir=str(self._data_dir),
                             time_scale=self._time_scale, grace_s=0.5, **self._config)
        app = GatewayApp(config, front_end_settings={"rocketmq": self._settings})
        await app.start()
        try:
            self.port = app.grpc_port
            self._ready.set()
            await self._stop.wait()
        finally:
            await app.stop(0.5)


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A gateway whose messages may have at most 1024 bytes."""
    running = Configured(tmp_path_factory.mktemp("rocketmq-edge-small"), max_message_bytes=1024)
    with grpc.insecure_channel(running.endpoint) as opened:
        yield service_pb2_grpc.MessagingServiceStub(opened)
    running.stop()


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    running = Gateway(tmp_path_factory.mktemp("rocketmq-edge-signed"),
                      _settings(credentials={AK: SK}))
    yield running
    running.stop()


@pytest.fixture(scope="module")
def signed_stub(signed: Gateway) -> Iterator[Any]:
    with grpc.insecure_channel(signed.endpoint) as opened:
        yield service_pb2_grpc.MessagingServiceStub(opened)


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _signed(extra: list[tuple[str, Any]] = ()) -> list[tuple[str, Any]]:  # type: ignore[assignment]
    date_time = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    header = f"MQv2-HMAC-SHA1 Credential={AK}, SignedHeaders=x-mq-date-time, " \
             f"Signature={sign(SK, date_time)}"
    return [("x-mq-client-id", "edge-client"), ("x-mq-date-time", date_time),
            ("authorization", header), *extra]


def _message(topic: str, body: bytes = b"x") -> Any:
    message = definition_pb2.Message(body=body)
    message.topic.name = topic
    message.system_properties.message_id = f"M-{uuid.uuid4().hex}"
    return message


def _receive(stub: Any, topic: str, metadata: Any = ()) -> list[bytes]:
    request = service_pb2.ReceiveMessageRequest(batch_size=32, auto_renew=False)
    request.group.name = _name("g")
    request.message_queue.topic.name = topic
    request.invisible_duration.seconds = 30
    request.long_polling_timeout.seconds = 0
    replies = list(stub.ReceiveMessage(request, metadata=metadata, timeout=10))
    return [r.message.body for r in replies if r.HasField("message")]


# --- metadata ------------------------------------------------------------------------------


@pytest.mark.parametrize("header", ["x-junk-bin", "authorization-bin", "x-mq-date-time-bin"])
def test_binary_metadata_the_front_end_does_not_read_is_ignored(
    signed_stub: Any, header: str
) -> None:
    """A `-bin` entry that is not UTF-8 is neither decoded nor an internal error: the signed
    call goes through on every kind of method, and nothing is logged as an error."""
    topic = _name("t")
    junk = [(header, b"\xff\xfe\x80")]
    with capture_logs() as logs:
        reply = signed_stub.SendMessage(service_pb2.SendMessageRequest(
            messages=[_message(topic, b"kept")]), metadata=_signed(junk), timeout=10)
        assert reply.status.code == Code.OK, reply.status
        route = signed_stub.QueryRoute(service_pb2.QueryRouteRequest(
            topic=definition_pb2.Resource(name=topic)), metadata=_signed(junk), timeout=10)
        assert route.status.code == Code.OK, route.status
        assert _receive(signed_stub, topic, _signed(junk)) == [b"kept"]
    assert [e for e in logs if e["log_level"] in ("error", "critical")] == []


def test_binary_metadata_on_an_unsigned_call_is_still_unauthenticated(signed_stub: Any) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        signed_stub.SendMessage(service_pb2.SendMessageRequest(messages=[_message("t")]),
                                metadata=[("x-junk-bin", b"\xff")], timeout=10)
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "missing authorization header" in (caught.value.details() or "")


# --- one SendMessage, several topics ------------------------------------------------------


def _send(stub: Any, *messages: Any) -> Any:
    return stub.SendMessage(service_pb2.SendMessageRequest(messages=list(messages)), timeout=10)


def test_a_reserved_property_on_a_later_topic_refuses_the_whole_send(small: Any) -> None:
    first, second = _name("a"), _name("b")
    forged = _message(second, b"forged")
    forged.user_properties["x-gateway-origin-topic"] = "elsewhere"
    reply = _send(small, _message(first, b"would-be-stored"), forged)
    assert reply.status.code == Code.ILLEGAL_MESSAGE_PROPERTY_KEY, reply.status
    assert "messages[1].user_properties" in reply.status.message
    assert "x-gateway-" in reply.status.message
    assert [e.status.code for e in reply.entries] == [Code.ILLEGAL_MESSAGE_PROPERTY_KEY] * 2
    assert _receive(small, first) == []
    assert _receive(small, second) == []


@pytest.mark.parametrize(("body", "ok"), [(1016, True), (1017, False), (1020, False)])
def test_keys_count_as_the_engine_counts_them(small: Any, body: int, ok: bool) -> None:
    """Keys travel as one KEYS property: 4 + the keys joined by spaces."""
    topic = _name("t")
    message = _message(topic, b"x" * body)
    message.system_properties.keys.append("abcd")
    reply = _send(small, message)
    if ok:
        assert reply.status.code == Code.OK, reply.status
        assert _receive(small, topic) == [b"x" * body]
    else:
        assert reply.status.code == Code.PAYLOAD_TOO_LARGE, reply.status
        assert f"messages[0]: {SIZE_FIELDS}" in reply.status.message
        assert f"{body + 8} bytes" in reply.status.message
        assert "at most 1024 bytes" in reply.status.message
        assert _receive(small, topic) == []


def test_a_trace_context_counts_against_the_size(small: Any) -> None:
    topic = _name("t")
    message = _message(topic, b"x" * 1000)
    message.system_properties.trace_context = TRACEPARENT
    reply = _send(small, message)
    assert reply.status.code == Code.PAYLOAD_TOO_LARGE, reply.status
    assert "trace_context" in reply.status.message and "1066 bytes" in reply.status.message


def test_an_oversized_message_of_a_later_topic_names_its_index_in_the_request(
    small: Any,
) -> None:
    first, second = _name("a"), _name("b")
    large = _message(second, b"x" * 1020)
    large.system_properties.keys.append("abcd")
    reply = _send(small, _message(first), _message(second), large)
    assert reply.status.code == Code.PAYLOAD_TOO_LARGE, reply.status
    assert "messages[2]:" in reply.status.message
    assert _receive(small, first) == [] and _receive(small, second) == []


def test_when_a_later_topic_fails_the_entries_say_what_was_stored(tmp_path: Path) -> None:
    """Auto-create off: a send to an existing topic and to a missing one stores the first
    topic's messages and says so entry by entry, so a client retries only the others."""
    existing, missing = _name("a"), _name("b")
    creating = Configured(tmp_path)
    try:
        with grpc.insecure_channel(creating.endpoint) as opened:
            stub = service_pb2_grpc.MessagingServiceStub(opened)
            assert _send(stub, _message(existing, b"first")).status.code == Code.OK
    finally:
        creating.stop()
    strict = Configured(tmp_path, auto_create=False)
    try:
        with grpc.insecure_channel(strict.endpoint) as opened:
            stub = service_pb2_grpc.MessagingServiceStub(opened)
            sent = [_message(existing, b"one"), _message(missing, b"lost"),
                    _message(existing, b"two")]
            reply = _send(stub, *sent)
            assert reply.status.code == Code.MULTIPLE_RESULTS, reply.status
            codes = [e.status.code for e in reply.entries]
            assert codes == [Code.OK, Code.NOT_FOUND, Code.OK]
            assert "does not exist" in reply.entries[1].status.message
            assert reply.entries[1].message_id == sent[1].system_properties.message_id
            stored = reply.entries[0].message_id, reply.entries[2].message_id
            assert all(stored) and len(set(stored)) == 2
            assert sorted(_receive(stub, existing)) == [b"first", b"one", b"two"]
    finally:
        strict.stop()


# --- born_timestamp -----------------------------------------------------------------------


def _receive_messages(stub: Any, topic: str, group: str) -> list[Any]:
    request = service_pb2.ReceiveMessageRequest(batch_size=32, auto_renew=False)
    request.group.name = group
    request.message_queue.topic.name = topic
    request.invisible_duration.seconds = 30
    request.long_polling_timeout.seconds = 0
    replies = list(stub.ReceiveMessage(request, timeout=10))
    return [r.message for r in replies if r.HasField("message")]


def test_the_producers_born_timestamp_is_what_the_consumer_reads(small: Any) -> None:
    """A RocketMQ broker keeps the born time the SDK sent (its store time is apart): the
    gateway showed its own store time as the born time of a first delivery."""
    topic = _name("born")
    born_ms = int(time.time() * 1000) - 3_600_000  # an hour ago: not the store time
    sent = _message(topic, b"aged")
    sent.system_properties.born_timestamp.FromMilliseconds(born_ms)
    plain = _message(topic, b"plain")  # no born time: the store time stands for it
    before = int(time.time() * 1000)
    assert _send(small, sent, plain).status.code == Code.OK
    got = {m.body: m.system_properties for m in _receive_messages(small, topic, _name("g"))}
    assert got[b"aged"].born_timestamp.ToMilliseconds() == born_ms
    assert got[b"aged"].store_timestamp.ToMilliseconds() >= before
    assert got[b"plain"].born_timestamp == got[b"plain"].store_timestamp
    assert dict(_receive_messages(small, topic, _name("g"))[0].user_properties) == {}


@pytest.mark.parametrize(("seconds", "nanos"), [(-1, 0), (0, -5), (0, 1_000_000_000),
                                                 (253_402_300_800, 0)])
def test_a_born_timestamp_out_of_range_is_refused_by_name(
    small: Any, seconds: int, nanos: int
) -> None:
    topic = _name("born")
    bad = _message(topic)
    bad.system_properties.born_timestamp.seconds = seconds
    bad.system_properties.born_timestamp.nanos = nanos
    reply = _send(small, bad)
    assert reply.status.code == Code.BAD_REQUEST, reply.status
    assert "messages[0].system_properties.born_timestamp" in reply.status.message
    assert _receive(small, topic) == []
