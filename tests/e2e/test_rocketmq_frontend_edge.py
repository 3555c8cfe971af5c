"""The RocketMQ front end's edge: call metadata, and what one SendMessage stores and answers.

Raw `apache.rocketmq.v2.MessagingService` calls against the real gateway (embedded store), as an
outsider would send them.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc
from structlog.testing import capture_logs
from test_rocketmq_frontend import Gateway, _settings

from adapters.rocketmq.frontend.auth import sign

pytestmark = pytest.mark.slow

Code = definition_pb2.Code
AK, SK = "app", "s3cret"


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
